//! Where the proxy's time goes for one request body: parse, rewrite, serialize.
//! `cargo run --release -p ctxgc-proxy --example rewrite_cost -- body.json [--cold]`
//! (`--cold`: one parse and one rewrite with an empty memo, as a history's first request).

// A measuring tool, not library code: a failure here should stop it loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use ctxgc_formats::{Api, ApiRequest};
use ctxgc_proxy::intake::identity::{self, Tenant};
use ctxgc_proxy::rewrite::request::{RewriteSettings, TrimMemo, rewrite_with};

fn main() {
    let path = std::env::args().nth(1).expect("a request body file");
    let bytes = std::fs::read(path).unwrap();
    let settings = RewriteSettings::trimming_at(200_000);
    let memo = TrimMemo::default();
    if std::env::args().any(|a| a == "--cold") {
        let t = Instant::now();
        let mut request = ApiRequest::parse(Api::ChatCompletions, &bytes).unwrap();
        let parse = t.elapsed();
        let t = Instant::now();
        rewrite_with(&mut request, Some(&bytes), "s", &settings, &memo, &|_| {
            false
        });
        println!(
            "{} bytes, cold: parse {:.1} ms, rewrite {:.1} ms",
            bytes.len(),
            parse.as_secs_f64() * 1e3,
            t.elapsed().as_secs_f64() * 1e3
        );
        return;
    }
    // Trimming happens once per distinct turn; the timed runs see a warm memo, as a proxy does
    // for every request after a turn's first.
    let mut warm = ApiRequest::parse(Api::ChatCompletions, &bytes).unwrap();
    rewrite_with(&mut warm, None, "s", &settings, &memo, &|_| true);
    let runs = 200;
    let (mut parse, mut session, mut rewrite, mut serialize) = (0.0, 0.0, 0.0, 0.0);
    for _ in 0..runs {
        let t = Instant::now();
        let mut request = ApiRequest::parse(Api::ChatCompletions, &bytes).unwrap();
        parse += t.elapsed().as_secs_f64();
        let t = Instant::now();
        let id = identity::session(&Tenant::anonymous(), &request, &Default::default()).to_string();
        session += t.elapsed().as_secs_f64();
        let t = Instant::now();
        let out = rewrite_with(&mut request, Some(&bytes), &id, &settings, &memo, &|_| true);
        rewrite += t.elapsed().as_secs_f64();
        let t = Instant::now();
        let _ = request.to_bytes();
        serialize += t.elapsed().as_secs_f64();
        assert!(out.body.is_some());
    }
    // The same rewrite serialising the parsed body instead of splicing the client's bytes.
    let mut reserialize = 0.0;
    for _ in 0..runs {
        let mut request = ApiRequest::parse(Api::ChatCompletions, &bytes).unwrap();
        let t = Instant::now();
        let out = rewrite_with(&mut request, None, "s", &settings, &memo, &|_| true);
        reserialize += t.elapsed().as_secs_f64();
        assert!(out.body.is_some());
    }
    let ms = |s: f64| s * 1000.0 / runs as f64;
    println!(
        "rewrite without splicing (whole body serialised): {:.3} ms",
        ms(reserialize)
    );
    println!(
        "{} bytes: parse {:.3} ms, session id {:.3} ms, rewrite (spliced) {:.3} ms, serialising the parsed body {:.3} ms",
        bytes.len(),
        ms(parse),
        ms(session),
        ms(rewrite),
        ms(serialize)
    );
}
