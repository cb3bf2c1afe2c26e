//! What an operator runs the proxy with: Prometheus metrics that parse and agree with
//! `/ctxgc/stats`, health and readiness, and a graceful shutdown that lets a stream in flight
//! finish.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use axum::response::Response;
use ctxgc_core::ContentId;
use ctxgc_core::store::{
    MemoryStore, OriginalStore, SessionId, StateKey, StateStore, Store, StoreError,
};
use ctxgc_proxy::{AppState, ProxySettings, Timeouts};
use ctxgc_test_support::{FakeUpstream, Log, Received, Reply};
use serde_json::{Value, json};

/// How many events the slow stream sends, one a second.
const SLOW_EVENTS: usize = 10;

fn reply(r: Received, _log: Log) -> Reply {
    Box::pin(async move {
        let slow_chat = r.path == "/v1/chat/completions"
            && serde_json::from_slice::<Value>(&r.body).is_ok_and(|b| b["model"] == "slow");
        if r.path == "/v1/slow" || slow_chat {
            let events = futures_util::stream::unfold(0usize, |k| async move {
                if k == SLOW_EVENTS {
                    return None;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
                let event = format!("data: {{\"n\":{k}}}\n\n");
                Some((Ok::<_, std::io::Error>(Bytes::from(event)), k + 1))
            });
            return Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(events))
                .unwrap();
        }
        let reply = json!({"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}],
            "usage": {"prompt_tokens": 900, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 512}}});
        Response::builder()
            .header("content-type", "application/json")
            .body(Body::from(reply.to_string()))
            .unwrap()
    })
}

fn settings(upstream: &str) -> ProxySettings {
    ProxySettings {
        tenant_secret: Some("operations-test".into()),
        admin_token: Some("admin-token-for-tests".into()),
        timeouts: Timeouts {
            shutdown_grace: Duration::from_secs(20),
            ..Timeouts::default()
        },
        ..common::settings(upstream)
    }
}

async fn start(store: Box<dyn Store>) -> (String, FakeUpstream, Arc<AppState>) {
    let upstream = FakeUpstream::start(reply).await;
    let state = AppState::new(settings(&upstream.url), store).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(ctxgc_proxy::serve_on(listener, state.clone()));
    (proxy, upstream, state)
}

/// The proxy's `/metrics` text.
async fn metrics(client: &reqwest::Client, proxy: &str) -> String {
    client
        .get(format!("{proxy}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

fn chat_body() -> Value {
    let log: String = (0..3000)
        .map(|i| format!("[{i:05}] compiling module_{i} ... ok\n"))
        .collect();
    json!({"model": "gpt-5", "messages": [
        {"role": "user", "content": "build"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": log}
    ]})
}

/// A store whose every operation fails.
struct DownStore;

impl OriginalStore for DownStore {
    fn put_all(&self, _: &SessionId, _: &[(ContentId, &str)]) -> Result<(), StoreError> {
        Err(StoreError::backend("test", "connection refused"))
    }
    fn get(&self, _: &SessionId, _: ContentId) -> Result<Option<String>, StoreError> {
        Err(StoreError::backend("test", "connection refused"))
    }
}

impl StateStore for DownStore {
    fn put_state(&self, _: StateKey<'_>, _: &str) -> Result<(), StoreError> {
        Err(StoreError::backend("test", "connection refused"))
    }
    fn get_state(&self, key: StateKey<'_>) -> Result<Option<String>, StoreError> {
        // Up long enough to start (the tenant secret is configured, so none is read).
        let _ = key;
        Err(StoreError::backend("test", "connection refused"))
    }
    fn swap_state(&self, _: StateKey<'_>, _: Option<&str>, _: &str) -> Result<bool, StoreError> {
        Err(StoreError::backend("test", "connection refused"))
    }
}

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

/// A store the test keeps a handle on while the proxy owns it.
struct Shared<T>(Arc<T>);

impl<T: Store> OriginalStore for Shared<T> {
    fn put_all(&self, s: &SessionId, o: &[(ContentId, &str)]) -> Result<(), StoreError> {
        self.0.put_all(s, o)
    }
    fn get(&self, s: &SessionId, id: ContentId) -> Result<Option<String>, StoreError> {
        self.0.get(s, id)
    }
}

impl<T: Store> StateStore for Shared<T> {
    fn put_state(&self, k: StateKey<'_>, v: &str) -> Result<(), StoreError> {
        self.0.put_state(k, v)
    }
    fn get_state(&self, k: StateKey<'_>) -> Result<Option<String>, StoreError> {
        self.0.get_state(k)
    }
    fn swap_state(&self, k: StateKey<'_>, e: Option<&str>, v: &str) -> Result<bool, StoreError> {
        self.0.swap_state(k, e, v)
    }
}

/// A store that stalls: each call takes its deadline, then fails (a paused Redis).
struct StalledStore {
    calls: std::sync::atomic::AtomicUsize,
}

impl StalledStore {
    fn stall(&self) -> StoreError {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(300));
        StoreError::Timeout {
            backend: "test",
            what: "a call".into(),
            after: Duration::from_millis(300),
        }
    }
}

impl OriginalStore for StalledStore {
    fn put_all(&self, _: &SessionId, _: &[(ContentId, &str)]) -> Result<(), StoreError> {
        Err(self.stall())
    }
    fn get(&self, _: &SessionId, _: ContentId) -> Result<Option<String>, StoreError> {
        Err(self.stall())
    }
}

impl StateStore for StalledStore {
    fn put_state(&self, _: StateKey<'_>, _: &str) -> Result<(), StoreError> {
        Err(self.stall())
    }
    fn get_state(&self, _: StateKey<'_>) -> Result<Option<String>, StoreError> {
        Err(self.stall())
    }
    fn swap_state(&self, _: StateKey<'_>, _: Option<&str>, _: &str) -> Result<bool, StoreError> {
        Err(self.stall())
    }
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
    let (proxy, _u, state) = start(Box::new(Shared(store.clone()))).await;
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

/// A memory store that can be emptied, as a Redis restarted without persistence.
#[derive(Default)]
struct Restartable(std::sync::RwLock<Arc<MemoryStore>>);

impl Restartable {
    fn restart_empty(&self) {
        *self.0.write().unwrap() = Arc::new(MemoryStore::default());
    }
    fn now(&self) -> Arc<MemoryStore> {
        self.0.read().unwrap().clone()
    }
}

impl OriginalStore for Restartable {
    fn put_all(&self, s: &SessionId, o: &[(ContentId, &str)]) -> Result<(), StoreError> {
        self.now().put_all(s, o)
    }
    fn get(&self, s: &SessionId, id: ContentId) -> Result<Option<String>, StoreError> {
        self.now().get(s, id)
    }
}

impl StateStore for Restartable {
    fn put_state(&self, k: StateKey<'_>, v: &str) -> Result<(), StoreError> {
        self.now().put_state(k, v)
    }
    fn get_state(&self, k: StateKey<'_>) -> Result<Option<String>, StoreError> {
        self.now().get_state(k)
    }
    fn swap_state(&self, k: StateKey<'_>, e: Option<&str>, v: &str) -> Result<bool, StoreError> {
        self.now().swap_state(k, e, v)
    }
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
    let state = AppState::new(settings.clone(), Box::new(Shared(store.clone()))).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(ctxgc_proxy::serve_on(listener, state.clone()));
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
    let replica = AppState::new(settings, Box::new(Shared(store.clone()))).unwrap();
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
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(ctxgc_proxy::serve_on(listener, state.clone()));
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
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(ctxgc_proxy::serve_on(listener, state.clone()));
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

/// An OpenAI-style 400 with `message`, as a gateway refuses a field.
fn refusal(message: &str) -> Response<Body> {
    let error = json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": null}});
    Response::builder()
        .status(StatusCode::BAD_REQUEST)
        .header("content-type", "application/json")
        .body(Body::from(error.to_string()))
        .unwrap()
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

/// An Anthropic upstream for keep-alives: a Messages answer whose usage reads the prompt from
/// the cache, and the real 400 for a `max_tokens` not above the thinking budget.
fn anthropic_reply(r: Received, _log: Log) -> Reply {
    Box::pin(async move {
        let body: Value = serde_json::from_slice(&r.body).unwrap_or_default();
        let budget = body["thinking"]["budget_tokens"].as_u64();
        if let Some(budget) = budget.filter(|b| body["max_tokens"].as_u64() <= Some(*b)) {
            let text = format!(
                "`max_tokens` must be greater than `thinking.budget_tokens` ({budget}). Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size"
            );
            return Response::builder()
                .status(StatusCode::BAD_REQUEST)
                .header("content-type", "application/json")
                .body(Body::from(json!({"type": "error", "error": {"type": "invalid_request_error", "message": text}}).to_string()))
                .unwrap();
        }
        let answer = json!({"id": "msg_k", "type": "message", "role": "assistant", "model": body["model"],
            "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 3, "cache_read_input_tokens": 5000, "cache_creation_input_tokens": 0, "output_tokens": 1}});
        Response::builder()
            .header("content-type", "application/json")
            .body(Body::from(answer.to_string()))
            .unwrap()
    })
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
