//! Soak test of `ctxgc serve`'s memory: drives SESSIONS sessions of TURNS turns with large tool
//! outputs through a running proxy and samples the proxy's resident memory. Sessions run in
//! ACTIVE slots, each slot one session after another, the slots staggered so that at every
//! round the active sessions are spread evenly over their turns: the load is steady (as a
//! team's is), so after warm-up any growth is a leak or an unbounded cache, not a bigger load.
//! Sessions are round-robin within a round, so no cache can keep them all.
//!
//! `soak PROXY_URL PID [SESSIONS] [TURNS] [OUTPUT_BYTES] [ACTIVE] [CONCURRENCY] [MAX_PEAK_MB]`
//! Prints the resident memory as it goes and exits 1 when a request fails, the peak passes
//! MAX_PEAK_MB or memory still grows after warm-up. Run by `scripts/soak.sh`.

// A measuring tool, not library code: a failure here should stop it loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

fn arg<T: std::str::FromStr>(n: usize, default: T) -> T {
    std::env::args()
        .nth(n)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

/// (resident, peak resident) of a process, in KiB.
fn memory_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the proxy runs");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// A tool output of about `bytes`: a timestamped build log, distinct per session and turn, with
/// an error line in the middle and an exit status at the end.
fn output(session: usize, turn: usize, bytes: usize) -> String {
    let mut text = String::with_capacity(bytes + 128);
    let mut line = 0usize;
    while text.len() < bytes {
        if line == 300 {
            let _ = writeln!(
                text,
                "2026-11-24T10:{:02}:{:02}Z ERROR session {session} turn {turn}: assertion failed",
                line / 60 % 60,
                line % 60
            );
        }
        let _ = writeln!(
            text,
            "2026-11-24T10:{:02}:{:02}Z INFO worker-{} compiled unit {} of session {session} turn {turn} in {} ms",
            line / 60 % 60,
            line % 60,
            line % 7,
            line,
            (line * 37 + session * 11 + turn) % 997
        );
        line += 1;
    }
    let _ = writeln!(text, "exit status: {}", turn % 3);
    text
}

/// A session's history as its client resends it: the messages so far, serialized once each
/// (a session's turns go out in order, one request at a time), so a request costs one new
/// output's formatting rather than its whole history's. That keeps the load generator cheap in
/// a dev build, the one `cargo test` already made (scripts/soak.sh).
#[derive(Default)]
struct History {
    /// The serialized messages, comma-separated, without the enclosing array.
    messages: String,
    /// The turns serialized so far.
    turns: usize,
}

impl History {
    fn push(&mut self, message: serde_json::Value) {
        if !self.messages.is_empty() {
            self.messages.push(',');
        }
        self.messages.push_str(&message.to_string());
    }

    /// The Chat Completions body a client sends at `turn`: the whole history, as clients resend
    /// it (the bytes `serde_json` gives the whole body, keys in the order written).
    fn body(&mut self, session: usize, turn: usize, bytes: usize) -> Vec<u8> {
        if self.messages.is_empty() {
            self.push(serde_json::json!({"role": "system", "content": "You are a coding agent. Run commands to fix the build."}));
            self.push(serde_json::json!({"role": "user", "content": format!("Session {session}: make the build pass.")}));
        }
        while self.turns <= turn {
            let t = self.turns;
            let id = format!("call_{session}_{t}");
            self.push(serde_json::json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": id, "type": "function", "function": {"name": "bash", "arguments": format!("{{\"command\":\"make -j8 unit-{t}\"}}")}}
            ]}));
            self.push(
                serde_json::json!({"role": "tool", "tool_call_id": id, "content": output(session, t, bytes)}),
            );
            self.turns += 1;
        }
        let mut body = String::with_capacity(self.messages.len() + 40);
        body.push_str("{\"model\":\"gpt-5\",\"messages\":[");
        body.push_str(&self.messages);
        body.push_str("]}");
        body.into_bytes()
    }
}

#[tokio::main]
async fn main() {
    let proxy: String = arg(1, "http://127.0.0.1:18787".to_owned());
    let pid: u32 = arg(2, 0);
    let sessions: usize = arg(3, 1_000);
    let turns: usize = arg(4, 40);
    let bytes: usize = arg(5, 50_000);
    let active: usize = arg(6, 200);
    let concurrency: usize = arg(7, 8);
    let max_peak_mb: u64 = arg(8, 136);
    assert!(
        pid > 0 && sessions > 0 && turns > 0 && active > 0,
        "usage: soak PROXY_URL PID [SESSIONS] [TURNS] [OUTPUT_BYTES] [ACTIVE] [CONCURRENCY] [MAX_PEAK_MB]"
    );
    ctxgc_summarize::install_crypto();
    let client = reqwest::Client::new();
    let url = format!("{proxy}/v1/chat/completions");
    // The requests of every round: (session, turn). Slot k runs sessions k, k + active, ...; its
    // first session starts at turn k % turns (its history already that long), so the turns in
    // flight are spread evenly from the first round on.
    let mut rounds: Vec<Vec<(usize, usize)>> = Vec::new();
    for slot in 0..active.min(sessions) {
        let mut round = 0;
        let mut first = true;
        for session in (slot..sessions).step_by(active) {
            let start = if first { slot % turns } else { 0 };
            first = false;
            for turn in start..turns {
                if rounds.len() <= round {
                    rounds.push(Vec::new());
                }
                rounds[round].push((session, turn));
                round += 1;
            }
        }
    }
    let total: usize = rounds.iter().map(Vec::len).sum();
    let failed = Arc::new(AtomicU64::new(0));
    let sent_bytes = Arc::new(AtomicU64::new(0));
    let histories: Arc<Mutex<HashMap<usize, History>>> = Arc::default();
    let started = Instant::now();
    let mut samples = Vec::new();
    let mut done = 0usize;
    println!("round  resident MB  peak MB  requests  elapsed");
    let every = (rounds.len() / 20).max(1);
    for (r, round) in rounds.iter().enumerate() {
        let work = Arc::new(round.clone());
        let next = Arc::new(AtomicU64::new(0));
        let mut workers = Vec::new();
        for _ in 0..concurrency {
            let (client, url, next, work) =
                (client.clone(), url.clone(), next.clone(), work.clone());
            let (failed, sent_bytes, histories) =
                (failed.clone(), sent_bytes.clone(), histories.clone());
            workers.push(tokio::spawn(async move {
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed) as usize;
                    let Some(&(session, turn)) = work.get(k) else {
                        break;
                    };
                    // Each session is in one slot, so at most one request of it is in flight.
                    let mut history = histories
                        .lock()
                        .unwrap()
                        .remove(&session)
                        .unwrap_or_default();
                    let (body, history) = tokio::task::spawn_blocking(move || {
                        (history.body(session, turn, bytes), history)
                    })
                    .await
                    .unwrap();
                    if turn + 1 < turns {
                        histories.lock().unwrap().insert(session, history);
                    }
                    sent_bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
                    let sent = client
                        .post(&url)
                        .header("content-type", "application/json")
                        // Each session its own caller, as on a shared proxy.
                        .header("authorization", format!("Bearer sk-soak-{session}"))
                        .body(body)
                        .send()
                        .await;
                    let why = match sent {
                        Ok(r) if r.status().is_success() => None,
                        Ok(r) => {
                            let status = r.status();
                            let text = r.text().await.unwrap_or_default();
                            Some(format!(
                                "{status}: {}",
                                text.chars().take(300).collect::<String>()
                            ))
                        }
                        Err(e) => Some(format!("{e:?}")),
                    };
                    if let Some(why) = why {
                        // The first few failures are printed: a count alone does not say why.
                        if failed.fetch_add(1, Ordering::Relaxed) < 3 {
                            eprintln!("session {session} turn {turn} failed: {why}");
                        }
                    }
                }
            }));
        }
        for w in workers {
            w.await.unwrap();
        }
        done += round.len();
        let (rss, peak) = memory_kib(pid);
        samples.push(rss);
        if (r + 1) % every == 0 || r + 1 == rounds.len() {
            println!(
                "{:>5}  {:>11.1}  {:>7.1}  {:>8}  {:>6.0}s",
                r + 1,
                rss as f64 / 1024.0,
                peak as f64 / 1024.0,
                done,
                started.elapsed().as_secs_f64()
            );
        }
    }
    let (_, peak) = memory_kib(pid);
    let failed = failed.load(Ordering::Relaxed);
    let gb = sent_bytes.load(Ordering::Relaxed) as f64 / 1e9;
    // Flat after warm-up: the median resident memory of the last quarter of the steady rounds
    // is within 10% (or 8 MB) of the third quarter's. The first half is warm-up (the memos, the
    // SQLite page caches and the allocator's arenas fill: a few MB over the first 18,000
    // requests). Medians, because a sample taken while large bodies are in flight is a spike,
    // not growth; the peak is bounded on its own. The last rounds, where slots run out of
    // sessions, are not steady and not judged.
    let steady = rounds
        .iter()
        .take_while(|r| r.len() == active.min(sessions))
        .count()
        .max(4);
    let quarter = steady / 4;
    let median = |from: usize, to: usize| {
        let mut window = samples[from..to].to_vec();
        window.sort_unstable();
        window.get(window.len() / 2).copied().unwrap_or(0)
    };
    let warm = median(2 * quarter, 3 * quarter);
    let late = median(steady - quarter, steady);
    let flat = late as f64 <= (warm as f64 * 1.10).max(warm as f64 + 8.0 * 1024.0);
    println!(
        "{sessions} sessions x {turns} turns ({active} at once), {} KB outputs: {total} requests ({gb:.1} GB sent) in {:.0} s, {failed} failed; peak resident {:.1} MB (limit {max_peak_mb} MB); median after warm-up {:.1} -> {:.1} MB ({})",
        bytes / 1000,
        started.elapsed().as_secs_f64(),
        peak as f64 / 1024.0,
        warm as f64 / 1024.0,
        late as f64 / 1024.0,
        if flat { "flat" } else { "GROWING" }
    );
    if failed > 0 || peak > max_peak_mb * 1024 || !flat {
        std::process::exit(1);
    }
}
