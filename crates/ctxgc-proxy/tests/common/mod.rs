//! Helpers shared by the proxy's end-to-end tests.

use std::time::Duration;

use ctxgc_proxy::{ProxySettings, RewriteSettings, Timeouts};
use serde_json::Value;

/// The tests' proxy in front of one `upstream` for every API: a 32K window, no model windows,
/// cache breakpoints and keys on, no events, no injected tools, 4 MiB bodies, a fixed tenant
/// secret. Each test overrides what it is about.
#[allow(dead_code)] // Each test binary uses its own helpers.
pub fn settings(upstream: &str) -> ProxySettings {
    ProxySettings {
        openai_upstream: upstream.to_owned(),
        anthropic_upstream: upstream.to_owned(),
        gemini_upstream: upstream.to_owned(),
        max_body_bytes: 4 * 1024 * 1024,
        observe: false,
        rewrite: RewriteSettings::trimming_at(32_000),
        summarizer: None,
        summarizer_cooldown: Duration::from_secs(300),
        tenant_secret: Some("test".into()),
        admin_token: None,
        timeouts: Timeouts::default(),
        limits: Default::default(),
        tokens: Default::default(),
        keepalive: Default::default(),
    }
}

/// `v` without any `cache_control` (clients and the proxy move Anthropic breakpoints from
/// request to request; the cached content is what matters).
#[allow(dead_code)] // Each test binary uses its own helpers.
pub fn without_cache_control(v: &Value) -> Value {
    ctxgc_proxy::rewrite::lineage::without_breakpoints(v)
}

/// `ctxgc serve` with `settings` and a memory store on a free loopback port: its URL and state.
#[allow(dead_code)] // Each test binary uses its own helpers.
pub async fn serve(settings: ProxySettings) -> (String, std::sync::Arc<ctxgc_proxy::AppState>) {
    let store = Box::new(ctxgc_core::store::MemoryStore::default());
    let state = ctxgc_proxy::AppState::new(settings, store).unwrap();
    (serve_state(state.clone()).await, state)
}

/// `ctxgc serve` of `state` on a free loopback port: its URL.
#[allow(dead_code)] // Each test binary uses its own helpers.
pub async fn serve_state(state: std::sync::Arc<ctxgc_proxy::AppState>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = format!("http://{}", listener.local_addr().unwrap());
    let router = ctxgc_proxy::router(state);
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    proxy
}

/// `ctxgc serve` of `state` as the command runs it (its routes and its ticker) on a free
/// loopback port: its URL.
#[allow(dead_code)] // Each test binary uses its own helpers.
pub async fn serve_on_loopback(state: std::sync::Arc<ctxgc_proxy::AppState>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(ctxgc_proxy::serve_on(listener, state));
    proxy
}
