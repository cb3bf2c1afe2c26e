//! ctxgc-replay: what would a session have cost, and what would the agent still have seen?
//!
//! Real transcripts are walked as a live agent would (messages and tool results in order, a
//! request before each assistant message) under each context policy: ctxgc's and faithful
//! emulations of other agents'. Every request is counted with a real tokenizer, tool definitions
//! included, served through provider cache models ([`cache`]), priced ([`prices`]), and checked
//! for what the agent went on to use ([`recall`]).

#![deny(missing_docs)]

pub mod breaks;
pub mod cache;
pub mod calibrate;
pub mod causes;
pub mod client;
pub mod client_model;
mod counting;
pub mod explain;
pub mod misses;
pub mod policies;
pub mod prices;
pub mod recall;
pub mod relevance;
pub mod report;
pub mod run;
pub mod users;
pub mod validate;
pub mod written;

/// Client logs built in tests.
#[cfg(test)]
mod test_logs {
    use ctxgc_core::{ClientCompaction, Message, Recording, Transcript};

    /// A client's log of `messages`, each sent at `sent_ms`, with the client's `compactions`.
    pub(crate) fn recorded(
        messages: Vec<Message>,
        sent_ms: Vec<Option<i64>>,
        compactions: Vec<ClientCompaction>,
    ) -> Transcript {
        Transcript {
            id: "s".into(),
            messages,
            tools: vec![],
            recording: Some(Recording {
                client: "test".into(),
                sent_ms,
                compactions,
                billed_total: None,
            }),
            model: None,
        }
    }
}
