//! ctxgc-proxy: `ctxgc serve`, a drop-in proxy for the OpenAI and Anthropic APIs.
//!
//! Agents change their base URL to the proxy. Requests to `/v1/chat/completions`,
//! `/v1/responses`, `/v1/messages` and `/v1/messages/count_tokens` are rewritten (insertion-time
//! trimming of tool results, originals stored first, cache keys and breakpoints); everything else
//! is forwarded untouched. Responses are never rewritten: they stream back byte for byte as they
//! arrive, except that the proxy's own agent tools (`--inject-tools`) are run here and hidden
//! from the client. With `--compact`, the engine's events run across requests. Any internal
//! failure forwards the original request unchanged (fail open) and is logged and counted.
//! Headers are forwarded and never logged or stored.

#![deny(missing_docs)]

pub mod agent;
mod agentic;
mod error;
mod forward;
pub mod identity;
pub mod lineage;
mod pipeline;
pub mod rewrite;
mod server;
pub mod splice;
pub mod splice_json;
mod stats;
mod usage;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use ctxgc_core::bounded::BoundedMemo;
use ctxgc_core::engine::{SummaryReply, SummaryRequest};
use ctxgc_core::store::{SessionId, StateKey, Store};
use ctxgc_formats::{Api, ApiRequest, FormatError};

pub use error::ProxyError;
pub use forward::redact_url;
pub use server::{router, serve, serve_on};
pub use stats::{SessionUsage, Stats};

use forward::*;
use futures_util::StreamExt;
use pipeline::*;
use serde::Serialize;
use server::*;
use stats::*;

pub use rewrite::RewriteSettings;

/// Where log lines go (stderr in production; a buffer in tests).
pub type LogSink = Arc<dyn Fn(&str) + Send + Sync>;

/// Proxy settings.
#[derive(Clone)]
pub struct ProxySettings {
    /// Base URL of the OpenAI-compatible upstream, e.g. `https://api.openai.com`.
    pub openai_upstream: String,
    /// Base URL of the Anthropic upstream, e.g. `https://api.anthropic.com`.
    pub anthropic_upstream: String,
    /// Largest request body accepted, in bytes (413 above).
    pub max_body_bytes: usize,
    /// Rewriting settings.
    pub rewrite: RewriteSettings,
    /// Who writes compaction summaries: an LLM, or `None` for the extractive summarizer.
    pub summarizer: Option<Arc<ctxgc_summarize::LlmSummarizer>>,
    /// After the LLM summarizer fails, compactions are summarised extractively for this long.
    pub summarizer_cooldown: std::time::Duration,
    /// The secret tenant ids are keyed with; `None`: one kept in the store (made at the first
    /// start), so replicas on one store agree.
    pub tenant_secret: Option<String>,
    /// Presented as `x-ctxgc-admin-token`, lets `/ctxgc/stats` list every tenant's sessions.
    pub admin_token: Option<String>,
    /// How long each wait may last.
    pub timeouts: Timeouts,
    /// How tokens are counted (`[tokens]`).
    pub tokens: ctxgc_core::tokens::TokenSettings,
}

/// Every wait the proxy makes has a deadline.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// To connect to an upstream.
    pub connect: std::time::Duration,
    /// An upstream's silence: before its first byte, and between two chunks.
    pub upstream_idle: std::time::Duration,
    /// For a client to send its request body.
    pub client_body: std::time::Duration,
    /// For a client to send its request headers.
    pub client_headers: std::time::Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: std::time::Duration::from_secs(10),
            upstream_idle: std::time::Duration::from_secs(600),
            client_body: std::time::Duration::from_secs(60),
            client_headers: std::time::Duration::from_secs(30),
        }
    }
}

/// Counters served at `/ctxgc/stats`.
#[derive(Default)]
struct Counters {
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

/// Shared state of the server.
pub struct AppState {
    settings: ProxySettings,
    client: reqwest::Client,
    /// Shared by every request; no lock of the server's is held around its operations (each
    /// has its own deadline).
    store: Box<dyn Store>,
    /// Originals committed by this process: resent histories do not write them again.
    committed: Mutex<BoundedMemo<(SessionId, ctxgc_core::ContentId), ()>>,
    memo: rewrite::TrimMemo,
    /// Token counts of the sessions' messages, shared by their lineages.
    counts: Arc<ctxgc_core::tokens::CountMemo>,
    counters: Counters,
    sessions: Mutex<BTreeMap<String, SessionUsage>>,
    /// Until when the LLM summarizer is not asked (after a failure).
    summarizer_cooling_until: Mutex<Option<std::time::Instant>>,
    tenant_secret: identity::TenantSecret,
    /// Responses response id -> the session it answered (bounded): a request that continues it
    /// with `previous_response_id` stays in that session.
    responses: Mutex<(HashMap<String, String>, VecDeque<String>)>,
    log: LogSink,
    /// Requests being rewritten at once, at most: each holds its parsed body and views, so
    /// this bounds the memory a burst can take (the rest wait, then fail open).
    rewrite_slots: Arc<tokio::sync::Semaphore>,
}

/// Response ids remembered for `previous_response_id`, at most.
const MAX_RESPONSES: usize = 100_000;

/// Bytes of committed-original keys this process remembers, at most.
const MAX_COMMITTED_BYTES: usize = 4 << 20;
/// Bytes of memoised token counts, at most (about 170,000 messages).
const MAX_COUNT_BYTES: usize = 8 << 20;
/// Sessions whose usage `/ctxgc/stats` keeps, at most (the least recently active go first).
const MAX_SESSIONS: usize = 10_000;
/// How long a request waits for a rewrite slot before it is forwarded unchanged.
pub(crate) const REWRITE_QUEUE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(2);

/// Rewrite slots: twice the cores (at least 4), so a slow LLM summary holding one leaves
/// others free while memory stays bounded under any number of connections.
fn rewrite_slots() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get()) * 2
}

/// Where the tenant secret is kept in the store (no session id can spell it).
const TENANT_SECRET_KEY: StateKey<'static> = StateKey::Server("tenant-secret");

/// The tenant secret: configured, else the one the store keeps, else a new one it then keeps
/// (the first replica to save one wins, and the others take it).
fn tenant_secret(
    settings: &ProxySettings,
    store: &dyn Store,
) -> Result<identity::TenantSecret, ProxyError> {
    if let Some(text) = &settings.tenant_secret {
        return Ok(identity::TenantSecret::from_text(text));
    }
    let stored = |store: &dyn Store| -> Result<_, ProxyError> {
        Ok(store
            .get_state(TENANT_SECRET_KEY)?
            .and_then(|s| identity::TenantSecret::from_hex(&s)))
    };
    if let Some(secret) = stored(store)? {
        return Ok(secret);
    }
    let fresh = identity::TenantSecret::random().map_err(ProxyError::Setup)?;
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
        log: LogSink,
    ) -> Result<Arc<AppState>, ProxyError> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let tenant_secret = tenant_secret(&settings, &*store)?;
        let client = reqwest::Client::builder()
            .connect_timeout(settings.timeouts.connect)
            .read_timeout(settings.timeouts.upstream_idle)
            // A request body written in pieces must not wait on the upstream's delayed ACK.
            .tcp_nodelay(true)
            .build()
            .map_err(|e| ProxyError::Setup(format!("cannot build the HTTP client: {e}")))?;
        Ok(Arc::new(AppState {
            settings,
            client,
            store,
            committed: Mutex::new(BoundedMemo::new(MAX_COMMITTED_BYTES, |(session, _), _| {
                64 + session.as_str().len()
            })),
            memo: Default::default(),
            counts: Arc::new(ctxgc_core::tokens::CountMemo::new(MAX_COUNT_BYTES)),
            counters: Counters::default(),
            sessions: Mutex::new(BTreeMap::new()),
            summarizer_cooling_until: Mutex::new(None),
            tenant_secret,
            responses: Mutex::new(Default::default()),
            log,
            rewrite_slots: Arc::new(tokio::sync::Semaphore::new(rewrite_slots().max(4))),
        }))
    }

    /// Whether this process already committed the original `id` of `session` to the store.
    fn is_committed(&self, session: &SessionId, id: ctxgc_core::ContentId) -> bool {
        self.committed
            .lock()
            .is_ok_and(|c| c.contains(&(session.clone(), id)))
    }

    /// A token counter for requests of `api`, with the configured settings and the server's
    /// count memo.
    fn counter(&self, api: Api) -> ctxgc_core::tokens::TokenCounter {
        ctxgc_core::tokens::TokenCounter::new(api.wire().family(), self.settings.tokens.clone())
            .sharing(self.counts.clone())
    }

    /// Deletes what was last written longer ago than `older_than`; logs and returns how many.
    pub fn expire(&self, older_than: std::time::Duration) -> Result<u64, ProxyError> {
        let gone = self.store.expire(older_than)?;
        if gone > 0 {
            self.log(&format!(
                "ctxgc: {gone} expired originals and states deleted"
            ));
        }
        Ok(gone)
    }

    fn remember_response(&self, id: String, session: SessionId) {
        if let Ok(mut guard) = self.responses.lock() {
            let (map, order) = &mut *guard;
            if map.len() >= MAX_RESPONSES
                && let Some(oldest) = order.pop_front()
            {
                map.remove(&oldest);
            }
            if map.insert(id.clone(), session.to_string()).is_none() {
                order.push_back(id);
            }
        }
    }

    /// The session of a request: the one the response it continues (`previous_response_id`)
    /// answered, when that session is the caller's; else as [`identity::session`] says.
    fn session_of(
        &self,
        tenant: &identity::Tenant,
        request: &ApiRequest,
        headers: &HeaderMap,
    ) -> SessionId {
        let continued = request
            .body
            .get("previous_response_id")
            .and_then(serde_json::Value::as_str)
            .filter(|_| !headers.contains_key("x-ctxgc-session"))
            .and_then(|id| self.responses.lock().ok()?.0.get(id).cloned())
            .map(SessionId::new)
            .filter(|session| tenant.owns(session));
        continued.unwrap_or_else(|| identity::session(tenant, request, headers))
    }

    /// The tenant of a request with these headers.
    pub fn tenant(&self, headers: &HeaderMap) -> identity::Tenant {
        self.tenant_secret.tenant(headers)
    }

    /// The session a request with these headers gets when it names itself `name` with
    /// `x-ctxgc-session`.
    pub fn named_session(&self, headers: &HeaderMap, name: &str) -> identity::SessionId {
        identity::named_session(&self.tenant(headers), name)
    }

    /// Statistics as a caller with these headers may see them: aggregate counts, and the usage
    /// of its own tenant's sessions only, unless it presents the admin token.
    pub fn stats_for(&self, headers: &HeaderMap) -> Stats {
        let mut stats = self.stats();
        let admin = self.settings.admin_token.as_deref().is_some_and(|token| {
            headers
                .get("x-ctxgc-admin-token")
                .is_some_and(|v| v.as_bytes() == token.as_bytes())
        });
        if !admin {
            let tenant = format!("{}.", self.tenant(headers).as_str());
            stats.usage.retain(|id, _| id.starts_with(&tenant));
            stats.sessions = stats.usage.len();
        }
        stats
    }

    /// Current statistics, every session included.
    pub fn stats(&self) -> Stats {
        let c = &self.counters;
        let usage = self.sessions.lock().map(|s| s.clone()).unwrap_or_default();
        Stats {
            requests: c.requests.load(Ordering::Relaxed),
            rewritten: c.rewritten.load(Ordering::Relaxed),
            passed_through: c.passed_through.load(Ordering::Relaxed),
            fail_open: c.fail_open.load(Ordering::Relaxed),
            bad_requests: c.bad_requests.load(Ordering::Relaxed),
            bytes_saved: c.bytes_saved.load(Ordering::Relaxed),
            originals_stored: c.originals_stored.load(Ordering::Relaxed),
            events: c.events.load(Ordering::Relaxed),
            agent_tool_calls: c.agent_tool_calls.load(Ordering::Relaxed),
            summarizer_failures: c.summarizer_failures.load(Ordering::Relaxed),
            sessions: usage.len(),
            usage,
        }
    }

    fn log(&self, line: &str) {
        (self.log)(line);
    }

    /// The LLM summarizer as a blocking call (from a blocking task of the runtime), unless
    /// none is configured or it is cooling down after a failure.
    fn llm_summarizer(
        &self,
    ) -> Option<
        impl FnMut(&SummaryRequest) -> Result<SummaryReply, ctxgc_core::engine::SummarizerError> + use<>,
    > {
        let llm = self.settings.summarizer.clone()?;
        let cooling = self
            .summarizer_cooling_until
            .lock()
            .ok()
            .and_then(|u| *u)
            .is_some_and(|until| std::time::Instant::now() < until);
        if cooling {
            return None;
        }
        let handle = tokio::runtime::Handle::try_current().ok()?;
        Some(move |request: &SummaryRequest| {
            handle
                .block_on(llm.summarize(request))
                .map_err(|e| ctxgc_core::engine::SummarizerError::Failed(Box::new(e)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_usage_table_is_bounded() {
        let mut sessions = BTreeMap::new();
        for i in 0..MAX_SESSIONS + 5 {
            let id = format!("s{i}");
            make_room(&mut sessions, &id);
            sessions.entry(id).or_insert_with(|| SessionUsage {
                last_active: tick(),
                ..Default::default()
            });
        }
        assert!(sessions.len() <= MAX_SESSIONS);
        assert!(sessions.contains_key(&format!("s{}", MAX_SESSIONS + 4)));
        assert!(
            !sessions.contains_key("s0"),
            "the least recently active left"
        );
    }

    #[test]
    fn upstream_urls_are_shown_without_credentials() {
        assert_eq!(
            redact_url("https://user:pass@gw.example:8443/v1?x=1"),
            "https://***@gw.example:8443/v1?x=1"
        );
        assert_eq!(redact_url("http://127.0.0.1:9/v1"), "http://127.0.0.1:9/v1");
        // An `@` in the path is not a credential.
        assert_eq!(redact_url("http://h/a@b"), "http://h/a@b");
    }

    #[test]
    fn calibration_follows_reported_usage_smoothly_and_within_bounds() {
        let mut u = SessionUsage {
            estimated_tokens: 10_000,
            ..Default::default()
        };
        u.calibrate(12_000);
        assert_eq!(u.calibration, Some(1.2), "first report sets it");
        u.calibrate(13_000);
        assert!(
            (u.calibration.unwrap() - (0.7 * 1.2 + 0.3 * 1.3)).abs() < 1e-9,
            "then an average"
        );
        let mut odd = SessionUsage {
            estimated_tokens: 10_000,
            ..Default::default()
        };
        odd.calibrate(90_000);
        assert_eq!(odd.calibration, Some(2.5), "clamped");
        let mut low = SessionUsage {
            estimated_tokens: 10_000,
            ..Default::default()
        };
        low.calibrate(5_000);
        assert_eq!(low.calibration, Some(1.0), "never below 1");
        let mut none = SessionUsage::default();
        none.calibrate(5_000);
        assert_eq!(none.calibration, None, "no estimate, nothing to learn");
    }
}
