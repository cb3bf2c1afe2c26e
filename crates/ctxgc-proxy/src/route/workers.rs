//! The rewrite workers: as many threads as rewrite slots, started with the first job, each
//! taking the next job off the queue ([`crate::rewrite::jobs`]) and running it with the server's
//! state: a request's pipeline ([`crate::route::prepare::answer`]) or a round of its agent tools
//! ([`crate::route::rounds::answer`]). A worker holds the state only while it runs a job; the
//! workers end when the state is dropped (its queue then closes).

use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex, Weak};

use crate::error::ProxyError;
use crate::rewrite::jobs::Job;
use crate::route::{prepare, rounds};
use crate::state::AppState;

/// Queues `job` for the workers, starting them the first time.
pub(crate) fn submit(s: &Arc<AppState>, job: Job) -> Result<(), ProxyError> {
    if let Some((queue, count)) = s.workers.take_queue() {
        start(Arc::downgrade(s), queue, count);
    }
    s.workers.submit(job)
}

/// Starts `count` workers on `queue`, inside the runtime that started them: a job may wait on
/// the runtime (the LLM summarizer's call, a Redis store) as a blocking task of it would.
fn start(state: Weak<AppState>, queue: Receiver<Job>, count: usize) {
    let queue = Arc::new(Mutex::new(queue));
    let runtime = tokio::runtime::Handle::try_current().ok();
    for n in 0..count {
        let (state, queue, runtime) = (state.clone(), queue.clone(), runtime.clone());
        let started = std::thread::Builder::new()
            .name(format!("ctxgc-rewrite-{n}"))
            .spawn(move || {
                let _entered = runtime.as_ref().map(tokio::runtime::Handle::enter);
                work(&state, &queue)
            });
        if let Err(e) = started {
            // Fewer workers take the same queue; with none, requests wait out their slot's
            // deadline and fail open.
            tracing::error!(error = %e, "cannot start a rewrite worker");
        }
    }
}

fn work(state: &Weak<AppState>, queue: &Mutex<Receiver<Job>>) {
    loop {
        // The lock is held while waiting: one idle worker waits on the queue, the others on
        // the lock.
        let job = match queue.lock() {
            Ok(queue) => queue.recv(),
            Err(_) => return,
        };
        let (Ok(job), Some(s)) = (job, state.upgrade()) else {
            return;
        };
        match job {
            Job::Prepare(job) => prepare::answer(&s, job),
            Job::Round(job) => rounds::answer(&s, job),
        }
    }
}

/// What a panic said, for the error that answers the job it broke.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}
