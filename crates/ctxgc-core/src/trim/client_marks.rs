//! What a client's own marks say about an output before ctxgc trims it: that the client
//! already cut it (kept as the client cut it), or that it echoes an edit the agent just made
//! (kept short).

/// The marks clients leave where they cut an output before sending it: Codex, Gemini CLI,
/// opencode (at the start) and mini-swe-agent (where the middle was).
const CLIENT_CUT_AT_START: [&str; 3] = [
    "Warning: truncated output (original token count:",
    "Output too large. Showing first ",
    "...output truncated...",
];
const CLIENT_CUT_INSIDE: &str = "<elided_chars>";
/// Codex's marks where it cut the middle of a command's output, as (opening, closing) around a
/// count: `…4677 tokens truncated…` (its token budget), `[... omitted 678 of 934 lines ...]`
/// (its line budget: 128 head and 128 tail lines, since its versions of autumn 2025) and
/// `[... output truncated to fit 10240 bytes ...]` (its byte budget).
const CODEX_CUT_INSIDE: [(&str, &str); 3] = [
    ("\u{2026}", " tokens truncated\u{2026}"),
    ("[... omitted ", " lines ...]"),
    ("[... output truncated to fit ", " bytes ...]"),
];
/// The one of [`CODEX_CUT_INSIDE`] Codex writes inline, within a line of its own text: it counts
/// only with the `Total output lines: N` line Codex writes above it when it cut (a program may
/// print that line too, but not both). The others stand on a line of their own, which says
/// enough alone: Codex's versions of September to November 2025 wrote them without the header.
const CODEX_INLINE_MARK: usize = 0;

/// Whether the client already cut this output itself (its mark in the first lines, or one of
/// the marks a client leaves in the middle).
pub fn client_cut(text: &str) -> bool {
    let start = &text.as_bytes()[..text.len().min(1_024)];
    CLIENT_CUT_AT_START
        .iter()
        .any(|m| memchr::memmem::find(start, m.as_bytes()).is_some())
        || memchr::memmem::find(text.as_bytes(), CLIENT_CUT_INSIDE.as_bytes()).is_some()
        || codex_cut_inside(text)
}

/// Bytes of an output's start that say whether it echoes an edit ([`edit_echo`]): its first
/// line ends within them (a path is not 4 KB).
pub const EDIT_ECHO_SCAN_BYTES: usize = 4 * 1024;

/// Whether `text` (an output, or its start up to [`EDIT_ECHO_SCAN_BYTES`]) is a client's echo of
/// an edit the agent made: Claude Code's `Edit` and `Write` ("The file PATH has been updated.
/// Here's the result of running `cat -n` on a snippet of the edited file:") and the text editor
/// tool's ("The file PATH has been edited. Here's the result of running `cat -n` on a snippet of
/// PATH:"), on its first line; inside an envelope (`{"output": ...}`), on the first line of its
/// text, as the trimmer reads it.
pub(crate) fn edit_echo(text: &str) -> bool {
    const SNIPPET: &str = " Here's the result of running `cat -n` on a snippet of ";
    let start = &text.as_bytes()[..text.len().min(EDIT_ECHO_SCAN_BYTES)];
    if memchr::memmem::find(start, SNIPPET.as_bytes()).is_none() {
        return false;
    }
    if text.trim_start().starts_with('{') {
        return super::envelope::unwrap(text).is_some_and(|u| edit_echo(&u.text));
    }
    // The first line (a newline is ASCII, so the cut is a char boundary).
    let Some(end) = memchr::memchr(b'\n', start) else {
        return false;
    };
    let first = &text[..end];
    let Some(rest) = first.strip_prefix("The file ") else {
        return false;
    };
    first.ends_with(':')
        && [" has been updated.", " has been edited."]
            .iter()
            .any(|done| {
                rest.find(done)
                    .is_some_and(|at| rest[at + done.len()..].starts_with(SNIPPET))
            })
}

/// Whether `text` holds one of [`CODEX_CUT_INSIDE`]'s marks: the opening, digits (and, for the
/// lines, ` of ` and more digits), then the closing; under Codex's header, or (but the inline
/// one) on a line of its own (the newlines may be escaped, inside a JSON envelope). Each
/// closing is checked against the few bytes around it only, so an output full of closings costs
/// no more than one pass.
fn codex_cut_inside(text: &str) -> bool {
    const MAX_COUNT_BYTES: usize = 32;
    let bytes = text.as_bytes();
    let header =
        memchr::memmem::find(&bytes[..bytes.len().min(1_024)], b"Total output lines: ").is_some();
    CODEX_CUT_INSIDE
        .iter()
        .enumerate()
        .filter(|&(i, _)| header || i != CODEX_INLINE_MARK)
        .any(|(_, (open, close))| {
            memchr::memmem::find_iter(bytes, close.as_bytes()).any(|end| {
                let from = end.saturating_sub(MAX_COUNT_BYTES + open.len());
                let Some(at) = memchr::memmem::rfind(&bytes[from..end], open.as_bytes()) else {
                    return false;
                };
                let start = from + at;
                let number = |w: &[u8]| !w.is_empty() && w.iter().all(u8::is_ascii_digit);
                let words: Vec<&[u8]> = bytes[start + open.len()..end]
                    .split(|&b| b == b' ')
                    .collect();
                let counted = match words[..] {
                    [n] => number(n),
                    [n, of, m] => number(n) && of == b"of" && number(m),
                    _ => false,
                };
                counted && (header || on_own_line(bytes, start, end + close.len()))
            })
        })
}

/// Whether `bytes[start..end]` is a line of its own: a newline (or the text's edge) on each
/// side, written as `\n` inside a JSON string.
fn on_own_line(bytes: &[u8], start: usize, end: usize) -> bool {
    let before = &bytes[..start];
    let after = &bytes[end..];
    let newline_before = before.is_empty() || before.ends_with(b"\n") || before.ends_with(b"\\n");
    let newline_after = after.is_empty() || after.starts_with(b"\n") || after.starts_with(b"\\n");
    newline_before && newline_after
}
