//! Where the proxy's time goes for one request body: parse, rewrite, serialize.
//! `cargo run --release -p ctxgc-proxy --example rewrite_cost -- body.json`

use std::time::Instant;

use ctxgc_formats::{Api, ApiRequest};
use ctxgc_proxy::rewrite::{RewriteSettings, TrimMemo, rewrite_with, session_id};

fn main() {
    let path = std::env::args().nth(1).expect("a request body file");
    let bytes = std::fs::read(path).unwrap();
    let settings = RewriteSettings {
        trim: Default::default(),
        window: 200_000,
        cache_breakpoints: true,
        prompt_cache_key: true,
        engine: None,
        inject_tools: false,
    };
    let mut memo = TrimMemo::default();
    let runs = 200;
    let (mut parse, mut session, mut rewrite, mut serialize) = (0.0, 0.0, 0.0, 0.0);
    for _ in 0..runs {
        let t = Instant::now();
        let mut request = ApiRequest::parse(Api::ChatCompletions, &bytes).unwrap();
        parse += t.elapsed().as_secs_f64();
        let t = Instant::now();
        let id = session_id(&request, None);
        session += t.elapsed().as_secs_f64();
        let t = Instant::now();
        let out = rewrite_with(&mut request, &id, &settings, &mut memo);
        rewrite += t.elapsed().as_secs_f64();
        let t = Instant::now();
        let _ = request.to_bytes();
        serialize += t.elapsed().as_secs_f64();
        assert!(out.body.is_some());
    }
    let ms = |s: f64| s * 1000.0 / runs as f64;
    println!(
        "{} bytes: parse {:.3} ms, session id {:.3} ms, rewrite {:.3} ms (of which serialize inside), serialize {:.3} ms",
        bytes.len(),
        ms(parse),
        ms(session),
        ms(rewrite),
        ms(serialize)
    );
}
