//! The agent tools (`--inject-tools`): `trim_tool_result` and `recall_tool_result` added to a
//! request, run when the model calls them, and their effect kept in the session (`tools`); a
//! streamed answer's calls to them taken out of what the client sees (`splice`).
//!
//! Calls: `crate::wire` (SSE framing), the core's recall and trim; the rounds with the
//! upstream are the route's (`crate::route`).

pub mod splice;
pub mod tools;
