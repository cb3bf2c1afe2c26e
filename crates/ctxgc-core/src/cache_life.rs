//! The prompt cache's lifetime, decided per request from the session's own pauses: which TTL
//! Anthropic breakpoints ask for, whether OpenAI's extended retention is asked for, and
//! whether a keep-alive request is worth sending while the session is idle. One implementation
//! for the proxy and the replay lab, so the lab prices the decisions the proxy makes.
//!
//! Prices are relative to an uncached input token, as the providers document them
//! ([`crate::provider_cache`]): Anthropic writes at 1.25 (5 minutes) or 2.0 (1 hour), reads at
//! 0.1, and a read refreshes an entry's lifetime for free.
//!
//! The cost a TTL choice can change is this request's writes and the next request's: if the
//! pause before it outlives the entry, that request writes the whole prompt again instead of
//! reading it. So, with `W` the tokens this request writes, `P` the prompt the next one would
//! read and `S(t)` the share of the session's pauses longer than `t`:
//!
//! ```text
//! cost(5m) = 1.25 W + S(5 min) (1.25 - 0.1) P
//! cost(1h) = 2.00 W + S(1 h)   (2.00 - 0.1) P
//! ```
//!
//! and the cheaper is chosen. `S` is the session's own pauses so far, pulled toward a prior
//! (`PRIOR_*`, a weak one: four pauses' worth) so a new session is neither sure it will pause
//! nor sure it will not, and weighed against the chance that the next pause is the session's
//! end, after which no request comes (`END_WEIGHT`). Keep-alive is the same trade over time:
//! while idle, a request that reads the prefix (0.1 P) just before it expires is worth it while
//! the chance the session resumes within the next lifetime, given it has been idle this long
//! (which a session that ended has been too), exceeds the read's cost over the write it saves.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::provider_cache::{
    ANTHROPIC_LONG_TTL_SECS, ANTHROPIC_TTL_SECS, ANTHROPIC_WRITE_COST, CACHE_READ_COST,
};

/// Price of an input token written to Anthropic's one-hour cache, relative to an uncached one.
pub const ANTHROPIC_LONG_WRITE_COST: f64 = 2.0;

/// The prior share of pauses longer than Anthropic's 5-minute TTL. Not fitted to any log: a
/// weak assumption that a pause that long happens about once in twenty requests.
pub const PRIOR_OVER_SHORT_TTL: f64 = 0.05;
/// The prior share of pauses longer than an hour.
pub const PRIOR_OVER_LONG_TTL: f64 = 0.01;
/// How many pauses the prior weighs.
const PRIOR_WEIGHT: f64 = 4.0;
/// How many of a session's pauses are its end, one that no request follows: a session ends
/// once, and its pauses so far say nothing of when (the rule of succession counts it as one
/// more observation). Without it a long idle looks like a long pause that will end, and
/// keep-alives go on after a session's last request, when each is a read of the whole prompt
/// that nothing uses.
const END_WEIGHT: f64 = 1.0;
/// Pauses remembered per session (the newest).
const PAUSES_KEPT: usize = 64;

/// `[cache]`: what ctxgc may change in a request's cache fields. Each decision can be turned
/// off; none changes what the model sees.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheSettings {
    /// Anthropic breakpoints' TTL: `auto` (5 minutes or 1 hour, whichever the session's pauses
    /// make cheaper; a TTL the client asked for is never shortened), `client` (as sent), `1h`
    /// (always an hour).
    pub ttl: TtlMode,
    /// OpenAI's `prompt_cache_retention`: `auto` (`24h` for the models that offer it, at the
    /// same price), `client` (as sent).
    pub retention: RetentionMode,
    /// OpenAI's explicit breakpoints (GPT-5.6 on): `auto` (one at the end of the stable prefix,
    /// the first user message after the leading system and developer ones, when the client
    /// placed none), `client` (as sent).
    pub breakpoints: BreakpointMode,
    /// Keep-alive requests while a session is idle (they are sent on the caller's key, so off
    /// unless turned on). On a proxy, a caller also turns them on for itself (the header
    /// `x-ctxgc-keepalive: on`), unless `keepalive_every_caller`.
    pub keepalive: bool,
    /// A proxy whose callers are all its operator's: keep-alives for every caller that does
    /// not send `x-ctxgc-keepalive: off`, without the header.
    pub keepalive_every_caller: bool,
    /// No keep-alive once a session has been idle this long.
    pub keepalive_max_idle_secs: u64,
    /// Keep-alive requests per session at most.
    pub keepalive_budget: u32,
}

impl Default for CacheSettings {
    fn default() -> Self {
        CacheSettings {
            ttl: TtlMode::Auto,
            retention: RetentionMode::Auto,
            breakpoints: BreakpointMode::Auto,
            keepalive: false,
            keepalive_every_caller: false,
            keepalive_max_idle_secs: 30 * 60,
            keepalive_budget: 24,
        }
    }
}

/// How Anthropic breakpoints' TTL is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TtlMode {
    /// By expected cost under the session's pauses.
    Auto,
    /// As the client sent it.
    Client,
    /// Always one hour.
    #[serde(rename = "1h")]
    OneHour,
}

/// How OpenAI's retention is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RetentionMode {
    /// `24h` where the model offers it.
    Auto,
    /// As the client sent it.
    Client,
}

/// How OpenAI's explicit breakpoints are placed (GPT-5.6 on).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BreakpointMode {
    /// One at the end of the stable prefix, where the client placed none.
    Auto,
    /// As the client sent them.
    Client,
}

/// A session's pauses between requests, the newest [`PAUSES_KEPT`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pauses {
    secs: VecDeque<u64>,
}

impl Pauses {
    /// Notes the pause before a request.
    pub fn note(&mut self, secs: u64) {
        if self.secs.len() == PAUSES_KEPT {
            self.secs.pop_front();
        }
        self.secs.push_back(secs);
    }

    /// How many pauses are remembered.
    pub fn len(&self) -> usize {
        self.secs.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.secs.is_empty()
    }

    /// The chance that the session's next pause ends in a request later than `secs` into it:
    /// the share of its pauses longer than that, pulled toward the prior, and weighed against
    /// the chance that the next pause is the session's end ([`END_WEIGHT`]).
    pub fn resumes_after(&self, secs: u64) -> f64 {
        let over = self.secs.iter().filter(|&&s| s > secs).count() as f64;
        (over + PRIOR_WEIGHT * prior_over(secs)) / self.weight()
    }

    /// The chance that the session's next pause lasts longer than `secs`: that it resumes
    /// later, or never (the session ended).
    pub fn lasts_over(&self, secs: u64) -> f64 {
        self.resumes_after(secs) + END_WEIGHT / self.weight()
    }

    fn weight(&self) -> f64 {
        self.secs.len() as f64 + PRIOR_WEIGHT + END_WEIGHT
    }
}

/// The prior share of pauses longer than `secs`: log-linear between the two documented
/// lifetimes' priors, and beyond them.
fn prior_over(secs: u64) -> f64 {
    let (a, b) = (ANTHROPIC_TTL_SECS as f64, ANTHROPIC_LONG_TTL_SECS as f64);
    let (pa, pb) = (PRIOR_OVER_SHORT_TTL.ln(), PRIOR_OVER_LONG_TTL.ln());
    let x = (secs.max(1) as f64).ln();
    let slope = (pb - pa) / (b.ln() - a.ln());
    (pa + slope * (x - a.ln())).exp().min(1.0)
}

/// The TTL chosen for one request's Anthropic breakpoints, with the expected costs compared
/// (in uncached input tokens), so a report can say why.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TtlDecision {
    /// Ask for the one-hour TTL.
    pub long: bool,
    /// Expected cost with the 5-minute TTL.
    pub cost_short: f64,
    /// Expected cost with the one-hour TTL.
    pub cost_long: f64,
}

/// The TTL for a request that writes `written` tokens of a `prompt`-token prompt, after
/// `pauses`; `client_long` when the client already asked for an hour (never shortened).
///
/// Keep-alives do not enter the price: they bridge the pauses the 5-minute entries meet, and
/// a bridged pause forgoes the free cold event it would have allowed, which a price of the
/// keep-alives' reads alone leaves out. Priced in, they made ctxgc choose five minutes more
/// often and cost more on the shared Claude Code logs (0.885x of `none` against 0.864x).
pub fn anthropic_ttl(
    settings: &CacheSettings,
    pauses: &Pauses,
    prompt: u64,
    written: u64,
    client_long: bool,
) -> TtlDecision {
    let (p, w) = (prompt as f64, written as f64);
    let rewrite = ANTHROPIC_WRITE_COST - CACHE_READ_COST;
    let cost_short =
        ANTHROPIC_WRITE_COST * w + pauses.resumes_after(ANTHROPIC_TTL_SECS) * rewrite * p;
    let cost_long = ANTHROPIC_LONG_WRITE_COST * w
        + pauses.resumes_after(ANTHROPIC_LONG_TTL_SECS)
            * (ANTHROPIC_LONG_WRITE_COST - CACHE_READ_COST)
            * p;
    let long = client_long
        || match settings.ttl {
            TtlMode::Auto => cost_long < cost_short,
            TtlMode::Client => false,
            TtlMode::OneHour => true,
        };
    TtlDecision {
        long,
        cost_short,
        cost_long,
    }
}

/// The tokens a request writes to the cache: its growth over the previous request's prompt
/// while the cache is warm, the whole prompt after it went cold.
pub fn written_tokens(prompt: u64, previous: Option<u64>, cold: bool) -> u64 {
    match previous {
        Some(prev) if !cold => prompt.saturating_sub(prev),
        _ => prompt,
    }
}

/// Whether `model` offers OpenAI's extended (24-hour) retention: the GPT-5 families before
/// GPT-5.6, and GPT-4.1, as OpenAI's prompt caching guide lists them. From GPT-5.6 on,
/// `prompt_cache_retention` is refused ("prompt_cache_retention is not supported on this
/// model"): those models take `prompt_cache_options` and breakpoints instead
/// ([`takes_explicit_breakpoints`]).
pub fn offers_extended_retention(model: &str) -> bool {
    let model = model.rsplit('/').next().unwrap_or(model);
    (model.starts_with("gpt-5") || model.starts_with("gpt-4.1"))
        && !takes_explicit_breakpoints(model)
}

/// Whether `model` is of OpenAI's GPT-5.6 family or later: its cache writes are billed (1.25x
/// input), it matches a cached prefix only at a breakpoint (the implicit one OpenAI places on
/// the latest message, or explicit ones: `prompt_cache_breakpoint` on an input content block,
/// at most four written per request), and every entry lives at least
/// [`EXPLICIT_BREAKPOINT_MIN_TTL_SECS`] (`prompt_cache_options.ttl`, `30m`, its only value).
pub fn takes_explicit_breakpoints(model: &str) -> bool {
    let model = model.rsplit('/').next().unwrap_or(model);
    let Some(rest) = model.strip_prefix("gpt-") else {
        return false;
    };
    let mut version = rest
        .split(|c: char| !c.is_ascii_digit() && c != '.')
        .next()
        .unwrap_or_default()
        .split('.');
    let major = version.next().and_then(|v| v.parse::<u32>().ok());
    let minor = version
        .next()
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(0);
    major.is_some_and(|major| major > 5 || (major == 5 && minor >= 6))
}

/// How long, at least, an entry written by a GPT-5.6-or-later request lives (OpenAI's
/// `prompt_cache_options.ttl` default and only value, `30m`).
pub const EXPLICIT_BREAKPOINT_MIN_TTL_SECS: u64 = 30 * 60;

/// How long `model`'s cache entries live at least, when it says so itself rather than through
/// a field the client sets: GPT-5.6 and later ([`EXPLICIT_BREAKPOINT_MIN_TTL_SECS`]).
pub fn model_min_lifetime_secs(model: &str) -> Option<u64> {
    takes_explicit_breakpoints(model).then_some(EXPLICIT_BREAKPOINT_MIN_TTL_SECS)
}

/// Whether to put an explicit breakpoint at the end of a request's stable prefix (its leading
/// system and developer messages and the first user message after them): on GPT-5.6 and later,
/// which match a cached prefix only at a breakpoint, so that a request whose history changed
/// after that prefix (an event of ctxgc's, the client's own compaction) still reads it instead
/// of writing it again at 1.25x. The session's first request wrote an entry there too, but
/// nothing reads it while the history only grows, so it expires after its half hour; this one
/// is written again by every request. Not when the client manages breakpoints itself (it placed
/// one, or asked for `explicit` mode): the implicit breakpoint OpenAI places on the latest
/// message and this one are two of the four a request may write.
pub fn openai_breakpoint(mode: BreakpointMode, model: &str, client_manages: bool) -> bool {
    mode == BreakpointMode::Auto && !client_manages && takes_explicit_breakpoints(model)
}

/// Where a request's stable prefix ends, the index of its last item, from its items' roles
/// (`None` for an item that is not a message): the leading system (and developer) messages
/// and the first user message after them (the task, or a client's instructions file, which no
/// event rewrites and a client's compaction keeps), else the last of those; `None` when
/// neither leads. Where [`openai_breakpoint`] puts its breakpoint.
pub fn stable_prefix_end(roles: impl IntoIterator<Item = Option<crate::Role>>) -> Option<usize> {
    let mut leading = 0;
    for role in roles {
        match role {
            Some(crate::Role::System) => leading += 1,
            Some(crate::Role::User) => return Some(leading),
            _ => break,
        }
    }
    leading.checked_sub(1)
}

/// The retention to ask for: `Some("24h")` to add it where the client asked for none.
pub fn openai_retention(
    mode: RetentionMode,
    model: &str,
    client_set: bool,
) -> Option<&'static str> {
    (mode == RetentionMode::Auto && !client_set && offers_extended_retention(model))
        .then_some("24h")
}

/// Whether a keep-alive request is due now, `idle_secs` into a pause of a session whose entry
/// lives `ttl_secs`, with `sent` keep-alives so far this session.
///
/// Keeping the entry alive pays when the session resumes before it would have expired: then
/// the resumed request reads the prompt (0.1) instead of writing again the share of it
/// (`kept_if_cold`, [`crate::engine::plan::kept_if_cold`]) that the event the expiry makes free
/// leaves (`write_cost` each): a keep-alive gives that event up.
/// Each keep-alive costs a read of the prompt and keeps the entry one lifetime longer, so a
/// keep-alive now is worth sending if some number of keep-alives, one per lifetime from now,
/// costs less than the rewrites it is expected to save, given the session has been idle this
/// long (later keep-alives are counted only while the session is still idle).
pub fn keepalive_due(
    settings: &CacheSettings,
    pauses: &Pauses,
    idle_secs: u64,
    ttl_secs: u64,
    (write_cost, kept_if_cold): (f64, f64),
    sent: u32,
) -> bool {
    let write_cost = write_cost * kept_if_cold.clamp(0.0, 1.0);
    if !settings.keepalive || sent >= settings.keepalive_budget {
        return false;
    }
    let max_idle = settings.keepalive_max_idle_secs;
    if idle_secs > max_idle || ttl_secs == 0 {
        return false;
    }
    // Idle this long: the pause goes on, or it was the session's end.
    let idle = pauses.lasts_over(idle_secs);
    let step = ttl_secs.saturating_sub(KEEPALIVE_MARGIN_SECS).max(1);
    let mut pings = 0.0;
    let mut at = idle_secs;
    while at <= max_idle && sent as u64 + (pings as u64) < settings.keepalive_budget as u64 {
        // A keep-alive at `at` is sent if the session is still idle then (ended or not); it
        // saves a rewrite if the session resumes by the next lifetime's end.
        pings += pauses.lasts_over(at) / idle;
        let saved = (pauses.resumes_after(idle_secs) - pauses.resumes_after(at + ttl_secs)) / idle;
        if saved * (write_cost - CACHE_READ_COST) > pings * CACHE_READ_COST {
            return true;
        }
        at += step;
    }
    false
}

/// How long a cache entry lives and what writing it costs (relative to an uncached input
/// token), for a provider, with or without the long lifetime (Anthropic's hour, OpenAI's 24
/// hours) asked for. OpenAI's writes cost nothing extra.
pub fn entry_lifetime(provider: crate::tokens::ProviderFamily, long: bool) -> (u64, f64) {
    use crate::provider_cache::{OPENAI_EXTENDED_RETENTION_SECS, OPENAI_RETENTION_SECS};
    use crate::tokens::ProviderFamily;
    match (provider, long) {
        (ProviderFamily::Anthropic, true) => (ANTHROPIC_LONG_TTL_SECS, ANTHROPIC_LONG_WRITE_COST),
        (ProviderFamily::Anthropic, false) => (ANTHROPIC_TTL_SECS, ANTHROPIC_WRITE_COST),
        (_, true) => (OPENAI_EXTENDED_RETENTION_SECS, 1.0),
        (_, false) => (OPENAI_RETENTION_SECS, 1.0),
    }
}

/// How long before an entry expires a keep-alive is sent (a request takes time to arrive, and
/// the lifetime counts from its start).
pub const KEEPALIVE_MARGIN_SECS: u64 = 30;

#[cfg(test)]
mod tests {
    use super::*;

    fn auto() -> CacheSettings {
        CacheSettings::default()
    }

    fn mode(ttl: TtlMode) -> CacheSettings {
        CacheSettings {
            ttl,
            ..CacheSettings::default()
        }
    }

    fn pauses(secs: &[u64]) -> Pauses {
        let mut p = Pauses::default();
        for &s in secs {
            p.note(s);
        }
        p
    }

    #[test]
    fn the_prior_meets_its_two_anchors() {
        assert!((prior_over(300) - PRIOR_OVER_SHORT_TTL).abs() < 1e-9);
        assert!((prior_over(3_600) - PRIOR_OVER_LONG_TTL).abs() < 1e-9);
        assert!(prior_over(10) > prior_over(300));
    }

    #[test]
    fn a_session_that_pauses_between_5_and_60_minutes_gets_the_hour() {
        // Twenty requests, four pauses of ten to forty minutes.
        let mut secs = vec![5; 16];
        secs.extend([600, 900, 1_800, 2_400]);
        let p = pauses(&secs);
        let d = anthropic_ttl(&auto(), &p, 100_000, 2_000, false);
        assert!(d.long, "{d:?}");
        // The same growth in a session that never paused: five minutes.
        let d = anthropic_ttl(&auto(), &pauses(&[5; 20]), 100_000, 2_000, false);
        assert!(!d.long, "{d:?}");
        // Keep-alive on or off, the same choice: keep-alives bridge what five minutes leaves.
        let keepalive = CacheSettings {
            keepalive: true,
            ..CacheSettings::default()
        };
        assert_eq!(
            anthropic_ttl(&keepalive, &p, 100_000, 2_000, false),
            anthropic_ttl(&auto(), &p, 100_000, 2_000, false)
        );
    }

    #[test]
    fn a_whole_prompt_written_again_keeps_five_minutes_and_a_client_hour_is_kept() {
        let p = pauses(&[600, 5, 900, 5]);
        assert!(!anthropic_ttl(&auto(), &p, 100_000, 100_000, false).long);
        assert!(anthropic_ttl(&auto(), &p, 100_000, 100_000, true).long);
        assert!(anthropic_ttl(&mode(TtlMode::OneHour), &p, 1, 1, false).long);
        assert!(
            !anthropic_ttl(
                &mode(TtlMode::Client),
                &pauses(&[900; 10]),
                100_000,
                10,
                false
            )
            .long
        );
    }

    #[test]
    fn keepalive_stops_when_a_resume_grows_unlikely_and_at_its_limits() {
        let on = CacheSettings {
            keepalive: true,
            ..CacheSettings::default()
        };
        // Pauses of about ten minutes: at 4.5 minutes idle, two keep-alives carry the entry
        // past them.
        let p = pauses(&[600, 620, 580, 5, 5, 610]);
        assert!(keepalive_due(
            &on,
            &p,
            270,
            300,
            (ANTHROPIC_WRITE_COST, 1.0),
            0
        ));
        // Past the stated idle time: none.
        assert!(!keepalive_due(
            &on,
            &p,
            1_900,
            300,
            (ANTHROPIC_WRITE_COST, 1.0),
            0
        ));
        // Forty minutes into a pause longer than any the session had: a resume within the next
        // five minutes is too unlikely to pay for the read, whatever the idle limit.
        let late = CacheSettings {
            keepalive_max_idle_secs: 24 * 3_600,
            ..on.clone()
        };
        assert!(!keepalive_due(
            &late,
            &p,
            2_400,
            300,
            (ANTHROPIC_WRITE_COST, 1.0),
            0
        ));
        assert!(!keepalive_due(
            &on,
            &p,
            270,
            300,
            (ANTHROPIC_WRITE_COST, 1.0),
            on.keepalive_budget
        ));
        assert!(!keepalive_due(
            &CacheSettings::default(),
            &p,
            270,
            300,
            (1.25, 1.0),
            0
        ));
    }

    /// A session ends once, and its last request is followed by an idle that never ends: a
    /// session that has not yet come back from a pause past its entry gets no keep-alive (its
    /// first such pause is as likely its end), one that came back from several does, and the
    /// chance of the end is counted in every later keep-alive's reads.
    #[test]
    fn keepalive_counts_the_sessions_end() {
        let on = CacheSettings {
            keepalive: true,
            ..CacheSettings::default()
        };
        let due = |p: &Pauses| keepalive_due(&on, p, 270, 300, (ANTHROPIC_WRITE_COST, 1.0), 0);
        assert!(!due(&Pauses::default()), "a first request's pause");
        let quick = pauses(&[5; 30]);
        assert!(!due(&quick), "a session that never paused");
        let came_back = pauses(&[5, 5, 400, 5, 5, 420, 5, 5, 380]);
        assert!(
            due(&came_back),
            "a session that comes back after six minutes"
        );
        // With the end counted, a session idle this long is less likely to resume than its
        // resumed pauses alone say.
        assert!(came_back.lasts_over(270) > came_back.resumes_after(270));
        assert!((came_back.lasts_over(100_000) - 1.0 / (9.0 + 4.0 + 1.0)).abs() < 1e-3);
    }

    /// A keep-alive gives up the event an expiry makes free: when that event would drop most
    /// of the prompt, the write the keep-alive saves is small and it is not sent.
    #[test]
    fn keepalive_weighs_the_event_an_expiry_makes_free() {
        let on = CacheSettings {
            keepalive: true,
            ..CacheSettings::default()
        };
        let p = pauses(&[600, 620, 580, 5, 5, 610]);
        let due = |kept| keepalive_due(&on, &p, 270, 300, (ANTHROPIC_WRITE_COST, kept), 0);
        assert!(
            due(1.0),
            "nothing to drop: the whole prompt would be written again"
        );
        assert!(due(0.8));
        assert!(!due(0.1), "the free event would keep a tenth of the prompt");
    }

    #[test]
    fn extended_retention_is_asked_only_where_offered_and_unset() {
        assert_eq!(
            openai_retention(RetentionMode::Auto, "gpt-5.1", false),
            Some("24h")
        );
        assert_eq!(
            openai_retention(RetentionMode::Auto, "openai/gpt-4.1-mini", false),
            Some("24h")
        );
        assert_eq!(openai_retention(RetentionMode::Auto, "gpt-4o", false), None);
        // GPT-5.6 on refuses the retention field: its entries live 30 minutes anyway.
        for model in [
            "gpt-5.6-luna",
            "openai/gpt-5.6-terra-2026-10-01",
            "gpt-5.10",
            "gpt-6",
        ] {
            assert_eq!(
                openai_retention(RetentionMode::Auto, model, false),
                None,
                "{model}"
            );
            assert!(takes_explicit_breakpoints(model), "{model}");
            assert_eq!(model_min_lifetime_secs(model), Some(1_800), "{model}");
        }
        for model in [
            "gpt-5",
            "gpt-5.5-pro",
            "gpt-5-mini",
            "gpt-4.1",
            "gpt-4o",
            "claude-opus-4-5",
            "o3",
        ] {
            assert!(!takes_explicit_breakpoints(model), "{model}");
            assert_eq!(model_min_lifetime_secs(model), None, "{model}");
        }
        assert_eq!(openai_retention(RetentionMode::Auto, "gpt-5", true), None);
        assert!(openai_breakpoint(
            BreakpointMode::Auto,
            "gpt-5.6-sol",
            false
        ));
        assert!(!openai_breakpoint(
            BreakpointMode::Auto,
            "gpt-5.6-sol",
            true
        ));
        assert!(!openai_breakpoint(
            BreakpointMode::Client,
            "gpt-5.6-sol",
            false
        ));
        assert!(!openai_breakpoint(BreakpointMode::Auto, "gpt-5.1", false));
        use crate::Role::{Assistant, System, User};
        let end = |roles: &[Option<crate::Role>]| stable_prefix_end(roles.iter().copied());
        assert_eq!(
            end(&[Some(System), Some(System), Some(User), Some(User)]),
            Some(2)
        );
        assert_eq!(end(&[Some(User), Some(Assistant)]), Some(0));
        assert_eq!(end(&[Some(System), Some(Assistant)]), Some(0));
        assert_eq!(end(&[Some(System), None, Some(User)]), Some(0));
        assert_eq!(end(&[Some(Assistant), Some(User)]), None);
        assert_eq!(
            openai_retention(RetentionMode::Client, "gpt-5", false),
            None
        );
    }
}
