//! Observe mode's worker: a thread of its own (the pipeline is blocking work) that takes the
//! copies the observer queued and runs the pipeline on each, as it would have run on the
//! request, then records in the session table the prompt tokens both ways. It starts with the
//! first observed request and ends when the server's state is dropped.

use std::sync::mpsc::Receiver;
use std::sync::{Arc, Weak};

use axum::body::Bytes;
use ctxgc_core::store::SessionId;
use ctxgc_formats::ApiRequest;

use crate::error::ProxyError;
use crate::observe::queue::Job;
use crate::route::prepare as pipeline;
use crate::state::AppState;

/// Queues a copy of a request for observation, starting the worker first if it is not running.
pub(crate) fn observe(s: &Arc<AppState>, request: ApiRequest, raw: Bytes, session: SessionId) {
    let Some(observer) = &s.observer else {
        return;
    };
    if let Some(jobs) = observer.take_jobs() {
        let state = Arc::downgrade(s);
        let started = std::thread::Builder::new()
            .name("ctxgc-observe".into())
            .spawn(move || work(&state, &jobs));
        if let Err(e) = started {
            tracing::error!(error = %e, "cannot start the observer's thread: nothing is observed");
        }
    }
    observer.offer(Job {
        request,
        raw,
        session,
    });
}

fn work(state: &Weak<AppState>, jobs: &Receiver<Job>) {
    while let Ok(job) = jobs.recv() {
        let Some(state) = state.upgrade() else {
            return;
        };
        let Some(observer) = state.observer.as_ref() else {
            return;
        };
        let done = observe_one(&state, job);
        if let Err(why) = &done {
            tracing::debug!(error = %why, "observation failed");
        }
        observer.finished(done.is_ok());
    }
}

/// What ctxgc would have sent for one request, and the prompt tokens both ways.
fn observe_one(state: &AppState, job: Job) -> Result<(), ProxyError> {
    let Job {
        mut request,
        raw,
        session,
    } = job;
    let sent = pipeline::prompt_tokens(state, &request);
    let prepared = pipeline::prepare(
        state,
        &mut request,
        crate::rewrite::request::ClientBytes {
            raw: &raw,
            item_spans: None,
        },
        &session,
        pipeline::Purpose::Request,
        pipeline::Caller::default(),
    )?;
    let would = match prepared.out.body {
        Some(body) => pipeline::prompt_tokens(state, &ApiRequest::parse(request.api, &body)?),
        None => sent,
    };
    state.sessions.record_observed(&session, sent, would);
    Ok(())
}
