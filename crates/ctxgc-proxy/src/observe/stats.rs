//! The JSON of `/ctxgc/stats`: the counters, and the upstream's usage per session.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::intake::identity::Tenant;
use crate::observe::metrics::Totals;
use crate::observe::sessions::SessionUsage;

/// The JSON of `/ctxgc/stats`.
#[derive(Debug, Serialize)]
pub struct Stats {
    /// Requests handled on the rewriting routes.
    pub requests: u64,
    /// Requests forwarded with a rewritten body.
    pub rewritten: u64,
    /// Requests forwarded byte for byte (nothing to change).
    pub passed_through: u64,
    /// Requests forwarded unchanged because ctxgc failed internally.
    pub fail_open: u64,
    /// Requests refused as malformed (400) or too large (413).
    pub bad_requests: u64,
    /// Bytes of tool output trimmed away.
    pub bytes_saved: u64,
    /// Originals written to the store.
    pub originals_stored: u64,
    /// Engine events (prune, compaction) run across requests.
    pub events: u64,
    /// Calls to `trim_tool_result` / `recall_tool_result` the proxy ran.
    pub agent_tool_calls: u64,
    /// Compactions whose LLM summary failed and were summarised extractively.
    pub summarizer_failures: u64,
    /// Keep-alive requests sent on idle sessions ([`SessionUsage::keepalives`] per session).
    pub keepalives: u64,
    /// Keep-alives that failed (the session's keep-alives then ended).
    pub keepalives_failed: u64,
    /// Observe mode, when on: what the observer did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observe: Option<crate::observe::queue::ObserveTotals>,
    /// Observe mode: prompt tokens ctxgc would have saved over the sessions shown (ctxgc's
    /// counts of what was sent minus what it would have sent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub would_have_saved_tokens: Option<u64>,
    /// Tokens the requests shown carried in, as the clients sent them, estimated from their
    /// bytes (`[trim] bytes_per_token`).
    pub received_tokens_estimate: u64,
    /// Tokens of what was forwarded instead, estimated the same way.
    pub sent_tokens_estimate: u64,
    /// Of the input the upstream reported for the sessions shown, the share read from its cache.
    pub cache_read_share: Option<f64>,
    /// The input ctxgc removed, priced as uncached input at each session's model's price (USD;
    /// models without a known price count nothing). In observe mode: what it would have saved.
    pub saved_usd_estimate: f64,
    /// What the upstream billed for what was sent, over the sessions shown whose model has a
    /// price (USD, at the replay lab's prices; [`SessionUsage::billed_usd`]). An absolute sum,
    /// not a ratio: it divides by nothing.
    pub billed_usd: f64,
    /// What the clients' own requests would have been billed, over the sessions shown that
    /// have both figures (the lab's cache model run on the requests as the clients sent them,
    /// at the lab's prices; [`SessionUsage::client_billed_usd`]).
    pub client_billed_usd: f64,
    /// What the upstream billed for what was sent divided by what the clients' own requests
    /// would have been billed, over the same sessions (those with both figures): below 1,
    /// ctxgc saved that share of the bill. `None` until a session has both.
    pub billed_vs_client: Option<f64>,
    /// Sessions shown whose model has no price in the table: their bill is not in `billed_usd`
    /// (unknown, not $0).
    pub unpriced_sessions: usize,
    /// Sessions seen.
    pub sessions: usize,
    /// Usage per session, as the upstream reported it.
    pub usage: BTreeMap<String, SessionUsage>,
    #[serde(skip)]
    bytes_per_token: f64,
}

/// The price of one uncached input token of `model` (USD), from the replay lab's cache model
/// table (the same lookup the lab prices a log's sessions with: `claude-sonnet-4-5-20250929`
/// is `claude-sonnet-4.5`); `None` for a model the table does not have.
fn input_usd_per_token(model: &str) -> Option<f64> {
    ctxgc_replay::prices::builtin_shared()
        .find(model)
        .map(|m| m.input / 1e6)
}

/// Input tokens as a bill counts them: uncached, cache reads, cache writes (five-minute) and
/// one-hour writes, then output.
type BillTokens = [u64; 5];

/// What `tokens` cost at `model`'s prices (USD); `None` for a model without a price.
fn usd_of(model: &str, [input, read, write, write_1h, output]: BillTokens) -> Option<f64> {
    let p = ctxgc_replay::prices::builtin_shared().find(model)?;
    let write_price = p.cache_write.unwrap_or(p.input);
    let write_1h_price = p.cache_write_1h.unwrap_or(write_price);
    Some(
        (input as f64 * p.input
            + read as f64 * p.cache_read
            + write as f64 * write_price
            + write_1h as f64 * write_1h_price
            + output as f64 * p.output)
            / 1e6,
    )
}

/// What the upstream billed a session for what was sent, at its model's prices (USD).
fn billed_usd_of(u: &SessionUsage, model: &str) -> Option<f64> {
    let long = u.cache_write_1h_tokens.min(u.cache_write_tokens);
    usd_of(
        model,
        [
            u.input_tokens,
            u.cache_read_tokens,
            u.cache_write_tokens - long,
            long,
            u.output_tokens,
        ],
    )
}

/// What the client's own requests would have been billed (the lab's cache model on them), with
/// the output the upstream reported (the model's answers are the same either way) and without
/// keep-alives (a client alone sends none).
fn client_billed_usd_of(u: &SessionUsage, model: &str) -> Option<f64> {
    if u.client_requests == 0 || u.client_unsimulated > 0 {
        return None;
    }
    let long = u
        .client_cache_write_1h_tokens
        .min(u.client_cache_write_tokens);
    usd_of(
        model,
        [
            u.client_input_tokens,
            u.client_cache_read_tokens,
            u.client_cache_write_tokens - long,
            long,
            u.output_tokens.saturating_sub(u.keepalives),
        ],
    )
}

impl Stats {
    /// The statistics of these counters and sessions.
    pub(crate) fn new(
        t: Totals,
        usage: BTreeMap<String, SessionUsage>,
        observe: Option<crate::observe::queue::ObserveTotals>,
        bytes_per_token: f64,
    ) -> Stats {
        let mut stats = Stats {
            requests: t.requests,
            rewritten: t.rewritten,
            passed_through: t.passed_through,
            fail_open: t.fail_open,
            bad_requests: t.bad_requests,
            bytes_saved: t.bytes_saved,
            originals_stored: t.originals_stored,
            events: t.events,
            agent_tool_calls: t.agent_tool_calls,
            summarizer_failures: t.summarizer_failures,
            keepalives: t.keepalives,
            keepalives_failed: t.keepalives_failed,
            observe,
            would_have_saved_tokens: None,
            received_tokens_estimate: 0,
            sent_tokens_estimate: 0,
            cache_read_share: None,
            saved_usd_estimate: 0.0,
            billed_usd: 0.0,
            client_billed_usd: 0.0,
            billed_vs_client: None,
            unpriced_sessions: 0,
            bytes_per_token: bytes_per_token.max(1.0),
            sessions: usage.len(),
            usage,
        };
        stats.sum_shown();
        stats
    }

    /// The totals over the sessions shown.
    fn sum_shown(&mut self) {
        let tokens = |bytes: u64| (bytes as f64 / self.bytes_per_token) as u64;
        self.received_tokens_estimate = tokens(self.usage.values().map(|u| u.received_bytes).sum());
        self.sent_tokens_estimate = tokens(self.usage.values().map(|u| u.sent_bytes).sum());
        let read: u64 = self.usage.values().map(|u| u.cache_read_tokens).sum();
        let input: u64 = self
            .usage
            .values()
            .map(|u| u.input_tokens + u.cache_read_tokens + u.cache_write_tokens)
            .sum();
        self.cache_read_share = (input > 0).then(|| read as f64 / input as f64);
        self.saved_usd_estimate = self
            .usage
            .values()
            .map(|u| {
                let saved = match &self.observe {
                    Some(_) => u.observed_tokens.saturating_sub(u.would_send_tokens),
                    None => tokens(u.received_bytes.saturating_sub(u.sent_bytes)),
                };
                u.model
                    .as_deref()
                    .and_then(input_usd_per_token)
                    .unwrap_or(0.0)
                    * saved as f64
            })
            .sum();
        for u in self.usage.values_mut() {
            u.billed_usd = u.model.as_deref().and_then(|m| billed_usd_of(u, m));
            u.client_billed_usd = u.model.as_deref().and_then(|m| client_billed_usd_of(u, m));
        }
        let both: Vec<(f64, f64)> = self
            .usage
            .values()
            .filter_map(|u| Some((u.billed_usd?, u.client_billed_usd?)))
            .collect();
        self.client_billed_usd = both.iter().map(|(_, c)| c).sum();
        let billed_of_both: f64 = both.iter().map(|(b, _)| b).sum();
        self.billed_vs_client =
            (self.client_billed_usd > 0.0).then(|| billed_of_both / self.client_billed_usd);
        self.billed_usd = self.usage.values().filter_map(|u| u.billed_usd).sum();
        self.unpriced_sessions = self
            .usage
            .values()
            .filter(|u| u.requests > 0 && u.billed_usd.is_none())
            .count();
        if self.observe.is_some() {
            self.would_have_saved_tokens = Some(
                self.usage
                    .values()
                    .map(|u| u.observed_tokens.saturating_sub(u.would_send_tokens))
                    .sum(),
            );
        }
    }

    /// Only the sessions of `tenant`.
    pub(crate) fn only(mut self, tenant: &Tenant) -> Stats {
        self.usage.retain(|id, _| tenant.owns_id(id));
        self.sessions = self.usage.len();
        self.sum_shown();
        self
    }
}

#[cfg(test)]
mod tests {
    use super::input_usd_per_token;

    #[test]
    fn a_models_price_is_its_longest_known_prefix() {
        let sonnet = input_usd_per_token("claude-sonnet-4-5-20250929").unwrap();
        assert!((sonnet - 3.0 / 1e6).abs() < 1e-12, "{sonnet}");
        let mini = input_usd_per_token("gpt-5-mini-2025-08-07").unwrap();
        let full = input_usd_per_token("gpt-5").unwrap();
        assert!(mini < full, "gpt-5-mini is not priced as gpt-5");
        assert!(input_usd_per_token("models/gemini-2.5-pro").is_some());
        assert_eq!(input_usd_per_token("my-local-llama"), None);
    }
}
