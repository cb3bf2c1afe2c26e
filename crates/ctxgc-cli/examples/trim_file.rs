//! Times the library's `trim_output` on one file (best of N runs), for comparing with the
//! Python binding (`bindings/python/bench.py` runs this on the same file).
//!
//! `cargo run --release -p ctxgc-cli --example trim_file -- FILE [TOOL] [WINDOW] [RUNS]`

use std::time::Instant;

use anyhow::{Context, Result};
use ctxgc_core::trim::{TrimConfig, trim_output};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = args
        .first()
        .context("usage: trim_file FILE [TOOL] [WINDOW] [RUNS]")?;
    let tool = args.get(1).map_or("bash", String::as_str);
    let window: u64 = args.get(2).map_or(Ok(200_000), |w| w.parse())?;
    let runs: usize = args.get(3).map_or(Ok(20), |r| r.parse())?;
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {path}"))?;
    let config = TrimConfig::default();
    let mut best = f64::MAX;
    let mut bytes = 0;
    for _ in 0..runs {
        let started = Instant::now();
        let out = trim_output(&config, tool, window, &text);
        best = best.min(started.elapsed().as_secs_f64());
        bytes = out.text.len();
    }
    println!(
        "{{\"bytes\": {}, \"best_s\": {best:.6}, \"mb_per_s\": {:.1}, \"out_bytes\": {bytes}}}",
        text.len(),
        text.len() as f64 / best / 1e6
    );
    Ok(())
}
