//! Anthropic Messages request bodies -> the core model.
//!
//! Anthropic puts tool results as `tool_result` blocks at the start of a user turn; the core
//! model keeps each result in its own [`Role::Tool`] message, so a user turn is split into its
//! results followed by the rest of its blocks. A `role: "system"` entry inside `messages` (sent
//! by Claude Code) becomes a system message where it stands.

use ctxgc_core::{Block, Message, Role, ToolCall, ToolResult, Transcript};
use serde_json::Value;

use crate::FormatError;

/// Builds the transcript view of a Messages request body.
pub fn transcript_from_body(body: &Value) -> Result<Transcript, FormatError> {
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            FormatError::shape("messages", "a Messages request needs a `messages` array")
        })?;
    let mut t = transcript_of_messages(body.get("system"), messages)?;
    if let Some(tools) = body.get("tools").and_then(Value::as_array) {
        t.tools = tools.clone();
    }
    Ok(t)
}

/// The transcript of `messages` under `system`, read where they lie (the proxy's view of a
/// request's messages: no copy of the history first).
pub(crate) fn transcript_of_messages(
    system: Option<&Value>,
    messages: &[Value],
) -> Result<Transcript, FormatError> {
    let mut t = Transcript::default();
    match system {
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
