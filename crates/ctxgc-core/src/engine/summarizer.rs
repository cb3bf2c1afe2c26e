//! What the engine asks of an external summarizer (an LLM behind HTTP, usually) and what it
//! answers; the engine itself never calls one.

use serde_json::Value;

use crate::transcript::Message;

/// An external summarizer (an LLM behind HTTP, usually).
pub trait Summarizer {
    /// A short name for logs.
    fn name(&self) -> &str;
    /// Writes the model sections of a summary for the request's last instruction.
    fn summarize(&mut self, request: &SummaryRequest) -> Result<SummaryReply, SummarizerError>;
}

/// Why an external summarizer gave no summary (the extractive summary then stands in).
#[derive(Debug, thiserror::Error)]
pub enum SummarizerError {
    /// It is not asked again for a while after a failure.
    #[error("cooling down after a failure ({secs_left} s left)")]
    CoolingDown {
        /// Seconds until it is asked again.
        secs_left: u64,
    },
    /// It failed (the backend's error).
    #[error(transparent)]
    Failed(Box<dyn std::error::Error + Send + Sync>),
}

/// What an external summarizer is asked.
#[derive(Debug, Clone)]
pub struct SummaryRequest {
    /// The current prompt with the summarisation instruction appended (cache-friendly).
    pub messages: Vec<Message>,
    /// The tool definitions the conversation sends (kept so the prefix stays identical).
    pub tools: Vec<Value>,
    /// Target size in tokens (asked for in the prompt, never enforced with max_tokens).
    pub budget: usize,
}

/// A summarizer's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct SummaryReply {
    /// The model sections.
    pub body: String,
    /// Input tokens as reported.
    pub tokens_in: usize,
    /// Output tokens as reported.
    pub tokens_out: usize,
}
