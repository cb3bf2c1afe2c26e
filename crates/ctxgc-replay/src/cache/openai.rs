//! OpenAI automatic prompt caching.
//!
//! Source: OpenAI, "Prompt caching" guide (platform.openai.com/docs/guides/prompt-caching, 2025):
//! caching applies to prompts of 1,024 tokens or more; hits are reported in 128-token steps
//! (1,024, 1,152, 1,280, ...) of the longest prefix matching a recent request; routing uses the
//! first ~256 tokens plus `prompt_cache_key`, so one session's requests reach the same cache.
//! Cached input is billed at the model's discount (10% on GPT-5); there is no write surcharge.

use super::PrefixCache;
use ctxgc_core::provider_cache;

/// Minimum prompt (and hit) size.
pub const MIN_TOKENS: usize = 1_024;
/// Hit granularity.
pub const STEP: usize = 128;
/// How long a prefix stays cached after its last use: the guide says cached prefixes "generally
/// remain active for 5 to 10 minutes of inactivity"; a session's own requests keep the routing
/// warm, so the upper end is taken.
pub const RETENTION_MS: i64 = provider_cache::OPENAI_RETENTION_SECS as i64 * 1_000;

/// The cache of one session.
pub fn cache() -> PrefixCache {
    PrefixCache::new(MIN_TOKENS, STEP, Some(RETENTION_MS))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{CacheModel, Served, blocks};

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
                uncached: 792
            }
        );
        // A change in the second block: only 1,000 shared, under the 1,024 minimum.
        let edited = blocks(&[(1, 1_000), (9, 500), (3, 700)]);
        assert_eq!(cache.serve(&edited).cached, 0);
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
