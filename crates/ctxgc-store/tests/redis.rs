//! The Redis store against a real `redis-server` (installed by `.ci/run` when missing).

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ctxgc_core::ContentId;
use ctxgc_core::store::{OriginalStore, StateStore};
use ctxgc_store::RedisStore;

struct Server(Child);
impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start() -> Option<(Server, String)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()?
        .port();
    let child = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(Stdio::null())
        .spawn();
    let Ok(child) = child else {
        assert!(
            std::env::var_os("CI").is_none(),
            "redis-server is missing on CI: .ci/run should install it"
        );
        eprintln!("redis-server not installed: skipped (apt-get install redis-server)");
        return None;
    };
    let server = Server(child);
    let url = format!("redis://127.0.0.1:{port}");
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Some((server, url));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

#[test]
fn replicas_share_originals_through_redis() {
    let Some((server, url)) = start() else { return };
    let mut replica_a = RedisStore::connect(&url).unwrap();
    let replica_b = RedisStore::connect(&url).unwrap();
    let text = "line one\nline two é\n".repeat(1000);
    let id = ContentId::of(text.as_bytes());
    replica_a.put("s1", id, &text).unwrap();
    replica_a
        .put("s1", id, "a later write does not replace the original")
        .unwrap();
    assert_eq!(
        replica_b.get("s1", id).unwrap().as_deref(),
        Some(text.as_str())
    );
    assert_eq!(replica_b.get("s2", id).unwrap(), None, "per session");
    replica_a.put_state("s1", "lineage-1").unwrap();
    assert_eq!(
        replica_b.get_state("s1").unwrap().as_deref(),
        Some("lineage-1"),
        "state shared too"
    );
    drop(server);
    let e = replica_b.get("s1", id).unwrap_err().to_string();
    assert!(
        e.starts_with("original store: redis: cannot connect"),
        "{e}"
    );
    assert!(RedisStore::connect("redis://").is_err());
}
