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

mod histories;
mod imports;

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
