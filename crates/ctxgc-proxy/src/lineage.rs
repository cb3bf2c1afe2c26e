//! Compaction across requests (Chat Completions): the engine's events, applied to clients that
//! resend their whole history every time.
//!
//! After an event the proxy remembers, per session, that the client's first `covered` messages
//! (as trimmed at insertion, a pure function) are replaced by `prefix`: the head, then the summary
//! or the pruned messages. Every later request whose history starts with exactly those messages
//! (same hash) gets the same replacement, so the upstream sees a prefix-stable prompt between
//! events. A history that does not start with them (edited, rewound, compacted by the client)
//! starts a new lineage: stale state is never applied.

use std::collections::BTreeMap;

use ctxgc_core::engine::Policy;
use ctxgc_core::engine::plan::{self, PlanInput, PlanKind, Replacement};
use ctxgc_core::engine::summary::{self, SummaryInput};
use ctxgc_core::tokens::TokenCounter;
use ctxgc_core::{Message, Transcript};
use ctxgc_formats::chat::message_from_chat;
use serde_json::{Value, json};

/// The replacement in force for one session (stored as JSON in the session-state store).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Lineage {
    /// Client messages the prefix replaces.
    pub covered: usize,
    /// Hash of those client messages.
    pub covered_hash: u64,
    /// What is sent instead of them.
    pub prefix: Vec<Value>,
}

/// Hash of a run of wire messages.
pub fn hash_messages(messages: &[Value]) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for m in messages {
        h.update(m.to_string().as_bytes());
        h.update(b"\x1e");
    }
    h.digest()
}

/// What the engine decided for one request.
pub struct Outcome {
    /// The messages to send, or `None` to send the client's own unchanged.
    pub messages: Option<Vec<Value>>,
    /// The lineage to keep (`None`: no replacement in force).
    pub lineage: Option<Lineage>,
    /// An event ran on this request (`prune` or `compaction`).
    pub event: Option<&'static str>,
    /// ctxgc's own (uncalibrated) token count of what is sent, tool definitions included; the
    /// upstream's reported usage for this request calibrates later estimates against it.
    pub estimated_tokens: usize,
}

fn view(messages: &[Value]) -> Option<Vec<Message>> {
    let mut t = Transcript::default();
    for (i, m) in messages.iter().enumerate() {
        t.messages
            .push(message_from_chat(m, &format!("messages[{i}]")).ok()?);
    }
    ctxgc_formats::resolve_tool_names(&mut t);
    Some(t.messages)
}

/// Applies the session's lineage to the client's (insertion-trimmed) messages, then runs an
/// event if one is due.
/// `tools` are the request's tool definitions (paid on every request); `calibration` scales
/// ctxgc's token counts to the upstream's (reported usage / estimate, per session).
pub fn step(
    client: &[Value],
    tools: &[Value],
    state: Option<&Lineage>,
    policy: &Policy,
    window: u64,
    calibration: f64,
) -> Outcome {
    // 1. Reuse the replacement when the history still starts with what it covered.
    let (applied, lineage) = match state {
        Some(l)
            if client.len() >= l.covered
                && hash_messages(&client[..l.covered]) == l.covered_hash =>
        {
            let mut p = l.prefix.clone();
            p.extend_from_slice(&client[l.covered..]);
            (Some(p), Some(l.clone()))
        }
        _ => (None, None),
    };
    let current: &[Value] = applied.as_deref().unwrap_or(client);
    let mut counter = TokenCounter::openai();
    let fixed = counter.count_tools(tools) + 3;
    let estimate = |counter: &mut TokenCounter, prompt: &[Value]| {
        view(prompt).map_or(0, |m| {
            m.iter().map(|m| counter.count_message(m)).sum::<usize>()
        }) + fixed
    };
    let unchanged = |counter: &mut TokenCounter,
                     applied: Option<Vec<Value>>,
                     lineage: Option<Lineage>| Outcome {
        estimated_tokens: estimate(counter, applied.as_deref().unwrap_or(client)),
        messages: applied,
        lineage,
        event: None,
    };
    // 2. Is an event due? Plan on the prompt as the upstream would see it, in its tokens.
    let Some(messages) = view(current) else {
        return unchanged(&mut counter, applied, lineage);
    };
    let scale = |n: usize| (n as f64 * calibration).ceil() as usize;
    let tokens: Vec<usize> = messages
        .iter()
        .map(|m| scale(counter.count_message(m)))
        .collect();
    let metas = BTreeMap::new();
    let input = PlanInput {
        messages: &messages,
        tokens: &tokens,
        fixed_tokens: scale(fixed),
        metas: &metas,
        window,
    };
    let Some(plan) = plan::plan(&input, policy, &counter) else {
        return unchanged(&mut counter, applied, lineage);
    };
    // The new boundary must not cut into the prefix already in force: wait for the next turn.
    let kept = lineage.as_ref().map_or(0, |l| l.prefix.len());
    if plan.tail_start < kept {
        return unchanged(&mut counter, applied, lineage);
    }
    let mut prompt = current.to_vec();
    let event = match plan.kind {
        PlanKind::PruneOnly => {
            for edit in &plan.edits {
                let wire = &mut prompt[edit.index];
                match &edit.replacement {
                    Replacement::Result(text) => wire["content"] = json!(text),
                    Replacement::Arguments { call_id, arguments } => {
                        for call in wire["tool_calls"].as_array_mut().into_iter().flatten() {
                            if call["id"] == *call_id.as_str() {
                                call["function"]["arguments"] = json!(arguments);
                            }
                        }
                    }
                }
            }
            "prune"
        }
        PlanKind::Compaction => {
            let input = SummaryInput {
                messages: &messages,
                from: plan.head_end,
                to: plan.tail_start,
                metas: &metas,
                budget: plan.summary_budget,
            };
            let body = summary::extractive_body(&input, &counter);
            let text = summary::compose(&input, &body, &counter);
            let mut next: Vec<Value> = prompt[..plan.head_end].to_vec();
            next.push(json!({"role": "user", "content": text}));
            next.extend_from_slice(&prompt[plan.tail_start..]);
            prompt = next;
            "compaction"
        }
    };
    // 3. The new lineage covers the client messages before the tail.
    let boundary = match plan.kind {
        PlanKind::PruneOnly => plan.tail_start,
        PlanKind::Compaction => plan.head_end + 1,
    };
    // Prompt index i >= kept is client index covered + (i - kept).
    let covered = lineage
        .as_ref()
        .map_or(plan.tail_start, |l| l.covered + (plan.tail_start - kept));
    let lineage = Lineage {
        covered,
        covered_hash: hash_messages(&client[..covered]),
        prefix: prompt[..boundary].to_vec(),
    };
    Outcome {
        estimated_tokens: estimate(&mut counter, &prompt),
        messages: Some(prompt),
        lineage: Some(lineage),
        event: Some(event),
    }
}
