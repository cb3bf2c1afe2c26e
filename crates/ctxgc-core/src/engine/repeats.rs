//! Repeats at insertion: a new tool result that repeats an earlier result still visible, whole
//! or in long runs of lines (a re-read file, a re-run test), enters the history as a pointer to
//! the earlier one for the repeated part plus what is new.
//!
//! This needs no event: the pointer is a pure function of the visible history and the new
//! output, and only the new message is affected, so cached prefixes stay valid.
//!
//! An output inside a JSON envelope whose bulk is one text field (Codex's `{"output": "...",
//! "metadata": {...}}` of autumn 2025, Hermes's) is read as that field's lines: escaped, the
//! whole envelope is one line, and a re-read file in it repeated nothing.

use std::collections::{HashMap, VecDeque};

use crate::content_id::ContentId;
use crate::trim::envelope::OneField;

/// A run shorter than this many lines is left as is. Re-views of overlapping ranges repeat in
/// short runs between edited lines: 4 lines and 200 bytes (a pointer line is about 90) saved
/// 0.6 to 1.4% more than 12 lines and 600 bytes on the SWE-agent and Gemini 3 sessions, at the
/// same recall (the pointed-to result stays in view: events keep what a pointer names); 3 lines
/// saved 0.8% of `none` more than 4 on procrypto's Claude Code logs and 0.1% on Smartagent's,
/// at the same share of what the client kept, and moved no other set by more than 0.1%.
pub const MIN_RUN_LINES: usize = 3;
/// A run shorter than this many bytes is left as is (see [`MIN_RUN_LINES`]).
pub const MIN_RUN_BYTES: usize = 200;
/// New outputs smaller than this are not worth checking.
const MIN_OUTPUT_BYTES: usize = 1_200;
/// Earlier results searched for runs, newest first, up to this many bytes: the search costs
/// what it reads, and a request whose memo was evicted re-enters every turn.
const MAX_EARLIER_BYTES: usize = 256 * 1024;
/// Candidate positions followed per line (repetitive lines such as `}` would explode otherwise).
const MAX_CANDIDATES: usize = 8;

/// An earlier result the model can still see.
#[derive(Debug, Clone, Copy)]
pub struct Earlier<'a> {
    /// Its call id (named in the pointer).
    pub call_id: &'a str,
    /// The id of its original.
    pub id: ContentId,
    /// Its text as the model sees it.
    pub text: &'a str,
}

/// Whether a result as it entered may be pointed to: not a pointer or an abstract itself.
pub fn can_be_pointed_to(entered: &str) -> bool {
    !entered.starts_with('[') || entered.len() > 200
}

/// The call ids the pointers in an entered result name (`... the result of CALL_ID (id ...)]`
/// on a line of its own).
pub fn pointed_call_ids(entered: &str) -> impl Iterator<Item = &str> {
    const NAMES: &str = "the result of ";
    pointer_lines(entered).filter_map(|line| {
        let at = line.find(NAMES)? + NAMES.len();
        let rest = &line[at..];
        Some(&rest[..rest.find(" (id ")?])
    })
}

/// The ids of the originals the pointers in an entered result name (`... (id ID)]` on a line
/// of its own): each must answer a recall, so the results they point to are stored.
pub fn pointed_ids(entered: &str) -> impl Iterator<Item = ContentId> + '_ {
    pointer_lines(entered).filter_map(|line| {
        let at = line.rfind(" (id ")? + " (id ".len();
        ContentId::parse(&line[at..line.len() - 2])
    })
}

/// The lines of an entered result that are pointers (`[... (id ID)]`), in an envelope's field
/// too, where a line break is the escape `\n` and the field's first and last lines end at a
/// quote (a pointer holds nothing JSON escapes, and no quote).
fn pointer_lines(entered: &str) -> impl Iterator<Item = &str> {
    entered
        .lines()
        .flat_map(|line| line.split('"'))
        .flat_map(|part| part.split("\\n"))
        .filter(|line| line.starts_with('[') && line.ends_with(")]"))
}

/// Ids (call ids, content ids) take about twice the tokens per byte of prose or code, so a
/// pointer saves tokens only where what it replaces is at least twice its length: Claude Code's
/// one-sentence `TodoWrite` answer, replaced by a pointer naming two ids, cost 30% more tokens.
fn saves_tokens(pointer: &str, replaced_bytes: usize) -> bool {
    pointer.len() * 2 <= replaced_bytes
}

/// Earlier results the model can still see, indexed as they enter so that each new result is
/// checked in time linear in its own size: a request with 40,000 results rebuilt the list of
/// earlier results for every turn (quadratic), and a line index over the newest 256 KiB for
/// every big output.
///
/// The index holds no text: each result is named by its position in the caller's list, and
/// [`RepeatIndex::point_to_repeats`] reads texts back through `text_of`. Lines are indexed only
/// once a big output needs them (a request whose turns all come from a memo hashes nothing).
#[derive(Debug, Default, Clone)]
pub struct RepeatIndex {
    /// The newest visible result of each id (its call id).
    by_id: HashMap<ContentId, String>,
    /// The newest visible results, oldest first, up to [`MAX_EARLIER_BYTES`]: runs are searched
    /// in these.
    window: VecDeque<WindowEntry>,
    /// Sequence number of `window`'s front.
    front_seq: u64,
    window_bytes: usize,
    /// Where each line of the window's results occurs, newest [`MAX_CANDIDATES`] kept; `None`
    /// until an output first needs it.
    lines: Option<HashMap<u64, VecDeque<(u64, u32)>>>,
}

#[derive(Debug, Clone)]
struct WindowEntry {
    /// The result's position in the caller's list.
    position: usize,
    call_id: String,
    id: ContentId,
    bytes: usize,
    /// Every line of the text (empty until indexed).
    spans: Vec<LineSpan>,
    /// The text of its field, when it entered as an envelope of one ([`OneField`]): what its
    /// spans are in (read once it is indexed).
    field: Option<String>,
    /// An event replaced it (by an abstract or a summary): no pointer may name it.
    hidden: bool,
}

impl WindowEntry {
    /// What its spans are in: its field's text, or `entered`, the text it entered as.
    fn text<'a>(&'a self, entered: &'a str) -> &'a str {
        self.field.as_deref().unwrap_or(entered)
    }

    /// Its `k`th line, from `entered` (see [`Self::text`]).
    fn line<'a>(&'a self, entered: &'a str, k: usize) -> &'a str {
        let s = self.spans[k];
        &self.text(entered)[s.start as usize..s.end as usize]
    }
}

#[derive(Debug, Clone, Copy)]
struct LineSpan {
    start: u32,
    end: u32,
    hashes: LineHashes,
}

/// The keys a line is looked up by: the whole line, and what it says ([`unnumbered`]; the same
/// key unless the line is numbered). Each is 0 for a line too short to look up, judged by the
/// whole line, so a numbered line never is: runs start at a view's blank lines and braces too
/// (judged by the text alone, EdouardZemb's share of what the client kept fell from 99.5% to
/// 99.2%, left out of the relevance table).
/// Both keys, so that rows which differ only in their numbers (a table's, every blank line of a
/// view) do not crowd out the exact repeat among a key's [`MAX_CANDIDATES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LineHashes {
    line: u64,
    text: u64,
}

impl LineHashes {
    fn of(line: &str) -> LineHashes {
        if line.trim().len() < 4 {
            return LineHashes { line: 0, text: 0 };
        }
        let hash = |s: &str| xxhash_rust::xxh3::xxh3_64(s.as_bytes()) | 1;
        let whole = hash(line);
        let text = unnumbered(line);
        LineHashes {
            line: whole,
            text: if text.len() == line.len() {
                whole
            } else {
                hash(text)
            },
        }
    }

    /// Its distinct keys, 0 left out.
    fn keys(self) -> impl Iterator<Item = u64> {
        let text = (self.text != self.line).then_some(self.text);
        std::iter::once(self.line).chain(text).filter(|&k| k != 0)
    }
}

/// A line of a numbered view of a file (Claude Code's `Read`: `   120→text`; `nl -ba` and
/// `cat -n`: `   120<TAB>text`) as its number and its text.
fn numbered(line: &str) -> Option<(&str, &str)> {
    let digits = line.trim_start_matches(' ');
    let rest = digits.trim_start_matches(|c: char| c.is_ascii_digit());
    let number = &digits[..digits.len() - rest.len()];
    let text = rest
        .strip_prefix('\u{2192}')
        .or_else(|| rest.strip_prefix('\t'))?;
    (!number.is_empty()).then_some((number, text))
}

/// What a line says, its number aside in a numbered view: a file re-read after an edit above
/// shows its unchanged lines under new numbers, and they repeat all the same (on the shared
/// Claude Code logs, a third more of the tool outputs' weight than the lines that repeat as
/// they are).
fn unnumbered(line: &str) -> &str {
    numbered(line).map_or(line, |(_, text)| text)
}

/// Whether `line`, `k` lines after `first` in a run, is numbered as a view numbers it: `k` more
/// when `first` is numbered, not at all when it is not. A table whose first column is a number
/// (`17<TAB>a`, `99<TAB>b`) is no view: its numbers are data, and a pointer naming only the
/// first and the last would lose the others.
fn counts_on(first: &str, line: &str, k: usize) -> bool {
    let number = |l: &str| numbered(l).and_then(|(n, _)| n.parse::<u64>().ok());
    match (number(first), number(line)) {
        (Some(a), Some(b)) => a.checked_add(k as u64) == Some(b),
        (None, None) => true,
        _ => false,
    }
}

/// The numbers of a run's first and last lines, when both are numbered.
fn numbers_of(first: &str, last: &str) -> Option<(String, String)> {
    Some((numbered(first)?.0.to_owned(), numbered(last)?.0.to_owned()))
}

/// The pointer that stands for the run `new` of a new output's lines from its line `i` (0-based),
/// which repeats the lines of `source`'s result from its line `j`, the first and last of them
/// given. Lines renumbered since (a file re-read after an edit above them, `exact` false) say
/// each side's numbers where those are not their places in the output (a view from an offset),
/// so that the model knows each line's number now; lines repeated exactly show theirs where
/// they were.
fn pointer_line(
    (i, new): (usize, &[&str]),
    (j, old_first, old_last): (usize, &str, &str),
    exact: bool,
    source: &WindowEntry,
) -> String {
    let len = new.len();
    let numbering = |first: &str, last: &str, place: usize| {
        numbers_of(first, last)
            .filter(|(a, _)| !exact && *a != place.to_string())
            .map_or(String::new(), |(a, b)| format!(", numbered {a}-{b},"))
    };
    let now = numbering(new[0], new[len - 1], i + 1);
    let then = numbering(old_first, old_last, j + 1);
    let (call_id, id) = (&source.call_id, source.id);
    if !now.is_empty() || !then.is_empty() {
        format!(
            "[lines {}-{}{now} same as lines {}-{}{then} of the result of {call_id} (id {id})]\n",
            i + 1,
            i + len,
            j + 1,
            j + len,
        )
    } else if i == j {
        format!(
            "[lines {}-{} same as the result of {call_id} (id {id})]\n",
            i + 1,
            i + len
        )
    } else {
        format!(
            "[lines {}-{} same as lines {}-{} of the result of {call_id} (id {id})]\n",
            i + 1,
            i + len,
            j + 1,
            j + len,
        )
    }
}

fn spans_of(text: &str) -> Vec<LineSpan> {
    let base = text.as_ptr() as usize;
    text.lines()
        .map(|line| {
            let start = line.as_ptr() as usize - base;
            LineSpan {
                start: start as u32,
                end: (start + line.len()) as u32,
                hashes: LineHashes::of(line),
            }
        })
        .collect()
}

impl RepeatIndex {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a result as it entered the history (`entered`, at `position` in the caller's
    /// list); pointers and abstracts are not recorded (see [`can_be_pointed_to`]).
    pub fn push(&mut self, position: usize, call_id: &str, id: ContentId, entered: &str) {
        if !can_be_pointed_to(entered) {
            return;
        }
        self.by_id.insert(id, call_id.to_owned());
        let seq = self.front_seq + self.window.len() as u64;
        self.window.push_back(WindowEntry {
            position,
            call_id: call_id.to_owned(),
            id,
            bytes: entered.len(),
            spans: Vec::new(),
            field: None,
            hidden: false,
        });
        self.window_bytes += entered.len();
        while self.window_bytes > MAX_EARLIER_BYTES {
            self.pop_front();
        }
        if self.lines.is_some() && self.front_seq <= seq {
            self.index(seq, entered);
        }
    }

    /// The result of `call_id` is no longer in view (an event replaced it): a pointer to it
    /// would point at nothing the model can see, so later repeats of it enter as themselves.
    pub fn hide(&mut self, call_id: &str) {
        self.by_id.retain(|_, c| c != call_id);
        for entry in self.window.iter_mut().filter(|e| e.call_id == call_id) {
            entry.hidden = true;
        }
    }

    /// About how many bytes it holds (for a memo that keeps indexes between requests).
    pub fn weight(&self) -> usize {
        let entries: usize = self
            .window
            .iter()
            .map(|e| {
                let field = e.field.as_ref().map_or(0, String::capacity);
                128 + e.call_id.len() + e.spans.capacity() * size_of::<LineSpan>() + field
            })
            .sum();
        let by_id = self.by_id.values().map(|c| 48 + c.len()).sum::<usize>();
        let lines = self.lines.as_ref().map_or(0, |lines| {
            lines
                .values()
                .map(|at| 64 + at.capacity() * size_of::<(u64, u32)>())
                .sum()
        });
        entries + by_id + lines
    }

    fn pop_front(&mut self) {
        let Some(entry) = self.window.pop_front() else {
            return;
        };
        let seq = self.front_seq;
        self.front_seq += 1;
        self.window_bytes -= entry.bytes;
        let Some(lines) = &mut self.lines else {
            return;
        };
        // Occurrences are kept in sequence order, so the oldest result's are at the front.
        for key in entry.spans.iter().flat_map(|s| s.hashes.keys()) {
            if let Some(at) = lines.get_mut(&key) {
                while at.front().is_some_and(|&(s, _)| s == seq) {
                    at.pop_front();
                }
                if at.is_empty() {
                    lines.remove(&key);
                }
            }
        }
    }

    fn index(&mut self, seq: u64, entered: &str) {
        let field = OneField::of(entered).map(|f| f.text);
        let spans = spans_of(field.as_deref().unwrap_or(entered));
        let lines = self.lines.get_or_insert_with(HashMap::new);
        for (j, span) in spans.iter().enumerate() {
            for key in span.hashes.keys() {
                let at = lines.entry(key).or_default();
                if at.len() == MAX_CANDIDATES {
                    at.pop_front();
                }
                at.push_back((seq, j as u32));
            }
        }
        let k = (seq - self.front_seq) as usize;
        self.window[k].spans = spans;
        self.window[k].field = field;
    }

    /// The new output with repeated parts replaced by pointers, or `None` when nothing
    /// repeats. `text_of(position)` gives the text each recorded result entered as. In an
    /// envelope of one text field, the field's lines are compared and replaced.
    pub fn point_to_repeats<'t>(
        &mut self,
        new: &str,
        new_id: ContentId,
        text_of: &dyn Fn(usize) -> &'t str,
    ) -> Option<String> {
        if let Some(call_id) = self.by_id.get(&new_id) {
            let pointer = format!("[same output as the result of {call_id} (id {new_id})]");
            // A pointer must save tokens: short outputs repeat as they are.
            return saves_tokens(&pointer, new.len()).then_some(pointer);
        }
        if new.len() < MIN_OUTPUT_BYTES || self.window.is_empty() {
            return None;
        }
        if self.lines.is_none() {
            self.lines = Some(HashMap::new());
            for k in 0..self.window.len() {
                let text = text_of(self.window[k].position);
                self.index(self.front_seq + k as u64, text);
            }
        }
        match OneField::of(new) {
            Some(envelope) => {
                let pointed = self.point_lines(&envelope.text, text_of)?;
                Some(envelope.with_text(pointed))
            }
            None => self.point_lines(new, text_of),
        }
    }

    /// `new`'s lines with runs that an earlier result's lines repeat replaced by pointers, or
    /// `None` when none does.
    fn point_lines<'t>(&self, new: &str, text_of: &dyn Fn(usize) -> &'t str) -> Option<String> {
        let index = self.lines.as_ref()?;
        let lines: Vec<&str> = new.lines().collect();
        let hashes: Vec<LineHashes> = lines.iter().map(|line| LineHashes::of(line)).collect();
        let mut out = String::with_capacity(new.len() / 2);
        let mut changed = false;
        let mut i = 0;
        while i < lines.len() {
            // (window entry, start, len, whether its lines repeat exactly)
            let mut best: Option<(usize, usize, usize, bool)> = None;
            // The exact repeats first, then the renumbered ones; newest first in each: a tie
            // goes to the exact repeat, then to the result the model saw last.
            let candidates = hashes[i]
                .keys()
                .filter_map(|key| index.get(&key))
                .flat_map(|at| at.iter().rev());
            for &(seq, j) in candidates {
                let e = (seq - self.front_seq) as usize;
                let entry = &self.window[e];
                if entry.hidden {
                    continue;
                }
                let entered = text_of(entry.position);
                let j = j as usize;
                let old_line = |k: usize| entry.line(entered, k);
                // A run repeats its lines exactly, or is a view's lines renumbered (each side
                // numbered on from its first line).
                let exact = lines[i] == old_line(j);
                let len = (0..)
                    .take_while(|&k| {
                        i + k < lines.len()
                            && j + k < entry.spans.len()
                            && (hashes[i + k].text == 0
                                || hashes[i + k].text == entry.spans[j + k].hashes.text)
                            && if exact {
                                lines[i + k] == old_line(j + k)
                            } else {
                                unnumbered(lines[i + k]) == unnumbered(old_line(j + k))
                                    && counts_on(lines[i], lines[i + k], k)
                                    && counts_on(old_line(j), old_line(j + k), k)
                            }
                    })
                    .count();
                if best.is_none_or(|(_, _, l, _)| len > l) {
                    best = Some((e, j, len, exact));
                }
            }
            let pointer = best
                .filter(|&(_, _, len, _)| len >= MIN_RUN_LINES)
                .and_then(|(e, j, len, exact)| {
                    let run_bytes = lines[i..i + len].iter().map(|l| l.len() + 1).sum::<usize>();
                    if run_bytes < MIN_RUN_BYTES {
                        return None;
                    }
                    let source = &self.window[e];
                    let entered = text_of(source.position);
                    let pointer = pointer_line(
                        (i, &lines[i..i + len]),
                        (
                            j,
                            source.line(entered, j),
                            source.line(entered, j + len - 1),
                        ),
                        exact,
                        source,
                    );
                    saves_tokens(&pointer, run_bytes).then_some((pointer, len))
                });
            match pointer {
                Some((pointer, len)) => {
                    out.push_str(&pointer);
                    i += len;
                    changed = true;
                }
                _ => {
                    out.push_str(lines[i]);
                    out.push('\n');
                    i += 1;
                }
            }
        }
        if !new.ends_with('\n') && out.ends_with('\n') {
            out.pop();
        }
        changed.then_some(out)
    }
}

/// The new output with repeated parts of `earlier` (oldest first) replaced by pointers, or
/// `None` when nothing repeats: [`RepeatIndex`] for one output.
pub fn point_to_repeats(new: &str, new_id: ContentId, earlier: &[Earlier<'_>]) -> Option<String> {
    let mut index = RepeatIndex::new();
    for (k, e) in earlier.iter().enumerate() {
        index.push(k, e.call_id, e.id, e.text);
    }
    index.point_to_repeats(new, new_id, &|k| earlier[k].text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(n: usize, tag: &str) -> String {
        (1..=n)
            .map(|i| format!("    let value_{i} = compute_{tag}({i});\n"))
            .collect()
    }

    /// [`file`] of 200 lines with its 100th edited.
    fn edited_at_100() -> String {
        let mut lines: Vec<String> = file(200, "a").lines().map(str::to_owned).collect();
        lines[99] = "    let value_100 = FIXED;".into();
        lines.join("\n") + "\n"
    }

    /// `new` with its repeats of `old` (the result of `call_id`) pointed, and `old`'s id.
    fn point_once(old: &str, new: &str, call_id: &str) -> (Option<String>, ContentId) {
        let id = ContentId::of(old.as_bytes());
        let earlier = [Earlier {
            call_id,
            id,
            text: old,
        }];
        (
            point_to_repeats(new, ContentId::of(new.as_bytes()), &earlier),
            id,
        )
    }

    #[test]
    fn identical_output_becomes_a_pointer() {
        let old = file(50, "a");
        let id = ContentId::of(old.as_bytes());
        let earlier = [Earlier {
            call_id: "call_3",
            id,
            text: &old,
        }];
        assert_eq!(
            point_to_repeats(&old, id, &earlier).unwrap(),
            format!("[same output as the result of call_3 (id {id})]")
        );
    }

    #[test]
    fn a_short_answer_repeats_as_it_is_where_a_pointer_would_cost_more_tokens() {
        // Claude Code's TodoWrite answer: 160 bytes of prose; a pointer naming a call id and a
        // content id is about 90 bytes, and ids take twice the tokens per byte of prose.
        let answer = "Todos have been modified successfully. Ensure that you continue to use the \
                      todo list to track your progress. Please proceed with the current tasks.";
        let id = ContentId::of(answer.as_bytes());
        let earlier = [Earlier {
            call_id: "toolu_01XyZaBcDeFgHiJkLmNoPqRs",
            id,
            text: answer,
        }];
        assert_eq!(point_to_repeats(answer, id, &earlier), None);
    }

    #[test]
    fn a_re_read_with_an_edit_points_to_the_unchanged_runs() {
        let (out, id) = point_once(&file(200, "a"), &edited_at_100(), "call_7");
        assert_eq!(
            out.unwrap(),
            format!(
                "[lines 1-99 same as the result of call_7 (id {id})]\n    let value_100 = FIXED;\n[lines 101-200 same as the result of call_7 (id {id})]\n"
            )
        );
    }

    #[test]
    fn shifted_runs_name_both_ranges_and_short_runs_stay() {
        let old = file(100, "a");
        let new = format!("header line one\n{}", &old);
        let id = ContentId::of(old.as_bytes());
        let earlier = [Earlier {
            call_id: "c1",
            id,
            text: &old,
        }];
        let out = point_to_repeats(&new, ContentId::of(new.as_bytes()), &earlier).unwrap();
        assert!(
            out.starts_with(
                "header line one\n[lines 2-101 same as lines 1-100 of the result of c1"
            ),
            "{out}"
        );
        let unrelated = file(100, "b");
        assert_eq!(
            point_to_repeats(&unrelated, ContentId::of(unrelated.as_bytes()), &earlier),
            None
        );
    }

    /// Codex's envelope of autumn 2025: escaped, the output is one line, and a re-read of the
    /// same file in it repeated nothing. Its field's lines are compared instead, the pointers
    /// go into the field, and the envelope stays JSON with its other fields as they were; the
    /// ids the pointers name are found there too (each must answer a recall).
    #[test]
    fn a_re_read_inside_codex_s_envelope_points_to_the_earlier_read() {
        let envelope = |output: &str| {
            serde_json::json!({"output": output, "metadata": {"exit_code": 0, "duration_seconds": 0.1}})
                .to_string()
        };
        let new = envelope(&edited_at_100());
        let (out, id) = point_once(&envelope(&file(200, "a")), &new, "call_7");
        let out = out.unwrap();
        let value: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            value["output"],
            format!(
                "[lines 1-99 same as the result of call_7 (id {id})]\n    let value_100 = FIXED;\n[lines 101-200 same as the result of call_7 (id {id})]\n"
            )
        );
        assert_eq!(value["metadata"]["exit_code"], 0);
        assert!(out.starts_with("{\"output\":"), "{out}");
        assert_eq!(pointed_ids(&out).collect::<Vec<_>>(), vec![id, id]);
        assert_eq!(
            pointed_call_ids(&out).collect::<Vec<_>>(),
            vec!["call_7", "call_7"]
        );
        // An earlier read outside an envelope counts as well, and an envelope of two big
        // fields is no envelope of one.
        let plain = file(200, "a");
        let plain_id = ContentId::of(plain.as_bytes());
        let from_plain = point_to_repeats(
            &new,
            ContentId::of(new.as_bytes()),
            &[Earlier {
                call_id: "call_2",
                id: plain_id,
                text: &plain,
            }],
        )
        .unwrap();
        assert!(
            from_plain.contains("same as the result of call_2"),
            "{from_plain}"
        );
        let two =
            serde_json::json!({"stdout": file(200, "a"), "stderr": file(200, "b")}).to_string();
        assert!(OneField::of(&two).is_none());
    }

    /// Claude Code's `Read` (and `nl -ba`) of a file after an edit added two lines near its
    /// top: its unchanged lines repeat under new numbers. They point to the earlier view, which names
    /// them by the same places (a view from line 1); views from an offset say each side's
    /// numbers, since a line's number is then not its place in the output.
    #[test]
    fn a_re_read_after_an_edit_above_points_to_the_renumbered_lines() {
        // A view of `lines` numbered from `from`, the number ending in `mark`.
        let view = |lines: &[String], from: usize, mark: char| -> String {
            lines
                .iter()
                .enumerate()
                .map(|(k, l)| format!("{:>6}{mark}{l}\n", from + k))
                .collect()
        };
        let body: Vec<String> = file(120, "a").lines().map(str::to_owned).collect();
        let mut edited = body.clone();
        edited.splice(
            2..2,
            ["    # added one".to_owned(), "    # added two".to_owned()],
        );
        let (out, id) = point_once(
            &view(&body, 1, '\u{2192}'),
            &view(&edited, 1, '\u{2192}'),
            "toolu_01",
        );
        let out = out.unwrap();
        assert!(
            out.ends_with(&format!(
                "     4\u{2192}    # added two\n[lines 5-122 same as lines 3-120 of the result of toolu_01 (id {id})]\n"
            )),
            "{out}"
        );
        // From an offset: lines 500 to 619 of a file, then 500 to 621 after the edit; and
        // `nl -ba`'s views (Codex's, mini-swe-agent's) the same way.
        for (mark, from, call_id) in [('\u{2192}', 500, "toolu_02"), ('\t', 1180, "call_3")] {
            let (out, id) = point_once(
                &view(&body, from, mark),
                &view(&edited, from, mark),
                call_id,
            );
            let out = out.unwrap();
            assert!(
                out.ends_with(&format!(
                    "[lines 5-122, numbered {}-{}, same as lines 3-120, numbered {}-{}, of the result of {call_id} (id {id})]\n",
                    from + 4,
                    from + 121,
                    from + 2,
                    from + 119
                )),
                "{out}"
            );
            assert_eq!(pointed_call_ids(&out).last(), Some(call_id));
        }
        // A table whose first column is a number is no view: rows with other numbers are no
        // repeat (a pointer naming the first and last would lose the rest), the same rows are.
        let table = |ids: Vec<u32>| -> String {
            ids.iter()
                .map(|n| format!("{n}\tcustomer record with a long enough name and balance\n"))
                .collect()
        };
        let ids = |step: u32, from: u32| (0..30).map(|k| (k * step + from) % 1000).collect();
        let old = table(ids(37, 5));
        assert_eq!(point_once(&old, &table(ids(53, 17)), "call_4").0, None);
        let (out, _) = point_once(&old, &format!("header\n{old}"), "call_4");
        let out = out.unwrap();
        assert!(
            out.contains("[lines 2-31 same as lines 1-30 of the result of call_4"),
            "{out}"
        );
        // The same text unnumbered is no view: its lines are compared as they are.
        assert_eq!(numbered("   12 apples"), None);
        assert_eq!(numbered("12\tapples"), Some(("12", "apples")));
        assert_eq!(numbered("\u{2192} arrow"), None);
        assert_eq!(numbered("    12\u{2192}x"), Some(("12", "x")));
    }
}
