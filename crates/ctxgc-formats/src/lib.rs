//! ctxgc-formats: provider wire formats and real agent transcripts <-> the ctxgc core model.
//!
//! - [`request`]: OpenAI Chat Completions, OpenAI Responses and Anthropic Messages request
//!   bodies, kept as order-preserving JSON documents (lossless: unknown fields and key order
//!   survive), with a provider-neutral [`Transcript`] view;
//! - [`chat`], [`anthropic`], [`responses`]: the per-API mappings;
//! - [`import`]: importers for mini-swe-agent and SWE-agent trajectories and the canonical JSONL.

#![deny(missing_docs)]

pub mod anthropic;
mod apis;
pub mod chat;
pub mod gemini;
pub mod import;
pub mod reparse;
pub mod request;
pub mod responses;
pub mod wire;
pub mod wire_api;
mod wire_apis;

use ctxgc_core::{Block, Transcript};

pub use reparse::{Layout, Previous, Spare};
pub use request::{Api, ApiRequest};
pub use wire_api::{Upstream, WireApi};

/// A body or file that does not have the expected shape.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum FormatError {
    /// Not JSON at all.
    #[error("invalid JSON: {0}")]
    Json(String),
    /// JSON, but not the expected shape; `at` is a path like `messages[3].content`.
    #[error("{at}: {why}")]
    Shape {
        /// Where in the document.
        at: String,
        /// What is wrong.
        why: String,
    },
}

impl FormatError {
    pub(crate) fn shape(at: &str, why: impl Into<String>) -> FormatError {
        FormatError::Shape {
            at: at.to_owned(),
            why: why.into(),
        }
    }
}

/// Fills in each tool result's tool name from the call it answers, where the wire format
/// leaves it out (OpenAI tool messages, Anthropic tool_result blocks).
pub fn resolve_tool_names(t: &mut Transcript) {
    // By id, the latest call winning: a result whose call is missing costs one lookup, not a
    // scan of every call before it.
    let mut names: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    for message in &mut t.messages {
        for block in &mut message.content {
            match block {
                Block::ToolCall(call) => {
                    names.insert(call.id.clone(), call.name.clone());
                }
                Block::ToolResult(result) if result.tool_name.is_none() => {
                    result.tool_name = names.get(&result.call_id).cloned();
                }
                _ => {}
            }
        }
    }
}
