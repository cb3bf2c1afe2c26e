//! The request path's insertion rewrite at 100K tokens, the size the proxy's latency target is
//! set at: a Codex-shaped Chat Completions body of 395 KB (800 items, every command's
//! output in Codex's JSON envelope, one in 80 long enough to trim), with the memo of trimmed
//! turns warm, as on every request after a session's first. Run with
//! `cargo bench -p ctxgc-proxy --bench rewrite`.

// A measuring tool, not library code: a failure here should stop it loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ctxgc_formats::{Api, ApiRequest};
use ctxgc_proxy::RewriteSettings;
use ctxgc_proxy::rewrite::request::{ClientBytes, TrimMemo, rewrite_with, rewrite_within};
use ctxgc_proxy::wire::splice_json;
use divan::{Bencher, black_box};
use serde_json::json;

fn main() {
    divan::main();
}

/// A command's output of about `lines` lines, in Codex's envelope.
fn output(turn: usize, lines: usize) -> String {
    let text: String = (0..lines)
        .map(|l| format!("src/module_{turn}.rs:{l}: let value_{l} = compute(\"{turn}\", {l});\n"))
        .collect();
    json!({"output": text, "metadata": {"exit_code": 0, "duration_seconds": 0.1}}).to_string()
}

/// A Chat Completions body of `turns` calls and their outputs (about 100K tokens at 400).
fn body(turns: usize) -> Vec<u8> {
    let mut messages = vec![json!({"role": "user", "content": "Fix the failing test."})];
    for turn in 0..turns {
        let id = format!("call_{turn}");
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": id, "type": "function",
            "function": {"name": "exec_command", "arguments": format!("{{\"cmd\":\"rg -n value_{turn}\"}}")}
        }]}));
        let lines = if turn % TRIMMED_EVERY == 0 { 400 } else { 6 };
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": output(turn, lines)}));
    }
    serde_json::to_vec(&json!({"model": "gpt-5-codex", "messages": messages})).unwrap()
}

/// One output in this many is long enough to trim (30 KB).
const TRIMMED_EVERY: usize = 80;

#[divan::bench(args = [400])]
fn rewrite_warm(bencher: Bencher, turns: usize) {
    let raw = body(turns);
    let parsed = ApiRequest::parse_envelope(Api::ChatCompletions, &raw).unwrap();
    let settings = RewriteSettings::trimming_at(272_000);
    let memo = TrimMemo::default();
    // The session's earlier requests trimmed every turn but the newest.
    let warmed = rewrite_with(
        &mut parsed.clone(),
        Some(&raw),
        "s",
        &settings,
        &memo,
        &|_| false,
    );
    assert!(warmed.bytes_saved > 0, "the body must have outputs to trim");
    bencher
        .with_inputs(|| parsed.clone())
        .bench_local_values(|mut request| {
            black_box(rewrite_with(
                &mut request,
                Some(&raw),
                "s",
                &settings,
                &memo,
                &|_| true,
            ))
        });
}

/// [`rewrite_warm`] with where the body's items lie, as the proxy has it for a body its parse
/// laid out: the walk goes on from where the session's previous one ended (the same items
/// here, so no turn is walked again) and the splice goes straight to where the trimmed outputs
/// lay. [`rewrite_warm`], without them, walks every turn (each a memo hit) and scans for them.
#[divan::bench(args = [400])]
fn rewrite_warm_located(bencher: Bencher, turns: usize) {
    let raw = body(turns);
    let (parsed, layout) =
        ApiRequest::parse_envelope_after(Api::ChatCompletions, &raw, None).unwrap();
    let layout = layout.expect("a Chat body has its items laid out");
    let client = ClientBytes {
        raw: &raw,
        item_spans: Some(layout.item_spans()),
    };
    let settings = RewriteSettings::trimming_at(272_000);
    let memo = TrimMemo::default();
    let warm = |request: &mut ApiRequest| {
        rewrite_within(
            request,
            Some(client),
            "s",
            &settings,
            &memo,
            &|_| true,
            &[],
            None,
        )
        .unwrap()
    };
    assert!(warm(&mut parsed.clone()).bytes_saved > 0);
    bencher
        .with_inputs(|| parsed.clone())
        .bench_local_values(|mut request| black_box(warm(&mut request)));
}

/// The pointers of every fourth output of a body of `turns` (repeat pointers and trims over a
/// long session).
fn every_fourth_output(turns: usize) -> Vec<String> {
    (0..turns)
        .filter(|turn| turn % 4 == 0)
        .map(|turn| format!("/messages/{}/content", 2 + 2 * turn))
        .collect()
}

/// Each of `pointers` replaced by a short text.
fn cut_each(pointers: &[String]) -> Vec<(&str, &[u8])> {
    pointers
        .iter()
        .map(|p| (p.as_str(), &b"\"cut\""[..]))
        .collect()
}

/// A splice of every fourth output.
#[divan::bench(args = [400])]
fn splice_trimmed_outputs(bencher: Bencher, turns: usize) {
    let raw = body(turns);
    let pointers = every_fourth_output(turns);
    let encoded = cut_each(&pointers);
    bencher.bench_local(|| black_box(splice_json::splice(&raw, &encoded, None)).unwrap());
}

/// [`splice_trimmed_outputs`] with where the body's items lie.
#[divan::bench(args = [400])]
fn splice_trimmed_outputs_located(bencher: Bencher, turns: usize) {
    let raw = body(turns);
    let (_, layout) = ApiRequest::parse_envelope_after(Api::ChatCompletions, &raw, None).unwrap();
    let located = splice_json::Located {
        key: "messages",
        items: layout.as_ref().unwrap().item_spans(),
    };
    let pointers = every_fourth_output(turns);
    let encoded = cut_each(&pointers);
    bencher.bench_local(|| {
        black_box(splice_json::splice_located(
            &raw,
            Some(located),
            &encoded,
            None,
        ))
        .unwrap()
    });
}
