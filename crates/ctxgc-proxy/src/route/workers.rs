//! The rewrite workers: as many threads as rewrite slots, started with the server's routes,
//! each taking the next job off the queue ([`crate::rewrite::jobs`]) and running it with the
//! server's state: a request's pipeline ([`crate::route::prepare::answer`]) or a round of its
//! agent tools ([`crate::route::rounds::answer`]). A worker holds the state only while it runs a
//! job; the workers end when the state is dropped (its queue then closes).

use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex, Weak};

use crate::rewrite::jobs::{Job, Queued};
use crate::route::{prepare, rounds};
use crate::state::AppState;

/// Starts the workers of `s`, once.
pub(crate) fn start(s: &Arc<AppState>) {
    let Some((queue, count)) = s.workers.take_queue() else {
        return;
    };
    let queue = Arc::new(Mutex::new(queue));
    for n in 0..count {
        let (state, queue) = (Arc::downgrade(s), queue.clone());
        let started = std::thread::Builder::new()
            .name(format!("ctxgc-rewrite-{n}"))
            .spawn(move || work(&state, &queue));
        if let Err(e) = started {
            // Fewer workers take the same queue.
            tracing::error!(error = %e, "cannot start a rewrite worker");
        }
    }
}

fn work(state: &Weak<AppState>, queue: &Mutex<Receiver<Queued>>) {
    loop {
        // The lock is held while waiting: one idle worker waits on the queue, the others on
        // the lock.
        let queued = match queue.lock() {
            Ok(queue) => queue.recv(),
            Err(_) => return,
        };
        let (Ok((job, runtime)), Some(s)) = (queued, state.upgrade()) else {
            return;
        };
        let _entered = runtime.as_ref().map(tokio::runtime::Handle::enter);
        match job {
            Job::Prepare(job) => prepare::answer(&s, job),
            Job::Round(job) => rounds::answer(&s, job),
        }
    }
}
