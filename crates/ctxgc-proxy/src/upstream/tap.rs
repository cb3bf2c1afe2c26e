//! Reading the usage an upstream's answer reports, as it streams past: the tap ([`Tap`]) sees
//! each chunk as it is forwarded; it never delays or alters it. SSE events are framed by
//! [`crate::wire::sse`] (multi-line data, every line ending) and read for what reports usage
//! (OpenAI chat: the chunk with `usage`; Responses: `response.completed`; Anthropic:
//! `message_start` and `message_delta`); a JSON body is parsed once complete. What is kept for
//! parsing is bounded.

use ctxgc_formats::Api;
use ctxgc_formats::wire_api::ResponseEvent;
pub use ctxgc_formats::wire_api::Usage;
use serde_json::Value;

use crate::wire::sse::Framer;

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
