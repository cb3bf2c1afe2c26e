//! Applying a plan: what an event changes, in terms of the neutral prompt, decided once.
//!
//! [`apply`] turns a [`Plan`] (and, for a compaction, the summarizer's answer) into [`Edits`]:
//! which results are pruned to what, or which middle becomes which summary with which pinned
//! messages kept. The session renders them on its neutral messages ([`Edits::render`]); the
//! proxy renders the same edits on the client's wire items. Both paths therefore make the same
//! event from the same prompt, and the replay lab measures the one `serve` runs.

use std::collections::BTreeMap;

use crate::engine::abstracts::ResultMeta;
use crate::engine::plan::{self, Plan, PlanKind, PruneEdit};
use crate::engine::segments;
use crate::engine::summarizer::SummaryReply;
use crate::engine::summary::{self, SummaryInput};
use crate::tokens::TokenCounter;
use crate::transcript::{Message, Role};

/// Kinds of events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EventKind {
    /// A tool result was trimmed (or pointed to a repeat) as it entered: no cache break.
    InsertTrim,
    /// The model replaced the latest tool result with its summary.
    AgentTrim,
    /// Phase 1 alone.
    PruneOnly,
    /// Phase 2 with the configured summarizer.
    Compaction,
    /// Phase 2 with the extractive summarizer because the LLM failed or is cooling down.
    Fallback,
}

impl EventKind {
    /// Whether the event rewrote history that was already sent (a cache break).
    pub fn rewrites_history(self) -> bool {
        !matches!(self, EventKind::InsertTrim)
    }
}

/// What an event changes in a prompt.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Phase 1: results and arguments rewritten in place.
    Prune(Vec<PruneEdit>),
    /// Phase 2: `head_end..tail_start` becomes the pinned messages in it, verbatim and in
    /// order, then one user message holding the summary.
    Compaction {
        /// End of the head (kept).
        head_end: usize,
        /// Start of the tail (kept).
        tail_start: usize,
        /// Pinned messages of the middle, kept.
        pinned: Vec<usize>,
        /// The summary message's text.
        summary: String,
    },
}

/// An event, decided: how the prompt changes and what it cost.
#[derive(Debug, Clone, PartialEq)]
pub struct Edits {
    /// The event's kind (a compaction whose LLM failed is a fallback).
    pub kind: EventKind,
    /// The change.
    pub change: Change,
    /// Messages whose tool results the event hides (pruned or summarised).
    pub hidden: Vec<usize>,
    /// Summarizer input tokens.
    pub summarizer_tokens_in: usize,
    /// Summarizer output tokens.
    pub summarizer_tokens_out: usize,
    /// Why the LLM summary was not used, when it was not.
    pub note: Option<String>,
    /// Messages of the rendered prompt that stand for what the event rewrote (up to the tail
    /// a prune covered; the head, pinned messages and summary of a compaction): a later
    /// event's tail may not start inside them ([`plan::PlanInput::frozen`]).
    pub frozen: usize,
    /// Old outputs a prune kept because the agent is likely to use them again.
    pub kept: Vec<crate::engine::prune::KeptOutput>,
}

/// The prompt a plan was made on.
pub struct ApplyInput<'a> {
    /// The messages.
    pub messages: &'a [Message],
    /// Tokens of each message.
    pub tokens: &'a [usize],
    /// Facts of tool outputs, by call id.
    pub metas: &'a BTreeMap<String, ResultMeta>,
}

impl ApplyInput<'_> {
    /// What a compaction of `plan` summarises (also what an LLM summarizer is asked about).
    pub fn summary_input<'s>(&'s self, plan: &'s Plan) -> SummaryInput<'s> {
        SummaryInput {
            messages: self.messages,
            from: plan.head_end,
            to: plan.tail_start,
            metas: self.metas,
            budget: plan.summary_budget,
            recall_hint: &plan.recall_hint,
        }
    }
}

/// Decides the edits of `plan`. For compactions, `reply` is the external summarizer's answer
/// (`Err` with the reason when it failed: the extractive summary stands in and the event is a
/// fallback), or `None` for the extractive summarizer.
pub fn apply(
    plan: &Plan,
    input: &ApplyInput<'_>,
    counter: &TokenCounter,
    reply: Option<Result<SummaryReply, String>>,
) -> Edits {
    let mut edits = decide_edits(plan, input, counter, reply);
    if plan.fits_window {
        let why = format!(
            "prompt past the window: {} tokens, {} after the event",
            plan.tokens_before, plan.estimated_after
        );
        edits.note = Some(match edits.note.take() {
            Some(note) => format!("{why}; {note}"),
            None => why,
        });
    }
    edits
}

fn decide_edits(
    plan: &Plan,
    input: &ApplyInput<'_>,
    counter: &TokenCounter,
    reply: Option<Result<SummaryReply, String>>,
) -> Edits {
    let messages = input.messages;
    match plan.kind {
        PlanKind::PruneOnly => {
            let mut hidden: Vec<usize> = plan
                .edits
                .iter()
                .filter(|e| matches!(e.replacement, plan::Replacement::Result(_)))
                .map(|e| e.index)
                .collect();
            hidden.dedup();
            Edits {
                kind: EventKind::PruneOnly,
                change: Change::Prune(plan.edits.clone()),
                hidden,
                summarizer_tokens_in: 0,
                summarizer_tokens_out: 0,
                note: None,
                frozen: plan.tail_start,
                kept: plan.kept.clone(),
            }
        }
        PlanKind::Compaction => {
            let summary_input = input.summary_input(plan);
            let (body, kind, tokens_in, tokens_out, note) = match reply {
                Some(Ok(reply)) => (
                    reply.body,
                    EventKind::Compaction,
                    reply.tokens_in,
                    reply.tokens_out,
                    None,
                ),
                Some(Err(why)) => (
                    summary::extractive_body(&summary_input, counter),
                    EventKind::Fallback,
                    0,
                    0,
                    Some(why),
                ),
                None => {
                    let body = summary::extractive_body(&summary_input, counter);
                    let tokens_in: usize =
                        input.tokens[plan.head_end..plan.tail_start].iter().sum();
                    let tokens_out = counter.count_text(&body);
                    (body, EventKind::Compaction, tokens_in, tokens_out, None)
                }
            };
            let summary = summary::compose(&summary_input, &body, counter);
            let middle = plan.head_end..plan.tail_start;
            let pinned: Vec<usize> = middle
                .clone()
                .filter(|&i| segments::is_pinned(&messages[i]))
                .collect();
            let hidden = middle
                .filter(|&i| messages[i].tool_results().next().is_some())
                .collect();
            Edits {
                kind,
                frozen: plan.head_end + pinned.len() + 1,
                change: Change::Compaction {
                    head_end: plan.head_end,
                    tail_start: plan.tail_start,
                    pinned,
                    summary,
                },
                hidden,
                summarizer_tokens_in: tokens_in,
                summarizer_tokens_out: tokens_out,
                note,
                kept: Vec::new(),
            }
        }
    }
}

impl Edits {
    /// The prompt after the event.
    pub fn render(&self, messages: &[Message]) -> Vec<Message> {
        match &self.change {
            Change::Prune(edits) => {
                let mut out = messages.to_vec();
                crate::engine::prune::apply_edits(&mut out, edits);
                out
            }
            Change::Compaction {
                head_end,
                tail_start,
                pinned,
                summary,
            } => {
                let mut out =
                    Vec::with_capacity(head_end + pinned.len() + 1 + messages.len() - tail_start);
                out.extend_from_slice(&messages[..*head_end]);
                out.extend(pinned.iter().map(|&i| messages[i].clone()));
                out.push(Message::text(Role::User, summary.clone()));
                out.extend_from_slice(&messages[*tail_start..]);
                out
            }
        }
    }

    /// The earliest message the event changed (where the cached prefix ends).
    pub fn earliest_changed(&self) -> usize {
        match &self.change {
            Change::Prune(edits) => edits.iter().map(|e| e.index).min().unwrap_or(0),
            Change::Compaction { head_end, .. } => *head_end,
        }
    }
}
