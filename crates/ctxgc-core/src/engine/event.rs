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

/// What an event did with one tool output, and why: what `ctxgc replay --explain` and the
/// dashboard show per hidden output.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Decision {
    /// The output's call id.
    pub call_id: String,
    /// Its tool.
    pub tool: String,
    /// What the event did.
    pub action: Action,
    /// Why a prune replaced it; for an output kept, what would have pruned it (its age, or its
    /// file edited since).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<crate::engine::prune::PruneReason>,
    /// What the relevance table said of it, when it was asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub judged: Option<crate::engine::relevance::Judgement>,
}

/// What an event did with an output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// Replaced by its one-line abstract (or a pointer to its later copy).
    Pruned,
    /// Kept whole although old: the agent is likely to use it again.
    Kept,
    /// Folded into the summary of the middle.
    Summarised,
}

impl Decision {
    /// In words, for a user: `pruned: old (file-read, 40+ turns old, never used since, ...)`.
    pub fn describe(&self) -> String {
        use crate::engine::prune::PruneReason;
        let what = match (self.action, self.reason) {
            (Action::Kept, Some(PruneReason::Superseded)) => {
                "kept whole though its file was edited since: likely to be used again".to_owned()
            }
            (Action::Kept, _) => "kept whole: likely to be used again".to_owned(),
            (Action::Summarised, _) => {
                "summarised: in the middle of a compaction (recallable by its id)".to_owned()
            }
            (Action::Pruned, Some(reason)) => format!(
                "pruned: {}",
                match reason {
                    PruneReason::Superseded =>
                        "stale (the file was edited or read again, or the command run again)",
                    PruneReason::Duplicate => "a later output is the same",
                    PruneReason::Old => "older than what an event keeps",
                    PruneReason::HugeArguments => "huge call arguments",
                    PruneReason::RunawayText => "a runaway text",
                    PruneReason::Window => "the prompt did not fit the window",
                }
            ),
            (Action::Pruned, None) => "pruned".to_owned(),
        };
        match &self.judged {
            Some(j) => format!("{what}; {}", j.describe()),
            None => what,
        }
    }
}

/// What the event of `edits`, made on `messages`, did with each tool output it touched or
/// judged: pruned (with the reason and the table's estimate), kept, summarised.
pub fn decisions(edits: &Edits, messages: &[Message]) -> Vec<Decision> {
    let result_of = |i: usize| {
        messages
            .get(i)
            .and_then(|m| m.tool_results().next())
            .map(|r| {
                (
                    r.call_id.clone(),
                    r.tool_name.clone().unwrap_or_else(|| "tool".into()),
                )
            })
    };
    let mut out = Vec::new();
    match &edits.change {
        Change::Prune(prune) => {
            for edit in prune {
                if !matches!(edit.replacement, Replacement::Result(_)) {
                    continue;
                }
                if let Some((call_id, tool)) = result_of(edit.index) {
                    out.push(Decision {
                        call_id,
                        tool,
                        action: Action::Pruned,
                        reason: Some(edit.reason),
                        judged: edit.judged.clone(),
                    });
                }
            }
        }
        Change::Compaction { .. } => {
            for &i in &edits.hidden {
                if let Some((call_id, tool)) = result_of(i) {
                    out.push(Decision {
                        call_id,
                        tool,
                        action: Action::Summarised,
                        reason: None,
                        judged: None,
                    });
                }
            }
        }
    }
    for kept in &edits.kept {
        if let Some((call_id, tool)) = result_of(kept.index) {
            out.push(Decision {
                call_id,
                tool,
                action: Action::Kept,
                reason: Some(kept.instead_of),
                judged: Some(kept.judged.clone()),
            });
        }
    }
    out
}

/// A [`Decision`] in brief, small enough to keep per hidden output (the proxy's dashboard
/// keeps the latest 50 of each session): what was done, why, and the table's estimate.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Why {
    /// What the event did.
    pub action: Action,
    /// Why a prune replaced it; for an output kept, what would have pruned it (its age, or its
    /// file edited since).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<crate::engine::prune::PruneReason>,
    /// The table's likelihood of a later use, when it was asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub likelihood: Option<f32>,
    /// What the table knew of the output, when it was asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub features: Option<crate::engine::relevance::Features>,
}

impl Decision {
    /// In brief.
    pub fn why(&self) -> Why {
        Why {
            action: self.action,
            reason: self.reason,
            likelihood: self.judged.as_ref().map(|j| j.estimate.likelihood as f32),
            features: self.judged.as_ref().map(|j| j.features),
        }
    }
}

/// Why the event of `edits` hid each original [`hidden_originals`] stores, by the same ids.
pub fn hidden_reasons(edits: &Edits, messages: &[Message]) -> Vec<(crate::ContentId, Why)> {
    let why: std::collections::HashMap<String, Why> = decisions(edits, messages)
        .into_iter()
        .map(|d| (d.call_id.clone(), d.why()))
        .collect();
    let mut out = Vec::new();
    for &i in &edits.hidden {
        for r in messages[i].tool_results() {
            if let Some(w) = why.get(&r.call_id) {
                out.push((crate::ContentId::of(r.text().as_bytes()), *w));
            }
        }
    }
    out
}
