//! The most recently active sessions' held requests, bounded in sessions and bytes: what
//! keep-alives and idle preparation keep of each session between its requests. When a new
//! request does not fit, the sessions active least recently leave first; the bytes held are a
//! running total, so holding a request costs one pass over the held sessions only when one
//! must leave.

use std::collections::HashMap;
use std::time::Instant;

use ctxgc_core::store::SessionId;

/// One session's held value.
struct Held<V> {
    value: V,
    bytes: usize,
    /// When the session's latest request was sent.
    active_at: Instant,
}

/// At most `max_sessions` sessions' values, of at most `max_bytes` in all.
pub(crate) struct RecentSessions<V> {
    held: HashMap<SessionId, Held<V>>,
    bytes: usize,
    max_sessions: usize,
    max_bytes: usize,
}

impl<V> RecentSessions<V> {
    pub(crate) fn new(max_sessions: usize, max_bytes: usize) -> RecentSessions<V> {
        RecentSessions {
            held: HashMap::new(),
            bytes: 0,
            max_sessions: max_sessions.max(1),
            max_bytes,
        }
    }

    /// Holds `value` (weighing `bytes`) for `session`, active at `active_at`, in place of what
    /// it held. Returns false, holding nothing for the session, when `value` alone is over the
    /// byte bound.
    pub(crate) fn hold(
        &mut self,
        session: &SessionId,
        value: V,
        bytes: usize,
        active_at: Instant,
    ) -> bool {
        self.remove(session);
        if bytes > self.max_bytes {
            return false;
        }
        while !self.held.is_empty()
            && (self.held.len() >= self.max_sessions || self.bytes + bytes > self.max_bytes)
        {
            let least_recent = self
                .held
                .iter()
                .min_by_key(|(_, h)| h.active_at)
                .map(|(k, _)| k.clone());
            match least_recent {
                Some(k) => {
                    self.remove(&k);
                }
                None => break,
            }
        }
        self.bytes += bytes;
        self.held.insert(
            session.clone(),
            Held {
                value,
                bytes,
                active_at,
            },
        );
        true
    }

    /// What `session` held, taken out.
    pub(crate) fn remove(&mut self, session: &SessionId) -> Option<V> {
        let h = self.held.remove(session)?;
        self.bytes -= h.bytes;
        Some(h.value)
    }

    /// What `session` holds.
    pub(crate) fn get(&self, session: &SessionId) -> Option<&V> {
        self.held.get(session).map(|h| &h.value)
    }

    /// Sessions held.
    pub(crate) fn len(&self) -> usize {
        self.held.len()
    }

    /// Each held session with its value and when it was last active.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (&SessionId, &mut V, Instant)> {
        self.held
            .iter_mut()
            .map(|(k, h)| (k, &mut h.value, h.active_at))
    }

    /// The sessions whose value `take` picks, taken out.
    pub(crate) fn take_where(&mut self, mut take: impl FnMut(&V) -> bool) -> Vec<(SessionId, V)> {
        let picked: Vec<SessionId> = self
            .held
            .iter()
            .filter(|(_, h)| take(&h.value))
            .map(|(k, _)| k.clone())
            .collect();
        picked
            .into_iter()
            .filter_map(|k| {
                let v = self.remove(&k)?;
                Some((k, v))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_least_recently_active_leave_first_and_the_bytes_stay_bounded() {
        let mut recent = RecentSessions::new(3, 1_000);
        let start = Instant::now();
        for i in 0..10u64 {
            let s = SessionId::new(format!("t.s{i}"));
            assert!(recent.hold(&s, i, 300, start + Duration::from_secs(i)));
            assert!(recent.bytes <= 1_000);
        }
        assert_eq!(recent.len(), 3);
        assert!(recent.get(&SessionId::new("t.s9")).is_some());
        assert!(recent.get(&SessionId::new("t.s6")).is_none(), "the bytes");
        assert!(
            !recent.hold(&SessionId::new("t.big"), 99, 2_000, start),
            "over the bound alone"
        );
        // A session held again replaces its value and its weight.
        assert!(recent.hold(&SessionId::new("t.s9"), 90, 100, start));
        assert_eq!(recent.bytes, 700);
        let taken = recent.take_where(|v| *v >= 90);
        assert_eq!(taken.len(), 1);
        assert_eq!(recent.bytes, 600);
        assert_eq!(recent.remove(&SessionId::new("t.s8")), Some(8));
        assert_eq!(recent.bytes, 300);
    }
}
