//! What happens to a request on an API route: its body read within its deadline and limit and
//! decoded, parsed once, its tenant and session found, the pipeline run off the async workers
//! (or the request forwarded unchanged when it fails: fail open), then the upstream called and
//! its answer relayed, through the agent tools' rounds when they were injected. Every other
//! request is forwarded untouched.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use ctxgc_formats::{Api, ApiRequest, FormatError};
use tracing::Instrument;

use crate::identity::Tenant;
use crate::metrics::Forwarded;
use crate::pipeline::{self, Prepared, Purpose};
use crate::relay::relay;
use crate::reply::{Refusal, error_response};
use crate::sessions::Forwarding;
use crate::state::AppState;
use crate::{agentic, background, keepalive, shadow};

/// A body whose parse reads more than this many bytes is parsed off the async workers.
const INLINE_PARSE_BYTES: usize = 256 * 1024;

/// A request of `api`: rewritten, forwarded, its answer relayed.
pub(crate) async fn api_request(s: Arc<AppState>, api: Api, req: Request) -> Response {
    let (mut parts, body) = req.into_parts();
    // Memory for the body (and its parse) is reserved before it is read: past the budget, the
    // request is streamed upstream as it comes.
    let declared = parts
        .headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
    if declared.is_some_and(|n| n > s.settings.max_body_bytes) {
        s.metrics.bad_request();
        return too_large(&s).into_response();
    }
    let mut reserved = match s.memory.reserve(declared.unwrap_or(0)) {
        Ok(reserved) => reserved,
        Err(short) => {
            return unbuffered(&s, api, parts, Bytes::new(), body, short).await;
        }
    };
    let bytes = match read_body_within(&s, body, &mut reserved).await {
        Ok(Read::Whole(b)) => b,
        Ok(Read::OverBudget { read, rest, short }) => {
            return unbuffered(&s, api, parts, read, rest, short).await;
        }
        Err(refusal) => return refusal.into_response(),
    };
    // What the client sent, to forward as it came if the decoded body does not fit (the
    // headers are kept only when decoding changes them).
    let encoded = (
        parts
            .headers
            .contains_key(axum::http::header::CONTENT_ENCODING)
            .then(|| parts.headers.clone()),
        bytes.clone(),
    );
    let bytes = match decode_request_body(&s, &mut parts.headers, bytes) {
        Ok(b) => b,
        Err(refusal) => return refusal.into_response(),
    };
    // Read whole, the body is weighed by what parsing and rewriting it takes (objects weigh
    // more than their bytes): past the budget it goes upstream as the client sent it.
    let weight = crate::gate::weight_of(&bytes);
    if let Err(short) = reserved.settle(weight) {
        drop(bytes);
        if let Some(headers) = encoded.0 {
            parts.headers = headers;
        }
        return unbuffered(&s, api, parts, encoded.1, Body::empty(), short).await;
    }
    drop(encoded);
    s.metrics.request();
    let tenant = s.tenant_of(&parts.headers, parts.uri.query());
    // Bodies are kept for the next request's parse only by a proxy serving one request at a
    // time (the developer's own): under a load, memory goes to the requests in flight.
    let alone = reserved.alone();
    s.recent_bodies.note_arrival(bytes.len());
    let continued = alone
        .then(|| s.recent_bodies.continued(&tenant, &bytes))
        .flatten();
    // A body that continues a kept one is parsed after it: only what follows the items they
    // share is read, and the rest is cloned.
    let resumed_at = continued.as_ref().map_or(0, |(kept, shared)| {
        kept.previous(*shared).resumes_at(*shared)
    });
    let read = bytes.len().saturating_sub(resumed_at);
    let parsed = if read > INLINE_PARSE_BYTES {
        // Parsing megabytes is CPU work: off the async workers, which every other request
        // needs.
        let (s, body, tenant) = (s.clone(), bytes.clone(), tenant.clone());
        let how = (tenant, alone, weight);
        tokio::task::spawn_blocking(move || parse(&s, api, body, how, continued))
            .await
            .unwrap_or_else(|e| Err(FormatError::Json(format!("the parse failed: {e}"))))
    } else {
        // Within the bound, a hop to a blocking thread and back costs as much as the parse:
        // at 100K tokens an agent's next request (one that continues its kept body) reads
        // only its new items here, and a body is resumed only while no other request is in
        // flight (`alone`), so no other request waits on this worker meanwhile.
        let how = (tenant.clone(), alone, weight);
        parse(&s, api, bytes.clone(), how, continued)
    };
    let (request, layout) = match parsed {
        Ok(r) => r,
        // Gemini's countTokens may wrap its request (`generateContentRequest`): counted
        // upstream as sent.
        Err(_) if api == Api::Gemini && parts.uri.path().ends_with(":countTokens") => {
            return send_and_relay(&s, api.wire().upstream(), parts, bytes, None).await;
        }
        // A lone surrogate escape (an emoji cut in half) is valid to the providers, not to
        // ctxgc's parser: the body goes upstream as it came.
        Err(FormatError::Json(j)) if is_lone_surrogate(&j) => {
            tracing::warn!(
                api = api.name(),
                "forwarded unchanged: the body holds a lone surrogate escape ({j})"
            );
            s.metrics
                .forwarded(api, Forwarded::FailOpen, 0, 0, Some("unparsed"));
            return send_and_relay(&s, api.wire().upstream(), parts, bytes, None).await;
        }
        Err(e) => {
            s.metrics.bad_request();
            let why = match e {
                FormatError::Json(j) => format!("ctxgc: the request body is not valid JSON: {j}"),
                other => format!("ctxgc: not a {} request: {other}", api.name()),
            };
            return error_response(StatusCode::BAD_REQUEST, "invalid_request_error", why);
        }
    };
    // Gemini names the model in the path (`/v1beta/models/{model}:method`).
    let model = request.body["model"]
        .as_str()
        .map(str::to_owned)
        .or_else(|| {
            let (_, rest) = parts.uri.path().split_once("/models/")?;
            Some(rest.split(':').next()?.to_owned())
        });
    let session = s.session_of(&tenant, &request, &parts.headers);
    let span = tracing::info_span!(
        "request",
        api = api.name(),
        session = session.as_str(),
        tenant = tenant.as_str().get(..8).unwrap_or(tenant.as_str()),
    );
    if s.observer.is_some() {
        // Forwarded as it came; what ctxgc would have sent is computed beside it.
        shadow::observe(&s, request, bytes.clone(), session.clone());
        s.metrics.forwarded(api, Forwarded::Unchanged, 0, 0, None);
        let upstream = api.wire().upstream();
        return send_and_relay(&s, upstream, parts, bytes, Some((api, session)))
            .instrument(span)
            .await;
    }
    async move {
        let path = parts.uri.path();
        let counting = path.ends_with("/count_tokens") || path.ends_with(":countTokens");
        let purpose = if counting {
            Purpose::Count
        } else {
            Purpose::Request
        };
        // Whether this caller gets keep-alives: read once, for the pipeline (which then weighs
        // what one would give up) and for the work beside the request.
        let kept_alive =
            api == Api::Messages && keepalive::consents(&s.settings.rewrite.cache, &parts.headers);
        let upstream = api.wire().upstream();
        let model_name = model.as_deref().unwrap_or_default();
        let caller = pipeline::Caller {
            kept_alive,
            long_context: api == Api::Messages && asks_long_context(&parts.headers),
            refused: s.refusals.refused(
                (tenant.as_str(), upstream, model_name),
                std::time::Instant::now(),
            ),
        };
        let (forward_bytes, injected, cache_edit, prepared, kept_if_cold, by_rewrite) =
            match pipeline::run(
                &s,
                request,
                &bytes,
                (tenant.as_str(), &session),
                (purpose, caller),
            )
            .await
            {
                Ok(Prepared {
                    out,
                    injected,
                    event,
                    fresh,
                    cache_edit,
                    kept_if_cold,
                }) => {
                    let by_rewrite = out.added_breakpoints || out.added_cache_key;
                    let (how, body) = match out.body {
                        Some(body) => (Forwarded::Rewritten, Bytes::from(body)),
                        None => (Forwarded::Unchanged, bytes.clone()),
                    };
                    let stored = fresh.len() as u64;
                    s.metrics.forwarded(api, how, out.bytes_saved, stored, None);
                    if !counting {
                        s.sessions.record_forwarded(
                            &session,
                            &Forwarding {
                                api: api.name(),
                                model: model.as_deref(),
                                received_bytes: bytes.len(),
                                sent_bytes: body.len(),
                                event,
                                fresh: &fresh,
                            },
                        );
                    }
                    if let Some(edit) = &cache_edit {
                        s.metrics.cache_field(edit.what);
                        s.sessions.record_cache_field(&session, edit.what);
                    }
                    (body, injected, cache_edit, true, kept_if_cold, by_rewrite)
                }
                Err(why) => {
                    s.metrics
                        .forwarded(api, Forwarded::FailOpen, 0, 0, Some(why.cause()));
                    tracing::warn!(error = %why, "fail open: forwarding the request unchanged");
                    (bytes.clone(), None, None, false, None, false)
                }
            };
        if !counting {
            // Work beside the request: its keep-alives, its idle preparation, the client's bill.
            if api == Api::Messages {
                let sent = (&forward_bytes, prepared, kept_if_cold);
                background::note_keepalive(&s, &session, (&parts, kept_alive), sent);
            }
            let client = (bytes.clone(), layout);
            let who = crate::client_bill::client_of(&parts.headers);
            background::bill_as_the_client_alone(&s, &session, (api, model.clone(), who), client);
            background::note_idle(&s, &session, (api, kept_alive), (&bytes, prepared));
        }
        if let Some(end) = injected {
            let cx = agentic::Context {
                s: s.clone(),
                api,
                upstream,
                parts,
                raw: bytes,
                end,
                session,
            };
            return agentic::run(cx, forward_bytes).await;
        }
        if cache_edit.is_some() || by_rewrite {
            let fields = SetFields {
                edit: cache_edit,
                by_rewrite,
                tenant: tenant.as_str(),
                model: model_name,
            };
            send_with_cache_fallback(
                &s,
                upstream,
                parts,
                forward_bytes,
                fields,
                (api, session),
                bytes,
            )
            .await
        } else {
            send_and_relay(&s, upstream, parts, forward_bytes, Some((api, session))).await
        }
    }
    .instrument(span)
    .await
}

/// Parses a body, after the tenant's kept body it continues (`continued`, with the bytes they
/// share: [`crate::recent_bodies`]), and keeps it (as parsed, before anything rewrites it)
/// when its session has come back. Other bodies, and any while other requests are in flight
/// (`alone` false), are parsed whole, without a layout (a layout parse allocates more).
/// `weight`: the body's [`crate::gate::weight_of`], weighed once by the caller. The layout
/// found, if any, goes with the body to the client's bill ([`crate::client_bill`]), which then
/// need not scan it again.
fn parse(
    s: &AppState,
    api: Api,
    raw: Bytes,
    (tenant, alone, weight): (Tenant, bool, usize),
    continued: Option<(Arc<crate::recent_bodies::Recent>, usize)>,
) -> Result<(ApiRequest, Option<ctxgc_formats::Layout>), FormatError> {
    let (continued, shared) = continued.unzip();
    if !alone
        || !s
            .recent_bodies
            .worth_keeping(&tenant, (&raw, weight), continued.as_ref())
    {
        return Ok((ApiRequest::parse_envelope(api, &raw)?, None));
    }
    let previous = continued
        .as_deref()
        .zip(shared)
        .map(|(kept, shared)| kept.previous(shared));
    let (request, layout) = ApiRequest::parse_envelope_after(api, &raw, previous)?;
    if let Some(layout) = &layout {
        let kept = (raw, &request.body, layout.clone());
        let items_key = api.wire().items_key();
        s.recent_bodies
            .keep(tenant, kept, (items_key, weight), continued);
    }
    Ok((request, layout))
}

/// The cache fields ctxgc set on a request, for the fall-back when the upstream refuses one.
struct SetFields<'a> {
    /// Set by the cache's lifetime decisions (a TTL, a retention, a breakpoint), with the body
    /// without them.
    edit: Option<crate::lifetime::CacheEdit>,
    /// Set by the rewrite (the session's `prompt_cache_key`, Anthropic breakpoints): the
    /// fall-back is then the client's own bytes, which carry none of ctxgc's fields.
    by_rewrite: bool,
    /// Whose request, for which model: a refusal is remembered for them ([`crate::refusals`]).
    tenant: &'a str,
    model: &'a str,
}

/// Sends a request on which ctxgc set cache fields; when the upstream answers 400 naming one
/// of them (a model without the 24-hour retention, a gateway that refuses unknown fields), the
/// request is resent once without them, the fall-back counted as a fail-open (`cache_field`),
/// and the caller's later requests to that upstream and model carry none for a while.
async fn send_with_cache_fallback(
    s: &Arc<AppState>,
    upstream: ctxgc_formats::Upstream,
    parts: axum::http::request::Parts,
    body: Bytes,
    fields: SetFields<'_>,
    tapped: (Api, ctxgc_core::store::SessionId),
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
    let headers = crate::upstream::response_headers(&response);
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
    if !crate::lifetime::rejects_cache_field(&answer) {
        let mut out = Response::new(Body::from(answer));
        *out.status_mut() = status;
        *out.headers_mut() = headers;
        return out;
    }
    s.metrics
        .forwarded(tapped.0, Forwarded::FailOpen, 0, 0, Some("cache_field"));
    // Without the lifetime's field where the refusal names it alone (the rest of the rewrite
    // kept), else as the client sent it.
    let rewrite_refused = fields.by_rewrite && crate::lifetime::names_rewrite_field(&answer);
    let refused = crate::refusals::Refused {
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
async fn send_and_relay(
    s: &Arc<AppState>,
    upstream: ctxgc_formats::Upstream,
    parts: axum::http::request::Parts,
    body: impl Into<reqwest::Body>,
    tapped: Option<(Api, ctxgc_core::store::SessionId)>,
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
async fn unbuffered(
    s: &Arc<AppState>,
    api: Api,
    parts: axum::http::request::Parts,
    read: Bytes,
    body: Body,
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

/// Whether a JSON error is a lone surrogate escape (`"\ud83d"` alone), which JSON as the
/// providers read it accepts.
fn is_lone_surrogate(error: &str) -> bool {
    error.starts_with("lone leading surrogate in hex escape")
        || error.starts_with("unexpected end of hex escape")
}

/// What reading a body gave.
enum Read {
    /// The whole body, within the memory reserved for it.
    Whole(Bytes),
    /// The body outgrew what the memory budget had left: what was read, and the rest unread.
    OverBudget {
        read: Bytes,
        rest: Body,
        short: (usize, usize),
    },
}

/// The request body, within the configured deadline and size, growing `reserved` as it
/// arrives (a body of undeclared length).
async fn read_body_within(
    s: &AppState,
    mut body: Body,
    reserved: &mut crate::gate::Reserved,
) -> Result<Read, Refusal> {
    use http_body_util::BodyExt;
    let deadline = s.settings.timeouts.client_body;
    let until = tokio::time::Instant::now() + deadline;
    // A declared length is reserved already: the buffer takes it at once instead of growing
    // by doubling, which copied a 100K-token body about once more and faulted in its pages.
    let mut buffer = bytes::BytesMut::with_capacity(reserved.body_bytes());
    loop {
        let frame = match tokio::time::timeout_at(until, body.frame()).await {
            Err(_) => {
                s.metrics.bad_request();
                return Err(Refusal(
                    StatusCode::REQUEST_TIMEOUT,
                    "request_timeout",
                    format!(
                        "ctxgc: the request body did not arrive within {} s",
                        deadline.as_secs()
                    ),
                ));
            }
            Ok(None) => return Ok(Read::Whole(buffer.freeze())),
            Ok(Some(Err(e))) => {
                s.metrics.bad_request();
                // A body cut short by the client is no body too large.
                return Err(Refusal(
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    format!("ctxgc: the request body was cut short before its end ({e})"),
                ));
            }
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        if buffer.len() + data.len() > s.settings.max_body_bytes {
            s.metrics.bad_request();
            return Err(too_large(s));
        }
        let total = buffer.len() + data.len();
        if total > reserved.body_bytes() {
            // Reserve ahead, so a long body does not ask for every chunk.
            let want = total
                .max(reserved.body_bytes() * 2)
                .min(s.settings.max_body_bytes);
            if let Err(short) = reserved.grow(want).or_else(|_| reserved.grow(total)) {
                buffer.extend_from_slice(&data);
                return Ok(Read::OverBudget {
                    read: buffer.freeze(),
                    rest: body,
                    short,
                });
            }
        }
        buffer.extend_from_slice(&data);
    }
}

/// The answer to a body past the configured limit.
fn too_large(s: &AppState) -> Refusal {
    Refusal(
        StatusCode::PAYLOAD_TOO_LARGE,
        "request_too_large",
        format!(
            "ctxgc: request body larger than the configured limit of {} bytes",
            s.settings.max_body_bytes
        ),
    )
}

/// A request body as sent, decoded when the client compressed it (`content-encoding: gzip` or
/// `deflate`, as SDKs may); the header goes, since what is forwarded is the decoded body. The
/// decoded size is bounded like the body itself.
fn decode_request_body(
    s: &AppState,
    headers: &mut HeaderMap,
    bytes: Bytes,
) -> Result<Bytes, Refusal> {
    use std::io::Read;
    let encoding = headers
        .get("content-encoding")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_ascii_lowercase())
        .unwrap_or_default();
    if encoding.is_empty() || encoding == "identity" {
        headers.remove("content-encoding");
        return Ok(bytes);
    }
    let refuse = |status, kind, message| {
        s.metrics.bad_request();
        Refusal(status, kind, message)
    };
    let limit = s.settings.max_body_bytes as u64 + 1;
    let mut out = Vec::new();
    let read = match encoding.as_str() {
        "gzip" | "x-gzip" => flate2::read::MultiGzDecoder::new(&bytes[..])
            .take(limit)
            .read_to_end(&mut out),
        // HTTP's deflate is zlib-wrapped; some clients send it raw.
        "deflate" => flate2::read::ZlibDecoder::new(&bytes[..])
            .take(limit)
            .read_to_end(&mut out)
            .or_else(|_| {
                out.clear();
                flate2::read::DeflateDecoder::new(&bytes[..])
                    .take(limit)
                    .read_to_end(&mut out)
            }),
        other => {
            return Err(refuse(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "invalid_request_error",
                format!(
                    "ctxgc: request content-encoding `{other}` is not supported (send gzip, deflate or none)"
                ),
            ));
        }
    };
    if let Err(e) = read {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            format!("ctxgc: the request body is not valid {encoding}: {e}"),
        ));
    }
    if out.len() as u64 >= limit {
        return Err(refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request_too_large",
            format!(
                "ctxgc: decoded request body larger than the configured limit of {} bytes",
                s.settings.max_body_bytes
            ),
        ));
    }
    headers.remove("content-encoding");
    Ok(Bytes::from(out))
}

/// Whether an Anthropic request asks for the model's 1M context (the `context-1m-…` beta, in
/// any of its `anthropic-beta` headers' comma-separated values).
fn asks_long_context(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get_all("anthropic-beta")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|beta| beta.trim().starts_with("context-1m"))
}
