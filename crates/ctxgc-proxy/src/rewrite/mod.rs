//! The rewrite and its lineage: pure functions of a request and what the session's store
//! holds. Insertion-time trimming, breakpoints and cache keys (`request`); the engine's events
//! across requests, for clients that resend their whole history (`lineage`); what the proxy
//! remembers between requests to avoid repeating that work (`memos`); the LLM summarizer as a
//! rewrite calls it (`summarizer`).
//!
//! Calls: `crate::agent` (which items are the agent tools' own), `crate::wire`, the core
//! engine; never the server's state: the route hands it what it needs.

pub(crate) mod counted;
pub(crate) mod jobs;
pub mod lineage;
pub(crate) mod memos;
pub mod request;
pub(crate) mod summarizer;
