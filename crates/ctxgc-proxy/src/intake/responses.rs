//! Which session each Responses response answered (bounded): a request that continues one
//! with `previous_response_id` stays in that session.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use ctxgc_core::store::SessionId;

/// Response ids remembered, at most (the oldest are forgotten first).
const MAX_RESPONSES: usize = 100_000;

/// Response id -> session.
#[derive(Default)]
pub(crate) struct ResponseIndex {
    inner: Mutex<(HashMap<String, String>, VecDeque<String>)>,
}

impl ResponseIndex {
    /// Remembers that response `id` answered `session`.
    pub(crate) fn remember(&self, id: String, session: &SessionId) {
        if let Ok(mut guard) = self.inner.lock() {
            let (map, order) = &mut *guard;
            if map.len() >= MAX_RESPONSES
                && let Some(oldest) = order.pop_front()
            {
                map.remove(&oldest);
            }
            if map.insert(id.clone(), session.to_string()).is_none() {
                order.push_back(id);
            }
        }
    }

    /// The session response `id` answered, when remembered.
    pub(crate) fn session_of(&self, id: &str) -> Option<SessionId> {
        self.inner
            .lock()
            .ok()?
            .0
            .get(id)
            .cloned()
            .map(SessionId::new)
    }
}
