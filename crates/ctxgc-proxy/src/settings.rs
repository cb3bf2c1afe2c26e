//! What `ctxgc serve` is configured with: upstreams, limits, rewriting, the summarizer, tenants
//! and every deadline. Plain data; the parts of [`crate::state::AppState`] take what they need.

use std::sync::Arc;
use std::time::Duration;

use crate::rewrite::request::RewriteSettings;

/// Proxy settings.
#[derive(Clone)]
pub struct ProxySettings {
    /// Base URL of the OpenAI-compatible upstream, e.g. `https://api.openai.com`.
    pub openai_upstream: String,
    /// Base URL of the Anthropic upstream, e.g. `https://api.anthropic.com`.
    pub anthropic_upstream: String,
    /// Base URL of the Gemini upstream, e.g. `https://generativelanguage.googleapis.com`.
    pub gemini_upstream: String,
    /// Largest request body accepted, in bytes (413 above).
    pub max_body_bytes: usize,
    /// Rewriting settings.
    pub rewrite: RewriteSettings,
    /// Observe mode: forward every request unchanged and compute beside it, off the request
    /// path, what ctxgc would have sent.
    pub observe: bool,
    /// Who writes compaction summaries: an LLM, or `None` for the extractive summarizer.
    pub summarizer: Option<Arc<ctxgc_summarize::LlmSummarizer>>,
    /// After the LLM summarizer fails, compactions are summarised extractively for this long.
    pub summarizer_cooldown: Duration,
    /// The secret tenant ids are keyed with; `None`: one kept in the store (made at the first
    /// start), so replicas on one store agree.
    pub tenant_secret: Option<String>,
    /// Presented as `x-ctxgc-admin-token`, lets `/ctxgc/stats` list every tenant's sessions.
    pub admin_token: Option<String>,
    /// How long each wait may last.
    pub timeouts: Timeouts,
    /// How tokens are counted (`[tokens]`).
    pub tokens: ctxgc_core::tokens::TokenSettings,
    /// What one request may take of the server's means.
    pub limits: Limits,
    /// What keep-alives (`[cache] keepalive`) may hold, and their deadline.
    pub keepalive: crate::lifetime::keepalive::KeepAliveSettings,
}

/// What one request may take of the server's means, so that a heavy one cannot cost everyone
/// else.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The rewrite of one request may take this long; past it the request goes upstream as it
    /// came.
    pub rewrite_deadline: Duration,
    /// Bytes of request bodies held for rewriting at once, weighed with what parsing them
    /// takes; a request that does not fit is streamed upstream unbuffered and unchanged.
    pub inflight_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            rewrite_deadline: Duration::from_millis(3_000),
            inflight_bytes: 128 << 20,
        }
    }
}

/// The public Gemini API (`--gemini-upstream`'s default).
pub const GEMINI_UPSTREAM: &str = "https://generativelanguage.googleapis.com";

/// Every wait the proxy makes has a deadline.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// To connect to an upstream.
    pub connect: Duration,
    /// An upstream's silence: before its first byte, and between two chunks.
    pub upstream_idle: Duration,
    /// For a client to send its request body.
    pub client_body: Duration,
    /// For a client to send its request headers.
    pub client_headers: Duration,
    /// For requests and streams in flight to finish once shutdown began.
    pub shutdown_grace: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(10),
            upstream_idle: Duration::from_secs(600),
            client_body: Duration::from_secs(60),
            client_headers: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(30),
        }
    }
}
