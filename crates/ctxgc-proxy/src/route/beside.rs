//! Work beside a request, off its path: the keep-alives its session waits for
//! ([`crate::lifetime::keepalive`]), the idle preparation of its next event ([`crate::lifetime::idle`]), and what
//! its client alone would have been billed ([`crate::observe::client_bill`]); then, when due, sending a
//! keep-alive and preparing an idle session.

use std::sync::Arc;

use axum::body::Bytes;
use ctxgc_formats::{Api, ApiRequest};
use tracing::Instrument;

use crate::lifetime::keepalive;
use crate::route::prepare::{self as pipeline, Prepared, Purpose};
use crate::state::AppState;

/// What a request leaves for the work beside it.
pub(crate) struct Left<'a> {
    /// The client's request line and headers.
    pub(crate) parts: &'a axum::http::request::Parts,
    /// The client's body as it came, with where its items lie when its parse found that.
    pub(crate) client: (&'a Bytes, Option<ctxgc_formats::Layout>),
    /// The body about to be sent.
    pub(crate) sent: &'a Bytes,
    /// The pipeline ran (a request forwarded after an internal failure ends the waits).
    pub(crate) prepared: bool,
    /// What a keep-alive after this request would give up ([`Prepared::kept_if_cold`]).
    pub(crate) kept_if_cold: Option<f64>,
}

/// Everything beside a request of `api` for `model` that is about to be sent (a token count
/// leaves nothing): its keep-alives (Messages only, when its caller gets them: `kept_alive`),
/// the client's bill, its idle preparation.
pub(crate) fn note(
    s: &Arc<AppState>,
    session: &ctxgc_core::store::SessionId,
    (api, model, kept_alive): (Api, Option<String>, bool),
    left: Left<'_>,
) {
    if api == Api::Messages {
        let sent = (left.sent, left.prepared, left.kept_if_cold);
        note_keepalive(s, session, (left.parts, kept_alive), sent);
    }
    let (raw, layout) = left.client;
    let who = crate::intake::identity::client_of(&left.parts.headers);
    bill_as_the_client_alone(s, session, (api, model, who), (raw.clone(), layout));
    note_idle(s, session, (api, kept_alive), (raw, left.prepared));
}

/// A Messages request of `session` is about to be sent as `body`: the session waits for a
/// keep-alive when its caller gets them (`kept_alive`, [`keepalive::consents`]) and the
/// pipeline ran (a request forwarded after an internal failure ends them), else any it was
/// waiting for end. `kept_if_cold` is what the pipeline found a keep-alive would give up (the
/// event an expiry makes free).
fn note_keepalive(
    s: &AppState,
    session: &ctxgc_core::store::SessionId,
    (parts, kept_alive): (&axum::http::request::Parts, bool),
    (body, prepared, kept_if_cold): (&Bytes, bool, Option<f64>),
) {
    let life = (prepared && kept_alive)
        .then(|| {
            s.sessions
                .keepalive_lifetime(session, kept_if_cold.unwrap_or(1.0))
        })
        .flatten();
    match life {
        Some(life) => {
            let now = std::time::Instant::now();
            s.keepalives.note(
                session,
                (&parts.uri, &parts.headers),
                body.clone(),
                life,
                now,
            );
        }
        None => s.keepalives.forget(session),
    }
}

/// What the client's own request `raw` (laid out by `layout` when its parse found where its
/// items lie) would have been billed, off the request path: queued for the thread that serves
/// it with the session's simulated cache ([`crate::observe::client_bill`]), started with the first
/// request.
fn bill_as_the_client_alone(
    s: &Arc<AppState>,
    session: &ctxgc_core::store::SessionId,
    (api, model, client): (Api, Option<String>, Option<&'static str>),
    (raw, layout): (Bytes, Option<ctxgc_formats::Layout>),
) {
    if let Some(jobs) = s.client_bills.take_jobs() {
        let state = Arc::downgrade(s);
        let started = std::thread::Builder::new()
            .name("ctxgc-client-bill".into())
            .spawn(move || {
                while let Ok(job) = jobs.recv() {
                    let Some(s) = state.upgrade() else {
                        return;
                    };
                    let scale = (
                        s.settings.rewrite.trim.bytes_per_token,
                        s.sessions.calibration(&job.session).ratio(),
                    );
                    let served = s.client_bills.serve(
                        &job.session,
                        (job.api, job.model.as_deref(), job.client),
                        (&job.raw, job.layout.as_ref()),
                        job.at_ms,
                        scale,
                    );
                    match served {
                        Some(served) => {
                            s.sessions.record_client_served(&job.session, served.served)
                        }
                        None => s.sessions.record_client_unsimulated(&job.session),
                    }
                }
            });
        if let Err(e) = started {
            tracing::error!(error = %e, "cannot start the client-bill thread: no request is simulated");
        }
    }
    let at_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let job = crate::observe::client_bill::Job {
        session: session.clone(),
        api,
        model,
        client,
        raw,
        layout,
        at_ms,
    };
    if !s.client_bills.offer(job) {
        s.sessions.record_client_unsimulated(session);
    }
}

/// With events only after a pause, the session's latest request is held until its cache
/// expires, then prepared ([`crate::lifetime::idle`]); not when its caller gets keep-alives
/// (`kept_alive`), nor after a request that failed open.
fn note_idle(
    s: &AppState,
    session: &ctxgc_core::store::SessionId,
    (api, kept_alive): (Api, bool),
    (raw, prepared): (&Bytes, bool),
) {
    let rewrite = &s.settings.rewrite;
    let wire = api.wire();
    // When the engine counts this session's cache cold (the lifetime in force taken into
    // account, as it judges the request that resumes it).
    let cold_after = rewrite
        .engine
        .as_ref()
        .filter(|_| rewrite.events_only_when_cold && prepared && !kept_alive)
        .and_then(|policy| {
            let long = s
                .sessions
                .life(session, |l| l.long_secs(wire.cache_hint()))
                .flatten();
            policy.cold_after_secs(wire.family(), long)
        });
    match cold_after {
        Some(secs) => {
            let now = std::time::Instant::now();
            s.idle.note(session, api, raw.clone(), secs, now);
        }
        None => s.idle.forget(session),
    }
}

/// Prepares an idle session whose cache expired: its latest request runs through the pipeline
/// as after the pause, and the event it runs is stored with the session's lineage for the
/// request that resumes it. A failure changes nothing: that request runs the event itself.
pub(crate) async fn prepare_idle(s: Arc<AppState>, due: crate::lifetime::idle::Due) {
    let Ok(request) = ApiRequest::parse_envelope(due.api, &due.raw) else {
        return;
    };
    // The session id begins with its tenant's id: the rewrite slots are shared by tenant.
    let tenant = due
        .session
        .as_str()
        .split('.')
        .next()
        .unwrap_or_default()
        .to_owned();
    let span = tracing::info_span!("idle", session = due.session.as_str());
    let began = std::time::Instant::now();
    let prepared = pipeline::run(
        &s,
        request,
        (&due.raw, None),
        (tenant.as_str(), &due.session),
        (Purpose::Idle, pipeline::Caller::default()),
    )
    .instrument(span.clone())
    .await;
    let _entered = span.enter();
    match prepared {
        Ok(Prepared {
            event: Some(kind), ..
        }) => {
            s.sessions.mark_prepared(&due.session, began);
            tracing::info!(
                event = kind,
                "prepared while idle: the request that resumes the session carries it"
            );
        }
        Ok(_) => tracing::debug!("prepared while idle: no event was due"),
        Err(why) => tracing::debug!(error = %why, "idle preparation failed"),
    }
}

/// Sends one keep-alive and records what the upstream billed for it. One that fails (refused,
/// unreachable, past its deadline) ends the session's keep-alives; the log names the session
/// and the status, never a header.
pub(crate) async fn send_keepalive(s: Arc<AppState>, due: keepalive::Due) {
    let session = due.session.clone();
    let answered = tokio::time::timeout(s.keepalives.deadline(), async {
        let response = s
            .upstreams
            .send(
                ctxgc_formats::Upstream::Anthropic,
                axum::http::Method::POST,
                &due.uri,
                &due.headers,
                due.body,
            )
            .await
            .ok()?;
        let status = response.status();
        let body = response.bytes().await.ok()?;
        Some((status, body))
    })
    .await;
    match answered {
        Ok(Some((status, body))) if status.is_success() => {
            let usage = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| Api::Messages.wire().response_summary(&v).0);
            s.metrics
                .keepalive("sent", usage.map_or(0, |u| u.cache_read));
            s.sessions.record_keepalive(&session, usage);
            tracing::info!(
                session = session.as_str(),
                cache_read = usage.map_or(0, |u| u.cache_read),
                cache_write = usage.map_or(0, |u| u.cache_write),
                "keep-alive sent"
            );
        }
        other => {
            s.metrics.keepalive("failed", 0);
            s.keepalives.forget(&session);
            let status = match &other {
                Ok(Some((status, _))) => status.as_u16().to_string(),
                Ok(None) => "unreachable".to_owned(),
                Err(_) => "deadline".to_owned(),
            };
            tracing::warn!(
                session = session.as_str(),
                status,
                "keep-alive failed: the session's keep-alives end"
            );
        }
    }
}
