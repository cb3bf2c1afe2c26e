//! The `ctxgc` binary, driven as a user would.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::process::{Command, Output, Stdio};

mod agents;
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

#[test]
fn trim_keeps_head_error_and_tail_and_saves_the_original() {
    let log = build_log(20_000, 9_000);
    let saved = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("saved.log");
    let out = ctxgc(
        &[
            "trim",
            "--window",
            "32000",
            "--save-original",
            saved.to_str().unwrap(),
        ],
        log.as_bytes(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("[000000] building target 0 ... ok\n"));
    assert!(text.ends_with("[019999] building target 19999 ... ok\n"));
    assert!(text.contains("] error: linking with `cc` failed: exit status: 1\n"));
    assert!(text.contains("trimmed from terminal output"));
    // The terminal soft limit at a 32K window: 10% of it at 4 bytes per token.
    assert!(text.len() <= 12_800, "{}", text.len());
    assert_eq!(std::fs::read_to_string(&saved).unwrap(), log);
}

#[test]
fn trim_is_identity_below_the_limit_and_idempotent_above() {
    let small = "hello\nworld\n";
    assert_eq!(ctxgc(&["trim"], small.as_bytes()).stdout, small.as_bytes());
    let log = build_log(5_000, 100);
    let once = ctxgc(&["trim", "--window", "32000"], log.as_bytes()).stdout;
    let twice = ctxgc(&["trim", "--window", "32000"], &once).stdout;
    assert_eq!(once, twice);
}

#[test]
fn run_merges_streams_trims_and_passes_the_exit_code_on() {
    let out = ctxgc(
        &[
            "run",
            "--window",
            "32000",
            "--",
            "sh",
            "-c",
            "seq 1 50000; echo 'Traceback (most recent call last):' >&2; seq 1 50000; exit 7",
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(7));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("Traceback (most recent call last):"),
        "stderr merged and kept"
    );
    assert!(
        text.ends_with("50000\nexit status: 7\n"),
        "{}",
        &text[text.len() - 60..]
    );
}

#[test]
fn run_reports_a_missing_command_clearly() {
    let out = ctxgc(&["run", "--", "definitely-not-a-command-xyz"], b"");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("cannot run `definitely-not-a-command-xyz`"),
        "{err}"
    );
}

#[test]
fn head_and_tail_flags_count_lines() {
    let input: String = (1..=100).map(|i| format!("{i}\n")).collect();
    let out = ctxgc(&["trim", "--head", "3", "--tail", "2"], input.as_bytes());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[..3], ["1", "2", "3"]);
    assert_eq!(lines[lines.len() - 2..], ["99", "100"]);
    assert!(
        lines[3].starts_with("[... ") && lines[3].contains("(95 lines, 4-98)"),
        "{}",
        lines[3]
    );
}

#[test]
fn config_prints_toml_and_bad_config_is_named() {
    let out = ctxgc(&["config"], b"");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("[trim]") && text.contains("hard_cap_bytes"),
        "{text}"
    );
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[trim]\nhead_share = 2\n").unwrap();
    let out = ctxgc(&["--config", bad.to_str().unwrap(), "config"], b"");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("bad.toml") && err.contains("head_share"),
        "{err}"
    );
}

#[test]
fn a_reader_that_closes_the_pipe_early_ends_the_command_quietly() {
    // `ctxgc config | head -0`: the reader is gone before the first write.
    let mut child = Command::new(env!("CARGO_BIN_EXE_ctxgc"))
        .arg("config")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked") && err.is_empty(), "{err}");
}

#[test]
fn import_writes_jsonl_and_names_bad_files() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("import-test");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("in")).unwrap();
    std::fs::write(
        dir.join("in/s1.json"),
        r#"[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"bash","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"out"}]"#,
    )
    .unwrap();
    std::fs::write(dir.join("in/notes.json"), r#"{"title":"not a transcript"}"#).unwrap();
    let out = ctxgc(
        &[
            "import",
            dir.join("in").to_str().unwrap(),
            "--out",
            dir.join("out").to_str().unwrap(),
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(1), "one bad file");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("notes.json") && err.contains("not a transcript"),
        "{err}"
    );
    let jsonl = std::fs::read_to_string(dir.join("out/s1.jsonl")).unwrap();
    assert_eq!(jsonl.lines().count(), 3);
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.contains("tool results"), "{table}");
}

#[test]
fn replay_sample_compares_every_policy_and_writes_a_report() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("replay-test");
    std::fs::create_dir_all(&dir).unwrap();
    // A user's own settings replay as a policy named after the file.
    let tight = dir.join("tight.toml");
    std::fs::write(&tight, "[engine]\ntrigger_share = 0.6\n").unwrap();
    let html = dir.join("report.html");
    let out = ctxgc(
        &[
            "replay",
            "--sample",
            "--window",
            "32k",
            "--json",
            "--html",
            html.to_str().unwrap(),
            "--policy",
            &format!(
                "none,codex,claude-code,opencode,hermes,openai-agents-trimmer,anthropic-context-editing,ctxgc,{}",
                tight.display()
            ),
        ],
        b"",
    );
    let json = json_of(&out);
    assert_eq!(json["sessions"], 6);
    let tables = json["tables"].as_array().unwrap();
    assert_eq!(tables.len(), 2, "anthropic and openai cache models");
    for table in tables {
        let rows = table["rows"].as_array().unwrap();
        let policies: Vec<&str> = rows.iter().map(|r| r["policy"].as_str().unwrap()).collect();
        assert_eq!(policies.len(), 9);
        assert!(policies.contains(&"tight"));
        let row = |name: &str| rows.iter().find(|r| r["policy"] == name).unwrap();
        assert!(row("ctxgc")["cost"].as_f64().unwrap() < row("none")["cost"].as_f64().unwrap());
        assert!(
            row("none")["overflows"].as_u64().unwrap() > 0,
            "the samples overflow 32K verbatim"
        );
        assert!(
            row("none")["recall"].as_f64().unwrap() < 1.0,
            "nothing removed, but a request past the window shows nothing"
        );
        assert_eq!(
            row("ctxgc")["overflows"],
            0,
            "ctxgc never passes the window"
        );
        assert_eq!(row("ctxgc")["requests"], row("none")["requests"]);
    }
    assert!(
        !json["validation"].as_array().unwrap().is_empty(),
        "the Gemini samples carry recorded usage"
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("<svg") && page.contains("ctxgc replay report") && page.contains("tight")
    );
}

#[test]
fn replay_rejects_bad_arguments_clearly() {
    let out = ctxgc(&["replay", "--sample", "--window", "huge"], b"");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid window `huge`"));
    // No path: the user's own history, of which an empty home has none.
    let empty = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("empty-home");
    std::fs::create_dir_all(&empty).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ctxgc"))
        .arg("replay")
        .env("HOME", &empty)
        .env("USERPROFILE", &empty)
        .env_remove("CODEX_HOME")
        .env_remove("CLAUDE_CONFIG_DIR")
        .env_remove("HERMES_HOME")
        .env_remove("XDG_DATA_HOME")
        .env_remove("XDG_CONFIG_HOME")
        .current_dir(&empty)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nothing to replay"), "{err}");
    assert!(err.contains("hermes: nothing found (looked in"), "{err}");
    let out = ctxgc(&["replay", "--history", "--agent", "vim"], b"");
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown agent `vim`"));
}
