//! The round trip of the agent tools: the upstream answers with calls to `trim_tool_result` or
//! `recall_tool_result`, the proxy runs them, records what they did in the session's
//! [`AgentState`](crate::agent::tools::AgentState) and, when the model called nothing else, calls the
//! upstream again with the history the client will later resend plus that state. The client
//! receives one answer, streamed when it asked for a stream, without the internal calls.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::Response;
use ctxgc_core::store::SessionId;
use ctxgc_formats::{Api, ApiRequest, Upstream};
use futures_util::StreamExt;
use serde_json::Value;
use tracing::Instrument;

use crate::agent::splice::Splicer;
use crate::agent::tools::{self as agent, Call, ClientEnd, Exchange, Merge};
use crate::error::ProxyError;
use crate::reply::error_response;
use crate::rewrite::jobs::{Job, RoundJob};
use crate::route::prepare::{Prepared, Purpose, prepare};
use crate::route::send::relay;
use crate::state::AppState;
use crate::upstream::client::{is_event_stream, response_headers};
use crate::upstream::tap::Tap;

/// Upstream calls per client request at most; the last round is asked for an answer without
/// tool calls (`tool_choice: none`).
const MAX_ROUNDS: usize = 4;

/// A client request whose rounds the proxy runs.
pub(crate) struct Context {
    /// The server.
    pub(crate) s: Arc<AppState>,
    /// The request's API.
    pub(crate) api: Api,
    /// The upstream.
    pub(crate) upstream: Upstream,
    /// The client's request line and headers.
    pub(crate) parts: Parts,
    /// The client's body as it came.
    pub(crate) raw: Bytes,
    /// Where the client's own history ended.
    pub(crate) end: ClientEnd,
    /// The session.
    pub(crate) session: SessionId,
}

/// Forwards `first` (a request with the tools injected) and runs the rounds.
pub(crate) async fn run(cx: Context, first: Bytes) -> Response {
    let response = match cx.send(first).await {
        Ok(r) => r,
        Err(response) => return response,
    };
    if !response.status().is_success() {
        return relay(&cx.s, response, Some((cx.api, cx.session)));
    }
    if is_event_stream(response.headers()) {
        return streamed(cx, response);
    }
    buffered(cx, response).await
}

/// Times a round may find the session's agent state moved on by a concurrent request before it
/// fails open.
const AGENT_STATE_ATTEMPTS: usize = 3;

impl Context {
    async fn send(&self, body: Bytes) -> Result<reqwest::Response, Response> {
        self.s
            .upstreams
            .send(
                self.upstream,
                self.parts.method.clone(),
                &self.parts.uri,
                &self.parts.headers,
                body,
            )
            .await
    }

    /// Runs a round's internal calls on the rewrite workers ([`answer`]); returns the next
    /// request's body when the upstream must be called again. When that next round is the
    /// `last` allowed, it asks for an answer without tool calls.
    async fn execute(
        &self,
        calls: Vec<Call>,
        assistant: Vec<Value>,
        follow_up: bool,
        last: bool,
    ) -> Result<Option<Bytes>, ProxyError> {
        let (done, answered) = tokio::sync::oneshot::channel();
        let job = RoundJob {
            api: self.api,
            client: (self.raw.clone(), self.end),
            session: self.session.clone(),
            calls,
            assistant,
            follow_up,
            last,
            done,
        };
        self.s.workers.submit(Job::Round(job))?;
        answered
            .await
            .unwrap_or_else(|_| Err(ProxyError::Task("the round ended without an answer".into())))
    }

    fn fail(&self, why: &str) {
        self.s.metrics.failed_open();
        tracing::warn!(error = why, "the agent tools failed");
    }
}

/// Runs a round of the agent tools on a rewrite worker and answers it (a panic as an error).
pub(crate) fn answer(s: &AppState, job: RoundJob) {
    let RoundJob {
        api,
        client: (raw, end),
        session,
        calls,
        assistant,
        follow_up,
        last,
        done,
    } = job;
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        round(
            s,
            api,
            (&raw, &end),
            &session,
            (calls, assistant),
            (follow_up, last),
        )
    }))
    .unwrap_or_else(|panic| {
        Err(ProxyError::Task(crate::rewrite::jobs::panic_message(
            &*panic,
        )))
    });
    let _ = done.send(ran);
}

/// A round: the internal calls run and recorded in the session's agent state (compare-and-set,
/// again on a newer state when another request of the session saved first); with `follow_up`,
/// the next request's body.
fn round(
    s: &AppState,
    api: Api,
    (raw, end): (&Bytes, &ClientEnd),
    session: &SessionId,
    (calls, assistant): (Vec<Call>, Vec<Value>),
    (follow_up, last): (bool, bool),
) -> Result<Option<Bytes>, ProxyError> {
    let (len, anchor) = (end.len, end.anchor);

    let client: Value =
        serde_json::from_slice(raw).map_err(|e| ctxgc_formats::FormatError::Json(e.to_string()))?;
    let max_bytes = s.settings.rewrite.trim.hard_cap_bytes;
    // No lock: the state is saved with a compare-and-set, and the round is recorded
    // again on the newer state when another request of the session saved first (the
    // calls' own effects, storing originals, are idempotent).
    let mut saved = false;
    for _ in 0..AGENT_STATE_ATTEMPTS {
        let (mut state, read) = agent::load_versioned(&*s.store, session)?;
        let mut internal_calls = Vec::new();
        let mut results = Vec::new();
        for call in calls.iter().filter(|c| agent::is_internal_call(c)) {
            let text = agent::execute(
                call, api, &client, session, &*s.store, &mut state, max_bytes,
            )?;
            internal_calls.push(call.raw.clone());
            results.push(agent::result_part(api, call, &text));
        }
        if follow_up {
            let anchor = anchor.ok_or(ProxyError::Agent(
                "an exchange needs a client history to follow",
            ))?;
            let mut items = assistant.clone();
            items.extend(agent::result_items(api, results));
            state.exchanges.push(Exchange {
                at: len,
                anchor,
                items,
            });
        } else if let Some(client_call) = calls.iter().find(|c| !agent::is_internal_call(c)) {
            state.merges.push(Merge {
                with_call: client_call.id.clone(),
                calls: internal_calls,
                results,
                positions: calls
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| agent::is_internal_call(c))
                    .map(|(k, _)| k)
                    .collect(),
            });
        }
        if agent::save_if_unchanged(&*s.store, session, read.as_deref(), &state)? {
            saved = true;
            break;
        }
    }
    if !saved {
        return Err(ProxyError::Contended {
            what: "agent state",
            attempts: AGENT_STATE_ATTEMPTS,
        });
    }
    let internal = calls.iter().filter(|c| agent::is_internal_call(c)).count() as u64;
    s.metrics.agent_tool_calls(internal);
    if !follow_up {
        return Ok(None);
    }
    let mut request = ApiRequest::parse(api, raw)?;
    let Prepared { out, .. } = prepare(
        s,
        &mut request,
        crate::rewrite::request::ClientBytes {
            raw,
            item_spans: None,
        },
        session,
        Purpose::Request,
        crate::route::prepare::Caller::default(),
    )?;
    if last {
        // The client could not run a call the model makes now: ask for an answer.
        api.wire().set_no_tool_calls(&mut request.body);
        return Ok(Some(Bytes::from(request.to_bytes())));
    }
    Ok(Some(Bytes::from(out.body.unwrap_or_else(|| raw.to_vec()))))
}

/// Removes internal calls from a complete response.
fn strip_internal(api: Api, response: &mut Value) {
    let internal_call = |v: &Value| {
        let name = v
            .get("name")
            .or_else(|| v.pointer("/function/name"))
            .or_else(|| v.pointer("/functionCall/name"))
            .and_then(Value::as_str);
        name.is_some_and(agent::is_internal)
    };
    if let Some(items) = api.wire().response_call_list(response) {
        items.retain(|v| !internal_call(v));
    }
}

async fn buffered(cx: Context, mut response: reqwest::Response) -> Response {
    for round in 0..MAX_ROUNDS {
        let status = response.status();
        let headers = response_headers(&response);
        let body = match response.bytes().await {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(error = %e.without_url(), "upstream response cut");
                return error_response(
                    StatusCode::BAD_GATEWAY,
                    "upstream_cut",
                    "ctxgc: the upstream response was cut".into(),
                );
            }
        };
        let mut tap = Tap::new(cx.api, cx.session.clone(), false);
        tap.feed(&body);
        if let Some((session, u)) = tap.finished_usage() {
            cx.s.sessions.record_usage(&session, u);
        }
        let reply = |body: Bytes| {
            let mut r = Response::new(Body::from(body));
            *r.status_mut() = status;
            *r.headers_mut() = headers.clone();
            r
        };
        let parsed = serde_json::from_slice::<Value>(&body).ok();
        let Some(mut value) = parsed.filter(|_| status.is_success()) else {
            return reply(body);
        };
        let calls = agent::calls_in_response(cx.api, &value);
        if !calls.iter().any(agent::is_internal_call) {
            return reply(body);
        }
        let follow_up = calls.iter().all(agent::is_internal_call) && round + 1 < MAX_ROUNDS;
        let assistant = agent::assistant_items(cx.api, &value);
        match cx
            .execute(calls, assistant, follow_up, round + 2 == MAX_ROUNDS)
            .await
        {
            Ok(Some(next)) => match cx.send(next).await {
                Ok(r) => response = r,
                Err(r) => return r,
            },
            Ok(None) => {
                strip_internal(cx.api, &mut value);
                return reply(Bytes::from(value.to_string()));
            }
            Err(why) => {
                cx.fail(&why.to_string());
                strip_internal(cx.api, &mut value);
                return reply(Bytes::from(value.to_string()));
            }
        }
    }
    unreachable!("the last round never follows up")
}

/// An error told inside an SSE stream already under way.
fn stream_error(api: Api, message: &str) -> Bytes {
    Bytes::from(api.wire().stream_error(message))
}

fn streamed(cx: Context, first: reqwest::Response) -> Response {
    let status = first.status();
    let headers = response_headers(&first);
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(32);
    tokio::spawn(async move {
        let mut splicer = Splicer::new(cx.api);
        let mut response = first;
        for round in 0..MAX_ROUNDS {
            splicer.set_last_round(round + 1 == MAX_ROUNDS);
            let mut tap = Tap::new(cx.api, cx.session.clone(), true);
            let mut body = response.bytes_stream();
            while let Some(chunk) = body.next().await {
                let bytes = match chunk {
                    Ok(b) => b,
                    Err(e) => {
                        // A cut upstream stream reaches the client as a cut stream.
                        let _ = tx.send(Err(std::io::Error::other(e.without_url()))).await;
                        return;
                    }
                };
                tap.feed(&bytes);
                if let Some((session, u)) = tap.finished_usage() {
                    cx.s.sessions.record_usage(&session, u);
                }
                let out = splicer.feed(&bytes);
                if !out.is_empty() && tx.send(Ok(Bytes::from(out))).await.is_err() {
                    return; // the client went away
                }
            }
            let (rest, done) = splicer.finish();
            if !rest.is_empty() && tx.send(Ok(Bytes::from(rest))).await.is_err() {
                return;
            }
            if !done.calls.iter().any(agent::is_internal_call) {
                return;
            }
            let follow_up = done.follow_up;
            let last = round + 2 == MAX_ROUNDS;
            match cx
                .execute(done.calls, done.assistant, follow_up, last)
                .await
            {
                Ok(Some(next)) => match cx.send(next).await {
                    Ok(r) if r.status().is_success() && is_event_stream(r.headers()) => {
                        response = r;
                    }
                    Ok(r) => {
                        let why = format!(
                            "the upstream answered {} to the request after the ctxgc tool calls: {}",
                            r.status(),
                            r.text().await.unwrap_or_default()
                        );
                        let _ = tx.send(Ok(stream_error(cx.api, &why))).await;
                        return;
                    }
                    Err(_) => {
                        let why = "the upstream could not be reached after the ctxgc tool calls";
                        let _ = tx.send(Ok(stream_error(cx.api, why))).await;
                        return;
                    }
                },
                Ok(None) => return,
                Err(why) => {
                    cx.fail(&why.to_string());
                    if follow_up {
                        let _ = tx
                            .send(Ok(stream_error(
                                cx.api,
                                &format!("ctxgc could not run its tools: {why}"),
                            )))
                            .await;
                    }
                    return;
                }
            }
        }
    }.instrument(tracing::Span::current()));
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    let mut resp = Response::new(Body::from_stream(stream));
    *resp.status_mut() = status;
    *resp.headers_mut() = headers;
    resp
}
