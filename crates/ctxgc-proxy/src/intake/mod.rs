//! Parsing and identity: a body read whole becomes an `ctxgc_formats::ApiRequest` (after the
//! caller's previous body, when it continues it: `parse`), and the request is placed:
//! its tenant, from the credential it carries, and its session within that tenant
//! (`identity`, `responses` for Responses' `previous_response_id`).
//!
//! Calls: `crate::admission` (a body's weight), nothing above.

pub mod identity;
pub(crate) mod parse;
pub(crate) mod responses;
