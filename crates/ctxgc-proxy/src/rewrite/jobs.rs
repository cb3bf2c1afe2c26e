//! A request's blocking work as data, queued for the rewrite workers: its pipeline
//! ([`PrepareJob`]) and a round of its agent tools' calls ([`RoundJob`]). As many workers as
//! rewrite slots take the jobs off one queue, so the work a burst of requests starts is bounded
//! like the slots; what a job runs is the route's (`crate::route`), whose server starts the
//! workers; each job is answered through its `done` channel.

use std::sync::Mutex;
use std::sync::mpsc::{Receiver, Sender};

use axum::body::Bytes;
use ctxgc_core::store::SessionId;
use ctxgc_formats::{Api, ApiRequest};
use serde_json::Value;

use crate::admission::gate::Slot;
use crate::agent::tools::{Call, ClientEnd};
use crate::error::ProxyError;

/// What the pipeline runs for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// A request to forward.
    Request,
    /// A token count: it sees the lineage in force but runs and records no event.
    Count,
    /// A session idle past its cache's lifetime: its latest request again, the cache taken as
    /// cold, so that the event the next request would carry is ready when it comes. Nothing
    /// about the session's requests (pauses, estimates, cache fields) is recorded.
    Idle,
}

/// What a request's caller allows beside what the model sees.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Caller {
    /// It gets keep-alives for the request's session ([`crate::lifetime::keepalive::consents`]), so what
    /// a keep-alive would give up is weighed.
    pub(crate) kept_alive: bool,
    /// Which of ctxgc's cache fields its upstream refused lately ([`crate::lifetime::refusals`]): ctxgc
    /// sets none of them.
    pub(crate) refused: crate::lifetime::refusals::Refused,
    /// It asked for the model's long context (Anthropic's `context-1m` beta): the window is
    /// 1M tokens whatever the table says of the model.
    pub(crate) long_context: bool,
}

/// A request ready to forward.
pub(crate) struct Prepared {
    /// The rewrite: the new body, if any, and the originals it hides.
    pub(crate) out: crate::rewrite::request::Rewritten,
    /// The agent tools were injected: where the client's own history ended.
    pub(crate) injected: Option<crate::agent::tools::ClientEnd>,
    /// The engine's event on this request, if one ran.
    pub(crate) event: Option<&'static str>,
    /// Originals newly written to the store: id, size in bytes, the size of what entered
    /// instead when a trim hid it (an event's abstracts are not counted per original), and why
    /// an event hid it.
    pub(crate) fresh: Vec<crate::observe::sessions::FreshOriginal>,
    /// The cache fields ctxgc set (a TTL, a retention), with the body without them.
    pub(crate) cache_edit: Option<crate::lifetime::fields::CacheEdit>,
    /// What a keep-alive after this request would give up: the share of the prompt the event
    /// an expiry makes free would leave (`None`: not weighed, taken as 1).
    pub(crate) kept_if_cold: Option<f64>,
}

/// A request's pipeline to run.
pub(crate) struct PrepareJob {
    /// The request as parsed, rewritten in place.
    pub(crate) request: ApiRequest,
    /// The client's bytes.
    pub(crate) raw: Bytes,
    /// Where its conversation items lie in them, when its parse found that.
    pub(crate) item_spans: Option<std::sync::Arc<[(usize, usize)]>>,
    /// Its session.
    pub(crate) session: SessionId,
    /// What the pipeline runs for.
    pub(crate) purpose: Purpose,
    /// What its caller allows.
    pub(crate) caller: Caller,
    /// The rewrite slot the request holds: freed once the job has answered and dropped the
    /// request (at 100K tokens, tens of thousands of allocations the request need not wait for).
    pub(crate) slot: Slot,
    /// The request's span, entered while the job runs.
    pub(crate) span: tracing::Span,
    /// When the request asked for a rewrite slot: its wait for a worker is a stage of its own.
    pub(crate) queued_at: std::time::Instant,
    /// Where the answer goes.
    pub(crate) done: tokio::sync::oneshot::Sender<Result<Prepared, ProxyError>>,
}

/// A round of the agent tools: the model's `calls` (and the `assistant` items that made them)
/// to run and record in the session's agent state; with `follow_up`, the next request's body
/// (asking for an answer without tool calls when it is the `last` round allowed).
pub(crate) struct RoundJob {
    /// The request's API.
    pub(crate) api: Api,
    /// The client's bytes, and where its own history ended.
    pub(crate) client: (Bytes, ClientEnd),
    /// Its session.
    pub(crate) session: SessionId,
    /// The model's calls, internal or not.
    pub(crate) calls: Vec<Call>,
    /// The assistant items that made them.
    pub(crate) assistant: Vec<Value>,
    /// Whether the upstream is called again after this round.
    pub(crate) follow_up: bool,
    /// Whether that next round is the last one allowed.
    pub(crate) last: bool,
    /// Where the answer goes.
    pub(crate) done: tokio::sync::oneshot::Sender<Result<Option<Bytes>, ProxyError>>,
}

/// Work for the rewrite workers.
pub(crate) enum Job {
    Prepare(PrepareJob),
    Round(RoundJob),
}

/// A job as queued: with the runtime it was submitted from, which the worker enters while it
/// runs it (a job may wait on the runtime: the LLM summarizer's call, a Redis store).
pub(crate) type Queued = (Job, Option<tokio::runtime::Handle>);

/// The queue of the rewrite workers.
pub(crate) struct Workers {
    jobs: Sender<Queued>,
    /// Taken once, by whoever starts the workers.
    queue: Mutex<Option<Receiver<Queued>>>,
    count: usize,
}

impl Workers {
    /// A queue for `count` workers, none started yet.
    pub(crate) fn new(count: usize) -> Workers {
        let (jobs, queue) = std::sync::mpsc::channel();
        Workers {
            jobs,
            queue: Mutex::new(Some(queue)),
            count,
        }
    }

    /// The queue and how many workers should take from it, the first time only.
    pub(crate) fn take_queue(&self) -> Option<(Receiver<Queued>, usize)> {
        Some((self.queue.lock().ok()?.take()?, self.count))
    }

    /// Queues `job`. At most one job per rewrite slot, plus the agent tools' rounds, waits here:
    /// the requests' slots bound the queue.
    pub(crate) fn submit(&self, job: Job) -> Result<(), ProxyError> {
        let runtime = tokio::runtime::Handle::try_current().ok();
        self.jobs
            .send((job, runtime))
            .map_err(|_| ProxyError::Task("the rewrite workers are gone".to_owned()))
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
