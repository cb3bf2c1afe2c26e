//! Routing and intake: the routes, the accept loop, and what happens to an API request before
//! and after the pipeline (reading and decoding the body, parsing it once, tenant and session).

use super::*;

/// The router.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        // Other methods on the API paths (HEAD, OPTIONS, GET) go to the upstream unchanged.
        .route("/v1/chat/completions", post(chat).fallback(passthrough))
        .route("/v1/responses", post(responses).fallback(passthrough))
        .route("/v1/messages", post(messages).fallback(passthrough))
        .route(
            "/v1/messages/count_tokens",
            post(messages).fallback(passthrough),
        )
        .route(
            "/ctxgc/health",
            get(|| async { json(&serde_json::json!({"status": "ok"})) }),
        )
        .route(
            "/ctxgc/stats",
            get(
                |State(s): State<Arc<AppState>>, headers: HeaderMap| async move {
                    json(&s.stats_for(&headers))
                },
            ),
        )
        .fallback(passthrough)
        .with_state(state)
}

/// Serves on `listen` until the process ends.
pub async fn serve(listen: SocketAddr, state: Arc<AppState>) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    state.log(&format!(
        "ctxgc serve: listening on http://{}",
        listener.local_addr()?
    ));
    serve_on(listener, state).await
}

/// Serves the connections `listener` accepts until the process ends: each with TCP_NODELAY
/// and a deadline for its request headers.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
) -> std::io::Result<()> {
    let app = router(state.clone());
    let headers_deadline = state.settings.timeouts.client_headers;
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors, a reset before accept: wait a moment and go on.
                state.log(&format!("ctxgc: accept failed: {e}"));
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        // Without TCP_NODELAY the last small writes of a stream wait for the client's delayed
        // ACK (about 40 ms on kept-alive connections).
        if let Err(e) = stream.set_nodelay(true) {
            state.log(&format!("ctxgc: cannot set TCP_NODELAY: {e}"));
        }
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            // A client that does not finish its headers in time is cut (the body has its own
            // deadline, in `read_body`).
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(headers_deadline)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            let _ = connection.await;
        });
    }
}

pub(crate) async fn chat(State(s): State<Arc<AppState>>, req: Request) -> Response {
    handle(s, Api::ChatCompletions, req).await
}

pub(crate) async fn responses(State(s): State<Arc<AppState>>, req: Request) -> Response {
    handle(s, Api::Responses, req).await
}

pub(crate) async fn messages(State(s): State<Arc<AppState>>, req: Request) -> Response {
    handle(s, Api::Messages, req).await
}

pub(crate) fn json(value: &impl Serialize) -> Response {
    let body = serde_json::to_string(value).unwrap_or_default();
    ([("content-type", "application/json")], body).into_response()
}

pub(crate) fn error_response(status: StatusCode, kind: &str, message: String) -> Response {
    let body = serde_json::json!({"error": {"type": kind, "message": message, "source": "ctxgc"}});
    (
        status,
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

pub(crate) async fn read_body(s: &AppState, body: Body) -> Result<Bytes, Response> {
    let deadline = s.settings.timeouts.client_body;
    let Ok(read) = tokio::time::timeout(
        deadline,
        axum::body::to_bytes(body, s.settings.max_body_bytes),
    )
    .await
    else {
        s.counters.bad_requests.fetch_add(1, Ordering::Relaxed);
        return Err(error_response(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            format!(
                "ctxgc: the request body did not arrive within {} s",
                deadline.as_secs()
            ),
        ));
    };
    read.map_err(|_| {
        s.counters.bad_requests.fetch_add(1, Ordering::Relaxed);
        error_response(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request_too_large",
            format!(
                "ctxgc: request body larger than the configured limit of {} bytes",
                s.settings.max_body_bytes
            ),
        )
    })
}

/// A request body as sent, decoded when the client compressed it (`content-encoding: gzip` or
/// `deflate`, as SDKs may); the header goes, since what is forwarded is the decoded body. The
/// decoded size is bounded like the body itself.
/// A request the proxy answers itself: status, error type, message.
pub(crate) struct Refusal(StatusCode, &'static str, String);

pub(crate) fn decode_request_body(
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
            s.counters.bad_requests.fetch_add(1, Ordering::Relaxed);
            return Err(Refusal(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "invalid_request_error",
                format!(
                    "ctxgc: request content-encoding `{other}` is not supported (send gzip, deflate or none)"
                ),
            ));
        }
    };
    if let Err(e) = read {
        s.counters.bad_requests.fetch_add(1, Ordering::Relaxed);
        return Err(Refusal(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            format!("ctxgc: the request body is not valid {encoding}: {e}"),
        ));
    }
    if out.len() as u64 >= limit {
        s.counters.bad_requests.fetch_add(1, Ordering::Relaxed);
        return Err(Refusal(
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

pub(crate) async fn handle(s: Arc<AppState>, api: Api, req: Request) -> Response {
    let (mut parts, body) = req.into_parts();
    let bytes = match read_body(&s, body).await {
        Ok(b) => b,
        Err(response) => return response,
    };
    let bytes = match decode_request_body(&s, &mut parts.headers, bytes) {
        Ok(b) => b,
        Err(Refusal(status, kind, message)) => return error_response(status, kind, message),
    };
    s.counters.requests.fetch_add(1, Ordering::Relaxed);
    let mut request = match ApiRequest::parse(api, &bytes) {
        Ok(r) => r,
        Err(e) => {
            s.counters.bad_requests.fetch_add(1, Ordering::Relaxed);
            let why = match e {
                FormatError::Json(j) => format!("ctxgc: the request body is not valid JSON: {j}"),
                other => format!("ctxgc: not a {} request: {other}", api.name()),
            };
            return error_response(StatusCode::BAD_REQUEST, "invalid_request_error", why);
        }
    };
    let tenant = s.tenant(&parts.headers);
    let session = s.session_of(&tenant, &request, &parts.headers);
    // Rewriting is synchronous CPU work plus a local store write: off the async workers. A panic
    // or a store failure forwards the original (fail open).
    let state = s.clone();
    let session_for_task = session.clone();
    let counting = parts.uri.path().ends_with("/count_tokens");
    let raw_for_task = bytes.clone();
    let slot = tokio::time::timeout(
        crate::REWRITE_QUEUE_DEADLINE,
        s.rewrite_slots.clone().acquire_owned(),
    )
    .await;
    let outcome = match slot {
        Ok(Ok(slot)) => tokio::task::spawn_blocking(move || {
            let prepared = prepare(
                &state,
                &mut request,
                &raw_for_task,
                &session_for_task,
                counting,
            );
            drop(slot);
            prepared
        })
        .await
        .map_err(|e| ProxyError::Task(e.to_string()))
        .and_then(|r| r),
        _ => Err(ProxyError::Busy {
            waited: crate::REWRITE_QUEUE_DEADLINE,
        }),
    };
    let mut agentic = None;
    let raw = bytes.clone();
    let forward_bytes = match outcome {
        Ok(Prepared {
            out,
            stored,
            injected,
        }) => {
            agentic = injected;
            s.counters
                .bytes_saved
                .fetch_add(out.bytes_saved as u64, Ordering::Relaxed);
            s.counters
                .originals_stored
                .fetch_add(stored, Ordering::Relaxed);
            match out.body {
                Some(body) => {
                    s.counters.rewritten.fetch_add(1, Ordering::Relaxed);
                    Bytes::from(body)
                }
                None => {
                    s.counters.passed_through.fetch_add(1, Ordering::Relaxed);
                    bytes
                }
            }
        }
        Err(why) => {
            s.counters.fail_open.fetch_add(1, Ordering::Relaxed);
            s.log(&format!(
                "ctxgc: fail open for session {session} ({}): {why}",
                api.name()
            ));
            bytes
        }
    };
    let upstream = match api.wire().upstream() {
        ctxgc_formats::Upstream::Anthropic => &s.settings.anthropic_upstream,
        ctxgc_formats::Upstream::OpenAi => &s.settings.openai_upstream,
    };
    if let Some(client) = agentic {
        let cx = agentic::Context {
            s: s.clone(),
            api,
            upstream: upstream.clone(),
            parts,
            raw,
            end: client,
            session,
        };
        return agentic::run(cx, forward_bytes).await;
    }
    forward(
        &s,
        upstream,
        parts.method,
        &parts.uri,
        &parts.headers,
        forward_bytes,
        Some((api, session)),
    )
    .await
}
