//! The LLM summarizer as the proxy's requests use it: a blocking call from a rewrite task, not
//! asked during the cooldown after a failure (the extractive summary stands in).

use std::sync::Arc;
use std::time::Duration;

use ctxgc_core::engine::{SummarizerError, SummaryReply, SummaryRequest};
use ctxgc_summarize::{Cooldown, LlmSummarizer};

/// The configured LLM summarizer, if any, and its cooldown.
pub(crate) struct SummarizerGate {
    llm: Option<Arc<LlmSummarizer>>,
    cooldown: Cooldown,
}

impl SummarizerGate {
    pub(crate) fn new(llm: Option<Arc<LlmSummarizer>>, cooldown: Duration) -> SummarizerGate {
        SummarizerGate {
            llm,
            cooldown: Cooldown::new(cooldown),
        }
    }

    /// The LLM summarizer as a blocking call (from a blocking task of the runtime), unless
    /// none is configured or it is cooling down after a failure.
    pub(crate) fn blocking(
        &self,
    ) -> Option<impl FnMut(&SummaryRequest) -> Result<SummaryReply, SummarizerError> + use<>> {
        let llm = self.llm.clone()?;
        if self.cooldown.remaining().is_some() {
            return None;
        }
        let handle = tokio::runtime::Handle::try_current().ok()?;
        Some(move |request: &SummaryRequest| {
            handle
                .block_on(llm.summarize(request))
                .map_err(|e| SummarizerError::Failed(Box::new(e)))
        })
    }

    /// The LLM failed: it is not asked again for the cooldown.
    pub(crate) fn failed(&self) {
        self.cooldown.start();
    }
}
