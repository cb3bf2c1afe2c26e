//! Trimming of grep-like search results (`path:line:text`).
//!
//! Head + tail would show the matches of the first and last files and hide every file between.
//! Instead matches are taken round-robin across files (each file's first match, then each
//! file's second, ...) until the budget is spent; kept lines stay grouped by file in their
//! original order, and each file with left-out matches gets a count of them.

use crate::content_id::ContentId;
use crate::trim::lines::{MARKER_RESERVE, group};
use crate::trim::salient::is_continuation;

/// The path of a `path:line:` or `path:line:col:` match line. A timestamp (`2025-12-02
/// 09:48:20`, `2025-12-02T09:48:20`, `[09:48:20]`, `09:48:20`) has the same shape, so a "path"
/// with white space in it, of digits only, opening with a bracket, or whose trailing digits
/// follow a space or a `T` (an hour) is not one.
pub(crate) fn match_path(line: &str) -> Option<&str> {
    let colon = line.find(':')?;
    let path = &line[..colon];
    if path.is_empty()
        || path.len() > 400
        || path.contains(char::is_whitespace)
        || path.starts_with(['[', '('])
        || path.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let before_digits = path.trim_end_matches(|c: char| c.is_ascii_digit());
    if before_digits.len() < path.len() && before_digits.ends_with('T') {
        return None;
    }
    let rest = &line[colon + 1..];
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    (digits > 0 && rest.as_bytes().get(digits) == Some(&b':')).then_some(path)
}

/// True when most lines look like grep/ripgrep `path:line:text` matches.
pub fn looks_like_search(text: &str) -> bool {
    search_verdict(text, true) == Some(true)
}

/// Non-empty lines judged for [`looks_like_search`].
const SEARCH_JUDGED_LINES: usize = 400;

/// [`looks_like_search`] of a text that may go on (`finished` false: more lines may follow
/// `text`'s, a stream's start): `None` while the lines still to come could change the answer.
/// A stream decides the same as the library given the whole text, however it is read.
pub fn search_verdict(text: &str, finished: bool) -> Option<bool> {
    let mut total = 0usize;
    let mut matches = 0usize;
    for line in text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .take(SEARCH_JUDGED_LINES)
    {
        total += 1;
        if match_path(line).is_some() {
            matches += 1;
        }
    }
    let verdict = |matches: usize, total: usize| matches >= 3 && matches * 10 >= total * 7;
    let now = verdict(matches, total);
    if finished || total == SEARCH_JUDGED_LINES {
        return Some(now);
    }
    // The lines to come, up to the judged ones, all matches or none: the two extremes.
    let rest = SEARCH_JUDGED_LINES - total;
    let could_be = now || verdict(matches + rest, SEARCH_JUDGED_LINES);
    let could_not_be = !now || !verdict(matches, SEARCH_JUDGED_LINES);
    match (could_be, could_not_be) {
        (true, true) => None,
        (yes, _) => Some(yes),
    }
}

/// What a search trim removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchStats {
    /// Match lines in the input.
    pub matches: usize,
    /// Match lines kept.
    pub kept: usize,
    /// Files with matches.
    pub files: usize,
    /// Files with at least one kept match.
    pub files_shown: usize,
}

struct FileGroup<'a> {
    path: &'a str,
    lines: Vec<(usize, &'a str)>,
    kept: usize,
}

/// Trims search output to at most `limit` bytes. `None` when there is nothing to group.
pub fn trim_search(
    text: &str,
    limit: usize,
    line_max: usize,
    label: &str,
    id: ContentId,
) -> Option<(String, SearchStats)> {
    let mut groups: Vec<FileGroup> = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let Some(path) = match_path(line) else {
            continue;
        };
        match groups.iter_mut().rev().find(|g| g.path == path) {
            Some(g) => g.lines.push((index, line)),
            None => groups.push(FileGroup {
                path,
                lines: vec![(index, line)],
                kept: 0,
            }),
        }
    }
    if groups.is_empty() {
        return None;
    }
    let budget = limit.saturating_sub(MARKER_RESERVE);
    let mut used = 0usize;
    let rounds = groups.iter().map(|g| g.lines.len()).max().unwrap_or(0);
    'rounds: for round in 0..rounds {
        let mut progressed = false;
        for g in groups.iter_mut() {
            if g.kept != round || round >= g.lines.len() {
                continue;
            }
            let mut cost = clip(g.lines[round].1, line_max).len() + 1;
            if round == 0 && g.lines.len() > 1 {
                // Room for this file's "more matches" note, should it need one.
                cost += note(g.lines.len()).len() + 1;
            }
            if used + cost > budget {
                if round == 0 {
                    continue;
                }
                break 'rounds;
            }
            used += cost;
            g.kept += 1;
            progressed = true;
        }
        if !progressed {
            break;
        }
    }
    let matches: usize = groups.iter().map(|g| g.lines.len()).sum();
    let kept: usize = groups.iter().map(|g| g.kept).sum();
    let stats = SearchStats {
        matches,
        kept,
        files: groups.len(),
        files_shown: groups.iter().filter(|g| g.kept > 0).count(),
    };
    let mut out = String::with_capacity(used + MARKER_RESERVE);
    for g in &groups {
        for (_, line) in &g.lines[..g.kept] {
            out.push_str(clip(line, line_max));
            out.push('\n');
        }
        if g.kept > 0 && g.kept < g.lines.len() {
            out.push_str(&note(g.lines.len() - g.kept));
            out.push('\n');
        }
    }
    let hidden_files = stats.files - stats.files_shown;
    out.push_str(&format!(
        "[... {} of {} matching lines trimmed from {} output ({} of {} files shown{}); id {} ...]",
        group((matches - kept) as u64),
        group(matches as u64),
        label,
        group(stats.files_shown as u64),
        group(stats.files as u64),
        if hidden_files > 0 {
            ", others omitted whole"
        } else {
            ""
        },
        id
    ));
    out.push('\n');
    Some((out, stats))
}

/// Placed right under the file's kept lines, so the path need not be repeated.
fn note(more: usize) -> String {
    format!(
        "[... {} more {} in this file]",
        group(more as u64),
        if more == 1 { "match" } else { "matches" },
    )
}

fn clip(line: &str, max: usize) -> &str {
    if line.len() <= max {
        return line;
    }
    let mut cut = max;
    while cut > 0 && is_continuation(line.as_bytes()[cut]) {
        cut -= 1;
    }
    &line[..cut]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grep_output(files: usize, per_file: usize) -> String {
        let mut out = String::new();
        for f in 0..files {
            for m in 0..per_file {
                out.push_str(&format!(
                    "src/module_{f}.rs:{}:    fn parse_{m}(input: &str) -> Result<()>\n",
                    m * 10 + 1
                ));
            }
        }
        out
    }

    #[test]
    fn detects_grep_output() {
        assert!(looks_like_search(&grep_output(3, 3)));
        assert!(!looks_like_search("hello\nworld: 1\nfoo\n"));
        assert!(!looks_like_search("error: build failed\nnote: see log\n"));
        // Timestamped log lines are not matches (a `sed -n` slice of a log was trimmed as
        // grep output, and its ERROR line in the middle was lost).
        for stamp in [
            "2025-12-02 09:48:20,123",
            "2025-12-02T09:48:20.123Z",
            "[09:48:20]",
            "09:48:20",
        ] {
            let log: String = (0..50)
                .map(|i| format!("{stamp} INFO request {i} served\n"))
                .collect();
            assert!(!looks_like_search(&log), "{stamp}");
        }
    }

    #[test]
    fn every_file_is_represented_before_any_gets_a_second_match() {
        let text = grep_output(10, 50);
        let (out, stats) = trim_search(&text, 3000, 240, "search", ContentId::of(b"g")).unwrap();
        assert!(out.len() <= 3000, "{}", out.len());
        assert_eq!(stats.files, 10);
        assert_eq!(stats.files_shown, 10, "{out}");
        for f in 0..10 {
            assert!(
                out.contains(&format!("src/module_{f}.rs:1:")),
                "file {f} missing"
            );
            let after_first = out.split(&format!("src/module_{f}.rs:")).last().unwrap();
            assert!(
                after_first.contains("more matches in this file]"),
                "file {f} note"
            );
        }
        assert!(out.ends_with("...]\n"));
        assert!(out.contains(&format!("{} of 500 matching lines", 500 - stats.kept)));
    }

    #[test]
    fn budget_too_small_for_all_files_omits_whole_files() {
        let text = grep_output(200, 2);
        let (out, stats) = trim_search(&text, 2048, 240, "search", ContentId::of(b"h")).unwrap();
        assert!(out.len() <= 2048);
        assert!(stats.files_shown < 200);
        assert!(out.contains("others omitted whole"));
    }
}
