//! Folding the comments and docstrings of a cut view of code to their first line.
//!
//! A third of a numbered view of code is comments and docstrings, and what an agent quotes
//! later from a view comes mostly from its code: on the shared GPT-5-mini sessions, comment
//! and docstring lines were 31% of the views' bytes and held 11% of what the agents quoted
//! later. When a view must be cut, each run of such lines keeps its first line (a docstring's
//! summary, a comment's opening sentence) and the rest of the run is hidden, before the head
//! and tail are chosen: the kept bytes go further into the code. The view's own line numbers
//! show where lines were hidden, and the marker says so.
//!
//! The classifier is a small state machine over lines, streaming, in bounded memory: a line
//! is held only until its end is seen (and at most [`MAX_LINE`] of it), and a run's lines only
//! until it is known to be long enough to fold.

use crate::trim::outline::line_number_len;

/// A run of comment lines folds only when it would hide at least this many lines: a fold of
/// one line saves less than the gap it leaves costs the reader.
const MIN_HIDDEN: usize = 2;
/// A line longer than this is passed through as code (memory stays bounded).
const MAX_LINE: usize = 64 * 1024;
/// How many lines a definition's signature may run before its docstring may open.
const MAX_SIGNATURE_LINES: u8 = 8;

/// What closes the comment or docstring a line is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Close {
    /// `"""` or `'''`.
    Triple(&'static [u8]),
    /// `*/`.
    Block,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Code,
    Blank,
    Prose,
}

/// How much a fold hid.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Hidden {
    pub lines: u64,
    pub bytes: u64,
    pub chars: u64,
}

/// Streaming folder: lines in, kept lines out.
#[derive(Debug, Default)]
pub(crate) struct Folder {
    /// The start of a line whose end is not seen yet (at most [`MAX_LINE`] bytes).
    partial: Vec<u8>,
    /// The current line outgrew [`MAX_LINE`]: the rest of it passes through.
    passing_long_line: bool,
    /// The comment or docstring the next line is in.
    open: Option<Close>,
    /// The last code line ended a definition's header: a docstring may open next.
    docstring_may_follow: bool,
    /// Lines left of a definition's signature that has not ended yet (Python's `def f(` ...
    /// `):`).
    signature_lines_left: u8,
    /// Comment lines seen in the current run.
    run: usize,
    /// How many of the run's first lines are kept (two when the first has no words, `"""`).
    run_heads: usize,
    /// Lines of the run after its heads, held until the run is long enough to fold.
    held: Vec<u8>,
    held_lines: usize,
    hidden: Hidden,
    last_kept: Option<u8>,
}

/// Where kept bytes go.
pub(crate) type Emit<'a> = dyn FnMut(&[u8]) + 'a;

/// What became of a line.
enum Verdict {
    /// Shown.
    Kept,
    /// Held (until its run is long enough to fold) or hidden.
    Taken,
}

impl Folder {
    /// Feeds input; kept bytes go to `emit`, in runs of whole kept lines (not line by line: the
    /// trimmer behind it costs per call).
    pub fn push(&mut self, data: &[u8], emit: &mut Emit<'_>) {
        // Kept lines of `data` not yet emitted start here.
        let mut span = 0;
        let mut at = 0;
        while at < data.len() {
            let newline = memchr::memchr(b'\n', &data[at..]);
            let end = newline.map_or(data.len(), |i| at + i + 1);
            let piece = &data[at..end];
            if self.passing_long_line {
                self.passing_long_line = newline.is_none();
            } else if self.partial.len() + piece.len() > MAX_LINE {
                // Too long to be a comment worth folding: code, passed through unclassified.
                self.flush(&data[span..at], emit);
                span = at;
                self.end_run(emit);
                if !self.partial.is_empty() {
                    let partial = std::mem::take(&mut self.partial);
                    self.flush(&partial, emit);
                }
                self.passing_long_line = newline.is_none();
                self.docstring_may_follow = false;
            } else if newline.is_none() {
                self.flush(&data[span..at], emit);
                span = end;
                self.partial.extend_from_slice(piece);
            } else if self.partial.is_empty() {
                if self.held_lines > 0 {
                    // The run may end here and its held lines come first.
                    self.flush(&data[span..at], emit);
                    span = at;
                }
                if let Verdict::Taken = self.line(piece, emit) {
                    self.flush(&data[span..at], emit);
                    span = end;
                }
            } else {
                self.flush(&data[span..at], emit);
                span = end;
                let mut line = std::mem::take(&mut self.partial);
                line.extend_from_slice(piece);
                if let Verdict::Kept = self.line(&line, emit) {
                    self.flush(&line, emit);
                }
                line.clear();
                self.partial = line;
            }
            at = end;
        }
        self.flush(&data[span..], emit);
    }

    /// Ends the input: a last line without a newline, and a run's held lines.
    pub fn finish(&mut self, emit: &mut Emit<'_>) {
        if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            if let Verdict::Kept = self.line(&line, emit) {
                self.flush(&line, emit);
            }
        }
        self.end_run(emit);
    }

    /// What the fold hid.
    pub fn hidden(&self) -> Hidden {
        self.hidden
    }

    /// Whether the kept text ends a line (or is empty).
    pub fn kept_ends_line(&self) -> bool {
        self.last_kept.is_none_or(|b| b == b'\n')
    }

    fn flush(&mut self, bytes: &[u8], emit: &mut Emit<'_>) {
        if let Some(&last) = bytes.last() {
            self.last_kept = Some(last);
            emit(bytes);
        }
    }

    fn hide(&mut self, line: &[u8]) {
        self.hidden.lines += 1;
        self.hidden.bytes += line.len() as u64;
        self.hidden.chars += bytecount::num_chars(line) as u64;
    }

    /// A run ends: held lines that were too few to fold are kept after all.
    fn end_run(&mut self, emit: &mut Emit<'_>) {
        if self.held_lines > 0 {
            let held = std::mem::take(&mut self.held);
            self.flush(&held, emit);
            self.held = held;
            self.held.clear();
            self.held_lines = 0;
        }
        self.run = 0;
    }

    /// Classifies a whole line: kept (the caller shows it, after anything emitted here), or
    /// taken (held or hidden).
    fn line(&mut self, line: &[u8], emit: &mut Emit<'_>) -> Verdict {
        match self.classify(line) {
            Kind::Prose => {
                self.run += 1;
                if self.run == 1 {
                    self.run_heads = if has_words(line) { 1 } else { 2 };
                }
                if self.run <= self.run_heads {
                    return Verdict::Kept;
                }
                if self.run - self.run_heads < MIN_HIDDEN {
                    self.held.extend_from_slice(line);
                    self.held_lines += 1;
                } else {
                    let held = std::mem::take(&mut self.held);
                    for l in held.split_inclusive(|&b| b == b'\n') {
                        self.hide(l);
                    }
                    self.held = held;
                    self.held.clear();
                    self.held_lines = 0;
                    self.hide(line);
                }
                Verdict::Taken
            }
            Kind::Code | Kind::Blank => {
                self.end_run(emit);
                Verdict::Kept
            }
        }
    }

    fn classify(&mut self, line: &[u8]) -> Kind {
        let number = line_number_len(line);
        let first_line = number > 0 && line[..number].trim_ascii() == b"1";
        let code = &line[number..];
        let code = &code[indent_len(code)..];
        // Most lines are code that opens nothing: decided by their first byte, in a streamed
        // view of millions of lines.
        if self.open.is_none()
            && !self.docstring_may_follow
            && self.signature_lines_left == 0
            && !first_line
            && !matches!(
                code.first(),
                None | Some(b'#' | b'/' | b'd' | b'c' | b'a' | b'"' | b'\'')
            )
        {
            return Kind::Code;
        }
        let code = code.trim_ascii();
        if let Some(close) = self.open {
            let closes = match close {
                // The opening quotes were on an earlier line: any quotes here close it.
                Close::Triple(q) => memchr::memmem::find(code, q).is_some(),
                Close::Block => memchr::memmem::find(code, b"*/").is_some(),
            };
            if closes {
                self.open = None;
            }
            return Kind::Prose;
        }
        if code.is_empty() {
            return Kind::Blank;
        }
        if is_line_comment(code) {
            self.docstring_may_follow = false;
            return Kind::Prose;
        }
        if let Some(after) = code.strip_prefix(b"/*") {
            self.docstring_may_follow = false;
            if memchr::memmem::find(after, b"*/").is_none() {
                self.open = Some(Close::Block);
            }
            return Kind::Prose;
        }
        if (self.docstring_may_follow || first_line)
            && let Some((quotes, after)) = docstring_opening(code)
        {
            self.docstring_may_follow = false;
            if memchr::memmem::find(after, quotes).is_none() {
                self.open = Some(Close::Triple(quotes));
            }
            return Kind::Prose;
        }
        // A docstring is the first statement after a header that ends with a colon (PEP 257).
        let header_ends = code.ends_with(b":");
        if is_python_header(code) {
            self.docstring_may_follow = header_ends;
            self.signature_lines_left = if header_ends { 0 } else { MAX_SIGNATURE_LINES };
        } else if self.signature_lines_left > 0 {
            self.signature_lines_left -= 1;
            self.docstring_may_follow = header_ends;
            if header_ends {
                self.signature_lines_left = 0;
            }
        } else {
            self.docstring_may_follow = false;
        }
        Kind::Code
    }
}

/// The length of a line's indentation (eight spaces at a time: code is deeply indented, and
/// every line of a streamed view passes here).
fn indent_len(line: &[u8]) -> usize {
    let mut i = 0;
    while line.get(i..i + 8) == Some(b"        ") {
        i += 8;
    }
    while matches!(line.get(i), Some(b' ' | b'\t')) {
        i += 1;
    }
    i
}

/// Whether a line opens a Python definition, whose docstring may follow its header (only
/// Python has docstrings).
fn is_python_header(code: &[u8]) -> bool {
    let code = code.strip_prefix(b"async ").unwrap_or(code);
    code.starts_with(b"def ") || code.starts_with(b"class ")
}

/// `# a comment`, `## heading`, `// a comment`, `/// docs`; not `#include`, `#  define` (C's
/// indented preprocessor lines), `#[derive]` or a shebang, which are code.
fn is_line_comment(code: &[u8]) -> bool {
    if code.starts_with(b"//") {
        return true;
    }
    let Some(rest) = code.strip_prefix(b"#") else {
        return false;
    };
    match rest.first() {
        None | Some(b'#') => true,
        Some(b' ' | b'\t') => !is_preprocessor_directive(rest.trim_ascii_start()),
        _ => false,
    }
}

/// Whether a line after `#` and spaces is a C preprocessor directive (`# define X 1`).
fn is_preprocessor_directive(after_hash: &[u8]) -> bool {
    let word_end = after_hash
        .iter()
        .position(|b| !b.is_ascii_alphabetic())
        .unwrap_or(after_hash.len());
    matches!(
        &after_hash[..word_end],
        b"include"
            | b"define"
            | b"undef"
            | b"if"
            | b"ifdef"
            | b"ifndef"
            | b"elif"
            | b"else"
            | b"endif"
            | b"pragma"
            | b"error"
            | b"warning"
            | b"line"
            | b"import"
    ) && word_end > 0
        && after_hash
            .get(word_end)
            .is_none_or(|b| !b.is_ascii_alphanumeric() && *b != b'_')
}

/// The quotes a line opens a docstring with (`"""`, `r'''`), and what follows them.
fn docstring_opening(code: &[u8]) -> Option<(&'static [u8], &[u8])> {
    let prefix = code
        .iter()
        .take(2)
        .take_while(|b| matches!(b, b'r' | b'R' | b'u' | b'U' | b'b' | b'B'))
        .count();
    let code = &code[prefix..];
    [&b"\"\"\""[..], &b"'''"[..]]
        .into_iter()
        .find(|q| code.starts_with(q))
        .map(|q| (q, &code[q.len()..]))
}

/// Whether a comment line says anything besides its delimiters (`"""`, `/**` do not).
fn has_words(line: &[u8]) -> bool {
    line[line_number_len(line)..]
        .iter()
        .any(|b| b.is_ascii_alphanumeric() || !b.is_ascii())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fold(text: &str) -> (String, Hidden) {
        let mut folder = Folder::default();
        let mut kept = Vec::new();
        folder.push(text.as_bytes(), &mut |b| kept.extend_from_slice(b));
        folder.finish(&mut |b| kept.extend_from_slice(b));
        (String::from_utf8(kept).unwrap(), folder.hidden())
    }

    fn numbered(lines: &[&str]) -> String {
        lines
            .iter()
            .enumerate()
            .map(|(i, l)| format!("{:>6}\t{l}\n", i + 1))
            .collect()
    }

    #[test]
    fn docstrings_and_comment_blocks_keep_their_first_line() {
        let view = numbered(&[
            "\"\"\"The module's summary.",
            "",
            "More about it.",
            "\"\"\"",
            "import os",
            "",
            "class Origin:",
            "    def __init__(self, name,",
            "                 loader=None):",
            "        \"\"\"",
            "        Build an origin.",
            "        It names a template.",
            "        \"\"\"",
            "        self.name = name",
            "        # a short note",
            "        # on two lines",
            "        x = \"\"\"",
            "not a docstring",
            "\"\"\"",
            "    # a long comment",
            "    # that goes on",
            "    # and on",
            "    # and on",
            "    def loader_name(self): return self.loader",
        ]);
        let (kept, hidden) = fold(&view);
        let kept_numbers: Vec<usize> = kept
            .lines()
            .map(|l| l.trim().split('\t').next().unwrap().parse().unwrap())
            .collect();
        assert_eq!(
            kept_numbers,
            [1, 5, 6, 7, 8, 9, 10, 11, 14, 15, 16, 17, 18, 19, 20, 24],
            "{kept}"
        );
        assert_eq!(hidden.lines, 3 + 2 + 3);
        let hidden_bytes: u64 = view.len() as u64 - kept.len() as u64;
        assert_eq!(hidden.bytes, hidden_bytes);
    }

    #[test]
    fn preprocessor_lines_attributes_and_shebangs_are_code() {
        let view = numbered(&[
            "#!/usr/bin/env python",
            "#include <stdio.h>",
            "#define MAX 3",
            "#  if defined(X)",
            "# define Y 2",
            "#  endif",
            "#[derive(Debug)]",
            "/* a block",
            " * comment",
            " * that ends",
            " */",
            "int main() {",
        ]);
        let (kept, hidden) = fold(&view);
        assert_eq!(hidden.lines, 3, "{kept}");
        assert!(kept.contains("#include") && kept.contains("#[derive") && kept.contains("#!/usr"));
        assert!(kept.contains("# define Y 2") && kept.contains("#  endif"));
        assert!(kept.contains("/* a block") && kept.contains("int main"));
    }

    #[test]
    fn chunks_and_long_lines_do_not_change_the_fold() {
        let long = "x".repeat(MAX_LINE + 10);
        let view = numbered(&[
            "// one",
            "// two",
            "// three",
            "// four",
            &long,
            "fn main() {}",
            "// tail",
        ]);
        let whole = fold(&view);
        for chunk in [1, 3, 64, 5000] {
            let mut folder = Folder::default();
            let mut kept = Vec::new();
            for piece in view.as_bytes().chunks(chunk) {
                folder.push(piece, &mut |b| kept.extend_from_slice(b));
            }
            folder.finish(&mut |b| kept.extend_from_slice(b));
            assert_eq!(
                (String::from_utf8(kept).unwrap(), folder.hidden()),
                whole,
                "chunk {chunk}"
            );
        }
        assert_eq!(whole.1.lines, 3);
        assert!(whole.0.contains(&long));
    }
}
