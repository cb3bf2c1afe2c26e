//! Importing real agent transcripts, with automatic format detection.
//!
//! Recognised inputs:
//! - mini-swe-agent `*.traj.json` (`mini-swe-agent-1` text protocol, `mini-swe-agent-1.1`
//!   native tool calls);
//! - SWE-agent `*.traj` (a `history` array);
//! - request bodies of the three APIs (also wrapped as `{"path": ..., "body": ...}`);
//! - a bare JSON array of Chat Completions messages;
//! - Claude Code session logs and Codex CLI rollouts (JSONL, with the usage the provider billed
//!   and the time of every request);
//! - Gemini CLI chats (`.json` and `.jsonl`, with the usage of every reply);
//! - Hermes's `state.db` (SQLite), session snapshots and older gateway transcripts;
//! - opencode's `opencode.db` (SQLite) and its older `storage/` tree;
//! - Cline's and Roo Code's task histories (`api_conversation_history.json`, with the usage in
//!   the `ui_messages.json` beside it);
//! - Aider's `.aider.chat.history.md` (text sessions);
//! - the canonical JSONL that `ctxgc import --out` writes (one Chat message per line).

mod aider;
mod claude_code;
mod cline;
mod codex;
mod gemini_cli;
mod hermes;
pub mod history;
pub mod mini_swe;
mod opencode;
mod sqlite;
pub mod swe_agent;
mod time;

use std::fmt;
use std::path::{Path, PathBuf};

use ctxgc_core::{ClientCompaction, Recording, Transcript};
use serde_json::Value;

use crate::FormatError;
use crate::chat::{message_from_chat, message_to_chat};
use crate::request::{ApiRequest, detect};

/// The format a file was recognised as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceFormat {
    /// mini-swe-agent 1 (text protocol).
    MiniSweAgent1,
    /// mini-swe-agent 1.1 (native tool calls).
    MiniSweAgent11,
    /// SWE-agent `.traj`.
    SweAgent,
    /// An API request body.
    Request(crate::Api),
    /// A JSON array of Chat messages.
    ChatMessages,
    /// ctxgc's canonical JSONL.
    CanonicalJsonl,
    /// A Claude Code session log.
    ClaudeCode,
    /// A Codex CLI rollout.
    CodexRollout,
    /// A Gemini CLI chat.
    GeminiCli,
    /// A session of Hermes's `state.db`.
    HermesStateDb,
    /// A Hermes session snapshot or gateway transcript.
    HermesSession,
    /// An opencode session (`opencode.db` or the `storage/` tree).
    Opencode,
    /// A Cline or Roo Code task.
    Cline,
    /// A run of an Aider chat history.
    Aider,
}

impl fmt::Display for SourceFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SourceFormat::MiniSweAgent1 => f.write_str("mini-swe-agent-1"),
            SourceFormat::MiniSweAgent11 => f.write_str("mini-swe-agent-1.1"),
            SourceFormat::SweAgent => f.write_str("swe-agent"),
            SourceFormat::Request(api) => write!(f, "{} request", api.name()),
            SourceFormat::ChatMessages => f.write_str("chat messages"),
            SourceFormat::CanonicalJsonl => f.write_str("ctxgc jsonl"),
            SourceFormat::ClaudeCode => f.write_str("claude-code log"),
            SourceFormat::CodexRollout => f.write_str("codex rollout"),
            SourceFormat::GeminiCli => f.write_str("gemini-cli chat"),
            SourceFormat::HermesStateDb => f.write_str("hermes state.db"),
            SourceFormat::HermesSession => f.write_str("hermes session"),
            SourceFormat::Opencode => f.write_str("opencode session"),
            SourceFormat::Cline => f.write_str("cline task"),
            SourceFormat::Aider => f.write_str("aider history"),
        }
    }
}

/// One imported session.
#[derive(Debug, Clone)]
pub struct Imported {
    /// Where it came from.
    pub path: PathBuf,
    /// The recognised format.
    pub format: SourceFormat,
    /// The conversation.
    pub transcript: Transcript,
}

/// A file that could not be imported, with the reason.
#[derive(Debug, thiserror::Error)]
#[error("{}: {why}", path.display())]
pub struct ImportError {
    /// The file.
    pub path: PathBuf,
    /// Why it is not a transcript.
    pub why: String,
}

/// Counts the model names a log gives its requests, to name the session's model: the one most
/// of its requests went to (a client's background calls to a smaller model are the minority).
#[derive(Default)]
pub(crate) struct ModelTally(Vec<(String, usize)>);

impl ModelTally {
    /// Counts one request's `model` field, when it is a non-empty string.
    pub(crate) fn note(&mut self, model: Option<&Value>) {
        let Some(name) = model.and_then(Value::as_str).filter(|s| !s.is_empty()) else {
            return;
        };
        match self.0.iter_mut().find(|(n, _)| n == name) {
            Some((_, count)) => *count += 1,
            None => self.0.push((name.to_owned(), 1)),
        }
    }

    /// The most used name (the first seen among equals).
    pub(crate) fn most_used(&self) -> Option<String> {
        let mut best: Option<&(String, usize)> = None;
        for entry in &self.0 {
            if best.is_none_or(|b| entry.1 > b.1) {
                best = Some(entry);
            }
        }
        best.map(|(name, _)| name.clone())
    }
}

/// The session id of a file: its name without the transcript extensions.
pub fn session_id(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // Files named alike in every task or project folder are named by their folder.
    if (name == "api_conversation_history.json" || name == ".aider.chat.history.md")
        && let Some(dir) = path.parent().and_then(Path::file_name)
    {
        return dir.to_string_lossy().into_owned();
    }
    for ext in [".traj.json", ".traj", ".jsonl", ".json"] {
        if let Some(stem) = name.strip_suffix(ext) {
            return stem.to_owned();
        }
    }
    name
}

/// Imports the bytes of one file: one session, or several for a client log with sub-agents.
pub fn import_bytes(path: &Path, bytes: &[u8]) -> Result<Vec<Imported>, ImportError> {
    import_with_companion(path, bytes, None)
}

/// Imports one file, with `companion` the bytes of the file beside it that holds the usage
/// (Cline's `ui_messages.json` beside `api_conversation_history.json`).
fn import_with_companion(
    path: &Path,
    bytes: &[u8],
    companion: Option<&[u8]>,
) -> Result<Vec<Imported>, ImportError> {
    let fail = |why: String| ImportError {
        path: path.to_owned(),
        why,
    };
    let id = session_id(path);
    let is_jsonl = path.extension().is_some_and(|e| e == "jsonl");
    let text_start = std::str::from_utf8(&bytes[..bytes.len().min(256)]).unwrap_or_default();
    let (format, transcripts) = if aider::is_history(text_start) {
        let text = std::str::from_utf8(bytes).map_err(|e| fail(format!("not UTF-8 text: {e}")))?;
        let runs = aider::import(text, &id).map_err(|e| fail(e.to_string()))?;
        (SourceFormat::Aider, runs)
    } else if bytes.starts_with(sqlite::MAGIC) {
        return Err(fail(
            "an SQLite database: give its path to `ctxgc import` or `ctxgc replay`".into(),
        ));
    } else if is_jsonl {
        let text = std::str::from_utf8(bytes).map_err(|e| fail(format!("not UTF-8 text: {e}")))?;
        import_jsonl(text, &id).map_err(|e| fail(e.to_string()))?
    } else {
        let doc: Value = serde_json::from_slice(bytes)
            .map_err(|e| fail(format!("not a transcript: invalid JSON ({e})")))?;
        let ui: Option<Vec<Value>> = companion
            .and_then(|b| serde_json::from_slice::<Value>(b).ok())
            .and_then(|v| v.as_array().cloned());
        let (format, mut t) =
            detect_and_import(&doc, &id, ui.as_deref()).map_err(|e| fail(e.to_string()))?;
        t.id = id;
        (format, vec![t])
    };
    Ok(transcripts
        .into_iter()
        .map(|transcript| Imported {
            path: path.to_owned(),
            format,
            transcript,
        })
        .collect())
}

/// A JSONL file: a Claude Code log, a Codex rollout or canonical JSONL, told apart by its
/// first line.
fn import_jsonl(text: &str, id: &str) -> Result<(SourceFormat, Vec<Transcript>), FormatError> {
    let first = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .ok_or_else(|| FormatError::shape("file", "not a transcript: an empty JSONL file"))?;
    let first: Value = serde_json::from_str(first)
        .map_err(|e| FormatError::shape("line 1", format!("invalid JSON: {e}")))?;
    let client_log = if claude_code::is_claude_code_line(&first) {
        Some(SourceFormat::ClaudeCode)
    } else if hermes::is_gateway_line(&first) {
        Some(SourceFormat::HermesSession)
    } else if codex::is_rollout_line(&first) {
        Some(SourceFormat::CodexRollout)
    } else if gemini_cli::is_chat_metadata(&first) {
        Some(SourceFormat::GeminiCli)
    } else {
        None
    };
    let Some(format) = client_log else {
        let mut t = read_jsonl(text)?;
        t.id = id.to_owned();
        return Ok((SourceFormat::CanonicalJsonl, vec![t]));
    };
    let mut lines = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let value: Value = serde_json::from_str(line).map_err(|e| {
            FormatError::shape(&format!("line {}", n + 1), format!("invalid JSON: {e}"))
        })?;
        lines.push(value);
    }
    let transcripts = match format {
        SourceFormat::ClaudeCode => claude_code::import(&lines, id)?,
        SourceFormat::GeminiCli => vec![gemini_cli::import_lines(&lines, id)?],
        SourceFormat::HermesSession => vec![hermes::import_gateway_lines(&lines, id)?],
        _ => vec![codex::import(&lines, id)?],
    };
    Ok((format, transcripts))
}

fn detect_and_import(
    doc: &Value,
    id: &str,
    companion: Option<&[Value]>,
) -> Result<(SourceFormat, Transcript), FormatError> {
    if let Value::Array(items) = doc {
        if items.is_empty() {
            return Err(FormatError::shape(
                "file",
                "not a transcript: an empty JSON array",
            ));
        }
        if cline::is_ui_log(items) {
            return Err(FormatError::shape(
                "file",
                "not a session: a Cline or Roo Code UI log (its usage is read with the api_conversation_history.json beside it)",
            ));
        }
        if gemini_cli::is_checkpoint(items) {
            return Err(FormatError::shape(
                "file",
                "not a session: a Gemini CLI checkpoint (`/chat save`), a copy of a conversation its chat log (chats/session-*.json) holds whole with its usage; that one is read",
            ));
        }
        if cline::is_anthropic_history(items) {
            return Ok((SourceFormat::Cline, cline::import(items, companion, id)?));
        }
        let mut t = Transcript::default();
        for (i, m) in items.iter().enumerate() {
            t.messages.push(message_from_chat(m, &format!("[{i}]"))?);
        }
        crate::resolve_tool_names(&mut t);
        return Ok((SourceFormat::ChatMessages, t));
    }
    let Some(obj) = doc.as_object() else {
        return Err(FormatError::shape(
            "file",
            "not a transcript: expected a JSON object or array",
        ));
    };
    if let Some(format) = obj.get("trajectory_format").and_then(Value::as_str) {
        if format.starts_with("mini-swe-agent") {
            let (t, protocol) = mini_swe::import(doc, id)?;
            let format = match protocol {
                mini_swe::Protocol::Text => SourceFormat::MiniSweAgent1,
                mini_swe::Protocol::Native => SourceFormat::MiniSweAgent11,
            };
            return Ok((format, t));
        }
        return Err(FormatError::shape(
            "trajectory_format",
            format!("not a transcript ctxgc knows: trajectory_format '{format}'"),
        ));
    }
    if obj.contains_key("history") {
        return Ok((SourceFormat::SweAgent, swe_agent::import(doc, id)?));
    }
    if hermes::is_snapshot(doc) {
        return Ok((
            SourceFormat::HermesSession,
            hermes::import_snapshot(doc, id)?,
        ));
    }
    if gemini_cli::is_chat_metadata(doc) {
        return Ok((
            SourceFormat::GeminiCli,
            gemini_cli::import_document(doc, id)?,
        ));
    }
    if let (Some(body), Some(_)) = (obj.get("body"), obj.get("path")) {
        return detect_and_import(body, id, None);
    }
    if let Some(api) = detect(doc) {
        let request = ApiRequest {
            api,
            body: doc.clone(),
        };
        return Ok((SourceFormat::Request(api), request.transcript()?));
    }
    let keys: Vec<&str> = obj.keys().map(String::as_str).take(8).collect();
    Err(FormatError::shape(
        "file",
        format!(
            "not a transcript: a JSON object with none of `messages`, `history`, `input` (its keys: {})",
            keys.join(", ")
        ),
    ))
}

/// Imports files and directories (recursively, in name order): one result per session, or one
/// error per file that is not a transcript. Every file of a directory is expected to be a
/// transcript, except `README*` and hidden files.
pub fn import_paths(paths: &[PathBuf]) -> Vec<Result<Imported, ImportError>> {
    import_each(paths).collect()
}

/// [`import_paths`], one file at a time: only one file's sessions are held at once, whatever
/// the size of the history.
pub fn import_each(paths: &[PathBuf]) -> impl Iterator<Item = Result<Imported, ImportError>> {
    let mut files = Vec::new();
    for path in paths {
        collect(path, &mut files, &mut Vec::new());
    }
    files.into_iter().flat_map(|file| match file {
        Ok(path) if path.is_dir() => opencode::import_storage(&path)
            .into_iter()
            .map(|(dir, session)| session_of(&dir, SourceFormat::Opencode, session))
            .collect(),
        Ok(path) => import_file(&path),
        Err(e) => vec![Err(e)],
    })
}

/// Imports one file: a database's sessions, or a file's.
pub fn import_file(path: &Path) -> Vec<Result<Imported, ImportError>> {
    let fail = |why: String| {
        vec![Err(ImportError {
            path: path.to_owned(),
            why,
        })]
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    for suffix in ["-wal", "-shm", "-journal"] {
        if let Some(db) = name.strip_suffix(suffix)
            && path.with_file_name(db).is_file()
        {
            return fail(format!(
                "not a session: SQLite's {suffix} file of {db}, read with it"
            ));
        }
    }
    let mut head = [0u8; 16];
    let is_db = std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
        .is_ok()
        && &head == sqlite::MAGIC;
    if is_db {
        return match sqlite::import(path) {
            Ok((format, sessions)) => sessions
                .into_iter()
                .map(|s| session_of(path, format, s))
                .collect(),
            Err(why) => fail(why),
        };
    }
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) => return fail(format!("cannot read: {e}")),
    };
    // Cline keeps a task's usage in the file beside its conversation.
    let companion = (name == "api_conversation_history.json")
        .then(|| std::fs::read(path.with_file_name("ui_messages.json")).ok())
        .flatten();
    match import_with_companion(path, &bytes, companion.as_deref()) {
        Ok(sessions) => sessions.into_iter().map(Ok).collect(),
        Err(e) => vec![Err(e)],
    }
}

/// One session of a database or tree, or why it is not one (named `PATH#SESSION`).
fn session_of(
    path: &Path,
    format: SourceFormat,
    session: Result<Transcript, (String, String)>,
) -> Result<Imported, ImportError> {
    match session {
        Ok(transcript) => Ok(Imported {
            path: path.to_owned(),
            format,
            transcript,
        }),
        Err((id, why)) => Err(ImportError {
            path: PathBuf::from(format!("{}#{id}", path.display())),
            why,
        }),
    }
}

/// Walks `path`, following links, refusing what cannot be read as a file (a FIFO would block
/// the import forever) and naming link loops, among files and among folders alike.
fn collect(path: &Path, out: &mut Vec<Result<PathBuf, ImportError>>, ancestors: &mut Vec<PathBuf>) {
    let fail = |why: String| ImportError {
        path: path.to_owned(),
        why,
    };
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.raw_os_error() == Some(LOOP_ERRNO) => {
            out.push(Err(fail("a symbolic link loop".into())));
            return;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let why = if std::fs::symlink_metadata(path).is_ok() {
                "a symbolic link to nothing"
            } else {
                "no such file or directory"
            };
            out.push(Err(fail(why.into())));
            return;
        }
        Err(e) => {
            out.push(Err(fail(format!("cannot read: {e}"))));
            return;
        }
    };
    if meta.is_file() {
        out.push(Ok(path.to_owned()));
        return;
    }
    if !meta.is_dir() {
        out.push(Err(fail(format!(
            "not a regular file ({}): not read",
            special_kind(&meta)
        ))));
        return;
    }
    // An opencode storage tree is read as sessions, not file by file.
    if opencode::is_storage(path) {
        out.push(Ok(path.to_owned()));
        return;
    }
    // A folder linked from inside itself would be walked forever.
    let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    if ancestors.contains(&real) {
        out.push(Err(fail(
            "a symbolic link loop (a folder that contains itself)".into(),
        )));
        return;
    }
    let mut entries: Vec<PathBuf> = match std::fs::read_dir(path) {
        Ok(rd) => rd.filter_map(|e| e.ok().map(|e| e.path())).collect(),
        Err(e) => {
            out.push(Err(fail(format!("cannot list: {e}"))));
            return;
        }
    };
    entries.sort();
    ancestors.push(real);
    for entry in entries {
        let name = entry
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let hidden = name.starts_with('.') && name != ".aider.chat.history.md";
        if hidden || name.starts_with("README") {
            continue;
        }
        collect(&entry, out, ancestors);
    }
    ancestors.pop();
}

/// ELOOP on Linux and the BSDs' value on macOS.
#[cfg(target_os = "macos")]
const LOOP_ERRNO: i32 = 62;
#[cfg(not(target_os = "macos"))]
const LOOP_ERRNO: i32 = 40;

#[cfg(unix)]
fn special_kind(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() || t.is_char_device() {
        "a device"
    } else {
        "a special file"
    }
}

#[cfg(not(unix))]
fn special_kind(_: &std::fs::Metadata) -> &'static str {
    "a special file"
}

/// Writes a transcript as canonical JSONL: one Chat Completions message per line. A client
/// log's recording rides along in three more extensions: `"client"` on the first line,
/// `"sent_ms"` (when the message, or the request that produced it, was sent) and
/// `"compaction": N` on the messages the client wrote in place of its history at its N-th
/// compaction (from 0), and `"billed_total"` on the first line where the client recorded only
/// the session's total usage. A message the Chat shape cannot hold exactly (thinking blocks with
/// their signatures or encrypted content, blocks interleaved with calls) also carries its core
/// blocks as `"content_blocks"`, which a reader takes in place of the Chat fields.
pub fn write_jsonl(t: &Transcript) -> String {
    let mut out = String::new();
    for (i, m) in t.messages.iter().enumerate() {
        let mut line = message_to_chat(m);
        let exact = message_from_chat(&line, "").is_ok_and(|back| back.content == m.content);
        if !exact
            && let (Value::Object(obj), Ok(blocks)) = (&mut line, serde_json::to_value(&m.content))
        {
            obj.insert("content_blocks".into(), blocks);
        }
        if let (Some(model), Value::Object(obj), 0) = (&t.model, &mut line, i) {
            obj.insert("model".into(), Value::from(model.as_str()));
        }
        if let (Some(r), Value::Object(obj)) = (&t.recording, &mut line) {
            if i == 0 {
                obj.insert("client".into(), Value::from(r.client.as_str()));
                if let Some(bill) = r.billed_total.and_then(|b| serde_json::to_value(b).ok()) {
                    obj.insert("billed_total".into(), bill);
                }
            }
            if let Some(ms) = r.sent_at(i) {
                obj.insert("sent_ms".into(), Value::from(ms));
            }
            if let Some(n) = r
                .compactions
                .iter()
                .position(|c| (c.at..c.at + c.len).contains(&i))
            {
                obj.insert("compaction".into(), Value::from(n));
            }
        }
        out.push_str(&line.to_string());
        out.push('\n');
    }
    out
}

/// Reads canonical JSONL (blank lines ignored).
pub fn read_jsonl(text: &str) -> Result<Transcript, FormatError> {
    let mut t = Transcript::default();
    let mut recording: Option<Recording> = None;
    let mut compaction_of: Vec<Option<u64>> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = format!("line {}", n + 1);
        let value: Value = serde_json::from_str(line)
            .map_err(|e| FormatError::shape(&at, format!("invalid JSON: {e}")))?;
        if let Some(client) = value.get("client").and_then(Value::as_str) {
            recording.get_or_insert_with(Recording::default).client = client.to_owned();
        }
        if let Some(bill) = value.get("billed_total") {
            let bill = serde_json::from_value(bill.clone())
                .map_err(|e| FormatError::shape(&format!("{at}: billed_total"), e.to_string()))?;
            recording
                .get_or_insert_with(Recording::default)
                .billed_total = Some(bill);
        }
        if t.messages.is_empty()
            && let Some(model) = value.get("model").and_then(Value::as_str)
        {
            t.model = Some(model.to_owned());
        }
        let sent = value.get("sent_ms").and_then(Value::as_i64);
        let compaction = value.get("compaction").and_then(Value::as_u64);
        if sent.is_some() || compaction.is_some() {
            recording.get_or_insert_with(Recording::default);
        }
        if let Some(r) = &mut recording {
            r.sent_ms.resize(t.messages.len(), None);
            r.sent_ms.push(sent);
        }
        compaction_of.resize(t.messages.len(), None);
        compaction_of.push(compaction);
        let mut message = message_from_chat(&value, &at)?;
        if let Some(blocks) = value.get("content_blocks") {
            message.content = serde_json::from_value(blocks.clone())
                .map_err(|e| FormatError::shape(&format!("{at}: content_blocks"), e.to_string()))?;
        }
        t.messages.push(message);
    }
    if let Some(r) = &mut recording {
        r.sent_ms.resize(t.messages.len(), None);
        for (i, c) in compaction_of.iter().enumerate() {
            let Some(c) = c else { continue };
            match r.compactions.last_mut() {
                Some(last) if compaction_of[last.at] == Some(*c) => last.len = i + 1 - last.at,
                _ => r.compactions.push(ClientCompaction { at: i, len: 1 }),
            }
        }
    }
    t.recording = recording;
    crate::resolve_tool_names(&mut t);
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_transcripts_are_named_with_a_reason() {
        let err = import_bytes(
            Path::new("data/notes.json"),
            br#"{"name": "x", "rows": []}"#,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "data/notes.json: file: not a transcript: a JSON object with none of `messages`, `history`, `input` (its keys: name, rows)"
        );
        let err = import_bytes(Path::new("todos.json"), b"[]").unwrap_err();
        assert!(err.to_string().contains("an empty JSON array"), "{err}");
        let err = import_bytes(Path::new("a.json"), b"hello").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("a.json: not a transcript: invalid JSON"),
            "{err}"
        );
        let err = import_bytes(
            Path::new("b.jsonl"),
            b"{\"role\":\"user\",\"content\":\"x\"}\n{oops}\n",
        )
        .unwrap_err();
        assert!(
            err.to_string().starts_with("b.jsonl: line 2: invalid JSON"),
            "{err}"
        );
    }

    /// Defects guarded: `ctxgc import` blocked forever on a FIFO, also inside a folder, and a
    /// link loop was reported as "no such file or directory".
    #[cfg(unix)]
    #[test]
    fn special_files_and_link_loops_are_named_not_read() {
        let dir = std::env::temp_dir().join(format!("ctxgc-special-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("inner")).unwrap();
        let fifo = dir.join("inner/pipe.jsonl");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        std::os::unix::fs::symlink("loop-b", dir.join("loop-a")).unwrap();
        std::os::unix::fs::symlink("loop-a", dir.join("loop-b")).unwrap();
        std::os::unix::fs::symlink("..", dir.join("inner/up")).unwrap();
        std::os::unix::fs::symlink("missing", dir.join("dangling")).unwrap();
        let results = import_paths(&[dir.clone(), fifo.clone()]);
        let errors: Vec<String> = results
            .iter()
            .filter_map(|r| r.as_ref().err().map(|e| e.to_string()))
            .collect();
        let has =
            |name: &str, why: &str| errors.iter().any(|e| e.contains(name) && e.contains(why));
        assert!(
            has("pipe.jsonl", "not a regular file (a FIFO)"),
            "{errors:?}"
        );
        assert!(has("loop-a", "a symbolic link loop"), "{errors:?}");
        assert!(
            has("inner/up", "a folder that contains itself"),
            "{errors:?}"
        );
        assert!(has("dangling", "a symbolic link to nothing"), "{errors:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn session_ids_drop_transcript_extensions() {
        assert_eq!(
            session_id(Path::new("x/astropy__astropy-12907.traj.json")),
            "astropy__astropy-12907"
        );
        assert_eq!(session_id(Path::new("rev__rock.traj")), "rev__rock");
    }
}
