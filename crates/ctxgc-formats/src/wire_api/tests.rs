#[test]
fn an_assistant_items_text_is_replaced_in_every_api() {
    use serde_json::json;
    let cases = [
        (
            Api::ChatCompletions,
            json!({"role": "assistant", "content": "long"}),
        ),
        (
            Api::Messages,
            json!({"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s"}, {"type": "text", "text": "long"}, {"type": "text", "text": "more"}, {"type": "tool_use", "id": "x", "name": "n", "input": {}}]}),
        ),
        (
            Api::Responses,
            json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "long", "annotations": []}]}),
        ),
        (
            Api::Gemini,
            json!({"role": "model", "parts": [{"text": "why", "thought": true}, {"text": "long"}, {"functionCall": {"name": "n", "args": {}}}]}),
        ),
    ];
    for (api, mut item) in cases {
        let before = item.clone();
        assert!(api.wire().set_assistant_text(&mut item, "short"), "{api:?}");
        let text = item.to_string();
        assert!(text.contains("short") && !text.contains("long") && !text.contains("more"));
        // Everything else stays: thoughts, calls, annotations.
        for kept in [
            "thinking",
            "tool_use",
            "annotations",
            "functionCall",
            "\"why\"",
        ] {
            assert_eq!(
                before.to_string().contains(kept),
                text.contains(kept),
                "{api:?} {kept}"
            );
        }
    }
    let mut reasoning = json!({"type": "reasoning", "summary": []});
    assert!(
        !Api::Responses
            .wire()
            .set_assistant_text(&mut reasoning, "x")
    );
    assert_eq!(
        reasoning,
        json!({"type": "reasoning", "summary": []}),
        "nothing added"
    );
}

use super::*;

#[test]
fn each_api_answers_for_itself() {
    for api in [Api::ChatCompletions, Api::Responses, Api::Messages] {
        let wire = api.wire();
        assert_eq!(wire.api(), api);
        let items = wire.result_items(vec![wire.result_part("c1", "out")]);
        assert_eq!(items.len(), 1);
        assert!(wire.is_result_item(&items[0]), "{api:?}: {}", items[0]);
        assert!(!wire.is_call_item(&items[0]));
        assert_eq!(wire.agent_tools().len(), 2);
    }
    assert_eq!(Api::Messages.wire().upstream(), Upstream::Anthropic);
    assert_eq!(Api::Responses.wire().items_key(), "input");
    assert!(
        Api::Responses
            .wire()
            .is_call_item(&json!({"type": "local_shell_call", "call_id": "c"}))
    );
}
