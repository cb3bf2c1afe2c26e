//! What ctxgc needs to know of each provider API's wire format, behind one trait: one
//! implementation per API, so that code working on bodies asks the API instead of matching on
//! it (and no catch-all arm silently means "OpenAI"). Adding a provider means adding one
//! implementation.

use ctxgc_core::tokens::ProviderFamily;
use ctxgc_core::{Message, Transcript};
use serde_json::{Value, json};

use crate::Api;

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

pub(crate) fn at(i: usize, block: Option<usize>) -> Option<Origin> {
    Some(Origin {
        first: i,
        last: i,
        block,
    })
}

impl View {
    pub(crate) fn checked(t: Transcript, origin: Vec<Option<Origin>>) -> Option<View> {
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

pub(crate) fn n(v: &Value, key: &str) -> u64 {
    v.pointer(key).and_then(Value::as_u64).unwrap_or(0)
}

/// OpenAI's usage: the input count (`input`, with its `{input}_details`) includes the cached
/// tokens, and no cache write is billed.
pub(crate) fn openai_usage(u: &Value, input: &str, output: &str) -> Usage {
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
pub(crate) fn parsed(v: &Value) -> Value {
    match v {
        Value::String(s) => serde_json::from_str(s).unwrap_or_else(|_| v.clone()),
        other => other.clone(),
    }
}

pub(crate) fn text_of(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

/// Two wire items or blocks alike but for where breakpoints were put.
pub(crate) fn same(a: &Value, b: &Value) -> bool {
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

#[cfg(test)]
mod tests;
