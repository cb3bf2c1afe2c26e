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
    start_with(&[])
}

/// Starts a server on a free port with these extra arguments (`--requirepass`, ACL users, TLS:
/// then the port given is its TLS port). Returns it and `redis://127.0.0.1:PORT`.
pub fn start_with(extra: &[String]) -> Option<(Server, String)> {
    // Tests of one binary start their servers one at a time: a port found free could otherwise
    // be bound by another test's server first, and this one, failing to bind, might still be
    // running when the port answers (slow to exit on a loaded machine), so the test would talk
    // to the other test's server until that one stopped ("connection refused" on CI).
    static STARTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = STARTING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    // A port found free can still be taken by another process before this server binds it:
    // then it exits, and another port is tried.
    for _ in 0..5 {
        match start_on_a_free_port(extra) {
            Started::Up(server, url) => return Some((server, url)),
            Started::Missing => return None,
            Started::PortTaken => continue,
        }
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "redis-server did not start on a free port in 5 tries"
    );
    None
}

enum Started {
    Up(Server, String),
    Missing,
    PortTaken,
}

fn start_on_a_free_port(extra: &[String]) -> Started {
    let Some(port) = std::net::TcpListener::bind("127.0.0.1:0")
        .ok()
        .and_then(|l| l.local_addr().ok())
        .map(|a| a.port())
    else {
        return Started::PortTaken;
    };
    let tls = extra.iter().any(|a| a == "--tls-cert-file");
    let mut args: Vec<String> = if tls {
        vec![
            "--port".into(),
            "0".into(),
            "--tls-port".into(),
            port.to_string(),
        ]
    } else {
        vec!["--port".into(), port.to_string()]
    };
    args.extend(
        ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
            .iter()
            .map(|s| s.to_string()),
    );
    args.extend(extra.iter().cloned());
    let child = Command::new("redis-server")
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let Ok(child) = child else {
        assert!(
            std::env::var_os("CI").is_none(),
            "redis-server is missing on CI: .ci/run should install it"
        );
        eprintln!("redis-server not installed: skipped (apt-get install redis-server)");
        return Started::Missing;
    };
    let mut server = Server(child);
    for _ in 0..100 {
        // Ours exited (the port was taken meanwhile): whatever answers there is not ours.
        if matches!(server.0.try_wait(), Ok(Some(_))) {
            return Started::PortTaken;
        }
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            // Listening; still ours a moment later (a bind failure ends it at once).
            std::thread::sleep(Duration::from_millis(20));
            if matches!(server.0.try_wait(), Ok(Some(_))) {
                return Started::PortTaken;
            }
            return Started::Up(server, format!("redis://127.0.0.1:{port}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "redis-server did not accept connections within 5 s"
    );
    Started::PortTaken
}

/// A CA and a certificate for 127.0.0.1 signed by it, made with openssl in `dir`: returns the
/// paths of the CA certificate, the server certificate and the server key.
pub fn make_certificates(
    dir: &std::path::Path,
) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    std::fs::create_dir_all(dir).unwrap();
    let path = |name: &str| dir.join(name);
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl runs");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=ctxgc test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ]);
    std::fs::write(
        path("san.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "san.ext",
        "-out",
        "server.crt",
    ]);
    (path("ca.crt"), path("server.crt"), path("server.key"))
}
