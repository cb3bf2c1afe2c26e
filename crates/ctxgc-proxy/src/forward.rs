//! Forwarding to the upstream and relaying its answer (SSE and JSON as they come, the usage
//! tapped on the way).

use super::*;

/// Everything else: forwarded untouched (Anthropic paths and requests with Anthropic headers go
/// to the Anthropic upstream).
pub(crate) async fn passthrough(State(s): State<Arc<AppState>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let bytes = match read_body(&s, body).await {
        Ok(b) => b,
        Err(response) => return response,
    };
    let anthropic = parts.uri.path().starts_with("/v1/messages")
        || parts.headers.contains_key("anthropic-version")
        || parts.headers.contains_key("x-api-key");
    let upstream = if anthropic {
        &s.settings.anthropic_upstream
    } else {
        &s.settings.openai_upstream
    };
    forward(
        &s,
        upstream,
        parts.method,
        &parts.uri,
        &parts.headers,
        bytes,
        None,
    )
    .await
}

/// Hop-by-hop headers, which a proxy must not forward.
pub(crate) fn hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
            | "host"
            | "content-length"
    ) || name.as_str().starts_with("x-ctxgc-")
}

pub(crate) async fn forward(
    s: &Arc<AppState>,
    upstream: &str,
    method: Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
    session: Option<(Api, SessionId)>,
) -> Response {
    match send(s, upstream, method, uri, headers, body).await {
        Ok(response) => relay(s, response, session),
        Err(response) => response,
    }
}

/// Sends a request upstream with the client's headers (hop-by-hop ones excepted). An upstream
/// that cannot be reached becomes a 502, as a gateway would answer.
pub(crate) async fn send(
    s: &AppState,
    upstream: &str,
    method: Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<reqwest::Response, Response> {
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let url = format!("{}{}", upstream.trim_end_matches('/'), path);
    let mut builder = s.client.request(method, &url);
    for (name, value) in headers {
        // The client's accept-encoding is not passed on: the HTTP client asks for what it can
        // decode and decodes it, so the proxy can read every answer (its own tool calls, usage)
        // and the client gets it as identity, which every client accepts.
        if !hop_by_hop(name) && name != "accept-encoding" {
            builder = builder.header(name, value);
        }
    }
    builder.body(body).send().await.map_err(|e| {
        let shown = redact_url(upstream);
        if e.is_timeout() {
            let secs = s.settings.timeouts.upstream_idle.as_secs();
            s.log(&format!("ctxgc: upstream {shown} silent for {secs} s"));
            return error_response(
                StatusCode::GATEWAY_TIMEOUT,
                "upstream_timeout",
                format!("ctxgc: the upstream {shown} did not answer within {secs} s"),
            );
        }
        s.log(&format!(
            "ctxgc: upstream {shown} unreachable: {}",
            e.without_url()
        ));
        error_response(
            StatusCode::BAD_GATEWAY,
            "upstream_unreachable",
            format!("ctxgc: cannot reach the upstream {shown}"),
        )
    })
}

/// An upstream URL as it may be shown (logs, error bodies): credentials in it are replaced by
/// `***`.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://***@{}", &rest[at + 1..]),
        None => url.to_owned(),
    }
}

/// The response headers passed to the client.
pub(crate) fn response_headers(response: &reqwest::Response) -> HeaderMap {
    let mut out = HeaderMap::new();
    for (name, value) in response.headers() {
        if !hop_by_hop(name) {
            out.append(name.clone(), value.clone());
        }
    }
    out.insert("x-ctxgc", HeaderValue::from_static("1"));
    out
}

pub(crate) fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("text/event-stream"))
}

/// Streams an upstream response to the client as it arrives, byte for byte, reading the usage
/// it reports on the way.
pub(crate) fn relay(
    s: &Arc<AppState>,
    response: reqwest::Response,
    session: Option<(Api, SessionId)>,
) -> Response {
    let status = response.status();
    let headers = response_headers(&response);
    let streaming = is_event_stream(response.headers());
    let mut tap = session.map(|(api, session)| usage::Tap::new(api, session, streaming));
    let state = s.clone();
    let idle = s.settings.timeouts.upstream_idle;
    let stream = response.bytes_stream().map(move |chunk| {
        if let (Ok(bytes), Some(t)) = (&chunk, tap.as_mut()) {
            t.feed(bytes);
            if let Some((session, usage, response_id)) = t.finished() {
                if let Some(usage) = usage {
                    record_usage(&state, &session, usage);
                }
                if let Some(id) = response_id {
                    state.remember_response(id, session);
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
                let event = serde_json::json!({"type": "error", "error": {"type": "ctxgc_upstream_error", "message": format!("ctxgc: {why}")}});
                Some(Ok(Bytes::from(format!("event: error\ndata: {event}\n\n"))))
            }
            Err(e) => {
                *failed = true;
                Some(Err(e))
            }
        };
        std::future::ready(item)
    });
    let mut resp = Response::new(Body::from_stream(stream));
    *resp.status_mut() = status;
    *resp.headers_mut() = headers;
    resp
}
