//! Gemini end to end: a client -> ctxgc -> a fake upstream that speaks Gemini's wire format over
//! a real socket (`generateContent`, `streamGenerateContent?alt=sse` with CRLF events,
//! `countTokens`) and enforces its rules with its real 400 texts: a function response turn
//! right after a function call turn, as many responses as calls, a call turn after a user turn
//! or a response turn, and an API key.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use axum::response::Response;
use ctxgc_core::ContentId;
use ctxgc_core::engine::Policy;
use ctxgc_core::store::{MemoryStore, OriginalStore, SessionId};
use ctxgc_proxy::{AppState, ProxySettings, RewriteSettings};
use ctxgc_test_support::logs;
use ctxgc_test_support::{FakeUpstream, Log, Received, Reply};
use serde_json::{Value, json};

const KEY: &str = "AIza-test-SECRET-key";

/// Gemini's answer to a request that breaks its turn rules, or `None` when it keeps them.
fn broken_turns(body: &Value) -> Option<&'static str> {
    let contents = body["contents"].as_array()?;
    let count = |turn: &Value, kind: &str| {
        turn["parts"]
            .as_array()
            .map_or(0, |p| p.iter().filter(|p| p.get(kind).is_some()).count())
    };
    for (i, turn) in contents.iter().enumerate() {
        let calls = count(turn, "functionCall");
        let responses = count(turn, "functionResponse");
        let before = i.checked_sub(1).map(|b| &contents[b]);
        if calls > 0 {
            let after_user_or_response = before.is_some_and(|b| b["role"] != "model");
            if !after_user_or_response {
                return Some(
                    "Please ensure that function call turn comes immediately after a user turn or after a function response turn.",
                );
            }
        }
        if responses > 0 {
            let calls_before = before.map_or(0, |b| count(b, "functionCall"));
            if calls_before == 0 {
                return Some(
                    "Please ensure that function response turn comes immediately after a function call turn.",
                );
            }
            if calls_before != responses {
                return Some(
                    "Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn.",
                );
            }
        }
        if calls > 0
            && contents
                .get(i + 1)
                .is_some_and(|n| count(n, "functionResponse") != calls)
        {
            return Some(
                "Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn.",
            );
        }
    }
    None
}

fn gemini_error(code: u16, status: &str, message: &str) -> Response {
    Response::builder()
        .status(code)
        .header("content-type", "application/json; charset=UTF-8")
        .body(Body::from(
            json!({"error": {"code": code, "message": message, "status": status}}).to_string(),
        ))
        .unwrap()
}

fn chunk(text: &str, last: bool) -> Value {
    let mut c = json!({"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "index": 0}],
        "usageMetadata": {"promptTokenCount": 5000, "cachedContentTokenCount": 4096, "candidatesTokenCount": 3, "totalTokenCount": 5003},
        "modelVersion": "gemini-2.5-pro", "responseId": "resp-1"});
    if last {
        c["candidates"][0]["finishReason"] = json!("STOP");
        c["usageMetadata"]["thoughtsTokenCount"] = json!(7);
    }
    c
}

fn gemini_reply(r: Received, _log: Log) -> Reply {
    Box::pin(async move {
        let keyed = r.headers.contains_key("x-goog-api-key")
            || r.query.as_deref().is_some_and(|q| q.contains("key="));
        if !keyed {
            return gemini_error(
                403,
                "PERMISSION_DENIED",
                "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.",
            );
        }
        let body: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
        if r.path.ends_with(":countTokens") {
            return Response::builder()
                .header("content-type", "application/json")
                .body(Body::from(json!({"totalTokens": 1234}).to_string()))
                .unwrap();
        }
        if let Some(why) = broken_turns(&body) {
            return gemini_error(400, "INVALID_ARGUMENT", why);
        }
        if r.path.ends_with(":streamGenerateContent") {
            // Google's SSE ends its events with CRLF, and splits them across writes.
            let events: String = [chunk("Looking", false), chunk(" at it.", true)]
                .iter()
                .map(|c| format!("data: {c}\r\n\r\n"))
                .collect();
            let bytes = events.into_bytes();
            let pieces: Vec<Result<Bytes, std::io::Error>> = bytes
                .chunks(37)
                .map(|c| Ok(Bytes::copy_from_slice(c)))
                .collect();
            return Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(futures_util::stream::iter(pieces)))
                .unwrap();
        }
        Response::builder()
            .header("content-type", "application/json")
            .body(Body::from(chunk("ok", true).to_string()))
            .unwrap()
    })
}

struct Harness {
    proxy: String,
    upstream: FakeUpstream,
    state: Arc<AppState>,
    store: Arc<MemoryStore>,
}

async fn start(engine: bool) -> Harness {
    let upstream = FakeUpstream::start(gemini_reply).await;
    let store = Arc::new(MemoryStore::default());
    let base = common::settings(&upstream.url);
    let settings = ProxySettings {
        openai_upstream: "http://127.0.0.1:1".into(),
        anthropic_upstream: "http://127.0.0.1:1".into(),
        max_body_bytes: 8 * 1024 * 1024,
        rewrite: RewriteSettings {
            cache: Default::default(),
            engine: engine.then(Policy::default),
            ..base.rewrite.clone()
        },
        ..base
    };
    let state = AppState::new(settings, Box::new(store.clone())).unwrap();
    let proxy = common::serve_state(state.clone()).await;
    Harness {
        proxy,
        upstream,
        state,
        store,
    }
}

fn build_log(turn: usize) -> String {
    (0..1500)
        .map(|i| format!("[{turn}:{i:05}] compiling module_{i} ... ok\n"))
        .collect::<String>()
        + &format!("error[E0308]: mismatched types in turn {turn}\nexit status: 1\n")
}

/// A Gemini CLI-shaped body after `turns` tool rounds: calls without ids, responses with
/// `{"output": ...}`, a thought signature on each turn's first call.
fn session_body(turns: usize) -> Value {
    let mut contents = vec![json!({"role": "user", "parts": [{"text": "Fix the failing build."}]})];
    for t in 0..turns {
        contents.push(json!({"role": "model", "parts": [
            {"functionCall": {"name": "run_shell_command", "args": {"command": format!("make step-{t}")}}, "thoughtSignature": format!("sig-{t}")},
            {"functionCall": {"name": "read_file", "args": {"absolute_path": format!("/w/src/f{t}.rs")}}}
        ]}));
        contents.push(json!({"role": "user", "parts": [
            {"functionResponse": {"name": "run_shell_command", "response": {"output": build_log(t)}}},
            {"functionResponse": {"name": "read_file", "response": {"output": format!("fn f{t}() {{}}\n")}}}
        ]}));
    }
    json!({
        "contents": contents,
        "systemInstruction": {"role": "user", "parts": [{"text": "You are Gemini CLI, an interactive agent."}]},
        "tools": [{"functionDeclarations": [{"name": "run_shell_command", "parameters": {"type": "OBJECT"}}, {"name": "read_file", "parameters": {"type": "OBJECT"}}]}],
        "generationConfig": {"temperature": 0}
    })
}

async fn post(h: &Harness, path: &str, body: &Value) -> (StatusCode, Bytes) {
    let r = reqwest::Client::new()
        .post(format!("{}{path}", h.proxy))
        .header("x-goog-api-key", KEY)
        .json(body)
        .send()
        .await
        .unwrap();
    (r.status(), r.bytes().await.unwrap())
}

#[tokio::test]
async fn a_gemini_tool_output_is_trimmed_its_original_stored_and_the_rest_kept() {
    let h = start(false).await;
    let body = session_body(1);
    let (status, answer) = post(&h, "/v1beta/models/gemini-2.5-pro:generateContent", &body).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&answer)
    );
    let seen = h.upstream.log.last().unwrap();
    assert_eq!(seen.path, "/v1beta/models/gemini-2.5-pro:generateContent");
    let sent: Value = serde_json::from_slice(&seen.body).unwrap();
    let output = sent["contents"][2]["parts"][0]["functionResponse"]["response"]["output"]
        .as_str()
        .unwrap();
    let original = build_log(0);
    assert!(
        output.len() < original.len() / 2,
        "trimmed: {} bytes",
        output.len()
    );
    assert!(
        output.contains("error[E0308]") && output.contains("exit status: 1"),
        "{output}"
    );
    // Everything else reaches the upstream as the client sent it.
    for key in ["systemInstruction", "tools", "generationConfig"] {
        assert_eq!(sent[key], body[key], "{key}");
    }
    assert_eq!(sent["contents"][0], body["contents"][0], "the task");
    assert_eq!(
        sent["contents"][1], body["contents"][1],
        "the calls, signature and all"
    );
    assert_eq!(
        sent["contents"][2]["parts"][1], body["contents"][2]["parts"][1],
        "a small output"
    );
    // The original is stored under the id the trimmed text names.
    let id = output
        .split("id ")
        .nth(1)
        .and_then(|rest| rest.split([' ', ';', ']']).next())
        .unwrap();
    assert_eq!(id, ContentId::of(original.as_bytes()).to_string());
    let stats = h.state.stats();
    assert_eq!(
        (stats.rewritten, stats.fail_open, stats.originals_stored),
        (1, 0, 1)
    );
    let session = stats.usage.keys().next().unwrap().clone();
    let stored = h
        .store
        .get(
            &SessionId::new(session.clone()),
            ContentId::of(original.as_bytes()),
        )
        .unwrap();
    assert_eq!(stored.as_deref(), Some(original.as_str()));
    // The usage came from `usageMetadata`: the cached part apart, thoughts as output.
    let usage = &stats.usage[&session];
    assert_eq!(
        (
            usage.input_tokens,
            usage.cache_read_tokens,
            usage.output_tokens
        ),
        (904, 4096, 10)
    );
}

#[tokio::test]
async fn the_key_in_the_query_names_the_tenant_and_never_reaches_the_logs() {
    let logs = logs::capture();
    let h = start(false).await;
    let body = session_body(1);
    let send = |key: &'static str| {
        let url = format!(
            "{}/v1beta/models/gemini-2.5-pro:generateContent?key={key}",
            h.proxy
        );
        let body = body.clone();
        async move {
            reqwest::Client::new()
                .post(url)
                .json(&body)
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    assert_eq!(send("AIza-alice-SECRET").await, StatusCode::OK);
    assert_eq!(send("AIza-bob-SECRET").await, StatusCode::OK);
    let seen = h.upstream.log.last().unwrap();
    assert_eq!(
        seen.query.as_deref(),
        Some("key=AIza-bob-SECRET"),
        "forwarded as sent"
    );
    let stats = h.state.stats();
    let tenants: std::collections::BTreeSet<&str> = stats
        .usage
        .keys()
        .map(|s| s.split('.').next().unwrap())
        .collect();
    assert_eq!(tenants.len(), 2, "one tenant per key: {tenants:?}");
    assert!(!tenants.contains("anonymous"));
    assert!(!logs.text().contains("SECRET"), "{}", logs.text());
}

#[tokio::test]
async fn a_gemini_stream_passes_byte_for_byte_and_its_usage_is_read() {
    let h = start(false).await;
    let (status, answer) = post(
        &h,
        "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
        &session_body(1),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let expected: String = [chunk("Looking", false), chunk(" at it.", true)]
        .iter()
        .map(|c| format!("data: {c}\r\n\r\n"))
        .collect();
    assert_eq!(String::from_utf8_lossy(&answer), expected);
    assert_eq!(
        h.upstream.log.last().unwrap().query.as_deref(),
        Some("alt=sse")
    );
    let stats = h.state.stats();
    let usage = stats.usage.values().next().unwrap();
    assert_eq!(
        (usage.requests, usage.cache_read_tokens, usage.output_tokens),
        (1, 4096, 10)
    );
}

#[tokio::test]
async fn count_tokens_in_either_shape_and_other_methods_pass_through() {
    let h = start(false).await;
    // The bare shape goes through the pipeline: what is counted is what would be sent.
    let bare = json!({"contents": session_body(1)["contents"].clone()});
    let (status, _) = post(&h, "/v1beta/models/gemini-2.5-pro:countTokens", &bare).await;
    assert_eq!(status, StatusCode::OK);
    let seen: Value = serde_json::from_slice(&h.upstream.log.last().unwrap().body).unwrap();
    let counted = seen["contents"][2]["parts"][0]["functionResponse"]["response"]["output"]
        .as_str()
        .unwrap();
    assert!(counted.len() < build_log(0).len() / 2);
    // The wrapped shape is counted as sent.
    let wrapped = json!({"generateContentRequest": {"model": "models/gemini-2.5-pro", "contents": bare["contents"].clone()}});
    let (status, _) = post(&h, "/v1beta/models/gemini-2.5-pro:countTokens", &wrapped).await;
    assert_eq!(status, StatusCode::OK);
    let seen: Value = serde_json::from_slice(&h.upstream.log.last().unwrap().body).unwrap();
    assert_eq!(seen, wrapped);
    // Listing models, embedding: untouched, to the Gemini upstream.
    let r = reqwest::Client::new()
        .get(format!("{}/v1beta/models?pageSize=5", h.proxy))
        .header("x-goog-api-key", KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(h.upstream.log.last().unwrap().path, "/v1beta/models");
    let (status, _) = post(
        &h,
        "/v1beta/models/text-embedding-004:embedContent",
        &json!({"content": {"parts": [{"text": "x"}]}}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        h.upstream.log.last().unwrap().body,
        json!({"content": {"parts": [{"text": "x"}]}}).to_string()
    );
}

#[tokio::test]
async fn a_gemini_session_under_compaction_keeps_its_turns_valid_and_its_prefix_stable() {
    let h = start(true).await;
    let mut previous: Option<Vec<Value>> = None;
    let mut events = 0;
    for turns in 1..=24 {
        let (status, answer) = post(
            &h,
            "/v1beta/models/gemini-2.5-pro:generateContent",
            &session_body(turns),
        )
        .await;
        // The upstream enforces Gemini's pairing rules: a broken pair would be its 400.
        assert_eq!(
            status,
            StatusCode::OK,
            "turn {turns}: {}",
            String::from_utf8_lossy(&answer)
        );
        let sent: Value = serde_json::from_slice(&h.upstream.log.last().unwrap().body).unwrap();
        let contents = sent["contents"].as_array().unwrap().clone();
        assert_eq!(contents[0]["parts"][0]["text"], "Fix the failing build.");
        assert_eq!(
            sent["systemInstruction"],
            session_body(1)["systemInstruction"]
        );
        let stable = previous
            .as_ref()
            .is_some_and(|p| contents.len() >= p.len() && contents[..p.len()] == p[..]);
        if previous.is_some() && !stable {
            events += 1;
        }
        previous = Some(contents);
    }
    let stats = h.state.stats();
    assert_eq!(stats.fail_open, 0);
    assert!(stats.events >= 1, "the session compacted at a 32K window");
    assert_eq!(
        events as u64, stats.events,
        "the prompt changed only at events"
    );
}

/// A Gemini CLI session driven past the window, in front of a client that keeps its own window
/// (events only after a pause, the default): no request past the window reaches the model,
/// and every turn stays valid.
#[tokio::test]
async fn a_gemini_session_past_the_window_is_made_to_fit() {
    let upstream = FakeUpstream::start(gemini_reply).await;
    let base = common::settings(&upstream.url);
    let policy = Policy::default();
    let limit = policy.prompt_limit(base.rewrite.window);
    let settings = ProxySettings {
        max_body_bytes: 8 * 1024 * 1024,
        rewrite: RewriteSettings {
            cache: Default::default(),
            engine: Some(policy),
            events_only_when_cold: true,
            ..base.rewrite.clone()
        },
        ..base
    };
    let (proxy, state) = common::serve(settings).await;
    let mut counter = ctxgc_core::tokens::TokenCounter::openai();
    for turns in 1..=24 {
        let r = reqwest::Client::new()
            .post(format!(
                "{proxy}/v1beta/models/gemini-2.5-pro:generateContent"
            ))
            .header("x-goog-api-key", KEY)
            .json(&session_body(turns))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "turn {turns}");
        let sent = upstream.log.last().unwrap().body;
        let request = ctxgc_formats::ApiRequest::parse(ctxgc_formats::Api::Gemini, &sent).unwrap();
        let tokens = counter.count_messages(&request.transcript().unwrap().messages);
        assert!(
            tokens <= limit,
            "turn {turns}: {tokens} tokens, the limit is {limit}"
        );
    }
    assert_eq!(state.stats().fail_open, 0);
    assert!(state.stats().events >= 1, "the window was enforced");
}
