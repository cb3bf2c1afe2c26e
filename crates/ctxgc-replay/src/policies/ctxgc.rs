//! ctxgc's own engine as a replay policy (any `ctxgc.toml` can be replayed the same way).

use ctxgc_core::Message;
use ctxgc_core::cache_life::{self, CacheSettings, Pauses};
use ctxgc_core::config::Config;
use ctxgc_core::engine::summary::SUMMARY_HEADER;
use ctxgc_core::engine::{EventKind, PlanKind, Session};
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
    /// The cache-lifetime decisions, as `ctxgc serve` makes them.
    life: Life,
    /// The client changed the fixed part of the request being built.
    client_rewrote: bool,
}

/// What the cache-lifetime decisions need from the session so far (the proxy keeps the same
/// per session).
#[derive(Default)]
struct Life {
    settings: CacheSettings,
    model: String,
    pauses: Pauses,
    /// The client asked for the long lifetime on the request being built.
    client_long: bool,
    /// The latest request asked for the long lifetime (the client or ctxgc).
    long_in_force: bool,
    /// The pause before the request being built outlived the lifetime in force.
    cold: bool,
    last_prompt: Option<u64>,
    keepalives: u32,
    /// When the latest keep-alive of the current pause was sent.
    last_keepalive_ms: Option<i64>,
}

impl Life {
    fn ttl_secs(&self, provider: ProviderFamily) -> u64 {
        let model_min = cache_life::model_min_lifetime_secs(&self.model).unwrap_or(0);
        cache_life::entry_lifetime(provider, self.long_in_force)
            .0
            .max(model_min)
    }

    /// The lifetime the engine judges a pause against when it is longer than the provider's
    /// default: asked for (the long one), or the model's own (GPT-5.6's 30 minutes).
    fn requested_ttl_secs(&self, provider: ProviderFamily) -> Option<u64> {
        (self.long_in_force || cache_life::model_min_lifetime_secs(&self.model).is_some())
            .then(|| self.ttl_secs(provider))
    }

    fn write_cost(&self, provider: ProviderFamily) -> f64 {
        cache_life::entry_lifetime(provider, self.long_in_force).1
    }
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
            life: Life {
                settings: config.cache.clone(),
                ..Life::default()
            },
            client_rewrote: false,
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
        let mut policy = if let Some(recording) = &c.transcript.recording {
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
        };
        policy.life.model = c.transcript.model.clone().unwrap_or_default();
        policy
    }
}

impl Ctxgc {
    /// The lifetime this request asks for: Anthropic's TTL by expected cost under the
    /// session's pauses, OpenAI's extended retention where the model offers it.
    fn life_decision(&mut self, prompt: u64) -> bool {
        let life = &mut self.life;
        let long = match self.provider {
            ProviderFamily::Anthropic => {
                let written = cache_life::written_tokens(prompt, life.last_prompt, life.cold);
                cache_life::anthropic_ttl(
                    &life.settings,
                    &life.pauses,
                    prompt,
                    written,
                    life.client_long,
                )
                .long
            }
            _ => {
                life.client_long
                    || cache_life::openai_retention(life.settings.retention, &life.model, false)
                        .is_some()
            }
        };
        life.last_prompt = Some(prompt);
        life.long_in_force = long;
        long
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

    fn fixed_prefix(&mut self, tokens: usize) {
        self.session.set_unseen_tokens(tokens);
    }

    fn observe_usage(&mut self, prompt_tokens: usize) {
        self.session.observe_usage(prompt_tokens);
    }

    fn client_changed_prompt(&mut self, from: Option<usize>) {
        // A change of the fixed part (system prompt, tools, or what invalidates the messages'
        // cache: thinking, tool choice) rewrites every message: an event then costs no write
        // of its own, as after a pause. A change further on leaves the messages before it
        // read, which an event would write again.
        self.client_rewrote |= from.is_none();
    }

    fn clock(&mut self, at: Option<SentAt>) {
        let sent_ms = at.map(|at| at.ms);
        let idle = match (self.last_sent_ms, sent_ms) {
            (Some(last), Some(now)) => u64::try_from((now - last) / 1000).ok(),
            _ => None,
        };
        // The cache was last used by the latest request or keep-alive: a pause bridged by
        // keep-alives left it warm.
        let unused = match (self.last_sent_ms.max(self.life.last_keepalive_ms), sent_ms) {
            (Some(last), Some(now)) => u64::try_from((now - last) / 1000).ok(),
            _ => None,
        };
        // The lifetime the previous request asked for (the client's, or ctxgc's decision)
        // says whether this pause outlived the cache; the proxy reads the same from the
        // request's `cache_control` and its own decisions.
        let ttl = self.life.ttl_secs(self.provider);
        let requested_ttl = self.life.requested_ttl_secs(self.provider);
        // The engine judges an event's cost by the cache it would break: none is left to break
        // after the client changed its fixed part, as after any pause past every lifetime.
        let rewrote = std::mem::take(&mut self.client_rewrote);
        let judged = if rewrote {
            Some(u64::from(u32::MAX))
        } else {
            unused
        };
        self.session.set_idle(judged, self.provider, requested_ttl);
        self.life.client_long = at.is_some_and(|at| at.long_ttl);
        // Either way the request writes its whole prompt (its TTL decision prices that).
        self.life.cold = rewrote || unused.is_some_and(|i| i > ttl);
        self.life.last_keepalive_ms = None;
        if let Some(idle) = idle {
            self.life.pauses.note(idle);
        }
        if sent_ms.is_some() {
            self.last_sent_ms = sent_ms;
        }
    }

    fn keepalive_every_ms(&self) -> Option<i64> {
        let ttl = self.life.ttl_secs(self.provider);
        (self.life.settings.keepalive && self.last_sent_ms.is_some())
            .then(|| ttl.saturating_sub(cache_life::KEEPALIVE_MARGIN_SECS) as i64 * 1_000)
    }

    fn keepalive_due(&mut self, idle_ms: i64) -> bool {
        // The event the expiry would make free, given up by a keep-alive (the proxy weighs the
        // same on the session's latest request).
        let kept_if_cold = match self.events {
            Events::Never => 1.0,
            Events::Any | Events::WhenCold => self.session.kept_if_cold(),
        };
        let due = cache_life::keepalive_due(
            &self.life.settings,
            &self.life.pauses,
            u64::try_from(idle_ms / 1_000).unwrap_or(0),
            self.life.ttl_secs(self.provider),
            (self.life.write_cost(self.provider), kept_if_cold),
            self.life.keepalives,
        );
        self.life.keepalives += u32::from(due);
        if due {
            self.life.last_keepalive_ms = self.last_sent_ms.map(|last| last + idle_ms);
        }
        due
    }

    fn request(&mut self) -> Request<'_> {
        let mut event = None;
        // A prompt past the window would fail: the event that makes it fit runs whenever the
        // policy runs events at all, as in the proxy.
        let may_run = match self.events {
            Events::Any => true,
            Events::WhenCold => self.session.is_cache_cold() || self.session.must_fit(),
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
                    decisions: record.decisions,
                });
            }
        }
        let prompt_tokens = self.session.prompt_tokens() as u64;
        let long_ttl = self
            .last_sent_ms
            .is_some()
            .then(|| self.life_decision(prompt_tokens));
        let messages = self.session.prompt();
        // Like the proxy: a breakpoint at the end of the latest summary.
        let breakpoints = messages
            .iter()
            .rposition(|m| m.text_content().starts_with(SUMMARY_HEADER))
            .into_iter()
            .collect();
        // Like the proxy: GPT-5.6 on, which matches a prefix only at a breakpoint, gets one at
        // the end of the stable prefix (the clients place none).
        let stable_breakpoint =
            cache_life::openai_breakpoint(self.life.settings.breakpoints, &self.life.model, false);
        Request {
            long_ttl,
            messages,
            breakpoints,
            stable_breakpoint,
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
        served_by(
            ProviderFamily::Anthropic,
            config,
            (pause_secs, None),
            long_ttl,
        )
    }

    /// `served` with the pause before turn 20, and there the client's change of its prompt
    /// (from the message at `Some(m)` of its request, `None`: its fixed prefix), if any.
    fn served_by(
        provider: ProviderFamily,
        config: Config,
        (pause_secs, change): (i64, Option<Option<usize>>),
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
            if let Some(from) = change.filter(|_| turn == 20) {
                policy.client_changed_prompt(from);
            }
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

    /// The lifetime each request of a served session asks for, where every fifth request comes
    /// ten minutes after the one before (the rest five seconds), and the keep-alives it sends
    /// in each ten-minute pause.
    fn lifetimes(config: Config) -> (Vec<Option<bool>>, Vec<usize>) {
        let mut policy = Ctxgc {
            provider: ProviderFamily::Anthropic,
            ..Ctxgc::as_served(200_000, config, "ctxgc".into())
        };
        policy.push(Message::text(Role::System, "sys"));
        policy.push(Message::text(Role::User, "task"));
        let (mut now_ms, mut long, mut pings) = (0, Vec::new(), Vec::new());
        for turn in 0..30 {
            let pause = if turn % 5 == 4 { 600_000 } else { 5_000 };
            let every = policy.keepalive_every_ms();
            let mut sent = 0;
            if let Some(every) = every.filter(|_| turn > 0) {
                let mut t = every;
                while t < pause && policy.keepalive_due(t) {
                    sent += 1;
                    t += every;
                }
            }
            pings.push(sent);
            now_ms += pause;
            policy.clock(Some(SentAt {
                ms: now_ms,
                long_ttl: false,
            }));
            long.push(policy.request().long_ttl);
            let output: String = (0..100)
                .map(|i| format!("line {i}: value_{} ok\n", i * 7 + turn * 10_007))
                .collect();
            super::super::bash_turn(&mut policy, format!("c{turn}"), &output);
        }
        (long, pings)
    }

    #[test]
    fn the_hour_is_asked_for_once_the_session_has_paused_and_keepalives_bridge_pauses() {
        let (long, pings) = lifetimes(Config::default());
        assert_eq!(
            long[0],
            Some(false),
            "a first request writes its whole prompt"
        );
        assert_eq!(long[1], Some(false), "no pause seen yet: {long:?}");
        assert!(long[25..].iter().all(|l| *l == Some(true)), "{long:?}");
        assert!(
            pings.iter().all(|&p| p == 0),
            "keep-alive is off by default"
        );
        let mut client = Config::default();
        client.cache.ttl = ctxgc_core::cache_life::TtlMode::Client;
        assert!(lifetimes(client).0.iter().all(|l| *l == Some(false)));
        let mut keepalive = Config::default();
        keepalive.cache.ttl = ctxgc_core::cache_life::TtlMode::Client;
        keepalive.cache.keepalive = true;
        let (_, pings) = lifetimes(keepalive);
        assert!(
            pings[9..].iter().step_by(5).all(|&p| p == 2),
            "two keep-alives carry a 5-minute entry over each ten-minute pause: {pings:?}"
        );
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
        let openai = |pause| {
            served_by(
                ProviderFamily::Openai,
                Config::default(),
                (pause, None),
                false,
            )
        };
        assert!(at(&openai(360)).is_empty());
        assert_eq!(at(&openai(660)), [20]);
    }

    /// GPT-5.6 on, as the proxy serves it: each request carries the breakpoint at the end of
    /// the stable prefix (unless `[cache] breakpoints = "client"`), and a pause is judged
    /// against the model's 30-minute minimum lifetime rather than OpenAI's default ten minutes.
    #[test]
    fn gpt_5_6_gets_its_stable_breakpoint_and_its_half_hour() {
        let run = |model: &str, config: Config, pause_secs: i64| {
            let mut policy = Ctxgc {
                provider: ProviderFamily::Openai,
                ..Ctxgc::as_served(200_000, config, "ctxgc".into())
            };
            policy.life.model = model.into();
            policy.push(Message::text(Role::System, "sys"));
            policy.push(Message::text(Role::User, "task"));
            let (mut now_ms, mut events, mut marked) = (0, Vec::new(), Vec::new());
            for turn in 0..30 {
                now_ms += if turn == 20 { pause_secs * 1000 } else { 5_000 };
                policy.clock(Some(SentAt {
                    ms: now_ms,
                    long_ttl: false,
                }));
                let request = policy.request();
                marked.push(request.stable_breakpoint);
                if request.event.is_some() {
                    events.push(turn);
                }
                let output: String = (0..300)
                    .map(|i| format!("line {i}: value_{} ok\n", i * 7 + turn * 10_007))
                    .collect();
                super::super::bash_turn(&mut policy, format!("c{turn}"), &output);
            }
            (events, marked)
        };
        let (events, marked) = run("gpt-4o", Config::default(), 900);
        assert_eq!(events, [20], "past GPT-4o's ten minutes");
        assert!(marked.iter().all(|m| !m));
        let (events, marked) = run("gpt-5.6-terra", Config::default(), 900);
        assert!(events.is_empty(), "within GPT-5.6's half hour: {events:?}");
        assert!(marked.iter().all(|m| *m));
        assert_eq!(run("gpt-5.6-terra", Config::default(), 1_900).0, [20]);
        let mut client = Config::default();
        client.cache.breakpoints = cache_life::BreakpointMode::Client;
        assert!(run("gpt-5.6-terra", client, 900).1.iter().all(|m| !m));
    }

    /// A change the client made to its fixed prefix (system prompt, tools, thinking settings)
    /// rewrites every message: the event a pause would allow runs then, with no pause. A change
    /// further on leaves the messages before it read: no event.
    #[test]
    fn an_event_rides_on_the_clients_change_of_its_fixed_prefix() {
        let events = |change| {
            let events = served_by(
                ProviderFamily::Anthropic,
                Config::default(),
                (5, Some(change)),
                false,
            );
            (0..events.len())
                .filter(|&i| events[i].is_some())
                .collect::<Vec<_>>()
        };
        assert_eq!(events(None), [20]);
        assert!(events(Some(40)).is_empty());
    }
}
