//! The `ctxgc` binary, driven as a user would.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::process::{Command, Output, Stdio};

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

#[test]
fn kill_9_in_the_middle_of_load_loses_no_stored_original() {
    let (db, addr) = serve_setup("kill9");
    let forwarded = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let upstream = recording_upstream(Some(forwarded.clone()));
    let mut proxy = spawn_serve("", &addr, &upstream, &db, Stdio::null());
    let acknowledged = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let (addr, acknowledged) = (addr.clone(), acknowledged.clone());
            std::thread::spawn(move || {
                for i in 0..10_000 {
                    let output: String = (0..3000).map(|l| format!("worker {w} request {i} line {l}: compiling\n")).collect();
                    let body = serde_json::json!({"model": "gpt-5", "prompt_cache_key": "k", "messages": [
                        {"role": "user", "content": format!("task {w}")},
                        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
                        {"role": "tool", "tool_call_id": "c1", "content": output}
                    ]});
                    match post(&addr, "/v1/chat/completions", &body.to_string()) {
                        Some(200) => acknowledged.lock().unwrap().push((w, i, output)),
                        _ => return,
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    proxy.kill().unwrap(); // SIGKILL
    proxy.wait().unwrap();
    for w in workers {
        w.join().unwrap();
    }
    let acknowledged = acknowledged.lock().unwrap();
    // A request the proxy could not rewrite in time (no free rewrite slot within its deadline
    // on a loaded machine) went upstream whole, as fail-open says: it had no original to keep.
    // Every other acknowledged request went upstream trimmed, and its original must be stored.
    let forwarded = forwarded.lock().unwrap();
    let trimmed: Vec<_> = acknowledged
        .iter()
        .filter(|(w, i, _)| {
            let middle = format!("worker {w} request {i} line 1500: compiling");
            !forwarded.iter().any(|body| body.contains(&middle))
        })
        .collect();
    assert!(
        trimmed.len() > 10,
        "only {} of {} acknowledged requests went upstream trimmed before the kill",
        trimmed.len(),
        acknowledged.len()
    );
    // Reopen the store as a restarted proxy would and find every trimmed request's original.
    let store = ctxgc_store::SqliteStore::open(&db).unwrap();
    use ctxgc_core::store::OriginalStore;
    for (w, _, output) in trimmed {
        let task = format!("task {w}");
        // The session the proxy filed it under: the client's own `prompt_cache_key`, in the
        // anonymous tenant (no credential was sent).
        let request = ctxgc_formats::ApiRequest {
            api: ctxgc_formats::Api::ChatCompletions,
            body: serde_json::json!({"model": "gpt-5", "prompt_cache_key": "k", "messages": [
                {"role": "user", "content": task}
            ]}),
        };
        let session = ctxgc_proxy::intake::identity::session(
            &ctxgc_proxy::intake::identity::Tenant::anonymous(),
            &request,
            &Default::default(),
        );
        let id = ctxgc_core::ContentId::of(output.as_bytes());
        assert!(
            store.get(&session, id).unwrap().as_deref() == Some(output.as_str()),
            "lost the original of {task} (id {id})"
        );
    }
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

#[test]
fn import_out_never_overwrites_and_keeps_same_named_sessions_apart() {
    // The same instance in two sets used to be written to one file, the second silently
    // replacing the first.
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("import-unique");
    let _ = std::fs::remove_dir_all(&dir);
    let session = r#"[{"role":"user","content":"hi"},{"role":"assistant","content":"ok"}]"#;
    for set in ["set-a", "set-b"] {
        std::fs::create_dir_all(dir.join(set)).unwrap();
        std::fs::write(dir.join(set).join("same.json"), session).unwrap();
    }
    let out_dir = dir.join("out");
    let args = [
        "import".to_owned(),
        dir.join("set-a").to_str().unwrap().to_owned(),
        dir.join("set-b").to_str().unwrap().to_owned(),
        "--out".to_owned(),
        out_dir.to_str().unwrap().to_owned(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = ctxgc(&args, b"");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("Wrote 2 session file(s)"), "{stdout}");
    let mut names: Vec<String> = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["same.jsonl", "set-b__same.jsonl"]);
    // Again into the same folder: nothing is overwritten, and the command says so.
    let out = ctxgc(&args, b"");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("never overwritten"), "{err}");
}

#[test]
fn replay_of_client_logs_reports_recorded_foresight_causes_and_where_tokens_go() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("client-logs");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("projects/shop")).unwrap();
    std::fs::create_dir_all(dir.join("sessions/2025/12/02")).unwrap();
    std::fs::copy(
        client_fixture("claude-code-synthetic.jsonl"),
        dir.join("projects/shop/5e55a0c0.jsonl"),
    )
    .unwrap();
    std::fs::copy(
        client_fixture("codex-rollout-synthetic.jsonl"),
        dir.join("sessions/2025/12/02/rollout-2025-12-02T09-00-00-0199aaaa.jsonl"),
    )
    .unwrap();
    std::fs::write(dir.join("projects/shop/settings.txt"), "theme = dark\n").unwrap();
    let html = dir.join("report.html");
    let out = ctxgc(
        &[
            "replay",
            dir.to_str().unwrap(),
            "--window",
            "200k",
            "--by-tool",
            "--misses",
            "--json",
            "--html",
            html.to_str().unwrap(),
        ],
        b"",
    );
    let json = json_of(&out);
    assert_eq!(
        json["sessions"], 3,
        "main conversation, its sub-agent, the rollout"
    );
    let skipped = json["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 1);
    assert!(
        skipped[0]["path"]
            .as_str()
            .unwrap()
            .ends_with("settings.txt")
    );
    assert!(
        skipped[0]["why"]
            .as_str()
            .unwrap()
            .contains("not a transcript")
    );
    // A Claude Code log and a Codex rollout: billed by two providers, so no one table prices
    // every session as billed, and the bill is compared per set under each session's own cache.
    let caches = field_of_each(&json["validation"], "cache");
    assert!(
        caches.contains(&"anthropic") && caches.contains(&"openai"),
        "{caches:?}"
    );
    for table in json["tables"].as_array().unwrap() {
        let rows = table["rows"].as_array().unwrap();
        assert_ne!(
            rows[0]["policy"], "recorded",
            "a recorded row only where every session is priced as billed"
        );
        let row = |name: &str| rows.iter().find(|r| r["policy"] == name).unwrap();
        assert_eq!(row("foresight")["gap_closed"].as_f64(), Some(1.0));
        assert_eq!(row("none")["gap_closed"].as_f64(), Some(0.0));
        assert!(row("foresight")["cost"].as_f64() < row("none")["cost"].as_f64());
        assert_eq!(row("ctxgc")["path"], "client");
        assert_eq!(row("codex")["path"], "underlying");
        assert_eq!(row("foresight")["recall"], row("none")["recall"]);
    }
    // What the policies in front of the client hid that it showed: one entry per such policy
    // (not `none`, not the ones replacing the client's context), none of it hidden by `none`.
    let misses = json["client_misses"].as_array().unwrap();
    let policies = field_of_each(&json["client_misses"], "policy");
    assert!(
        policies.contains(&"ctxgc") && policies.contains(&"foresight"),
        "{policies:?}"
    );
    assert!(
        !policies.contains(&"none") && !policies.contains(&"codex"),
        "{policies:?}"
    );
    for m in misses {
        let total = m["total"].as_u64().unwrap();
        let by_tool: u64 = m["by_tool"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p[1].as_u64().unwrap())
            .sum();
        assert_eq!(by_tool, total, "{m}");
    }
    let causes = field_of_each(&json["cache_writes"], "cause");
    assert!(
        causes.contains(&"cold_start") && causes.contains(&"growth"),
        "{causes:?}"
    );
    assert!(causes.contains(&"client_compaction"), "{causes:?}");
    let kinds: Vec<&str> = json["by_tool"][0]["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kind"].as_str().unwrap())
        .collect();
    for kind in [
        "Read",
        "shell: test runs",
        "Grep",
        "system prompt and tools",
    ] {
        assert!(kinds.contains(&kind), "{kind} missing from {kinds:?}");
    }
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("Why the cache was written") && page.contains("gap closed"));
}

/// Defect guarded: exceeding `ulimit -f` killed the proxy with SIGXFSZ instead of failing open.
#[cfg(unix)]
#[test]
fn a_file_size_limit_makes_store_writes_fail_open_not_the_proxy_die() {
    let (db, addr) = serve_setup("xfsz");
    let upstream = tiny_upstream();
    // 200 KB of file size at most: the store's first large originals cross it.
    let mut proxy = spawn_serve("ulimit -f 200;", &addr, &upstream, &db, Stdio::piped());
    for i in 0..12 {
        let output: String = (0..3000)
            .map(|l| format!("request {i} line {l}: compiling a crate with a long name\n"))
            .collect();
        let body = serde_json::json!({"model": "gpt-5", "messages": [
            {"role": "user", "content": format!("task {i}")},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": output}
        ]});
        assert_eq!(
            post(&addr, "/v1/chat/completions", &body.to_string()),
            Some(200),
            "request {i}"
        );
    }
    assert!(
        proxy.try_wait().unwrap().is_none(),
        "the proxy is still running"
    );
    let _ = proxy.kill();
    let out = proxy.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.contains("fail open"), "{log}");
}

/// Defect guarded: with its log on a full disk, tracing reported the failed write through
/// `eprintln!`, which panicked in the request's task, and the client saw its connection
/// dropped (CI's soak on a machine whose disk filled: 28,696 failed requests). A log line the
/// disk cannot take is lost; the request is answered.
#[cfg(target_os = "linux")]
#[test]
fn a_log_on_a_full_disk_fails_no_request() {
    let (db, addr) = serve_setup("log-full");
    let upstream = tiny_upstream();
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let mut proxy = spawn_serve("", &addr, &upstream, &db, Stdio::from(full));
    for i in 0..6 {
        let output: String = (0..3000)
            .map(|l| format!("request {i} line {l}: compiling a crate with a long name\n"))
            .collect();
        let body = serde_json::json!({"model": "gpt-5", "messages": [
            {"role": "user", "content": format!("task {i}")},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": output}
        ]});
        assert_eq!(
            post(&addr, "/v1/chat/completions", &body.to_string()),
            Some(200),
            "request {i}"
        );
    }
    assert!(
        proxy.try_wait().unwrap().is_none(),
        "the proxy is still running"
    );
    let _ = proxy.kill();
    let _ = proxy.wait();
}

/// `ctxgc prefix-breaks` on the records a relay writes: the real Claude Code first request,
/// then the same request grown, then one whose system prompt carries a new reminder.
#[test]
fn prefix_breaks_classifies_what_the_client_changed() {
    let shared = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data/requests/claude-code-2.1.328-messages.json");
    let Ok(text) = std::fs::read_to_string(&shared) else {
        assert!(std::env::var("CI").is_err(), "CI has ../shared");
        return;
    };
    let recorded: serde_json::Value = serde_json::from_str(&text).unwrap();
    let first = recorded["body"].clone();
    let mut grown = first.clone();
    grown["messages"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"role": "assistant", "content": "Looking."}));
    let mut reminded = grown.clone();
    let system = reminded["system"].as_array_mut().unwrap();
    let last = system.len() - 1;
    let text = system[last]["text"].as_str().unwrap().to_owned();
    system[last]["text"] =
        format!("{text}\n<system-reminder>a new reminder</system-reminder>").into();
    let record = |body: &serde_json::Value| {
        serde_json::json!({"api": "messages", "path": "/v1/messages", "session": "s", "status": 200, "body": body})
            .to_string()
    };
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("prefix-breaks");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("upstream.jsonl");
    std::fs::write(
        &file,
        [record(&first), record(&grown), record(&reminded)].join("\n"),
    )
    .unwrap();
    let out = ctxgc(&["prefix-breaks", file.to_str().unwrap(), "--json"], b"");
    let json = json_of(&out);
    assert_eq!(
        (json["pairs"].as_u64(), json["extended"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(json["breaks"][0]["kind"], "system_reminder");
    assert_eq!(json["breaks"][0]["at"], "system");
    // Not a request body: refused with the line named.
    std::fs::write(&file, "{\"hello\": 1}\n").unwrap();
    let out = ctxgc(&["prefix-breaks", file.to_str().unwrap()], b"");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("upstream.jsonl:1: not a request body"));
}

/// A shell-only agent (mini-swe-agent) recalls an original by the id a marker showed it.
#[test]
fn recall_prints_a_stored_original_whole_by_lines_or_by_pattern() {
    use ctxgc_core::store::{OriginalStore, SessionId};
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("recall-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let db = dir.join("store.sqlite");
    let original: String = (1..=300)
        .map(|i| {
            if i == 150 {
                "error: linker failed\n".to_owned()
            } else {
                format!("line {i} ok\n")
            }
        })
        .collect();
    let id = ctxgc_core::ContentId::of(original.as_bytes());
    ctxgc_store::SqliteStore::open(&db)
        .unwrap()
        .put(&SessionId::new("s1"), id, &original)
        .unwrap();
    let store = format!("sqlite:{}", db.display());
    let id = id.to_string();
    let whole = ctxgc(&["recall", &id, "--session", "s1", "--store", &store], b"");
    assert!(
        whole.status.success(),
        "{}",
        String::from_utf8_lossy(&whole.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&whole.stdout), original);
    let found = ctxgc(
        &[
            "recall",
            &id,
            "--session",
            "s1",
            "--store",
            &store,
            "--pattern",
            "^error",
            "--context",
            "1",
        ],
        b"",
    );
    let found = String::from_utf8_lossy(&found.stdout).into_owned();
    assert!(found.contains("150| error: linker failed"), "{found}");
    assert!(
        found.contains("149| line 149 ok") && !found.contains("line 147 ok"),
        "{found}"
    );
    let range = ctxgc(
        &[
            "recall",
            &id,
            "--session",
            "s1",
            "--store",
            &store,
            "--lines",
            "10-11",
        ],
        b"",
    );
    let range = String::from_utf8_lossy(&range.stdout).into_owned();
    assert!(
        range.contains("10| line 10 ok") && range.contains("11| line 11 ok"),
        "{range}"
    );
    // Another session sees nothing; a malformed id is named.
    let other = ctxgc(&["recall", &id, "--session", "s2", "--store", &store], b"");
    assert!(!other.status.success());
    assert!(String::from_utf8_lossy(&other.stderr).contains("no original"));
    let bad = ctxgc(
        &["recall", "1234", "--session", "s1", "--store", &store],
        b"",
    );
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not a recall id"));
    let _ = std::fs::remove_dir_all(&dir);
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

/// `ctxgc replay` with no path, on a home laid out as a user's with eight agents' histories
/// (real Hermes, opencode, Gemini CLI and Codex CLI files made by the scripts `.ci/run` runs, a
/// shared Claude Code log, hand-written Cline and Aider files) and every credential file those
/// agents keep beside them made a FIFO: opening one for reading would block until a writer
/// comes, so a replay that finishes within its deadline opened none.
#[cfg(unix)]
#[test]
fn replay_finds_every_agents_history_and_opens_no_credential_file() {
    let vars = [
        "CTXGC_AGENT_HISTORIES",
        "CTXGC_GEMINI_CHATS",
        "CTXGC_CODEX_ROLLOUTS",
    ];
    let Some(dirs) = vars
        .iter()
        .map(|v| std::env::var_os(v).map(std::path::PathBuf::from))
        .collect::<Option<Vec<_>>>()
    else {
        assert!(
            std::env::var("CI").is_err(),
            "CI must set {vars:?} (scripts/agent-histories, gemini-chats, codex-rollouts)"
        );
        eprintln!("{vars:?} not all set: skipping the history discovery test");
        return;
    };
    let shared = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data/client-logs/claude-code");
    let Some(claude_log) = std::fs::read_dir(&shared)
        .ok()
        .and_then(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).min())
    else {
        assert!(std::env::var("CI").is_err(), "CI must have ../shared");
        return;
    };
    let home = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("history-home");
    let _ = std::fs::remove_dir_all(&home);
    copy_tree(
        &dirs[0].join(".hermes/state.db"),
        &home.join(".hermes/state.db"),
    );
    for f in ["opencode.db", "opencode.db-wal", "opencode.db-shm"] {
        let from = dirs[0].join(".local/share/opencode").join(f);
        if from.exists() {
            copy_tree(&from, &home.join(".local/share/opencode").join(f));
        }
    }
    copy_tree(&dirs[1], &home.join(".gemini/tmp"));
    copy_tree(&dirs[2], &home.join(".codex/sessions"));
    copy_tree(
        &claude_log,
        &home.join(".claude/projects/-home-u-app/session.jsonl"),
    );
    let task =
        home.join(".config/Code/User/globalStorage/saoudrizwan.claude-dev/tasks/1732600000000");
    std::fs::create_dir_all(&task).unwrap();
    std::fs::write(
        task.join("api_conversation_history.json"),
        r#"[{"role":"user","content":[{"type":"text","text":"<task>list files</task>"}]},
            {"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"execute_command","input":{"command":"ls"}}]},
            {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"a.py"}]},
            {"role":"assistant","content":[{"type":"text","text":"One file."}]}]"#,
    )
    .unwrap();
    let project = home.join("work/app");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(
        project.join(".aider.chat.history.md"),
        "\n# aider chat started at 2026-11-20 10:00:00\n\n#### what does app.py do?\n\nIt prints hello.\n\n> Tokens: 1.2k sent, 20 received.\n",
    )
    .unwrap();
    let credentials = [
        ".claude/.credentials.json",
        ".codex/auth.json",
        ".gemini/oauth_creds.json",
        ".hermes/.env",
        ".hermes/auth.json",
        ".local/share/opencode/auth.json",
        ".config/Code/User/globalStorage/saoudrizwan.claude-dev/secrets.json",
    ];
    for c in credentials {
        let made = Command::new("mkfifo").arg(home.join(c)).status().unwrap();
        assert!(made.success(), "mkfifo {c}");
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_ctxgc"))
        .args([
            "replay",
            "--window",
            "200k",
            "--policy",
            "none,ctxgc",
            "--cache",
            "anthropic",
            "--json",
        ])
        .env("HOME", &home)
        .env_remove("CODEX_HOME")
        .env_remove("CLAUDE_CONFIG_DIR")
        .env_remove("HERMES_HOME")
        .env_remove("XDG_DATA_HOME")
        .env_remove("XDG_CONFIG_HOME")
        .current_dir(&project)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("ctxgc replay did not finish: it is blocked on a credential FIFO");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    for agent in [
        "claude-code",
        "codex",
        "gemini-cli",
        "hermes",
        "opencode",
        "cline",
        "aider",
    ] {
        let line = err
            .lines()
            .find(|l| l.starts_with(&format!("{agent}: ")))
            .unwrap_or_else(|| panic!("no line for {agent} in {err}"));
        assert!(
            !line.contains(" 0 sessions") && line.contains(" sessions, "),
            "{line}"
        );
    }
    assert!(err.contains("roo-code: nothing found"), "{err}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    for c in credentials {
        let name = std::path::Path::new(c)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert!(
            !err.contains(&name) && !stdout.contains(&name),
            "{c} was listed"
        );
    }
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        json["sessions"].as_u64().unwrap() >= 7,
        "{}",
        json["sessions"]
    );
    let _ = std::fs::remove_dir_all(&home);
}

/// `ctxgc --version` names the version and the commit it was built from (a checkout's, here).
#[test]
fn the_version_names_its_commit() {
    let out = Command::new(env!("CARGO_BIN_EXE_ctxgc"))
        .arg("--version")
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let expected = format!("ctxgc {} (", env!("CARGO_PKG_VERSION"));
    assert!(text.starts_with(&expected), "{text}");
    let commit = text
        .trim()
        .trim_start_matches(&expected)
        .trim_end_matches(')');
    assert!(
        commit.len() >= 7 && commit.bytes().all(|b| b.is_ascii_hexdigit())
            || commit == "unknown commit",
        "{text}"
    );
}

/// A set of several users' logs (a name prefix before the session id, as in `../shared`) is
/// judged user by user: each session's validation names its user, and the report holds each
/// policy against `none` per user. The synthetic fixtures stand in for two users' logs.
#[test]
fn a_set_of_several_users_is_judged_user_by_user() {
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../ctxgc-formats/tests/fixtures/client-logs");
    let set = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("two-users");
    let _ = std::fs::remove_dir_all(&set);
    std::fs::create_dir_all(&set).unwrap();
    for (user, fixture) in [
        ("alice", "claude-code-synthetic.jsonl"),
        ("bob", "codex-rollout-synthetic.jsonl"),
    ] {
        std::fs::copy(
            fixtures.join(fixture),
            set.join(format!(
                "{user}-0199aaaa-0000-7000-8000-00000000000{}.jsonl",
                user.len()
            )),
        )
        .unwrap();
    }
    let out = ctxgc(
        &[
            "replay",
            set.to_str().unwrap(),
            "--policy",
            "none,ctxgc",
            "--json",
        ],
        b"",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut users: Vec<&str> = report["validation"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["user"].as_str().unwrap())
        .collect();
    users.sort_unstable();
    users.dedup();
    assert_eq!(users, ["alice", "bob"]);
    let ctxgc_row = report["by_user"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["policy"] == "ctxgc")
        .unwrap();
    let named: Vec<&str> = ctxgc_row["users"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u[0].as_str().unwrap())
        .collect();
    assert_eq!(named.len(), 2, "{ctxgc_row}");
    assert!(
        named.contains(&"alice") && named.contains(&"bob"),
        "{ctxgc_row}"
    );
}
