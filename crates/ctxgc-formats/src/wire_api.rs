//! What ctxgc needs to know of each provider API's wire format, behind one trait: one
//! implementation per API, so that code working on bodies asks the API instead of matching on
//! it (and no catch-all arm silently means "OpenAI"). Adding a provider means adding one
//! implementation.

use ctxgc_core::agent_tools;
use ctxgc_core::tokens::ProviderFamily;
use ctxgc_core::{Message, Transcript};
use serde_json::{Value, json};

use crate::chat::message_from_chat;
use crate::{Api, anthropic, responses};

/// The neutral view of a conversation's wire items, with where each neutral message came from:
/// Anthropic splits a user turn into one message per tool result plus the rest of its blocks;
/// Responses joins consecutive assistant-side items (reasoning, text, calls) into one turn; a
/// system prompt outside the items (`system`, `instructions`) has no wire origin.
#[derive(Debug, Clone)]
pub struct View {
    /// The neutral messages.
    pub messages: Vec<Message>,
    /// For each, the wire items it came from.
    pub origin: Vec<Option<Origin>>,
}

/// Wire items `first..=last`; `block`: the index of a tool result inside an Anthropic turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin {
    /// The first wire item.
    pub first: usize,
    /// The last wire item.
    pub last: usize,
    /// The block inside the item, for an Anthropic tool result.
    pub block: Option<usize>,
}

fn at(i: usize, block: Option<usize>) -> Option<Origin> {
    Some(Origin {
        first: i,
        last: i,
        block,
    })
}

impl View {
    fn checked(t: Transcript, origin: Vec<Option<Origin>>) -> Option<View> {
        (origin.len() == t.messages.len()).then_some(View {
            messages: t.messages,
            origin,
        })
    }

    /// The first wire index at or after neutral message `n` that starts a wire message.
    pub fn wire_boundary(&self, n: usize, wire_len: usize) -> usize {
        let Some(Some(o)) = self.origin.get(n) else {
            return if n >= self.origin.len() { wire_len } else { 0 };
        };
        let shared = self.origin[..n]
            .iter()
            .flatten()
            .next_back()
            .is_some_and(|prev| prev.last >= o.first);
        if shared { o.last + 1 } else { o.first }
    }

    /// Wire items wholly before neutral message `n`.
    pub fn wire_before(&self, n: usize) -> usize {
        self.origin[..n]
            .iter()
            .flatten()
            .map(|o| o.last + 1)
            .max()
            .unwrap_or(0)
    }
}

/// Tokens as the upstream billed them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Uncached input.
    pub input: u64,
    /// Input read from the cache.
    pub cache_read: u64,
    /// Input written to the cache.
    pub cache_write: u64,
    /// Of `cache_write`, tokens written with the one-hour TTL (Anthropic's
    /// `cache_creation.ephemeral_1h_input_tokens`), billed at their own price.
    pub cache_write_1h: u64,
    /// Output.
    pub output: u64,
}

/// What one event of a response stream says, in neutral terms: usage and ids.
#[derive(Debug, Clone, PartialEq)]
pub enum ResponseEvent {
    /// The response started: its id, and the usage known so far (Anthropic's input).
    Started {
        /// The response id, when the API names it.
        id: Option<String>,
        /// Usage known at the start.
        usage: Option<Usage>,
    },
    /// Output tokens so far.
    OutputTokens(u64),
    /// The response is complete: its id and final usage, when the event carries them.
    Completed {
        /// The response id.
        id: Option<String>,
        /// The final usage.
        usage: Option<Usage>,
    },
    /// Anything else (text, tool calls, pings).
    Other,
}

fn n(v: &Value, key: &str) -> u64 {
    v.pointer(key).and_then(Value::as_u64).unwrap_or(0)
}

/// OpenAI's usage: the input count (`input`, with its `{input}_details`) includes the cached
/// tokens, and no cache write is billed.
fn openai_usage(u: &Value, input: &str, output: &str) -> Usage {
    let cached = n(u, &format!("/{input}_details/cached_tokens"));
    Usage {
        input: n(u, &format!("/{input}")).saturating_sub(cached),
        cache_read: cached,
        cache_write: 0,
        cache_write_1h: 0,
        output: n(u, &format!("/{output}")),
    }
}

/// A tool call in a complete response.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponseCall {
    /// Call id.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Arguments (parsed when they were a JSON string).
    pub arguments: Value,
    /// The call as the response carried it.
    pub raw: Value,
}

/// Which of a merge's parts [`WireApi::merge_calls`] is placing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Tool calls.
    Calls,
    /// Tool results.
    Results,
}

/// Arguments parsed when they are a JSON string.
fn parsed(v: &Value) -> Value {
    match v {
        Value::String(s) => serde_json::from_str(s).unwrap_or_else(|_| v.clone()),
        other => other.clone(),
    }
}

fn text_of(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

/// Two wire items or blocks alike but for where breakpoints were put.
fn same(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(map) = v.as_object_mut() {
            map.remove("cache_control");
        }
        v
    };
    strip(a) == strip(b)
}

/// Whether a part of a turn is of some kind.
pub(crate) type PartTest<'a> = &'a dyn Fn(&Value) -> bool;

/// Puts a merge's calls after the other parts of the assistant turn `items[i]` and its results
/// before the other parts of the turn after it, both in the list under `list`; `is_call` and
/// `is_result` pick the parts `place` orders ours among.
pub(crate) fn place_in_turns(
    items: &mut [Value],
    i: usize,
    list: &str,
    (is_call, is_result): (PartTest<'_>, PartTest<'_>),
    place: &dyn Fn(Vec<Value>, Kind) -> Vec<Value>,
) {
    let split = |parts: &mut Vec<Value>, pick: PartTest<'_>| {
        let (mine, other): (Vec<Value>, Vec<Value>) =
            std::mem::take(parts).into_iter().partition(|p| pick(p));
        (other, mine)
    };
    if let Some(parts) = items[i][list].as_array_mut() {
        let (other, calls) = split(parts, is_call);
        *parts = other;
        parts.extend(place(calls, Kind::Calls));
    }
    if let Some(parts) = items[i + 1][list].as_array_mut() {
        let (other, results) = split(parts, is_result);
        *parts = place(results, Kind::Results);
        parts.extend(other);
    }
}

/// Removes from the start of the assistant turn `items[after]` (role `role`, parts under
/// `list`) the parts an internal round already showed the client (`round`'s first item, its
/// calls excepted).
pub(crate) fn drop_shown_parts(
    items: &mut [Value],
    after: usize,
    round: &[Value],
    (role, list): (&str, &str),
    is_call: PartTest<'_>,
) {
    let Some(ours) = round.first().and_then(|a| a[list].as_array()) else {
        return;
    };
    let shown: Vec<&Value> = ours.iter().filter(|p| !is_call(p)).collect();
    let Some(parts) = items
        .get_mut(after)
        .filter(|m| m["role"] == role)
        .and_then(|m| m[list].as_array_mut())
    else {
        return;
    };
    let repeated = parts
        .iter()
        .zip(&shown)
        .take_while(|(client, ours)| same(client, ours))
        .count();
    parts.drain(..repeated);
}

/// How an API's prompt cache is steered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheHint {
    /// Explicit `cache_control` breakpoints (Anthropic).
    Breakpoints,
    /// Automatic prefix caching, routed by `prompt_cache_key` (OpenAI).
    PromptCacheKey,
    /// Automatic prefix caching with nothing to steer it (Gemini's implicit caching).
    Implicit,
}

/// Which upstream an API's requests go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Upstream {
    /// OpenAI or an OpenAI-compatible server.
    OpenAi,
    /// Anthropic.
    Anthropic,
    /// Google's Gemini API.
    Gemini,
}

/// A tool result's text in a conversation, where it is and what answered it.
#[derive(Debug, Clone)]
pub struct ResultSlot<'a> {
    /// The id of the call it answers, when known.
    pub call_id: Option<std::borrow::Cow<'a, str>>,
    /// The tool's name, when the result itself says it (else the call's is looked up).
    pub tool: Option<&'a str>,
    /// The content (a string, or a list of parts).
    pub content: &'a Value,
    /// The JSON pointer of the content within the item.
    pub pointer: String,
}

/// One provider API's wire format.
pub trait WireApi: Sync {
    /// The API.
    fn api(&self) -> Api;
    /// Where the conversation is in a request body (`messages` or `input`).
    fn items_key(&self) -> &'static str;
    /// Where instructions outside the conversation are (`system`, `instructions`), when the
    /// API has such a field.
    fn system_key(&self) -> Option<&'static str>;
    /// How its tokens are counted.
    fn family(&self) -> ProviderFamily;
    /// Where its requests go.
    fn upstream(&self) -> Upstream;
    /// The `tool_choice` that forbids tool calls.
    fn tool_choice_none(&self) -> Value;
    /// One tool result answering `call_id` with `text`, as a part of what [`Self::result_items`]
    /// wraps.
    fn result_part(&self, call_id: &str, text: &str) -> Value;
    /// Result parts as conversation items (Anthropic: one user message holding them all).
    fn result_items(&self, parts: Vec<Value>) -> Vec<Value>;
    /// The agent tools (`trim_tool_result`, `recall_tool_result`) as this API defines tools.
    fn agent_tools(&self) -> Vec<Value>;
    /// Whether a conversation item is a tool call of this API (an item, not a block).
    fn is_call_item(&self, item: &Value) -> bool;
    /// Whether a conversation item is a tool result of this API (an item, not a block).
    fn is_result_item(&self, item: &Value) -> bool;
    /// An error told inside a response stream already under way, as the API's SSE tells one.
    fn stream_error(&self, message: &str) -> String;
    /// Sets the text of a tool result: `item` is the conversation item holding it, `block`
    /// its block within the item when results are blocks (Anthropic).
    fn set_result_text(&self, item: &mut Value, block: Option<usize>, text: &str);
    /// The tool calls in a complete (non-streamed) response, in the order the model made them.
    fn response_calls(&self, response: &Value) -> Vec<ResponseCall>;
    /// The usage a provider's usage object reports.
    fn usage_of(&self, usage: &Value) -> Usage;
    /// What one event of a streamed response says about its usage and id.
    fn response_event(&self, event: &Value) -> ResponseEvent;
    /// A complete JSON response's usage, and its id when a later request may continue it
    /// (Responses' `previous_response_id`).
    fn response_summary(&self, response: &Value) -> (Option<Usage>, Option<String>) {
        (response.get("usage").map(|u| self.usage_of(u)), None)
    }
    /// The list in a complete response that holds its tool calls (beside other parts, for
    /// Anthropic's content blocks and Responses' output items).
    fn response_call_list<'a>(&self, response: &'a mut Value) -> Option<&'a mut Vec<Value>>;
    /// The history items of the model's turn in a complete response.
    fn response_items(&self, response: &Value) -> Vec<Value>;
    /// Puts `calls` into the client's assistant turn that holds call `with_call`, and
    /// `results` beside that turn's results, both through `place` (which orders ours among
    /// theirs); both or neither, since a call without its result is a 400 upstream. Returns
    /// whether the turn and its results were found.
    fn merge_calls(
        &self,
        items: &mut Vec<Value>,
        with_call: &str,
        place: &dyn Fn(Vec<Value>, Kind) -> Vec<Value>,
    ) -> bool;
    /// Removes from the client's history, right after item `after`, the content the client
    /// was streamed of a round the proxy ran itself (`round`: that round's items): the
    /// upstream then sees each round's content once.
    fn drop_repeated_round(&self, items: &mut Vec<Value>, after: usize, round: &[Value]);
    /// How a client asks this API's provider to cache its prompt prefix.
    fn cache_hint(&self) -> CacheHint;
    /// The tool calls a conversation item holds: (call id, tool name).
    fn calls_in<'a>(&self, item: &'a Value) -> Vec<(&'a str, &'a str)>;
    /// The tool results a conversation item holds: (call id, the content, the JSON pointer of
    /// the content within the item).
    fn results_in<'a>(&self, item: &'a Value) -> Vec<(Option<&'a str>, &'a Value, String)>;
    /// Sets the arguments (JSON text) of call `call_id` wherever `item` holds it.
    fn set_call_arguments(&self, item: &mut Value, call_id: &str, arguments: &str);
    /// Makes `text` the visible text of an assistant item: its first text part (a `content`
    /// string, or the first text, output_text or Gemini text part that is not a thought), the
    /// other text parts gone. Returns whether the item had text to replace.
    fn set_assistant_text(&self, item: &mut Value, text: &str) -> bool {
        let key = if item.get("parts").is_some() {
            "parts"
        } else {
            "content"
        };
        match item.get_mut(key) {
            Some(Value::String(s)) => {
                *s = text.to_owned();
                true
            }
            Some(Value::Array(parts)) => {
                let is_text = |p: &Value| {
                    p.get("text").is_some_and(Value::is_string)
                        && p.get("thought") != Some(&Value::Bool(true))
                        && matches!(
                            p.get("type").and_then(Value::as_str),
                            None | Some("text" | "output_text")
                        )
                };
                let Some(first) = parts.iter().position(is_text) else {
                    return false;
                };
                parts[first]["text"] = Value::String(text.to_owned());
                let mut k = 0;
                parts.retain(|p| {
                    k += 1;
                    k - 1 == first || !is_text(p)
                });
                true
            }
            _ => false,
        }
    }
    /// The item without its tool results: what remains of a turn that shares one wire message
    /// with them (Anthropic's user turn); the item itself where results are items of their own.
    fn without_results(&self, item: &Value) -> Value {
        item.clone()
    }
    /// Calls `f` with the call id and the content of every tool result in a conversation item.
    fn for_each_result(&self, item: &mut Value, f: &mut dyn FnMut(Option<&str>, &mut Value));
    /// The last tool result of a conversation item: its call id and content.
    fn last_result<'a>(&self, item: &'a Value) -> Option<(&'a str, &'a Value)>;
    /// The neutral view of a conversation (`items`, with the instructions outside them), and
    /// the provenance of every view message; `None` when the items are not this API's.
    fn view(&self, system: Option<&Value>, items: &[Value]) -> Option<View>;
    /// The tool results of item `i` of a conversation, with the call ids the neutral view
    /// gives them ([`Self::results_in`] where an item's results name their calls; an API that
    /// pairs results with calls by position needs the items before).
    fn result_slots<'a>(&self, items: &'a [Value], i: usize) -> Vec<ResultSlot<'a>> {
        self.results_in(&items[i])
            .into_iter()
            .map(|(id, content, pointer)| ResultSlot {
                call_id: id.map(std::borrow::Cow::Borrowed),
                tool: None,
                content,
                pointer,
            })
            .collect()
    }
    /// The result of `call` in the API's wire form ([`Self::result_part`], for APIs whose
    /// results name their call by id only).
    fn result_part_for(&self, call: &ResponseCall, text: &str) -> Value {
        self.result_part(&call.id, text)
    }
    /// Asks for an answer without tool calls (the last round of the agent tools).
    fn set_no_tool_calls(&self, body: &mut Value) {
        body["tool_choice"] = self.tool_choice_none();
    }
    /// A user message holding `text` (a compaction's summary).
    fn user_text_item(&self, text: &str) -> Value {
        json!({"role": "user", "content": text})
    }
}

/// The Responses item types that are tool calls, and those that answer them.
pub const RESPONSES_CALL_TYPES: [&str; 3] =
    ["function_call", "custom_tool_call", "local_shell_call"];
/// The Responses item types that answer a call.
pub const RESPONSES_RESULT_TYPES: [&str; 3] = [
    "function_call_output",
    "custom_tool_call_output",
    "local_shell_call_output",
];

/// OpenAI Chat Completions.
pub(crate) struct ChatCompletions;
/// OpenAI Responses.
pub(crate) struct Responses;
/// Anthropic Messages.
pub(crate) struct Messages;

impl WireApi for ChatCompletions {
    fn usage_of(&self, u: &Value) -> Usage {
        openai_usage(u, "prompt_tokens", "completion_tokens")
    }
    fn response_event(&self, event: &Value) -> ResponseEvent {
        // The last chunk carries the usage (with `stream_options.include_usage`).
        match event.get("usage").filter(|u| u.is_object()) {
            Some(u) => ResponseEvent::Completed {
                id: None,
                usage: Some(self.usage_of(u)),
            },
            None => ResponseEvent::Other,
        }
    }
    fn response_call_list<'a>(&self, response: &'a mut Value) -> Option<&'a mut Vec<Value>> {
        response
            .pointer_mut("/choices/0/message/tool_calls")?
            .as_array_mut()
    }
    fn response_calls(&self, response: &Value) -> Vec<ResponseCall> {
        response
            .pointer("/choices/0/message/tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| ResponseCall {
                id: text_of(&c["id"]),
                name: text_of(&c["function"]["name"]),
                arguments: parsed(&c["function"]["arguments"]),
                raw: c.clone(),
            })
            .collect()
    }
    fn response_items(&self, response: &Value) -> Vec<Value> {
        let m = &response["choices"][0]["message"];
        let mut out = json!({"role": "assistant", "content": m["content"].clone()});
        if let Some(calls) = m.get("tool_calls") {
            out["tool_calls"] = calls.clone();
        }
        vec![out]
    }
    fn merge_calls(
        &self,
        items: &mut Vec<Value>,
        with_call: &str,
        place: &dyn Fn(Vec<Value>, Kind) -> Vec<Value>,
    ) -> bool {
        let Some(i) = items.iter().position(|m| {
            m["role"] == "assistant"
                && m["tool_calls"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|c| c["id"] == with_call))
        }) else {
            return false;
        };
        let end = (i + 1..items.len())
            .find(|&j| items[j]["role"] != "tool")
            .unwrap_or(items.len());
        if end == i + 1 {
            return false;
        }
        if let Some(calls) = items[i]["tool_calls"].as_array_mut() {
            *calls = place(std::mem::take(calls), Kind::Calls);
        }
        let results: Vec<Value> = items.drain(i + 1..end).collect();
        let results = place(results, Kind::Results);
        items.splice(i + 1..i + 1, results);
        true
    }
    fn drop_repeated_round(&self, items: &mut Vec<Value>, after: usize, round: &[Value]) {
        let Some(text) = round
            .first()
            .and_then(|a| a["content"].as_str())
            .filter(|t| !t.is_empty())
        else {
            return;
        };
        if let Some(message) = items.get_mut(after).filter(|m| m["role"] == "assistant")
            && let Some(rest) = message["content"]
                .as_str()
                .and_then(|c| c.strip_prefix(text))
        {
            message["content"] = if rest.is_empty() {
                Value::Null
            } else {
                json!(rest)
            };
        }
    }
    fn cache_hint(&self) -> CacheHint {
        CacheHint::PromptCacheKey
    }
    fn api(&self) -> Api {
        Api::ChatCompletions
    }
    fn items_key(&self) -> &'static str {
        "messages"
    }
    fn system_key(&self) -> Option<&'static str> {
        None
    }
    fn family(&self) -> ProviderFamily {
        ProviderFamily::Openai
    }
    fn upstream(&self) -> Upstream {
        Upstream::OpenAi
    }
    fn tool_choice_none(&self) -> Value {
        json!("none")
    }
    fn result_part(&self, call_id: &str, text: &str) -> Value {
        json!({"role": "tool", "tool_call_id": call_id, "content": text})
    }
    fn result_items(&self, parts: Vec<Value>) -> Vec<Value> {
        parts
    }
    fn agent_tools(&self) -> Vec<Value> {
        agent_tools::chat_completions()
    }
    fn is_call_item(&self, item: &Value) -> bool {
        item["role"] == "assistant" && item["tool_calls"].as_array().is_some_and(|c| !c.is_empty())
    }
    fn is_result_item(&self, item: &Value) -> bool {
        item["role"] == "tool"
    }
    fn stream_error(&self, message: &str) -> String {
        format!(
            "data: {}\n\ndata: [DONE]\n\n",
            json!({"error": {"type": "ctxgc_error", "message": message}})
        )
    }
    fn set_result_text(&self, item: &mut Value, _block: Option<usize>, text: &str) {
        item["content"] = json!(text);
    }
    fn calls_in<'a>(&self, item: &'a Value) -> Vec<(&'a str, &'a str)> {
        item["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| Some((c["id"].as_str()?, c["function"]["name"].as_str()?)))
            .collect()
    }
    fn results_in<'a>(&self, item: &'a Value) -> Vec<(Option<&'a str>, &'a Value, String)> {
        if !self.is_result_item(item) {
            return Vec::new();
        }
        vec![(
            item["tool_call_id"].as_str(),
            &item["content"],
            "/content".into(),
        )]
    }
    fn set_call_arguments(&self, item: &mut Value, call_id: &str, arguments: &str) {
        for call in item["tool_calls"].as_array_mut().into_iter().flatten() {
            if call["id"] == call_id {
                call["function"]["arguments"] = json!(arguments);
            }
        }
    }
    fn for_each_result(&self, item: &mut Value, f: &mut dyn FnMut(Option<&str>, &mut Value)) {
        if self.is_result_item(item) {
            let id = item["tool_call_id"].as_str().map(str::to_owned);
            f(id.as_deref(), &mut item["content"]);
        }
    }
    fn last_result<'a>(&self, item: &'a Value) -> Option<(&'a str, &'a Value)> {
        self.is_result_item(item)
            .then(|| Some((item["tool_call_id"].as_str()?, &item["content"])))
            .flatten()
    }
    fn view(&self, system: Option<&Value>, messages: &[Value]) -> Option<View> {
        // Chat's instructions are messages themselves.
        let _ = system;
        let mut t = Transcript::default();
        for (i, m) in messages.iter().enumerate() {
            t.messages
                .push(message_from_chat(m, &format!("messages[{i}]")).ok()?);
        }
        crate::resolve_tool_names(&mut t);
        let origin = (0..messages.len()).map(|i| at(i, None)).collect();
        View::checked(t, origin)
    }
}

impl WireApi for Responses {
    fn usage_of(&self, u: &Value) -> Usage {
        openai_usage(u, "input_tokens", "output_tokens")
    }
    fn response_event(&self, event: &Value) -> ResponseEvent {
        let id = || event["response"]["id"].as_str().map(str::to_owned);
        match event["type"].as_str() {
            Some("response.created") => ResponseEvent::Started {
                id: id(),
                usage: None,
            },
            Some("response.completed") => ResponseEvent::Completed {
                id: id(),
                usage: event["response"]
                    .get("usage")
                    .filter(|u| u.is_object())
                    .map(|u| self.usage_of(u)),
            },
            _ => ResponseEvent::Other,
        }
    }
    fn response_summary(&self, response: &Value) -> (Option<Usage>, Option<String>) {
        let usage = response.get("usage").map(|u| self.usage_of(u));
        let id = (response["object"] == "response")
            .then(|| response["id"].as_str().map(str::to_owned))
            .flatten();
        (usage, id)
    }
    fn response_call_list<'a>(&self, response: &'a mut Value) -> Option<&'a mut Vec<Value>> {
        response.get_mut("output")?.as_array_mut()
    }
    fn response_calls(&self, response: &Value) -> Vec<ResponseCall> {
        response["output"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|it| self.is_call_item(it))
            .map(|it| ResponseCall {
                id: text_of(&it["call_id"]),
                name: text_of(&it["name"]),
                arguments: parsed(&it["arguments"]),
                raw: it.clone(),
            })
            .collect()
    }
    fn response_items(&self, response: &Value) -> Vec<Value> {
        response["output"].as_array().cloned().unwrap_or_default()
    }
    fn merge_calls(
        &self,
        items: &mut Vec<Value>,
        with_call: &str,
        place: &dyn Fn(Vec<Value>, Kind) -> Vec<Value>,
    ) -> bool {
        let is_call = |it: &Value| self.is_call_item(it);
        let Some(i) = items
            .iter()
            .position(|it| is_call(it) && it["call_id"] == with_call)
        else {
            return false;
        };
        let calls_start = (0..=i)
            .rev()
            .take_while(|&j| is_call(&items[j]))
            .last()
            .unwrap_or(i);
        let calls_end = (i..items.len())
            .find(|&j| !is_call(&items[j]))
            .unwrap_or(items.len());
        let outputs_end = (calls_end..items.len())
            .find(|&j| !self.is_result_item(&items[j]))
            .unwrap_or(items.len());
        if outputs_end == calls_end {
            return false;
        }
        let outputs: Vec<Value> = items.drain(calls_end..outputs_end).collect();
        let calls: Vec<Value> = items.drain(calls_start..calls_end).collect();
        let mut run = place(calls, Kind::Calls);
        run.extend(place(outputs, Kind::Results));
        items.splice(calls_start..calls_start, run);
        true
    }
    fn drop_repeated_round(&self, items: &mut Vec<Value>, after: usize, round: &[Value]) {
        // Items: the round's reasoning and messages, as separate items.
        let shown: Vec<&Value> = round
            .iter()
            .filter(|v| !self.is_call_item(v) && !self.is_result_item(v))
            .collect();
        let repeated = items[after.min(items.len())..]
            .iter()
            .zip(&shown)
            .take_while(|(client, ours)| same(client, ours))
            .count();
        items.drain(after..after + repeated);
    }
    fn cache_hint(&self) -> CacheHint {
        CacheHint::PromptCacheKey
    }
    fn api(&self) -> Api {
        Api::Responses
    }
    fn items_key(&self) -> &'static str {
        "input"
    }
    fn system_key(&self) -> Option<&'static str> {
        Some("instructions")
    }
    fn family(&self) -> ProviderFamily {
        ProviderFamily::Openai
    }
    fn upstream(&self) -> Upstream {
        Upstream::OpenAi
    }
    fn tool_choice_none(&self) -> Value {
        json!("none")
    }
    fn result_part(&self, call_id: &str, text: &str) -> Value {
        json!({"type": "function_call_output", "call_id": call_id, "output": text})
    }
    fn result_items(&self, parts: Vec<Value>) -> Vec<Value> {
        parts
    }
    fn agent_tools(&self) -> Vec<Value> {
        agent_tools::responses()
    }
    fn is_call_item(&self, item: &Value) -> bool {
        item["type"]
            .as_str()
            .is_some_and(|t| RESPONSES_CALL_TYPES.contains(&t))
    }
    fn is_result_item(&self, item: &Value) -> bool {
        item["type"]
            .as_str()
            .is_some_and(|t| RESPONSES_RESULT_TYPES.contains(&t))
    }
    fn stream_error(&self, message: &str) -> String {
        format!(
            "event: error\ndata: {}\n\n",
            json!({"type": "error", "code": "ctxgc_error", "message": message, "param": null})
        )
    }
    fn set_result_text(&self, item: &mut Value, _block: Option<usize>, text: &str) {
        item["output"] = json!(text);
    }
    fn calls_in<'a>(&self, item: &'a Value) -> Vec<(&'a str, &'a str)> {
        if !self.is_call_item(item) {
            return Vec::new();
        }
        // A local shell call has no name of its own: it is the shell.
        let name = item["name"].as_str().unwrap_or("local_shell");
        item["call_id"]
            .as_str()
            .map(|id| vec![(id, name)])
            .unwrap_or_default()
    }
    fn results_in<'a>(&self, item: &'a Value) -> Vec<(Option<&'a str>, &'a Value, String)> {
        if !self.is_result_item(item) {
            return Vec::new();
        }
        vec![(item["call_id"].as_str(), &item["output"], "/output".into())]
    }
    fn set_call_arguments(&self, item: &mut Value, call_id: &str, arguments: &str) {
        if self.is_call_item(item) && item["call_id"] == call_id && item.get("arguments").is_some()
        {
            item["arguments"] = json!(arguments);
        }
    }
    fn for_each_result(&self, item: &mut Value, f: &mut dyn FnMut(Option<&str>, &mut Value)) {
        if self.is_result_item(item) {
            let id = item["call_id"].as_str().map(str::to_owned);
            f(id.as_deref(), &mut item["output"]);
        }
    }
    fn last_result<'a>(&self, item: &'a Value) -> Option<(&'a str, &'a Value)> {
        self.is_result_item(item)
            .then(|| Some((item["call_id"].as_str()?, &item["output"])))
            .flatten()
    }
    fn view(&self, system: Option<&Value>, messages: &[Value]) -> Option<View> {
        let system = system.filter(|s| !s.is_null());
        let mut body = json!({"input": messages});
        if let Some(system) = system {
            body["instructions"] = system.clone();
        }
        let t = responses::transcript_from_body(&body).ok()?;
        // As transcript_from_body groups items: assistant-side items join the turn before
        // when it is an assistant turn.
        let mut origin: Vec<Option<Origin>> = Vec::with_capacity(t.messages.len());
        if system.is_some_and(Value::is_string) {
            origin.push(None);
        }
        let mut assistant_open = false;
        for (i, item) in messages.iter().enumerate() {
            let kind = item["type"].as_str().unwrap_or("message");
            let assistant_side = match kind {
                "message" => item["role"] == "assistant",
                k => !k.ends_with("_output"),
            };
            if assistant_side && assistant_open {
                if let Some(Some(o)) = origin.last_mut() {
                    o.last = i;
                }
            } else {
                origin.push(at(i, None));
            }
            assistant_open = assistant_side;
        }
        View::checked(t, origin)
    }
}

impl WireApi for Messages {
    fn usage_of(&self, u: &Value) -> Usage {
        Usage {
            input: n(u, "/input_tokens"),
            cache_read: n(u, "/cache_read_input_tokens"),
            cache_write: n(u, "/cache_creation_input_tokens"),
            cache_write_1h: n(u, "/cache_creation/ephemeral_1h_input_tokens"),
            output: n(u, "/output_tokens"),
        }
    }
    fn response_event(&self, event: &Value) -> ResponseEvent {
        match event["type"].as_str() {
            Some("message_start") => ResponseEvent::Started {
                id: None,
                usage: Some(self.usage_of(&event["message"]["usage"])),
            },
            Some("message_delta") => event
                .pointer("/usage/output_tokens")
                .and_then(Value::as_u64)
                .map_or(ResponseEvent::Other, ResponseEvent::OutputTokens),
            Some("message_stop") => ResponseEvent::Completed {
                id: None,
                usage: None,
            },
            _ => ResponseEvent::Other,
        }
    }
    fn response_call_list<'a>(&self, response: &'a mut Value) -> Option<&'a mut Vec<Value>> {
        response.get_mut("content")?.as_array_mut()
    }
    fn response_calls(&self, response: &Value) -> Vec<ResponseCall> {
        response["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|b| b["type"] == "tool_use")
            .map(|b| ResponseCall {
                id: text_of(&b["id"]),
                name: text_of(&b["name"]),
                arguments: b["input"].clone(),
                raw: b.clone(),
            })
            .collect()
    }
    fn response_items(&self, response: &Value) -> Vec<Value> {
        vec![json!({"role": "assistant", "content": response["content"].clone()})]
    }
    fn merge_calls(
        &self,
        items: &mut Vec<Value>,
        with_call: &str,
        place: &dyn Fn(Vec<Value>, Kind) -> Vec<Value>,
    ) -> bool {
        let Some(i) = items.iter().position(|m| {
            m["role"] == "assistant"
                && m["content"].as_array().is_some_and(|c| {
                    c.iter()
                        .any(|b| b["type"] == "tool_use" && b["id"] == with_call)
                })
        }) else {
            return false;
        };
        let has_results = items.get(i + 1).is_some_and(|m| self.is_result_item(m));
        if !has_results {
            return false;
        }
        // Calls among the turn's tool_use blocks, results among the user turn's results;
        // other blocks keep their places before them.
        place_in_turns(
            items,
            i,
            "content",
            (&|b| b["type"] == "tool_use", &|b| {
                b["type"] == "tool_result"
            }),
            place,
        );
        true
    }
    fn drop_repeated_round(&self, items: &mut Vec<Value>, after: usize, round: &[Value]) {
        drop_shown_parts(items, after, round, ("assistant", "content"), &|b| {
            b["type"] == "tool_use"
        });
    }
    fn cache_hint(&self) -> CacheHint {
        CacheHint::Breakpoints
    }
    fn api(&self) -> Api {
        Api::Messages
    }
    fn items_key(&self) -> &'static str {
        "messages"
    }
    fn system_key(&self) -> Option<&'static str> {
        Some("system")
    }
    fn family(&self) -> ProviderFamily {
        ProviderFamily::Anthropic
    }
    fn upstream(&self) -> Upstream {
        Upstream::Anthropic
    }
    fn tool_choice_none(&self) -> Value {
        json!({"type": "none"})
    }
    fn result_part(&self, call_id: &str, text: &str) -> Value {
        json!({"type": "tool_result", "tool_use_id": call_id, "content": text})
    }
    fn result_items(&self, parts: Vec<Value>) -> Vec<Value> {
        vec![json!({"role": "user", "content": parts})]
    }
    fn agent_tools(&self) -> Vec<Value> {
        agent_tools::anthropic()
    }
    fn is_call_item(&self, item: &Value) -> bool {
        item["role"] == "assistant"
            && item["content"]
                .as_array()
                .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_use"))
    }
    fn is_result_item(&self, item: &Value) -> bool {
        item["role"] == "user"
            && item["content"]
                .as_array()
                .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_result"))
    }
    fn stream_error(&self, message: &str) -> String {
        format!(
            "event: error\ndata: {}\n\n",
            json!({"type": "error", "error": {"type": "api_error", "message": message}})
        )
    }
    fn set_result_text(&self, item: &mut Value, block: Option<usize>, text: &str) {
        match block {
            Some(j) => item["content"][j]["content"] = json!(text),
            None => item["content"] = json!(text),
        }
    }
    fn calls_in<'a>(&self, item: &'a Value) -> Vec<(&'a str, &'a str)> {
        item["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|b| b["type"] == "tool_use")
            .filter_map(|b| Some((b["id"].as_str()?, b["name"].as_str()?)))
            .collect()
    }
    fn results_in<'a>(&self, item: &'a Value) -> Vec<(Option<&'a str>, &'a Value, String)> {
        item["content"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
            .filter(|(_, b)| b["type"] == "tool_result")
            .map(|(j, b)| {
                (
                    b["tool_use_id"].as_str(),
                    &b["content"],
                    format!("/content/{j}/content"),
                )
            })
            .collect()
    }
    fn set_call_arguments(&self, item: &mut Value, call_id: &str, arguments: &str) {
        // Arguments that are not a JSON object cannot be a tool_use input: left as they are.
        let Ok(input) = serde_json::from_str::<Value>(arguments) else {
            return;
        };
        for b in item["content"].as_array_mut().into_iter().flatten() {
            if b["type"] == "tool_use" && b["id"] == call_id {
                b["input"] = input.clone();
            }
        }
    }
    fn without_results(&self, item: &Value) -> Value {
        let mut item = item.clone();
        if let Some(blocks) = item["content"].as_array_mut() {
            blocks.retain(|b| b["type"] != "tool_result");
        }
        item
    }
    fn for_each_result(&self, item: &mut Value, f: &mut dyn FnMut(Option<&str>, &mut Value)) {
        if item["role"] != "user" {
            return;
        }
        for block in item["content"].as_array_mut().into_iter().flatten() {
            if block["type"] == "tool_result" {
                let id = block["tool_use_id"].as_str().map(str::to_owned);
                f(id.as_deref(), &mut block["content"]);
            }
        }
    }
    fn last_result<'a>(&self, item: &'a Value) -> Option<(&'a str, &'a Value)> {
        if item["role"] != "user" {
            return None;
        }
        let block = item["content"]
            .as_array()?
            .iter()
            .rfind(|b| b["type"] == "tool_result")?;
        Some((block["tool_use_id"].as_str()?, &block["content"]))
    }
    fn view(&self, system: Option<&Value>, messages: &[Value]) -> Option<View> {
        let system = system.filter(|s| !s.is_null());
        let mut body = json!({"messages": messages});
        if let Some(system) = system {
            body["system"] = system.clone();
        }
        let t = anthropic::transcript_from_body(&body).ok()?;
        // As transcript_from_body splits a turn: its results first, then the rest.
        let mut origin = Vec::with_capacity(t.messages.len());
        if system.is_some() {
            origin.push(None);
        }
        for (i, m) in messages.iter().enumerate() {
            let mut rest = m["content"].is_string();
            for (j, b) in m["content"].as_array().into_iter().flatten().enumerate() {
                if b["type"] == "tool_result" {
                    origin.push(at(i, Some(j)));
                } else {
                    rest = true;
                }
            }
            if rest || m["role"] == "assistant" {
                origin.push(at(i, None));
            }
        }
        View::checked(t, origin)
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn an_assistant_items_text_is_replaced_in_every_api() {
        use serde_json::json;
        let cases = [
            (
                Api::ChatCompletions,
                json!({"role": "assistant", "content": "long"}),
            ),
            (
                Api::Messages,
                json!({"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s"}, {"type": "text", "text": "long"}, {"type": "text", "text": "more"}, {"type": "tool_use", "id": "x", "name": "n", "input": {}}]}),
            ),
            (
                Api::Responses,
                json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "long", "annotations": []}]}),
            ),
            (
                Api::Gemini,
                json!({"role": "model", "parts": [{"text": "why", "thought": true}, {"text": "long"}, {"functionCall": {"name": "n", "args": {}}}]}),
            ),
        ];
        for (api, mut item) in cases {
            let before = item.clone();
            assert!(api.wire().set_assistant_text(&mut item, "short"), "{api:?}");
            let text = item.to_string();
            assert!(text.contains("short") && !text.contains("long") && !text.contains("more"));
            // Everything else stays: thoughts, calls, annotations.
            for kept in [
                "thinking",
                "tool_use",
                "annotations",
                "functionCall",
                "\"why\"",
            ] {
                assert_eq!(
                    before.to_string().contains(kept),
                    text.contains(kept),
                    "{api:?} {kept}"
                );
            }
        }
        let mut reasoning = json!({"type": "reasoning", "summary": []});
        assert!(
            !Api::Responses
                .wire()
                .set_assistant_text(&mut reasoning, "x")
        );
        assert_eq!(
            reasoning,
            json!({"type": "reasoning", "summary": []}),
            "nothing added"
        );
    }

    use super::*;

    #[test]
    fn each_api_answers_for_itself() {
        for api in [Api::ChatCompletions, Api::Responses, Api::Messages] {
            let wire = api.wire();
            assert_eq!(wire.api(), api);
            let items = wire.result_items(vec![wire.result_part("c1", "out")]);
            assert_eq!(items.len(), 1);
            assert!(wire.is_result_item(&items[0]), "{api:?}: {}", items[0]);
            assert!(!wire.is_call_item(&items[0]));
            assert_eq!(wire.agent_tools().len(), 2);
        }
        assert_eq!(Api::Messages.wire().upstream(), Upstream::Anthropic);
        assert_eq!(Api::Responses.wire().items_key(), "input");
        assert!(
            Api::Responses
                .wire()
                .is_call_item(&json!({"type": "local_shell_call", "call_id": "c"}))
        );
    }
}
