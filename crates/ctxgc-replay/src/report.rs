//! Aggregating runs into one row per policy, per window and cache model.

use serde::Serialize;

use crate::cache::CacheKind;
use crate::prices::ModelPrice;
use crate::run::SessionRun;

/// One line of the replay table.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Policy.
    pub policy: String,
    /// Agent requests (summarizer calls excluded).
    pub requests: usize,
    /// Input tokens of all requests, summarizer calls included.
    pub input_tokens: u64,
    /// Share of input tokens read from the cache.
    pub cached_share: f64,
    /// Cost in USD under the cache model's prices.
    pub cost: f64,
    /// Cost relative to the `none` policy.
    pub cost_vs_none: Option<f64>,
    /// History-rewriting events per 100 assistant turns.
    pub events_per_100_turns: f64,
    /// Summarizer calls.
    pub summarizer_calls: usize,
    /// Median index of the earliest message an event changed.
    pub earliest_changed_median: Option<usize>,
    /// Largest prompt.
    pub peak_prompt: usize,
    /// Requests whose prompt exceeded the window (they would have failed).
    pub overflows: usize,
    /// Reference recall (found / asked).
    pub recall: Option<f64>,
}

/// Rows for one window and cache model, from runs of every policy over the same sessions.
pub fn rows(
    runs: &[SessionRun],
    window: u64,
    cache: CacheKind,
    price: &ModelPrice,
    policies: &[String],
) -> Vec<Row> {
    let mut rows: Vec<Row> = policies
        .iter()
        .map(|policy| {
            let mine: Vec<&SessionRun> = runs
                .iter()
                .filter(|r| r.window == window && &r.policy == policy)
                .collect();
            let all = || mine.iter().flat_map(|r| r.requests.iter());
            let agent = || all().filter(|r| !r.summarizer);
            let input: u64 = all().map(|r| r.tokens as u64).sum();
            let cached: u64 = all().map(|r| r.served[cache.name()].cached as u64).sum();
            let turns = agent().count();
            let events = agent().filter(|r| r.event.is_some()).count();
            let mut earliest: Vec<usize> = agent().filter_map(|r| r.earliest_changed).collect();
            earliest.sort_unstable();
            let (found, asked) = agent().fold((0, 0), |(f, a), r| (f + r.recall.0, a + r.recall.1));
            Row {
                policy: policy.clone(),
                requests: turns,
                input_tokens: input,
                cached_share: if input == 0 {
                    0.0
                } else {
                    cached as f64 / input as f64
                },
                cost: mine.iter().map(|r| r.cost(cache, price)).sum(),
                cost_vs_none: None,
                events_per_100_turns: if turns == 0 {
                    0.0
                } else {
                    events as f64 * 100.0 / turns as f64
                },
                summarizer_calls: all().filter(|r| r.summarizer).count(),
                earliest_changed_median: earliest.get(earliest.len() / 2).copied(),
                peak_prompt: agent().map(|r| r.tokens).max().unwrap_or(0),
                overflows: agent().filter(|r| r.tokens as u64 > window).count(),
                recall: (asked > 0).then(|| found as f64 / asked as f64),
            }
        })
        .collect();
    if let Some(none) = rows.iter().find(|r| r.policy == "none").map(|r| r.cost) {
        for row in &mut rows {
            row.cost_vs_none = (none > 0.0).then(|| row.cost / none);
        }
    }
    rows
}
