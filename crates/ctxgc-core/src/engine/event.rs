//! The event cycle, once: plan, ask the summarizer (a compaction's), decide the edits. The
//! session engine renders the edits on its neutral messages and the proxy on the client's wire
//! items; both judge the event with [`Policy::judge_event`]. Neither has a cycle of its own, so
//! the replay lab measures the events `serve` runs.

use serde_json::Value;

use crate::engine::apply::{self, ApplyInput, Change, Edits};
use crate::engine::plan::{self, Plan, PlanInput, PlanKind, Replacement};
use crate::engine::policy::Policy;
use crate::engine::summarizer::{SummaryReply, SummaryRequest};
use crate::engine::summary;
use crate::tokens::TokenCounter;
use crate::transcript::Message;

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

/// The originals an event hides, to store before the prompt that refers to them is sent: the
/// tool results its abstracts and summary name, and the text of each runaway message it cut,
/// by these ids.
pub fn hidden_originals(edits: &Edits, messages: &[Message]) -> Vec<(crate::ContentId, String)> {
    let mut originals = Vec::new();
    for &i in &edits.hidden {
        for r in messages[i].tool_results() {
            let text = r.text();
            originals.push((crate::ContentId::of(text.as_bytes()), text));
        }
    }
    if let Change::Prune(prune) = &edits.change {
        for edit in prune {
            if let Replacement::Text(_) = edit.replacement {
                let text = messages[edit.index].text_content();
                originals.push((crate::ContentId::of(text.as_bytes()), text));
            }
        }
    }
    originals
}
