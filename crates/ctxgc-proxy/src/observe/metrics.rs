//! The proxy's counters, gauges and latency histograms: what happened to requests, what was
//! saved, what failed and why. One place counts; `/ctxgc/stats` reads totals and `/metrics`
//! renders everything in Prometheus' text format. No label names a tenant or a session (their
//! number is unbounded): requests are labelled by API and outcome, fail-opens by cause, events
//! by kind.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ctxgc_formats::Api;

/// How a request left the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Forwarded {
    /// With a rewritten body.
    Rewritten,
    /// Byte for byte: nothing to change.
    Unchanged,
    /// Byte for byte because ctxgc failed internally.
    FailOpen,
}

const OUTCOMES: [(Forwarded, &str); 3] = [
    (Forwarded::Rewritten, "rewritten"),
    (Forwarded::Unchanged, "unchanged"),
    (Forwarded::FailOpen, "fail_open"),
];

/// Why the proxy failed open (`ProxyError::cause`), as labels.
pub(crate) const CAUSES: [&str; 16] = [
    "store",
    "integrity",
    "contended",
    "corrupt_state",
    "boundary",
    "serialise",
    "body",
    "agent_tools",
    "panic",
    "busy",
    // A body the providers accept that ctxgc's parser does not (a lone surrogate escape).
    "unparsed",
    // The rewrite passed its deadline.
    "deadline",
    // The in-flight memory budget was spent: the request was streamed upstream unbuffered.
    "memory",
    // The store's circuit breaker was open (it failed within the last seconds).
    "store_resting",
    // The upstream refused a cache field ctxgc set (TTL, retention): resent without it.
    "cache_field",
    "other",
];

/// The cache fields ctxgc sets, as labels.
const CACHE_FIELDS: [&str; 3] = ["ttl_1h", "retention_24h", "breakpoint"];

/// What became of a keep-alive, as labels: sent and answered, or failed (refused, unreachable,
/// past its deadline; the session's keep-alives then end).
const KEEPALIVE_OUTCOMES: [&str; 2] = ["sent", "failed"];

/// Event kinds, as labels.
const EVENT_KINDS: [&str; 2] = ["prune", "compaction"];

/// The upper bounds of a histogram's buckets, in seconds: a histogram's type says which.
trait Bounds: Default {
    const BOUNDS: [f64; 12];
}

/// Latencies of the upstream and the store.
#[derive(Default)]
struct Coarse;

impl Bounds for Coarse {
    const BOUNDS: [f64; 12] = [
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0,
    ];
}

/// The pipeline's stages: a stage takes tens of microseconds to a few milliseconds, which the
/// coarse buckets would put in one.
#[derive(Default)]
struct Fine;

impl Bounds for Fine {
    const BOUNDS: [f64; 12] = [
        0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 5.0,
    ];
}

/// The stages of a request's pipeline on the request path, in order, as labels
/// (`ctxgc_stage_seconds{stage}`): where the time a proxy adds goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// The body parsed (resumed after the session's previous body where it continues one).
    Parse,
    /// Waiting for a rewrite worker.
    Queue,
    /// The agent's tools and state injected.
    AgentTools,
    /// Insertion: the lineage in force read, repeats pointed to and outputs trimmed, the body
    /// spliced.
    Rewrite,
    /// The engine's lineage: the prompt counted, an event planned and run when due.
    Events,
    /// The originals committed to the store before anything naming them is forwarded.
    Commit,
}

const STAGES: [(Stage, &str); 6] = [
    (Stage::Parse, "parse"),
    (Stage::Queue, "queue"),
    (Stage::AgentTools, "agent_tools"),
    (Stage::Rewrite, "rewrite"),
    (Stage::Events, "events"),
    (Stage::Commit, "commit"),
];

/// A latency histogram with the buckets of `B` (cumulative on rendering).
#[derive(Default)]
struct Histogram<B: Bounds> {
    buckets: [AtomicU64; 12],
    count: AtomicU64,
    sum_micros: AtomicU64,
    bounds: std::marker::PhantomData<B>,
}

impl<B: Bounds> Histogram<B> {
    fn observe(&self, took: Duration) {
        let secs = took.as_secs_f64();
        if let Some(k) = B::BOUNDS.iter().position(|&b| secs <= b) {
            self.buckets[k].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        self.render_series(out, name, "");
    }

    /// The series of one histogram of a family, whose labels (`label="value",`, or none) come
    /// before `le`.
    fn render_series(&self, out: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0;
        for (bound, bucket) in B::BOUNDS.iter().zip(&self.buckets) {
            cumulative += bucket.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{{labels}le=\"{bound}\"}} {cumulative}");
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels}le=\"+Inf\"}} {count}");
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let plain = labels.trim_end_matches(',');
        let labels = if plain.is_empty() {
            String::new()
        } else {
            format!("{{{plain}}}")
        };
        let _ = writeln!(
            out,
            "{name}_sum{labels} {sum}\n{name}_count{labels} {count}"
        );
    }
}

/// Counters, shared by every request.
#[derive(Default)]
pub(crate) struct Metrics {
    /// Requests read and parsed on the API routes.
    received: AtomicU64,
    /// By API and outcome.
    requests: [[AtomicU64; OUTCOMES.len()]; Api::ALL.len()],
    fail_open_by_cause: [AtomicU64; CAUSES.len()],
    /// ctxgc failed after forwarding (the agent tools' rounds).
    failed_after_forwarding: AtomicU64,
    /// The store was found to have lost what it held.
    store_losses: AtomicU64,
    bad_requests: AtomicU64,
    bytes_saved: AtomicU64,
    originals_stored: AtomicU64,
    events: [AtomicU64; EVENT_KINDS.len()],
    event_tokens_reclaimed: AtomicU64,
    cache_fields: [AtomicU64; CACHE_FIELDS.len()],
    keepalives: [AtomicU64; KEEPALIVE_OUTCOMES.len()],
    keepalive_cache_read_tokens: AtomicU64,
    agent_tool_calls: AtomicU64,
    summarizer_failures: AtomicU64,
    /// Events run because a prompt did not fit the window: made to fit, or not even then.
    window_fits: [AtomicU64; 2],
    upstream: Histogram<Coarse>,
    store: Histogram<Coarse>,
    stages: [Histogram<Fine>; STAGES.len()],
}

/// The counters at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Totals {
    pub(crate) requests: u64,
    pub(crate) rewritten: u64,
    pub(crate) passed_through: u64,
    pub(crate) fail_open: u64,
    pub(crate) bad_requests: u64,
    pub(crate) bytes_saved: u64,
    pub(crate) originals_stored: u64,
    pub(crate) events: u64,
    pub(crate) agent_tool_calls: u64,
    pub(crate) summarizer_failures: u64,
    pub(crate) keepalives: u64,
    pub(crate) keepalives_failed: u64,
}

fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

fn get(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

/// Gauges the state reads when `/metrics` is rendered.
pub(crate) struct Gauges {
    /// Requests being rewritten now.
    pub(crate) rewrites_in_flight: usize,
    /// Rewrite slots in all.
    pub(crate) rewrite_slots: usize,
    /// Sessions in the table.
    pub(crate) sessions: usize,
    /// Sessions waiting for a keep-alive.
    pub(crate) keepalive_sessions: usize,
    /// Memory reserved by the requests in flight (bodies and their parse).
    pub(crate) inflight_bytes: usize,
    /// What they may reserve at most.
    pub(crate) inflight_budget_bytes: usize,
    /// How full a bounded store is.
    pub(crate) store: Option<ctxgc_core::store::StoreUsage>,
    /// Whether the store's calls are refused now (its circuit breaker is open).
    pub(crate) store_resting: bool,
}

impl Metrics {
    /// Requests received on the API routes so far.
    pub(crate) fn received(&self) -> u64 {
        get(&self.received)
    }

    /// The store was found to have lost what it held.
    pub(crate) fn store_lost(&self) {
        add(&self.store_losses, 1);
    }

    /// A request on an API route was read (before it is parsed).
    pub(crate) fn request(&self) {
        add(&self.received, 1);
    }

    /// A request was refused as malformed, too large or too slow.
    pub(crate) fn bad_request(&self) {
        add(&self.bad_requests, 1);
    }

    /// A request of `api` was forwarded, having had `bytes_saved` trimmed and `stored`
    /// originals written; a fail-open names its cause ([`CAUSES`]).
    pub(crate) fn forwarded(
        &self,
        api: Api,
        how: Forwarded,
        bytes_saved: usize,
        stored: u64,
        cause: Option<&str>,
    ) {
        add(&self.bytes_saved, bytes_saved as u64);
        add(&self.originals_stored, stored);
        let a = Api::ALL.iter().position(|x| *x == api).unwrap_or(0);
        let o = OUTCOMES.iter().position(|(x, _)| *x == how).unwrap_or(0);
        add(&self.requests[a][o], 1);
        if let Some(c) = cause.and_then(|c| CAUSES.iter().position(|x| *x == c)) {
            add(&self.fail_open_by_cause[c], 1);
        }
    }

    /// ctxgc set a cache field on a request (`CACHE_FIELDS`).
    pub(crate) fn cache_field(&self, what: &str) {
        if let Some(k) = CACHE_FIELDS.iter().position(|x| *x == what) {
            add(&self.cache_fields[k], 1);
        }
    }

    /// ctxgc failed after the request was forwarded (the agent tools' rounds).
    pub(crate) fn failed_open(&self) {
        add(&self.failed_after_forwarding, 1);
        if let Some(c) = CAUSES.iter().position(|x| *x == "agent_tools") {
            add(&self.fail_open_by_cause[c], 1);
        }
    }

    /// An engine event of `kind` ran, reclaiming about `tokens`.
    pub(crate) fn event(&self, kind: &str, tokens: usize) {
        if let Some(k) = EVENT_KINDS.iter().position(|x| *x == kind) {
            add(&self.events[k], 1);
        }
        add(&self.event_tokens_reclaimed, tokens as u64);
    }

    /// A keep-alive ended as `outcome` (`KEEPALIVE_OUTCOMES`), reading `cache_read` tokens.
    pub(crate) fn keepalive(&self, outcome: &str, cache_read: u64) {
        if let Some(k) = KEEPALIVE_OUTCOMES.iter().position(|x| *x == outcome) {
            add(&self.keepalives[k], 1);
        }
        add(&self.keepalive_cache_read_tokens, cache_read);
    }

    /// The proxy ran `n` of its agent tools' calls.
    pub(crate) fn agent_tool_calls(&self, n: u64) {
        add(&self.agent_tool_calls, n);
    }

    /// The LLM summarizer failed and the extractive one stood in.
    pub(crate) fn summarizer_failure(&self) {
        add(&self.summarizer_failures, 1);
    }

    /// A prompt past the window had an event run to make it fit: `fits`, whether it then did
    /// (when even the protected part and the newest turn did not, it went out too long).
    pub(crate) fn window_fit(&self, fits: bool) {
        add(&self.window_fits[usize::from(!fits)], 1);
    }

    /// An upstream answered its headers after `took`.
    pub(crate) fn upstream_latency(&self, took: Duration) {
        self.upstream.observe(took);
    }

    /// A store operation took `took`.
    pub(crate) fn store_latency(&self, took: Duration) {
        self.store.observe(took);
    }

    /// A request's `stage` took `took`.
    pub(crate) fn stage(&self, stage: Stage, took: Duration) {
        if let Some(k) = STAGES.iter().position(|(s, _)| *s == stage) {
            self.stages[k].observe(took);
        }
    }

    /// Runs `work` as a request's `stage`, timed.
    pub(crate) fn timed<T>(&self, stage: Stage, work: impl FnOnce() -> T) -> T {
        let started = std::time::Instant::now();
        let done = work();
        self.stage(stage, started.elapsed());
        done
    }

    /// The counters now.
    pub(crate) fn totals(&self) -> Totals {
        let by_outcome = |o: usize| self.requests.iter().map(|a| get(&a[o])).sum::<u64>();
        let (rewritten, passed_through, fail_open) = (by_outcome(0), by_outcome(1), by_outcome(2));
        Totals {
            requests: get(&self.received),
            rewritten,
            passed_through,
            fail_open: fail_open + get(&self.failed_after_forwarding),
            bad_requests: get(&self.bad_requests),
            bytes_saved: get(&self.bytes_saved),
            originals_stored: get(&self.originals_stored),
            events: self.events.iter().map(get).sum(),
            agent_tool_calls: get(&self.agent_tool_calls),
            summarizer_failures: get(&self.summarizer_failures),
            keepalives: get(&self.keepalives[0]),
            keepalives_failed: get(&self.keepalives[1]),
        }
    }

    /// Everything in Prometheus' text exposition format.
    pub(crate) fn render(&self, gauges: &Gauges, bytes_per_token: f64) -> String {
        let mut out = String::new();
        let mut family = |name: &str, kind: &str, help: &str, samples: &[(String, u64)]| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (labels, value) in samples {
                let _ = writeln!(out, "{name}{labels} {value}");
            }
        };
        let mut requests = Vec::new();
        for (a, api) in Api::ALL.iter().enumerate() {
            for (o, (_, outcome)) in OUTCOMES.iter().enumerate() {
                requests.push((
                    format!("{{api=\"{}\",outcome=\"{outcome}\"}}", api.name()),
                    get(&self.requests[a][o]),
                ));
            }
        }
        family(
            "ctxgc_requests_total",
            "counter",
            "Requests on the API routes, by API and by how they were forwarded.",
            &requests,
        );
        let causes: Vec<(String, u64)> = CAUSES
            .iter()
            .zip(&self.fail_open_by_cause)
            .map(|(c, n)| (format!("{{cause=\"{c}\"}}"), get(n)))
            .collect();
        family(
            "ctxgc_fail_open_total",
            "counter",
            "Internal failures after which the client's request went upstream unchanged, by cause.",
            &causes,
        );
        family(
            "ctxgc_bad_requests_total",
            "counter",
            "Requests refused as malformed, too large or too slow.",
            &[(String::new(), get(&self.bad_requests))],
        );
        let bytes = get(&self.bytes_saved);
        family(
            "ctxgc_trimmed_bytes_total",
            "counter",
            "Bytes of tool output trimmed away at insertion.",
            &[(String::new(), bytes)],
        );
        family(
            "ctxgc_trimmed_tokens_total",
            "counter",
            "Tokens of tool output trimmed away at insertion, estimated from the bytes ([trim] bytes_per_token).",
            &[(
                String::new(),
                (bytes as f64 / bytes_per_token.max(1.0)) as u64,
            )],
        );
        let events: Vec<(String, u64)> = EVENT_KINDS
            .iter()
            .zip(&self.events)
            .map(|(k, n)| (format!("{{kind=\"{k}\"}}"), get(n)))
            .collect();
        family(
            "ctxgc_events_total",
            "counter",
            "Engine events run across requests, by kind.",
            &events,
        );
        let fields: Vec<(String, u64)> = CACHE_FIELDS
            .iter()
            .zip(&self.cache_fields)
            .map(|(k, n)| (format!("{{field=\"{k}\"}}"), get(n)))
            .collect();
        family(
            "ctxgc_cache_fields_set_total",
            "counter",
            "Requests on which ctxgc set a cache-lifetime field ([cache] ttl, retention), by field.",
            &fields,
        );
        let keepalives: Vec<(String, u64)> = KEEPALIVE_OUTCOMES
            .iter()
            .zip(&self.keepalives)
            .map(|(k, n)| (format!("{{outcome=\"{k}\"}}"), get(n)))
            .collect();
        family(
            "ctxgc_keepalives_total",
            "counter",
            "Keep-alive requests ctxgc sent on idle sessions' cached prefixes ([cache] keepalive), by outcome.",
            &keepalives,
        );
        family(
            "ctxgc_keepalive_cache_read_tokens_total",
            "counter",
            "Cache reads the upstream reported for keep-alives (billed at the read price).",
            &[(String::new(), get(&self.keepalive_cache_read_tokens))],
        );
        family(
            "ctxgc_keepalive_sessions",
            "gauge",
            "Sessions waiting for a keep-alive.",
            &[(String::new(), gauges.keepalive_sessions as u64)],
        );
        family(
            "ctxgc_event_reclaimed_tokens_total",
            "counter",
            "Prompt tokens the events reclaimed (ctxgc's counts).",
            &[(String::new(), get(&self.event_tokens_reclaimed))],
        );
        family(
            "ctxgc_originals_stored_total",
            "counter",
            "Originals written to the store.",
            &[(String::new(), get(&self.originals_stored))],
        );
        family(
            "ctxgc_agent_tool_calls_total",
            "counter",
            "Calls to trim_tool_result and recall_tool_result run by the proxy.",
            &[(String::new(), get(&self.agent_tool_calls))],
        );
        family(
            "ctxgc_summarizer_failures_total",
            "counter",
            "Compactions whose LLM summary failed and were summarised extractively.",
            &[(String::new(), get(&self.summarizer_failures))],
        );
        family(
            "ctxgc_window_fits_total",
            "counter",
            "Prompts past the window (less the room for the answer) that an event cut to fit, by whether they then fit.",
            &[
                ("{outcome=\"fits\"}".into(), get(&self.window_fits[0])),
                ("{outcome=\"still_past\"}".into(), get(&self.window_fits[1])),
            ],
        );
        family(
            "ctxgc_rewrites_in_flight",
            "gauge",
            "Requests being rewritten now (the rewrite queue's depth).",
            &[(String::new(), gauges.rewrites_in_flight as u64)],
        );
        family(
            "ctxgc_rewrite_slots",
            "gauge",
            "Requests that may be rewritten at once.",
            &[(String::new(), gauges.rewrite_slots as u64)],
        );
        family(
            "ctxgc_sessions",
            "gauge",
            "Sessions in the usage table.",
            &[(String::new(), gauges.sessions as u64)],
        );
        family(
            "ctxgc_inflight_bytes",
            "gauge",
            "Memory reserved by the requests in flight for their bodies and parse.",
            &[(String::new(), gauges.inflight_bytes as u64)],
        );
        if let Some(usage) = gauges.store {
            family(
                "ctxgc_store_bytes",
                "gauge",
                "Bytes of originals the store holds (a bounded store).",
                &[(String::new(), usage.bytes)],
            );
            family(
                "ctxgc_store_max_bytes",
                "gauge",
                "The store's bound ([store] max_mb).",
                &[(String::new(), usage.max_bytes)],
            );
            family(
                "ctxgc_store_evicted_total",
                "counter",
                "Originals evicted to keep the store within its bound, those touched longest ago first.",
                &[(String::new(), usage.evicted)],
            );
        }
        family(
            "ctxgc_store_resting",
            "gauge",
            "1 while the store's calls fail open at once after a failure (circuit breaker open).",
            &[(String::new(), u64::from(gauges.store_resting))],
        );
        family(
            "ctxgc_store_losses_total",
            "counter",
            "Times the store was found to have lost what it held (restarted without persistence).",
            &[(String::new(), get(&self.store_losses))],
        );
        family(
            "ctxgc_inflight_budget_bytes",
            "gauge",
            "Memory the requests in flight may reserve; past it they stream upstream unchanged.",
            &[(String::new(), gauges.inflight_budget_bytes as u64)],
        );
        self.upstream.render(
            &mut out,
            "ctxgc_upstream_seconds",
            "Time from sending a request upstream to its response headers.",
        );
        self.store.render(
            &mut out,
            "ctxgc_store_seconds",
            "Time of one store operation on the request path.",
        );
        let name = "ctxgc_stage_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Time of each stage of a request's pipeline before it goes upstream: \
             parse, queue (for a rewrite worker), agent_tools, rewrite (insertion), events (the \
             lineage), commit (originals to the store).\n# TYPE {name} histogram"
        );
        for ((_, label), histogram) in STAGES.iter().zip(&self.stages) {
            histogram.render_series(&mut out, name, &format!("stage=\"{label}\","));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_and_counts_add_up() {
        let m = Metrics::default();
        m.upstream_latency(Duration::from_micros(500));
        m.upstream_latency(Duration::from_millis(20));
        m.upstream_latency(Duration::from_secs(100));
        m.forwarded(Api::Gemini, Forwarded::FailOpen, 0, 0, Some("store"));
        m.forwarded(Api::Messages, Forwarded::Rewritten, 4_000, 1, None);
        m.stage(Stage::Rewrite, Duration::from_micros(300));
        m.stage(Stage::Rewrite, Duration::from_millis(2));
        assert_eq!(m.timed(Stage::Parse, || 7), 7);
        let text = m.render(
            &Gauges {
                rewrites_in_flight: 1,
                rewrite_slots: 4,
                sessions: 2,
                keepalive_sessions: 0,
                inflight_bytes: 0,
                inflight_budget_bytes: 1,
                store: None,
                store_resting: false,
            },
            4.0,
        );
        assert!(
            text.contains("ctxgc_upstream_seconds_bucket{le=\"0.001\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("ctxgc_upstream_seconds_bucket{le=\"0.025\"} 2\n"));
        assert!(text.contains("ctxgc_upstream_seconds_bucket{le=\"+Inf\"} 3\n"));
        assert!(
            text.contains("ctxgc_upstream_seconds_sum 100.0205\n"),
            "{text}"
        );
        // Stages are finer: 300 us is past 0.00025 and within 0.0005.
        assert!(text.contains("ctxgc_stage_seconds_bucket{stage=\"rewrite\",le=\"0.00025\"} 0\n"));
        assert!(text.contains("ctxgc_stage_seconds_bucket{stage=\"rewrite\",le=\"0.0005\"} 1\n"));
        assert!(text.contains("ctxgc_stage_seconds_bucket{stage=\"rewrite\",le=\"+Inf\"} 2\n"));
        assert!(
            text.contains("ctxgc_stage_seconds_sum{stage=\"rewrite\"} 0.0023\n"),
            "{text}"
        );
        assert!(text.contains("ctxgc_stage_seconds_count{stage=\"parse\"} 1\n"));
        assert!(text.contains("ctxgc_stage_seconds_count{stage=\"events\"} 0\n"));
        assert!(text.contains("ctxgc_requests_total{api=\"gemini\",outcome=\"fail_open\"} 1\n"));
        assert!(text.contains("ctxgc_fail_open_total{cause=\"store\"} 1\n"));
        assert!(text.contains("ctxgc_trimmed_tokens_total 1000\n"));
        let t = m.totals();
        assert_eq!((t.rewritten, t.passed_through, t.fail_open), (1, 0, 1));
    }
}
