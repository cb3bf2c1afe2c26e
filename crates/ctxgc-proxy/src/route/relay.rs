//! Relaying an upstream's answer to the client as it arrives, SSE and JSON byte for byte, with
//! the usage it reports read on the way ([`crate::upstream::tap`]) into the session table; at
//! the end of the shutdown grace, what is still open is cut.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::response::Response;
use ctxgc_core::store::SessionId;
use ctxgc_formats::Api;
use futures_util::StreamExt;

use crate::state::AppState;
use crate::upstream::client::{is_event_stream, response_headers};
use crate::upstream::tap::Tap;

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
