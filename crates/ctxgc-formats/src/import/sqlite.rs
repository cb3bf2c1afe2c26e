//! Agent histories kept in SQLite databases: Hermes's `state.db` and opencode's `opencode.db`,
//! told apart by their tables.
//!
//! A database is only read. Without a write-ahead log beside it, it is opened as immutable,
//! which creates nothing in the agent's folder; with one (the agent is running, or has not
//! folded its log back), it is opened read-only so the log's pages are read too, and as
//! immutable when that fails (a read-only folder).

use std::path::Path;

use rusqlite::{Connection, OpenFlags};

use super::SourceFormat;
use super::hermes::SessionResult;

/// The first bytes of every SQLite 3 database file.
pub(crate) const MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// Imports every session of the database at `path`.
pub(crate) fn import(path: &Path) -> Result<(SourceFormat, Vec<SessionResult>), String> {
    let db = open(path)?;
    let tables: Vec<String> = db
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .and_then(|mut s| {
            s.query_map([], |row| row.get::<_, String>(0))?
                .collect::<Result<Vec<String>, _>>()
        })
        .map_err(|e| format!("an SQLite database ctxgc cannot read: {e}"))?;
    let has = |name: &str| tables.iter().any(|t| t == name);
    if has("sessions") && has("messages") {
        let sessions = super::hermes::import_state_db(&db).map_err(|e| e.to_string())?;
        return Ok((SourceFormat::HermesStateDb, sessions));
    }
    if has("session") && has("message") && has("part") {
        let sessions = super::opencode::import_db(&db).map_err(|e| e.to_string())?;
        return Ok((SourceFormat::Opencode, sessions));
    }
    let shown: Vec<&str> = tables.iter().map(String::as_str).take(8).collect();
    Err(format!(
        "not a session: an SQLite database that is neither a Hermes state.db nor an opencode.db (its tables: {})",
        shown.join(", ")
    ))
}

fn open(path: &Path) -> Result<Connection, String> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_URI
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let try_open = |target: &str| {
        Connection::open_with_flags(target, flags).and_then(|db| {
            // Opening is lazy: the first read says whether the file can be read this way.
            db.query_row("SELECT count(*) FROM sqlite_master", [], |_| Ok(()))?;
            Ok(db)
        })
    };
    let immutable = format!("file:{}?immutable=1", uri_path(path));
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    if !Path::new(&wal).exists() {
        // Nothing beyond the main file: read it as immutable, which creates no `-shm` or
        // `-wal` file beside it (a read-only open of a WAL database would).
        if let Ok(db) = try_open(&immutable) {
            return Ok(db);
        }
    }
    let plain = format!("file:{}?mode=ro", uri_path(path));
    try_open(&plain)
        .or_else(|first| try_open(&immutable).map_err(|_| first))
        .map_err(|e| format!("an SQLite database ctxgc cannot open: {e}"))
}

/// `path` as a `file:` URI path: `?`, `#` and `%` escaped.
fn uri_path(path: &Path) -> String {
    let mut out = String::new();
    for c in path.to_string_lossy().chars() {
        match c {
            '?' => out.push_str("%3f"),
            '#' => out.push_str("%23"),
            '%' => out.push_str("%25"),
            '\\' => out.push('/'),
            c => out.push(c),
        }
    }
    out
}
