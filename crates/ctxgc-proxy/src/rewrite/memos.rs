//! What the proxy remembers between requests to avoid repeating work, each bounded by bytes:
//! the originals this process already committed to the store, the trimmed turns, the token
//! counts of messages, and each session's latest full count of a prompt.

use std::sync::{Arc, Mutex};

use ctxgc_core::ContentId;
use ctxgc_core::bounded::BoundedMemo;
use ctxgc_core::store::SessionId;
use ctxgc_core::tokens::{CountMemo, TokenCounter, TokenSettings};
use ctxgc_formats::Api;

use crate::rewrite::counted::Counted;
use crate::rewrite::request::TrimMemo;

/// Bytes of committed-original keys this process remembers, at most.
const MAX_COMMITTED_BYTES: usize = 4 << 20;
/// Bytes of memoised token counts, at most (about 170,000 messages).
const MAX_COUNT_BYTES: usize = 8 << 20;
/// Bytes of the sessions' latest full counts, at most (about 8,000 sessions).
const MAX_COUNTED_BYTES: usize = 1 << 20;

/// An original committed this long ago is written again when a request still refers to it:
/// that touches it in the store, whose bound evicts what was touched longest ago first, so
/// what sessions still use stays.
const RECOMMIT_AFTER: std::time::Duration = std::time::Duration::from_secs(600);

/// The memos, shared by every request.
pub(crate) struct Memos {
    /// Originals committed by this process, and when: resent histories do not write them
    /// again (for [`RECOMMIT_AFTER`]).
    committed: Mutex<BoundedMemo<(SessionId, ContentId), std::time::Instant>>,
    /// Trimmed turns, by content.
    pub(crate) trims: TrimMemo,
    /// Token counts of the sessions' messages, shared by their lineages.
    counts: Arc<CountMemo>,
    /// Each session's latest request counted in full, which bounds its next ones' counts.
    counted: Mutex<BoundedMemo<SessionId, Counted>>,
}

impl Default for Memos {
    fn default() -> Self {
        Memos {
            committed: Mutex::new(BoundedMemo::new(MAX_COMMITTED_BYTES, |(session, _), _| {
                64 + session.as_str().len()
            })),
            trims: TrimMemo::default(),
            counts: Arc::new(CountMemo::new(MAX_COUNT_BYTES)),
            counted: Mutex::new(BoundedMemo::new(MAX_COUNTED_BYTES, |session, _| {
                64 + session.as_str().len() + size_of::<Counted>()
            })),
        }
    }
}

impl Memos {
    /// Whether this process already committed the original `id` of `session` to the store.
    pub(crate) fn is_committed(&self, session: &SessionId, id: ContentId) -> bool {
        self.committed.lock().is_ok_and(|mut c| {
            c.get(&(session.clone(), id))
                .is_some_and(|at| at.elapsed() < RECOMMIT_AFTER)
        })
    }

    /// Forgets which originals were committed: the store lost some (it evicted them, or it
    /// restarted empty), and requests that still refer to them write them again.
    pub(crate) fn forget_committed(&self) {
        if let Ok(mut c) = self.committed.lock() {
            c.clear();
        }
    }

    /// Notes originals committed to the store (forgetting one later only costs one idempotent
    /// store write).
    pub(crate) fn note_committed(&self, session: &SessionId, ids: impl Iterator<Item = ContentId>) {
        if let Ok(mut c) = self.committed.lock() {
            let now = std::time::Instant::now();
            for id in ids {
                c.insert((session.clone(), id), now);
            }
        }
    }

    /// The session's latest request counted in full.
    pub(crate) fn counted(&self, session: &SessionId) -> Option<Counted> {
        self.counted.lock().ok()?.get(session).copied()
    }

    /// A request of the session was counted in full.
    pub(crate) fn note_counted(&self, session: &SessionId, counted: Counted) {
        if let Ok(mut c) = self.counted.lock() {
            c.insert(session.clone(), counted);
        }
    }

    /// A token counter for requests of `api` that shares the memoised counts.
    pub(crate) fn counter(&self, api: Api, settings: &TokenSettings) -> TokenCounter {
        TokenCounter::new(api.wire().family(), settings.clone()).sharing(self.counts.clone())
    }
}
