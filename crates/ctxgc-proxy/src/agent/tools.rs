//! `trim_tool_result` and `recall_tool_result` inside the proxy.
//!
//! With `inject_tools`, the proxy adds the two tools to requests that already carry tools. When
//! the model calls them, the proxy runs them itself; the client never sees these calls. What
//! they did is kept per session as an [`AgentState`] and replayed onto every later request, a
//! pure function of the client's history and that state, so the upstream keeps seeing the same
//! prefix:
//! - a trim replaces the client's result (by call id) with the model's summary;
//! - an *exchange* (the model called only internal tools) is inserted after the client item it
//!   followed, recognised by its fingerprint, so a rewound or edited history drops it;
//! - a *merge* (internal calls beside the client's own) puts the internal calls back into that
//!   assistant turn and their results beside the client's results.

use std::collections::BTreeMap;

use ctxgc_core::ContentId;
use ctxgc_core::agent_tools::{self, AgentCall, RECALL_TOOL, TRIM_TOOL};
use ctxgc_core::recall;
use ctxgc_core::store::{SessionId, StateKey, Store};

use crate::error::ProxyError;
use ctxgc_formats::wire_api::Kind;
use ctxgc_formats::{Api, ApiRequest};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where the client's own history ended: an exchange is anchored there.
#[derive(Debug, Clone, Copy)]
pub struct ClientEnd {
    /// Items in the client's history.
    pub(crate) len: usize,
    /// The fingerprint of its last item.
    pub(crate) anchor: Option<u64>,
}

impl ClientEnd {
    /// The end of `request`'s client history (before anything is replayed onto it).
    pub fn of(request: &ApiRequest) -> ClientEnd {
        let key = request.api.wire().items_key();
        let items = request.body.get(key).and_then(Value::as_array);
        ClientEnd {
            len: items.map_or(0, Vec::len),
            anchor: items.and_then(|i| i.last()).map(fingerprint),
        }
    }
}

/// Whether `name` is one of the tools the proxy runs itself.
pub fn is_internal(name: &str) -> bool {
    name == TRIM_TOOL || name == RECALL_TOOL
}

/// The session's agent state from the store (empty when there is none).
pub fn load(store: &dyn Store, session: &SessionId) -> Result<AgentState, ProxyError> {
    load_versioned(store, session).map(|(state, _)| state)
}

/// The session's agent state and the stored text it was read from (`None`: none stored), for
/// [`save_if_unchanged`].
pub fn load_versioned(
    store: &dyn Store,
    session: &SessionId,
) -> Result<(AgentState, Option<String>), ProxyError> {
    let stored = store.get_state(StateKey::Agent(session))?;
    let state = stored
        .as_deref()
        .map(serde_json::from_str)
        .transpose()
        .map_err(|source| ProxyError::Corrupt {
            what: "agent state",
            session: session.to_string(),
            source,
        })?
        .unwrap_or_default();
    Ok((state, stored))
}

/// Stores the session's agent state if the stored one is still `read` (what
/// [`load_versioned`] returned); says whether it did.
pub fn save_if_unchanged(
    store: &dyn Store,
    session: &SessionId,
    read: Option<&str>,
    state: &AgentState,
) -> Result<bool, ProxyError> {
    let json = serde_json::to_string(state).map_err(|source| ProxyError::Serialise {
        what: "agent state",
        source,
    })?;
    store
        .swap_state(StateKey::Agent(session), read, &json)
        .map_err(ProxyError::from)
}

/// What the model did with the internal tools in one session.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentState {
    /// Client results replaced by the model's summary: call id -> the text shown instead.
    #[serde(default)]
    pub trims: BTreeMap<String, String>,
    /// Rounds in which the model called only internal tools.
    #[serde(default)]
    pub exchanges: Vec<Exchange>,
    /// Internal calls the model made beside client calls.
    #[serde(default)]
    pub merges: Vec<Merge>,
}

/// Items inserted after client item `at - 1`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Exchange {
    /// How many client items preceded the exchange.
    pub at: usize,
    /// Fingerprint of client item `at - 1`.
    pub anchor: u64,
    /// The assistant turn and the results, in the API's wire form.
    pub items: Vec<Value>,
}

/// Internal calls and results merged into the client's assistant turn that holds `with_call`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Merge {
    /// A client call id of that turn.
    pub with_call: String,
    /// The internal calls (Chat `tool_calls` entries, Anthropic `tool_use` blocks, Responses
    /// `function_call` items).
    pub calls: Vec<Value>,
    /// Their results (Chat `tool` messages, Anthropic `tool_result` blocks, Responses
    /// `function_call_output` items).
    pub results: Vec<Value>,
    /// Where each internal call stood among all the calls of that turn, so the calls (and
    /// their results) go back in the order the model emitted them (empty: after the client's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub positions: Vec<usize>,
}

impl Merge {
    /// Puts the merge's `ours` (calls or results) into `theirs` (the client's, in order) where
    /// the model had them; without recorded positions, after the client's.
    fn interleave(&self, theirs: Vec<Value>, ours: &[Value]) -> Vec<Value> {
        let mut out = theirs;
        for (k, item) in ours.iter().enumerate() {
            let at = self.positions.get(k).copied().unwrap_or(usize::MAX);
            out.insert(at.min(out.len()), item.clone());
        }
        out
    }
}

/// A tool call the model made (the wire layer's, streamed or complete).
pub use ctxgc_formats::wire_api::ResponseCall as Call;

/// Whether the proxy runs this call (one of its own tools).
pub fn is_internal_call(call: &Call) -> bool {
    is_internal(&call.name)
}

fn items_key(api: Api) -> &'static str {
    api.wire().items_key()
}

/// Fingerprint of a client item, blind to `cache_control` (clients move their breakpoints from
/// request to request).
pub fn fingerprint(item: &Value) -> u64 {
    // Each scalar's JSON text, as `to_string` writes it (stored lineages hold hashes of it),
    // streamed into the hash: a history's tool outputs were each copied and escaped into a new
    // string on every request that checked its lineage.
    fingerprint_with(item, &|h, scalar| {
        let _ = serde_json::to_writer(HashWriter(h), scalar);
    })
}

/// [`fingerprint`], each scalar fed to the hash by `scalar`.
fn fingerprint_with(item: &Value, scalar: &dyn Fn(&mut xxhash_rust::xxh3::Xxh3, &Value)) -> u64 {
    fn feed(
        h: &mut xxhash_rust::xxh3::Xxh3,
        v: &Value,
        scalar: &dyn Fn(&mut xxhash_rust::xxh3::Xxh3, &Value),
    ) {
        match v {
            Value::Object(map) => {
                h.update(b"{");
                for (k, v) in map.iter().filter(|(k, _)| k.as_str() != "cache_control") {
                    h.update(k.as_bytes());
                    h.update(b":");
                    feed(h, v, scalar);
                }
                h.update(b"}");
            }
            Value::Array(items) => {
                h.update(b"[");
                items.iter().for_each(|v| feed(h, v, scalar));
                h.update(b"]");
            }
            other => scalar(h, other),
        }
    }
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    feed(&mut h, item, scalar);
    h.digest()
}

/// Feeds what is written into a hash.
struct HashWriter<'a>(&'a mut xxhash_rust::xxh3::Xxh3);

impl std::io::Write for HashWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.update(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Adds the tool definitions to a request that carries tools and does not have them yet.
pub fn inject(body: &mut Value, api: Api) -> bool {
    let Some(tools) = body.get_mut("tools").and_then(Value::as_array_mut) else {
        return false;
    };
    let named = |t: &Value| {
        let declared = t["functionDeclarations"].as_array().into_iter().flatten();
        t.get("name")
            .or_else(|| t.pointer("/function/name"))
            .into_iter()
            .chain(declared.filter_map(|d| d.get("name")))
            .filter_map(Value::as_str)
            .any(is_internal)
    };
    let ours = api.wire().agent_tools();
    if ours.is_empty() || tools.is_empty() || tools.iter().any(named) {
        return false;
    }
    tools.extend(ours);
    true
}

/// Replays the session's state onto a client body. Returns whether anything changed.
pub fn apply(body: &mut Value, api: Api, state: &AgentState) -> bool {
    let Some(items) = body.get_mut(items_key(api)).and_then(Value::as_array_mut) else {
        return false;
    };
    let mut changed = false;
    // Exchanges first, from the last insertion point back, so earlier points keep their index;
    // exchanges at one point go in in reverse so they end up in their original order.
    let mut order: Vec<usize> = (0..state.exchanges.len()).collect();
    order.sort_by_key(|&i| (state.exchanges[i].at, i));
    for &i in order.iter().rev() {
        let ex = &state.exchanges[i];
        if ex.at == 0 || ex.at > items.len() || fingerprint(&items[ex.at - 1]) != ex.anchor {
            continue;
        }
        for (k, item) in ex.items.iter().enumerate() {
            items.insert(ex.at + k, item.clone());
        }
        drop_shown_again(items, api, ex);
        changed = true;
    }
    for merge in &state.merges {
        changed |= apply_merge(items, api, merge);
    }
    if !state.trims.is_empty() {
        changed |= apply_trims(items, api, &state.trims);
    }
    changed
}

/// The client was streamed the exchange round's own content (its text, its thinking) as the
/// start of the message the next round continued, so its history holds that content again
/// right after the exchange: it goes, and the upstream sees each round's content once (and an
/// Anthropic tool-loop turn that starts with its thinking).
fn drop_shown_again(items: &mut Vec<Value>, api: Api, ex: &Exchange) {
    api.wire()
        .drop_repeated_round(items, ex.at + ex.items.len(), &ex.items);
}

fn apply_trims(items: &mut [Value], api: Api, trims: &BTreeMap<String, String>) -> bool {
    let mut changed = false;
    let mut replace = |id: Option<&str>, slot: &mut Value| {
        if let Some(text) = id.and_then(|id| trims.get(id)) {
            *slot = Value::String(text.clone());
            changed = true;
        }
    };
    for item in items.iter_mut() {
        api.wire()
            .for_each_result(item, &mut |id, content| replace(id, content));
    }
    changed
}

/// Puts a merge's calls into the client's assistant turn and its results beside the client's;
/// both or neither (a call without its result is a 400 upstream).
fn apply_merge(items: &mut Vec<Value>, api: Api, merge: &Merge) -> bool {
    api.wire()
        .merge_calls(items, &merge.with_call, &|theirs, kind| {
            let ours = match kind {
                Kind::Calls => &merge.calls,
                Kind::Results => &merge.results,
            };
            merge.interleave(theirs, ours)
        })
}

/// The tool calls in a complete (non-streamed) response.
pub fn calls_in_response(api: Api, response: &Value) -> Vec<Call> {
    api.wire().response_calls(response)
}

/// The history items for the model's turn in a complete response.
pub fn assistant_items(api: Api, response: &Value) -> Vec<Value> {
    api.wire().response_items(response)
}

/// The result of `call` in the API's wire form (for Anthropic, a `tool_result` block).
pub fn result_part(api: Api, call: &Call, text: &str) -> Value {
    api.wire().result_part_for(call, text)
}

/// History items carrying results (Anthropic: one user message holding all the blocks).
pub fn result_items(api: Api, parts: Vec<Value>) -> Vec<Value> {
    api.wire().result_items(parts)
}

/// The client's latest item if it is a tool result: (call id, text).
fn latest_result(api: Api, body: &Value) -> Option<(String, String)> {
    let last = body.get(items_key(api))?.as_array()?.last()?;
    let text_of = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => Some(
            parts
                .iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        _ => None,
    };
    let (id, content) = api.wire().last_result(last)?;
    Some((id.to_owned(), text_of(content)?))
}

/// Runs an internal call for `session`: a trim updates `state` (and stores the original), a
/// recall reads the store. Returns the text the model gets back; failures are explained to the
/// model in that text rather than failing the request.
pub fn execute(
    call: &Call,
    api: Api,
    client_body: &Value,
    session: &SessionId,
    store: &dyn Store,
    state: &mut AgentState,
    max_bytes: usize,
) -> Result<String, ProxyError> {
    let parsed = match agent_tools::parse_call(&call.name, &call.arguments) {
        None => return Err(ProxyError::NotOurTool(call.name.clone())),
        Some(Err(answer)) => return Ok(answer),
        Some(Ok(parsed)) => parsed,
    };
    match parsed {
        AgentCall::Trim { summary } => {
            let Some((call_id, original)) = latest_result(api, client_body) else {
                return Ok(
                    "error: nothing to trim: only the latest message, when it is a tool result, can be replaced"
                        .into(),
                );
            };
            let id = ContentId::of(original.as_bytes());
            // The original is committed before anything that hides it is sent upstream.
            store.put(session, id, &original)?;
            state.trims.insert(
                call_id,
                format!("[summary by the model; original: id {id}] {summary}"),
            );
            Ok(format!(
                "done: the latest tool result now shows your summary; recall id {id} gives the original"
            ))
        }
        AgentCall::Recall { id, query } => {
            let original = store.get(session, id)?;
            Ok(match original {
                None => format!("error: no original with id {id} in this session"),
                Some(text) => match recall::recall(&text, &query, max_bytes) {
                    Ok(out) => out,
                    Err(e) => format!("error: {e}"),
                },
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxgc_core::store::{MemoryStore, OriginalStore};
    use serde_json::json;

    /// Runs a call on a Chat body for session `s`.
    fn run(call: &Call, body: &Value, store: &mut MemoryStore, state: &mut AgentState) -> String {
        let session = SessionId::new("s");
        execute(
            call,
            Api::ChatCompletions,
            body,
            &session,
            store,
            state,
            1 << 20,
        )
        .unwrap()
    }

    fn chat_body() -> Value {
        json!({"model": "m", "tools": [{"type": "function", "function": {"name": "bash", "parameters": {}}}],
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "line 1\nerror: boom\nline 3"}
        ]})
    }

    #[test]
    fn tools_are_injected_once_and_only_where_tools_exist() {
        let mut body = chat_body();
        assert!(inject(&mut body, Api::ChatCompletions));
        assert_eq!(body["tools"].as_array().unwrap().len(), 3);
        assert!(!inject(&mut body, Api::ChatCompletions), "already there");
        let mut plain = json!({"model": "m", "messages": []});
        assert!(!inject(&mut plain, Api::ChatCompletions));
        assert!(plain.get("tools").is_none());
    }

    #[test]
    fn a_trim_replaces_the_latest_result_on_every_later_request() {
        let mut store = MemoryStore::default();
        let mut state = AgentState::default();
        let body = chat_body();
        let call = Call {
            id: "t1".into(),
            name: TRIM_TOOL.into(),
            arguments: json!({"summary": "one error: boom"}),
            raw: Value::Null,
        };
        let reply = run(&call, &body, &mut store, &mut state);
        let id = ContentId::of(b"line 1\nerror: boom\nline 3");
        assert!(reply.contains(&id.to_string()), "{reply}");
        assert_eq!(
            store.get(&SessionId::new("s"), id).unwrap().as_deref(),
            Some("line 1\nerror: boom\nline 3")
        );
        // A later request: the same history plus more.
        let mut later = body.clone();
        later["messages"]
            .as_array_mut()
            .unwrap()
            .push(json!({"role": "assistant", "content": "fixed"}));
        assert!(apply(&mut later, Api::ChatCompletions, &state));
        assert_eq!(
            later["messages"][2]["content"],
            format!("[summary by the model; original: id {id}] one error: boom")
        );
        // Recall gives the original back, by pattern too.
        let recall = Call {
            id: "t2".into(),
            name: RECALL_TOOL.into(),
            arguments: json!({"id": id.to_string(), "pattern": "error"}),
            raw: Value::Null,
        };
        let out = run(&recall, &later, &mut store, &mut state);
        assert!(out.contains("error: boom"), "{out}");
        let unknown = Call {
            arguments: json!({"id": "r-0000000000000001"}),
            ..recall
        };
        let out = run(&unknown, &later, &mut store, &mut state);
        assert!(out.starts_with("error: no original"), "{out}");
    }

    #[test]
    fn a_fingerprint_hashes_each_value_s_json_text_as_stored_lineages_did() {
        // The hash lineages in the store hold: each scalar's `to_string`, copied first.
        let stored =
            |item: &Value| fingerprint_with(item, &|h, v| h.update(v.to_string().as_bytes()));
        let output = "{\"output\": \"line 1\\nline \\\"2\\\"\", \"exit\": 0}\n\ttab é 😀 \u{1}";
        for item in [
            json!({"role": "tool", "tool_call_id": "call_1", "content": output}),
            json!({"role": "user", "content": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]}),
            json!([1, -2, 3.5, 1e300, true, false, null, "", {"a": []}]),
            json!("just a string"),
            json!(12345678901234567u64),
        ] {
            assert_eq!(fingerprint(&item), stored(&item), "{item}");
        }
    }

    #[test]
    fn exchanges_follow_their_anchor_and_drop_on_a_rewound_history() {
        let body = chat_body();
        let anchor = fingerprint(&body["messages"][2]);
        let state = AgentState {
            exchanges: vec![
                Exchange {
                    at: 3,
                    anchor,
                    items: vec![json!({"n": 1}), json!({"n": 2})],
                },
                Exchange {
                    at: 3,
                    anchor,
                    items: vec![json!({"n": 3})],
                },
            ],
            ..Default::default()
        };
        let mut later = body.clone();
        later["messages"]
            .as_array_mut()
            .unwrap()
            .push(json!({"role": "assistant", "content": "done"}));
        assert!(apply(&mut later, Api::ChatCompletions, &state));
        let ns: Vec<Value> = later["messages"].as_array().unwrap()[3..6]
            .iter()
            .map(|m| m["n"].clone())
            .collect();
        assert_eq!(ns, vec![json!(1), json!(2), json!(3)]);
        assert_eq!(later["messages"][6]["content"], "done");
        // Moved breakpoints do not matter; an edited anchor does.
        let mut marked = body.clone();
        marked["messages"][2]["cache_control"] = json!({"type": "ephemeral"});
        assert_eq!(fingerprint(&marked["messages"][2]), anchor);
        let mut edited = body.clone();
        edited["messages"][2]["content"] = json!("other");
        assert!(!apply(&mut edited, Api::ChatCompletions, &state));
    }

    /// Defect guarded: the client was streamed the first round's text as the start of its
    /// message, and the upstream history then held that text twice (and an Anthropic tool-loop
    /// turn that did not start with its thinking block).
    #[test]
    fn what_the_client_was_streamed_from_an_exchange_is_not_sent_twice() {
        // Anthropic: [thinking0, text0, internal call] then the client's merged message.
        let body = json!({"messages": [
            {"role": "user", "content": "go"},
        ]});
        let anchor = fingerprint(&body["messages"][0]);
        let thinking0 = json!({"type": "thinking", "thinking": "look first", "signature": "s0"});
        let text0 = json!({"type": "text", "text": "Let me check."});
        let state = AgentState {
            exchanges: vec![Exchange {
                at: 1,
                anchor,
                items: vec![
                    json!({"role": "assistant", "content": [thinking0, text0, {"type": "tool_use", "id": "i1", "name": "recall_tool_result", "input": {}}]}),
                    json!({"role": "user", "content": [Api::Messages.wire().result_part("i1", "recalled")]}),
                ],
            }],
            ..Default::default()
        };
        let thinking1 = json!({"type": "thinking", "thinking": "now act", "signature": "s1"});
        let mut later = body.clone();
        later["messages"]
            .as_array_mut()
            .unwrap()
            .push(json!({"role": "assistant", "content": [
                thinking0, text0, thinking1, {"type": "text", "text": "Found it."},
                {"type": "tool_use", "id": "c1", "name": "Bash", "input": {}}
            ]}));
        assert!(apply(&mut later, Api::Messages, &state));
        let merged = &later["messages"][3]["content"];
        assert_eq!(
            merged[0], thinking1,
            "the tool-loop turn starts with its thinking"
        );
        assert_eq!(merged.as_array().unwrap().len(), 3);
        assert_eq!(later.to_string().matches("Let me check.").count(), 1);
        // Chat: the text the client got first.
        let body = json!({"messages": [{"role": "user", "content": "go"}]});
        let anchor = fingerprint(&body["messages"][0]);
        let state = AgentState {
            exchanges: vec![Exchange {
                at: 1,
                anchor,
                items: vec![
                    json!({"role": "assistant", "content": "Let me check.", "tool_calls": [{"id": "i1", "type": "function", "function": {"name": "recall_tool_result", "arguments": "{}"}}]}),
                    json!({"role": "tool", "tool_call_id": "i1", "content": "recalled"}),
                ],
            }],
            ..Default::default()
        };
        let mut later = body.clone();
        later["messages"]
            .as_array_mut()
            .unwrap()
            .push(json!({"role": "assistant", "content": "Let me check.Found it."}));
        assert!(apply(&mut later, Api::ChatCompletions, &state));
        assert_eq!(later["messages"][3]["content"], "Found it.");
        // Responses: the round's reasoning and message items, shown as items of their own.
        let body = json!({"input": [{"role": "user", "content": "go"}]});
        let anchor = fingerprint(&body["input"][0]);
        let message0 = json!({"type": "message", "role": "assistant", "id": "m0", "content": [{"type": "output_text", "text": "Let me check."}]});
        let state = AgentState {
            exchanges: vec![Exchange {
                at: 1,
                anchor,
                items: vec![
                    message0.clone(),
                    json!({"type": "function_call", "call_id": "i1", "name": "recall_tool_result", "arguments": "{}"}),
                    json!({"type": "function_call_output", "call_id": "i1", "output": "recalled"}),
                ],
            }],
            ..Default::default()
        };
        let mut later = body.clone();
        later["input"].as_array_mut().unwrap().extend([
            message0,
            json!({"type": "message", "role": "assistant", "id": "m1", "content": [{"type": "output_text", "text": "Found it."}]}),
        ]);
        assert!(apply(&mut later, Api::Responses, &state));
        let ids: Vec<&str> = later["input"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|i| i["id"].as_str())
            .collect();
        assert_eq!(ids, ["m0", "m1"], "m0 once");
    }

    /// Defect guarded: a recall the model issued before its client call came back after it.
    #[test]
    fn merged_calls_keep_the_order_the_model_emitted() {
        let merge = Merge {
            with_call: "c1".into(),
            calls: vec![
                json!({"type": "tool_use", "id": "i1", "name": "recall_tool_result", "input": {}}),
            ],
            results: vec![Api::Messages.wire().result_part("i1", "recalled")],
            positions: vec![0],
        };
        let mut body = json!({"messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "text", "text": "Both."}, {"type": "tool_use", "id": "c1", "name": "Bash", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "ok"}]}
        ]});
        let state = AgentState {
            merges: vec![merge],
            ..Default::default()
        };
        assert!(apply(&mut body, Api::Messages, &state));
        let ids = |m: &Value, key: &str| -> Vec<String> {
            m["content"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|b| b[key].as_str().map(str::to_owned))
                .collect()
        };
        assert_eq!(ids(&body["messages"][1], "id"), ["i1", "c1"]);
        assert_eq!(ids(&body["messages"][2], "tool_use_id"), ["i1", "c1"]);
        assert_eq!(body["messages"][1]["content"][0]["type"], "text");
    }

    #[test]
    fn merges_put_internal_calls_back_beside_the_clients_own() {
        let merge = |api: Api| Merge {
            with_call: "c1".into(),
            calls: vec![json!({"internal": "call"})],
            results: vec![api.wire().result_part("i1", "recalled")],
            positions: vec![],
        };
        // Anthropic: the internal tool_use joins the assistant turn, its result the user turn.
        let mut body = json!({"messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "Bash", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "ok"}, {"type": "text", "text": "next"}]}
        ]});
        let state = AgentState {
            merges: vec![merge(Api::Messages)],
            ..Default::default()
        };
        assert!(apply(&mut body, Api::Messages, &state));
        assert_eq!(body["messages"][1]["content"][1]["internal"], "call");
        assert_eq!(body["messages"][2]["content"][1]["tool_use_id"], "i1");
        assert_eq!(body["messages"][2]["content"][2]["type"], "text");
        // No results yet from the client: nothing is merged (no orphan call).
        let mut pending = json!({"messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "Bash", "input": {}}]}
        ]});
        assert!(!apply(&mut pending, Api::Messages, &state));
        // Chat: the call joins tool_calls, the result follows the client's results.
        let mut chat = chat_body();
        chat["messages"]
            .as_array_mut()
            .unwrap()
            .push(json!({"role": "user", "content": "more"}));
        let state = AgentState {
            merges: vec![merge(Api::ChatCompletions)],
            ..Default::default()
        };
        assert!(apply(&mut chat, Api::ChatCompletions, &state));
        assert_eq!(chat["messages"][1]["tool_calls"][1]["internal"], "call");
        assert_eq!(chat["messages"][3]["tool_call_id"], "i1");
        assert_eq!(chat["messages"][4]["content"], "more");
        // Responses: the call after the client's calls, the output after the client's outputs.
        let mut resp = json!({"input": [
            {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "ok"},
            {"role": "user", "content": "more"}
        ]});
        let state = AgentState {
            merges: vec![merge(Api::Responses)],
            ..Default::default()
        };
        assert!(apply(&mut resp, Api::Responses, &state));
        let kinds: Vec<String> = resp["input"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                i["type"]
                    .as_str()
                    .or(i["internal"].as_str())
                    .or(i["role"].as_str())
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "function_call",
                "call",
                "function_call_output",
                "function_call_output",
                "user"
            ]
        );
    }

    #[test]
    fn trims_refuse_when_the_latest_item_is_not_a_result() {
        let mut body = chat_body();
        body["messages"]
            .as_array_mut()
            .unwrap()
            .push(json!({"role": "user", "content": "hi"}));
        let call = Call {
            id: "t".into(),
            name: TRIM_TOOL.into(),
            arguments: json!({"summary": "x"}),
            raw: Value::Null,
        };
        let mut state = AgentState::default();
        let out = run(&call, &body, &mut MemoryStore::default(), &mut state);
        assert!(out.starts_with("error: nothing to trim"), "{out}");
        assert!(state.trims.is_empty());
    }
}
