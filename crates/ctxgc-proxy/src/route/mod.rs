//! The route of a request on an API route, each stage once and in order: admitted (its body
//! read within its deadline, limit and memory budget, and decoded: `crate::admission`);
//! parsed and identified (its tenant and session: `crate::intake`); rewritten, off the async
//! workers, or forwarded unchanged when that fails (`prepare`, over `crate::rewrite` and
//! `crate::lifetime`); the work beside it noted (`beside`); sent and its answer relayed
//! (`send`), through the agent tools' rounds when they were injected (`rounds`).
//! Observe mode forwards every request as it came and computes the rewrite beside it
//! (`shadow`). Every other request is forwarded untouched (`send::passthrough`).
//!
//! The files here are the stages that work with the server's whole state
//! (`crate::state::AppState`); they call the folders below them, never the server.

mod answered;
pub(crate) mod beside;
pub(crate) mod prepare;
pub(crate) mod rounds;
pub(crate) mod send;
mod shadow;
pub(crate) mod workers;

use std::sync::Arc;

use axum::extract::Request;
use axum::response::Response;
use ctxgc_formats::Api;
use tracing::Instrument;

use crate::admission::body::{Admitted, admit};
use crate::intake::identity;
use crate::intake::parse::{self, Sender, Unparsed};
use crate::lifetime::keepalive;
use crate::observe::metrics::{Forwarded, Stage};
use crate::route::prepare::{Caller, Purpose};
use crate::state::AppState;

/// A request of `api`: admitted, parsed, identified, rewritten, sent, its answer relayed.
pub(crate) async fn api_request(s: Arc<AppState>, api: Api, req: Request) -> Response {
    let upstream = api.wire().upstream();
    let (mut parts, body) = req.into_parts();
    // Admitted. Past the memory budget, the request streams upstream as it comes.
    let (bytes, reserved, weight) = match admit(s.body_limits(), &s.memory, &mut parts, body).await
    {
        Ok(Admitted::Whole {
            bytes,
            reserved,
            weight,
        }) => (bytes, reserved, weight),
        Ok(Admitted::Unbuffered { read, rest, short }) => {
            return send::unbuffered(&s, api, parts, (read, rest), short).await;
        }
        Err(refusal) => {
            s.metrics.bad_request();
            return refusal.into_response();
        }
    };
    s.metrics.request();
    // Parsed and identified. What ctxgc cannot parse but the upstream reads goes as it came.
    let tenant = s.tenant_of(&parts.headers, parts.uri.query());
    let sender = Sender {
        tenant: &tenant,
        alone: reserved.alone(),
        weight,
    };
    let started = std::time::Instant::now();
    let parsed = parse::parse(&s.recent_bodies, api, &bytes, sender).await;
    s.metrics.stage(Stage::Parse, started.elapsed());
    let (request, layout) = match parsed {
        Ok(parsed) => parsed,
        Err(e) => match parse::unparsed(api, parts.uri.path(), e) {
            Unparsed::AsSent { why } => {
                if why.is_some() {
                    s.metrics.forwarded(api, Forwarded::FailOpen, 0, 0, why);
                }
                return send::send_and_relay(&s, upstream, parts, bytes, None).await;
            }
            Unparsed::Refused(refusal) => {
                s.metrics.bad_request();
                return refusal.into_response();
            }
        },
    };
    let model = parse::model_of(&request, parts.uri.path());
    let session = identity::session_of(&s.responses, &tenant, &request, &parts.headers);
    let span = tracing::info_span!(
        "request",
        api = api.name(),
        session = session.as_str(),
        tenant = tenant.as_str().get(..8).unwrap_or(tenant.as_str()),
    );
    if s.observer.is_some() {
        // Observe mode: forwarded as it came; what ctxgc would have sent is computed beside it.
        shadow::observe(&s, request, bytes.clone(), session.clone());
        s.metrics.forwarded(api, Forwarded::Unchanged, 0, 0, None);
        let tapped = Some((api, session));
        return send::send_and_relay(&s, upstream, parts, bytes, tapped)
            .instrument(span)
            .await;
    }
    let recent_bodies = s.recent_bodies.clone();
    let response = async move {
        // Rewritten, as its caller allows (keep-alives, long context, cache fields refused
        // lately), or forwarded as it came when the pipeline fails.
        let path = parts.uri.path();
        let counting = path.ends_with("/count_tokens") || path.ends_with(":countTokens");
        let kept_alive =
            api == Api::Messages && keepalive::consents(&s.settings.rewrite.cache, &parts.headers);
        let model_name = model.as_deref().unwrap_or_default();
        let caller = Caller {
            kept_alive,
            long_context: api == Api::Messages && asks_long_context(&parts.headers),
            refused: s.refusals.refused(
                (tenant.as_str(), upstream, model_name),
                std::time::Instant::now(),
            ),
        };
        let on = prepare::Request {
            tenant: tenant.as_str(),
            session: &session,
            model: model.as_deref(),
            purpose: if counting {
                Purpose::Count
            } else {
                Purpose::Request
            },
            caller,
            item_spans: layout.as_ref().map(ctxgc_formats::Layout::item_spans),
        };
        let out = prepare::rewrite_or_forward(&s, request, &bytes, on).await;
        // The work beside it: keep-alives, the client's bill, idle preparation.
        if !counting {
            let left = beside::Left {
                parts: &parts,
                client: (&bytes, layout),
                sent: &out.body,
                prepared: out.prepared,
                kept_if_cold: out.kept_if_cold,
            };
            beside::note(&s, &session, (api, model.clone(), kept_alive), left);
        }
        // Sent, and its answer relayed: through the agent tools' rounds when they were
        // injected.
        if let Some(end) = out.injected {
            let cx = rounds::Context {
                s: s.clone(),
                api,
                upstream,
                parts,
                raw: bytes,
                end,
                session,
            };
            return rounds::run(cx, out.body).await;
        }
        let fields = send::SetFields {
            edit: out.cache_edit,
            by_rewrite: out.by_rewrite,
            tenant: tenant.as_str(),
            model: model_name,
        };
        let tapped = (api, session);
        send::forward(&s, upstream, parts, (out.body, fields), tapped, bytes).await
    }
    .instrument(span)
    .await;
    // Once answered, the copy the session's next body will be parsed after is made, off its
    // path.
    answered::then_make_spares(response, recent_bodies)
}

/// Whether an Anthropic request asks for the model's 1M context (the `context-1m-…` beta, in
/// any of its `anthropic-beta` headers' comma-separated values).
fn asks_long_context(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get_all("anthropic-beta")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|beta| beta.trim().starts_with("context-1m"))
}
