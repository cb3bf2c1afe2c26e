//! Checking the simulator against what providers recorded.
//!
//! The Gemini and GPT-5-mini transcripts carry the provider's usage for every call
//! (`prompt_tokens`, `cached_tokens`). Under the `none` policy the replay's requests are exactly
//! what the agent sent, so simulated prompt and cached tokens can be compared with the recorded
//! ones, session by session.

use ctxgc_core::{Role, Transcript};
use serde::Serialize;

use crate::run::SessionRun;

/// Simulated over recorded, for one session.
#[derive(Debug, Clone, Serialize)]
pub struct SessionCheck {
    /// Session id.
    pub session: String,
    /// Requests compared.
    pub requests: usize,
    /// Simulated prompt tokens / recorded prompt tokens.
    pub prompt_ratio: f64,
    /// Simulated cached tokens / recorded cached tokens (None when nothing was recorded cached).
    pub cached_ratio: Option<f64>,
    /// Recorded cached share.
    pub recorded_cached_share: f64,
    /// Simulated cached share.
    pub simulated_cached_share: f64,
}

/// Compares a `none` run with the usage recorded in its transcript, under `cache`.
pub fn check(t: &Transcript, run: &SessionRun, cache: &str) -> Option<SessionCheck> {
    let (mut sim_prompt, mut rec_prompt, mut sim_cached, mut rec_cached, mut n) =
        (0u64, 0u64, 0u64, 0u64, 0usize);
    for r in run.requests.iter().filter(|r| !r.summarizer) {
        let m = &t.messages[r.source_index];
        let Some(usage) = m.usage.filter(|_| m.role == Role::Assistant) else {
            continue;
        };
        sim_prompt += r.tokens as u64;
        rec_prompt += usage.prompt_tokens;
        sim_cached += r.served.get(cache)?.cached as u64;
        rec_cached += usage.cached_tokens;
        n += 1;
    }
    (n > 0 && rec_prompt > 0).then(|| SessionCheck {
        session: t.id.clone(),
        requests: n,
        prompt_ratio: sim_prompt as f64 / rec_prompt as f64,
        cached_ratio: (rec_cached > 0).then(|| sim_cached as f64 / rec_cached as f64),
        recorded_cached_share: rec_cached as f64 / rec_prompt as f64,
        simulated_cached_share: sim_cached as f64 / sim_prompt.max(1) as f64,
    })
}

/// Median, 10th and 90th percentiles.
pub fn spread(mut values: Vec<f64>) -> Option<(f64, f64, f64)> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
    Some((at(0.5), at(0.1), at(0.9)))
}
