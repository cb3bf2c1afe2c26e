//! The agent tools run by the proxy.

use super::*;

#[tokio::test]
async fn a_recall_is_run_by_the_proxy_and_the_client_gets_one_answer() {
    for (api, stream) in MODES {
        let h = start(&format!("recall-{}-{stream}", api.name())).await;
        let first = first_request(api, stream, &build_log());
        let got = h.send(api, &first).await;
        let ups = h.upstream_requests();
        let mode = format!("{} stream={stream}", api.name());
        assert_eq!(
            ups.len(),
            2,
            "{mode}: one round for the recall, one for the answer"
        );
        // The tools were offered, after the client's own.
        let names: Vec<String> = ups[0]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                t["name"]
                    .as_str()
                    .or(t["function"]["name"].as_str())
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert_eq!(
            names,
            ["bash", "trim_tool_result", "recall_tool_result"],
            "{mode}"
        );
        // The recalled error line reached the model and its answer reached the client, alone.
        assert!(
            got.text.contains("error[E0308]: mismatched types"),
            "{mode}: {}",
            got.raw
        );
        assert!(
            got.calls.is_empty() && !got.raw.contains("recall_tool_result"),
            "{mode}: {}",
            got.raw
        );
        if stream {
            assert_eq!(
                got.starts, 1,
                "{mode}: one message for the client: {}",
                got.raw
            );
            assert!(
                got.raw.contains("Let me look."),
                "{mode}: text before the internal call streams"
            );
        }
        // The next client request carries the exchange at the same place: the upstream sees the
        // second round's prompt as its prefix.
        let second = next_request(api, first, &got);
        h.send(api, &second).await;
        let ups = h.upstream_requests();
        assert_eq!(ups.len(), 3, "{mode}");
        let before = without_cache_control(&Value::Array(items(&ups[1]).clone()));
        let after = without_cache_control(&Value::Array(items(&ups[2]).clone()));
        let before = before.as_array().unwrap();
        assert_eq!(
            &after.as_array().unwrap()[..before.len()],
            before.as_slice(),
            "{mode}: prefix"
        );
        assert_eq!(ups[2]["tools"], ups[0]["tools"], "{mode}");
    }
}

/// An id a repeat pointer names answers a recall: the model reads a file, then reads it again
/// edited; the proxy turns the second read into pointers to the first (which entered whole),
/// and the model's recall of the id a pointer names gets the first read back.
#[tokio::test]
async fn the_id_a_repeat_pointer_names_answers_a_recall() {
    let h = start("pointer-recall").await;
    let file: String = (0..120)
        .map(|i| format!("    let value_{i} = compute({i}); // step {i} of the parser\n"))
        .collect();
    let edited = file.replace("value_60 =", "value_60 = 1 +");
    let body = json!({"model": "gpt-5",
    "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}],
    "messages": [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "fix the parser"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"cat parser.rs\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": file},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c2", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"cat parser.rs\"}"}}]},
        {"role": "tool", "tool_call_id": "c2", "content": edited}
    ]});
    let got = h.send(Api::ChatCompletions, &body).await;
    let ups = h.upstream_requests();
    let pointed = ups[0]["messages"][5]["content"].as_str().unwrap();
    assert!(
        pointed.starts_with("[lines 1-60 same as the result of c1 (id r-"),
        "{pointed}"
    );
    assert_eq!(ups.len(), 2, "one round for the recall, one for the answer");
    assert!(
        got.text.starts_with("seen: ") && !got.text.contains("no original"),
        "{}",
        got.raw
    );
    let id = find_id(pointed).unwrap();
    let recalled = ups[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["tool_call_id"] == "ctx_r")
        .and_then(|m| m["content"].as_str())
        .unwrap()
        .to_owned();
    assert!(
        !recalled.contains("no original"),
        "the recall of {id} answered: {recalled}"
    );
}

#[tokio::test]
async fn a_trim_beside_a_client_call_is_hidden_and_applied_to_later_requests() {
    for (api, stream) in MODES {
        let h = start(&format!("trim-{}-{stream}", api.name())).await;
        let result = format!("please trim\n{}", "step ok\n".repeat(200));
        let first = first_request(api, stream, &result);
        let got = h.send(api, &first).await;
        let mode = format!("{} stream={stream}", api.name());
        assert_eq!(
            h.upstream_requests().len(),
            1,
            "{mode}: the client's own call ends the round"
        );
        assert_eq!(got.calls.len(), 1, "{mode}: {}", got.raw);
        let (id, name, args, index) = &got.calls[0];
        assert_eq!((id.as_str(), name.as_str()), ("c2", "bash"), "{mode}");
        assert_eq!(
            serde_json::from_str::<Value>(args).unwrap(),
            json!({"command": "ls"})
        );
        assert_eq!(
            *index,
            if api == Api::ChatCompletions { 0 } else { 1 },
            "{mode}: renumbered"
        );
        assert!(!got.raw.contains("trim_tool_result"), "{mode}");
        // The client sends its result; the upstream sees the summary in place of the old result,
        // the internal call inside the assistant turn and its result beside the client's.
        let second = next_request(api, first, &got);
        h.send(api, &second).await;
        let ups = h.upstream_requests();
        let sent = ups.last().unwrap();
        let text = sent.to_string();
        assert!(
            !text.contains("please trim"),
            "{mode}: the trimmed result is gone"
        );
        let original = ContentId::of(result.as_bytes());
        assert!(
            text.contains(&format!(
                "[summary by the model; original: id {original}] build failed at step 3"
            )),
            "{mode}: {text}"
        );
        let messages = items(sent);
        // The turn: the assistant's calls (items of their own on Responses) and the results.
        let tail = json!(messages[messages.len().saturating_sub(4)..]).to_string();
        assert_eq!(
            tail.matches("\"ctx_t\"").count(),
            2,
            "{mode}: the internal call merged into the turn, its result beside the client's: {tail}"
        );
        // In the order the model emitted them: the trim first, then the client's call.
        let client_call = &got.calls[0].0;
        assert!(
            tail.find("\"ctx_t\"") < tail.find(&format!("\"{client_call}\"")),
            "{mode}: the model's order: {tail}"
        );
        // The original is in the store, recallable.
        let store = ctxgc_store::SqliteStore::open(&h.db).unwrap();
        let session = h.state.named_session(&Default::default(), "agent-test");
        assert_eq!(
            store.get(&session, original).unwrap().as_deref(),
            Some(result.as_str()),
            "{mode}"
        );
    }
}

#[tokio::test]
async fn a_model_that_keeps_calling_internal_tools_is_asked_to_answer() {
    for (api, stream) in MODES {
        let h = start(&format!("loop-{}-{stream}", api.name())).await;
        let got = h
            .send(api, &first_request(api, stream, "ALWAYS-RECALL"))
            .await;
        let ups = h.upstream_requests();
        let mode = format!("{} stream={stream}", api.name());
        assert_eq!(ups.len(), 4, "{mode}: four rounds at most");
        assert!(
            ups[..3].iter().all(|u| u.get("tool_choice").is_none()),
            "{mode}"
        );
        assert!(
            ups[3]["tool_choice"] == "none" || ups[3]["tool_choice"]["type"] == "none",
            "{mode}"
        );
        assert!(
            got.text.ends_with("answer without tools"),
            "{mode}: {}",
            got.raw
        );
        assert!(
            got.calls.is_empty() && !got.raw.contains("recall_tool_result"),
            "{mode}"
        );
    }
}
