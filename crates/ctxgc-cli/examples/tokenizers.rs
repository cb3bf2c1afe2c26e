//! tiktoken-rs against bpe-openai (what ctxgc counts with), on every text of the given
//! transcripts (messages, tool calls' arguments, tool results): are the counts identical, and
//! which is faster? Prints one line per encoding.
//!
//! `cargo run --release -p ctxgc-cli --example tokenizers -- ../shared/data/transcripts ../shared/data/client-logs`

// A measuring tool, not library code: a failure here should stop it loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use ctxgc_core::transcript::Block;

fn main() {
    let paths: Vec<PathBuf> = std::env::args().skip(1).map(PathBuf::from).collect();
    assert!(!paths.is_empty(), "usage: tokenizers FILE_OR_DIR...");
    let mut texts: Vec<String> = Vec::new();
    for imported in ctxgc_formats::import::import_paths(&paths)
        .into_iter()
        .flatten()
    {
        for m in &imported.transcript.messages {
            for block in &m.content {
                match block {
                    Block::ToolCall(call) => texts.push(call.arguments.to_string()),
                    Block::ToolResult(r) => texts.push(r.text()),
                    _ => {}
                }
            }
            texts.push(m.text_content());
        }
    }
    texts.retain(|t| !t.is_empty());
    let bytes: usize = texts.iter().map(String::len).sum();
    println!("{} texts, {:.1} MB", texts.len(), bytes as f64 / 1e6);
    for (name, tiktoken, theirs) in [
        (
            "o200k",
            tiktoken_rs::o200k_base().unwrap(),
            bpe_openai::o200k_base(),
        ),
        (
            "cl100k",
            tiktoken_rs::cl100k_base().unwrap(),
            bpe_openai::cl100k_base(),
        ),
    ] {
        let ours = |text: &str| tiktoken.encode_ordinary(text).len();
        // Warm both (vocabularies load lazily).
        ours("warm");
        theirs.count("warm");
        let best = |f: &dyn Fn() -> usize| -> (usize, Duration) {
            let mut out = (0, Duration::MAX);
            for _ in 0..3 {
                let started = Instant::now();
                let total = f();
                out = (total, out.1.min(started.elapsed()));
            }
            out
        };
        let (tik_total, tik_time) = best(&|| texts.iter().map(|t| ours(t)).sum());
        let (bpe_total, bpe_time) = best(&|| texts.iter().map(|t| theirs.count(t)).sum());
        let differing = texts.iter().filter(|t| ours(t) != theirs.count(t)).count();
        let mbs = |d: Duration| bytes as f64 / 1e6 / d.as_secs_f64();
        println!(
            "{name}: tiktoken-rs {tik_total} tokens in {:.2} s ({:.1} MB/s); bpe-openai {bpe_total} tokens in {:.2} s ({:.1} MB/s); {:.2}x faster; {differing} of {} texts counted differently",
            tik_time.as_secs_f64(),
            mbs(tik_time),
            bpe_time.as_secs_f64(),
            mbs(bpe_time),
            tik_time.as_secs_f64() / bpe_time.as_secs_f64(),
            texts.len(),
        );
    }
}
