//! Writes a Chat Completions request of about N o200k tokens shaped like an agent session:
//! system prompt, task, then turns of a tool call and its output, one output in ten large
//! enough to be trimmed. `cargo run --release -p ctxgc-proxy --example gen_request -- 100000`

// A measuring tool, not library code: a failure here should stop it loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;

fn main() {
    let target: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let messages = ctxgc_test_support::sessions::agent_messages(target);
    let body = json!({"model": "gpt-5", "prompt_cache_key": "bench-session", "messages": messages})
        .to_string();
    // `gen_request N stream`: a streamed request, its flag written last, where fake_upstream
    // looks for it (a JSON map would sort it into the middle).
    if std::env::args().nth(2).as_deref() == Some("stream") {
        let open = &body[..body.len() - 1];
        println!("{open},\"stream_options\":{{\"include_usage\":true}},\"stream\":true}}");
        return;
    }
    println!("{body}");
}
