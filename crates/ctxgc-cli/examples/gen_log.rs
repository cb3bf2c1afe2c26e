//! Writes a deterministic, realistic build/test log of about N bytes to stdout, for the trim
//! benchmark: compiler and test lines, a warning every few hundred lines, a rare error.
//!
//! `cargo run --release -p ctxgc-cli --example gen_log -- 1000000000 > big.log`

// A measuring tool, not library code: a failure here should stop it loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{self, BufWriter, Write};

fn main() -> io::Result<()> {
    let target: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000_000);
    let mut out = BufWriter::with_capacity(1 << 20, io::stdout().lock());
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        // xorshift64*: deterministic, no dependency.
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    let mut written = 0u64;
    let mut line = 0u64;
    let mut buf = String::with_capacity(256);
    while written < target {
        line += 1;
        buf.clear();
        let r = next();
        match r % 1000 {
            0 => buf.push_str(&format!(
                "error[E0{:03}]: mismatched types in src/module_{}.rs:{}:{}\n",
                (r / 1000) % 1000,
                r % 97,
                r % 4000,
                r % 80
            )),
            1..=4 => buf.push_str(&format!(
                "warning: unused variable `tmp_{}` at src/lib_{}.rs:{}\n",
                r % 10_000,
                r % 53,
                r % 3000
            )),
            5..=400 => buf.push_str(&format!(
                "   Compiling crate-{} v{}.{}.{} (/home/dev/project/crates/crate-{})\n",
                r % 5000,
                r % 3,
                r % 40,
                r % 17,
                r % 5000
            )),
            _ => buf.push_str(&format!(
                "test tests::module_{}::case_{} ... ok ({} ms) [{:016x}]\n",
                r % 300,
                line,
                r % 900,
                r
            )),
        }
        out.write_all(buf.as_bytes())?;
        written += buf.len() as u64;
    }
    out.flush()
}
