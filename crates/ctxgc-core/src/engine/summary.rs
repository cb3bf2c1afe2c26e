//! The structured, reference-only summary that replaces the middle at a compaction.
//!
//! Sections: Task snapshot (the latest user request, copied verbatim, never written by a
//! model), Goal, Constraints and preferences, Progress (done / in progress / blocked), Key
//! decisions, Discoveries and critical context, Relevant files (read / modified, computed from
//! the tool calls), Next steps, and the list of summarised tool outputs with their recall ids.
//!
//! A preamble marks the whole as background, not instructions (summaries that read like
//! instructions get executed again), and a closing marker line ends it. The model-writable
//! sections come either from an LLM ([`llm_instruction`]) or from the deterministic
//! [`extractive_body`]; [`compose`] adds the computed parts either way. A later compaction
//! updates the previous summary instead of starting from scratch.

use std::collections::BTreeMap;

use crate::engine::abstracts::{ResultMeta, abstract_line, clip_one_line};
use crate::engine::facts::{self, FileAccess};
use crate::tokens::TokenCounter;
use crate::transcript::{Message, Role, ToolCall};

/// First line of every summary; also how a summary message is recognised.
pub const SUMMARY_HEADER: &str = "[ctxgc context summary: reference only]";
/// Last line of every summary.
pub const SUMMARY_END: &str = "[end of ctxgc context summary]";

const MODEL_SECTIONS: [&str; 6] = [
    "Goal",
    "Constraints and preferences",
    "Progress",
    "Key decisions",
    "Discoveries and critical context",
    "Next steps",
];

/// What a summary is made from.
pub struct SummaryInput<'a> {
    /// The prompt as the model sees it now.
    pub messages: &'a [Message],
    /// First message of the middle.
    pub from: usize,
    /// End (exclusive) of the middle.
    pub to: usize,
    /// Facts of tool outputs, by call id.
    pub metas: &'a BTreeMap<String, ResultMeta>,
    /// Target size of the summary, in tokens.
    pub budget: usize,
    /// How the agent gets a summarised output back ([`crate::engine::Policy::recall_hint`];
    /// empty: it has no way, and the summary names none).
    pub recall_hint: &'a str,
}

impl SummaryInput<'_> {
    /// The previous summary, when the middle holds one.
    pub fn previous_text(&self) -> Option<&str> {
        self.messages[self.from..self.to]
            .iter()
            .find_map(|m| match m.content.first() {
                Some(crate::transcript::Block::Text { text })
                    if text.starts_with(SUMMARY_HEADER) =>
                {
                    Some(text.as_str())
                }
                _ => None,
            })
    }

    fn calls(&self) -> BTreeMap<&str, &ToolCall> {
        self.messages[..self.to]
            .iter()
            .flat_map(Message::tool_calls)
            .map(|c| (c.id.as_str(), c))
            .collect()
    }

    /// The facts of a tool result: as recorded at insertion, else computed from what the prompt
    /// holds (a history the engine did not see inserted, as a proxy receives it), so that every
    /// hidden output is listed with an id and its errors are not lost.
    fn meta(&self, result: &crate::transcript::ToolResult) -> std::borrow::Cow<'_, ResultMeta> {
        match self.metas.get(&result.call_id) {
            Some(meta) => std::borrow::Cow::Borrowed(meta),
            None => std::borrow::Cow::Owned(ResultMeta::of(&result.text())),
        }
    }

    fn middle(&self) -> impl Iterator<Item = &Message> {
        self.messages[self.from..self.to]
            .iter()
            .filter(|m| !m.text_content().starts_with(SUMMARY_HEADER))
    }
}

/// Splits one of our summaries into `(section title, lines)`.
pub fn parse_sections(summary: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for line in summary.lines() {
        if let Some(title) = line.strip_prefix("## ") {
            out.push((title.trim().to_owned(), Vec::new()));
        } else if let Some((_, lines)) = out.last_mut()
            && !line.trim().is_empty()
            && line != SUMMARY_END
        {
            lines.push(line.to_owned());
        }
    }
    out
}

fn previous_items(previous: Option<&str>, section: &str, prefix: &str) -> Vec<String> {
    let Some(previous) = previous else {
        return Vec::new();
    };
    parse_sections(previous)
        .into_iter()
        .filter(|(title, _)| title.starts_with(section))
        .flat_map(|(_, lines)| lines)
        .filter_map(|l| l.strip_prefix(prefix).map(|s| s.trim().to_owned()))
        .collect()
}

const SNAPSHOT_HEADING: &str = "## Task snapshot (latest user request, verbatim)";

/// The verbatim request a previous summary's snapshot holds (not its pointers to messages).
fn previous_snapshot(previous: &str) -> Option<String> {
    let start = previous.find(SNAPSHOT_HEADING)? + SNAPSHOT_HEADING.len() + 1;
    let rest = &previous[start..];
    let end = rest.find("\n\n## ").unwrap_or(rest.len());
    let text = &rest[..end];
    (!text.starts_with("(the latest user message is kept verbatim")).then(|| text.to_owned())
}

/// What the user asked in a user message: its text without the reminders clients wrap into
/// user turns (`<system-reminder>` blocks: attribution, file-change notices), and nothing for
/// summaries and the instruction blocks clients pin (environment context, AGENTS.md).
fn user_request(message: &Message) -> Option<String> {
    if message.role != Role::User || crate::engine::segments::is_pinned(message) {
        return None;
    }
    let text = message.text_content();
    if text.starts_with(SUMMARY_HEADER) || text.trim().is_empty() {
        return None;
    }
    if !text.contains("<system-reminder>") {
        return Some(text); // verbatim
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(start) = rest.find("<system-reminder>") {
        out.push_str(&rest[..start]);
        match rest[start..].find("</system-reminder>") {
            Some(end) => rest = &rest[start + end + "</system-reminder>".len()..],
            None => rest = "",
        }
    }
    out.push_str(rest);
    let out = out.trim();
    (!out.is_empty()).then(|| out.to_owned())
}

/// The latest user request: its index and text.
fn latest_user(messages: &[Message]) -> Option<(usize, String)> {
    messages
        .iter()
        .enumerate()
        .rev()
        .find_map(|(i, m)| user_request(m).map(|text| (i, text)))
}

/// Files read and modified in the middle, merged with the previous summary's lists.
fn files(input: &SummaryInput<'_>) -> (Vec<String>, Vec<String>) {
    let mut read = previous_items(input.previous_text(), "Relevant files", "Read: ")
        .into_iter()
        .flat_map(|l| l.split(", ").map(str::to_owned).collect::<Vec<_>>())
        .collect::<Vec<_>>();
    let mut modified = previous_items(input.previous_text(), "Relevant files", "Modified: ")
        .into_iter()
        .flat_map(|l| l.split(", ").map(str::to_owned).collect::<Vec<_>>())
        .collect::<Vec<_>>();
    for call in input.middle().flat_map(Message::tool_calls) {
        for access in facts::file_accesses(call) {
            let list = match access {
                FileAccess::Read(_) => &mut read,
                FileAccess::Write(_) => &mut modified,
                // Running a script is neither.
                FileAccess::Run(_) => continue,
            };
            let path = access.path().to_owned();
            if !list.contains(&path) {
                list.push(path);
            }
        }
    }
    read.retain(|p| !modified.contains(p));
    (read, modified)
}

/// The instruction appended, as the last user message, to the current prompt when an LLM
/// writes the summary (so the request reuses the conversation's cached prefix).
pub fn llm_instruction(input: &SummaryInput<'_>) -> String {
    let update = match input.previous_text() {
        Some(_) => {
            "The earliest of those messages is the previous summary: update it with what happened since, keep what is still true, drop what is obsolete. "
        }
        None => "",
    };
    format!(
        "Summarise messages {} to {} of this conversation (after the first exchange, before the most recent turns) \
for a continuation in which those messages are removed. {update}Write about {} tokens of facts, not instructions, \
under exactly these headings:\n## Goal\n## Constraints and preferences\n## Progress\n(Done: / In progress: / Blocked: lists)\n\
## Key decisions\n## Discoveries and critical context\n(exact error messages, values, identifiers, commands)\n## Next steps\n\
Do not call tools. Do not write a task snapshot or lists of files or tool outputs: they are added automatically.",
        input.from,
        input.to.saturating_sub(1),
        input.budget
    )
}

/// The messages of an LLM summarizer request: the current prompt plus the instruction.
pub fn llm_request_messages(input: &SummaryInput<'_>) -> Vec<Message> {
    let mut messages = input.messages.to_vec();
    // A pending call at the very end would be an orphan in the summarizer request.
    while messages
        .last()
        .is_some_and(|m| m.role == Role::Assistant && m.tool_calls().any(|c| !c.implicit))
    {
        messages.pop();
    }
    messages.push(Message::text(Role::User, llm_instruction(input)));
    messages
}

fn first_sentence(text: &str, max: usize) -> Option<String> {
    let text = text.trim().trim_start_matches("THOUGHT:").trim();
    // Skip markup-only lines (`<pr_description>`, fences) and lead-ins ending with a colon.
    let markup = |l: &str| l.starts_with("```") || (l.starts_with('<') && l.ends_with('>'));
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !(l.is_empty() || markup(l) || l.ends_with(':')))?;
    let end = line.find(". ").map_or(line.len(), |i| i + 1);
    Some(clip_one_line(&line[..end], max))
}

/// Keeps the last `n` distinct items, in order.
fn last_distinct(items: Vec<String>, n: usize) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    for item in items.into_iter().rev() {
        if !seen.contains(&item) {
            seen.push(item);
        }
        if seen.len() == n {
            break;
        }
    }
    seen.reverse();
    seen
}

struct Section {
    title: &'static str,
    lines: Vec<String>,
}

fn render(sections: &[Section]) -> String {
    let mut out = String::new();
    for s in sections {
        out.push_str("## ");
        out.push_str(s.title);
        out.push('\n');
        if s.lines.is_empty() {
            out.push_str("- (none recorded)\n");
        }
        for l in &s.lines {
            out.push_str(l);
            out.push('\n');
        }
        out.push('\n');
    }
    out
}

/// The model-writable sections, filled deterministically from the transcript (no LLM): the
/// default summarizer and the fallback when the LLM fails.
pub fn extractive_body(input: &SummaryInput<'_>, counter: &TokenCounter) -> String {
    let previous = input.previous_text();
    let calls = input.calls();
    let item = |s: &str| format!("- {s}");

    let goal = input
        .messages
        .iter()
        .find_map(user_request)
        .and_then(|text| first_sentence(&text, 240))
        .map(|s| {
            vec![item(&format!(
                "{s} (the first user message, kept verbatim above, has it in full)"
            ))]
        })
        .unwrap_or_default();

    let keywords = [
        "must",
        "do not",
        "don't",
        "never",
        "always",
        "only",
        "should not",
        "avoid",
        "prefer",
    ];
    let mut constraints = previous_items(previous, "Constraints", "- ");
    for text in input.messages[..input.to].iter().filter_map(user_request) {
        for line in text.lines() {
            let lower = line.to_lowercase();
            if keywords.iter().any(|k| lower.contains(k)) && line.trim().len() > 12 {
                constraints.push(clip_one_line(
                    line.trim().trim_start_matches(['-', '*', ' ']),
                    200,
                ));
            }
        }
    }
    let constraints = last_distinct(constraints, 8);

    let mut done = previous_items(previous, "Progress", "- done: ");
    let mut blocked: Vec<(String, String)> = Vec::new();
    let mut decisions = previous_items(previous, "Key decisions", "- ");
    let mut discoveries = previous_items(previous, "Discoveries", "- ");
    let mut last_assistant_text = None;
    for m in input.middle() {
        if m.role == Role::Assistant {
            let text = m.text_content();
            if let Some(s) = first_sentence(&text, 200) {
                decisions.push(s);
            }
            if !text.trim().is_empty() {
                last_assistant_text = Some(text);
            }
        }
        for result in m.tool_results() {
            let Some(call) = calls.get(result.call_id.as_str()) else {
                continue;
            };
            let meta_value = input.meta(result);
            let meta = Some(meta_value.as_ref());
            for access in facts::file_accesses(call) {
                if let FileAccess::Write(path) = access {
                    done.push(format!("modified {path}"));
                }
            }
            if let Some(command) = facts::command_of(call) {
                let command = clip_one_line(&command, 100);
                let code = meta.and_then(|m| m.exit_code);
                let failed = result.is_error || code.is_some_and(|c| c != 0);
                blocked.retain(|(c, _)| *c != command);
                if failed {
                    let why = meta.and_then(|m| m.first_error.clone()).unwrap_or_default();
                    blocked.push((
                        command,
                        format!(
                            "{}{}",
                            // An unknown code is not written as 1.
                            code.map_or("failed".to_owned(), |c| format!("exit {c}")),
                            if why.is_empty() {
                                String::new()
                            } else {
                                format!(": {}", clip_one_line(&why, 120))
                            }
                        ),
                    ));
                } else {
                    done.push(format!(
                        "ran `{command}`{}",
                        code.map(|c| format!(" (exit {c})")).unwrap_or_default()
                    ));
                }
            }
            // Code shown by a read mentions errors without any having happened.
            let only_reads = facts::file_accesses(call)
                .iter()
                .all(|a| matches!(a, FileAccess::Read(_)))
                && !facts::file_accesses(call).is_empty();
            if let Some(error) = meta
                .and_then(|m| m.first_error.as_ref())
                .filter(|_| !only_reads)
            {
                discoveries.push(clip_one_line(error, 160));
            }
        }
    }
    let mut progress: Vec<String> = last_distinct(done, 12)
        .into_iter()
        .map(|d| format!("- done: {d}"))
        .collect();
    if let Some(text) = &last_assistant_text
        && let Some(s) = first_sentence(text, 300)
    {
        progress.push(format!("- in progress: {s}"));
    }
    progress.extend(
        blocked
            .iter()
            .rev()
            .take(6)
            .rev()
            .map(|(c, why)| format!("- blocked: `{c}` -> {why}")),
    );

    let next: Vec<String> = last_assistant_text
        .iter()
        .flat_map(|t| t.lines())
        .map(str::trim)
        .filter(|l| {
            let lower = l.to_lowercase();
            ["next", "then ", "i will", "i'll", "let me", "now "]
                .iter()
                .any(|k| lower.starts_with(k))
        })
        .map(|l| item(&clip_one_line(l, 200)))
        .take(3)
        .collect();

    let mut sections = vec![
        Section {
            title: MODEL_SECTIONS[0],
            lines: goal,
        },
        Section {
            title: MODEL_SECTIONS[1],
            lines: constraints.iter().map(|c| item(c)).collect(),
        },
        Section {
            title: MODEL_SECTIONS[2],
            lines: progress,
        },
        Section {
            title: MODEL_SECTIONS[3],
            lines: last_distinct(decisions, 10)
                .iter()
                .map(|d| item(d))
                .collect(),
        },
        Section {
            title: MODEL_SECTIONS[4],
            lines: last_distinct(discoveries, 10)
                .iter()
                .map(|d| item(d))
                .collect(),
        },
        Section {
            title: MODEL_SECTIONS[5],
            lines: next,
        },
    ];
    // Fit the budget: drop the oldest items of the least important lists first.
    let mut tokens = counter.count_text(&render(&sections));
    for victim in [3usize, 4, 2, 1] {
        while tokens > input.budget && !sections[victim].lines.is_empty() {
            let removed = sections[victim].lines.remove(0);
            tokens = tokens.saturating_sub(counter.count_text(&removed) + 1);
        }
    }
    render(&sections)
}

/// The whole summary: preamble, task snapshot, the model-written `body` (with the computed file
/// lists placed before its Next steps), the summarised tool outputs and the closing marker.
pub fn compose(input: &SummaryInput<'_>, body: &str, counter: &TokenCounter) -> String {
    let mut out = String::new();
    out.push_str(SUMMARY_HEADER);
    out.push('\n');
    out.push_str(&format!(
        "Messages {} to {} of this conversation were compacted into this summary. It is background, not instructions: \
do not redo work it lists as done, and where it disagrees with the latest user message, the user message wins. \
All tools remain available{}.\n\n",
        input.from,
        input.to.saturating_sub(1),
        if input.recall_hint.is_empty() {
            String::new()
        } else {
            format!(
                "; summarised tool outputs can be recalled whole with {}",
                input.recall_hint
            )
        }
    ));
    out.push_str(SNAPSHOT_HEADING);
    out.push('\n');
    let latest = latest_user(input.messages);
    let previous_index = input.messages[input.from..input.to]
        .iter()
        .position(|m| m.text_content().starts_with(SUMMARY_HEADER))
        .map(|i| i + input.from);
    // When no user message came after the previous summary, the latest request is the one
    // its snapshot holds: carry it over verbatim.
    let carried = match (previous_index, &latest) {
        (Some(p), Some((i, _))) if *i < p => input.previous_text().and_then(previous_snapshot),
        (Some(_), None) => input.previous_text().and_then(previous_snapshot),
        _ => None,
    };
    match carried.map(|text| (input.from, text)).or(latest) {
        Some((i, text)) if i >= input.from && i < input.to => {
            out.push_str(&text);
            out.push('\n');
        }
        Some((i, _)) if i < input.from => {
            out.push_str("(the latest user message is kept verbatim above this summary)\n")
        }
        Some(_) => out.push_str("(the latest user message is kept verbatim after this summary)\n"),
        None => out.push_str("(no user request yet)\n"),
    }
    out.push('\n');

    let (read, modified) = files(input);
    let mut file_section = String::from("## Relevant files\n");
    file_section.push_str(&format!(
        "Read: {}\n",
        if read.is_empty() {
            "(none)".into()
        } else {
            read.join(", ")
        }
    ));
    file_section.push_str(&format!(
        "Modified: {}\n\n",
        if modified.is_empty() {
            "(none)".into()
        } else {
            modified.join(", ")
        }
    ));
    let body = body.trim();
    match body.find("## Next steps") {
        Some(at) => {
            out.push_str(&body[..at]);
            out.push_str(&file_section);
            out.push_str(&body[at..]);
        }
        None => {
            out.push_str(body);
            out.push_str("\n\n");
            out.push_str(&file_section);
        }
    }
    out.push_str("\n\n## Tool outputs (recall by id)\n");
    let calls = input.calls();
    let mut outputs = previous_items(input.previous_text(), "Tool outputs", "- ");
    for result in input.middle().flat_map(Message::tool_results) {
        let tool = result.tool_name.as_deref().unwrap_or("tool");
        // The summary's opening names the way back once: not each line.
        outputs.push(abstract_line(
            tool,
            calls.get(result.call_id.as_str()).copied(),
            &input.meta(result),
            None,
        ));
    }
    // The list is the first thing to give way to the budget, oldest first.
    let fixed = counter.count_text(&out);
    let mut room = input.budget.saturating_sub(fixed);
    let mut kept: Vec<&String> = Vec::new();
    for line in outputs.iter().rev() {
        let cost = counter.count_text(line) + 2;
        if cost > room {
            break;
        }
        room -= cost;
        kept.push(line);
    }
    if kept.len() < outputs.len() {
        out.push_str(&format!(
            "- ({} older outputs not listed)\n",
            outputs.len() - kept.len()
        ));
    }
    for line in kept.into_iter().rev() {
        out.push_str("- ");
        out.push_str(line);
        out.push('\n');
    }
    out.push_str(SUMMARY_END);
    out
}
