//! Streaming with internal tools: the client's SSE stream is the upstream's, minus the model's
//! calls to ctxgc's own tools.
//!
//! Events pass through as they arrive, byte for byte, unless they carry an internal call: those
//! are held back (and remembered, to run them), and the client's own calls are renumbered so
//! their indices stay contiguous. When a round ends with internal calls only, its closing events
//! are held back too, and the next round's stream continues the same response for the client
//! (Anthropic: its `message_start` is dropped and block indices continue; Responses: its
//! `response.created` is dropped, output indices continue, sequence numbers run on without gaps
//! and the final `response.completed` lists every item the client was shown).

use std::collections::BTreeMap;

use ctxgc_formats::Api;
use serde_json::{Value, json};

use crate::agent::tools::{Call, is_internal};
use crate::wire::sse::{Event, Framer};

/// One tool call or content block being streamed.
#[derive(Debug, Default, Clone)]
struct Part {
    /// The block as it started (Anthropic) or the call's id and name (Chat).
    start: Value,
    text: String,
    json: String,
    signature: String,
    internal: bool,
    /// Index shown to the client (`None`: held back).
    shown: Option<u64>,
}

/// What a finished round asks for.
#[derive(Debug, Default)]
pub struct Round {
    /// Every tool call of the round, internal or not.
    pub calls: Vec<Call>,
    /// The model's turn as history items, to send back with the results.
    pub assistant: Vec<Value>,
    /// The round ended with internal calls only: the proxy must call the upstream again.
    pub follow_up: bool,
}

/// Rewrites one streamed response, round after round.
pub struct Splicer {
    dialect: &'static dyn Dialect,
    framer: Framer,
    st: State,
}

/// What a splicer knows of the response so far.
#[derive(Default)]
struct State {
    round: usize,
    last_round: bool,
    parts: BTreeMap<u64, Part>,
    text: String,
    /// Next index shown to the client (Anthropic blocks carry on across rounds).
    next_shown: u64,
    client_calls: bool,
    internal_calls: bool,
    follow_up: bool,
    /// Responses: the items shown to the client so far, over all rounds.
    shown_items: Vec<Value>,
    /// Responses: events were held back, so sequence numbers are renumbered from `next_seq`.
    renumber: bool,
    next_seq: u64,
    /// The id of the response the client sees (the first round's).
    first_id: Option<String>,
}

/// One API's streaming: which events are held back, renumbered or rewritten, and how a
/// round's calls and assistant turn are read from its parts. Adding an API means adding one.
trait Dialect: Send + Sync {
    /// Handles one parsed event.
    fn event(&self, st: &mut State, v: &mut Value) -> Keep;
    /// Every tool call of the round.
    fn calls(&self, st: &State) -> Vec<Call>;
    /// The model's turn as history items.
    fn assistant(&self, st: &State) -> Vec<Value>;
    /// Whether indices shown to the client start again with each round (Chat's tool-call
    /// indices do; Anthropic's blocks and Responses' items carry on).
    fn indices_restart(&self) -> bool {
        false
    }
}

/// Chat Completions streams.
struct ChatStream;
/// Anthropic Messages streams.
struct MessagesStream;
/// Responses streams.
struct ResponsesStream;
/// Gemini streams (`alt=sse`): each event is a whole response chunk; a function call comes
/// whole in one chunk's parts.
struct GeminiStream;

fn dialect(api: Api) -> &'static dyn Dialect {
    match api {
        Api::ChatCompletions => &ChatStream,
        Api::Messages => &MessagesStream,
        Api::Responses => &ResponsesStream,
        Api::Gemini => &GeminiStream,
    }
}

impl Splicer {
    /// A splicer for a streamed response of `api`.
    pub fn new(api: Api) -> Splicer {
        Splicer {
            dialect: dialect(api),
            framer: Framer::new(),
            st: State::default(),
        }
    }

    /// Marks the current round as the last one allowed: it is never held back at its end.
    pub fn set_last_round(&mut self, last: bool) {
        self.st.last_round = last;
    }

    /// Feeds upstream bytes; returns the bytes to send to the client now.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let Splicer {
            dialect,
            framer,
            st,
        } = self;
        framer.feed(chunk, |event| route(*dialect, st, event, &mut out));
        out
    }

    /// The end of a round's stream: what is left, and what the round asks for.
    pub fn finish(&mut self) -> (Vec<u8>, Round) {
        let mut out = self.framer.take_rest();
        let st = &mut self.st;
        if st.follow_up {
            out.clear();
        }
        let round = Round {
            calls: self.dialect.calls(st),
            assistant: self.dialect.assistant(st),
            follow_up: st.follow_up,
        };
        st.round += 1;
        st.parts.clear();
        st.text.clear();
        st.client_calls = false;
        st.internal_calls = false;
        st.follow_up = false;
        if self.dialect.indices_restart() {
            st.next_shown = 0;
        }
        (out, round)
    }
}

/// One event of the stream: passed on as it came, held back, or rewritten.
fn route(dialect: &dyn Dialect, st: &mut State, event: Event<'_>, out: &mut Vec<u8>) {
    if st.follow_up {
        return; // the round's closing events: the next round continues the response
    }
    let parsed = event
        .data()
        .and_then(|data| serde_json::from_slice::<Value>(&data).ok());
    let Some(mut value) = parsed else {
        out.extend_from_slice(event.raw); // `[DONE]`, comments, pings: as they came
        return;
    };
    match dialect.event(st, &mut value) {
        Keep::Original => out.extend_from_slice(event.raw),
        Keep::Drop => {}
        Keep::Changed => {
            if event.name().is_some() {
                let name = value["type"].as_str().unwrap_or("message");
                out.extend_from_slice(format!("event: {name}\n").as_bytes());
            }
            out.extend_from_slice(format!("data: {value}\n\n").as_bytes());
        }
    }
}

impl State {
    /// Keeps one id for the whole response the client sees: the first round's. Clients check
    /// it (openai-python's `responses.stream()` rejects a response whose id changes).
    fn same_id(&mut self, id: Option<&mut Value>) -> bool {
        let Some(id) = id.filter(|id| id.is_string()) else {
            return false;
        };
        match &self.first_id {
            None => {
                self.first_id = id.as_str().map(str::to_owned);
                false
            }
            Some(first) if id.as_str() != Some(first.as_str()) => {
                *id = json!(first);
                true
            }
            Some(_) => false,
        }
    }

    fn end_of_round(&mut self) -> bool {
        if self.internal_calls && !self.client_calls && !self.last_round {
            self.follow_up = true;
        }
        self.follow_up
    }

    /// A block (Anthropic) or output item (Responses) starts: an internal call is held back,
    /// anything else gets the next index shown to the client.
    fn start_part(&mut self, index: u64, start: Value, call_type: &str) {
        let is_call = start["type"] == call_type;
        let internal = is_call && start["name"].as_str().is_some_and(is_internal);
        self.internal_calls |= internal;
        self.client_calls |= is_call && !internal;
        let shown = (!internal).then(|| {
            self.next_shown += 1;
            self.next_shown - 1
        });
        self.parts.insert(
            index,
            Part {
                start,
                internal,
                shown,
                ..Default::default()
            },
        );
    }

    /// An Anthropic block event: held back when internal, renumbered when needed.
    fn route(&self, v: &mut Value, index: u64) -> Keep {
        self.route_key(v, index, "index")
    }

    /// An event of one block or item (its index under `key`): held back when internal,
    /// renumbered when needed.
    fn route_key(&self, v: &mut Value, index: u64, key: &str) -> Keep {
        match self.parts.get(&index).map(|p| p.shown) {
            Some(None) => Keep::Drop,
            Some(Some(shown)) if shown != index => {
                v[key] = json!(shown);
                Keep::Changed
            }
            _ => Keep::Original,
        }
    }

    /// The calls streamed as parts (`is_call` picks them), each rendered back by `raw` from
    /// its id, name, parsed arguments and argument text.
    fn streamed_calls(
        &self,
        is_call: impl Fn(&Part) -> bool,
        raw: impl Fn(&str, &str, &Value, &str) -> Value,
    ) -> Vec<Call> {
        self.parts
            .values()
            .filter(|p| is_call(p))
            .map(|p| {
                let arguments = serde_json::from_str(&p.json).unwrap_or_else(|_| json!({}));
                let id = p.start["id"].as_str().unwrap_or_default().to_owned();
                let name = p.start["name"].as_str().unwrap_or_default().to_owned();
                let raw = raw(&id, &name, &arguments, &p.json);
                Call {
                    id,
                    name,
                    arguments,
                    raw,
                }
            })
            .collect()
    }
}

impl Dialect for GeminiStream {
    fn event(&self, st: &mut State, v: &mut Value) -> Keep {
        let mut changed = st.same_id(v.get_mut("responseId"));
        if let Some(parts) = v
            .pointer_mut("/candidates/0/content/parts")
            .and_then(Value::as_array_mut)
        {
            let before = parts.len();
            parts.retain(|part| {
                let name = part.pointer("/functionCall/name").and_then(Value::as_str);
                let internal = name.is_some_and(is_internal);
                st.internal_calls |= internal;
                st.client_calls |= name.is_some() && !internal;
                let index = st.parts.len() as u64;
                st.parts.insert(
                    index,
                    Part {
                        start: part.clone(),
                        internal,
                        ..Default::default()
                    },
                );
                !internal
            });
            changed |= parts.len() != before;
            let emptied = before > 0 && parts.is_empty();
            let finished = v["candidates"][0].get("finishReason").is_some();
            if emptied && !finished && v.get("usageMetadata").is_none() {
                return Keep::Drop;
            }
        }
        if v["candidates"][0].get("finishReason").is_some() && st.end_of_round() {
            // The round's end: the next round continues the response for the client.
            return Keep::Drop;
        }
        if changed {
            Keep::Changed
        } else {
            Keep::Original
        }
    }
    fn calls(&self, st: &State) -> Vec<Call> {
        let turn = self.assistant(st).pop().unwrap_or(Value::Null);
        let ids = ctxgc_formats::gemini::call_ids(&turn);
        st.parts
            .values()
            .filter_map(|p| p.start.get("functionCall").map(|c| (p, c)))
            .zip(ids)
            .map(|((part, call), (id, name))| Call {
                id,
                name,
                arguments: call.get("args").cloned().unwrap_or_else(|| json!({})),
                raw: part.start.clone(),
            })
            .collect()
    }
    fn assistant(&self, st: &State) -> Vec<Value> {
        // Streamed text arrives in pieces: adjacent text parts of one kind are one part.
        let mut parts: Vec<Value> = Vec::new();
        for part in st.parts.values().map(|p| &p.start) {
            let text = part.get("text").and_then(Value::as_str);
            let plain = |p: &Value| {
                p.as_object()
                    .is_some_and(|m| m.keys().all(|k| k == "text" || k == "thought"))
            };
            if let (Some(text), Some(last)) = (text, parts.last_mut())
                && plain(part)
                && plain(last)
                && last.get("text").is_some()
                && last.get("thought") == part.get("thought")
            {
                let joined = format!("{}{text}", last["text"].as_str().unwrap_or_default());
                last["text"] = json!(joined);
                continue;
            }
            parts.push(part.clone());
        }
        vec![json!({"role": "model", "parts": parts})]
    }
}

impl Dialect for ChatStream {
    fn event(&self, st: &mut State, v: &mut Value) -> Keep {
        let mut changed = st.same_id(v.get_mut("id"));
        // A later round continues the client's message: its role was announced already.
        if st.round > 0
            && let Some(delta) = v
                .pointer_mut("/choices/0/delta")
                .and_then(Value::as_object_mut)
            && delta.remove("role").is_some()
        {
            changed = true;
            let finished = !v["choices"][0]["finish_reason"].is_null();
            if v["choices"][0]["delta"]
                .as_object()
                .is_some_and(|d| d.is_empty())
                && !finished
            {
                return Keep::Drop;
            }
        }
        if let Some(content) = v
            .pointer("/choices/0/delta/content")
            .and_then(Value::as_str)
        {
            st.text.push_str(content);
        }
        if let Some(calls) = v
            .pointer_mut("/choices/0/delta/tool_calls")
            .and_then(Value::as_array_mut)
        {
            let before = calls.len();
            calls.retain_mut(|c| {
                let index = c["index"].as_u64().unwrap_or(0);
                let part = st.parts.entry(index).or_insert_with(|| {
                    let name = c["function"]["name"].as_str().unwrap_or_default();
                    let internal = is_internal(name);
                    let shown = (!internal).then(|| {
                        st.next_shown += 1;
                        st.next_shown - 1
                    });
                    Part {
                        start: json!({"id": c["id"].clone(), "name": name}),
                        internal,
                        shown,
                        ..Default::default()
                    }
                });
                if let Some(args) = c["function"]["arguments"].as_str() {
                    part.json.push_str(args);
                }
                st.internal_calls |= part.internal;
                st.client_calls |= !part.internal;
                match part.shown {
                    Some(shown) if shown != index => {
                        c["index"] = json!(shown);
                        changed = true;
                        true
                    }
                    Some(_) => true,
                    None => false,
                }
            });
            if calls.len() != before {
                changed = true;
            }
            if calls.is_empty()
                && let Some(delta) = v
                    .pointer_mut("/choices/0/delta")
                    .and_then(Value::as_object_mut)
            {
                delta.remove("tool_calls");
                let finished = !v["choices"][0]["finish_reason"].is_null();
                let empty = v["choices"][0]["delta"]
                    .as_object()
                    .is_none_or(|d| d.keys().all(|k| k == "role"));
                if empty && !finished && v.get("usage").is_none_or(Value::is_null) {
                    return Keep::Drop;
                }
            }
        }
        let finished = v
            .pointer("/choices/0/finish_reason")
            .is_some_and(|f| !f.is_null());
        if finished && st.end_of_round() {
            return Keep::Drop;
        }
        if changed {
            Keep::Changed
        } else {
            Keep::Original
        }
    }
    fn calls(&self, st: &State) -> Vec<Call> {
        st.streamed_calls(|_| true, |id, name, _, json| {
            json!({"id": id, "type": "function", "function": {"name": name, "arguments": json}})
        })
    }
    fn assistant(&self, st: &State) -> Vec<Value> {
        let calls: Vec<Value> = self.calls(st).into_iter().map(|c| c.raw).collect();
        let content = if st.text.is_empty() {
            Value::Null
        } else {
            json!(st.text)
        };
        let mut m = json!({"role": "assistant", "content": content});
        if !calls.is_empty() {
            m["tool_calls"] = json!(calls);
        }
        vec![m]
    }
    fn indices_restart(&self) -> bool {
        true
    }
}

impl Dialect for ResponsesStream {
    fn event(&self, st: &mut State, v: &mut Value) -> Keep {
        let kind = v["type"].as_str().unwrap_or_default().to_owned();
        let renamed = st.same_id(v.get_mut("response").and_then(|r| r.get_mut("id")));
        let mut keep = match kind.as_str() {
            "response.created" | "response.in_progress" if st.round > 0 => Keep::Drop,
            "response.output_item.added" => {
                let index = v["output_index"].as_u64().unwrap_or(0);
                st.start_part(index, v["item"].clone(), "function_call");
                Keep::Original
            }
            "response.output_item.done" => {
                let index = v["output_index"].as_u64().unwrap_or(0);
                if let Some(part) = st.parts.get_mut(&index) {
                    part.start = v["item"].clone();
                    if part.shown.is_some() {
                        st.shown_items.push(v["item"].clone());
                    }
                }
                Keep::Original
            }
            "response.completed" | "response.incomplete" => {
                if st.end_of_round() {
                    Keep::Drop
                } else if st.round > 0 || st.internal_calls {
                    // The client's response lists what it was shown, over every round.
                    v["response"]["output"] = json!(st.shown_items);
                    Keep::Changed
                } else {
                    Keep::Original
                }
            }
            _ => Keep::Original,
        };
        if let Some(index) = v["output_index"].as_u64()
            && matches!(keep, Keep::Original)
        {
            keep = st.route_key(v, index, "output_index");
        }
        if renamed && matches!(keep, Keep::Original) {
            keep = Keep::Changed;
        }
        if matches!(keep, Keep::Drop) {
            st.renumber = true;
            return keep;
        }
        if let Some(seq) = v["sequence_number"].as_u64() {
            if (st.renumber || st.round > 0) && seq != st.next_seq {
                v["sequence_number"] = json!(st.next_seq);
                keep = Keep::Changed;
            }
            st.next_seq = v["sequence_number"].as_u64().unwrap_or(seq) + 1;
        }
        keep
    }
    fn calls(&self, st: &State) -> Vec<Call> {
        st.parts
            .values()
            .filter(|p| p.start["type"] == "function_call")
            .map(|p| {
                let text = |k: &str| p.start[k].as_str().unwrap_or_default().to_owned();
                Call {
                    id: text("call_id"),
                    name: text("name"),
                    arguments: serde_json::from_str(&text("arguments"))
                        .unwrap_or_else(|_| json!({})),
                    raw: p.start.clone(),
                }
            })
            .collect()
    }
    fn assistant(&self, st: &State) -> Vec<Value> {
        st.parts.values().map(|p| p.start.clone()).collect()
    }
}

impl Dialect for MessagesStream {
    fn event(&self, st: &mut State, v: &mut Value) -> Keep {
        let kind = v["type"].as_str().unwrap_or_default().to_owned();
        match kind.as_str() {
            "message_start" if st.round > 0 => Keep::Drop,
            "content_block_start" => {
                let index = v["index"].as_u64().unwrap_or(0);
                st.start_part(index, v["content_block"].clone(), "tool_use");
                st.route(v, index)
            }
            "content_block_delta" | "content_block_stop" => {
                let index = v["index"].as_u64().unwrap_or(0);
                if let Some(part) = st.parts.get_mut(&index) {
                    let d = &v["delta"];
                    let s = |k: &str| d[k].as_str().unwrap_or_default();
                    match d["type"].as_str() {
                        Some("text_delta") => part.text.push_str(s("text")),
                        Some("thinking_delta") => part.text.push_str(s("thinking")),
                        Some("input_json_delta") => part.json.push_str(s("partial_json")),
                        Some("signature_delta") => part.signature.push_str(s("signature")),
                        _ => {}
                    }
                }
                st.route(v, index)
            }
            "message_delta" if st.end_of_round() => Keep::Drop,
            _ => Keep::Original,
        }
    }
    fn calls(&self, st: &State) -> Vec<Call> {
        st.streamed_calls(|p| p.start["type"] == "tool_use", |id, name, arguments, _| {
            json!({"type": "tool_use", "id": id, "name": name, "input": arguments})
        })
    }
    fn assistant(&self, st: &State) -> Vec<Value> {
        let content: Vec<Value> = st
            .parts
            .values()
            .map(|p| {
                let mut block = p.start.clone();
                match block["type"].as_str() {
                    Some("text") => block["text"] = json!(p.text),
                    Some("thinking") => {
                        block["thinking"] = json!(p.text);
                        block["signature"] = json!(p.signature);
                    }
                    Some("tool_use" | "server_tool_use") => {
                        block["input"] = serde_json::from_str(&p.json)
                            .unwrap_or_else(|_| block["input"].clone());
                    }
                    _ => {}
                }
                if let Some(map) = block.as_object_mut() {
                    map.remove("citations");
                }
                block
            })
            .collect();
        vec![json!({"role": "assistant", "content": content})]
    }
}

enum Keep {
    Original,
    Changed,
    Drop,
}

#[cfg(test)]
mod tests;
