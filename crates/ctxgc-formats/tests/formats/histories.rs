//! Agent histories imported.

use super::*;

/// Hermes 0.19.0's own `state.db` after a session in which Hermes compacted twice: one
/// session, its system prompt first, every call answered, each compaction's inserted rows
/// marked as the client's replacement (so the conversation is not counted twice), and the
/// session's billed total without the auxiliary model's compaction calls.
#[test]
fn a_real_hermes_state_db_imports_with_its_compactions_and_bill() {
    let Some(home) = agent_histories() else {
        return;
    };
    let results = import::import_paths(&[home.join(".hermes/state.db")]);
    assert_eq!(results.len(), 1);
    let imported = results[0].as_ref().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(imported.format, SourceFormat::HermesStateDb);
    check_session(imported);
    let t = &imported.transcript;
    assert_eq!(t.messages[0].role, Role::System);
    assert!(t.messages[0].text_content().contains("Hermes"));
    assert_eq!(t.model.as_deref(), Some("scripted-model"));
    let r = t.recording.as_ref().unwrap();
    assert_eq!(r.client, "hermes");
    // Hermes compacts at no less than 75% of its smallest (64K) window; whether the scripted
    // session crosses that twice or three times depends on Hermes's own token estimates, which
    // move from run to run (its system prompt holds the date and the session's ids).
    assert!(
        (2..=3).contains(&r.compactions.len()),
        "{:?}",
        r.compactions
    );
    // What the conversation was, once: the messages outside the replacements.
    let calls: Vec<&str> = t
        .messages
        .iter()
        .enumerate()
        .filter(|(i, _)| !r.is_replacement(*i))
        .flat_map(|(_, m)| m.tool_calls())
        .map(|c| c.id.as_str())
        .collect();
    let mut unique = calls.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), calls.len(), "a call counted twice: {calls:?}");
    assert!(calls.len() >= 8, "{calls:?}");
    for c in &r.compactions {
        let inserted = &t.messages[c.at..c.at + c.len];
        assert!(
            inserted
                .iter()
                .any(|m| m.text_content().contains("CONTEXT COMPACTION")),
            "each compaction's rows hold Hermes's summary"
        );
    }
    let bill = r.billed_total.unwrap();
    // The scripted upstream's eight steps for this task, and the answer.
    assert_eq!(
        bill.requests, 9,
        "the agent's requests, not the compaction model's"
    );
    assert!(bill.usage.prompt_tokens > 100_000);
    assert!(t.messages.iter().all(|m| m.usage.is_none()));
}

/// opencode 1.18.33's own `opencode.db`: one request per step with its tokens and time, every
/// call answered with the output opencode stored (cut by opencode itself), the model named.
#[test]
fn a_real_opencode_db_imports_with_each_requests_usage() {
    let Some(home) = agent_histories() else {
        return;
    };
    let results = import::import_paths(&[home.join(".local/share/opencode/opencode.db")]);
    assert_eq!(results.len(), 1);
    let imported = results[0].as_ref().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(imported.format, SourceFormat::Opencode);
    check_session(imported);
    let t = &imported.transcript;
    assert_eq!(t.model.as_deref(), Some("claude-sonnet-4-5"));
    let r = t.recording.as_ref().unwrap();
    assert_eq!(r.client, "opencode");
    let replies: Vec<usize> = (0..t.messages.len())
        .filter(|&i| t.messages[i].role == Role::Assistant)
        .collect();
    assert!(replies.len() >= 8);
    for &i in &replies {
        assert!(t.messages[i].usage.is_some_and(|u| u.prompt_tokens > 0));
        assert!(r.sent_at(i).is_some());
    }
    let outputs: Vec<String> = t
        .messages
        .iter()
        .flat_map(|m| m.tool_results())
        .map(|r| r.text())
        .collect();
    assert!(outputs.iter().any(|o| o.contains("output truncated")));
    assert!(outputs.iter().any(|o| o.starts_with("git version")));
    let prompts: Vec<u64> = replies
        .iter()
        .map(|&i| t.messages[i].usage.unwrap().prompt_tokens)
        .collect();
    assert!(prompts.windows(2).all(|w| w[0] <= w[1]), "{prompts:?}");
}

/// Cline's task files, hand-written in the shape Cline 3.x writes (Cline runs inside VS Code,
/// which cannot be driven here): the conversation is Anthropic Messages, the usage comes from
/// the `ui_messages.json` beside it, and that file alone is named as not a session.
#[test]
fn a_cline_task_imports_with_the_usage_beside_it() {
    let dir = std::env::temp_dir().join(format!("ctxgc-cline-{}", std::process::id()));
    let task = dir.join("1732600000000");
    std::fs::create_dir_all(&task).unwrap();
    let history = serde_json::json!([
        {"role": "user", "content": [{"type": "text", "text": "<task>\nfix the failing test\n</task>"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Running the tests."},
            {"type": "tool_use", "id": "toolu_1", "name": "execute_command", "input": {"command": "pytest -x"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "FAILED tests/test_a.py::test_x - AssertionError\n1 failed"}]}]},
        {"role": "assistant", "content": [{"type": "text", "text": "test_x fails on an assertion."}]}
    ]);
    let ui = serde_json::json!([
        {"ts": 1732600000100i64, "type": "say", "say": "task", "text": "fix the failing test"},
        {"ts": 1732600000200i64, "type": "say", "say": "api_req_started", "text": "{\"request\":\"...\",\"tokensIn\":12,\"tokensOut\":40,\"cacheWrites\":9000,\"cacheReads\":0,\"cost\":0.03}"},
        {"ts": 1732600005000i64, "type": "say", "say": "api_req_started", "text": "{\"request\":\"...\",\"tokensIn\":60,\"tokensOut\":12,\"cacheWrites\":70,\"cacheReads\":9000,\"cost\":0.004}"}
    ]);
    std::fs::write(
        task.join("api_conversation_history.json"),
        history.to_string(),
    )
    .unwrap();
    std::fs::write(task.join("ui_messages.json"), ui.to_string()).unwrap();
    let results = import::import_paths(std::slice::from_ref(&dir));
    let sessions: Vec<&import::Imported> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0].format, SourceFormat::Cline);
    assert_eq!(sessions[0].transcript.id, "1732600000000");
    check_session(sessions[0]);
    let t = &sessions[0].transcript;
    let usage: Vec<_> = t.messages.iter().filter_map(|m| m.usage).collect();
    assert_eq!(usage.len(), 2);
    assert_eq!(
        (
            usage[1].prompt_tokens,
            usage[1].cached_tokens,
            usage[1].cache_write_tokens
        ),
        (9130, 9000, 70)
    );
    let skipped: Vec<String> = results
        .iter()
        .filter_map(|r| r.as_ref().err().map(ToString::to_string))
        .collect();
    assert_eq!(skipped.len(), 1);
    assert!(skipped[0].contains("ui_messages.json") && skipped[0].contains("UI log"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The session snapshot Hermes 0.19.0 writes when asked (`sessions.write_json_snapshots`): the
/// history it holds after its last compaction, with its system prompt and tools.
#[test]
fn a_real_hermes_session_snapshot_imports() {
    let Some(home) = agent_histories() else {
        return;
    };
    let results = import::import_paths(&[home.join(".hermes/sessions")]);
    assert_eq!(results.len(), 1);
    let imported = results[0].as_ref().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(imported.format, SourceFormat::HermesSession);
    check_session(imported);
    let t = &imported.transcript;
    assert_eq!(t.messages[0].role, Role::System);
    assert!(!t.tools.is_empty());
    assert_eq!(t.model.as_deref(), Some("scripted-model"));
    assert!(t.tool_result_count() >= 4);
}

/// opencode's `storage/` tree as versions before `opencode.db` wrote it (hand-written: the
/// opencode that can be installed today writes the database): a reply of two steps, each with
/// its tokens; a compaction (a `compaction` part answered by a `summary` reply) marked as the
/// client's; a sub-agent's session named after its parent; a call that never finished answered
/// as opencode answers it.
#[test]
fn an_opencode_storage_tree_imports_with_steps_and_compactions() {
    let dir = std::env::temp_dir().join(format!("ctxgc-opencode-{}", std::process::id()));
    let storage = dir.join("storage");
    let _ = std::fs::remove_dir_all(&dir);
    let write = |path: &str, value: Value| {
        let path = storage.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, value.to_string()).unwrap();
    };
    let tokens = |input: u64, read: u64, write: u64| serde_json::json!({"input": input, "output": 10, "reasoning": 5, "cache": {"read": read, "write": write}});
    write(
        "session/proj/ses_a.json",
        serde_json::json!({"id": "ses_a", "title": "fix"}),
    );
    write(
        "session/proj/ses_b.json",
        serde_json::json!({"id": "ses_b", "parentID": "ses_a"}),
    );
    write(
        "message/ses_a/msg_01.json",
        serde_json::json!({"id": "msg_01", "sessionID": "ses_a", "role": "user", "time": {"created": 1_700_000_000_000i64}}),
    );
    write(
        "part/msg_01/prt_01.json",
        serde_json::json!({"id": "prt_01", "messageID": "msg_01", "type": "text", "text": "run the tests"}),
    );
    write(
        "message/ses_a/msg_02.json",
        serde_json::json!({"id": "msg_02", "sessionID": "ses_a", "role": "assistant", "modelID": "claude-sonnet-4", "providerID": "anthropic", "time": {"created": 1_700_000_001_000i64}, "tokens": tokens(1, 2, 3)}),
    );
    let parts = [
        serde_json::json!({"type": "step-start"}),
        serde_json::json!({"type": "reasoning", "text": "Tests first."}),
        serde_json::json!({"type": "tool", "callID": "c1", "tool": "bash", "state": {"status": "completed", "input": {"command": "pytest"}, "output": "1 failed", "time": {"start": 1_700_000_002_000i64, "end": 1_700_000_003_000i64}}}),
        serde_json::json!({"type": "step-finish", "tokens": tokens(3000, 0, 2000)}),
        serde_json::json!({"type": "step-start"}),
        serde_json::json!({"type": "tool", "callID": "c2", "tool": "read", "state": {"status": "running", "input": {"filePath": "a.py"}}}),
        serde_json::json!({"type": "step-finish", "tokens": tokens(40, 5000, 60)}),
    ];
    for (i, p) in parts.iter().enumerate() {
        write(&format!("part/msg_02/prt_02{i}.json"), p.clone());
    }
    write(
        "message/ses_a/msg_03.json",
        serde_json::json!({"id": "msg_03", "role": "user", "time": {"created": 1_700_000_010_000i64}}),
    );
    write(
        "part/msg_03/prt_03.json",
        serde_json::json!({"type": "compaction", "auto": true}),
    );
    write(
        "message/ses_a/msg_04.json",
        serde_json::json!({"id": "msg_04", "role": "assistant", "summary": true, "modelID": "claude-sonnet-4", "time": {"created": 1_700_000_011_000i64}, "tokens": tokens(100, 0, 0)}),
    );
    write(
        "part/msg_04/prt_04.json",
        serde_json::json!({"type": "text", "text": "We ran the tests; one fails."}),
    );
    write(
        "message/ses_b/msg_05.json",
        serde_json::json!({"id": "msg_05", "role": "user", "time": {"created": 1_700_000_020_000i64}}),
    );
    write(
        "part/msg_05/prt_05.json",
        serde_json::json!({"type": "text", "text": "search for x"}),
    );
    write(
        "message/ses_b/msg_06.json",
        serde_json::json!({"id": "msg_06", "role": "assistant", "modelID": "claude-haiku-4", "time": {"created": 1_700_000_021_000i64}, "tokens": tokens(50, 0, 0)}),
    );
    write(
        "part/msg_06/prt_06.json",
        serde_json::json!({"type": "text", "text": "Found x in a.py."}),
    );
    let results = import::import_paths(std::slice::from_ref(&dir));
    let sessions: Vec<&import::Imported> = results
        .iter()
        .map(|r| r.as_ref().unwrap_or_else(|e| panic!("{e}")))
        .collect();
    assert_eq!(sessions.len(), 2);
    for s in &sessions {
        assert_eq!(s.format, SourceFormat::Opencode);
        check_session(s);
    }
    let t = &sessions[0].transcript;
    assert_eq!(t.id, "ses_a");
    let roles: Vec<Role> = t.messages.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::Assistant,
            Role::Tool,
            Role::User,
            Role::Assistant
        ]
    );
    let first = t.messages[1].usage.unwrap();
    assert_eq!(
        (
            first.prompt_tokens,
            first.cache_write_tokens,
            first.completion_tokens
        ),
        (5000, 2000, 15)
    );
    assert_eq!(t.messages[3].usage.unwrap().cached_tokens, 5000);
    let r = t.recording.as_ref().unwrap();
    assert_eq!(
        r.sent_at(3),
        Some(1_700_000_003_000),
        "the second step starts when the first's tool ended"
    );
    let aborted = t.messages[4].tool_results().next().unwrap();
    assert!(aborted.is_error && aborted.text() == "Tool execution aborted");
    assert_eq!(
        r.compactions,
        [ctxgc_core::ClientCompaction { at: 5, len: 2 }]
    );
    assert_eq!(sessions[1].transcript.id, "ses_b@ses_a");
    let _ = std::fs::remove_dir_all(&dir);
}
