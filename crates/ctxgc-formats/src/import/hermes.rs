//! Hermes Agent's history: `~/.hermes/state.db` (SQLite, the canonical store since 0.1x), the
//! optional `~/.hermes/sessions/session_<id>.json` snapshots, and the older gateway's
//! `sessions/<id>.jsonl` transcripts.
//!
//! `state.db` keeps, per session (`sessions`), the system prompt, the model and what the
//! provider billed in total (`input_tokens` uncached, `cache_read_tokens`,
//! `cache_write_tokens`, `output_tokens`, `api_call_count`; per model and task in
//! `session_model_usage`, where the auxiliary model's compaction calls are their own task), and
//! per message (`messages`, in `id` order) the OpenAI-style fields and the time it was written.
//! A rewind or undo leaves rows `active = 0, compacted = 0`: taken back, never sent again. A
//! compaction (`archive_and_compact`) marks every live row `compacted = 1` and inserts the
//! compacted history as new rows: the head it kept, the summary and the tail it kept. The
//! transcript keeps the whole conversation once and marks the inserted rows as the client's
//! replacement, so the replay can follow either what Hermes sent or the conversation.

use ctxgc_core::{
    ClientCompaction, Message, RecordedUsage, Recording, Role, SessionBill, Transcript,
};
use rusqlite::{Connection, Row};
use serde_json::{Map, Value};

use super::time::rfc3339_ms;
use crate::FormatError;
use crate::chat::message_from_chat;

/// How Hermes marks message content it stored as JSON (a list of parts).
const CONTENT_JSON_PREFIX: &str = "\u{0}json:";

/// One session of a database, or why it is not one.
pub(crate) type SessionResult = Result<Transcript, (String, String)>;

/// Imports every session of a Hermes `state.db`.
pub(crate) fn import_state_db(db: &Connection) -> Result<Vec<SessionResult>, FormatError> {
    let sql_err = |e: rusqlite::Error| FormatError::shape("state.db", e.to_string());
    let session_cols = columns(db, "sessions").map_err(sql_err)?;
    let message_cols = columns(db, "messages").map_err(sql_err)?;
    let pick = |cols: &[String], name: &str, fallback: &str| {
        if cols.iter().any(|c| c == name) {
            name.to_owned()
        } else {
            fallback.to_owned()
        }
    };
    let session_sql = format!(
        "SELECT id, {}, {}, {}, {}, {}, {}, {}, {} FROM sessions ORDER BY {}, id",
        pick(&session_cols, "model", "NULL"),
        pick(&session_cols, "system_prompt", "NULL"),
        pick(&session_cols, "input_tokens", "0"),
        pick(&session_cols, "output_tokens", "0"),
        pick(&session_cols, "cache_read_tokens", "0"),
        pick(&session_cols, "cache_write_tokens", "0"),
        pick(&session_cols, "api_call_count", "0"),
        pick(&session_cols, "parent_session_id", "NULL"),
        pick(&session_cols, "started_at", "0"),
    );
    let mut sessions = Vec::new();
    {
        let mut stmt = db.prepare(&session_sql).map_err(sql_err)?;
        let rows = stmt
            .query_map([], |r| {
                Ok(SessionRow {
                    id: r.get(0)?,
                    model: r.get(1)?,
                    system_prompt: r.get(2)?,
                    billed: bill(r, 3)?,
                    parent: r.get(8)?,
                })
            })
            .map_err(sql_err)?;
        for row in rows {
            sessions.push(row.map_err(sql_err)?);
        }
    }
    let per_task = has_table(db, "session_model_usage").map_err(sql_err)?;
    let message_sql = format!(
        "SELECT role, content, tool_call_id, tool_calls, tool_name, timestamp, {}, {}, {} \
         FROM messages WHERE session_id = ?1 ORDER BY id",
        pick(&message_cols, "active", "1"),
        pick(&message_cols, "compacted", "0"),
        pick(&message_cols, "api_content", "NULL"),
    );
    let mut stmt = db.prepare(&message_sql).map_err(sql_err)?;
    let mut out = Vec::new();
    for session in sessions {
        let rows: Vec<MessageRow> = stmt
            .query_map([&session.id], |r| {
                Ok(MessageRow {
                    role: r.get(0)?,
                    content: r.get(1)?,
                    tool_call_id: r.get(2)?,
                    tool_calls: r.get(3)?,
                    tool_name: r.get(4)?,
                    timestamp: r.get::<_, Option<f64>>(5)?,
                    active: r.get::<_, Option<i64>>(6)?.unwrap_or(1) != 0,
                    compacted: r.get::<_, Option<i64>>(7)?.unwrap_or(0) != 0,
                    api_content: r.get(8)?,
                })
            })
            .and_then(|rows| rows.collect())
            .map_err(sql_err)?;
        let billed = if per_task {
            main_task_bill(db, &session.id)
                .map_err(sql_err)?
                .or(session.billed)
        } else {
            session.billed
        };
        out.push(
            build(&session, rows, billed).map_err(|why| (session.id.clone(), why.to_string())),
        );
    }
    Ok(out)
}

struct SessionRow {
    id: String,
    model: Option<String>,
    system_prompt: Option<String>,
    billed: Option<SessionBill>,
    parent: Option<String>,
}

struct MessageRow {
    role: String,
    content: Option<String>,
    tool_call_id: Option<String>,
    tool_calls: Option<String>,
    tool_name: Option<String>,
    timestamp: Option<f64>,
    active: bool,
    compacted: bool,
    api_content: Option<String>,
}

impl MessageRow {
    /// The row as the Chat message Hermes sends: the exact text it sent where it kept one.
    fn chat(&self) -> Value {
        let mut m = Map::new();
        m.insert("role".into(), Value::from(self.role.as_str()));
        let content = match (&self.api_content, &self.content) {
            (Some(sent), _) if self.role == "user" => Value::from(sent.as_str()),
            (_, Some(c)) => match c.strip_prefix(CONTENT_JSON_PREFIX) {
                Some(json) => {
                    serde_json::from_str(json).unwrap_or_else(|_| Value::from(c.as_str()))
                }
                None => Value::from(c.as_str()),
            },
            (_, None) => Value::Null,
        };
        m.insert("content".into(), content);
        if let Some(calls) = self.tool_calls.as_deref().filter(|c| !c.is_empty()) {
            let calls: Value = serde_json::from_str(calls).unwrap_or(Value::Null);
            if calls.as_array().is_some_and(|a| !a.is_empty()) {
                m.insert("tool_calls".into(), calls);
            }
        }
        if let Some(id) = &self.tool_call_id {
            m.insert("tool_call_id".into(), Value::from(id.as_str()));
        }
        if let Some(name) = &self.tool_name {
            m.insert("name".into(), Value::from(name.as_str()));
        }
        Value::Object(m)
    }

    /// What makes two rows the same message (a compaction copies rows it keeps).
    fn same_as(&self, other: &MessageRow) -> bool {
        self.role == other.role
            && self.content == other.content
            && self.tool_call_id == other.tool_call_id
            && self.tool_calls == other.tool_calls
    }
}

fn columns(db: &Connection, table: &str) -> rusqlite::Result<Vec<String>> {
    let mut stmt = db.prepare(&format!("PRAGMA table_info({table})"))?;
    let names = stmt.query_map([], |r| r.get::<_, String>(1))?;
    names.collect()
}

fn has_table(db: &Connection, name: &str) -> rusqlite::Result<bool> {
    db.query_row(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
        [name],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n > 0)
}

/// A total from five columns starting at `at`: uncached input, output, cache reads, cache
/// writes, requests. Hermes counts input without the cached part (its `normalize_usage`).
fn bill(r: &Row, at: usize) -> rusqlite::Result<Option<SessionBill>> {
    let n = |i: usize| -> rusqlite::Result<u64> {
        Ok(r.get::<_, Option<i64>>(at + i)?.unwrap_or(0).max(0) as u64)
    };
    let (input, output, read, written, requests) = (n(0)?, n(1)?, n(2)?, n(3)?, n(4)?);
    Ok(
        (requests > 0 && input + read + written > 0).then_some(SessionBill {
            requests,
            usage: RecordedUsage {
                prompt_tokens: input + read + written,
                cached_tokens: read,
                completion_tokens: output,
                cache_write_tokens: written,
                cache_write_1h_tokens: 0,
            },
        }),
    )
}

/// The agent's own requests, without auxiliary tasks (compaction, titles, vision), which
/// `session_model_usage` counts apart.
fn main_task_bill(db: &Connection, session: &str) -> rusqlite::Result<Option<SessionBill>> {
    db.query_row(
        "SELECT sum(input_tokens), sum(output_tokens), sum(cache_read_tokens), \
         sum(cache_write_tokens), sum(api_call_count) FROM session_model_usage \
         WHERE session_id = ?1 AND task = ''",
        [session],
        |r| bill(r, 0),
    )
}

/// Splits the live and compaction-archived rows into the histories Hermes held in turn: a
/// history ends where a compaction inserted the next, which starts with a copy of the
/// conversation's first message (the head every compaction keeps) or, for the last one, where
/// the archived rows end.
fn generations(rows: &[MessageRow]) -> Vec<std::ops::Range<usize>> {
    let mut starts = vec![0];
    for i in 1..rows.len() {
        let after_archive = rows[i - 1].compacted && !rows[i].compacted;
        let head_again = rows[i].same_as(&rows[0]) && rows[i].compacted == rows[i - 1].compacted;
        if after_archive || head_again {
            starts.push(i);
        }
    }
    let mut out = Vec::new();
    for (k, &start) in starts.iter().enumerate() {
        let end = starts.get(k + 1).copied().unwrap_or(rows.len());
        out.push(start..end);
    }
    out
}

fn build(
    session: &SessionRow,
    rows: Vec<MessageRow>,
    billed: Option<SessionBill>,
) -> Result<Transcript, FormatError> {
    // Rewound rows were taken back: never sent again.
    let rows: Vec<MessageRow> = rows
        .into_iter()
        .filter(|r| r.active || r.compacted)
        .collect();
    let mut t = Transcript {
        id: session.id.clone(),
        model: session.model.clone().filter(|m| !m.is_empty()),
        ..Transcript::default()
    };
    let mut recording = Recording {
        client: "hermes".into(),
        billed_total: billed,
        ..Recording::default()
    };
    if let Some(system) = session.system_prompt.as_deref().filter(|s| !s.is_empty()) {
        t.messages.push(Message::text(Role::System, system));
        recording.sent_ms.push(None);
    }
    let mut seen: Vec<usize> = Vec::new();
    for (g, range) in generations(&rows).into_iter().enumerate() {
        // The rows a compaction inserted: up to the last copy of an earlier row, and the rows
        // written in the same instant (the summary among them).
        let mut replacement = 0;
        if g > 0 {
            let first_time = rows[range.start].timestamp.unwrap_or(0.0);
            for i in range.clone() {
                let copy = seen.iter().any(|&k| rows[k].same_as(&rows[i]));
                let same_write = rows[i]
                    .timestamp
                    .is_some_and(|ts| (ts - first_time).abs() < 0.01);
                if copy || same_write {
                    replacement = i + 1 - range.start;
                }
            }
        }
        let at = t.messages.len();
        for i in range.clone() {
            let where_ = format!("messages of session {} [{}]", session.id, i);
            let message = message_from_chat(&rows[i].chat(), &where_)?;
            t.messages.push(message);
            recording
                .sent_ms
                .push(rows[i].timestamp.map(|s| (s * 1000.0).round() as i64));
        }
        if replacement > 0 {
            recording.compactions.push(ClientCompaction {
                at,
                len: replacement,
            });
        }
        seen.extend(range);
    }
    if !t.messages.iter().any(|m| m.role == Role::Assistant) {
        let why = if rows.is_empty() {
            "a Hermes session with no messages"
        } else {
            "a Hermes session with no model reply in it"
        };
        return Err(FormatError::shape("session", why));
    }
    if let Some(parent) = &session.parent {
        // Sub-agents and sessions split by older versions' compaction name their parent.
        t.id = format!("{}@{parent}", session.id);
    }
    t.recording = Some(recording);
    crate::resolve_tool_names(&mut t);
    Ok(t)
}

/// Whether a `.json` document is a Hermes session snapshot (`session_<id>.json`).
pub(crate) fn is_snapshot(doc: &Value) -> bool {
    doc.get("session_id").is_some_and(Value::is_string)
        && doc.get("messages").is_some_and(Value::is_array)
        && (doc.get("system_prompt").is_some() || doc.get("session_start").is_some())
}

/// Imports a session snapshot: `{session_id, model, system_prompt, tools, messages, ...}`.
pub(crate) fn import_snapshot(doc: &Value, id: &str) -> Result<Transcript, FormatError> {
    let mut t = Transcript {
        id: id.to_owned(),
        model: doc["model"].as_str().map(str::to_owned),
        ..Transcript::default()
    };
    let mut sent = Vec::new();
    if let Some(system) = doc["system_prompt"].as_str().filter(|s| !s.is_empty()) {
        t.messages.push(Message::text(Role::System, system));
        sent.push(None);
    }
    push_messages(
        &mut t,
        &mut sent,
        doc["messages"].as_array().into_iter().flatten(),
    )?;
    t.tools = doc["tools"].as_array().cloned().unwrap_or_default();
    finish(t, sent)
}

/// Whether a parsed first line is an older Hermes gateway transcript's (`session_meta`).
pub(crate) fn is_gateway_line(line: &Value) -> bool {
    line.get("role").and_then(Value::as_str) == Some("session_meta")
}

/// Imports an older gateway transcript: a `session_meta` line, then one message per line,
/// each with its `timestamp`.
pub(crate) fn import_gateway_lines(lines: &[Value], id: &str) -> Result<Transcript, FormatError> {
    let mut t = Transcript {
        id: id.to_owned(),
        ..Transcript::default()
    };
    let mut sent = Vec::new();
    for meta in lines.iter().filter(|l| is_gateway_line(l)) {
        if let Some(model) = meta["model"].as_str() {
            t.model = Some(model.to_owned());
        }
        if let Some(tools) = meta["tools"].as_array() {
            t.tools = tools.clone();
        }
    }
    push_messages(
        &mut t,
        &mut sent,
        lines.iter().filter(|l| !is_gateway_line(l)),
    )?;
    finish(t, sent)
}

fn push_messages<'a>(
    t: &mut Transcript,
    sent: &mut Vec<Option<i64>>,
    messages: impl Iterator<Item = &'a Value>,
) -> Result<(), FormatError> {
    for (i, m) in messages.enumerate() {
        if m.get("role").and_then(Value::as_str) == Some("session_meta") {
            continue;
        }
        let mut chat = m.clone();
        if let (Some(sent_text), Value::Object(obj)) = (m.get("api_content"), &mut chat)
            && m["role"] == "user"
        {
            obj.insert("content".into(), sent_text.clone());
        }
        t.messages
            .push(message_from_chat(&chat, &format!("messages[{i}]"))?);
        sent.push(match &m["timestamp"] {
            Value::Number(n) => n.as_f64().map(|s| (s * 1000.0).round() as i64),
            Value::String(s) => rfc3339_ms(s).or_else(|| rfc3339_ms(&format!("{s}Z"))),
            _ => None,
        });
    }
    Ok(())
}

fn finish(mut t: Transcript, sent: Vec<Option<i64>>) -> Result<Transcript, FormatError> {
    if !t.messages.iter().any(|m| m.role == Role::Assistant) {
        return Err(FormatError::shape(
            "messages",
            "a Hermes session with no model reply in it",
        ));
    }
    t.recording = Some(Recording {
        client: "hermes".into(),
        sent_ms: sent,
        ..Recording::default()
    });
    crate::resolve_tool_names(&mut t);
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Hand-written in the shape Hermes's older gateway wrote (`sessions/<id>.jsonl`); Hermes
    /// 0.19, which the conformance suite runs, no longer writes it.
    #[test]
    fn an_older_gateway_transcript_imports_with_its_times() {
        let lines: Vec<Value> = [
            json!({"role": "session_meta", "model": "anthropic/claude-sonnet-4", "tools": [{"type": "function", "function": {"name": "terminal"}}], "timestamp": "2025-09-01T10:00:00.000000"}),
            json!({"role": "user", "content": "check the disk", "timestamp": "2025-09-01T10:00:01.000000"}),
            json!({"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "terminal", "arguments": "{\"command\": \"df -h\"}"}}], "timestamp": "2025-09-01T10:00:03.000000"}),
            json!({"role": "tool", "tool_call_id": "c1", "content": "{\"output\": \"/dev/sda1 98%\", \"exit_code\": 0}", "timestamp": "2025-09-01T10:00:04.000000"}),
            json!({"role": "assistant", "content": "The disk is 98% full.", "timestamp": "2025-09-01T10:00:06.000000"}),
        ]
        .into();
        let t = import_gateway_lines(&lines, "g").unwrap();
        assert_eq!(t.messages.len(), 4);
        assert_eq!(t.model.as_deref(), Some("anthropic/claude-sonnet-4"));
        assert_eq!(t.tools.len(), 1);
        assert_eq!(
            t.messages[2]
                .tool_results()
                .next()
                .unwrap()
                .tool_name
                .as_deref(),
            Some("terminal")
        );
        let r = t.recording.unwrap();
        assert_eq!(r.client, "hermes");
        assert_eq!(r.sent_ms[1], Some(1_756_720_803_000));
    }
}
