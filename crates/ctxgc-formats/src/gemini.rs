//! Gemini `generateContent` request bodies -> the core model.
//!
//! A body holds `contents` (turns of role `user` or `model`, each a list of `parts`) and the
//! system prompt outside them (`systemInstruction`). A model turn's `functionCall` parts are
//! tool calls; the next user turn answers them with as many `functionResponse` parts. Gemini
//! pairs them by position and name, and ids are optional (the API rarely sends any), so the
//! neutral ids are made here:
//!
//! - a call's id is its own `id`, else `gc-{hash of its turn's parts}-{k}` (its index among the
//!   turn's calls): stable while the turn is unchanged, and distinct between turns, which
//!   differ at least by their thought signatures;
//! - a response takes the id of the call it answers: the call with its `id`, else the next
//!   unanswered call of the same name, else the next unanswered call. A response with no call
//!   before it keeps its own `id`, else `{name}#{k}`.
//!
//! As with Anthropic, a user turn's responses become one [`Role::Tool`] message each, followed
//! by the rest of its parts; `thought` parts and other parts are kept as opaque blocks. The
//! text of a response is its `response` object's one string field (`output`, `result`,
//! `content`, `error`: what agents put there), else the object as JSON.

use std::borrow::Cow;

use ctxgc_core::tokens::ProviderFamily;
use ctxgc_core::{Block, ContentId, Message, Role, ToolCall, ToolResult, Transcript};
use serde_json::{Value, json};

use crate::wire_api::{
    CacheHint, Kind, Origin, ResponseCall, ResponseEvent, ResultSlot, Upstream, Usage, View,
    WireApi, drop_shown_parts, place_in_turns,
};
use crate::{Api, FormatError};

/// The neutral ids of a model turn's calls, in order.
pub fn call_ids(turn: &Value) -> Vec<(String, String)> {
    let parts = turn["parts"].as_array().map_or(&[][..], Vec::as_slice);
    let calls: Vec<&Value> = parts.iter().filter_map(|p| p.get("functionCall")).collect();
    if calls.is_empty() {
        return Vec::new();
    }
    let hash = ContentId::of(turn["parts"].to_string().as_bytes());
    calls
        .iter()
        .enumerate()
        .map(|(k, call)| {
            let id = call["id"]
                .as_str()
                .filter(|id| !id.is_empty())
                .map_or_else(|| format!("gc-{hash}-{k}"), str::to_owned);
            (id, call["name"].as_str().unwrap_or_default().to_owned())
        })
        .collect()
}

/// The neutral ids of a user turn's responses, given the calls of the turn before it (empty
/// when it was no model turn with calls).
pub fn response_ids(turn: &Value, calls: &[(String, String)]) -> Vec<String> {
    let responses: Vec<&Value> = turn["parts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("functionResponse"))
        .collect();
    let mut answered = vec![false; calls.len()];
    let mut ids = Vec::with_capacity(responses.len());
    for (k, r) in responses.iter().enumerate() {
        let own = r["id"].as_str().filter(|id| !id.is_empty());
        let name = r["name"].as_str().unwrap_or_default();
        let open = |c: &usize| !answered[*c];
        let found = own
            .and_then(|id| calls.iter().position(|(c, _)| c == id))
            .filter(open)
            .or_else(|| (0..calls.len()).filter(open).find(|&c| calls[c].1 == name))
            .or_else(|| (0..calls.len()).find(open));
        ids.push(match found {
            Some(c) => {
                answered[c] = true;
                calls[c].0.clone()
            }
            None => own.map_or_else(|| format!("{name}#{k}"), str::to_owned),
        });
    }
    ids
}

/// Where a response's text is: the key of its `response` object's one string field, if it has
/// exactly one field and that is a string.
pub fn response_text_key(response: &Value) -> Option<&str> {
    let map = response.as_object()?;
    if map.len() != 1 {
        return None;
    }
    let (key, value) = map.iter().next()?;
    value.is_string().then_some(key.as_str())
}

/// The text of a `functionResponse`'s `response`.
pub fn response_text(response: &Value) -> String {
    match response_text_key(response) {
        Some(key) => response[key].as_str().unwrap_or_default().to_owned(),
        None if response.is_null() => String::new(),
        None => response.to_string(),
    }
}

/// One part of a turn, other than a function call or response.
fn part_to_core(part: &Value) -> Block {
    let thought = part["thought"].as_bool().unwrap_or(false);
    match part.get("text").and_then(Value::as_str) {
        Some(text) if !thought && part.as_object().is_some_and(|m| m.len() == 1) => {
            Block::text(text)
        }
        // Thoughts, signed text, images, files, code and its results: as they came.
        text => Block::Thinking {
            text: text.filter(|_| thought).map(str::to_owned),
            raw: part.clone(),
        },
    }
}

/// Where a neutral message came from: the index of its turn and, for a response, of its part;
/// `None` for the system instruction.
pub type TurnOrigin = Option<(usize, Option<usize>)>;

/// Builds the transcript view of a `generateContent` body, and where each neutral message came
/// from.
pub fn transcript_with_origin(body: &Value) -> Result<(Transcript, Vec<TurnOrigin>), FormatError> {
    let contents = body
        .get("contents")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            FormatError::shape(
                "contents",
                "a generateContent request needs a `contents` array",
            )
        })?;
    let (mut t, origin) = contents_with_origin(body.get("systemInstruction"), contents)?;
    if let Some(tools) = body.get("tools").and_then(Value::as_array) {
        t.tools = tools.clone();
    }
    Ok((t, origin))
}

/// [`transcript_with_origin`] of `contents` under `system`, read where they lie (the proxy's
/// view of a request's turns: no copy of the history first).
pub(crate) fn contents_with_origin(
    system: Option<&Value>,
    contents: &[Value],
) -> Result<(Transcript, Vec<TurnOrigin>), FormatError> {
    let mut t = Transcript::default();
    let mut origin = Vec::new();
    match system {
        None | Some(Value::Null) => {}
        Some(system) => {
            let parts = system
                .get("parts")
                .and_then(Value::as_array)
                .ok_or_else(|| FormatError::shape("systemInstruction", "needs a `parts` array"))?;
            t.messages.push(Message {
                role: Role::System,
                content: parts.iter().map(part_to_core).collect(),
                usage: None,
            });
            origin.push(None);
        }
    }
    let mut calls: Vec<(String, String)> = Vec::new();
    for (i, turn) in contents.iter().enumerate() {
        let at = format!("contents[{i}]");
        let parts = turn
            .get("parts")
            .and_then(Value::as_array)
            .ok_or_else(|| FormatError::shape(&at, "a turn needs a `parts` array"))?;
        // A turn without a role is the user's (as the API reads it).
        match turn.get("role").and_then(Value::as_str).unwrap_or("user") {
            "model" => {
                let ids = call_ids(turn);
                let mut k = 0;
                let content = parts
                    .iter()
                    .map(|part| match part.get("functionCall") {
                        Some(call) => {
                            let id = ids.get(k).map(|(id, _)| id.clone()).unwrap_or_default();
                            k += 1;
                            Block::ToolCall(ToolCall {
                                id,
                                name: call["name"].as_str().unwrap_or_default().to_owned(),
                                arguments: call
                                    .get("args")
                                    .map_or_else(|| "{}".to_owned(), Value::to_string),
                                implicit: false,
                            })
                        }
                        None => part_to_core(part),
                    })
                    .collect();
                t.messages.push(Message {
                    role: Role::Assistant,
                    content,
                    usage: None,
                });
                origin.push(Some((i, None)));
                calls = ids;
            }
            "user" | "function" => {
                let ids = response_ids(turn, &calls);
                let mut k = 0;
                let mut rest = Vec::new();
                for (j, part) in parts.iter().enumerate() {
                    match part.get("functionResponse") {
                        Some(r) => {
                            let response = r.get("response").unwrap_or(&Value::Null);
                            t.messages.push(Message {
                                role: Role::Tool,
                                content: vec![Block::ToolResult(ToolResult {
                                    call_id: ids.get(k).cloned().unwrap_or_default(),
                                    tool_name: r["name"].as_str().map(str::to_owned),
                                    content: vec![Block::text(response_text(response))],
                                    is_error: response.get("error").is_some()
                                        && response_text_key(response) == Some("error"),
                                })],
                                usage: None,
                            });
                            origin.push(Some((i, Some(j))));
                            k += 1;
                        }
                        None => rest.push(part_to_core(part)),
                    }
                }
                if !rest.is_empty() {
                    t.messages.push(Message {
                        role: Role::User,
                        content: rest,
                        usage: None,
                    });
                    origin.push(Some((i, None)));
                }
                calls = Vec::new();
            }
            other => {
                return Err(FormatError::shape(&at, format!("unknown role '{other}'")));
            }
        }
    }
    Ok((t, origin))
}

/// Builds the transcript view of a `generateContent` body.
pub fn transcript_from_body(body: &Value) -> Result<Transcript, FormatError> {
    transcript_with_origin(body).map(|(t, _)| t)
}

/// Gemini's wire format.
pub(crate) struct Gemini;

fn n(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

/// The first candidate's content of a response (or of one streamed chunk).
fn candidate(response: &Value) -> &Value {
    &response["candidates"][0]["content"]
}

/// The `functionResponse` parts of a turn: (part index, the response).
fn responses_of(turn: &Value) -> impl Iterator<Item = (usize, &Value)> {
    turn["parts"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
        .filter_map(|(j, p)| Some((j, p.get("functionResponse")?)))
}

impl WireApi for Gemini {
    fn api(&self) -> Api {
        Api::Gemini
    }
    fn items_key(&self) -> &'static str {
        "contents"
    }
    fn system_key(&self) -> Option<&'static str> {
        Some("systemInstruction")
    }
    fn family(&self) -> ProviderFamily {
        // No public tokenizer: counted like OpenAI's (o200k), whose automatic prefix cache
        // Gemini's implicit caching resembles.
        ProviderFamily::Openai
    }
    fn upstream(&self) -> Upstream {
        Upstream::Gemini
    }
    fn tool_choice_none(&self) -> Value {
        json!({"functionCallingConfig": {"mode": "NONE"}})
    }
    fn set_no_tool_calls(&self, body: &mut Value) {
        body["toolConfig"] = self.tool_choice_none();
    }
    fn user_text_item(&self, text: &str) -> Value {
        json!({"role": "user", "parts": [{"text": text}]})
    }
    fn result_part(&self, call_id: &str, text: &str) -> Value {
        json!({"functionResponse": {"id": call_id, "response": {"output": text}}})
    }
    fn result_part_for(&self, call: &ResponseCall, text: &str) -> Value {
        // Named by its function; by id too when the call carried one.
        let mut response = json!({"name": call.name, "response": {"output": text}});
        if let Some(id) = call
            .raw
            .pointer("/functionCall/id")
            .filter(|id| id.is_string())
        {
            response["id"] = id.clone();
        }
        json!({"functionResponse": response})
    }
    fn result_items(&self, parts: Vec<Value>) -> Vec<Value> {
        vec![json!({"role": "user", "parts": parts})]
    }
    fn agent_tools(&self) -> Vec<Value> {
        ctxgc_core::agent_tools::gemini()
    }
    fn is_call_item(&self, item: &Value) -> bool {
        item["role"] == "model" && !call_ids(item).is_empty()
    }
    fn is_result_item(&self, item: &Value) -> bool {
        item["role"] != "model" && responses_of(item).next().is_some()
    }
    fn stream_error(&self, message: &str) -> String {
        format!(
            "data: {}\n\n",
            json!({"error": {"code": 502, "message": message, "status": "UNAVAILABLE"}})
        )
    }
    fn set_result_text(&self, item: &mut Value, block: Option<usize>, text: &str) {
        let Some(j) = block else { return };
        let response = &mut item["parts"][j]["functionResponse"]["response"];
        match response_text_key(response).map(str::to_owned) {
            Some(key) => response[key] = json!(text),
            None => *response = json!({"output": text}),
        }
    }
    fn response_calls(&self, response: &Value) -> Vec<ResponseCall> {
        let content = candidate(response);
        let ids = call_ids(content);
        content["parts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p.get("functionCall").map(|c| (p, c)))
            .zip(ids)
            .map(|((part, call), (id, name))| ResponseCall {
                id,
                name,
                arguments: call.get("args").cloned().unwrap_or_else(|| json!({})),
                raw: part.clone(),
            })
            .collect()
    }
    fn usage_of(&self, u: &Value) -> Usage {
        // The prompt count includes what was read from the cache; thoughts are billed as
        // output.
        let cached = n(u, "cachedContentTokenCount");
        Usage {
            input: n(u, "promptTokenCount").saturating_sub(cached),
            cache_read: cached,
            cache_write: 0,
            cache_write_1h: 0,
            output: n(u, "candidatesTokenCount") + n(u, "thoughtsTokenCount"),
        }
    }
    fn response_event(&self, event: &Value) -> ResponseEvent {
        let usage = event.get("usageMetadata").map(|u| self.usage_of(u));
        let id = event["responseId"].as_str().map(str::to_owned);
        let finished = event["candidates"][0].get("finishReason").is_some();
        match (usage, finished) {
            (usage, true) => ResponseEvent::Completed { id, usage },
            (Some(usage), false) => ResponseEvent::Started {
                id,
                usage: Some(usage),
            },
            (None, false) => ResponseEvent::Other,
        }
    }
    fn response_summary(&self, response: &Value) -> (Option<Usage>, Option<String>) {
        // A stream without `alt=sse` is one JSON array of chunks: the last reports the usage.
        let last = match response {
            Value::Array(chunks) => chunks.iter().rfind(|c| c.get("usageMetadata").is_some()),
            other => Some(other),
        };
        let usage = last
            .and_then(|r| r.get("usageMetadata"))
            .map(|u| self.usage_of(u));
        (usage, None)
    }
    fn response_call_list<'a>(&self, response: &'a mut Value) -> Option<&'a mut Vec<Value>> {
        response
            .pointer_mut("/candidates/0/content/parts")?
            .as_array_mut()
    }
    fn response_items(&self, response: &Value) -> Vec<Value> {
        vec![candidate(response).clone()]
    }
    fn merge_calls(
        &self,
        items: &mut Vec<Value>,
        with_call: &str,
        place: &dyn Fn(Vec<Value>, Kind) -> Vec<Value>,
    ) -> bool {
        // The client's turn is found by its call's id, or by the call it sent back (the same
        // call without ctxgc's beside it: the ids made from a turn's parts then differ).
        let Some(i) = items.iter().position(|m| {
            m["role"] == "model" && call_ids(m).iter().any(|(id, _)| id == with_call)
        }) else {
            return false;
        };
        let has_results = items.get(i + 1).is_some_and(|m| self.is_result_item(m));
        if !has_results {
            return false;
        }
        place_in_turns(
            items,
            i,
            "parts",
            (&|p| p.get("functionCall").is_some(), &|p| {
                p.get("functionResponse").is_some()
            }),
            place,
        );
        true
    }
    fn drop_repeated_round(&self, items: &mut Vec<Value>, after: usize, round: &[Value]) {
        drop_shown_parts(items, after, round, ("model", "parts"), &|p| {
            p.get("functionCall").is_some()
        });
    }
    fn cache_hint(&self) -> CacheHint {
        CacheHint::Implicit
    }
    fn calls_in<'a>(&self, item: &'a Value) -> Vec<(&'a str, &'a str)> {
        // Only calls that carry their own id: the others' ids are made ([`call_ids`]).
        item["parts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| {
                let call = p.get("functionCall")?;
                Some((call["id"].as_str()?, call["name"].as_str()?))
            })
            .collect()
    }
    fn results_in<'a>(&self, item: &'a Value) -> Vec<(Option<&'a str>, &'a Value, String)> {
        responses_of(item)
            .filter_map(|(j, r)| {
                let (content, pointer) = text_slot(j, r)?;
                Some((r["id"].as_str(), content, pointer))
            })
            .collect()
    }
    fn result_slots<'a>(&self, items: &'a [Value], i: usize) -> Vec<ResultSlot<'a>> {
        let item = &items[i];
        if item["role"] == "model" {
            return Vec::new();
        }
        let calls = i
            .checked_sub(1)
            .map(|before| &items[before])
            .filter(|before| before["role"] == "model")
            .map(call_ids)
            .unwrap_or_default();
        let ids = response_ids(item, &calls);
        responses_of(item)
            .zip(ids)
            .filter_map(|((j, r), id)| {
                let (content, pointer) = text_slot(j, r)?;
                Some(ResultSlot {
                    call_id: Some(Cow::Owned(id)),
                    tool: r["name"].as_str(),
                    content,
                    pointer,
                })
            })
            .collect()
    }
    fn set_call_arguments(&self, item: &mut Value, call_id: &str, arguments: &str) {
        let Ok(args) = serde_json::from_str::<Value>(arguments) else {
            return;
        };
        let ids = call_ids(item);
        let Some(k) = ids.iter().position(|(id, _)| id == call_id) else {
            return;
        };
        if let Some(call) = item["parts"]
            .as_array_mut()
            .into_iter()
            .flatten()
            .filter_map(|p| p.get_mut("functionCall"))
            .nth(k)
        {
            call["args"] = args;
        }
    }
    fn without_results(&self, item: &Value) -> Value {
        let mut item = item.clone();
        if let Some(parts) = item["parts"].as_array_mut() {
            parts.retain(|p| p.get("functionResponse").is_none());
        }
        item
    }
    fn for_each_result(&self, item: &mut Value, f: &mut dyn FnMut(Option<&str>, &mut Value)) {
        if item["role"] == "model" {
            return;
        }
        for part in item["parts"].as_array_mut().into_iter().flatten() {
            let Some(r) = part.get_mut("functionResponse") else {
                continue;
            };
            let id = r["id"].as_str().map(str::to_owned);
            if let Some(key) = response_text_key(&r["response"]).map(str::to_owned) {
                f(id.as_deref(), &mut r["response"][key]);
            }
        }
    }
    fn last_result<'a>(&self, item: &'a Value) -> Option<(&'a str, &'a Value)> {
        if item["role"] == "model" {
            return None;
        }
        let (_, r) = responses_of(item).last()?;
        let key = response_text_key(&r["response"])?;
        Some((r["id"].as_str()?, &r["response"][key]))
    }
    fn view(&self, system: Option<&Value>, items: &[Value]) -> Option<View> {
        let system = system.filter(|s| !s.is_null());
        let (t, origin) = contents_with_origin(system, items).ok()?;
        let origin = origin
            .into_iter()
            .map(|o| {
                o.map(|(i, block)| Origin {
                    first: i,
                    last: i,
                    block,
                })
            })
            .collect();
        Some(View {
            messages: t.messages,
            origin,
        })
    }
}

/// The text of response `r`, part `j` of its turn, and its JSON pointer within the turn, when
/// the response holds its text in one string field.
fn text_slot(j: usize, r: &Value) -> Option<(&Value, String)> {
    let key = response_text_key(&r["response"])?;
    let pointer = format!(
        "/parts/{j}/functionResponse/response/{}",
        pointer_token(key)
    );
    Some((&r["response"][key], pointer))
}

/// A key as a JSON pointer token.
fn pointer_token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn body() -> Value {
        json!({
            "systemInstruction": {"parts": [{"text": "You are a coding agent."}]},
            "contents": [
                {"role": "user", "parts": [{"text": "Fix the build."}]},
                {"role": "model", "parts": [
                    {"text": "Let me look.", "thought": true},
                    {"functionCall": {"name": "run_shell_command", "args": {"command": "make"}}, "thoughtSignature": "c2ln"},
                    {"functionCall": {"name": "read_file", "args": {"path": "a.rs"}}}
                ]},
                {"role": "user", "parts": [
                    {"functionResponse": {"name": "read_file", "response": {"output": "fn main() {}"}}},
                    {"functionResponse": {"id": "whatever", "name": "run_shell_command", "response": {"output": "error[E0308]"}}}
                ]},
                {"role": "model", "parts": [{"text": "Fixed."}]}
            ]
        })
    }

    #[test]
    fn responses_pair_with_their_calls_by_name_and_order() {
        let t = transcript_from_body(&body()).unwrap();
        let roles: Vec<Role> = t.messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [
                Role::System,
                Role::User,
                Role::Assistant,
                Role::Tool,
                Role::Tool,
                Role::Assistant
            ]
        );
        let calls: Vec<(String, String)> = t.messages[2]
            .tool_calls()
            .map(|c| (c.id.clone(), c.name.clone()))
            .collect();
        let results: Vec<(String, String)> = t.messages[3..5]
            .iter()
            .flat_map(|m| m.tool_results())
            .map(|r| (r.call_id.clone(), r.text()))
            .collect();
        assert_eq!(
            results[0].0, calls[1].0,
            "read_file answers the second call"
        );
        assert_eq!(results[1].0, calls[0].0, "run_shell_command the first");
        assert_eq!(results[1].1, "error[E0308]");
        assert!(calls[0].0.starts_with("gc-"), "{calls:?}");
        assert_ne!(calls[0].0, calls[1].0);
        ctxgc_core::engine::integrity::check(&t.messages).unwrap();
    }

    #[test]
    fn call_ids_are_stable_and_their_own_ids_win() {
        let b = body();
        assert_eq!(
            call_ids(&b["contents"][1]),
            call_ids(&b["contents"][1].clone())
        );
        let with_ids = json!({"role": "model", "parts": [{"functionCall": {"id": "c1", "name": "x", "args": {}}}]});
        assert_eq!(call_ids(&with_ids), vec![("c1".to_owned(), "x".to_owned())]);
    }

    #[test]
    fn a_response_text_is_its_one_string_field_else_its_json() {
        assert_eq!(response_text(&json!({"output": "ok"})), "ok");
        assert_eq!(
            response_text(&json!({"a": 1, "b": "x"})),
            r#"{"a":1,"b":"x"}"#
        );
        assert_eq!(response_text_key(&json!({"result": "r"})), Some("result"));
    }

    #[test]
    fn a_body_without_contents_is_named() {
        let e = transcript_from_body(&json!({"model": "x"})).unwrap_err();
        assert!(e.to_string().contains("contents"), "{e}");
    }
}
