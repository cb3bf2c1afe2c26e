//! Observation: what the proxy counts and shows, never what it decides. The counters and
//! Prometheus' text (`metrics`), the session table with the upstream's reported usage and
//! ctxgc's estimate (`sessions`), what the client alone would have been billed
//! (`client_bill`), `/ctxgc/stats` (`stats`) and observe mode's queue (`queue`).
//!
//! Calls: `crate::lifetime` (a session's cache lifetime lives in its row), `crate::intake`
//! (whose stats), the replay lab's cache model.

pub(crate) mod client_bill;
pub(crate) mod metrics;
pub(crate) mod queue;
pub(crate) mod sessions;
pub(crate) mod stats;
