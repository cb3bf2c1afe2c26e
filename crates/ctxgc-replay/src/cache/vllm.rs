//! vLLM automatic prefix caching: only full blocks of 16 tokens are cached, hashed as a chain,
//! so a hit covers the shared prefix rounded down to a multiple of 16. No minimum, no write
//! cost. Source: vLLM docs, "Automatic Prefix Caching" (docs.vllm.ai, design/prefix_caching).

use std::collections::HashSet;

use super::{Block, CacheModel, Served, longest_shared_prefix};

/// Tokens per KV block (vLLM's default on CUDA).
pub const BLOCK: usize = 16;

/// The cache of one session.
#[derive(Debug, Default)]
pub struct VllmCache {
    seen: HashSet<u64>,
}

impl CacheModel for VllmCache {
    fn serve(&mut self, blocks: &[Block]) -> Served {
        let total: usize = blocks.iter().map(|b| b.tokens).sum();
        let cached = longest_shared_prefix(&self.seen, blocks) / BLOCK * BLOCK;
        self.seen.extend(blocks.iter().map(|b| b.chain));
        Served {
            cached,
            written: 0,
            uncached: total - cached,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::blocks;

    #[test]
    fn only_full_blocks_hit() {
        let mut cache = VllmCache::default();
        cache.serve(&blocks(&[(1, 100), (2, 37)]));
        // 137 shared tokens -> 8 full blocks = 128.
        assert_eq!(
            cache.serve(&blocks(&[(1, 100), (2, 37), (3, 50)])),
            Served {
                cached: 128,
                written: 0,
                uncached: 59
            }
        );
    }
}
