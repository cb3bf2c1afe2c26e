//! Known models, their context windows and cache prices (`data/models.toml`, built in), so a
//! request's `model` decides the window its limits and events scale with and what an event's
//! cache write is judged to cost.

use std::sync::OnceLock;

use serde::Deserialize;

use crate::provider_cache::CachePrices;

/// The built-in table.
const MODELS_TOML: &str = include_str!("../data/models.toml");

#[derive(Debug, Deserialize)]
struct Table {
    unknown_window: u64,
    model: Vec<Entry>,
}

#[derive(Debug, Deserialize)]
struct Entry {
    prefix: String,
    window: u64,
    /// A cached token read, relative to an uncached input token (unknown for self-hosted models).
    cache_read: Option<f64>,
    /// A token written to the cache, likewise.
    cache_write: Option<f64>,
}

/// Used if the built-in table were unreadable (a test guards that it is not).
const FALLBACK_WINDOW: u64 = 32_000;

fn table() -> Option<&'static Table> {
    static TABLE: OnceLock<Option<Table>> = OnceLock::new();
    TABLE
        .get_or_init(|| toml::from_str(MODELS_TOML).ok())
        .as_ref()
}

/// The window of a model run with its long context: Anthropic's `context-1m` beta (Claude
/// Sonnet 4 and 4.5, Opus 4.6), which Claude Code asks for with a `[1m]` suffix on the model.
pub const LONG_CONTEXT_WINDOW: u64 = 1_000_000;

/// The model-name suffix Claude Code uses for a model run with its long context.
const LONG_CONTEXT_SUFFIX: &str = "[1m]";

/// The context window of a known model, by the longest matching name prefix (case and a
/// provider prefix such as `anthropic/` ignored; a `[1m]` suffix is the long context);
/// `None` for a model the table does not know.
pub fn known_window(model: &str) -> Option<u64> {
    let window = entry(model)?.window;
    let long = model.to_ascii_lowercase().ends_with(LONG_CONTEXT_SUFFIX);
    Some(if long {
        window.max(LONG_CONTEXT_WINDOW)
    } else {
        window
    })
}

/// The cache prices of a known model, when its provider publishes them.
pub fn cache_prices(model: &str) -> Option<CachePrices> {
    let e = entry(model)?;
    Some(CachePrices {
        read: e.cache_read?,
        write: e.cache_write?,
    })
}

fn entry(model: &str) -> Option<&'static Entry> {
    let name = model
        .rsplit('/')
        .next()
        .unwrap_or(model)
        .to_ascii_lowercase();
    table()?
        .model
        .iter()
        .filter(|e| name.starts_with(&e.prefix))
        .max_by_key(|e| e.prefix.len())
}

/// The window to assume for `model`: its known window, else the table's conservative default;
/// with `long_context` (the client asked for it), at least [`LONG_CONTEXT_WINDOW`].
pub fn window_for(model: &str, long_context: bool) -> u64 {
    let window = known_window(model).unwrap_or_else(unknown_window);
    if long_context {
        window.max(LONG_CONTEXT_WINDOW)
    } else {
        window
    }
}

/// The window assumed for a model the table does not know.
pub fn unknown_window() -> u64 {
    table().map_or(FALLBACK_WINDOW, |t| t.unknown_window)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window_for_test(model: &str) -> u64 {
        window_for(model, false)
    }

    #[test]
    fn claude_5_models_and_the_long_context_have_a_million_tokens() {
        assert_eq!(window_for("claude-opus-5", false), 1_000_000);
        assert_eq!(window_for("claude-sonnet-5-5", false), 1_000_000);
        assert_eq!(window_for("anthropic/claude-opus-5.5", false), 1_000_000);
        assert_eq!(window_for("claude-fable-5-1", false), 1_000_000);
        assert_eq!(window_for("claude-sonnet-4-5-20250929", false), 200_000);
        assert_eq!(
            window_for("claude-sonnet-4-5-20250929", true),
            1_000_000,
            "the beta"
        );
        assert_eq!(
            window_for("claude-sonnet-4-5-20250929[1m]", false),
            1_000_000
        );
        assert_eq!(known_window("claude-opus-4-6[1M]"), Some(1_000_000));
        assert_eq!(known_window("my-finetune[1m]"), None);
    }

    #[test]
    fn the_built_in_table_reads_and_matches_by_longest_prefix() {
        assert!(table().is_some(), "data/models.toml does not parse");
        assert_eq!(window_for_test("claude-sonnet-4-5-20250929"), 200_000);
        assert_eq!(window_for_test("anthropic/claude-opus-4.1"), 200_000);
        assert_eq!(window_for_test("GPT-5-mini"), 272_000);
        assert_eq!(window_for_test("gpt-4o-mini"), 128_000);
        assert_eq!(window_for_test("models/gemini-3-pro-preview"), 1_048_576);
        assert_eq!(window_for_test("qwen3-coder-30b"), 262_144);
        assert_eq!(window_for_test("qwen2.5-7b"), 32_768);
        assert_eq!(known_window("my-finetune"), None);
        assert_eq!(window_for_test("my-finetune"), unknown_window());
        assert!(
            unknown_window() <= 64_000,
            "unknown models get a small window"
        );
    }

    #[test]
    fn cache_prices_follow_the_provider() {
        let prices = |model| cache_prices(model).map(|p| (p.read, p.write));
        assert_eq!(prices("claude-sonnet-4-5"), Some((0.1, 1.25)));
        assert_eq!(prices("openai/gpt-5-mini"), Some((0.1, 1.0)));
        assert_eq!(prices("gpt-4o-2024-08-06"), Some((0.5, 1.0)));
        assert_eq!(prices("gpt-4.1-mini"), Some((0.25, 1.0)));
        // Self-hosted: the policy's own prices apply.
        assert_eq!(prices("qwen2.5-7b"), None);
        assert_eq!(prices("my-finetune"), None);
    }
}
