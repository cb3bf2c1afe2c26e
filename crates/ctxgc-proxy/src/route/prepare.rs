//! The request pipeline, off the async workers: the agent tools' state, insertion trimming,
//! the engine's lineage step (with the integrity check) and the commit of new originals, in
//! that order; any failure is a [`ProxyError`] and the caller forwards the client's request.

use ctxgc_core::provider_cache;
use ctxgc_core::store::{SessionId, StateKey};
use ctxgc_formats::ApiRequest;

use crate::agent::tools as agent;
use crate::error::ProxyError;
use crate::lifetime::fields as lifetime;
use crate::observe::metrics::{Forwarded, Stage};
use crate::observe::sessions::Forwarding;
pub(crate) use crate::rewrite::jobs::{Caller, Prepared, Purpose};
use crate::rewrite::jobs::{Job, PrepareJob};
use crate::rewrite::lineage;
use crate::rewrite::request as rewrite;
use crate::state::AppState;
use crate::wire::splice_json;

/// Tokens a provider adds to a request beyond its body (its own system text for tools): a body
/// this far under the prompt limit in bytes cannot pass it.
const LAZY_MARGIN_TOKENS: usize = 4_096;

/// Everything done to a request before it is forwarded: the session's agent state replayed and
/// the agent tools injected, insertion trimming, the engine's lineage, and the originals
/// committed to the store, as its `caller` allows.
pub(crate) fn prepare(
    state: &AppState,
    request: &mut ApiRequest,
    client_bytes: rewrite::ClientBytes<'_>,
    session: &SessionId,
    purpose: Purpose,
    caller: Caller,
) -> Result<Prepared, ProxyError> {
    let raw = client_bytes.raw;
    let counting = purpose == Purpose::Count;
    let deadline = std::time::Instant::now() + state.settings.limits.rewrite_deadline;
    let without_cache_fields;
    let settings = if caller.refused.rewrite {
        without_cache_fields = rewrite::RewriteSettings {
            prompt_cache_key: false,
            cache_breakpoints: false,
            ..state.settings.rewrite.clone()
        };
        &without_cache_fields
    } else {
        &state.settings.rewrite
    };
    let mut agent_changed = false;
    let mut lineage_changed = false;
    let mut lineage_edit: Option<(usize, Vec<u8>)> = None;
    let mut event = None;
    let mut kept_if_cold = None;
    let mut injected = None;
    let started = std::time::Instant::now();
    if settings.inject_tools {
        let agent_state = state.timed(|store| agent::load(store, session))?;
        let end = agent::ClientEnd::of(request);
        agent_changed |= agent::apply(&mut request.body, request.api, &agent_state);
        // A token count includes the tools the real request will carry; its answer holds no
        // calls to run.
        if agent::inject(&mut request.body, request.api) {
            agent_changed = true;
            injected = (purpose == Purpose::Request).then_some(end);
        }
    }
    state.metrics.stage(Stage::AgentTools, started.elapsed());
    let started = std::time::Instant::now();
    // The lineage in force: what its events hid is never pointed to by a new repeat. Read
    // once here; advancing it reads it again only when another request changed it meanwhile.
    let mut lineage_now = match &settings.engine {
        Some(_) => Some(read_lineage(state, session)?),
        None => None,
    };
    let lineage_in_force = lineage_now
        .as_ref()
        .is_some_and(|(_, current)| current.is_some());
    let hidden: &[lineage::HiddenResult] = lineage_now
        .as_ref()
        .and_then(|(_, current)| current.as_ref())
        .map_or(&[], |l| l.hidden.as_slice());
    let mut out = {
        let stored = |id| state.memos.is_committed(session, id);
        // Once the agent state changed the parsed body, the client's bytes no longer match it.
        let client = (!agent_changed).then_some(client_bytes);
        rewrite::rewrite_within(
            request,
            client,
            session.as_str(),
            settings,
            &state.memos.trims,
            &stored,
            hidden,
            Some(deadline),
        )
        .map_err(|rewrite::Overdue| ProxyError::Overdue {
            after: state.settings.limits.rewrite_deadline,
        })?
    };
    state.metrics.stage(Stage::Rewrite, started.elapsed());
    let started = std::time::Instant::now();
    // The engine's events across requests.
    let wire = request.api.wire();
    // The client changed the fixed part of the conversation: this request writes every message.
    let mut client_rewrote = false;
    let (items_key, system_key) = (wire.items_key(), wire.system_key());
    // Abstracts and summaries name the way back the agent has, as trim markers do.
    let policy = settings
        .engine
        .as_ref()
        .map(|policy| with_recall_way(policy, out.recall_way.clone()));
    if let Some(policy) = policy.as_deref()
        && let Some(serde_json::Value::Array(slot)) = request.body.get_mut(items_key)
    {
        // Taken out, not cloned: it goes back unchanged unless an event or lineage applies.
        let client = std::mem::take(slot);
        // Borrowed, not cloned (Codex declares some 10 KB of tools on every request).
        let tools = request
            .body
            .get("tools")
            .and_then(serde_json::Value::as_array)
            .map_or(&[][..], Vec::as_slice);
        // How long the session was silent: past the cache TTL, the next event is free. So it
        // is when the client changed the fixed part of the conversation (its tools, thinking
        // settings, model): every message is written again, whatever an event does. (A new
        // system prompt starts a new session: it names the conversation, see `identity`.)
        let arrival = match purpose {
            Purpose::Request => {
                let fixed = fixed_part(&request.body, system_key);
                state
                    .sessions
                    .arrive(session, fixed, state.settings.keepalive.second)
            }
            _ => crate::observe::sessions::Arrival::default(),
        };
        if arrival.fixed_changed {
            tracing::debug!("the client changed its fixed part: events are free");
            client_rewrote = true;
        }
        let idle_secs = match purpose {
            Purpose::Count => None,
            Purpose::Request if arrival.fixed_changed => Some(u64::from(u32::MAX)),
            Purpose::Request => arrival.idle_secs,
            // Past any lifetime: the task runs only once the one in force has passed.
            Purpose::Idle => Some(u64::from(u32::MAX)),
        };
        // A client that asked the provider to keep its cache longer keeps it warm longer, as
        // does a model whose entries live longer anyway (GPT-5.6's 30 minutes). That can only
        // matter after a pause past the provider's default lifetime, so the body is searched
        // for it only then, not on every request.
        let requested_ttl_secs = policy
            .is_cache_cold(idle_secs, wire.family(), None)
            .then(|| {
                requested_cache_secs(raw)
                    .or_else(|| {
                        let hint = wire.cache_hint();
                        state
                            .sessions
                            .life(session, |l| l.long_secs(hint))
                            .flatten()
                    })
                    .or_else(|| {
                        request.body["model"]
                            .as_str()
                            .and_then(ctxgc_core::cache_life::model_min_lifetime_secs)
                    })
            })
            .flatten();
        // One event per pause: when it was prepared while the session was idle, the request
        // that resumes it carries that one (through the lineage) and adds no latency of its own.
        let prepared = arrival.prepared;
        let when = !prepared
            && (!settings.events_only_when_cold
                || policy.is_cache_cold(idle_secs, wire.family(), requested_ttl_secs));
        // The window: the model's, a long context the session asked for, or `--window`. Only
        // a known one is enforced: an assumed window may be smaller than the real one, and
        // cutting a history to it is not free.
        let model = request.body["model"].as_str();
        if caller.long_context && purpose == Purpose::Request {
            state.sessions.note_long_context(session);
        }
        let long_context = caller.long_context || state.sessions.long_context(session);
        // The upstream took a larger prompt of this session before: the window is at least
        // that, whatever the table says.
        let window = settings
            .window_for(model, long_context)
            .max(state.sessions.answered_past_window(session));
        let fit_window = !counting && settings.knows_window(model, long_context);
        // A body of fewer bytes than the limit cannot pass it (no tokenizer makes a token of
        // less than a byte), so one that small needs no count; nor does a larger one that the
        // session's last count, plus the bytes added since, holds under it.
        let limit = policy.prompt_limit(window);
        let bounded_by_count = |raw: &[u8]| {
            let spans = client_bytes.item_spans?;
            let counter = state.memos.counter(request.api, &state.settings.tokens);
            let bound = state.memos.counted(session)?.bound(raw, spans, &counter)?;
            Some(state.sessions.calibration(session).scale(bound))
        };
        let counts_reusable = purpose == Purpose::Request && !agent_changed && !lineage_in_force;
        let could_pass = fit_window
            && raw.len() + LAZY_MARGIN_TOKENS > limit
            && (!counts_reusable
                || bounded_by_count(raw).is_none_or(|bound| bound + LAZY_MARGIN_TOKENS > limit));
        let step = lineage::StepInput {
            api: request.api,
            client: &client,
            system: system_key.and_then(|key| request.body.get(key)),
            tools,
            // A token count sees the lineage in force but never runs or records an event.
            events: !counting && when,
            fit_window,
            lazy: settings.events_only_when_cold && !could_pass,
            may_compact: !settings.events_only_when_cold,
            metas: &out.metas,
            idle_secs,
            requested_ttl_secs,
            cache_prices: request.body["model"]
                .as_str()
                .and_then(ctxgc_core::models::cache_prices),
            // Only for a caller that gets keep-alives (Anthropic's, where the proxy offers
            // them): anyone else's requests plan no event they would never use.
            weigh_cold: purpose == Purpose::Request && caller.kept_alive,
        };
        let mut outcome = advance_lineage(
            state,
            session,
            &step,
            policy,
            window,
            counting,
            lineage_now.take(),
        )?;
        // Where the proxy places Anthropic's breakpoints, the end of the summary (or pruned
        // prefix) gets one too: what an event rewrote is then read from the cache afterwards.
        if let (true, Some(messages), Some(l)) = (
            out.added_breakpoints,
            outcome.messages.as_mut(),
            &outcome.lineage,
        ) && let Some(last) = l.prefix.len().checked_sub(1)
        {
            rewrite::mark_breakpoint(&mut messages[last]);
        }
        // What the next requests' bounds start from: a count of the client's own items as
        // sent, no lineage before or after.
        if counts_reusable
            && outcome.counted_in_full
            && outcome.lineage.is_none()
            && let Some(spans) = client_bytes.item_spans
            && let Some(counted) =
                crate::rewrite::counted::Counted::of(raw, spans, outcome.estimated_tokens)
        {
            state.memos.note_counted(session, counted);
        }
        out.originals.append(&mut outcome.originals);
        out.hidden_why.extend(outcome.hidden_why.drain(..));
        if purpose == Purpose::Request {
            state
                .sessions
                .record_estimate(session, outcome.estimated_tokens, window);
        }
        event = outcome.event;
        kept_if_cold = outcome.kept_if_cold;
        if let Some(kind) = outcome.event {
            state.metrics.event(kind, outcome.reclaimed_tokens);
            tracing::info!(event = kind, tokens = outcome.estimated_tokens, "event");
        }
        if outcome.fits_window {
            let limit = policy.prompt_limit(window);
            let fits = state
                .sessions
                .calibration(session)
                .scale(outcome.estimated_tokens)
                <= limit;
            state.metrics.window_fit(fits);
            tracing::warn!(
                window,
                limit,
                tokens = outcome.estimated_tokens,
                fits,
                "prompt past the window: the event made it fit, cutting what it had to"
            );
        }
        // The lineage replaces the client's first `covered` items with its prefix: spliced
        // into the bytes about to be sent, the rest of the history is not serialised again.
        if let (Some(messages), Some(l)) = (&outcome.messages, &outcome.lineage) {
            lineage_edit = match serde_json::to_vec(&messages[..l.prefix.len()]) {
                Ok(array) if array.len() > 2 => Some((l.covered, array)),
                _ => None,
            };
            lineage_changed = true;
        }
        request.body[items_key] = serde_json::Value::Array(outcome.messages.unwrap_or(client));
    }
    if agent_changed {
        out.body = Some(request.to_bytes());
    } else if lineage_changed {
        let items_key = request.api.wire().items_key();
        let spliced = lineage_edit.and_then(|(covered, array)| {
            // Where the client's items lie says nothing of a body the rewrite changed.
            let (base, item_spans) = match out.body.as_deref() {
                Some(rewritten) => (rewritten, None),
                None => (raw, client_bytes.item_spans),
            };
            let elements = &array[1..array.len() - 1];
            splice_json::splice_elements(base, (items_key, item_spans), covered, elements)
        });
        out.body = Some(spliced.unwrap_or_else(|| request.to_bytes()));
    }
    state.metrics.stage(Stage::Events, started.elapsed());
    let fresh = state
        .metrics
        .timed(Stage::Commit, || {
            commit_originals(state, session, &out.originals)
        })?
        .into_iter()
        .map(|(id, bytes)| crate::observe::sessions::FreshOriginal {
            id,
            bytes,
            kept_bytes: out.kept_bytes.get(&id).copied(),
            why: out.hidden_why.get(&id).copied(),
        })
        .collect::<Vec<_>>();
    // The cache's lifetime, last: it only sets cache fields on the bytes about to be sent.
    let mut cache_edit = None;
    if purpose == Purpose::Request {
        let rewritten = out.body.take();
        let base = rewritten.as_deref().unwrap_or(raw);
        let asked = lifetime::asked(request, base.len(), client_rewrote);
        let settings = &state.settings.rewrite.cache;
        let now = std::time::Instant::now();
        let what = state
            .sessions
            .life(session, |life| {
                lifetime::decide(
                    settings,
                    life,
                    (now, state.settings.keepalive.second),
                    &asked,
                )
            })
            .flatten()
            // The session's pauses are noted all the same.
            .filter(|_| !caller.refused.lifetime);
        match what {
            Some(what) => {
                out.body = Some(lifetime::edit(request, &asked, what, base));
                cache_edit = Some(lifetime::CacheEdit {
                    without: rewritten,
                    what,
                });
            }
            None => out.body = rewritten,
        }
    }
    Ok(Prepared {
        out,
        injected,
        event,
        fresh,
        cache_edit,
        kept_if_cold,
    })
}

/// Whose request the pipeline runs on, for what, and what its caller allows.
pub(crate) struct Request<'a> {
    pub(crate) tenant: &'a str,
    pub(crate) session: &'a SessionId,
    pub(crate) model: Option<&'a str>,
    pub(crate) purpose: Purpose,
    pub(crate) caller: Caller,
    /// Where the client's conversation items lie in its bytes, when its parse found that.
    pub(crate) item_spans: Option<&'a [(usize, usize)]>,
}

/// What goes upstream after the pipeline, and what it leaves for the stages after it.
pub(crate) struct Outgoing {
    /// The body to send: the rewrite's, or the client's own.
    pub(crate) body: bytes::Bytes,
    /// The agent tools were injected: where the client's own history ended.
    pub(crate) injected: Option<agent::ClientEnd>,
    /// The cache fields the lifetime set, with the body without them.
    pub(crate) cache_edit: Option<lifetime::CacheEdit>,
    /// The rewrite set cache fields of its own (a `prompt_cache_key`, breakpoints).
    pub(crate) by_rewrite: bool,
    /// The pipeline ran; false when the request goes as it came (fail open).
    pub(crate) prepared: bool,
    /// What a keep-alive after this request would give up ([`Prepared::kept_if_cold`]).
    pub(crate) kept_if_cold: Option<f64>,
}

/// Runs the pipeline on `request` (its client's bytes: `raw`) and counts what it did: the
/// bytes saved and originals stored, the session's forwarded request and the cache fields
/// set. A failure forwards the client's bytes (fail open), logged and counted.
pub(crate) async fn rewrite_or_forward(
    s: &std::sync::Arc<AppState>,
    request: ApiRequest,
    raw: &bytes::Bytes,
    on: Request<'_>,
) -> Outgoing {
    let api = request.api;
    let counting = on.purpose == Purpose::Count;
    match run(
        s,
        request,
        (raw, on.item_spans),
        (on.tenant, on.session),
        (on.purpose, on.caller),
    )
    .await
    {
        Ok(prepared) => {
            let out = prepared.out;
            let by_rewrite = out.added_breakpoints || out.added_cache_key;
            let (how, body) = match out.body {
                Some(body) => (Forwarded::Rewritten, bytes::Bytes::from(body)),
                None => (Forwarded::Unchanged, raw.clone()),
            };
            let stored = prepared.fresh.len() as u64;
            s.metrics.forwarded(api, how, out.bytes_saved, stored, None);
            if !counting {
                s.sessions.record_forwarded(
                    on.session,
                    &Forwarding {
                        api: api.name(),
                        model: on.model,
                        received_bytes: raw.len(),
                        sent_bytes: body.len(),
                        event: prepared.event,
                        fresh: &prepared.fresh,
                    },
                );
            }
            if let Some(edit) = &prepared.cache_edit {
                s.metrics.cache_field(edit.what);
                s.sessions.record_cache_field(on.session, edit.what);
            }
            Outgoing {
                body,
                injected: prepared.injected,
                cache_edit: prepared.cache_edit,
                by_rewrite,
                prepared: true,
                kept_if_cold: prepared.kept_if_cold,
            }
        }
        Err(why) => {
            s.metrics
                .forwarded(api, Forwarded::FailOpen, 0, 0, Some(why.cause()));
            tracing::warn!(error = %why, "fail open: forwarding the request unchanged");
            Outgoing {
                body: raw.clone(),
                injected: None,
                cache_edit: None,
                by_rewrite: false,
                prepared: false,
                kept_if_cold: None,
            }
        }
    }
}

/// Runs the pipeline on the rewrite workers once a rewrite slot is free: rewriting is
/// synchronous CPU work plus a local store write. A panic, a store failure or no free slot
/// within the deadline is an error, and the caller forwards the original (fail open).
pub(crate) async fn run(
    s: &std::sync::Arc<AppState>,
    request: ApiRequest,
    (raw, item_spans): (&bytes::Bytes, Option<&[(usize, usize)]>),
    (tenant, session): (&str, &ctxgc_core::store::SessionId),
    (purpose, caller): (Purpose, Caller),
) -> Result<Prepared, ProxyError> {
    let queued_at = std::time::Instant::now();
    let Some(slot) = s
        .gate
        .enter(tenant, raw.len(), crate::state::REWRITE_QUEUE_DEADLINE)
        .await
    else {
        return Err(ProxyError::Busy {
            waited: crate::state::REWRITE_QUEUE_DEADLINE,
        });
    };
    let (done, prepared) = tokio::sync::oneshot::channel();
    let job = PrepareJob {
        queued_at,
        request,
        raw: raw.clone(),
        item_spans: item_spans.map(std::sync::Arc::from),
        session: session.clone(),
        purpose,
        caller,
        slot,
        span: tracing::Span::current(),
        done,
    };
    s.workers.submit(Job::Prepare(job))?;
    prepared.await.unwrap_or_else(|_| {
        Err(ProxyError::Task(
            "the pipeline ended without an answer".into(),
        ))
    })
}

/// Runs a request's pipeline on a rewrite worker and answers it: the request goes upstream
/// while its parsed document is freed here, and the slot (and its share of the rewrite budget)
/// is freed after it. A panic is answered as an error.
pub(crate) fn answer(s: &AppState, job: PrepareJob) {
    let PrepareJob {
        mut request,
        raw,
        item_spans,
        session,
        purpose,
        caller,
        slot,
        span,
        queued_at,
        done,
    } = job;
    s.metrics.stage(Stage::Queue, queued_at.elapsed());
    let _entered = span.enter();
    let prepared = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let client = rewrite::ClientBytes {
            raw: &raw,
            item_spans: item_spans.as_deref(),
        };
        prepare(s, &mut request, client, &session, purpose, caller)
    }))
    .unwrap_or_else(|panic| {
        Err(ProxyError::Task(crate::rewrite::jobs::panic_message(
            &*panic,
        )))
    });
    let _ = done.send(prepared);
    drop(request);
    drop(slot);
}

/// ctxgc's count of a request's prompt: its conversation as the provider frames it, its system
/// prompt and its tool definitions.
pub(crate) fn prompt_tokens(state: &AppState, request: &ApiRequest) -> usize {
    let wire = request.api.wire();
    let items = request
        .body
        .get(wire.items_key())
        .and_then(serde_json::Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let system = wire.system_key().and_then(|key| request.body.get(key));
    let tools = request
        .body
        .get("tools")
        .and_then(serde_json::Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let mut counter = state.memos.counter(request.api, &state.settings.tokens);
    let messages = wire.view(system, items).map_or(0, |v| {
        v.messages
            .iter()
            .map(|m| counter.count_message(m))
            .sum::<usize>()
    });
    counter.count_tools(tools) + 3 + messages
}

/// How long the provider keeps this request's prompt cache, when the client asked for longer
/// than the default few minutes: Anthropic's one-hour breakpoints (`"ttl": "1h"`), OpenAI's
/// extended retention (`"prompt_cache_retention": "24h"`). Read from the body's bytes: the same
/// text inside a message only makes ctxgc wait longer before an event, never break a warm cache.
fn requested_cache_secs(raw: &[u8]) -> Option<u64> {
    [
        (
            &b"\"prompt_cache_retention\""[..],
            &b"\"24h\""[..],
            provider_cache::OPENAI_EXTENDED_RETENTION_SECS,
        ),
        (
            &b"\"ttl\""[..],
            &b"\"1h\""[..],
            provider_cache::ANTHROPIC_LONG_TTL_SECS,
        ),
    ]
    .into_iter()
    .find(|(key, value, _)| {
        memchr::memmem::find_iter(raw, key).any(|at| {
            let rest = &raw[at + key.len()..];
            let rest = rest.trim_ascii_start();
            rest.strip_prefix(b":")
                .is_some_and(|r| r.trim_ascii_start().starts_with(value))
        })
    })
    .map(|(_, _, secs)| secs)
}

/// Times a request of a session may find its lineage moved on by a concurrent request of the
/// same session (another replica, another connection of the client) before it fails open.
const LINEAGE_ATTEMPTS: usize = 3;

/// Runs the engine's step on the session's lineage and saves the new lineage with a
/// compare-and-set: no lock is held meanwhile (the step may wait seconds on an LLM summary),
/// and a step computed from a lineage that changed since is computed again from the new one.
/// A session's lineage as the store holds it (compared on swap) and parsed.
type StoredLineage = (Option<String>, Option<lineage::Lineage>);

fn read_lineage(state: &AppState, session: &SessionId) -> Result<StoredLineage, ProxyError> {
    let stored = state.timed(|store| store.get_state(StateKey::Lineage(session)))?;
    let current = stored
        .as_deref()
        .and_then(|json| serde_json::from_str(json).ok());
    Ok((stored, current))
}

/// `policy`, its abstracts and summaries naming `way` (a summary hint the user configured
/// stays).
fn with_recall_way(
    policy: &ctxgc_core::engine::Policy,
    way: Option<ctxgc_core::agent_tools::RecallWay>,
) -> std::borrow::Cow<'_, ctxgc_core::engine::Policy> {
    let Some(way) = way else {
        return std::borrow::Cow::Borrowed(policy);
    };
    let mut own = policy.clone();
    if own.recall_hint.is_empty() || own.recall_hint == ctxgc_core::engine::policy::RECALL_TOOL_HINT
    {
        own.recall_hint = way.hint();
    }
    own.recall_way = Some(way);
    std::borrow::Cow::Owned(own)
}

fn advance_lineage(
    state: &AppState,
    session: &SessionId,
    step: &lineage::StepInput<'_>,
    policy: &ctxgc_core::engine::Policy,
    window: u64,
    counting: bool,
    mut read: Option<StoredLineage>,
) -> Result<lineage::Outcome, ProxyError> {
    let key = StateKey::Lineage(session);
    let calibration = state.sessions.calibration(session);
    for _ in 0..LINEAGE_ATTEMPTS {
        // The lineage lives in the store, so replicas and restarts continue the session. The
        // first attempt uses the one read before the rewrite.
        let (stored, current) = match read.take() {
            Some(read) => read,
            None => read_lineage(state, session)?,
        };
        let mut llm = state.summarizer.blocking();
        let outcome = lineage::step(
            step,
            current.as_ref(),
            policy,
            window,
            calibration,
            state.memos.counter(step.api, &state.settings.tokens),
            llm.as_mut().map(|f| f as &mut lineage::SummarizeFn<'_>),
        )?;
        if let Some(why) = &outcome.summarizer_failed {
            // The extractive summary stood in; the LLM is not asked again for a while.
            state.summarizer.failed();
            state.metrics.summarizer_failure();
            tracing::warn!(error = %why, "the LLM summarizer failed; summarised extractively");
        }
        // A token count of some other history must not end the lineage in force.
        if counting || outcome.lineage == current {
            return Ok(outcome);
        }
        let was_stopped = current.as_ref().is_some_and(|l| l.stopped.is_some());
        if let Some(why) = outcome.lineage.as_ref().and_then(|l| l.stopped.as_ref())
            && !was_stopped
        {
            tracing::info!(reason = %why, "automatic events stopped for this session");
        }
        let json =
            serde_json::to_string(&outcome.lineage).map_err(|source| ProxyError::Serialise {
                what: "lineage",
                source,
            })?;
        if state.timed(|store| store.swap_state(key, stored.as_deref(), &json))? {
            return Ok(outcome);
        }
    }
    Err(ProxyError::Contended {
        what: "lineage",
        attempts: LINEAGE_ATTEMPTS,
    })
}

/// Writes the originals this process has not committed yet, in one store operation, before
/// anything that refers to them is forwarded; returns how many it wrote.
fn commit_originals(
    state: &AppState,
    session: &SessionId,
    originals: &[(ctxgc_core::ContentId, String)],
) -> Result<Vec<(ctxgc_core::ContentId, usize)>, ProxyError> {
    let mut fresh: Vec<(ctxgc_core::ContentId, &str)> = Vec::new();
    for (id, text) in originals {
        if !state.memos.is_committed(session, *id) && !fresh.iter().any(|(f, _)| f == id) {
            fresh.push((*id, text));
        }
    }
    if fresh.is_empty() {
        return Ok(Vec::new());
    }
    state.timed(|store| store.put_all(session, &fresh))?;
    state
        .memos
        .note_committed(session, fresh.iter().map(|(id, _)| *id));
    Ok(fresh.iter().map(|(id, text)| (*id, text.len())).collect())
}

/// A hash of what a request carries besides its conversation that the provider's cache depends
/// on for every message: the model, the tools and tool choice, the system prompt, and
/// Anthropic's thinking settings (a change of which invalidates the messages' cache, as its
/// prompt caching guide says). Breakpoints aside.
fn fixed_part(body: &serde_json::Value, system_key: Option<&str>) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    let keys = ["model", "tools", "tool_choice", "toolConfig", "thinking"];
    for key in keys.into_iter().chain(system_key) {
        h.update(key.as_bytes());
        if let Some(v) = body.get(key) {
            h.update(&crate::agent::tools::fingerprint(v).to_le_bytes());
        }
    }
    h.digest()
}

#[cfg(test)]
mod tests {
    use super::requested_cache_secs;

    #[test]
    fn a_longer_cache_the_client_asked_for_is_read_from_the_body() {
        let anthropic = br#"{"system":[{"type":"text","text":"x","cache_control":{"type":"ephemeral","ttl": "1h"}}]}"#;
        assert_eq!(requested_cache_secs(anthropic), Some(3600));
        let openai = br#"{"model":"gpt-5.1","prompt_cache_retention":"24h","input":[]}"#;
        assert_eq!(requested_cache_secs(openai), Some(86_400));
        let default = br#"{"system":[{"type":"text","text":"x","cache_control":{"type":"ephemeral"}}],"ttl":5}"#;
        assert_eq!(requested_cache_secs(default), None);
        assert_eq!(
            requested_cache_secs(br#"{"prompt_cache_retention":"in-memory"}"#),
            None
        );
    }
}
