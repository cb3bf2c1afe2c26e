//! Sending: a request's body upstream with the client's request line and headers, and its
//! answer relayed to the client as it arrives, SSE and JSON byte for byte, with the usage it
//! reports read on the way (`crate::upstream::tap`) into the session table ([`relay`]); at the
//! end of the shutdown grace, what is still open is cut. A request on which ctxgc set cache fields is resent
//! once without them when the upstream refuses one; a body past the memory budget streams
//! upstream as it comes; every other request is forwarded untouched.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::Response;
use ctxgc_core::store::SessionId;
use ctxgc_formats::{Api, Upstream};

use crate::observe::metrics::Forwarded;
use crate::reply::error_response;
use crate::state::AppState;
use crate::upstream::client::{is_event_stream, response_headers};
use crate::upstream::tap::Tap;
use futures_util::StreamExt;

/// The cache fields ctxgc set on a request, for the fall-back when the upstream refuses one.
pub(crate) struct SetFields<'a> {
    /// Set by the cache's lifetime decisions (a TTL, a retention, a breakpoint), with the body
    /// without them.
    pub(crate) edit: Option<crate::lifetime::fields::CacheEdit>,
    /// Set by the rewrite (the session's `prompt_cache_key`, Anthropic breakpoints): the
    /// fall-back is then the client's own bytes, which carry none of ctxgc's fields.
    pub(crate) by_rewrite: bool,
    /// Whose request, for which model: a refusal is remembered for them ([`crate::lifetime::refusals`]).
    pub(crate) tenant: &'a str,
    pub(crate) model: &'a str,
}

/// Sends `body`, the request as prepared, and relays its answer (for `tapped`, a request of
/// that API and session); a request on which ctxgc set cache fields (`fields`) falls back to
/// `client_bytes` (or the body without the lifetime's field) when the upstream refuses one.
pub(crate) async fn forward(
    s: &Arc<AppState>,
    upstream: Upstream,
    parts: Parts,
    (body, fields): (Bytes, SetFields<'_>),
    tapped: (Api, SessionId),
    client_bytes: Bytes,
) -> Response {
    if fields.edit.is_some() || fields.by_rewrite {
        send_with_cache_fallback(s, upstream, parts, body, fields, tapped, client_bytes).await
    } else {
        send_and_relay(s, upstream, parts, body, Some(tapped)).await
    }
}

/// Sends a request on which ctxgc set cache fields; when the upstream answers 400 naming one
/// of them (a model without the 24-hour retention, a gateway that refuses unknown fields), the
/// request is resent once without them, the fall-back counted as a fail-open (`cache_field`),
/// and the caller's later requests to that upstream and model carry none for a while.
async fn send_with_cache_fallback(
    s: &Arc<AppState>,
    upstream: Upstream,
    parts: Parts,
    body: Bytes,
    fields: SetFields<'_>,
    tapped: (Api, SessionId),
    client_bytes: Bytes,
) -> Response {
    let first = s
        .upstreams
        .send(
            upstream,
            parts.method.clone(),
            &parts.uri,
            &parts.headers,
            body,
        )
        .await;
    let response = match first {
        Ok(response) => response,
        Err(response) => return response,
    };
    if response.status() != reqwest::StatusCode::BAD_REQUEST {
        return relay(s, response, Some(tapped));
    }
    let status = response.status();
    let headers = crate::upstream::client::response_headers(&response);
    let answer = match response.bytes().await {
        Ok(answer) => answer,
        Err(e) => {
            return error_response(
                StatusCode::BAD_GATEWAY,
                "api_error",
                format!("ctxgc: the upstream's answer could not be read: {e}"),
            );
        }
    };
    if !crate::lifetime::fields::rejects_cache_field(&answer) {
        let mut out = Response::new(Body::from(answer));
        *out.status_mut() = status;
        *out.headers_mut() = headers;
        return out;
    }
    s.metrics
        .forwarded(tapped.0, Forwarded::FailOpen, 0, 0, Some("cache_field"));
    // Without the lifetime's field where the refusal names it alone (the rest of the rewrite
    // kept), else as the client sent it.
    let rewrite_refused =
        fields.by_rewrite && crate::lifetime::fields::names_rewrite_field(&answer);
    let refused = crate::lifetime::refusals::Refused {
        lifetime: fields.edit.is_some() && !rewrite_refused,
        rewrite: rewrite_refused,
    };
    s.refusals.note(
        (fields.tenant, upstream, fields.model),
        refused,
        std::time::Instant::now(),
    );
    let set = fields
        .edit
        .as_ref()
        .map_or("prompt_cache_key or breakpoints", |e| e.what);
    tracing::warn!(
        field = set,
        by_rewrite = fields.by_rewrite,
        "fail open: the upstream refused a cache field ctxgc set; resent without it, and the \
         caller's requests for this model carry no such field for an hour"
    );
    let without = match fields.edit {
        Some(edit) if !rewrite_refused => edit.without.map_or(client_bytes, Bytes::from),
        _ => client_bytes,
    };
    send_and_relay(s, upstream, parts, without, Some(tapped)).await
}

/// Sends `body` upstream with the client's request line and headers, and relays the answer
/// (reading its usage for `tapped`, a request of that API and session).
pub(crate) async fn send_and_relay(
    s: &Arc<AppState>,
    upstream: Upstream,
    parts: Parts,
    body: impl Into<reqwest::Body>,
    tapped: Option<(Api, SessionId)>,
) -> Response {
    match s
        .upstreams
        .send(upstream, parts.method, &parts.uri, &parts.headers, body)
        .await
    {
        Ok(response) => relay(s, response, tapped),
        Err(response) => response,
    }
}

/// A request that does not fit the memory budget: `read` (what was read of it) and then the
/// rest of `body`, streamed upstream as they come, unchanged (fail open, counted).
pub(crate) async fn unbuffered(
    s: &Arc<AppState>,
    api: Api,
    parts: Parts,
    (read, body): (Bytes, Body),
    (needed, left): (usize, usize),
) -> Response {
    use futures_util::StreamExt;
    s.metrics.request();
    s.metrics
        .forwarded(api, Forwarded::FailOpen, 0, 0, Some("memory"));
    tracing::warn!(
        api = api.name(),
        needed,
        left,
        "fail open: streamed upstream unbuffered, the in-flight memory budget is spent"
    );
    let first =
        futures_util::stream::iter((!read.is_empty()).then_some(Ok::<_, axum::Error>(read)));
    let stream = first.chain(body.into_data_stream());
    let upstream = api.wire().upstream();
    send_and_relay(s, upstream, parts, reqwest::Body::wrap_stream(stream), None).await
}

/// Every other request: forwarded untouched.
pub(crate) async fn passthrough(State(s): State<Arc<AppState>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    // Nothing here is rewritten: the body streams through as it comes.
    let upstream = s.upstreams.for_other(&parts.uri, &parts.headers);
    send_and_relay(
        &s,
        upstream,
        parts,
        reqwest::Body::wrap_stream(body.into_data_stream()),
        None,
    )
    .await
}

/// Streams an upstream response to the client as it arrives, byte for byte, reading the usage
/// it reports on the way (for a request of `session`).
pub(crate) fn relay(
    s: &Arc<AppState>,
    response: reqwest::Response,
    session: Option<(Api, SessionId)>,
) -> Response {
    let status = response.status();
    let headers = response_headers(&response);
    let streaming = is_event_stream(response.headers());
    let api = session.as_ref().map(|(api, _)| *api);
    let mut tap = session.map(|(api, session)| Tap::new(api, session, streaming));
    let state = s.clone();
    let idle = s.settings.timeouts.upstream_idle;
    let stream = response.bytes_stream().map(move |chunk| {
        if let (Ok(bytes), Some(t)) = (&chunk, tap.as_mut()) {
            t.feed(bytes);
            if let Some((session, usage, response_id)) = t.finished() {
                if let Some(usage) = usage {
                    state.sessions.record_usage(&session, usage);
                }
                if let Some(id) = response_id {
                    state.responses.remember(id, &session);
                }
            }
        }
        chunk
    });
    // A stream the upstream stopped feeding ends with an error event the client sees (rather
    // than a connection that just stops), then nothing more.
    let stream = stream.scan(false, move |failed, chunk| {
        let item = match chunk {
            _ if *failed => None,
            Ok(bytes) => Some(Ok(bytes)),
            Err(e) if streaming => {
                *failed = true;
                let why = if e.is_timeout() {
                    format!("the upstream sent nothing for {} s", idle.as_secs())
                } else {
                    format!("the upstream stream broke: {}", e.without_url())
                };
                Some(Ok(error_event(api, &format!("ctxgc: {why}"))))
            }
            Err(e) => {
                *failed = true;
                Some(Err(std::io::Error::other(e.without_url())))
            }
        };
        std::future::ready(item)
    });
    // At the end of the shutdown grace, what is still open is cut: a stream with its API's
    // error event, a JSON answer by ending its body early (the client sees it incomplete).
    // One future for the whole answer (one made per chunk cost a waiter registration each).
    let mut cut = s.cut.subscribe();
    let cut: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> =
        Box::pin(async move {
            if cut.wait_for(|c| *c).await.is_err() {
                std::future::pending::<()>().await;
            }
        });
    let counted = s.clone();
    let stream = futures_util::stream::unfold(
        (Box::pin(stream), cut, false, counted),
        move |(mut inner, mut cut, done, counted)| async move {
            if done {
                return None;
            }
            tokio::select! {
                biased;
                item = inner.next() => item.map(|i| (i, (inner, cut, false, counted))),
                () = &mut cut => {
                    counted
                        .streams_cut
                        .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                    let item = if streaming {
                        Ok(error_event(api, "ctxgc: the proxy is shutting down and its grace period ended before this answer did"))
                    } else {
                        Err(std::io::Error::other("cut at the end of the shutdown grace"))
                    };
                    Some((item, (inner, cut, true, counted)))
                }
            }
        },
    );
    let mut resp = Response::new(Body::from_stream(stream));
    *resp.status_mut() = status;
    *resp.headers_mut() = headers;
    resp
}

/// An error event in the stream format of `api`, as its own servers send one mid-stream
/// (Anthropic's shape when the API is not known).
fn error_event(api: Option<Api>, message: &str) -> Bytes {
    Bytes::from(api.unwrap_or(Api::Messages).wire().stream_error(message))
}
