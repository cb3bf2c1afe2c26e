//! mini-swe-agent trajectories (`*.traj.json`).
//!
//! - `mini-swe-agent-1`: a text protocol. The assistant writes exactly one fenced ```` ```bash ````
//!   block; the harness runs it and answers in the next user message
//!   (`<returncode>N</returncode><output>...</output>`, or a timeout notice). The command becomes
//!   an *implicit* tool call (it costs no tokens beyond the text that holds it) and the answer a
//!   tool result, so trimming and pruning can act on it while token counts stay faithful.
//! - `mini-swe-agent-1.1`: native `tool_calls` and `role: "tool"` results. A final
//!   `role: "exit"` entry holds the submission; it was never sent to the model and is skipped.
//!
//! Assistant messages carry the provider's usage in `extra.response.usage`.

use ctxgc_core::{Block, Message, Role, ToolCall, Transcript};
use serde_json::{Value, json};

use crate::FormatError;
use crate::chat::{message_from_chat, usage_from_value};

/// Which protocol a trajectory uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// Commands in fenced blocks, results in user messages.
    Text,
    /// Native tool calls.
    Native,
}

/// Imports a mini-swe-agent trajectory document.
pub fn import(doc: &Value, id: &str) -> Result<(Transcript, Protocol), FormatError> {
    let messages = doc
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            FormatError::shape(
                "messages",
                "a mini-swe-agent trajectory needs a `messages` array",
            )
        })?;
    let protocol = match doc.get("trajectory_format").and_then(Value::as_str) {
        Some("mini-swe-agent-1") => Protocol::Text,
        Some("mini-swe-agent-1.1") => Protocol::Native,
        _ if messages.iter().any(|m| m.get("tool_calls").is_some()) => Protocol::Native,
        _ => Protocol::Text,
    };
    let mut t = Transcript {
        id: id.to_owned(),
        ..Transcript::default()
    };
    let mut pending: Option<(String, String)> = None;
    let mut models = super::ModelTally::default();
    for (i, m) in messages.iter().enumerate() {
        let at = format!("messages[{i}]");
        let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
        if role == "exit" {
            continue;
        }
        let mut message = match protocol {
            Protocol::Native => {
                let mut message = message_from_chat(m, &at)?;
                if let Some(code) = m.pointer("/extra/returncode").and_then(Value::as_i64) {
                    for block in &mut message.content {
                        if let Block::ToolResult(r) = block {
                            r.is_error = code != 0;
                        }
                    }
                }
                message
            }
            Protocol::Text => text_protocol_message(m, &at, t.messages.len(), &mut pending)?,
        };
        if message.role == Role::Assistant {
            message.usage = m
                .pointer("/extra/response/usage")
                .and_then(usage_from_value);
            models.note(m.pointer("/extra/response/model"));
        }
        t.messages.push(message);
    }
    t.model = models.most_used();
    crate::resolve_tool_names(&mut t);
    Ok((t, protocol))
}

fn text_protocol_message(
    m: &Value,
    at: &str,
    index: usize,
    pending: &mut Option<(String, String)>,
) -> Result<Message, FormatError> {
    let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
    let text = m
        .get("content")
        .and_then(Value::as_str)
        .ok_or_else(|| FormatError::shape(at, "text-protocol messages need string `content`"))?;
    match role {
        "assistant" => {
            let mut content = vec![Block::text(text)];
            *pending = None;
            if let Some(command) = single_bash_block(text) {
                let id = format!("call-{index}");
                content.push(Block::ToolCall(ToolCall {
                    id: id.clone(),
                    name: "bash".into(),
                    arguments: json!({ "command": command }).to_string(),
                    implicit: true,
                }));
                *pending = Some((id, "bash".into()));
            }
            Ok(Message {
                role: Role::Assistant,
                content,
                usage: None,
            })
        }
        "user" => Ok(match pending.take() {
            Some((call_id, tool)) => {
                let failed = returncode(text).is_some_and(|code| code != 0);
                Message::tool_result(call_id, Some(tool), text, failed)
            }
            None => Message::text(Role::User, text),
        }),
        "system" => Ok(Message::text(Role::System, text)),
        other => Err(FormatError::shape(at, format!("unknown role '{other}'"))),
    }
}

/// The command of the one ```` ```bash ```` block in `text` (mini-swe-agent rejects replies
/// with zero or several blocks, so those carry no call).
pub fn single_bash_block(text: &str) -> Option<String> {
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("```bash") {
        let after = &rest[start + "```bash".len()..];
        let body_start = after.find('\n')? + 1;
        if !after[..body_start].trim().is_empty() {
            rest = &after[body_start..];
            continue;
        }
        let body = &after[body_start..];
        let end = body.find("\n```")?;
        blocks.push(body[..end].to_owned());
        rest = &body[end + 4..];
    }
    (blocks.len() == 1).then(|| blocks.remove(0))
}

/// `<returncode>N</returncode>` at the start of a harness answer.
pub fn returncode(text: &str) -> Option<i64> {
    let rest = text.trim_start().strip_prefix("<returncode>")?;
    rest[..rest.find("</returncode>")?].trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bash_blocks() {
        assert_eq!(
            single_bash_block("THOUGHT: look\n\n```bash\nls -la\n```").as_deref(),
            Some("ls -la")
        );
        assert_eq!(
            single_bash_block("```bash\ncat <<'EOF' > a.py\nx = 1\nEOF\n```\n").as_deref(),
            Some("cat <<'EOF' > a.py\nx = 1\nEOF")
        );
        assert_eq!(single_bash_block("no block"), None);
        assert_eq!(single_bash_block("```bash\na\n```\n```bash\nb\n```"), None);
    }

    #[test]
    fn returncodes() {
        assert_eq!(
            returncode("<returncode>1</returncode>\n<output>x</output>"),
            Some(1)
        );
        assert_eq!(returncode("diff --git a b"), None);
    }

    #[test]
    fn text_protocol_turns_commands_into_implicit_calls() {
        let doc = json!({
            "trajectory_format": "mini-swe-agent-1",
            "messages": [
                {"role": "system", "content": "sys"},
                {"role": "user", "content": "task"},
                {"role": "assistant", "content": "THOUGHT\n```bash\nfalse\n```",
                 "extra": {"response": {"usage": {"prompt_tokens": 100, "completion_tokens": 5,
                   "prompt_tokens_details": {"cached_tokens": 64}}}}},
                {"role": "user", "content": "<returncode>1</returncode>\n<output>\n</output>"},
                {"role": "assistant", "content": "no block here"},
                {"role": "user", "content": "Please always provide EXACTLY ONE action"}
            ]
        });
        let (t, protocol) = import(&doc, "s").unwrap();
        assert_eq!(protocol, Protocol::Text);
        let roles: Vec<Role> = t.messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [
                Role::System,
                Role::User,
                Role::Assistant,
                Role::Tool,
                Role::Assistant,
                Role::User
            ]
        );
        let call = t.messages[2].tool_calls().next().unwrap();
        assert!(call.implicit);
        assert_eq!(call.string_argument("command").as_deref(), Some("false"));
        let result = t.messages[3].tool_results().next().unwrap();
        assert!(result.is_error);
        assert_eq!(result.call_id, call.id);
        assert_eq!(t.messages[2].usage.unwrap().cached_tokens, 64);
    }
}
