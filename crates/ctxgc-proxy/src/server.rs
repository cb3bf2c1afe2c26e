//! The server: its routes and its accept loop. Each API route hands its requests to
//! [`crate::route`]; the proxy's own routes answer from the state.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::http::{HeaderMap, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use ctxgc_formats::Api;

use crate::reply::json;
use crate::route::api_request;
use crate::route::send::passthrough;
use crate::state::AppState;

/// The API routes the pipeline serves; every other path is forwarded untouched.
const API_ROUTES: &[(&str, Api)] = &[
    ("/v1/chat/completions", Api::ChatCompletions),
    ("/v1/responses", Api::Responses),
    ("/v1/messages", Api::Messages),
    ("/v1/messages/count_tokens", Api::Messages),
];

/// The router.
pub fn router(state: Arc<AppState>) -> Router {
    crate::route::workers::start(&state);
    /// The route of one API: its requests go through the pipeline.
    fn api(api: Api) -> axum::routing::MethodRouter<Arc<AppState>> {
        post(
            move |State(s): State<Arc<AppState>>, req: Request| async move {
                api_request(s, api, req).await
            },
        )
        // Other methods on the API paths (HEAD, OPTIONS, GET) go to the upstream unchanged.
        .fallback(passthrough)
    }
    let mut router = Router::new();
    for (path, which) in API_ROUTES {
        router = router.route(path, api(*which));
    }
    for path in GEMINI_ROUTES {
        router = router.route(path, post(gemini).fallback(passthrough));
    }
    router
        .route(
            "/ctxgc/health",
            get(|| async { json(&serde_json::json!({"status": "ok"})) }),
        )
        .route("/ctxgc/stats", get(stats))
        .route("/ctxgc/", get(dashboard))
        .route("/ctxgc", get(dashboard))
        .route("/ctxgc/sessions/{id}", get(session_detail))
        .route("/ctxgc/sessions/{id}/originals/{rid}", get(original))
        .route(
            "/ctxgc/healthz",
            get(|| async { json(&serde_json::json!({"status": "ok"})) }),
        )
        .route("/ctxgc/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .fallback(passthrough)
        .with_state(state)
}

async fn stats(State(s): State<Arc<AppState>>, headers: HeaderMap, uri: Uri) -> Response {
    json(&s.stats_of(&headers, uri.query()))
}

/// The dashboard: one page, its script and style inline, nothing fetched from elsewhere.
async fn dashboard() -> Response {
    (
        [
            ("content-type", "text/html; charset=utf-8"),
            (
                "content-security-policy",
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:",
            ),
            ("cache-control", "no-store"),
        ],
        include_str!("observe/dashboard.html"),
    )
        .into_response()
}

fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        json(&serde_json::json!({"error": "no such session for this caller"})),
    )
        .into_response()
}

/// One session in full, if the caller may see it (its own tenant's, or the admin token).
async fn session_detail(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    match s.session_detail(&headers, uri.query(), &id) {
        Some(detail) => json(&detail),
        None => not_found(),
    }
}

/// An original a session hid, by its recall id, under the same rule.
async fn original(
    State(s): State<Arc<AppState>>,
    Path((id, rid)): Path<(String, String)>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    let found =
        tokio::task::spawn_blocking(move || s.original_for(&headers, uri.query(), &id, &rid)).await;
    match found {
        Ok(Ok(Some(text))) => {
            ([("content-type", "text/plain; charset=utf-8")], text).into_response()
        }
        Ok(Ok(None)) => not_found(),
        Ok(Err(e)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            json(&serde_json::json!({"error": e.to_string()})),
        )
            .into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            json(&serde_json::json!({"error": e.to_string()})),
        )
            .into_response(),
    }
}

/// Prometheus' scrape.
async fn metrics(State(s): State<Arc<AppState>>) -> Response {
    (
        [("content-type", "text/plain; version=0.0.4; charset=utf-8")],
        s.prometheus(),
    )
        .into_response()
}

/// Ready when the store answers (within its own deadline), off the async workers.
async fn readyz(State(s): State<Arc<AppState>>) -> Response {
    // From what the once-a-second look at the store found: at once, whatever the store does.
    match s.unready() {
        None => json(&serde_json::json!({"status": "ready"})),
        Some(why) => {
            let body = json(&serde_json::json!({"status": "unavailable", "why": why}));
            (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
        }
    }
}

/// Gemini's routes: the model and the method share the last segment (`{model}:{method}`).
const GEMINI_ROUTES: &[&str] = &["/v1beta/models/{model}", "/v1/models/{model}"];

/// A Gemini request: `generateContent`, `streamGenerateContent` and `countTokens` (with its
/// `contents` at the top) go through the pipeline, any other method to the upstream unchanged.
async fn gemini(State(s): State<Arc<AppState>>, req: Request) -> Response {
    let path = req.uri().path();
    let rewritten = path.ends_with(":generateContent")
        || path.ends_with(":streamGenerateContent")
        || path.ends_with(":countTokens");
    if rewritten {
        api_request(s, Api::Gemini, req).await
    } else {
        passthrough(State(s), req).await
    }
}

/// Serves on `listen` until the process ends.
pub async fn serve(listen: SocketAddr, state: Arc<AppState>) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    tracing::info!(address = %listener.local_addr()?, "listening");
    serve_on(listener, state).await
}

/// Serves the connections `listener` accepts until the process ends: each with TCP_NODELAY
/// and a deadline for its request headers.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
) -> std::io::Result<()> {
    serve_until(listener, state, std::future::pending()).await
}

/// Serves until `shutdown` completes, then stops accepting and lets the requests and streams in
/// flight finish, for at most `Timeouts::shutdown_grace`; connections still open then are cut.
pub async fn serve_until(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let headers_deadline = state.settings.timeouts.client_headers;
    let grace = state.settings.timeouts.shutdown_grace;
    // The store is looked at every second, off the async workers (see `AppState::watch_store`).
    let watched = Arc::downgrade(&state);
    let watch = tokio::spawn(async move {
        let mut every = tokio::time::interval(std::time::Duration::from_secs(1));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let Some(state) = watched.upgrade() else {
                break;
            };
            let _ = tokio::task::spawn_blocking(move || state.watch_store()).await;
        }
    });
    // Keep-alives (`[cache] keepalive`) and idle sessions' preparation (events only after a
    // pause): the waiting sessions are looked at every tick, and each keep-alive or
    // preparation due runs on its own task, with its own deadline.
    let keeper = Arc::downgrade(&state);
    let rewrite = &state.settings.rewrite;
    let idle_work =
        rewrite.cache.keepalive || (rewrite.engine.is_some() && rewrite.events_only_when_cold);
    let keepalive = idle_work.then(|| {
        let tick = state.keepalives.tick();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(tick);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                let Some(state) = keeper.upgrade() else {
                    break;
                };
                let now = std::time::Instant::now();
                for due in state.keepalives.due(&state.settings.rewrite.cache, now) {
                    tokio::spawn(crate::route::beside::send_keepalive(state.clone(), due));
                }
                for due in state.idle.due(now) {
                    tokio::spawn(crate::route::beside::prepare_idle(state.clone(), due));
                }
            }
        })
    });
    let cutter = state.clone();
    let app = router(state);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors, a reset before accept: wait a moment and go on.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        // Without TCP_NODELAY the last small writes of a stream wait for the client's delayed
        // ACK (about 40 ms on kept-alive connections).
        if let Err(e) = stream.set_nodelay(true) {
            tracing::warn!(error = %e, "cannot set TCP_NODELAY");
        }
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        // A client that does not finish its headers in time is cut (the body has its own
        // deadline, in the handler).
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(headers_deadline)
            .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            let _ = connection.await;
        });
    }
    drop(listener);
    tracing::info!(
        grace_secs = grace.as_secs(),
        "shutting down: no new connections; waiting for the requests in flight"
    );
    watch.abort();
    if let Some(keepalive) = keepalive {
        keepalive.abort();
    }
    let mut finished = std::pin::pin!(graceful.shutdown());
    tokio::select! {
        () = &mut finished => tracing::info!("every request finished"),
        () = tokio::time::sleep(grace) => {
            // Each stream still open ends with its API's error event, rather than a connection
            // that just stops; a moment is left for those events to go out.
            cutter.cut_streams();
            let _ = tokio::time::timeout(CUT_FLUSH, &mut finished).await;
            tracing::warn!(
                cut = cutter.streams_cut(),
                "the shutdown grace elapsed: the answers still open were cut"
            );
        }
    }
    Ok(())
}

/// After the grace, how long cut streams have to send their error event and close.
const CUT_FLUSH: std::time::Duration = std::time::Duration::from_secs(2);
