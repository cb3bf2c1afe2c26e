//! Observe mode (`serve --observe`): every request goes upstream byte for byte, and beside it,
//! off the request path, the pipeline computes what ctxgc would have sent (trims, pointers,
//! events, as they would have run) and the session table records the prompt tokens both ways.
//! The request path only copies the request into a bounded queue; when the queue is full the
//! request is not observed, and that is counted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, Weak};

use axum::body::Bytes;
use ctxgc_core::store::SessionId;
use ctxgc_formats::ApiRequest;

use crate::pipeline;
use crate::state::AppState;

/// Requests waiting to be observed, at most.
const QUEUE: usize = 64;

/// One request to observe.
struct Job {
    request: ApiRequest,
    raw: Bytes,
    session: SessionId,
}

/// The queue and its worker.
pub(crate) struct Observer {
    queue: SyncSender<Job>,
    /// Taken by the worker when it starts.
    jobs: Mutex<Option<Receiver<Job>>>,
    queued: AtomicU64,
    skipped: AtomicU64,
    observed: AtomicU64,
    failed: AtomicU64,
}

/// What the observer did so far.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct ObserveTotals {
    /// Requests observed.
    pub observed: u64,
    /// Requests not observed because the queue was full.
    pub skipped: u64,
    /// Requests whose observation failed (the pipeline would have failed open).
    pub failed: u64,
    /// Requests waiting in the queue now.
    pub queued: u64,
}

impl Observer {
    pub(crate) fn new() -> Observer {
        let (queue, jobs) = std::sync::mpsc::sync_channel(QUEUE);
        Observer {
            queue,
            jobs: Mutex::new(Some(jobs)),
            queued: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            observed: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        }
    }

    /// Starts the worker, a thread of its own (the pipeline is blocking work); it ends when
    /// the server's state is dropped.
    pub(crate) fn start(&self, state: &Arc<AppState>) -> std::io::Result<()> {
        let Some(jobs) = self.jobs.lock().ok().and_then(|mut j| j.take()) else {
            return Ok(());
        };
        let state = Arc::downgrade(state);
        std::thread::Builder::new()
            .name("ctxgc-observe".into())
            .spawn(move || work(&state, &jobs))
            .map(|_| ())
    }

    /// Queues a copy of a request; a full queue skips it (counted).
    pub(crate) fn offer(&self, request: ApiRequest, raw: Bytes, session: SessionId) {
        match self.queue.try_send(Job {
            request,
            raw,
            session,
        }) {
            Ok(()) => {
                self.queued.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.skipped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub(crate) fn totals(&self) -> ObserveTotals {
        let observed = self.observed.load(Ordering::Relaxed);
        let failed = self.failed.load(Ordering::Relaxed);
        ObserveTotals {
            observed,
            skipped: self.skipped.load(Ordering::Relaxed),
            failed,
            queued: self
                .queued
                .load(Ordering::Relaxed)
                .saturating_sub(observed + failed),
        }
    }
}

fn work(state: &Weak<AppState>, jobs: &Receiver<Job>) {
    while let Ok(job) = jobs.recv() {
        let Some(state) = state.upgrade() else {
            return;
        };
        let Some(observer) = state.observer.as_ref() else {
            return;
        };
        match observe(&state, job) {
            Ok(()) => observer.observed.fetch_add(1, Ordering::Relaxed),
            Err(why) => {
                tracing::debug!(error = %why, "observation failed");
                observer.failed.fetch_add(1, Ordering::Relaxed)
            }
        };
    }
}

/// What ctxgc would have sent for one request, and the prompt tokens both ways.
fn observe(state: &AppState, job: Job) -> Result<(), crate::error::ProxyError> {
    let Job {
        mut request,
        raw,
        session,
    } = job;
    let sent = pipeline::prompt_tokens(state, &request);
    let prepared = pipeline::prepare(state, &mut request, &raw, &session, false)?;
    let would = match prepared.out.body {
        Some(body) => pipeline::prompt_tokens(state, &ApiRequest::parse(request.api, &body)?),
        None => sent,
    };
    state.sessions.record_observed(&session, sent, would);
    Ok(())
}
