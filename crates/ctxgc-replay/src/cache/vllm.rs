//! vLLM automatic prefix caching: only full blocks of 16 tokens are cached, hashed as a chain,
//! so a hit covers the shared prefix rounded down to a multiple of 16. No minimum, no write
//! cost, and no expiry by time (vLLM evicts by memory pressure, which a replay cannot see). Source: vLLM docs, "Automatic Prefix Caching" (docs.vllm.ai, design/prefix_caching).

use super::{CacheKind, CacheRules, PrefixCache};

/// Tokens per KV block (vLLM's default on CUDA).
pub const BLOCK: usize = 16;

/// The cache of one session.
pub fn cache() -> PrefixCache {
    PrefixCache::new(CacheRules::documented(CacheKind::Vllm, 0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{CacheModel, Served, blocks};

    #[test]
    fn only_full_blocks_hit() {
        let mut cache = cache();
        cache.serve(&blocks(&[(1, 100), (2, 37)]));
        // 137 shared tokens -> 8 full blocks = 128.
        assert_eq!(
            cache.serve(&blocks(&[(1, 100), (2, 37), (3, 50)])),
            Served {
                cached: 128,
                written: 0,
                written_long: 0,
                uncached: 59
            }
        );
    }
}
