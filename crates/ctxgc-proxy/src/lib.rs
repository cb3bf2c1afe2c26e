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

pub mod agent;
mod agentic;
mod error;
pub mod identity;
pub mod lineage;
pub mod rewrite;
pub mod splice;
pub mod splice_json;
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
use futures_util::StreamExt;
use serde::Serialize;

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

/// Per-session usage as the upstream reported it.
#[derive(Debug, Default, Clone, Serialize)]
pub struct SessionUsage {
    /// Requests seen.
    pub requests: u64,
    /// Input tokens reported (uncached).
    pub input_tokens: u64,
    /// Cache reads reported.
    pub cache_read_tokens: u64,
    /// Cache writes reported.
    pub cache_write_tokens: u64,
    /// Output tokens reported.
    pub output_tokens: u64,
    /// ctxgc's own estimate of the latest request's input tokens.
    pub estimated_tokens: u64,
    /// Reported input / ctxgc's estimate, smoothed: scales the engine's token counts for this
    /// session (the upstream's tokenizer, tool definitions and framing as it really counts them).
    pub calibration: Option<f64>,
    /// When it was last active (a counter): the least recently active leave a full table.
    #[serde(skip)]
    pub last_active: u64,
}

impl SessionUsage {
    /// Folds one request's reported input into the calibration (exponential moving average,
    /// clamped so one odd report cannot derail the thresholds). It never goes below 1: a prompt
    /// over the window fails outright, an early event only costs a little, so calibration may
    /// only make the engine more careful.
    fn calibrate(&mut self, reported_input: u64) {
        if self.estimated_tokens == 0 || reported_input == 0 {
            return;
        }
        let ratio = (reported_input as f64 / self.estimated_tokens as f64).clamp(1.0, 2.5);
        self.calibration = Some(match self.calibration {
            Some(previous) => 0.7 * previous + 0.3 * ratio,
            None => ratio,
        });
    }
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
}

/// Response ids remembered for `previous_response_id`, at most.
const MAX_RESPONSES: usize = 100_000;

/// Bytes of committed-original keys this process remembers, at most.
const MAX_COMMITTED_BYTES: usize = 4 << 20;
/// Bytes of memoised token counts, at most (about 170,000 messages).
const MAX_COUNT_BYTES: usize = 8 << 20;
/// Sessions whose usage `/ctxgc/stats` keeps, at most (the least recently active go first).
const MAX_SESSIONS: usize = 10_000;

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

/// The JSON of `/ctxgc/stats`.
#[derive(Debug, Serialize)]
pub struct Stats {
    /// Requests handled on the rewriting routes.
    pub requests: u64,
    /// Requests forwarded with a rewritten body.
    pub rewritten: u64,
    /// Requests forwarded byte for byte (nothing to change).
    pub passed_through: u64,
    /// Requests forwarded unchanged because ctxgc failed internally.
    pub fail_open: u64,
    /// Requests refused as malformed (400) or too large (413).
    pub bad_requests: u64,
    /// Bytes of tool output trimmed away.
    pub bytes_saved: u64,
    /// Originals written to the store.
    pub originals_stored: u64,
    /// Engine events (prune, compaction) run across requests.
    pub events: u64,
    /// Calls to `trim_tool_result` / `recall_tool_result` the proxy ran.
    pub agent_tool_calls: u64,
    /// Compactions whose LLM summary failed and were summarised extractively.
    pub summarizer_failures: u64,
    /// Sessions seen.
    pub sessions: usize,
    /// Usage per session, as the upstream reported it.
    pub usage: BTreeMap<String, SessionUsage>,
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
        }))
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
    ) -> Option<impl FnMut(&SummaryRequest) -> Result<SummaryReply, String> + use<>> {
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
                .map_err(|e| e.to_string())
        })
    }
}

/// The router.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        // Other methods on the API paths (HEAD, OPTIONS, GET) go to the upstream unchanged.
        .route("/v1/chat/completions", post(chat).fallback(passthrough))
        .route("/v1/responses", post(responses).fallback(passthrough))
        .route("/v1/messages", post(messages).fallback(passthrough))
        .route(
            "/v1/messages/count_tokens",
            post(messages).fallback(passthrough),
        )
        .route(
            "/ctxgc/health",
            get(|| async { json(&serde_json::json!({"status": "ok"})) }),
        )
        .route(
            "/ctxgc/stats",
            get(
                |State(s): State<Arc<AppState>>, headers: HeaderMap| async move {
                    json(&s.stats_for(&headers))
                },
            ),
        )
        .fallback(passthrough)
        .with_state(state)
}

/// Serves on `listen` until the process ends.
pub async fn serve(listen: SocketAddr, state: Arc<AppState>) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    state.log(&format!(
        "ctxgc serve: listening on http://{}",
        listener.local_addr()?
    ));
    serve_on(listener, state).await
}

/// Serves the connections `listener` accepts until the process ends: each with TCP_NODELAY
/// and a deadline for its request headers.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
) -> std::io::Result<()> {
    let app = router(state.clone());
    let headers_deadline = state.settings.timeouts.client_headers;
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors, a reset before accept: wait a moment and go on.
                state.log(&format!("ctxgc: accept failed: {e}"));
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        // Without TCP_NODELAY the last small writes of a stream wait for the client's delayed
        // ACK (about 40 ms on kept-alive connections).
        if let Err(e) = stream.set_nodelay(true) {
            state.log(&format!("ctxgc: cannot set TCP_NODELAY: {e}"));
        }
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            // A client that does not finish its headers in time is cut (the body has its own
            // deadline, in `read_body`).
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(headers_deadline)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            let _ = connection.await;
        });
    }
}

async fn chat(State(s): State<Arc<AppState>>, req: Request) -> Response {
    handle(s, Api::ChatCompletions, req).await
}

async fn responses(State(s): State<Arc<AppState>>, req: Request) -> Response {
    handle(s, Api::Responses, req).await
}

async fn messages(State(s): State<Arc<AppState>>, req: Request) -> Response {
    handle(s, Api::Messages, req).await
}

fn json(value: &impl Serialize) -> Response {
    let body = serde_json::to_string(value).unwrap_or_default();
    ([("content-type", "application/json")], body).into_response()
}

fn error(status: StatusCode, kind: &str, message: String) -> Response {
    let body = serde_json::json!({"error": {"type": kind, "message": message, "source": "ctxgc"}});
    (
        status,
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

async fn read_body(s: &AppState, body: Body) -> Result<Bytes, Response> {
    let deadline = s.settings.timeouts.client_body;
    let Ok(read) = tokio::time::timeout(
        deadline,
        axum::body::to_bytes(body, s.settings.max_body_bytes),
    )
    .await
    else {
        s.counters.bad_requests.fetch_add(1, Ordering::Relaxed);
        return Err(error(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            format!(
                "ctxgc: the request body did not arrive within {} s",
                deadline.as_secs()
            ),
        ));
    };
    read.map_err(|_| {
        s.counters.bad_requests.fetch_add(1, Ordering::Relaxed);
        error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request_too_large",
            format!(
                "ctxgc: request body larger than the configured limit of {} bytes",
                s.settings.max_body_bytes
            ),
        )
    })
}

/// A request body as sent, decoded when the client compressed it (`content-encoding: gzip` or
/// `deflate`, as SDKs may); the header goes, since what is forwarded is the decoded body. The
/// decoded size is bounded like the body itself.
/// A request the proxy answers itself: status, error type, message.
struct Refusal(StatusCode, &'static str, String);

fn decode_request_body(
    s: &AppState,
    headers: &mut HeaderMap,
    bytes: Bytes,
) -> Result<Bytes, Refusal> {
    use std::io::Read;
    let encoding = headers
        .get("content-encoding")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_ascii_lowercase())
        .unwrap_or_default();
    if encoding.is_empty() || encoding == "identity" {
        headers.remove("content-encoding");
        return Ok(bytes);
    }
    let limit = s.settings.max_body_bytes as u64 + 1;
    let mut out = Vec::new();
    let read = match encoding.as_str() {
        "gzip" | "x-gzip" => flate2::read::MultiGzDecoder::new(&bytes[..])
            .take(limit)
            .read_to_end(&mut out),
        // HTTP's deflate is zlib-wrapped; some clients send it raw.
        "deflate" => flate2::read::ZlibDecoder::new(&bytes[..])
            .take(limit)
            .read_to_end(&mut out)
            .or_else(|_| {
                out.clear();
                flate2::read::DeflateDecoder::new(&bytes[..])
                    .take(limit)
                    .read_to_end(&mut out)
            }),
        other => {
            s.counters.bad_requests.fetch_add(1, Ordering::Relaxed);
            return Err(Refusal(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "invalid_request_error",
                format!(
                    "ctxgc: request content-encoding `{other}` is not supported (send gzip, deflate or none)"
                ),
            ));
        }
    };
    if let Err(e) = read {
        s.counters.bad_requests.fetch_add(1, Ordering::Relaxed);
        return Err(Refusal(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            format!("ctxgc: the request body is not valid {encoding}: {e}"),
        ));
    }
    if out.len() as u64 >= limit {
        s.counters.bad_requests.fetch_add(1, Ordering::Relaxed);
        return Err(Refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request_too_large",
            format!(
                "ctxgc: decoded request body larger than the configured limit of {} bytes",
                s.settings.max_body_bytes
            ),
        ));
    }
    headers.remove("content-encoding");
    Ok(Bytes::from(out))
}

async fn handle(s: Arc<AppState>, api: Api, req: Request) -> Response {
    let (mut parts, body) = req.into_parts();
    let bytes = match read_body(&s, body).await {
        Ok(b) => b,
        Err(response) => return response,
    };
    let bytes = match decode_request_body(&s, &mut parts.headers, bytes) {
        Ok(b) => b,
        Err(Refusal(status, kind, message)) => return error(status, kind, message),
    };
    s.counters.requests.fetch_add(1, Ordering::Relaxed);
    let mut request = match ApiRequest::parse(api, &bytes) {
        Ok(r) => r,
        Err(e) => {
            s.counters.bad_requests.fetch_add(1, Ordering::Relaxed);
            let why = match e {
                FormatError::Json(j) => format!("ctxgc: the request body is not valid JSON: {j}"),
                other => format!("ctxgc: not a {} request: {other}", api.name()),
            };
            return error(StatusCode::BAD_REQUEST, "invalid_request_error", why);
        }
    };
    let tenant = s.tenant(&parts.headers);
    let session = s.session_of(&tenant, &request, &parts.headers);
    // Rewriting is synchronous CPU work plus a local store write: off the async workers. A panic
    // or a store failure forwards the original (fail open).
    let state = s.clone();
    let session_for_task = session.clone();
    let counting = parts.uri.path().ends_with("/count_tokens");
    let raw_for_task = bytes.clone();
    let outcome = tokio::task::spawn_blocking(move || {
        prepare(
            &state,
            &mut request,
            &raw_for_task,
            &session_for_task,
            counting,
        )
    })
    .await
    .map_err(|e| ProxyError::Task(e.to_string()))
    .and_then(|r| r);
    let mut agentic = None;
    let raw = bytes.clone();
    let forward_bytes = match outcome {
        Ok(Prepared {
            out,
            stored,
            injected,
        }) => {
            agentic = injected;
            s.counters
                .bytes_saved
                .fetch_add(out.bytes_saved as u64, Ordering::Relaxed);
            s.counters
                .originals_stored
                .fetch_add(stored, Ordering::Relaxed);
            match out.body {
                Some(body) => {
                    s.counters.rewritten.fetch_add(1, Ordering::Relaxed);
                    Bytes::from(body)
                }
                None => {
                    s.counters.passed_through.fetch_add(1, Ordering::Relaxed);
                    bytes
                }
            }
        }
        Err(why) => {
            s.counters.fail_open.fetch_add(1, Ordering::Relaxed);
            s.log(&format!(
                "ctxgc: fail open for session {session} ({}): {why}",
                api.name()
            ));
            bytes
        }
    };
    let upstream = match api.wire().upstream() {
        ctxgc_formats::Upstream::Anthropic => &s.settings.anthropic_upstream,
        ctxgc_formats::Upstream::OpenAi => &s.settings.openai_upstream,
    };
    if let Some(client) = agentic {
        let cx = agentic::Context {
            s: s.clone(),
            api,
            upstream: upstream.clone(),
            parts,
            raw,
            end: client,
            session,
        };
        return agentic::run(cx, forward_bytes).await;
    }
    forward(
        &s,
        upstream,
        parts.method,
        &parts.uri,
        &parts.headers,
        forward_bytes,
        Some(session),
    )
    .await
}

/// A request ready to forward.
struct Prepared {
    out: rewrite::Rewritten,
    /// Originals newly written to the store.
    stored: u64,
    /// The agent tools were injected: where the client's own history ended.
    injected: Option<agentic::ClientEnd>,
}

/// Everything done to a request before it is forwarded: the session's agent state replayed and
/// the agent tools injected, insertion trimming, the engine's lineage, and the originals
/// committed to the store.
fn prepare(
    state: &AppState,
    request: &mut ApiRequest,
    raw: &[u8],
    session: &SessionId,
    counting: bool,
) -> Result<Prepared, ProxyError> {
    let settings = &state.settings.rewrite;
    let mut agent_changed = false;
    let mut injected = None;
    if settings.inject_tools {
        let agent_state = agent::load(&*state.store, session)?;
        let end = agentic::ClientEnd::of(request);
        agent_changed |= agent::apply(&mut request.body, request.api, &agent_state);
        // A token count includes the tools the real request will carry; its answer holds no
        // calls to run.
        if agent::inject(&mut request.body, request.api) {
            agent_changed = true;
            injected = (!counting).then_some(end);
        }
    }
    let mut out = {
        let stored = |id| {
            state
                .committed
                .lock()
                .is_ok_and(|c| c.contains(&(session.clone(), id)))
        };
        // Once the agent state changed the parsed body, the client's bytes no longer match it.
        let raw = (!agent_changed).then_some(raw);
        rewrite::rewrite_with(
            request,
            raw,
            session.as_str(),
            settings,
            &state.memo,
            &stored,
        )
    };
    // The engine's events across requests.
    let wire = request.api.wire();
    let (items_key, system_key) = (wire.items_key(), wire.system_key());
    if let Some(policy) = &settings.engine
        && let Some(serde_json::Value::Array(slot)) = request.body.get_mut(items_key)
    {
        // Taken out, not cloned: it goes back unchanged unless an event or lineage applies.
        let client = std::mem::take(slot);
        let tools = request
            .body
            .get("tools")
            .and_then(serde_json::Value::as_array)
            .cloned()
            .unwrap_or_default();
        let step = lineage::StepInput {
            api: request.api,
            client: &client,
            system: system_key.and_then(|key| request.body.get(key)),
            tools: &tools,
            // A token count sees the lineage in force but never runs or records an event.
            events: !counting,
        };
        let mut outcome = advance_lineage(state, session, &step, policy, counting)?;
        // Where the proxy places Anthropic's breakpoints, the end of the summary (or pruned
        // prefix) gets one too: what an event rewrote is then read from the cache afterwards.
        if let (true, Some(messages), Some(l)) = (
            out.added_breakpoints,
            outcome.messages.as_mut(),
            &outcome.lineage,
        ) && let Some(last) = l.prefix.len().checked_sub(1)
        {
            rewrite::mark_breakpoint(&mut messages[last]);
        }
        out.originals.append(&mut outcome.originals);
        if !counting && let Ok(mut sessions) = state.sessions.lock() {
            make_room(&mut sessions, session.as_str());
            let entry = sessions.entry(session.to_string()).or_default();
            entry.estimated_tokens = outcome.estimated_tokens as u64;
            entry.last_active = tick();
        }
        if outcome.event.is_some() {
            state.counters.events.fetch_add(1, Ordering::Relaxed);
        }
        agent_changed |= outcome.messages.is_some();
        request.body[items_key] = serde_json::Value::Array(outcome.messages.unwrap_or(client));
    }
    if agent_changed {
        out.body = Some(request.to_bytes());
    }
    let stored = commit_originals(state, session, &out.originals)?;
    Ok(Prepared {
        out,
        stored,
        injected,
    })
}

/// Times a request of a session may find its lineage moved on by a concurrent request of the
/// same session (another replica, another connection of the client) before it fails open.
const LINEAGE_ATTEMPTS: usize = 3;

/// Runs the engine's step on the session's lineage and saves the new lineage with a
/// compare-and-set: no lock is held meanwhile (the step may wait seconds on an LLM summary),
/// and a step computed from a lineage that changed since is computed again from the new one.
fn advance_lineage(
    state: &AppState,
    session: &SessionId,
    step: &lineage::StepInput<'_>,
    policy: &ctxgc_core::engine::Policy,
    counting: bool,
) -> Result<lineage::Outcome, ProxyError> {
    let settings = &state.settings.rewrite;
    let key = StateKey::Lineage(session);
    let calibration = state
        .sessions
        .lock()
        .ok()
        .and_then(|u| u.get(session.as_str()).and_then(|u| u.calibration))
        .unwrap_or(1.0);
    for _ in 0..LINEAGE_ATTEMPTS {
        // The lineage lives in the store, so replicas and restarts continue the session.
        let stored = state.store.get_state(key)?;
        let current: Option<lineage::Lineage> = stored
            .as_deref()
            .and_then(|json| serde_json::from_str(json).ok());
        let mut llm = state.llm_summarizer();
        let outcome = lineage::step(
            step,
            current.as_ref(),
            policy,
            settings.window,
            calibration,
            state.counter(step.api),
            llm.as_mut().map(|f| f as &mut lineage::SummarizeFn<'_>),
        )?;
        if let Some(why) = &outcome.summarizer_failed {
            // The extractive summary stood in; the LLM is not asked again for a while.
            if let Ok(mut until) = state.summarizer_cooling_until.lock() {
                *until = Some(std::time::Instant::now() + state.settings.summarizer_cooldown);
            }
            state
                .counters
                .summarizer_failures
                .fetch_add(1, Ordering::Relaxed);
            state.log(&format!(
                "ctxgc: the LLM summarizer failed for session {session} ({why}); summarised extractively"
            ));
        }
        // A token count of some other history must not end the lineage in force.
        if counting || outcome.lineage == current {
            return Ok(outcome);
        }
        let was_stopped = current.as_ref().is_some_and(|l| l.stopped.is_some());
        if let Some(why) = outcome.lineage.as_ref().and_then(|l| l.stopped.as_ref())
            && !was_stopped
        {
            state.log(&format!("ctxgc: session {session}: {why}"));
        }
        let json =
            serde_json::to_string(&outcome.lineage).map_err(|source| ProxyError::Serialise {
                what: "lineage",
                source,
            })?;
        if state.store.swap_state(key, stored.as_deref(), &json)? {
            return Ok(outcome);
        }
    }
    Err(ProxyError::Contended {
        what: "lineage",
        attempts: LINEAGE_ATTEMPTS,
    })
}

/// Writes the originals this process has not committed yet, in one store operation, before
/// anything that refers to them is forwarded; returns how many it wrote.
fn commit_originals(
    state: &AppState,
    session: &SessionId,
    originals: &[(ctxgc_core::ContentId, String)],
) -> Result<u64, ProxyError> {
    let known = |id| {
        state
            .committed
            .lock()
            .is_ok_and(|c| c.contains(&(session.clone(), id)))
    };
    let mut fresh: Vec<(ctxgc_core::ContentId, &str)> = Vec::new();
    for (id, text) in originals {
        if !known(*id) && !fresh.iter().any(|(f, _)| f == id) {
            fresh.push((*id, text));
        }
    }
    if fresh.is_empty() {
        return Ok(0);
    }
    state.store.put_all(session, &fresh)?;
    if let Ok(mut c) = state.committed.lock() {
        // Bounded: forgetting only costs one idempotent store write later.
        for (id, _) in &fresh {
            c.insert((session.clone(), *id), ());
        }
    }
    Ok(fresh.len() as u64)
}

/// Everything else: forwarded untouched (Anthropic paths and requests with Anthropic headers go
/// to the Anthropic upstream).
async fn passthrough(State(s): State<Arc<AppState>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let bytes = match read_body(&s, body).await {
        Ok(b) => b,
        Err(response) => return response,
    };
    let anthropic = parts.uri.path().starts_with("/v1/messages")
        || parts.headers.contains_key("anthropic-version")
        || parts.headers.contains_key("x-api-key");
    let upstream = if anthropic {
        &s.settings.anthropic_upstream
    } else {
        &s.settings.openai_upstream
    };
    forward(
        &s,
        upstream,
        parts.method,
        &parts.uri,
        &parts.headers,
        bytes,
        None,
    )
    .await
}

/// Hop-by-hop headers, which a proxy must not forward.
fn hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
            | "host"
            | "content-length"
    ) || name.as_str().starts_with("x-ctxgc-")
}

async fn forward(
    s: &Arc<AppState>,
    upstream: &str,
    method: Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
    session: Option<SessionId>,
) -> Response {
    match send(s, upstream, method, uri, headers, body).await {
        Ok(response) => relay(s, response, session),
        Err(response) => response,
    }
}

/// Sends a request upstream with the client's headers (hop-by-hop ones excepted). An upstream
/// that cannot be reached becomes a 502, as a gateway would answer.
async fn send(
    s: &AppState,
    upstream: &str,
    method: Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<reqwest::Response, Response> {
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let url = format!("{}{}", upstream.trim_end_matches('/'), path);
    let mut builder = s.client.request(method, &url);
    for (name, value) in headers {
        // The client's accept-encoding is not passed on: the HTTP client asks for what it can
        // decode and decodes it, so the proxy can read every answer (its own tool calls, usage)
        // and the client gets it as identity, which every client accepts.
        if !hop_by_hop(name) && name != "accept-encoding" {
            builder = builder.header(name, value);
        }
    }
    builder.body(body).send().await.map_err(|e| {
        let shown = redact_url(upstream);
        if e.is_timeout() {
            let secs = s.settings.timeouts.upstream_idle.as_secs();
            s.log(&format!("ctxgc: upstream {shown} silent for {secs} s"));
            return error(
                StatusCode::GATEWAY_TIMEOUT,
                "upstream_timeout",
                format!("ctxgc: the upstream {shown} did not answer within {secs} s"),
            );
        }
        s.log(&format!(
            "ctxgc: upstream {shown} unreachable: {}",
            e.without_url()
        ));
        error(
            StatusCode::BAD_GATEWAY,
            "upstream_unreachable",
            format!("ctxgc: cannot reach the upstream {shown}"),
        )
    })
}

/// An upstream URL as it may be shown (logs, error bodies): credentials in it are replaced by
/// `***`.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://***@{}", &rest[at + 1..]),
        None => url.to_owned(),
    }
}

/// The response headers passed to the client.
fn response_headers(response: &reqwest::Response) -> HeaderMap {
    let mut out = HeaderMap::new();
    for (name, value) in response.headers() {
        if !hop_by_hop(name) {
            out.append(name.clone(), value.clone());
        }
    }
    out.insert("x-ctxgc", HeaderValue::from_static("1"));
    out
}

fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("text/event-stream"))
}

/// Streams an upstream response to the client as it arrives, byte for byte, reading the usage
/// it reports on the way.
fn relay(s: &Arc<AppState>, response: reqwest::Response, session: Option<SessionId>) -> Response {
    let status = response.status();
    let headers = response_headers(&response);
    let streaming = is_event_stream(response.headers());
    let mut tap = session.map(|session| usage::Tap::new(session, streaming));
    let state = s.clone();
    let idle = s.settings.timeouts.upstream_idle;
    let stream = response.bytes_stream().map(move |chunk| {
        if let (Ok(bytes), Some(t)) = (&chunk, tap.as_mut()) {
            t.feed(bytes);
            if let Some((session, usage, response_id)) = t.finished() {
                if let Some(usage) = usage {
                    record_usage(&state, &session, usage);
                }
                if let Some(id) = response_id {
                    state.remember_response(id, session);
                }
            }
        }
        chunk
    });
    // A stream the upstream stopped feeding ends with an error event the client sees (rather
    // than a connection that just stops), then nothing more.
    let stream = stream.scan(false, move |failed, chunk| {
        let item = match chunk {
            _ if *failed => None,
            Ok(bytes) => Some(Ok(bytes)),
            Err(e) if streaming => {
                *failed = true;
                let why = if e.is_timeout() {
                    format!("the upstream sent nothing for {} s", idle.as_secs())
                } else {
                    format!("the upstream stream broke: {}", e.without_url())
                };
                let event = serde_json::json!({"type": "error", "error": {"type": "ctxgc_upstream_error", "message": format!("ctxgc: {why}")}});
                Some(Ok(Bytes::from(format!("event: error\ndata: {event}\n\n"))))
            }
            Err(e) => {
                *failed = true;
                Some(Err(e))
            }
        };
        std::future::ready(item)
    });
    let mut resp = Response::new(Body::from_stream(stream));
    *resp.status_mut() = status;
    *resp.headers_mut() = headers;
    resp
}

fn record_usage(s: &AppState, session: &SessionId, u: usage::Usage) {
    if let Ok(mut sessions) = s.sessions.lock() {
        make_room(&mut sessions, session.as_str());
        let entry = sessions.entry(session.to_string()).or_default();
        entry.last_active = tick();
        entry.requests += 1;
        entry.input_tokens += u.input;
        entry.cache_read_tokens += u.cache_read;
        entry.cache_write_tokens += u.cache_write;
        entry.output_tokens += u.output;
        entry.calibrate(u.input + u.cache_read + u.cache_write);
    }
}

/// Keeps the usage table bounded: before a new session enters a full table, the least
/// recently active tenth leaves.
fn make_room(sessions: &mut BTreeMap<String, SessionUsage>, entering: &str) {
    if sessions.len() < MAX_SESSIONS || sessions.contains_key(entering) {
        return;
    }
    let mut by_age: Vec<(u64, String)> = sessions
        .iter()
        .map(|(id, u)| (u.last_active, id.clone()))
        .collect();
    by_age.sort_unstable();
    for (_, id) in by_age.into_iter().take(MAX_SESSIONS / 10) {
        sessions.remove(&id);
    }
}

/// A clock for "least recently active": a counter, not the time (deterministic).
fn tick() -> u64 {
    static CLOCK: AtomicU64 = AtomicU64::new(0);
    CLOCK.fetch_add(1, Ordering::Relaxed)
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
