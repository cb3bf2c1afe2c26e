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
    let mut messages = vec![
        json!({"role": "system", "content": "You are a coding agent. Use the tools to inspect and change the repository."}),
        json!({"role": "user", "content": "The build fails on CI; find out why and fix it."}),
    ];
    let mut tokens = 60;
    let mut turn = 0;
    while tokens < target {
        let id = format!("call_{turn}");
        messages.push(json!({"role": "assistant", "content": format!("Step {turn}: running the next check."), "tool_calls": [{"id": id, "type": "function", "function": {"name": "bash", "arguments": format!("{{\"command\":\"cargo test -p crate_{turn}\"}}")}}]}));
        let lines = if turn % 10 == 9 { 4_000 } else { 60 };
        let output: String = (0..lines)
            .map(|i| {
                format!(
                    "test module_{turn}::case_{i} ... ok ({} ms)\n",
                    (i * 7 + turn) % 90
                )
            })
            .collect();
        tokens += output.len() / 4 + 30;
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": output}));
        turn += 1;
    }
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
