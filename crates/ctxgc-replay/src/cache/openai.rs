//! OpenAI automatic prompt caching.
//!
//! Source: OpenAI, "Prompt caching" guide (platform.openai.com/docs/guides/prompt-caching, 2025):
//! caching applies to prompts of 1,024 tokens or more; hits are reported in 128-token steps
//! (1,024, 1,152, 1,280, ...) of the longest prefix matching a recent request; routing uses the
//! first ~256 tokens plus `prompt_cache_key`, so one session's requests reach the same cache.
//! Cached input is billed at the model's discount (10% on GPT-5); there is no write surcharge.

use super::{CacheKind, CacheRules, PrefixCache};

/// Minimum prompt (and hit) size.
pub const MIN_TOKENS: usize = 1_024;
/// Hit granularity.
pub const STEP: usize = 128;
/// The cache of one session, with the documented rules alone (nothing calibrated).
pub fn cache() -> PrefixCache {
    PrefixCache::new(CacheRules::documented(CacheKind::Openai, MIN_TOKENS))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{CacheModel, SentAt, Served, blocks};

    #[test]
    fn hits_come_in_128_token_steps_from_1024() {
        let mut cache = cache();
        // 1,000 + 500 tokens: first request, nothing cached.
        let first = blocks(&[(1, 1_000), (2, 500)]);
        assert_eq!(
            cache.serve(&first),
            Served {
                cached: 0,
                written: 0,
                written_long: 0,
                uncached: 1_500
            }
        );
        // Same prefix plus 700 new tokens: 1,500 shared -> 1,408 cached (11 x 128).
        let second = blocks(&[(1, 1_000), (2, 500), (3, 700)]);
        assert_eq!(
            cache.serve(&second),
            Served {
                cached: 1_408,
                written: 0,
                written_long: 0,
                uncached: 792
            }
        );
        // A change in the second block: only 1,000 shared, under the 1,024 minimum.
        let edited = blocks(&[(1, 1_000), (9, 500), (3, 700)]);
        assert_eq!(cache.serve(&edited).cached, 0);
    }

    /// What the documentation leaves open is served in expectation: the calibrated routing
    /// misses and lag, and a prefix idle between the 5 and 10 minutes of in-memory retention.
    #[test]
    fn calibrated_misses_lag_and_gradual_eviction_are_expected_values() {
        let rules = CacheRules {
            ttl_ms: Some(300_000),
            ttl_max_ms: Some(600_000),
            routing_miss: 0.05,
            lag_tokens: 200,
            ..CacheRules::documented(CacheKind::Openai, MIN_TOKENS)
        };
        let at = |s: i64| {
            Some(SentAt {
                ms: s * 1_000,
                long_ttl: false,
            })
        };
        let mut cache = PrefixCache::new(rules);
        let first = blocks(&[(1, 4_000), (2, 1_000)]);
        cache.serve_at(&first, at(0));
        let second = blocks(&[(1, 4_000), (2, 1_000), (3, 500)]);
        // 5,000 shared, 200 short: 4,800 -> 4,736 in steps, 95% of it.
        assert_eq!(cache.serve_at(&second, at(10)).cached, 4_499);
        // Idle 7.5 minutes, half way between 5 and 10: half of that again.
        let third = blocks(&[(1, 4_000), (2, 1_000), (3, 500), (4, 100)]);
        let served = cache.serve_at(&third, at(460));
        assert_eq!(served.cached, 2_493, "5,248 x 95% x 50%");
        // Past 10 minutes idle nothing is left; the 24h retention keeps it.
        let mut cache = PrefixCache::new(rules);
        cache.serve_at(&first, at(0));
        assert_eq!(cache.serve_at(&second, at(700)).cached, 0);
        let mut cache = PrefixCache::new(rules);
        let long = |s: i64| {
            Some(SentAt {
                ms: s * 1_000,
                long_ttl: true,
            })
        };
        cache.serve_at(&first, long(0));
        assert_eq!(cache.serve_at(&second, long(3_600)).cached, 4_499);
    }

    /// From GPT-5.6 on writes are billed: what a request leaves cached past its hit is written.
    #[test]
    fn billed_writes_are_the_prompt_past_the_hit() {
        let rules = CacheRules {
            writes_billed: true,
            ..CacheRules::documented(CacheKind::Openai, MIN_TOKENS)
        };
        let mut cache = PrefixCache::new(rules);
        let first = blocks(&[(1, 2_000), (2, 100)]);
        let served = cache.serve(&first);
        // 2,100 tokens: 2,048 cacheable in steps, written; 52 plain input.
        assert_eq!(
            (served.cached, served.written, served.uncached),
            (0, 2_048, 52)
        );
        let second = blocks(&[(1, 2_000), (2, 100), (3, 400)]);
        let served = cache.serve(&second);
        assert_eq!(
            (served.cached, served.written, served.uncached),
            (2_048, 384, 68)
        );
    }

    /// GPT-5.6 on matches a prefix only where a request wrote an entry: at the end of its
    /// latest message, and at its explicit breakpoints. A history changed in the middle reads
    /// nothing, unless a breakpoint marked the stable prefix before the change.
    #[test]
    fn from_gpt_5_6_a_prefix_is_read_only_at_a_breakpoint() {
        let rules = CacheRules {
            writes_billed: true,
            matches_at_breakpoints: true,
            ..CacheRules::documented(CacheKind::Openai, MIN_TOKENS)
        };
        let run = |explicit: bool| {
            let request = |spec: &[(u64, usize)]| {
                let mut b = blocks(spec);
                b[0].explicit = explicit;
                b
            };
            let mut cache = PrefixCache::new(rules);
            let first = cache.serve(&request(&[(1, 2_000), (2, 500), (3, 300)]));
            // Appended to: the whole previous prompt is read, exactly (no 128-token steps).
            let second = cache.serve(&request(&[(1, 2_000), (2, 500), (3, 300), (4, 400)]));
            // The middle rewritten (an event, the client's compaction).
            let third = cache.serve(&request(&[(1, 2_000), (9, 200), (4, 400)]));
            (first, second, third)
        };
        let (first, second, third) = run(false);
        assert_eq!((first.cached, first.written, first.uncached), (0, 2_800, 0));
        assert_eq!((second.cached, second.written), (2_800, 400));
        assert_eq!(
            (third.cached, third.written),
            (0, 2_600),
            "block 1 was never an entry"
        );
        let (_, second, third) = run(true);
        assert_eq!(second.cached, 2_800);
        assert_eq!(
            (third.cached, third.written),
            (2_000, 600),
            "read at the explicit breakpoint"
        );
    }

    /// Why the explicit breakpoint matters though a session's first request already wrote an
    /// entry where its stable prefix ends: that entry is never read while the history only
    /// grows, so it expires 30 minutes later; the explicit one is written again by every request.
    #[test]
    fn the_stable_prefix_stays_readable_past_the_first_entrys_half_hour() {
        let rules = CacheRules {
            writes_billed: true,
            matches_at_breakpoints: true,
            ttl_ms: Some(1_800_000),
            ..CacheRules::documented(CacheKind::Openai, MIN_TOKENS)
        };
        let after_40_minutes = |explicit: bool| {
            let mut cache = PrefixCache::new(rules);
            let at = |minute: i64| {
                Some(SentAt {
                    ms: minute * 60_000,
                    long_ttl: false,
                })
            };
            // System prompt and task (block 1), then one more output a minute.
            let mut spec = vec![(1u64, 2_000usize)];
            for minute in 0..40 {
                let mut b = blocks(&spec);
                b[0].explicit = explicit;
                cache.serve_at(&b, at(minute));
                spec.push((100 + minute as u64, 300));
            }
            // The middle rewritten at minute 40.
            let mut b = blocks(&[(1, 2_000), (9, 500)]);
            b[0].explicit = explicit;
            cache.serve_at(&b, at(40)).cached
        };
        assert_eq!(
            after_40_minutes(false),
            0,
            "the first request's entry expired"
        );
        assert_eq!(after_40_minutes(true), 2_000);
    }

    #[test]
    fn short_prompts_are_never_cached() {
        let mut cache = cache();
        let small = blocks(&[(1, 600), (2, 300)]);
        cache.serve(&small);
        assert_eq!(cache.serve(&small).cached, 0);
    }

    #[test]
    fn a_resumed_session_reads_what_the_earlier_one_cached() {
        let mut cache = cache();
        let first = blocks(&[(1, 1_000), (2, 5_000), (3, 1_000)]);
        cache.preload(&first, 6_000, None);
        // 6,000 shared, in 128-token steps.
        assert_eq!(cache.serve(&first).cached, 5_888);
    }
}
