//! The event cycle, once: plan, ask the summarizer (a compaction's), decide the edits. The
//! session engine renders the edits on its neutral messages and the proxy on the client's wire
//! items; both judge the event with [`Policy::judge_event`]. Neither has a cycle of its own, so
//! the replay lab measures the events `serve` runs.

use serde::Serialize;
use serde_json::Value;

use crate::engine::apply::{self, ApplyInput, Edits};
use crate::engine::plan::{self, Plan, PlanInput, PlanKind};
use crate::engine::policy::Policy;
use crate::engine::summary;
use crate::tokens::TokenCounter;
use crate::transcript::Message;

/// Kinds of events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
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

/// An external summarizer (an LLM behind HTTP, usually).
pub trait Summarizer {
    /// A short name for logs.
    fn name(&self) -> &str;
    /// Writes the model sections of a summary for the request's last instruction.
    fn summarize(&mut self, request: &SummaryRequest) -> Result<SummaryReply, SummarizerError>;
}

/// Why an external summarizer gave no summary (the extractive summary then stands in).
#[derive(Debug, thiserror::Error)]
pub enum SummarizerError {
    /// It is not asked again for a while after a failure.
    #[error("cooling down after a failure ({secs_left} s left)")]
    CoolingDown {
        /// Seconds until it is asked again.
        secs_left: u64,
    },
    /// It failed (the backend's error).
    #[error(transparent)]
    Failed(Box<dyn std::error::Error + Send + Sync>),
}

/// What an external summarizer is asked.
#[derive(Debug, Clone)]
pub struct SummaryRequest {
    /// The current prompt with the summarisation instruction appended (cache-friendly).
    pub messages: Vec<Message>,
    /// The tool definitions the conversation sends (kept so the prefix stays identical).
    pub tools: Vec<Value>,
    /// Target size in tokens (asked for in the prompt, never enforced with max_tokens).
    pub budget: usize,
}

/// A summarizer's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryReply {
    /// The model sections.
    pub body: String,
    /// Input tokens as reported.
    pub tokens_in: usize,
    /// Output tokens as reported.
    pub tokens_out: usize,
}

/// Writes a compaction's summary: the reply, or why there is none (the extractive summary then
/// stands in and the event is a fallback).
pub type SummarizeFn<'a> = dyn FnMut(&SummaryRequest) -> Result<SummaryReply, String> + 'a;

/// What an external summarizer is asked for a compaction `plan` of `input`.
pub fn summary_request(plan: &Plan, input: &ApplyInput<'_>, tools: &[Value]) -> SummaryRequest {
    SummaryRequest {
        messages: summary::llm_request_messages(&input.summary_input(plan)),
        tools: tools.to_vec(),
        budget: plan.summary_budget,
    }
}

/// The event due on the prompt of `input`, if any, decided: its plan and its edits. A
/// compaction asks `summarize` for its summary (`None`: the extractive summary).
pub fn decide(
    input: &PlanInput<'_>,
    policy: &Policy,
    counter: &TokenCounter,
    tools: &[Value],
    summarize: Option<&mut SummarizeFn<'_>>,
) -> Option<(Plan, Edits)> {
    let plan = plan::plan(input, policy, counter)?;
    let apply_input = ApplyInput {
        messages: input.messages,
        tokens: input.tokens,
        metas: input.metas,
    };
    let reply = match (plan.kind, summarize) {
        (PlanKind::Compaction, Some(summarize)) => {
            Some(summarize(&summary_request(&plan, &apply_input, tools)))
        }
        _ => None,
    };
    let edits = apply::apply(&plan, &apply_input, counter, reply);
    Some((plan, edits))
}

/// The originals of the tool results an event hides, to store before the prompt that refers
/// to them is sent: its abstracts and summary name them by these ids.
pub fn hidden_originals(edits: &Edits, messages: &[Message]) -> Vec<(crate::ContentId, String)> {
    let mut originals = Vec::new();
    for &i in &edits.hidden {
        for r in messages[i].tool_results() {
            let text = r.text();
            originals.push((crate::ContentId::of(text.as_bytes()), text));
        }
    }
    originals
}
