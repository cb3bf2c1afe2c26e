//! A fast local fake upstream for load tests: answers every request at once with a small
//! Chat Completions JSON body, or its SSE stream when the request asks for one. Every answer
//! says how many body bytes arrived (`x-received-bytes`); a request with
//! `x-fake-answer-bytes: N` gets an answer of about N bytes sent in 2 KB chunks, and one with
//! `x-fake-echo: 1` gets the body it sent back as the answer's text. `cargo run --release -p ctxgc-proxy --example fake_upstream -- 18080`

// A measuring tool, not library code: a failure here should stop it loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use axum::Router;
use axum::body::Body;
use axum::response::Response;

#[tokio::main]
async fn main() {
    let port: u16 = std::env::args()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(18080);
    let app = Router::new().fallback(|req: axum::extract::Request| async move {
        let echo = req.headers().contains_key("x-fake-echo");
        let answer_bytes: Option<usize> = req
            .headers()
            .get("x-fake-answer-bytes")
            .and_then(|v| v.to_str().ok()?.parse().ok());
        // Read the whole body, as a real upstream would, before answering.
        let body = axum::body::to_bytes(req.into_body(), usize::MAX)
            .await
            .unwrap_or_default();
        let received = body.len().to_string();
        if echo {
            let text = String::from_utf8_lossy(&body);
            let answer = serde_json::json!({"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]});
            return Response::builder()
                .header("content-type", "application/json")
                .header("x-received-bytes", received)
                .body(Body::from(answer.to_string()))
                .unwrap();
        }
        if let Some(n) = answer_bytes {
            let filler = "x".repeat(n.saturating_sub(200));
            let json = format!(
                r#"{{"id":"x","object":"chat.completion","choices":[{{"index":0,"message":{{"role":"assistant","content":"{filler}"}},"finish_reason":"stop"}}],"usage":{{"prompt_tokens":100,"completion_tokens":2}}}}"#
            )
            .into_bytes();
            let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
                json.chunks(2048).map(|c| Ok(c.to_vec())).collect();
            return Response::builder()
                .header("content-type", "application/json")
                .header("x-received-bytes", received)
                .body(Body::from_stream(futures_util::stream::iter(chunks)))
                .unwrap();
        }
        // The flag sits at the body's end (see gen_request): no need to parse 500 KB.
        let tail = &body[body.len().saturating_sub(64)..];
        if tail.windows(13).any(|w| w == br#""stream":true"#) {
            let usage = r#"{"prompt_tokens":100000,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":99968}}"#;
            let sse = format!(
                "data: {{\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":\"ok\"}}}}]}}\n\n\
                 data: {{\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\n\
                 data: {{\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{usage}}}\n\n\
                 data: [DONE]\n\n"
            );
            return Response::builder()
                .header("content-type", "text/event-stream")
                .header("x-received-bytes", received.clone())
                .body(Body::from(sse))
                .unwrap();
        }
        Response::builder()
            .header("content-type", "application/json")
            .header("x-received-bytes", received)
            .body(Body::from(r#"{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":100000,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":99968}}}"#))
            .unwrap()
    });
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    axum::serve(listener, app).await.unwrap();
}
