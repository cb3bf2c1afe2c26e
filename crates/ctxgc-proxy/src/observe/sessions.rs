//! The session table: per session, the upstream's reported usage, ctxgc's estimate and the
//! calibration between them, and when its latest request came. Bounded: before a new session
//! enters a full table, the least recently active tenth leaves.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ctxgc_core::store::SessionId;
use ctxgc_core::tokens::Calibration;
use serde::Serialize;

use ctxgc_formats::wire_api::Usage;

/// Sessions the table keeps, at most (the least recently active go first).
pub(crate) const MAX_SESSIONS: usize = 10_000;

/// Requests and stored originals a session keeps for the dashboard, at most: with the compact
/// records below, about 6 KB a session (the table keeps at most `MAX_SESSIONS`).
const HISTORY: usize = 100;
const TRIMS: usize = 50;

/// One request of a session, as the dashboard draws it.
#[derive(Debug, Clone, Serialize)]
pub struct RequestPoint {
    /// Its number in the session (this replica's count).
    pub n: u32,
    /// Bytes of the body the client sent (bodies are far under 4 GB: `--max-body-bytes`).
    pub received_bytes: u32,
    /// Bytes of the body forwarded.
    pub sent_bytes: u32,
    /// The engine's event on it, if any (`prune`, `compaction`).
    pub event: Option<&'static str>,
    /// Input tokens the upstream reported (uncached, cache reads, cache writes), once it did.
    pub reported: Option<[u32; 3]>,
}

/// An original stored while forwarding a request: what a trim or an event hid.
#[derive(Debug, Clone, Serialize)]
pub struct TrimRecord {
    /// The request it came with.
    pub n: u32,
    /// Its recall id.
    #[serde(serialize_with = "as_text")]
    pub id: ctxgc_core::ContentId,
    /// Its size in bytes.
    pub bytes: u32,
    /// The size of what entered the history instead, when a trim hid it.
    pub kept_bytes: Option<u32>,
    /// Why an event hid it (pruned with its reason and the relevance table's estimate, or
    /// summarised); `None` for a trim at insertion (`kept_bytes`) or an original a repeat
    /// pointer names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<ctxgc_core::engine::event::Why>,
}

/// An original a request stored: its id, size, what entered instead when a trim hid it, and
/// why an event hid it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FreshOriginal {
    pub(crate) id: ctxgc_core::ContentId,
    pub(crate) bytes: usize,
    pub(crate) kept_bytes: Option<usize>,
    pub(crate) why: Option<ctxgc_core::engine::event::Why>,
}

fn as_text<S: serde::Serializer>(id: &ctxgc_core::ContentId, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(id)
}

fn small(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// A session as the dashboard shows it: its usage, its latest requests and what was hidden.
#[derive(Debug, Clone, Serialize)]
pub struct SessionDetail {
    /// The session id.
    pub id: String,
    /// Its usage.
    pub usage: SessionUsage,
    /// Its latest requests, oldest first.
    pub history: Vec<RequestPoint>,
    /// What its requests hid, oldest first.
    pub trims: Vec<TrimRecord>,
}

/// One forwarded request, as the session table records it.
pub(crate) struct Forwarding<'a> {
    pub(crate) api: &'static str,
    pub(crate) model: Option<&'a str>,
    pub(crate) received_bytes: usize,
    pub(crate) sent_bytes: usize,
    pub(crate) event: Option<&'static str>,
    pub(crate) fresh: &'a [FreshOriginal],
}

/// Per-session usage as the upstream reported it.
#[derive(Debug, Default, Clone, Serialize)]
pub struct SessionUsage {
    /// The API of its latest request.
    pub api: Option<&'static str>,
    /// The model of its latest request.
    pub model: Option<String>,
    /// Bytes of the bodies the client sent.
    pub received_bytes: u64,
    /// Bytes of the bodies forwarded.
    pub sent_bytes: u64,
    /// Requests seen.
    pub requests: u64,
    /// Input tokens reported (uncached).
    pub input_tokens: u64,
    /// Cache reads reported.
    pub cache_read_tokens: u64,
    /// Cache writes reported.
    pub cache_write_tokens: u64,
    /// Of those, writes with the one-hour TTL (billed at their own price).
    #[serde(skip_serializing_if = "is_zero")]
    pub cache_write_1h_tokens: u64,
    /// Requests on which ctxgc asked for the one-hour TTL (`[cache] ttl`).
    #[serde(skip_serializing_if = "is_zero")]
    pub ttl_1h_requests: u64,
    /// Requests on which ctxgc asked for the 24-hour retention (`[cache] retention`).
    #[serde(skip_serializing_if = "is_zero")]
    pub retention_24h_requests: u64,
    /// Requests on which ctxgc put OpenAI's explicit breakpoint at the end of the stable prefix
    /// (GPT-5.6 on, `[cache] breakpoints`).
    #[serde(skip_serializing_if = "is_zero")]
    pub breakpoint_requests: u64,
    /// What the upstream billed for what was sent, at the replay lab's prices of the session's
    /// model (USD): uncached input, cache reads, cache writes (one-hour ones at their price) and
    /// output, as it reported them. `None`: the model has no price in the table (not $0).
    pub billed_usd: Option<f64>,
    /// Output tokens reported.
    pub output_tokens: u64,
    /// The client's own requests, served by the lab's cache model of the session's provider
    /// (what they would have been billed without ctxgc; the client bill): requests,
    /// then uncached input, cache reads and writes (one-hour ones apart), ctxgc's estimates.
    #[serde(skip_serializing_if = "is_zero")]
    pub client_requests: u64,
    #[serde(skip_serializing_if = "is_zero")]
    #[allow(missing_docs)]
    pub client_input_tokens: u64,
    #[serde(skip_serializing_if = "is_zero")]
    #[allow(missing_docs)]
    pub client_cache_read_tokens: u64,
    #[serde(skip_serializing_if = "is_zero")]
    #[allow(missing_docs)]
    pub client_cache_write_tokens: u64,
    #[serde(skip_serializing_if = "is_zero")]
    #[allow(missing_docs)]
    pub client_cache_write_1h_tokens: u64,
    /// The client's requests not simulated (a body not of its API's shape, or more requests at
    /// once than the simulation keeps up with): the session's client figure is then unknown.
    #[serde(skip_serializing_if = "is_zero")]
    pub client_unsimulated: u64,
    /// What the client's own requests would have been billed at the lab's prices (USD), with
    /// the output the upstream reported; `None` without a price, without a simulated request,
    /// or when one of its requests was not simulated.
    pub client_billed_usd: Option<f64>,
    /// Keep-alive requests ctxgc sent for the session while it was idle (`[cache] keepalive`);
    /// their usage is in the counts above, as the upstream billed it.
    #[serde(skip_serializing_if = "is_zero")]
    pub keepalives: u64,
    /// Of the cache reads above, those of keep-alives.
    #[serde(skip_serializing_if = "is_zero")]
    pub keepalive_cache_read_tokens: u64,
    /// ctxgc's own estimate of the latest request's input tokens.
    pub estimated_tokens: u64,
    /// The window that estimate was planned against.
    #[serde(skip)]
    estimated_window: u64,
    /// The largest prompt the upstream answered for the session, when it was larger than the
    /// window ctxgc assumed: the model's window is at least that (a model run with a context
    /// larger than the table's), and ctxgc does not cut to the smaller one.
    #[serde(skip_serializing_if = "is_zero")]
    pub answered_past_window: u64,
    /// Reported input / ctxgc's estimate, smoothed: scales the engine's token counts for this
    /// session (the upstream's tokenizer, tool definitions and framing as it really counts them).
    pub calibration: Calibration,
    /// Observe mode: requests observed.
    #[serde(skip_serializing_if = "is_zero")]
    pub observed_requests: u64,
    /// Observe mode: prompt tokens of the requests as the client sent them (ctxgc's counts).
    #[serde(skip_serializing_if = "is_zero")]
    pub observed_tokens: u64,
    /// Observe mode: prompt tokens of what ctxgc would have sent instead.
    #[serde(skip_serializing_if = "is_zero")]
    pub would_send_tokens: u64,
    #[serde(skip)]
    history: VecDeque<RequestPoint>,
    #[serde(skip)]
    trims: VecDeque<TrimRecord>,
    #[serde(skip)]
    forwarded: u64,
    /// When it was last active (a counter): the least recently active leave a full table.
    #[serde(skip)]
    last_active: u64,
    /// When its latest request came (this replica's clock): a longer pause than the
    /// provider's cache TTL makes the next event free of cache cost.
    #[serde(skip)]
    last_request: Option<Instant>,
    /// What the session's cache lifetime depends on (its pauses, what it asked for last).
    #[serde(skip)]
    life: crate::lifetime::fields::LifeState,
    /// The session's event for its current pause was prepared while it was idle: the request
    /// that resumes it carries that one and runs none of its own.
    #[serde(skip)]
    prepared_in_pause: bool,
    /// Its client asked for the model's long context (Anthropic's `context-1m` beta): work
    /// done for it without a request at hand (while it is idle) plans at that window too.
    #[serde(skip)]
    long_context: bool,
    /// A hash of the fixed part its latest request was sent with (tools, thinking settings,
    /// model: what the provider's cache of every message depends on).
    #[serde(skip)]
    fixed_part: Option<u64>,
}

/// What the session table says of a request as it arrives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Arrival {
    /// Seconds since the session's previous request, when it had one.
    pub(crate) idle_secs: Option<u64>,
    /// The client changed the fixed part since that request.
    pub(crate) fixed_changed: bool,
    /// The session's event for the pause now ending was prepared while it was idle.
    pub(crate) prepared: bool,
}

/// Every session's usage, bounded.
#[derive(Default)]
pub(crate) struct SessionTable {
    sessions: Mutex<BTreeMap<String, SessionUsage>>,
    /// A clock for "least recently active": a counter, not the time (deterministic).
    clock: AtomicU64,
}

impl SessionTable {
    /// Runs `f` on the entry of `session`, made (in a table with room) when new.
    fn with<T>(&self, session: &SessionId, f: impl FnOnce(&mut SessionUsage) -> T) -> Option<T> {
        let mut sessions = self.sessions.lock().ok()?;
        make_room(&mut sessions, session.as_str());
        let entry = sessions.entry(session.to_string()).or_default();
        entry.last_active = self.clock.fetch_add(1, Ordering::Relaxed);
        Some(f(entry))
    }

    /// A request of the session arrives now, sent with the fixed part `fixed` (hashed); it is
    /// the session's latest from now on; its pause is counted on a clock whose second lasts
    /// `second`. A session not in the table yet is not entered (it enters when its estimate is
    /// recorded).
    pub(crate) fn arrive(&self, session: &SessionId, fixed: u64, second: Duration) -> Arrival {
        let Ok(mut sessions) = self.sessions.lock() else {
            return Arrival::default();
        };
        let Some(entry) = sessions.get_mut(session.as_str()) else {
            return Arrival::default();
        };
        let now = Instant::now();
        Arrival {
            idle_secs: entry
                .last_request
                .replace(now)
                .map(|t| crate::lifetime::idle::clock_secs(now.duration_since(t), second)),
            fixed_changed: entry
                .fixed_part
                .replace(fixed)
                .is_some_and(|was| was != fixed),
            // The pause ends with this request: the next one is judged on its own.
            prepared: std::mem::take(&mut entry.prepared_in_pause),
        }
    }

    /// The session's event for this pause ran while it was idle, in a preparation that began
    /// at `began`; not when a request of the session came since (it ran its own).
    pub(crate) fn mark_prepared(&self, session: &SessionId, began: Instant) {
        if let Ok(mut sessions) = self.sessions.lock()
            && let Some(entry) = sessions.get_mut(session.as_str())
            && entry.last_request.is_none_or(|t| t <= began)
        {
            entry.prepared_in_pause = true;
        }
    }

    /// What the session's next keep-alive depends on, with `kept_if_cold` from the pipeline
    /// (the session enters the table).
    pub(crate) fn keepalive_lifetime(
        &self,
        session: &SessionId,
        kept_if_cold: f64,
    ) -> Option<crate::lifetime::keepalive::Lifetime> {
        self.with(session, |entry| {
            let sent = u32::try_from(entry.keepalives).unwrap_or(u32::MAX);
            entry.life.for_keepalive(sent, kept_if_cold)
        })
    }

    /// Runs `f` on the session's cache-lifetime state (the session enters the table).
    pub(crate) fn life<T>(
        &self,
        session: &SessionId,
        f: impl FnOnce(&mut crate::lifetime::fields::LifeState) -> T,
    ) -> Option<T> {
        self.with(session, |entry| f(&mut entry.life))
    }

    /// Counts a cache field ctxgc set on one of the session's requests (`ttl_1h`,
    /// `retention_24h`, `breakpoint`).
    pub(crate) fn record_cache_field(&self, session: &SessionId, what: &str) {
        self.with(session, |entry| match what {
            "ttl_1h" => entry.ttl_1h_requests += 1,
            "retention_24h" => entry.retention_24h_requests += 1,
            "breakpoint" => entry.breakpoint_requests += 1,
            _ => {}
        });
    }

    /// Records ctxgc's estimate of the session's latest request.
    pub(crate) fn record_estimate(&self, session: &SessionId, tokens: usize, window: u64) {
        self.with(session, |entry| {
            entry.estimated_tokens = tokens as u64;
            entry.estimated_window = window;
            entry.last_request.get_or_insert_with(Instant::now);
        });
    }

    /// The largest prompt the upstream answered for the session past the window ctxgc
    /// assumed (0: none): the window is at least that.
    pub(crate) fn answered_past_window(&self, session: &SessionId) -> u64 {
        self.sessions
            .lock()
            .ok()
            .and_then(|s| s.get(session.as_str()).map(|u| u.answered_past_window))
            .unwrap_or(0)
    }

    /// A request of the session asked for the model's long context.
    pub(crate) fn note_long_context(&self, session: &SessionId) {
        self.with(session, |entry| entry.long_context = true);
    }

    /// Whether a request of the session asked for the model's long context.
    pub(crate) fn long_context(&self, session: &SessionId) -> bool {
        self.sessions
            .lock()
            .ok()
            .and_then(|s| s.get(session.as_str()).map(|u| u.long_context))
            .unwrap_or(false)
    }

    /// The session's calibration (none learned yet when unknown).
    pub(crate) fn calibration(&self, session: &SessionId) -> Calibration {
        self.sessions
            .lock()
            .ok()
            .and_then(|s| s.get(session.as_str()).map(|u| u.calibration))
            .unwrap_or_default()
    }

    /// Records the usage the upstream reported for one of the session's requests.
    pub(crate) fn record_usage(&self, session: &SessionId, u: Usage) {
        self.with(session, |entry| {
            entry.requests += 1;
            entry.input_tokens += u.input;
            entry.cache_read_tokens += u.cache_read;
            entry.cache_write_tokens += u.cache_write;
            entry.cache_write_1h_tokens += u.cache_write_1h.min(u.cache_write);
            entry.output_tokens += u.output;
            let reported = u.input + u.cache_read + u.cache_write;
            // A prompt the upstream took although it is past the window ctxgc planned for says
            // the window is larger, not that ctxgc's counts are low: it calibrates nothing.
            if entry.estimated_window > 0 && reported > entry.estimated_window {
                entry.answered_past_window = entry.answered_past_window.max(reported);
            } else {
                entry
                    .calibration
                    .observe(entry.estimated_tokens as usize, reported as usize);
            }
            if let Some(point) = entry.history.back_mut().filter(|p| p.reported.is_none()) {
                point.reported = Some([small(u.input), small(u.cache_read), small(u.cache_write)]);
            }
        });
    }

    /// Records how the lab's cache model served one of the client's own requests.
    pub(crate) fn record_client_served(&self, session: &SessionId, s: ctxgc_replay::cache::Served) {
        self.with(session, |entry| {
            entry.client_requests += 1;
            entry.client_input_tokens += s.uncached as u64;
            entry.client_cache_read_tokens += s.cached as u64;
            entry.client_cache_write_tokens += s.written as u64;
            entry.client_cache_write_1h_tokens += s.written_long.min(s.written) as u64;
        });
    }

    /// Records a client request that was not simulated.
    pub(crate) fn record_client_unsimulated(&self, session: &SessionId) {
        self.with(session, |entry| entry.client_unsimulated += 1);
    }

    /// Records a keep-alive ctxgc sent for the session, with the usage the upstream reported:
    /// billed like any request, but not one of the client's (no request count, no calibration).
    pub(crate) fn record_keepalive(&self, session: &SessionId, u: Option<Usage>) {
        self.with(session, |entry| {
            entry.keepalives += 1;
            if let Some(u) = u {
                entry.input_tokens += u.input;
                entry.cache_read_tokens += u.cache_read;
                entry.keepalive_cache_read_tokens += u.cache_read;
                entry.cache_write_tokens += u.cache_write;
                entry.cache_write_1h_tokens += u.cache_write_1h.min(u.cache_write);
                entry.output_tokens += u.output;
            }
        });
    }

    /// Records a forwarded request for the dashboard: its sizes, its event, what it hid.
    pub(crate) fn record_forwarded(&self, session: &SessionId, f: &Forwarding<'_>) {
        self.with(session, |entry| {
            entry.api = Some(f.api);
            if let Some(model) = f.model
                && entry.model.as_deref() != Some(model)
            {
                entry.model = Some(model.to_owned());
            }
            entry.received_bytes += f.received_bytes as u64;
            entry.sent_bytes += f.sent_bytes as u64;
            entry.forwarded += 1;
            let n = small(entry.forwarded);
            if entry.history.len() == HISTORY {
                entry.history.pop_front();
            }
            entry.history.push_back(RequestPoint {
                n,
                received_bytes: small(f.received_bytes as u64),
                sent_bytes: small(f.sent_bytes as u64),
                event: f.event,
                reported: None,
            });
            for fresh in f.fresh {
                if entry.trims.len() == TRIMS {
                    entry.trims.pop_front();
                }
                entry.trims.push_back(TrimRecord {
                    n,
                    id: fresh.id,
                    bytes: small(fresh.bytes as u64),
                    kept_bytes: fresh.kept_bytes.map(|k| small(k as u64)),
                    why: fresh.why,
                });
            }
        });
    }

    /// One session in full, when the table has it.
    pub(crate) fn detail(&self, session: &str) -> Option<SessionDetail> {
        let sessions = self.sessions.lock().ok()?;
        let entry = sessions.get(session)?;
        Some(SessionDetail {
            id: session.to_owned(),
            usage: entry.clone(),
            history: entry.history.iter().cloned().collect(),
            trims: entry.trims.iter().cloned().collect(),
        })
    }

    /// Records an observed request: its prompt tokens as sent and as ctxgc would have sent it.
    pub(crate) fn record_observed(&self, session: &SessionId, sent: usize, would: usize) {
        self.with(session, |entry| {
            entry.observed_requests += 1;
            entry.observed_tokens += sent as u64;
            entry.would_send_tokens += would as u64;
        });
    }

    /// Sessions in the table.
    pub(crate) fn len(&self) -> usize {
        self.sessions.lock().map_or(0, |s| s.len())
    }

    /// Every session's usage now.
    pub(crate) fn snapshot(&self) -> BTreeMap<String, SessionUsage> {
        self.sessions.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Keeps the table bounded: before a new session enters a full table, the least recently
/// active tenth leaves.
fn make_room(sessions: &mut BTreeMap<String, SessionUsage>, entering: &str) {
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_usage_table_is_bounded() {
        let table = SessionTable::default();
        for i in 0..MAX_SESSIONS + 5 {
            table.record_estimate(&SessionId::new(format!("s{i}")), 1, 32_000);
        }
        let sessions = table.snapshot();
        assert!(sessions.len() <= MAX_SESSIONS);
        assert!(sessions.contains_key(&format!("s{}", MAX_SESSIONS + 4)));
        assert!(
            !sessions.contains_key("s0"),
            "the least recently active left"
        );
    }

    /// A prompt the upstream answered although it is past the window ctxgc planned for says
    /// the window is larger: it raises the session's window and calibrates nothing (a gateway
    /// that reported 100K tokens for every request had every request cut as if past 32K).
    #[test]
    fn a_prompt_answered_past_the_window_teaches_the_window_not_the_counts() {
        let table = SessionTable::default();
        let s = SessionId::new("s");
        let usage = |input| Usage {
            input,
            cache_read: 0,
            cache_write: 0,
            cache_write_1h: 0,
            output: 1,
        };
        table.record_estimate(&s, 10_000, 32_000);
        table.record_usage(&s, usage(100_000));
        assert_eq!(table.calibration(&s).known(), None);
        assert_eq!(table.answered_past_window(&s), 100_000);
        table.record_usage(&s, usage(12_000));
        assert_eq!(table.calibration(&s).known(), Some(1.2));
        assert_eq!(table.answered_past_window(&s), 100_000, "it stays");
    }
}
