use super::*;

fn sid(name: &str) -> SessionId {
    SessionId::new(name)
}

fn lineage(session: &SessionId) -> StateKey<'_> {
    StateKey::Lineage(session)
}

#[test]
fn originals_survive_reopening_and_are_per_session() {
    let dir = std::env::temp_dir().join(format!("ctxgc-store-test-{}", std::process::id()));
    let path = dir.join("nested/store.sqlite");
    let id = ContentId::of(b"big output");
    {
        let store = SqliteStore::open(&path).unwrap();
        store.put(&sid("s1"), id, "big output").unwrap();
        store.put(&sid("s1"), id, "big output").unwrap();
        assert_eq!(store.count(&sid("s1")).unwrap(), 1);
    }
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        store.get(&sid("s1"), id).unwrap().as_deref(),
        Some("big output")
    );
    assert_eq!(
        store.get(&sid("s2"), id).unwrap(),
        None,
        "no leak across sessions"
    );
    let mode: String = store
        .pool
        .take()
        .unwrap()
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let _ = std::fs::remove_dir_all(dir);
}

/// Defect guarded: the default store was created 755/644, so other local users could read
/// every stored output.
#[cfg(unix)]
#[test]
fn a_bounded_store_evicts_what_was_touched_longest_ago() {
    let dir = std::env::temp_dir().join(format!("ctxgc-store-bound-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let path = dir.join("s.sqlite");
    let text = |i: usize| format!("{i:0>1000}");
    let store = SqliteStore::open(&path)
        .unwrap()
        .with_max_bytes(10_000)
        .unwrap();
    let s = sid("a");
    let ids: Vec<ContentId> = (0..14).map(|i| ContentId::of(text(i).as_bytes())).collect();
    for (i, id) in ids.iter().enumerate().take(9) {
        store.put(&s, *id, &text(i)).unwrap();
    }
    // Rows written in one second tie on their age: age the first ones by hand.
    store
        .with("aging", |c| {
            c.execute("UPDATE originals SET touched = touched - 100", [])
        })
        .unwrap();
    store.put(&s, ids[0], &text(0)).unwrap(); // touched again: the newest
    for (i, id) in ids.iter().enumerate().skip(9) {
        store.put(&s, *id, &text(i)).unwrap();
    }
    let usage = store.usage().unwrap();
    assert!(usage.bytes <= 10_000 && usage.evicted >= 4, "{usage:?}");
    assert!(store.get(&s, ids[0]).unwrap().is_some(), "touched, kept");
    assert!(store.get(&s, ids[13]).unwrap().is_some(), "newest kept");
    assert_eq!(store.get(&s, ids[1]).unwrap(), None, "oldest gone");
    // Reopened, it counts what it holds.
    drop(store);
    let again = SqliteStore::open(&path)
        .unwrap()
        .with_max_bytes(10_000)
        .unwrap();
    assert_eq!(again.usage().unwrap().bytes, usage.bytes);
    drop(again);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Defect guarded: every saver that found the store over its bound evicted at once, in one
/// long transaction each, and they queued on the write lock past the deadline: under load a
/// bounded store failed one request in nine (scripts/soak.sh). Savers in parallel on a full
/// store all succeed, and the store stays within its hard bound.
#[test]
fn savers_in_parallel_on_a_full_store_all_succeed_within_the_bound() {
    let dir = std::env::temp_dir().join(format!("ctxgc-store-race-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let max = 2_000_000u64;
    let store = std::sync::Arc::new(
        SqliteStore::open(dir.join("s.sqlite"))
            .unwrap()
            .with_max_bytes(max)
            .unwrap(),
    );
    let savers: Vec<_> = (0..4)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                for i in 0..150 {
                    let text = format!("{t}-{i}-{}", "x".repeat(20_000));
                    let id = ContentId::of(text.as_bytes());
                    store
                        .put_all(&sid(&format!("s{t}")), &[(id, &text)])
                        .unwrap();
                    // Savers that passed the bound's check at once may each add theirs.
                    let held = store.usage().unwrap().bytes;
                    assert!(
                        held as f64 <= max as f64 * HARD_BOUND + 4.0 * 21_000.0,
                        "{held}"
                    );
                }
            })
        })
        .collect();
    for s in savers {
        s.join().unwrap();
    }
    let usage = store.usage().unwrap();
    assert!(usage.bytes <= max && usage.evicted > 0, "{usage:?}");
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_store_is_readable_by_its_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let dir = std::env::temp_dir().join(format!("ctxgc-store-modes-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let path = dir.join("a/b/store.sqlite");
    let store = SqliteStore::open(&path).unwrap();
    store.put(&sid("s"), ContentId::of(b"x"), "x").unwrap();
    for d in [dir.clone(), dir.join("a"), dir.join("a/b")] {
        assert_eq!(mode(&d), 0o700, "{}", d.display());
    }
    for f in ["store.sqlite", "store.sqlite-wal", "store.sqlite-shm"] {
        assert_eq!(mode(&dir.join("a/b").join(f)), 0o600, "{f}");
    }
    drop(store);
    // A store an earlier version left world-readable is tightened when opened.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let _store = SqliteStore::open(&path).unwrap();
    assert_eq!(mode(&path), 0o600);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn what_is_not_used_within_the_retention_goes() {
    let dir = std::env::temp_dir().join(format!("ctxgc-store-expiry-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = SqliteStore::open(dir.join("s.sqlite")).unwrap();
    let (old, fresh) = (ContentId::of(b"old"), ContentId::of(b"fresh"));
    store.put(&sid("s"), old, "old").unwrap();
    store.put_state(lineage(&sid("s")), "lineage").unwrap();
    store
        .put_state(StateKey::Server("tenant-secret"), "kept")
        .unwrap();
    // Ten days ago.
    store
        .pool
        .take()
        .unwrap()
        .execute_batch(&format!(
            "UPDATE originals SET touched = {0}; UPDATE session_state SET touched = {0};",
            now_secs() - 10 * 86_400
        ))
        .unwrap();
    store.put(&sid("s"), fresh, "fresh").unwrap();
    let week = std::time::Duration::from_secs(7 * 86_400);
    assert_eq!(store.expire(week).unwrap(), 2);
    assert_eq!(store.get(&sid("s"), old).unwrap(), None);
    assert_eq!(
        store.get(&sid("s"), fresh).unwrap().as_deref(),
        Some("fresh")
    );
    assert_eq!(store.get_state(lineage(&sid("s"))).unwrap(), None);
    assert_eq!(
        store
            .get_state(StateKey::Server("tenant-secret"))
            .unwrap()
            .as_deref(),
        Some("kept"),
        "the store's own keys stay"
    );
    store.compact_file().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A store an earlier version wrote (no `touched` column) opens, keeps its rows, and counts
/// their retention from the upgrade.
#[test]
fn stores_from_before_retention_are_migrated() {
    let dir = std::env::temp_dir().join(format!("ctxgc-store-old-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("old.sqlite");
    let id = ContentId::of(b"kept");
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
                "CREATE TABLE originals (session TEXT NOT NULL, id TEXT NOT NULL, text TEXT NOT NULL,
                     PRIMARY KEY (session, id)) WITHOUT ROWID;
                 CREATE TABLE session_state (session TEXT PRIMARY KEY, state TEXT NOT NULL) WITHOUT ROWID;",
            )
            .unwrap();
        conn.execute(
            "INSERT INTO originals (session, id, text) VALUES ('s', ?1, 'kept')",
            params![id.to_string()],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO session_state (session, state) VALUES ('lineage/s', 'lineage')",
            [],
        )
        .unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.get(&sid("s"), id).unwrap().as_deref(), Some("kept"));
    assert_eq!(
        store.expire(std::time::Duration::from_secs(3_600)).unwrap(),
        0,
        "counted from the upgrade, not from 1970"
    );
    assert_eq!(
        store.get_state(lineage(&sid("s"))).unwrap().as_deref(),
        Some("lineage")
    );
    store.put(&sid("s"), ContentId::of(b"new"), "new").unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Defect guarded: with the store file locked by another process, every request waited
/// SQLite's busy timeout in steps of 5 s under one global lock. An operation now gives up
/// at the store's deadline, with an error that says so (the proxy then fails open).
#[test]
fn a_database_locked_by_another_process_times_out_at_the_deadline() {
    let dir = std::env::temp_dir().join(format!("ctxgc-store-locked-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let path = dir.join("s.sqlite");
    let deadline = Duration::from_millis(300);
    let store = SqliteStore::open_with_timeout(&path, deadline).unwrap();
    store
        .put(&sid("s"), ContentId::of(b"before"), "before")
        .unwrap();
    // Another process's connection (SQLite locks the file, not the process) holds the
    // write lock in an open transaction.
    let other = Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE;").unwrap();
    other
        .execute("INSERT INTO session_state VALUES ('x', 'y', 0)", [])
        .unwrap();
    let started = std::time::Instant::now();
    let e = store
        .put(&sid("s"), ContentId::of(b"during"), "during")
        .unwrap_err();
    let waited = started.elapsed();
    assert!(matches!(e, StoreError::Timeout { .. }), "{e}");
    assert!(e.to_string().contains("locked"), "{e}");
    assert!(
        waited >= deadline / 2 && waited < deadline * 4,
        "gave up after {waited:?}, the deadline is {deadline:?}"
    );
    other.execute_batch("COMMIT;").unwrap();
    drop(other);
    store
        .put(&sid("s"), ContentId::of(b"after"), "after")
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn requests_use_the_store_at_once() {
    let dir = std::env::temp_dir().join(format!("ctxgc-store-threads-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = SqliteStore::open(dir.join("s.sqlite")).unwrap();
    std::thread::scope(|scope| {
        for t in 0..8 {
            let store = &store;
            scope.spawn(move || {
                let session = sid(&format!("s{t}"));
                for i in 0..50 {
                    let text = format!("thread {t} output {i}");
                    store
                        .put(&session, ContentId::of(text.as_bytes()), &text)
                        .unwrap();
                    assert_eq!(
                        store.get(&session, ContentId::of(text.as_bytes())).unwrap(),
                        Some(text)
                    );
                }
                let key = lineage(&session);
                let mut seen = None;
                for i in 0..20 {
                    let next = format!("{i}");
                    assert!(store.swap_state(key, seen.as_deref(), &next).unwrap());
                    seen = Some(next);
                }
            });
        }
    });
    assert_eq!(store.count(&sid("s3")).unwrap(), 50);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn unusable_paths_are_named() {
    let e = SqliteStore::open("/proc/definitely/not/here.sqlite")
        .err()
        .unwrap();
    assert!(e.to_string().contains("/proc/definitely/not"), "{e}");
}

/// An id alone finds its original, only within the scope asked for: the MCP server and
/// `ctxgc recall` are shown an id, not the session that filed it.
#[test]
fn an_id_alone_finds_its_original_within_the_scope() {
    let store = SqliteStore::in_memory().unwrap();
    let id = ContentId::of(b"tenant a's output");
    store
        .put(&sid("aaaa.c-1"), id, "tenant a's output")
        .unwrap();
    let found = store.find("aaaa.", id).unwrap();
    assert_eq!(
        found,
        Some((sid("aaaa.c-1"), "tenant a's output".to_owned()))
    );
    assert_eq!(
        store.find("", id).unwrap().map(|f| f.0),
        Some(sid("aaaa.c-1"))
    );
    assert_eq!(store.find("bbbb.", id).unwrap(), None, "another tenant's");
    assert_eq!(store.find("aa%.", id).unwrap(), None, "no wildcard");
    let other = ContentId::of(b"nothing");
    assert_eq!(store.find("", other).unwrap(), None);
}
