//! The proxy's counters: what happened to requests, what was saved, what failed. One place
//! counts; `/ctxgc/stats` reads a snapshot.

use std::sync::atomic::{AtomicU64, Ordering};

/// How a request left the proxy.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Forwarded {
    /// With a rewritten body.
    Rewritten,
    /// Byte for byte: nothing to change.
    Unchanged,
    /// Byte for byte because ctxgc failed internally.
    FailOpen,
}

/// Counters, shared by every request.
#[derive(Default)]
pub(crate) struct Metrics {
    requests: AtomicU64,
    rewritten: AtomicU64,
    passed_through: AtomicU64,
    fail_open: AtomicU64,
    bad_requests: AtomicU64,
    bytes_saved: AtomicU64,
    originals_stored: AtomicU64,
    events: AtomicU64,
    agent_tool_calls: AtomicU64,
    summarizer_failures: AtomicU64,
}

/// The counters at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Totals {
    pub(crate) requests: u64,
    pub(crate) rewritten: u64,
    pub(crate) passed_through: u64,
    pub(crate) fail_open: u64,
    pub(crate) bad_requests: u64,
    pub(crate) bytes_saved: u64,
    pub(crate) originals_stored: u64,
    pub(crate) events: u64,
    pub(crate) agent_tool_calls: u64,
    pub(crate) summarizer_failures: u64,
}

fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

impl Metrics {
    /// A request on a rewriting route was read and parsed.
    pub(crate) fn request(&self) {
        add(&self.requests, 1);
    }

    /// A request was refused as malformed, too large or too slow.
    pub(crate) fn bad_request(&self) {
        add(&self.bad_requests, 1);
    }

    /// A request was forwarded, having had `bytes_saved` trimmed and `stored` originals written.
    pub(crate) fn forwarded(&self, how: Forwarded, bytes_saved: usize, stored: u64) {
        add(&self.bytes_saved, bytes_saved as u64);
        add(&self.originals_stored, stored);
        add(
            match how {
                Forwarded::Rewritten => &self.rewritten,
                Forwarded::Unchanged => &self.passed_through,
                Forwarded::FailOpen => &self.fail_open,
            },
            1,
        );
    }

    /// ctxgc failed after the request was forwarded (the agent tools' rounds).
    pub(crate) fn failed_open(&self) {
        add(&self.fail_open, 1);
    }

    /// An engine event ran.
    pub(crate) fn event(&self) {
        add(&self.events, 1);
    }

    /// The proxy ran `n` of its agent tools' calls.
    pub(crate) fn agent_tool_calls(&self, n: u64) {
        add(&self.agent_tool_calls, n);
    }

    /// The LLM summarizer failed and the extractive one stood in.
    pub(crate) fn summarizer_failure(&self) {
        add(&self.summarizer_failures, 1);
    }

    /// The counters now.
    pub(crate) fn totals(&self) -> Totals {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Totals {
            requests: get(&self.requests),
            rewritten: get(&self.rewritten),
            passed_through: get(&self.passed_through),
            fail_open: get(&self.fail_open),
            bad_requests: get(&self.bad_requests),
            bytes_saved: get(&self.bytes_saved),
            originals_stored: get(&self.originals_stored),
            events: get(&self.events),
            agent_tool_calls: get(&self.agent_tool_calls),
            summarizer_failures: get(&self.summarizer_failures),
        }
    }
}
