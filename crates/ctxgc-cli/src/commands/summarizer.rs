//! The summarizer flags shared by `ctxgc compact` and `ctxgc serve`.

use anyhow::{Result, bail};
use clap::{Args, ValueEnum};
use ctxgc_summarize::{LlmSettings, LlmSummarizer, Protocol};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SummarizerKind {
    /// Deterministic, no LLM (the default).
    Extractive,
    /// An OpenAI-compatible Chat Completions endpoint.
    Openai,
    /// The Anthropic Messages API.
    Anthropic,
}

/// Who writes compaction summaries.
#[derive(Debug, Clone, Args)]
pub struct SummarizerArgs {
    /// Who writes compaction summaries.
    #[arg(long, value_enum, default_value = "extractive")]
    pub summarizer: SummarizerKind,
    /// Summarizer model (openai/anthropic).
    #[arg(
        long = "summarizer-model",
        alias = "model",
        default_value = "gpt-5-mini"
    )]
    pub model: String,
    /// Summarizer API base, e.g. http://127.0.0.1:8000/v1 (default: the provider's).
    #[arg(long = "summarizer-base-url", alias = "base-url")]
    pub base_url: Option<String>,
    /// Environment variable holding the summarizer's API key
    /// (default OPENAI_API_KEY or ANTHROPIC_API_KEY).
    #[arg(long = "summarizer-api-key-env", alias = "api-key-env")]
    pub api_key_env: Option<String>,
}

impl SummarizerArgs {
    /// The extractive summarizer (no LLM).
    #[cfg(test)]
    pub fn extractive() -> SummarizerArgs {
        SummarizerArgs {
            summarizer: SummarizerKind::Extractive,
            model: String::new(),
            base_url: None,
            api_key_env: None,
        }
    }

    /// The LLM client these flags ask for; `None` for the extractive summarizer.
    pub fn llm(&self) -> Result<Option<LlmSummarizer>> {
        let protocol = match self.summarizer {
            SummarizerKind::Extractive => return Ok(None),
            SummarizerKind::Openai => Protocol::OpenAiChat,
            SummarizerKind::Anthropic => Protocol::AnthropicMessages,
        };
        let var = self.api_key_env.clone().unwrap_or_else(|| match protocol {
            Protocol::OpenAiChat => "OPENAI_API_KEY".into(),
            Protocol::AnthropicMessages => "ANTHROPIC_API_KEY".into(),
        });
        let mut settings = LlmSettings::new(protocol, self.model.clone(), std::env::var(&var).ok());
        if let Some(url) = &self.base_url {
            settings.base_url = url.clone();
        }
        if settings.api_key.is_none() && self.base_url.is_none() {
            bail!(
                "the {protocol:?} summarizer needs an API key in ${var} (or --summarizer-base-url for a local server)"
            );
        }
        Ok(Some(LlmSummarizer::new(settings)?))
    }
}
