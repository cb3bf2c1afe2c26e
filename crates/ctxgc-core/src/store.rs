//! Where originals live, so nothing trimmed, pruned or summarised is lost.
//!
//! The engine writes every original before the trimmed text that refers to it is used. The
//! traits are synchronous, take `&self` and are `Sync`: one store serves every request of a
//! server at once, and a backend serialises only what it must, for as long as one operation
//! lasts. Originals are keyed by session and content id, small states by a typed [`StateKey`].
//! This crate provides an in-memory store, `ctxgc-store` the SQLite and Redis ones.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::RwLock;
use std::time::Duration;

use crate::content_id::ContentId;

/// Why a store operation failed. The proxy fails open on all of them; what differs is what a
/// backend does with its connection and whether a retry is worth it.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The operation did not finish within its deadline (a stalled server, a database locked
    /// by another process).
    #[error("{backend}: {what} timed out after {after:?}")]
    Timeout {
        /// Which store.
        backend: &'static str,
        /// What was being done.
        what: String,
        /// The deadline.
        after: Duration,
    },
    /// The store could not be reached or its connection broke.
    #[error("{backend}: {message}")]
    Unavailable {
        /// Which store.
        backend: &'static str,
        /// What happened.
        message: String,
    },
    /// The store answered with an error (full disk, a constraint, a server error reply).
    #[error("{backend}: {message}")]
    Backend {
        /// Which store.
        backend: &'static str,
        /// What it said.
        message: String,
    },
    /// What was read back is not what was written (not UTF-8, not a known format).
    #[error("{backend}: stored data is unreadable: {message}")]
    Corrupt {
        /// Which store.
        backend: &'static str,
        /// What is wrong with it.
        message: String,
    },
}

impl StoreError {
    /// An error the backend reported.
    pub fn backend(backend: &'static str, message: impl fmt::Display) -> StoreError {
        StoreError::Backend {
            backend,
            message: message.to_string(),
        }
    }
}

/// The session an original or a state belongs to. Stores file everything under it; which text
/// becomes a session id is the caller's business (the proxy derives it from the tenant and the
/// client's signals, so no client-chosen text reaches it).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionId(String);

impl SessionId {
    /// A session id.
    pub fn new(id: impl Into<String>) -> SessionId {
        SessionId(id.into())
    }

    /// As filed.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Which small state: each kind has its own namespace, so no session id can name another
/// kind's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateKey<'a> {
    /// The engine's compaction lineage of a session.
    Lineage(&'a SessionId),
    /// The agent tools' state of a session (the model's trims and recalls).
    Agent(&'a SessionId),
    /// A store-wide value of the server (its tenant secret); never expires.
    Server(&'static str),
}

impl StateKey<'_> {
    /// The name the state is filed under: `lineage/{session}`, `agent/{session}` or
    /// `ctxgc.{name}`. A session id cannot spell another kind's prefix, and server names (no
    /// `/`) cannot collide with session states (always one).
    pub fn name(&self) -> String {
        match self {
            StateKey::Lineage(s) => format!("lineage/{s}"),
            StateKey::Agent(s) => format!("agent/{s}"),
            StateKey::Server(name) => format!("ctxgc.{name}"),
        }
    }

    /// Whether retention may delete it.
    pub fn expires(&self) -> bool {
        !matches!(self, StateKey::Server(_))
    }
}

/// Keeps originals of tool outputs.
pub trait OriginalStore: Send + Sync {
    /// Saves an original; saving the same id twice is harmless.
    fn put(&self, session: &SessionId, id: ContentId, text: &str) -> Result<(), StoreError> {
        self.put_all(session, &[(id, text)])
    }
    /// Saves several originals of one session, in one transaction or round trip where the
    /// backend has them; when it returns `Ok`, all are saved.
    fn put_all(
        &self,
        session: &SessionId,
        originals: &[(ContentId, &str)],
    ) -> Result<(), StoreError>;
    /// Loads an original.
    fn get(&self, session: &SessionId, id: ContentId) -> Result<Option<String>, StoreError>;
    /// Loads an original by its id alone, from a session whose id starts with `scope` (`""`:
    /// any session), with the session that filed it. For callers shown an id without the
    /// session behind it (the MCP server, `ctxgc recall` without `--session`); a scope of the
    /// caller's tenant (`{tenant}.`) keeps them within their own sessions. An id is the hash of
    /// the content, so any session holding it holds the same text. Stores that cannot look an
    /// id up find nothing.
    fn find(&self, scope: &str, id: ContentId) -> Result<Option<(SessionId, String)>, StoreError> {
        let _ = (scope, id);
        Ok(None)
    }
    /// Deletes what was last written longer ago than `older_than` (originals and session
    /// states, not server states); returns how many went. Stores whose entries expire by
    /// themselves, or are never kept, delete nothing.
    fn expire(&self, older_than: Duration) -> Result<u64, StoreError> {
        let _ = older_than;
        Ok(0)
    }
    /// How full the store is, for stores with a size bound (`None`: unbounded, or bounded by
    /// the server itself, as Redis's `maxmemory`).
    fn usage(&self) -> Option<StoreUsage> {
        None
    }
}

/// How full a bounded store is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreUsage {
    /// Bytes of originals held.
    pub bytes: u64,
    /// The bound.
    pub max_bytes: u64,
    /// Originals evicted to keep within it, since the store was opened.
    pub evicted: u64,
}

/// A bounded store keeps within its bound by evicting down to this share of it, so that it
/// does not evict on every write once full.
pub const EVICT_TO: f64 = 0.9;

/// Keeps small states (the proxy's compaction lineage and agent state), so that several proxy
/// replicas, or a restarted one, continue a session where it was.
pub trait StateStore: Send + Sync {
    /// Saves a state, replacing the previous one.
    fn put_state(&self, key: StateKey<'_>, state: &str) -> Result<(), StoreError>;
    /// Loads a state.
    fn get_state(&self, key: StateKey<'_>) -> Result<Option<String>, StoreError>;
    /// Saves `state` only if the stored one is still `expected` (`None`: none is stored), in
    /// one atomic step; says whether it did. Two requests of one session that raced each other
    /// (two replicas, or two connections of one client) then cannot both move the lineage on.
    fn swap_state(
        &self,
        key: StateKey<'_>,
        expected: Option<&str>,
        state: &str,
    ) -> Result<bool, StoreError>;
    /// Whether other processes (replicas) share this store while it runs, as they share a
    /// Redis: a state missing at start-up may then be put back by one of them.
    fn is_shared(&self) -> bool {
        false
    }
}

/// A store of both.
pub trait Store: OriginalStore + StateStore {}
impl<T: OriginalStore + StateStore> Store for T {}

/// A shared store is the store it shares: a caller can keep a handle on what the proxy (or a
/// replay) owns.
impl<T: OriginalStore + ?Sized> OriginalStore for std::sync::Arc<T> {
    fn put(&self, session: &SessionId, id: ContentId, text: &str) -> Result<(), StoreError> {
        (**self).put(session, id, text)
    }
    fn put_all(&self, s: &SessionId, o: &[(ContentId, &str)]) -> Result<(), StoreError> {
        (**self).put_all(s, o)
    }
    fn get(&self, session: &SessionId, id: ContentId) -> Result<Option<String>, StoreError> {
        (**self).get(session, id)
    }
    fn find(&self, scope: &str, id: ContentId) -> Result<Option<(SessionId, String)>, StoreError> {
        (**self).find(scope, id)
    }
    fn expire(&self, older_than: Duration) -> Result<u64, StoreError> {
        (**self).expire(older_than)
    }
    fn usage(&self) -> Option<StoreUsage> {
        (**self).usage()
    }
}

impl<T: StateStore + ?Sized> StateStore for std::sync::Arc<T> {
    fn put_state(&self, key: StateKey<'_>, state: &str) -> Result<(), StoreError> {
        (**self).put_state(key, state)
    }
    fn get_state(&self, key: StateKey<'_>) -> Result<Option<String>, StoreError> {
        (**self).get_state(key)
    }
    fn swap_state(&self, k: StateKey<'_>, e: Option<&str>, v: &str) -> Result<bool, StoreError> {
        (**self).swap_state(k, e, v)
    }
    fn is_shared(&self) -> bool {
        (**self).is_shared()
    }
}

/// Originals in memory (tests, replays, one-shot CLI runs, `serve --store memory`), within an
/// optional bound: past it, the originals written or touched longest ago go first.
#[derive(Debug, Default)]
pub struct MemoryStore {
    originals: RwLock<Held>,
    states: RwLock<BTreeMap<String, String>>,
}

/// The originals, with the order they were last written in.
#[derive(Debug, Default)]
struct Held {
    by_key: BTreeMap<(SessionId, ContentId), (String, u64)>,
    /// Keys by their last write (a logical clock).
    by_touch: BTreeMap<u64, (SessionId, ContentId)>,
    clock: u64,
    bytes: u64,
    max_bytes: Option<u64>,
    evicted: u64,
}

impl Held {
    fn put(&mut self, key: (SessionId, ContentId), text: &str) {
        self.clock += 1;
        let clock = self.clock;
        match self.by_key.get_mut(&key) {
            Some((_, touched)) => {
                self.by_touch.remove(touched);
                *touched = clock;
            }
            None => {
                self.bytes += text.len() as u64;
                self.by_key.insert(key.clone(), (text.to_owned(), clock));
            }
        }
        self.by_touch.insert(clock, key);
    }

    fn evict(&mut self) {
        let Some(max) = self.max_bytes else {
            return;
        };
        if self.bytes <= max {
            return;
        }
        let target = (max as f64 * EVICT_TO) as u64;
        while self.bytes > target {
            let Some((_, key)) = self.by_touch.pop_first() else {
                break;
            };
            if let Some((text, _)) = self.by_key.remove(&key) {
                self.bytes -= text.len() as u64;
                self.evicted += 1;
            }
        }
    }
}

fn poisoned() -> StoreError {
    StoreError::backend("memory", "a writer panicked")
}

impl MemoryStore {
    /// A store that keeps at most `max_bytes` of originals.
    pub fn bounded(max_bytes: u64) -> MemoryStore {
        let store = MemoryStore::default();
        if let Ok(mut held) = store.originals.write() {
            held.max_bytes = Some(max_bytes);
        }
        store
    }

    /// Number of originals held.
    pub fn len(&self) -> usize {
        self.originals.read().map_or(0, |o| o.by_key.len())
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl StateStore for MemoryStore {
    fn put_state(&self, key: StateKey<'_>, state: &str) -> Result<(), StoreError> {
        let mut states = self.states.write().map_err(|_| poisoned())?;
        states.insert(key.name(), state.to_owned());
        Ok(())
    }

    fn get_state(&self, key: StateKey<'_>) -> Result<Option<String>, StoreError> {
        let states = self.states.read().map_err(|_| poisoned())?;
        Ok(states.get(&key.name()).cloned())
    }

    fn swap_state(
        &self,
        key: StateKey<'_>,
        expected: Option<&str>,
        state: &str,
    ) -> Result<bool, StoreError> {
        let mut states = self.states.write().map_err(|_| poisoned())?;
        let name = key.name();
        if states.get(&name).map(String::as_str) != expected {
            return Ok(false);
        }
        states.insert(name, state.to_owned());
        Ok(true)
    }
}

impl OriginalStore for MemoryStore {
    fn put_all(
        &self,
        session: &SessionId,
        originals: &[(ContentId, &str)],
    ) -> Result<(), StoreError> {
        let mut held = self.originals.write().map_err(|_| poisoned())?;
        for (id, text) in originals {
            held.put((session.clone(), *id), text);
        }
        held.evict();
        Ok(())
    }

    fn get(&self, session: &SessionId, id: ContentId) -> Result<Option<String>, StoreError> {
        let originals = self.originals.read().map_err(|_| poisoned())?;
        Ok(originals
            .by_key
            .get(&(session.clone(), id))
            .map(|(text, _)| text.clone()))
    }

    fn find(&self, scope: &str, id: ContentId) -> Result<Option<(SessionId, String)>, StoreError> {
        let originals = self.originals.read().map_err(|_| poisoned())?;
        Ok(originals
            .by_key
            .iter()
            .find(|((session, held), _)| *held == id && session.as_str().starts_with(scope))
            .map(|((session, _), (text, _))| (session.clone(), text.clone())))
    }

    fn usage(&self) -> Option<StoreUsage> {
        let held = self.originals.read().ok()?;
        Some(StoreUsage {
            bytes: held.bytes,
            max_bytes: held.max_bytes?,
            evicted: held.evicted,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_alone_finds_its_original_within_the_scope() {
        let store = MemoryStore::default();
        let id = ContentId::of(b"out");
        store.put(&SessionId::new("t1.c-1"), id, "out").unwrap();
        assert_eq!(
            store.find("t1.", id).unwrap(),
            Some((SessionId::new("t1.c-1"), "out".to_owned()))
        );
        assert_eq!(store.find("t2.", id).unwrap(), None);
    }

    #[test]
    fn a_bounded_memory_store_evicts_what_was_written_longest_ago() {
        let store = MemoryStore::bounded(1_000);
        let s = SessionId::new("s");
        let text = |i: usize| format!("{i:0>300}");
        let ids: Vec<ContentId> = (0..4).map(|i| ContentId::of(text(i).as_bytes())).collect();
        store.put(&s, ids[0], &text(0)).unwrap();
        store.put(&s, ids[1], &text(1)).unwrap();
        store.put(&s, ids[2], &text(2)).unwrap();
        // Written again: the newest now.
        store.put(&s, ids[0], &text(0)).unwrap();
        store.put(&s, ids[3], &text(3)).unwrap();
        assert_eq!(store.get(&s, ids[1]).unwrap(), None, "the oldest went");
        assert!(store.get(&s, ids[0]).unwrap().is_some());
        assert!(store.get(&s, ids[3]).unwrap().is_some());
        let usage = store.usage().unwrap();
        assert!(usage.bytes <= 900 && usage.evicted >= 1, "{usage:?}");
        assert_eq!(MemoryStore::default().usage(), None);
    }

    #[test]
    fn state_kinds_never_share_a_name() {
        let odd = SessionId::new("foo#agent");
        let foo = SessionId::new("foo");
        let names = [
            StateKey::Lineage(&foo).name(),
            StateKey::Agent(&foo).name(),
            StateKey::Lineage(&odd).name(),
            StateKey::Agent(&odd).name(),
            StateKey::Lineage(&SessionId::new("agent/foo")).name(),
            StateKey::Server("tenant-secret").name(),
        ];
        for (i, a) in names.iter().enumerate() {
            for b in &names[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    #[test]
    fn a_swap_lands_only_on_the_state_it_expected() {
        let store = MemoryStore::default();
        let s = SessionId::new("s");
        let key = StateKey::Lineage(&s);
        assert!(store.swap_state(key, None, "one").unwrap());
        assert!(!store.swap_state(key, None, "two").unwrap());
        assert!(!store.swap_state(key, Some("zero"), "two").unwrap());
        assert!(store.swap_state(key, Some("one"), "two").unwrap());
        assert_eq!(store.get_state(key).unwrap().as_deref(), Some("two"));
    }
}
