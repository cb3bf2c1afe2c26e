//! A body read whole, parsed once: after the caller's kept body it continues, when it does
//! ([`crate::intake::recent_bodies`]), and kept in turn when its session has come back. What
//! cannot be parsed is told apart: what the providers accept though ctxgc's parser does not
//! goes upstream as sent; anything else is the client's error.

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::StatusCode;
use ctxgc_formats::{Api, ApiRequest, FormatError, Layout};

use crate::intake::identity::Tenant;
use crate::intake::recent_bodies::{Recent, RecentBodies};
use crate::reply::Refusal;

/// A body whose parse reads more than this many bytes is parsed off the async workers.
const INLINE_PARSE_BYTES: usize = 256 * 1024;

/// Who sent a body, and what it weighs.
pub(crate) struct Sender<'a> {
    pub(crate) tenant: &'a Tenant,
    /// No other request is in flight: only then is a body kept, or parsed after a kept one
    /// (under a load, memory goes to the requests in flight).
    pub(crate) alone: bool,
    /// The body's [`crate::admission::gate::weight_of`], weighed once at admission.
    pub(crate) weight: usize,
}

/// A body as parsed, with where its items lie when its parse found that (the client's bill
/// then need not scan it again: [`crate::observe::client_bill`]).
pub(crate) type Parsed = (ApiRequest, Option<Layout>);

/// Parses `bytes`, a request of `api`, off the async workers when the parse reads megabytes.
pub(crate) async fn parse(
    recent: &Arc<RecentBodies>,
    api: Api,
    bytes: &Bytes,
    sender: Sender<'_>,
) -> Result<Parsed, FormatError> {
    recent.note_arrival(bytes.len());
    let continued = sender
        .alone
        .then(|| recent.continued(sender.tenant, bytes))
        .flatten();
    // A body that continues a kept one is parsed after it: only what follows the items they
    // share is read, and the rest is cloned.
    let resumed_at = continued.as_ref().map_or(0, |(kept, shared)| {
        kept.previous(*shared).resumes_at(*shared)
    });
    let how = (sender.tenant.clone(), sender.alone, sender.weight);
    if bytes.len().saturating_sub(resumed_at) > INLINE_PARSE_BYTES {
        // Parsing megabytes is CPU work: off the async workers, which every other request
        // needs.
        let (recent, body) = (recent.clone(), bytes.clone());
        tokio::task::spawn_blocking(move || parse_now(&recent, api, body, how, continued))
            .await
            .unwrap_or_else(|e| Err(FormatError::Json(format!("the parse failed: {e}"))))
    } else {
        // Within the bound, a hop to a blocking thread and back costs as much as the parse:
        // at 100K tokens an agent's next request (one that continues its kept body) reads
        // only its new items here, and a body is resumed only while no other request is in
        // flight (`alone`), so no other request waits on this worker meanwhile.
        parse_now(recent, api, bytes.clone(), how, continued)
    }
}

/// Parses a body, after the tenant's kept body it continues (`continued`, with the bytes they
/// share), and keeps it (as parsed, before anything rewrites it) when its session has come
/// back. Other bodies, and any while other requests are in flight (`alone` false), are parsed
/// whole, without a layout (a layout parse allocates more).
fn parse_now(
    recent: &RecentBodies,
    api: Api,
    raw: Bytes,
    (tenant, alone, weight): (Tenant, bool, usize),
    continued: Option<(Arc<Recent>, usize)>,
) -> Result<Parsed, FormatError> {
    let (continued, shared) = continued.unzip();
    if !alone || !recent.worth_keeping(&tenant, (&raw, weight), continued.as_ref()) {
        return Ok((ApiRequest::parse_envelope(api, &raw)?, None));
    }
    let previous = continued
        .as_deref()
        .zip(shared)
        .map(|(kept, shared)| kept.previous(shared));
    let (request, layout) = ApiRequest::parse_envelope_after(api, &raw, previous)?;
    if let Some(layout) = &layout {
        let kept = (raw, &request.body, layout.clone());
        let items_key = api.wire().items_key();
        recent.keep(tenant, kept, (items_key, weight), continued);
    }
    Ok((request, layout))
}

/// What becomes of a body ctxgc could not parse.
pub(crate) enum Unparsed {
    /// The upstream reads it as sent; `why`, when ctxgc counts it as a fail-open.
    AsSent { why: Option<&'static str> },
    /// The client's error.
    Refused(Refusal),
}

/// Tells apart why a body of `api` sent to `path` could not be parsed.
pub(crate) fn unparsed(api: Api, path: &str, error: FormatError) -> Unparsed {
    match error {
        // Gemini's countTokens may wrap its request (`generateContentRequest`): counted
        // upstream as sent.
        _ if api == Api::Gemini && path.ends_with(":countTokens") => Unparsed::AsSent { why: None },
        // A lone surrogate escape (an emoji cut in half) is valid to the providers, not to
        // ctxgc's parser: the body goes upstream as it came.
        FormatError::Json(j) if is_lone_surrogate(&j) => {
            tracing::warn!(
                api = api.name(),
                "forwarded unchanged: the body holds a lone surrogate escape ({j})"
            );
            Unparsed::AsSent {
                why: Some("unparsed"),
            }
        }
        FormatError::Json(j) => Unparsed::Refused(invalid(format!(
            "ctxgc: the request body is not valid JSON: {j}"
        ))),
        other => Unparsed::Refused(invalid(format!(
            "ctxgc: not a {} request: {other}",
            api.name()
        ))),
    }
}

fn invalid(why: String) -> Refusal {
    Refusal(StatusCode::BAD_REQUEST, "invalid_request_error", why)
}

/// Whether a JSON error is a lone surrogate escape (`"\ud83d"` alone), which JSON as the
/// providers read it accepts.
fn is_lone_surrogate(error: &str) -> bool {
    error.starts_with("lone leading surrogate in hex escape")
        || error.starts_with("unexpected end of hex escape")
}

/// The model a request names: in its body, or in its path for Gemini
/// (`/v1beta/models/{model}:method`).
pub(crate) fn model_of(request: &ApiRequest, path: &str) -> Option<String> {
    request.body["model"]
        .as_str()
        .map(str::to_owned)
        .or_else(|| {
            let (_, rest) = path.split_once("/models/")?;
            Some(rest.split(':').next()?.to_owned())
        })
}
