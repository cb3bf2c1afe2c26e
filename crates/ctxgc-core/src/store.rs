//! Where originals live, so nothing trimmed, pruned or summarised is lost.
//!
//! The engine writes every original before the trimmed text that refers to it is used. The
//! trait is synchronous and keyed by session and content id; this crate provides an in-memory
//! store, `ctxgc-store` the SQLite and Redis ones.

use std::collections::BTreeMap;

use crate::content_id::ContentId;

/// A store failure (the backend says why).
#[derive(Debug, thiserror::Error)]
#[error("original store: {0}")]
pub struct StoreError(pub String);

/// Keeps originals of tool outputs.
pub trait OriginalStore {
    /// Saves an original; saving the same id twice is harmless.
    fn put(&mut self, session: &str, id: ContentId, text: &str) -> Result<(), StoreError>;
    /// Loads an original.
    fn get(&self, session: &str, id: ContentId) -> Result<Option<String>, StoreError>;
    /// Deletes what was last written longer ago than `older_than` (originals and session
    /// states, except the store's own keys, named `ctxgc.*`); returns how many went. Stores
    /// whose entries expire by themselves, or are never kept, delete nothing.
    fn expire(&mut self, older_than: std::time::Duration) -> Result<u64, StoreError> {
        let _ = older_than;
        Ok(0)
    }
}

/// Keeps small per-session state (the proxy's compaction lineage), so that several proxy
/// replicas, or a restarted one, continue a session where it was.
pub trait StateStore {
    /// Saves a session's state, replacing the previous one.
    fn put_state(&mut self, session: &str, state: &str) -> Result<(), StoreError>;
    /// Loads a session's state.
    fn get_state(&self, session: &str) -> Result<Option<String>, StoreError>;
}

/// A store of both.
pub trait Store: OriginalStore + StateStore + Send {}
impl<T: OriginalStore + StateStore + Send> Store for T {}

/// Originals in memory (tests, replays, one-shot CLI runs).
#[derive(Debug, Default, Clone)]
pub struct MemoryStore {
    originals: BTreeMap<(String, ContentId), String>,
    states: BTreeMap<String, String>,
}

impl StateStore for MemoryStore {
    fn put_state(&mut self, session: &str, state: &str) -> Result<(), StoreError> {
        self.states.insert(session.to_owned(), state.to_owned());
        Ok(())
    }

    fn get_state(&self, session: &str) -> Result<Option<String>, StoreError> {
        Ok(self.states.get(session).cloned())
    }
}

impl MemoryStore {
    /// Number of originals held.
    pub fn len(&self) -> usize {
        self.originals.len()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.originals.is_empty()
    }
}

impl OriginalStore for MemoryStore {
    fn put(&mut self, session: &str, id: ContentId, text: &str) -> Result<(), StoreError> {
        self.originals
            .entry((session.to_owned(), id))
            .or_insert_with(|| text.to_owned());
        Ok(())
    }

    fn get(&self, session: &str, id: ContentId) -> Result<Option<String>, StoreError> {
        Ok(self.originals.get(&(session.to_owned(), id)).cloned())
    }
}
