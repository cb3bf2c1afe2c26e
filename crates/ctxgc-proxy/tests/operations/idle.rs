//! Keep-alives and idle sessions.

use super::*;

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
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(ctxgc_proxy::serve_on(listener, state));
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
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(ctxgc_proxy::serve_on(listener, state.clone()));
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
