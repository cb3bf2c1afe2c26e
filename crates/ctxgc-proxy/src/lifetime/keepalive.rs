//! Keep-alive requests (`[cache] keepalive`, off by default): while an Anthropic session is
//! idle, a minimal request on its cached prefix shortly before the entry would expire, so the
//! request that resumes the session reads the prefix instead of writing it again.
//!
//! Whether one is worth sending is [`ctxgc_core::cache_life::keepalive_due`], the decision the
//! replay lab prices: the session's own pauses say how likely it is to resume within the next
//! lifetime, given how long it has been idle. Each session has a budget of keep-alives and none
//! is sent after `keepalive_max_idle_secs` of idleness.
//!
//! They are sent on the caller's key, so only for a caller that turned them on (the header
//! `x-ctxgc-keepalive: on`, or `keepalive_every_caller` on a proxy whose callers are all its
//! operator's). The key is held in memory only, with the latest request of the session, until
//! the session's keep-alives end; it is never logged or written anywhere. What is held is
//! bounded in sessions and bytes (the least recently active go first).
//!
//! A keep-alive is the session's latest request as it was sent (same system prompt, tools,
//! messages and breakpoints, so it reads the same entries), asking for one output token and no
//! stream. A request with a thinking budget gets none: its `max_tokens` must exceed the budget,
//! and the model could spend all of it.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, Uri};
use bytes::Bytes;
use ctxgc_core::cache_life::{self, CacheSettings, Pauses};
use ctxgc_core::store::SessionId;
use ctxgc_core::tokens::ProviderFamily;
use serde_json::Value;

use crate::lifetime::recent::RecentSessions;

/// What keep-alives may hold and how long they may take.
#[derive(Debug, Clone, Copy)]
pub struct KeepAliveSettings {
    /// Sessions waiting for a keep-alive, at most.
    pub max_sessions: usize,
    /// Bytes of their latest requests held, at most.
    pub max_bytes: usize,
    /// A keep-alive's deadline, for the whole answer.
    pub deadline: Duration,
    /// How long one second of the providers' cache lifetimes and of a session's idleness lasts
    /// on this proxy's clock: one second, except in tests, which shorten it to see a
    /// five-minute lifetime pass.
    pub second: Duration,
}

impl Default for KeepAliveSettings {
    fn default() -> Self {
        KeepAliveSettings {
            max_sessions: 1_000,
            max_bytes: 64 << 20,
            deadline: Duration::from_secs(60),
            second: Duration::from_secs(1),
        }
    }
}

/// The header with which a caller turns keep-alives on or off for itself.
pub(crate) const CONSENT_HEADER: &str = "x-ctxgc-keepalive";

/// Whether the caller of a request with `headers` gets keep-alives.
pub(crate) fn consents(settings: &CacheSettings, headers: &HeaderMap) -> bool {
    if !settings.keepalive {
        return false;
    }
    let said = headers
        .get(CONSENT_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_ascii_lowercase());
    match said.as_deref() {
        Some("on" | "true" | "1") => true,
        Some(_) => false,
        None => settings.keepalive_every_caller,
    }
}

/// A session waiting for its next keep-alive.
struct Waiting {
    uri: Uri,
    /// The caller's headers (its key among them), held for the keep-alive only.
    headers: HeaderMap,
    /// The latest request as it was sent.
    body: Bytes,
    /// When the next keep-alive is due to be judged.
    next_at: Instant,
    ttl_secs: u64,
    write_cost: f64,
    /// The share of the prompt the event an expiry makes free would leave.
    kept_if_cold: f64,
    pauses: Pauses,
    /// Keep-alives sent in this session so far.
    sent: u32,
}

/// A keep-alive to send now.
pub(crate) struct Due {
    pub(crate) session: SessionId,
    pub(crate) uri: Uri,
    pub(crate) headers: HeaderMap,
    /// The keep-alive's body.
    pub(crate) body: Vec<u8>,
}

/// What the session's cache lifetime is now, for [`KeepAlives::note`].
pub(crate) struct Lifetime {
    pub(crate) pauses: Pauses,
    /// The latest request asked for the long lifetime.
    pub(crate) long: bool,
    /// Keep-alives the session was sent so far, over all its pauses: the budget is the
    /// session's, as in the lab.
    pub(crate) sent: u32,
    /// The share of the latest request's prompt that the event a pause past the cache's
    /// lifetime makes free would leave ([`ctxgc_core::engine::plan::kept_if_cold`]): what a
    /// keep-alive gives up. 1 without an engine.
    pub(crate) kept_if_cold: f64,
}

/// The sessions waiting for a keep-alive.
pub(crate) struct KeepAlives {
    settings: KeepAliveSettings,
    waiting: Mutex<RecentSessions<Waiting>>,
}

impl KeepAlives {
    pub(crate) fn new(settings: KeepAliveSettings) -> KeepAlives {
        KeepAlives {
            settings,
            waiting: Mutex::new(RecentSessions::new(
                settings.max_sessions,
                settings.max_bytes,
            )),
        }
    }

    /// How often the waiting sessions are looked at.
    pub(crate) fn tick(&self) -> Duration {
        (self.settings.second * 5).min(Duration::from_secs(1))
    }

    /// The deadline of one keep-alive.
    pub(crate) fn deadline(&self) -> Duration {
        self.settings.deadline
    }

    /// A request of `session` was sent at `now` with `body`: its next keep-alive, if any, is
    /// judged shortly before the entry it wrote or read expires. Returns whether the session
    /// waits (false: too large to hold, or no room after the least recently active left).
    pub(crate) fn note(
        &self,
        session: &SessionId,
        (uri, headers): (&Uri, &HeaderMap),
        body: Bytes,
        life: Lifetime,
        now: Instant,
    ) -> bool {
        let (ttl_secs, write_cost) =
            cache_life::entry_lifetime(ProviderFamily::Anthropic, life.long);
        let Ok(mut waiting) = self.waiting.lock() else {
            return false;
        };
        // One sent a moment ago may not be recorded in the session yet.
        let sent = waiting.get(session).map_or(0, |w| w.sent).max(life.sent);
        let mut headers = headers.clone();
        for value in headers.values_mut() {
            value.set_sensitive(true);
        }
        let bytes = body.len();
        let next = Waiting {
            uri: uri.clone(),
            headers,
            body,
            next_at: now + self.step(ttl_secs),
            ttl_secs,
            write_cost,
            kept_if_cold: life.kept_if_cold,
            pauses: life.pauses,
            sent,
        };
        waiting.hold(session, next, bytes, now)
    }

    /// The session's keep-alives end (its caller turned them off, or one failed).
    pub(crate) fn forget(&self, session: &SessionId) {
        if let Ok(mut waiting) = self.waiting.lock() {
            waiting.remove(session);
        }
    }

    /// Sessions waiting now.
    pub(crate) fn len(&self) -> usize {
        self.waiting.lock().map_or(0, |w| w.len())
    }

    /// The time between keep-alives of an entry that lives `ttl_secs`: its lifetime less the
    /// margin a request needs to arrive.
    fn step(&self, ttl_secs: u64) -> Duration {
        let secs = ttl_secs
            .saturating_sub(cache_life::KEEPALIVE_MARGIN_SECS)
            .max(1);
        self.settings.second * u32::try_from(secs).unwrap_or(u32::MAX)
    }

    /// The keep-alives due at `now`, as the lab decides them: each waiting session whose entry
    /// is about to expire gets one when [`cache_life::keepalive_due`] says it pays, and leaves
    /// when it does not (idle too long, budget spent, or a resume now too unlikely).
    pub(crate) fn due(&self, settings: &CacheSettings, now: Instant) -> Vec<Due> {
        let Ok(mut waiting) = self.waiting.lock() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut done = Vec::new();
        for (session, w, last_at) in waiting.iter_mut() {
            if w.next_at > now {
                continue;
            }
            let idle = crate::lifetime::idle::clock_secs(
                now.duration_since(last_at),
                self.settings.second,
            );
            let send = cache_life::keepalive_due(
                settings,
                &w.pauses,
                idle,
                w.ttl_secs,
                (w.write_cost, w.kept_if_cold),
                w.sent,
            );
            let body = send.then(|| keepalive_body(&w.body)).flatten();
            match body {
                Some(body) => {
                    w.sent += 1;
                    w.next_at += self.step(w.ttl_secs);
                    out.push(Due {
                        session: session.clone(),
                        uri: w.uri.clone(),
                        headers: w.headers.clone(),
                        body,
                    });
                }
                None => done.push(session.clone()),
            }
        }
        for session in done {
            waiting.remove(&session);
        }
        out
    }
}

/// The keep-alive for a request `sent`: the same request, one output token, no stream. `None`
/// for a request with a thinking budget (or one that is not a JSON object).
fn keepalive_body(sent: &[u8]) -> Option<Vec<u8>> {
    let mut body: Value = serde_json::from_slice(sent).ok()?;
    let object = body.as_object_mut()?;
    if object
        .get("thinking")
        .is_some_and(|t| t["type"] == "enabled" || t.get("budget_tokens").is_some())
    {
        return None;
    }
    object.insert("max_tokens".into(), Value::from(1));
    object.insert("stream".into(), Value::from(false));
    serde_json::to_vec(&body).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn settings(keepalive: bool) -> CacheSettings {
        CacheSettings {
            keepalive,
            ..CacheSettings::default()
        }
    }

    #[test]
    fn a_caller_gets_keepalives_only_when_it_turned_them_on() {
        let mut on = HeaderMap::new();
        on.insert(CONSENT_HEADER, HeaderValue::from_static("on"));
        let mut off = HeaderMap::new();
        off.insert(CONSENT_HEADER, HeaderValue::from_static("off"));
        let none = HeaderMap::new();
        assert!(
            !consents(&settings(false), &on),
            "the operator did not allow them"
        );
        assert!(consents(&settings(true), &on));
        assert!(!consents(&settings(true), &none), "the caller did not ask");
        let every = CacheSettings {
            keepalive_every_caller: true,
            ..settings(true)
        };
        assert!(consents(&every, &none));
        assert!(!consents(&every, &off), "a caller can always say no");
    }

    #[test]
    fn a_keepalive_is_the_same_request_for_one_token_and_none_with_a_thinking_budget() {
        let sent = br#"{"model":"claude-sonnet-4-5","max_tokens":32000,"stream":true,"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"hi"}]}"#;
        let body: Value = serde_json::from_slice(&keepalive_body(sent).unwrap()).unwrap();
        assert_eq!(body["max_tokens"], 1);
        assert_eq!(body["stream"], false);
        assert_eq!(body["system"][0]["cache_control"]["type"], "ephemeral");
        let thinking = br#"{"model":"m","max_tokens":32000,"thinking":{"type":"enabled","budget_tokens":16000},"messages":[]}"#;
        assert!(keepalive_body(thinking).is_none());
        let adaptive =
            br#"{"model":"m","max_tokens":32000,"thinking":{"type":"adaptive"},"messages":[]}"#;
        assert!(keepalive_body(adaptive).is_some());
    }

    /// Keep-alives on a clock where a second lasts a millisecond.
    fn fast_keepalives() -> KeepAlives {
        KeepAlives::new(KeepAliveSettings {
            second: Duration::from_millis(1),
            ..KeepAliveSettings::default()
        })
    }

    /// Thirty pauses, every third past five minutes (15 minutes), the rest 20 seconds.
    fn every_third_pause_long() -> Pauses {
        let mut pauses = Pauses::default();
        for i in 0..30 {
            pauses.note(if i % 3 == 0 { 900 } else { 20 });
        }
        pauses
    }

    /// The five-minute lifetime with `pauses`, `sent` keep-alives sent so far.
    fn five_minutes(pauses: Pauses, sent: u32) -> Lifetime {
        Lifetime {
            pauses,
            long: false,
            sent,
            kept_if_cold: 1.0,
        }
    }

    const MESSAGES_BODY: &[u8] = br#"{"model":"claude-sonnet-4-5","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}"#;

    /// A session whose every third pause outlives five minutes: after its latest request, one
    /// keep-alive is due shortly before the entry expires, then one per lifetime while it pays,
    /// within the budget; none before.
    #[test]
    fn keepalives_come_before_expiry_and_stop_within_the_budget() {
        let keep = fast_keepalives();
        let session = SessionId::new("t.s");
        let start = Instant::now();
        let uri: Uri = "/v1/messages".parse().unwrap();
        assert!(keep.note(
            &session,
            (&uri, &HeaderMap::new()),
            Bytes::from_static(MESSAGES_BODY),
            five_minutes(every_third_pause_long(), 0),
            start
        ));
        let s = CacheSettings {
            keepalive_budget: 3,
            ..settings(true)
        };
        assert!(
            keep.due(&s, start + Duration::from_millis(200)).is_empty(),
            "not yet"
        );
        let mut sent = 0;
        for ms in (270..4_000).step_by(10) {
            sent += keep.due(&s, start + Duration::from_millis(ms)).len();
        }
        assert_eq!(sent, 3, "the budget");
        assert_eq!(keep.len(), 0, "the session left once its budget was spent");
    }

    /// A keep-alive gives up the event an expiry makes free: a session whose prompt that event
    /// would cut to a tenth is let expire; the same session with nothing to prune is kept warm.
    #[test]
    fn a_session_with_a_large_free_prune_ahead_is_let_expire() {
        let keep = fast_keepalives();
        let s = settings(true);
        let uri: Uri = "/v1/messages".parse().unwrap();
        let sent_with = |kept_if_cold: f64| {
            let session = SessionId::new(format!("t.k{kept_if_cold}"));
            let start = Instant::now();
            keep.note(
                &session,
                (&uri, &HeaderMap::new()),
                Bytes::from_static(MESSAGES_BODY),
                Lifetime {
                    kept_if_cold,
                    ..five_minutes(every_third_pause_long(), 0)
                },
                start,
            );
            (270..1_000)
                .step_by(10)
                .map(|ms| keep.due(&s, start + Duration::from_millis(ms)).len())
                .sum::<usize>()
        };
        assert!(sent_with(1.0) >= 1);
        assert_eq!(sent_with(0.1), 0);
    }

    /// The budget is the session's: keep-alives sent in earlier pauses count, as in the lab.
    #[test]
    fn a_budget_spent_in_earlier_pauses_stays_spent() {
        let keep = fast_keepalives();
        let s = CacheSettings {
            keepalive_budget: 3,
            ..settings(true)
        };
        let uri: Uri = "/v1/messages".parse().unwrap();
        let sent_in = |sent: u32| {
            let session = SessionId::new(format!("t.s{sent}"));
            let start = Instant::now();
            keep.note(
                &session,
                (&uri, &HeaderMap::new()),
                Bytes::from_static(MESSAGES_BODY),
                five_minutes(every_third_pause_long(), sent),
                start,
            );
            (270..4_000)
                .step_by(10)
                .map(|ms| keep.due(&s, start + Duration::from_millis(ms)).len())
                .sum::<usize>()
        };
        assert_eq!(sent_in(0), 3);
        assert_eq!(
            sent_in(2),
            0,
            "two were sent in an earlier pause: the one left cannot bridge a 15-minute pause"
        );
        assert_eq!(sent_in(3), 0, "the budget was spent");
    }

    #[test]
    fn what_is_held_is_bounded() {
        let keep = KeepAlives::new(KeepAliveSettings {
            max_sessions: 3,
            max_bytes: 1_000,
            ..KeepAliveSettings::default()
        });
        let uri: Uri = "/v1/messages".parse().unwrap();
        let now = Instant::now();
        for i in 0..10u64 {
            let session = SessionId::new(format!("t.s{i}"));
            let body = Bytes::from(vec![b' '; 300]);
            keep.note(
                &session,
                (&uri, &HeaderMap::new()),
                body,
                five_minutes(Pauses::default(), 0),
                now + Duration::from_secs(i),
            );
        }
        assert_eq!(keep.len(), 3);
        let big = Bytes::from(vec![b' '; 2_000]);
        assert!(!keep.note(
            &SessionId::new("t.big"),
            (&uri, &HeaderMap::new()),
            big,
            five_minutes(Pauses::default(), 0),
            now
        ));
    }
}
