//! The `ctxgc` binary, driven as a user would.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::process::{Command, Output, Stdio};

mod commands;
mod reports;
mod serving;

fn ctxgc(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ctxgc"))
        .args(args)
        .current_dir(env!("CARGO_TARGET_TMPDIR"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let data = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&data);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

fn build_log(lines: usize, error_at: usize) -> String {
    let mut log = String::new();
    for i in 0..lines {
        log.push_str(&format!("[{i:06}] building target {i} ... ok\n"));
        if i == error_at {
            log.push_str("error: linking with `cc` failed: exit status: 1\n");
        }
    }
    log
}

/// A raw HTTP/1.1 POST; returns the status code.
fn post(addr: &str, path: &str, body: &str) -> Option<u16> {
    use std::io::{Read, Write as _};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .ok()?;
    write!(s, "POST {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.split_whitespace().nth(1)?.parse().ok()
}

/// A minimal upstream: answers every request with a small JSON body.
fn tiny_upstream() -> String {
    recording_upstream(None)
}

/// [`tiny_upstream`] that also keeps, when given `bodies`, every request body it received.
fn recording_upstream(bodies: Option<std::sync::Arc<std::sync::Mutex<Vec<String>>>>) -> String {
    use std::io::{BufRead, BufReader, Read, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let bodies = bodies.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(&stream);
                let mut len = 0usize;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0; len];
                let _ = reader.read_exact(&mut body);
                if let Some(bodies) = &bodies {
                    bodies
                        .lock()
                        .unwrap()
                        .push(String::from_utf8_lossy(&body).into_owned());
                }
                let reply = r#"{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}"#;
                let _ = (&stream).write_all(format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reply}", reply.len()).as_bytes());
            });
        }
    });
    addr
}

/// A fresh test folder, its SQLite store path, and a free loopback address.
fn serve_setup(name: &str) -> (std::path::PathBuf, String) {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    (dir.join("store.sqlite"), format!("127.0.0.1:{port}"))
}

/// Starts `ctxgc serve` through `sh -c` with `shell` before it (a `ulimit`, say) and waits for
/// its listener.
fn spawn_serve(
    shell: &str,
    addr: &str,
    upstream: &str,
    db: &std::path::Path,
    stderr: Stdio,
) -> std::process::Child {
    let script = format!(
        "{shell} exec {} serve --listen {addr} --openai-upstream http://{upstream} --store sqlite:{}",
        env!("CARGO_BIN_EXE_ctxgc"),
        db.display()
    );
    let child = Command::new("sh")
        .args(["-c", &script])
        .stderr(stderr)
        .spawn()
        .unwrap();
    for _ in 0..100 {
        if std::net::TcpStream::connect(addr).is_ok() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child
}

/// The JSON a successful command printed (its stderr shown when it failed).
fn json_of(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The string `field` of each object of a JSON array.
fn field_of_each<'a>(array: &'a serde_json::Value, field: &str) -> Vec<&'a str> {
    array
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o[field].as_str().unwrap())
        .collect()
}

fn client_fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../ctxgc-formats/tests/fixtures/client-logs")
        .join(name)
}

/// Copies `from` (a file or a folder) to `to`.
fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    if from.is_dir() {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            copy_tree(&entry.path(), &to.join(entry.file_name()));
        }
    } else {
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(from, to).unwrap();
    }
}
