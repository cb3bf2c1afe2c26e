//! The upstreams: where each provider's API is and sending a request there with the client's
//! headers (`client`), and reading the usage an answer reports as it streams past
//! (`tap`).
//!
//! Calls: `crate::observe` (its counters), `crate::wire`, the settings.

pub(crate) mod client;
pub mod tap;
