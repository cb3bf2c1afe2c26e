//! Anthropic Messages request bodies -> the core model.
//!
//! Anthropic puts tool results as `tool_result` blocks at the start of a user turn; the core
//! model keeps each result in its own [`Role::Tool`] message, so a user turn is split into its
//! results followed by the rest of its blocks. A `role: "system"` entry inside `messages` (sent
//! by Claude Code) becomes a system message where it stands.

use ctxgc_core::{Block, Message, Role, ToolCall, ToolResult, Transcript};
use serde_json::{Value, json};

use crate::Api;
use crate::FormatError;
use crate::wire_api::{
    CacheHint, Kind, ResponseCall, ResponseEvent, Upstream, Usage, View, WireApi, at,
    drop_shown_parts, n, place_in_turns, text_of,
};
use ctxgc_core::agent_tools;
use ctxgc_core::tokens::ProviderFamily;

/// Builds the transcript view of a Messages request body.
pub fn transcript_from_body(body: &Value) -> Result<Transcript, FormatError> {
    let mut t = Transcript::default();
    match body.get("system") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => t.messages.push(Message::text(Role::System, s.as_str())),
        Some(Value::Array(blocks)) => t.messages.push(Message {
            role: Role::System,
            content: blocks.iter().map(block_to_core).collect(),
            usage: None,
        }),
        Some(_) => {
            return Err(FormatError::shape(
                "system",
                "must be a string or an array of blocks",
            ));
        }
    }
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            FormatError::shape("messages", "a Messages request needs a `messages` array")
        })?;
    for (i, m) in messages.iter().enumerate() {
        let at = format!("messages[{i}]");
        let role = match m.get("role").and_then(Value::as_str) {
            Some("user") => Role::User,
            Some("assistant") => Role::Assistant,
            Some("system") => Role::System,
            Some(other) => return Err(FormatError::shape(&at, format!("unknown role '{other}'"))),
            None => return Err(FormatError::shape(&at, "message has no string `role`")),
        };
        let blocks: Vec<Block> = match m.get("content") {
            Some(Value::String(s)) => vec![Block::text(s.as_str())],
            Some(Value::Array(blocks)) => blocks.iter().map(block_to_core).collect(),
            _ => {
                return Err(FormatError::shape(
                    &at,
                    "`content` must be a string or an array of blocks",
                ));
            }
        };
        let mut rest = Vec::new();
        for block in blocks {
            match block {
                Block::ToolResult(result) => t.messages.push(Message {
                    role: Role::Tool,
                    content: vec![Block::ToolResult(result)],
                    usage: None,
                }),
                other => rest.push(other),
            }
        }
        if !rest.is_empty() || role == Role::Assistant {
            t.messages.push(Message {
                role,
                content: rest,
                usage: None,
            });
        }
    }
    if let Some(tools) = body.get("tools").and_then(Value::as_array) {
        t.tools = tools.clone();
    }
    crate::resolve_tool_names(&mut t);
    Ok(t)
}

/// One content block.
pub fn block_to_core(block: &Value) -> Block {
    let kind = block
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let text_of = |key: &str| {
        block
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    match kind {
        "text" => Block::text(text_of("text")),
        "image" | "document" => Block::Image {
            source: block.clone(),
        },
        "thinking" => Block::Thinking {
            text: Some(text_of("thinking")),
            raw: block.clone(),
        },
        "tool_use" | "server_tool_use" => Block::ToolCall(ToolCall {
            id: text_of("id"),
            name: text_of("name"),
            arguments: block.get("input").map(Value::to_string).unwrap_or_default(),
            implicit: false,
        }),
        "tool_result" => Block::ToolResult(ToolResult {
            call_id: text_of("tool_use_id"),
            tool_name: None,
            content: match block.get("content") {
                Some(Value::String(s)) => vec![Block::text(s.as_str())],
                Some(Value::Array(parts)) => parts.iter().map(block_to_core).collect(),
                _ => Vec::new(),
            },
            is_error: block
                .get("is_error")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        }),
        // redacted_thinking, web search results, container uploads...: opaque.
        _ => Block::Thinking {
            text: None,
            raw: block.clone(),
        },
    }
}

/// Anthropic Messages on the wire ([`WireApi`]).
pub(crate) struct Messages;

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
        let t = transcript_from_body(&body).ok()?;
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
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_results_are_split_out_of_user_turns() {
        let body = json!({
            "model": "claude", "max_tokens": 10,
            "system": [{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                    {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}},
                    {"type": "tool_use", "id": "t2", "name": "Read", "input": {"path": "a"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "a\nb"},
                    {"type": "tool_result", "tool_use_id": "t2", "is_error": true,
                     "content": [{"type": "text", "text": "no such file"}]},
                    {"type": "text", "text": "go on"}
                ]}
            ]
        });
        let t = transcript_from_body(&body).unwrap();
        let roles: Vec<Role> = t.messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [
                Role::System,
                Role::User,
                Role::Assistant,
                Role::Tool,
                Role::Tool,
                Role::User
            ]
        );
        let r2 = t.messages[4].tool_results().next().unwrap();
        assert!(r2.is_error);
        assert_eq!(r2.tool_name.as_deref(), Some("Read"));
        assert_eq!(r2.text(), "no such file");
        let call = t.messages[2].tool_calls().next().unwrap();
        assert_eq!(call.arguments, r#"{"command":"ls"}"#);
    }
}
