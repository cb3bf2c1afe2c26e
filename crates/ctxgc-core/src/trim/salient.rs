//! Finding the lines of a cut middle that a reader must still see.
//!
//! Head + tail trimming hides the one error line of a 50K build log. The scanner finds lines
//! that look important (errors first, then warnings) with one Aho-Corasick pass per chunk, and a
//! bounded reservoir keeps the first and the last of them per tier, so memory stays constant
//! whatever the input size. In a view of a file, where "error" is a word and not an event, the
//! lines that matter are its outline: the definitions the agent finds its way back by.

use std::collections::VecDeque;
use std::sync::OnceLock;

use aho_corasick::{AhoCorasick, AhoCorasickKind, Input, MatchKind};

use crate::trim::outline;

/// How important a salient line is; lower is more important.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Tier {
    Error = 0,
    Warning = 1,
    /// A definition in a view of a file (only [`SalientLines::Outline`] finds them).
    Definition = 2,
}

const TIERS: usize = 3;

/// Which lines of a cut middle are quoted below the marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SalientLines {
    /// Errors first, then warnings: what the reader of a log must still see.
    #[default]
    Events,
    /// Definitions (functions, methods, classes, types): the outline of a view of a file. What
    /// an agent quotes later from a file it viewed is mostly the name or signature of what it
    /// goes on to edit or call, and a definition line carries it.
    Outline,
}

/// Case variants are listed explicitly (rather than matching case-insensitively) so the
/// automaton stays small enough for the SIMD prefilter, which keeps the scan near memory speed.
const ERROR_PATTERNS: &[&str] = &[
    "error",
    "Error",
    "ERROR",
    "panic",
    "PANIC",
    "FAIL",
    "Fail",
    "failed",
    "Traceback",
    "xception",
    "fatal",
    "Fatal",
    "FATAL",
    "assert",
    "Assert",
    "ASSERT",
    "Segmentation fault",
    "exit status",
    "exit code",
    "Aborted",
    "undefined reference",
    "No such file",
];
/// Warnings, and the marker Codex leaves where it already cut an output (`…N tokens
/// truncated…`): a second cut keeps the sign that the first one happened.
const WARNING_PATTERNS: &[&str] = &[
    "warning",
    "Warning",
    "WARNING",
    "WARN",
    "deprecat",
    "Deprecat",
    "tokens truncated",
];

// Constant literal patterns: building them cannot fail at run time (every trim test runs it).
#[allow(clippy::expect_used)]
fn automaton() -> &'static AhoCorasick {
    static AC: OnceLock<AhoCorasick> = OnceLock::new();
    AC.get_or_init(|| {
        AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostFirst)
            .kind(Some(AhoCorasickKind::DFA))
            .build(ERROR_PATTERNS.iter().chain(WARNING_PATTERNS))
            .expect("salient patterns are valid literals")
    })
}

fn tier_of(pattern: usize) -> Tier {
    if pattern < ERROR_PATTERNS.len() {
        Tier::Error
    } else {
        Tier::Warning
    }
}

/// A salient line found in the middle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hit {
    /// Byte offset of the line start in the whole input.
    pub offset: u64,
    /// 1-based line number.
    pub line: u64,
    pub tier: Tier,
    /// The line's text, cut to the configured maximum at a char boundary.
    pub text: Vec<u8>,
}

/// Scans complete lines for salient lines of `kind`.
///
/// `region` must start at a line start; `base_offset` and `base_line` are the absolute offset and
/// 1-based line number of its first byte. Every salient line is reported once; an event line
/// with the most important tier among its words.
pub(crate) fn scan_lines(
    kind: SalientLines,
    region: &[u8],
    base_offset: u64,
    base_line: u64,
    max_text: usize,
    on_hit: impl FnMut(Hit),
) {
    match kind {
        SalientLines::Events => scan_events(region, base_offset, base_line, max_text, on_hit),
        SalientLines::Outline => scan_outline(region, base_offset, base_line, max_text, on_hit),
    }
}

fn scan_outline(
    region: &[u8],
    base_offset: u64,
    base_line: u64,
    max_text: usize,
    mut on_hit: impl FnMut(Hit),
) {
    let mut start = 0usize;
    let mut line = base_line;
    while start < region.len() {
        let end = memchr::memchr(b'\n', &region[start..]).map_or(region.len(), |i| start + i);
        if outline::is_definition(&region[start..end]) {
            on_hit(Hit {
                offset: base_offset + start as u64,
                line,
                tier: Tier::Definition,
                text: clip_line(&region[start..end], max_text),
            });
        }
        start = end + 1;
        line += 1;
    }
}

/// Bytes the definition lines of `text` take rendered as outline lines (each cut to `max_text`).
pub(crate) fn outline_bytes(text: &str, max_text: usize) -> usize {
    let mut bytes = 0;
    scan_outline(text.as_bytes(), 0, 1, max_text, |hit| {
        bytes += rendered_len(&hit)
    });
    bytes
}

fn scan_events(
    region: &[u8],
    base_offset: u64,
    base_line: u64,
    max_text: usize,
    mut on_hit: impl FnMut(Hit),
) {
    let ac = automaton();
    let mut pos = 0usize;
    let mut line = base_line;
    let mut counted_to = 0usize;
    while pos < region.len() {
        let Some(m) = ac.find(Input::new(region).range(pos..)) else {
            break;
        };
        let start = memchr::memrchr(b'\n', &region[..m.start()]).map_or(0, |i| i + 1);
        let end = memchr::memchr(b'\n', &region[m.end()..]).map_or(region.len(), |i| m.end() + i);
        let mut tier = tier_of(m.pattern().as_usize());
        if tier == Tier::Warning {
            // A later word on the same line may be an error word.
            let rest = Input::new(&region[..end]).range(m.end()..);
            if ac
                .find_iter(rest)
                .any(|later| tier_of(later.pattern().as_usize()) == Tier::Error)
            {
                tier = Tier::Error;
            }
        }
        line += bytecount::count(&region[counted_to..start], b'\n') as u64;
        counted_to = start;
        on_hit(Hit {
            offset: base_offset + start as u64,
            line,
            tier,
            text: clip_line(&region[start..end], max_text),
        });
        pos = end + 1;
    }
}

/// The line without its `\r`, cut to at most `max` bytes at a char boundary.
fn clip_line(line: &[u8], max: usize) -> Vec<u8> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.len() <= max {
        return line.to_vec();
    }
    let mut cut = max.saturating_sub(3);
    while cut > 0 && is_continuation(line[cut]) {
        cut -= 1;
    }
    let mut out = line[..cut].to_vec();
    out.extend_from_slice("…".as_bytes());
    out
}

pub(crate) fn is_continuation(byte: u8) -> bool {
    byte & 0b1100_0000 == 0b1000_0000
}

/// Keeps the first `first_cap` and the last `last_cap` hits of each tier.
pub(crate) struct Reservoir {
    first_cap: usize,
    last_cap: usize,
    first: [Vec<Hit>; TIERS],
    last: [VecDeque<Hit>; TIERS],
}

impl Reservoir {
    pub fn new(first_cap: usize, last_cap: usize) -> Reservoir {
        Reservoir {
            first_cap,
            last_cap,
            first: Default::default(),
            last: Default::default(),
        }
    }

    pub fn push(&mut self, hit: Hit) {
        let t = hit.tier as usize;
        if self.first[t].len() < self.first_cap {
            self.first[t].push(hit);
            return;
        }
        if self.last[t].len() == self.last_cap {
            self.last[t].pop_front();
        }
        self.last[t].push_back(hit);
    }

    /// Chooses hits in `[from, to)` whose rendered size fits `budget` bytes: errors before
    /// warnings, and within a tier the earliest and the latest in turn (the first error is
    /// usually the cause, the last one the summary). Returned in line order.
    pub fn select(&self, from: u64, to: u64, budget: usize) -> Vec<Hit> {
        let mut chosen: Vec<&Hit> = Vec::new();
        let mut used = 0usize;
        for t in 0..TIERS {
            let firsts: Vec<&Hit> = self.first[t]
                .iter()
                .filter(|h| h.offset >= from && h.offset < to)
                .collect();
            let lasts: Vec<&Hit> = self.last[t]
                .iter()
                .rev()
                .filter(|h| h.offset >= from && h.offset < to)
                .collect();
            let mut order = Vec::with_capacity(firsts.len() + lasts.len());
            let (mut i, mut j) = (0, 0);
            while i < firsts.len() || j < lasts.len() {
                if i < firsts.len() {
                    order.push(firsts[i]);
                    i += 1;
                }
                if j < lasts.len() {
                    order.push(lasts[j]);
                    j += 1;
                }
            }
            for hit in order {
                if chosen.iter().any(|c| c.offset == hit.offset) {
                    continue;
                }
                let size = rendered_len(hit);
                if used + size <= budget {
                    used += size;
                    chosen.push(hit);
                }
            }
        }
        chosen.sort_by_key(|h| h.offset);
        chosen.into_iter().cloned().collect()
    }
}

/// `[line N] text\n`, or `text\n` for a line of a numbered view, which shows its number.
pub(crate) fn render_hit(hit: &Hit, out: &mut Vec<u8>) {
    if !shows_own_number(hit) {
        out.extend_from_slice(b"[line ");
        out.extend_from_slice(hit.line.to_string().as_bytes());
        out.extend_from_slice(b"] ");
    }
    out.extend_from_slice(&hit.text);
    out.push(b'\n');
}

pub(crate) fn rendered_len(hit: &Hit) -> usize {
    if shows_own_number(hit) {
        return hit.text.len() + 1;
    }
    "[line ] \n".len() + decimal_len(hit.line) + hit.text.len()
}

/// Whether a hit is a line of a numbered view (`nl`, `cat -n`), whose number is in its text.
fn shows_own_number(hit: &Hit) -> bool {
    hit.tier == Tier::Definition && outline::is_numbered(&hit.text)
}

fn decimal_len(mut n: u64) -> usize {
    let mut len = 1;
    while n >= 10 {
        n /= 10;
        len += 1;
    }
    len
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hits(text: &str) -> Vec<(u64, Tier, String)> {
        let mut out = Vec::new();
        scan_lines(SalientLines::Events, text.as_bytes(), 0, 1, 200, |h| {
            out.push((h.line, h.tier, String::from_utf8(h.text).unwrap()))
        });
        out
    }

    #[test]
    fn finds_error_and_warning_lines_with_numbers() {
        let found = hits("ok\nwarning: unused\nfine\nerror[E0308]: mismatched types\r\nok\n");
        assert_eq!(
            found,
            vec![
                (2, Tier::Warning, "warning: unused".into()),
                (4, Tier::Error, "error[E0308]: mismatched types".into()),
            ]
        );
    }

    #[test]
    fn outline_lines_of_a_numbered_view_show_their_own_number() {
        let mut found = Vec::new();
        let view = "     1\timport os\n     2\tdef main():\n     3\t    pass\ndef bare():\n";
        scan_lines(SalientLines::Outline, view.as_bytes(), 0, 1, 200, |h| {
            found.push(h)
        });
        assert_eq!(found.iter().map(|h| h.line).collect::<Vec<_>>(), [2, 4]);
        let mut out = Vec::new();
        for hit in &found {
            render_hit(hit, &mut out);
            assert_eq!(rendered_len(hit), out.len() - rendered_before(&out, hit));
        }
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "     2\tdef main():\n[line 4] def bare():\n"
        );
        assert_eq!(
            outline_bytes(view, 200),
            "     2\tdef main():\n[line 4] def bare():\n".len()
        );
    }

    /// Bytes rendered before `hit` (the hits are rendered in turn into `out`).
    fn rendered_before(out: &[u8], hit: &Hit) -> usize {
        let mut last = Vec::new();
        render_hit(hit, &mut last);
        out.len() - last.len()
    }

    #[test]
    fn a_line_with_both_words_is_an_error() {
        let found = hits("warning: treated as error\n");
        assert_eq!(found[0].1, Tier::Error);
    }

    #[test]
    fn recognises_common_failure_shapes() {
        for line in [
            "Traceback (most recent call last):",
            "thread 'main' panicked at src/lib.rs:3:5",
            "test foo ... FAILED",
            "AssertionError: 1 != 2",
            "ValueError: bad value",
            "make: *** [all] Error 2",
            "Process finished with exit code 1",
            "Segmentation fault (core dumped)",
        ] {
            assert_eq!(hits(line).len(), 1, "{line}");
        }
        assert!(hits("all tests passed\ncompiling foo\n").is_empty());
    }

    #[test]
    fn long_lines_are_clipped_at_char_boundaries() {
        let line = format!("error: {}", "é".repeat(300));
        let found = hits(&line);
        assert!(found[0].2.len() <= 200);
        assert!(found[0].2.ends_with('…'));
    }

    #[test]
    fn selection_prefers_errors_then_first_and_last() {
        let mut r = Reservoir::new(2, 2);
        for i in 0..10u64 {
            r.push(Hit {
                offset: i * 10,
                line: i + 1,
                tier: if i % 2 == 0 {
                    Tier::Error
                } else {
                    Tier::Warning
                },
                text: b"x".to_vec(),
            });
        }
        let budget = 4 * rendered_len(&r.first[0][0]);
        let chosen: Vec<u64> = r.select(0, 1000, budget).iter().map(|h| h.line).collect();
        // Errors are lines 1,3,5,7,9: first two (1,3) and last two (7,9) fit exactly.
        assert_eq!(chosen, vec![1, 3, 7, 9]);
        let only_middle: Vec<u64> = r.select(15, 75, 1000).iter().map(|h| h.line).collect();
        assert_eq!(only_middle, vec![3, 4, 7, 8]);
    }
}
