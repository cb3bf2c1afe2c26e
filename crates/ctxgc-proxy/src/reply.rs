//! Answers the proxy writes itself: JSON bodies and its own errors.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// A JSON answer.
pub(crate) fn json(value: &impl Serialize) -> Response {
    let body = serde_json::to_string(value).unwrap_or_default();
    ([("content-type", "application/json")], body).into_response()
}

/// An error of ctxgc's own (never the upstream's), in the shape clients print.
pub(crate) fn error_response(status: StatusCode, kind: &str, message: String) -> Response {
    let body = serde_json::json!({"error": {"type": kind, "message": message, "source": "ctxgc"}});
    (
        status,
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// A request the proxy answers itself: status, error type, message.
pub(crate) struct Refusal(
    pub(crate) StatusCode,
    pub(crate) &'static str,
    pub(crate) String,
);

impl Refusal {
    pub(crate) fn into_response(self) -> Response {
        error_response(self.0, self.1, self.2)
    }
}
