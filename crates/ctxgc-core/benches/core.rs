//! Benchmarks of the hot paths: token counting, incremental counting of a long conversation,
//! and insertion-time trimming. Run with `cargo bench -p ctxgc-core`.

// A measuring tool, not library code: a failure here should stop it loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ctxgc_core::tokens::{Encoding, TokenCounter};
use ctxgc_core::transcript::{Message, Role};
use ctxgc_core::trim::{TrimConfig, trim_output};
use divan::{Bencher, black_box, counter::BytesCount};

fn main() {
    divan::main();
}

/// Deterministic text shaped like agent traffic: code, build output and prose.
fn sample_text(bytes: usize) -> String {
    let pieces = [
        "fn parse_header(input: &[u8]) -> Result<Header, ParseError> {\n    let (name, rest) = split_once(input, b':')?;\n",
        "   Compiling serde_json v1.0.154\n   Compiling ctxgc-core v0.1.0 (/home/dev/ctxgc/crates/ctxgc-core)\n",
        "error[E0308]: mismatched types\n --> src/trim/lines.rs:212:17\n  |\n212 |     let x: u64 = total;\n",
        "The proxy rewrites only what the agent sends, so the provider's cache keeps serving the prefix.\n",
        "test trim::tests::output_is_valid_bounded_idempotent_and_deterministic ... ok\n",
        "{\"id\": 4812, \"path\": \"src/lib.rs\", \"matches\": [12, 48, 301], \"ok\": true}\n",
    ];
    let mut out = String::with_capacity(bytes + 200);
    let mut i = 0usize;
    while out.len() < bytes {
        out.push_str(pieces[i % pieces.len()]);
        out.push_str(&format!("// {i}\n"));
        i += 1;
    }
    out
}

#[divan::bench(args = [Encoding::O200kBase, Encoding::Cl100kBase])]
fn count_tokens(bencher: Bencher, encoding: Encoding) {
    let text = sample_text(1 << 20);
    encoding.count("warm up the vocabulary");
    bencher
        .counter(BytesCount::of_str(&text))
        .bench(|| encoding.count(black_box(&text)));
}

/// A conversation of about one million o200k tokens (2,000 messages of ~2 KB).
fn million_token_conversation() -> Vec<Message> {
    (0..2_000)
        .map(|i| {
            let role = if i % 2 == 0 {
                Role::Tool
            } else {
                Role::Assistant
            };
            let mut text = sample_text(2_100);
            text.push_str(&format!("message {i}\n"));
            Message::text(role, text)
        })
        .collect()
}

#[divan::bench(sample_count = 3, sample_size = 1)]
fn count_conversation_cold(bencher: Bencher) {
    let messages = million_token_conversation();
    let tokens = TokenCounter::openai().count_messages(&messages);
    assert!(tokens > 900_000, "{tokens}");
    bencher.bench(|| TokenCounter::openai().count_messages(black_box(&messages)));
}

#[divan::bench(sample_count = 20, sample_size = 1)]
fn count_conversation_after_one_new_message(bencher: Bencher) {
    let mut messages = million_token_conversation();
    bencher
        .with_inputs(|| {
            let mut counter = TokenCounter::openai();
            counter.count_messages(&messages[..messages.len() - 1]);
            counter
        })
        .bench_local_refs(|counter| {
            // The newest message is new to the counter; all others hit the cache.
            counter.count_messages(black_box(&messages))
        });
    messages.clear();
}

#[divan::bench(args = [50_000, 1_000_000])]
fn trim_terminal_output(bencher: Bencher, size: usize) {
    let config = TrimConfig::default();
    let text = sample_text(size);
    bencher
        .counter(BytesCount::of_str(&text))
        .bench(|| trim_output(&config, "bash", 32_000, black_box(&text)));
}

#[divan::bench]
fn trim_json_output(bencher: Bencher) {
    let config = TrimConfig::default();
    let rows: Vec<serde_json::Value> = (0..5_000)
        .map(|i| serde_json::json!({"id": i, "path": format!("src/file_{i}.rs"), "score": i as f64 / 7.0}))
        .collect();
    let text = serde_json::to_string(&rows).unwrap();
    bencher
        .counter(BytesCount::of_str(&text))
        .bench(|| trim_output(&config, "api", 32_000, black_box(&text)));
}

/// A coding session of about 100K o200k tokens: 100 turns, each a call reading a file and its
/// ~4 KB output, the assistant naming identifiers from earlier outputs.
fn hundred_k_token_session() -> Vec<Message> {
    use ctxgc_core::transcript::{Block, ToolCall};
    let mut messages = vec![
        Message::text(Role::System, "You are a coding agent."),
        Message::text(Role::User, "Fix the parser's header handling."),
    ];
    for turn in 0..100 {
        messages.push(Message {
            role: Role::Assistant,
            content: vec![
                Block::text(format!("Looking at parse_header_{} next.", turn / 2)),
                Block::ToolCall(ToolCall {
                    id: format!("call_{turn}"),
                    name: "Read".into(),
                    arguments: format!("{{\"file_path\": \"src/mod_{turn}.rs\"}}"),
                    implicit: false,
                }),
            ],
            usage: None,
        });
        let text = sample_text(4_000).replace("parse_header", &format!("parse_header_{turn}"));
        messages.push(Message::tool_result(
            format!("call_{turn}"),
            Some("Read".into()),
            text,
            false,
        ));
    }
    messages
}

/// What an event reads before deciding which old outputs to keep: every output's uses since it
/// entered (built once per early prune; a warm request without one never builds it).
#[divan::bench(sample_count = 20, sample_size = 1)]
fn relevance_index_100k_tokens(bencher: Bencher) {
    let messages = hundred_k_token_session();
    bencher.bench(|| ctxgc_core::engine::relevance::OutputIndex::new(black_box(&messages)));
}
