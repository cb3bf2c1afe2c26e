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
    // An id alone finds it, from either replica, within the scope asked for only.
    assert_eq!(
        replica_b.find("s", id).unwrap(),
        Some((s1.clone(), text.clone()))
    );
    assert_eq!(replica_b.find("t", id).unwrap(), None, "another scope's");
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

/// What a team's Redis asks of a client: a password, an ACL user, TLS with its own CA.
mod secured {
    use super::*;
    use ctxgc_store::RedisOptions;
    use ctxgc_test_support::redis_server::{make_certificates, start_with};

    fn round_trip(store: &RedisStore) {
        let s = SessionId::new("team.s-1");
        let id = ContentId::of(b"the original");
        store.put(&s, id, "the original").unwrap();
        assert_eq!(store.get(&s, id).unwrap().as_deref(), Some("the original"));
        assert!(store.swap_state(StateKey::Lineage(&s), None, "l1").unwrap());
        assert!(
            store
                .swap_state(StateKey::Lineage(&s), Some("l1"), "l2")
                .unwrap()
        );
        assert!(
            !store
                .swap_state(StateKey::Lineage(&s), Some("l1"), "l3")
                .unwrap()
        );
    }

    fn port_of(url: &str) -> &str {
        url.rsplit(':').next().unwrap()
    }

    #[test]
    fn a_password_protected_redis_is_reached_and_a_wrong_password_is_a_clear_error() {
        let args = ["--requirepass", "pass-SECRET-1"].map(String::from);
        let Some((_server, url)) = start_with(&args) else {
            return;
        };
        let port = port_of(&url);
        let store =
            RedisStore::connect(&format!("redis://:pass-SECRET-1@127.0.0.1:{port}/3")).unwrap();
        round_trip(&store);
        for wrong in [
            format!("redis://:wrong-SECRET-2@127.0.0.1:{port}"),
            format!("redis://127.0.0.1:{port}"),
        ] {
            let e = RedisStore::connect(&wrong).err().unwrap().to_string();
            assert!(!e.contains("SECRET"), "the password is never shown: {e}");
            assert!(e.contains(&format!("127.0.0.1:{port}")), "{e}");
            assert!(
                e.contains("WRONGPASS") || e.contains("NOAUTH") || e.contains("uthentication"),
                "{e}"
            );
        }
    }

    #[test]
    fn an_acl_user_is_reached_with_its_own_key_prefix() {
        let args = [
            "--user",
            "default",
            "off",
            "--user",
            "ctxgc",
            "on",
            ">user-SECRET-3",
            "~team-a:*",
            "+@all",
        ]
        .map(String::from);
        let Some((_server, url)) = start_with(&args) else {
            return;
        };
        let port = port_of(&url);
        let with_prefix = |prefix: &str| {
            RedisStore::connect_with(
                &format!("redis://ctxgc:user-SECRET-3@127.0.0.1:{port}"),
                RedisOptions {
                    key_prefix: prefix.into(),
                    ..RedisOptions::default()
                },
            )
            .unwrap()
        };
        // The user may touch `team-a:*` keys only: the store writes nowhere else.
        round_trip(&with_prefix("team-a"));
        let outside = with_prefix("team-b");
        let e = outside
            .put(&SessionId::new("s"), ContentId::of(b"x"), "x")
            .unwrap_err()
            .to_string();
        assert!(e.contains("NOPERM") || e.contains("permission"), "{e}");
        assert!(!e.contains("SECRET"), "{e}");
    }

    #[test]
    fn a_tls_redis_is_reached_with_the_operators_ca() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = std::env::temp_dir().join(format!("ctxgc-redis-tls-{}", std::process::id()));
        let (ca, cert, key) = make_certificates(&dir);
        let args = [
            "--tls-cert-file".to_owned(),
            cert.display().to_string(),
            "--tls-key-file".to_owned(),
            key.display().to_string(),
            "--tls-ca-cert-file".to_owned(),
            ca.display().to_string(),
            "--tls-auth-clients".to_owned(),
            "no".to_owned(),
            "--requirepass".to_owned(),
            "tls-SECRET-4".to_owned(),
        ];
        let Some((_server, url)) = start_with(&args) else {
            return;
        };
        let port = port_of(&url);
        let tls_url = format!("rediss://:tls-SECRET-4@127.0.0.1:{port}");
        let store = RedisStore::connect_with(
            &tls_url,
            RedisOptions {
                ca_file: Some(ca.clone()),
                ..RedisOptions::default()
            },
        )
        .unwrap();
        round_trip(&store);
        // Two replicas share it.
        let other = RedisStore::connect_with(
            &tls_url,
            RedisOptions {
                ca_file: Some(ca),
                ..RedisOptions::default()
            },
        )
        .unwrap();
        assert_eq!(
            other
                .get(&SessionId::new("team.s-1"), ContentId::of(b"the original"))
                .unwrap()
                .as_deref(),
            Some("the original")
        );
        // Without the CA, the server's certificate is not trusted.
        let e = RedisStore::connect(&tls_url).err().unwrap().to_string();
        assert!(!e.contains("SECRET"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_compare_and_set_script_is_sent_once_then_called_by_its_sha() {
        let Some((_server, url)) = start_with(&[]) else {
            return;
        };
        let store = RedisStore::connect(&url).unwrap();
        let s = SessionId::new("s");
        let mut expected: Option<String> = None;
        for k in 0..20 {
            let next = format!("state {k}");
            assert!(
                store
                    .swap_state(StateKey::Lineage(&s), expected.as_deref(), &next)
                    .unwrap()
            );
            expected = Some(next);
        }
        let client = redis_client(&url);
        let mut con = client.get_connection().unwrap();
        let stats: String = ::redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut con)
            .unwrap();
        let calls = |name: &str| {
            stats
                .lines()
                .find(|l| l.starts_with(&format!("cmdstat_{name}:")))
                .and_then(|l| l.split("calls=").nth(1))
                .and_then(|v| v.split(',').next())
                .map_or(0, |v| v.parse::<u64>().unwrap())
        };
        // The first call finds no script (NOSCRIPT), loads it once, and calls it again by SHA.
        assert_eq!(calls("evalsha"), 21, "{stats}");
        assert_eq!(calls("script|load"), 1, "{stats}");
        assert_eq!(
            calls("eval"),
            0,
            "the script is never sent with a call: {stats}"
        );
    }

    fn redis_client(url: &str) -> ::redis::Client {
        ::redis::Client::open(url).unwrap()
    }
}
