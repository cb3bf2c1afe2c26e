//! The JSON of `/ctxgc/stats`: the counters, and the upstream's usage per session.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::metrics::Totals;
use crate::sessions::SessionUsage;

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
    /// Observe mode, when on: what the observer did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observe: Option<crate::observe::ObserveTotals>,
    /// Observe mode: prompt tokens ctxgc would have saved over the sessions shown (ctxgc's
    /// counts of what was sent minus what it would have sent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub would_have_saved_tokens: Option<u64>,
    /// Sessions seen.
    pub sessions: usize,
    /// Usage per session, as the upstream reported it.
    pub usage: BTreeMap<String, SessionUsage>,
}

impl Stats {
    /// The statistics of these counters and sessions.
    pub(crate) fn new(
        t: Totals,
        usage: BTreeMap<String, SessionUsage>,
        observe: Option<crate::observe::ObserveTotals>,
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
            observe,
            would_have_saved_tokens: None,
            sessions: usage.len(),
            usage,
        };
        stats.sum_observed();
        stats
    }

    fn sum_observed(&mut self) {
        if self.observe.is_some() {
            self.would_have_saved_tokens = Some(
                self.usage
                    .values()
                    .map(|u| u.observed_tokens.saturating_sub(u.would_send_tokens))
                    .sum(),
            );
        }
    }

    /// Only the sessions whose ids start with `prefix` (one tenant's).
    pub(crate) fn only(mut self, prefix: &str) -> Stats {
        self.usage.retain(|id, _| id.starts_with(prefix));
        self.sessions = self.usage.len();
        self.sum_observed();
        self
    }
}
