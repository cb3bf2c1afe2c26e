//! Gemini CLI chats (`~/.gemini/tmp/<project>/chats/session-*.json` and `session-*.jsonl`).
//!
//! A chat is a list of message records: `{"id", "timestamp", "type": "user" | "gemini" | "info"
//! | "error" | ..., "content", ...}`. A `gemini` record is one model reply: its `content` (text
//! or parts), its `thoughts`, its `toolCalls` (each with its `args` and, once run, its `result`:
//! the `functionResponse` parts sent back), the `model` and the provider's `tokens` (`input`,
//! cached ones included, `cached`, `output`, `thoughts`, `tool`, `total`). Newer versions also
//! record the responses as a `user` record of `functionResponse` parts.
//!
//! The `.json` form is one object (`sessionId`, `projectHash`, `messages`). The `.jsonl` form
//! is a log replayed in order, as Gemini CLI itself loads it: the first line is the session's
//! metadata; a message record adds a message, or replaces the one with its `id` in place; a
//! `{"$set": {...}}` line updates metadata, and replaces every message when it sets
//! `messages`; a `{"$rewindTo": id}` line removes that message and every later one (all of them
//! when the id is unknown).
//!
//! The history is turned into the `contents` Gemini CLI sends (a model turn of text, thought
//! and `functionCall` parts, then a user turn of the responses) and read as a `generateContent`
//! body, so calls and responses pair as they do through the proxy. Gemini CLI does not log its
//! system prompt or tool definitions: the transcript starts at the first user message.

use std::collections::HashSet;

use ctxgc_core::{RecordedUsage, Recording, Role, Transcript};
use serde_json::{Value, json};

use super::time::rfc3339_ms;
use crate::FormatError;

/// Whether a parsed first line (or a whole `.json` document) is a Gemini CLI chat's metadata.
pub(crate) fn is_chat_metadata(value: &Value) -> bool {
    value.get("sessionId").is_some_and(Value::is_string)
        && value.get("projectHash").is_some_and(Value::is_string)
}

/// Whether a JSON array is a Gemini CLI checkpoint (`/chat save`, `checkpoint-<tag>.json`): the
/// API's `Content[]`, each item a `role` (`user` or `model`) with `parts`, a model turn among
/// them.
pub(crate) fn is_checkpoint(items: &[Value]) -> bool {
    let content = |v: &Value| {
        v.get("parts").is_some_and(Value::is_array)
            && matches!(
                v.get("role").and_then(Value::as_str),
                Some("user" | "model")
            )
    };
    items.iter().all(content)
        && items
            .iter()
            .any(|v| v.get("role").and_then(Value::as_str) == Some("model"))
}

/// Imports a `.json` chat (`{"sessionId", "projectHash", "messages": [...]}`).
pub(crate) fn import_document(doc: &Value, id: &str) -> Result<Transcript, FormatError> {
    let messages = doc
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| FormatError::shape("messages", "a Gemini CLI chat needs `messages`"))?;
    from_records(messages.iter().filter(|m| is_message(m)).collect(), id)
}

/// Imports a `.jsonl` chat, replaying its records in order.
pub(crate) fn import_lines(lines: &[Value], id: &str) -> Result<Transcript, FormatError> {
    let mut records: Vec<&Value> = Vec::new();
    for line in lines {
        if let Some(to) = line.get("$rewindTo").and_then(Value::as_str) {
            let at = records
                .iter()
                .position(|r| r["id"].as_str() == Some(to))
                .unwrap_or(0);
            records.truncate(at);
        } else if let Some(set) = line.get("$set") {
            if let Some(messages) = set.get("messages").and_then(Value::as_array) {
                records = messages.iter().filter(|m| is_message(m)).collect();
            }
        } else if is_message(line) {
            match records.iter().position(|r| r["id"] == line["id"]) {
                Some(k) => records[k] = line,
                None => records.push(line),
            }
        }
    }
    from_records(records, id)
}

fn is_message(value: &Value) -> bool {
    value.get("id").is_some_and(Value::is_string)
}

/// A record's `content` as parts (a string is one text part).
fn parts_of(content: &Value) -> Vec<Value> {
    match content {
        Value::String(s) if !s.is_empty() => vec![json!({"text": s})],
        Value::Array(parts) => parts
            .iter()
            .map(|p| match p {
                Value::String(s) => json!({"text": s}),
                other => other.clone(),
            })
            .collect(),
        Value::Object(_) => vec![content.clone()],
        _ => Vec::new(),
    }
}

fn from_records(records: Vec<&Value>, id: &str) -> Result<Transcript, FormatError> {
    // The contents Gemini CLI sends, and which record each turn came from.
    let mut contents: Vec<Value> = Vec::new();
    let mut turn_record: Vec<usize> = Vec::new();
    // Calls answered by a `gemini` record's own results: a later `user` record of the same
    // responses (newer versions write both) is not sent twice.
    let mut answered: HashSet<String> = HashSet::new();
    let mut models = super::ModelTally::default();
    for (r, record) in records.iter().enumerate() {
        match record.get("type").and_then(Value::as_str) {
            Some("user") => {
                let parts: Vec<Value> = parts_of(&record["content"])
                    .into_iter()
                    .filter(|p| {
                        p.get("functionResponse")
                            .and_then(|f| f.get("id"))
                            .and_then(Value::as_str)
                            .is_none_or(|call| !answered.contains(call))
                    })
                    .collect();
                if !parts.is_empty() {
                    contents.push(json!({"role": "user", "parts": parts}));
                    turn_record.push(r);
                }
            }
            Some("gemini") => {
                models.note(record.get("model"));
                let mut parts = Vec::new();
                for thought in record["thoughts"].as_array().into_iter().flatten() {
                    let description = thought["description"].as_str().unwrap_or_default();
                    let text = match thought["subject"].as_str().filter(|s| !s.is_empty()) {
                        Some(subject) => format!("**{subject}** {description}"),
                        None => description.to_owned(),
                    };
                    if !text.is_empty() {
                        parts.push(json!({"text": text, "thought": true}));
                    }
                }
                parts.extend(parts_of(&record["content"]));
                let calls = record["toolCalls"]
                    .as_array()
                    .map_or(&[][..], Vec::as_slice);
                for call in calls {
                    parts.push(json!({"functionCall": {
                        "id": call["id"], "name": call["name"], "args": call["args"]
                    }}));
                }
                if parts.is_empty() {
                    continue;
                }
                contents.push(json!({"role": "model", "parts": parts}));
                turn_record.push(r);
                let results: Vec<Value> = calls
                    .iter()
                    .flat_map(|c| parts_of(c.get("result").unwrap_or(&Value::Null)))
                    .filter(|p| p.get("functionResponse").is_some())
                    .collect();
                if !results.is_empty() {
                    for call in calls {
                        if let Some(call_id) = call["id"].as_str() {
                            answered.insert(call_id.to_owned());
                        }
                    }
                    contents.push(json!({"role": "user", "parts": results}));
                    turn_record.push(r);
                }
            }
            // `info`, `error`, `warning`: the CLI's own notes, never sent to the model.
            _ => {}
        }
    }
    if !contents.iter().any(|c| c["role"] == "model") {
        return Err(FormatError::shape(
            "file",
            "a Gemini CLI chat with no model reply in it",
        ));
    }
    let (mut t, origin) = crate::gemini::contents_with_origin(None, &contents)?;
    t.id = id.to_owned();
    let mut recording = Recording {
        client: "gemini-cli".into(),
        ..Recording::default()
    };
    for (message, origin) in t.messages.iter_mut().zip(&origin) {
        let record = origin.map(|(turn, _)| records[turn_record[turn]]);
        recording.sent_ms.push(
            record
                .and_then(|r| r["timestamp"].as_str())
                .and_then(rfc3339_ms),
        );
        if message.role == Role::Assistant {
            message.usage = record.and_then(|r| usage(&r["tokens"]));
        }
    }
    t.recording = Some(recording);
    t.model = models.most_used();
    crate::resolve_tool_names(&mut t);
    Ok(t)
}

/// Gemini's usage as Gemini CLI records it: `input` is the prompt, cached tokens included;
/// thoughts are billed as output.
fn usage(tokens: &Value) -> Option<RecordedUsage> {
    let n = |key: &str| tokens.get(key).and_then(Value::as_u64).unwrap_or(0);
    Some(RecordedUsage {
        prompt_tokens: tokens.get("input")?.as_u64()?,
        cached_tokens: n("cached"),
        completion_tokens: n("output") + n("thoughts"),
        ..RecordedUsage::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_is_told_from_chat_messages() {
        let checkpoint = serde_json::json!([
            {"role": "user", "parts": [{"text": "Fix the build."}]},
            {"role": "model", "parts": [{"functionCall": {"name": "run_shell_command", "args": {}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "run_shell_command", "response": {"output": "ok"}}}]}
        ]);
        assert!(is_checkpoint(checkpoint.as_array().unwrap()));
        let chat = serde_json::json!([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]);
        assert!(!is_checkpoint(chat.as_array().unwrap()));
        let error = crate::import::import_bytes(
            std::path::Path::new("checkpoint-fix.json"),
            checkpoint.to_string().as_bytes(),
        )
        .unwrap_err();
        assert!(
            error.why.contains("a Gemini CLI checkpoint"),
            "{}",
            error.why
        );
    }

    fn lines(text: &str) -> Vec<Value> {
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Hand-written in the format Gemini CLI 0.61 writes (a one-shot run never rewinds, so the
    /// real runs of `scripts/gemini-chats/generate.sh` cannot show it): a reply replaced by id,
    /// a rewind that drops a message and what followed, and a `$set` of every message.
    #[test]
    fn records_are_replayed_as_gemini_cli_loads_them() {
        let log = lines(concat!(
            r#"{"sessionId":"s","projectHash":"p","startTime":"2026-11-26T10:00:00.000Z","lastUpdated":"2026-11-26T10:00:00.000Z","kind":"main"}"#,
            "\n",
            r#"{"id":"u1","timestamp":"2026-11-26T10:00:01.000Z","type":"user","content":[{"text":"fix the build"}]}"#,
            "\n",
            r#"{"id":"g1","timestamp":"2026-11-26T10:00:02.000Z","type":"gemini","content":"","tokens":{"input":100,"output":5,"cached":0,"thoughts":0,"tool":0,"total":105},"model":"gemini-2.5-pro"}"#,
            "\n",
            r#"{"id":"g1","timestamp":"2026-11-26T10:00:02.000Z","type":"gemini","content":"","tokens":{"input":100,"output":5,"cached":0,"thoughts":0,"tool":0,"total":105},"model":"gemini-2.5-pro","toolCalls":[{"id":"c1","name":"run_shell_command","args":{"command":"make"},"status":"success","result":[{"functionResponse":{"id":"c1","name":"run_shell_command","response":{"output":"error: boom"}}}]}]}"#,
            "\n",
            r#"{"id":"u2","timestamp":"2026-11-26T10:00:03.000Z","type":"user","content":[{"functionResponse":{"id":"c1","name":"run_shell_command","response":{"output":"error: boom"}}}]}"#,
            "\n",
            r#"{"id":"g2","timestamp":"2026-11-26T10:00:04.000Z","type":"gemini","content":"It fails.","tokens":{"input":140,"output":4,"cached":90,"thoughts":2,"tool":0,"total":146},"model":"gemini-2.5-pro"}"#,
            "\n",
            r#"{"id":"u3","timestamp":"2026-11-26T10:00:05.000Z","type":"user","content":[{"text":"try again"}]}"#,
            "\n",
            r#"{"$rewindTo":"u3"}"#,
            "\n",
            r#"{"$set":{"lastUpdated":"2026-11-26T10:00:06.000Z"}}"#,
        ));
        let t = import_lines(&log, "s").unwrap();
        let roles: Vec<Role> = t.messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [Role::User, Role::Assistant, Role::Tool, Role::Assistant],
            "the reply replaced in place, its responses once, the rewound message gone"
        );
        assert_eq!(t.messages[2].tool_results().next().unwrap().call_id, "c1");
        assert_eq!(
            t.messages[2].tool_results().next().unwrap().text(),
            "error: boom"
        );
        let usage = t.messages[3].usage.unwrap();
        assert_eq!(
            (
                usage.prompt_tokens,
                usage.cached_tokens,
                usage.completion_tokens
            ),
            (140, 90, 6)
        );
        assert_eq!(t.model.as_deref(), Some("gemini-2.5-pro"));
        let recording = t.recording.as_ref().unwrap();
        assert_eq!(recording.client, "gemini-cli");
        assert!(recording.sent_ms.iter().all(Option::is_some));
        // A `$set` of the messages replaces them all.
        let mut reset = log.clone();
        reset.push(serde_json::json!({"$set": {"messages": [log[1].clone(), log[5].clone()]}}));
        let t = import_lines(&reset, "s").unwrap();
        assert_eq!(t.messages.len(), 2);
        // The `.json` form.
        let doc = serde_json::json!({"sessionId": "s", "projectHash": "p", "messages": [log[1], log[3], log[5]]});
        assert_eq!(import_document(&doc, "s").unwrap().messages.len(), 4);
    }
}
