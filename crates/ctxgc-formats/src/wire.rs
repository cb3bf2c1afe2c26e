//! Rendering core messages as the providers accept them (strict: no ctxgc extensions).
//!
//! - Implicit tool calls (written in the assistant's text) are not rendered as calls, and their
//!   results go back as user text, exactly as the text-protocol agent sent them.
//! - Anthropic: system messages before the first turn become the top-level `system`; runs of
//!   user-role messages (user text, tool results) become one user turn with the `tool_result`
//!   blocks first, so the roles alternate as the API requires.

use std::collections::BTreeSet;

use ctxgc_core::{Block, Message, Role};
use serde_json::{Map, Value, json};

fn implicit_ids(messages: &[Message]) -> BTreeSet<&str> {
    messages
        .iter()
        .flat_map(Message::tool_calls)
        .filter(|c| c.implicit)
        .map(|c| c.id.as_str())
        .collect()
}

fn text_parts(blocks: &[Block]) -> String {
    blocks
        .iter()
        .filter_map(|b| match b {
            Block::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A tool message's results as items: `native` for each, but a result of an implicit call
/// (written in the assistant's text) goes back as user text, as the text-protocol agent sent it.
fn result_items<'m>(
    m: &'m Message,
    implicit: &'m BTreeSet<&str>,
    native: impl Fn(&ctxgc_core::ToolResult) -> Value + 'm,
) -> impl Iterator<Item = Value> + 'm {
    m.tool_results().map(move |r| {
        if implicit.contains(r.call_id.as_str()) {
            json!({"role": "user", "content": r.text()})
        } else {
            native(r)
        }
    })
}

/// OpenAI Chat Completions `messages`.
pub fn chat_messages(messages: &[Message]) -> Vec<Value> {
    let implicit = implicit_ids(messages);
    let mut out = Vec::with_capacity(messages.len());
    for m in messages {
        match m.role {
            Role::Tool => out.extend(result_items(
                m,
                &implicit,
                |r| json!({"role": "tool", "tool_call_id": r.call_id, "content": r.text()}),
            )),
            Role::Assistant => {
                let calls: Vec<Value> = m
                    .tool_calls()
                    .filter(|c| !c.implicit)
                    .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
                    .collect();
                let text = text_parts(&m.content);
                let mut obj = Map::new();
                obj.insert("role".into(), json!("assistant"));
                obj.insert(
                    "content".into(),
                    if text.is_empty() && !calls.is_empty() {
                        Value::Null
                    } else {
                        json!(text)
                    },
                );
                if !calls.is_empty() {
                    obj.insert("tool_calls".into(), Value::Array(calls));
                }
                out.push(Value::Object(obj));
            }
            Role::System | Role::User => {
                let images: Vec<Value> = m
                    .content
                    .iter()
                    .filter_map(|b| match b {
                        Block::Image { source } if source.get("image_url").is_some() => {
                            Some(source.clone())
                        }
                        _ => None,
                    })
                    .collect();
                let text = text_parts(&m.content);
                let content = if images.is_empty() {
                    json!(text)
                } else {
                    let mut parts = vec![json!({"type": "text", "text": text})];
                    parts.extend(images);
                    Value::Array(parts)
                };
                out.push(json!({"role": m.role.as_str(), "content": content}));
            }
        }
    }
    out
}

/// Anthropic Messages `system` (if any) and `messages`.
pub fn anthropic_messages(messages: &[Message]) -> (Option<Value>, Vec<Value>) {
    let implicit = implicit_ids(messages);
    let leading = messages
        .iter()
        .take_while(|m| m.role == Role::System)
        .count();
    let system = (leading > 0).then(|| {
        Value::Array(
            messages[..leading]
                .iter()
                .map(|m| json!({"type": "text", "text": m.text_content()}))
                .collect(),
        )
    });
    let mut turns: Vec<(Role, Vec<Value>, Vec<Value>)> = Vec::new(); // role, results, other blocks
    for m in &messages[leading..] {
        let role = if m.role == Role::Assistant {
            Role::Assistant
        } else {
            Role::User
        };
        let (_, results, blocks) = match turns.last_mut() {
            Some(turn) if turn.0 == role => turn,
            _ => {
                turns.push((role, Vec::new(), Vec::new()));
                let last = turns.len() - 1;
                &mut turns[last]
            }
        };
        for block in &m.content {
            match block {
                Block::Text { text } if !text.is_empty() => {
                    blocks.push(json!({"type": "text", "text": text}))
                }
                Block::Text { .. } => {}
                Block::Image { source } if source.get("source").is_some() => {
                    blocks.push(source.clone())
                }
                Block::Image { source } => {
                    if let Some(url) = source.pointer("/image_url/url").and_then(Value::as_str) {
                        blocks
                            .push(json!({"type": "image", "source": {"type": "url", "url": url}}));
                    }
                }
                Block::Thinking { raw, .. } => {
                    if matches!(
                        raw.get("type").and_then(Value::as_str),
                        Some("thinking" | "redacted_thinking")
                    ) {
                        blocks.push(raw.clone());
                    }
                }
                Block::ToolCall(call) if !call.implicit => {
                    let input: Value = serde_json::from_str(&call.arguments)
                        .ok()
                        .filter(Value::is_object)
                        .unwrap_or_else(|| json!({}));
                    blocks.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}));
                }
                Block::ToolCall(_) => {}
                Block::ToolResult(r) if implicit.contains(r.call_id.as_str()) => {
                    blocks.push(json!({"type": "text", "text": r.text()}));
                }
                Block::ToolResult(r) => {
                    let mut result = json!({"type": "tool_result", "tool_use_id": r.call_id, "content": r.text()});
                    if r.is_error {
                        result["is_error"] = json!(true);
                    }
                    results.push(result);
                }
            }
        }
    }
    let mut out: Vec<Value> = turns
        .into_iter()
        .filter_map(|(role, mut results, blocks)| {
            results.extend(blocks);
            (!results.is_empty()).then(|| json!({"role": role.as_str(), "content": results}))
        })
        .collect();
    if out.first().is_some_and(|m| m["role"] == "assistant") {
        out.insert(
            0,
            json!({"role": "user", "content": [{"type": "text", "text": "(conversation start)"}]}),
        );
    }
    (system, out)
}

/// OpenAI Responses `input` items: one item per message of a system or user role, per text or
/// call of an assistant turn, per tool result; reasoning and other opaque items as they came.
pub fn responses_items(messages: &[Message]) -> Vec<Value> {
    let implicit = implicit_ids(messages);
    let mut out = Vec::with_capacity(messages.len());
    for m in messages {
        match m.role {
            Role::Tool => out.extend(result_items(m, &implicit, |r| {
                json!({"type": "function_call_output", "call_id": r.call_id, "output": r.text()})
            })),
            Role::Assistant => {
                for block in &m.content {
                    match block {
                        Block::Text { text } if !text.is_empty() => out.push(json!({
                            "type": "message", "role": "assistant",
                            "content": [{"type": "output_text", "text": text}]
                        })),
                        Block::ToolCall(c) if !c.implicit => out.push(json!({
                            "type": "function_call", "call_id": c.id, "name": c.name,
                            "arguments": c.arguments
                        })),
                        Block::Thinking { raw, .. } if raw.get("type").is_some() => {
                            out.push(raw.clone())
                        }
                        _ => {}
                    }
                }
            }
            Role::System | Role::User => {
                let mut parts: Vec<Value> = Vec::new();
                for block in &m.content {
                    match block {
                        Block::Text { text } => {
                            parts.push(json!({"type": "input_text", "text": text}))
                        }
                        Block::Image { source } => parts.push(source.clone()),
                        _ => {}
                    }
                }
                let content = match parts.as_slice() {
                    [one] if one["type"] == "input_text" => one["text"].clone(),
                    _ => Value::Array(parts),
                };
                out.push(json!({"role": m.role.as_str(), "content": content}));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxgc_core::ToolCall;

    fn assistant_call(id: &str, implicit: bool) -> Message {
        Message {
            role: Role::Assistant,
            content: vec![
                Block::text("running"),
                Block::ToolCall(ToolCall {
                    id: id.into(),
                    name: "bash".into(),
                    arguments: r#"{"command":"ls"}"#.into(),
                    implicit,
                }),
            ],
            usage: None,
        }
    }

    #[test]
    fn implicit_calls_render_as_the_text_protocol_sent_them() {
        let messages = vec![
            Message::text(Role::System, "sys"),
            Message::text(Role::User, "task"),
            assistant_call("c1", true),
            Message::tool_result(
                "c1",
                Some("bash".into()),
                "<returncode>0</returncode>",
                false,
            ),
        ];
        let chat = chat_messages(&messages);
        assert_eq!(chat[2], json!({"role": "assistant", "content": "running"}));
        assert_eq!(
            chat[3],
            json!({"role": "user", "content": "<returncode>0</returncode>"})
        );
        let (system, anthropic) = anthropic_messages(&messages);
        assert_eq!(system, Some(json!([{"type": "text", "text": "sys"}])));
        assert_eq!(anthropic.len(), 3);
        assert_eq!(
            anthropic[2]["content"][0]["text"],
            "<returncode>0</returncode>"
        );
    }

    #[test]
    fn anthropic_turns_alternate_with_results_first() {
        let messages = vec![
            Message::text(Role::User, "task"),
            assistant_call("c1", false),
            Message::tool_result("c1", Some("bash".into()), "out", true),
            Message::text(Role::User, "summary of earlier work"),
            assistant_call("c2", false),
            Message::tool_result("c2", Some("bash".into()), "out2", false),
        ];
        let (_, turns) = anthropic_messages(&messages);
        let roles: Vec<&str> = turns.iter().map(|t| t["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["user", "assistant", "user", "assistant", "user"]);
        assert_eq!(turns[2]["content"][0]["type"], "tool_result");
        assert_eq!(turns[2]["content"][0]["is_error"], true);
        assert_eq!(turns[2]["content"][1]["text"], "summary of earlier work");
        assert_eq!(turns[1]["content"][1]["input"], json!({"command": "ls"}));
    }
}
