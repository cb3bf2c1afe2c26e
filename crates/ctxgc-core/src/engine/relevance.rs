//! How likely the agent is to use a tool output again, from what is known when an event decides:
//! the kind of output, its age in turns, whether the agent has used what it showed (recently or
//! at all), and whether the agent named its file again in the last turns.
//!
//! The model is a table of counts learned from real sessions (`ctxgc replay --fit-relevance`,
//! which leaves each user out in turn and reports how the table fitted without them does on
//! them), shipped as data (`data/relevance.json`): a decision looks up its cell, backing off to
//! coarser cells where the finest has too few examples, so each estimate says what it rests on.
//! No runtime dependency, no state: the same messages give the same estimates.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::xxh3_64;

use crate::tool_kind::tool_kind;
use crate::transcript::{Block, Message, Role, ToolCall};

/// Assistant turns that count as recent: a use or a naming within them says the agent is still
/// working with an output.
pub const RECENT_TURNS: usize = 5;
/// A cell is used when it holds at least this many examples; else a coarser one.
const MIN_SUPPORT: u32 = 40;
/// Bytes of an output read for its identifiers (a 1 MB log says what it says in its first 256K).
const MAX_SCANNED_BYTES: usize = 256 * 1024;

/// The kind of an output, as the model tells outputs apart (the same for every agent's names of
/// the same tool).
pub fn class_of(call: &ToolCall) -> &'static str {
    let kind = tool_kind(call);
    if let Some(shell) = kind.strip_prefix("shell: ") {
        return match shell {
            "file views" => "file-read",
            "searches" => "search",
            "test runs" => "test-run",
            "installs" => "install",
            "git" => "git",
            _ => "shell",
        };
    }
    let name = call.name.to_ascii_lowercase();
    let name = name.rsplit("__").next().unwrap_or(&name);
    match name {
        "read" | "read_file" | "view" | "view_file" | "open_file" | "cat" | "readfile" => {
            "file-read"
        }
        "grep" | "glob" | "search" | "find" | "ls" | "list_dir" | "list_files"
        | "codebase_search" | "file_search" | "grep_search" => "search",
        "edit"
        | "multiedit"
        | "write"
        | "write_file"
        | "create_file"
        | "apply_patch"
        | "notebookedit"
        | "str_replace_editor"
        | "str_replace_based_edit_tool"
        | "replace"
        | "edit_file" => "edit",
        "webfetch" | "websearch" | "web_search" | "fetch" | "browse" | "web_fetch" => "web",
        "task" | "taskoutput" | "agent" | "subagent" | "bashoutput" => "agent",
        _ => "other",
    }
}

/// An output's age at a decision, in assistant turns since it entered (ordered, youngest
/// first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Age {
    /// Under 5 turns.
    #[serde(rename = "0-4")]
    Under5,
    /// 5 to 9.
    #[serde(rename = "5-9")]
    Under10,
    /// 10 to 19.
    #[serde(rename = "10-19")]
    Under20,
    /// 20 to 39.
    #[serde(rename = "20-39")]
    Under40,
    /// 40 or more.
    #[serde(rename = "40+")]
    Older,
}

impl Age {
    /// The bucket of an age of `turns`.
    pub fn of(turns: usize) -> Age {
        match turns {
            0..5 => Age::Under5,
            5..10 => Age::Under10,
            10..20 => Age::Under20,
            20..40 => Age::Under40,
            _ => Age::Older,
        }
    }

    /// As a table key names it.
    pub fn name(self) -> &'static str {
        match self {
            Age::Under5 => "0-4",
            Age::Under10 => "5-9",
            Age::Under20 => "10-19",
            Age::Under40 => "20-39",
            Age::Older => "40+",
        }
    }
}

/// Whether the agent has used what an output showed (an identifier or a path from it, in its
/// own text or calls after the output, not one the user or the system prompt gave it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Used {
    /// Never since it entered.
    #[serde(rename = "unused")]
    Never,
    /// Since it entered, but not in the last [`RECENT_TURNS`] turns.
    #[serde(rename = "used")]
    Before,
    /// In the last [`RECENT_TURNS`] turns.
    #[serde(rename = "used-recently")]
    Recently,
}

impl Used {
    /// As a table key names it.
    pub fn name(self) -> &'static str {
        match self {
            Used::Never => "unused",
            Used::Before => "used",
            Used::Recently => "used-recently",
        }
    }
}

/// What a decision knows of one output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Features {
    /// [`class_of`] its call.
    pub class: &'static str,
    /// Its age.
    pub age: Age,
    /// Whether the agent used what it showed.
    pub used: Used,
    /// Whether the agent named the file (or path) its call was about in the last
    /// [`RECENT_TURNS`] turns, after the output.
    pub named: bool,
    /// Its size, in bytes.
    pub bytes: usize,
}

impl Features {
    /// The table's keys for these features, finest first: each coarser one forgets a feature.
    fn keys(&self) -> [String; 4] {
        let named = if self.named { "named" } else { "unnamed" };
        let (class, age, used) = (self.class, self.age.name(), self.used.name());
        [
            format!("{class}/{age}/{used}/{named}"),
            format!("{class}/*/{used}/{named}"),
            format!("*/*/{used}/{named}"),
            "*/*/*/*".to_owned(),
        ]
    }

    /// In words, for a user (`file-read, 20-39 turns old, used recently, its file named`).
    pub fn describe(&self) -> String {
        let used = match self.used {
            Used::Never => "never used since",
            Used::Before => "used since, not recently",
            Used::Recently => "used in the last 5 turns",
        };
        let named = if self.named {
            "its file named in the last 5 turns"
        } else {
            "its file not named lately"
        };
        format!(
            "{}, {} turns old, {used}, {named}",
            self.class,
            self.age.name()
        )
    }
}

/// An estimate and what it rests on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    /// The share of such outputs the agent used again, in the sessions the table was fitted on.
    pub likelihood: f64,
    /// The cell it comes from.
    pub cell: String,
    /// How many examples that cell holds.
    pub support: u32,
}

/// What an old output's decision rested on: its features and the table's estimate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Judgement {
    /// What was known of the output.
    pub features: Features,
    /// How likely the table found its use.
    pub estimate: Estimate,
}

impl Judgement {
    /// In words: `file-read, 20-39 turns old, never used since, its file not named lately: 3.1%
    /// of 12,345 such outputs were used again`.
    pub fn describe(&self) -> String {
        format!(
            "{}: {:.1}% of {} such outputs were used again ({})",
            self.features.describe(),
            100.0 * self.estimate.likelihood,
            self.estimate.support,
            self.estimate.cell
        )
    }
}

/// The learned table: for each cell, how many outputs of its kind were used again, of how many.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Relevance {
    /// How it was made (the command and the sets).
    pub source: String,
    /// Per cell: `[used again, examples]`.
    pub cells: BTreeMap<String, [u32; 2]>,
}

/// A table that cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("relevance table: {0}")]
pub struct RelevanceError(String);

impl Relevance {
    /// The table shipped with ctxgc (`crates/ctxgc-core/data/relevance.json`).
    pub fn shipped() -> Arc<Relevance> {
        static SHIPPED: OnceLock<Arc<Relevance>> = OnceLock::new();
        SHIPPED
            .get_or_init(|| {
                // The file is checked by a test; a broken one would answer 0.5 everywhere.
                Arc::new(
                    Relevance::from_json(include_str!("../../data/relevance.json")).unwrap_or(
                        Relevance {
                            source: "empty".into(),
                            cells: BTreeMap::new(),
                        },
                    ),
                )
            })
            .clone()
    }

    /// A table from its JSON.
    pub fn from_json(text: &str) -> Result<Relevance, RelevanceError> {
        let table: Relevance =
            serde_json::from_str(text).map_err(|e| RelevanceError(e.to_string()))?;
        if let Some((cell, _)) = table.cells.iter().find(|(_, [used, n])| used > n) {
            return Err(RelevanceError(format!(
                "cell {cell} has more uses than examples"
            )));
        }
        Ok(table)
    }

    /// As JSON, one cell per line (the shipped file's form).
    pub fn to_json(&self) -> String {
        let mut out = format!(
            "{{\n  \"source\": {},\n  \"cells\": {{\n",
            serde_json::Value::String(self.source.clone())
        );
        let last = self.cells.len().saturating_sub(1);
        for (i, (cell, [used, n])) in self.cells.iter().enumerate() {
            let comma = if i == last { "" } else { "," };
            out.push_str(&format!("    \"{cell}\": [{used}, {n}]{comma}\n"));
        }
        out.push_str("  }\n}\n");
        out
    }

    /// The table counted from examples: each output's features at a decision, and whether the
    /// agent used it afterwards.
    pub fn fit(source: &str, examples: impl IntoIterator<Item = (Features, bool)>) -> Relevance {
        let mut cells: BTreeMap<String, [u32; 2]> = BTreeMap::new();
        for (features, used) in examples {
            for key in features.keys() {
                let cell = cells.entry(key).or_default();
                cell[0] += u32::from(used);
                cell[1] += 1;
            }
        }
        Relevance {
            source: source.to_owned(),
            cells,
        }
    }

    /// How likely an output with these features is to be used again: its finest cell with
    /// enough examples, smoothed towards the coarser one.
    pub fn estimate(&self, features: &Features) -> Estimate {
        let keys = features.keys();
        let mut prior = 0.5;
        let mut chosen: Option<Estimate> = None;
        for key in keys.iter().rev() {
            let Some(&[used, n]) = self.cells.get(key) else {
                continue;
            };
            // Smoothed towards the coarser cell, with the weight of 10 examples.
            let likelihood = (f64::from(used) + 10.0 * prior) / (f64::from(n) + 10.0);
            if n >= MIN_SUPPORT || chosen.is_none() {
                chosen = Some(Estimate {
                    likelihood,
                    cell: key.clone(),
                    support: n,
                });
            }
            prior = likelihood;
        }
        chosen.unwrap_or(Estimate {
            likelihood: 0.5,
            cell: "none".into(),
            support: 0,
        })
    }
}

/// The tool outputs of a conversation with what the agent did with each afterwards, built once
/// per decision (or once per session in the lab, which asks at every request).
#[derive(Debug, Default)]
pub struct OutputIndex {
    /// Assistant messages before each message (the turn it belongs to).
    turn_of: Vec<u32>,
    /// Assistant messages in all.
    turns: u32,
    /// Per tool-result message: its class, size, and the assistant messages after it that used
    /// what it showed, or named its file (sorted).
    outputs: HashMap<usize, OutputUses>,
}

#[derive(Debug)]
struct OutputUses {
    class: &'static str,
    bytes: usize,
    used_at: Vec<u32>,
    named_at: Vec<u32>,
}

impl OutputIndex {
    /// The index of `messages`.
    pub fn new(messages: &[Message]) -> OutputIndex {
        let mut turn_of = Vec::with_capacity(messages.len());
        let mut turns = 0u32;
        for m in messages {
            turn_of.push(turns);
            if m.role == Role::Assistant {
                turns += 1;
            }
        }
        // What the user and the system gave: not learnt from a tool.
        let mut given: HashSet<u64> = HashSet::new();
        // Where the agent wrote each token (its texts and its calls' arguments).
        let mut written: HashMap<u64, Vec<u32>> = HashMap::new();
        let mut calls: HashMap<&str, (usize, &ToolCall)> = HashMap::new();
        for (i, m) in messages.iter().enumerate() {
            match m.role {
                Role::System | Role::User => {
                    for block in &m.content {
                        if let Block::Text { text } = block {
                            tokens(text, &mut |t| {
                                given.insert(t);
                            });
                        }
                    }
                }
                Role::Assistant => {
                    for block in &m.content {
                        let text = match block {
                            Block::Text { text } => Cow::Borrowed(text.as_str()),
                            Block::ToolCall(c) => {
                                calls.insert(c.id.as_str(), (i, c));
                                c.argument_text()
                            }
                            _ => continue,
                        };
                        tokens(&text, &mut |t| {
                            let at = written.entry(t).or_default();
                            if at.last() != Some(&(i as u32)) {
                                at.push(i as u32);
                            }
                        });
                    }
                }
                Role::Tool => {}
            }
        }
        let mut outputs = HashMap::new();
        for (i, m) in messages.iter().enumerate() {
            for result in m.tool_results() {
                let Some(&(call_at, call)) = calls.get(result.call_id.as_str()) else {
                    continue;
                };
                let mut own: HashSet<u64> = HashSet::new();
                let mut paths: Vec<u64> = Vec::new();
                let arguments = call.argument_text();
                tokens(&arguments, &mut |t| {
                    own.insert(t);
                });
                basenames(&arguments, &mut |t| paths.push(t));
                let text = result.text();
                let scanned = &text[..floor_boundary(&text, MAX_SCANNED_BYTES)];
                let mut seen: HashSet<u64> = HashSet::new();
                let mut used_at: Vec<u32> = Vec::new();
                tokens(scanned, &mut |t| {
                    if given.contains(&t) || own.contains(&t) || !seen.insert(t) {
                        return;
                    }
                    if let Some(at) = written.get(&t) {
                        used_at.extend(at.iter().filter(|&&a| a as usize > i));
                    }
                });
                used_at.sort_unstable();
                used_at.dedup();
                let mut named_at: Vec<u32> = paths
                    .iter()
                    .filter_map(|p| written.get(p))
                    .flatten()
                    .copied()
                    .filter(|&a| a as usize > i && a as usize != call_at)
                    .collect();
                named_at.sort_unstable();
                named_at.dedup();
                outputs.insert(
                    i,
                    OutputUses {
                        class: class_of(call),
                        bytes: text.len(),
                        used_at,
                        named_at,
                    },
                );
            }
        }
        OutputIndex {
            turn_of,
            turns,
            outputs,
        }
    }

    /// What a decision made before message `at` (`messages.len()`: now) knows of the output in
    /// message `output`; `None` when it is no tool output with a known call.
    pub fn features(&self, output: usize, at: usize) -> Option<Features> {
        let o = self.outputs.get(&output)?;
        let turn = |i: usize| self.turn_of.get(i).copied().unwrap_or(self.turns);
        let now = turn(at);
        let age = now.saturating_sub(turn(output)) as usize;
        let recent_from = now.saturating_sub(RECENT_TURNS as u32);
        let before = |list: &[u32]| {
            let k = list.partition_point(|&a| (a as usize) < at);
            list[..k].last().map(|&a| turn(a as usize))
        };
        let used = match before(&o.used_at) {
            None => Used::Never,
            Some(t) if t >= recent_from => Used::Recently,
            Some(_) => Used::Before,
        };
        let named = before(&o.named_at).is_some_and(|t| t >= recent_from);
        Some(Features {
            class: o.class,
            age: Age::of(age),
            used,
            named,
            bytes: o.bytes,
        })
    }

    /// The tool-output messages indexed, in order.
    pub fn outputs(&self) -> Vec<usize> {
        let mut out: Vec<usize> = self.outputs.keys().copied().collect();
        out.sort_unstable();
        out
    }
}

fn floor_boundary(s: &str, at: usize) -> usize {
    let mut at = at.min(s.len());
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// Calls `f` with the hash of each code-like identifier of `text`: 6 characters or more, with an
/// underscore, a digit or an inner capital (`parse_args`, `ScanTickData`, `E0308`-like codes
/// are too short to matter), and each file name a path in it ends with.
fn tokens(text: &str, f: &mut dyn FnMut(u64)) {
    let bytes = text.as_bytes();
    let mut start = None;
    for (i, &b) in bytes.iter().chain(std::iter::once(&b' ')).enumerate() {
        let word = b.is_ascii_alphanumeric() || b == b'_';
        match (word, start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                let w = &bytes[s..i];
                if w.len() >= 6 && code_like(w) {
                    f(xxh3_64(w));
                }
                start = None;
            }
            _ => {}
        }
    }
    basenames(text, f);
}

fn code_like(w: &[u8]) -> bool {
    !w[0].is_ascii_digit()
        && (w.contains(&b'_')
            || w.iter().any(u8::is_ascii_digit)
            || w[1..].iter().any(u8::is_ascii_uppercase))
}

/// Calls `f` with the hash of the file name each path in `text` ends with (`src/app/main.rs`:
/// `main.rs`): how an agent names a file again, whatever directory it starts from.
fn basenames(text: &str, f: &mut dyn FnMut(u64)) {
    let bytes = text.as_bytes();
    let mut start = None;
    for (i, &b) in bytes.iter().chain(std::iter::once(&b' ')).enumerate() {
        let part = b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'/' | b'-');
        match (part, start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                let w = &bytes[s..i];
                let name = w.rsplit(|&c| c == b'/').next().unwrap_or(w);
                let name = name.strip_suffix(b".").unwrap_or(name);
                // A file name: a stem and an extension of letters (`main.rs`, `App.tsx`).
                if let Some(dot) = name.iter().rposition(|&c| c == b'.')
                    && dot > 0
                    && (1..=5).contains(&(name.len() - dot - 1))
                    && name[dot + 1..].iter().all(u8::is_ascii_alphabetic)
                    && (w.contains(&b'/') || name.len() >= 6)
                {
                    f(xxh3_64(&[b"file:", name].concat()));
                }
                start = None;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::{Block, Message, Role, ToolCall};

    fn call(id: &str, name: &str, args: &str) -> Message {
        Message {
            role: Role::Assistant,
            content: vec![Block::ToolCall(ToolCall {
                id: id.into(),
                name: name.into(),
                arguments: args.into(),
                implicit: false,
            })],
            usage: None,
        }
    }

    fn conversation(later: &[&str]) -> Vec<Message> {
        let mut m = vec![
            Message::text(Role::System, "You are a coding agent."),
            Message::text(Role::User, "Fix the crash in the parser."),
            call("c1", "Read", r#"{"file_path": "/repo/src/parser.rs"}"#),
            Message::tool_result(
                "c1",
                Some("Read".into()),
                "fn parse_header(input: &str) {}\nfn other() {}",
                false,
            ),
        ];
        for text in later {
            m.push(Message::text(Role::Assistant, *text));
            m.push(Message::text(Role::User, "go on"));
        }
        m
    }

    #[test]
    fn a_use_and_a_naming_are_seen_with_their_age() {
        let m = conversation(&[
            "I will call parse_header again",
            "nothing",
            "parser.rs once more",
        ]);
        let index = OutputIndex::new(&m);
        let f = index.features(3, m.len()).expect("an output");
        assert_eq!(f.class, "file-read");
        assert_eq!(f.used, Used::Recently);
        assert!(f.named);
        assert_eq!(f.age, Age::Under5);
        // Before the use, nothing was known.
        let early = index.features(3, 4).expect("an output");
        assert_eq!((early.used, early.named), (Used::Never, false));
    }

    #[test]
    fn what_the_user_gave_is_no_use_of_the_output() {
        let mut m = conversation(&["parse_header is the culprit"]);
        m[1] = Message::text(Role::User, "Fix parse_header.");
        let index = OutputIndex::new(&m);
        assert_eq!(
            index.features(3, m.len()).map(|f| f.used),
            Some(Used::Never)
        );
    }

    #[test]
    fn uses_long_ago_are_not_recent() {
        let mut later = vec!["parse_header"];
        later.extend(std::iter::repeat_n("working", 8));
        let m = conversation(&later);
        let f = OutputIndex::new(&m)
            .features(3, m.len())
            .expect("an output");
        assert_eq!(
            (f.used, f.named, f.age),
            (Used::Before, false, Age::Under10)
        );
    }

    #[test]
    fn estimates_back_off_to_cells_with_support() {
        let f = |used| Features {
            class: "file-read",
            age: Age::Under40,
            used,
            named: false,
            bytes: 100,
        };
        let examples = (0..100)
            .map(|i| (f(Used::Never), i % 10 == 0))
            .chain((0..5).map(|_| (f(Used::Recently), true)));
        let table = Relevance::fit("test", examples);
        let never = table.estimate(&f(Used::Never));
        assert_eq!(never.cell, "file-read/20-39/unused/unnamed");
        assert!((never.likelihood - 0.1).abs() < 0.05, "{never:?}");
        // Five examples are too few for their own cell: the coarsest with support answers.
        let recent = table.estimate(&f(Used::Recently));
        assert_eq!(recent.cell, "*/*/*/*");
        let back = Relevance::from_json(&table.to_json()).expect("round trip");
        assert_eq!(back, table);
    }

    #[test]
    fn the_shipped_table_reads() {
        let text = include_str!("../../data/relevance.json");
        let table = Relevance::from_json(text).expect("the shipped table");
        assert!(table.cells.contains_key("*/*/*/*"), "{}", table.source);
    }

    #[test]
    fn classes_are_the_same_across_agents() {
        let c = |name: &str, args: &str| {
            class_of(&ToolCall {
                id: "c".into(),
                name: name.into(),
                arguments: args.into(),
                implicit: false,
            })
        };
        assert_eq!(c("Read", "{}"), "file-read");
        assert_eq!(c("read_file", "{}"), "file-read");
        assert_eq!(
            c(
                "shell",
                r#"{"command": ["bash", "-lc", "sed -n 1,80p a.rs"]}"#
            ),
            "file-read"
        );
        assert_eq!(c("Grep", "{}"), "search");
        assert_eq!(c("bash", r#"{"command": "cargo test"}"#), "test-run");
        assert_eq!(c("mcp__ctxgc__Edit", "{}"), "edit");
        assert_eq!(c("TaskOutput", "{}"), "agent");
    }
}
