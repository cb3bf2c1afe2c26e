//! What the providers' prompt caches do, from their documentation (2026): one set of facts for
//! the engine's defaults, the proxy and the replay lab's cache models, so what the engine
//! assumes is what the lab prices.

/// Anthropic keeps a cache entry this long after it was last written or read.
pub const ANTHROPIC_TTL_SECS: u64 = 5 * 60;
/// The longer lifetime a client can ask for (`cache_control: {"ttl": "1h"}`).
pub const ANTHROPIC_LONG_TTL_SECS: u64 = 60 * 60;
/// OpenAI keeps a cached prefix "5 to 10 minutes" after its last use: past the longer bound it
/// is surely gone.
pub const OPENAI_RETENTION_SECS: u64 = 10 * 60;
/// The extended retention a client can ask for (`prompt_cache_retention: "24h"`).
pub const OPENAI_EXTENDED_RETENTION_SECS: u64 = 24 * 60 * 60;
/// Price of a cached input token read, relative to an uncached one (Anthropic; GPT-5.x too).
pub const CACHE_READ_COST: f64 = 0.1;
/// Price of an input token written to Anthropic's 5-minute cache, relative to an uncached one
/// (OpenAI bills a write as plain input, 1.0).
pub const ANTHROPIC_WRITE_COST: f64 = 1.25;

/// What a model's prompt cache charges, relative to an uncached input token.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CachePrices {
    /// A cached token read.
    pub read: f64,
    /// A token written to the cache.
    pub write: f64,
}
