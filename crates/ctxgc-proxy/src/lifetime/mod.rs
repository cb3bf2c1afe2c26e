//! The prompt cache's lifetime: the cache fields a request carries (`fields`: TTLs,
//! retention, breakpoints, as `ctxgc_core::cache_life` decides), the keep-alives an idle
//! Anthropic session may get (`keepalive`), the preparation of an idle session's next event
//! (`idle`), the held requests both work from (`recent`), and the upstreams that refused a
//! field ctxgc set (`refusals`).
//!
//! Calls: `crate::wire` (splicing a field into the client's bytes) and the core; what runs a
//! keep-alive or an idle preparation is the route's (`crate::route`), which these only
//! schedule.

pub(crate) mod fields;
pub(crate) mod idle;
pub mod keepalive;
pub(crate) mod recent;
pub(crate) mod refusals;
