//! A body read whole, parsed once: after the caller's kept body it continues, when it does
//! ([`RecentBodies`]), and kept in turn when its session has come back. What
//! cannot be parsed is told apart: what the providers accept though ctxgc's parser does not
//! goes upstream as sent; anything else is the client's error.
//!
//! The kept bodies are callers' latest large bodies as parsed, for parsing their next ones
//! ([`ctxgc_formats::reparse`]): an agent's next request repeats its previous one, and the
//! conversation items the two share byte for byte are taken from it, not parsed again: moved out
//! of a spare copy made once the previous request was answered, or cloned when there is none.
//! At 100K tokens that takes the parse in the proxy from 0.4-0.9 ms to under 0.1 ms.
//!
//! A body is kept only once its session has shown that it comes back: a large body is first
//! only fingerprinted (its length and a hash of its first half), and the next body that
//! continues it (begins with that half) is kept parsed. A proxy of many interleaved sessions
//! (`scripts/soak.sh`: 200 at once) then keeps nothing it would not use (keeping every large
//! body had raised the soak's peak from 125 to 132 MB), while the single developer's proxy,
//! where latency is felt, keeps its sessions' latest bodies. A body is matched only with the
//! same tenant's (a caller never gets another's parsed values, nor learns from the parse's
//! time that another sent the same bytes), and the memory is bounded: a few bodies, a few
//! megabytes, the least recently used going first.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::StatusCode;
use ctxgc_formats::reparse::shared_prefix;
use ctxgc_formats::{Api, ApiRequest, FormatError, Layout, Previous, Spare};
use serde_json::Value;

use crate::intake::identity::Tenant;
use crate::reply::Refusal;

/// A body whose parse reads more than this many bytes is parsed off the async workers.
const INLINE_PARSE_BYTES: usize = 256 * 1024;

/// Who sent a body, and what it weighs.
pub(crate) struct Sender<'a> {
    pub(crate) tenant: &'a Tenant,
    /// No other request is in flight: only then is a body kept, or parsed after a kept one
    /// (under a load, memory goes to the requests in flight).
    pub(crate) alone: bool,
    /// The body's [`crate::admission::body::weight_of`], weighed once at admission.
    pub(crate) weight: usize,
}

/// A body as parsed, with where its items lie when its parse found that (the client's bill
/// then need not scan it again: [`crate::observe::client_bill`]).
pub(crate) type Parsed = (ApiRequest, Option<Layout>);

/// Parses `bytes`, a request of `api`, off the async workers when the parse reads megabytes.
pub(crate) async fn parse(
    recent: &Arc<RecentBodies>,
    api: Api,
    bytes: &Bytes,
    sender: Sender<'_>,
) -> Result<Parsed, FormatError> {
    recent.note_arrival(bytes.len());
    let continued = sender
        .alone
        .then(|| recent.continued(sender.tenant, bytes))
        .flatten();
    // A body that continues a kept one is parsed after it: only what follows the items they
    // share is read, and the rest is cloned.
    let resumed_at = continued.as_ref().map_or(0, |(kept, shared)| {
        kept.previous(*shared).resumes_at(*shared)
    });
    let how = (sender.tenant.clone(), sender.alone, sender.weight);
    if bytes.len().saturating_sub(resumed_at) > INLINE_PARSE_BYTES {
        // Parsing megabytes is CPU work: off the async workers, which every other request
        // needs.
        let (recent, body) = (recent.clone(), bytes.clone());
        tokio::task::spawn_blocking(move || parse_now(&recent, api, body, how, continued))
            .await
            .unwrap_or_else(|e| Err(FormatError::Json(format!("the parse failed: {e}"))))
    } else {
        // Within the bound, a hop to a blocking thread and back costs as much as the parse:
        // at 100K tokens an agent's next request (one that continues its kept body) reads
        // only its new items here, and a body is resumed only while no other request is in
        // flight (`alone`), so no other request waits on this worker meanwhile.
        parse_now(recent, api, bytes.clone(), how, continued)
    }
}

/// Parses a body, after the tenant's kept body it continues (`continued`, with the bytes they
/// share), and keeps it (as parsed, before anything rewrites it) when its session has come
/// back. A body not kept (small, its session has not come back yet, or it weighs too much to
/// keep) is still laid out: the rewrite's walk and splice and the count's bound go straight to
/// its items (the layout costs about 9% more than the whole parse: 263 against 240 us at 100K
/// tokens, `cargo bench -p ctxgc-formats --bench parse`). Bodies parsed while other requests
/// are in flight (`alone` false) are parsed whole, without a layout.
fn parse_now(
    recent: &RecentBodies,
    api: Api,
    raw: Bytes,
    (tenant, alone, weight): (Tenant, bool, usize),
    continued: Option<(Arc<Recent>, usize)>,
) -> Result<Parsed, FormatError> {
    let (continued, shared) = continued.unzip();
    if !alone {
        return Ok((ApiRequest::parse_envelope(api, &raw)?, None));
    }
    // A small body is laid out too (never kept): the rewrite's walk goes on from where the
    // session's previous one ended when it knows where the items lie.
    if raw.len() < MIN_BYTES {
        return ApiRequest::parse_envelope_after(api, &raw, None);
    }
    let keep = recent.worth_keeping(&tenant, (&raw, weight), continued.as_ref());
    let previous = continued
        .as_deref()
        .zip(shared)
        .map(|(kept, shared)| kept.previous(shared));
    let spare = continued.as_deref().and_then(Recent::take_spare);
    let (request, layout) = ApiRequest::parse_envelope_spared(api, &raw, previous, spare)?;
    match &layout {
        Some(layout) if keep => {
            let kept = (raw, &request.body, layout.clone());
            let items_key = api.wire().items_key();
            recent.keep(tenant, kept, (items_key, weight), continued);
        }
        // Not kept (its session has not come back yet, or it weighs too much): laid out all
        // the same, and the kept body it continued stays for the session's next bodies.
        _ => {
            if let Some(kept) = &continued {
                recent.continued_by_unkept(kept);
            }
        }
    }
    Ok((request, layout))
}

/// What becomes of a body ctxgc could not parse.
pub(crate) enum Unparsed {
    /// The upstream reads it as sent; `why`, when ctxgc counts it as a fail-open.
    AsSent { why: Option<&'static str> },
    /// The client's error.
    Refused(Refusal),
}

/// Tells apart why a body of `api` sent to `path` could not be parsed.
pub(crate) fn unparsed(api: Api, path: &str, error: FormatError) -> Unparsed {
    match error {
        // Gemini's countTokens may wrap its request (`generateContentRequest`): counted
        // upstream as sent.
        _ if api == Api::Gemini && path.ends_with(":countTokens") => Unparsed::AsSent { why: None },
        // A lone surrogate escape (an emoji cut in half) is valid to the providers, not to
        // ctxgc's parser: the body goes upstream as it came.
        FormatError::Json(j) if is_lone_surrogate(&j) => {
            tracing::warn!(
                api = api.name(),
                "forwarded unchanged: the body holds a lone surrogate escape ({j})"
            );
            Unparsed::AsSent {
                why: Some("unparsed"),
            }
        }
        FormatError::Json(j) => Unparsed::Refused(invalid(format!(
            "ctxgc: the request body is not valid JSON: {j}"
        ))),
        other => Unparsed::Refused(invalid(format!(
            "ctxgc: not a {} request: {other}",
            api.name()
        ))),
    }
}

fn invalid(why: String) -> Refusal {
    Refusal(StatusCode::BAD_REQUEST, "invalid_request_error", why)
}

/// Whether a JSON error is a lone surrogate escape (`"\ud83d"` alone), which JSON as the
/// providers read it accepts.
fn is_lone_surrogate(error: &str) -> bool {
    error.starts_with("lone leading surrogate in hex escape")
        || error.starts_with("unexpected end of hex escape")
}

/// The model a request names: in its body, or in its path for Gemini
/// (`/v1beta/models/{model}:method`).
pub(crate) fn model_of(request: &ApiRequest, path: &str) -> Option<String> {
    request.body["model"]
        .as_str()
        .map(str::to_owned)
        .or_else(|| {
            let (_, rest) = path.split_once("/models/")?;
            Some(rest.split(':').next()?.to_owned())
        })
}

/// Bodies smaller than this (bytes) parse in tens of microseconds: not kept.
pub(crate) const MIN_BYTES: usize = 64 * 1024;
/// Bodies kept parsed, at most.
const MAX_KEPT: usize = 4;
/// What the kept bodies may weigh in all (bytes, as [`crate::admission::body::weight_of`] weighs a parsed
/// body); a body heavier than half of it is not kept.
const MAX_WEIGHT: usize = 8 << 20;
/// Fingerprints of bodies not kept, at most; and how many large bodies may arrive after a kept
/// one before it goes, unless its session continues it (a proxy of many sessions had kept the
/// rare continued body for good, which raised the soak's peak from 121 to 128 MB).
const MAX_SEEN: usize = 16;

/// One kept body.
pub(crate) struct Recent {
    tenant: Tenant,
    raw: Bytes,
    body: Value,
    layout: Layout,
    /// The key of its conversation array.
    items_key: &'static str,
    weight: usize,
    /// The large bodies that had arrived when it was kept, or last continued.
    arrived: std::sync::atomic::AtomicU64,
    /// A copy of what the session's next body takes from it, made after the request that kept
    /// it was answered ([`RecentBodies::make_spares`]): the next parse moves the items out of
    /// it rather than cloning them on the request's path. Weighs as much as the body.
    spare: Mutex<Option<Spare>>,
}

impl Recent {
    /// What the next body, which shares its first `shared` bytes with this one, is parsed
    /// after.
    pub(crate) fn previous(&self, shared: usize) -> Previous<'_> {
        Previous {
            raw: &self.raw,
            body: &self.body,
            layout: &self.layout,
            shared: Some(shared),
        }
    }

    /// Its spare copy, given up to the parse of the body that continues it.
    fn take_spare(&self) -> Option<Spare> {
        self.spare.lock().ok()?.take()
    }

    fn has_spare(&self) -> bool {
        self.spare.lock().is_ok_and(|s| s.is_some())
    }

    /// What it holds, its spare copy included.
    fn weight_held(&self) -> usize {
        if self.has_spare() {
            2 * self.weight
        } else {
            self.weight
        }
    }
}

/// A large body not kept: whether a later one continues it.
struct Seen {
    tenant: Tenant,
    /// Half of its length, and the hash of that first half.
    half: usize,
    hash: u64,
}

impl Seen {
    fn of(tenant: Tenant, raw: &[u8]) -> Seen {
        let half = raw.len() / 2;
        Seen {
            tenant,
            half,
            hash: xxhash_rust::xxh3::xxh3_64(&raw[..half]),
        }
    }

    fn continued_by(&self, tenant: &Tenant, raw: &[u8]) -> bool {
        &self.tenant == tenant
            && raw.len() >= self.half
            && xxhash_rust::xxh3::xxh3_64(&raw[..self.half]) == self.hash
    }
}

#[derive(Default)]
struct Bodies {
    /// The most recently used first.
    kept: VecDeque<Arc<Recent>>,
    /// The most recent first.
    seen: VecDeque<Seen>,
    /// Large bodies arrived so far.
    arrived: u64,
}

/// The kept bodies and the fingerprints of the others.
#[derive(Default)]
pub(crate) struct RecentBodies {
    bodies: Mutex<Bodies>,
    /// A body was kept since spares were last made.
    wants_spares: std::sync::atomic::AtomicBool,
}

impl RecentBodies {
    /// The tenant's kept body that `raw` continues (shares at least the first half of), the
    /// one it shares most with, and how many leading bytes they share.
    pub(crate) fn continued(&self, tenant: &Tenant, raw: &[u8]) -> Option<(Arc<Recent>, usize)> {
        if raw.len() < MIN_BYTES {
            return None;
        }
        let bodies = self.bodies.lock().ok()?;
        bodies
            .kept
            .iter()
            .filter(|r| &r.tenant == tenant)
            .map(|r| (shared_prefix(&r.raw, raw), r))
            .filter(|(n, r)| *n >= r.raw.len() / 2)
            .max_by_key(|(n, _)| *n)
            .map(|(n, r)| (r.clone(), n))
    }

    /// Counts a body of `bytes` arriving (whether or not it may be kept): a kept body that
    /// [`MAX_SEEN`] large bodies have arrived after, none continuing it, goes.
    pub(crate) fn note_arrival(&self, bytes: usize) {
        if bytes < MIN_BYTES {
            return;
        }
        let Ok(mut bodies) = self.bodies.lock() else {
            return;
        };
        bodies.arrived += 1;
        let arrived = bodies.arrived;
        bodies
            .kept
            .retain(|r| arrived - r.arrived.load(Ordering::Relaxed) <= MAX_SEEN as u64);
    }

    /// `kept` was continued by a body not kept in its place (too heavy to keep): it stays as
    /// long as its session goes on.
    fn continued_by_unkept(&self, kept: &Recent) {
        if let Ok(bodies) = self.bodies.lock() {
            kept.arrived.store(bodies.arrived, Ordering::Relaxed);
        }
        // Its spare went to that body's parse: the session's next body wants another.
        self.wants_spares.store(true, Ordering::Relaxed);
    }

    /// Whether to parse `raw` with its layout (after `continued`, the kept body it continues,
    /// if any) and keep it, because its session came back (it continues a kept body or a
    /// fingerprinted one). A body not kept is fingerprinted.
    pub(crate) fn worth_keeping(
        &self,
        tenant: &Tenant,
        (raw, weight): (&[u8], usize),
        continued: Option<&Arc<Recent>>,
    ) -> bool {
        if raw.len() < MIN_BYTES || weight > MAX_WEIGHT / 2 {
            return false;
        }
        let Ok(mut bodies) = self.bodies.lock() else {
            return false;
        };
        if continued.is_some() {
            return true;
        }
        if let Some(at) = bodies.seen.iter().position(|s| s.continued_by(tenant, raw)) {
            bodies.seen.remove(at);
            return true;
        }
        bodies.seen.push_front(Seen::of(tenant.clone(), raw));
        bodies.seen.truncate(MAX_SEEN);
        false
    }

    /// Keeps `raw`, parsed as `body` with `layout` (of its array `items_key`) and weighing
    /// `weight` ([`crate::admission::body::weight_of`]), in place of `replaced`, the body it was parsed
    /// after. The copy kept takes the items `body` cloned from `replaced` back from it when no
    /// other request holds it: a 100K-token session's document is then cloned once a request,
    /// not twice, and the one it replaces is not freed item by item.
    pub(crate) fn keep(
        &self,
        tenant: Tenant,
        (raw, body, layout): (Bytes, &Value, Layout),
        (items_key, weight): (&'static str, usize),
        replaced: Option<Arc<Recent>>,
    ) {
        let previous = replaced.and_then(|replaced| {
            if let Ok(mut bodies) = self.bodies.lock() {
                bodies.kept.retain(|r| !Arc::ptr_eq(r, &replaced));
            }
            Arc::into_inner(replaced)
        });
        let body = match previous {
            Some(previous) => {
                ctxgc_formats::reparse::copy_reusing(body, &layout, items_key, previous.body)
            }
            None => body.clone(),
        };
        let mut recent = Recent {
            tenant,
            raw,
            body,
            layout,
            items_key,
            weight,
            arrived: Default::default(),
            spare: Mutex::new(None),
        };
        let Ok(mut bodies) = self.bodies.lock() else {
            return;
        };
        *recent.arrived.get_mut() = bodies.arrived;
        bodies.kept.push_front(Arc::new(recent));
        // Spares go first, the least recently used body's first, then whole bodies.
        let mut total: usize = bodies.kept.iter().map(|r| r.weight_held()).sum();
        for r in bodies.kept.iter().rev() {
            if total <= MAX_WEIGHT {
                break;
            }
            if r.take_spare().is_some() {
                total -= r.weight;
            }
        }
        while bodies.kept.len() > MAX_KEPT || total > MAX_WEIGHT {
            match bodies.kept.pop_back() {
                Some(r) => total -= r.weight_held(),
                None => break,
            }
        }
        self.wants_spares.store(true, Ordering::Relaxed);
    }

    /// As after a body was kept.
    #[cfg(test)]
    pub(crate) fn want_spares_for_tests(&self) {
        self.wants_spares.store(true, Ordering::Relaxed);
    }

    /// Whether a body was kept since spares were last made.
    pub(crate) fn wants_spares(&self) -> bool {
        self.wants_spares.load(Ordering::Relaxed)
    }

    /// Makes the spare copy of each kept body that has none, the most recently used first,
    /// while they fit in what the kept bodies may weigh ([`MAX_WEIGHT`], spares included). Run
    /// off the request's path once it was answered: the session's next body then moves its
    /// shared items out of the spare (at 100K tokens the clone was most of the parse).
    pub(crate) fn make_spares(&self) {
        if !self.wants_spares.swap(false, Ordering::Relaxed) {
            return;
        }
        let wanting: Vec<Arc<Recent>> = match self.bodies.lock() {
            Ok(bodies) => bodies
                .kept
                .iter()
                .filter(|r| !r.has_spare())
                .cloned()
                .collect(),
            Err(_) => return,
        };
        for recent in wanting {
            let fits = |bodies: &Bodies| {
                let held: usize = bodies.kept.iter().map(|r| r.weight_held()).sum();
                held + recent.weight <= MAX_WEIGHT
                    && bodies.kept.iter().any(|r| Arc::ptr_eq(r, &recent))
            };
            if !self.bodies.lock().is_ok_and(|b| fits(&b)) {
                continue;
            }
            // Cloned outside the lock: the parse of another body does not wait on it.
            let Some(spare) = Spare::of(&recent.body, &recent.layout, recent.items_key) else {
                continue;
            };
            // Kept meanwhile by a body that continued it, or crowded out: not stored.
            if let Ok(bodies) = self.bodies.lock()
                && fits(&bodies)
                && let Ok(mut slot) = recent.spare.lock()
            {
                *slot = Some(spare);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(items: usize) -> Bytes {
        let messages: Vec<Value> = (0..items)
            .map(|i| serde_json::json!({"role": "user", "content": format!("{i} {}", "x".repeat(20_000))}))
            .collect();
        Bytes::from(
            serde_json::to_vec(&serde_json::json!({"model": "m", "messages": messages})).unwrap(),
        )
    }

    fn parsed(raw: &Bytes) -> (Bytes, Value, Layout) {
        let (request, layout) = ctxgc_formats::ApiRequest::parse_envelope_after(
            ctxgc_formats::Api::ChatCompletions,
            raw,
            None,
        )
        .unwrap();
        (raw.clone(), request.body, layout.unwrap())
    }

    fn tenants(n: usize) -> Vec<Tenant> {
        let secret = crate::intake::identity::TenantSecret::from_text("test");
        (0..n)
            .map(|i| {
                let mut headers = axum::http::HeaderMap::new();
                headers.insert("x-api-key", format!("key-{i}").parse().unwrap());
                secret.tenant_of(&headers, None)
            })
            .collect()
    }

    /// What the proxy does with each body: parse it after the body it continues, keep it if
    /// its session came back. Returns whether it was parsed after a kept body.
    fn arrive(bodies: &RecentBodies, tenant: &Tenant, raw: &Bytes) -> bool {
        bodies.note_arrival(raw.len());
        let (continued, shared) = bodies.continued(tenant, raw).unzip();
        let weight = crate::admission::body::weight_of(raw);
        if !bodies.worth_keeping(tenant, (raw, weight), continued.as_ref()) {
            return false;
        }
        let previous = continued.as_deref().zip(shared).map(|(r, n)| r.previous(n));
        let (request, layout) = ctxgc_formats::ApiRequest::parse_envelope_after(
            ctxgc_formats::Api::ChatCompletions,
            raw,
            previous,
        )
        .unwrap();
        let whole = parsed(raw).1;
        assert_eq!(request.body, whole);
        let was_continued = continued.is_some();
        let kept = (raw.clone(), &request.body, layout.unwrap());
        bodies.keep(tenant.clone(), kept, ("messages", weight), continued);
        // What is kept (moved back from the body it replaces) is the body's whole parse.
        assert_eq!(bodies.bodies.lock().unwrap().kept[0].body, whole);
        was_continued
    }

    #[test]
    fn a_session_that_comes_back_is_parsed_after_its_previous_body() {
        let bodies = RecentBodies::default();
        let t = tenants(2);
        // The first body is only fingerprinted, the second kept, the third parsed after it.
        assert!(!arrive(&bodies, &t[0], &body(5)));
        assert!(bodies.bodies.lock().unwrap().kept.is_empty());
        assert!(!arrive(&bodies, &t[0], &body(6)));
        assert_eq!(bodies.bodies.lock().unwrap().kept.len(), 1);
        // Another tenant's identical body is not parsed after it.
        assert!(!arrive(&bodies, &t[1], &body(7)));
        assert!(arrive(&bodies, &t[0], &body(7)));
        assert!(arrive(&bodies, &t[0], &body(8)));
        // Each replaces the one it continues.
        {
            let kept = &bodies.bodies.lock().unwrap().kept;
            assert_eq!(kept.len(), 1);
            assert_eq!(kept[0].layout.items(), 8);
        }
        // A kept body another request still holds is copied, not taken from it.
        let (held, _) = bodies.continued(&t[0], &body(9)).unwrap();
        assert!(arrive(&bodies, &t[0], &body(9)));
        assert_eq!(held.layout.items(), 8);
        // Small bodies are neither kept nor matched.
        assert!(bodies.continued(&t[0], b"{\"messages\":[]}").is_none());
    }

    /// A body is laid out whether or not it is kept (the splice, the walk and the count's bound
    /// go straight to its items); one too heavy to keep is parsed after the kept body it
    /// continues, and not kept; while other requests are in flight, none is laid out.
    #[test]
    fn large_bodies_are_laid_out_kept_or_not() {
        let bodies = RecentBodies::default();
        let t = tenants(1);
        let api = ctxgc_formats::Api::ChatCompletions;
        let how = |raw: &Bytes, alone: bool, weight: Option<usize>| {
            let weight = weight.unwrap_or_else(|| crate::admission::body::weight_of(raw));
            (t[0].clone(), alone, weight)
        };
        let parse = |raw: &Bytes, alone: bool, weight: Option<usize>| {
            bodies.note_arrival(raw.len());
            let continued = bodies.continued(&t[0], raw);
            let (request, layout) = parse_now(
                &bodies,
                api,
                raw.clone(),
                how(raw, alone, weight),
                continued,
            )
            .unwrap();
            assert_eq!(request.body, parsed(raw).1);
            layout.map(|l| (l.items(), l.reused(), l.item_spans().to_vec()))
        };
        let kept = || bodies.bodies.lock().unwrap().kept.len();
        // First seen: laid out, only fingerprinted.
        assert_eq!(
            parse(&body(5), true, None).map(|l| (l.0, l.1)),
            Some((5, 0))
        );
        assert_eq!(kept(), 0);
        // Back: laid out and kept.
        assert_eq!(parse(&body(6), true, None).map(|l| l.0), Some(6));
        assert_eq!(kept(), 1);
        // Too heavy to keep: laid out, parsed after the kept body, which stays.
        let heavy = body(7);
        let (items, reused, spans) = parse(&heavy, true, Some(MAX_WEIGHT)).unwrap();
        assert_eq!((items, reused), (7, 6));
        assert_eq!(spans, parsed(&heavy).2.item_spans());
        assert_eq!(bodies.bodies.lock().unwrap().kept[0].layout.items(), 6);
        // The session goes on with bodies too heavy to keep: the kept body stays for them,
        // more than MAX_SEEN large bodies later, and gets a new spare after each.
        for items in 8..8 + MAX_SEEN + 2 {
            let (_, reused, _) = parse(&body(items), true, Some(MAX_WEIGHT)).unwrap();
            assert_eq!(reused, 6);
            assert!(bodies.wants_spares());
            bodies.make_spares();
            assert!(bodies.bodies.lock().unwrap().kept[0].has_spare());
        }
        // Not alone: parsed whole.
        assert_eq!(parse(&body(9), false, None), None);
        // Small: laid out, not kept.
        let small =
            Bytes::from_static(br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#);
        assert_eq!(parse(&small, true, None).map(|l| (l.0, l.1)), Some((1, 0)));
    }

    /// Many interleaved sessions, each back only after many others: nothing is kept.
    #[test]
    fn interleaved_sessions_keep_nothing_they_would_not_use() {
        let bodies = RecentBodies::default();
        let t = tenants(1);
        let sessions = MAX_SEEN + 4;
        for turn in 0..3 {
            for s in 0..sessions {
                let raw: Bytes = {
                    let messages: Vec<Value> = (0..=turn)
                        .map(|i| serde_json::json!({"role": "user", "content": format!("s{s} {i} {}", "x".repeat(40_000))}))
                        .collect();
                    serde_json::to_vec(&serde_json::json!({"messages": messages}))
                        .unwrap()
                        .into()
                };
                arrive(&bodies, &t[0], &raw);
            }
        }
        assert!(bodies.bodies.lock().unwrap().kept.is_empty());
    }

    /// A kept body its session does not continue goes once enough other bodies arrived.
    #[test]
    fn a_kept_body_not_continued_goes() {
        let bodies = RecentBodies::default();
        let t = tenants(MAX_SEEN + 3);
        arrive(&bodies, &t[0], &body(5));
        arrive(&bodies, &t[0], &body(6));
        assert_eq!(bodies.bodies.lock().unwrap().kept.len(), 1);
        for tenant in &t[1..] {
            arrive(&bodies, tenant, &body(5));
        }
        assert!(bodies.bodies.lock().unwrap().kept.is_empty());
    }

    /// Once a request is answered, its kept body gets a spare copy; the session's next body
    /// moves its shared items out of it (the same document as the whole parse) and is kept in
    /// turn without one until the next answer. Spares count in what the kept bodies may weigh.
    #[test]
    fn the_next_body_takes_its_shared_items_from_a_spare_made_beforehand() {
        let bodies = RecentBodies::default();
        let t = tenants(1);
        let api = ctxgc_formats::Api::ChatCompletions;
        let parse = |raw: &Bytes| {
            bodies.note_arrival(raw.len());
            let continued = bodies.continued(&t[0], raw);
            let weight = crate::admission::body::weight_of(raw);
            let how = (t[0].clone(), true, weight);
            let (request, layout) = parse_now(&bodies, api, raw.clone(), how, continued).unwrap();
            assert_eq!(request.body, parsed(raw).1);
            layout.map(|l| l.reused())
        };
        let spares = || {
            let b = bodies.bodies.lock().unwrap();
            b.kept.iter().filter(|r| r.has_spare()).count()
        };
        parse(&body(5));
        assert!(!bodies.wants_spares());
        parse(&body(6));
        assert!(bodies.wants_spares(), "a body was kept");
        bodies.make_spares();
        assert_eq!(spares(), 1);
        assert!(!bodies.wants_spares());
        {
            let b = bodies.bodies.lock().unwrap();
            let kept = &b.kept[0];
            let expected = Spare::of(&kept.body, &kept.layout, "messages");
            assert_eq!(kept.spare.lock().unwrap().as_ref(), expected.as_ref());
        }
        // Taken by the next parse, which resumes after the shared items all the same.
        assert_eq!(parse(&body(8)), Some(6));
        assert_eq!(spares(), 0);
        bodies.make_spares();
        assert_eq!(spares(), 1);
        // An edit inside the shared items: the spare is cut where they part.
        let edited = Bytes::from(
            String::from_utf8(body(9).to_vec())
                .unwrap()
                .replacen("7 xxx", "7 yxx", 1),
        );
        assert_eq!(parse(&edited), Some(7));
        // Too heavy for both a body and its spare: no spare is made.
        let heavy = RecentBodies::default();
        let raw = body(4);
        let (raw, parsed_body, layout) = parsed(&raw);
        heavy.keep(
            t[0].clone(),
            (raw, &parsed_body, layout),
            ("messages", MAX_WEIGHT / 2 + 1),
            None,
        );
        heavy.make_spares();
        assert!(!heavy.bodies.lock().unwrap().kept[0].has_spare());
    }

    #[test]
    fn the_kept_bodies_stay_within_their_bounds() {
        let bodies = RecentBodies::default();
        let t = tenants(20);
        for (i, tenant) in t.iter().enumerate() {
            let raw = body(4 + i % 3);
            let weight = crate::admission::body::weight_of(&raw);
            let (raw, body, layout) = parsed(&raw);
            bodies.keep(
                tenant.clone(),
                (raw, &body, layout),
                ("messages", weight),
                None,
            );
        }
        {
            let kept = &bodies.bodies.lock().unwrap().kept;
            assert!(kept.len() <= MAX_KEPT);
            assert!(kept.iter().map(|r| r.weight).sum::<usize>() <= MAX_WEIGHT);
            // The most recent first.
            assert_eq!(kept[0].tenant, t[19]);
        }
        // Spares included: each kept body gets one while they fit, then a new body crowds
        // the least recently used one's out first.
        bodies.make_spares();
        let held = |bodies: &RecentBodies| {
            let b = bodies.bodies.lock().unwrap();
            (
                b.kept.iter().map(|r| r.weight_held()).sum::<usize>(),
                b.kept.iter().filter(|r| r.has_spare()).count(),
            )
        };
        let (weight, spares) = held(&bodies);
        assert!(weight <= MAX_WEIGHT);
        assert!(spares > 0);
        let (raw, body, layout) = parsed(&body(4));
        let big = MAX_WEIGHT - weight / 2;
        bodies.keep(t[0].clone(), (raw, &body, layout), ("messages", big), None);
        let (weight, fewer) = held(&bodies);
        assert!(weight <= MAX_WEIGHT, "{weight}");
        assert!(fewer < spares, "{fewer} of {spares} spares left");
    }
}
