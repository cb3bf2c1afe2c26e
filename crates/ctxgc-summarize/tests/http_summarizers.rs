//! The HTTP summarizers against a fake upstream that speaks HTTP/1.1 over a local socket and
//! answers in each provider's real response format, with scripted failures.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use ctxgc_core::engine::{Summarizer, SummaryRequest};
use ctxgc_core::{Message, Role};
use ctxgc_summarize::{BlockingSummarizer, LlmSettings, LlmSummarizer, Protocol, SummarizeError};
use serde_json::{Value, json};

#[derive(Debug, Clone)]
struct Recorded {
    path: String,
    headers: Vec<(String, String)>,
    body: Value,
}

impl Recorded {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

struct Reply {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: String,
    delay: Duration,
}

fn reply(status: u16, body: Value) -> Reply {
    Reply {
        status,
        headers: vec![],
        body: body.to_string(),
        delay: Duration::ZERO,
    }
}

/// Serves scripted replies in order (the last one repeats) and records every request.
fn fake_upstream(script: Vec<Reply>) -> (String, Arc<Mutex<Vec<Recorded>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let recorded = seen.clone();
    thread::spawn(move || {
        let mut script = script.into_iter();
        let mut last: Option<Reply> = None;
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let Some(request) = read_request(&stream) else {
                continue;
            };
            recorded.lock().unwrap().push(request);
            let next = script.next();
            let r = next.as_ref().or(last.as_ref()).expect("a scripted reply");
            thread::sleep(r.delay);
            let mut head = format!(
                "HTTP/1.1 {} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
                r.status,
                r.body.len()
            );
            for (k, v) in &r.headers {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str("\r\n");
            let mut stream = stream;
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(r.body.as_bytes());
            if next.is_some() {
                last = next;
            }
        }
    });
    (url, seen)
}

fn read_request(stream: &TcpStream) -> Option<Recorded> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let path = line.split_whitespace().nth(1)?.to_owned();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.push((k.trim().to_owned(), v.trim().to_owned()));
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))?
        .1
        .parse()
        .ok()?;
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    Some(Recorded {
        path,
        headers,
        body: serde_json::from_slice(&body).ok()?,
    })
}

fn request() -> SummaryRequest {
    SummaryRequest {
        messages: vec![
            Message::text(Role::System, "You are a coding agent."),
            Message::text(Role::User, "Fix the bug."),
            Message::text(Role::Assistant, "Looking."),
            Message::text(
                Role::User,
                "Summarise messages 2 to 2 of this conversation...",
            ),
        ],
        tools: vec![
            json!({"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}),
        ],
        budget: 2_000,
    }
}

fn settings(protocol: Protocol, url: &str) -> LlmSettings {
    let mut s = LlmSettings::new(protocol, "test-model", Some("sk-secret-key-123".into()));
    s.base_url = url.to_owned();
    s.backoff = Duration::from_millis(10);
    s.timeout = Duration::from_secs(5);
    s
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn openai_chat_retries_a_503_then_returns_the_summary() {
    let (url, seen) = fake_upstream(vec![
        reply(503, json!({"error": {"message": "overloaded"}})),
        reply(
            200,
            json!({
                "id": "chatcmpl-1", "object": "chat.completion", "model": "test-model",
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "## Goal\n- fix the bug"}}],
                "usage": {"prompt_tokens": 1234, "completion_tokens": 56, "total_tokens": 1290, "prompt_tokens_details": {"cached_tokens": 1024}}
            }),
        ),
    ]);
    let client = LlmSummarizer::new(settings(Protocol::OpenAiChat, &url)).unwrap();
    let out = runtime().block_on(client.summarize(&request())).unwrap();
    assert_eq!(out.body, "## Goal\n- fix the bug");
    assert_eq!((out.tokens_in, out.tokens_out), (1234, 56));
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2, "one retry");
    let r = &seen[1];
    assert_eq!(r.path, "/v1/chat/completions");
    assert_eq!(r.header("authorization"), Some("Bearer sk-secret-key-123"));
    assert_eq!(r.body["model"], "test-model");
    assert!(
        r.body.get("max_tokens").is_none() && r.body.get("max_completion_tokens").is_none(),
        "size is asked for, not enforced"
    );
    let messages = r.body["messages"].as_array().unwrap();
    assert_eq!(
        messages[0],
        json!({"role": "system", "content": "You are a coding agent."})
    );
    assert!(
        messages.last().unwrap()["content"]
            .as_str()
            .unwrap()
            .starts_with("Summarise messages")
    );
    assert_eq!(r.body["tool_choice"], "none");
}

#[test]
fn anthropic_messages_honours_retry_after_and_reads_cache_usage() {
    let mut limited = reply(
        429,
        json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}),
    );
    limited.headers.push(("retry-after", "0".into()));
    let (url, seen) = fake_upstream(vec![
        limited,
        reply(
            200,
            json!({
                "id": "msg_1", "type": "message", "role": "assistant", "model": "test-model",
                "content": [{"type": "text", "text": "## Goal\n- fix"}, {"type": "text", "text": "## Next steps\n- test"}],
                "stop_reason": "end_turn",
                "usage": {"input_tokens": 10, "cache_read_input_tokens": 900, "cache_creation_input_tokens": 90, "output_tokens": 33}
            }),
        ),
    ]);
    let client = LlmSummarizer::new(settings(Protocol::AnthropicMessages, &url)).unwrap();
    let out = runtime().block_on(client.summarize(&request())).unwrap();
    assert_eq!(out.body, "## Goal\n- fix\n## Next steps\n- test");
    assert_eq!((out.tokens_in, out.tokens_out), (1000, 33));
    let seen = seen.lock().unwrap();
    let r = &seen[1];
    assert_eq!(r.path, "/v1/messages");
    assert_eq!(r.header("x-api-key"), Some("sk-secret-key-123"));
    assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
    assert!(r.body["max_tokens"].as_u64().unwrap() >= 4_096);
    assert_eq!(r.body["system"][0]["text"], "You are a coding agent.");
    let roles: Vec<&str> = r.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "user"]);
    assert!(
        r.body.get("tool_choice").is_none(),
        "tool_choice would invalidate the cached messages"
    );
}

#[test]
fn client_errors_are_not_retried_and_never_show_the_key() {
    let (url, seen) = fake_upstream(vec![reply(
        400,
        json!({"error": {"message": "model not found: test-model"}}),
    )]);
    let client = LlmSummarizer::new(settings(Protocol::OpenAiChat, &url)).unwrap();
    let err = runtime()
        .block_on(client.summarize(&request()))
        .unwrap_err();
    assert!(
        matches!(
            err,
            SummarizeError::Status {
                status: 400,
                attempts: 1,
                ..
            }
        ),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains("HTTP 400") && text.contains("model not found"),
        "{text}"
    );
    assert!(!text.contains("sk-secret"), "{text}");
    assert!(!format!("{:?}", settings(Protocol::OpenAiChat, &url)).contains("sk-secret"));
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[test]
fn timeouts_are_reported_and_the_blocking_adapter_cools_down() {
    let mut slow = reply(200, json!({}));
    slow.delay = Duration::from_millis(1500);
    let (url, seen) = fake_upstream(vec![slow]);
    let mut s = settings(Protocol::OpenAiChat, &url);
    s.timeout = Duration::from_millis(300);
    s.max_retries = 1;
    let mut blocking =
        BlockingSummarizer::new(LlmSummarizer::new(s).unwrap(), Duration::from_secs(60)).unwrap();
    let err = blocking.summarize(&request()).unwrap_err().to_string();
    assert!(
        err.contains("after 2 attempt(s)") && err.contains("timed out"),
        "{err}"
    );
    let asked = seen.lock().unwrap().len();
    let err = blocking.summarize(&request()).unwrap_err();
    assert!(
        matches!(err, ctxgc_core::engine::SummarizerError::CoolingDown { .. }),
        "{err}"
    );
    thread::sleep(Duration::from_millis(100));
    assert_eq!(
        seen.lock().unwrap().len(),
        asked,
        "no request while cooling down"
    );
}
