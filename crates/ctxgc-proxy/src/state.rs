//! The server's shared state, made of parts that own their data: the upstream client, the
//! store, the memos, the counters, the session table, the response index, the summarizer and
//! the tenant secret. Each part is reached through its own methods; this file only builds them
//! and answers what needs several (who a caller is, what it may see).

use std::sync::Arc;

use axum::http::HeaderMap;
use ctxgc_core::store::{SessionId, StateKey, Store};

use crate::error::ProxyError;
use crate::intake::identity::{self, Tenant, TenantSecret};
use crate::intake::responses::ResponseIndex;
use crate::observe::metrics::Metrics;
use crate::observe::queue::Observer;
use crate::observe::sessions::SessionTable;
use crate::observe::stats::Stats;
use crate::rewrite::memos::Memos;
use crate::rewrite::summarizer::SummarizerGate;
use crate::settings::ProxySettings;
use crate::upstream::client::Upstreams;

/// How long a request waits for a rewrite slot before it is forwarded unchanged.
pub(crate) const REWRITE_QUEUE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(2);

/// Shared state of the server.
pub struct AppState {
    pub(crate) settings: ProxySettings,
    pub(crate) upstreams: Upstreams,
    /// Shared by every request; no lock of the server's is held around its operations (each
    /// has its own deadline).
    pub(crate) store: Box<dyn Store>,
    pub(crate) memos: Memos,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) sessions: SessionTable,
    /// What each session's client alone would have been billed (the lab's cache model).
    pub(crate) client_bills: crate::observe::client_bill::ClientBills,
    /// Callers' latest large bodies as parsed, for parsing their next ones.
    pub(crate) recent_bodies: Arc<crate::intake::parse::RecentBodies>,
    /// Sessions idle until their cache expires, then prepared ([`crate::lifetime::idle`]).
    pub(crate) idle: crate::lifetime::idle::IdleSessions,
    /// Sessions waiting for a keep-alive (`[cache] keepalive`).
    pub(crate) keepalives: crate::lifetime::keepalive::KeepAlives,
    /// Upstreams that refused a cache field ctxgc set, by tenant and model.
    pub(crate) refusals: crate::lifetime::refusals::CacheFieldRefusals,
    pub(crate) responses: ResponseIndex,
    pub(crate) summarizer: SummarizerGate,
    /// Observe mode's queue and worker, when on.
    pub(crate) observer: Option<Observer>,
    tenant_secret: TenantSecret,
    /// Requests being rewritten at once, at most, shared fairly between tenants and between
    /// heavy and ordinary requests: each holds its parsed body and views (the rest wait, then
    /// fail open).
    pub(crate) gate: Arc<crate::admission::gate::Gate>,
    /// The queue of the rewrite workers, one per rewrite slot ([`crate::rewrite::jobs`]).
    pub(crate) workers: crate::rewrite::jobs::Workers,
    /// The memory the requests in flight may hold for rewriting.
    pub(crate) memory: Arc<crate::admission::body::MemoryBudget>,
    /// Refuses store calls at once for a moment after one failed.
    breaker: crate::admission::breaker::Breaker,
    /// When the store last answered the once-a-second look at it (readiness reads it).
    store_answered: std::sync::Mutex<Option<std::time::Instant>>,
    /// The store's alive mark as this process last saw it ([`ALIVE_KEY`]).
    alive_mark: std::sync::Mutex<Option<String>>,
    /// Originals the store had evicted when last looked at.
    evicted_seen: std::sync::atomic::AtomicU64,
    /// Whether the tenant secret came from the configuration (then the store does not keep it).
    secret_configured: bool,
    /// Set at the end of the shutdown grace: streams still open end with an error event.
    pub(crate) cut: tokio::sync::watch::Sender<bool>,
    /// Streams and answers cut at the end of the shutdown grace.
    pub(crate) streams_cut: std::sync::atomic::AtomicU64,
}

/// Rewrite slots: twice the cores (at least 4), so a slow LLM summary holding one leaves
/// others free while memory stays bounded under any number of connections.
fn rewrite_slots() -> usize {
    (std::thread::available_parallelism().map_or(2, |n| n.get()) * 2).max(4)
}

/// The proxy is ready while the store answered its once-a-second look within this.
const READY_WITHIN: std::time::Duration = std::time::Duration::from_millis(1_500);

/// Where the tenant secret is kept in the store (no session id can spell it).
const TENANT_SECRET_KEY: StateKey<'static> = StateKey::Server("tenant-secret");

/// A random number for the store's alive mark (not a secret: it only has to differ).
fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

/// How long a replica starting on a shared store without a tenant secret waits for a running
/// replica to put one back (they look at the store every second).
const SECRET_WAIT: std::time::Duration = std::time::Duration::from_millis(2_500);

/// A mark the store keeps while it keeps what it was given: each replica remembers the value
/// it saw, and a store that restarted empty (a Redis without persistence) no longer has it.
const ALIVE_KEY: StateKey<'static> = StateKey::Server("alive");

/// The tenant secret a server on `store` keys callers with, if one is configured or the store
/// keeps one; never makes one (readers of the store: the MCP server, `ctxgc recall`).
pub fn existing_tenant_secret(
    configured: Option<&str>,
    store: &dyn Store,
) -> Result<Option<TenantSecret>, ProxyError> {
    if let Some(text) = configured {
        return Ok(Some(TenantSecret::from_text(text)));
    }
    Ok(store
        .get_state(TENANT_SECRET_KEY)?
        .and_then(|s| TenantSecret::from_hex(&s)))
}

/// The tenant secret: configured, else the one the store keeps, else a new one it then keeps
/// (the first replica to save one wins, and the others take it).
fn tenant_secret(settings: &ProxySettings, store: &dyn Store) -> Result<TenantSecret, ProxyError> {
    let configured = settings.tenant_secret.as_deref();
    if let Some(secret) = existing_tenant_secret(configured, store)? {
        return Ok(secret);
    }
    // A shared store without a secret may have just lost it (a Redis restarted without
    // persistence): the replicas still running put theirs back within a second or two, and
    // this one should take it rather than key every caller anew.
    if store.is_shared() {
        let until = std::time::Instant::now() + SECRET_WAIT;
        while std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(200));
            if let Some(secret) = existing_tenant_secret(None, store)? {
                return Ok(secret);
            }
        }
    }
    let fresh = TenantSecret::random().map_err(ProxyError::Setup)?;
    if store.swap_state(TENANT_SECRET_KEY, None, &fresh.to_hex())? {
        // Not silent: a replica that starts after its store lost the secret keys every caller
        // anew (the running replicas put theirs back within a second of the loss).
        tracing::info!(
            "made a new tenant secret and keep it in the store (replicas on a store without persistence: set [proxy] tenant_secret)"
        );
        return Ok(fresh);
    }
    existing_tenant_secret(None, store)?.ok_or(ProxyError::Setup(
        "the store holds a tenant secret that is not one: delete the `ctxgc.tenant-secret` state"
            .to_owned(),
    ))
}

impl AppState {
    /// State for a server.
    pub fn new(
        settings: ProxySettings,
        store: Box<dyn Store>,
    ) -> Result<Arc<AppState>, ProxyError> {
        let tenant_secret = tenant_secret(&settings, &*store)?;
        let settings_observe = settings.observe;
        let settings_inflight = settings.limits.inflight_bytes;
        let secret_configured = settings.tenant_secret.is_some();
        let metrics = Arc::new(Metrics::default());
        let keepalives = crate::lifetime::keepalive::KeepAlives::new(settings.keepalive);
        let idle = crate::lifetime::idle::IdleSessions::new(settings.keepalive.second);
        let state = Arc::new(AppState {
            keepalives,
            refusals: crate::lifetime::refusals::CacheFieldRefusals::default(),
            idle,
            client_bills: Default::default(),
            recent_bodies: Default::default(),
            upstreams: Upstreams::new(&settings, metrics.clone())?,
            summarizer: SummarizerGate::new(
                settings.summarizer.clone(),
                settings.summarizer_cooldown,
            ),
            settings,
            store,
            memos: Memos::default(),
            metrics: metrics.clone(),
            sessions: SessionTable::default(),
            responses: ResponseIndex::default(),
            tenant_secret,
            gate: crate::admission::gate::Gate::new(rewrite_slots()),
            workers: crate::rewrite::jobs::Workers::new(rewrite_slots()),
            memory: crate::admission::body::MemoryBudget::new(settings_inflight),
            breaker: crate::admission::breaker::Breaker::default(),
            alive_mark: std::sync::Mutex::new(None),
            store_answered: std::sync::Mutex::new(None),
            evicted_seen: std::sync::atomic::AtomicU64::new(0),
            secret_configured,
            cut: tokio::sync::watch::Sender::new(false),
            streams_cut: std::sync::atomic::AtomicU64::new(0),
            observer: settings_observe.then(Observer::new),
        });
        state.watch_store();
        Ok(state)
    }

    /// Looks at the store between requests (every second, off the async workers): originals it
    /// evicted, or everything lost with a restart, are written again by the requests that still
    /// refer to them (this process forgets it committed them), and after a loss the tenant
    /// secret goes back, so callers keep their tenant and its sessions.
    pub(crate) fn watch_store(&self) {
        use std::sync::atomic::Ordering;
        if let Some(usage) = self.store.usage() {
            let before = self.evicted_seen.swap(usage.evicted, Ordering::AcqRel);
            if usage.evicted != before {
                self.memos.forget_committed();
            }
        }
        // Asked directly, whatever the breaker says (this runs off the request path, once a
        // second): its answer closes the breaker as soon as the store is back, and readiness
        // reads when it last answered.
        let started = std::time::Instant::now();
        let mark = match self.store.get_state(ALIVE_KEY) {
            Ok(mark) => {
                self.metrics.store_latency(started.elapsed());
                self.breaker.succeeded();
                if let Ok(mut at) = self.store_answered.lock() {
                    *at = Some(std::time::Instant::now());
                }
                mark
            }
            Err(e) => {
                self.breaker.failed(&e.to_string());
                return;
            }
        };
        let Ok(mut seen) = self.alive_mark.lock() else {
            return;
        };
        if seen.is_some() && mark != *seen {
            tracing::warn!(
                "the store lost what it held (restarted without persistence, or emptied): originals still referred to are written again as requests resend them"
            );
            self.metrics.store_lost();
            self.memos.forget_committed();
            if !self.secret_configured {
                self.restore_tenant_secret();
            }
        }
        match mark {
            Some(mark) => *seen = Some(mark),
            None => {
                let fresh = format!("{:016x}", rand_u64());
                *seen = match self.timed(|store| store.swap_state(ALIVE_KEY, None, &fresh)) {
                    Ok(true) => Some(fresh),
                    // Another replica marked it first: its mark is the one to watch.
                    _ => self
                        .timed(|store| store.get_state(ALIVE_KEY))
                        .ok()
                        .flatten(),
                };
            }
        }
    }

    /// Puts this process's tenant secret back in a store that lost it.
    fn restore_tenant_secret(&self) {
        let ours = self.tenant_secret.to_hex();
        let restored = self.timed(|store| store.swap_state(TENANT_SECRET_KEY, None, &ours));
        if let Ok(false) = restored {
            let theirs = self
                .timed(|store| store.get_state(TENANT_SECRET_KEY))
                .ok()
                .flatten();
            if theirs.as_deref() != Some(ours.as_str()) {
                tracing::error!(
                    "the store now holds another tenant secret than this replica's (a replica started while it was empty): the replicas key callers differently; set [proxy] tenant_secret"
                );
            }
        }
    }

    /// Streams still open at the end of the shutdown grace are cut: each ends with its API's
    /// error event ([`Self::streams_cut`] counts them).
    pub fn cut_streams(&self) {
        let _ = self.cut.send(true);
    }

    /// Whether no request is being rewritten or holds memory for it now, and how many
    /// requests were received so far (an operator's hook to give memory back when idle).
    pub fn idle(&self) -> (bool, u64) {
        (
            self.gate.in_use() == 0 && self.memory.used() == 0,
            self.metrics.received(),
        )
    }

    /// Streams and answers cut at the end of the shutdown grace.
    pub fn streams_cut(&self) -> u64 {
        self.streams_cut.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Deletes what was last written longer ago than `older_than`; logs and returns how many.
    pub fn expire(&self, older_than: std::time::Duration) -> Result<u64, ProxyError> {
        let gone = self.store.expire(older_than)?;
        if gone > 0 {
            tracing::info!(gone, "expired originals and states deleted");
        }
        Ok(gone)
    }

    /// What a request's body may take ([`crate::admission::body`]).
    pub(crate) fn body_limits(&self) -> crate::admission::body::BodyLimits {
        crate::admission::body::BodyLimits {
            max_bytes: self.settings.max_body_bytes,
            deadline: self.settings.timeouts.client_body,
        }
    }

    /// The tenant of a request with these headers.
    pub fn tenant(&self, headers: &HeaderMap) -> Tenant {
        self.tenant_secret.tenant(headers)
    }

    /// The tenant of a request with these headers and this query (Gemini's `key`).
    pub(crate) fn tenant_of(&self, headers: &HeaderMap, query: Option<&str>) -> Tenant {
        self.tenant_secret.tenant_of(headers, query)
    }

    /// The session a request with these headers gets when it names itself `name` with
    /// `x-ctxgc-session`.
    pub fn named_session(&self, headers: &HeaderMap, name: &str) -> SessionId {
        identity::named_session(&self.tenant(headers), name)
    }

    /// Statistics as a caller with these headers may see them: aggregate counts, and the usage
    /// of its own tenant's sessions only, unless it presents the admin token.
    pub fn stats_for(&self, headers: &HeaderMap) -> Stats {
        self.stats_of(headers, None)
    }

    /// [`Self::stats_for`] a caller that may name itself with a `key` query parameter.
    pub(crate) fn stats_of(&self, headers: &HeaderMap, query: Option<&str>) -> Stats {
        let stats = self.stats();
        if self.is_admin(headers) {
            return stats;
        }
        stats.only(&self.tenant_of(headers, query))
    }

    /// Runs one store operation, its time observed in the metrics, unless the store failed
    /// within the last second ([`crate::admission::breaker`]): a stalled store costs one deadline, not one
    /// per call per request.
    pub(crate) fn timed<T, E: Into<ProxyError>>(
        &self,
        operation: impl FnOnce(&dyn Store) -> Result<T, E>,
    ) -> Result<T, ProxyError> {
        self.breaker.admit().map_err(|r| ProxyError::StoreResting {
            left: r.left,
            why: r.why,
        })?;
        let started = std::time::Instant::now();
        let out = operation(&*self.store).map_err(Into::into);
        self.metrics.store_latency(started.elapsed());
        match &out {
            Err(ProxyError::Store(e)) => self.breaker.failed(&e.to_string()),
            _ => self.breaker.succeeded(),
        }
        out
    }

    /// Why the proxy is not ready, if it is not: the store failed within the last second, or
    /// has not answered the once-a-second look at it for [`READY_WITHIN`]. Answered from what
    /// is known, at once, whatever the store does now.
    pub(crate) fn unready(&self) -> Option<String> {
        if let Some(resting) = self.breaker.resting() {
            return Some(format!("the store failed: {}", resting.why));
        }
        let answered = self.store_answered.lock().ok().and_then(|at| *at);
        match answered {
            None => Some("the store has not answered yet".to_owned()),
            Some(at) if at.elapsed() > READY_WITHIN => Some(format!(
                "the store has not answered for {} ms",
                at.elapsed().as_millis()
            )),
            Some(_) => None,
        }
    }

    /// The metrics in Prometheus' text format.
    pub(crate) fn prometheus(&self) -> String {
        let gauges = crate::observe::metrics::Gauges {
            rewrites_in_flight: self.gate.in_use(),
            rewrite_slots: self.gate.total(),
            sessions: self.sessions.len(),
            keepalive_sessions: self.keepalives.len(),
            inflight_bytes: self.memory.used(),
            inflight_budget_bytes: self.memory.limit(),
            store: self.store.usage(),
            store_resting: self.breaker.resting().is_some(),
        };
        self.metrics
            .render(&gauges, self.settings.rewrite.trim.bytes_per_token)
    }

    /// Whether a caller with these headers may see `session`: its tenant's, or the admin's.
    fn may_see(&self, headers: &HeaderMap, query: Option<&str>, session: &str) -> bool {
        self.is_admin(headers) || self.tenant_of(headers, query).owns_id(session)
    }

    fn is_admin(&self, headers: &HeaderMap) -> bool {
        self.settings.admin_token.as_deref().is_some_and(|token| {
            headers
                .get("x-ctxgc-admin-token")
                .is_some_and(|v| v.as_bytes() == token.as_bytes())
        })
    }

    /// One session in full, if the caller may see it.
    pub(crate) fn session_detail(
        &self,
        headers: &HeaderMap,
        query: Option<&str>,
        session: &str,
    ) -> Option<crate::observe::sessions::SessionDetail> {
        self.may_see(headers, query, session)
            .then(|| self.sessions.detail(session))
            .flatten()
    }

    /// An original of `session` by its recall id, if the caller may see the session.
    pub(crate) fn original_for(
        &self,
        headers: &HeaderMap,
        query: Option<&str>,
        session: &str,
        id: &str,
    ) -> Result<Option<String>, ProxyError> {
        let Some(id) = ctxgc_core::ContentId::parse(id) else {
            return Ok(None);
        };
        if !self.may_see(headers, query, session) {
            return Ok(None);
        }
        let session = SessionId::new(session);
        self.timed(|store| store.get(&session, id))
    }

    /// Current statistics, every session included.
    pub fn stats(&self) -> Stats {
        Stats::new(
            self.metrics.totals(),
            self.sessions.snapshot(),
            self.observer.as_ref().map(Observer::totals),
            self.settings.rewrite.trim.bytes_per_token,
        )
    }
}
