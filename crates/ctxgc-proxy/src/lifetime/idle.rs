//! Sessions idle past their cache's lifetime, prepared in the background. With events only
//! after a pause (`ctxgc serve` by default, with an engine), the first request after the pause
//! carries the session's prune or compaction, and paid for it in latency (an LLM summary takes
//! seconds). Once the lifetime in force has passed with no new request, the cache is cold
//! whatever comes next: the session's latest request runs through the pipeline again as if the
//! pause were over ([`crate::rewrite::jobs::Purpose::Idle`]), and the event it would run is stored
//! with the session's lineage, so the request that resumes the session finds it ready.
//!
//! A session with keep-alives is not prepared (its cache stays warm). What is held is bounded
//! in sessions and bytes (the least recently active go first); a session is held until its
//! preparation runs or a newer request replaces it.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ctxgc_core::cache_life;
use ctxgc_core::store::SessionId;
use ctxgc_formats::Api;

use crate::lifetime::recent::RecentSessions;

/// Sessions held for preparation, at most.
const MAX_SESSIONS: usize = 32;
/// Bytes of their latest requests held, at most: the most recently active sessions' (about
/// five at 200K tokens). Holding every session's latest request (64 MB) had lifted the soak's
/// resident memory from 90 to 160 MB, and 8 MB its peak to 129 MB: a proxy with many sessions
/// prepares the latest few.
const MAX_BYTES: usize = 4 << 20;

/// `elapsed`, in seconds of a clock whose second lasts `second`: the unit of the providers'
/// cache lifetimes and of a session's pauses (tests shorten the second to see a lifetime
/// pass).
pub(crate) fn clock_secs(elapsed: Duration, second: Duration) -> u64 {
    (elapsed.as_secs_f64() / second.as_secs_f64().max(1e-9)) as u64
}

/// A session's latest request, waiting for its cache to expire.
struct Waiting {
    api: Api,
    /// The request as the client sent it (the pipeline's input).
    raw: Bytes,
    due_at: Instant,
}

/// A preparation to run now.
pub(crate) struct Due {
    pub(crate) session: SessionId,
    pub(crate) api: Api,
    pub(crate) raw: Bytes,
}

/// The sessions waiting for their cache to expire.
pub(crate) struct IdleSessions {
    /// How long a second of the cache lifetimes lasts on this clock (tests shorten it).
    second: Duration,
    waiting: Mutex<RecentSessions<Waiting>>,
}

impl IdleSessions {
    pub(crate) fn new(second: Duration) -> IdleSessions {
        IdleSessions {
            second,
            waiting: Mutex::new(RecentSessions::new(MAX_SESSIONS, MAX_BYTES)),
        }
    }

    /// The session's latest request `raw` (of `api`) was sent at `now`, and the engine counts
    /// its cache cold after `cold_after_secs` idle: it is prepared then, with a margin for a
    /// request already on its way.
    pub(crate) fn note(
        &self,
        session: &SessionId,
        api: Api,
        raw: Bytes,
        cold_after_secs: u64,
        now: Instant,
    ) {
        let Ok(mut waiting) = self.waiting.lock() else {
            return;
        };
        let secs = cold_after_secs.saturating_add(1 + cache_life::KEEPALIVE_MARGIN_SECS);
        let bytes = raw.len();
        let due_at = now + self.second * u32::try_from(secs).unwrap_or(u32::MAX);
        waiting.hold(session, Waiting { api, raw, due_at }, bytes, now);
    }

    /// The session is not prepared (a newer request failed open, it has keep-alives).
    pub(crate) fn forget(&self, session: &SessionId) {
        if let Ok(mut waiting) = self.waiting.lock() {
            waiting.remove(session);
        }
    }

    /// The sessions whose cache has expired by `now`, taken out.
    pub(crate) fn due(&self, now: Instant) -> Vec<Due> {
        let Ok(mut waiting) = self.waiting.lock() else {
            return Vec::new();
        };
        waiting
            .take_where(|w| w.due_at <= now)
            .into_iter()
            .map(|(session, w)| Due {
                session,
                api: w.api,
                raw: w.raw,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_is_due_once_it_is_cold_and_the_margin_passed_and_then_only_once() {
        let idle = IdleSessions::new(Duration::from_millis(1));
        let now = Instant::now();
        let s = SessionId::new("t.s");
        idle.note(&s, Api::Messages, Bytes::from_static(b"{}"), 300, now);
        assert!(idle.due(now + Duration::from_millis(330)).is_empty());
        assert_eq!(idle.due(now + Duration::from_millis(332)).len(), 1);
        assert!(
            idle.due(now + Duration::from_secs(10)).is_empty(),
            "taken out"
        );
        // The hour in force: not due after five minutes.
        idle.note(&s, Api::Messages, Bytes::from_static(b"{}"), 3_600, now);
        assert!(idle.due(now + Duration::from_millis(332)).is_empty());
        // A newer request replaces the older; one that fails open forgets it.
        idle.forget(&s);
        assert!(idle.due(now + Duration::from_secs(10)).is_empty());
    }
}
