//! A throwaway `redis-server` for tests (installed by `.ci/run` when missing).

use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running server, killed when dropped.
pub struct Server(Child);

impl Server {
    /// Stops the server's process (SIGSTOP): it accepts nothing and answers nothing.
    pub fn pause(&self) {
        signal(self.0.id(), "-STOP");
    }

    /// Lets a paused server go on (SIGCONT): it answers what it was sent meanwhile.
    pub fn resume(&self) {
        signal(self.0.id(), "-CONT");
    }
}

fn signal(pid: u32, which: &str) {
    let status = Command::new("kill")
        .args([which, &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill {which} {pid}");
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts a server on a free port; `None` (test skipped) when redis-server is not installed,
/// which fails on CI.
pub fn start() -> Option<(Server, String)> {
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
    assert!(
        std::env::var_os("CI").is_none(),
        "redis-server did not accept connections within 5 s"
    );
    None
}
