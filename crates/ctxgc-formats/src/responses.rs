//! OpenAI Responses request bodies -> the core model.
//!
//! `input` is a list of items: messages (`user`, `assistant`, `system`, `developer`),
//! `function_call` / `function_call_output`, `custom_tool_call` / `custom_tool_call_output`,
//! `local_shell_call` / `local_shell_call_output` and `reasoning`. Consecutive assistant-side
//! items (reasoning, text, calls) form one assistant turn, so parallel calls stay together.

use ctxgc_core::{Block, Message, Role, ToolCall, ToolResult, Transcript};
use serde_json::Value;

use crate::FormatError;
use crate::chat::message_from_chat;

/// Builds the transcript view of a Responses request body.
pub fn transcript_from_body(body: &Value) -> Result<Transcript, FormatError> {
    let instructions = body.get("instructions");
    let mut t = match body.get("input") {
        Some(Value::String(s)) => {
            let mut t = Transcript::default();
            push_instructions(&mut t, instructions);
            t.messages.push(Message::text(Role::User, s.as_str()));
            t
        }
        Some(Value::Array(items)) => transcript_of_items(instructions, items)?,
        _ => {
            return Err(FormatError::shape(
                "input",
                "a Responses request needs `input` (a string or an array of items)",
            ));
        }
    };
    if let Some(tools) = body.get("tools").and_then(Value::as_array) {
        t.tools = tools.clone();
    }
    Ok(t)
}

/// The transcript of `input` items under `instructions`, read where they lie (the proxy's
/// view of a request's items: no copy of the history first).
pub(crate) fn transcript_of_items(
    instructions: Option<&Value>,
    items: &[Value],
) -> Result<Transcript, FormatError> {
    let mut t = Transcript::default();
    push_instructions(&mut t, instructions);
    for (i, item) in items.iter().enumerate() {
        push_item(&mut t.messages, item, &format!("input[{i}]"))?;
    }
    crate::resolve_tool_names(&mut t);
    Ok(t)
}

fn push_instructions(t: &mut Transcript, instructions: Option<&Value>) {
    if let Some(instructions) = instructions.and_then(Value::as_str) {
        t.messages.push(Message::text(Role::System, instructions));
    }
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
