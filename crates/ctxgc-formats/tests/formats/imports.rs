//! Shared transcripts and client logs imported.

use super::*;

#[test]
fn every_shared_transcript_imports_and_survives_canonical_jsonl() {
    let Some(shared) = shared_data() else { return };
    let dir = shared.join("transcripts");
    let results = import::import_paths(&[dir]);
    let mut counts = std::collections::BTreeMap::new();
    for result in &results {
        let imported = result.as_ref().unwrap_or_else(|e| panic!("{e}"));
        *counts.entry(imported.format.to_string()).or_insert(0) += 1;
        check_session(imported);
    }
    assert_eq!(counts.get("mini-swe-agent-1"), Some(&190));
    assert_eq!(
        counts.get("claude-code log"),
        None,
        "client logs are not under transcripts/"
    );
    assert_eq!(counts.get("mini-swe-agent-1.1"), Some(&45));
    assert_eq!(counts.get("swe-agent"), Some(&19));
    // The text-protocol sessions record usage on their assistant messages.
    let gemini = results
        .iter()
        .flatten()
        .find(|i| i.format == SourceFormat::MiniSweAgent1)
        .unwrap();
    assert!(gemini.transcript.messages.iter().any(|m| m.usage.is_some()));
    // Each recorded trajectory names the model that billed it.
    for i in results.iter().flatten() {
        let expected = match i.format {
            SourceFormat::MiniSweAgent1 => "gemini-3-pro-preview",
            SourceFormat::MiniSweAgent11 => "gpt-5-mini-2025-08-07",
            _ => continue,
        };
        let model = i.transcript.model.as_deref().unwrap_or_default();
        assert!(model.ends_with(expected), "{}: {model}", i.path.display());
    }
}

#[test]
fn every_shared_client_log_imports_with_its_billed_usage() {
    let Some(shared) = shared_data() else { return };
    let dir = shared.join("client-logs/claude-code");
    let results = import::import_paths(std::slice::from_ref(&dir));
    let files = std::fs::read_dir(&dir).unwrap().count();
    assert!(files >= 10, "{files}");
    let mut sessions = 0;
    for result in &results {
        let imported = result.as_ref().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(imported.format, SourceFormat::ClaudeCode);
        check_session(imported);
        let t = &imported.transcript;
        assert!(
            t.model.as_deref().is_some_and(|m| m.starts_with("claude-")),
            "{}: {:?}",
            t.id,
            t.model
        );
        // Every API call is one assistant message carrying what it was billed.
        let calls = t.messages.iter().filter(|m| m.role == Role::Assistant);
        for m in calls {
            let usage = m.usage.expect("every call has its usage");
            assert!(usage.prompt_tokens > 0);
        }
        // Request times never go backwards.
        let recording = t.recording.as_ref().unwrap();
        let times: Vec<i64> = (0..t.messages.len())
            .filter(|&i| t.messages[i].role == Role::Assistant)
            .filter_map(|i| recording.sent_at(i))
            .collect();
        assert_eq!(
            times.len(),
            t.messages
                .iter()
                .filter(|m| m.role == Role::Assistant)
                .count()
        );
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "{}", t.id);
        sessions += 1;
    }
    assert_eq!(
        sessions, files,
        "one main session per file (no sub-agents in these logs)"
    );
    let compacted = results
        .iter()
        .flatten()
        .filter(|i| {
            i.transcript
                .recording
                .as_ref()
                .is_some_and(|r| !r.compactions.is_empty())
        })
        .count();
    assert_eq!(compacted, 4, "the logs with the client's own compactions");
}

#[test]
fn a_claude_code_log_becomes_the_requests_the_client_sent() {
    // A synthetic log in Claude Code's format (tests/fixtures/client-logs/README.md).
    let sessions = client_fixture("claude-code-synthetic.jsonl");
    assert_eq!(sessions.len(), 2, "the main conversation and one sub-agent");
    let main = &sessions[0].transcript;
    assert_eq!(main.id, "claude-code-synthetic");
    // The model most of its calls went to names the session (it picks the price row).
    assert_eq!(main.model.as_deref(), Some("claude-opus-4-5"));
    let roles: Vec<Role> = main.messages.iter().map(|m| m.role).collect();
    use Role::*;
    // The abandoned branch (req_x) and the bookkeeping lines are gone; the three assistant
    // lines of req_1 are one message.
    assert_eq!(
        roles,
        [
            User, Assistant, Tool, Tool, User, Assistant, User, User, Assistant
        ]
    );
    let first = &main.messages[1];
    assert_eq!(first.tool_calls().count(), 2);
    assert!(matches!(first.content[0], Block::Thinking { .. }));
    let usage = first.usage.unwrap();
    assert_eq!(
        (
            usage.prompt_tokens,
            usage.cache_write_tokens,
            usage.completion_tokens
        ),
        (20_010, 20_000, 120),
        "billed input is uncached + reads + writes; the output of the call's last line"
    );
    let results: Vec<_> = main
        .messages
        .iter()
        .flat_map(|m| m.tool_results())
        .collect();
    assert_eq!(results[0].tool_name.as_deref(), Some("Read"));
    assert!(results[1].is_error);
    let recording = main.recording.as_ref().unwrap();
    assert_eq!(recording.client, "claude-code 2.0.60");
    // A request is sent when its last input was written.
    assert_eq!(recording.sent_at(1), Some(1_764_583_200_000));
    assert_eq!(recording.sent_at(5), Some(1_764_583_260_000));
    assert_eq!(
        recording.compactions,
        [ctxgc_core::ClientCompaction { at: 6, len: 1 }]
    );
    let side = &sessions[1].transcript;
    assert_eq!(side.id, "claude-code-synthetic.agent-1");
    assert_eq!(side.messages.len(), 4);
}

/// A call the provider refused is the client's own canned line (`<synthetic>`, "Prompt is too
/// long"): Claude Code never sends it back, so it is not part of any later request.
#[test]
fn a_refused_call_is_not_a_message() {
    let line = |uuid: &str, parent: &str, kind: &str, extra: &str, message: &str| {
        format!(
            r#"{{"type": "{kind}", "uuid": "{uuid}", "parentUuid": {parent}, "sessionId": "s", "version": "2.1.6", "timestamp": "2026-01-05T10:00:0{n}.000Z"{extra}, "message": {message}}}"#,
            n = uuid.len() % 10
        )
    };
    let log = [
        line("u1", "null", "user", "", r#"{"role": "user", "content": "fix it"}"#),
        line(
            "a12",
            r#""u1""#,
            "assistant",
            r#", "isApiErrorMessage": true"#,
            r#"{"model": "<synthetic>", "role": "assistant", "content": [{"type": "text", "text": "Prompt is too long"}], "usage": {"input_tokens": 0, "output_tokens": 0}}"#,
        ),
        line("u123", r#""a12""#, "user", "", r#"{"role": "user", "content": "/compact"}"#),
        line(
            "a1234",
            r#""u123""#,
            "assistant",
            r#", "requestId": "req_1""#,
            r#"{"model": "claude-opus-4-5", "role": "assistant", "content": [{"type": "text", "text": "done"}], "usage": {"input_tokens": 10, "cache_read_input_tokens": 500, "output_tokens": 3}}"#,
        ),
    ]
    .join("\n");
    let (_, roles) = imported_roles("refused.jsonl", &log);
    assert_eq!(roles, [Role::User, Role::User, Role::Assistant]);
}

/// Claude Code writes each parallel call as its own assistant line and each result as a user
/// line under its call's line: the chain runs through the last result, the others hang off
/// it. Every result was sent, so every result is in the transcript (the import lost all but
/// the last: 1,253 of 7,603 results in `client-logs/claude-code-procrypto`).
#[test]
fn parallel_tool_results_off_the_chain_are_kept() {
    let call = |id: &str, cmd: &str| {
        format!(
            r#""requestId": "req_1", "message": {{"model": "claude-opus-5-5", "role": "assistant", "content": [{{"type": "tool_use", "id": "{id}", "name": "Bash", "input": {{"command": "{cmd}"}}}}], "usage": {{"input_tokens": 10, "output_tokens": 5}}}}"#
        )
    };
    let result = |id: &str, out: &str| {
        format!(
            r#""message": {{"role": "user", "content": [{{"tool_use_id": "{id}", "type": "tool_result", "content": "{out}"}}]}}"#
        )
    };
    let log = [
        claude_line(0, "u1", None, "user", r#""message": {"role": "user", "content": "look around"}"#),
        claude_line(1, "a1", Some("u1"), "assistant", &call("t1", "ls")),
        claude_line(2, "a2", Some("a1"), "assistant", &call("t2", "git status")),
        claude_line(3, "r1", Some("a1"), "user", &result("t1", "src")),
        claude_line(4, "r2", Some("a2"), "user", &result("t2", "clean")),
        claude_line(
            5,
            "a3",
            Some("r2"),
            "assistant",
            r#""requestId": "req_2", "message": {"model": "claude-opus-5-5", "role": "assistant", "content": [{"type": "text", "text": "done"}]}"#,
        ),
    ]
    .join("\n");
    let (t, roles) = imported_roles("parallel.jsonl", &log);
    assert_eq!(
        roles,
        [
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::Tool,
            Role::Assistant
        ]
    );
    assert_eq!(
        t.messages[1].tool_calls().count(),
        2,
        "one response, two calls"
    );
    let answered: Vec<&str> = t
        .messages
        .iter()
        .flat_map(|m| m.tool_results())
        .map(|r| r.call_id.as_str())
        .collect();
    assert_eq!(answered, ["t1", "t2"]);
}

/// Claude Code 2.1.3xx logs each attachment with the text it sent (`rendered`): the file an
/// `@` reference pulled in, the memory files. The import keeps them as what was sent; an
/// attachment without rendered text is bookkeeping.
#[test]
fn rendered_attachments_are_what_the_client_sent() {
    let log = [
        claude_line(0, "u1", None, "user", r#""message": {"role": "user", "content": "/plan"}"#),
        claude_line(
            1,
            "f1",
            Some("u1"),
            "attachment",
            r#""attachment": {"type": "file"}, "renderedRole": "user", "rendered": [{"content": "<system-reminder>\nResult of calling the Read tool:\n1\tcontext line 0\n</system-reminder>"}]"#,
        ),
        claude_line(
            2,
            "e1",
            Some("f1"),
            "attachment",
            r#""attachment": {"type": "date"}, "renderedRole": "system", "rendered": [{"content": "<system-reminder>\nToday's date is 2026-11-28.\n</system-reminder>"}]"#,
        ),
        claude_line(3, "p1", Some("e1"), "attachment", r#""attachment": {"type": "session_context", "context": {}}"#),
        claude_line(
            4,
            "a1",
            Some("p1"),
            "assistant",
            r#""requestId": "req_1", "message": {"model": "claude-opus-5-5", "role": "assistant", "content": [{"type": "text", "text": "planned"}]}"#,
        ),
    ]
    .join("\n");
    let (t, roles) = imported_roles("attached.jsonl", &log);
    assert_eq!(
        roles,
        [Role::User, Role::User, Role::System, Role::Assistant]
    );
    assert!(t.messages[1].text_content().contains("context line 0"));
}

/// Codex 0.34-0.57 write the count of the call that ends a turn before that call's items:
/// the count goes to the call that follows it, not to a request of its own, and the repeat
/// after `turn_context` is not a new count (`client-logs/codex`: 130 of 2,522 billed calls).
#[test]
fn an_older_codex_counts_the_last_call_before_its_items() {
    let count = |prompt: u64| {
        format!(
            r#"{{"timestamp": "2025-10-31T19:03:0{}.000Z", "type": "event_msg", "payload": {{"type": "token_count", "info": {{"last_token_usage": {{"input_tokens": {prompt}, "cached_input_tokens": 0, "output_tokens": 10}}}}}}}}"#,
            prompt % 10
        )
    };
    let item = |payload: &str| {
        format!(
            r#"{{"timestamp": "2025-10-31T19:03:00.000Z", "type": "response_item", "payload": {payload}}}"#
        )
    };
    let log = [
        r#"{"timestamp": "2025-10-31T19:02:58.000Z", "type": "session_meta", "payload": {"id": "s", "cli_version": "0.34.0", "instructions": "You are Codex."}}"#.to_owned(),
        item(r#"{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix it"}]}"#),
        r#"{"timestamp": "2025-10-31T19:03:00.000Z", "type": "event_msg", "payload": {"type": "token_count", "info": null}}"#.to_owned(),
        item(r#"{"type": "function_call", "name": "shell", "arguments": "{\"command\": [\"ls\"]}", "call_id": "c1"}"#),
        count(1001),
        item(r#"{"type": "function_call_output", "call_id": "c1", "output": "src"}"#),
        r#"{"timestamp": "2025-10-31T19:03:01.000Z", "type": "turn_context", "payload": {"model": "gpt-5"}}"#.to_owned(),
        count(1001),
        count(1202),
        item(r#"{"type": "reasoning", "summary": [{"type": "summary_text", "text": "done"}]}"#),
        item(r#"{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "fixed"}]}"#),
        item(r#"{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "thanks"}]}"#),
    ]
    .join("\n");
    let sessions = import::import_bytes(Path::new("rollout-old.jsonl"), log.as_bytes()).unwrap();
    let t = &sessions[0].transcript;
    let usage: Vec<Option<u64>> = t
        .messages
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .map(|m| m.usage.map(|u| u.prompt_tokens))
        .collect();
    assert_eq!(usage, [Some(1001), Some(1202)]);
}

/// Codex 0.169 counts its compaction's own call (the summary request) just before the
/// `compacted` line, and writes a count of nothing as the thread resumes: neither is the count
/// of the call that follows the compaction.
#[test]
fn a_codex_compactions_own_count_is_no_calls() {
    let count = |prompt: u64| {
        format!(
            r#"{{"timestamp": "2025-12-02T09:00:01.000Z", "type": "event_msg", "payload": {{"type": "token_count", "info": {{"last_token_usage": {{"input_tokens": {prompt}, "cached_input_tokens": 0, "output_tokens": 10}}}}}}}}"#
        )
    };
    let item = |payload: &str| {
        format!(
            r#"{{"timestamp": "2025-12-02T09:00:00.000Z", "type": "response_item", "payload": {payload}}}"#
        )
    };
    let log = [
        r#"{"timestamp": "2025-12-02T09:00:00.000Z", "type": "session_meta", "payload": {"id": "s", "cli_version": "0.169.0", "base_instructions": {"text": "You are Codex."}}}"#.to_owned(),
        item(r#"{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix it"}]}"#),
        item(r#"{"type": "function_call", "name": "shell", "arguments": "{}", "call_id": "c1"}"#),
        count(9000),
        item(r#"{"type": "function_call_output", "call_id": "c1", "output": "src"}"#),
        count(9939),
        item(r#"{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "fixed"}]}"#),
        count(8713),
        r#"{"timestamp": "2025-12-02T09:00:02.000Z", "type": "compacted", "payload": {"message": "", "replacement_history": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "summary of the work"}]}]}}"#.to_owned(),
        count(0),
        item(r#"{"type": "function_call", "name": "shell", "arguments": "{}", "call_id": "c2"}"#),
        count(1500),
        item(r#"{"type": "function_call_output", "call_id": "c2", "output": "ok"}"#),
    ]
    .join("\n");
    let sessions =
        import::import_bytes(Path::new("rollout-compacted.jsonl"), log.as_bytes()).unwrap();
    let usage: Vec<Option<u64>> = sessions[0]
        .transcript
        .messages
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .map(|m| m.usage.map(|u| u.prompt_tokens))
        .collect();
    assert_eq!(usage, [Some(9000), Some(9939), Some(1500)]);
}

#[test]
fn a_codex_rollout_becomes_the_requests_the_client_sent() {
    let sessions = client_fixture("codex-rollout-synthetic.jsonl");
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0].format, SourceFormat::CodexRollout);
    let t = &sessions[0].transcript;
    let roles: Vec<Role> = t.messages.iter().map(|m| m.role).collect();
    use Role::*;
    assert_eq!(
        roles,
        [
            System, System, User, User, Assistant, Tool, Assistant, Tool, Assistant, User, User,
            User, Assistant
        ],
        "the ghost snapshot is never sent; each token_count closes a model call"
    );
    let usage: Vec<(u64, u64)> = t
        .messages
        .iter()
        .filter_map(|m| m.usage)
        .map(|u| (u.prompt_tokens, u.cached_tokens))
        .collect();
    assert_eq!(
        usage,
        [(5_200, 0), (5_400, 5_120), (5_500, 5_376), (2_100, 0)]
    );
    let recording = t.recording.as_ref().unwrap();
    assert_eq!(recording.client, "codex 0.169.0");
    assert_eq!(
        t.model.as_deref(),
        Some("gpt-5.1-codex"),
        "from turn_context"
    );
    assert_eq!(
        recording.compactions,
        [ctxgc_core::ClientCompaction { at: 9, len: 2 }]
    );
    let shell = t.messages[12].tool_calls().next().unwrap();
    assert_eq!(shell.name, "local_shell");
}

/// Rollouts of real Codex CLI sessions, made by `scripts/codex-rollouts/generate.sh` (run by
/// `.ci/run`, which points `CTXGC_CODEX_ROLLOUTS` at them).
#[test]
fn every_generated_codex_rollout_imports() {
    let Some(dir) = std::env::var_os("CTXGC_CODEX_ROLLOUTS").map(PathBuf::from) else {
        assert!(
            std::env::var("CI").is_err(),
            "CI must generate Codex rollouts (scripts/codex-rollouts/generate.sh) and set CTXGC_CODEX_ROLLOUTS"
        );
        eprintln!(
            "CTXGC_CODEX_ROLLOUTS not set: run scripts/codex-rollouts/generate.sh to check real rollouts"
        );
        return;
    };
    let results = import::import_paths(&[dir]);
    assert!(results.len() >= 2, "{} rollouts", results.len());
    for result in &results {
        let imported = result.as_ref().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(imported.format, SourceFormat::CodexRollout);
        check_session(imported);
        let t = &imported.transcript;
        let recording = t.recording.as_ref().unwrap();
        assert_eq!(recording.client, "codex 0.169.0");
        assert!(
            !recording.compactions.is_empty(),
            "{}: the scripted sessions make Codex compact",
            t.id
        );
        assert_eq!(t.messages[0].role, Role::System, "base instructions first");
        let calls: Vec<_> = t.messages.iter().flat_map(|m| m.tool_calls()).collect();
        assert!(calls.iter().all(|c| c.name == "exec_command"), "{}", t.id);
        assert!(
            t.messages
                .iter()
                .filter(|m| m.role == Role::Assistant)
                .all(|m| m.usage.is_some()),
            "{}: every model call carries its token_count",
            t.id
        );
    }
}

/// Chats of a real Gemini CLI session, made by `scripts/gemini-chats/generate.sh` (run by
/// `.ci/run`, which points `CTXGC_GEMINI_CHATS` at them): every call answered, every reply
/// with its recorded usage and time, the model named.
#[test]
fn every_generated_gemini_cli_chat_imports() {
    let Some(dir) = std::env::var_os("CTXGC_GEMINI_CHATS").map(PathBuf::from) else {
        assert!(
            std::env::var("CI").is_err(),
            "CI must generate Gemini CLI chats (scripts/gemini-chats/generate.sh) and set CTXGC_GEMINI_CHATS"
        );
        eprintln!(
            "CTXGC_GEMINI_CHATS not set: run scripts/gemini-chats/generate.sh to check real chats"
        );
        return;
    };
    // Gemini CLI keeps chats under `<project>/chats/`; beside them, `tool-outputs/` holds the
    // whole outputs it cut (plain text, not sessions).
    let chats: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| Some(e.ok()?.path().join("chats")))
        .filter(|p| p.is_dir())
        .collect();
    let results = import::import_paths(&chats);
    assert!(!results.is_empty(), "no chat in {}", dir.display());
    for result in &results {
        let imported = result.as_ref().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(imported.format, SourceFormat::GeminiCli);
        check_session(imported);
        let t = &imported.transcript;
        assert_eq!(t.model.as_deref(), Some("gemini-2.5-pro"));
        let recording = t.recording.as_ref().unwrap();
        assert_eq!(recording.client, "gemini-cli");
        assert!(recording.sent_ms.iter().all(Option::is_some), "{}", t.id);
        let calls: Vec<_> = t.messages.iter().flat_map(|m| m.tool_calls()).collect();
        assert!(calls.len() >= 4, "{}: {} calls", t.id, calls.len());
        assert!(
            calls.iter().all(|c| c.name == "run_shell_command"),
            "{}",
            t.id
        );
        assert!(
            t.messages
                .iter()
                .filter(|m| m.role == Role::Assistant)
                .all(|m| m.usage.is_some_and(|u| u.prompt_tokens > 0)),
            "{}: every reply carries its tokens",
            t.id
        );
    }
}
