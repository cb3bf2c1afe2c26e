//! What an operator runs the proxy with: Prometheus metrics that parse and agree with
//! `/ctxgc/stats`, health and readiness, and a graceful shutdown that lets a stream in flight
//! finish.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
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

mod cache;
mod operating;

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
    let proxy = common::serve_on_loopback(state.clone()).await;
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

/// An OpenAI-style 400 with `message`, as a gateway refuses a field.
fn refusal(message: &str) -> Response<Body> {
    let error = json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": null}});
    Response::builder()
        .status(StatusCode::BAD_REQUEST)
        .header("content-type", "application/json")
        .body(Body::from(error.to_string()))
        .unwrap()
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
