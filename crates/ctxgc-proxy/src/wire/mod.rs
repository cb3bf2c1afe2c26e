//! Bytes on the wire, read and written without parsing more than needed: server-sent events
//! framed once for every reader of a stream (`sse`), and a JSON body spliced at a few
//! pointers, the rest copied as the client sent it (`splice_json`).
//!
//! Calls: nothing of the proxy's; everything else may call it.

pub mod splice_json;
pub mod sse;
