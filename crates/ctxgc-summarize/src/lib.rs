//! ctxgc-summarize: LLM summarizers for compactions.
//!
//! Two HTTP clients speak the providers' real wire protocols: OpenAI-compatible Chat
//! Completions (OpenAI, vLLM, SGLang, OpenRouter, ...) and Anthropic Messages. The request is
//! the conversation's own prompt (same tools, same messages) with the summarisation instruction
//! appended as the last user message, so it is a prefix-cache hit upstream. The summary size is
//! asked for in the instruction, never enforced with `max_tokens`: a cut summary makes agents
//! loop. Transient failures (connection errors, timeouts, 408/409/429/5xx) are retried with
//! exponential backoff, honouring `retry-after`; other errors are reported at once.
//!
//! [`BlockingSummarizer`] adapts a client to the engine's synchronous [`Summarizer`] trait and
//! adds a cooldown: after a failure the engine uses its extractive summarizer until the cooldown
//! ends, instead of hammering a failing endpoint on every event.

#![deny(missing_docs)]

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use ctxgc_core::engine::{Summarizer, SummarizerError, SummaryReply, SummaryRequest};
use ctxgc_formats::wire;
use serde_json::{Value, json};

/// Which wire protocol a summarizer speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `POST {base}/chat/completions`, `Authorization: Bearer`.
    OpenAiChat,
    /// `POST {base}/messages`, `x-api-key`, `anthropic-version`.
    AnthropicMessages,
}

/// Settings of an LLM summarizer.
#[derive(Clone)]
pub struct LlmSettings {
    /// The protocol.
    pub protocol: Protocol,
    /// API base including the version path, e.g. `https://api.openai.com/v1`.
    pub base_url: String,
    /// Model name.
    pub model: String,
    /// API key (sent, never logged or included in errors).
    pub api_key: Option<String>,
    /// Whole-request timeout.
    pub timeout: Duration,
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// First backoff; doubles per retry, capped at 8 s.
    pub backoff: Duration,
}

impl std::fmt::Debug for LlmSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmSettings")
            .field("protocol", &self.protocol)
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .finish()
    }
}

impl LlmSettings {
    /// Defaults for a protocol: the provider's public endpoint, 120 s timeout, 3 retries.
    pub fn new(
        protocol: Protocol,
        model: impl Into<String>,
        api_key: Option<String>,
    ) -> LlmSettings {
        LlmSettings {
            protocol,
            base_url: match protocol {
                Protocol::OpenAiChat => "https://api.openai.com/v1".into(),
                Protocol::AnthropicMessages => "https://api.anthropic.com/v1".into(),
            },
            model: model.into(),
            api_key,
            timeout: Duration::from_secs(120),
            max_retries: 3,
            backoff: Duration::from_millis(500),
        }
    }
}

/// Why a summarizer call failed.
#[derive(Debug, thiserror::Error)]
pub enum SummarizeError {
    /// The endpoint could not be reached or timed out, after all retries.
    #[error("{url}: request failed after {attempts} attempt(s): {why}")]
    Transport {
        /// Endpoint.
        url: String,
        /// Attempts made.
        attempts: u32,
        /// Last error.
        why: String,
    },
    /// The endpoint answered with an error status.
    #[error("{url}: HTTP {status} after {attempts} attempt(s): {body}")]
    Status {
        /// Endpoint.
        url: String,
        /// Status code.
        status: u16,
        /// Attempts made.
        attempts: u32,
        /// The start of the response body.
        body: String,
    },
    /// The answer is not the protocol's response shape, or has no text.
    #[error("{url}: unusable response: {why}")]
    Response {
        /// Endpoint.
        url: String,
        /// What is wrong.
        why: String,
    },
    /// The client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
}

/// Installs the ring crypto provider for rustls once (TLS without aws-lc's build cost). The one
/// place the workspace does it: every HTTP client of ctxgc (summarizer, proxy, `ctxgc stats`)
/// calls this before it is built.
pub fn install_crypto() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// An async LLM summarizer client.
pub struct LlmSummarizer {
    settings: LlmSettings,
    client: reqwest::Client,
}

impl LlmSummarizer {
    /// A client with the given settings.
    pub fn new(settings: LlmSettings) -> Result<LlmSummarizer, SummarizeError> {
        install_crypto();
        let client = reqwest::Client::builder()
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout.min(Duration::from_secs(15)))
            .build()
            .map_err(|e| SummarizeError::Client(e.to_string()))?;
        Ok(LlmSummarizer { settings, client })
    }

    /// The endpoint URL.
    pub fn url(&self) -> String {
        let base = self.settings.base_url.trim_end_matches('/');
        match self.settings.protocol {
            Protocol::OpenAiChat => format!("{base}/chat/completions"),
            Protocol::AnthropicMessages => format!("{base}/messages"),
        }
    }

    /// The JSON body for a request.
    pub fn body(&self, request: &SummaryRequest) -> Value {
        match self.settings.protocol {
            Protocol::OpenAiChat => {
                let mut body = json!({"model": self.settings.model, "messages": wire::chat_messages(&request.messages)});
                if !request.tools.is_empty() {
                    // The conversation's tools keep the cached prefix identical; the model is told
                    // not to call them.
                    body["tools"] = Value::Array(request.tools.clone());
                    body["tool_choice"] = json!("none");
                }
                body
            }
            Protocol::AnthropicMessages => {
                let (system, messages) = wire::anthropic_messages(&request.messages);
                // Required by the API; generous so that it never cuts the summary.
                let max_tokens = (request.budget * 4).clamp(4_096, 32_000);
                let mut body = json!({"model": self.settings.model, "max_tokens": max_tokens, "messages": messages});
                if let Some(system) = system {
                    body["system"] = system;
                }
                if !request.tools.is_empty() {
                    // No tool_choice: changing it would invalidate the cached messages.
                    body["tools"] = Value::Array(request.tools.clone());
                }
                body
            }
        }
    }

    /// Sends the request (with retries) and returns the summary body.
    pub async fn summarize(
        &self,
        request: &SummaryRequest,
    ) -> Result<SummaryReply, SummarizeError> {
        let url = self.url();
        let body = self.body(request);
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let mut builder = self.client.post(&url).json(&body);
            builder = match (self.settings.protocol, &self.settings.api_key) {
                (Protocol::OpenAiChat, Some(key)) => builder.bearer_auth(key),
                (Protocol::AnthropicMessages, Some(key)) => builder.header("x-api-key", key),
                (_, None) => builder,
            };
            if self.settings.protocol == Protocol::AnthropicMessages {
                builder = builder.header("anthropic-version", "2023-06-01");
            }
            let retry_in = self.backoff(attempt);
            match builder.send().await {
                Err(e) => {
                    if attempt > self.settings.max_retries {
                        return Err(SummarizeError::Transport {
                            url,
                            attempts: attempt,
                            why: describe(&e),
                        });
                    }
                    tokio::time::sleep(retry_in).await;
                }
                Ok(response) => {
                    let status = response.status().as_u16();
                    let retry_after = response
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse::<u64>().ok())
                        .map(|s| Duration::from_secs(s.min(30)));
                    let text = response.text().await.unwrap_or_default();
                    if (200..300).contains(&status) {
                        return self.parse(&url, &text);
                    }
                    let transient = matches!(status, 408 | 409 | 429) || status >= 500;
                    if !transient || attempt > self.settings.max_retries {
                        return Err(SummarizeError::Status {
                            url,
                            status,
                            attempts: attempt,
                            body: text.chars().take(300).collect(),
                        });
                    }
                    tokio::time::sleep(retry_after.unwrap_or(retry_in)).await;
                }
            }
        }
    }

    fn backoff(&self, attempt: u32) -> Duration {
        let factor = 1u32 << (attempt.saturating_sub(1)).min(5);
        (self.settings.backoff * factor).min(Duration::from_secs(8))
    }

    fn parse(&self, url: &str, text: &str) -> Result<SummaryReply, SummarizeError> {
        let bad = |why: &str| SummarizeError::Response {
            url: url.to_owned(),
            why: why.to_owned(),
        };
        let value: Value =
            serde_json::from_str(text).map_err(|e| bad(&format!("not JSON: {e}")))?;
        let usage = |key: &str| value.pointer(key).and_then(Value::as_u64).unwrap_or(0) as usize;
        let (body, tokens_in, tokens_out) = match self.settings.protocol {
            Protocol::OpenAiChat => (
                value
                    .pointer("/choices/0/message/content")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                usage("/usage/prompt_tokens"),
                usage("/usage/completion_tokens"),
            ),
            Protocol::AnthropicMessages => (
                value
                    .get("content")
                    .and_then(Value::as_array)
                    .map(|blocks| {
                        blocks
                            .iter()
                            .filter(|b| b["type"] == "text")
                            .filter_map(|b| b["text"].as_str())
                            .collect::<Vec<_>>()
                            .join("\n")
                    }),
                usage("/usage/input_tokens")
                    + usage("/usage/cache_read_input_tokens")
                    + usage("/usage/cache_creation_input_tokens"),
                usage("/usage/output_tokens"),
            ),
        };
        let body = body
            .filter(|b| !b.trim().is_empty())
            .ok_or_else(|| bad("no summary text in the answer"))?;
        Ok(SummaryReply {
            body,
            tokens_in,
            tokens_out,
        })
    }
}

/// A transport error's causes, joined (reqwest's top-level message alone is vague).
fn describe(e: &reqwest::Error) -> String {
    let mut out = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    if e.is_timeout() {
        out.push_str(" (timed out)");
    }
    out
}

/// A [`LlmSummarizer`] behind the engine's synchronous trait, with a cooldown after failures.
pub struct BlockingSummarizer {
    runtime: tokio::runtime::Runtime,
    inner: LlmSummarizer,
    name: String,
    cooldown: Cooldown,
}

/// After an LLM summarizer fails, it is not asked again for a while: the extractive summary
/// stands in. Shared across threads (the proxy's requests) or owned by one session.
#[derive(Debug)]
pub struct Cooldown {
    length: Duration,
    until: std::sync::Mutex<Option<Instant>>,
}

impl Cooldown {
    /// A cooldown of `length` after each failure.
    pub fn new(length: Duration) -> Cooldown {
        Cooldown {
            length,
            until: std::sync::Mutex::new(None),
        }
    }

    /// Seconds left to wait, when cooling down now.
    pub fn remaining(&self) -> Option<Duration> {
        let until = (*self.until.lock().ok()?)?;
        until.checked_duration_since(Instant::now())
    }

    /// A failure now: wait the cooldown's length from now.
    pub fn start(&self) {
        if let Ok(mut until) = self.until.lock() {
            *until = Some(Instant::now() + self.length);
        }
    }
}

impl BlockingSummarizer {
    /// Wraps a client; after a failure the LLM is not asked again for `cooldown`.
    pub fn new(
        inner: LlmSummarizer,
        cooldown: Duration,
    ) -> Result<BlockingSummarizer, SummarizeError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| SummarizeError::Client(e.to_string()))?;
        let name = format!("{} ({})", inner.settings.model, inner.url());
        Ok(BlockingSummarizer {
            runtime,
            inner,
            name,
            cooldown: Cooldown::new(cooldown),
        })
    }
}

impl Summarizer for BlockingSummarizer {
    fn name(&self) -> &str {
        &self.name
    }

    fn summarize(&mut self, request: &SummaryRequest) -> Result<SummaryReply, SummarizerError> {
        if let Some(left) = self.cooldown.remaining() {
            return Err(SummarizerError::CoolingDown {
                secs_left: left.as_secs(),
            });
        }
        self.runtime
            .block_on(self.inner.summarize(request))
            .map_err(|e| {
                self.cooldown.start();
                SummarizerError::Failed(Box::new(e))
            })
    }
}
