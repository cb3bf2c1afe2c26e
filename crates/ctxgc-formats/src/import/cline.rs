//! Cline's and Roo Code's task histories: per task, `api_conversation_history.json` (the
//! Anthropic Messages the extension sent, in order, whatever the provider) and
//! `ui_messages.json` (what the panel showed; each request is an `api_req_started` entry whose
//! `text` is a JSON object with `tokensIn`, `tokensOut`, `cacheWrites`, `cacheReads` and
//! `cost`, and whose `ts` is when it started).
//!
//! The usage is paired with the replies by order: the k-th request that reported tokens
//! produced the k-th assistant message. When the counts differ (a request that failed and was
//! retried, a task cut short), no usage is paired rather than a wrong one. `tokensIn` is read
//! as Anthropic's `input_tokens`, the uncached part; cache reads and writes come on top.
//! Neither file holds the system prompt or the model's name.

use ctxgc_core::{RecordedUsage, Recording, Role, Transcript};
use serde_json::{Value, json};

use crate::FormatError;

/// Whether a JSON array is a list of Anthropic Messages turns (blocks of the Messages API
/// that the Chat Completions API does not have), or a Cline task's (its `<task>` framing).
pub(crate) fn is_anthropic_history(items: &[Value]) -> bool {
    let roles_ok = items.iter().all(|m| {
        matches!(m["role"].as_str(), Some("user" | "assistant"))
            && m.get("tool_calls").is_none()
            && m.get("tool_call_id").is_none()
    });
    let anthropic_block = |b: &Value| match b["type"].as_str() {
        Some("tool_use" | "tool_result" | "thinking" | "redacted_thinking" | "document") => true,
        Some("image") => b.get("source").is_some(),
        _ => false,
    };
    // Older Cline versions call tools in the text: their turns hold only text blocks, which
    // Chat content parts share, so the task framing tells them apart.
    let cline_task = items.first().is_some_and(|m| {
        m["content"].as_array().is_some_and(|blocks| {
            blocks
                .iter()
                .any(|b| b["text"].as_str().is_some_and(|t| t.contains("<task>")))
        })
    });
    roles_ok
        && (cline_task
            || items.iter().any(|m| {
                m["content"]
                    .as_array()
                    .is_some_and(|blocks| blocks.iter().any(anthropic_block))
            }))
}

/// Whether a JSON array is a Cline or Roo Code `ui_messages.json`.
pub(crate) fn is_ui_log(items: &[Value]) -> bool {
    !items.is_empty()
        && items.iter().all(|m| {
            m.get("ts").is_some_and(Value::is_number)
                && matches!(m["type"].as_str(), Some("say" | "ask"))
        })
}

/// Imports a task's conversation, with the usage of `ui` (its `ui_messages.json`) when given.
pub(crate) fn import(
    items: &[Value],
    ui: Option<&[Value]>,
    id: &str,
) -> Result<Transcript, FormatError> {
    let mut t = crate::anthropic::transcript_from_body(&json!({"messages": items}))?;
    t.id = id.to_owned();
    if !t.messages.iter().any(|m| m.role == Role::Assistant) {
        return Err(FormatError::shape(
            "file",
            "a Cline task with no model reply in it",
        ));
    }
    let mut recording = Recording {
        client: "cline".into(),
        sent_ms: vec![None; t.messages.len()],
        ..Recording::default()
    };
    let requests: Vec<(Option<i64>, RecordedUsage)> = ui
        .unwrap_or_default()
        .iter()
        .filter(|m| m["say"] == "api_req_started")
        .filter_map(|m| {
            let info: Value = serde_json::from_str(m["text"].as_str()?).ok()?;
            Some((m["ts"].as_i64(), usage(&info)?))
        })
        .collect();
    let replies: Vec<usize> = (0..t.messages.len())
        .filter(|&i| t.messages[i].role == Role::Assistant)
        .collect();
    if requests.len() == replies.len() {
        for (&at, (ts, usage)) in replies.iter().zip(requests) {
            t.messages[at].usage = Some(usage);
            recording.sent_ms[at] = ts;
        }
    }
    t.recording = Some(recording);
    Ok(t)
}

fn usage(info: &Value) -> Option<RecordedUsage> {
    let n = |key: &str| info.get(key).and_then(Value::as_u64).unwrap_or(0);
    let input = info.get("tokensIn")?.as_u64()?;
    let (read, written) = (n("cacheReads"), n("cacheWrites"));
    Some(RecordedUsage {
        prompt_tokens: input + read + written,
        cached_tokens: read,
        completion_tokens: n("tokensOut"),
        cache_write_tokens: written,
        cache_write_1h_tokens: 0,
    })
}
