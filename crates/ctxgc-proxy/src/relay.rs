//! Relaying an upstream's answer to the client as it arrives, SSE and JSON byte for byte, with
//! the usage it reports read on the way into the session table.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::response::Response;
use ctxgc_core::store::SessionId;
use ctxgc_formats::Api;
use futures_util::StreamExt;

use crate::state::AppState;
use crate::upstream::{is_event_stream, response_headers};
use crate::usage;

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
    let mut tap = session.map(|(api, session)| usage::Tap::new(api, session, streaming));
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
