//! Texts the unit tests build: a long output with one odd line in it (the error line of a
//! log, the one line of a file a search should find).

/// The lines `numbers` give, each written by `each`, but the one numbered `at`, which is
/// `odd` (a whole line, its newline included).
pub(crate) fn with_line_at(
    numbers: impl Iterator<Item = usize>,
    at: usize,
    odd: &str,
    each: impl Fn(usize) -> String,
) -> String {
    numbers.map(|i| line_or(i, at, odd, &each)).collect()
}

/// Line `i`: `odd` when it is the one numbered `at`, else what `each` writes.
pub(crate) fn line_or(i: usize, at: usize, odd: &str, each: impl Fn(usize) -> String) -> String {
    if i == at { odd.to_owned() } else { each(i) }
}
