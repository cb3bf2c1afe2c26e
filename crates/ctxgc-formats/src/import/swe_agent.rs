//! SWE-agent trajectories (`*.traj`).
//!
//! The `history` array is what the model saw: role messages, with either native `tool_calls`
//! answered by `role: "tool"` messages (`tool_call_ids`), or an `action` written in the
//! assistant's text answered by the next user message (the observation). Text actions become
//! implicit tool calls named after SWE-agent's command (`open`, `edit`, `search_dir`, ...) or
//! `bash` for shell commands.

use ctxgc_core::{Block, Message, Role, ToolCall, Transcript};
use serde_json::{Value, json};

use crate::FormatError;
use crate::chat::message_from_chat;

/// SWE-agent's own commands; any other action is a shell command.
const COMMANDS: &[&str] = &[
    "open",
    "goto",
    "scroll_up",
    "scroll_down",
    "create",
    "edit",
    "insert",
    "search_dir",
    "search_file",
    "find_file",
    "submit",
    "str_replace_editor",
    "filemap",
    "exit_forfeit",
    "decompile",
    "disassemble",
    "debug_start",
    "debug_add_breakpoint",
    "debug_continue",
    "debug_step",
    "debug_exec",
    "debug_stop",
    "connect_start",
    "connect_sendline",
    "connect_exec",
    "connect_stop",
];

/// The tool an action invokes.
pub fn action_tool(action: &str) -> &'static str {
    let first = action.split_whitespace().next().unwrap_or_default();
    COMMANDS
        .iter()
        .find(|c| **c == first)
        .copied()
        .unwrap_or("bash")
}

/// Imports a SWE-agent trajectory document.
pub fn import(doc: &Value, id: &str) -> Result<Transcript, FormatError> {
    let history = doc
        .get("history")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            FormatError::shape("history", "a SWE-agent trajectory needs a `history` array")
        })?;
    let mut t = Transcript {
        id: id.to_owned(),
        ..Transcript::default()
    };
    let mut pending: Option<(String, &'static str)> = None;
    for (i, m) in history.iter().enumerate() {
        let at = format!("history[{i}]");
        let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
        let message = match role {
            "tool" => {
                // `tool_call_ids` (a list) instead of Chat's `tool_call_id`.
                let mut m = m.clone();
                if let Some(first) = m.get("tool_call_ids").and_then(|ids| ids.get(0)).cloned() {
                    m["tool_call_id"] = first;
                }
                pending = None;
                message_from_chat(&m, &at)?
            }
            "assistant" => {
                let mut message = message_from_chat(&strip_extras(m), &at)?;
                pending = None;
                let action = m
                    .get("action")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .trim();
                if message.tool_calls().next().is_none() && !action.is_empty() {
                    let call_id = format!("call-{}", t.messages.len());
                    let tool = action_tool(action);
                    message.content.push(Block::ToolCall(ToolCall {
                        id: call_id.clone(),
                        name: tool.to_owned(),
                        arguments: json!({ "command": action }).to_string(),
                        implicit: true,
                    }));
                    pending = Some((call_id, tool));
                }
                message
            }
            "user" => {
                let text = content_text(m, &at)?;
                match pending.take() {
                    Some((call_id, tool)) => {
                        Message::tool_result(call_id, Some(tool.into()), text, false)
                    }
                    None => Message::text(Role::User, text),
                }
            }
            "system" => Message::text(Role::System, content_text(m, &at)?),
            other => return Err(FormatError::shape(&at, format!("unknown role '{other}'"))),
        };
        t.messages.push(message);
    }
    crate::resolve_tool_names(&mut t);
    Ok(t)
}

/// The message without SWE-agent's bookkeeping fields (`thought`, `action`, `agent`, ...).
fn strip_extras(m: &Value) -> Value {
    let mut out = serde_json::Map::new();
    for key in ["role", "content", "tool_calls"] {
        if let Some(v) = m.get(key) {
            out.insert(key.into(), v.clone());
        }
    }
    Value::Object(out)
}

fn content_text(m: &Value, at: &str) -> Result<String, FormatError> {
    match m.get("content") {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => Ok(parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n")),
        _ => Err(FormatError::shape(
            at,
            "message `content` must be a string or a list of text parts",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_actions_and_native_calls() {
        let doc = json!({"history": [
            {"role": "system", "content": "sys", "agent": "primary"},
            {"role": "user", "content": "issue", "agent": "primary"},
            {"role": "assistant", "content": "look\n```\nopen \"setup.py\"\n```", "thought": "look",
             "action": "open \"setup.py\"\n", "agent": "primary"},
            {"role": "user", "content": "[File: setup.py]\n1:import x", "agent": "primary"},
            {"role": "assistant", "content": "list", "action": "ls -F",
             "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls -F\"}"}}]},
            {"role": "tool", "content": "a\nb", "tool_call_ids": ["call_1"]}
        ]});
        let t = import(&doc, "s").unwrap();
        let open = t.messages[2].tool_calls().next().unwrap();
        assert_eq!(open.name, "open");
        assert!(open.implicit);
        assert_eq!(t.messages[3].role, Role::Tool);
        assert_eq!(
            t.messages[3]
                .tool_results()
                .next()
                .unwrap()
                .tool_name
                .as_deref(),
            Some("open")
        );
        let native = t.messages[4].tool_calls().next().unwrap();
        assert!(!native.implicit);
        assert_eq!(
            t.messages[5].tool_results().next().unwrap().call_id,
            "call_1"
        );
        assert_eq!(action_tool("python3 x.py"), "bash");
    }
}
