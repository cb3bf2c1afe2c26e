//! The server's shared state, made of parts that own their data: the upstream client, the
//! store, the memos, the counters, the session table, the response index, the summarizer and
//! the tenant secret. Each part is reached through its own methods; this file only builds them
//! and answers what needs several (who a caller is, what it may see).

use std::sync::Arc;

use axum::http::HeaderMap;
use ctxgc_core::store::{SessionId, StateKey, Store};
use ctxgc_formats::ApiRequest;

use crate::error::ProxyError;
use crate::identity::{self, Tenant, TenantSecret};
use crate::memos::Memos;
use crate::metrics::Metrics;
use crate::observe::Observer;
use crate::responses::ResponseIndex;
use crate::sessions::SessionTable;
use crate::settings::ProxySettings;
use crate::stats::Stats;
use crate::summarizer::SummarizerGate;
use crate::upstream::Upstreams;

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
    pub(crate) responses: ResponseIndex,
    pub(crate) summarizer: SummarizerGate,
    /// Observe mode's queue and worker, when on.
    pub(crate) observer: Option<Observer>,
    tenant_secret: TenantSecret,
    /// Requests being rewritten at once, at most: each holds its parsed body and views, so
    /// this bounds the memory a burst can take (the rest wait, then fail open).
    pub(crate) rewrite_slots: Arc<tokio::sync::Semaphore>,
    rewrite_slots_total: usize,
}

/// Rewrite slots: twice the cores (at least 4), so a slow LLM summary holding one leaves
/// others free while memory stays bounded under any number of connections.
fn rewrite_slots() -> usize {
    (std::thread::available_parallelism().map_or(2, |n| n.get()) * 2).max(4)
}

/// What readiness reads from the store (it need not exist).
const READINESS_KEY: StateKey<'static> = StateKey::Server("readiness-probe");

/// Where the tenant secret is kept in the store (no session id can spell it).
const TENANT_SECRET_KEY: StateKey<'static> = StateKey::Server("tenant-secret");

/// The tenant secret: configured, else the one the store keeps, else a new one it then keeps
/// (the first replica to save one wins, and the others take it).
fn tenant_secret(settings: &ProxySettings, store: &dyn Store) -> Result<TenantSecret, ProxyError> {
    if let Some(text) = &settings.tenant_secret {
        return Ok(TenantSecret::from_text(text));
    }
    let stored = |store: &dyn Store| -> Result<_, ProxyError> {
        Ok(store
            .get_state(TENANT_SECRET_KEY)?
            .and_then(|s| TenantSecret::from_hex(&s)))
    };
    if let Some(secret) = stored(store)? {
        return Ok(secret);
    }
    let fresh = TenantSecret::random().map_err(ProxyError::Setup)?;
    if store.swap_state(TENANT_SECRET_KEY, None, &fresh.to_hex())? {
        return Ok(fresh);
    }
    stored(store)?.ok_or(ProxyError::Setup(
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
        let metrics = Arc::new(Metrics::default());
        let state = Arc::new(AppState {
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
            rewrite_slots: Arc::new(tokio::sync::Semaphore::new(rewrite_slots())),
            rewrite_slots_total: rewrite_slots(),
            observer: settings_observe.then(Observer::new),
        });
        Ok(state)
    }

    /// Deletes what was last written longer ago than `older_than`; logs and returns how many.
    pub fn expire(&self, older_than: std::time::Duration) -> Result<u64, ProxyError> {
        let gone = self.store.expire(older_than)?;
        if gone > 0 {
            tracing::info!(gone, "expired originals and states deleted");
        }
        Ok(gone)
    }

    /// The session of a request: the one the response it continues (`previous_response_id`)
    /// answered, when that session is the caller's; else as [`identity::session`] says.
    pub(crate) fn session_of(
        &self,
        tenant: &Tenant,
        request: &ApiRequest,
        headers: &HeaderMap,
    ) -> SessionId {
        let continued = request
            .body
            .get("previous_response_id")
            .and_then(serde_json::Value::as_str)
            .filter(|_| !headers.contains_key("x-ctxgc-session"))
            .and_then(|id| self.responses.session_of(id))
            .filter(|session| tenant.owns(session));
        continued.unwrap_or_else(|| identity::session(tenant, request, headers))
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

    /// Runs one store operation, its time observed in the metrics.
    pub(crate) fn timed<T>(&self, operation: impl FnOnce(&dyn Store) -> T) -> T {
        let started = std::time::Instant::now();
        let out = operation(&*self.store);
        self.metrics.store_latency(started.elapsed());
        out
    }

    /// The metrics in Prometheus' text format.
    pub(crate) fn prometheus(&self) -> String {
        let slots = self.rewrite_slots_total;
        let gauges = crate::metrics::Gauges {
            rewrites_in_flight: slots.saturating_sub(self.rewrite_slots.available_permits()),
            rewrite_slots: slots,
            sessions: self.sessions.len(),
        };
        self.metrics
            .render(&gauges, self.settings.rewrite.trim.bytes_per_token)
    }

    /// Whether the store answers within its deadline (readiness).
    pub(crate) fn store_ready(&self) -> Result<(), ProxyError> {
        self.timed(|store| store.get_state(READINESS_KEY))?;
        Ok(())
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
    ) -> Option<crate::sessions::SessionDetail> {
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
        Ok(self.timed(|store| store.get(&session, id))?)
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
