//! Request bodies of the three APIs, kept losslessly.
//!
//! A body is held as an order-preserving JSON document, not re-modelled as structs: fields ctxgc
//! does not know (`context_management`, `output_config`, `client_metadata`, whatever a provider
//! adds next year) and their key order survive untouched, and the proxy rewrites only the nodes
//! it changes. The provider-neutral [`Transcript`] is a view computed from the document.

use ctxgc_core::Transcript;
use serde_json::Value;

use crate::{FormatError, anthropic, chat, gemini, responses};

/// Which API a body is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `POST /v1/chat/completions`
    ChatCompletions,
    /// `POST /v1/responses`
    Responses,
    /// `POST /v1/messages` (Anthropic)
    Messages,
    /// `POST /v1beta/models/{model}:generateContent` (Gemini)
    Gemini,
}

impl Api {
    /// Short name, e.g. for logs and tables.
    pub fn name(self) -> &'static str {
        match self {
            Api::ChatCompletions => "openai-chat",
            Api::Responses => "openai-responses",
            Api::Messages => "anthropic-messages",
            Api::Gemini => "gemini",
        }
    }
}

/// A request body of a known API.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiRequest {
    /// The API.
    pub api: Api,
    /// The whole body, key order preserved.
    pub body: Value,
}

impl ApiRequest {
    /// Parses a body for `api`, checking that it has that API's shape.
    pub fn parse(api: Api, bytes: &[u8]) -> Result<ApiRequest, FormatError> {
        let body: Value =
            serde_json::from_slice(bytes).map_err(|e| FormatError::Json(e.to_string()))?;
        let request = ApiRequest { api, body };
        request.check_shape()?;
        Ok(request)
    }

    /// Parses a body for `api`, checking only its envelope: a JSON object with the API's
    /// conversation (`messages`, `input`, `contents`). A proxy forwards what it cannot read
    /// inside the conversation, and the provider, which has the last word on its own shapes,
    /// answers it; the whole check ([`ApiRequest::parse`]) builds a transcript of every
    /// message, a quarter of the time and a third of the memory of a large request.
    pub fn parse_envelope(api: Api, bytes: &[u8]) -> Result<ApiRequest, FormatError> {
        let body: Value =
            serde_json::from_slice(bytes).map_err(|e| FormatError::Json(e.to_string()))?;
        Self::envelope(api, body)
    }

    /// [`ApiRequest::parse_envelope`] with the body's [`Layout`], parsed after `previous`
    /// (the same caller's previous body) when there is one: the conversation items the two
    /// bodies share byte for byte are cloned from it, not parsed again. The request is the one
    /// `parse_envelope` returns; the layout is `None` when the body has no conversation array.
    pub fn parse_envelope_after(
        api: Api,
        bytes: &[u8],
        previous: Option<crate::reparse::Previous<'_>>,
    ) -> Result<(ApiRequest, Option<crate::reparse::Layout>), FormatError> {
        Self::parse_envelope_spared(api, bytes, previous, None)
    }

    /// [`ApiRequest::parse_envelope_after`], moving the shared items out of `spare`, a copy of
    /// them made beforehand ([`crate::reparse::Spare::of`] of `previous.body`), instead of
    /// cloning them.
    pub fn parse_envelope_spared(
        api: Api,
        bytes: &[u8],
        previous: Option<crate::reparse::Previous<'_>>,
        spare: Option<crate::reparse::Spare>,
    ) -> Result<(ApiRequest, Option<crate::reparse::Layout>), FormatError> {
        let key = api.wire().items_key();
        let parsed = previous
            .and_then(|p| crate::reparse::parse_after(bytes, key, p, spare))
            .or_else(|| crate::reparse::parse_with_layout(bytes, key));
        match parsed {
            Some((body, layout)) => Ok((Self::envelope(api, body)?, layout)),
            // Not what the resumable parse expects: the whole parse has the last word (and
            // the error).
            None => Ok((Self::parse_envelope(api, bytes)?, None)),
        }
    }

    fn envelope(api: Api, body: Value) -> Result<ApiRequest, FormatError> {
        if !body.is_object() {
            return Err(FormatError::shape(
                "body",
                "a request body must be a JSON object",
            ));
        }
        let conversation = match api {
            Api::ChatCompletions | Api::Messages => {
                body.get("messages").is_some_and(Value::is_array)
            }
            Api::Responses => matches!(body.get("input"), Some(Value::String(_) | Value::Array(_))),
            Api::Gemini => body.get("contents").is_some_and(Value::is_array),
        };
        if !conversation {
            let (key, what) = match api {
                Api::ChatCompletions => (
                    "messages",
                    "a Chat Completions request needs a `messages` array",
                ),
                Api::Messages => ("messages", "a Messages request needs a `messages` array"),
                Api::Responses => (
                    "input",
                    "a Responses request needs `input` (a string or an array of items)",
                ),
                Api::Gemini => (
                    "contents",
                    "a generateContent request needs a `contents` array",
                ),
            };
            return Err(FormatError::shape(key, what));
        }
        Ok(ApiRequest { api, body })
    }

    /// Parses a body whose API is not known in advance.
    pub fn parse_any(bytes: &[u8]) -> Result<ApiRequest, FormatError> {
        let body: Value =
            serde_json::from_slice(bytes).map_err(|e| FormatError::Json(e.to_string()))?;
        let api = detect(&body).ok_or_else(|| {
            FormatError::shape(
                "body",
                "neither an OpenAI (`messages` or `input`) nor an Anthropic (`messages` with `max_tokens`) request",
            )
        })?;
        let request = ApiRequest { api, body };
        request.check_shape()?;
        Ok(request)
    }

    fn check_shape(&self) -> Result<(), FormatError> {
        if !self.body.is_object() {
            return Err(FormatError::shape(
                "body",
                "a request body must be a JSON object",
            ));
        }
        self.transcript().map(|_| ())
    }

    /// The serialised body (compact JSON, keys in their original order).
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(&self.body).unwrap_or_default()
    }

    /// The provider-neutral view of the conversation.
    pub fn transcript(&self) -> Result<Transcript, FormatError> {
        match self.api {
            Api::ChatCompletions => chat_transcript(&self.body),
            Api::Responses => responses::transcript_from_body(&self.body),
            Api::Messages => anthropic::transcript_from_body(&self.body),
            Api::Gemini => gemini::transcript_from_body(&self.body),
        }
    }
}

fn chat_transcript(body: &Value) -> Result<Transcript, FormatError> {
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            FormatError::shape(
                "messages",
                "a Chat Completions request needs a `messages` array",
            )
        })?;
    let mut t = Transcript::default();
    for (i, m) in messages.iter().enumerate() {
        t.messages
            .push(chat::message_from_chat(m, &format!("messages[{i}]"))?);
    }
    if let Some(tools) = body.get("tools").and_then(Value::as_array) {
        t.tools = tools.clone();
    }
    crate::resolve_tool_names(&mut t);
    Ok(t)
}

/// Guesses the API of a body from its keys and block types.
pub fn detect(body: &Value) -> Option<Api> {
    let obj = body.as_object()?;
    if obj.contains_key("contents") && !obj.contains_key("messages") {
        return Some(Api::Gemini);
    }
    if obj.contains_key("input") && !obj.contains_key("messages") {
        return Some(Api::Responses);
    }
    let messages = obj.get("messages")?.as_array()?;
    let anthropic_keys = [
        "system",
        "anthropic_version",
        "stop_sequences",
        "top_k",
        "thinking",
    ]
    .iter()
    .any(|k| obj.contains_key(*k));
    let anthropic_blocks = messages.iter().any(|m| {
        m.get("content")
            .and_then(Value::as_array)
            .is_some_and(|blocks| {
                blocks.iter().any(|b| {
                    matches!(
                        b.get("type").and_then(Value::as_str),
                        Some("tool_use" | "tool_result" | "thinking" | "redacted_thinking")
                    ) || b.get("source").is_some()
                })
            })
    });
    let openai_shape = messages.iter().any(|m| {
        m.get("tool_calls").is_some()
            || matches!(
                m.get("role").and_then(Value::as_str),
                Some("tool" | "developer" | "function")
            )
    });
    if (anthropic_keys || anthropic_blocks) && !openai_shape {
        Some(Api::Messages)
    } else {
        Some(Api::ChatCompletions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_bodies_get_clear_errors() {
        let err = ApiRequest::parse(Api::ChatCompletions, b"{not json").unwrap_err();
        assert!(err.to_string().starts_with("invalid JSON:"), "{err}");
        let err = ApiRequest::parse(Api::ChatCompletions, br#"{"model":"x"}"#).unwrap_err();
        assert_eq!(
            err.to_string(),
            "messages: a Chat Completions request needs a `messages` array"
        );
        let err = ApiRequest::parse_any(br#"{"model":"x"}"#).unwrap_err();
        assert!(err.to_string().contains("neither an OpenAI"), "{err}");
        let err = ApiRequest::parse(Api::Messages, br#"[1,2]"#).unwrap_err();
        assert_eq!(
            err.to_string(),
            "body: a request body must be a JSON object"
        );
    }
}
