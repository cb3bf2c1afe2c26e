//! OpenAI Chat Completions messages <-> the core model.
//!
//! Also the canonical transcript format of `ctxgc import`: one Chat Completions message per
//! JSONL line, with three documented extensions that carry what the core model knows beyond the
//! wire shape: `"implicit": true` on a tool call written in the assistant's text (text-protocol
//! agents), `"is_error": true` on a failed tool result, and `"usage"` on assistant messages of
//! recorded transcripts.

use ctxgc_core::{Block, Message, RecordedUsage, Role, ToolCall, ToolResult};
use serde_json::{Map, Value, json};

use crate::FormatError;

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
