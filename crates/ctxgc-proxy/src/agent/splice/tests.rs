use super::*;

fn feed_all(s: &mut Splicer, events: &[String]) -> String {
    let mut out = Vec::new();
    for e in events {
        // Split every event in two to exercise reassembly.
        let (a, b) = e.as_bytes().split_at(e.len() / 2);
        out.extend(s.feed(a));
        out.extend(s.feed(b));
    }
    String::from_utf8(out).unwrap()
}

fn chat_call(index: u64, id: &str, name: &str, args: &str) -> String {
    format!(
        "data: {}\n\n",
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": index, "id": id, "type": "function", "function": {"name": name, "arguments": args}}]}}]})
    )
}

fn chat_finish() -> String {
    format!(
        "data: {}\n\n",
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    )
}

#[test]
fn chat_internal_only_round_is_held_back_and_asks_for_a_follow_up() {
    let mut s = Splicer::new(Api::ChatCompletions);
    let events = vec![
        format!(
            "data: {}\n\n",
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Let me look."}}]})
        ),
        chat_call(0, "t1", "recall_tool_result", "{\"id\":"),
        format!(
            "data: {}\n\n",
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "\"r-1\"}"}}]}}]})
        ),
        chat_finish(),
        "data: [DONE]\n\n".to_owned(),
    ];
    let out = feed_all(&mut s, &events);
    assert_eq!(out, events[0], "only the text reaches the client");
    let (rest, round) = s.finish();
    assert!(rest.is_empty() && round.follow_up);
    assert_eq!(round.calls.len(), 1);
    assert_eq!(round.calls[0].arguments, json!({"id": "r-1"}));
    assert_eq!(round.assistant[0]["content"], "Let me look.");
    assert_eq!(
        round.assistant[0]["tool_calls"][0]["function"]["name"],
        "recall_tool_result"
    );
    // The next round streams through unchanged.
    let next = vec![
        format!(
            "data: {}\n\n",
            json!({"choices": [{"index": 0, "delta": {"content": "Found it."}, "finish_reason": "stop"}]})
        ),
        "data: [DONE]\n\n".to_owned(),
    ];
    assert_eq!(feed_all(&mut s, &next), next.concat());
    assert!(!s.finish().1.follow_up);
}

/// Defect guarded: after an internal round, Chat chunks carried two `chatcmpl-` ids and
/// `response.completed` another response id than `response.created` (openai-python's
/// `responses.stream()` raises "Lifecycle response identity changed").
#[test]
fn one_streamed_response_keeps_one_id_over_its_rounds() {
    let mut s = Splicer::new(Api::ChatCompletions);
    let chunk = |id: &str, delta: Value, finish: Value| {
        format!(
            "data: {}\n\n",
            json!({"id": id, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        )
    };
    feed_all(
        &mut s,
        &[
            chunk(
                "chatcmpl-1",
                json!({"role": "assistant", "content": "Let me look."}),
                Value::Null,
            ),
            format!(
                "data: {}\n\n",
                json!({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "t1", "type": "function", "function": {"name": "recall_tool_result", "arguments": "{}"}}]}}]})
            ),
            chunk("chatcmpl-1", json!({}), json!("tool_calls")),
        ],
    );
    assert!(s.finish().1.follow_up);
    let out = feed_all(
        &mut s,
        &[chunk(
            "chatcmpl-2",
            json!({"content": "Found it."}),
            json!("stop"),
        )],
    );
    assert!(
        out.contains("chatcmpl-1") && !out.contains("chatcmpl-2"),
        "{out}"
    );

    let mut s = Splicer::new(Api::Responses);
    let event = |v: Value| format!("event: {}\ndata: {v}\n\n", v["type"].as_str().unwrap());
    feed_all(
        &mut s,
        &[
            event(
                json!({"type": "response.created", "sequence_number": 0, "response": {"id": "resp_1", "output": []}}),
            ),
            event(
                json!({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0, "item": {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "recall_tool_result", "arguments": ""}}),
            ),
            event(
                json!({"type": "response.output_item.done", "sequence_number": 2, "output_index": 0, "item": {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "recall_tool_result", "arguments": "{\"id\":\"r-1\"}"}}),
            ),
            event(
                json!({"type": "response.completed", "sequence_number": 3, "response": {"id": "resp_1", "output": []}}),
            ),
        ],
    );
    assert!(s.finish().1.follow_up);
    let out = feed_all(
        &mut s,
        &[
            event(
                json!({"type": "response.created", "sequence_number": 0, "response": {"id": "resp_2", "output": []}}),
            ),
            event(
                json!({"type": "response.completed", "sequence_number": 1, "response": {"id": "resp_2", "output": []}}),
            ),
        ],
    );
    assert!(out.contains("resp_1") && !out.contains("resp_2"), "{out}");
}

#[test]
fn chat_mixed_calls_show_only_the_clients_renumbered() {
    let mut s = Splicer::new(Api::ChatCompletions);
    let events = vec![
        chat_call(0, "t1", "trim_tool_result", "{\"summary\":\"x\"}"),
        chat_call(1, "c1", "bash", "{}"),
        chat_finish(),
        "data: [DONE]\n\n".to_owned(),
    ];
    let out = feed_all(&mut s, &events);
    assert!(!out.contains("trim_tool_result"));
    assert!(
        out.contains("\"index\":0") && out.contains("\"c1\""),
        "{out}"
    );
    assert!(out.contains("tool_calls\"}") || out.contains("\"finish_reason\":\"tool_calls\""));
    assert!(out.ends_with("data: [DONE]\n\n"));
    let (_, round) = s.finish();
    assert!(!round.follow_up);
    assert_eq!(round.calls.len(), 2);
}

#[test]
fn chat_without_internal_calls_is_byte_identical() {
    let mut s = Splicer::new(Api::ChatCompletions);
    let events = vec![
        chat_call(0, "c1", "bash", "{}"),
        chat_finish(),
        "data: [DONE]\n\n".to_owned(),
    ];
    assert_eq!(feed_all(&mut s, &events), events.concat());
}

fn ev(v: Value) -> String {
    format!("event: {}\ndata: {}\n\n", v["type"].as_str().unwrap(), v)
}

#[test]
fn anthropic_rounds_continue_one_message_for_the_client() {
    let mut s = Splicer::new(Api::Messages);
    let round1 = vec![
        ev(json!({"type": "message_start", "message": {"id": "m1", "content": []}})),
        ev(
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
        ),
        ev(
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hmm"}}),
        ),
        ev(
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig"}}),
        ),
        ev(json!({"type": "content_block_stop", "index": 0})),
        ev(
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "t1", "name": "recall_tool_result", "input": {}}}),
        ),
        ev(
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"id\": \"r-1\"}"}}),
        ),
        ev(json!({"type": "content_block_stop", "index": 1})),
        ev(
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}),
        ),
        ev(json!({"type": "message_stop"})),
    ];
    let out = feed_all(&mut s, &round1);
    assert_eq!(
        out,
        round1[..5].concat(),
        "thinking shown, the internal call held"
    );
    let (_, round) = s.finish();
    assert!(round.follow_up);
    let content = &round.assistant[0]["content"];
    assert_eq!(content[0]["signature"], "sig");
    assert_eq!(content[1]["input"], json!({"id": "r-1"}));
    let round2 = vec![
        ev(json!({"type": "message_start", "message": {"id": "m2", "content": []}})),
        ev(
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        ev(
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "done"}}),
        ),
        ev(json!({"type": "content_block_stop", "index": 0})),
        ev(
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}}),
        ),
        ev(json!({"type": "message_stop"})),
    ];
    let out = feed_all(&mut s, &round2);
    assert!(!out.contains("message_start"));
    assert!(out.contains("\"index\":1"), "indices continue: {out}");
    assert!(out.contains("end_turn") && out.ends_with(&round2[5]));
}
