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
    /// Content blocks the provider counts in it (a message with three tool calls is three):
    /// Anthropic's lookback counts these, not messages.
    pub parts: u32,
    /// Whether the policy put an explicit breakpoint on this block where the client's own
    /// requests have none (OpenAI's `prompt_cache_breakpoint`, GPT-5.6 on).
    pub explicit: bool,
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
                parts: 1,
                explicit: false,
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
    /// Of `written`, tokens written with the long lifetime (Anthropic's 1-hour TTL, billed at
    /// its own price).
    #[serde(skip_serializing_if = "is_zero")]
    pub written_long: usize,
    /// Processed without the cache.
    pub uncached: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Served {
    /// A prompt of `total` tokens of which `cached` were read and `written` written (with the
    /// long lifetime when `long`); the rest uncached.
    fn of(total: usize, cached: usize, written: usize, long: bool) -> Served {
        Served {
            cached,
            written,
            written_long: if long { written } else { 0 },
            uncached: total - cached - written,
        }
    }

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
    /// The request asked for the provider's long lifetime (Anthropic `cache_control.ttl:
    /// "1h"`, OpenAI `prompt_cache_retention: "24h"`).
    pub long_ttl: bool,
}

/// The rules one session's cache runs with: the provider's documented ones and the values it
/// leaves open, from the table (`crate::prices`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CacheRules {
    /// Smallest cacheable prompt (and hit).
    pub min_tokens: usize,
    /// Granularity of a hit.
    pub step: usize,
    /// An entry's lifetime after its last use (None: never expires).
    pub ttl_ms: Option<i64>,
    /// Where eviction is gradual: the idle time by which every entry is gone; between `ttl_ms`
    /// and this a hit is served in proportion to the share of entries still alive.
    pub ttl_max_ms: Option<i64>,
    /// The long lifetime a request can ask for.
    pub long_ttl_ms: Option<i64>,
    /// Most breakpoints per request.
    pub max_breakpoints: usize,
    /// How far a read walks back from a breakpoint, in blocks.
    pub lookback_blocks: usize,
    /// Share of requests that find nothing cached although nothing expired.
    pub routing_miss: f64,
    /// Tokens by which a hit falls short of the cached prefix's end, on average.
    pub lag_tokens: usize,
    /// Whether the provider bills a prefix cache's writes (OpenAI from the GPT-5.6 family on):
    /// the cacheable part of a prompt past its hit is then served as written.
    pub writes_billed: bool,
    /// Whether a prefix is matched only where a request wrote an entry (OpenAI from the GPT-5.6
    /// family on): at its implicit breakpoint, the end of its latest message, and at its
    /// explicit ones, each exactly, with no rounding to a step.
    pub matches_at_breakpoints: bool,
}

impl CacheRules {
    /// The documented rules of a cache model alone, with nothing calibrated (tests, and a
    /// user's table without that provider).
    pub fn documented(kind: CacheKind, min_tokens: usize) -> CacheRules {
        use ctxgc_core::provider_cache as pc;
        let base = CacheRules {
            min_tokens,
            step: 1,
            ttl_ms: None,
            ttl_max_ms: None,
            long_ttl_ms: None,
            max_breakpoints: 0,
            lookback_blocks: 0,
            routing_miss: 0.0,
            lag_tokens: 0,
            writes_billed: false,
            matches_at_breakpoints: false,
        };
        match kind {
            CacheKind::Anthropic => CacheRules {
                ttl_ms: Some(pc::ANTHROPIC_TTL_SECS as i64 * 1_000),
                long_ttl_ms: Some(pc::ANTHROPIC_LONG_TTL_SECS as i64 * 1_000),
                max_breakpoints: 4,
                lookback_blocks: 20,
                ..base
            },
            CacheKind::Openai => CacheRules {
                step: openai::STEP,
                ttl_ms: Some(pc::OPENAI_RETENTION_SECS as i64 * 1_000),
                long_ttl_ms: Some(pc::OPENAI_EXTENDED_RETENTION_SECS as i64 * 1_000),
                ..base
            },
            CacheKind::Gemini => CacheRules {
                step: 2_048,
                ttl_ms: Some(3_600_000),
                long_ttl_ms: Some(3_600_000),
                ..base
            },
            CacheKind::Vllm => CacheRules {
                min_tokens: 0,
                step: vllm::BLOCK,
                ..base
            },
        }
    }

    /// The share of a prefix last used `idle_ms` ago that is still cached: all of it within the
    /// lifetime, none past the longest, the share in between falling linearly.
    pub(crate) fn alive_share(&self, idle_ms: i64, long: bool) -> f64 {
        let (ttl, max) = match (long, self.long_ttl_ms, self.ttl_ms) {
            (true, Some(long), _) => (long, long),
            (_, _, Some(ttl)) => (ttl, self.ttl_max_ms.unwrap_or(ttl).max(ttl)),
            (_, _, None) => return 1.0,
        };
        if idle_ms <= ttl {
            1.0
        } else if idle_ms >= max {
            0.0
        } else {
            (max - idle_ms) as f64 / (max - ttl) as f64
        }
    }
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
    /// Gemini implicit caching.
    Gemini,
    /// vLLM-style block caching.
    Vllm,
}

impl CacheKind {
    /// A fresh cache for one session.
    pub fn new_model(self, rules: CacheRules) -> Box<dyn CacheModel> {
        match self {
            CacheKind::Anthropic => Box::new(anthropic::AnthropicCache::new(rules)),
            CacheKind::Openai | CacheKind::Gemini | CacheKind::Vllm => {
                Box::new(PrefixCache::new(rules))
            }
        }
    }

    /// Name used in tables.
    pub fn name(self) -> &'static str {
        match self {
            CacheKind::Anthropic => "anthropic",
            CacheKind::Openai => "openai",
            CacheKind::Gemini => "gemini",
            CacheKind::Vllm => "vllm",
        }
    }

    /// Parses a name.
    pub fn parse(name: &str) -> Option<CacheKind> {
        match name {
            "anthropic" => Some(CacheKind::Anthropic),
            "openai" => Some(CacheKind::Openai),
            "gemini" => Some(CacheKind::Gemini),
            "vllm" => Some(CacheKind::Vllm),
            _ => None,
        }
    }
}

/// A cache that serves the longest prefix shared with any earlier request of the session,
/// rounded down to the rules' step, for prompts (and hits) of at least their minimum: OpenAI's
/// automatic caching, Gemini's implicit caching and vLLM's block cache are this with different
/// rules. What the providers do not promise is served in expectation, so that a replay stays a
/// pure function of the log: a prefix idle past its lifetime is served in proportion to the
/// share of such prefixes still cached, a hit falls short of the prefix's end by the calibrated
/// lag, and the calibrated share of requests that find nothing (routing) is taken off.
#[derive(Debug)]
pub struct PrefixCache {
    rules: CacheRules,
    /// Chain hash -> when it was last used (None: by a request of unknown time), and whether
    /// with the long lifetime.
    seen: std::collections::HashMap<u64, (Option<i64>, bool)>,
}

impl PrefixCache {
    /// A cache with these rules.
    pub fn new(rules: CacheRules) -> PrefixCache {
        PrefixCache {
            rules: CacheRules {
                step: rules.step.max(1),
                ..rules
            },
            seen: Default::default(),
        }
    }

    /// The share of `block`'s prefix still cached at `now` (0: never seen).
    fn alive(&self, block: &Block, now: Option<i64>) -> f64 {
        match (self.seen.get(&block.chain), now) {
            (None, _) => 0.0,
            (Some(_), _) if block.warm => 1.0,
            (Some(&(Some(used), long)), Some(now)) => self.rules.alive_share(now - used, long),
            (Some(_), _) => 1.0,
        }
    }
}

impl PrefixCache {
    /// [`CacheModel::serve_at`] where a prefix is matched only at the entries requests wrote
    /// ([`CacheRules::matches_at_breakpoints`]): the longest prefix ending at one still alive
    /// is read; this request writes one at its end (the implicit breakpoint) and one at each
    /// explicit breakpoint, and what it writes past its hit is billed.
    /// `total` is the prompt's tokens, at least the rules' minimum.
    fn serve_at_breakpoints(
        &mut self,
        blocks: &[Block],
        at: Option<SentAt>,
        total: usize,
    ) -> Served {
        let now = at.map(|a| a.ms);
        let long = at.is_some_and(|a| a.long_ttl);
        let rules = self.rules;
        let (mut end, mut hit, mut alive, mut read) = (0usize, 0usize, 0.0, None);
        for b in blocks {
            end += b.tokens;
            let share = self.alive(b, now);
            if share > 0.0 && end >= rules.min_tokens {
                (hit, alive, read) = (end, share, Some(b.chain));
            }
        }
        let reach = hit.saturating_sub(rules.lag_tokens);
        let cached = (reach as f64 * alive * (1.0 - rules.routing_miss)).round() as usize;
        // A read refreshes its entry; the request's own breakpoints write theirs.
        let mut end = 0usize;
        let last = blocks.len().saturating_sub(1);
        for (i, b) in blocks.iter().enumerate() {
            end += b.tokens;
            if (i == last || b.explicit || read == Some(b.chain)) && end >= rules.min_tokens {
                self.seen.insert(b.chain, (now, long));
            }
        }
        // The whole prompt is cacheable (`serve_at` served a shorter one as uncached).
        Served::of(total, cached, total - cached, long)
    }
}

impl CacheModel for PrefixCache {
    fn serve_at(&mut self, blocks: &[Block], at: Option<SentAt>) -> Served {
        let now = at.map(|a| a.ms);
        let total: usize = blocks.iter().map(|b| b.tokens).sum();
        let rules = self.rules;
        if total < rules.min_tokens {
            return Served {
                uncached: total,
                ..Served::default()
            };
        }
        if rules.matches_at_breakpoints {
            return self.serve_at_breakpoints(blocks, at, total);
        }
        let mut shared = 0usize;
        let mut alive = 0.0;
        for b in blocks {
            let share = self.alive(b, now);
            if share <= 0.0 {
                break;
            }
            shared += b.tokens;
            alive = share;
        }
        let reach = shared.saturating_sub(rules.lag_tokens);
        let hit = if reach >= rules.min_tokens.max(1) {
            reach / rules.step * rules.step
        } else {
            0
        };
        let cached = (hit as f64 * alive * (1.0 - rules.routing_miss)).round() as usize;
        let long = at.is_some_and(|a| a.long_ttl);
        self.seen
            .extend(blocks.iter().map(|b| (b.chain, (now, long))));
        // What the request leaves cached for the next: its whole prompt in steps.
        let written = if rules.writes_billed {
            (total / rules.step * rules.step).saturating_sub(cached)
        } else {
            0
        };
        Served::of(total, cached, written, long)
    }

    fn preload(&mut self, blocks: &[Block], tokens: usize, at: Option<SentAt>) {
        let now = at.map(|a| a.ms);
        let long = at.is_some_and(|a| a.long_ttl);
        self.seen.extend(
            within(blocks, tokens)
                .iter()
                .map(|b| (b.chain, (now, long))),
        );
    }
}

#[cfg(test)]
pub(crate) fn blocks(spec: &[(u64, usize)]) -> Vec<Block> {
    chain(spec.iter().copied())
}
