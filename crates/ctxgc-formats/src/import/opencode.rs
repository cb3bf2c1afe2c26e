//! opencode's history: `~/.local/share/opencode/opencode.db` (SQLite tables `session`,
//! `message`, `part`, each row's `data` a JSON document) and, in versions before the database,
//! the `storage/` tree (`session/<project>/<session>.json`, `message/<session>/msg_*.json`,
//! `part/<message>/prt_*.json`).
//!
//! A message is a user turn or an assistant reply; its parts say what it holds. An assistant
//! reply runs one model request per step: its parts between a `step-start` and a
//! `step-finish` are that request's reasoning, text and `tool` calls (with their `state`: the
//! input, and once run the `output` or `error`), and the `step-finish` carries that request's
//! `tokens` (`input` without the cached part, `output`, `reasoning`, `cache: {read, write}`).
//! A compaction is a user message holding a `compaction` part, answered by an assistant reply
//! marked `summary: true`: later requests start from there. opencode cuts long tool outputs
//! itself (`...output truncated...`, the whole kept in a file) before they are stored, so the
//! outputs here are what the model was shown. opencode does not store its system prompt.

use ctxgc_core::{
    Block, ClientCompaction, Message, RecordedUsage, Recording, Role, ToolCall, ToolResult,
    Transcript,
};
use rusqlite::Connection;
use serde_json::{Value, json};

use super::ModelTally;
use super::hermes::SessionResult;
use crate::FormatError;

/// What opencode sends in place of a compaction part: the question the summary answers.
const COMPACTION_PROMPT: &str = "What did we do so far?";

/// One stored message and its parts, in order.
pub(crate) struct StoredMessage {
    pub(crate) info: Value,
    pub(crate) parts: Vec<Value>,
}

/// Imports every session of an `opencode.db`.
pub(crate) fn import_db(db: &Connection) -> Result<Vec<SessionResult>, FormatError> {
    let sql_err = |e: rusqlite::Error| FormatError::shape("opencode.db", e.to_string());
    let sessions: Vec<(String, Option<String>)> = db
        .prepare("SELECT id, parent_id FROM session ORDER BY time_created, id")
        .and_then(|mut s| {
            s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(sql_err)?;
    let mut messages = db
        .prepare(
            "SELECT id, time_created, data FROM message WHERE session_id = ?1 \
             ORDER BY time_created, id",
        )
        .map_err(sql_err)?;
    let mut parts = db
        .prepare("SELECT id, data FROM part WHERE message_id = ?1 ORDER BY id")
        .map_err(sql_err)?;
    let mut out = Vec::new();
    for (session, parent) in sessions {
        let rows: Vec<(String, i64, String)> = messages
            .query_map([&session], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .and_then(|rows| rows.collect())
            .map_err(sql_err)?;
        let mut stored = Vec::new();
        for (id, created, data) in rows {
            let mut info: Value = match serde_json::from_str(&data) {
                Ok(v) => v,
                Err(e) => {
                    return Err(FormatError::shape(
                        &format!("message {id}"),
                        format!("invalid JSON: {e}"),
                    ));
                }
            };
            if let Value::Object(obj) = &mut info {
                obj.entry("id").or_insert_with(|| Value::from(id.as_str()));
                if !obj.contains_key("time") {
                    obj.insert("time".into(), json!({"created": created}));
                }
            }
            let part_rows: Vec<(String, String)> = parts
                .query_map([&id], |r| Ok((r.get(0)?, r.get(1)?)))
                .and_then(|rows| rows.collect())
                .map_err(sql_err)?;
            let parts = part_rows
                .into_iter()
                .filter_map(|(_, data)| serde_json::from_str(&data).ok())
                .collect();
            stored.push(StoredMessage { info, parts });
        }
        out.push(session_transcript(&session, parent.as_deref(), stored));
    }
    Ok(out)
}

/// Whether `dir` is an opencode `storage/` tree (its `message/` and `part/` folders).
pub(crate) fn is_storage(dir: &std::path::Path) -> bool {
    dir.join("message").is_dir() && dir.join("part").is_dir()
}

/// Imports an opencode `storage/` tree: one session per folder of `message/`.
pub(crate) fn import_storage(dir: &std::path::Path) -> Vec<(std::path::PathBuf, SessionResult)> {
    let mut out = Vec::new();
    let mut sessions = sorted_entries(&dir.join("message"));
    sessions.retain(|p| p.is_dir());
    for session_dir in sessions {
        let session = session_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut stored = Vec::new();
        let mut failed = None;
        for file in sorted_entries(&session_dir) {
            let info = match read_json(&file) {
                Ok(v) => v,
                Err(why) => {
                    failed = Some(format!("{}: {why}", file.display()));
                    break;
                }
            };
            let id = info["id"].as_str().unwrap_or_default().to_owned();
            let parts = sorted_entries(&dir.join("part").join(&id))
                .iter()
                .filter_map(|p| read_json(p).ok())
                .collect();
            stored.push(StoredMessage { info, parts });
        }
        let result = match failed {
            Some(why) => Err((session.clone(), why)),
            None => {
                let parent = session_parent(dir, &session);
                session_transcript(&session, parent.as_deref(), stored)
            }
        };
        out.push((session_dir, result));
    }
    out
}

/// The parent of a sub-agent's session, from its `session/<project>/<id>.json`.
fn session_parent(dir: &std::path::Path, session: &str) -> Option<String> {
    for project in sorted_entries(&dir.join("session")) {
        let info = project.join(format!("{session}.json"));
        if info.is_file() {
            return read_json(&info).ok()?["parentID"]
                .as_str()
                .map(str::to_owned);
        }
    }
    None
}

fn sorted_entries(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut entries: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    entries.retain(|p| {
        !p.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.'))
    });
    entries.sort();
    entries
}

fn read_json(path: &std::path::Path) -> Result<Value, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read: {e}"))?;
    serde_json::from_slice(&bytes).map_err(|e| format!("invalid JSON: {e}"))
}

fn session_transcript(
    session: &str,
    parent: Option<&str>,
    stored: Vec<StoredMessage>,
) -> SessionResult {
    build(session, stored)
        .map(|mut t| {
            if let Some(parent) = parent {
                t.id = format!("{session}@{parent}");
            }
            t
        })
        .map_err(|e| (session.to_owned(), e.to_string()))
}

fn build(session: &str, stored: Vec<StoredMessage>) -> Result<Transcript, FormatError> {
    let mut t = Transcript {
        id: session.to_owned(),
        ..Transcript::default()
    };
    let mut recording = Recording {
        client: "opencode".into(),
        ..Recording::default()
    };
    let mut models = ModelTally::default();
    // The user message holding the latest compaction part, as a transcript index.
    let mut compaction_at: Option<usize> = None;
    for m in &stored {
        let created = m.info["time"]["created"].as_i64();
        match m.info["role"].as_str() {
            Some("user") => {
                let mut blocks = Vec::new();
                let mut compaction = false;
                for part in &m.parts {
                    match part["type"].as_str() {
                        Some("text") if part["ignored"] != true => {
                            if let Some(text) = part["text"].as_str() {
                                blocks.push(Block::text(text));
                            }
                        }
                        Some("compaction") => compaction = true,
                        _ => {}
                    }
                }
                if compaction {
                    blocks.push(Block::text(COMPACTION_PROMPT));
                    compaction_at = Some(t.messages.len());
                }
                if !blocks.is_empty() {
                    t.messages.push(Message {
                        role: Role::User,
                        content: blocks,
                        usage: None,
                    });
                    recording.sent_ms.push(created);
                }
            }
            Some("assistant") => {
                models.note(m.info.get("modelID"));
                let first = t.messages.len();
                push_steps(&mut t, &mut recording, m, created);
                if m.info["summary"] == true
                    && t.messages.len() > first
                    && let Some(at) = compaction_at.take()
                {
                    recording.compactions.push(ClientCompaction {
                        at,
                        len: t.messages.len() - at,
                    });
                }
            }
            _ => {}
        }
    }
    if !t.messages.iter().any(|m| m.role == Role::Assistant) {
        return Err(FormatError::shape(
            "session",
            "an opencode session with no model reply in it",
        ));
    }
    t.model = models.most_used();
    t.recording = Some(recording);
    crate::resolve_tool_names(&mut t);
    Ok(t)
}

/// An assistant reply's steps: each an assistant message (reasoning, text, calls) with its
/// request's usage, then one tool message per call.
fn push_steps(
    t: &mut Transcript,
    recording: &mut Recording,
    m: &StoredMessage,
    created: Option<i64>,
) {
    let mut blocks: Vec<Block> = Vec::new();
    let mut results: Vec<ToolResult> = Vec::new();
    let mut sent = created;
    let mut last_end = created;
    let flush = |t: &mut Transcript,
                 recording: &mut Recording,
                 blocks: &mut Vec<Block>,
                 results: &mut Vec<ToolResult>,
                 usage: Option<RecordedUsage>,
                 sent: Option<i64>| {
        if blocks.is_empty() && results.is_empty() {
            return;
        }
        t.messages.push(Message {
            role: Role::Assistant,
            content: std::mem::take(blocks),
            usage,
        });
        recording.sent_ms.push(sent);
        for result in results.drain(..) {
            t.messages.push(Message {
                role: Role::Tool,
                content: vec![Block::ToolResult(result)],
                usage: None,
            });
            recording.sent_ms.push(None);
        }
    };
    let mut stepped = false;
    for part in &m.parts {
        match part["type"].as_str() {
            Some("step-start") => {
                stepped = true;
                sent = last_end;
            }
            Some("step-finish") => {
                let usage = usage(&part["tokens"]);
                flush(t, recording, &mut blocks, &mut results, usage, sent);
            }
            Some("reasoning") => {
                let text = part["text"].as_str().unwrap_or_default();
                if !text.is_empty() {
                    blocks.push(Block::Thinking {
                        text: Some(text.to_owned()),
                        raw: json!({"type": "thinking", "thinking": text}),
                    });
                }
            }
            Some("text") if part["ignored"] != true => {
                if let Some(text) = part["text"].as_str().filter(|s| !s.is_empty()) {
                    blocks.push(Block::text(text));
                }
            }
            Some("tool") => {
                let id = part["callID"].as_str().unwrap_or_default().to_owned();
                let name = part["tool"].as_str().unwrap_or_default().to_owned();
                let state = &part["state"];
                blocks.push(Block::ToolCall(ToolCall {
                    id: id.clone(),
                    name: name.clone(),
                    arguments: state["input"].to_string(),
                    implicit: false,
                }));
                let (text, is_error) = match state["status"].as_str() {
                    Some("completed") => (state["output"].as_str().unwrap_or_default(), false),
                    Some("error") => (
                        state["error"].as_str().unwrap_or("Tool execution failed"),
                        true,
                    ),
                    // Never finished: opencode answers such a call as aborted.
                    _ => ("Tool execution aborted", true),
                };
                if let Some(end) = state["time"]["end"].as_i64() {
                    last_end = Some(end);
                }
                results.push(ToolResult {
                    call_id: id,
                    tool_name: Some(name),
                    content: vec![Block::text(text)],
                    is_error,
                });
            }
            _ => {}
        }
    }
    // Versions without steps, or a reply cut off mid-step: the message's own tokens.
    let usage = if stepped {
        None
    } else {
        usage(&m.info["tokens"])
    };
    flush(t, recording, &mut blocks, &mut results, usage, sent);
}

/// opencode's tokens: `input` leaves out cache reads and writes, reasoning is billed as output.
fn usage(tokens: &Value) -> Option<RecordedUsage> {
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    let input = tokens.get("input")?.as_u64()?;
    let read = n(&tokens["cache"]["read"]);
    let written = n(&tokens["cache"]["write"]);
    (input + read + written > 0).then(|| RecordedUsage {
        prompt_tokens: input + read + written,
        cached_tokens: read,
        completion_tokens: n(&tokens["output"]) + n(&tokens["reasoning"]),
        cache_write_tokens: written,
        cache_write_1h_tokens: 0,
    })
}
