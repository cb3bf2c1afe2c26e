//! ctxgc-core: the pure heart of ctxgc.
//!
//! - [`transcript`]: the provider-neutral conversation model;
//! - [`tokens`]: real BPE token counts with an incremental cache;
//! - [`trim`]: insertion-time trimming of tool output (head + salient middle + tail, JSON,
//!   search results), streaming in bounded memory;
//! - [`engine`]: prune-first, then structured compaction, one cache break per event;
//! - [`recall`], [`store`], [`agent_tools`]: nothing is lost, and the model can get it back;
//! - [`content_id`]: stable ids of originals, for recall;
//! - [`models`]: known models' context windows.
//!
//! This crate does no I/O, spawns nothing and has no async: every function is a pure function
//! of its inputs, so replays are deterministic and the proxy, the CLI and the replay lab share
//! one behaviour.

#![deny(missing_docs)]

pub mod agent_tools;
pub mod bounded;
pub mod cache_life;
pub mod config;
pub mod content_id;
pub mod engine;
pub mod models;
pub mod provider_cache;
pub mod recall;
pub mod store;
pub mod tokens;
pub mod tool_kind;
pub mod transcript;
pub mod trim;

#[cfg(test)]
mod test_text;

pub use content_id::ContentId;
pub use transcript::{
    Block, ClientCompaction, Message, RecordedUsage, Recording, Role, SessionBill, ToolCall,
    ToolResult, Transcript,
};
