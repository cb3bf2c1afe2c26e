//! OpenAI Responses request bodies -> the core model.
//!
//! `input` is a list of items: messages (`user`, `assistant`, `system`, `developer`),
//! `function_call` / `function_call_output`, `custom_tool_call` / `custom_tool_call_output`,
//! `local_shell_call` / `local_shell_call_output` and `reasoning`. Consecutive assistant-side
//! items (reasoning, text, calls) form one assistant turn, so parallel calls stay together.

use ctxgc_core::{Block, Message, Role, ToolCall, ToolResult, Transcript};
use serde_json::{Value, json};

use crate::Api;
use crate::FormatError;
use crate::chat::message_from_chat;
use crate::wire_api::{
    CacheHint, Kind, Origin, RESPONSES_CALL_TYPES, RESPONSES_RESULT_TYPES, ResponseCall,
    ResponseEvent, Upstream, Usage, View, WireApi, at, openai_usage, parsed, same, text_of,
};
use ctxgc_core::agent_tools;
use ctxgc_core::tokens::ProviderFamily;

/// Builds the transcript view of a Responses request body.
pub fn transcript_from_body(body: &Value) -> Result<Transcript, FormatError> {
    let mut t = Transcript::default();
    if let Some(instructions) = body.get("instructions").and_then(Value::as_str) {
        t.messages.push(Message::text(Role::System, instructions));
    }
    match body.get("input") {
        Some(Value::String(s)) => t.messages.push(Message::text(Role::User, s.as_str())),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                push_item(&mut t.messages, item, &format!("input[{i}]"))?;
            }
        }
        _ => {
            return Err(FormatError::shape(
                "input",
                "a Responses request needs `input` (a string or an array of items)",
            ));
        }
    }
    if let Some(tools) = body.get("tools").and_then(Value::as_array) {
        t.tools = tools.clone();
    }
    crate::resolve_tool_names(&mut t);
    Ok(t)
}

pub(crate) fn push_item(
    messages: &mut Vec<Message>,
    item: &Value,
    at: &str,
) -> Result<(), FormatError> {
    let kind = item
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message");
    let text_of = |key: &str| {
        item.get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let assistant_block = match kind {
        "message" => {
            let message = message_from_chat(item, at)?;
            if message.role == Role::Assistant {
                extend_assistant(messages, message.content);
            } else {
                messages.push(message);
            }
            return Ok(());
        }
        "function_call" | "custom_tool_call" => Block::ToolCall(ToolCall {
            id: text_of("call_id"),
            name: text_of("name"),
            arguments: match item.get("arguments").or_else(|| item.get("input")) {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => String::new(),
            },
            implicit: false,
        }),
        "local_shell_call" => Block::ToolCall(ToolCall {
            id: text_of("call_id"),
            name: "local_shell".into(),
            arguments: item.get("action").map(Value::to_string).unwrap_or_default(),
            implicit: false,
        }),
        "function_call_output" | "custom_tool_call_output" | "local_shell_call_output" => {
            let call_id = if item.get("call_id").is_some() {
                text_of("call_id")
            } else {
                text_of("id")
            };
            let content = match item.get("output") {
                Some(Value::String(s)) => vec![Block::text(s.as_str())],
                Some(Value::Array(parts)) => parts
                    .iter()
                    .map(|p| match p.get("type").and_then(Value::as_str) {
                        Some("input_text" | "output_text" | "text") => {
                            Block::text(p.get("text").and_then(Value::as_str).unwrap_or_default())
                        }
                        Some("input_image") => Block::Image { source: p.clone() },
                        _ => Block::Thinking {
                            text: None,
                            raw: p.clone(),
                        },
                    })
                    .collect(),
                _ => Vec::new(),
            };
            messages.push(Message {
                role: Role::Tool,
                content: vec![Block::ToolResult(ToolResult {
                    call_id,
                    tool_name: None,
                    content,
                    is_error: false,
                })],
                usage: None,
            });
            return Ok(());
        }
        "reasoning" => {
            let summary: Vec<&str> = item
                .get("summary")
                .and_then(Value::as_array)
                .map(|parts| {
                    parts
                        .iter()
                        .filter_map(|p| p.get("text").and_then(Value::as_str))
                        .collect()
                })
                .unwrap_or_default();
            Block::Thinking {
                text: (!summary.is_empty()).then(|| summary.join("\n")),
                raw: item.clone(),
            }
        }
        // web_search_call, file_search_call, computer_call, item_reference, ...: opaque.
        _ => Block::Thinking {
            text: None,
            raw: item.clone(),
        },
    };
    extend_assistant(messages, vec![assistant_block]);
    Ok(())
}

/// Appends to the current assistant turn, or starts one.
fn extend_assistant(messages: &mut Vec<Message>, blocks: Vec<Block>) {
    match messages.last_mut() {
        Some(last) if last.role == Role::Assistant => last.content.extend(blocks),
        _ => messages.push(Message {
            role: Role::Assistant,
            content: blocks,
            usage: None,
        }),
    }
}

/// OpenAI Responses on the wire ([`WireApi`]).
pub(crate) struct Responses;

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
        let t = transcript_from_body(&body).ok()?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn items_map_to_turns() {
        let body = json!({
            "model": "gpt-5", "instructions": "be terse",
            "input": [
                {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix it"}]},
                {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
                {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{\"cmd\":\"ls\"}"},
                {"type": "function_call", "call_id": "c2", "name": "exec_command", "arguments": "{\"cmd\":\"pwd\"}"},
                {"type": "function_call_output", "call_id": "c1", "output": "a\nb"},
                {"type": "function_call_output", "call_id": "c2", "output": "/w"},
                {"role": "assistant", "content": [{"type": "output_text", "text": "done"}]}
            ]
        });
        let t = transcript_from_body(&body).unwrap();
        let roles: Vec<Role> = t.messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [
                Role::System,
                Role::System,
                Role::User,
                Role::Assistant,
                Role::Tool,
                Role::Tool,
                Role::Assistant
            ]
        );
        assert_eq!(
            t.messages[3].tool_calls().count(),
            2,
            "parallel calls in one turn"
        );
        assert_eq!(
            t.messages[4]
                .tool_results()
                .next()
                .unwrap()
                .tool_name
                .as_deref(),
            Some("exec_command")
        );
    }
}
