//! Agent histories kept in SQLite databases: Hermes's `state.db` and opencode's `opencode.db`,
//! told apart by their tables.
//!
//! A database is opened read-only (an agent may be writing it: its write-ahead log is read
//! too, never changed); when that fails (a read-only folder, no `-shm` file), it is opened as
//! immutable, which reads the main file alone.

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
    let read_only = Connection::open_with_flags(path, flags).and_then(|db| {
        // Opening is lazy: the first read says whether the file can be read this way.
        db.query_row("SELECT count(*) FROM sqlite_master", [], |_| Ok(()))?;
        Ok(db)
    });
    match read_only {
        Ok(db) => Ok(db),
        Err(first) => {
            let uri = format!("file:{}?immutable=1", uri_path(path));
            Connection::open_with_flags(&uri, flags)
                .and_then(|db| {
                    db.query_row("SELECT count(*) FROM sqlite_master", [], |_| Ok(()))?;
                    Ok(db)
                })
                .map_err(|_| format!("an SQLite database ctxgc cannot open: {first}"))
        }
    }
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
