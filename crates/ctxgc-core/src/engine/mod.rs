//! The context engine: what the model sees on each request.
//!
//! The rule that shapes everything: **one cache break per event**. Providers cache the prompt
//! prefix byte for byte, so between two events the prompt is append-only (request N+1 starts
//! with request N's exact messages). Tool results are trimmed once as they enter
//! ([`crate::trim`]), repeats become pointers at insertion ([`repeats`]); every mutation of
//! older history happens inside one event, and each event must buy enough runway that the next
//! one is far away:
//!
//! 1. **Prune** (no LLM): superseded reads, older duplicates, old outputs beyond the protected
//!    recent budget (one-line [`abstracts`]), huge call arguments. Accepted alone only when it
//!    reclaims a real amount and lands the prompt the runway under the threshold.
//! 2. **Compact** otherwise: the middle becomes one reference-only [`summary`], updated (not
//!    redone) at later events, head and tail untouched, tool pairs intact ([`integrity`]).
//!
//! Planning ([`plan::plan`]) is a pure function; applying a plan takes the summary from outside,
//! so plans replay without an LLM.

pub mod abstracts;
pub mod apply;
pub mod drive;
pub mod event;
pub mod facts;
pub mod input;
pub mod integrity;
pub mod plan;
pub mod policy;
pub mod prune;
pub mod relevance;
pub mod repeats;
pub mod segments;
pub mod session;
pub mod summarizer;
pub mod summary;

pub use apply::EventKind;
pub use plan::{Plan, PlanKind};
pub use policy::{Policy, Preset};
pub use session::{EngineError, EventRecord, Session, SessionReport};
pub use summarizer::{Summarizer, SummarizerError, SummaryReply, SummaryRequest};

#[cfg(test)]
mod tests;
