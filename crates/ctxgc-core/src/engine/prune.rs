//! The prune phase's edits: which old outputs an event replaces (superseded file reads, older
//! copies of identical outputs, outputs beyond the protected budget, by their one-line
//! abstracts), huge tool-call arguments and runaway texts cut, and the edits applied to the
//! messages. What is pointed to by a later repeat is never pruned from under its pointer.

use std::collections::BTreeMap;
use std::collections::HashMap;

use serde_json::Value;

use crate::engine::abstracts::{ResultMeta, abstract_line};
use crate::engine::facts::{self, FileAccess};
use crate::engine::input::{FRAMING, PlanInput};
use crate::engine::policy::Policy;
use crate::engine::relevance::{Judgement, OutputIndex};
use crate::tokens::TokenCounter;
use crate::transcript::{Block, Message, Role, ToolCall};
use crate::trim::json::trim_json;
use crate::trim::outline;

/// Why a message is pruned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PruneReason {
    /// A file read later edited, or read again whole or in the same part.
    Superseded,
    /// An older copy of an identical output.
    Duplicate,
    /// Beyond the protected budget of recent tool output.
    Old,
    /// Tool-call arguments over the size limit.
    HugeArguments,
    /// Assistant text over the runaway limit.
    RunawayText,
    /// The prompt did not fit the window: an output the event would have kept, cut to make it
    /// fit ([`Plan::fits_window`]).
    Window,
}

/// A change to one message.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PruneEdit {
    /// The message.
    pub index: usize,
    /// Why.
    pub reason: PruneReason,
    /// For results: the new text. For arguments: the call id and its new arguments.
    pub replacement: Replacement,
    /// Tokens before and after (estimates used for the runway rule).
    pub tokens_before: usize,
    /// See `tokens_before`.
    pub tokens_after: usize,
    /// For an old output: what the relevance table said of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub judged: Option<Judgement>,
}

/// The new content of a pruned part.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub enum Replacement {
    /// The tool result's whole text.
    Result(String),
    /// An assistant message's text (its text blocks become this one).
    Text(String),
    /// One call's arguments.
    Arguments {
        /// The call.
        call_id: String,
        /// New arguments (valid JSON).
        arguments: String,
    },
}

/// An output a prune kept because the agent is likely to use it again.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct KeptOutput {
    /// The message.
    pub index: usize,
    /// What would have pruned it: its age ([`PruneReason::Old`]), or its file edited since
    /// ([`PruneReason::Superseded`]).
    pub instead_of: PruneReason,
    /// Why.
    pub judged: Judgement,
}

/// The prune edits of an event between `head_end` and `tail_start`: what is superseded,
/// duplicated or older than the protected `budget` of recent output, and huge arguments.
pub(crate) fn prune_edits(
    input: &PlanInput<'_>,
    policy: &Policy,
    counter: &TokenCounter,
    (head_end, tail_start): (usize, usize),
    budget: usize,
    (keep_current_reads, keep_likely): (bool, bool),
    kept: &mut Vec<KeptOutput>,
) -> Vec<PruneEdit> {
    let messages = input.messages;
    let calls: BTreeMap<&str, (usize, &ToolCall)> = messages
        .iter()
        .enumerate()
        .flat_map(|(i, m)| m.tool_calls().map(move |c| (c.id.as_str(), (i, c))))
        .collect();

    // Protected: the newest tool outputs, up to the budget.
    let mut protected = vec![false; messages.len()];
    let mut used = 0usize;
    for (i, m) in messages.iter().enumerate().rev() {
        if m.role == Role::Tool && used < budget {
            protected[i] = true;
            used += input.tokens[i];
        }
    }

    // Files touched after each message: for superseded reads.
    let mut newest_for_id: BTreeMap<crate::content_id::ContentId, usize> = BTreeMap::new();
    for (i, m) in messages.iter().enumerate() {
        for r in m.tool_results() {
            if let Some(meta) = input.metas.get(&r.call_id) {
                newest_for_id.insert(meta.id, i);
            }
        }
    }
    let accesses: Vec<(usize, FileAccess, &ToolCall)> = messages
        .iter()
        .enumerate()
        .flat_map(|(i, m)| {
            m.tool_calls()
                .flat_map(move |c| facts::file_accesses(c).into_iter().map(move |a| (i, a, c)))
        })
        .collect();
    // The commands run, by the message of their call: a rerun of the same command supersedes
    // the earlier run's output (what a script printed before it was run again).
    let mut last_run: HashMap<String, usize> = HashMap::new();
    for (i, m) in messages.iter().enumerate() {
        for c in m.tool_calls() {
            if let Some(command) = facts::command_of(c) {
                last_run.insert(command, i);
            }
        }
    }

    // What the agent did with each output, read only when an old output is to go.
    let mut uses: Option<OutputIndex> = None;
    let mut edits = Vec::new();
    for index in head_end..tail_start {
        let m = &messages[index];
        if m.role == Role::Assistant {
            edits.extend(huge_argument_edits(m, index, policy, counter));
            edits.extend(runaway_text_edit(m, index, policy, counter));
            continue;
        }
        let Some(result) = m.tool_results().next() else {
            continue;
        };
        let tool = result.tool_name.as_deref().unwrap_or("tool");
        if policy.is_protected_tool(tool) {
            continue;
        }
        let call = calls.get(result.call_id.as_str()).map(|(_, c)| *c);
        let call_index = calls
            .get(result.call_id.as_str())
            .map(|(i, _)| *i)
            .unwrap_or(index);
        let visible = result.text();
        let meta = input
            .metas
            .get(&result.call_id)
            .cloned()
            .unwrap_or_else(|| ResultMeta::of(&visible));
        let read_path = call.and_then(|c| match facts::file_accesses(c).as_slice() {
            [FileAccess::Read(p)] => Some(p.clone()),
            _ => None,
        });
        // A later write makes a read stale; a later read only when it shows at least as much
        // (the whole file, or the same part again): reading a big file in parts leaves each
        // part current.
        let (reread, rewritten) = read_path.as_ref().map_or((false, false), |path| {
            accesses
                .iter()
                .filter(|(i, a, _)| *i > call_index && a.path() == path)
                .fold(
                    (false, false),
                    |(reread, rewritten), (_, a, later)| match a {
                        FileAccess::Write(_) => (reread, true),
                        FileAccess::Read(_) => (
                            reread
                                || facts::reads_whole_file(later)
                                || call.is_some_and(|c| c.arguments == later.arguments),
                            rewritten,
                        ),
                        FileAccess::Run(_) => (reread, rewritten),
                    },
                )
        });
        let superseded = reread || rewritten;
        // A script's run whose script was edited later printed what an older version did (as
        // a read of a file edited later, even among the recent outputs).
        let script_edited =
            call.map(facts::file_accesses)
                .is_some_and(|own| match own.as_slice() {
                    [FileAccess::Run(path)] => accesses.iter().any(|(i, a, _)| {
                        *i > call_index && matches!(a, FileAccess::Write(p) if p == path)
                    }),
                    _ => false,
                });
        // Run again later, the same command: the agent has moved past this run's output. Not
        // inside the protected recent outputs, which the agent may still be comparing.
        let rerun = !protected[index]
            && read_path.is_none()
            && call
                .and_then(facts::command_of)
                .and_then(|command| last_run.get(&command))
                .is_some_and(|&last| last > call_index);
        let newest = newest_for_id.get(&meta.id).copied().unwrap_or(index);
        let mut judged = None;
        let (reason, text) = if newest > index {
            let later = messages[newest]
                .tool_results()
                .next()
                .map(|r| r.call_id.clone())
                .unwrap_or_default();
            (
                PruneReason::Duplicate,
                format!(
                    "[same output as the later result of {later} (id {})]",
                    meta.id
                ),
            )
        } else if superseded {
            // Edited since but not read again: the agent may still work from the lines the
            // edit left alone, which the table says as it says of any old output.
            if !reread && keep_likely && policy.keep_likely_stale <= 1.0 {
                judged = judge(&mut uses, messages, index, policy);
                if let Some(j) =
                    judged.take_if(|j| j.estimate.likelihood >= policy.keep_likely_stale)
                {
                    kept.push(KeptOutput {
                        index,
                        instead_of: PruneReason::Superseded,
                        judged: j,
                    });
                    continue;
                }
            }
            let abstract_text = abstract_line(tool, call, &meta, policy.recall_way.as_ref());
            (
                PruneReason::Superseded,
                with_outline(
                    format!("{abstract_text} (stale: the file was edited or read again later)"),
                    &visible,
                ),
            )
        } else if script_edited {
            let abstract_text = abstract_line(tool, call, &meta, policy.recall_way.as_ref());
            (
                PruneReason::Superseded,
                format!("{abstract_text} (stale: the script was edited later)"),
            )
        } else if rerun {
            let abstract_text = abstract_line(tool, call, &meta, policy.recall_way.as_ref());
            (
                PruneReason::Superseded,
                format!("{abstract_text} (the same command was run again later)"),
            )
        } else if !(protected[index] || keep_current_reads && read_path.is_some()) {
            // A prune at a warm cache leaves file reads that are still current: the agent
            // edits from them (on the GPT-5-mini sessions, pruning them too cost 3 points of
            // recall). At a cold cache they go like other old outputs, unless the agent is
            // likely to use them again (still working with them, by the learned table), when
            // the caller asks: a prune that runs because it pays, or one that buys its runway
            // all the same (an event that must shrink the prompt and keeps them would compact
            // instead, hiding more).
            if keep_likely && policy.keep_likely_use <= 1.0 {
                judged = judge(&mut uses, messages, index, policy);
                if let Some(j) = judged.take_if(|j| j.estimate.likelihood >= policy.keep_likely_use)
                {
                    kept.push(KeptOutput {
                        index,
                        instead_of: PruneReason::Old,
                        judged: j,
                    });
                    continue;
                }
            }
            let abstract_text = abstract_line(tool, call, &meta, policy.recall_way.as_ref());
            let text = if read_path.is_some() {
                with_outline(abstract_text, &visible)
            } else {
                abstract_text
            };
            (PruneReason::Old, text)
        } else {
            continue;
        };
        let before = input.tokens[index];
        let after = FRAMING + counter.count_text(&text);
        if after < before {
            edits.push(PruneEdit {
                index,
                reason,
                replacement: Replacement::Result(text),
                tokens_before: before,
                tokens_after: after,
                judged,
            });
        }
    }
    keep_what_is_pointed_to(messages, &mut edits);
    edits
}

/// What the relevance table says of the output in message `index` (the index of what the agent
/// did with each output is built once per prune, on the first output that asks).
fn judge(
    uses: &mut Option<OutputIndex>,
    messages: &[Message],
    index: usize,
    policy: &Policy,
) -> Option<Judgement> {
    let uses = uses.get_or_insert_with(|| OutputIndex::new(messages));
    uses.features(index, messages.len())
        .map(|features| Judgement {
            estimate: policy.relevance.estimate(&features),
            features,
        })
}

/// A result that a result still in view points to (a re-read or a re-run entered as "[lines
/// 1-80 same as the result of call_7 ...]") stays whole: the pointer shows its lines by naming
/// it. Keeping one may keep the results its own pointers name, hence the loop.
fn keep_what_is_pointed_to(messages: &[Message], edits: &mut Vec<PruneEdit>) {
    loop {
        let pruned: std::collections::BTreeSet<usize> = edits
            .iter()
            .filter(|e| matches!(e.replacement, Replacement::Result(_)))
            .map(|e| e.index)
            .collect();
        let mut named: Vec<&str> = Vec::new();
        for (i, m) in messages.iter().enumerate() {
            if pruned.contains(&i) {
                continue;
            }
            for result in m.tool_results() {
                for block in &result.content {
                    if let Block::Text { text } = block {
                        named.extend(crate::engine::repeats::pointed_call_ids(text));
                    }
                }
            }
        }
        if named.is_empty() {
            return;
        }
        let before = edits.len();
        edits.retain(|e| {
            !matches!(e.replacement, Replacement::Result(_))
                || !messages[e.index]
                    .tool_results()
                    .any(|r| named.contains(&r.call_id.as_str()))
        });
        if edits.len() == before {
            return;
        }
    }
}

fn huge_argument_edits(
    m: &Message,
    index: usize,
    policy: &Policy,
    counter: &TokenCounter,
) -> Vec<PruneEdit> {
    let mut edits = Vec::new();
    for call in m
        .tool_calls()
        .filter(|c| !c.implicit && c.arguments.len() > policy.huge_arguments_bytes)
    {
        let Ok(value) = serde_json::from_str::<Value>(&call.arguments) else {
            continue;
        };
        let limit = policy.huge_arguments_bytes / 4;
        let id = crate::content_id::ContentId::of(call.arguments.as_bytes());
        let Some(arguments) = trim_json(&value, limit.max(256), false, id) else {
            continue;
        };
        let before = counter.count_text(&call.arguments);
        let after = counter.count_text(&arguments);
        if after < before {
            edits.push(PruneEdit {
                index,
                reason: PruneReason::HugeArguments,
                replacement: Replacement::Arguments {
                    call_id: call.id.clone(),
                    arguments,
                },
                tokens_before: before,
                tokens_after: after,
                judged: None,
            });
        }
    }
    edits
}

/// Whether an assistant message's text is a runaway.
fn is_runaway(m: &Message, policy: &Policy) -> bool {
    policy.runaway_text_bytes > 0
        && m.role == Role::Assistant
        && m.text_content().len() > policy.runaway_text_bytes
}

/// The tail starts after the last runaway assistant message in it, when a later turn starts
/// there: the tail keeps recent context whole, and a repetition loop is not context.
pub(crate) fn past_runaways(messages: &[Message], policy: &Policy, tail_start: usize) -> usize {
    let Some(runaway) = (tail_start..messages.len())
        .rev()
        .find(|&i| is_runaway(&messages[i], policy))
    else {
        return tail_start;
    };
    (runaway + 1..messages.len())
        .find(|&i| messages[i].role == Role::Assistant)
        .unwrap_or(tail_start)
}

/// What a runaway message keeps of its text, at each end, in bytes.
const RUNAWAY_KEEP_BYTES: usize = 2_000;

/// At most this many definition lines stand under a pruned file view's abstract.
const OUTLINE_MAX_LINES: usize = 40;
/// Each clipped to this many characters.
const OUTLINE_LINE_CHARS: usize = 120;
/// And all of them to this share of the view (a tenth): an outline that is not much smaller
/// than the view would not be worth the prune.
const OUTLINE_MAX_SHARE_DIVISOR: usize = 10;

/// What replaces a pruned view of a file: its abstract, then the lines of the view that open a
/// definition, with the view's line numbers. The agent keeps seeing what the file defines and
/// where (on procrypto's logs, 12 of 110 strings the agent used later from reads events had
/// pruned stood on such lines, which are about 1% of a read's bytes), and recalls the rest.
fn with_outline(abstract_text: String, view: &str) -> String {
    // Codex's shell outputs are JSON envelopes (`{"output": "...", "metadata": ...}`): the file's
    // lines are inside.
    let unwrapped = crate::trim::envelope::unwrap(view);
    let view = unwrapped.as_ref().map_or(view, |u| u.text.as_str());
    let Some((lines, more)) = outline::definition_lines(
        view,
        OUTLINE_MAX_LINES,
        OUTLINE_LINE_CHARS,
        view.len() / OUTLINE_MAX_SHARE_DIVISOR,
    ) else {
        return abstract_text;
    };
    let tail = match more {
        0 => String::new(),
        n => format!("\n(and {n} more)"),
    };
    format!(
        "{abstract_text}\nits definitions, as read:\n{}{tail}",
        lines.join("\n")
    )
}

/// A runaway message's text cut to its head and tail around a marker naming its recall id
/// (the event stores the original; see [`super::event::hidden_originals`]).
pub(crate) fn runaway_text_edit(
    m: &Message,
    index: usize,
    policy: &Policy,
    counter: &TokenCounter,
) -> Option<PruneEdit> {
    if !is_runaway(m, policy) {
        return None;
    }
    let text = m.text_content();
    let id = crate::content_id::ContentId::of(text.as_bytes());
    let head = floor_char(&text, RUNAWAY_KEEP_BYTES);
    let tail_from = ceil_char(&text, text.len() - RUNAWAY_KEEP_BYTES);
    let cut = tail_from - head.len();
    let shortened = format!(
        "{head}\n[... {} bytes of this message cut (a runaway: repeated or dumped text); original: id {id} ...]\n{}",
        crate::trim::lines::group(cut as u64),
        &text[tail_from..]
    );
    let before = counter.count_text(&text);
    let after = counter.count_text(&shortened);
    (after < before).then_some(PruneEdit {
        index,
        reason: PruneReason::RunawayText,
        replacement: Replacement::Text(shortened),
        tokens_before: before,
        tokens_after: after,
        judged: None,
    })
}

fn floor_char(s: &str, at: usize) -> &str {
    let mut at = at.min(s.len());
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    &s[..at]
}

fn ceil_char(s: &str, at: usize) -> usize {
    let mut at = at.min(s.len());
    while !s.is_char_boundary(at) {
        at += 1;
    }
    at
}

/// Applies phase-1 edits to messages (used by the session; exposed for replays).
pub fn apply_edits(messages: &mut [Message], edits: &[PruneEdit]) {
    for edit in edits {
        let message = &mut messages[edit.index];
        match &edit.replacement {
            Replacement::Result(text) => {
                for block in &mut message.content {
                    if let Block::ToolResult(result) = block {
                        result.content = vec![Block::text(text.clone())];
                    }
                }
            }
            Replacement::Arguments { call_id, arguments } => {
                for block in &mut message.content {
                    if let Block::ToolCall(call) = block
                        && call.id == *call_id
                    {
                        call.arguments = arguments.clone();
                    }
                }
            }
            Replacement::Text(text) => set_text(message, text),
        }
    }
}

/// Makes `text` a message's only text: its first text block, the others gone.
pub fn set_text(message: &mut Message, text: &str) {
    let mut first = true;
    message.content.retain_mut(|block| match block {
        Block::Text { text: t } if first => {
            first = false;
            *t = text.to_owned();
            true
        }
        Block::Text { .. } => false,
        _ => true,
    });
}
