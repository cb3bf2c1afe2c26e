//! The upstreams: where each provider's API is, and sending a request there with the client's
//! headers (a 502 or 504 of ctxgc's own when it cannot be reached).

use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::Response;
use ctxgc_formats::Upstream;

use std::sync::Arc;

use crate::error::ProxyError;
use crate::observe::metrics::Metrics;
use crate::reply::error_response;
use crate::settings::ProxySettings;

/// The HTTP client and where each provider's API is.
pub(crate) struct Upstreams {
    client: reqwest::Client,
    openai: String,
    anthropic: String,
    gemini: String,
    idle: std::time::Duration,
    metrics: Arc<Metrics>,
}

impl Upstreams {
    pub(crate) fn new(
        settings: &ProxySettings,
        metrics: Arc<Metrics>,
    ) -> Result<Upstreams, ProxyError> {
        ctxgc_summarize::install_crypto();
        let client = reqwest::Client::builder()
            .connect_timeout(settings.timeouts.connect)
            .read_timeout(settings.timeouts.upstream_idle)
            // A request body written in pieces must not wait on the upstream's delayed ACK.
            .tcp_nodelay(true)
            .build()
            .map_err(|e| ProxyError::Setup(format!("cannot build the HTTP client: {e}")))?;
        Ok(Upstreams {
            client,
            openai: settings.openai_upstream.clone(),
            anthropic: settings.anthropic_upstream.clone(),
            gemini: settings.gemini_upstream.clone(),
            idle: settings.timeouts.upstream_idle,
            metrics,
        })
    }

    /// The base URL of `which` provider's API.
    pub(crate) fn base(&self, which: Upstream) -> &str {
        match which {
            Upstream::OpenAi => &self.openai,
            Upstream::Anthropic => &self.anthropic,
            Upstream::Gemini => &self.gemini,
        }
    }

    /// The upstream of a request ctxgc does not rewrite: Anthropic's paths and requests with
    /// Anthropic's headers go to Anthropic, Gemini's (`/v1beta/`, `/v1/models/`, a Google API
    /// key) to Gemini, the rest to OpenAI.
    pub(crate) fn for_other(&self, uri: &Uri, headers: &HeaderMap) -> Upstream {
        let path = uri.path();
        let gemini = path.starts_with("/v1beta/")
            || path.starts_with("/v1/models/")
            || path.starts_with("/upload/v1beta/")
            || headers.contains_key("x-goog-api-key");
        if gemini {
            return Upstream::Gemini;
        }
        let anthropic = uri.path().starts_with("/v1/messages")
            || headers.contains_key("anthropic-version")
            || headers.contains_key("x-api-key");
        if anthropic {
            Upstream::Anthropic
        } else {
            Upstream::OpenAi
        }
    }

    /// Sends a request to `which` with the client's headers (hop-by-hop ones excepted). An
    /// upstream that cannot be reached becomes a 502, as a gateway would answer.
    pub(crate) async fn send(
        &self,
        which: Upstream,
        method: Method,
        uri: &Uri,
        headers: &HeaderMap,
        body: impl Into<reqwest::Body>,
    ) -> Result<reqwest::Response, Response> {
        let base = self.base(which);
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        let url = format!("{}{}", base.trim_end_matches('/'), path);
        let mut builder = self.client.request(method, &url);
        for (name, value) in headers {
            // The client's accept-encoding is not passed on: the HTTP client asks for what it
            // can decode and decodes it, so the proxy can read every answer (its own tool
            // calls, usage) and the client gets it as identity, which every client accepts.
            if !hop_by_hop(name) && name != "accept-encoding" {
                builder = builder.header(name, value);
            }
        }
        let started = std::time::Instant::now();
        let sent = builder.body(body.into()).send().await;
        self.metrics.upstream_latency(started.elapsed());
        sent.map_err(|e| {
            let shown = redact_url(base);
            if e.is_timeout() {
                let secs = self.idle.as_secs();
                tracing::warn!(upstream = %shown, secs, "upstream silent");
                return error_response(
                    StatusCode::GATEWAY_TIMEOUT,
                    "upstream_timeout",
                    format!("ctxgc: the upstream {shown} did not answer within {secs} s"),
                );
            }
            tracing::warn!(upstream = %shown, error = %e.without_url(), "upstream unreachable");
            error_response(
                StatusCode::BAD_GATEWAY,
                "upstream_unreachable",
                format!("ctxgc: cannot reach the upstream {shown}"),
            )
        })
    }
}

/// An upstream URL as it may be shown (logs, error bodies): credentials in it are replaced by
/// `***`, and so is the value of a `key` query parameter (Gemini's API key).
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let shown = match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://***@{}", &rest[at + 1..]),
        None => url.to_owned(),
    };
    redact_key_param(&shown)
}

/// `url` with the value of its `key` query parameter replaced by `***`.
fn redact_key_param(url: &str) -> String {
    let Some((path, query)) = url.split_once('?') else {
        return url.to_owned();
    };
    let (query, fragment) = query
        .split_once('#')
        .map_or((query, None), |(q, f)| (q, Some(f)));
    let query: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some(("key", _)) => "key=***".to_owned(),
            _ => pair.to_owned(),
        })
        .collect();
    let mut out = format!("{path}?{}", query.join("&"));
    if let Some(f) = fragment {
        out.push('#');
        out.push_str(f);
    }
    out
}

/// Hop-by-hop headers, which a proxy must not forward, and ctxgc's own.
fn hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
            | "host"
            | "content-length"
    ) || name.as_str().starts_with("x-ctxgc-")
}

/// The response headers passed to the client.
pub(crate) fn response_headers(response: &reqwest::Response) -> HeaderMap {
    let mut out = HeaderMap::new();
    for (name, value) in response.headers() {
        if !hop_by_hop(name) {
            out.append(name.clone(), value.clone());
        }
    }
    out.insert("x-ctxgc", HeaderValue::from_static("1"));
    out
}

/// Whether a response is a server-sent event stream.
pub(crate) fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("text/event-stream"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_urls_are_shown_without_credentials() {
        assert_eq!(
            redact_url("https://user:pass@gw.example:8443/v1?x=1"),
            "https://***@gw.example:8443/v1?x=1"
        );
        assert_eq!(redact_url("http://127.0.0.1:9/v1"), "http://127.0.0.1:9/v1");
        // An `@` in the path is not a credential.
        assert_eq!(redact_url("http://h/a@b"), "http://h/a@b");
        // Gemini's key as a query parameter.
        assert_eq!(
            redact_url("https://h/v1beta/models/m:generateContent?alt=sse&key=AIza-SECRET"),
            "https://h/v1beta/models/m:generateContent?alt=sse&key=***"
        );
    }
}
