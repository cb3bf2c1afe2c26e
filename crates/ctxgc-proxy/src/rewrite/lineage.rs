//! Compaction across requests (Chat Completions, Anthropic Messages, Responses): the engine's
//! events, applied to clients that resend their whole history every time.
//!
//! The event itself is the engine's: planned by `plan::plan` and decided by `apply::apply` on the
//! neutral view of the prompt, exactly as the replay lab's `Session` does; this module renders
//! those edits on the client's wire items and remembers them.
//!
//! After an event the proxy remembers, per session, that the client's first `covered` messages
//! (as trimmed at insertion, a pure function) are replaced by `prefix`: the head, then the summary
//! or the pruned messages. Every later request whose history starts with exactly those messages
//! (same hash) gets the same replacement, so the upstream sees a prefix-stable prompt between
//! events. A history that does not start with them (edited, rewound, compacted by the client)
//! starts a new lineage: stale state is never applied.

use std::collections::BTreeMap;

use ctxgc_core::ContentId;
use ctxgc_core::engine::abstracts::ResultMeta;
use ctxgc_core::engine::apply::Change;
use ctxgc_core::engine::plan::{self, PlanInput, Replacement};
use ctxgc_core::engine::{Policy, SummarizerError, SummaryReply, SummaryRequest};
use ctxgc_core::engine::{event, integrity};
use ctxgc_core::tokens::{Calibration, TokenCounter};
use ctxgc_formats::Api;
use serde_json::Value;

use crate::error::ProxyError;

/// The replacement in force for one session (stored as JSON in the session-state store).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Lineage {
    /// Client messages the prefix replaces.
    pub covered: usize,
    /// Hash of those client messages.
    pub covered_hash: u64,
    /// What is sent instead of them.
    pub prefix: Vec<Value>,
    /// Ineffective events in a row so far ([`Policy::judge_event`]).
    #[serde(default)]
    pub ineffective: usize,
    /// Why automatic events stopped for this session, when they did: the lineage in force
    /// still applies, no event runs.
    #[serde(default)]
    pub stopped: Option<String>,
    /// Results the lineage's events hid (pruned to abstracts or summarised): a repeat that
    /// entered after the event may not point to one ([`crate::rewrite::request::rewrite_within`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hidden: Vec<HiddenResult>,
}

/// A tool result an event hid, and from which result of the history on that holds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HiddenResult {
    /// The hidden result's call id.
    pub call_id: String,
    /// How many tool results the history had when the event ran: results from this one on
    /// entered after it (those before entered while it was still in view, as the session
    /// engine inserted them).
    pub from_result: usize,
}

/// `item` without any `cache_control` (Anthropic's breakpoints).
pub fn without_breakpoints(item: &Value) -> Value {
    match item {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| *k != "cache_control")
                .map(|(k, v)| (k.clone(), without_breakpoints(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_breakpoints).collect()),
        other => other.clone(),
    }
}

/// Hash of a run of wire messages, blind to `cache_control` (clients move their breakpoints).
pub fn hash_messages(messages: &[Value]) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for m in messages {
        h.update(&crate::agent::tools::fingerprint(m).to_le_bytes());
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
    /// `estimated_tokens` counts every message of what is sent (not a lazy step's 0, nor a
    /// prompt that could not be viewed).
    pub counted_in_full: bool,
    /// Tool outputs an event hid (pruned or summarised), to store before forwarding: their
    /// abstracts and the summary name them by these ids.
    pub originals: Vec<(ContentId, String)>,
    /// Why the event hid each of `originals` that is a tool output.
    pub hidden_why: Vec<(ContentId, event::Why)>,
    /// Why the LLM summarizer failed, when it did: the compaction was then summarised
    /// extractively.
    pub summarizer_failed: Option<String>,
    /// Tokens the event reclaimed (ctxgc's counts, calibrated), when one ran.
    pub reclaimed_tokens: usize,
    /// Why the prompt ctxgc changed (`messages`) fails the integrity check, when it does:
    /// found while viewing it for the token estimate, so the check costs no second parse.
    pub integrity: Option<integrity::IntegrityError>,
    /// The share of the prompt sent that the event a pause past the cache's lifetime would
    /// make free leaves ([`plan::kept_if_cold`]), when [`StepInput::weigh_cold`] asked for it
    /// and no event ran.
    pub kept_if_cold: Option<f64>,
    /// The prompt did not fit the window, and the event ran to make it fit: beyond what the
    /// policy's own event would cut ([`Plan::fits_window`]), or where events were held back.
    ///
    /// [`Plan::fits_window`]: ctxgc_core::engine::Plan::fits_window
    pub fits_window: bool,
}

/// Writes a compaction's summary (a blocking call to an LLM).
pub type SummarizeFn<'a> = dyn FnMut(&SummaryRequest) -> Result<SummaryReply, SummarizerError> + 'a;

/// The request a lineage step works on.
pub struct StepInput<'a> {
    /// The API.
    pub api: Api,
    /// The client's messages, or Responses `input` items (insertion-trimmed).
    pub client: &'a [Value],
    /// The system prompt outside the messages (Anthropic `system`, Responses `instructions`).
    pub system: Option<&'a Value>,
    /// Tool definitions (paid on every request).
    pub tools: &'a [Value],
    /// Whether an event may run (not for a token count).
    pub events: bool,
    /// Whether an event may run to make a prompt past the window fit
    /// ([`plan::must_fit`]) where `events` holds events back: not for a token count, and only
    /// for a model whose window is known (an assumed one may be smaller than the real one).
    pub fit_window: bool,
    /// When no event may run and no lineage is in force, do nothing at all: no view of the
    /// prompt, no token count (the estimate is then 0, which calibrates nothing).
    pub lazy: bool,
    /// Whether an event may summarise ([`PlanInput::may_compact`]): not in front of a client
    /// that keeps its own window (`[proxy] compact` off).
    pub may_compact: bool,
    /// Facts of the tool outputs' originals, by call id (from insertion).
    pub metas: &'a BTreeMap<String, ResultMeta>,
    /// Seconds since the session's previous request, when known.
    pub idle_secs: Option<u64>,
    /// How long the client asked the provider to keep its prompt cache, when longer than the
    /// default (see [`Policy::is_cache_cold`]).
    pub requested_ttl_secs: Option<u64>,
    /// The request's model's cache prices, when known: what an event's cache write costs.
    pub cache_prices: Option<ctxgc_core::provider_cache::CachePrices>,
    /// Also weigh the event a pause past the cache's lifetime would make free
    /// ([`Outcome::kept_if_cold`]): for a session that keep-alives may keep warm.
    pub weigh_cold: bool,
}

/// Applies the session's lineage to the client's (insertion-trimmed) messages, then runs an
/// event if one is due. `calibration` scales ctxgc's token counts to the upstream's (reported
/// usage / estimate, per session).
/// `summarize` writes a compaction's summary (an LLM); `None` summarises extractively. When it
/// fails, the extractive summary stands in and the failure is reported in the outcome.
pub fn step(
    input: &StepInput<'_>,
    state: Option<&Lineage>,
    policy: &Policy,
    window: u64,
    calibration: Calibration,
    counter: TokenCounter,
    summarize: Option<&mut SummarizeFn<'_>>,
) -> Result<Outcome, ProxyError> {
    let outcome = step_unchecked(
        input,
        state,
        policy,
        window,
        calibration,
        counter,
        summarize,
    )?;
    // Every prompt ctxgc changed is checked before it is forwarded: pairs intact, results
    // after their calls, the turn order the providers require. What fails goes to the caller,
    // who forwards the client's own request instead, unless the client's fails the same way
    // (then ctxgc made nothing worse).
    if let (Some(_), Some(why)) = (&outcome.messages, &outcome.integrity) {
        let theirs = input
            .api
            .wire()
            .view(input.system, input.client)
            .map(|v| integrity::check(&v.messages));
        if !matches!(theirs, Some(Err(_))) {
            return Err(why.clone().into());
        }
    }
    Ok(outcome)
}

fn step_unchecked(
    input: &StepInput<'_>,
    state: Option<&Lineage>,
    policy: &Policy,
    window: u64,
    calibration: Calibration,
    mut counter: TokenCounter,
    summarize: Option<&mut SummarizeFn<'_>>,
) -> Result<Outcome, ProxyError> {
    let (api, client) = (input.api, input.client);
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
    if input.lazy && !input.events && !input.weigh_cold && applied.is_none() {
        return Ok(Outcome {
            messages: None,
            lineage: None,
            event: None,
            estimated_tokens: 0,
            counted_in_full: false,
            originals: Vec::new(),
            hidden_why: Vec::new(),
            summarizer_failed: None,
            integrity: None,
            reclaimed_tokens: 0,
            kept_if_cold: None,
            fits_window: false,
        });
    }
    let current: &[Value] = applied.as_deref().unwrap_or(client);
    let fixed = counter.count_tools(input.tools) + 3;
    // Tokens of a prompt, tool definitions included, and why it fails the integrity check,
    // if it does: one view serves both.
    let estimate = |counter: &mut TokenCounter, prompt: &[Value]| {
        let view = api.wire().view(input.system, prompt);
        let tokens = view.as_ref().map_or(0, |v| {
            v.messages
                .iter()
                .map(|m| counter.count_message(m))
                .sum::<usize>()
        }) + fixed;
        (
            tokens,
            view.and_then(|v| integrity::check(&v.messages).err()),
        )
    };
    // One view of the prompt serves its token estimate, its integrity check and the plan.
    let Some(view) = api.wire().view(input.system, current) else {
        return Ok(Outcome {
            estimated_tokens: fixed,
            counted_in_full: false,
            integrity: None,
            messages: applied,
            lineage,
            event: None,
            originals: Vec::new(),
            hidden_why: Vec::new(),
            summarizer_failed: None,
            reclaimed_tokens: 0,
            kept_if_cold: None,
            fits_window: false,
        });
    };
    let messages = &view.messages;
    let counts: Vec<usize> = messages.iter().map(|m| counter.count_message(m)).collect();
    let unchanged = |applied: Option<Vec<Value>>, lineage: Option<Lineage>| Outcome {
        estimated_tokens: counts.iter().sum::<usize>() + fixed,
        counted_in_full: true,
        // Only what ctxgc changed is ctxgc's to answer for.
        integrity: applied
            .as_ref()
            .and_then(|_| integrity::check(messages).err()),
        messages: applied,
        lineage,
        event: None,
        originals: Vec::new(),
        hidden_why: Vec::new(),
        summarizer_failed: None,
        reclaimed_tokens: 0,
        kept_if_cold: None,
        fits_window: false,
    };
    let stopped = lineage.as_ref().is_some_and(|l| l.stopped.is_some());
    // 2. Is an event due? Plan on the prompt as the upstream would see it, in its tokens.
    let scale = |n: usize| calibration.scale(n);
    let tokens: Vec<usize> = counts.iter().map(|&n| scale(n)).collect();
    // What the lineage in force replaced stays: an event's tail may not start inside it.
    let kept = lineage.as_ref().map_or(0, |l| l.prefix.len());
    let frozen = view
        .origin
        .iter()
        .take_while(|o| o.is_none_or(|o| o.last < kept))
        .count();
    let plan_input = PlanInput {
        messages,
        tokens: &tokens,
        fixed_tokens: scale(fixed),
        metas: input.metas,
        window,
        frozen,
        cache_cold: policy.is_cache_cold(
            input.idle_secs,
            input.api.wire().family(),
            input.requested_ttl_secs,
        ),
        cache_prices: input.cache_prices,
        may_compact: input.may_compact,
        enforce_window: input.fit_window,
    };
    // A prompt past the window would fail: the event that makes it fit runs whatever holds
    // events back.
    let must_fit = plan::must_fit(&plan_input, policy);
    if (stopped || !(input.events || input.weigh_cold)) && !must_fit {
        return Ok(unchanged(applied, lineage));
    }
    // What a pause would make free, for the keep-alives' decision.
    let kept_if_cold = input
        .weigh_cold
        .then(|| plan::kept_if_cold(&plan_input, policy, &counter));
    if !input.events && !must_fit {
        return Ok(Outcome {
            kept_if_cold,
            ..unchanged(applied, lineage)
        });
    }
    // 3. The event, decided by the engine's one cycle, as the session engine decides it.
    let mut summarizer_failed = None;
    let mut ask = summarize.map(|summarize| {
        |request: &SummaryRequest| {
            // When the LLM fails, the extractive summary stands in (the event is not lost, the
            // request not failed).
            summarize(request).map_err(|why| {
                let why = why.to_string();
                summarizer_failed = Some(why.clone());
                why
            })
        }
    });
    let Some((plan, edits)) = event::decide(
        &plan_input,
        policy,
        &counter,
        input.tools,
        ask.as_mut().map(|f| f as &mut event::SummarizeFn<'_>),
    ) else {
        return Ok(Outcome {
            kept_if_cold,
            ..unchanged(applied, lineage)
        });
    };
    // The engine cuts between turns only, which are whole wire messages in every API.
    let boundary = |n: usize| {
        let at = view.wire_before(n);
        (at == view.wire_boundary(n, current.len()))
            .then_some(at)
            .ok_or(ProxyError::Boundary { at: n })
    };
    let (head, tail) = (boundary(plan.head_end)?, boundary(plan.tail_start)?);
    // Rendered on the client's wire items.
    let originals = event::hidden_originals(&edits, messages);
    let hidden_why = event::hidden_reasons(&edits, messages);
    let mut hidden = lineage.as_ref().map_or_else(Vec::new, |l| l.hidden.clone());
    for &i in &edits.hidden {
        for result in messages[i].tool_results() {
            if !hidden.iter().any(|h| h.call_id == result.call_id) {
                hidden.push(HiddenResult {
                    call_id: result.call_id.clone(),
                    from_result: input.metas.len(),
                });
            }
        }
    }
    let mut prompt = current.to_vec();
    let (event, boundary) = match &edits.change {
        Change::Prune(prune) => {
            for edit in prune {
                let Some(o) = view.origin[edit.index].filter(|o| o.last < tail) else {
                    return Err(ProxyError::Boundary { at: edit.index });
                };
                match &edit.replacement {
                    Replacement::Result(text) => {
                        api.wire()
                            .set_result_text(&mut prompt[o.first], o.block, text);
                    }
                    Replacement::Arguments { call_id, arguments } => {
                        for wire in &mut prompt[o.first..=o.last] {
                            api.wire().set_call_arguments(wire, call_id, arguments);
                        }
                    }
                    Replacement::Text(text) => {
                        // The message's text lives in its first item that has any.
                        let _ = prompt[o.first..=o.last]
                            .iter_mut()
                            .any(|wire| api.wire().set_assistant_text(wire, text));
                    }
                }
            }
            ("prune", tail)
        }
        Change::Compaction {
            pinned, summary, ..
        } => {
            let mut next: Vec<Value> = prompt[..head].to_vec();
            // What the client pins stays, verbatim and in order, before the summary: its own
            // wire message, or its part of one it shares with tool results.
            for &i in pinned {
                let Some(o) = view.origin[i] else {
                    return Err(ProxyError::Boundary { at: i });
                };
                let shared = view.origin.iter().enumerate().any(|(k, other)| {
                    k != i && other.is_some_and(|x| x.first <= o.last && o.first <= x.last)
                });
                if shared {
                    next.push(api.wire().without_results(&prompt[o.first]));
                } else {
                    next.extend_from_slice(&prompt[o.first..=o.last]);
                }
            }
            next.push(api.wire().user_text_item(summary));
            let boundary = next.len();
            next.extend_from_slice(&prompt[tail..]);
            prompt = next;
            ("compaction", boundary)
        }
    };
    // 4. The new lineage covers the client messages before the tail.
    // Prompt index i >= kept is client index covered + (i - kept).
    // A tail inside the kept prefix is a plan the lineage cannot follow: an error (the request
    // fails open, counted), never an underflow.
    let covered = match &lineage {
        None => tail,
        Some(l) => {
            l.covered
                + tail.checked_sub(kept).ok_or(ProxyError::Boundary {
                    at: plan.tail_start,
                })?
        }
    };
    // Judged as the session engine judges its events: two ineffective ones in a row stop them.
    let before = tokens.iter().sum::<usize>() + scale(fixed);
    let (estimated, integrity) = estimate(&mut counter, &prompt);
    let verdict = policy.judge_event(
        window,
        before,
        scale(estimated),
        lineage.as_ref().map_or(0, |l| l.ineffective),
    );
    let lineage = Lineage {
        covered,
        covered_hash: hash_messages(&client[..covered]),
        // Without the client's breakpoints: the client moves them on every request, and a
        // copy kept in the prefix would add to those it places next (past the API's four once
        // a window fit's prefix reaches the newest message).
        prefix: prompt[..boundary].iter().map(without_breakpoints).collect(),
        ineffective: verdict.ineffective_in_a_row,
        stopped: verdict.stop,
        hidden,
    };
    Ok(Outcome {
        estimated_tokens: estimated,
        counted_in_full: true,
        messages: Some(prompt),
        lineage: Some(lineage),
        event: Some(event),
        originals,
        hidden_why,
        summarizer_failed,
        integrity,
        reclaimed_tokens: before.saturating_sub(scale(estimated)),
        kept_if_cold: None,
        // Cut beyond the policy's own event, or run where events were held back.
        fits_window: plan.fits_window || must_fit && !input.events,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    /// A Chat request of `client` with events on, no system prompt, tools or pause.
    fn chat_input<'a>(
        client: &'a [Value],
        metas: &'a BTreeMap<String, ResultMeta>,
    ) -> StepInput<'a> {
        StepInput {
            api: Api::ChatCompletions,
            client,
            system: None,
            tools: &[],
            events: true,
            fit_window: true,
            lazy: false,
            may_compact: true,
            metas,
            idle_secs: None,
            requested_ttl_secs: None,
            cache_prices: None,
            weigh_cold: false,
        }
    }

    /// A model's runaway message (a repetition loop) in the tail is cut at the next event to its
    /// head and tail with its recall id, and its original is among what the proxy stores.
    #[test]
    fn a_runaway_message_is_cut_at_an_event_and_its_original_kept() {
        let runaway = "I will try again. ".repeat(9_000);
        let mut client = vec![json!({"role": "user", "content": "Fix the build."})];
        for turn in 0..12 {
            let id = format!("c{turn}");
            let text = if turn == 9 {
                runaway.clone()
            } else {
                "Running.".into()
            };
            client.push(json!({"role": "assistant", "content": text, "tool_calls": [{"id": id, "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}));
            client.push(json!({"role": "tool", "tool_call_id": id, "content": format!("line {turn}\n").repeat(400)}));
        }
        let no_metas = BTreeMap::new();
        let outcome = step(
            &chat_input(&client, &no_metas),
            None,
            &Policy::default(),
            64_000,
            Calibration::default(),
            TokenCounter::openai(),
            None,
        )
        .unwrap();
        let sent = outcome.messages.expect("an event ran");
        let cut = sent
            .iter()
            .find_map(|m| m["content"].as_str().filter(|t| t.contains("a runaway")))
            .expect("the runaway is cut");
        assert!(cut.len() < 5_000 && cut.starts_with("I will try again."));
        let id = ContentId::of(runaway.as_bytes());
        assert!(cut.contains(&id.to_string()));
        assert!(
            outcome
                .originals
                .iter()
                .any(|(i, text)| *i == id && *text == runaway)
        );
    }

    /// Defect guarded: the proxy forwarded what its lineage produced without the integrity
    /// check the replay lab runs, so a broken prefix (a result whose call it had dropped) went
    /// upstream and the API answered 400. A prompt that fails the check is refused (the caller
    /// forwards the client's own), unless the client's own fails it too.
    #[test]
    fn a_rewritten_prompt_that_breaks_a_pair_is_not_forwarded() {
        let client = vec![
            json!({"role": "user", "content": "Fix the build."}),
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": "a", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}),
            json!({"role": "tool", "tool_call_id": "a", "content": "ok"}),
            json!({"role": "user", "content": "Next."}),
        ];
        let broken = Lineage {
            covered: 3,
            covered_hash: hash_messages(&client[..3]),
            prefix: vec![
                json!({"role": "user", "content": "Fix the build."}),
                json!({"role": "tool", "tool_call_id": "gone", "content": "orphan"}),
            ],
            ineffective: 0,
            stopped: None,
            hidden: Vec::new(),
        };
        let no_metas = BTreeMap::new();
        let input = chat_input(&client, &no_metas);
        let run = |state: &Lineage, input: &StepInput<'_>| {
            step(
                input,
                Some(state),
                &Policy::default(),
                200_000,
                Calibration::default(),
                TokenCounter::openai(),
                None,
            )
        };
        let e = run(&broken, &input).err().unwrap();
        assert!(matches!(e, ProxyError::Integrity(_)), "{e}");
        assert!(e.to_string().contains("gone"), "{e}");
        // A sound lineage passes.
        let sound = Lineage {
            prefix: client[..3].to_vec(),
            ..broken.clone()
        };
        assert!(run(&sound, &input).unwrap().messages.is_some());
        // The client's own prompt fails the same way: ctxgc made nothing worse.
        let mut odd = client.clone();
        odd.push(json!({"role": "tool", "tool_call_id": "nobody", "content": "x"}));
        let input = StepInput {
            client: &odd,
            ..input
        };
        assert!(run(&broken, &input).is_ok());
    }

    /// Defect guarded: the proxy's lineage had no memory of how its events went, so a session
    /// whose fixed part sits near the threshold (Codex's instructions and tools at a small
    /// window) compacted on every other request, breaking the cache each time for nothing.
    /// Its events are now judged like the session engine's ([`Policy::judge_event`]); once
    /// they stopped, the lineage in force still applies and no event runs.
    #[test]
    fn a_session_whose_events_stopped_keeps_its_lineage_and_runs_none() {
        let system = json!("You are a coding agent. ".repeat(2_600));
        let run = |stopped: Option<String>| {
            let mut client = vec![json!({"role": "user", "content": "Fix the build."})];
            let mut state: Option<Lineage> = None;
            let mut events = 0;
            for turn in 0..20 {
                let id = format!("c{turn}");
                client.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}));
                client.push(json!({"role": "tool", "tool_call_id": id, "content": format!("output {turn} ").repeat(700)}));
                let no_metas = BTreeMap::new();
                // The window aside: a prompt past it gets the event that makes it fit, stop
                // or no stop (`fit_window`).
                let input = StepInput {
                    system: Some(&system),
                    fit_window: false,
                    ..chat_input(&client, &no_metas)
                };
                let outcome = step(
                    &input,
                    state.as_ref(),
                    &Policy::default(),
                    20_000,
                    Calibration::default(),
                    TokenCounter::openai(),
                    None,
                )
                .unwrap();
                if outcome.event.is_some() {
                    events += 1;
                    // From the first event on, as if two had been ineffective.
                    state = outcome.lineage.map(|l| Lineage {
                        stopped: stopped.clone().or(l.stopped.clone()),
                        ..l
                    });
                } else {
                    assert_eq!(outcome.lineage, state, "the lineage in force stays");
                    assert_eq!(outcome.messages.is_some(), state.is_some());
                }
            }
            events
        };
        assert!(run(None) >= 2, "the session compacts more than once");
        assert_eq!(run(Some("stopped".into())), 1, "no event after the stop");
    }

    /// The proxy runs the engine's cold-cache prune too: after a pause past the cache TTL, a
    /// session far under its threshold has its older outputs pruned; without the pause, not.
    #[test]
    fn a_pause_past_the_cache_ttl_prunes_in_the_proxy_too() {
        let mut client = vec![json!({"role": "user", "content": "Fix the build."})];
        for turn in 0..20 {
            let id = format!("c{turn}");
            client.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}));
            client.push(json!({"role": "tool", "tool_call_id": id, "content": format!("line {turn} of the build log\n").repeat(120)}));
        }
        let run = |idle_secs| {
            let no_metas = BTreeMap::new();
            let input = StepInput {
                idle_secs,
                ..chat_input(&client, &no_metas)
            };
            let policy = Policy::default();
            step(
                &input,
                None,
                &policy,
                200_000,
                Calibration::default(),
                TokenCounter::openai(),
                None,
            )
            .ok()
        };
        let event = |outcome: Outcome| outcome.event;
        assert_eq!(run(None).map(event), Some(None));
        assert_eq!(run(Some(60)).map(event), Some(None));
        // Chat Completions: OpenAI keeps a prefix up to 10 minutes.
        assert_eq!(run(Some(301)).map(event), Some(None));
        let pruned = run(Some(601)).expect("a step");
        assert_eq!(pruned.event, Some("prune"));
        // Each original the prune hid says why, by the id it is stored under: old, with what
        // the relevance table said of it (a shell output the agent never used).
        assert!(!pruned.originals.is_empty());
        for (id, _) in &pruned.originals {
            let (_, why) = pruned
                .hidden_why
                .iter()
                .find(|(i, _)| i == id)
                .expect("a reason for each hidden original");
            assert_eq!(why.action, ctxgc_core::engine::event::Action::Pruned);
            assert_eq!(
                why.reason,
                Some(ctxgc_core::engine::prune::PruneReason::Old)
            );
            let features = why.features.expect("the table was asked");
            assert_eq!(features.class, "shell");
            assert!(why.likelihood.is_some_and(|l| l < 0.05), "{why:?}");
        }
    }

    /// A warm request of a session with old outputs to prune says what a keep-alive would give
    /// up: the cold prune's share kept, below 1, without running it; a session with nothing to
    /// prune would keep all of it. Only when asked (no plan is made for it otherwise), and also
    /// where events run only after a pause (`lazy`, no event possible on a warm request).
    #[test]
    fn a_warm_request_weighs_the_prune_an_expiry_would_make_free() {
        let mut client = vec![json!({"role": "user", "content": "Fix the build."})];
        for turn in 0..20 {
            let id = format!("c{turn}");
            client.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}));
            client.push(json!({"role": "tool", "tool_call_id": id, "content": format!("line {turn} of the build log\n").repeat(120)}));
        }
        let no_metas = BTreeMap::new();
        let run = |client: &[Value], weigh_cold| {
            let input = StepInput {
                idle_secs: Some(5),
                events: false,
                fit_window: true,
                lazy: true,
                weigh_cold,
                ..chat_input(client, &no_metas)
            };
            step(
                &input,
                None,
                &Policy::default(),
                200_000,
                Calibration::default(),
                TokenCounter::openai(),
                None,
            )
            .unwrap()
        };
        let weighed = run(&client, true);
        assert_eq!(weighed.event, None, "nothing runs on a warm request");
        let kept = weighed.kept_if_cold.expect("weighed");
        assert!(
            kept > 0.0 && kept < 0.9,
            "the prune drops old outputs: {kept}"
        );
        assert_eq!(run(&client, false).kept_if_cold, None);
        assert_eq!(
            run(&client[..3], true).kept_if_cold,
            Some(1.0),
            "nothing to prune"
        );
    }

    /// In front of a client that keeps its own window (`[proxy] compact` off), an event due at
    /// a cold cache prunes but never summarises: the client still shows its whole history.
    #[test]
    fn without_compact_a_cold_event_never_summarises() {
        // A chatty session near a 20K window: no tool output to prune, only a middle to summarise.
        let mut client = vec![json!({"role": "user", "content": "Plan the migration."})];
        for turn in 0..24 {
            client.push(
                json!({"role": "assistant", "content": format!("step {turn}: ").repeat(150)}),
            );
            client
                .push(json!({"role": "user", "content": format!("and then {turn}? ").repeat(60)}));
        }
        let run = |may_compact, fit_window| {
            let no_metas = BTreeMap::new();
            let input = StepInput {
                idle_secs: Some(3_600),
                may_compact,
                fit_window,
                ..chat_input(&client, &no_metas)
            };
            step(
                &input,
                None,
                &Policy::default(),
                20_000,
                Calibration::default(),
                TokenCounter::openai(),
                None,
            )
            .unwrap()
            .event
        };
        assert_eq!(run(true, false), Some("compaction"));
        assert_eq!(run(false, false), None);
        // Past the window, a request would fail whatever the client shows: it is compacted.
        assert_eq!(run(false, true), Some("compaction"));
    }
}
