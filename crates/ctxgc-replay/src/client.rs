//! What the replay knows of a client's own requests from its log: how they are counted
//! ([`Calibration`]) and which messages each one sent ([`client_prompt`]).

use ctxgc_core::{Role, Transcript};
use serde::Serialize;

/// How a client log's requests are counted. The log has neither the system prompt nor the
/// tool definitions, and Claude has no public tokenizer, so both are estimated once per session
/// from the usage the provider recorded: `scale` is the least-squares slope of recorded prompt
/// tokens over ctxgc's o200k count of the messages the client sent, and `prefix_tokens` what
/// the first call's recorded prompt holds beyond its scaled messages.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Calibration {
    /// Tokens of the fixed prefix (system prompt and tool definitions) the log does not hold.
    pub prefix_tokens: usize,
    /// Provider tokens per o200k token of the messages.
    pub scale: f64,
}

impl Default for Calibration {
    fn default() -> Self {
        Calibration {
            prefix_tokens: 0,
            scale: 1.0,
        }
    }
}

/// Content a client sent with a message that its log does not hold: the files a slash command
/// or a skill pulls in with `@` references (Claude Code 2.0-2.1 logs the command's text, not
/// the files), hook output, images. The log does not say how much; the recorded usage does:
/// the request that first carried it grew by more than the log's new messages count.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Attachment {
    /// The message it came with (the newest before the request that first carried it).
    pub at: usize,
    /// Provider tokens.
    pub tokens: usize,
}

/// The message indices of the request that produced assistant message `index`, as the client
/// sent it: everything before it, or after the client's latest compaction its leading system
/// messages and what followed the compaction.
pub fn client_prompt(t: &Transcript, index: usize) -> (std::ops::Range<usize>, usize) {
    let system_end = t
        .messages
        .iter()
        .take_while(|m| m.role == Role::System)
        .count();
    let start = t
        .recording
        .as_ref()
        .and_then(|r| r.compactions.iter().rev().find(|c| c.at <= index))
        .map_or(0, |c| c.at.max(system_end));
    (start..index, if start > 0 { system_end } else { 0 })
}
