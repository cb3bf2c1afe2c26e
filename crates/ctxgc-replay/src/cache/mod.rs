//! Provider prompt-cache models.
//!
//! A request is a list of [`Block`]s: each carries its token count and a hash of the whole prefix
//! up to and including it (a hash chain), so two requests share a prefix exactly as far as their
//! chain hashes agree. Blocks are messages (plus one block for the tool definitions and system
//! prompt); a prefix that diverges inside a message counts as diverging at its start, which
//! slightly under-counts cache hits for every policy alike.

pub mod anthropic;
pub mod openai;
pub mod vllm;

use serde::Serialize;

/// One block of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// Hash of the prefix up to and including this block.
    pub chain: u64,
    /// Tokens in this block.
    pub tokens: usize,
    /// Whether the agent (or policy) put a cache breakpoint on this block (Anthropic).
    pub breakpoint: bool,
}

/// Chains per-block content hashes into prefix hashes.
pub fn chain(hashes: impl IntoIterator<Item = (u64, usize)>) -> Vec<Block> {
    let mut prev = 0u64;
    hashes
        .into_iter()
        .map(|(hash, tokens)| {
            let mut bytes = [0u8; 16];
            bytes[..8].copy_from_slice(&prev.to_le_bytes());
            bytes[8..].copy_from_slice(&hash.to_le_bytes());
            prev = xxhash_rust::xxh3::xxh3_64(&bytes);
            Block {
                chain: prev,
                tokens,
                breakpoint: false,
            }
        })
        .collect()
}

/// How a request's input tokens were served.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Served {
    /// Read from the cache.
    pub cached: usize,
    /// Written to the cache (billed as cache writes where the provider charges for them).
    pub written: usize,
    /// Processed without the cache.
    pub uncached: usize,
}

impl Served {
    /// All input tokens.
    pub fn total(&self) -> usize {
        self.cached + self.written + self.uncached
    }
}

/// A provider's cache, as it evolves over one session's requests.
pub trait CacheModel: Send {
    /// Serves one request and updates the cache.
    fn serve(&mut self, blocks: &[Block]) -> Served;
}

/// The cache models the replay knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CacheKind {
    /// Anthropic breakpoints.
    Anthropic,
    /// OpenAI automatic prefix caching.
    Openai,
    /// vLLM-style block caching.
    Vllm,
}

impl CacheKind {
    /// A fresh cache for one session.
    pub fn new_model(self, min_cacheable: usize) -> Box<dyn CacheModel> {
        match self {
            CacheKind::Anthropic => Box::new(anthropic::AnthropicCache::new(min_cacheable)),
            CacheKind::Openai => Box::new(openai::cache()),
            CacheKind::Vllm => Box::new(vllm::cache()),
        }
    }

    /// Name used in tables.
    pub fn name(self) -> &'static str {
        match self {
            CacheKind::Anthropic => "anthropic",
            CacheKind::Openai => "openai",
            CacheKind::Vllm => "vllm",
        }
    }

    /// Parses a name.
    pub fn parse(name: &str) -> Option<CacheKind> {
        match name {
            "anthropic" => Some(CacheKind::Anthropic),
            "openai" => Some(CacheKind::Openai),
            "vllm" => Some(CacheKind::Vllm),
            _ => None,
        }
    }
}

/// A cache that serves the longest prefix shared with any earlier request of the session,
/// rounded down to `step` tokens, for prompts (and hits) of at least `min_tokens`: OpenAI's
/// automatic caching and vLLM's block cache are this with different numbers.
#[derive(Debug, Default)]
pub struct PrefixCache {
    min_tokens: usize,
    step: usize,
    seen: std::collections::HashSet<u64>,
}

impl PrefixCache {
    /// A cache with a minimum and a granularity.
    pub fn new(min_tokens: usize, step: usize) -> PrefixCache {
        PrefixCache {
            min_tokens,
            step: step.max(1),
            seen: Default::default(),
        }
    }
}

impl CacheModel for PrefixCache {
    fn serve(&mut self, blocks: &[Block]) -> Served {
        let total: usize = blocks.iter().map(|b| b.tokens).sum();
        if total < self.min_tokens {
            return Served {
                cached: 0,
                written: 0,
                uncached: total,
            };
        }
        let shared = longest_shared_prefix(&self.seen, blocks);
        let cached = if shared >= self.min_tokens {
            shared / self.step * self.step
        } else {
            0
        };
        self.seen.extend(blocks.iter().map(|b| b.chain));
        Served {
            cached,
            written: 0,
            uncached: total - cached,
        }
    }
}

/// Tokens of the longest prefix `blocks` shares with any earlier request, at block granularity.
fn longest_shared_prefix(seen: &std::collections::HashSet<u64>, blocks: &[Block]) -> usize {
    let mut tokens = 0;
    for block in blocks {
        if !seen.contains(&block.chain) {
            break;
        }
        tokens += block.tokens;
    }
    tokens
}

#[cfg(test)]
pub(crate) fn blocks(spec: &[(u64, usize)]) -> Vec<Block> {
    chain(spec.iter().copied())
}
