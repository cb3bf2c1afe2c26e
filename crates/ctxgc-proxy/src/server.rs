//! The server: its routes and its accept loop. Each API route hands its requests to
//! [`crate::handler`]; the proxy's own routes answer from the state.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Uri};
use axum::response::Response;
use axum::routing::{get, post};
use ctxgc_formats::Api;

use crate::handler::{api_request, passthrough};
use crate::reply::json;
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
        .fallback(passthrough)
        .with_state(state)
}

async fn stats(State(s): State<Arc<AppState>>, headers: HeaderMap, uri: Uri) -> Response {
    json(&s.stats_of(&headers, uri.query()))
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
    let headers_deadline = state.settings.timeouts.client_headers;
    let app = router(state);
    loop {
        let stream = match listener.accept().await {
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
        tokio::spawn(async move {
            // A client that does not finish its headers in time is cut (the body has its own
            // deadline, in the handler).
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(headers_deadline)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            let _ = connection.await;
        });
    }
}
