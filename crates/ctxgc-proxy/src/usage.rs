//! Reading the usage the upstream reports, from a response streaming through untouched.
//!
//! The tap sees each chunk as it is forwarded; it never delays or alters it. SSE events are
//! parsed line by line (OpenAI chat: the chunk with `usage`; Responses: `response.completed`;
//! Anthropic: `message_start` and `message_delta`); a JSON body is parsed once complete. The
//! copy kept for parsing is bounded.

use serde_json::Value;

const MAX_JSON_BYTES: usize = 4 * 1024 * 1024;

/// Tokens as the upstream billed them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Uncached input.
    pub input: u64,
    /// Input read from the cache.
    pub cache_read: u64,
    /// Input written to the cache.
    pub cache_write: u64,
    /// Output.
    pub output: u64,
}

fn n(v: &Value, key: &str) -> u64 {
    v.pointer(key).and_then(Value::as_u64).unwrap_or(0)
}

/// Usage from any of the providers' usage objects.
fn from_object(u: &Value) -> Usage {
    if u.get("prompt_tokens").is_some() {
        // OpenAI Chat Completions: prompt_tokens includes the cached ones.
        let cached = n(u, "/prompt_tokens_details/cached_tokens");
        return Usage {
            input: n(u, "/prompt_tokens").saturating_sub(cached),
            cache_read: cached,
            cache_write: 0,
            output: n(u, "/completion_tokens"),
        };
    }
    if u.get("input_tokens_details").is_some() || u.get("total_tokens").is_some() {
        // OpenAI Responses.
        let cached = n(u, "/input_tokens_details/cached_tokens");
        return Usage {
            input: n(u, "/input_tokens").saturating_sub(cached),
            cache_read: cached,
            cache_write: 0,
            output: n(u, "/output_tokens"),
        };
    }
    // Anthropic.
    Usage {
        input: n(u, "/input_tokens"),
        cache_read: n(u, "/cache_read_input_tokens"),
        cache_write: n(u, "/cache_creation_input_tokens"),
        output: n(u, "/output_tokens"),
    }
}

/// Watches one response.
pub struct Tap {
    session: ctxgc_core::store::SessionId,
    sse: bool,
    pending: Vec<u8>,
    usage: Option<Usage>,
    /// A Responses response's id (a later request's `previous_response_id` continues it).
    response_id: Option<String>,
    done: bool,
    reported: bool,
}

impl Tap {
    /// A tap for a response of `session`.
    pub fn new(session: ctxgc_core::store::SessionId, sse: bool) -> Tap {
        Tap {
            session,
            sse,
            pending: Vec::new(),
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
            if let Ok(v) = serde_json::from_slice::<Value>(&self.pending) {
                self.usage = v.get("usage").map(from_object);
                if v["object"] == "response" {
                    self.response_id = v["id"].as_str().map(str::to_owned);
                }
                self.done = true;
            }
            return;
        }
        self.pending.extend_from_slice(chunk);
        while let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            let Some(data) = line.strip_prefix(b"data:") else {
                continue;
            };
            let Ok(v) = serde_json::from_slice::<Value>(data.trim_ascii()) else {
                continue;
            };
            self.event(&v);
        }
        if self.pending.len() > MAX_JSON_BYTES {
            self.pending.clear();
        }
    }

    fn event(&mut self, v: &Value) {
        match v["type"].as_str() {
            Some("message_start") => self.usage = Some(from_object(&v["message"]["usage"])),
            Some("message_delta") => {
                if let (Some(u), Some(out)) = (
                    self.usage.as_mut(),
                    v.pointer("/usage/output_tokens").and_then(Value::as_u64),
                ) {
                    u.output = out;
                }
            }
            Some("message_stop") => self.done = true,
            Some("response.created") => {
                self.response_id = v["response"]["id"].as_str().map(str::to_owned);
            }
            Some("response.completed") => {
                self.usage = Some(from_object(&v["response"]["usage"]));
                if let Some(id) = v["response"]["id"].as_str() {
                    self.response_id = Some(id.to_owned());
                }
                self.done = true;
            }
            _ => {
                if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
                    self.usage = Some(from_object(u));
                    self.done = true;
                }
            }
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
    use super::*;
    use ctxgc_core::store::SessionId;

    #[test]
    fn anthropic_sse_usage_across_chunks() {
        let mut tap = Tap::new(SessionId::new("s"), true);
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
                    output: 77
                }
            ))
        );
        assert_eq!(tap.finished_usage(), None, "reported once");
    }

    #[test]
    fn openai_json_and_stream_usage() {
        let mut tap = Tap::new(SessionId::new("s"), false);
        tap.feed(br#"{"choices":[],"usage":{"prompt_tokens":2000,"completion_tokens":5,"#);
        assert_eq!(tap.finished_usage(), None);
        tap.feed(br#""prompt_tokens_details":{"cached_tokens":1920}}}"#);
        assert_eq!(
            tap.finished_usage().unwrap().1,
            Usage {
                input: 80,
                cache_read: 1920,
                cache_write: 0,
                output: 5
            }
        );
        let mut tap = Tap::new(SessionId::new("s"), true);
        tap.feed(b"data: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":500,\"input_tokens_details\":{\"cached_tokens\":384},\"output_tokens\":9,\"total_tokens\":509}}}\n\n");
        assert_eq!(
            tap.finished_usage().unwrap().1,
            Usage {
                input: 116,
                cache_read: 384,
                cache_write: 0,
                output: 9
            }
        );
    }
}
