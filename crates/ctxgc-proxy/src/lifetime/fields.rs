//! The prompt cache's lifetime on the wire: the decisions of [`ctxgc_core::cache_life`], which
//! the replay lab prices, applied to a request's cache fields. Anthropic: every `cache_control`
//! breakpoint of the request gets `"ttl": "1h"` when the hour is cheaper under the session's
//! pauses (all of them at once, so no hour comes after five minutes, and never a breakpoint
//! added or a TTL the client chose shortened). OpenAI: `prompt_cache_retention: "24h"` where
//! the model offers it and the client set none; from GPT-5.6 on (which refuses the retention and
//! matches a cached prefix only at a breakpoint), an explicit `prompt_cache_breakpoint` at the
//! end of the stable prefix (the leading system and developer messages and the first user
//! message after them) where the client placed none. Nothing the model reads changes.

use std::time::{Duration, Instant};

use ctxgc_core::cache_life::{self, CacheSettings, Pauses};
use ctxgc_core::provider_cache;
use ctxgc_formats::ApiRequest;
use ctxgc_formats::wire_api::CacheHint;
use serde_json::Value;

use crate::wire::splice_json;

/// What a session's cache lifetime depends on, kept per session.
#[derive(Debug, Clone, Default)]
pub(crate) struct LifeState {
    pauses: Pauses,
    last_at: Option<Instant>,
    /// The latest request asked for the long lifetime (the client's or ctxgc's choice).
    long_in_force: bool,
    /// The latest request's prompt, in bytes.
    last_prompt: Option<u64>,
    /// How long the latest request's model keeps its entries at least, whatever was asked
    /// (GPT-5.6's 30 minutes).
    model_min_secs: Option<u64>,
}

impl LifeState {
    /// The lifetime in force before this request (the previous request's), as the engine's
    /// idle judgment needs it: `Some(secs)` when that request asked for the long lifetime.
    /// The model's own longer lifetime counts too (GPT-5.6's 30 minutes).
    pub(crate) fn long_secs(&self, hint: CacheHint) -> Option<u64> {
        self.long_in_force
            .then_some(match hint {
                CacheHint::Breakpoints => provider_cache::ANTHROPIC_LONG_TTL_SECS,
                _ => provider_cache::OPENAI_EXTENDED_RETENTION_SECS,
            })
            .or(self.model_min_secs)
    }

    /// What a keep-alive after the latest request depends on: the session's pauses, whether
    /// that request asked for the long lifetime, the keep-alives `sent` so far, and what the
    /// pipeline found the event an expiry makes free would leave (`kept_if_cold`).
    pub(crate) fn for_keepalive(
        &self,
        sent: u32,
        kept_if_cold: f64,
    ) -> crate::lifetime::keepalive::Lifetime {
        crate::lifetime::keepalive::Lifetime {
            pauses: self.pauses.clone(),
            long: self.long_in_force,
            sent,
            kept_if_cold,
        }
    }

    /// The pause since the previous request (noted), and whether that request asked for the
    /// long lifetime.
    fn arrive(&mut self, now: Instant, second: Duration) -> (Option<u64>, bool) {
        let idle = self
            .last_at
            .map(|t| crate::lifetime::idle::clock_secs(now.duration_since(t), second));
        if let Some(idle) = idle {
            self.pauses.note(idle);
        }
        self.last_at = Some(now);
        (idle, self.long_in_force)
    }
}

/// The cache fields ctxgc set on a request, and the body without them (what is resent when
/// the upstream rejects them).
pub(crate) struct CacheEdit {
    /// The body as it was before the cache fields were set: the rewritten bytes, or `None`
    /// for the client's own (which the handler still holds: no copy of a large body is made
    /// for a resend that almost never happens).
    pub(crate) without: Option<Vec<u8>>,
    /// What was set, for logs and metrics: `ttl_1h`, `retention_24h` or `breakpoint`.
    pub(crate) what: &'static str,
}

/// Where the request's Anthropic breakpoints are: JSON pointers to each `cache_control`, and
/// whether any asks for the hour already.
fn breakpoints(body: &Value) -> (Vec<String>, bool) {
    let mut found = Vec::new();
    let mut long = false;
    let mut visit = |pointer: String, value: &Value| {
        if let Some(cc) = value.get("cache_control").filter(|c| c.is_object()) {
            long |= cc["ttl"] == "1h";
            found.push(format!("{pointer}/cache_control"));
        }
    };
    visit(String::new(), body);
    for key in ["tools", "system"] {
        for (i, item) in body[key].as_array().into_iter().flatten().enumerate() {
            visit(format!("/{key}/{i}"), item);
        }
    }
    for (i, message) in body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        visit(format!("/messages/{i}"), message);
        for (k, block) in message["content"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            visit(format!("/messages/{i}/content/{k}"), block);
        }
    }
    (found, long)
}

/// What a request says about its own cache lifetime, and where its breakpoints are.
pub(crate) struct Asked {
    pointers: Vec<String>,
    hint: CacheHint,
    /// Its size (bytes): what the next request would read, and, against the previous one's,
    /// what this one writes.
    prompt: u64,
    /// It asked for the long lifetime itself.
    client_long: bool,
    /// It has somewhere to put a TTL (Anthropic breakpoints).
    has_breakpoints: bool,
    /// It set OpenAI's retention itself, or the options that replace it (GPT-5.6 on).
    client_retention: bool,
    /// The client changed its fixed part: it writes every message, whatever the pause.
    rewritten: bool,
    model: String,
    /// GPT-5.6 on: where its stable prefix ends, as the content that would carry the
    /// breakpoint, when the client manages none itself.
    stable_end: Option<StableEnd>,
}

/// The content of the message that ends the stable prefix (the first user message after the
/// leading system and developer ones, else the last of those), with an explicit breakpoint on
/// its last text block (a string content becomes one text block).
struct StableEnd {
    pointer: String,
    content: Value,
}

/// Where an OpenAI request's stable prefix ends ([`StableEnd`]), unless the client manages
/// breakpoints itself (it placed one, or turned the implicit one off). The `instructions`
/// field cannot carry one: only the items can.
fn stable_end(request: &ApiRequest) -> Option<StableEnd> {
    use ctxgc_formats::Api;
    let (key, text_type) = match request.api {
        Api::ChatCompletions => ("messages", "text"),
        Api::Responses => ("input", "input_text"),
        _ => return None,
    };
    let body = &request.body;
    if body["prompt_cache_options"]["mode"] == "explicit" {
        return None;
    }
    let items = body[key].as_array()?;
    let marked = |item: &Value| {
        item["content"].as_array().is_some_and(|parts| {
            parts
                .iter()
                .any(|p| p.get("prompt_cache_breakpoint").is_some())
        })
    };
    if items.iter().any(marked) {
        return None;
    }
    let roles = items.iter().map(|item| {
        if item.get("type").is_some_and(|t| t != "message") {
            return None;
        }
        match item["role"].as_str()? {
            "system" | "developer" => Some(ctxgc_core::Role::System),
            "user" => Some(ctxgc_core::Role::User),
            _ => None,
        }
    });
    let last = cache_life::stable_prefix_end(roles)?;
    let breakpoint = serde_json::json!({"mode": "explicit"});
    let content = match &items[last]["content"] {
        Value::String(text) if !text.is_empty() => serde_json::json!([
            {"type": text_type, "text": text, "prompt_cache_breakpoint": breakpoint}
        ]),
        Value::Array(parts) => {
            let at = parts.iter().rposition(|p| p["type"] == text_type)?;
            let mut parts = parts.clone();
            parts[at]["prompt_cache_breakpoint"] = breakpoint;
            Value::Array(parts)
        }
        _ => return None,
    };
    Some(StableEnd {
        pointer: format!("/{key}/{last}/content"),
        content,
    })
}

/// The cache field to set on a request arriving at `now` (on a clock whose second lasts
/// `second`), if any, from the session's pauses (noted here); the state remembers what the
/// request asked for.
pub(crate) fn decide(
    settings: &CacheSettings,
    life: &mut LifeState,
    (now, second): (Instant, Duration),
    asked: &Asked,
) -> Option<&'static str> {
    let (idle, was_long) = life.arrive(now, second);
    match asked.hint {
        CacheHint::Breakpoints => {
            let ttl = if was_long {
                provider_cache::ANTHROPIC_LONG_TTL_SECS
            } else {
                provider_cache::ANTHROPIC_TTL_SECS
            };
            let cold = asked.rewritten || idle.is_some_and(|i| i > ttl);
            let written = cache_life::written_tokens(asked.prompt, life.last_prompt, cold);
            let d = cache_life::anthropic_ttl(
                settings,
                &life.pauses,
                asked.prompt,
                written,
                asked.client_long,
            );
            life.last_prompt = Some(asked.prompt);
            life.long_in_force = asked.client_long || (d.long && asked.has_breakpoints);
            (d.long && !asked.client_long && asked.has_breakpoints).then_some("ttl_1h")
        }
        CacheHint::PromptCacheKey => {
            let retention = cache_life::openai_retention(
                settings.retention,
                &asked.model,
                asked.client_retention,
            );
            life.last_prompt = Some(asked.prompt);
            life.long_in_force = retention.is_some() || asked.client_long;
            life.model_min_secs = cache_life::model_min_lifetime_secs(&asked.model);
            let breakpoint = asked.stable_end.is_some()
                && cache_life::openai_breakpoint(settings.breakpoints, &asked.model, false);
            retention
                .map(|_| "retention_24h")
                .or(breakpoint.then_some("breakpoint"))
        }
        _ => None,
    }
}

/// What `request` (whose bytes about to be sent are `body_len` long) says about its cache
/// lifetime: read before the session's state is locked for [`decide`]; `rewritten` when the
/// client changed its fixed part (the request writes all its messages).
pub(crate) fn asked(request: &ApiRequest, body_len: usize, rewritten: bool) -> Asked {
    let hint = request.api.wire().cache_hint();
    let (pointers, client_long) = match hint {
        CacheHint::Breakpoints => breakpoints(&request.body),
        _ => (Vec::new(), request.body["prompt_cache_retention"] == "24h"),
    };
    Asked {
        hint,
        prompt: body_len as u64,
        client_long,
        has_breakpoints: !pointers.is_empty(),
        // `prompt_cache_options` (GPT-5.6 on) and the retention together are refused.
        client_retention: request.body.get("prompt_cache_retention").is_some()
            || request.body.get("prompt_cache_options").is_some(),
        rewritten,
        model: request.body["model"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        pointers,
        // Looked for only on the models that take breakpoints.
        stable_end: request.body["model"]
            .as_str()
            .is_some_and(cache_life::takes_explicit_breakpoints)
            .then(|| stable_end(request))
            .flatten(),
    }
}

/// `body`, the bytes about to be sent (the rewritten ones, else the client's), with the cache
/// field [`decide`] chose (`what`) set.
pub(crate) fn edit(
    request: &mut ApiRequest,
    asked: &Asked,
    what: &'static str,
    body: &[u8],
) -> Vec<u8> {
    if what == "ttl_1h" {
        with_hour(request, &asked.pointers, body)
    } else if let ("breakpoint", Some(end)) = (what, &asked.stable_end) {
        let content = serde_json::to_vec(&end.content).unwrap_or_default();
        splice_json::splice(body, &[(end.pointer.as_str(), &content)], None).unwrap_or_else(|| {
            if let Some(node) = request.body.pointer_mut(&end.pointer) {
                *node = end.content.clone();
            }
            request.to_bytes()
        })
    } else {
        splice_json::append_member(body, "prompt_cache_retention", "24h").unwrap_or_else(|| {
            request.body["prompt_cache_retention"] = Value::from("24h");
            request.to_bytes()
        })
    }
}

/// `body` with every breakpoint at `pointers` asking for the hour: each as the client wrote it,
/// its `ttl` set (other fields kept), spliced into the bytes.
fn with_hour(request: &mut ApiRequest, pointers: &[String], body: &[u8]) -> Vec<u8> {
    let hours: Vec<Vec<u8>> = pointers
        .iter()
        .map(|p| {
            let mut cc = request.body.pointer(p).cloned().unwrap_or_default();
            if let Value::Object(map) = &mut cc {
                map.insert("ttl".into(), Value::from("1h"));
            }
            serde_json::to_vec(&cc).unwrap_or_default()
        })
        .collect();
    let edits: Vec<(&str, &[u8])> = pointers
        .iter()
        .zip(&hours)
        .map(|(p, h)| (p.as_str(), h.as_slice()))
        .collect();
    splice_json::splice(body, &edits, None).unwrap_or_else(|| {
        for p in pointers {
            if let Some(Value::Object(cc)) = request.body.pointer_mut(p) {
                cc.insert("ttl".into(), Value::from("1h"));
            }
        }
        request.to_bytes()
    })
}

/// Whether an upstream's 400 names a cache field ctxgc sets: the request is then resent without
/// it (a model without the 24-hour retention, a gateway that refuses unknown fields or the
/// cache key, a TTL the provider does not take).
pub(crate) fn rejects_cache_field(body: &[u8]) -> bool {
    let text = String::from_utf8_lossy(&body[..body.len().min(8_192)]).to_ascii_lowercase();
    // Anthropic names a TTL as `...cache_control.ttl`; a bare "ttl" would match "little".
    [
        "prompt_cache_retention",
        "prompt_cache_breakpoint",
        "prompt_cache_key",
        "cache_control",
        "extended prompt caching",
    ]
    .iter()
    .any(|field| text.contains(field))
}

/// Whether a refusal ([`rejects_cache_field`]) may name a field the rewrite set rather than
/// the lifetime decisions (the session's `prompt_cache_key`, Anthropic breakpoints, which a TTL
/// shares a name with): the request then goes again as the client sent it.
pub(crate) fn names_rewrite_field(body: &[u8]) -> bool {
    let text = String::from_utf8_lossy(&body[..body.len().min(8_192)]).to_ascii_lowercase();
    text.contains("prompt_cache_key") || text.contains("cache_control")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn every_breakpoint_is_found_with_the_ttls_asked() {
        let body = json!({
            "tools": [{"name": "t", "cache_control": {"type": "ephemeral"}}],
            "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "cache_control", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}]
        });
        let (found, long) = breakpoints(&body);
        assert_eq!(
            found,
            [
                "/tools/0/cache_control",
                "/system/0/cache_control",
                "/messages/0/content/0/cache_control"
            ]
        );
        assert!(long);
        assert!(!breakpoints(&json!({"messages": []})).1);
    }

    /// An Anthropic session whose every fifth request comes ten minutes after the one before:
    /// the first requests keep five minutes, later ones ask for the hour; with `[cache] ttl =
    /// "client"` none does; a client's own hour is never touched.
    #[test]
    fn the_hour_is_set_once_the_session_has_paused() {
        let run = |settings: &CacheSettings, client_long: bool| -> Vec<Option<&'static str>> {
            let mut life = LifeState::default();
            let mut now = Instant::now();
            (0..30)
                .map(|turn| {
                    now += Duration::from_secs(if turn % 5 == 4 { 600 } else { 5 });
                    let asked = Asked {
                        pointers: vec!["/system/0/cache_control".into()],
                        hint: CacheHint::Breakpoints,
                        prompt: 200_000 + turn * 4_000,
                        client_long,
                        has_breakpoints: true,
                        client_retention: false,
                        rewritten: false,
                        model: "claude-sonnet-4-5".into(),
                        stable_end: None,
                    };
                    decide(settings, &mut life, (now, SECOND), &asked)
                })
                .collect()
        };
        let auto = run(&CacheSettings::default(), false);
        assert_eq!(auto[0], None, "a first request writes its whole prompt");
        assert!(auto[25..].iter().all(|d| *d == Some("ttl_1h")), "{auto:?}");
        let client = CacheSettings {
            ttl: cache_life::TtlMode::Client,
            ..CacheSettings::default()
        };
        assert!(run(&client, false).iter().all(Option::is_none));
        assert!(
            run(&CacheSettings::default(), true)
                .iter()
                .all(Option::is_none)
        );
    }

    #[test]
    fn retention_is_set_only_where_the_model_offers_it_and_the_client_set_none() {
        let ask = |model: &str, client_retention| Asked {
            pointers: Vec::new(),
            hint: CacheHint::PromptCacheKey,
            prompt: 1_000,
            client_long: false,
            has_breakpoints: false,
            client_retention,
            rewritten: false,
            model: model.into(),
            stable_end: None,
        };
        let mut life = LifeState::default();
        let s = CacheSettings::default();
        assert_eq!(
            decide(
                &s,
                &mut life,
                (Instant::now(), SECOND),
                &ask("gpt-5.1", false)
            ),
            Some("retention_24h")
        );
        assert!(life.long_in_force);
        assert_eq!(
            decide(
                &s,
                &mut life,
                (Instant::now(), SECOND),
                &ask("gpt-5.1", true)
            ),
            None
        );
        assert_eq!(
            decide(
                &s,
                &mut life,
                (Instant::now(), SECOND),
                &ask("gpt-4o", false)
            ),
            None
        );
        assert_eq!(life.long_secs(CacheHint::PromptCacheKey), None);
    }

    /// GPT-5.6 on answers `prompt_cache_retention` with a 400; its entries live 30 minutes
    /// anyway, which is what the session's idle judgment then counts.
    #[test]
    fn a_gpt_5_6_request_gets_no_retention_and_its_half_hour_is_counted() {
        let request = |body: Value| ApiRequest {
            api: ctxgc_formats::Api::Responses,
            body,
        };
        let plain = request(json!({"model": "gpt-5.6-luna", "input": []}));
        let mut life = LifeState::default();
        let s = CacheSettings::default();
        assert_eq!(
            decide(
                &s,
                &mut life,
                (Instant::now(), SECOND),
                &asked(&plain, 10, false)
            ),
            None
        );
        assert_eq!(life.long_secs(CacheHint::PromptCacheKey), Some(1_800));
        // A GPT-5 request that set the options of the newer models gets no retention either:
        // the two together are refused.
        let options = request(
            json!({"model": "gpt-5.1", "prompt_cache_options": {"mode": "implicit"}, "input": []}),
        );
        assert_eq!(
            decide(
                &s,
                &mut life,
                (Instant::now(), SECOND),
                &asked(&options, 10, false)
            ),
            None
        );
    }

    /// GPT-5.6 on matches a cached prefix only at a breakpoint: the end of the leading system
    /// and developer messages gets one, spliced into the bytes, where the client placed none.
    #[test]
    fn a_gpt_5_6_request_gets_a_breakpoint_at_the_end_of_its_stable_prefix() {
        let s = CacheSettings::default();
        let set = |api, body: Value| {
            let mut request = ApiRequest { api, body };
            let raw = serde_json::to_vec(&request.body).unwrap();
            let asked = asked(&request, raw.len(), false);
            let what = decide(
                &s,
                &mut LifeState::default(),
                (Instant::now(), SECOND),
                &asked,
            )?;
            let out = edit(&mut request, &asked, what, &raw);
            Some((what, serde_json::from_slice::<Value>(&out).unwrap()))
        };
        // Chat Completions: the stable prefix ends with the first user message after the
        // system and developer ones (the task); only its last block changes.
        let chat = json!({"model": "gpt-5.6-terra", "messages": [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "developer", "content": "Rules."},
            {"role": "user", "content": [{"type": "text", "text": "Fix the test."}, {"type": "text", "text": "It is in tests/."}]},
            {"role": "assistant", "content": "On it."}
        ]});
        let (what, out) = set(ctxgc_formats::Api::ChatCompletions, chat.clone()).unwrap();
        assert_eq!(what, "breakpoint");
        let mut expected = chat.clone();
        expected["messages"][2]["content"][1]["prompt_cache_breakpoint"] =
            json!({"mode": "explicit"});
        assert_eq!(out, expected, "only the last block of the task changes");
        // Without a user message after them, the last system message ends it: a string
        // content becomes one text block.
        let system_only = json!({"model": "gpt-5.6-terra", "messages": [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "assistant", "content": "Ready."}
        ]});
        let (_, out) = set(ctxgc_formats::Api::ChatCompletions, system_only).unwrap();
        assert_eq!(
            out["messages"][0]["content"],
            json!([{"type": "text", "text": "You are a coding agent.", "prompt_cache_breakpoint": {"mode": "explicit"}}])
        );
        // Responses (instructions cannot carry one): a string user item becomes an input_text
        // block.
        let responses = json!({"model": "gpt-5.6-sol", "instructions": "Be brief.", "input": [
            {"role": "developer", "content": [{"type": "input_text", "text": "Sandbox: none."}]},
            {"role": "user", "content": "Go."},
            {"role": "user", "content": "And then stop."}
        ]});
        let (_, out) = set(ctxgc_formats::Api::Responses, responses.clone()).unwrap();
        assert_eq!(
            out["input"][1]["content"],
            json!([{"type": "input_text", "text": "Go.", "prompt_cache_breakpoint": {"mode": "explicit"}}])
        );
        assert_eq!(out["input"][0], responses["input"][0]);
        assert_eq!(out["input"][2], responses["input"][2]);
        assert_eq!(out["instructions"], "Be brief.");
        // Nothing where the client manages breakpoints, where no system, developer or user
        // message leads, or before GPT-5.6.
        let mut own = chat.clone();
        own["messages"][2]["content"] = json!([{"type": "text", "text": "Go.", "prompt_cache_breakpoint": {"mode": "explicit"}}]);
        assert!(set(ctxgc_formats::Api::ChatCompletions, own).is_none());
        let mut explicit = chat.clone();
        explicit["prompt_cache_options"] = json!({"mode": "explicit"});
        assert!(set(ctxgc_formats::Api::ChatCompletions, explicit).is_none());
        let assistant_first =
            json!({"model": "gpt-5.6-sol", "input": [{"role": "assistant", "content": "Hi."}]});
        assert!(set(ctxgc_formats::Api::Responses, assistant_first).is_none());
        let mut older = chat;
        older["model"] = json!("gpt-4o");
        assert!(set(ctxgc_formats::Api::ChatCompletions, older).is_none());
    }

    #[test]
    fn a_refused_breakpoint_is_recognised() {
        assert!(rejects_cache_field(
            br#"{"error":{"message":"Unrecognized request argument supplied: prompt_cache_breakpoint","type":"invalid_request_error"}}"#
        ));
    }

    /// The hour is set on each breakpoint where the client put it, its other fields and every
    /// other byte of the body as the client sent them.
    #[test]
    fn the_hour_is_spliced_into_each_breakpoint_keeping_its_fields() {
        let raw = br#"{"model":"claude-sonnet-4-5","system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral","scope":"global"}}],"messages":[{"role":"user","content":[{"type":"text","text":"\"cache_control\": {}","cache_control":{"type":"ephemeral"}}]}]}"#;
        let mut request = ApiRequest::parse(ctxgc_formats::Api::Messages, raw).unwrap();
        let (pointers, long) = breakpoints(&request.body);
        assert!(!long);
        let out = with_hour(&mut request, &pointers, raw);
        let expected = br#"{"model":"claude-sonnet-4-5","system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral","scope":"global","ttl":"1h"}}],"messages":[{"role":"user","content":[{"type":"text","text":"\"cache_control\": {}","cache_control":{"type":"ephemeral","ttl":"1h"}}]}]}"#;
        assert_eq!(
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(expected)
        );
    }

    #[test]
    fn a_400_naming_a_cache_field_is_recognised() {
        assert!(rejects_cache_field(br#"{"error":{"message":"Unrecognized request argument supplied: prompt_cache_retention"}}"#));
        assert!(rejects_cache_field(br#"{"type":"error","error":{"type":"invalid_request_error","message":"messages.0.content.4.cache_control.ttl: a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block."}}"#));
        assert!(!rejects_cache_field(
            br#"{"error":{"message":"prompt is too long"}}"#
        ));
    }
}
