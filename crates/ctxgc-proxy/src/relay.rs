//! Relaying an upstream's answer to the client as it arrives, SSE and JSON byte for byte, with
//! the usage it reports read on the way into the session table.
//!
//! The tap ([`Tap`]) sees each chunk as it is forwarded; it never delays or alters it. SSE
//! events are framed by [`crate::sse`] (multi-line data, every line ending) and read for what
//! reports usage (OpenAI chat: the chunk with `usage`; Responses: `response.completed`;
//! Anthropic: `message_start` and `message_delta`); a JSON body is parsed once complete. What is
//! kept for parsing is bounded.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::response::Response;
use ctxgc_core::store::SessionId;
use ctxgc_formats::Api;
use futures_util::StreamExt;

use crate::sse::Framer;
use crate::state::AppState;
use crate::upstream::{is_event_stream, response_headers};
use ctxgc_formats::wire_api::ResponseEvent;
pub use ctxgc_formats::wire_api::Usage;
use serde_json::Value;

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

const MAX_JSON_BYTES: usize = 4 * 1024 * 1024;

/// Where a JSON value arriving in pieces ends, each byte looked at once (strings and their
/// escapes skipped): true from the chunk that closes the outermost object or array.
#[derive(Debug, Default)]
struct JsonEnd {
    depth: u32,
    started: bool,
    in_string: bool,
    escaped: bool,
}

impl JsonEnd {
    fn feed(&mut self, bytes: &[u8]) -> bool {
        let mut i = 0;
        while i < bytes.len() {
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                    i += 1;
                    continue;
                }
                // The bulk of an answer is inside strings: skip to the next quote or escape
                // (a 4 MB answer's tap cost 16% of its relay byte by byte).
                match memchr::memchr2(b'"', b'\\', &bytes[i..]) {
                    None => return false,
                    Some(k) => {
                        i += k;
                        if bytes[i] == b'\\' {
                            self.escaped = true;
                        } else {
                            self.in_string = false;
                        }
                        i += 1;
                        continue;
                    }
                }
            }
            match bytes[i] {
                b'"' => self.in_string = true,
                b'{' | b'[' => {
                    self.depth += 1;
                    self.started = true;
                }
                b'}' | b']' => {
                    self.depth = self.depth.saturating_sub(1);
                    if self.started && self.depth == 0 {
                        return true;
                    }
                }
                _ => {}
            }
            i += 1;
        }
        false
    }
}

/// What a complete JSON answer's usage is read from: its top-level `id`, `object`, `usage`
/// and `usageMetadata` (Gemini's array of chunks whole), without building the rest (the
/// answer's text, megabytes at times).
fn summary_value(body: &[u8]) -> Option<Value> {
    #[derive(serde::Deserialize)]
    struct Top {
        id: Option<Value>,
        object: Option<Value>,
        usage: Option<Value>,
        #[serde(rename = "usageMetadata")]
        usage_metadata: Option<Value>,
    }
    if body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        return serde_json::from_slice(body).ok();
    }
    let top: Top = serde_json::from_slice(body).ok()?;
    let fields = [
        ("id", top.id),
        ("object", top.object),
        ("usage", top.usage),
        ("usageMetadata", top.usage_metadata),
    ];
    Some(Value::Object(
        fields
            .into_iter()
            .filter_map(|(k, v)| Some((k.to_owned(), v?)))
            .collect(),
    ))
}

/// Watches one response.
pub struct Tap {
    api: Api,
    session: ctxgc_core::store::SessionId,
    sse: bool,
    /// A JSON body as it arrives.
    pending: Vec<u8>,
    /// Where that body ends: it is parsed once, when whole.
    json_end: JsonEnd,
    /// The events of a stream.
    framer: Framer,
    usage: Option<Usage>,
    /// A Responses response's id (a later request's `previous_response_id` continues it).
    response_id: Option<String>,
    done: bool,
    reported: bool,
}

impl Tap {
    /// A tap for a response of `api` for `session`.
    pub fn new(api: Api, session: ctxgc_core::store::SessionId, sse: bool) -> Tap {
        Tap {
            api,
            session,
            sse,
            pending: Vec::new(),
            json_end: JsonEnd::default(),
            framer: Framer::new(),
            usage: None,
            response_id: None,
            done: false,
            reported: false,
        }
    }

    /// Sees one chunk.
    pub fn feed(&mut self, chunk: &[u8]) {
        if self.done {
            return;
        }
        if !self.sse {
            if self.pending.len() + chunk.len() > MAX_JSON_BYTES {
                self.done = true;
                return;
            }
            self.pending.extend_from_slice(chunk);
            // Parsed once, when the value closes: parsing the buffer on every chunk made a
            // 4 MB answer in 2 KB chunks cost 0.9 s.
            if self.json_end.feed(chunk) {
                if let Some(v) = summary_value(&self.pending) {
                    (self.usage, self.response_id) = self.api.wire().response_summary(&v);
                }
                self.done = true;
            }
            return;
        }
        let mut events = Vec::new();
        self.framer.feed(chunk, |event| {
            if let Some(v) = event
                .data()
                .and_then(|data| serde_json::from_slice::<Value>(&data).ok())
            {
                events.push(v);
            }
        });
        for v in &events {
            self.event(v);
        }
        // An event past the bound is not one that reports usage: given up.
        if self.framer.pending() > MAX_JSON_BYTES {
            self.framer.clear();
        }
    }

    fn event(&mut self, v: &Value) {
        match self.api.wire().response_event(v) {
            ResponseEvent::Started { id, usage } => {
                self.response_id = id.or(self.response_id.take());
                self.usage = usage.or(self.usage);
            }
            ResponseEvent::OutputTokens(out) => {
                if let Some(u) = self.usage.as_mut() {
                    u.output = out;
                }
            }
            ResponseEvent::Completed { id, usage } => {
                self.response_id = id.or(self.response_id.take());
                self.usage = usage.or(self.usage);
                self.done = true;
            }
            ResponseEvent::Other => {}
        }
    }

    /// What the response reported, once, when it is complete: its session, its usage (if it
    /// reported any) and its id (a Responses response).
    pub fn finished(
        &mut self,
    ) -> Option<(ctxgc_core::store::SessionId, Option<Usage>, Option<String>)> {
        if self.done && !self.reported {
            self.reported = true;
            return Some((self.session.clone(), self.usage, self.response_id.take()));
        }
        None
    }

    /// The usage, once, when the response has reported it.
    pub fn finished_usage(&mut self) -> Option<(ctxgc_core::store::SessionId, Usage)> {
        let (session, usage, _) = self.finished()?;
        usage.map(|u| (session, u))
    }
}

#[cfg(test)]
mod tests {
    use super::JsonEnd;

    /// A body is whole when its outermost value closes, wherever the chunks split it, braces
    /// and escaped quotes inside strings aside.
    #[test]
    fn a_json_body_ends_where_its_outer_value_closes() {
        let body =
            br#"{"id":"x","text":"a } ] \" { [","usage":{"prompt_tokens":3},"list":[1,[2]]}"#;
        for cut in 0..body.len() {
            let mut end = JsonEnd::default();
            let first = end.feed(&body[..cut]);
            let second = end.feed(&body[cut..]);
            assert!(!first && second, "cut at {cut}");
        }
        let mut end = JsonEnd::default();
        assert!(!end.feed(br#"{"a": "}"#), "a brace inside a string");
    }

    use super::*;
    use ctxgc_core::store::SessionId;

    #[test]
    fn anthropic_sse_usage_across_chunks() {
        let mut tap = Tap::new(Api::Messages, SessionId::new("s"), true);
        let stream = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":12,\"cache_read_input_tokens\":3000,\"cache_creation_input_tokens\":40,\"output_tokens\":1}}}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":77}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        for chunk in stream.as_bytes().chunks(17) {
            tap.feed(chunk);
        }
        assert_eq!(
            tap.finished_usage(),
            Some((
                SessionId::new("s"),
                Usage {
                    input: 12,
                    cache_read: 3000,
                    cache_write: 40,
                    cache_write_1h: 0,
                    output: 77
                }
            ))
        );
        assert_eq!(tap.finished_usage(), None, "reported once");
    }

    #[test]
    fn openai_json_and_stream_usage() {
        let mut tap = Tap::new(Api::ChatCompletions, SessionId::new("s"), false);
        tap.feed(br#"{"choices":[],"usage":{"prompt_tokens":2000,"completion_tokens":5,"#);
        assert_eq!(tap.finished_usage(), None);
        tap.feed(br#""prompt_tokens_details":{"cached_tokens":1920}}}"#);
        assert_eq!(
            tap.finished_usage().unwrap().1,
            Usage {
                input: 80,
                cache_read: 1920,
                cache_write: 0,
                cache_write_1h: 0,
                output: 5
            }
        );
        let mut tap = Tap::new(Api::Responses, SessionId::new("s"), true);
        tap.feed(b"data: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":500,\"input_tokens_details\":{\"cached_tokens\":384},\"output_tokens\":9,\"total_tokens\":509}}}\n\n");
        assert_eq!(
            tap.finished_usage().unwrap().1,
            Usage {
                input: 116,
                cache_read: 384,
                cache_write: 0,
                cache_write_1h: 0,
                output: 9
            }
        );
    }
}
