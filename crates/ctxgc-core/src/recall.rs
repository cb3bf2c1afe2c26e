//! `recall_tool_result`: an original, whole, by line range, or by pattern with context lines.

use regex::Regex;

use crate::trim::lines::group;

/// What to return of an original.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecallQuery {
    /// 1-based inclusive line range.
    pub lines: Option<(usize, usize)>,
    /// A regular expression; matching lines are returned with `context` lines around them.
    pub pattern: Option<String>,
    /// Context lines around pattern matches.
    pub context: usize,
}

/// A query that cannot be answered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecallError {
    /// The pattern is not a valid regex.
    #[error("invalid pattern: {0}")]
    BadPattern(String),
    /// The line range is malformed or empty.
    #[error("invalid line range {0}-{1}: lines are 1-based and the first must not exceed the last")]
    BadRange(usize, usize),
    /// The range starts after the end.
    #[error("line {0} is past the end of the output ({1} lines)")]
    PastEnd(usize, usize),
}

/// Parses `"40-80"`, `"40"` or `"40:80"`.
pub fn parse_lines(spec: &str) -> Option<(usize, usize)> {
    let spec = spec.trim();
    let (a, b) = spec.split_once(['-', ':', ',']).unwrap_or((spec, spec));
    let a = a.trim().parse().ok()?;
    let b = b.trim().parse().ok()?;
    Some((a, b))
}

/// Answers a query on an original. Lines are prefixed with their numbers (`  42| text`) when a
/// range or pattern is given, so the model can ask for more around them.
///
/// An original that is JSON whose bulk is text (a command's output in an envelope such as
/// Hermes's `{"output": ..., "exit_code": ...}`) is one line of escaped text: a range or a
/// pattern is answered on the lines of its text fields instead, the lines the trim's markers
/// count, so a search for an error finds the error line, not the whole envelope.
pub fn recall(
    original: &str,
    query: &RecallQuery,
    max_bytes: usize,
) -> Result<String, RecallError> {
    if (query.lines.is_some() || query.pattern.is_some())
        && let Some(unwrapped) = crate::trim::envelope::unwrap(original)
    {
        return recall_lines(&unwrapped.text, query, max_bytes);
    }
    recall_lines(original, query, max_bytes)
}

fn recall_lines(
    original: &str,
    query: &RecallQuery,
    max_bytes: usize,
) -> Result<String, RecallError> {
    let lines: Vec<&str> = original.lines().collect();
    let mut selected: Vec<usize> = Vec::new();
    if let Some((a, b)) = query.lines {
        if a == 0 || a > b {
            return Err(RecallError::BadRange(a, b));
        }
        if a > lines.len() {
            return Err(RecallError::PastEnd(a, lines.len()));
        }
        selected.extend(a - 1..b.min(lines.len()));
    }
    if let Some(pattern) = &query.pattern {
        let re = Regex::new(pattern).map_err(|e| RecallError::BadPattern(e.to_string()))?;
        let pool: Vec<usize> = if selected.is_empty() {
            (0..lines.len()).collect()
        } else {
            selected.clone()
        };
        let mut keep = vec![false; lines.len()];
        for &i in &pool {
            if re.is_match(lines[i]) {
                let last = (i + query.context).min(lines.len().saturating_sub(1));
                keep[i.saturating_sub(query.context)..=last].fill(true);
            }
        }
        selected = (0..lines.len()).filter(|&i| keep[i]).collect();
        if selected.is_empty() {
            return Ok(format!(
                "[no line matches /{pattern}/ in {} lines]",
                group(lines.len() as u64)
            ));
        }
    }
    let mut out = String::new();
    if query.lines.is_none() && query.pattern.is_none() {
        out.push_str(original);
    } else {
        let mut previous: Option<usize> = None;
        for i in selected {
            if previous.is_some_and(|p| i > p + 1) {
                out.push_str("--\n");
            }
            out.push_str(&format!("{:>6}| {}\n", i + 1, lines[i]));
            previous = Some(i);
        }
    }
    if out.len() > max_bytes {
        let mut cut = max_bytes;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        let cut = out[..cut].rfind('\n').map_or(cut, |i| i + 1);
        let shown = out[..cut].lines().count();
        out.truncate(cut);
        out.push_str(&format!(
            "[... recall cut at {} bytes after {shown} lines; ask for a line range or a pattern for the rest ...]\n",
            group(max_bytes as u64)
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_envelope_is_searched_in_its_text() {
        let output =
            crate::test_text::with_line_at(1..=3000, 1500, "ERROR: disk quota exceeded\n", |i| {
                format!("step {i} ok\n")
            });
        let envelope = serde_json::json!({"output": output, "exit_code": 1, "error": null});
        let envelope = envelope.to_string();
        let by_pattern = RecallQuery {
            pattern: Some("ERROR".into()),
            ..RecallQuery::default()
        };
        assert_eq!(
            recall(&envelope, &by_pattern, 1 << 17).unwrap(),
            "  1500| ERROR: disk quota exceeded\n"
        );
        let by_lines = RecallQuery {
            lines: Some((2, 3)),
            ..RecallQuery::default()
        };
        assert_eq!(
            recall(&envelope, &by_lines, 1 << 17).unwrap(),
            "     2| step 2 ok\n     3| step 3 ok\n"
        );
        // Whole, it is the envelope as the tool returned it.
        assert_eq!(
            recall(&envelope, &RecallQuery::default(), 1 << 20).unwrap(),
            envelope
        );
    }

    use super::*;

    fn original() -> String {
        crate::test_text::with_line_at(1..=100, 50, "error: boom\n", |i| format!("line {i}\n"))
    }

    #[test]
    fn whole_range_and_pattern() {
        let o = original();
        assert_eq!(recall(&o, &RecallQuery::default(), 1 << 20).unwrap(), o);
        assert_eq!(
            recall(
                &o,
                &RecallQuery {
                    lines: Some((2, 3)),
                    ..Default::default()
                },
                1 << 20
            )
            .unwrap(),
            "     2| line 2\n     3| line 3\n"
        );
        let q = RecallQuery {
            pattern: Some("^error".into()),
            context: 1,
            ..Default::default()
        };
        assert_eq!(
            recall(&o, &q, 1 << 20).unwrap(),
            "    49| line 49\n    50| error: boom\n    51| line 51\n"
        );
        let q = RecallQuery {
            pattern: Some("nothing".into()),
            ..Default::default()
        };
        assert_eq!(
            recall(&o, &q, 1 << 20).unwrap(),
            "[no line matches /nothing/ in 100 lines]"
        );
    }

    #[test]
    fn bad_queries_are_explained() {
        let o = original();
        assert_eq!(
            recall(
                &o,
                &RecallQuery {
                    lines: Some((5, 2)),
                    ..Default::default()
                },
                100
            ),
            Err(RecallError::BadRange(5, 2))
        );
        assert_eq!(
            recall(
                &o,
                &RecallQuery {
                    lines: Some((500, 600)),
                    ..Default::default()
                },
                100
            ),
            Err(RecallError::PastEnd(500, 100))
        );
        assert!(matches!(
            recall(
                &o,
                &RecallQuery {
                    pattern: Some("(".into()),
                    ..Default::default()
                },
                100
            ),
            Err(RecallError::BadPattern(_))
        ));
        assert_eq!(parse_lines("10-20"), Some((10, 20)));
        assert_eq!(parse_lines("7"), Some((7, 7)));
        assert_eq!(parse_lines("x"), None);
    }

    #[test]
    fn large_recalls_are_capped_with_a_note() {
        let o = original();
        let out = recall(&o, &RecallQuery::default(), 100).unwrap();
        assert!(
            out.len() < 250 && out.contains("recall cut at 100 bytes"),
            "{out}"
        );
    }
}
