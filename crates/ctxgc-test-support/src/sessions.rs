//! Synthetic agent sessions for benchmarks: the shape of a coding agent's Chat Completions
//! history, deterministic, at a chosen size.

use serde_json::{Value, json};

/// The messages of a session of about `tokens` o200k tokens: a system prompt, the task, then
/// turns of a `bash` tool call and its output (60 lines of test results; one output in ten
/// 4,000 lines, large enough to be trimmed).
pub fn agent_messages(tokens: usize) -> Vec<Value> {
    let mut messages = vec![
        json!({"role": "system", "content": "You are a coding agent. Use the tools to inspect and change the repository."}),
        json!({"role": "user", "content": "The build fails on CI; find out why and fix it."}),
    ];
    let (mut counted, mut turn) = (60, 0);
    while counted < tokens {
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
        counted += output.len() / 4 + 30;
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": output}));
        turn += 1;
    }
    messages
}
