//! The prices table (`data/prices.toml`, one row per model with its source and date).

use serde::Deserialize;

use crate::cache::{CacheKind, Served};

/// One model's prices, USD per million tokens.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    /// Model name.
    pub name: String,
    /// Which cache model applies.
    pub cache: String,
    /// Uncached input.
    pub input: f64,
    /// Cache reads.
    pub cache_read: f64,
    /// Cache writes (absent: no surcharge, billed as input).
    #[serde(default)]
    pub cache_write: Option<f64>,
    /// Output.
    pub output: f64,
    /// Smallest cacheable prompt.
    pub min_cacheable: usize,
    /// Where the prices come from.
    pub source: String,
    /// When they were checked.
    pub date: String,
}

#[derive(Deserialize)]
struct Table {
    model: Vec<ModelPrice>,
}

/// The built-in table.
// The table is compiled in and parsed by the tests: a failure is a broken build.
#[allow(clippy::expect_used)]
pub fn builtin() -> Vec<ModelPrice> {
    let table: Table = toml::from_str(include_str!("../data/prices.toml"))
        .expect("the bundled prices table parses");
    table.model
}

/// The model a cache kind is priced with by default.
// Both names are in the compiled-in table (tested).
#[allow(clippy::expect_used)]
pub fn default_for(cache: CacheKind) -> ModelPrice {
    let name = match cache {
        CacheKind::Anthropic => "claude-sonnet-4.5",
        CacheKind::Openai | CacheKind::Vllm => "gpt-5",
    };
    builtin()
        .into_iter()
        .find(|m| m.name == name)
        .expect("default models are in the table")
}

impl ModelPrice {
    /// Cost in USD of a request's input as served, plus its output.
    pub fn cost(&self, served: &Served, output_tokens: usize) -> f64 {
        let write = self.cache_write.unwrap_or(self.input);
        (served.uncached as f64 * self.input
            + served.cached as f64 * self.cache_read
            + served.written as f64 * write
            + output_tokens as f64 * self.output)
            / 1e6
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_parses_and_prices_a_request() {
        let table = builtin();
        assert!(
            table
                .iter()
                .all(|m| !m.source.is_empty() && !m.date.is_empty())
        );
        let sonnet = default_for(CacheKind::Anthropic);
        let served = Served {
            cached: 1_000_000,
            written: 1_000_000,
            uncached: 1_000_000,
        };
        assert!((sonnet.cost(&served, 1_000_000) - (0.30 + 3.75 + 3.00 + 15.00)).abs() < 1e-9);
        let gpt5 = default_for(CacheKind::Openai);
        assert!(
            (gpt5.cost(
                &Served {
                    cached: 2_000_000,
                    written: 0,
                    uncached: 0
                },
                0
            ) - 0.25)
                .abs()
                < 1e-9
        );
    }
}
