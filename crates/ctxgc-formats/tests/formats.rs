//! End-to-end checks of the formats crate on real and hand-written data.
//!
//! The real transcripts and client requests live in `../shared/data` beside the checkout (see
//! its README). When that folder is absent (a clone outside the project's machines), the tests
//! that need it say so and return; CI always has it.

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
        let t = &imported.transcript;
        assert!(!t.messages.is_empty(), "{}", imported.path.display());
        // Canonical JSONL round trip keeps the whole model.
        let back = import::read_jsonl(&import::write_jsonl(t)).unwrap();
        assert_eq!(back.messages, t.messages, "{}", imported.path.display());
        // Every result answers a call.
        let calls: Vec<&str> = t
            .messages
            .iter()
            .flat_map(|m| m.tool_calls())
            .map(|c| c.id.as_str())
            .collect();
        for r in t.messages.iter().flat_map(|m| m.tool_results()) {
            assert!(
                calls.contains(&r.call_id.as_str()),
                "{}: orphan {}",
                imported.path.display(),
                r.call_id
            );
        }
    }
    assert_eq!(counts.get("mini-swe-agent-1"), Some(&190));
    assert_eq!(counts.get("mini-swe-agent-1.1"), Some(&45));
    assert_eq!(counts.get("swe-agent"), Some(&19));
    // The text-protocol sessions record usage on their assistant messages.
    let gemini = results
        .iter()
        .flatten()
        .find(|i| i.format == SourceFormat::MiniSweAgent1)
        .unwrap();
    assert!(gemini.transcript.messages.iter().any(|m| m.usage.is_some()));
}
