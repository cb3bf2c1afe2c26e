//! The SSE framer and the splicer over it: time must be linear in the stream's size, for one
//! huge event and for many small ones, however the stream is chunked. Run with
//! `cargo bench -p ctxgc-proxy --bench sse`; compare the throughput (bytes/s) across sizes.

// A measuring tool, not library code: a failure here should stop it loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ctxgc_formats::Api;
use ctxgc_proxy::agent::splice::Splicer;
use ctxgc_proxy::wire::sse::Framer;
use divan::{Bencher, black_box, counter::BytesCount};

fn main() {
    divan::main();
}

/// One Anthropic text delta of `bytes` bytes as an SSE event.
fn delta(text: &str) -> String {
    let data = serde_json::json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}});
    format!("event: content_block_delta\ndata: {data}\n\n")
}

/// `n` small deltas.
fn many_deltas(n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| delta(&format!("tok{i} ")))
        .collect::<String>()
        .into_bytes()
}

/// One event of about `bytes` bytes.
fn huge_event(bytes: usize) -> Vec<u8> {
    delta(&"x".repeat(bytes)).into_bytes()
}

/// Fed as the network would: 16 KiB chunks.
fn frame(stream: &[u8]) -> usize {
    let mut framer = Framer::new();
    let mut events = 0;
    for chunk in stream.chunks(16 * 1024) {
        framer.feed(chunk, |e| events += e.raw.len());
    }
    events
}

fn splice(stream: &[u8]) -> usize {
    let mut splicer = Splicer::new(Api::Messages);
    let mut out = 0;
    for chunk in stream.chunks(16 * 1024) {
        out += splicer.feed(chunk).len();
    }
    out + splicer.finish().0.len()
}

#[divan::bench(args = [10_000, 100_000])]
fn framer_small_deltas(bencher: Bencher, n: usize) {
    let stream = many_deltas(n);
    bencher
        .counter(BytesCount::new(stream.len()))
        .bench(|| frame(black_box(&stream)));
}

#[divan::bench(args = [500_000, 5_000_000])]
fn framer_one_huge_event(bencher: Bencher, bytes: usize) {
    let stream = huge_event(bytes);
    bencher
        .counter(BytesCount::new(stream.len()))
        .bench(|| frame(black_box(&stream)));
}

#[divan::bench(args = [10_000, 100_000])]
fn splicer_small_deltas(bencher: Bencher, n: usize) {
    let stream = many_deltas(n);
    bencher
        .counter(BytesCount::new(stream.len()))
        .bench(|| splice(black_box(&stream)));
}

#[divan::bench(args = [500_000, 5_000_000])]
fn splicer_one_huge_event(bencher: Bencher, bytes: usize) {
    let stream = huge_event(bytes);
    bencher
        .counter(BytesCount::new(stream.len()))
        .bench(|| splice(black_box(&stream)));
}

/// The usage tap on a JSON answer of `bytes` bytes arriving in 2 KB chunks: read once, when
/// whole, so its cost is linear in the answer (it parsed the buffer on every chunk).
#[divan::bench(args = [400_000, 4_000_000])]
fn json_tap_2kb_chunks(bencher: Bencher, bytes: usize) {
    let body = serde_json::json!({
        "id": "chatcmpl-1",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "x".repeat(bytes)}}],
        "usage": {"prompt_tokens": 2000, "completion_tokens": 5}
    })
    .to_string()
    .into_bytes();
    bencher.counter(BytesCount::new(body.len())).bench(|| {
        let mut tap = ctxgc_proxy::upstream::tap::Tap::new(
            Api::ChatCompletions,
            ctxgc_core::store::SessionId::new("s"),
            false,
        );
        for chunk in black_box(&body).chunks(2 * 1024) {
            tap.feed(chunk);
        }
        tap.finished_usage().is_some()
    });
}
