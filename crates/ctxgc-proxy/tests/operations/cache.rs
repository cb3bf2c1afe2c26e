//! Observe mode, the cache fields ctxgc sets or drops, keep-alives and idle sessions.

use super::*;

#[tokio::test]
async fn observe_mode_forwards_every_byte_and_says_what_it_would_have_saved() {
    let upstream = FakeUpstream::start(reply).await;
    let settings = ProxySettings {
        observe: true,
        ..settings(&upstream.url)
    };
    let state = AppState::new(settings, Box::new(MemoryStore::default())).unwrap();
    let proxy = common::serve_on_loopback(state.clone()).await;
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
    let (upstream, proxy) = behind_a_gateway_refusing(
        &["prompt_cache_retention"],
        "Unrecognized request argument supplied: prompt_cache_retention",
    )
    .await;
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
    let (upstream, proxy) = behind_a_gateway_refusing(
        &["prompt_cache_key", "prompt_cache_retention"],
        "Validation: Unsupported parameter(s): prompt_cache_key",
    )
    .await;
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

/// Keep-alives end to end, on a clock where a second lasts 4 ms (a five-minute lifetime passes
/// in 1.2 s): once a session has paused past its entry's lifetime and come back, the caller
/// that turned them on gets keep-alives of its latest request, on its own key, before its entry
/// expires, counted in `/ctxgc/stats` and `/metrics`; before that pause it gets none (a session
/// idle after its first request has most likely ended); a caller that did not turn them on gets
/// none; a request with a thinking budget gets none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalives_go_only_to_callers_that_turned_them_on() {
    let upstream = FakeUpstream::start(anthropic_reply).await;
    let mut settings = settings(&upstream.url);
    settings.rewrite.cache.keepalive = true;
    settings.keepalive.second = Duration::from_millis(4);
    let state = AppState::new(settings, Box::new(MemoryStore::default())).unwrap();
    let proxy = common::serve_on_loopback(state).await;
    let client = reqwest::Client::new();
    let send = |key: &'static str, consent: Option<&'static str>, thinking: bool| {
        let mut body = json!({"model": "claude-sonnet-4-5", "max_tokens": 4096, "stream": false,
            "system": [{"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": format!("task of {key}"), "cache_control": {"type": "ephemeral"}}]}]});
        if thinking {
            body["thinking"] = json!({"type": "enabled", "budget_tokens": 2048});
        }
        let mut request = client
            .post(format!("{proxy}/v1/messages"))
            .header("x-api-key", key)
            .header("anthropic-version", "2023-06-01")
            .json(&body);
        if let Some(consent) = consent {
            request = request.header("x-ctxgc-keepalive", consent);
        }
        request.send()
    };
    let send_all = async || {
        for (key, consent, thinking) in [
            ("sk-ant-on", Some("on"), false),
            ("sk-ant-silent", None, false),
            ("sk-ant-thinking", Some("on"), true),
        ] {
            let sent = send(key, consent, thinking).await.unwrap();
            assert!(sent.status().is_success(), "{key}");
        }
    };
    let keepalives = || {
        upstream
            .log
            .all()
            .into_iter()
            .filter(|r| {
                serde_json::from_slice::<Value>(&r.body).is_ok_and(|b| b["max_tokens"] == 1)
            })
            .collect::<Vec<_>>()
    };
    // Each session's first request, then a pause of 400 "seconds" (1.6 s), past the 5-minute
    // lifetime, and the session resumes.
    send_all().await;
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    assert!(
        keepalives().is_empty(),
        "no keep-alive before the session has come back from a pause"
    );
    send_all().await;
    // The next keep-alive is judged at 270 "seconds" (1.08 s).
    let deadline = Instant::now() + Duration::from_secs(10);
    while keepalives().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let sent = keepalives();
    assert!(!sent.is_empty(), "no keep-alive within 10 s");
    for k in &sent {
        assert_eq!(
            k.headers["x-api-key"], "sk-ant-on",
            "only the caller that turned them on"
        );
        assert!(
            !k.headers.contains_key("x-ctxgc-keepalive"),
            "ctxgc's header stays here"
        );
        let body: Value = serde_json::from_slice(&k.body).unwrap();
        assert_eq!(body["stream"], false);
        assert_eq!(
            body["messages"][0]["content"][0]["text"],
            "task of sk-ant-on"
        );
        assert_eq!(
            body["system"][0]["cache_control"]["type"], "ephemeral",
            "the same breakpoints"
        );
    }
    let stats: Value = client
        .get(format!("{proxy}/ctxgc/stats"))
        .header("x-api-key", "sk-ant-on")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(stats["keepalives"].as_u64() >= Some(1), "{stats}");
    let session = stats["usage"]
        .as_object()
        .unwrap()
        .values()
        .next()
        .unwrap()
        .clone();
    assert!(session["keepalives"].as_u64() >= Some(1), "{session}");
    assert!(
        session["keepalive_cache_read_tokens"].as_u64() >= Some(5000),
        "{session}"
    );
    let metrics = metrics(&client, &proxy).await;
    assert!(
        metrics.contains("ctxgc_keepalives_total{outcome=\"sent\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("ctxgc_keepalives_total{outcome=\"failed\"} 0"),
        "{metrics}"
    );
}

/// Idle preparation, on a clock where a second lasts 50 ms: a session whose cache the engine
/// counts cold after 1 s idle is prepared about 32 "seconds" (1.6 s) after its latest request.
/// The prune its next request would have run runs then, in the background, and the request that
/// resumes the session carries it without running another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_sessions_event_is_ready_before_it_resumes() {
    let logs = ctxgc_test_support::logs::capture();
    let upstream = FakeUpstream::start(reply).await;
    let mut settings = settings(&upstream.url);
    settings.rewrite.window = 200_000;
    settings.rewrite.engine = Some(ctxgc_core::engine::Policy {
        cold_cache_secs: 1,
        openai_cold_cache_secs: 1,
        ..ctxgc_core::engine::Policy::default()
    });
    settings.rewrite.events_only_when_cold = true;
    settings.keepalive.second = Duration::from_millis(50);
    let state = AppState::new(settings, Box::new(MemoryStore::default())).unwrap();
    let proxy = common::serve_on_loopback(state.clone()).await;
    let client = reqwest::Client::new();
    let mut messages = vec![
        json!({"role": "system", "content": "You are a coding agent."}),
        json!({"role": "user", "content": "Fix the flaky test."}),
    ];
    let turn = async |messages: &mut Vec<Value>, n: usize| {
        let id = format!("call_{n}");
        messages.push(json!({"role": "assistant", "content": format!("Step {n}."), "tool_calls": [{"id": id, "type": "function", "function": {"name": "bash", "arguments": format!("{{\"command\":\"pytest -k case_{n}\"}}")}}]}));
        let output: String = (0..900)
            .map(|i| format!("w{} ", (i * 7919 + n * 104_729) % 10_007))
            .collect();
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": format!("{output}\nexit status: {}\n", n % 2)}));
        let r = client
            .post(format!("{proxy}/v1/chat/completions"))
            .json(&json!({"model": "gpt-4o", "messages": messages}))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success());
        let sent: Value = serde_json::from_slice(&upstream.log.last().unwrap().body).unwrap();
        sent["messages"].as_array().unwrap().clone()
    };
    for n in 0..30 {
        turn(&mut messages, n).await;
    }
    assert_eq!(state.stats().events, 0, "no event while the cache is warm");
    let deadline = Instant::now() + Duration::from_secs(10);
    while state.stats().events == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        state.stats().events,
        1,
        "prepared while idle, before any request came"
    );
    // Past the engine's cold threshold for certain (whole seconds): the request is judged cold
    // and would prune again but for the prepared event.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let resumed = turn(&mut messages, 30).await;
    assert_eq!(
        state.stats().events,
        1,
        "the resumed request ran no event of its own: {}",
        logs.text()
    );
    let size = |m: &[Value]| serde_json::to_vec(m).unwrap().len();
    assert!(
        size(&resumed) * 2 < size(&messages),
        "it carries the prune: {} of {} bytes sent",
        size(&resumed),
        size(&messages)
    );
    assert_eq!(
        resumed[..2],
        messages[..2],
        "the system prompt and task stay"
    );
}

/// The proxy in front of a gateway that answers 400 with `message` to a request carrying any
/// of `fields`, and answers the others: the upstream and the proxy's URL.
async fn behind_a_gateway_refusing(
    fields: &'static [&'static str],
    message: &'static str,
) -> (FakeUpstream, String) {
    let upstream = FakeUpstream::start(move |r: Received, log: Log| {
        Box::pin(async move {
            let body: Value = serde_json::from_slice(&r.body).unwrap_or_default();
            if fields.iter().any(|field| body.get(*field).is_some()) {
                return refusal(message);
            }
            reply(r, log).await
        }) as Reply
    })
    .await;
    let state = AppState::new(settings(&upstream.url), Box::new(MemoryStore::default())).unwrap();
    (upstream, common::serve_on_loopback(state).await)
}
