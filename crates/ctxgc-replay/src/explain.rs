//! Per-request cache forensics (`ctxgc replay --explain-cache`): for one session, each
//! request's recorded and simulated reads and writes, and the cause of every difference.

use ctxgc_core::{Role, Transcript};
use serde::Serialize;

use crate::cache::{CacheRules, Served};
use crate::causes::{CacheWrite, WriteCause};
use crate::report::recorded_served;
use crate::run::SessionRun;

/// One request, recorded against simulated.
#[derive(Debug, Clone, Serialize)]
pub struct ExplainedRequest {
    /// Index of the assistant message the request produced.
    pub message: usize,
    /// Milliseconds since the previous request, where the log says.
    pub idle_ms: Option<i64>,
    /// Prompt tokens: recorded, simulated.
    pub prompt: (u64, u64),
    /// As billed.
    pub recorded: Served,
    /// As the lab served it.
    pub simulated: Served,
    /// The kind of cause, for sums (`match` when they do not differ, beyond the replay's
    /// counting slack).
    pub kind: &'static str,
    /// Why they differ, in words.
    pub cause: String,
}

/// Each request of `run` (the `none` replay of `t` under a cache of `rules`, named `cache`)
/// with recorded usage, explained with the recorded writes' causes (`writes`, for client logs).
pub fn explain(
    t: &Transcript,
    run: &SessionRun,
    cache: &str,
    rules: &CacheRules,
    writes: &[CacheWrite],
) -> Vec<ExplainedRequest> {
    let sent = |i: usize| t.recording.as_ref().and_then(|r| r.sent_at(i));
    let mut previous: Option<usize> = None;
    let mut out = Vec::new();
    for r in run.requests.iter().filter(|r| r.is_agent()) {
        let m = &t.messages[r.source_index];
        let Some(usage) = m.usage.filter(|_| m.role == Role::Assistant) else {
            continue;
        };
        let Some(&simulated) = r.served.get(cache) else {
            continue;
        };
        let recorded = recorded_served(&usage);
        let idle_ms = previous.and_then(|p| Some(sent(r.source_index)? - sent(p)?));
        let write = writes.iter().find(|w| w.request == r.source_index);
        let (kind, cause) = cause(
            usage.prompt_tokens as usize,
            &recorded,
            &simulated,
            idle_ms,
            rules,
            write.map(|w| &w.cause),
        );
        out.push(ExplainedRequest {
            message: r.source_index,
            idle_ms,
            prompt: (usage.prompt_tokens, r.tokens as u64),
            recorded,
            simulated,
            kind,
            cause,
        });
        previous = Some(r.source_index);
    }
    out
}

/// Why a request's recorded reads differ from the simulated ones.
fn cause(
    prompt: usize,
    recorded: &Served,
    simulated: &Served,
    idle_ms: Option<i64>,
    rules: &CacheRules,
    write: Option<&WriteCause>,
) -> (&'static str, String) {
    let slack = 256 + prompt / 20;
    let (rec, sim) = (recorded.cached, simulated.cached);
    if rec.abs_diff(sim) <= slack {
        return ("match", "match".into());
    }
    let minutes = |ms: i64| format!("{:.1} min", ms as f64 / 60_000.0);
    if rec < sim {
        // The provider served less than the lab: the client's own cause where the log says.
        match write {
            Some(WriteCause::TtlExpiry { idle_ms }) => {
                let why = format!(
                    "TTL expiry (idle {}): the lab's entry lived",
                    minutes(*idle_ms)
                );
                return ("TTL expiry", why);
            }
            Some(WriteCause::ClientCompaction) => {
                return ("client compaction", "client compaction".into());
            }
            Some(WriteCause::PrefixChange { message, role }) => {
                let why = match (message, role) {
                    (Some(i), Some(role)) => {
                        format!("the client changed its prompt at message {i} ({role})")
                    }
                    _ => "the client changed its system prompt or tools".into(),
                };
                return ("client prompt change", why);
            }
            _ => {}
        }
        let expired = idle_ms.is_some_and(|ms| rules.ttl_ms.is_some_and(|ttl| ms > ttl));
        if expired {
            let why = format!(
                "expired (idle {}), served in expectation by the lab",
                minutes(idle_ms.unwrap_or(0))
            );
            return ("expired", why);
        }
        if rec == 0 {
            let why = format!(
                "routing miss: nothing read, no pause (the lab takes {:.1}% of such misses in expectation)",
                rules.routing_miss * 100.0
            );
            return ("routing miss", why);
        }
        let why = format!(
            "the hit fell {} tokens short of the lab's (lag {} in expectation)",
            sim - rec,
            rules.lag_tokens
        );
        return ("short hit", why);
    }
    if sim == 0 && idle_ms.is_some_and(|ms| rules.ttl_ms.is_some_and(|ttl| ms > ttl)) {
        let why = format!(
            "read after {} idle: the provider kept the prefix longer than its documented lifetime, or the client's other sessions kept it warm",
            minutes(idle_ms.unwrap_or(0))
        );
        return ("kept past its lifetime", why);
    }
    (
        "provider read more",
        "the provider read more: the lab's request differs before its end (counting, or content the log does not hold)".into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::CacheKind;

    #[test]
    fn every_difference_gets_a_cause() {
        let rules = CacheRules {
            routing_miss: 0.04,
            ..CacheRules::documented(CacheKind::Openai, 1_024)
        };
        let served = |cached: usize| Served {
            cached,
            uncached: 10_000 - cached,
            ..Served::default()
        };
        let at = |cached, sim, idle: Option<i64>, write: Option<&WriteCause>| {
            cause(10_000, &served(cached), &served(sim), idle, &rules, write).1
        };
        assert_eq!(at(9_000, 9_100, Some(1_000), None), "match");
        assert!(at(0, 9_000, Some(1_000), None).starts_with("routing miss"));
        assert!(at(0, 9_000, Some(700_000), None).starts_with("expired (idle 11.7 min)"));
        assert!(at(7_000, 9_000, Some(1_000), None).contains("2000 tokens short"));
        let change = WriteCause::PrefixChange {
            message: Some(12),
            role: Some("user"),
        };
        assert_eq!(
            at(2_000, 9_000, Some(1_000), Some(&change)),
            "the client changed its prompt at message 12 (user)"
        );
        assert!(at(9_000, 2_000, Some(1_000), None).starts_with("the provider read more"));
    }
}
