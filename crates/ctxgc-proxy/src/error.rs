//! Why the proxy could not do its work on a request (it then forwards the client's request
//! unchanged, logs why and counts it), or could not start.

use ctxgc_core::store::StoreError;

/// A proxy failure.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The store failed or timed out.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// What the proxy would forward fails the integrity check.
    #[error("the rewritten prompt fails the integrity check: {0}")]
    Integrity(#[from] ctxgc_core::engine::integrity::IntegrityError),
    /// A session's state kept changing under concurrent requests.
    #[error("the session's {what} changed under {attempts} concurrent requests in a row")]
    Contended {
        /// Which state.
        what: &'static str,
        /// How many times it was tried.
        attempts: usize,
    },
    /// A stored state could not be read back.
    #[error("the {what} of session {session} is unreadable: {source}")]
    Corrupt {
        /// Which state.
        what: &'static str,
        /// The session.
        session: String,
        /// Why.
        source: serde_json::Error,
    },
    /// An event's boundary falls inside a wire message (the engine cuts only between turns).
    #[error("the event's boundary at message {at} falls inside a wire message")]
    Boundary {
        /// The neutral message index.
        at: usize,
    },
    /// A state could not be serialised.
    #[error("cannot serialise the {what}: {source}")]
    Serialise {
        /// Which state.
        what: &'static str,
        /// Why.
        source: serde_json::Error,
    },
    /// A body the proxy built or was sent could not be read as its API's.
    #[error("{0}")]
    Body(#[from] ctxgc_formats::FormatError),
    /// An exchange of the agent tools cannot be recorded.
    #[error("{0}")]
    Agent(&'static str),
    /// A call the proxy was asked to run is not one of its tools.
    #[error("{0} is not a ctxgc tool")]
    NotOurTool(String),
    /// The blocking task running the request's work failed (a panic in ctxgc).
    #[error("the rewrite task failed: {0}")]
    Task(String),
    /// Every rewrite slot stayed taken past the deadline.
    #[error("no rewrite slot free within {} ms", waited.as_millis())]
    Busy {
        /// How long the request waited.
        waited: std::time::Duration,
    },
    /// The rewrite took longer than its deadline.
    #[error("the rewrite took longer than its deadline of {} ms", after.as_millis())]
    Overdue {
        /// The deadline.
        after: std::time::Duration,
    },
    /// The request's body, parsed, would take more than the memory left for requests in
    /// flight.
    #[error("{needed} bytes of memory needed, {left} left of the in-flight budget")]
    Memory {
        /// What the request would take.
        needed: usize,
        /// What is left.
        left: usize,
    },
    /// The store failed recently and is given time to recover (the circuit breaker is open).
    #[error("the store is skipped for {} ms after it failed: {why}", left.as_millis())]
    StoreResting {
        /// How long until it is tried again.
        left: std::time::Duration,
        /// Its last failure.
        why: String,
    },
    /// The server could not start.
    #[error("{0}")]
    Setup(String),
}

impl ProxyError {
    /// The kind of failure, as metrics label it (`crate::observe::metrics::CAUSES`).
    pub(crate) fn cause(&self) -> &'static str {
        match self {
            ProxyError::Store(_) => "store",
            ProxyError::Integrity(_) => "integrity",
            ProxyError::Contended { .. } => "contended",
            ProxyError::Corrupt { .. } => "corrupt_state",
            ProxyError::Boundary { .. } => "boundary",
            ProxyError::Serialise { .. } => "serialise",
            ProxyError::Body(_) => "body",
            ProxyError::Agent(_) | ProxyError::NotOurTool(_) => "agent_tools",
            ProxyError::Task(_) => "panic",
            ProxyError::Busy { .. } => "busy",
            ProxyError::Overdue { .. } => "deadline",
            ProxyError::Memory { .. } => "memory",
            ProxyError::StoreResting { .. } => "store_resting",
            ProxyError::Setup(_) => "other",
        }
    }
}
