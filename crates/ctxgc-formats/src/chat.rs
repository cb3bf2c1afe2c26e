//! OpenAI Chat Completions messages <-> the core model.
//!
//! Also the canonical transcript format of `ctxgc import`: one Chat Completions message per
//! JSONL line, with three documented extensions that carry what the core model knows beyond the
//! wire shape: `"implicit": true` on a tool call written in the assistant's text (text-protocol
//! agents), `"is_error": true` on a failed tool result, and `"usage"` on assistant messages of
//! recorded transcripts.

use ctxgc_core::{Block, Message, RecordedUsage, Role, ToolCall, ToolResult, Transcript};
use serde_json::{Map, Value, json};

use crate::Api;
use crate::FormatError;
use crate::wire_api::{
    CacheHint, Kind, ResponseCall, ResponseEvent, Upstream, Usage, View, WireApi, at, openai_usage,
    parsed, text_of,
};
use ctxgc_core::agent_tools;
use ctxgc_core::tokens::ProviderFamily;

/// Parses one Chat Completions message. Tool messages become [`Role::Tool`] messages holding
/// one [`ToolResult`]; tool names are resolved later from the calls.
pub fn message_from_chat(value: &Value, at: &str) -> Result<Message, FormatError> {
    let obj = value
        .as_object()
        .ok_or_else(|| FormatError::shape(at, "a message must be a JSON object"))?;
    let role = obj
        .get("role")
        .and_then(Value::as_str)
        .ok_or_else(|| FormatError::shape(at, "message has no string `role`"))?;
    let mut content = Vec::new();
    let role = match role {
        "system" | "developer" => Role::System,
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "tool" | "function" => {
            let call_id = obj
                .get("tool_call_id")
                .and_then(Value::as_str)
                .or_else(|| obj.get("name").and_then(Value::as_str))
                .unwrap_or_default()
                .to_owned();
            let mut parts = Vec::new();
            push_content(obj.get("content"), &mut parts, at)?;
            let tool_name = obj.get("name").and_then(Value::as_str).map(str::to_owned);
            content.push(Block::ToolResult(ToolResult {
                call_id,
                tool_name,
                content: parts,
                is_error: obj
                    .get("is_error")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
            }));
            return Ok(Message {
                role: Role::Tool,
                content,
                usage: None,
            });
        }
        other => {
            return Err(FormatError::shape(
                at,
                format!(
                    "unknown role '{other}' (expected system, developer, user, assistant or tool)"
                ),
            ));
        }
    };
    for key in ["reasoning_content", "reasoning"] {
        if let Some(text) = obj.get(key).and_then(Value::as_str) {
            content.push(Block::Thinking {
                text: Some(text.to_owned()),
                raw: json!({ "type": key, "text": text }),
            });
        }
    }
    push_content(obj.get("content"), &mut content, at)?;
    if let Some(refusal) = obj.get("refusal").and_then(Value::as_str) {
        content.push(Block::text(refusal));
    }
    if let Some(calls) = obj.get("tool_calls").and_then(Value::as_array) {
        for (i, call) in calls.iter().enumerate() {
            content.push(Block::ToolCall(tool_call_from_chat(
                call,
                &format!("{at}.tool_calls[{i}]"),
            )?));
        }
    }
    if let Some(call) = obj.get("function_call").filter(|v| v.is_object()) {
        // Legacy function calls have no id; their `role: "function"` answer names the function.
        content.push(Block::ToolCall(ToolCall {
            id: str_field(call, "name").to_owned(),
            name: str_field(call, "name").to_owned(),
            arguments: str_field(call, "arguments").to_owned(),
            implicit: false,
        }));
    }
    Ok(Message {
        role,
        content,
        usage: obj.get("usage").and_then(usage_from_value),
    })
}

fn tool_call_from_chat(call: &Value, at: &str) -> Result<ToolCall, FormatError> {
    let function = call
        .get("function")
        .ok_or_else(|| FormatError::shape(at, "tool call has no `function`"))?;
    let arguments = match function.get("arguments") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    };
    Ok(ToolCall {
        id: str_field(call, "id").to_owned(),
        name: str_field(function, "name").to_owned(),
        arguments,
        implicit: call
            .get("implicit")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    })
}

fn str_field<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// Content of a Chat message: a string, null, or an array of parts.
fn push_content(
    content: Option<&Value>,
    out: &mut Vec<Block>,
    at: &str,
) -> Result<(), FormatError> {
    match content {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(text)) => {
            out.push(Block::text(text.as_str()));
            Ok(())
        }
        Some(Value::Array(parts)) => {
            for part in parts {
                out.push(part_from_chat(part));
            }
            Ok(())
        }
        Some(_) => Err(FormatError::shape(
            at,
            "`content` must be a string, null or an array of parts",
        )),
    }
}

fn part_from_chat(part: &Value) -> Block {
    match part.get("type").and_then(Value::as_str) {
        Some("text" | "input_text" | "output_text") => Block::text(str_field(part, "text")),
        Some("image_url" | "input_image" | "image") => Block::Image {
            source: part.clone(),
        },
        _ => match part.as_str() {
            Some(text) => Block::text(text),
            None => Block::Thinking {
                text: None,
                raw: part.clone(),
            },
        },
    }
}

/// Usage in any of the shapes recorded transcripts use (OpenAI `prompt_tokens` with
/// `prompt_tokens_details.cached_tokens`, or the canonical `cached_tokens`).
pub fn usage_from_value(value: &Value) -> Option<RecordedUsage> {
    let prompt = value.get("prompt_tokens")?.as_u64()?;
    let cached = value
        .get("prompt_tokens_details")
        .and_then(|d| d.get("cached_tokens"))
        .or_else(|| value.get("cached_tokens"))
        .and_then(Value::as_u64)
        .unwrap_or(0);
    Some(RecordedUsage {
        prompt_tokens: prompt,
        cached_tokens: cached,
        completion_tokens: value
            .get("completion_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
        cache_write_tokens: value
            .get("cache_write_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
        cache_write_1h_tokens: value
            .get("cache_write_1h_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    })
}

/// Renders a core message as a canonical Chat Completions message (see the module docs for the
/// extensions).
pub fn message_to_chat(message: &Message) -> Value {
    let mut obj = Map::new();
    if message.role == Role::Tool
        && let Some(result) = message.tool_results().next()
    {
        obj.insert("role".into(), json!("tool"));
        obj.insert("tool_call_id".into(), json!(result.call_id));
        if let Some(name) = &result.tool_name {
            obj.insert("name".into(), json!(name));
        }
        obj.insert("content".into(), content_to_chat(&result.content));
        if result.is_error {
            obj.insert("is_error".into(), json!(true));
        }
        return Value::Object(obj);
    }
    obj.insert("role".into(), json!(message.role.as_str()));
    let parts: Vec<Block> = message
        .content
        .iter()
        .filter(|b| matches!(b, Block::Text { .. } | Block::Image { .. }))
        .cloned()
        .collect();
    let thinking: Vec<&str> = message
        .content
        .iter()
        .filter_map(|b| match b {
            Block::Thinking { text: Some(t), .. } => Some(t.as_str()),
            _ => None,
        })
        .collect();
    if !thinking.is_empty() {
        obj.insert("reasoning_content".into(), json!(thinking.join("\n")));
    }
    let calls: Vec<Value> = message
        .tool_calls()
        .map(|c| {
            let mut call = json!({
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            });
            if c.implicit {
                call["implicit"] = json!(true);
            }
            call
        })
        .collect();
    obj.insert(
        "content".into(),
        if parts.is_empty() && !calls.is_empty() {
            Value::Null
        } else {
            content_to_chat(&parts)
        },
    );
    if !calls.is_empty() {
        obj.insert("tool_calls".into(), Value::Array(calls));
    }
    if let Some(u) = message.usage {
        let mut usage = json!({
            "prompt_tokens": u.prompt_tokens,
            "cached_tokens": u.cached_tokens,
            "completion_tokens": u.completion_tokens,
        });
        if u.cache_write_tokens > 0 {
            usage["cache_write_tokens"] = json!(u.cache_write_tokens);
        }
        if u.cache_write_1h_tokens > 0 {
            usage["cache_write_1h_tokens"] = json!(u.cache_write_1h_tokens);
        }
        obj.insert("usage".into(), usage);
    }
    Value::Object(obj)
}

/// A string when the content is one text part, else an array of parts.
fn content_to_chat(parts: &[Block]) -> Value {
    if let [Block::Text { text }] = parts {
        return json!(text);
    }
    if parts.is_empty() {
        return json!("");
    }
    Value::Array(
        parts
            .iter()
            .map(|p| match p {
                Block::Text { text } => json!({"type": "text", "text": text}),
                Block::Image { source } => source.clone(),
                Block::Thinking { raw, .. } => raw.clone(),
                Block::ToolCall(_) | Block::ToolResult(_) => Value::Null,
            })
            .collect(),
    )
}

/// OpenAI Chat Completions on the wire ([`WireApi`]).
pub(crate) struct ChatCompletions;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_parallel_tool_calls_and_tool_results() {
        let assistant = json!({
            "role": "assistant", "content": null,
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "read", "arguments": "{\"p\":1}"}},
                {"id": "b", "type": "function", "function": {"name": "grep", "arguments": "{}"}}
            ]
        });
        let m = message_from_chat(&assistant, "m").unwrap();
        assert_eq!(m.tool_calls().count(), 2);
        let tool = json!({"role": "tool", "tool_call_id": "b", "content": "x:1:y"});
        let t = message_from_chat(&tool, "t").unwrap();
        assert_eq!(t.role, Role::Tool);
        assert_eq!(t.tool_results().next().unwrap().call_id, "b");
    }

    #[test]
    fn canonical_round_trip() {
        for value in [
            json!({"role": "system", "content": "be brief"}),
            json!({"role": "user", "content": [{"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "data:x"}}]}),
            json!({"role": "assistant", "content": "ok", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}, "implicit": true}], "usage": {"prompt_tokens": 10, "cached_tokens": 4, "completion_tokens": 2}}),
            json!({"role": "tool", "tool_call_id": "c", "name": "bash", "content": "a\nb", "is_error": true}),
        ] {
            let m = message_from_chat(&value, "m").unwrap();
            assert_eq!(message_to_chat(&m), value);
        }
    }

    #[test]
    fn bad_messages_are_named() {
        let err = message_from_chat(&json!({"role": "wizard"}), "messages[3]").unwrap_err();
        assert_eq!(
            err.to_string(),
            "messages[3]: unknown role 'wizard' (expected system, developer, user, assistant or tool)"
        );
    }
}
