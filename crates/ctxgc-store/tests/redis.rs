//! The Redis store against a real `redis-server` (installed by `.ci/run` when missing).

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ctxgc_test_support::redis_server::start;

use ctxgc_core::ContentId;
use ctxgc_core::store::{OriginalStore, SessionId, StateKey, StateStore};
use ctxgc_store::RedisStore;

#[test]
fn replicas_share_originals_through_redis() {
    let Some((server, url)) = start() else { return };
    let (s1, s2) = (SessionId::new("s1"), SessionId::new("s2"));
    let replica_a = RedisStore::connect(&url).unwrap();
    let replica_b = RedisStore::connect(&url).unwrap();
    let text = "line one\nline two é\n".repeat(1000);
    let id = ContentId::of(text.as_bytes());
    replica_a.put(&s1, id, &text).unwrap();
    replica_a
        .put(&s1, id, "a later write does not replace the original")
        .unwrap();
    assert_eq!(
        replica_b.get(&s1, id).unwrap().as_deref(),
        Some(text.as_str())
    );
    assert_eq!(replica_b.get(&s2, id).unwrap(), None, "per session");
    replica_a
        .put_state(StateKey::Lineage(&s1), "lineage-1")
        .unwrap();
    assert_eq!(
        replica_b
            .get_state(StateKey::Lineage(&s1))
            .unwrap()
            .as_deref(),
        Some("lineage-1"),
        "state shared too"
    );
    assert_eq!(replica_b.get_state(StateKey::Agent(&s1)).unwrap(), None);
    // Two replicas move one lineage on from the same state: one wins, the other sees it lost.
    let key = StateKey::Lineage(&s1);
    assert!(replica_a.swap_state(key, Some("lineage-1"), "a").unwrap());
    assert!(!replica_b.swap_state(key, Some("lineage-1"), "b").unwrap());
    assert!(replica_b.swap_state(key, Some("a"), "b").unwrap());
    assert!(
        !replica_a
            .swap_state(StateKey::Agent(&s2), Some(""), "x")
            .unwrap()
    );
    assert!(
        replica_a
            .swap_state(StateKey::Agent(&s2), None, "x")
            .unwrap()
    );
    assert!(
        !replica_b
            .swap_state(StateKey::Agent(&s2), None, "y")
            .unwrap()
    );
    // Several originals in one pipeline, from several threads at once.
    let texts: Vec<String> = (0..50)
        .map(|i| format!("output {i}\n").repeat(100))
        .collect();
    std::thread::scope(|scope| {
        for chunk in texts.chunks(10) {
            let store = &replica_a;
            let s2 = &s2;
            scope.spawn(move || {
                let batch: Vec<(ContentId, &str)> = chunk
                    .iter()
                    .map(|t| (ContentId::of(t.as_bytes()), t.as_str()))
                    .collect();
                store.put_all(s2, &batch).unwrap();
            });
        }
    });
    for t in &texts {
        assert_eq!(
            replica_b
                .get(&s2, ContentId::of(t.as_bytes()))
                .unwrap()
                .as_deref(),
            Some(t.as_str())
        );
    }
    drop(server);
    let e = replica_b.get(&s1, id).unwrap_err();
    assert!(
        matches!(e, ctxgc_core::store::StoreError::Unavailable { .. }),
        "{e}"
    );
    assert!(e.to_string().contains("cannot connect"), "{e}");
    assert!(RedisStore::connect("redis://").is_err());
}

/// Defect guarded: a command that timed out while Redis stalled left its connection in use; when
/// Redis resumed, the next command (another session's) read the stalled command's reply, and
/// Bob's request carried Alice's secret.
#[test]
fn a_stalled_redis_never_hands_one_sessions_reply_to_another() {
    let Some((server, url)) = start() else { return };
    let timeout = std::time::Duration::from_millis(300);
    let store = RedisStore::connect_with_timeout(&url, timeout).unwrap();
    let (alice, bob) = (SessionId::new("alice"), SessionId::new("bob"));
    let (alice, bob) = (StateKey::Agent(&alice), StateKey::Agent(&bob));
    store
        .put_state(alice, "ALICE-ONLY: prod db password is hunter2")
        .unwrap();
    store.put_state(bob, "bob's own state").unwrap();
    server.pause();
    let started = std::time::Instant::now();
    let stalled = store.get_state(alice);
    let waited = started.elapsed();
    assert!(
        matches!(stalled, Err(ctxgc_core::store::StoreError::Timeout { .. })),
        "{stalled:?}"
    );
    assert!(
        waited < timeout * 3,
        "one deadline, not retried into two: {waited:?}"
    );
    server.resume();
    // Redis now answers the stalled GET on the abandoned connection.
    std::thread::sleep(std::time::Duration::from_millis(200));
    for _ in 0..3 {
        assert_eq!(
            store.get_state(bob).unwrap().as_deref(),
            Some("bob's own state")
        );
    }
    assert_eq!(
        store.get_state(alice).unwrap().as_deref(),
        Some("ALICE-ONLY: prod db password is hunter2")
    );
}

#[test]
fn keys_expire_after_the_retention_except_the_stores_own() {
    let Some((_server, url)) = start() else {
        return;
    };
    let store = RedisStore::connect(&url)
        .unwrap()
        .with_retention(std::time::Duration::from_secs(1));
    let id = ContentId::of(b"x");
    let s = SessionId::new("s");
    store.put(&s, id, "x").unwrap();
    store.put_state(StateKey::Lineage(&s), "lineage").unwrap();
    assert!(
        store
            .swap_state(StateKey::Agent(&s), None, "agent")
            .unwrap()
    );
    store
        .put_state(StateKey::Server("tenant-secret"), "kept")
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2_200));
    assert_eq!(store.get(&s, id).unwrap(), None);
    assert_eq!(store.get_state(StateKey::Lineage(&s)).unwrap(), None);
    assert_eq!(store.get_state(StateKey::Agent(&s)).unwrap(), None);
    assert_eq!(
        store
            .get_state(StateKey::Server("tenant-secret"))
            .unwrap()
            .as_deref(),
        Some("kept")
    );
}
