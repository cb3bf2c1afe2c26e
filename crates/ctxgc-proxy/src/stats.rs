//! What `/ctxgc/stats` reports: aggregate counters, and the upstream's usage per session
//! (bounded: the least recently active sessions leave first).

use super::*;

/// Per-session usage as the upstream reported it.
#[derive(Debug, Default, Clone, Serialize)]
pub struct SessionUsage {
    /// Requests seen.
    pub requests: u64,
    /// Input tokens reported (uncached).
    pub input_tokens: u64,
    /// Cache reads reported.
    pub cache_read_tokens: u64,
    /// Cache writes reported.
    pub cache_write_tokens: u64,
    /// Output tokens reported.
    pub output_tokens: u64,
    /// ctxgc's own estimate of the latest request's input tokens.
    pub estimated_tokens: u64,
    /// Reported input / ctxgc's estimate, smoothed: scales the engine's token counts for this
    /// session (the upstream's tokenizer, tool definitions and framing as it really counts them).
    pub calibration: Option<f64>,
    /// When it was last active (a counter): the least recently active leave a full table.
    #[serde(skip)]
    pub last_active: u64,
    /// When its latest request came (this replica's clock): a longer pause than the
    /// provider's cache TTL makes the next event free of cache cost.
    #[serde(skip)]
    pub last_request: Option<std::time::Instant>,
}

impl SessionUsage {
    /// Folds one request's reported input into the calibration (exponential moving average,
    /// clamped so one odd report cannot derail the thresholds). It never goes below 1: a prompt
    /// over the window fails outright, an early event only costs a little, so calibration may
    /// only make the engine more careful.
    pub(crate) fn calibrate(&mut self, reported_input: u64) {
        if self.estimated_tokens == 0 || reported_input == 0 {
            return;
        }
        let ratio = (reported_input as f64 / self.estimated_tokens as f64).clamp(1.0, 2.5);
        self.calibration = Some(match self.calibration {
            Some(previous) => 0.7 * previous + 0.3 * ratio,
            None => ratio,
        });
    }
}

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
    /// Sessions seen.
    pub sessions: usize,
    /// Usage per session, as the upstream reported it.
    pub usage: BTreeMap<String, SessionUsage>,
}

pub(crate) fn record_usage(s: &AppState, session: &SessionId, u: usage::Usage) {
    if let Ok(mut sessions) = s.sessions.lock() {
        make_room(&mut sessions, session.as_str());
        let entry = sessions.entry(session.to_string()).or_default();
        entry.last_active = tick();
        entry.requests += 1;
        entry.input_tokens += u.input;
        entry.cache_read_tokens += u.cache_read;
        entry.cache_write_tokens += u.cache_write;
        entry.output_tokens += u.output;
        entry.calibrate(u.input + u.cache_read + u.cache_write);
    }
}

/// Keeps the usage table bounded: before a new session enters a full table, the least
/// recently active tenth leaves.
pub(crate) fn make_room(sessions: &mut BTreeMap<String, SessionUsage>, entering: &str) {
    if sessions.len() < MAX_SESSIONS || sessions.contains_key(entering) {
        return;
    }
    let mut by_age: Vec<(u64, String)> = sessions
        .iter()
        .map(|(id, u)| (u.last_active, id.clone()))
        .collect();
    by_age.sort_unstable();
    for (_, id) in by_age.into_iter().take(MAX_SESSIONS / 10) {
        sessions.remove(&id);
    }
}

/// A clock for "least recently active": a counter, not the time (deterministic).
pub(crate) fn tick() -> u64 {
    static CLOCK: AtomicU64 = AtomicU64::new(0);
    CLOCK.fetch_add(1, Ordering::Relaxed)
}
