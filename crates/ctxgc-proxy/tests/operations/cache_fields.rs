//! Observe mode and the cache fields ctxgc sets or drops.

use super::*;

#[tokio::test]
async fn observe_mode_forwards_every_byte_and_says_what_it_would_have_saved() {
    let upstream = FakeUpstream::start(reply).await;
    let settings = ProxySettings {
        observe: true,
        ..settings(&upstream.url)
    };
    let state = AppState::new(settings, Box::new(MemoryStore::default())).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(ctxgc_proxy::serve_on(listener, state.clone()));
    // As a client writes it: spacing and key order ctxgc would not reproduce.
    let body = serde_json::to_string_pretty(&chat_body()).unwrap();
    for _ in 0..3 {
        let r = reqwest::Client::new()
            .post(format!("{proxy}/v1/chat/completions"))
            .bearer_auth("sk-observed-SECRET")
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        r.bytes().await.unwrap();
        let seen = upstream.log.last().unwrap();
        assert_eq!(seen.body, body.as_bytes(), "forwarded byte for byte");
    }
    // The observer works beside the requests: wait for it.
    let deadline = Instant::now() + Duration::from_secs(10);
    let stats = loop {
        let stats = state.stats();
        if stats.observe.is_some_and(|o| o.observed == 3) || Instant::now() > deadline {
            break stats;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let observe = stats.observe.unwrap();
    assert_eq!(
        (observe.observed, observe.skipped, observe.failed),
        (3, 0, 0)
    );
    assert_eq!(stats.rewritten, 0, "nothing was changed");
    let session = stats.usage.values().next().unwrap();
    assert_eq!(session.observed_requests, 3);
    assert!(
        session.would_send_tokens * 3 < session.observed_tokens,
        "{} would be sent instead of {}",
        session.would_send_tokens,
        session.observed_tokens
    );
    assert_eq!(
        stats.would_have_saved_tokens,
        Some(session.observed_tokens - session.would_send_tokens)
    );
    // The upstream's usage is recorded beside it, as the baseline.
    assert_eq!(session.input_tokens + session.cache_read_tokens, 3 * 900);
}

/// A gateway that refuses fields it does not know, as OpenAI answers an unknown argument: the
/// retention ctxgc adds for GPT-5 is refused, the request is resent once without it, the
/// client sees the answer, and the fall-back is counted with its cause.
#[tokio::test]
async fn a_refused_cache_field_is_dropped_and_the_request_resent_once() {
    let upstream = FakeUpstream::start(|r: Received, log: Log| {
        Box::pin(async move {
            let body: Value = serde_json::from_slice(&r.body).unwrap_or_default();
            if body.get("prompt_cache_retention").is_some() {
                return refusal("Unrecognized request argument supplied: prompt_cache_retention");
            }
            reply(r, log).await
        }) as Reply
    })
    .await;
    let state = AppState::new(settings(&upstream.url), Box::new(MemoryStore::default())).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(ctxgc_proxy::serve_on(listener, state.clone()));
    let client = reqwest::Client::new();
    let r = client
        .post(format!("{proxy}/v1/chat/completions"))
        .bearer_auth("sk-gateway")
        .json(&chat_body())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let sent = upstream.log.all();
    assert_eq!(sent.len(), 2, "sent once with the field, once without");
    let first: Value = serde_json::from_slice(&sent[0].body).unwrap();
    let second: Value = serde_json::from_slice(&sent[1].body).unwrap();
    assert_eq!(first["prompt_cache_retention"], "24h");
    assert!(second.get("prompt_cache_retention").is_none());
    assert_eq!(
        first["messages"], second["messages"],
        "only the cache field differs"
    );
    let metrics = metrics(&client, &proxy).await;
    assert!(
        metrics.contains("cause=\"cache_field\"} 1"),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("cache"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(metrics.contains("ctxgc_cache_fields_set_total{field=\"retention_24h\"} 1"));
    // A request ctxgc did not rewrite (its own cache key, nothing to trim) is resent as the
    // client's own bytes.
    let small = r#"{"model":"gpt-5-mini","prompt_cache_key":"k","messages":[{"role":"user","content":"hi"}]}"#;
    let before = upstream.log.len();
    let r = client
        .post(format!("{proxy}/v1/chat/completions"))
        .bearer_auth("sk-gateway")
        .header("content-type", "application/json")
        .body(small)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let sent = upstream.log.all();
    assert_eq!(sent.len(), before + 2);
    assert_eq!(
        sent[before + 1].body,
        small.as_bytes(),
        "the client's bytes"
    );
    // An error that names no cache field is the client's to see, not retried.
    let mut bad = chat_body();
    bad["model"] = json!("gpt-4o");
    bad["messages"] = json!("not a list");
    let before = upstream.log.len();
    let _ = client
        .post(format!("{proxy}/v1/chat/completions"))
        .bearer_auth("sk-gateway")
        .json(&bad)
        .send()
        .await
        .unwrap();
    assert!(upstream.log.len() <= before + 1);
}

/// GPT-5.6 through the proxy: no retention (the model refuses it), the explicit breakpoint at
/// the end of the stable prefix, the rest of the request trimmed as for any model; counted in
/// `/metrics` and in the session's figures.
#[tokio::test]
async fn a_gpt_5_6_request_carries_the_stable_prefix_breakpoint_and_no_retention() {
    let (proxy, upstream, state) = start(Box::new(MemoryStore::default())).await;
    let client = reqwest::Client::new();
    let mut body = chat_body();
    body["model"] = json!("gpt-5.6-terra");
    body["messages"].as_array_mut().unwrap().insert(
        0,
        json!({"role": "system", "content": "You are a coding agent."}),
    );
    let r = client
        .post(format!("{proxy}/v1/chat/completions"))
        .bearer_auth("sk-five-six")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let sent = upstream.log.all();
    assert_eq!(sent.len(), 1);
    let sent: Value = serde_json::from_slice(&sent[0].body).unwrap();
    assert!(sent.get("prompt_cache_retention").is_none());
    // The stable prefix ends with the task, the first user message after the system prompt.
    assert_eq!(
        sent["messages"][1]["content"],
        json!([{"type": "text", "text": "build", "prompt_cache_breakpoint": {"mode": "explicit"}}])
    );
    assert_eq!(sent["messages"][0], body["messages"][0], "the rest as sent");
    assert_eq!(sent["messages"][2], body["messages"][2]);
    let log = body["messages"][3]["content"].as_str().unwrap();
    assert!(sent["messages"][3]["content"].as_str().unwrap().len() < log.len());
    let metrics = metrics(&client, &proxy).await;
    assert!(
        metrics.contains("ctxgc_cache_fields_set_total{field=\"breakpoint\"} 1"),
        "{metrics}"
    );
    assert!(
        state
            .stats()
            .usage
            .values()
            .all(|u| u.breakpoint_requests == 1)
    );
}

/// A third-party gateway that refuses the cache key ctxgc sets for a session (with the text
/// such gateways answer): the request is resent once as the client sent it, and the caller's
/// later requests for that model carry none of ctxgc's cache fields, so each costs one request.
#[tokio::test]
async fn a_gateway_that_refuses_the_cache_key_costs_one_resend_not_one_per_request() {
    let upstream = FakeUpstream::start(|r: Received, log: Log| {
        Box::pin(async move {
            let body: Value = serde_json::from_slice(&r.body).unwrap_or_default();
            if body.get("prompt_cache_key").is_some()
                || body.get("prompt_cache_retention").is_some()
            {
                return refusal("Validation: Unsupported parameter(s): prompt_cache_key");
            }
            reply(r, log).await
        }) as Reply
    })
    .await;
    let state = AppState::new(settings(&upstream.url), Box::new(MemoryStore::default())).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(ctxgc_proxy::serve_on(listener, state.clone()));
    let client = reqwest::Client::new();
    let send = |key: &'static str, body: Value| {
        let request = client
            .post(format!("{proxy}/v1/chat/completions"))
            .bearer_auth(key)
            .json(&body);
        async move { request.send().await.unwrap().status() }
    };
    let mut body = chat_body();
    body["model"] = json!("gpt-4o");
    assert_eq!(send("sk-one", body.clone()).await, StatusCode::OK);
    let sent = upstream.log.all();
    assert_eq!(
        sent.len(),
        2,
        "once with the key, once as the client sent it"
    );
    let second: Value = serde_json::from_slice(&sent[1].body).unwrap();
    assert!(second.get("prompt_cache_key").is_none());
    // The next request of that caller for that model: one request, without the key, and
    // still trimmed.
    assert_eq!(send("sk-one", body.clone()).await, StatusCode::OK);
    let sent = upstream.log.all();
    assert_eq!(sent.len(), 3);
    let third: Value = serde_json::from_slice(&sent[2].body).unwrap();
    assert!(third.get("prompt_cache_key").is_none());
    let client_log = body["messages"][2]["content"].as_str().unwrap().len();
    assert!(third["messages"][2]["content"].as_str().unwrap().len() < client_log);
    // Another caller is not affected by what this one's requests provoked.
    assert_eq!(send("sk-two", body).await, StatusCode::OK);
    assert_eq!(upstream.log.len(), 5);
    let metrics = metrics(&client, &proxy).await;
    assert!(metrics.contains("cause=\"cache_field\"} 2"), "{metrics}");
}
