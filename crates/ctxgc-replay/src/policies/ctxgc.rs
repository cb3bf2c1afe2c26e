//! ctxgc's own engine as a replay policy (any `ctxgc.toml` can be replayed the same way).

use ctxgc_core::Message;
use ctxgc_core::config::Config;
use ctxgc_core::engine::summary::SUMMARY_HEADER;
use ctxgc_core::engine::{EventKind, PlanKind, Session};
use ctxgc_core::store::MemoryStore;
use ctxgc_core::tokens::ProviderFamily;

use super::{ReplayEvent, ReplayPolicy, Request};

/// The engine with a configuration.
pub struct Ctxgc {
    name: String,
    session: Session,
    store: MemoryStore,
    events: bool,
    last_sent_ms: Option<i64>,
}

impl Ctxgc {
    /// The engine at `window` with `config`, shown as `name`: insertion-time trimming and the
    /// engine's events (prune, then compaction).
    pub fn new(window: u64, config: Config, name: String) -> Ctxgc {
        let mut session = Session::new(name.clone(), window, &config, ProviderFamily::Openai);
        session.share_counts(crate::counting::memo());
        Ctxgc {
            session,
            store: MemoryStore::default(),
            name,
            events: true,
            last_sent_ms: None,
        }
    }

    /// What `ctxgc serve` does in front of a client with `config` at `window`: insertion-time
    /// trimming, and the engine's events only when the proxy runs them (`[proxy] compact`).
    pub fn as_served(window: u64, config: Config, name: String) -> Ctxgc {
        let events = config.proxy.compact;
        Ctxgc {
            events,
            ..Ctxgc::new(window, config, name)
        }
    }

    /// `as_served` on a client's log (the proxy's view), `new` on any other transcript.
    pub fn for_session(c: &super::SessionContext, config: Config, name: String) -> Ctxgc {
        if c.transcript.recording.is_some() {
            Ctxgc::as_served(c.window, config, name)
        } else {
            Ctxgc::new(c.window, config, name)
        }
    }
}

impl ReplayPolicy for Ctxgc {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn push(&mut self, message: Message) {
        self.session.push(message);
    }

    fn insert_tool_results(&mut self, results: Vec<Message>) {
        // A memory store cannot fail.
        let _ = self.session.insert_tool_results(&self.store, results);
    }

    fn clock(&mut self, sent_ms: Option<i64>) {
        let idle = match (self.last_sent_ms, sent_ms) {
            (Some(last), Some(now)) => u64::try_from((now - last) / 1000).ok(),
            _ => None,
        };
        self.session.set_idle(idle);
        if sent_ms.is_some() {
            self.last_sent_ms = sent_ms;
        }
    }

    fn request(&mut self) -> Request<'_> {
        let mut event = None;
        if let Some(plan) = self.session.plan().filter(|_| self.events) {
            let summarizer_request = (plan.kind == PlanKind::Compaction)
                .then(|| self.session.summary_request(&plan).messages);
            if let Ok(record) = self.session.apply(&plan, None) {
                event = Some(ReplayEvent {
                    kind: match record.kind {
                        EventKind::PruneOnly => "prune".into(),
                        _ => "compaction".into(),
                    },
                    summarizer_request,
                    summary_tokens: record.summarizer_tokens_out,
                    earliest_changed: record.earliest_changed,
                });
            }
        }
        let messages = self.session.prompt();
        // Like the proxy: a breakpoint at the end of the latest summary.
        let breakpoints = messages
            .iter()
            .rposition(|m| m.text_content().starts_with(SUMMARY_HEADER))
            .into_iter()
            .collect();
        Request {
            messages,
            breakpoints,
            event,
        }
    }
}
