//! What ctxgc's tests share: one fake upstream that records every request it receives and
//! answers with the test's own responder (real HTTP over a loopback socket), and a throwaway
//! `redis-server`, and synthetic agent sessions for benchmarks.

// Test support: a failed unwrap is a failed test.
#![deny(missing_docs)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::http::HeaderMap;
use axum::response::Response;

pub mod logs;
pub mod redis_server;
pub mod sessions;

/// One request the upstream received.
#[derive(Debug, Clone)]
pub struct Received {
    /// Its path (no query).
    pub path: String,
    /// Its query, when it had one.
    pub query: Option<String>,
    /// Its headers.
    pub headers: HeaderMap,
    /// Its body, as received.
    pub body: Bytes,
}

/// What the upstream received, in order.
#[derive(Clone, Default)]
pub struct Log(Arc<Mutex<Vec<Received>>>);

impl Log {
    /// Every request so far.
    pub fn all(&self) -> Vec<Received> {
        self.0.lock().unwrap().clone()
    }

    /// The latest request.
    pub fn last(&self) -> Option<Received> {
        self.0.lock().unwrap().last().cloned()
    }

    /// How many requests so far.
    pub fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    /// Whether none came yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a request to a path starting with `prefix` came.
    pub fn any_path(&self, prefix: &str) -> bool {
        self.0
            .lock()
            .unwrap()
            .iter()
            .any(|r| r.path.starts_with(prefix))
    }
}

/// A responder's answer, produced asynchronously (it may sleep, stream or fail).
pub type Reply = Pin<Box<dyn Future<Output = Response> + Send>>;

/// A running fake upstream.
pub struct FakeUpstream {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// What it received.
    pub log: Log,
}

impl FakeUpstream {
    /// Starts an upstream on a free loopback port that records each request (before answering)
    /// and answers with `respond(request, log)`.
    pub async fn start(
        respond: impl Fn(Received, Log) -> Reply + Send + Sync + 'static,
    ) -> FakeUpstream {
        let log = Log::default();
        let respond = Arc::new(respond);
        let recorder = log.clone();
        let app = Router::new().fallback(move |req: axum::extract::Request| {
            let (respond, log) = (respond.clone(), recorder.clone());
            async move {
                let path = req.uri().path().to_owned();
                let query = req.uri().query().map(str::to_owned);
                let headers = req.headers().clone();
                let body = axum::body::to_bytes(req.into_body(), usize::MAX)
                    .await
                    .unwrap();
                let received = Received {
                    path,
                    query,
                    headers,
                    body,
                };
                log.0.lock().unwrap().push(received.clone());
                respond(received, log).await
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        FakeUpstream { url, log }
    }
}
