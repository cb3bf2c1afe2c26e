//! The agent tools inside the proxy, end to end: a fake model upstream (OpenAI Chat Completions
//! and Anthropic Messages, JSON and SSE, over a real socket) calls `recall_tool_result` and
//! `trim_tool_result`; the proxy runs them, the client never sees them, and later requests carry
//! what they did with a stable upstream prefix.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;
use common::without_cache_control;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::response::Response;
use ctxgc_core::ContentId;
use ctxgc_core::store::OriginalStore;
use ctxgc_formats::Api;
use ctxgc_proxy::{AppState, ProxySettings, RewriteSettings};
use ctxgc_test_support::{FakeUpstream, Log, Received, Reply};
use serde_json::{Value, json};

mod rounds;

/// What the upstream received.
type Seen = Log;

/// What the fake model says: some text and some tool calls (id, name, arguments).
struct Turn {
    text: String,
    calls: Vec<(&'static str, &'static str, Value)>,
}

fn items(body: &Value) -> &Vec<Value> {
    body.get("messages")
        .or(body.get("input"))
        .and_then(Value::as_array)
        .unwrap()
}

/// The latest message if it is a tool result: (call id, text).
fn last_result(api: Api, body: &Value) -> Option<(String, String)> {
    let last = items(body).last()?;
    let text = |c: &Value| match c {
        Value::String(s) => s.clone(),
        other => other
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["text"].as_str())
            .collect(),
    };
    match api {
        Api::Messages => {
            let block = last["content"]
                .as_array()?
                .iter()
                .rfind(|b| b["type"] == "tool_result")?;
            Some((
                block["tool_use_id"].as_str()?.to_owned(),
                text(&block["content"]),
            ))
        }
        Api::Responses if last["type"] == "function_call_output" => {
            Some((last["call_id"].as_str()?.to_owned(), text(&last["output"])))
        }
        Api::ChatCompletions if last["role"] == "tool" => Some((
            last["tool_call_id"].as_str()?.to_owned(),
            text(&last["content"]),
        )),
        _ => None,
    }
}

fn find_id(text: &str) -> Option<String> {
    text.match_indices("r-")
        .map(|(i, _)| &text[i..])
        .find_map(|rest| {
            let id = rest.get(..18)?;
            id[2..]
                .bytes()
                .all(|b| b.is_ascii_hexdigit())
                .then(|| id.to_owned())
        })
}

/// The fake model's policy.
fn decide(api: Api, body: &Value) -> Turn {
    // A model that would recall forever unless told to answer.
    if body.to_string().contains("ALWAYS-RECALL") {
        let told = body["tool_choice"] == "none" || body["tool_choice"]["type"] == "none";
        return match told {
            true => Turn {
                text: "answer without tools".into(),
                calls: vec![],
            },
            false => Turn {
                text: "again".into(),
                calls: vec![(
                    "ctx_loop",
                    "recall_tool_result",
                    json!({"id": "r-0000000000000000"}),
                )],
            },
        };
    }
    match last_result(api, body) {
        Some((id, text)) if id.starts_with("ctx_") => Turn {
            text: format!("seen: {}", text.chars().take(400).collect::<String>()),
            calls: vec![],
        },
        Some((_, text)) if text.contains("please trim") => Turn {
            text: "Summarising.".into(),
            calls: vec![
                (
                    "ctx_t",
                    "trim_tool_result",
                    json!({"summary": "build failed at step 3"}),
                ),
                ("c2", "bash", json!({"command": "ls"})),
            ],
        },
        Some((_, text)) => match find_id(&text) {
            Some(id) => Turn {
                text: "Let me look.".into(),
                calls: vec![(
                    "ctx_r",
                    "recall_tool_result",
                    json!({"id": id, "pattern": "^error"}),
                )],
            },
            None => Turn {
                text: "done".into(),
                calls: vec![],
            },
        },
        None => Turn {
            text: "ok".into(),
            calls: vec![],
        },
    }
}

fn sse(events: Vec<String>) -> Response {
    let stream = futures_util::stream::iter(
        events
            .into_iter()
            .map(|e| Ok::<_, std::io::Error>(Bytes::from(e))),
    );
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap()
}

fn render(api: Api, stream: bool, turn: Turn) -> Response {
    let finish = if turn.calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    let stop = if turn.calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    match (api, stream) {
        (Api::Responses, _) => render_responses(stream, turn),
        (Api::Messages, false) => {
            let mut content = vec![json!({"type": "text", "text": turn.text})];
            content.extend(turn.calls.iter().map(|(id, name, input)| json!({"type": "tool_use", "id": id, "name": name, "input": input})));
            let body = json!({"id": "msg_1", "type": "message", "role": "assistant", "content": content, "stop_reason": stop,
                "usage": {"input_tokens": 50, "output_tokens": 5}});
            Response::builder()
                .header("content-type", "application/json")
                .body(Body::from(body.to_string()))
                .unwrap()
        }
        (Api::Messages, true) => {
            let ev = |v: Value| format!("event: {}\ndata: {}\n\n", v["type"].as_str().unwrap(), v);
            let mut events = vec![
                ev(
                    json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "usage": {"input_tokens": 50, "output_tokens": 1}}}),
                ),
                ev(
                    json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
                ),
                ev(
                    json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": turn.text}}),
                ),
                ev(json!({"type": "content_block_stop", "index": 0})),
            ];
            for (k, (id, name, input)) in turn.calls.iter().enumerate() {
                let args = input.to_string();
                let (a, b) = args.split_at(args.len() / 2);
                let i = k + 1;
                events.push(ev(json!({"type": "content_block_start", "index": i, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}})));
                events.push(ev(json!({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": a}})));
                events.push(ev(json!({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": b}})));
                events.push(ev(json!({"type": "content_block_stop", "index": i})));
            }
            events.push(ev(json!({"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 9}})));
            events.push(ev(json!({"type": "message_stop"})));
            sse(events)
        }
        (_, false) => {
            let mut message = json!({"role": "assistant", "content": turn.text});
            if !turn.calls.is_empty() {
                message["tool_calls"] = turn.calls.iter().map(|(id, name, args)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}})).collect();
            }
            let body = json!({"id": "cc", "object": "chat.completion", "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 50, "completion_tokens": 5}});
            Response::builder()
                .header("content-type", "application/json")
                .body(Body::from(body.to_string()))
                .unwrap()
        }
        (_, true) => {
            let chunk = |delta: Value, finish: Value| {
                format!(
                    "data: {}\n\n",
                    json!({"id": "cc", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
                )
            };
            let mut events = vec![chunk(
                json!({"role": "assistant", "content": turn.text}),
                Value::Null,
            )];
            for (k, (id, name, args)) in turn.calls.iter().enumerate() {
                let args = args.to_string();
                let (a, b) = args.split_at(args.len() / 2);
                events.push(chunk(json!({"tool_calls": [{"index": k, "id": id, "type": "function", "function": {"name": name, "arguments": a}}]}), Value::Null));
                events.push(chunk(
                    json!({"tool_calls": [{"index": k, "function": {"arguments": b}}]}),
                    Value::Null,
                ));
            }
            events.push(chunk(json!({}), json!(finish)));
            events.push(format!("data: {}\n\n", json!({"id": "cc", "choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": 5}})));
            events.push("data: [DONE]\n\n".into());
            sse(events)
        }
    }
}

/// The Responses API's output items for a turn, then the JSON or SSE response.
fn render_responses(stream: bool, turn: Turn) -> Response {
    let message = json!({"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
        "content": [{"type": "output_text", "text": turn.text, "annotations": []}]});
    let calls: Vec<Value> = turn
        .calls
        .iter()
        .map(|(id, name, args)| {
            json!({"type": "function_call", "id": format!("fc_{id}"),
        "call_id": id, "name": name, "arguments": args.to_string(), "status": "completed"})
        })
        .collect();
    let mut output = vec![message.clone()];
    output.extend(calls.iter().cloned());
    let usage = json!({"input_tokens": 50, "output_tokens": 5, "total_tokens": 55, "input_tokens_details": {"cached_tokens": 0}});
    if !stream {
        let body = json!({"id": "resp_1", "object": "response", "status": "completed", "output": output, "usage": usage});
        return Response::builder()
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
    }
    let mut seq = 0;
    let mut ev = |mut v: Value| {
        v["sequence_number"] = json!(seq);
        seq += 1;
        format!("event: {}\ndata: {}\n\n", v["type"].as_str().unwrap(), v)
    };
    let mut events = vec![
        ev(
            json!({"type": "response.created", "response": {"id": "resp_1", "status": "in_progress", "output": []}}),
        ),
        ev(
            json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []}}),
        ),
        ev(
            json!({"type": "response.output_text.delta", "output_index": 0, "item_id": "msg_1", "content_index": 0, "delta": turn.text}),
        ),
        ev(json!({"type": "response.output_item.done", "output_index": 0, "item": message})),
    ];
    for (k, call) in calls.iter().enumerate() {
        let args = call["arguments"].as_str().unwrap();
        let (a, b) = args.split_at(args.len() / 2);
        let mut added = call.clone();
        added["arguments"] = json!("");
        events.push(ev(
            json!({"type": "response.output_item.added", "output_index": k + 1, "item": added}),
        ));
        events.push(ev(json!({"type": "response.function_call_arguments.delta", "output_index": k + 1, "item_id": call["id"], "delta": a})));
        events.push(ev(json!({"type": "response.function_call_arguments.delta", "output_index": k + 1, "item_id": call["id"], "delta": b})));
        events.push(ev(
            json!({"type": "response.output_item.done", "output_index": k + 1, "item": call}),
        ));
    }
    events.push(ev(json!({"type": "response.completed", "response": {"id": "resp_1", "status": "completed", "output": output, "usage": usage}})));
    sse(events)
}

/// The scripted model, answering on the shared fake upstream.
fn model(r: Received, _: Log) -> Reply {
    let api = if r.path.starts_with("/v1/messages") {
        Api::Messages
    } else if r.path.starts_with("/v1/responses") {
        Api::Responses
    } else {
        Api::ChatCompletions
    };
    let body: Value = serde_json::from_slice(&r.body).unwrap();
    let stream = body["stream"] == true;
    let reply = render(api, stream, decide(api, &body));
    Box::pin(async move { reply })
}

struct Harness {
    proxy: String,
    state: Arc<AppState>,
    seen: Seen,
    db: std::path::PathBuf,
    _dir: tempdir::Dir,
}

mod tempdir {
    /// A directory removed when dropped.
    pub struct Dir(pub std::path::PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

async fn start(name: &str) -> Harness {
    let upstream = FakeUpstream::start(model).await;
    let up = upstream.url.clone();
    let seen = upstream.log.clone();
    let dir = std::env::temp_dir().join(format!("ctxgc-agent-{name}-{}", std::process::id()));
    let db = dir.join("store.sqlite");
    let store = ctxgc_store::SqliteStore::open(&db).unwrap();
    let base = common::settings(&up);
    let settings = ProxySettings {
        rewrite: RewriteSettings {
            cache: Default::default(),
            inject_tools: true,
            ..base.rewrite.clone()
        },
        ..base
    };
    let state = AppState::new(settings, Box::new(store)).unwrap();
    let proxy = common::serve_state(state.clone()).await;
    Harness {
        proxy,
        state,
        seen,
        db,
        _dir: tempdir::Dir(dir),
    }
}

/// What the client got: text, tool calls (id, name, arguments, index), message starts.
#[derive(Debug, Default)]
struct Seen2Client {
    text: String,
    calls: Vec<(String, String, String, u64)>,
    starts: usize,
    raw: String,
}

fn client_view(api: Api, stream: bool, raw: &str) -> Seen2Client {
    let mut v = Seen2Client {
        raw: raw.to_owned(),
        ..Default::default()
    };
    if api == Api::Responses {
        let mut outputs = Vec::new();
        let mut seq = 0;
        if stream {
            for event in raw.split("\n\n").filter(|e| !e.is_empty()) {
                let data = event
                    .lines()
                    .find_map(|l| l.strip_prefix("data: "))
                    .unwrap();
                let e: Value = serde_json::from_str(data).unwrap();
                // What the client reads is one response: sequence numbers run on without gaps.
                assert_eq!(e["sequence_number"], json!(seq), "{raw}");
                seq += 1;
                match e["type"].as_str().unwrap() {
                    "response.created" => v.starts += 1,
                    "response.output_text.delta" => v.text.push_str(e["delta"].as_str().unwrap()),
                    "response.output_item.done" if e["item"]["type"] == "function_call" => {
                        outputs.push((e["output_index"].as_u64().unwrap(), e["item"].clone()))
                    }
                    _ => {}
                }
            }
        } else {
            let body: Value = serde_json::from_str(raw).unwrap();
            for (i, item) in body["output"].as_array().unwrap().iter().enumerate() {
                match item["type"].as_str().unwrap() {
                    "message" => v
                        .text
                        .push_str(item["content"][0]["text"].as_str().unwrap()),
                    _ => outputs.push((i as u64, item.clone())),
                }
            }
        }
        for (index, c) in outputs {
            let s = |k: &str| c[k].as_str().unwrap().to_owned();
            v.calls
                .push((s("call_id"), s("name"), s("arguments"), index));
        }
        return v;
    }
    if !stream {
        let body: Value = serde_json::from_str(raw).unwrap();
        if api == Api::Messages {
            for (i, b) in body["content"].as_array().unwrap().iter().enumerate() {
                match b["type"].as_str() {
                    Some("text") => v.text.push_str(b["text"].as_str().unwrap()),
                    _ => v.calls.push((
                        b["id"].as_str().unwrap().into(),
                        b["name"].as_str().unwrap().into(),
                        b["input"].to_string(),
                        i as u64,
                    )),
                }
            }
        } else {
            let m = &body["choices"][0]["message"];
            v.text = m["content"].as_str().unwrap_or_default().into();
            for (i, c) in m["tool_calls"].as_array().into_iter().flatten().enumerate() {
                v.calls.push((
                    c["id"].as_str().unwrap().into(),
                    c["function"]["name"].as_str().unwrap().into(),
                    c["function"]["arguments"].as_str().unwrap().into(),
                    i as u64,
                ));
            }
        }
        return v;
    }
    for event in raw.split("\n\n").filter(|e| !e.is_empty()) {
        let data = event
            .lines()
            .find_map(|l| l.strip_prefix("data: "))
            .unwrap();
        let Ok(e) = serde_json::from_str::<Value>(data) else {
            continue;
        };
        if api == Api::Messages {
            let index = e["index"].as_u64().unwrap_or(0);
            match e["type"].as_str().unwrap() {
                "message_start" => v.starts += 1,
                "content_block_start" if e["content_block"]["type"] == "tool_use" => {
                    let b = &e["content_block"];
                    v.calls.push((
                        b["id"].as_str().unwrap().into(),
                        b["name"].as_str().unwrap().into(),
                        String::new(),
                        index,
                    ));
                }
                "content_block_delta" => {
                    if let Some(t) = e["delta"]["text"].as_str() {
                        v.text.push_str(t);
                    }
                    if let Some(j) = e["delta"]["partial_json"].as_str() {
                        v.calls
                            .iter_mut()
                            .find(|c| c.3 == index)
                            .unwrap()
                            .2
                            .push_str(j);
                    }
                }
                _ => {}
            }
        } else {
            if e["choices"][0]["delta"]["role"].is_string() {
                v.starts += 1;
            }
            if let Some(t) = e["choices"][0]["delta"]["content"].as_str() {
                v.text.push_str(t);
            }
            for c in e["choices"][0]["delta"]["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let index = c["index"].as_u64().unwrap();
                if let Some(name) = c["function"]["name"].as_str() {
                    v.calls.push((
                        c["id"].as_str().unwrap().into(),
                        name.into(),
                        String::new(),
                        index,
                    ));
                }
                let args = c["function"]["arguments"].as_str().unwrap_or_default();
                v.calls
                    .iter_mut()
                    .find(|x| x.3 == index)
                    .unwrap()
                    .2
                    .push_str(args);
            }
        }
    }
    v
}

fn path(api: Api) -> &'static str {
    match api {
        Api::Messages => "/v1/messages",
        Api::Responses => "/v1/responses",
        Api::ChatCompletions => "/v1/chat/completions",
        Api::Gemini => "/v1beta/models/gemini-2.5-pro:generateContent",
    }
}

fn first_request(api: Api, stream: bool, result: &str) -> Value {
    if api == Api::Responses {
        return json!({"model": "gpt-5", "stream": stream, "instructions": "You are a coding agent.",
        "tools": [{"type": "function", "name": "bash", "parameters": {"type": "object"}}],
        "input": [
            {"role": "user", "content": "build it"},
            {"type": "function_call", "call_id": "c1", "name": "bash", "arguments": "{\"command\":\"make\"}"},
            {"type": "function_call_output", "call_id": "c1", "output": result}
        ]});
    }
    if api == Api::Messages {
        json!({"model": "claude", "max_tokens": 1000, "stream": stream, "system": "You are a coding agent.",
        "tools": [{"name": "bash", "description": "Run a command", "input_schema": {"type": "object"}}],
        "messages": [
            {"role": "user", "content": "build it"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "bash", "input": {"command": "make"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": result}]}
        ]})
    } else {
        json!({"model": "gpt-5", "stream": stream,
        "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}],
        "messages": [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "build it"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"make\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": result}
        ]})
    }
}

/// The client's next request: its history, the answer it got, then results for its calls (or a
/// user message).
fn next_request(api: Api, mut body: Value, got: &Seen2Client) -> Value {
    if api == Api::Responses {
        let list = body["input"].as_array_mut().unwrap();
        list.push(json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": got.text}]}));
        for (id, name, args, _) in &got.calls {
            list.push(
                json!({"type": "function_call", "call_id": id, "name": name, "arguments": args}),
            );
        }
        for (id, ..) in &got.calls {
            list.push(json!({"type": "function_call_output", "call_id": id, "output": "listing"}));
        }
        if got.calls.is_empty() {
            list.push(json!({"role": "user", "content": "thanks"}));
        }
        return body;
    }
    let list = body["messages"].as_array_mut().unwrap();
    if api == Api::Messages {
        let mut content = vec![json!({"type": "text", "text": got.text})];
        content.extend(got.calls.iter().map(|(id, name, args, _)| json!({"type": "tool_use", "id": id, "name": name, "input": serde_json::from_str::<Value>(args).unwrap()})));
        list.push(json!({"role": "assistant", "content": content}));
        list.push(if got.calls.is_empty() {
            json!({"role": "user", "content": "thanks"})
        } else {
            json!({"role": "user", "content": got.calls.iter().map(|c| json!({"type": "tool_result", "tool_use_id": c.0, "content": "listing"})).collect::<Vec<_>>()})
        });
    } else {
        let mut m = json!({"role": "assistant", "content": got.text});
        if !got.calls.is_empty() {
            m["tool_calls"] = got.calls.iter().map(|(id, name, args, _)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}})).collect();
        }
        list.push(m);
        if got.calls.is_empty() {
            list.push(json!({"role": "user", "content": "thanks"}));
        }
        for c in &got.calls {
            list.push(json!({"role": "tool", "tool_call_id": c.0, "content": "listing"}));
        }
    }
    body
}

impl Harness {
    async fn send(&self, api: Api, body: &Value) -> Seen2Client {
        let r = reqwest::Client::new()
            .post(format!("{}{}", self.proxy, path(api)))
            .header("x-ctxgc-session", "agent-test")
            .json(body)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.status());
        let raw = r.text().await.unwrap();
        client_view(api, body["stream"] == true, &raw)
    }

    fn upstream_requests(&self) -> Vec<Value> {
        self.seen
            .all()
            .iter()
            .map(|r| serde_json::from_slice(&r.body).unwrap())
            .collect()
    }
}

fn build_log() -> String {
    let mut log: String = (0..3000)
        .map(|i| format!("[{i:05}] compiling module_{i} ... ok\n"))
        .collect();
    log.insert_str(
        log.len() / 2,
        "error[E0308]: mismatched types in module_1500\n",
    );
    log
}

const MODES: [(Api, bool); 6] = [
    (Api::ChatCompletions, false),
    (Api::ChatCompletions, true),
    (Api::Messages, false),
    (Api::Messages, true),
    (Api::Responses, false),
    (Api::Responses, true),
];
