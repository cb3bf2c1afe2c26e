//! Codex CLI rollouts (`~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`).
//!
//! One `{"timestamp", "type", "payload"}` object per line. `session_meta` opens the file (with
//! the base instructions, the system prompt, in recent versions); `response_item` lines are the
//! Responses API items Codex sent and received, in order; an `event_msg` of type `token_count`
//! follows each model call with its usage (`info.last_token_usage`); a `compacted` line is the
//! client's own compaction (its `replacement_history` is what later requests start from, or,
//! in older versions, its summary `message`). `turn_context` and the other events repeat what
//! the items already say and are skipped, as are `ghost_snapshot` items, which Codex never sends.

use ctxgc_core::{ClientCompaction, Message, RecordedUsage, Recording, Role, Transcript};
use serde_json::Value;

use super::time::rfc3339_ms;
use crate::FormatError;
use crate::responses::push_item;

/// Whether a parsed JSONL line looks like a Codex rollout line.
pub(crate) fn is_rollout_line(line: &Value) -> bool {
    line.get("payload").is_some()
        && matches!(
            line.get("type").and_then(Value::as_str),
            Some("session_meta" | "response_item" | "event_msg" | "turn_context" | "compacted")
        )
}

/// Imports one rollout.
pub(crate) fn import(lines: &[Value], id: &str) -> Result<Transcript, FormatError> {
    let mut t = Transcript {
        id: id.to_owned(),
        ..Transcript::default()
    };
    let mut recording = Recording {
        client: "codex".into(),
        ..Recording::default()
    };
    // A model call's items end at its token_count; the next assistant item starts a new turn.
    let mut call_open = false;
    let mut last_at: Option<i64> = None;
    // Each turn's context names its model; a session can switch models between turns.
    let mut models = super::ModelTally::default();
    // Older versions (0.34-0.57) write a call's `token_count` before the items of the call that
    // ends a turn (its reasoning and answer): held until that call's first item. The usage last
    // attached tells the repeat every version writes after `turn_context` from a new count.
    let mut pending_usage: Option<RecordedUsage> = None;
    let mut last_usage: Option<RecordedUsage> = None;
    for (n, line) in lines.iter().enumerate() {
        let at = format!("line {}", n + 1);
        let payload = &line["payload"];
        let line_at = line
            .get("timestamp")
            .and_then(Value::as_str)
            .and_then(rfc3339_ms);
        match line.get("type").and_then(Value::as_str) {
            Some("session_meta") => {
                if let Some(version) = payload.get("cli_version").and_then(Value::as_str) {
                    recording.client = format!("codex {version}");
                }
                let instructions = payload
                    .get("base_instructions")
                    .and_then(|b| b.get("text").or(Some(b)))
                    .and_then(Value::as_str)
                    .or_else(|| payload.get("instructions").and_then(Value::as_str));
                if let Some(text) = instructions.filter(|s| !s.is_empty())
                    && t.messages.is_empty()
                {
                    t.messages.push(Message::text(Role::System, text));
                    recording.sent_ms.push(line_at);
                }
            }
            Some("response_item") => {
                if payload.get("type").and_then(Value::as_str) == Some("ghost_snapshot") {
                    continue;
                }
                let assistant_side = is_assistant_side(payload);
                let in_assistant_turn =
                    t.messages.last().is_some_and(|m| m.role == Role::Assistant);
                if assistant_side && in_assistant_turn && !call_open {
                    // A new model call right after the previous one's items.
                    t.messages.push(Message {
                        role: Role::Assistant,
                        content: Vec::new(),
                        usage: None,
                    });
                }
                push_item(&mut t.messages, payload, &format!("{at}: payload"))?;
                if assistant_side
                    && let Some(last) = t.messages.last_mut()
                    && last.role == Role::Assistant
                    && last.usage.is_none()
                    && let Some(usage) = pending_usage.take()
                {
                    last.usage = Some(usage);
                    last_usage = Some(usage);
                }
                if !assistant_side {
                    // A count held for a call that never came (an aborted turn).
                    pending_usage = None;
                }
                // A request was sent when its last input was written.
                while recording.sent_ms.len() < t.messages.len() {
                    let index = recording.sent_ms.len();
                    let is_request = t.messages[index].role == Role::Assistant;
                    recording
                        .sent_ms
                        .push(if is_request { last_at } else { line_at });
                }
                call_open = assistant_side;
                if !assistant_side {
                    last_at = line_at.or(last_at);
                }
            }
            Some("compacted") => {
                let first = t.messages.len();
                match payload.get("replacement_history").and_then(Value::as_array) {
                    Some(items) => {
                        for (i, item) in items.iter().enumerate() {
                            push_item(
                                &mut t.messages,
                                item,
                                &format!("{at}: replacement_history[{i}]"),
                            )?;
                        }
                    }
                    None => {
                        let summary = payload
                            .get("message")
                            .and_then(Value::as_str)
                            .unwrap_or_default();
                        t.messages.push(Message::text(Role::User, summary));
                    }
                }
                recording
                    .sent_ms
                    .resize(t.messages.len(), line_at.or(last_at));
                if t.messages.len() > first {
                    recording.compactions.push(ClientCompaction {
                        at: first,
                        len: t.messages.len() - first,
                    });
                }
                // The count just before was the compaction's own call (its summary request),
                // which no message of the transcript stands for.
                pending_usage = None;
                call_open = false;
                last_at = line_at.or(last_at);
            }
            Some("turn_context") => models.note(payload.get("model")),
            Some("event_msg")
                if payload.get("type").and_then(Value::as_str) == Some("token_count") =>
            {
                // A count of nothing (0.169 writes one as a thread resumes) stands for no call.
                if let Some(usage) = payload
                    .get("info")
                    .and_then(|i| i.get("last_token_usage"))
                    .and_then(usage)
                    .filter(|u| u.prompt_tokens > 0)
                {
                    let open = t
                        .messages
                        .iter_mut()
                        .rev()
                        .take_while(|m| m.role != Role::User)
                        .find(|m| m.role == Role::Assistant)
                        .filter(|m| m.usage.is_none());
                    match open {
                        Some(last) => {
                            last.usage = Some(usage);
                            last_usage = Some(usage);
                        }
                        None if last_usage != Some(usage) => pending_usage = Some(usage),
                        None => {}
                    }
                }
                call_open = false;
                last_at = line_at.or(last_at);
            }
            _ => {}
        }
    }
    if !t.messages.iter().any(|m| m.role == Role::Assistant) {
        return Err(FormatError::shape(
            "file",
            "a Codex rollout with no model call in it",
        ));
    }
    t.recording = Some(recording);
    t.model = models.most_used();
    crate::resolve_tool_names(&mut t);
    Ok(t)
}

/// Items the model produced (they belong to an assistant turn).
fn is_assistant_side(item: &Value) -> bool {
    match item
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message")
    {
        "message" => item.get("role").and_then(Value::as_str) == Some("assistant"),
        "function_call_output" | "custom_tool_call_output" | "local_shell_call_output" => false,
        _ => true,
    }
}

/// OpenAI usage: `input_tokens` include the cached ones (and the cache writes, which recent
/// versions report for providers that bill them).
fn usage(value: &Value) -> Option<RecordedUsage> {
    let n = |key: &str| value.get(key).and_then(Value::as_u64).unwrap_or(0);
    Some(RecordedUsage {
        prompt_tokens: value.get("input_tokens")?.as_u64()?,
        cached_tokens: n("cached_input_tokens"),
        completion_tokens: n("output_tokens"),
        cache_write_tokens: n("cache_write_input_tokens"),
        ..RecordedUsage::default()
    })
}
