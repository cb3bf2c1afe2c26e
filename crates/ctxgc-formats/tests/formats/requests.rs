//! Request bodies and the views of them.

use super::*;

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
