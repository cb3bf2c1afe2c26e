//! Metrics, health, shutdown, a failing store, memory and deadline limits.

use super::*;

#[tokio::test]
async fn metrics_parse_as_prometheus_text_and_agree_with_the_stats() {
    let (proxy, _upstream, state) = start(Box::new(MemoryStore::default())).await;
    let client = reqwest::Client::new();
    for key in ["sk-one-SECRET", "sk-two-SECRET"] {
        let r = client
            .post(format!("{proxy}/v1/chat/completions"))
            .bearer_auth(key)
            .json(&chat_body())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        r.bytes().await.unwrap();
    }
    let r = client.get(format!("{proxy}/metrics")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    let text = r.text().await.unwrap();
    let lines = text.lines().map(|l| Ok(l.to_owned()));
    let scrape = prometheus_parse::Scrape::parse(lines).unwrap();
    let value = |name: &str, labels: &[(&str, &str)]| -> f64 {
        scrape
            .samples
            .iter()
            .filter(|s| s.metric == name)
            .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
            .map(|s| match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                _ => 0.0,
            })
            .sum()
    };
    let stats = state.stats();
    assert_eq!(
        value(
            "ctxgc_requests_total",
            &[("api", "openai-chat"), ("outcome", "rewritten")]
        ),
        stats.rewritten as f64
    );
    assert_eq!(stats.rewritten, 2);
    assert_eq!(
        value("ctxgc_trimmed_bytes_total", &[]),
        stats.bytes_saved as f64
    );
    assert_eq!(
        value("ctxgc_originals_stored_total", &[]),
        stats.originals_stored as f64
    );
    assert_eq!(value("ctxgc_fail_open_total", &[]), 0.0);
    assert_eq!(value("ctxgc_sessions", &[]), 2.0);
    // What the upstream billed for what was sent, at GPT-5's prices in the lab's table: each
    // request 388 uncached, 512 cached and 2 output tokens ($1.25, $0.125, $10 per million).
    let billed = 2.0 * (388.0 * 1.25 + 512.0 * 0.125 + 2.0 * 10.0) / 1e6;
    assert!(
        (stats.billed_usd - billed).abs() < 1e-9,
        "{} vs {billed}",
        stats.billed_usd
    );
    assert_eq!(stats.unpriced_sessions, 0);
    assert!(
        stats
            .usage
            .values()
            .all(|u| u.billed_usd.is_some() && u.retention_24h_requests == 1)
    );
    // The upstream's latency was observed twice.
    let histogram = scrape
        .samples
        .iter()
        .find(|s| s.metric == "ctxgc_upstream_seconds")
        .unwrap();
    match &histogram.value {
        prometheus_parse::Value::Histogram(buckets) => {
            assert_eq!(buckets.last().unwrap().count, 2.0, "{buckets:?}");
        }
        other => panic!("not a histogram: {other:?}"),
    }
    // Each request went through every stage of the pipeline once, and each stage's series is
    // its own histogram (the label before `le`).
    for stage in [
        "parse",
        "queue",
        "agent_tools",
        "rewrite",
        "events",
        "commit",
    ] {
        let series = scrape
            .samples
            .iter()
            .find(|s| s.metric == "ctxgc_stage_seconds" && s.labels.get("stage") == Some(stage))
            .unwrap_or_else(|| panic!("no ctxgc_stage_seconds for {stage}:\n{text}"));
        match &series.value {
            prometheus_parse::Value::Histogram(buckets) => {
                assert_eq!(buckets.last().unwrap().count, 2.0, "{stage}: {buckets:?}");
            }
            other => panic!("{stage}: not a histogram: {other:?}"),
        }
    }
    // No label names a tenant or a session, and no key appears.
    for s in &scrape.samples {
        for k in s.labels.keys() {
            assert!(!["tenant", "session"].contains(&k.as_str()), "{k}");
        }
    }
    assert!(!text.contains("SECRET"));
}

#[tokio::test]
async fn health_is_the_process_and_readiness_is_the_store() {
    ctxgc_summarize::install_crypto();
    let client = reqwest::Client::new();
    let (up, _u, _s) = start(Box::new(MemoryStore::default())).await;
    for path in ["/ctxgc/healthz", "/ctxgc/readyz"] {
        let r = client.get(format!("{up}{path}")).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{path}");
    }
    let (down, _u, state) = start(Box::new(DownStore)).await;
    let r = client
        .get(format!("{down}/ctxgc/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "the process is up");
    let r = client
        .get(format!("{down}/ctxgc/readyz"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(r.text().await.unwrap().contains("connection refused"));
    // A request still goes through, unchanged, and the cause is counted.
    let r = client
        .post(format!("{down}/v1/chat/completions"))
        .json(&chat_body())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(state.stats().fail_open, 1);
    let text = metrics(&client, &down).await;
    // The failure is the store's: its call failed, or (the store failed at start-up, when the
    // proxy first looked at it) was not made while the store rests.
    assert!(
        text.contains("ctxgc_fail_open_total{cause=\"store\"} 1\n")
            || text.contains("ctxgc_fail_open_total{cause=\"store_resting\"} 1\n"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_a_ten_second_stream_finish_and_accepts_nothing_new() {
    let upstream = FakeUpstream::start(reply).await;
    let state = AppState::new(settings(&upstream.url), Box::new(MemoryStore::default())).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(ctxgc_proxy::serve_until(listener, state, async {
        let _ = stopped.await;
    }));
    let started = Instant::now();
    let stream = tokio::spawn(async move {
        let r = reqwest::Client::new()
            .post(format!("http://{address}/v1/slow"))
            .body("{}")
            .send()
            .await
            .unwrap();
        r.text().await.unwrap()
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // No new connection once shutdown began.
    let refused = reqwest::Client::new()
        .get(format!("http://{address}/ctxgc/healthz"))
        .timeout(Duration::from_secs(2))
        .send()
        .await;
    assert!(
        refused.is_err(),
        "a connection was accepted during shutdown"
    );
    let body = stream.await.unwrap();
    let events = body.matches("data: ").count();
    assert_eq!(events, SLOW_EVENTS, "the stream in flight finished: {body}");
    assert!(started.elapsed() >= Duration::from_secs(SLOW_EVENTS as u64));
    let finished = tokio::time::timeout(Duration::from_secs(5), server).await;
    assert!(matches!(finished, Ok(Ok(Ok(())))), "the server returned");
}

/// Defect guarded: with `shutdown_grace_secs` shorter than a stream, the stream was cut with no
/// error event and the process exited 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_at_the_end_of_the_grace_ends_with_its_apis_error_event() {
    let upstream = FakeUpstream::start(reply).await;
    let settings = ProxySettings {
        timeouts: Timeouts {
            shutdown_grace: Duration::from_secs(1),
            ..Timeouts::default()
        },
        ..settings(&upstream.url)
    };
    let state = AppState::new(settings, Box::new(MemoryStore::default())).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(ctxgc_proxy::serve_until(listener, state.clone(), async {
        let _ = stopped.await;
    }));
    let stream = tokio::spawn(async move {
        let body = json!({"model": "slow", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
        let r = reqwest::Client::new()
            .post(format!("http://{address}/v1/chat/completions"))
            .json(&body)
            .send()
            .await
            .unwrap();
        r.text().await.unwrap_or_default()
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.send(()).unwrap();
    let body = tokio::time::timeout(Duration::from_secs(8), stream)
        .await
        .expect("the stream ends at the end of the grace")
        .unwrap();
    assert!(body.starts_with("data: {\"n\":0}"), "{body}");
    // Chat Completions' own error event, then its end.
    assert!(
        body.contains("data: {\"error\":") && body.contains("shutting down"),
        "{body}"
    );
    assert!(body.matches("data: {\"n\"").count() < SLOW_EVENTS);
    assert_eq!(
        state.streams_cut(),
        1,
        "the cut is counted for the exit status"
    );
    let finished = tokio::time::timeout(Duration::from_secs(5), server).await;
    assert!(matches!(finished, Ok(Ok(Ok(())))), "the server returned");
}

/// Defect guarded: a paused store cost every request one deadline per store call (throughput
/// fell from ~280 to ~13 requests/s) and readiness took 4 s to answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_store_costs_one_deadline_and_readiness_answers_at_once() {
    ctxgc_summarize::install_crypto();
    let client = reqwest::Client::new();
    let store = Arc::new(StalledStore {
        calls: Default::default(),
    });
    let (proxy, _u, state) = start(Box::new(store.clone())).await;
    // The first call fails at its deadline and the breaker opens: what follows fails open at
    // once.
    let started = Instant::now();
    for _ in 0..10 {
        let r = client
            .post(format!("{proxy}/v1/chat/completions"))
            .json(&chat_body())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
    }
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(1500),
        "10 requests took {took:?}"
    );
    let readiness = Instant::now();
    let r = client
        .get(format!("{proxy}/ctxgc/readyz"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(readiness.elapsed() < Duration::from_millis(100));
    assert_eq!(state.stats().fail_open, 10);
    let calls = store.calls.load(std::sync::atomic::Ordering::SeqCst);
    assert!(calls <= 4, "{calls} store calls for 10 requests");
    let text = metrics(&client, &proxy).await;
    assert!(text.contains("ctxgc_store_resting 1\n"), "{text}");
    assert!(
        text.contains("ctxgc_fail_open_total{cause=\"store_resting\"}"),
        "{text}"
    );
}

/// Defect guarded: a Redis without persistence lost the tenant secret on restart (a replica
/// started afterwards computed another tenant for the same key), and originals the model had
/// been told to recall were never stored again, as the proxy remembered them as written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_restarts_empty_gets_the_secret_and_the_originals_back() {
    ctxgc_summarize::install_crypto();
    let upstream = FakeUpstream::start(reply).await;
    let store = Arc::new(Restartable::default());
    store.restart_empty();
    // No configured secret: the store keeps it.
    let settings = ProxySettings {
        tenant_secret: None,
        ..settings(&upstream.url)
    };
    let state = AppState::new(settings.clone(), Box::new(store.clone())).unwrap();
    let proxy = common::serve_on_loopback(state.clone()).await;
    let client = reqwest::Client::new();
    let headers = [
        ("authorization", "Bearer sk-restart"),
        ("x-ctxgc-session", "s1"),
    ];
    let send = || {
        let mut r = client.post(format!("{proxy}/v1/chat/completions"));
        for (k, v) in headers {
            r = r.header(k, v);
        }
        r.json(&chat_body()).send()
    };
    assert_eq!(send().await.unwrap().status(), StatusCode::OK);
    let log = chat_body()["messages"][2]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    let id = ContentId::of(log.as_bytes());
    let mut hm = axum::http::HeaderMap::new();
    hm.insert("authorization", "Bearer sk-restart".parse().unwrap());
    let session = state.named_session(&hm, "s1");
    let tenant = state.tenant(&hm);
    assert_eq!(
        store.get(&session, id).unwrap().as_deref(),
        Some(log.as_str())
    );
    let secret = store
        .get_state(StateKey::Server("tenant-secret"))
        .unwrap()
        .expect("kept");

    store.restart_empty();
    // Within a second or two the proxy sees the loss and puts its secret back.
    let deadline = Instant::now() + Duration::from_secs(5);
    while store
        .get_state(StateKey::Server("tenant-secret"))
        .unwrap()
        .is_none()
    {
        assert!(Instant::now() < deadline, "the secret was not put back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        store.get_state(StateKey::Server("tenant-secret")).unwrap(),
        Some(secret)
    );
    // A replica started now takes the same secret: the same key is the same tenant.
    let replica = AppState::new(settings, Box::new(store.clone())).unwrap();
    assert_eq!(replica.tenant(&hm).as_str(), tenant.as_str());
    // The client resends its history: the original the model was told about is stored again.
    assert_eq!(send().await.unwrap().status(), StatusCode::OK);
    assert_eq!(
        store.get(&session, id).unwrap().as_deref(),
        Some(log.as_str())
    );
    let text = metrics(&client, &proxy).await;
    assert!(text.contains("ctxgc_store_losses_total 1\n"), "{text}");
}

/// Past the in-flight memory budget a request is streamed upstream as it came, whole and
/// unbuffered; within it, requests are rewritten as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_memory_budget_a_request_streams_upstream_unchanged() {
    ctxgc_summarize::install_crypto();
    let upstream = FakeUpstream::start(reply).await;
    let settings = ProxySettings {
        limits: ctxgc_proxy::Limits {
            inflight_bytes: 500_000,
            ..Default::default()
        },
        ..settings(&upstream.url)
    };
    let state = AppState::new(settings, Box::new(MemoryStore::default())).unwrap();
    let proxy = common::serve_on_loopback(state.clone()).await;
    let client = reqwest::Client::new();
    // 100 KB body: 400 KB with its parse, within the budget: rewritten.
    let small = chat_body().to_string();
    assert!(small.len() * 4 <= 500_000, "{}", small.len());
    client
        .post(format!("{proxy}/v1/chat/completions"))
        .body(small.clone())
        .send()
        .await
        .unwrap();
    let first = upstream.log.all().pop().unwrap();
    assert!(first.body.len() < small.len() / 2, "trimmed");
    // Twice as big: past the budget, forwarded byte for byte, declared length or not.
    let mut big = chat_body();
    let log = big["messages"][2]["content"].as_str().unwrap().repeat(2);
    big["messages"][2]["content"] = json!(log);
    let big = big.to_string();
    let r = client
        .post(format!("{proxy}/v1/chat/completions"))
        .body(big.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(upstream.log.all().pop().unwrap().body, big.as_bytes());
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = big
        .as_bytes()
        .chunks(8192)
        .map(|c| Ok(c.to_vec()))
        .collect();
    let r = client
        .post(format!("{proxy}/v1/chat/completions"))
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
            chunks,
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(upstream.log.all().pop().unwrap().body, big.as_bytes());
    let text = metrics(&client, &proxy).await;
    assert!(
        text.contains("ctxgc_fail_open_total{cause=\"memory\"} 2\n"),
        "{text}"
    );
    assert!(text.contains("ctxgc_inflight_bytes 0\n"), "{text}");
}

/// Defect guarded: the rewrite had no deadline (a request of 40,000 tool results held a rewrite
/// slot for 7.5 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewrite_past_its_deadline_goes_upstream_unchanged() {
    ctxgc_summarize::install_crypto();
    let upstream = FakeUpstream::start(reply).await;
    let settings = ProxySettings {
        max_body_bytes: 32 << 20,
        limits: ctxgc_proxy::Limits {
            rewrite_deadline: Duration::from_millis(10),
            ..Default::default()
        },
        ..settings(&upstream.url)
    };
    let state = AppState::new(settings, Box::new(MemoryStore::default())).unwrap();
    let proxy = common::serve_on_loopback(state.clone()).await;
    let mut messages = vec![json!({"role": "user", "content": "check"})];
    for i in 0..20_000 {
        let id = format!("call_{i}");
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}));
        messages
            .push(json!({"role": "tool", "tool_call_id": id, "content": format!("{i} f{i}.py")}));
    }
    let body = json!({"model": "gpt-5", "prompt_cache_key": "k", "messages": messages}).to_string();
    let r = reqwest::Client::new()
        .post(format!("{proxy}/v1/chat/completions"))
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(upstream.log.all().pop().unwrap().body, body.as_bytes());
    let text = metrics(&reqwest::Client::new(), &proxy).await;
    assert!(
        text.contains("ctxgc_fail_open_total{cause=\"deadline\"} 1\n"),
        "{text}"
    );
}
