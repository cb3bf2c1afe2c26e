//! End-to-end checks of the formats crate on real and hand-written data.
//!
//! The real transcripts and client requests live in `../shared/data` beside the checkout (see
//! its README). When that folder is absent (a clone outside the project's machines), the tests
//! that need it say so and return, except under CI (`CI=true`), where its absence fails them.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use ctxgc_core::{Block, Role};
use ctxgc_formats::import::{self, SourceFormat};
use ctxgc_formats::{Api, ApiRequest};
use serde_json::Value;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn shared_data() -> Option<PathBuf> {
    let dir = workspace_root().join("../shared/data");
    if dir.is_dir() {
        Some(dir)
    } else {
        assert!(
            std::env::var("CI").is_err(),
            "../shared/data not found, and CI must check the shared data"
        );
        eprintln!("../shared/data not found: skipping checks on the shared data");
        None
    }
}

fn fixtures() -> Vec<(PathBuf, Api, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/requests");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let api = if name.starts_with("chat-") {
            Api::ChatCompletions
        } else if name.starts_with("responses-") {
            Api::Responses
        } else if name.starts_with("anthropic-") {
            Api::Messages
        } else {
            continue;
        };
        out.push((path.clone(), api, std::fs::read(&path).unwrap()));
    }
    if let Some(shared) = shared_data() {
        for (file, api) in [
            ("claude-code-2.1.328-messages.json", Api::Messages),
            ("codex-0.169.0-responses.json", Api::Responses),
        ] {
            let path = shared.join("requests").join(file);
            let wrapper: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            out.push((path, api, serde_json::to_vec(&wrapper["body"]).unwrap()));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(out.len() >= 5, "fixtures found: {}", out.len());
    out
}

/// Removes insignificant whitespace without parsing, so the comparison below does not rely on
/// the serializer under test.
fn minify(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let (mut in_string, mut escaped) = (false, false);
    for &b in bytes {
        if in_string {
            out.push(b);
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
        } else if b == b'"' {
            in_string = true;
            out.push(b);
        } else if !b.is_ascii_whitespace() {
            out.push(b);
        }
    }
    out
}

#[test]
fn every_request_body_round_trips_byte_for_byte() {
    for (path, api, bytes) in fixtures() {
        let request =
            ApiRequest::parse(api, &bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let out = request.to_bytes();
        let original: Value = serde_json::from_slice(&bytes).unwrap();
        let back: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(back, original, "{}: JSON differs", path.display());
        // Key order, numbers and string escapes: the serialised body equals the minified input.
        assert_eq!(
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&minify(&bytes)),
            "{}: bytes differ",
            path.display()
        );
        assert_eq!(
            ctxgc_formats::request::detect(&original),
            Some(api),
            "{}",
            path.display()
        );
    }
}

#[test]
fn transcript_views_see_every_call_and_result() {
    for (path, api, bytes) in fixtures() {
        let t = ApiRequest::parse(api, &bytes)
            .unwrap()
            .transcript()
            .unwrap();
        let calls: Vec<String> = t
            .messages
            .iter()
            .flat_map(|m| m.tool_calls())
            .map(|c| c.id.clone())
            .collect();
        for result in t.messages.iter().flat_map(|m| m.tool_results()) {
            assert!(
                calls.contains(&result.call_id),
                "{}: result {} has no call",
                path.display(),
                result.call_id
            );
            assert!(
                result.tool_name.is_some(),
                "{}: tool name resolved",
                path.display()
            );
        }
    }
}

#[test]
fn real_client_requests_have_the_expected_views() {
    let Some(shared) = shared_data() else { return };
    let body = |file: &str| -> Vec<u8> {
        let wrapper: Value =
            serde_json::from_slice(&std::fs::read(shared.join("requests").join(file)).unwrap())
                .unwrap();
        serde_json::to_vec(&wrapper["body"]).unwrap()
    };
    let claude =
        ApiRequest::parse(Api::Messages, &body("claude-code-2.1.328-messages.json")).unwrap();
    let t = claude.transcript().unwrap();
    let roles: Vec<Role> = t.messages.iter().map(|m| m.role).collect();
    // Top-level system blocks, then the user turn, then the `role: "system"` entry in messages.
    assert_eq!(roles, [Role::System, Role::User, Role::System]);
    assert_eq!(t.tools.len(), 12);
    let codex = ApiRequest::parse(Api::Responses, &body("codex-0.169.0-responses.json")).unwrap();
    let t = codex.transcript().unwrap();
    assert_eq!(
        t.messages.iter().filter(|m| m.role == Role::System).count(),
        2,
        "developer messages"
    );
    assert_eq!(t.messages.last().unwrap().text_content(), "say hello");
}

#[test]
fn fixture_views_cover_images_thinking_and_errors() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/requests");
    let read = |name: &str, api| {
        ApiRequest::parse(api, &std::fs::read(dir.join(name)).unwrap())
            .unwrap()
            .transcript()
            .unwrap()
    };
    let t = read("anthropic-cache-thinking-images.json", Api::Messages);
    let blocks: Vec<&Block> = t.messages.iter().flat_map(|m| &m.content).collect();
    assert!(blocks.iter().any(|b| matches!(b, Block::Image { .. })));
    assert_eq!(
        blocks
            .iter()
            .filter(|b| matches!(b, Block::Thinking { .. }))
            .count(),
        2
    );
    assert_eq!(t.tool_result_count(), 2);
    let t = read("anthropic-server-tools-errors.json", Api::Messages);
    assert!(
        t.messages
            .iter()
            .flat_map(|m| m.tool_results())
            .any(|r| r.is_error)
    );
    let t = read("chat-parallel-tools-stream.json", Api::ChatCompletions);
    assert_eq!(t.messages[2].tool_calls().count(), 2);
    let t = read("responses-function-calls.json", Api::Responses);
    assert_eq!(t.tool_result_count(), 4);
}

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

/// Checks what every imported session must satisfy: results answer calls (a client log that
/// continues an earlier one may open with the results of calls made there), and the canonical
/// JSONL round trip keeps the whole model, the recording included.
fn check_session(imported: &import::Imported) {
    let t = &imported.transcript;
    let name = imported.path.display();
    assert!(!t.messages.is_empty(), "{name}");
    let back = import::read_jsonl(&import::write_jsonl(t)).unwrap();
    assert_eq!(back.messages, t.messages, "{name}");
    assert_eq!(back.recording, t.recording, "{name}");
    let calls: Vec<&str> = t
        .messages
        .iter()
        .flat_map(|m| m.tool_calls())
        .map(|c| c.id.as_str())
        .collect();
    let first_call = t
        .messages
        .iter()
        .position(|m| m.role == Role::Assistant)
        .unwrap_or(0);
    for (i, m) in t.messages.iter().enumerate() {
        for r in m.tool_results() {
            assert!(
                calls.contains(&r.call_id.as_str()) || (t.recording.is_some() && i < first_call),
                "{name}: orphan {}",
                r.call_id
            );
        }
    }
    if let Some(recording) = &t.recording {
        assert_eq!(recording.sent_ms.len(), t.messages.len(), "{name}");
        for c in &recording.compactions {
            assert!(c.len > 0 && c.at + c.len <= t.messages.len(), "{name}");
        }
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

fn client_fixture(name: &str) -> Vec<import::Imported> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/client-logs")
        .join(name);
    let bytes = std::fs::read(&path).unwrap();
    let sessions = import::import_bytes(&path, &bytes).unwrap();
    for s in &sessions {
        check_session(s);
    }
    sessions
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

/// The first session of a log named `name`, and its messages' roles.
fn imported_roles(name: &str, log: &str) -> (ctxgc_core::Transcript, Vec<Role>) {
    let mut sessions = import::import_bytes(Path::new(name), log.as_bytes()).unwrap();
    let t = sessions.swap_remove(0).transcript;
    let roles = t.messages.iter().map(|m| m.role).collect();
    (t, roles)
}

/// One Claude Code log line (the fields the import reads), at second `n`.
fn claude_line(n: u32, uuid: &str, parent: Option<&str>, kind: &str, rest: &str) -> String {
    let parent = parent.map_or("null".to_owned(), |p| format!("\"{p}\""));
    format!(
        r#"{{"type": "{kind}", "uuid": "{uuid}", "parentUuid": {parent}, "sessionId": "s", "version": "2.1.328", "timestamp": "2026-11-28T10:00:{n:02}.000Z", {rest}}}"#
    )
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

/// The home folder that `scripts/agent-histories/generate.sh` fills by running the real Hermes
/// and opencode (run by `.ci/run`, which points `CTXGC_AGENT_HISTORIES` at it).
fn agent_histories() -> Option<PathBuf> {
    let Some(dir) = std::env::var_os("CTXGC_AGENT_HISTORIES").map(PathBuf::from) else {
        assert!(
            std::env::var("CI").is_err(),
            "CI must generate agent histories (scripts/agent-histories/generate.sh) and set CTXGC_AGENT_HISTORIES"
        );
        eprintln!(
            "CTXGC_AGENT_HISTORIES not set: run scripts/agent-histories/generate.sh to check real histories"
        );
        return None;
    };
    Some(dir)
}

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
