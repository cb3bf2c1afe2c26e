//! ctxgc-store: where originals of trimmed, pruned and summarised tool outputs are kept.
//!
//! [`RedisStore`] lets several proxy replicas share originals.
//!
//! [`SqliteStore`] is the default: one embedded SQLite file in WAL mode, so readers never block
//! the writer and a crash of the process (even `kill -9`) loses no committed original. Every
//! `put` is its own transaction, committed before it returns: the engine writes the original
//! before the trimmed text that refers to it is used.
//!
//! Requests use it at once: it holds a few connections ([`pool`]), each used by one operation
//! at a time, and no operation waits longer than the store's deadline, for a connection or for
//! a database another process has locked.

#![deny(missing_docs)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use ctxgc_core::ContentId;
use ctxgc_core::store::{
    EVICT_TO, OriginalStore, SessionId, StateKey, StateStore, StoreError, StoreUsage,
};
use rusqlite::{Connection, OptionalExtension, params};

mod pool;
mod redis;
pub use redis::{
    MAX_CONNECTIONS as REDIS_MAX_CONNECTIONS, RedisOptions, RedisStore, redact as redact_redis_url,
};

use pool::Pool;

/// How long one operation may take by default: a store locked by another process then costs a
/// request at most this long before it fails open.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

/// Connections a store opens on a file (WAL: readers run beside the one writer).
const CONNECTIONS: usize = 4;

/// Originals in a SQLite file.
pub struct SqliteStore {
    pool: Pool<Connection>,
    path: PathBuf,
    /// The bound on the originals' bytes, if any ([`SqliteStore::with_max_bytes`]).
    max_bytes: Option<u64>,
    /// Bytes of originals held (kept as rows come and go).
    bytes: AtomicU64,
    evicted: AtomicU64,
    /// Set while one caller evicts: the others go on (the store may pass its bound by what
    /// they add meanwhile, up to [`HARD_BOUND`]) instead of queueing on the write lock.
    evicting: AtomicBool,
}

/// Rows deleted per eviction transaction: each holds the write lock briefly, so the requests
/// saving originals meanwhile wait milliseconds, not the whole eviction. One transaction of
/// 10% of a 256 MB store held the lock past the 2 s deadline under load (scripts/soak.sh),
/// and every request behind it failed open.
const EVICT_BATCH: usize = 32;

/// How far past its bound the store may go while an eviction runs or fails: past it, new
/// originals are refused (the request fails open) rather than the file growing without end.
const HARD_BOUND: f64 = 1.25;

fn err(e: impl std::fmt::Display) -> StoreError {
    StoreError::backend("sqlite", e)
}

/// Seconds since the Unix epoch (when a row was last written: retention only).
fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Files and folders only their owner can read.
mod private {
    use std::path::Path;

    use super::{StoreError, err};

    /// Creates the missing folders above `file`, each 0700.
    pub fn create_dirs(file: &Path) -> Result<(), StoreError> {
        let missing: Vec<&Path> = file
            .ancestors()
            .skip(1)
            .filter(|d| !d.as_os_str().is_empty())
            .take_while(|d| !d.exists())
            .collect();
        for dir in missing.into_iter().rev() {
            match std::fs::create_dir(dir) {
                // Another process made it meanwhile.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                result => result,
            }
            .map_err(|e| {
                err(format!(
                    "cannot create {} for {}: {e}",
                    dir.display(),
                    file.display()
                ))
            })?;
            restrict(dir, 0o700)?;
        }
        Ok(())
    }

    /// Creates `file` if missing, and makes it 0600.
    pub fn create_file(file: &Path) -> Result<(), StoreError> {
        let mut options = std::fs::OpenOptions::new();
        options.create(true).append(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        options
            .open(file)
            .map_err(|e| err(format!("cannot open {}: {e}", file.display())))?;
        restrict(file, 0o600)
    }

    /// Sets `mode` on `path` when it exists.
    pub fn restrict(path: &Path, mode: u32) -> Result<(), StoreError> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            if path.exists() {
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
                    .map_err(|e| err(format!("cannot restrict {}: {e}", path.display())))?;
            }
        }
        #[cfg(not(unix))]
        let _ = (path, mode);
        Ok(())
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the store at `path`, with its parent directories. What it holds
    /// is every tool output agents saw, so the folders it creates are 0700 and its files 0600,
    /// whatever the umask (an existing file is tightened too).
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_with_timeout(path, DEFAULT_TIMEOUT)
    }

    /// [`SqliteStore::open`] with a deadline for every operation.
    pub fn open_with_timeout(
        path: impl AsRef<Path>,
        timeout: Duration,
    ) -> Result<SqliteStore, StoreError> {
        let path = path.as_ref().to_owned();
        let on_disk = path.as_os_str() != ":memory:";
        if on_disk {
            private::create_dirs(&path)?;
            private::create_file(&path)?;
        }
        let first = connect(&path, timeout)?;
        first
            .execute_batch(
                "CREATE TABLE IF NOT EXISTS originals (
                 session TEXT NOT NULL,
                 id      TEXT NOT NULL,
                 text    TEXT NOT NULL,
                 touched INTEGER NOT NULL DEFAULT 0,
                 PRIMARY KEY (session, id)
             ) WITHOUT ROWID;
             CREATE TABLE IF NOT EXISTS session_state (
                 session TEXT PRIMARY KEY,
                 state   TEXT NOT NULL,
                 touched INTEGER NOT NULL DEFAULT 0
             ) WITHOUT ROWID;
             CREATE INDEX IF NOT EXISTS originals_by_id ON originals (id);",
            )
            .map_err(|e| classify(e, "creating the tables", timeout))?;
        // Stores made before retention existed get the column, counted from now.
        for table in ["originals", "session_state"] {
            let has_touched: bool = first
                .prepare(&format!(
                    "SELECT 1 FROM pragma_table_info('{table}') WHERE name = 'touched'"
                ))
                .and_then(|mut q| q.exists([]))
                .map_err(err)?;
            if !has_touched {
                first
                    .execute_batch(&format!(
                        "ALTER TABLE {table} ADD COLUMN touched INTEGER NOT NULL DEFAULT 0;
                     UPDATE {table} SET touched = {};",
                        now_secs()
                    ))
                    .map_err(err)?;
            }
        }
        let mut connections = vec![first];
        if on_disk {
            // The WAL and shared-memory files appear with the first write; make them now.
            connections[0]
                .execute_batch("BEGIN IMMEDIATE; COMMIT;")
                .map_err(|e| classify(e, "opening", timeout))?;
            for suffix in ["-wal", "-shm"] {
                let mut side = path.clone().into_os_string();
                side.push(suffix);
                private::restrict(Path::new(&side), 0o600)?;
            }
            // An in-memory database is one per connection: it keeps one.
            for _ in 1..CONNECTIONS {
                connections.push(connect(&path, timeout)?);
            }
        }
        Ok(SqliteStore {
            pool: Pool::new(connections, timeout),
            path,
            max_bytes: None,
            bytes: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
            evicting: AtomicBool::new(false),
        })
    }

    /// Keeps at most `max_bytes` of originals: past it, those written or touched longest ago
    /// go first (a session still in use writes its originals again, which touches them).
    pub fn with_max_bytes(mut self, max_bytes: u64) -> Result<SqliteStore, StoreError> {
        self.with("indexing originals by age", |conn| {
            conn.execute_batch(
                "CREATE INDEX IF NOT EXISTS originals_by_touch ON originals (touched);",
            )
        })?;
        self.max_bytes = Some(max_bytes);
        self.recount()?;
        self.evict()?;
        Ok(self)
    }

    /// Counts the originals' bytes again (after deletions the store did not count one by one).
    fn recount(&self) -> Result<(), StoreError> {
        if self.max_bytes.is_none() {
            return Ok(());
        }
        let bytes = self.with("measuring originals", |conn| {
            conn.query_row(
                "SELECT COALESCE(SUM(length(CAST(text AS BLOB))), 0) FROM originals",
                [],
                |r| r.get::<_, i64>(0),
            )
        })?;
        self.bytes.store(bytes.max(0) as u64, Ordering::Release);
        Ok(())
    }

    /// Deletes the originals touched longest ago until the store is back under
    /// [`EVICT_TO`] of its bound, in short transactions. Only one caller evicts at a time;
    /// another that finds the store over its bound meanwhile leaves it to that one.
    fn evict(&self) -> Result<(), StoreError> {
        let Some(max) = self.max_bytes else {
            return Ok(());
        };
        if self.bytes.load(Ordering::Acquire) <= max
            || self
                .evicting
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        {
            return Ok(());
        }
        struct Evicting<'a>(&'a AtomicBool);
        impl Drop for Evicting<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Release);
            }
        }
        let _evicting = Evicting(&self.evicting);
        let target = (max as f64 * EVICT_TO) as u64;
        while self.bytes.load(Ordering::Acquire) > target {
            let (freed, gone) = self.with("evicting the oldest originals", |conn| {
                // IMMEDIATE: the write lock is taken (or waited for, within the deadline) before
                // the read, so no other writer can commit between them and void the deletion.
                let tx = rusqlite::Transaction::new_unchecked(
                    conn,
                    rusqlite::TransactionBehavior::Immediate,
                )?;
                let oldest: Vec<(String, String, i64)> = tx
                    .prepare_cached(
                        "SELECT session, id, length(CAST(text AS BLOB)) FROM originals
                         ORDER BY touched LIMIT ?1",
                    )?
                    .query_map(params![EVICT_BATCH as i64], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                    })?
                    .collect::<rusqlite::Result<_>>()?;
                let (mut freed, mut gone) = (0u64, 0u64);
                {
                    let mut delete =
                        tx.prepare_cached("DELETE FROM originals WHERE session = ?1 AND id = ?2")?;
                    let over = self.bytes.load(Ordering::Acquire).saturating_sub(target);
                    for (session, id, len) in oldest {
                        if freed >= over {
                            break;
                        }
                        delete.execute(params![session, id])?;
                        freed += len.max(0) as u64;
                        gone += 1;
                    }
                }
                tx.commit()?;
                Ok((freed, gone))
            })?;
            let _ = self
                .bytes
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| {
                    Some(b.saturating_sub(freed))
                });
            self.evicted.fetch_add(gone, Ordering::AcqRel);
            if gone == 0 {
                // Nothing left to delete: the count was ahead of the rows.
                self.recount()?;
                break;
            }
        }
        Ok(())
    }

    /// Whether the store holds more than [`HARD_BOUND`] times `max`.
    fn over_hard_bound(&self, max: u64) -> bool {
        self.bytes.load(Ordering::Acquire) as f64 > max as f64 * HARD_BOUND
    }

    /// Whether the store is within its hard bound, after evicting (or waiting, within the
    /// deadline, for the caller that evicts) when it is not.
    fn within_hard_bound(&self, max: u64) -> Result<bool, StoreError> {
        let until = std::time::Instant::now() + self.pool.timeout();
        while self.over_hard_bound(max) {
            self.evict()?;
            if std::time::Instant::now() >= until {
                return Ok(!self.over_hard_bound(max));
            }
            if self.over_hard_bound(max) {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        Ok(true)
    }

    /// An in-memory database (tests).
    pub fn in_memory() -> Result<SqliteStore, StoreError> {
        SqliteStore::open(":memory:")
    }

    /// The default location: `$XDG_DATA_HOME/ctxgc/ctxgc.sqlite`, else
    /// `~/.local/share/ctxgc/ctxgc.sqlite`.
    pub fn default_path() -> PathBuf {
        let base = std::env::var_os("XDG_DATA_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
            .unwrap_or_else(|| PathBuf::from("."));
        base.join("ctxgc").join("ctxgc.sqlite")
    }

    /// The file this store lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reclaims the space deleted rows left (`VACUUM`).
    pub fn compact_file(&self) -> Result<(), StoreError> {
        self.with("compacting the file", |conn| conn.execute_batch("VACUUM;"))
    }

    /// Runs `op` on a free connection, within the deadline.
    fn with<T>(
        &self,
        what: &str,
        op: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        let timeout = self.pool.timeout();
        let conn = self.pool.take().ok_or_else(|| StoreError::Timeout {
            backend: "sqlite",
            what: format!("waiting for a connection ({what})"),
            after: timeout,
        })?;
        op(&conn).map_err(|e| classify(e, what, timeout))
    }

    /// Number of originals stored for a session.
    pub fn count(&self, session: &SessionId) -> Result<u64, StoreError> {
        self.with("counting originals", |conn| {
            conn.query_row(
                "SELECT COUNT(*) FROM originals WHERE session = ?1",
                params![session.as_str()],
                |r| r.get::<_, i64>(0),
            )
        })
        .map(|n| n as u64)
    }
}

/// A connection with the store's settings.
fn connect(path: &Path, timeout: Duration) -> Result<Connection, StoreError> {
    let conn = Connection::open(path).map_err(|e| StoreError::Unavailable {
        backend: "sqlite",
        message: format!("cannot open {}: {e}", path.display()),
    })?;
    // WAL: concurrent readers, one writer, crash-safe commits. NORMAL sync is durable against
    // process crashes; power loss may lose the last commits.
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(|e| classify(e, "opening", timeout))?;
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(err)?;
    // A database another process holds locked is waited for this long, then given up.
    conn.busy_timeout(timeout).map_err(err)?;
    Ok(conn)
}

/// A SQLite error as a store error: busy or locked past the busy timeout is a timeout.
fn classify(e: rusqlite::Error, what: &str, timeout: Duration) -> StoreError {
    use rusqlite::ErrorCode::{DatabaseBusy, DatabaseLocked};
    match e.sqlite_error_code() {
        Some(DatabaseBusy | DatabaseLocked) => StoreError::Timeout {
            backend: "sqlite",
            what: format!("{what} (the database is locked)"),
            after: timeout,
        },
        _ => StoreError::backend("sqlite", format!("{what}: {e}")),
    }
}

impl OriginalStore for SqliteStore {
    fn put_all(
        &self,
        session: &SessionId,
        originals: &[(ContentId, &str)],
    ) -> Result<(), StoreError> {
        if originals.is_empty() {
            return Ok(());
        }
        if let Some(max) = self.max_bytes
            && !self.within_hard_bound(max)?
        {
            return Err(StoreError::backend(
                "sqlite",
                format!(
                    "saving originals: the store holds {} bytes, past its bound of {max} by \
                     more than {:.0}%, and eviction has not caught up",
                    self.bytes.load(Ordering::Acquire),
                    (HARD_BOUND - 1.0) * 100.0
                ),
            ));
        }
        // One transaction: one commit (one fsync of the WAL) for all of them.
        let added = self.with("saving originals", |conn| {
            let tx = conn.unchecked_transaction()?;
            let mut added = 0u64;
            {
                let mut insert = tx.prepare_cached(
                    "INSERT OR IGNORE INTO originals (session, id, text, touched)
                     VALUES (?1, ?2, ?3, ?4)",
                )?;
                let mut touch = tx.prepare_cached(
                    "UPDATE originals SET touched = ?3 WHERE session = ?1 AND id = ?2",
                )?;
                let now = now_secs();
                for (id, text) in originals {
                    let id = id.to_string();
                    if insert.execute(params![session.as_str(), id, text, now])? == 1 {
                        added += text.len() as u64;
                    } else {
                        touch.execute(params![session.as_str(), id, now])?;
                    }
                }
            }
            tx.commit()?;
            Ok(added)
        })?;
        self.bytes.fetch_add(added, Ordering::AcqRel);
        // The originals are committed: the request may use them whether or not the eviction
        // that follows succeeds. A failed eviction is retried by the next save, and the hard
        // bound above keeps the file from growing while it keeps failing.
        if let Err(e) = self.evict() {
            tracing::warn!(error = %e, "the store could not evict its oldest originals; the next save retries");
        }
        Ok(())
    }

    fn usage(&self) -> Option<StoreUsage> {
        Some(StoreUsage {
            bytes: self.bytes.load(Ordering::Acquire),
            max_bytes: self.max_bytes?,
            evicted: self.evicted.load(Ordering::Acquire),
        })
    }

    fn expire(&self, older_than: Duration) -> Result<u64, StoreError> {
        let cutoff = now_secs().saturating_sub(older_than.as_secs() as i64);
        self.with("deleting what outlived the retention", |conn| {
            let originals =
                conn.execute("DELETE FROM originals WHERE touched < ?1", params![cutoff])?;
            let states = conn.execute(
                "DELETE FROM session_state WHERE touched < ?1 AND session NOT LIKE 'ctxgc.%'",
                params![cutoff],
            )?;
            Ok((originals + states) as u64)
        })
        .and_then(|gone| self.recount().map(|()| gone))
    }

    fn get(&self, session: &SessionId, id: ContentId) -> Result<Option<String>, StoreError> {
        self.with("loading an original", |conn| {
            conn.prepare_cached("SELECT text FROM originals WHERE session = ?1 AND id = ?2")?
                .query_row(params![session.as_str(), id.to_string()], |r| r.get(0))
                .optional()
        })
    }

    fn find(&self, scope: &str, id: ContentId) -> Result<Option<(SessionId, String)>, StoreError> {
        // The index on `id` finds the few sessions holding it; the scope is a prefix test, not
        // a LIKE, so no character of it is a wildcard.
        self.with("finding an original", |conn| {
            conn.prepare_cached(
                "SELECT session, text FROM originals
                 WHERE id = ?1 AND substr(session, 1, length(?2)) = ?2
                 ORDER BY touched DESC LIMIT 1",
            )?
            .query_row(params![id.to_string(), scope], |r| {
                Ok((SessionId::new(r.get::<_, String>(0)?), r.get(1)?))
            })
            .optional()
        })
    }
}

impl StateStore for SqliteStore {
    fn put_state(&self, key: StateKey<'_>, state: &str) -> Result<(), StoreError> {
        self.with("saving a state", |conn| {
            conn.prepare_cached(
                "INSERT INTO session_state (session, state, touched) VALUES (?1, ?2, ?3)
                 ON CONFLICT(session) DO UPDATE SET state = excluded.state, touched = excluded.touched",
            )?
            .execute(params![key.name(), state, now_secs()])
        })
        .map(|_| ())
    }

    fn get_state(&self, key: StateKey<'_>) -> Result<Option<String>, StoreError> {
        self.with("loading a state", |conn| {
            conn.prepare_cached("SELECT state FROM session_state WHERE session = ?1")?
                .query_row(params![key.name()], |r| r.get(0))
                .optional()
        })
    }

    fn swap_state(
        &self,
        key: StateKey<'_>,
        expected: Option<&str>,
        state: &str,
    ) -> Result<bool, StoreError> {
        // Each statement is atomic: it changes one row only if the stored state is the one
        // expected.
        self.with("swapping a state", |conn| match expected {
            None => conn
                .prepare_cached(
                    "INSERT INTO session_state (session, state, touched) VALUES (?1, ?2, ?3)
                     ON CONFLICT(session) DO NOTHING",
                )?
                .execute(params![key.name(), state, now_secs()]),
            Some(expected) => conn
                .prepare_cached(
                    "UPDATE session_state SET state = ?2, touched = ?3
                     WHERE session = ?1 AND state = ?4",
                )?
                .execute(params![key.name(), state, now_secs(), expected]),
        })
        .map(|changed| changed == 1)
    }
}

#[cfg(test)]
mod tests;
