//! ctxgc's own engine as a replay policy (any `ctxgc.toml` can be replayed the same way).

use ctxgc_core::Message;
use ctxgc_core::config::Config;
use ctxgc_core::engine::summary::SUMMARY_HEADER;
use ctxgc_core::engine::{EventKind, PlanKind, Session};
use ctxgc_core::provider_cache;
use ctxgc_core::store::MemoryStore;
use ctxgc_core::tokens::ProviderFamily;

use super::{ReplayEvent, ReplayPolicy, Request};
use crate::cache::SentAt;

/// The engine with a configuration.
pub struct Ctxgc {
    name: String,
    session: Session,
    store: MemoryStore,
    events: Events,
    last_sent_ms: Option<i64>,
    /// The provider the client talks to, whose cache TTL applies (a client log's; OpenAI's
    /// for a transcript).
    provider: ProviderFamily,
}

/// Which requests may carry an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Events {
    /// Any (the session engine; `ctxgc serve` with `[proxy] compact`).
    Any,
    /// Only a request after the cache went cold (`ctxgc serve` with `[proxy] cold_events`).
    WhenCold,
    /// None.
    Never,
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
            events: Events::Any,
            last_sent_ms: None,
            provider: ProviderFamily::Openai,
        }
    }

    /// What `ctxgc serve` does in front of a client with `config` at `window`: insertion-time
    /// trimming, and the engine's events where the proxy runs them: on any request with
    /// `[proxy] compact`, after the cache went cold with `[proxy] cold_events`.
    pub fn as_served(window: u64, config: Config, name: String) -> Ctxgc {
        let events = match (config.proxy.compact, config.proxy.cold_events) {
            (true, _) => Events::Any,
            (false, true) => Events::WhenCold,
            (false, false) => Events::Never,
        };
        let mut served = Ctxgc::new(window, config, name);
        // As the proxy: in front of a client that keeps its own window, events only prune.
        served.session.set_may_compact(events == Events::Any);
        Ctxgc { events, ..served }
    }

    /// `as_served` on a client's log (the proxy's view), `new` on any other transcript.
    pub fn for_session(c: &super::SessionContext, config: Config, name: String) -> Ctxgc {
        if let Some(recording) = &c.transcript.recording {
            Ctxgc {
                provider: if recording.client.starts_with("claude") {
                    ProviderFamily::Anthropic
                } else {
                    ProviderFamily::Openai
                },
                ..Ctxgc::as_served(c.window, config, name)
            }
        } else {
            Ctxgc::new(c.window, config, name)
        }
    }
}

impl ReplayPolicy for Ctxgc {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn stores_originals(&self) -> bool {
        true
    }

    fn push(&mut self, message: Message) {
        self.session.push(message);
    }

    fn insert_tool_results(&mut self, results: Vec<Message>) {
        // A memory store cannot fail.
        let _ = self.session.insert_tool_results(&self.store, results);
    }

    fn clock(&mut self, at: Option<SentAt>) {
        let sent_ms = at.map(|at| at.ms);
        let idle = match (self.last_sent_ms, sent_ms) {
            (Some(last), Some(now)) => u64::try_from((now - last) / 1000).ok(),
            _ => None,
        };
        // The proxy reads the same from the request's `cache_control`.
        let requested_ttl = at
            .is_some_and(|at| at.long_ttl)
            .then_some(provider_cache::ANTHROPIC_LONG_TTL_SECS);
        self.session.set_idle(idle, self.provider, requested_ttl);
        if sent_ms.is_some() {
            self.last_sent_ms = sent_ms;
        }
    }

    fn request(&mut self) -> Request<'_> {
        let mut event = None;
        let may_run = match self.events {
            Events::Any => true,
            Events::WhenCold => self.session.is_cache_cold(),
            Events::Never => false,
        };
        if let Some(plan) = may_run.then(|| self.session.plan()).flatten() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use ctxgc_core::Role;

    /// A served session of 30 turns of 1.5K-token outputs to an Anthropic model; the request
    /// of turn 20 comes `pause_secs` after the one before; every request asks for the one-hour
    /// cache TTL when `long_ttl`. The events, by turn.
    fn served(config: Config, pause_secs: i64, long_ttl: bool) -> Vec<Option<String>> {
        served_by(ProviderFamily::Anthropic, config, pause_secs, long_ttl)
    }

    fn served_by(
        provider: ProviderFamily,
        config: Config,
        pause_secs: i64,
        long_ttl: bool,
    ) -> Vec<Option<String>> {
        let mut policy = Ctxgc {
            provider,
            ..Ctxgc::as_served(200_000, config, "ctxgc".into())
        };
        policy.push(Message::text(Role::System, "sys"));
        policy.push(Message::text(Role::User, "task"));
        let mut now_ms = 0;
        let mut events = Vec::new();
        for turn in 0..30 {
            now_ms += if turn == 20 { pause_secs * 1000 } else { 5_000 };
            policy.clock(Some(SentAt {
                ms: now_ms,
                long_ttl,
            }));
            events.push(policy.request().event.map(|e| e.kind));
            // Each output its own: a repeat would enter as a pointer to the earlier one.
            let output: String = (0..300)
                .map(|i| format!("line {i}: value_{} ok\n", i * 7 + turn * 10_007))
                .collect();
            super::super::bash_turn(&mut policy, format!("c{turn}"), &output);
        }
        events
    }

    #[test]
    fn served_by_default_an_event_runs_only_after_the_cache_went_cold() {
        let at = |events: &[Option<String>]| -> Vec<usize> {
            (0..events.len()).filter(|&i| events[i].is_some()).collect()
        };
        let events = served(Config::default(), 600, false);
        assert_eq!(at(&events), [20], "{events:?}");
        assert_eq!(events[20].as_deref(), Some("prune"));
        assert!(at(&served(Config::default(), 60, false)).is_empty());
        let mut off = Config::default();
        off.proxy.cold_events = false;
        assert!(at(&served(off, 600, false)).is_empty());
        // A client that asked for the one-hour TTL still has a warm cache after ten minutes:
        // an event then would break it.
        assert!(at(&served(Config::default(), 600, true)).is_empty());
        assert_eq!(at(&served(Config::default(), 3_700, true)), [20]);
        // OpenAI keeps a prefix up to 10 minutes: a 6-minute pause may find it warm.
        let openai = |pause| served_by(ProviderFamily::Openai, Config::default(), pause, false);
        assert!(at(&openai(360)).is_empty());
        assert_eq!(at(&openai(660)), [20]);
    }
}
