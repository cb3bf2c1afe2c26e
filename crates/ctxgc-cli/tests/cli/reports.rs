//! Reports, recall, histories and users.

use super::*;

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
    // `ctxgc recall ID --session s1` on the store, with `more` arguments.
    let recall = |more: &[&str]| {
        let mut args = vec!["recall", id.as_str(), "--session", "s1", "--store", &store];
        args.extend_from_slice(more);
        ctxgc(&args, b"")
    };
    let whole = recall(&[]);
    assert!(
        whole.status.success(),
        "{}",
        String::from_utf8_lossy(&whole.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&whole.stdout), original);
    let found = recall(&["--pattern", "^error", "--context", "1"]);
    let found = String::from_utf8_lossy(&found.stdout).into_owned();
    assert!(found.contains("150| error: linker failed"), "{found}");
    assert!(
        found.contains("149| line 149 ok") && !found.contains("line 147 ok"),
        "{found}"
    );
    let range = recall(&["--lines", "10-11"]);
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

/// Runs `ctxgc` with `args`, which must succeed: its stdout.
fn ctxgc_ok(args: &[&str]) -> String {
    let out = ctxgc(args, b"");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `--explain` names each decision of the engine's events with its reason; on the bundled
/// sample at 32K a compaction folds outputs into its summary.
#[test]
fn explain_names_every_decision_and_its_reason() {
    let text = ctxgc_ok(&[
        "replay",
        "--sample",
        "--window",
        "32k",
        "--policy",
        "ctxgc",
        "--explain",
        "django__django-11885",
    ]);
    assert!(
        text.contains("django__django-11885 (policy ctxgc, 32K)"),
        "{text}"
    );
    let decision = text
        .lines()
        .find(|l| l.starts_with("    call-"))
        .unwrap_or_else(|| panic!("no decision line: {text}"));
    assert!(
        decision.contains("summarised") || decision.contains("pruned"),
        "{decision}"
    );
    let none = ctxgc(
        &[
            "replay",
            "--sample",
            "--policy",
            "ctxgc",
            "--explain",
            "no-such-session",
        ],
        b"",
    );
    assert!(String::from_utf8_lossy(&none.stdout).contains("no run of a session"));
}

/// `--fit-relevance` writes a table the engine reads back (`--relevance`) and reports each
/// set judged by a table fitted without it; a broken table is refused by name.
#[test]
fn a_fitted_relevance_table_is_written_and_read_back() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("relevance-fit");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let table = dir.join("table.json");
    let report = ctxgc_ok(&[
        "replay",
        "--sample",
        "--fit-relevance",
        table.to_str().unwrap(),
        "--relevance-folds",
        dir.join("folds").to_str().unwrap(),
    ]);
    assert!(
        report.contains("judged by the table fitted without them"),
        "{report}"
    );
    let written = std::fs::read_to_string(&table).unwrap();
    assert!(written.contains("\"*/*/*/*\""), "{written}");
    // The same sessions give the same bytes.
    let again = dir.join("again.json");
    ctxgc_ok(&[
        "replay",
        "--sample",
        "--fit-relevance",
        again.to_str().unwrap(),
    ]);
    assert_eq!(std::fs::read_to_string(&again).unwrap(), written);
    ctxgc_ok(&[
        "replay",
        "--sample",
        "--window",
        "32k",
        "--policy",
        "ctxgc",
        "--relevance",
        table.to_str().unwrap(),
    ]);
    let broken = dir.join("broken.json");
    std::fs::write(
        &broken,
        "{\"source\": \"x\", \"cells\": {\"*/*/*/*\": [5, 2]}}",
    )
    .unwrap();
    let out = ctxgc(
        &[
            "replay",
            "--sample",
            "--policy",
            "ctxgc",
            "--relevance",
            broken.to_str().unwrap(),
        ],
        b"",
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("broken.json") && err.contains("more uses than examples"),
        "{err}"
    );
}
