//! Observe mode's queue (`serve --observe`): every request goes upstream byte for byte, and a
//! copy waits here, in a bounded queue, for the worker (`shadow`) that computes what ctxgc
//! would have sent. The request path only copies the request into the queue; when the queue is
//! full the request is not observed, and that is counted.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};

use axum::body::Bytes;
use ctxgc_core::store::SessionId;
use ctxgc_formats::ApiRequest;

/// Requests waiting to be observed, at most.
const QUEUE: usize = 64;

/// One request to observe.
pub(crate) struct Job {
    pub(crate) request: ApiRequest,
    pub(crate) raw: Bytes,
    pub(crate) session: SessionId,
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

    /// The queue's receiving end, once: the worker that takes it runs the observations.
    pub(crate) fn take_jobs(&self) -> Option<Receiver<Job>> {
        self.jobs.lock().ok()?.take()
    }

    /// Queues a copy of a request; a full queue skips it (counted).
    pub(crate) fn offer(&self, job: Job) {
        match self.queue.try_send(job) {
            Ok(()) => {
                self.queued.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.skipped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// One observation ended, done or failed.
    pub(crate) fn finished(&self, done: bool) {
        let counter = if done { &self.observed } else { &self.failed };
        counter.fetch_add(1, Ordering::Relaxed);
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
