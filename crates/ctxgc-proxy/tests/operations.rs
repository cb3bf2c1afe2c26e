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
        if r.path == "/v1/slow" {
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
    let text = client
        .get(format!("{down}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains("ctxgc_fail_open_total{cause=\"store\"} 1\n"),
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
