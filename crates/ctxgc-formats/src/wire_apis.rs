//! The wire formats of OpenAI Chat Completions, OpenAI Responses and Anthropic Messages, each
//! as a [`WireApi`] (Gemini's stands beside its format, in `gemini.rs`).

use ctxgc_core::Transcript;
use ctxgc_core::agent_tools;
use ctxgc_core::tokens::ProviderFamily;
use serde_json::{Value, json};

use crate::chat::message_from_chat;
use crate::wire_api::*;
use crate::{Api, anthropic, responses};

/// OpenAI Chat Completions.
pub(crate) struct ChatCompletions;
/// OpenAI Responses.
pub(crate) struct Responses;
/// Anthropic Messages.
pub(crate) struct Messages;

impl WireApi for ChatCompletions {
    fn usage_of(&self, u: &Value) -> Usage {
        openai_usage(u, "prompt_tokens", "completion_tokens")
    }
    fn response_event(&self, event: &Value) -> ResponseEvent {
        // The last chunk carries the usage (with `stream_options.include_usage`).
        match event.get("usage").filter(|u| u.is_object()) {
            Some(u) => ResponseEvent::Completed {
                id: None,
                usage: Some(self.usage_of(u)),
            },
            None => ResponseEvent::Other,
        }
    }
    fn response_call_list<'a>(&self, response: &'a mut Value) -> Option<&'a mut Vec<Value>> {
        response
            .pointer_mut("/choices/0/message/tool_calls")?
            .as_array_mut()
    }
    fn response_calls(&self, response: &Value) -> Vec<ResponseCall> {
        response
            .pointer("/choices/0/message/tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| ResponseCall {
                id: text_of(&c["id"]),
                name: text_of(&c["function"]["name"]),
                arguments: parsed(&c["function"]["arguments"]),
                raw: c.clone(),
            })
            .collect()
    }
    fn response_items(&self, response: &Value) -> Vec<Value> {
        let m = &response["choices"][0]["message"];
        let mut out = json!({"role": "assistant", "content": m["content"].clone()});
        if let Some(calls) = m.get("tool_calls") {
            out["tool_calls"] = calls.clone();
        }
        vec![out]
    }
    fn merge_calls(
        &self,
        items: &mut Vec<Value>,
        with_call: &str,
        place: &dyn Fn(Vec<Value>, Kind) -> Vec<Value>,
    ) -> bool {
        let Some(i) = items.iter().position(|m| {
            m["role"] == "assistant"
                && m["tool_calls"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|c| c["id"] == with_call))
        }) else {
            return false;
        };
        let end = (i + 1..items.len())
            .find(|&j| items[j]["role"] != "tool")
            .unwrap_or(items.len());
        if end == i + 1 {
            return false;
        }
        if let Some(calls) = items[i]["tool_calls"].as_array_mut() {
            *calls = place(std::mem::take(calls), Kind::Calls);
        }
        let results: Vec<Value> = items.drain(i + 1..end).collect();
        let results = place(results, Kind::Results);
        items.splice(i + 1..i + 1, results);
        true
    }
    fn drop_repeated_round(&self, items: &mut Vec<Value>, after: usize, round: &[Value]) {
        let Some(text) = round
            .first()
            .and_then(|a| a["content"].as_str())
            .filter(|t| !t.is_empty())
        else {
            return;
        };
        if let Some(message) = items.get_mut(after).filter(|m| m["role"] == "assistant")
            && let Some(rest) = message["content"]
                .as_str()
                .and_then(|c| c.strip_prefix(text))
        {
            message["content"] = if rest.is_empty() {
                Value::Null
            } else {
                json!(rest)
            };
        }
    }
    fn cache_hint(&self) -> CacheHint {
        CacheHint::PromptCacheKey
    }
    fn api(&self) -> Api {
        Api::ChatCompletions
    }
    fn items_key(&self) -> &'static str {
        "messages"
    }
    fn system_key(&self) -> Option<&'static str> {
        None
    }
    fn family(&self) -> ProviderFamily {
        ProviderFamily::Openai
    }
    fn upstream(&self) -> Upstream {
        Upstream::OpenAi
    }
    fn tool_choice_none(&self) -> Value {
        json!("none")
    }
    fn result_part(&self, call_id: &str, text: &str) -> Value {
        json!({"role": "tool", "tool_call_id": call_id, "content": text})
    }
    fn result_items(&self, parts: Vec<Value>) -> Vec<Value> {
        parts
    }
    fn agent_tools(&self) -> Vec<Value> {
        agent_tools::chat_completions()
    }
    fn is_call_item(&self, item: &Value) -> bool {
        item["role"] == "assistant" && item["tool_calls"].as_array().is_some_and(|c| !c.is_empty())
    }
    fn is_result_item(&self, item: &Value) -> bool {
        item["role"] == "tool"
    }
    fn stream_error(&self, message: &str) -> String {
        format!(
            "data: {}\n\ndata: [DONE]\n\n",
            json!({"error": {"type": "ctxgc_error", "message": message}})
        )
    }
    fn set_result_text(&self, item: &mut Value, _block: Option<usize>, text: &str) {
        item["content"] = json!(text);
    }
    fn calls_in<'a>(&self, item: &'a Value) -> Vec<(&'a str, &'a str)> {
        item["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| Some((c["id"].as_str()?, c["function"]["name"].as_str()?)))
            .collect()
    }
    fn results_in<'a>(&self, item: &'a Value) -> Vec<(Option<&'a str>, &'a Value, String)> {
        if !self.is_result_item(item) {
            return Vec::new();
        }
        vec![(
            item["tool_call_id"].as_str(),
            &item["content"],
            "/content".into(),
        )]
    }
    fn set_call_arguments(&self, item: &mut Value, call_id: &str, arguments: &str) {
        for call in item["tool_calls"].as_array_mut().into_iter().flatten() {
            if call["id"] == call_id {
                call["function"]["arguments"] = json!(arguments);
            }
        }
    }
    fn for_each_result(&self, item: &mut Value, f: &mut dyn FnMut(Option<&str>, &mut Value)) {
        if self.is_result_item(item) {
            let id = item["tool_call_id"].as_str().map(str::to_owned);
            f(id.as_deref(), &mut item["content"]);
        }
    }
    fn last_result<'a>(&self, item: &'a Value) -> Option<(&'a str, &'a Value)> {
        self.is_result_item(item)
            .then(|| Some((item["tool_call_id"].as_str()?, &item["content"])))
            .flatten()
    }
    fn view(&self, system: Option<&Value>, messages: &[Value]) -> Option<View> {
        // Chat's instructions are messages themselves.
        let _ = system;
        let mut t = Transcript::default();
        for (i, m) in messages.iter().enumerate() {
            t.messages
                .push(message_from_chat(m, &format!("messages[{i}]")).ok()?);
        }
        crate::resolve_tool_names(&mut t);
        let origin = (0..messages.len()).map(|i| at(i, None)).collect();
        View::checked(t, origin)
    }
}

impl WireApi for Responses {
    fn usage_of(&self, u: &Value) -> Usage {
        openai_usage(u, "input_tokens", "output_tokens")
    }
    fn response_event(&self, event: &Value) -> ResponseEvent {
        let id = || event["response"]["id"].as_str().map(str::to_owned);
        match event["type"].as_str() {
            Some("response.created") => ResponseEvent::Started {
                id: id(),
                usage: None,
            },
            Some("response.completed") => ResponseEvent::Completed {
                id: id(),
                usage: event["response"]
                    .get("usage")
                    .filter(|u| u.is_object())
                    .map(|u| self.usage_of(u)),
            },
            _ => ResponseEvent::Other,
        }
    }
    fn response_summary(&self, response: &Value) -> (Option<Usage>, Option<String>) {
        let usage = response.get("usage").map(|u| self.usage_of(u));
        let id = (response["object"] == "response")
            .then(|| response["id"].as_str().map(str::to_owned))
            .flatten();
        (usage, id)
    }
    fn response_call_list<'a>(&self, response: &'a mut Value) -> Option<&'a mut Vec<Value>> {
        response.get_mut("output")?.as_array_mut()
    }
    fn response_calls(&self, response: &Value) -> Vec<ResponseCall> {
        response["output"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|it| self.is_call_item(it))
            .map(|it| ResponseCall {
                id: text_of(&it["call_id"]),
                name: text_of(&it["name"]),
                arguments: parsed(&it["arguments"]),
                raw: it.clone(),
            })
            .collect()
    }
    fn response_items(&self, response: &Value) -> Vec<Value> {
        response["output"].as_array().cloned().unwrap_or_default()
    }
    fn merge_calls(
        &self,
        items: &mut Vec<Value>,
        with_call: &str,
        place: &dyn Fn(Vec<Value>, Kind) -> Vec<Value>,
    ) -> bool {
        let is_call = |it: &Value| self.is_call_item(it);
        let Some(i) = items
            .iter()
            .position(|it| is_call(it) && it["call_id"] == with_call)
        else {
            return false;
        };
        let calls_start = (0..=i)
            .rev()
            .take_while(|&j| is_call(&items[j]))
            .last()
            .unwrap_or(i);
        let calls_end = (i..items.len())
            .find(|&j| !is_call(&items[j]))
            .unwrap_or(items.len());
        let outputs_end = (calls_end..items.len())
            .find(|&j| !self.is_result_item(&items[j]))
            .unwrap_or(items.len());
        if outputs_end == calls_end {
            return false;
        }
        let outputs: Vec<Value> = items.drain(calls_end..outputs_end).collect();
        let calls: Vec<Value> = items.drain(calls_start..calls_end).collect();
        let mut run = place(calls, Kind::Calls);
        run.extend(place(outputs, Kind::Results));
        items.splice(calls_start..calls_start, run);
        true
    }
    fn drop_repeated_round(&self, items: &mut Vec<Value>, after: usize, round: &[Value]) {
        // Items: the round's reasoning and messages, as separate items.
        let shown: Vec<&Value> = round
            .iter()
            .filter(|v| !self.is_call_item(v) && !self.is_result_item(v))
            .collect();
        let repeated = items[after.min(items.len())..]
            .iter()
            .zip(&shown)
            .take_while(|(client, ours)| same(client, ours))
            .count();
        items.drain(after..after + repeated);
    }
    fn cache_hint(&self) -> CacheHint {
        CacheHint::PromptCacheKey
    }
    fn api(&self) -> Api {
        Api::Responses
    }
    fn items_key(&self) -> &'static str {
        "input"
    }
    fn system_key(&self) -> Option<&'static str> {
        Some("instructions")
    }
    fn family(&self) -> ProviderFamily {
        ProviderFamily::Openai
    }
    fn upstream(&self) -> Upstream {
        Upstream::OpenAi
    }
    fn tool_choice_none(&self) -> Value {
        json!("none")
    }
    fn result_part(&self, call_id: &str, text: &str) -> Value {
        json!({"type": "function_call_output", "call_id": call_id, "output": text})
    }
    fn result_items(&self, parts: Vec<Value>) -> Vec<Value> {
        parts
    }
    fn agent_tools(&self) -> Vec<Value> {
        agent_tools::responses()
    }
    fn is_call_item(&self, item: &Value) -> bool {
        item["type"]
            .as_str()
            .is_some_and(|t| RESPONSES_CALL_TYPES.contains(&t))
    }
    fn is_result_item(&self, item: &Value) -> bool {
        item["type"]
            .as_str()
            .is_some_and(|t| RESPONSES_RESULT_TYPES.contains(&t))
    }
    fn stream_error(&self, message: &str) -> String {
        format!(
            "event: error\ndata: {}\n\n",
            json!({"type": "error", "code": "ctxgc_error", "message": message, "param": null})
        )
    }
    fn set_result_text(&self, item: &mut Value, _block: Option<usize>, text: &str) {
        item["output"] = json!(text);
    }
    fn calls_in<'a>(&self, item: &'a Value) -> Vec<(&'a str, &'a str)> {
        if !self.is_call_item(item) {
            return Vec::new();
        }
        // A local shell call has no name of its own: it is the shell.
        let name = item["name"].as_str().unwrap_or("local_shell");
        item["call_id"]
            .as_str()
            .map(|id| vec![(id, name)])
            .unwrap_or_default()
    }
    fn results_in<'a>(&self, item: &'a Value) -> Vec<(Option<&'a str>, &'a Value, String)> {
        if !self.is_result_item(item) {
            return Vec::new();
        }
        vec![(item["call_id"].as_str(), &item["output"], "/output".into())]
    }
    fn set_call_arguments(&self, item: &mut Value, call_id: &str, arguments: &str) {
        if self.is_call_item(item) && item["call_id"] == call_id && item.get("arguments").is_some()
        {
            item["arguments"] = json!(arguments);
        }
    }
    fn for_each_result(&self, item: &mut Value, f: &mut dyn FnMut(Option<&str>, &mut Value)) {
        if self.is_result_item(item) {
            let id = item["call_id"].as_str().map(str::to_owned);
            f(id.as_deref(), &mut item["output"]);
        }
    }
    fn last_result<'a>(&self, item: &'a Value) -> Option<(&'a str, &'a Value)> {
        self.is_result_item(item)
            .then(|| Some((item["call_id"].as_str()?, &item["output"])))
            .flatten()
    }
    fn view(&self, system: Option<&Value>, messages: &[Value]) -> Option<View> {
        let system = system.filter(|s| !s.is_null());
        let t = responses::transcript_of_items(system, messages).ok()?;
        // As transcript_from_body groups items: assistant-side items join the turn before
        // when it is an assistant turn.
        let mut origin: Vec<Option<Origin>> = Vec::with_capacity(t.messages.len());
        if system.is_some_and(Value::is_string) {
            origin.push(None);
        }
        let mut assistant_open = false;
        for (i, item) in messages.iter().enumerate() {
            let kind = item["type"].as_str().unwrap_or("message");
            let assistant_side = match kind {
                "message" => item["role"] == "assistant",
                k => !k.ends_with("_output"),
            };
            if assistant_side && assistant_open {
                if let Some(Some(o)) = origin.last_mut() {
                    o.last = i;
                }
            } else {
                origin.push(at(i, None));
            }
            assistant_open = assistant_side;
        }
        View::checked(t, origin)
    }
}

impl WireApi for Messages {
    fn usage_of(&self, u: &Value) -> Usage {
        Usage {
            input: n(u, "/input_tokens"),
            cache_read: n(u, "/cache_read_input_tokens"),
            cache_write: n(u, "/cache_creation_input_tokens"),
            cache_write_1h: n(u, "/cache_creation/ephemeral_1h_input_tokens"),
            output: n(u, "/output_tokens"),
        }
    }
    fn response_event(&self, event: &Value) -> ResponseEvent {
        match event["type"].as_str() {
            Some("message_start") => ResponseEvent::Started {
                id: None,
                usage: Some(self.usage_of(&event["message"]["usage"])),
            },
            Some("message_delta") => event
                .pointer("/usage/output_tokens")
                .and_then(Value::as_u64)
                .map_or(ResponseEvent::Other, ResponseEvent::OutputTokens),
            Some("message_stop") => ResponseEvent::Completed {
                id: None,
                usage: None,
            },
            _ => ResponseEvent::Other,
        }
    }
    fn response_call_list<'a>(&self, response: &'a mut Value) -> Option<&'a mut Vec<Value>> {
        response.get_mut("content")?.as_array_mut()
    }
    fn response_calls(&self, response: &Value) -> Vec<ResponseCall> {
        response["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|b| b["type"] == "tool_use")
            .map(|b| ResponseCall {
                id: text_of(&b["id"]),
                name: text_of(&b["name"]),
                arguments: b["input"].clone(),
                raw: b.clone(),
            })
            .collect()
    }
    fn response_items(&self, response: &Value) -> Vec<Value> {
        vec![json!({"role": "assistant", "content": response["content"].clone()})]
    }
    fn merge_calls(
        &self,
        items: &mut Vec<Value>,
        with_call: &str,
        place: &dyn Fn(Vec<Value>, Kind) -> Vec<Value>,
    ) -> bool {
        let Some(i) = items.iter().position(|m| {
            m["role"] == "assistant"
                && m["content"].as_array().is_some_and(|c| {
                    c.iter()
                        .any(|b| b["type"] == "tool_use" && b["id"] == with_call)
                })
        }) else {
            return false;
        };
        let has_results = items.get(i + 1).is_some_and(|m| self.is_result_item(m));
        if !has_results {
            return false;
        }
        // Calls among the turn's tool_use blocks, results among the user turn's results;
        // other blocks keep their places before them.
        place_in_turns(
            items,
            i,
            "content",
            (&|b| b["type"] == "tool_use", &|b| {
                b["type"] == "tool_result"
            }),
            place,
        );
        true
    }
    fn drop_repeated_round(&self, items: &mut Vec<Value>, after: usize, round: &[Value]) {
        drop_shown_parts(items, after, round, ("assistant", "content"), &|b| {
            b["type"] == "tool_use"
        });
    }
    fn cache_hint(&self) -> CacheHint {
        CacheHint::Breakpoints
    }
    fn api(&self) -> Api {
        Api::Messages
    }
    fn items_key(&self) -> &'static str {
        "messages"
    }
    fn system_key(&self) -> Option<&'static str> {
        Some("system")
    }
    fn family(&self) -> ProviderFamily {
        ProviderFamily::Anthropic
    }
    fn upstream(&self) -> Upstream {
        Upstream::Anthropic
    }
    fn tool_choice_none(&self) -> Value {
        json!({"type": "none"})
    }
    fn result_part(&self, call_id: &str, text: &str) -> Value {
        json!({"type": "tool_result", "tool_use_id": call_id, "content": text})
    }
    fn result_items(&self, parts: Vec<Value>) -> Vec<Value> {
        vec![json!({"role": "user", "content": parts})]
    }
    fn agent_tools(&self) -> Vec<Value> {
        agent_tools::anthropic()
    }
    fn is_call_item(&self, item: &Value) -> bool {
        item["role"] == "assistant"
            && item["content"]
                .as_array()
                .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_use"))
    }
    fn is_result_item(&self, item: &Value) -> bool {
        item["role"] == "user"
            && item["content"]
                .as_array()
                .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_result"))
    }
    fn stream_error(&self, message: &str) -> String {
        format!(
            "event: error\ndata: {}\n\n",
            json!({"type": "error", "error": {"type": "api_error", "message": message}})
        )
    }
    fn set_result_text(&self, item: &mut Value, block: Option<usize>, text: &str) {
        match block {
            Some(j) => item["content"][j]["content"] = json!(text),
            None => item["content"] = json!(text),
        }
    }
    fn calls_in<'a>(&self, item: &'a Value) -> Vec<(&'a str, &'a str)> {
        item["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|b| b["type"] == "tool_use")
            .filter_map(|b| Some((b["id"].as_str()?, b["name"].as_str()?)))
            .collect()
    }
    fn results_in<'a>(&self, item: &'a Value) -> Vec<(Option<&'a str>, &'a Value, String)> {
        item["content"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
            .filter(|(_, b)| b["type"] == "tool_result")
            .map(|(j, b)| {
                (
                    b["tool_use_id"].as_str(),
                    &b["content"],
                    format!("/content/{j}/content"),
                )
            })
            .collect()
    }
    fn set_call_arguments(&self, item: &mut Value, call_id: &str, arguments: &str) {
        // Arguments that are not a JSON object cannot be a tool_use input: left as they are.
        let Ok(input) = serde_json::from_str::<Value>(arguments) else {
            return;
        };
        for b in item["content"].as_array_mut().into_iter().flatten() {
            if b["type"] == "tool_use" && b["id"] == call_id {
                b["input"] = input.clone();
            }
        }
    }
    fn without_results(&self, item: &Value) -> Value {
        let mut item = item.clone();
        if let Some(blocks) = item["content"].as_array_mut() {
            blocks.retain(|b| b["type"] != "tool_result");
        }
        item
    }
    fn for_each_result(&self, item: &mut Value, f: &mut dyn FnMut(Option<&str>, &mut Value)) {
        if item["role"] != "user" {
            return;
        }
        for block in item["content"].as_array_mut().into_iter().flatten() {
            if block["type"] == "tool_result" {
                let id = block["tool_use_id"].as_str().map(str::to_owned);
                f(id.as_deref(), &mut block["content"]);
            }
        }
    }
    fn last_result<'a>(&self, item: &'a Value) -> Option<(&'a str, &'a Value)> {
        if item["role"] != "user" {
            return None;
        }
        let block = item["content"]
            .as_array()?
            .iter()
            .rfind(|b| b["type"] == "tool_result")?;
        Some((block["tool_use_id"].as_str()?, &block["content"]))
    }
    fn view(&self, system: Option<&Value>, messages: &[Value]) -> Option<View> {
        let system = system.filter(|s| !s.is_null());
        let t = anthropic::transcript_of_messages(system, messages).ok()?;
        // As transcript_from_body splits a turn: its results first, then the rest.
        let mut origin = Vec::with_capacity(t.messages.len());
        if system.is_some() {
            origin.push(None);
        }
        for (i, m) in messages.iter().enumerate() {
            let mut rest = m["content"].is_string();
            for (j, b) in m["content"].as_array().into_iter().flatten().enumerate() {
                if b["type"] == "tool_result" {
                    origin.push(at(i, Some(j)));
                } else {
                    rest = true;
                }
            }
            if rest || m["role"] == "assistant" {
                origin.push(at(i, None));
            }
        }
        View::checked(t, origin)
    }
}
