//! Admission and limits: what a request may take before any work is done on it. Its body is
//! read within its deadline, its size limit and the memory budget of the requests in flight,
//! and decoded (`body`); the rewrite slot it waits for is granted fairly (`gate`), and store calls stop at once for
//! a moment after one failed (`breaker`).
//!
//! Calls: `crate::reply` only (its refusals are answers the proxy writes itself).

pub(crate) mod body;
pub(crate) mod breaker;
pub(crate) mod gate;
