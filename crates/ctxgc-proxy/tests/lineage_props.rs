//! Property tests of the proxy's engine path on random tool-using sessions in the wire shapes of
//! all four APIs, as `serve --compact` runs it on each request: insertion trimming
//! (`rewrite`), then the lineage step. What it forwards passes the integrity check, stays
//! append-only between events, keeps the task and the latest user message, loses no original,
//! fires events rarely, and is deterministic.
//!
//! The second property: the proxy path and the replay path (the session engine the replay lab
//! runs) send the same prompts, count the same tokens and run the same events.
//!
//! `PROPTEST_CASES=300 cargo test -p ctxgc-proxy --test lineage_props` for a longer run.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use ctxgc_core::ContentId;
use ctxgc_core::engine::Policy;
use ctxgc_core::tokens::{Calibration, TokenCounter};
use ctxgc_formats::Api;
use ctxgc_proxy::rewrite::lineage::{self, Lineage, StepInput};

use proptest::prelude::*;
use serde_json::{Value, json};

/// One turn: the model's calls with their outputs (lines, seed), and maybe a user message after.
#[derive(Debug, Clone)]
struct Turn {
    calls: Vec<(usize, u32)>,
    user: Option<u32>,
}

fn turn() -> impl Strategy<Value = Turn> {
    // Seeds from a small set too: outputs of one seed share their lines (a re-run, a re-read),
    // which is what repeat pointers are for.
    let seed = prop_oneof![3 => any::<u32>(), 1 => 0u32..4];
    (
        prop::collection::vec((1usize..400, seed), 1..3),
        prop::option::weighted(0.15, any::<u32>()),
    )
        .prop_map(|(calls, user)| Turn { calls, user })
}

fn output(lines: usize, seed: u32) -> String {
    let mut text: String = (0..lines)
        .map(|i| {
            format!(
                "{seed:08x} step {i}: compiled unit_{} in {} ms\n",
                (i as u32).wrapping_mul(2_654_435_761) ^ seed,
                i % 97
            )
        })
        .collect();
    if lines > 50 {
        text.push_str("error[E0308]: mismatched types\n");
    }
    text.push_str(&format!("exit status: {}\n", seed % 3));
    text
}

/// The wire items of a session's turns for `api`, and each turn's item count after it.
fn wire(api: Api, turns: &[Turn]) -> (Vec<Value>, Vec<usize>, Vec<String>) {
    let task = "Fix the failing build; do not change the public API.";
    let mut items = vec![match api {
        Api::Responses => {
            json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": task}]})
        }
        Api::Gemini => json!({"role": "user", "parts": [{"text": task}]}),
        _ => json!({"role": "user", "content": task}),
    }];
    let mut ends = Vec::new();
    let mut outputs = Vec::new();
    for (t, turn) in turns.iter().enumerate() {
        let calls: Vec<(String, String, String)> = turn
            .calls
            .iter()
            .enumerate()
            .map(|(k, &(lines, seed))| {
                let text = output(lines, seed);
                outputs.push(text.clone());
                (
                    format!("call_{t}_{k}"),
                    format!("{{\"command\":\"make unit-{t}-{k}\"}}"),
                    text,
                )
            })
            .collect();
        let user = turn.user.map(user_text);
        match api {
            Api::ChatCompletions => {
                items.push(json!({"role": "assistant", "content": null, "tool_calls": calls.iter().map(|(id, args, _)| json!({"id": id, "type": "function", "function": {"name": "bash", "arguments": args}})).collect::<Vec<_>>()}));
                for (id, _, text) in &calls {
                    items.push(json!({"role": "tool", "tool_call_id": id, "content": text}));
                }
                if let Some(u) = user {
                    items.push(json!({"role": "user", "content": u}));
                }
            }
            Api::Messages => {
                items.push(json!({"role": "assistant", "content": calls.iter().map(|(id, args, _)| json!({"type": "tool_use", "id": id, "name": "bash", "input": serde_json::from_str::<Value>(args).unwrap()})).collect::<Vec<_>>()}));
                let mut blocks: Vec<Value> = calls
                    .iter()
                    .map(|(id, _, text)| json!({"type": "tool_result", "tool_use_id": id, "content": text}))
                    .collect();
                if let Some(u) = user {
                    blocks.push(json!({"type": "text", "text": u}));
                }
                items.push(json!({"role": "user", "content": blocks}));
            }
            Api::Gemini => {
                // Gemini's calls and responses carry no ids: they pair by order and name.
                items.push(json!({"role": "model", "parts": calls.iter().map(|(_, args, _)| json!({"functionCall": {"name": "bash", "args": serde_json::from_str::<Value>(args).unwrap()}})).collect::<Vec<_>>()}));
                let mut parts: Vec<Value> = calls
                    .iter()
                    .map(|(_, _, text)| json!({"functionResponse": {"name": "bash", "response": {"output": text}}}))
                    .collect();
                if let Some(u) = user {
                    parts.push(json!({"text": u}));
                }
                items.push(json!({"role": "user", "parts": parts}));
            }
            Api::Responses => {
                for (id, args, _) in &calls {
                    items.push(json!({"type": "function_call", "call_id": id, "name": "bash", "arguments": args}));
                }
                for (id, _, text) in &calls {
                    items.push(
                        json!({"type": "function_call_output", "call_id": id, "output": text}),
                    );
                }
                if let Some(u) = user {
                    items.push(json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": u}]}));
                }
            }
        }
        ends.push(items.len());
    }
    (items, ends, outputs)
}

/// A user message: an instruction block the client pins (one in five), or the user's words.
fn user_text(u: u32) -> String {
    if u.is_multiple_of(5) {
        format!("<environment_context>\n  <cwd>/work/repo-{u}</cwd>\n</environment_context>")
    } else {
        format!("Also check module {u}.")
    }
}

/// Insertion trimming as `serve` does it at `window`, without breakpoints or cache keys.
fn settings(window: u64) -> ctxgc_proxy::RewriteSettings {
    ctxgc_proxy::RewriteSettings {
        cache_breakpoints: false,
        prompt_cache_key: false,
        ..ctxgc_proxy::RewriteSettings::trimming_at(window)
    }
}

/// The request the client sends after its first `end` items.
fn request(api: Api, items: &[Value], end: usize) -> ctxgc_formats::ApiRequest {
    let key = api.wire().items_key();
    ctxgc_formats::ApiRequest {
        api,
        body: json!({"model": "m", key: items[..end].to_vec()}),
    }
}

/// The system prompt, as `api` sends it outside the conversation.
fn system(api: Api) -> Value {
    let text = "You are a careful coding agent.";
    match api {
        Api::Gemini => json!({"parts": [{"text": text}]}),
        _ => json!(text),
    }
}

fn counter(api: Api) -> TokenCounter {
    TokenCounter::new(api.wire().family(), Default::default())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn the_proxys_engine_path_keeps_its_promises(
        turns in prop::collection::vec(turn(), 8..40),
        api in prop::sample::select(vec![Api::ChatCompletions, Api::Messages, Api::Responses, Api::Gemini]),
        window in prop::sample::select(vec![16_000u64, 32_000, 64_000]),
    ) {
        let system = system(api);
        let (items, ends, outputs) = wire(api, &turns);
        let policy = Policy::default();
        let mut state: Option<Lineage> = None;
        let mut previous: Option<Vec<Value>> = None;
        let mut stored: BTreeSet<ContentId> = BTreeSet::new();
        let mut events = 0usize;
        let mut last_event: Option<usize> = None;
        let settings = settings(window);
        for (t, &end) in ends.iter().enumerate() {
            // Insertion trimming first, as the proxy does.
            let key = api.wire().items_key();
            let mut request = request(api, &items, end);
            let trimmed = ctxgc_proxy::rewrite::request::rewrite(&mut request, "s", &settings);
            stored.extend(trimmed.originals.iter().map(|(id, _)| *id));
            let client_items = request.body[key].as_array().unwrap().clone();
            let client = &client_items[..];
            let input = StepInput { api, client, system: Some(&system), tools: &[], events: true, fit_window: true, lazy: false, may_compact: true, weigh_cold: false, metas: &trimmed.metas, idle_secs: None, requested_ttl_secs: None, cache_prices: None };
            let outcome = lineage::step(&input, state.as_ref(), &policy, window, Calibration::default(), counter(api), None)
                .map_err(|e| TestCaseError::fail(format!("turn {t}: {e}")))?;
            // Deterministic: the same request and state give the same bytes.
            let again = lineage::step(&input, state.as_ref(), &policy, window, Calibration::default(), counter(api), None).unwrap();
            prop_assert_eq!(&again.messages, &outcome.messages);
            stored.extend(outcome.originals.iter().map(|(id, _)| *id));
            let sent = outcome.messages.clone().unwrap_or_else(|| client.to_vec());
            let text = serde_json::to_string(&sent).unwrap();
            // The task and the latest user message are kept verbatim.
            prop_assert!(text.contains("Fix the failing build"), "turn {}: the task is gone", t);
            if let Some(u) = turns[..=t].iter().rev().find_map(|turn| turn.user) {
                let latest = user_text(u);
                let latest = serde_json::to_string(&latest).unwrap();
                let latest = &latest[1..latest.len() - 1];
                let snapshot = text.find("Task snapshot").map(|i| &text[i..(i + 600).min(text.len())]).unwrap_or("(no summary)");
                prop_assert!(text.contains(latest), "turn {}: the latest user message {:?} is gone; summary: {}", t, latest, snapshot);
            }
            // Append-only between events, and never two events in a row (at these windows a
            // turn adds less than a runway; at 8K, two 400-line outputs add 40% of the window
            // and an event every turn is the only way to stay under it).
            if outcome.event.is_some() {
                prop_assert!(last_event != Some(t.wrapping_sub(1)) || t == 0, "turn {}: events on consecutive turns", t);
                last_event = Some(t);
                events += 1;
            } else if let Some(before) = &previous {
                let first_diff = before.iter().zip(&sent).position(|(a, b)| a != b);
                prop_assert!(
                    sent.len() >= before.len() && sent[..before.len()] == before[..],
                    "turn {}: the prompt changed without an event (lineage in force: {:?}, applied: {}, sent {} vs {} before, first difference at {:?}: {} / {})",
                    t,
                    state.as_ref().map(|l| (l.covered, l.prefix.len(), l.stopped.is_some())),
                    outcome.messages.is_some(),
                    sent.len(),
                    before.len(),
                    first_diff,
                    first_diff.map(|i| before[i].to_string().chars().take(300).collect::<String>()).unwrap_or_default(),
                    first_diff.map(|i| sent[i].to_string().chars().take(300).collect::<String>()).unwrap_or_default()
                );
            }
            // Nothing lost: every output the prompt no longer shows was stored first.
            let in_client: usize = turns[..=t].iter().map(|turn| turn.calls.len()).sum();
            for o in &outputs[..in_client] {
                let escaped = serde_json::to_string(o).unwrap();
                let head = &escaped[1..escaped.len().min(120)];
                if !text.contains(head) {
                    prop_assert!(
                        stored.contains(&ContentId::of(o.as_bytes())),
                        "turn {}: an output was hidden without its original stored", t
                    );
                }
            }
            if outcome.lineage.is_some() {
                state = outcome.lineage;
            }
            previous = Some(sent);
        }
        // Events are rare: at most one turn in two even when each turn adds a third of the
        // window (the consecutive-turn check above), and so at most half of them.
        prop_assert!(events * 2 <= ends.len() + 1, "{} events in {} turns", events, ends.len());
    }
}

/// One proxy request, as the upstream would see it: the neutral view of what is forwarded,
/// ctxgc's token count of it, and the event that ran on it.
type Seen = (Vec<ctxgc_core::Message>, usize, Option<&'static str>);

/// The replay path: the client's whole history, as the neutral transcript the replay lab
/// reads, driven through the session engine; what it sends before each assistant turn.
fn replay_path(api: Api, system: &Value, items: &[Value], window: u64) -> Vec<Seen> {
    use ctxgc_core::engine::{EventKind, Session, drive};
    let view = api
        .wire()
        .view(Some(system), items)
        .expect("a valid session");
    let mut transcript = ctxgc_core::Transcript {
        id: "s".into(),
        messages: view.messages,
        ..Default::default()
    };
    // The answer to the last request: the request before it is then sent too.
    transcript.messages.push(ctxgc_core::Message::text(
        ctxgc_core::Role::Assistant,
        "Done.",
    ));
    let mut session = Session::new("s", window, &Default::default(), api.wire().family());
    let store = ctxgc_core::store::MemoryStore::default();
    let mut seen = Vec::new();
    drive::drive(&transcript, &mut session, &store, None, |r| {
        let event = r.event.map(|e| match e.kind {
            EventKind::PruneOnly => "prune",
            _ => "compaction",
        });
        seen.push((
            r.session.prompt().to_vec(),
            r.session.prompt_tokens(),
            event,
        ));
    })
    .expect("the replay runs");
    seen
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// The proxy and the replay lab run one engine: on the same session, request by request,
    /// the proxy path (wire bodies of each API: insertion rewrite, then the lineage step) and
    /// the replay path (the neutral transcript through `Session`) send the same prompt (as
    /// views), count the same tokens and run the same events.
    #[test]
    fn the_proxy_and_the_replay_lab_run_one_engine(
        turns in prop::collection::vec(turn(), 8..40),
        api in prop::sample::select(vec![Api::ChatCompletions, Api::Messages, Api::Responses, Api::Gemini]),
        window in prop::sample::select(vec![16_000u64, 32_000, 64_000]),
    ) {
        let system = system(api);
        let (items, ends, _) = wire(api, &turns);
        let replayed = replay_path(api, &system, &items, window);
        let settings = settings(window);
        let memo = ctxgc_proxy::rewrite::request::TrimMemo::default();
        let mut state: Option<Lineage> = None;
        for (t, &end) in ends.iter().enumerate() {
            let key = api.wire().items_key();
            let mut request = request(api, &items, end);
            // As the pipeline does: what the lineage's events hid is never pointed to.
            let hidden = state.as_ref().map_or_else(Vec::new, |l| l.hidden.clone());
            let rewritten = ctxgc_proxy::rewrite::request::rewrite_within(&mut request, None, "s", &settings, &memo, &|_| false, &hidden, None)
                .map_err(|_| TestCaseError::fail("no deadline was set"))?;
            let client = request.body[key].as_array().unwrap().clone();
            let input = StepInput { api, client: &client, system: Some(&system), tools: &[], events: true, fit_window: true, lazy: false, may_compact: true, weigh_cold: false, metas: &rewritten.metas, idle_secs: None, requested_ttl_secs: None, cache_prices: None };
            let outcome = lineage::step(&input, state.as_ref(), &Policy::default(), window, Calibration::default(), counter(api), None)
                .map_err(|e| TestCaseError::fail(format!("turn {t}: {e}")))?;
            let sent = outcome.messages.clone().unwrap_or(client);
            let view = api.wire().view(Some(&system), &sent).unwrap();
            let (prompt, tokens, event) = &replayed[t + 1];
            prop_assert_eq!(outcome.event, *event, "turn {}: events differ", t);
            if let Some(i) = (0..prompt.len().max(view.messages.len())).find(|&i| prompt.get(i) != view.messages.get(i)) {
                return Err(TestCaseError::fail(format!(
                    "turn {t}: prompts differ at message {i} of {} (proxy) / {} (replay):\nproxy:  {:?}\nreplay: {:?}",
                    view.messages.len(),
                    prompt.len(),
                    view.messages.get(i).map(|m| format!("{m:?}").chars().take(400).collect::<String>()),
                    prompt.get(i).map(|m| format!("{m:?}").chars().take(400).collect::<String>()),
                )));
            }
            prop_assert_eq!(outcome.estimated_tokens, *tokens, "turn {}: token counts differ", t);
            if outcome.lineage.is_some() {
                state = outcome.lineage;
            }
        }
    }
}
