//! The proxy end to end: a client -> ctxgc -> a fake upstream that speaks the OpenAI and
//! Anthropic wire protocols (JSON and SSE, tool-use deltas included) over real sockets.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;
use common::without_cache_control;
use ctxgc_test_support::{FakeUpstream, Log, Received, Reply, redis_server};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use ctxgc_core::ContentId;
use ctxgc_core::engine::Policy;
use ctxgc_core::store::{
    MemoryStore, OriginalStore, SessionId, StateKey, StateStore, Store, StoreError,
};
use ctxgc_proxy::{AppState, ProxySettings, RewriteSettings};
use ctxgc_test_support::logs::{self, Logs};
use serde_json::{Value, json};

mod events;
mod requests;

/// A request as the fake upstream received it: (path, headers, body).
type Seen = (String, HeaderMap, Bytes);

fn as_seen(r: Received) -> Seen {
    (r.path, r.headers, r.body)
}

const ANTHROPIC_SSE: &[&str] = &[
    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude\",\"usage\":{\"input_tokens\":25,\"cache_read_input_tokens\":4000,\"cache_creation_input_tokens\":120,\"output_tokens\":1}}}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_9\",\"name\":\"Bash\",\"input\":{}}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"command\\\": \\\"car\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"go test\\\"}\"}}\n\n",
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
    "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":31}}\n\n",
    "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
];

const OPENAI_SSE: &[&str] = &[
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"bash\",\"arguments\":\"\"}}]}}]}\n\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"command\\\":\\\"ls\\\"}\"}}]}}]}\n\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":3000,\"completion_tokens\":12,\"prompt_tokens_details\":{\"cached_tokens\":2944}}}\n\n",
    "data: [DONE]\n\n",
];

/// How long the slow summarizer sleeps.
const SLOW_SUMMARY: Duration = Duration::from_secs(5);

/// What the shared fake upstream answers in these tests.
fn upstream_reply(r: Received, log: Log) -> Reply {
    Box::pin(upstream_handler(r, log))
}

async fn upstream_handler(r: Received, log: Log) -> Response {
    let Received {
        path,
        headers,
        body,
        ..
    } = r;
    let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    // A summarizer that takes its time.
    if path.starts_with("/slow-summarizer") {
        tokio::time::sleep(SLOW_SUMMARY).await;
    }
    if path == "/v1/fail" {
        return Response::builder()
            .status(503)
            .header("content-type", "application/json")
            .body(Body::from("{\"error\":\"overloaded\"}"))
            .unwrap();
    }
    if parsed["stream"] == true {
        let events: &[&str] = if path.starts_with("/v1/messages") {
            ANTHROPIC_SSE
        } else {
            OPENAI_SSE
        };
        let stream = futures_util::stream::iter(
            events
                .iter()
                .map(|e| Ok::<_, std::io::Error>(Bytes::from_static(e.as_bytes()))),
        );
        let stream = futures_util::StreamExt::then(stream, |e| async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            e
        });
        return Response::builder()
            .header("content-type", "text/event-stream")
            .body(Body::from_stream(stream))
            .unwrap();
    }
    // A Responses request gets a Responses answer, with an id of its own.
    if path == "/v1/responses" {
        let n = log.len();
        let reply = json!({"id": format!("resp_{n}"), "object": "response", "status": "completed",
            "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}],
            "usage": {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 2, "total_tokens": 102}});
        return Response::builder()
            .header("content-type", "application/json")
            .body(Body::from(reply.to_string()))
            .unwrap();
    }
    // A summarizer's request gets a recognisable summary.
    let content = if path.starts_with("/summarizer") || path.starts_with("/slow-summarizer") {
        "## Progress\nLLM-WRITTEN SUMMARY".to_owned()
    } else {
        "ok".to_owned()
    };
    let reply = json!({"id": "x", "object": "chat.completion", "path": path, "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 0}}});
    // Like many servers and gateways, it compresses JSON whenever the request accepts gzip.
    let accepts_gzip = headers
        .get("accept-encoding")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("gzip"));
    if accepts_gzip {
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(reply.to_string().as_bytes()).unwrap();
        return Response::builder()
            .header("content-type", "application/json")
            .header("content-encoding", "gzip")
            .body(Body::from(gz.finish().unwrap()))
            .unwrap();
    }
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from(reply.to_string()))
        .unwrap()
}

struct Harness {
    proxy: String,
    upstream: FakeUpstream,
    state: Arc<AppState>,
    logs: Logs,
}

async fn start(store: Box<dyn Store>) -> Harness {
    start_with(store, 32_000, false).await
}

async fn start_with(store: Box<dyn Store>, window: u64, engine: bool) -> Harness {
    start_full(store, window, engine.then(always), None).await
}

/// The engine's default policy, its events on any request (`--compact`).
fn always() -> (Policy, bool) {
    (Policy::default(), false)
}

/// `summarizer`: the LLM summarizer's base URL; a path is taken to be on the fake upstream.
async fn start_full(
    store: Box<dyn Store>,
    window: u64,
    engine: Option<(Policy, bool)>,
    summarizer: Option<&str>,
) -> Harness {
    let (engine, events_only_when_cold) = engine.unzip();
    let upstream = FakeUpstream::start(upstream_reply).await;
    let up = upstream.url.clone();
    let logs = logs::capture();
    let summarizer = summarizer.map(|base| {
        let base = if base.starts_with('/') {
            format!("{up}{base}")
        } else {
            base.to_owned()
        };
        let mut s = ctxgc_summarize::LlmSettings::new(
            ctxgc_summarize::Protocol::OpenAiChat,
            "summarizer-model",
            Some("sk-summarizer-SECRET".into()),
        );
        s.base_url = base;
        s.max_retries = 0;
        s.timeout = SLOW_SUMMARY * 2;
        Arc::new(ctxgc_summarize::LlmSummarizer::new(s).unwrap())
    });
    let base = common::settings(&up);
    let settings = ProxySettings {
        max_body_bytes: 2 * 1024 * 1024,
        rewrite: RewriteSettings {
            cache: Default::default(),
            window,
            engine,
            events_only_when_cold: events_only_when_cold.unwrap_or(false),
            ..base.rewrite.clone()
        },
        summarizer,
        ..base
    };
    let state = AppState::new(settings, store).unwrap();
    let proxy = common::serve_state(state.clone()).await;
    Harness {
        proxy,
        upstream,
        state,
        logs,
    }
}

impl Harness {
    /// Sends a Chat Completions body through the proxy; returns what the upstream received
    /// (path, headers, body).
    async fn chat(&self, body: &Value) -> (String, HeaderMap, Bytes) {
        self.post("/v1/chat/completions", body).await
    }

    /// Sends a body to `path` through the proxy; returns what the upstream received.
    async fn post(&self, path: &str, body: &Value) -> (String, HeaderMap, Bytes) {
        answer_of(client().post(format!("{}{path}", self.proxy)).json(body)).await;
        as_seen(self.upstream.log.last().unwrap())
    }
}

/// The body of the answer to `request`.
async fn answer_of(request: reqwest::RequestBuilder) -> Bytes {
    request.send().await.unwrap().bytes().await.unwrap()
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().build().unwrap()
}

fn log_text(n: usize) -> String {
    (0..n)
        .map(|i| format!("[{i:05}] compiling module_{i} ... ok\n"))
        .collect()
}

struct BrokenStore;
fn disk_full() -> StoreError {
    StoreError::backend("test", "disk full")
}
impl StateStore for BrokenStore {
    fn put_state(&self, _: StateKey<'_>, _: &str) -> Result<(), StoreError> {
        Err(disk_full())
    }
    fn get_state(&self, _: StateKey<'_>) -> Result<Option<String>, StoreError> {
        Err(disk_full())
    }
    fn swap_state(&self, _: StateKey<'_>, _: Option<&str>, _: &str) -> Result<bool, StoreError> {
        Err(disk_full())
    }
}
impl OriginalStore for BrokenStore {
    fn put_all(&self, _: &SessionId, _: &[(ContentId, &str)]) -> Result<(), StoreError> {
        Err(disk_full())
    }
    fn get(&self, _: &SessionId, _: ContentId) -> Result<Option<String>, StoreError> {
        Err(disk_full())
    }
}

/// A proxy in front of `upstream` with these deadlines.
async fn proxy_at(upstream: &str, timeouts: ctxgc_proxy::Timeouts) -> String {
    let settings = ProxySettings {
        max_body_bytes: 1024 * 1024,
        timeouts,
        ..common::settings(upstream)
    };
    let state = AppState::new(settings, Box::new(MemoryStore::default())).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = format!("http://{}", listener.local_addr().unwrap());
    // The server loop `ctxgc serve` runs, with its connection deadlines.
    tokio::spawn(async move { ctxgc_proxy::serve_on(listener, state).await.unwrap() });
    proxy
}

/// An upstream that reads a request, answers `preamble` (maybe nothing) and then hangs.
async fn hanging_upstream(preamble: &'static str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let _ = conn.read(&mut buf).await;
                let _ = conn.write_all(preamble.as_bytes()).await;
                tokio::time::sleep(Duration::from_secs(60)).await;
            });
        }
    });
    addr
}

fn words(n: usize, seed: usize) -> String {
    (0..n)
        .map(|i| format!("w{} ", (i * 7919 + seed * 104_729) % 10_007))
        .collect()
}

/// Replica A runs a session through an event; the next turn goes to replica B (a load
/// balancer's choice), which must send the prefix A sent, from the shared store alone.
async fn replicas_continue_each_other(store_a: Box<dyn Store>, store_b: Box<dyn Store>) {
    let a = start_with(store_a, 12_000, true).await;
    let b = start_with(store_b, 12_000, true).await;
    let mut messages = vec![
        json!({"role": "system", "content": "You are a coding agent."}),
        json!({"role": "user", "content": "Fix it."}),
    ];
    let mut last_a: Vec<Value> = Vec::new();
    for turn in 0..30 {
        let id = format!("call_{turn}");
        messages.push(json!({"role": "assistant", "content": format!("Step {turn}."), "tool_calls": [{"id": id, "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": words(400, turn)}));
        let seen = a
            .chat(&json!({"model": "gpt-5", "messages": messages}))
            .await;
        last_a = serde_json::from_slice::<Value>(&seen.2).unwrap()["messages"]
            .as_array()
            .unwrap()
            .clone();
    }
    assert!(a.state.stats().events >= 1);
    // The next turn goes to replica B (a load balancer's choice): same prefix as A sent.
    messages.push(json!({"role": "assistant", "content": "Step 30.", "tool_calls": [{"id": "call_30", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}));
    messages.push(json!({"role": "tool", "tool_call_id": "call_30", "content": "ok"}));
    let seen = b
        .chat(&json!({"model": "gpt-5", "messages": messages}))
        .await;
    let sent_b = serde_json::from_slice::<Value>(&seen.2).unwrap()["messages"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(b.state.stats().events, 0, "a small turn needs no event");
    assert_eq!(
        &sent_b[..last_a.len()],
        &last_a[..],
        "replica B continued A's lineage"
    );
}

/// One agent turn in `api`'s wire form: a call, then its result (some results carry a reminder
/// after them, as Claude Code's do).
fn turn_items(api: ctxgc_formats::Api, turn: usize) -> Vec<Value> {
    let id = format!("call_{turn}");
    let output = format!(
        "{}\nexit status: {}\n",
        words(if turn.is_multiple_of(4) { 900 } else { 250 }, turn),
        turn % 2
    );
    let say = format!("Step {turn}: I will run the next check.");
    let command = format!("pytest -k case_{turn}");
    if api == ctxgc_formats::Api::Messages {
        let mut content =
            vec![json!({"type": "tool_result", "tool_use_id": id, "content": output})];
        if turn.is_multiple_of(3) {
            content.push(json!({"type": "text", "text": format!("<reminder {turn}>")}));
        }
        vec![
            json!({"role": "assistant", "content": [
                {"type": "text", "text": say},
                {"type": "tool_use", "id": id, "name": "Bash", "input": {"command": command}}
            ]}),
            json!({"role": "user", "content": content}),
        ]
    } else {
        vec![
            json!({"type": "reasoning", "id": format!("rs_{turn}"), "summary": [{"type": "summary_text", "text": say}]}),
            json!({"type": "function_call", "call_id": id, "name": "shell", "arguments": json!({"command": command}).to_string()}),
            json!({"type": "function_call_output", "call_id": id, "output": output}),
        ]
    }
}

/// Call ids an item makes (`calls`) or answers (`results`): Anthropic blocks or Responses items.
fn ids(item: &Value, results: bool) -> Vec<String> {
    let blocks = item["content"].as_array().cloned().unwrap_or_default();
    std::iter::once(item.clone())
        .chain(blocks)
        .filter_map(|b| match (b["type"].as_str(), results) {
            (Some("tool_use"), false) => b["id"].as_str().map(str::to_owned),
            (Some("function_call"), false) => b["call_id"].as_str().map(str::to_owned),
            (Some("tool_result"), true) => b["tool_use_id"].as_str().map(str::to_owned),
            (Some("function_call_output"), true) => b["call_id"].as_str().map(str::to_owned),
            _ => None,
        })
        .collect()
}

/// Every result answers a call made before it, and every call is answered after it.
fn assert_pairs(items: &[Value], turn: usize) {
    for (i, item) in items.iter().enumerate() {
        for id in ids(item, true) {
            assert!(
                items[..i].iter().any(|p| ids(p, false).contains(&id)),
                "turn {turn}: orphan result {id}"
            );
        }
        for id in ids(item, false) {
            assert!(
                items[i + 1..].iter().any(|n| ids(n, true).contains(&id)),
                "turn {turn}: unanswered call {id}"
            );
        }
    }
}

/// A Chat session of `turns` turns sent through `h`; per turn, the client's body, the body the
/// upstream got and the proxy's fail-open count after it.
async fn chat_session(h: &Harness, turns: usize) -> Vec<(Value, Bytes, u64)> {
    let mut messages = vec![
        json!({"role": "system", "content": "You are a coding agent."}),
        json!({"role": "user", "content": "Fix the flaky test. You must not change the public API."}),
    ];
    let mut out = Vec::new();
    for turn in 0..turns {
        let id = format!("call_{turn}");
        messages.push(json!({"role": "assistant", "content": format!("Step {turn}."), "tool_calls": [{"id": id, "type": "function", "function": {"name": "bash", "arguments": format!("{{\"command\":\"pytest -k case_{turn}\"}}")}}]}));
        let output = format!(
            "{}\nexit status: {}\n",
            words(if turn.is_multiple_of(4) { 900 } else { 250 }, turn),
            turn % 2
        );
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": output}));
        let body = json!({"model": "gpt-5", "prompt_cache_key": "k", "messages": messages});
        let seen = h.chat(&body).await;
        out.push((body, seen.2, h.state.stats().fail_open));
    }
    out
}

/// A Chat request of `who` whose latest tool output is `output` (big enough to be trimmed).
fn one_output(who: &str, output: &str) -> Value {
    json!({"model": "gpt-5", "messages": [
        {"role": "user", "content": format!("{who}: run the build")},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"make\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": output}
    ]})
}

/// Sends `body` as `key`; returns what the upstream received and how long the request took.
async fn timed(h: &Harness, key: &str, body: &Value) -> (Bytes, Duration) {
    let started = std::time::Instant::now();
    let r = client()
        .post(format!("{}/v1/chat/completions", h.proxy))
        .header("authorization", format!("Bearer {key}"))
        .json(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    r.bytes().await.unwrap();
    let took = started.elapsed();
    (as_seen(h.upstream.log.last().unwrap()).2, took)
}

/// One Chat Completions turn: a call, then its result.
fn chat_turn(turn: usize) -> Vec<Value> {
    let id = format!("call_{turn}");
    let output = format!("{}\nexit status: {}\n", words(900, turn), turn % 2);
    vec![
        json!({"role": "assistant", "content": format!("Step {turn}."), "tool_calls": [{"id": id, "type": "function", "function": {"name": "bash", "arguments": format!("{{\"command\":\"pytest -k case_{turn}\"}}")}}]}),
        json!({"role": "tool", "tool_call_id": id, "content": output}),
    ]
}
