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
    /// Whether the prefix up to this block is kept warm outside the session: a client's fixed
    /// system prompt and tools, which its other sessions of the same organisation send too, so
    /// once written it does not expire with this session's pauses.
    pub warm: bool,
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
                warm: false,
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

/// When a request was sent, for caches whose entries expire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SentAt {
    /// Milliseconds since the Unix epoch.
    pub ms: i64,
    /// The request asked for the one-hour TTL (Anthropic `cache_control.ttl: "1h"`).
    pub ttl_1h: bool,
}

/// A provider's cache, as it evolves over one session's requests.
pub trait CacheModel: Send {
    /// Serves one request sent at `at` (unknown: entries never expire) and updates the cache.
    fn serve_at(&mut self, blocks: &[Block], at: Option<SentAt>) -> Served;

    /// Serves one request whose time is unknown.
    fn serve(&mut self, blocks: &[Block]) -> Served {
        self.serve_at(blocks, None)
    }

    /// Takes the first `tokens` of `blocks` as cached by requests before the session's first,
    /// at `at`: a session that resumes an earlier one (`claude --resume`, `codex resume`) reads
    /// the conversation that session left in the cache, which its log records as read.
    fn preload(&mut self, blocks: &[Block], tokens: usize, at: Option<SentAt>);
}

/// The blocks of a prefix of about `tokens` tokens: whole blocks, ending at most 256 tokens
/// and 5% past it, as the replay's counts of a log's messages are estimates of the provider's.
fn within(blocks: &[Block], tokens: usize) -> &[Block] {
    let tokens = tokens + 256 + tokens / 20;
    let mut end = 0;
    let n = blocks
        .iter()
        .take_while(|b| {
            end += b.tokens;
            end <= tokens
        })
        .count();
    &blocks[..n]
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
/// automatic caching and vLLM's block cache are this with different numbers. A prefix not used
/// for `retention_ms` is evicted.
#[derive(Debug, Default)]
pub struct PrefixCache {
    min_tokens: usize,
    step: usize,
    retention_ms: Option<i64>,
    /// Chain hash -> when it was last used (None: by a request of unknown time).
    seen: std::collections::HashMap<u64, Option<i64>>,
}

impl PrefixCache {
    /// A cache with a minimum, a granularity and a retention after last use.
    pub fn new(min_tokens: usize, step: usize, retention_ms: Option<i64>) -> PrefixCache {
        PrefixCache {
            min_tokens,
            step: step.max(1),
            retention_ms,
            seen: Default::default(),
        }
    }

    fn alive(&self, block: &Block, now: Option<i64>) -> bool {
        match (self.seen.get(&block.chain), now, self.retention_ms) {
            (None, _, _) => false,
            (Some(Some(used)), Some(now), Some(retention)) => block.warm || now - used <= retention,
            (Some(_), _, _) => true,
        }
    }
}

impl CacheModel for PrefixCache {
    fn serve_at(&mut self, blocks: &[Block], at: Option<SentAt>) -> Served {
        let now = at.map(|a| a.ms);
        let total: usize = blocks.iter().map(|b| b.tokens).sum();
        if total < self.min_tokens {
            return Served {
                cached: 0,
                written: 0,
                uncached: total,
            };
        }
        let shared: usize = blocks
            .iter()
            .take_while(|b| self.alive(b, now))
            .map(|b| b.tokens)
            .sum();
        let cached = if shared >= self.min_tokens {
            shared / self.step * self.step
        } else {
            0
        };
        self.seen.extend(blocks.iter().map(|b| (b.chain, now)));
        Served {
            cached,
            written: 0,
            uncached: total - cached,
        }
    }

    fn preload(&mut self, blocks: &[Block], tokens: usize, at: Option<SentAt>) {
        let now = at.map(|a| a.ms);
        self.seen
            .extend(within(blocks, tokens).iter().map(|b| (b.chain, now)));
    }
}

#[cfg(test)]
pub(crate) fn blocks(spec: &[(u64, usize)]) -> Vec<Block> {
    chain(spec.iter().copied())
}
