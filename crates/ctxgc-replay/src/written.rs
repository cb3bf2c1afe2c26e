//! Why a policy's replayed requests wrote to the cache: the rules [`crate::causes`] applies
//! to the writes a client log recorded, applied to the writes a run simulated, with the
//! lifetime each request asked for (the client's or the policy's) and the policy's events.

use ctxgc_core::Transcript;

use crate::cache::anthropic::{TTL_1H_MS, TTL_MS};
use crate::run::SessionRun;

/// Names of the causes of a policy's simulated writes, in table order: the recorded ones, and
/// the policy's own events.
pub const RUN_CAUSES: &[&str] = &[
    "growth",
    "TTL expiry",
    "client compaction",
    "policy event",
    "prefix change",
    "cold start",
];

/// The tokens a policy's run wrote to the cache model `cache`, by cause ([`RUN_CAUSES`]):
/// the same rules as [`crate::causes::classify`] applies to recorded writes, on the simulated ones, with the
/// lifetime each request asked for (the client's or the policy's) and the policy's events.
pub fn classify_run(t: &Transcript, run: &SessionRun, cache: &str) -> [u64; RUN_CAUSES.len()] {
    let mut out = [0u64; RUN_CAUSES.len()];
    let at = |name: &str| RUN_CAUSES.iter().position(|c| *c == name).unwrap_or(0);
    // The latest request that used the cache: its prompt, its time and lifetime, its index.
    let mut previous: Option<(u64, Option<i64>, bool, usize)> = None;
    for r in run.requests.iter().filter(|r| !r.summarizer) {
        let Some(served) = r.served.get(cache) else {
            continue;
        };
        let written = served.written as u64;
        if written > 0 {
            let cause = match previous {
                None => "cold start",
                Some((prev_prompt, prev_ms, prev_long, prev_index)) => {
                    let slack = 256 + prev_prompt / 20;
                    let ttl = if prev_long { TTL_1H_MS } else { TTL_MS };
                    let idle = r.sent_ms.zip(prev_ms).map(|(now, then)| now - then);
                    // As for recorded writes: growth, then the client's compaction, then a
                    // pause past the lifetime. An event the policy ran after such a pause
                    // (ctxgc's cold prune) rewrote what had expired anyway: its write is the
                    // expiry's, so the expiry's share is not flattered by the event's.
                    if served.cached as u64 + slack >= prev_prompt {
                        "growth"
                    } else if t.recording.as_ref().is_some_and(|rec| {
                        rec.compactions
                            .iter()
                            .any(|c| c.at > prev_index && c.at <= r.source_index)
                    }) {
                        "client compaction"
                    } else if idle.is_some_and(|ms| ms > ttl) {
                        "TTL expiry"
                    } else if r.event.is_some() {
                        "policy event"
                    } else {
                        "prefix change"
                    }
                }
            };
            out[at(cause)] += written;
        }
        previous = Some((r.tokens as u64, r.sent_ms, r.long_ttl, r.source_index));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Served;

    /// Three requests of 10,000 tokens: the second after a pause past five minutes, with the
    /// policy's event; the third a minute later, with another event that rewrote from the
    /// middle. The first event's write is the expiry's, the second's the event's own.
    #[test]
    fn an_event_after_an_expiry_is_counted_as_the_expiry() {
        let mut run = SessionRun::for_test("p", true, vec![((0, 0), Vec::new()); 3]);
        let minute = 60_000;
        let served = [(0, 10_000), (0, 10_000), (5_000, 5_000)];
        for (i, r) in run.requests.iter_mut().enumerate() {
            r.tokens = 10_000;
            r.sent_ms = Some([0, 10 * minute, 11 * minute][i]);
            r.event = (i > 0).then(|| "prune".to_owned());
            let (cached, written) = served[i];
            r.served.insert(
                "anthropic",
                Served {
                    cached,
                    written,
                    written_long: 0,
                    uncached: 0,
                },
            );
        }
        let by_cause = classify_run(&Transcript::default(), &run, "anthropic");
        let of = |name: &str| by_cause[RUN_CAUSES.iter().position(|c| *c == name).unwrap()];
        assert_eq!(of("cold start"), 10_000);
        assert_eq!(of("TTL expiry"), 10_000);
        assert_eq!(of("policy event"), 5_000);
    }
}
