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

/// Which upstream an API's requests go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upstream {
    /// OpenAI or an OpenAI-compatible server.
    OpenAi,
    /// Anthropic.
    Anthropic,
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
    /// Sets the arguments (JSON text) of call `call_id` wherever `item` holds it.
    fn set_call_arguments(&self, item: &mut Value, call_id: &str, arguments: &str);
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

struct ChatCompletions;
struct Responses;
struct Messages;

impl WireApi for ChatCompletions {
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

impl Api {
    /// The API's wire format.
    pub fn wire(self) -> &'static dyn WireApi {
        match self {
            Api::ChatCompletions => &ChatCompletions,
            Api::Responses => &Responses,
            Api::Messages => &Messages,
        }
    }
}

#[cfg(test)]
mod tests {
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
