//! The proxy end to end: a client -> ctxgc -> a fake upstream that speaks the OpenAI and
//! Anthropic wire protocols (JSON and SSE, tool-use deltas included) over real sockets.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

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
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = format!("http://{}", listener.local_addr().unwrap());
    let router = ctxgc_proxy::router(state.clone());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
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
        client()
            .post(format!("{}{path}", self.proxy))
            .json(body)
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        as_seen(self.upstream.log.last().unwrap())
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().build().unwrap()
}

fn log_text(n: usize) -> String {
    (0..n)
        .map(|i| format!("[{i:05}] compiling module_{i} ... ok\n"))
        .collect()
}

#[tokio::test]
async fn real_client_requests_pass_byte_for_byte() {
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/requests");
    if !shared.is_dir() {
        assert!(
            std::env::var("CI").is_err(),
            "../shared/data/requests not found, and CI must check the real clients' requests"
        );
        eprintln!("../shared/data/requests not found: skipped");
        return;
    }
    let h = start(Box::new(MemoryStore::default())).await;
    for (file, path) in [
        (
            "claude-code-2.1.328-messages.json",
            "/v1/messages?beta=true",
        ),
        ("codex-0.169.0-responses.json", "/v1/responses"),
    ] {
        let wrapper: Value =
            serde_json::from_slice(&std::fs::read(shared.join(file)).unwrap()).unwrap();
        let body = serde_json::to_vec(&wrapper["body"]).unwrap();
        let r = client()
            .post(format!("{}{path}", h.proxy))
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success());
        let _ = r.bytes().await.unwrap();
        let (got_path, _, got) = as_seen(h.upstream.log.last().unwrap());
        assert_eq!(got_path, path.split('?').next().unwrap());
        // Codex asks GPT-5 for no retention: ctxgc asks for the 24 hours the model offers at
        // the same price ([cache] retention), its only change. Claude Code's first request
        // keeps its 5-minute breakpoints (it writes its whole prompt).
        let mut expected = body.clone();
        if file.starts_with("codex") {
            expected.pop();
            expected.extend_from_slice(br#","prompt_cache_retention":"24h"}"#);
        }
        assert_eq!(
            got.as_ref(),
            expected.as_slice(),
            "{file}: upstream body not byte-equal"
        );
    }
    // Claude Code's passed through; Codex's carried the retention.
    assert_eq!(h.state.stats().passed_through, 1);
}

#[tokio::test]
async fn tool_results_are_trimmed_and_originals_stored_before_forwarding() {
    let dir = std::env::temp_dir().join(format!("ctxgc-proxy-test-{}", std::process::id()));
    let db = dir.join("store.sqlite");
    let h = start(Box::new(ctxgc_store::SqliteStore::open(&db).unwrap())).await;
    let original = log_text(4000);
    let body = json!({"model": "gpt-5", "messages": [
        {"role": "user", "content": "build it"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"make\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": original}
    ]});
    let r = client()
        .post(format!("{}/v1/chat/completions", h.proxy))
        .header("authorization", "Bearer sk-test-SECRET")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let seen = as_seen(h.upstream.log.last().unwrap());
    let forwarded: Value = serde_json::from_slice(&seen.2).unwrap();
    let content = forwarded["messages"][2]["content"].as_str().unwrap();
    assert!(
        content.len() < original.len() / 5 && content.contains("trimmed from terminal output"),
        "{}",
        content.len()
    );
    assert_eq!(
        seen.1.get("authorization").unwrap(),
        "Bearer sk-test-SECRET",
        "auth forwarded"
    );
    // The session, from the start of the conversation, within the caller's tenant.
    let tenant = h.state.tenant(&seen.1);
    let key = forwarded["prompt_cache_key"].as_str().unwrap();
    assert!(key.starts_with(&format!("{}.s-", tenant.as_str())), "{key}");
    // The original was committed before forwarding, under the id in the marker.
    let id = ContentId::of(original.as_bytes());
    assert!(content.contains(&id.to_string()));
    let session = forwarded["prompt_cache_key"].as_str().unwrap();
    let reopened = ctxgc_store::SqliteStore::open(&db).unwrap();
    assert_eq!(
        reopened
            .get(&SessionId::new(session), id)
            .unwrap()
            .as_deref(),
        Some(original.as_str())
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// Tool results wrapped in JSON reach the upstream trimmed as the text they hold, valid JSON
/// with their other fields whole: an MCP `CallToolResult` a host passes on as the tool
/// message's text, Hermes's `{"output", "exit_code", "error"}` envelope, and an Anthropic
/// `tool_result` whose content is a list of blocks. Each keeps the error line from the middle,
/// the tail and the whole output's recall id.
#[tokio::test]
async fn json_wrapped_and_block_results_are_trimmed_as_their_text() {
    let h = start(Box::new(MemoryStore::default())).await;
    let mut log: Vec<String> = (0..6_000)
        .map(|i| format!("2026-11-24T10:00:00Z INFO unit {i} compiled ok"))
        .collect();
    log[3_000] = "ERROR: disk quota exceeded while writing build/out.bin".into();
    log.push("build finished: 1 error; exit code: 2".into());
    let log = log.join("\n") + "\n";
    let mcp = json!({"content": [{"type": "text", "text": log}], "isError": false}).to_string();
    let hermes = json!({"output": log, "exit_code": 2, "error": null}).to_string();
    let shows = |text: &str, id: ContentId, what: &str| {
        assert!(
            text.contains("ERROR: disk quota exceeded"),
            "{what}: the error line"
        );
        assert!(
            text.contains("build finished: 1 error; exit code: 2"),
            "{what}: the tail"
        );
        assert!(
            text.contains(&id.to_string()),
            "{what}: the whole output's id"
        );
        assert!(text.len() < log.len() / 4, "{what}: {} bytes", text.len());
    };
    for (what, wrapped) in [("mcp", &mcp), ("hermes", &hermes)] {
        let body = json!({"model": "gpt-5", "messages": [
            {"role": "user", "content": "build it"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "mcp__shell__run", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": wrapped}
        ]});
        let seen = h.post("/v1/chat/completions", &body).await;
        let forwarded: Value = serde_json::from_slice(&seen.2).unwrap();
        let content = forwarded["messages"][2]["content"].as_str().unwrap();
        let back: Value = serde_json::from_str(content).expect("still valid JSON");
        let id = ContentId::of(wrapped.as_bytes());
        if what == "mcp" {
            assert_eq!(back["isError"], false);
            shows(back["content"][0]["text"].as_str().unwrap(), id, what);
        } else {
            assert_eq!(
                (back["exit_code"].clone(), back["error"].clone()),
                (json!(2), Value::Null)
            );
            shows(back["output"].as_str().unwrap(), id, what);
        }
    }
    let body = json!({"model": "claude", "max_tokens": 100, "messages": [
        {"role": "user", "content": "build it"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": log}]}]}
    ]});
    let seen = h.post("/v1/messages", &body).await;
    let forwarded: Value = serde_json::from_slice(&seen.2).unwrap();
    let text = forwarded["messages"][2]["content"][0]["content"][0]["text"]
        .as_str()
        .unwrap();
    shows(text, ContentId::of(log.as_bytes()), "anthropic blocks");
}

/// A text-protocol agent (mini-swe-agent's first protocol: one fenced `bash` block per reply,
/// the harness's answer in the next user message) gets its command outputs trimmed as the
/// replay lab's importer reads them, on Chat Completions and Anthropic Messages; a user message
/// in any other shape is the user's own and passes whole.
#[tokio::test]
async fn a_text_protocol_agents_command_output_is_trimmed_and_the_users_words_are_not() {
    let h = start(Box::new(MemoryStore::default())).await;
    let output = format!(
        "<returncode>2</returncode>\n<output>\n{}</output>",
        log_text(4000)
    );
    let asked = "THOUGHT: build it.\n\n```bash\nmake -j4\n```";
    let pasted = format!("Here is my log, keep all of it:\n{}", log_text(4000));
    for (path, items_key) in [
        ("/v1/chat/completions", "messages"),
        ("/v1/messages", "messages"),
    ] {
        let body = json!({"model": "gpt-5", "max_tokens": 100, items_key: [
            {"role": "user", "content": "Fix the build."},
            {"role": "assistant", "content": asked},
            {"role": "user", "content": output},
            {"role": "assistant", "content": "Which log?"},
            {"role": "user", "content": pasted},
            {"role": "assistant", "content": [{"type": "text", "text": asked}]},
            {"role": "user", "content": [{"type": "text", "text": output}]},
        ]});
        let seen = h.post(path, &body).await;
        let forwarded: Value = serde_json::from_slice(&seen.2).unwrap();
        let items = forwarded[items_key].as_array().unwrap();
        let trimmed = items[2]["content"].as_str().unwrap();
        assert!(
            trimmed.len() < output.len() / 5 && trimmed.contains("trimmed from terminal output"),
            "{path}: {}",
            trimmed.len()
        );
        assert!(trimmed.starts_with("<returncode>2</returncode>"), "{path}");
        let id = ContentId::of(output.as_bytes());
        assert!(
            trimmed.contains(&id.to_string()),
            "{path}: recallable by its id"
        );
        assert_eq!(
            items[4]["content"],
            json!(pasted),
            "{path}: the user's paste is whole"
        );
        // The same output again points to the first, as a repeated tool result does.
        assert_eq!(
            items[6]["content"][0]["text"],
            json!(format!(
                "[same output as the result of the command in message 2 (id {id})]"
            )),
            "{path}"
        );
    }
}

#[tokio::test]
async fn sse_streams_through_byte_for_byte_and_usage_is_recorded() {
    let h = start(Box::new(MemoryStore::default())).await;
    for (path, body, expected) in [
        (
            "/v1/messages",
            json!({"model": "claude", "max_tokens": 100, "stream": true, "messages": [{"role": "user", "content": "hi"}]}),
            ANTHROPIC_SSE,
        ),
        (
            "/v1/chat/completions",
            json!({"model": "gpt-5", "stream": true, "stream_options": {"include_usage": true}, "messages": [{"role": "user", "content": "hi"}]}),
            OPENAI_SSE,
        ),
    ] {
        let r = client()
            .post(format!("{}{path}", h.proxy))
            .header("x-ctxgc-session", "sse-test")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.headers()["content-type"], "text/event-stream");
        let got = r.bytes().await.unwrap();
        assert_eq!(got.as_ref(), expected.concat().as_bytes(), "{path}");
    }
    let session = h.state.named_session(&HeaderMap::new(), "sse-test");
    let usage = h.state.stats().usage[session.as_str()].clone();
    assert_eq!(usage.requests, 2);
    assert_eq!(usage.cache_read_tokens, 4000 + 2944);
    assert_eq!(usage.cache_write_tokens, 120);
    assert_eq!(usage.output_tokens, 31 + 12);
}

#[tokio::test]
async fn the_upstream_prefix_is_stable_over_a_50_turn_session() {
    let h = start(Box::new(MemoryStore::default())).await;
    let mut messages = vec![
        json!({"role": "system", "content": "You are a coding agent."}),
        json!({"role": "user", "content": "fix the build"}),
    ];
    let mut previous: Option<Vec<Value>> = None;
    for turn in 0..50 {
        let id = format!("call_{turn}");
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}));
        let output = if turn % 3 == 0 {
            log_text(2000 + turn * 10)
        } else {
            format!("ok {turn}")
        };
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": output}));
        let body = json!({"model": "gpt-5", "messages": messages});
        let seen = h.chat(&body).await;
        let sent: Value = serde_json::from_slice(&seen.2).unwrap();
        let sent = sent["messages"].as_array().unwrap().clone();
        if let Some(prev) = &previous {
            assert_eq!(
                &sent[..prev.len()],
                &prev[..],
                "turn {turn}: the upstream prefix changed"
            );
        }
        previous = Some(sent);
    }
    assert!(h.state.stats().bytes_saved > 100_000);
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

#[tokio::test]
async fn internal_failures_fail_open_and_keys_never_reach_the_logs() {
    let h = start(Box::new(BrokenStore)).await;
    let body = json!({"model": "gpt-5", "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": log_text(4000)}
    ]})
    .to_string();
    let r = client()
        .post(format!("{}/v1/chat/completions", h.proxy))
        .header("authorization", "Bearer sk-test-SECRET")
        .header("x-api-key", "sk-ant-SECRET")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let seen = as_seen(h.upstream.log.last().unwrap());
    assert_eq!(
        seen.2.as_ref(),
        body.as_bytes(),
        "the original request went through unchanged"
    );
    let stats = h.state.stats();
    assert_eq!(stats.fail_open, 1);
    // An upstream error reaches the client as the upstream sent it.
    let r = client()
        .post(format!("{}/v1/fail", h.proxy))
        .header("authorization", "Bearer sk-test-SECRET")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.text().await.unwrap(), "{\"error\":\"overloaded\"}");
    let logs = h.logs.text();
    assert!(
        logs.contains("fail open") && logs.contains("disk full"),
        "{logs}"
    );
    assert!(!logs.contains("SECRET"), "{logs}");
}

/// Defects guarded: the SDKs send `accept-encoding: gzip`; an upstream that compressed its JSON
/// was passed on unread (no usage recorded, the proxy's own tool calls unseen), and a gzip
/// request body got a 400 "not valid JSON".
#[tokio::test]
async fn compressed_bodies_both_ways_are_read() {
    use std::io::Write;
    let h = start(Box::new(MemoryStore::default())).await;
    let body = json!({"model": "gpt-5", "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": log_text(4000)}
    ]})
    .to_string();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(body.as_bytes()).unwrap();
    let r = client()
        .post(format!("{}/v1/chat/completions", h.proxy))
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .header("accept-encoding", "gzip, deflate")
        .body(gz.finish().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(
        r.headers().get("content-encoding").is_none(),
        "sent as identity"
    );
    let reply: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
    assert_eq!(reply["usage"]["prompt_tokens"], 100);
    let seen = as_seen(h.upstream.log.last().unwrap());
    assert!(seen.1.get("content-encoding").is_none());
    let sent: Value = serde_json::from_slice(&seen.2).unwrap();
    let output = sent["messages"][2]["content"].as_str().unwrap();
    assert!(output.len() < log_text(4000).len(), "parsed and trimmed");
    let usage = h.state.stats().usage;
    assert_eq!(
        usage.values().map(|u| u.input_tokens).sum::<u64>(),
        100,
        "the compressed answer was read: {usage:?}"
    );
    // Other methods on an API path reach the upstream (they got 405 from the proxy).
    for method in [reqwest::Method::HEAD, reqwest::Method::OPTIONS] {
        let r = client()
            .request(method.clone(), format!("{}/v1/messages", h.proxy))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{method}");
        let seen = as_seen(h.upstream.log.last().unwrap());
        assert_eq!(seen.0, "/v1/messages");
    }
    // A body that says gzip but is not: a clear 400.
    let r = client()
        .post(format!("{}/v1/chat/completions", h.proxy))
        .header("content-encoding", "gzip")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(r.text().await.unwrap().contains("not valid gzip"));
}

/// Defects guarded: isolation rested on an unauthenticated header (Bob sending
/// `x-ctxgc-session: alice` reached Alice's originals), two conversations with the same start
/// were one session whatever their keys, and `/ctxgc/stats` listed every session.
#[tokio::test]
async fn tenants_are_kept_apart_by_their_credentials() {
    let dir = std::env::temp_dir().join(format!("ctxgc-tenants-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let db = dir.join("store.sqlite");
    let h = start(Box::new(ctxgc_store::SqliteStore::open(&db).unwrap())).await;
    let secret_output = format!("ALICE_DB_PASSWORD=hunter2\n{}", log_text(4000));
    let body = |output: &str| {
        json!({"model": "gpt-5", "messages": [
            {"role": "user", "content": "deploy"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": output}
        ]})
    };
    let send = async |key: &str, output: &str| {
        let r = client()
            .post(format!("{}/v1/chat/completions", h.proxy))
            .header("authorization", format!("Bearer {key}"))
            .header("x-ctxgc-session", "alice")
            .json(&body(output))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        as_seen(h.upstream.log.last().unwrap())
    };
    let alice_seen = send("sk-alice", &secret_output).await;
    let bob_seen = send("sk-bob", &log_text(4000)).await;
    let key = |seen: &(String, HeaderMap, Bytes)| {
        let v: Value = serde_json::from_slice(&seen.2).unwrap();
        v["prompt_cache_key"].as_str().unwrap().to_owned()
    };
    let (alice, bob) = (key(&alice_seen), key(&bob_seen));
    let (alice_id, bob_id) = (SessionId::new(alice.clone()), SessionId::new(bob.clone()));
    assert_ne!(alice, bob, "the same session header, two tenants");
    assert!(!alice.contains("sk-alice") && !alice.contains("alice"));
    let store = ctxgc_store::SqliteStore::open(&db).unwrap();
    let id = ContentId::of(secret_output.as_bytes());
    assert!(store.get(&alice_id, id).unwrap().is_some());
    assert_eq!(
        store.get(&bob_id, id).unwrap(),
        None,
        "Bob's session holds nothing of Alice's"
    );
    // Stats: a caller sees its own sessions only.
    let stats = async |key: &str| -> Value {
        client()
            .get(format!("{}/ctxgc/stats", h.proxy))
            .header("authorization", format!("Bearer {key}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    };
    let seen_by_bob = stats("sk-bob").await;
    let sessions: Vec<&String> = seen_by_bob["usage"].as_object().unwrap().keys().collect();
    assert_eq!(sessions, [&bob], "{seen_by_bob}");
    assert_eq!(
        seen_by_bob["requests"], 2,
        "aggregate counts are for everyone"
    );
    let _ = std::fs::remove_dir_all(dir);
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

/// Defects guarded: a hung upstream left the client with nothing after 180 s, and half-sent
/// requests stayed open indefinitely.
#[tokio::test]
async fn every_wait_has_a_deadline() {
    let timeouts = ctxgc_proxy::Timeouts {
        connect: Duration::from_secs(2),
        upstream_idle: Duration::from_millis(400),
        client_body: Duration::from_millis(400),
        client_headers: Duration::from_millis(400),
        shutdown_grace: Duration::from_secs(1),
    };
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).to_string();
    // An upstream that never answers: 504 at the deadline.
    let proxy = proxy_at(&hanging_upstream("").await, timeouts).await;
    let started = std::time::Instant::now();
    let r = client()
        .post(format!("{proxy}/v1/chat/completions"))
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::GATEWAY_TIMEOUT);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(r.text().await.unwrap().contains("did not answer within"));
    // A stream that stops mid-way ends with an error event the client sees.
    let sse_then_silence = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n1c\r\ndata: {\"id\":\"c1\",\"x\":1}\n\n\r\n";
    let proxy = proxy_at(&hanging_upstream(sse_then_silence).await, timeouts).await;
    let r = client()
        .post(format!("{proxy}/v1/chat/completions"))
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let text = tokio::time::timeout(Duration::from_secs(5), r.text())
        .await
        .expect("the stream ends")
        .unwrap();
    assert!(text.starts_with("data: {\"id\":\"c1\""), "{text}");
    // Chat Completions' own error event: a `data:` line holding `error`.
    assert!(
        text.contains("data: {\"error\":") && text.contains("sent nothing for"),
        "{text}"
    );
    // A client that sends half its body: 408 at the deadline.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = proxy.trim_start_matches("http://").to_owned();
    let mut conn = tokio::net::TcpStream::connect(&addr).await.unwrap();
    conn.write_all(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{\"model\"",
    )
    .await
    .unwrap();
    let mut answer = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut answer))
        .await
        .expect("answered within the deadline")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    // A client that never finishes its headers (slowloris): the connection is closed.
    let mut conn = tokio::net::TcpStream::connect(&addr).await.unwrap();
    conn.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    let mut cut = vec![0u8; 4096];
    let read = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut cut))
        .await
        .expect("cut within the deadline");
    let said = match &read {
        Ok(n) => String::from_utf8_lossy(&cut[..*n]).into_owned(),
        Err(_) => String::new(),
    };
    assert!(
        matches!(read, Ok(0) | Err(_)) || said.contains("408"),
        "{said}"
    );
}

/// A Responses client that sends only new items and `previous_response_id` (the Agents SDK)
/// stays in one session: the proxy remembers which session each response answered.
#[tokio::test]
async fn previous_response_ids_continue_their_session_within_the_tenant() {
    let h = start(Box::new(MemoryStore::default())).await;
    let send = async |key: &str, body: Value| -> (String, Value) {
        let r = client()
            .post(format!("{}/v1/responses", h.proxy))
            .header("authorization", format!("Bearer {key}"))
            .json(&body)
            .send()
            .await
            .unwrap();
        let answer: Value = r.json().await.unwrap();
        let seen = as_seen(h.upstream.log.last().unwrap());
        let sent: Value = serde_json::from_slice(&seen.2).unwrap();
        (
            sent["prompt_cache_key"].as_str().unwrap().to_owned(),
            answer,
        )
    };
    let (first, answer) = send(
        "sk-a",
        json!({"model": "gpt-5", "input": [{"role": "user", "content": "task A"}]}),
    )
    .await;
    let id = answer["id"].as_str().unwrap().to_owned();
    let (second, answer) = send(
        "sk-a",
        json!({"model": "gpt-5", "previous_response_id": id, "input": [{"role": "user", "content": "more"}]}),
    )
    .await;
    assert_eq!(first, second, "the chain stays in its session");
    let (third, _) = send(
        "sk-a",
        json!({"model": "gpt-5", "previous_response_id": answer["id"], "input": [{"role": "user", "content": "again"}]}),
    )
    .await;
    assert_eq!(first, third);
    // Another tenant naming that response gets a session of its own.
    let (other, _) = send(
        "sk-b",
        json!({"model": "gpt-5", "previous_response_id": id, "input": [{"role": "user", "content": "more"}]}),
    )
    .await;
    assert_ne!(first, other);
}

/// Defect guarded: `--openai-upstream http://user:PASS@host` put PASS in the 502 body sent to
/// clients and in the log.
#[tokio::test]
async fn upstream_credentials_never_reach_clients_or_logs() {
    let logs = logs::capture();
    // Port 1 on loopback: nothing listens there.
    let upstream = "http://gateway-user:PASS-SECRET@127.0.0.1:1/base";
    let proxy = proxy_at(upstream, Default::default()).await;
    for path in ["/v1/chat/completions", "/v1/messages", "/v1/models"] {
        let r = client()
            .post(format!("{proxy}{path}"))
            .body(r#"{"model": "m", "messages": [{"role": "user", "content": "hi"}]}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::BAD_GATEWAY, "{path}");
        let body = r.text().await.unwrap();
        assert!(
            !body.contains("PASS-SECRET") && !body.contains("gateway-user"),
            "{body}"
        );
        assert!(body.contains("http://***@127.0.0.1:1/base"), "{body}");
    }
    let logs = logs.text();
    assert!(logs.contains("unreachable"), "{logs}");
    assert!(!logs.contains("PASS-SECRET"), "{logs}");
}

#[tokio::test]
async fn bad_requests_get_clear_errors_and_other_routes_pass_through() {
    let h = start(Box::new(MemoryStore::default())).await;
    // A 400 whose message names the problem.
    let refused = async |path: &str, body: &'static str, names: &str| {
        let r = client()
            .post(format!("{}{path}", h.proxy))
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
        let e: Value = r.json().await.unwrap();
        let message = e["error"]["message"].as_str().unwrap().to_owned();
        assert!(message.contains(names), "{message}");
    };
    refused("/v1/chat/completions", "{not json", "not valid JSON").await;
    refused("/v1/messages", "{\"model\":\"x\"}", "messages").await;
    let big = vec![b' '; 3 * 1024 * 1024];
    let r = client()
        .post(format!("{}/v1/chat/completions", h.proxy))
        .body(big)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    let r = client()
        .get(format!("{}/v1/models?limit=2", h.proxy))
        .send()
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["path"], "/v1/models");
    let health: Value = client()
        .get(format!("{}/ctxgc/health", h.proxy))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["status"], "ok");
    assert_eq!(h.state.stats().bad_requests, 3);
}

/// What providers accept is forwarded: a lone surrogate escape (an emoji cut in half) goes
/// upstream as it came, counted as a fail-open; a body cut short by the client is a 400 that
/// says so, not a 413.
#[tokio::test]
async fn lone_surrogates_are_forwarded_and_cut_bodies_refused() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let h = start(Box::new(MemoryStore::default())).await;
    let body =
        br#"{"model":"gpt-5","messages":[{"role":"user","content":"half an emoji: \ud83d"}]}"#;
    let r = client()
        .post(format!("{}/v1/chat/completions", h.proxy))
        .header("content-type", "application/json")
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let _ = r.bytes().await.unwrap();
    let (_, _, got) = as_seen(h.upstream.log.last().unwrap());
    assert_eq!(got.as_ref(), body.as_slice(), "forwarded byte for byte");
    assert_eq!(h.state.stats().fail_open, 1);
    assert_eq!(h.state.stats().bad_requests, 0);
    // Announced 1,000 bytes, sent 20, then the client closed its side.
    let address = h.proxy.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{{\"model\":\"gpt-5\","
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.shutdown().await.unwrap();
    let mut answer = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut answer)).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("cut short"), "{answer}");
}

fn words(n: usize, seed: usize) -> String {
    (0..n)
        .map(|i| format!("w{} ", (i * 7919 + seed * 104_729) % 10_007))
        .collect()
}

#[tokio::test]
async fn compaction_across_requests_is_prefix_stable_between_events() {
    let window = 12_000;
    let h = start_with(Box::new(MemoryStore::default()), window, true).await;
    let mut messages = vec![
        json!({"role": "system", "content": "You are a coding agent."}),
        json!({"role": "user", "content": "Fix the flaky test. You must not change the public API."}),
    ];
    let mut sent: Vec<Vec<Value>> = Vec::new();
    let mut counter = ctxgc_core::tokens::TokenCounter::openai();
    for turn in 0..60 {
        let id = format!("call_{turn}");
        messages.push(json!({"role": "assistant", "content": format!("Step {turn}: I will run the next check."), "tool_calls": [{"id": id, "type": "function", "function": {"name": "bash", "arguments": format!("{{\"command\":\"pytest -k case_{turn}\"}}")}}]}));
        let output = format!(
            "{}\nexit status: {}\n",
            words(if turn % 4 == 0 { 900 } else { 250 }, turn),
            turn % 2
        );
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": output}));
        let body = json!({"model": "gpt-5", "messages": messages});
        let seen = h.chat(&body).await;
        let upstream: Value = serde_json::from_slice(&seen.2).unwrap();
        let msgs = upstream["messages"].as_array().unwrap().clone();
        let request =
            ctxgc_formats::ApiRequest::parse(ctxgc_formats::Api::ChatCompletions, &seen.2).unwrap();
        let tokens = counter.count_messages(&request.transcript().unwrap().messages);
        assert!(
            (tokens as u64) < window,
            "turn {turn}: {tokens} tokens sent to a {window}-token model"
        );
        sent.push(msgs);
    }
    // Between events the upstream prompt is append-only: request N+1 starts with request N.
    let breaks = sent
        .windows(2)
        .filter(|w| !(w[1].len() >= w[0].len() && w[1][..w[0].len()] == w[0][..]))
        .count();
    let events = h.state.stats().events as usize;
    eprintln!("{events} events over 60 turns at a {window}-token window");
    assert!(events >= 1, "the engine ran");
    assert_eq!(
        breaks, events,
        "every prefix change is an event, and nothing else changes the prefix"
    );
    assert!(events <= 12, "events are rare: {events} in 60 turns");
    assert!(sent.iter().any(|m| m.iter().any(|x| {
        x["content"]
            .as_str()
            .is_some_and(|c| c.starts_with("[ctxgc context summary"))
    })));
    // The client rewinds to its first exchange: no stale summary or pruning is applied.
    let rewound = json!({"model": "gpt-5", "messages": messages[..4].to_vec()});
    let seen = h.chat(&rewound).await;
    let upstream: Value = serde_json::from_slice(&seen.2).unwrap();
    let msgs = upstream["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 4);
    assert_eq!(msgs[1], messages[1]);
    assert!(!msgs.iter().any(|x| {
        x["content"]
            .as_str()
            .is_some_and(|c| c.starts_with("[ctxgc context summary"))
    }));
}

/// What `ctxgc serve` does by default (`[proxy] cold_events`): while the cache is warm no
/// event runs, however long the history, and the prompt only grows; the first request after the
/// session was idle past the cache's lifetime prunes old outputs (it rewrites the cached prefix
/// anyway), and the requests after it extend that new prefix.
#[tokio::test]
async fn by_default_an_event_runs_only_after_the_cache_went_cold() {
    // Chat Completions: OpenAI's cache lifetime applies.
    let policy = Policy {
        cold_cache_secs: 1,
        openai_cold_cache_secs: 1,
        ..Policy::default()
    };
    let h = start_full(
        Box::new(MemoryStore::default()),
        200_000,
        Some((policy, true)),
        None,
    )
    .await;
    let mut messages = vec![
        json!({"role": "system", "content": "You are a coding agent."}),
        json!({"role": "user", "content": "Fix the flaky test."}),
    ];
    let mut sent: Vec<Vec<Value>> = Vec::new();
    let turn_once = async |messages: &mut Vec<Value>, turn: usize| {
        let id = format!("call_{turn}");
        messages.push(json!({"role": "assistant", "content": format!("Step {turn}."), "tool_calls": [{"id": id, "type": "function", "function": {"name": "bash", "arguments": format!("{{\"command\":\"pytest -k case_{turn}\"}}")}}]}));
        let output = format!("{}\nexit status: {}\n", words(900, turn), turn % 2);
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": output}));
        // A model without OpenAI's extended retention: its cache lives minutes.
        let seen = h
            .chat(&json!({"model": "gpt-4o", "messages": messages}))
            .await;
        let upstream: Value = serde_json::from_slice(&seen.2).unwrap();
        upstream["messages"].as_array().unwrap().clone()
    };
    for turn in 0..30 {
        sent.push(turn_once(&mut messages, turn).await);
    }
    assert_eq!(
        h.state.stats().events,
        0,
        "no event while the cache is warm"
    );
    assert_eq!(
        sent.last().unwrap(),
        &messages,
        "a warm request passes whole"
    );
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let cold = turn_once(&mut messages, 30).await;
    assert_eq!(
        h.state.stats().events,
        1,
        "the request after the pause pruned"
    );
    let size = |m: &[Value]| serde_json::to_vec(m).unwrap().len();
    assert!(
        size(&cold) * 2 < size(&messages),
        "old outputs pruned: {} of {} bytes sent",
        size(&cold),
        size(&messages)
    );
    assert_eq!(cold[..2], messages[..2], "the system prompt and task stay");
    let next = turn_once(&mut messages, 31).await;
    assert_eq!(h.state.stats().events, 1);
    assert_eq!(
        next[..cold.len()],
        cold[..],
        "the next request extends the pruned prefix"
    );
}

/// A client that changes the fixed part of its conversation (its system prompt, tools, or
/// thinking settings) has the provider write every message again: the request that carries the
/// change may run the event a pause would, and no pause is needed. A side conversation of the
/// same client session with its own system prompt (Claude Code's sub-agents and title requests
/// share its session id) is a conversation of its own and changes nothing.
#[tokio::test]
async fn an_event_rides_on_a_change_the_client_made_to_its_fixed_part() {
    let h = start_full(
        Box::new(MemoryStore::default()),
        200_000,
        Some((Policy::default(), true)),
        None,
    )
    .await;
    let session = json!({"user_id": "user_abc_account_def_session_s-fixed"});
    let system = |version: &str| json!([{"type": "text", "text": format!("You are a coding agent ({version}).")}]);
    let mut messages = vec![json!({"role": "user", "content": "Fix the flaky test."})];
    let send = async |messages: &[Value], system: Value, thinking: Option<u32>| {
        let mut body = json!({"model": "claude-sonnet-4-5", "max_tokens": 1_000,
            "metadata": session, "system": system, "messages": messages});
        if let Some(budget) = thinking {
            body["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
        }
        let seen = h.post("/v1/messages", &body).await;
        let upstream: Value = serde_json::from_slice(&seen.2).unwrap();
        upstream["messages"].as_array().unwrap().clone()
    };
    let turn = |messages: &mut Vec<Value>, turn: usize| {
        let id = format!("toolu_{turn}");
        messages.push(json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "Bash", "input": {"command": format!("pytest -k case_{turn}")}}]}));
        let output = format!("{}\nexit status: {}\n", words(900, turn), turn % 2);
        messages.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": output}]}));
    };
    for t in 0..30 {
        turn(&mut messages, t);
        send(&messages, system("v1"), None).await;
        // A side request of the same session: another conversation, another system prompt.
        let side = [json!({"role": "user", "content": format!("Title for turn {t}?")})];
        send(&side, system("titles"), None).await;
    }
    assert_eq!(
        h.state.stats().events,
        0,
        "no event while the cache is warm"
    );
    turn(&mut messages, 30);
    let changed = send(&messages, system("v1"), Some(2_000)).await;
    assert_eq!(
        h.state.stats().events,
        1,
        "the request whose thinking settings changed pruned"
    );
    let size = |m: &[Value]| serde_json::to_vec(m).unwrap().len();
    assert!(
        size(&changed) * 2 < size(&messages),
        "old outputs pruned: {} of {} bytes sent",
        size(&changed),
        size(&messages)
    );
    turn(&mut messages, 31);
    let next = send(&messages, system("v1"), Some(2_000)).await;
    assert_eq!(h.state.stats().events, 1, "the same fixed part: no event");
    // Breakpoints move with the end of the prompt; the content before them stays.
    assert_eq!(
        ctxgc_proxy::rewrite::lineage::hash_messages(&next[..changed.len()]),
        ctxgc_proxy::rewrite::lineage::hash_messages(&changed),
        "the pruned prefix is extended"
    );
}

#[tokio::test]
async fn a_second_replica_continues_the_lineage_from_the_shared_store() {
    // Two replicas on one SQLite file.
    let dir = std::env::temp_dir().join(format!("ctxgc-replicas-{}", std::process::id()));
    let db = dir.join("shared.sqlite");
    replicas_continue_each_other(
        Box::new(ctxgc_store::SqliteStore::open(&db).unwrap()),
        Box::new(ctxgc_store::SqliteStore::open(&db).unwrap()),
    )
    .await;
    let _ = std::fs::remove_dir_all(dir);
    // Two replicas on one Redis (a real redis-server).
    let Some((_server, url)) = redis_server::start() else {
        return;
    };
    replicas_continue_each_other(
        Box::new(ctxgc_store::RedisStore::connect(&url).unwrap()),
        Box::new(ctxgc_store::RedisStore::connect(&url).unwrap()),
    )
    .await;
}

/// A team's Redis: TLS with its own CA, a password, an ACL user limited to its key prefix.
/// Two replicas share it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_a_tls_redis_with_an_acl_user() {
    ctxgc_summarize::install_crypto();
    let dir = std::env::temp_dir().join(format!("ctxgc-proxy-tls-{}", std::process::id()));
    let (ca, cert, key) = redis_server::make_certificates(&dir);
    let args: Vec<String> = [
        "--tls-cert-file",
        &cert.display().to_string(),
        "--tls-key-file",
        &key.display().to_string(),
        "--tls-ca-cert-file",
        &ca.display().to_string(),
        "--tls-auth-clients",
        "no",
        "--user",
        "default",
        "off",
        "--user",
        "proxy",
        "on",
        ">acl-SECRET",
        "~team:*",
        "+@all",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let Some((_server, url)) = redis_server::start_with(&args) else {
        return;
    };
    let port = url.rsplit(':').next().unwrap();
    let tls_url = format!("rediss://proxy:acl-SECRET@127.0.0.1:{port}");
    let store = || {
        ctxgc_store::RedisStore::connect_with(
            &tls_url,
            ctxgc_store::RedisOptions {
                key_prefix: "team".into(),
                ca_file: Some(ca.clone()),
                ..Default::default()
            },
        )
        .unwrap()
    };
    replicas_continue_each_other(Box::new(store()), Box::new(store())).await;
    let _ = std::fs::remove_dir_all(dir);
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

#[tokio::test]
async fn reported_usage_calibrates_the_sessions_token_estimates() {
    let h = start_with(Box::new(MemoryStore::default()), 200_000, true).await;
    let body = json!({"model": "gpt-5", "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}],
        "messages": [{"role": "user", "content": words(2_000, 1)}]});
    client()
        .post(format!("{}/v1/chat/completions", h.proxy))
        .header("x-ctxgc-session", "cal")
        .json(&body)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let session = h.state.named_session(&HeaderMap::new(), "cal");
    let usage = h.state.stats().usage[session.as_str()].clone();
    // The fake upstream reports 100 prompt tokens for a prompt ctxgc counts in the thousands:
    // calibration never lowers the estimates (an overflow fails, an early event only costs).
    assert!(usage.estimated_tokens > 2_000, "{usage:?}");
    assert_eq!(usage.calibration.known(), Some(1.0));
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

#[tokio::test]
async fn anthropic_and_responses_compaction_is_prefix_stable_and_keeps_tool_pairs() {
    use ctxgc_formats::Api;
    for api in [Api::Messages, Api::Responses] {
        let window = 12_000;
        let h = start_with(Box::new(MemoryStore::default()), window, true).await;
        let (path, key) = if api == Api::Messages {
            ("/v1/messages", "messages")
        } else {
            ("/v1/responses", "input")
        };
        let mut items = vec![
            json!({"role": "user", "content": "Fix the flaky test. You must not change the public API."}),
        ];
        let mut sent: Vec<Vec<Value>> = Vec::new();
        let mut counter = ctxgc_core::tokens::TokenCounter::new(
            if api == Api::Messages {
                ctxgc_core::tokens::ProviderFamily::Anthropic
            } else {
                ctxgc_core::tokens::ProviderFamily::Openai
            },
            Default::default(),
        );
        // A message the client pins, mid-history: Claude Code's environment block, a Codex
        // developer message. Compaction used to drop it.
        let pinned = if api == Api::Messages {
            json!({"role": "system", "content": [{"type": "text", "text": "# Environment\n - Primary working directory: /home/dev/project"}]})
        } else {
            json!({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "# Environment\n - Primary working directory: /home/dev/project"}]})
        };
        for turn in 0..60 {
            items.extend(turn_items(api, turn));
            if turn == 5 {
                items.push(pinned.clone());
            }
            let body = if api == Api::Messages {
                json!({"model": "claude-sonnet-4-5", "max_tokens": 1000, "system": "You are a coding agent.", "messages": items})
            } else {
                json!({"model": "gpt-5", "instructions": "You are a coding agent.", "input": items})
            };
            let seen = h.post(path, &body).await;
            let upstream: Value = serde_json::from_slice(&seen.2).unwrap();
            let msgs = upstream[key].as_array().unwrap().clone();
            let request = ctxgc_formats::ApiRequest::parse(api, &seen.2).unwrap();
            let tokens = counter.count_messages(&request.transcript().unwrap().messages);
            assert!(
                (tokens as u64) < window,
                "{}: turn {turn}: {tokens} tokens sent to a {window}-token model",
                api.name()
            );
            assert_pairs(&msgs, turn);
            if turn >= 5 {
                let kept = msgs
                    .iter()
                    .filter(|m| without_cache_control(m) == pinned)
                    .count();
                assert_eq!(kept, 1, "{}: turn {turn}: the pinned message", api.name());
            }
            let breakpoints = upstream.to_string().matches("cache_control").count();
            assert!(breakpoints <= 4, "turn {turn}: {breakpoints} breakpoints");
            sent.push(msgs.iter().map(without_cache_control).collect());
        }
        let breaks = sent
            .windows(2)
            .filter(|w| !(w[1].len() >= w[0].len() && w[1][..w[0].len()] == w[0][..]))
            .count();
        let events = h.state.stats().events as usize;
        eprintln!(
            "{}: {events} events over 60 turns at a {window}-token window",
            api.name()
        );
        assert!(events >= 1, "the engine ran");
        assert_eq!(
            breaks,
            events,
            "{}: every prefix change is an event, and nothing else changes the prefix",
            api.name()
        );
        assert!(events <= 12, "events are rare: {events} in 60 turns");
        assert!(sent.iter().any(|m| {
            m.iter()
                .any(|x| x["content"].to_string().contains("[ctxgc context summary"))
        }));
        if api == Api::Messages {
            // A token count of the latest history sees what the last request sent (lineage
            // applied), runs no event, and a count of some other history ends no lineage.
            // The messages the upstream got for a body sent to `path`, breakpoints aside.
            let upstream_messages = async |path: &str, body: Value| -> Vec<Value> {
                let seen = h.post(path, &body).await;
                let sent: Value = serde_json::from_slice(&seen.2).unwrap();
                sent["messages"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(without_cache_control)
                    .collect()
            };
            let counted = upstream_messages(
                "/v1/messages/count_tokens",
                json!({"model": "claude-sonnet-4-5", "system": "You are a coding agent.", "messages": items}),
            )
            .await;
            assert_eq!(
                &counted,
                sent.last().unwrap(),
                "count_tokens sees the lineage"
            );
            // Same session, a history the lineage does not cover (its first exchange only).
            let other = json!({"model": "claude-sonnet-4-5", "system": "You are a coding agent.", "messages": items[..3]});
            h.post("/v1/messages/count_tokens", &other).await;
            assert_eq!(h.state.stats().events as usize, events);
            let again = upstream_messages(
                path,
                json!({"model": "claude-sonnet-4-5", "max_tokens": 1000, "system": "You are a coding agent.", "messages": items}),
            )
            .await;
            assert_eq!(
                &again,
                sent.last().unwrap(),
                "the lineage survived the counts"
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

/// Defect guarded: one process-wide lock on the store was held across the LLM summary call, so a
/// one-line request of an unrelated session took 7.0 s instead of 0.13 s while an 8 s summary
/// ran. Now a request of session B completes within 50 ms of its usual time while session A's
/// summary call sleeps 5 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_summary_in_one_session_adds_nothing_to_another() {
    let h = start_full(
        Box::new(ctxgc_store::SqliteStore::in_memory().unwrap()),
        12_000,
        Some(always()),
        Some("/slow-summarizer/v1"),
    )
    .await;
    let one_line = |n: usize| {
        json!({"model": "gpt-5", "prompt_cache_key": "b", "messages": [
            {"role": "user", "content": format!("What is {n} + 1?")}
        ]})
    };
    let time_b = async |n: usize| {
        let started = std::time::Instant::now();
        h.chat(&one_line(n)).await;
        started.elapsed()
    };
    let mut usual = Vec::new();
    for n in 0..7 {
        usual.push(time_b(n).await);
    }
    usual.sort();
    let usual = usual[usual.len() / 2];
    let summary_asked = || h.upstream.log.any_path("/slow-summarizer");
    let (_, during) = tokio::join!(chat_session(&h, 40), async {
        let waiting = std::time::Instant::now();
        while !summary_asked() {
            assert!(
                waiting.elapsed() < Duration::from_secs(60),
                "no compaction came"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let asked = std::time::Instant::now();
        let mut during = Vec::new();
        for n in 100..105 {
            during.push(time_b(n).await);
        }
        assert!(
            asked.elapsed() < SLOW_SUMMARY,
            "session B was measured while A's summary call slept"
        );
        during
    });
    for took in during {
        assert!(
            took < usual + Duration::from_millis(50),
            "session B took {took:?} while A's summary slept; usually {usual:?}"
        );
    }
    assert_eq!(h.state.stats().fail_open, 0);
}

#[tokio::test]
async fn an_llm_summarizer_writes_compactions_and_the_extractive_summary_stands_in_when_it_fails() {
    // The LLM writes the summary.
    let h = start_full(
        Box::new(MemoryStore::default()),
        12_000,
        Some(always()),
        Some("/summarizer/v1"),
    )
    .await;
    let turns = chat_session(&h, 40).await;
    let summarized = turns
        .iter()
        .any(|(_, sent, _)| String::from_utf8_lossy(sent).contains("LLM-WRITTEN SUMMARY"));
    assert!(summarized, "a compaction carries the LLM's summary");
    let asked = h
        .upstream
        .log
        .all()
        .iter()
        .filter(|r| r.path == "/summarizer/v1/chat/completions")
        .count();
    assert!(asked >= 1);
    assert_eq!(h.state.stats().fail_open, 0);

    // The LLM is down: the compaction is summarised extractively (the request is neither
    // failed nor forwarded unchanged), and the LLM is not asked again during the cooldown.
    let h = start_full(
        Box::new(MemoryStore::default()),
        12_000,
        Some(always()),
        Some("http://127.0.0.1:9/v1"),
    )
    .await;
    let turns = chat_session(&h, 40).await;
    let stats = h.state.stats();
    assert_eq!(stats.fail_open, 0);
    assert_eq!(
        stats.summarizer_failures, 1,
        "one failure, then the cooldown"
    );
    let summarised =
        |sent: &Bytes| String::from_utf8_lossy(sent).contains("[ctxgc context summary");
    let first = turns.iter().position(|t| summarised(&t.1)).unwrap();
    assert!(first > 0, "the session compacted");
    assert!(
        stats.events >= 2,
        "later compactions ran too (extractive): {} events",
        stats.events
    );
    let logs = h.logs.text();
    assert!(logs.contains("summarizer failed"), "{logs}");
    assert!(
        !logs.contains("sk-summarizer-SECRET"),
        "keys never reach the logs"
    );
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

/// Defect guarded: with the store file locked by another process, requests waited in steps of
/// SQLite's 5 s busy timeout under one global lock. A request now fails open (forwarded
/// unchanged, counted) within the store deadline, and the next one after the lock is released
/// is trimmed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_store_locked_by_another_process_fails_open_within_the_deadline() {
    let dir = std::env::temp_dir().join(format!("ctxgc-locked-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let db = dir.join("store.sqlite");
    let deadline = Duration::from_millis(300);
    let store = ctxgc_store::SqliteStore::open_with_timeout(&db, deadline).unwrap();
    let h = start(Box::new(store)).await;
    let other = rusqlite::Connection::open(&db).unwrap();
    other.execute_batch("BEGIN IMMEDIATE;").unwrap();
    let body = one_output("alice", &log_text(4000));
    let (sent, took) = timed(&h, "sk-alice", &body).await;
    assert_eq!(
        serde_json::from_slice::<Value>(&sent).unwrap(),
        body,
        "forwarded unchanged"
    );
    assert!(took < deadline * 4, "failed open after {took:?}");
    assert_eq!(h.state.stats().fail_open, 1);
    let logs = h.logs.text();
    assert!(logs.contains("locked"), "the log says why: {logs}");
    other.execute_batch("COMMIT;").unwrap();
    // The store rests a moment after a failure (its calls fail open at once meanwhile), then
    // is tried again.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let (sent, _) = timed(&h, "sk-alice", &body).await;
    assert!(sent.len() < body.to_string().len() / 2, "trimmed again");
    assert_eq!(h.state.stats().fail_open, 1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Defect guarded: a Redis command that timed out left its connection in use; when Redis
/// resumed, the next command read the abandoned reply, and Bob's request carried Alice's
/// output. Now Alice's request fails open within the store deadline while Redis is paused, and
/// after it resumes Bob's request carries only Bob's data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_redis_fails_open_within_the_deadline_and_leaks_nothing() {
    let Some((server, url)) = redis_server::start() else {
        return;
    };
    let deadline = Duration::from_millis(300);
    let store = ctxgc_store::RedisStore::connect_with_timeout(&url, deadline).unwrap();
    let h = start(Box::new(store)).await;
    let alice_output = format!(
        "ALICE-ONLY: prod db password is hunter2\n{}",
        log_text(4000)
    );
    let alice = one_output("alice", &alice_output);
    timed(&h, "sk-alice", &alice).await;
    server.pause();
    let (sent, took) = timed(&h, "sk-alice", &one_output("alice", &log_text(5000))).await;
    assert!(took < deadline * 4, "failed open after {took:?}");
    assert_eq!(h.state.stats().fail_open, 1);
    assert!(
        String::from_utf8_lossy(&sent).contains("[04999]"),
        "forwarded whole"
    );
    server.resume();
    // Past the store's rest after its failure.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    for _ in 0..3 {
        let (sent, _) = timed(&h, "sk-bob", &one_output("bob", &log_text(4500))).await;
        let sent = String::from_utf8_lossy(&sent);
        assert!(
            !sent.contains("ALICE") && !sent.contains("hunter2"),
            "{sent}"
        );
        assert!(sent.contains("bob: run the build"));
    }
    assert_eq!(h.state.stats().fail_open, 1, "the store works again");
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

/// A prompt past the window is a failed request. In front of a client that keeps its own
/// window (events only after a pause: the proxy's default), a session driven far past the
/// model's window never sends a prompt past it with any API: the event that makes it fit runs
/// on a warm cache too, keeps every call with its result, is logged and counted.
#[tokio::test]
async fn a_session_past_the_window_is_made_to_fit_with_every_api() {
    use ctxgc_formats::Api;
    for api in [Api::ChatCompletions, Api::Messages, Api::Responses] {
        let window = 12_000;
        let policy = Policy::default();
        let limit = policy.prompt_limit(window);
        let h = start_full(
            Box::new(MemoryStore::default()),
            window,
            Some((policy, true)),
            None,
        )
        .await;
        let path = match api {
            Api::Messages => "/v1/messages",
            Api::Responses => "/v1/responses",
            _ => "/v1/chat/completions",
        };
        let mut items = vec![json!({"role": "user", "content": "Fix the flaky test."})];
        let mut counter =
            ctxgc_core::tokens::TokenCounter::new(api.wire().family(), Default::default());
        let mut passed = 0;
        for turn in 0..30 {
            if api == Api::ChatCompletions {
                items.extend(chat_turn(turn));
            } else {
                items.extend(turn_items(api, turn));
            }
            let body = match api {
                Api::Messages => {
                    json!({"model": "claude-sonnet-4-5", "max_tokens": 1000, "system": "You are a coding agent.", "messages": items})
                }
                Api::Responses => {
                    json!({"model": "gpt-5", "instructions": "You are a coding agent.", "input": items})
                }
                _ => json!({"model": "gpt-4o", "messages": items}),
            };
            let client_tokens = counter.count_messages(
                &ctxgc_formats::ApiRequest::parse(api, body.to_string().as_bytes())
                    .unwrap()
                    .transcript()
                    .unwrap()
                    .messages,
            );
            passed += usize::from(client_tokens > limit);
            let seen = h.post(path, &body).await;
            let request = ctxgc_formats::ApiRequest::parse(api, &seen.2).unwrap();
            let tokens = counter.count_messages(&request.transcript().unwrap().messages);
            assert!(
                tokens <= limit,
                "{}: turn {turn}: {tokens} tokens sent, the limit is {limit}",
                api.name()
            );
            if api != Api::ChatCompletions {
                let sent: Value = serde_json::from_slice(&seen.2).unwrap();
                let key = if api == Api::Messages {
                    "messages"
                } else {
                    "input"
                };
                assert_pairs(sent[key].as_array().unwrap(), turn);
            }
        }
        assert!(
            passed > 10,
            "{}: the client's history passed the window",
            api.name()
        );
        let stats = h.state.stats();
        assert_eq!(stats.fail_open, 0, "{}", api.name());
        assert!(stats.events >= 1, "{}", api.name());
        let metrics = client()
            .get(format!("{}/metrics", h.proxy))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            metrics.lines().any(
                |l| l.starts_with("ctxgc_window_fits_total{outcome=\"fits\"}")
                    && !l.ends_with(" 0")
            ),
            "{}: {metrics}",
            api.name()
        );
        assert!(h.logs.text().contains("prompt past the window"));
    }
}

/// Claude Code's 1M-context sessions announce it (the `context-1m` beta); Claude 5 models run
/// at 1M anyway. Such a session is not cut as if it had the table's 200K: assuming a smaller
/// window than the real one would hide what the client keeps and rewrite its cached prefix.
#[tokio::test]
async fn a_long_context_session_is_not_cut_to_the_tables_window() {
    let upstream = FakeUpstream::start(upstream_reply).await;
    let base = common::settings(&upstream.url);
    let settings = ProxySettings {
        max_body_bytes: 8 * 1024 * 1024,
        rewrite: RewriteSettings {
            cache: Default::default(),
            model_windows: true,
            engine: Some(Policy::default()),
            events_only_when_cold: true,
            ..base.rewrite.clone()
        },
        ..base
    };
    let (proxy, _state) = common::serve(settings).await;
    // About 280K tokens of conversation: past 200K, well inside 1M.
    let mut messages = vec![json!({"role": "user", "content": "Read the whole module."})];
    for turn in 0..10 {
        messages.push(json!({"role": "assistant", "content": format!("Part {turn}.")}));
        messages.push(json!({"role": "user", "content": words(8_000, turn)}));
    }
    let send = async |session: &str, model: &str, beta: Option<&str>| {
        let mut request = client()
            .post(format!("{proxy}/v1/messages"))
            .header("x-ctxgc-session", session);
        if let Some(beta) = beta {
            request = request.header("anthropic-beta", beta);
        }
        let body = json!({"model": model, "max_tokens": 1000, "messages": messages});
        request
            .json(&body)
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        let sent: Value = serde_json::from_slice(&upstream.log.last().unwrap().body).unwrap();
        sent["messages"].as_array().unwrap().len()
    };
    let whole = messages.len();
    assert_eq!(
        send(
            "beta",
            "claude-sonnet-4-5",
            Some("interleaved-thinking-2025-05-14,context-1m-2025-08-07")
        )
        .await,
        whole,
        "the beta's 1M"
    );
    assert_eq!(
        send("five", "claude-opus-5", None).await,
        whole,
        "a Claude 5 model's 1M"
    );
    assert!(
        send("plain", "claude-sonnet-4-5", None).await < whole,
        "at 200K the same history is cut to fit"
    );
}
