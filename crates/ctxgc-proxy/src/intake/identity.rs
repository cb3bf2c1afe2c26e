//! Who a request belongs to: its tenant, from the credential it carries, and its session within
//! that tenant, from what the client itself says about its conversation.
//!
//! - **Tenant**: an HMAC-SHA256, under a server secret, of the API key or bearer token
//!   (`authorization`, `x-api-key`, `api-key`, `x-goog-api-key`); never the credential itself.
//!   Requests without any credential share one anonymous tenant.
//! - **Session**, in this order: the `x-ctxgc-session` header; the client's own conversation id
//!   (Codex's `session_id` header and `prompt_cache_key`, Claude Code's `metadata.user_id`
//!   session part, the Responses `conversation` id, the OpenAI `user` / `safety_identifier`);
//!   else a hash of the start of the conversation that skips what every session of a client
//!   shares (environment and instruction blocks, reminders) and includes the first real user
//!   request and the working directory where the client states one.
//!
//! The key every stored thing is filed under ([`SessionId`]) is derived from both, in hex, so a
//! client-chosen name can select only among its own tenant's sessions, and can never spell
//! another kind of key.

use std::fmt;

use ctxgc_formats::ApiRequest;
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

/// The secret tenant ids are keyed with.
#[derive(Clone)]
pub struct TenantSecret([u8; 32]);

impl fmt::Debug for TenantSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TenantSecret(..)")
    }
}

impl TenantSecret {
    /// A secret from configured text (replicas given the same text agree on tenants).
    pub fn from_text(text: &str) -> TenantSecret {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(b"ctxgc tenant secret v1")
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        mac.update(text.as_bytes());
        TenantSecret(mac.finalize().into_bytes().into())
    }

    /// A fresh random secret.
    pub fn random() -> Result<TenantSecret, String> {
        let mut bytes = [0u8; 32];
        getrandom::getrandom(&mut bytes).map_err(|e| format!("no random source: {e}"))?;
        Ok(TenantSecret(bytes))
    }

    /// As stored (hex), so replicas sharing a store share it.
    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }

    /// From its stored form.
    pub fn from_hex(text: &str) -> Option<TenantSecret> {
        let text = text.trim();
        if text.len() != 64 {
            return None;
        }
        let mut bytes = [0u8; 32];
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(TenantSecret(bytes))
    }

    /// The tenant of a request, from its headers.
    pub fn tenant(&self, headers: &axum::http::HeaderMap) -> Tenant {
        self.tenant_of(headers, None)
    }

    /// The tenant of a request, from its headers or else, as Gemini's clients may send it, the
    /// `key` parameter of its query.
    pub fn tenant_of(&self, headers: &axum::http::HeaderMap, query: Option<&str>) -> Tenant {
        match credential(headers).or_else(|| query.and_then(key_parameter)) {
            None => Tenant::anonymous(),
            Some(credential) => self.tenant_of_credential(&credential),
        }
    }

    /// The tenant of requests carrying `credential` (an API key or bearer token, without
    /// `Bearer `): how the MCP server and `ctxgc recall` keep to the caller's own sessions.
    pub fn tenant_of_credential(&self, credential: &str) -> Tenant {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        mac.update(credential.trim().as_bytes());
        Tenant(hex(&mac.finalize().into_bytes()[..8]))
    }
}

/// The credential a request carries, if any.
fn credential(headers: &axum::http::HeaderMap) -> Option<String> {
    for name in ["authorization", "x-api-key", "api-key", "x-goog-api-key"] {
        if let Some(value) = headers.get(name).and_then(|v| v.to_str().ok()) {
            let value = value.trim();
            let value = value
                .strip_prefix("Bearer ")
                .or_else(|| value.strip_prefix("bearer "))
                .unwrap_or(value)
                .trim();
            if !value.is_empty() {
                return Some(value.to_owned());
            }
        }
    }
    None
}

/// The value of a query's `key` parameter (Gemini's API key), when it has one.
fn key_parameter(query: &str) -> Option<String> {
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix("key="))
        .filter(|key| !key.is_empty())
        .map(str::to_owned)
}

/// A tenant: `anonymous`, or 16 hex digits of the keyed hash of its credential.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tenant(String);

impl Tenant {
    /// The tenant of requests that carry no credential.
    pub fn anonymous() -> Tenant {
        Tenant("anonymous".into())
    }

    /// As shown and filed.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The key a session's originals, lineage, agent state and usage are filed under:
/// `{tenant}.{source}-{hash}`. Only hex digits, a dot, a dash and the source's name: no client
/// text reaches it.
pub use ctxgc_core::store::SessionId;

impl Tenant {
    /// Whether `session` belongs to this tenant.
    pub fn owns(&self, session: &SessionId) -> bool {
        self.owns_id(session.as_str())
    }

    /// Whether the session with this id belongs to this tenant.
    pub fn owns_id(&self, session: &str) -> bool {
        session
            .strip_prefix(self.as_str())
            .is_some_and(|rest| rest.starts_with('.'))
    }
}

/// What identified the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `x-ctxgc-session`.
    Header,
    /// The client's own conversation id.
    Client,
    /// A hash of the start of the conversation.
    Start,
}

impl Source {
    fn name(self) -> &'static str {
        match self {
            Source::Header => "h",
            Source::Client => "c",
            Source::Start => "s",
        }
    }
}

/// The session of a request: the one the response it continues (`previous_response_id`)
/// answered (`responses`), when that session is the caller's; else as [`session`] says.
pub(crate) fn session_of(
    responses: &crate::intake::responses::ResponseIndex,
    tenant: &Tenant,
    request: &ApiRequest,
    headers: &axum::http::HeaderMap,
) -> SessionId {
    let continued = request
        .body
        .get("previous_response_id")
        .and_then(Value::as_str)
        .filter(|_| !headers.contains_key("x-ctxgc-session"))
        .and_then(|id| responses.session_of(id))
        .filter(|session| tenant.owns(session));
    continued.unwrap_or_else(|| session(tenant, request, headers))
}

/// The client that sent a request, as the lab's cache table names clients with values of their
/// own (`codex`: Codex CLI says so in its `originator` header and its user agent), so the
/// client's bill is simulated as the lab simulates that client's logs.
pub(crate) fn client_of(headers: &axum::http::HeaderMap) -> Option<&'static str> {
    let names = |key: &str| {
        headers
            .get(key)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("codex"))
    };
    (names("originator") || names("user-agent")).then_some("codex")
}

/// The session of a request within `tenant`.
pub fn session(
    tenant: &Tenant,
    request: &ApiRequest,
    headers: &axum::http::HeaderMap,
) -> SessionId {
    let (source, value) = session_source(request, headers);
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    hasher.update(source.name().as_bytes());
    hasher.update(&[0]);
    hasher.update(value.as_bytes());
    SessionId::new(format!(
        "{}.{}-{:016x}",
        tenant.as_str(),
        source.name(),
        hasher.digest()
    ))
}

/// The session id a client naming its session `name` with `x-ctxgc-session` gets in `tenant`.
pub fn named_session(tenant: &Tenant, name: &str) -> SessionId {
    let mut headers = axum::http::HeaderMap::new();
    if let Ok(value) = axum::http::HeaderValue::from_str(name) {
        headers.insert("x-ctxgc-session", value);
    }
    let empty = ApiRequest {
        api: ctxgc_formats::Api::ChatCompletions,
        body: Value::Null,
    };
    session(tenant, &empty, &headers)
}

/// What names the session, and from where.
fn session_source(request: &ApiRequest, headers: &axum::http::HeaderMap) -> (Source, String) {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    };
    if let Some(name) = header("x-ctxgc-session") {
        return (Source::Header, name);
    }
    let body = &request.body;
    let field = |key: &str| {
        body.get(key)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    };
    let client_id = header("session_id")
        .map(|v| format!("session_id:{v}"))
        .or_else(|| field("prompt_cache_key").map(|v| format!("prompt_cache_key:{v}")))
        .or_else(|| claude_code_session(body).map(|v| format!("claude-code:{v}")))
        .or_else(|| {
            body.get("conversation")
                .and_then(|c| c.as_str().or_else(|| c.get("id").and_then(Value::as_str)))
                .map(|v| format!("conversation:{v}"))
        })
        .or_else(|| field("user").map(|v| format!("user:{v}")))
        .or_else(|| field("safety_identifier").map(|v| format!("safety_identifier:{v}")));
    // A client's session id alone is not a conversation: Claude Code's sub-agents and side
    // requests (titles, summaries of fetched pages) share the main agent's, and Codex's review
    // and compaction tasks share its `session_id`. Filed under the id and the conversation's
    // start, each conversation keeps its own lineage and agent state, and conversations that
    // start alike in two client sessions stay apart.
    if let Some(id) = client_id {
        return (
            Source::Client,
            format!("{id}\n{}", conversation_start(body)),
        );
    }
    (Source::Start, conversation_start(body))
}

/// The session part of Claude Code's `metadata.user_id`: a JSON object with `session_id`
/// (2.1), or `user_…_account_…_session_<uuid>` (2.0).
fn claude_code_session(body: &Value) -> Option<String> {
    let user_id = body.get("metadata")?.get("user_id")?.as_str()?;
    if let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(user_id) {
        return obj
            .get("session_id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
    }
    let (_, session) = user_id.rsplit_once("_session_")?;
    (!session.is_empty()).then(|| session.to_owned())
}

/// Items after the first request still searched for a stated working directory.
const DIRECTORY_LOOKAHEAD: usize = 4;

/// What distinguishes one conversation's start from another's of the same client: the system
/// prompt, the first real user request (reminders and instruction blocks skipped), and the
/// working directory where the client states one.
fn conversation_start(body: &Value) -> String {
    let mut out = String::new();
    for key in ["system", "instructions"] {
        if let Some(v) = body.get(key) {
            out.push_str(&v.to_string());
            out.push('\n');
        }
    }
    let items = body
        .get("messages")
        .or_else(|| body.get("input"))
        .and_then(Value::as_array);
    let mut request: Option<String> = None;
    let mut directory: Option<String> = None;
    // Clients state their directory beside the first request, not later: the scan stops a
    // few items after it (the rest of a long history is never read for identity).
    let mut after_request = 0;
    for item in items.into_iter().flatten() {
        if request.is_some() {
            after_request += 1;
            if after_request > DIRECTORY_LOOKAHEAD {
                break;
            }
        }
        let texts = texts_of(item);
        for text in &texts {
            if directory.is_none() {
                directory = working_directory(text);
            }
        }
        let role = item.get("role").and_then(Value::as_str);
        if role == Some("user") && request.is_none() {
            let real: Vec<&str> = texts
                .iter()
                .copied()
                .filter(|t| !is_boilerplate(t))
                .collect();
            if !real.is_empty() {
                request = Some(real.join("\n"));
            }
        } else if matches!(role, Some("system" | "developer")) && request.is_none() {
            out.push_str(&texts.join("\n"));
            out.push('\n');
        }
        if request.is_some() && directory.is_some() {
            break;
        }
    }
    out.push_str(&request.unwrap_or_default());
    out.push('\n');
    out.push_str(&directory.unwrap_or_default());
    out
}

/// The texts of a message or item: a string content, or its text parts.
fn texts_of(item: &Value) -> Vec<&str> {
    match item.get("content") {
        Some(Value::String(s)) => vec![s.as_str()],
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => Vec::new(),
    }
}

/// Text every session of a client shares: reminders and environment or instruction blocks.
fn is_boilerplate(text: &str) -> bool {
    let t = text.trim_start();
    t.is_empty()
        || [
            "<system-reminder>",
            "<environment_context>",
            "<user_instructions>",
            "# AGENTS.md instructions",
            "<permissions instructions>",
            "Caveat: The messages below were generated by the user",
        ]
        .iter()
        .any(|o| t.starts_with(o))
}

/// The working directory a client states (Claude Code's environment block, Codex's
/// `<environment_context>`).
fn working_directory(text: &str) -> Option<String> {
    if let Some(start) = text.find("<cwd>") {
        let rest = &text[start + 5..];
        return rest.find("</cwd>").map(|end| rest[..end].trim().to_owned());
    }
    for marker in ["Primary working directory:", "Working directory:"] {
        if let Some(start) = text.find(marker) {
            let rest = &text[start + marker.len()..];
            return Some(rest.lines().next().unwrap_or_default().trim().to_owned());
        }
    }
    None
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxgc_formats::Api;
    use serde_json::json;

    fn headers(pairs: &[(&str, &str)]) -> axum::http::HeaderMap {
        let mut h = axum::http::HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                axum::http::HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    fn request(api: Api, body: Value) -> ApiRequest {
        ApiRequest { api, body }
    }

    #[test]
    fn tenants_are_keyed_hashes_of_the_credential() {
        let secret = TenantSecret::from_text("s");
        let alice = secret.tenant(&headers(&[("authorization", "Bearer sk-alice")]));
        let alice_again = secret.tenant(&headers(&[("x-api-key", "sk-alice")]));
        let bob = secret.tenant(&headers(&[("authorization", "Bearer sk-bob")]));
        assert_eq!(alice, alice_again, "the same key by either header");
        assert_ne!(alice, bob);
        assert!(!alice.as_str().contains("alice"));
        assert_eq!(alice.as_str().len(), 16);
        assert_ne!(
            TenantSecret::from_text("other").tenant(&headers(&[("x-api-key", "sk-alice")])),
            alice,
            "keyed by the server's secret"
        );
        assert_eq!(secret.tenant(&headers(&[])).as_str(), "anonymous");
        let hex = secret.to_hex();
        assert_eq!(TenantSecret::from_hex(&hex).unwrap().to_hex(), hex);
    }

    #[test]
    fn a_session_header_selects_only_within_its_tenant() {
        let secret = TenantSecret::from_text("s");
        let alice = secret.tenant(&headers(&[("x-api-key", "sk-alice")]));
        let bob = secret.tenant(&headers(&[("x-api-key", "sk-bob")]));
        let a = named_session(&alice, "alice");
        let b = named_session(&bob, "alice");
        assert_ne!(a, b, "Bob naming Alice's session gets his own");
        assert!(alice.owns(&a) && !bob.owns(&a));
        // No client text reaches the key: `foo#agent` is not another kind of key.
        let odd = named_session(&alice, "foo#agent");
        assert!(!odd.as_str().contains('#') && !odd.as_str().contains("foo"));
    }

    #[test]
    fn clients_own_ids_name_their_sessions() {
        let t = TenantSecret::from_text("s").tenant(&headers(&[]));
        let codex = |key: &str, task: &str| {
            request(
                Api::Responses,
                json!({"model": "gpt-5", "prompt_cache_key": key, "input": [
                    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "<environment_context>\n  <cwd>/w</cwd>\n</environment_context>"}]},
                    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": task}]}
                ]}),
            )
        };
        // Two Codex sessions in one directory: told apart by their own keys.
        let none = headers(&[]);
        assert_ne!(
            session(&t, &codex("k1", "same"), &none),
            session(&t, &codex("k2", "same"), &none)
        );
        // One key, two conversations (Codex's review or compaction task beside the main
        // one): apart, each with its own lineage.
        assert_ne!(
            session(&t, &codex("k1", "a"), &none),
            session(&t, &codex("k1", "b"), &none),
        );
        // One conversation growing: one session.
        let mut grown = codex("k1", "a");
        grown.body["input"].as_array_mut().unwrap().push(
            json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}),
        );
        assert_eq!(
            session(&t, &codex("k1", "a"), &none),
            session(&t, &grown, &none)
        );
        let by_header = headers(&[("session_id", "abc")]);
        assert_ne!(
            session(&t, &codex("k1", "a"), &by_header),
            session(&t, &codex("k1", "a"), &none)
        );
        // Claude Code: both shapes of metadata.user_id.
        let claude = |user_id: &str| {
            request(
                Api::Messages,
                json!({"model": "c", "metadata": {"user_id": user_id}, "messages": [{"role": "user", "content": "hi"}]}),
            )
        };
        let new = claude(r#"{"device_id":"d","account_uuid":"","session_id":"s-1"}"#);
        let old = claude("user_abc_account_def_session_s-1");
        assert_eq!(session(&t, &new, &none), session(&t, &old, &none));
        assert_ne!(
            session(&t, &new, &none),
            session(&t, &claude(r#"{"session_id":"s-2"}"#), &none)
        );
        // Defect guarded: Claude Code's sub-agents (and its side requests) send the main
        // agent's session id; filed as one session, each request's history ended the other's
        // lineage, and events ran again and again. Now each conversation is its own session.
        let sub_agent = request(
            Api::Messages,
            json!({"model": "c", "metadata": {"user_id": "user_abc_account_def_session_s-1"},
                "system": "You are a sub-agent for Claude Code.",
                "messages": [{"role": "user", "content": "Find where the config is parsed."}]}),
        );
        assert_ne!(session(&t, &sub_agent, &none), session(&t, &old, &none));
    }

    #[test]
    fn without_ids_the_start_tells_sessions_apart_past_boilerplate() {
        let t = TenantSecret::from_text("s").tenant(&headers(&[]));
        let none = headers(&[]);
        // Claude Code: the reminder first, the directory after the first user message.
        let claude = |task: &str, dir: &str| {
            request(
                Api::Messages,
                json!({"model": "c", "system": "You are Claude Code.", "messages": [
                    {"role": "user", "content": [
                        {"type": "text", "text": "<system-reminder>\nAttribution...\n</system-reminder>\n"},
                        {"type": "text", "text": task}
                    ]},
                    {"role": "system", "content": [{"type": "text", "text": format!("# Environment\n - Primary working directory: {dir}\n")}]}
                ]}),
            )
        };
        assert_ne!(
            session(&t, &claude("fix a", "/w"), &none),
            session(&t, &claude("fix b", "/w"), &none)
        );
        assert_ne!(
            session(&t, &claude("fix a", "/w1"), &none),
            session(&t, &claude("fix a", "/w2"), &none),
            "one prompt in two directories"
        );
        assert_eq!(
            session(&t, &claude("fix a", "/w"), &none),
            session(&t, &claude("fix a", "/w"), &none)
        );
    }

    /// The first request bodies real clients sent (`../shared/data/requests`).
    fn real_request(name: &str) -> Option<Value> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/data/requests")
            .join(name);
        match std::fs::read(&path) {
            Ok(bytes) => Some(serde_json::from_slice::<Value>(&bytes).ok()?["body"].clone()),
            Err(_) => {
                assert!(
                    std::env::var("CI").is_err(),
                    "{} is missing on CI",
                    path.display()
                );
                None
            }
        }
    }

    #[test]
    fn real_clients_first_requests_name_their_sessions() {
        let t = TenantSecret::from_text("s").tenant(&headers(&[("x-api-key", "k")]));
        let none = headers(&[]);
        let Some(claude) = real_request("claude-code-2.1.328-messages.json") else {
            return;
        };
        let Some(codex) = real_request("codex-0.169.0-responses.json") else {
            return;
        };
        // Two concurrent sessions of each client: same prompt, their own ids.
        let mut other_claude = claude.clone();
        let user_id = other_claude["metadata"]["user_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let session = claude_code_session(&claude).unwrap();
        other_claude["metadata"]["user_id"] =
            json!(user_id.replace(&session, "00000000-0000-4000-8000-000000000000"));
        let a = super::session(&t, &request(Api::Messages, claude.clone()), &none);
        let b = super::session(&t, &request(Api::Messages, other_claude), &none);
        assert_ne!(a, b);
        assert!(a.as_str().contains(".c-"), "from the client's own id: {a}");
        let mut other_codex = codex.clone();
        other_codex["prompt_cache_key"] = json!("01a20413-0000-7000-8000-000000000000");
        let c = super::session(&t, &request(Api::Responses, codex.clone()), &none);
        let d = super::session(&t, &request(Api::Responses, other_codex), &none);
        assert_ne!(c, d);
        // Without their ids, the start still tells different requests apart, past the
        // environment and reminders both clients put first.
        let strip = |mut v: Value| {
            if let Some(o) = v.as_object_mut() {
                o.remove("metadata");
                o.remove("prompt_cache_key");
            }
            v
        };
        let claude_start = conversation_start(&strip(claude.clone()));
        assert!(claude_start.contains("say hello"), "the user's request");
        assert!(claude_start.contains("/home/dev/project"), "the directory");
        let codex_start = conversation_start(&strip(codex.clone()));
        assert!(codex_start.contains("say hello") && codex_start.contains("/home/dev/project"));
    }

    /// Codex names itself in its `originator` header (and its user agent); the lab's table has
    /// cache values of its own for it. Another client's request has none.
    #[test]
    fn codex_is_told_by_its_headers() {
        let mut headers = axum::http::HeaderMap::new();
        assert_eq!(client_of(&headers), None);
        headers.insert("user-agent", "claude-cli/2.1.328".parse().unwrap());
        assert_eq!(client_of(&headers), None);
        headers.insert("originator", "codex_exec".parse().unwrap());
        assert_eq!(client_of(&headers), Some("codex"));
    }
}
