//! What a client changes between consecutive requests of a session that breaks the provider's
//! cached prefix, from the request bodies themselves (recorded in front of the provider).
//!
//! A request reads from the cache at most the prefix it shares with the previous one, in the
//! provider's prefix order: tool definitions, then the system prompt, then the messages
//! (Anthropic Messages); instructions, tools, then the input items (OpenAI Responses); tools,
//! then the messages (Chat Completions). Where the later request stops extending the earlier
//! one, the break is classified by what differs there, and weighed by the tokens after it that
//! the provider must write again.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

/// Why the prefix broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakKind {
    /// The model changed (a new cache).
    Model,
    /// A setting the provider keys its cache on changed (thinking, tool choice).
    Settings,
    /// The tool definitions changed (added, removed, reordered or reworded).
    Tools,
    /// A `<system-reminder>` (or similar injected text) appeared, moved or went away.
    SystemReminder,
    /// The system prompt or instructions changed otherwise.
    SystemPrompt,
    /// An old tool result's content was cleared or shortened by the client.
    ClearedToolResult,
    /// Thinking or reasoning blocks of earlier turns were dropped or changed.
    Thinking,
    /// Messages were reordered.
    Reordered,
    /// The history was cut short (the client compacted or rewound it).
    Truncated,
    /// Some other edit of an earlier message.
    EditedMessage,
}

impl BreakKind {
    /// The kind's name in tables.
    pub fn name(self) -> &'static str {
        match self {
            BreakKind::Model => "model changed",
            BreakKind::Settings => "thinking or tool choice changed",
            BreakKind::Tools => "tool list changed",
            BreakKind::SystemReminder => "system reminder",
            BreakKind::SystemPrompt => "system prompt changed",
            BreakKind::ClearedToolResult => "old tool result cleared",
            BreakKind::Thinking => "thinking dropped or changed",
            BreakKind::Reordered => "messages reordered",
            BreakKind::Truncated => "history cut (compaction, rewind)",
            BreakKind::EditedMessage => "earlier message edited",
        }
    }
}

/// One break between two consecutive requests of a session.
#[derive(Debug, Clone, Serialize)]
pub struct Break {
    /// The session.
    pub session: String,
    /// Index of the later request among the session's requests.
    pub request: usize,
    /// What differed first.
    pub kind: BreakKind,
    /// Where: `tools`, `system`, or `messages[i]` / `input[i]`.
    pub at: String,
    /// Estimated tokens of the earlier request from the break to its end: what the later one
    /// cannot read and must write again.
    pub tokens_lost: usize,
    /// Whether only the `cache_control` markers moved before the break (they change no content).
    pub cache_control_moved: bool,
}

/// What the requests of every session show.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    /// Sessions seen.
    pub sessions: usize,
    /// Consecutive pairs compared.
    pub pairs: usize,
    /// Pairs where the later request extends the earlier one (only growth).
    pub extended: usize,
    /// Pairs where only `cache_control` markers moved (or changed TTL) in the shared part.
    pub cache_control_only: usize,
    /// Every break.
    pub breaks: Vec<Break>,
}

impl Summary {
    /// Breaks and tokens lost by kind.
    pub fn by_kind(&self) -> BTreeMap<BreakKind, (usize, usize)> {
        let mut out: BTreeMap<BreakKind, (usize, usize)> = BTreeMap::new();
        for b in &self.breaks {
            let e = out.entry(b.kind).or_default();
            e.0 += 1;
            e.1 += b.tokens_lost;
        }
        out
    }
}

/// The parts of a request in its provider's prefix order, each with where it is and its JSON.
fn parts(body: &Value) -> Vec<(String, &Value)> {
    let mut out = Vec::new();
    let array = |key: &str| body.get(key).and_then(Value::as_array);
    if let Some(instructions) = body.get("instructions").filter(|v| !v.is_null()) {
        out.push(("system".to_owned(), instructions));
    }
    if let Some(tools) = body.get("tools") {
        out.push(("tools".to_owned(), tools));
    }
    match body.get("system") {
        Some(Value::Array(blocks)) => {
            out.extend(blocks.iter().map(|b| ("system".to_owned(), b)));
        }
        Some(other) if !other.is_null() => out.push(("system".to_owned(), other)),
        _ => {}
    }
    for key in ["messages", "input", "contents"] {
        if let Some(items) = array(key) {
            out.extend(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, m)| (format!("{key}[{i}]"), m)),
            );
        }
    }
    out
}

/// The value without its `cache_control` markers (they change no cached content), a string
/// `content` read as the one text block the API takes it for.
fn without_markers(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| k.as_str() != "cache_control")
                .map(|(k, v)| match (k.as_str(), v) {
                    ("content", Value::String(text)) => (
                        k.clone(),
                        serde_json::json!([{"type": "text", "text": text}]),
                    ),
                    _ => (k.clone(), without_markers(v)),
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_markers).collect()),
        other => other.clone(),
    }
}

/// Block and item types that hold the model's thinking.
const THINKING: [&str; 3] = ["thinking", "redacted_thinking", "reasoning"];

/// The value with its thinking blocks taken out (and without `cache_control` markers).
fn without_thinking(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| k.as_str() != "cache_control")
                .map(|(k, v)| (k.clone(), without_thinking(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .filter(|i| {
                    !i.get("type")
                        .and_then(Value::as_str)
                        .is_some_and(|t| THINKING.contains(&t))
                })
                .map(without_thinking)
                .collect(),
        ),
        other => other.clone(),
    }
}

fn text_of(v: &Value) -> String {
    let mut out = String::new();
    collect_text(v, &mut out);
    out
}

fn collect_text(v: &Value, out: &mut String) {
    match v {
        Value::String(s) => {
            out.push_str(s);
            out.push('\n');
        }
        Value::Array(items) => items.iter().for_each(|i| collect_text(i, out)),
        Value::Object(map) => map.values().for_each(|i| collect_text(i, out)),
        _ => {}
    }
}

fn has_type(v: &Value, types: &[&str]) -> bool {
    match v {
        Value::Object(map) => {
            map.get("type")
                .and_then(Value::as_str)
                .is_some_and(|t| types.contains(&t))
                || map.values().any(|v| has_type(v, types))
        }
        Value::Array(items) => items.iter().any(|v| has_type(v, types)),
        _ => false,
    }
}

/// Text the client injects into a message or the system prompt for the model's attention.
fn reminders(v: &Value) -> usize {
    text_of(v).matches("<system-reminder>").count()
}

/// Why part `a` (earlier) became `b` (later) at `at`.
fn classify(at: &str, a: &Value, b: &Value, later: &[(String, &Value)], i: usize) -> BreakKind {
    if at == "tools" {
        return BreakKind::Tools;
    }
    if reminders(a) != reminders(b) {
        return BreakKind::SystemReminder;
    }
    if at == "system" {
        return BreakKind::SystemPrompt;
    }
    // The earlier message further on: the client reordered the history.
    if later[i + 1..]
        .iter()
        .any(|(_, m)| without_markers(m) == without_markers(a))
    {
        return BreakKind::Reordered;
    }
    // Thinking dropped: an earlier reasoning item gone, or a message equal once its thinking
    // blocks are set aside.
    let is_thinking = |v: &Value| {
        v.get("type")
            .and_then(Value::as_str)
            .is_some_and(|t| THINKING.contains(&t))
    };
    if (is_thinking(a) && !is_thinking(b))
        || (has_type(a, &THINKING) && without_thinking(a) == without_thinking(b))
    {
        return BreakKind::Thinking;
    }
    let results = ["tool_result", "function_call_output"];
    let is_result = has_type(a, &results)
        || a.get("role").and_then(Value::as_str) == Some("tool")
        || a.get("type").and_then(Value::as_str) == Some("function_call_output");
    if is_result && text_of(b).len() < text_of(a).len() {
        return BreakKind::ClearedToolResult;
    }
    BreakKind::EditedMessage
}

/// Estimated tokens of a JSON value (its serialized length at 4 bytes a token: the bodies are
/// the client's own, the estimate only weighs breaks against each other).
fn tokens(v: &Value) -> usize {
    v.to_string().len().div_ceil(4)
}

/// Compares every session's consecutive requests. `requests` are (session, body) in the order
/// they were sent; bodies of different sessions may interleave.
pub fn compare(requests: &[(String, Value)]) -> Summary {
    let mut by_session: BTreeMap<&str, Vec<&Value>> = BTreeMap::new();
    for (session, body) in requests {
        by_session.entry(session).or_default().push(body);
    }
    let mut summary = Summary {
        sessions: by_session.len(),
        ..Summary::default()
    };
    for (session, bodies) in by_session {
        for (n, pair) in bodies.windows(2).enumerate() {
            summary.pairs += 1;
            let (a, b) = (pair[0], pair[1]);
            let (pa, pb) = (parts(a), parts(b));
            let mut markers_moved = false;
            let mut first: Option<usize> = None;
            for (i, (_, va)) in pa.iter().enumerate() {
                let Some((_, vb)) = pb.get(i) else {
                    first = Some(i);
                    break;
                };
                if va == vb {
                    continue;
                }
                if without_markers(va) == without_markers(vb) {
                    markers_moved = true;
                    continue;
                }
                first = Some(i);
                break;
            }
            let setting = |key: &str| a.get(key) != b.get(key);
            let kind_at = if setting("model") {
                Some((BreakKind::Model, "model".to_owned(), 0))
            } else if setting("thinking") || setting("tool_choice") || setting("reasoning") {
                Some((BreakKind::Settings, "settings".to_owned(), 0))
            } else {
                first.map(|i| {
                    let kind = match pb.get(i) {
                        None => BreakKind::Truncated,
                        Some((_, vb)) => classify(&pa[i].0, pa[i].1, vb, &pb, i),
                    };
                    (kind, pa[i].0.clone(), i)
                })
            };
            match kind_at {
                None if markers_moved => summary.cache_control_only += 1,
                None => summary.extended += 1,
                Some((kind, at, from)) => summary.breaks.push(Break {
                    session: session.to_owned(),
                    request: n + 1,
                    kind,
                    at,
                    tokens_lost: pa[from..].iter().map(|(_, v)| tokens(v)).sum(),
                    cache_control_moved: markers_moved,
                }),
            }
        }
    }
    summary
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn anthropic(system: &str, messages: Value) -> Value {
        json!({"model": "claude-sonnet-4-5", "tools": [{"name": "Bash"}],
               "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
               "messages": messages})
    }

    #[test]
    fn growth_markers_and_each_kind_of_break_are_told_apart() {
        let user = json!({"role": "user", "content": [{"type": "text", "text": "fix the build"}]});
        let call = json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]});
        let result = json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a long log ".repeat(50)}]});
        let cleared = json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "[cleared]"}]});
        let marked = json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a long log ".repeat(50), "cache_control": {"type": "ephemeral"}}]});
        let reminder = json!({"role": "user", "content": [{"type": "text", "text": "fix the build"}, {"type": "text", "text": "<system-reminder>todo list</system-reminder>"}]});
        // The marker's message sent again as a plain string: the same content to the API.
        let env = json!({"role": "system", "content": [{"type": "text", "text": "env", "cache_control": {"type": "ephemeral"}}]});
        let env_plain = json!({"role": "system", "content": "env"});
        let s = |b: Value| ("s".to_owned(), b);
        let cc = |m: Value| s(anthropic("You are Claude Code.", m));
        let pair = compare(&[cc(json!([user, env])), cc(json!([user, env_plain, call]))]);
        assert_eq!((pair.cache_control_only, pair.breaks.len()), (1, 0));
        let requests = vec![
            cc(json!([user])),
            cc(json!([user, call, result])),
            // Only the breakpoint moved onto the result: no content changed.
            cc(json!([user, call, marked])),
            // The client cleared the old result.
            cc(json!([user, call, cleared])),
            // A reminder joined the first user message.
            cc(json!([reminder, call, cleared])),
            // The system prompt changed.
            s(anthropic(
                "You are Claude Code, v2.",
                json!([reminder, call, cleared]),
            )),
            // The history was cut.
            s(anthropic("You are Claude Code, v2.", json!([reminder]))),
        ];
        let summary = compare(&requests);
        assert_eq!((summary.sessions, summary.pairs), (1, 6));
        assert_eq!(summary.extended, 1);
        assert_eq!(summary.cache_control_only, 1);
        let kinds: Vec<(BreakKind, &str)> = summary
            .breaks
            .iter()
            .map(|b| (b.kind, b.at.as_str()))
            .collect();
        assert_eq!(
            kinds,
            [
                (BreakKind::ClearedToolResult, "messages[2]"),
                (BreakKind::SystemReminder, "messages[0]"),
                (BreakKind::SystemPrompt, "system"),
                (BreakKind::Truncated, "messages[1]"),
            ]
        );
        // A break in the system prompt loses everything after it, the messages included.
        assert!(summary.breaks[2].tokens_lost > summary.breaks[1].tokens_lost);
        assert!(!summary.breaks[0].cache_control_moved);
    }

    #[test]
    fn models_tools_and_reordering_break_the_prefix() {
        let m = |t: &str| json!({"role": "user", "content": t});
        let body = |model: &str, tools: Value, messages: Value| json!({"model": model, "tools": tools, "messages": messages});
        let s = |b: Value| ("s".to_owned(), b);
        let requests = vec![
            s(body(
                "gpt-5",
                json!([{"name": "a"}]),
                json!([m("one"), m("two")]),
            )),
            s(body(
                "gpt-5",
                json!([{"name": "a"}, {"name": "b"}]),
                json!([m("one"), m("two")]),
            )),
            s(body(
                "gpt-5",
                json!([{"name": "a"}, {"name": "b"}]),
                json!([m("two"), m("one")]),
            )),
            s(body(
                "gpt-5-mini",
                json!([{"name": "a"}, {"name": "b"}]),
                json!([m("two"), m("one")]),
            )),
        ];
        let kinds: Vec<BreakKind> = compare(&requests).breaks.iter().map(|b| b.kind).collect();
        assert_eq!(
            kinds,
            [BreakKind::Tools, BreakKind::Reordered, BreakKind::Model]
        );
    }
}
