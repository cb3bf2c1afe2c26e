//! Token counters of the replay lab, sharing one memo: a replay counts the same messages under
//! every policy and window, and each distinct message should cost one BPE pass. The memo is the
//! lab's (bounded by bytes); the core library keeps none of its own.

use std::sync::{Arc, OnceLock};

use ctxgc_core::tokens::{CountMemo, TokenCounter};

/// The lab's memo (64 MiB at most).
pub(crate) fn memo() -> Arc<CountMemo> {
    static MEMO: OnceLock<Arc<CountMemo>> = OnceLock::new();
    MEMO.get_or_init(|| Arc::new(CountMemo::new(64 << 20)))
        .clone()
}

/// An OpenAI-family counter with default settings, sharing the lab's memo.
pub(crate) fn counter() -> TokenCounter {
    TokenCounter::openai().sharing(memo())
}
