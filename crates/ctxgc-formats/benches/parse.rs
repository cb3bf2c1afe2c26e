//! Parsing a 100K-token request whole, and after the same session's previous request (two
//! items shorter): what `ctxgc serve` spends on an agent's next request before it rewrites it.
//! Run with `cargo bench -p ctxgc-formats --bench parse`.

// A measuring tool, not library code: a failure here should stop it loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ctxgc_formats::reparse::copy_reusing;
use ctxgc_formats::{Api, ApiRequest, Previous};
use divan::{Bencher, black_box};
use serde_json::json;

fn main() {
    divan::main();
}

/// A Chat Completions body of about `tokens` tokens shaped as `gen_request` shapes one
/// (`ctxgc_test_support::sessions`), without its last `fewer` items.
fn body(tokens: usize, fewer: usize) -> Vec<u8> {
    let mut messages = ctxgc_test_support::sessions::agent_messages(tokens);
    messages.truncate(messages.len() - fewer);
    serde_json::to_vec(&json!({"model": "gpt-5", "messages": messages})).unwrap()
}

#[divan::bench]
fn whole(bencher: Bencher) {
    let raw = body(100_000, 0);
    bencher.bench(|| ApiRequest::parse_envelope(Api::ChatCompletions, black_box(&raw)).unwrap());
}

#[divan::bench]
fn with_layout(bencher: Bencher) {
    let raw = body(100_000, 0);
    bencher.bench(|| {
        ApiRequest::parse_envelope_after(Api::ChatCompletions, black_box(&raw), None).unwrap()
    });
}

/// The session's previous request (two items shorter) parsed with its layout, and the next one.
struct Session {
    before: Vec<u8>,
    parsed: ApiRequest,
    layout: ctxgc_formats::Layout,
    next: Vec<u8>,
}

impl Session {
    fn new() -> Session {
        let (before, next) = (body(100_000, 2), body(100_000, 0));
        let (parsed, layout) =
            ApiRequest::parse_envelope_after(Api::ChatCompletions, &before, None).unwrap();
        Session {
            before,
            parsed,
            layout: layout.unwrap(),
            next,
        }
    }

    /// What the next request is parsed after.
    fn previous(&self) -> Previous<'_> {
        Previous {
            raw: &self.before,
            body: &self.parsed.body,
            layout: &self.layout,
            shared: None,
        }
    }
}

#[divan::bench]
fn after_the_previous_request(bencher: Bencher) {
    let session = Session::new();
    let previous = session.previous();
    bencher.bench(|| {
        ApiRequest::parse_envelope_after(
            Api::ChatCompletions,
            black_box(&session.next),
            Some(previous),
        )
        .unwrap()
    });
}

/// What the proxy keeps to parse the next request after: a copy of the request's document that
/// takes back the items it cloned from the previous one.
#[divan::bench]
fn copy_to_keep(bencher: Bencher) {
    let session = Session::new();
    let (request, layout) = ApiRequest::parse_envelope_after(
        Api::ChatCompletions,
        &session.next,
        Some(session.previous()),
    )
    .unwrap();
    let layout = layout.unwrap();
    bencher
        .with_inputs(|| session.parsed.body.clone())
        .bench_values(|kept| copy_reusing(black_box(&request.body), &layout, "messages", kept));
}

#[divan::bench]
fn clone_to_keep(bencher: Bencher) {
    let request = ApiRequest::parse_envelope(Api::ChatCompletions, &body(100_000, 0)).unwrap();
    bencher.bench(|| black_box(&request.body).clone());
}
