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
}

impl Ctxgc {
    /// The engine at `window` with `config`, shown as `name`.
    pub fn new(window: u64, config: Config, name: String) -> Ctxgc {
        Ctxgc {
            session: Session::new(name.clone(), window, &config, ProviderFamily::Openai),
            store: MemoryStore::default(),
            name,
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
        let _ = self.session.insert_tool_results(&mut self.store, results);
    }

    fn request(&mut self) -> Request<'_> {
        let mut event = None;
        if let Some(plan) = self.session.plan() {
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
