//! Rewriting what the agent sends: a pure function of the request body and the settings.
//!
//! Clients resend the whole history on every request, so every rewrite here is a pure function
//! of each part (a tool result is trimmed the same way every time it is seen): the upstream sees
//! the same bytes for the same history, and its prefix cache keeps working. Only the nodes that
//! change are touched; a body with nothing to change is forwarded as its original bytes.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use ctxgc_core::ContentId;
use ctxgc_core::engine::abstracts::ResultMeta;
use ctxgc_core::engine::repeats::RepeatIndex;
use ctxgc_core::trim::{self, ToolOutput, TrimConfig};
use ctxgc_formats::wire_api::CacheHint;
use ctxgc_formats::{Api, ApiRequest};

use crate::wire::splice_json;
use ctxgc_core::bounded::BoundedMemo;
use serde_json::{Value, json};

/// Settings that shape rewriting.
#[derive(Debug, Clone)]
pub struct RewriteSettings {
    /// Trimming configuration.
    pub trim: TrimConfig,
    /// The model's context window (tokens): every model's when `model_windows` is off, else unused
    /// ([`Self::window_for`]).
    pub window: u64,
    /// Take each request's window from its `model` ([`ctxgc_core::models`]); off when the
    /// window was given explicitly.
    pub model_windows: bool,
    /// Add Anthropic cache breakpoints when the request carries none.
    pub cache_breakpoints: bool,
    /// Set OpenAI's `prompt_cache_key` to the session id when absent.
    pub prompt_cache_key: bool,
    /// Run the engine's events (prune, compaction) across requests, with
    /// this policy; `None` leaves histories whole.
    pub engine: Option<ctxgc_core::engine::Policy>,
    /// With `engine`, run an event only on a request that comes after the session was idle past
    /// the cache's lifetime (`cold_cache_secs`): that request rewrites the whole cached prefix
    /// anyway, so the event costs no cache write of its own, and the requests in between cost
    /// no more than with no engine (no view of the prompt, no token count).
    pub events_only_when_cold: bool,
    /// Add `trim_tool_result` and `recall_tool_result` to requests that carry tools, and run
    /// the model's calls to them inside the proxy.
    pub inject_tools: bool,
    /// `[cache]`: the cache-lifetime decisions ([`ctxgc_core::cache_life`]).
    pub cache: ctxgc_core::cache_life::CacheSettings,
}

impl RewriteSettings {
    /// Insertion trimming alone, with the default profiles, at a fixed `window`: breakpoints
    /// and the cache key added where the client set none, no engine, no agent tools, the
    /// cache's lifetime as configured by default.
    pub fn trimming_at(window: u64) -> RewriteSettings {
        RewriteSettings {
            trim: TrimConfig::default(),
            window,
            model_windows: false,
            cache_breakpoints: true,
            prompt_cache_key: true,
            engine: None,
            events_only_when_cold: false,
            inject_tools: false,
            cache: Default::default(),
        }
    }

    /// The window a request for `model` is shaped for: the model's known window when
    /// `model_windows` is on (the table's conservative default for unknown models), else the
    /// configured one.
    pub fn window_for(&self, model: Option<&str>, long_context: bool) -> u64 {
        match (self.model_windows, model) {
            (true, Some(model)) => ctxgc_core::models::window_for(model, long_context),
            (true, None) if long_context => ctxgc_core::models::LONG_CONTEXT_WINDOW,
            (true, None) => ctxgc_core::models::unknown_window(),
            (false, _) => self.window,
        }
    }

    /// Whether [`Self::window_for`] is the model's real window (given with `--window`, the
    /// table's, or a long context the client asked for), not the table's guess for a model it
    /// does not know.
    pub fn knows_window(&self, model: Option<&str>, long_context: bool) -> bool {
        !self.model_windows
            || long_context
            || model.is_some_and(|m| ctxgc_core::models::known_window(m).is_some())
    }
}

/// What rewriting did.
#[derive(Debug, Default)]
pub struct Rewritten {
    /// The new body, or `None` when nothing changed (forward the original bytes).
    pub body: Option<Vec<u8>>,
    /// Originals of trimmed outputs, to store before forwarding.
    pub originals: Vec<(ContentId, String)>,
    /// Bytes removed by trimming.
    pub bytes_saved: usize,
    /// The request carried no Anthropic breakpoints and the proxy placed them.
    pub added_breakpoints: bool,
    /// The request carried no `prompt_cache_key` and the proxy set the session's.
    pub added_cache_key: bool,
    /// Facts of every tool output's original, by call id (what the engine plans with).
    pub metas: Arc<BTreeMap<String, ResultMeta>>,
    /// For each original in `originals` that a trim hid, the bytes of what entered instead.
    pub kept_bytes: BTreeMap<ContentId, usize>,
    /// For each original in `originals` an event hid, why (the dashboard shows it).
    pub hidden_why: BTreeMap<ContentId, ctxgc_core::engine::event::Why>,
    /// The way back the request's agent has, which the markers name and the engine's
    /// abstracts and summaries name too.
    pub recall_way: Option<ctxgc_core::agent_tools::RecallWay>,
}

/// A tool result's text inside the body: where it is and what the tool is.
struct Slot<'a> {
    /// The item it is in.
    item: usize,
    /// The JSON pointer of its string within the item.
    within: String,
    /// The call the result answers.
    call_id: Cow<'a, str>,
    tool: &'a str,
    text: &'a str,
    /// Results of one assistant turn share a group (and a turn budget).
    group: usize,
}

impl Slot<'_> {
    /// The JSON pointer of its string in a body whose items are under `items_key`.
    fn pointer(&self, items_key: &str) -> String {
        format!("/{items_key}/{}{}", self.item, self.within)
    }
}

/// Where a reading of a body's tool results starts: at an item, with the group counter and the
/// last item that held results as the reading of the items before it left them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SlotsFrom {
    item: usize,
    group: usize,
    previous: Option<usize>,
}

impl SlotsFrom {
    /// The first item.
    const START: SlotsFrom = SlotsFrom {
        item: 0,
        group: 0,
        previous: None,
    };
}

/// Every tool result text in the body from item `from.item` on, in order, grouped by assistant
/// turn (results in consecutive items answer one turn), and where a reading of the items after
/// these would start.
fn slots(body: &Value, api: Api, from: SlotsFrom) -> (Vec<Slot<'_>>, SlotsFrom) {
    let wire = api.wire();
    let key = wire.items_key();
    let items = body[key].as_array().map_or(&[][..], Vec::as_slice);
    let names = CallNames {
        items,
        wire,
        all: std::cell::OnceCell::new(),
    };
    let mut out = Vec::new();
    let SlotsFrom {
        mut group,
        mut previous,
        ..
    } = from;
    for (i, item) in items.iter().enumerate().skip(from.item) {
        let results = wire.result_slots(items, i);
        if results.is_empty() {
            if let Some(content) = i
                .checked_sub(1)
                .and_then(|before| observation(&items[before], item))
            {
                group += 1;
                previous = Some(i);
                let call = Cow::Owned(format!("the command in message {i}"));
                content_slots(
                    &mut out,
                    (i, "/content".to_owned()),
                    content,
                    (Some(call), TEXT_PROTOCOL_TOOL),
                    group,
                );
            }
            continue;
        }
        if previous.is_none_or(|p| p + 1 < i) {
            group += 1;
        }
        previous = Some(i);
        for result in results {
            let tool = result
                .tool
                .or_else(|| result.call_id.as_deref().and_then(|id| names.of(i, id)))
                .unwrap_or("tool");
            content_slots(
                &mut out,
                (i, result.pointer),
                result.content,
                (result.call_id, tool),
                group,
            );
        }
    }
    out.retain(|s| !crate::agent::tools::is_internal(s.tool));
    let end = SlotsFrom {
        item: items.len().max(from.item),
        group,
        previous,
    };
    (out, end)
}

/// The names of the calls in a conversation's items, by call id, for results that do not name
/// their tool: the latest call of that id before the result. A result follows its call within
/// a few items, so those are read first; every call's position is mapped only for a result
/// whose call is not among them. Mapping every call on every request had cost a quarter of the
/// rewrite at 100K tokens (`cargo bench -p ctxgc-proxy --bench rewrite`).
struct CallNames<'a> {
    items: &'a [Value],
    wire: &'static dyn ctxgc_formats::wire_api::WireApi,
    /// Each call id's calls: the item it is in and its name, in order.
    all: std::cell::OnceCell<HashMap<&'a str, Vec<(usize, &'a str)>>>,
}

impl<'a> CallNames<'a> {
    /// Items before a result in which its call is looked for first.
    const NEAR: usize = 16;

    /// The name of the call `id` that the result in item `at` answers.
    fn of(&self, at: usize, id: &str) -> Option<&'a str> {
        let near = self.items[..at]
            .iter()
            .rev()
            .take(Self::NEAR)
            .find_map(|item| {
                let calls = self.wire.calls_in(item);
                calls.iter().rev().find(|(c, _)| *c == id).map(|(_, n)| *n)
            });
        near.or_else(|| {
            let all = self.all.get_or_init(|| {
                let mut all: HashMap<&str, Vec<(usize, &str)>> = HashMap::new();
                for (i, item) in self.items.iter().enumerate() {
                    for (call, name) in self.wire.calls_in(item) {
                        all.entry(call).or_default().push((i, name));
                    }
                }
                all
            });
            let calls = all.get(id)?;
            let before = calls.partition_point(|&(i, _)| i < at);
            calls[..before].last().map(|&(_, name)| name)
        })
    }
}

/// The tool a text-protocol agent's commands run in: the terminal's profile trims their output.
const TEXT_PROTOCOL_TOOL: &str = "bash";

/// The content of `item` when it is a text-protocol agent's command output (mini-swe-agent's
/// protocol: the assistant writes exactly one fenced `bash` block, the harness runs it and
/// answers in the next user message, `<returncode>N</returncode>` first), as the replay lab's
/// importer reads such transcripts. A user message in any other shape is the user's own words
/// and is never touched.
fn observation<'a>(before: &Value, item: &'a Value) -> Option<&'a Value> {
    if before["role"] != "assistant" || item["role"] != "user" {
        return None;
    }
    let content = item.get("content")?;
    let text_of = |content: &'a Value| -> Option<&'a str> {
        match content {
            Value::String(text) => Some(text),
            Value::Array(parts) => parts.first()?.get("text")?.as_str(),
            _ => None,
        }
    };
    let answer = text_of(content)?;
    ctxgc_formats::import::mini_swe::returncode(answer)?;
    let asked = match &before["content"] {
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.as_str()?.to_owned(),
    };
    ctxgc_formats::import::mini_swe::single_bash_block(&asked)?;
    Some(content)
}

fn content_slots<'a>(
    out: &mut Vec<Slot<'a>>,
    (item, within): (usize, String),
    content: &'a Value,
    (call_id, tool): (Option<Cow<'a, str>>, &'a str),
    group: usize,
) {
    let call_id = call_id.unwrap_or_default();
    match content {
        Value::String(text) => out.push(Slot {
            item,
            within,
            call_id,
            tool,
            text,
            group,
        }),
        Value::Array(parts) => {
            for (k, part) in parts.iter().enumerate() {
                let is_text = matches!(
                    part["type"].as_str(),
                    Some("text" | "input_text" | "output_text")
                );
                if let (true, Some(text)) = (is_text, part["text"].as_str()) {
                    out.push(Slot {
                        item,
                        within: format!("{within}/{k}/text"),
                        call_id: call_id.clone(),
                        tool,
                        text,
                        group,
                    });
                }
            }
        }
        _ => {}
    }
}

fn has_cache_control(value: &Value) -> bool {
    match value {
        Value::Object(map) => {
            map.contains_key("cache_control") || map.values().any(has_cache_control)
        }
        Value::Array(items) => items.iter().any(has_cache_control),
        _ => false,
    }
}

/// Puts `cache_control` on the last block of `content` (a system prompt or a message's
/// content), converting a string to one text block.
fn mark_content(content: &mut Value) -> bool {
    if let Value::String(text) = content {
        *content = json!([{"type": "text", "text": text.clone()}]);
    }
    match content.as_array_mut().and_then(|a| a.last_mut()) {
        Some(Value::Object(block)) => {
            block.insert("cache_control".into(), json!({"type": "ephemeral"}));
            true
        }
        _ => false,
    }
}

/// Puts an Anthropic breakpoint on the last block of a message.
pub fn mark_breakpoint(message: &mut Value) -> bool {
    message.get_mut("content").is_some_and(mark_content)
}

/// Puts `cache_control` on the end of the system prompt and on the last block of the last
/// message (2 of the 4 allowed breakpoints).
fn add_breakpoints(body: &mut Value) -> bool {
    let mut changed = body.get_mut("system").is_some_and(mark_content);
    if let Some(last) = body
        .get_mut("messages")
        .and_then(Value::as_array_mut)
        .and_then(|m| m.last_mut())
    {
        changed |= mark_breakpoint(last);
    }
    changed
}

/// Rewrites a request for `session`.
pub fn rewrite(request: &mut ApiRequest, session: &str, settings: &RewriteSettings) -> Rewritten {
    rewrite_with(
        request,
        None,
        session,
        settings,
        &TrimMemo::default(),
        &|_| false,
    )
}

/// [`rewrite`] with a memo of trimmed turns kept across requests; `stored(id)` tells which
/// originals are in the store already (those are not copied into [`Rewritten::originals`]).
/// `raw`, when given, is the body `request` was parsed from, unchanged since: the new body is
/// then spliced from it rather than serialised again.
pub fn rewrite_with(
    request: &mut ApiRequest,
    raw: Option<&[u8]>,
    session: &str,
    settings: &RewriteSettings,
    memo: &TrimMemo,
    stored: &dyn Fn(ContentId) -> bool,
) -> Rewritten {
    let client = raw.map(|raw| ClientBytes {
        raw,
        item_spans: None,
    });
    rewrite_within(request, client, session, settings, memo, stored, &[], None)
        .unwrap_or_else(|Overdue| Rewritten::default())
}

/// The bytes a request was parsed from, unchanged since, with where its conversation items lie
/// in them when its parse found that ([`ctxgc_formats::Layout::item_spans`]): a splice then
/// goes straight to the items it changes.
#[derive(Debug, Clone, Copy)]
pub struct ClientBytes<'a> {
    /// The body as the client sent it.
    pub raw: &'a [u8],
    /// Each conversation item's byte range in `raw`.
    pub item_spans: Option<&'a [(usize, usize)]>,
}

/// The rewrite passed its deadline: the request goes upstream as it came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overdue;

/// [`rewrite_with`], given up at `deadline` (checked between turns, so a request of many
/// turns cannot hold a rewrite slot past it). `hidden` are the results the session's events
/// took out of view (the lineage's): a result that entered after the event never points to
/// one, as in the session engine.
#[allow(clippy::too_many_arguments)]
pub fn rewrite_within(
    request: &mut ApiRequest,
    client: Option<ClientBytes<'_>>,
    session: &str,
    settings: &RewriteSettings,
    memo: &TrimMemo,
    stored: &dyn Fn(ContentId) -> bool,
    hidden: &[crate::rewrite::lineage::HiddenResult],
    deadline: Option<std::time::Instant>,
) -> Result<Rewritten, Overdue> {
    let mut out = Rewritten::default();
    let items_key = request.api.wire().items_key();
    let body = &request.body;
    let window = settings.window_for(body["model"].as_str(), false);
    // Hides apply from the result at which their event ran, in that order.
    let mut hidden: Vec<&crate::rewrite::lineage::HiddenResult> = hidden.iter().collect();
    hidden.sort_by_key(|h| h.from_result);
    // Where the session's previous walk ended: gone on from when this body resends the items
    // it walked (their bytes hash the same), else walked from the first turn.
    let located = client.and_then(|c| Some((c.raw, c.item_spans?)));
    let previous = memo.take_walk(session);
    let (prefix_hash, items_hash) = located.map_or((None, None), |(raw, spans)| {
        walk::items_hashes(raw, spans, previous.as_ref().map_or(0, |w| w.items))
    });
    let previous =
        previous.filter(|w| w.goes_on((items_key, window), prefix_hash, &hidden, stored));
    // Only the items after those it walked are read, unless their first result joins its last
    // turn (which shares a budget).
    let went_on = previous.and_then(|w| {
        let (slots, end) = slots(body, request.api, w.next_from);
        let joins = slots
            .first()
            .is_some_and(|s| s.group == w.progress.last_group);
        (!joins).then_some((slots, end, w.progress))
    });
    #[cfg(test)]
    if went_on.is_some() {
        memo.resumed
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    let (slots, slots_end, mut p) = went_on.unwrap_or_else(|| {
        let (slots, end) = slots(body, request.api, SlotsFrom::START);
        (slots, end, Progress::fresh(window))
    });
    let mut hides = hidden[p.hides.len()..].iter().copied().peekable();
    let metas = Arc::make_mut(&mut p.metas);
    // The results walked before these.
    let base = p.entered.len();
    let mut start = 0;
    let mut turns = 0u32;
    while start < slots.len() {
        // Reading the clock costs more than a small turn: every 64 turns.
        turns = turns.wrapping_add(1);
        if turns.is_multiple_of(64) && deadline.is_some_and(|d| std::time::Instant::now() >= d) {
            return Err(Overdue);
        }
        let end = slots[start..]
            .iter()
            .position(|s| s.group != slots[start].group)
            .map_or(slots.len(), |k| start + k);
        let turn = &slots[start..end];
        p.turn_start = p.entered.len();
        // A turn's outcome depends on every turn before it, so its memo key chains the keys
        // before it.
        let mut key = xxhash_rust::xxh3::Xxh3::new();
        key.update(&p.chain.to_le_bytes());
        // What an event hid before this turn entered is no repeat's target; it changes what
        // this turn and the later ones enter as, so it is part of their keys.
        while let Some(h) = hides.next_if(|h| h.from_result <= p.entered.len()) {
            p.repeats.hide(&h.call_id);
            key.update(h.call_id.as_bytes());
            key.update(&[0]);
            p.hides.push((h.call_id.clone(), h.from_result));
        }
        for s in turn {
            key.update(s.tool.as_bytes());
            key.update(&(s.text.len() as u64).to_le_bytes());
            key.update(s.text.as_bytes());
        }
        let key = key.digest();
        p.chain = key;
        let outcome = match memo.get(key) {
            Some(outcome) => outcome,
            None => {
                // Worked out outside the memo's lock: two requests may work out one turn at
                // once, to the same bytes (a pure function).
                let earlier = |k: usize| p.entered[k].text(body, items_key);
                let outcome = enter_turn(settings, window, turn, &mut p.repeats, &earlier);
                memo.insert(key, outcome.clone());
                outcome
            }
        };
        for (at, (slot, o)) in (base + start..).zip(turn.iter().zip(outcome.iter())) {
            metas.insert(slot.call_id.to_string(), o.meta.clone());
            p.last_group = slot.group;
            let Some(trimmed) = &o.replacement else {
                p.repeats
                    .push(p.entered.len(), &slot.call_id, o.meta.id, slot.text);
                p.entered.push(Entered::Slot {
                    text: slot.text,
                    item: slot.item,
                    within: &slot.within,
                });
                p.whole.insert(o.meta.id, at);
                continue;
            };
            // The earlier results that entered as the client sent them and that a repeat
            // points to: each must answer a recall like any trimmed one.
            for &id in trimmed.pointed.iter() {
                p.recallable.push(id);
                if let Some(pointed) = p.whole.remove(&id)
                    && !stored(id)
                    && id != o.meta.id
                {
                    let text = p.entered[pointed].text(body, items_key);
                    out.originals.push((id, text.to_owned()));
                }
            }
            p.repeats
                .push(p.entered.len(), &slot.call_id, o.meta.id, &trimmed.text);
            p.entered.push(Entered::Memo(trimmed.text.clone()));
            p.bytes_saved += slot.text.len().saturating_sub(trimmed.text.len());
            p.recallable.push(o.meta.id);
            if !stored(o.meta.id) {
                out.kept_bytes.insert(o.meta.id, trimmed.text.len());
                out.originals.push((o.meta.id, slot.text.to_owned()));
            }
            if let Some((id, pointed)) = &o.pointer_original {
                p.recallable.push(*id);
                if !stored(*id) {
                    out.originals.push((*id, pointed.to_string()));
                }
            }
            p.replaced
                .push((slot.pointer(items_key).into(), trimmed.clone()));
        }
        start = end;
    }
    out.bytes_saved = p.bytes_saved;
    // Replacements are decided while the body is borrowed, then applied: tool outputs are
    // never copied, except originals the store does not have yet.
    let mut replacements: Vec<(Arc<str>, Trimmed)> = p.replaced.clone();
    out.metas = p.metas.clone();
    // Where the previous body's splice found the strings of the results replaced in it, from
    // the start of the items (the members before them may differ in length).
    let items_start = located
        .and_then(|(_, spans)| spans.first())
        .map(|&(start, _)| start);
    let mut known: Vec<Option<(usize, usize)>> = std::mem::take(&mut p.spans)
        .into_iter()
        .map(|span| {
            let start = items_start?;
            span.map(|(from, to)| (start + from, start + to))
        })
        .collect();
    known.resize(replacements.len(), None);
    // Kept for the session's next request (with where this body's splice finds them), where
    // the body's items were located.
    let items = located.map(|(_, spans)| spans.len()).zip(items_hash);
    let walk = p.into_walk((items_key, window), items, slots_end);
    drop(slots);
    // The markers name the way back this agent has (its MCP tool, the injected tool, its
    // shell): worked out per request from its tools, so the memo keeps one text per turn.
    out.recall_way = recall_way_of(request, settings.inject_tools);
    if let Some(way) = &out.recall_way {
        for (_, trimmed) in &mut replacements {
            if let Some(named) = trim::name_recall(&trimmed.text, way) {
                *trimmed = trimmed.renamed(named);
            }
        }
    }
    let hint = request.api.wire().cache_hint();
    let breakpoints = hint == CacheHint::Breakpoints
        && settings.cache_breakpoints
        && !has_cache_control(&request.body);
    let cache_key = hint == CacheHint::PromptCacheKey
        && settings.prompt_cache_key
        && request.body.get("prompt_cache_key").is_none()
        && request.body.is_object();
    if replacements.is_empty() && !breakpoints && !cache_key {
        if let Some(walk) = walk {
            memo.keep_walk(session, walk);
        }
        return Ok(out);
    }
    // Swapping strings (and adding the cache key) splices the client's bytes; anything more
    // re-serialises the parsed body.
    let spliced = match client {
        Some(client) if !breakpoints => {
            let encoded: Vec<(&str, &[u8])> = replacements
                .iter()
                .map(|(pointer, t)| (&**pointer, &*t.json))
                .collect();
            let located = client.item_spans.map(|items| splice_json::Located {
                key: request.api.wire().items_key(),
                items,
            });
            splice_json::splice_known(
                client.raw,
                located,
                (&encoded, &known),
                cache_key.then_some(("prompt_cache_key", session)),
            )
        }
        _ => None,
    };
    #[cfg(test)]
    if let Some((_, found)) = &spliced {
        let kept_where_known = known.iter().zip(found).filter(|(k, f)| **k == Some(**f));
        memo.known_spans.fetch_add(
            kept_where_known.count(),
            std::sync::atomic::Ordering::Relaxed,
        );
    }
    if let Some(mut walk) = walk {
        if let (Some((_, found)), Some(start)) = (&spliced, items_start) {
            let relative =
                |(from, to): (usize, usize)| Some((from.checked_sub(start)?, to - start));
            walk.progress.spans = found.iter().map(|&span| relative(span)).collect();
        }
        memo.keep_walk(session, walk);
    }
    let spliced = spliced.map(|(body, _)| body);
    for (pointer, trimmed) in replacements {
        if let Some(node) = request.body.pointer_mut(&pointer) {
            *node = Value::String(trimmed.text.to_string());
        }
    }
    if breakpoints {
        out.added_breakpoints = add_breakpoints(&mut request.body);
    }
    if let (true, Value::Object(map)) = (cache_key, &mut request.body) {
        map.insert("prompt_cache_key".into(), json!(session));
        out.added_cache_key = true;
    }
    out.body = Some(spliced.unwrap_or_else(|| request.to_bytes()));
    Ok(out)
}

/// The text an earlier result entered the history as: the client's own, or ctxgc's.
enum Entered<'a> {
    /// The client's, in this body's result at `within` of `item`.
    Slot {
        text: &'a str,
        item: usize,
        within: &'a str,
    },
    /// ctxgc's.
    Memo(std::sync::Arc<str>),
    /// The client's, walked by an earlier request: read from this body when needed, at
    /// `within` of `item` (the same bytes lie there).
    Whole { item: usize, within: Arc<str> },
}

impl Entered<'_> {
    /// Its text, reading it from `body` (whose items are under `items_key`) if need be.
    fn text<'s>(&'s self, body: &'s Value, items_key: &str) -> &'s str {
        match self {
            Entered::Slot { text, .. } => text,
            Entered::Memo(text) => text,
            Entered::Whole { item, within } => body
                .get(items_key)
                .and_then(|items| items.get(*item))
                .and_then(|item| item.pointer(within))
                .and_then(Value::as_str)
                .unwrap_or_default(),
        }
    }
}

/// A walk of the results so far: from the first turn, or gone on from the session's previous
/// walk ([`walk::Walk`], which keeps one where it ended).
struct Progress<'a> {
    chain: u64,
    repeats: RepeatIndex,
    entered: Vec<Entered<'a>>,
    whole: HashMap<ContentId, usize>,
    metas: Arc<BTreeMap<String, ResultMeta>>,
    /// The results ctxgc changed: the JSON pointer of each, and what replaces it.
    replaced: Vec<(Arc<str>, Trimmed)>,
    /// The group of the latest result.
    last_group: usize,
    /// Where the strings of the first of `replaced` lie in the body's bytes from the start of
    /// its items, when known.
    spans: Vec<Option<(usize, usize)>>,
    bytes_saved: usize,
    recallable: Vec<ContentId>,
    hides: Vec<(String, usize)>,
    /// How many results had entered when the latest turn began.
    turn_start: usize,
}

impl<'a> Progress<'a> {
    /// Before the first turn of a body trimmed for `window`.
    fn fresh(window: u64) -> Progress<'a> {
        Progress {
            chain: window,
            repeats: RepeatIndex::new(),
            entered: Vec::new(),
            whole: HashMap::new(),
            metas: Arc::default(),
            replaced: Vec::new(),
            last_group: 0,
            spans: Vec::new(),
            bytes_saved: 0,
            recallable: Vec::new(),
            hides: Vec::new(),
            turn_start: 0,
        }
    }

    /// The walk to go on from, for a body of `items_key` trimmed for `window` whose `items`
    /// items hash to `items_hash` (`None`: not located), the reading of its results ending at
    /// `next_from`. `None` when it walked no result.
    fn into_walk(
        self,
        (items_key, window): (&'static str, u64),
        items: Option<(usize, u64)>,
        next_from: SlotsFrom,
    ) -> Option<walk::Walk> {
        let (items, items_hash) = items.filter(|_| !self.entered.is_empty())?;
        let Progress {
            chain,
            repeats,
            entered,
            whole,
            metas,
            replaced,
            last_group,
            spans,
            bytes_saved,
            recallable,
            hides,
            turn_start,
        } = self;
        // What entered as sent is read from the next body, where the same bytes lie.
        let entered = entered
            .into_iter()
            .map(|e| match e {
                Entered::Slot { item, within, .. } => Entered::Whole {
                    item,
                    within: within.into(),
                },
                Entered::Memo(text) => Entered::Memo(text),
                Entered::Whole { item, within } => Entered::Whole { item, within },
            })
            .collect();
        let progress = Progress {
            chain,
            repeats,
            entered,
            whole,
            metas,
            replaced,
            last_group,
            spans,
            bytes_saved,
            recallable,
            hides,
            turn_start,
        };
        Some(walk::Walk {
            items_key,
            window,
            items,
            items_hash,
            next_from,
            progress,
        })
    }
}

/// How the results of one turn enter the history, as the session engine inserts them
/// (`Session::insert_tool_results`): repeats of what earlier results entered as become
/// pointers, then the turn is trimmed with its shared budget.
fn enter_turn<'e>(
    settings: &RewriteSettings,
    window: u64,
    turn: &[Slot<'_>],
    repeats: &mut RepeatIndex,
    entered: &dyn Fn(usize) -> &'e str,
) -> TrimmedTurn {
    let metas: Vec<ResultMeta> = turn.iter().map(|s| ResultMeta::of(s.text)).collect();
    let pointed: Vec<Option<String>> = turn
        .iter()
        .zip(&metas)
        .map(|(s, meta)| repeats.point_to_repeats(s.text, meta.id, entered))
        .collect();
    let outputs: Vec<ToolOutput<'_>> = turn
        .iter()
        .zip(&pointed)
        .map(|(s, p)| ToolOutput {
            tool: s.tool,
            text: p.as_deref().unwrap_or(s.text),
        })
        .collect();
    let trimmed = trim::trim_turn(&settings.trim, window, &outputs);
    turn.iter()
        .zip(metas)
        .zip(pointed)
        .zip(trimmed)
        .map(|(((slot, meta), pointed), t)| {
            let changed = t.text != slot.text;
            // A pointer text cut further is recalled by its own id.
            let pointer_original = match (&pointed, t.trimmed) {
                (Some(p), true) => Some((t.id, std::sync::Arc::from(p.as_str()))),
                _ => None,
            };
            EnteredResult {
                replacement: changed.then(|| Trimmed::of(t.text)),
                meta,
                pointer_original,
            }
        })
        .collect()
}

/// How one result entered the history.
#[derive(Clone)]
struct EnteredResult {
    /// What replaces the client's text, when it changed.
    replacement: Option<Trimmed>,
    /// Facts of the original.
    meta: ResultMeta,
    /// A pointer text that was cut further, with its own id.
    pointer_original: Option<(ContentId, std::sync::Arc<str>)>,
}

/// The way back the agent behind `request` has, which markers, abstracts and summaries name:
/// its MCP recall tool, declared or listed as deferred in its opening messages (Claude Code
/// lists the MCP tools it defers there: the same on every request of a session, so the text
/// does not change when the tool gets loaded), else the injected tool, else its shell when
/// that is its only tool.
fn recall_way_of(
    request: &ApiRequest,
    inject_tools: bool,
) -> Option<ctxgc_core::agent_tools::RecallWay> {
    let mut declared = ctxgc_core::agent_tools::declared_tool_names(&request.body);
    let listed = request
        .body
        .get(request.api.wire().items_key())
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .take_while(|item| !matches!(item["role"].as_str(), Some("assistant" | "model")))
        .take(OPENING_ITEMS)
        .find_map(listed_in);
    declared.extend(listed);
    ctxgc_core::agent_tools::recall_way(&declared, inject_tools)
}

/// The MCP recall tool a JSON value's texts list, read in place (no copy of the value).
fn listed_in(value: &Value) -> Option<&str> {
    match value {
        Value::String(text) => ctxgc_core::agent_tools::listed_recall_tool(text),
        Value::Array(items) => items.iter().find_map(listed_in),
        Value::Object(map) => map.values().find_map(listed_in),
        _ => None,
    }
}

/// How many opening items the recall tool's listing is looked for in.
const OPENING_ITEMS: usize = 4;

/// A trimmed output, also kept JSON-encoded (splicing it into a body is then a copy), with the
/// ids its repeat pointers name (read once, not on every request that resends it).
#[derive(Clone)]
struct Trimmed {
    text: std::sync::Arc<str>,
    json: std::sync::Arc<[u8]>,
    pointed: std::sync::Arc<[ContentId]>,
}

impl Trimmed {
    fn of(text: String) -> Trimmed {
        Trimmed {
            json: serde_json::to_vec(&text).unwrap_or_default().into(),
            pointed: ctxgc_core::engine::repeats::pointed_ids(&text).collect(),
            text: text.into(),
        }
    }

    /// The same output with its markers naming the agent's way back: the repeats it points to
    /// are the same ones.
    fn renamed(&self, text: String) -> Trimmed {
        Trimmed {
            json: serde_json::to_vec(&text).unwrap_or_default().into(),
            pointed: self.pointed.clone(),
            text: text.into(),
        }
    }
}

/// Trimmed turns, memoised by content: clients resend the same history on every request, and
/// trimming is a pure function of a turn's outputs, so each turn is trimmed once. Shared by
/// every request of a server, locked only to look up or insert, and bounded by bytes (what is
/// in use stays).
pub struct TrimMemo {
    turns: std::sync::Mutex<BoundedMemo<u64, TrimmedTurn>>,
    /// Each session's walk as its latest request left it ([`walk::Walk`]): the next request,
    /// which resends those items, goes on from it.
    walks: std::sync::Mutex<BoundedMemo<String, walk::Walk>>,
    /// Walks that went on from a kept one (what the tests check).
    #[cfg(test)]
    resumed: std::sync::atomic::AtomicUsize,
    /// Replaced strings found where the previous body's splice had them (what the tests check).
    #[cfg(test)]
    known_spans: std::sync::atomic::AtomicUsize,
}

/// A turn's outputs, each trimmed or left whole (`None`).
type TrimmedTurn = std::sync::Arc<[EnteredResult]>;

impl TrimMemo {
    /// Bytes at most.
    const MAX_BYTES: usize = 24 << 20;
    /// Bytes of the sessions' walks at most: the index of repeats of a full window (256 KiB of
    /// outputs) weighs about 2 MiB, so the developer's session or two keep theirs, and a proxy
    /// of many interleaved sessions, which would not find its own again, holds no more than
    /// this.
    const MAX_WALK_BYTES: usize = 4 << 20;

    /// Bytes of trimmed text it holds (at most 24 MiB).
    pub fn bytes(&self) -> usize {
        self.turns.lock().map_or(0, |t| t.bytes())
    }

    fn get(&self, key: u64) -> Option<TrimmedTurn> {
        self.turns.lock().ok()?.get(&key).cloned()
    }

    fn insert(&self, key: u64, turn: TrimmedTurn) {
        if let Ok(mut turns) = self.turns.lock() {
            turns.insert(key, turn);
        }
    }

    /// Takes out the walk `session`'s latest request left.
    fn take_walk(&self, session: &str) -> Option<walk::Walk> {
        self.walks.lock().ok()?.remove(&session.to_owned())
    }

    /// Keeps the walk a request of `session` left.
    fn keep_walk(&self, session: &str, walk: walk::Walk) {
        if let Ok(mut walks) = self.walks.lock() {
            walks.insert(session.to_owned(), walk);
        }
    }
}

impl Default for TrimMemo {
    fn default() -> Self {
        // A turn weighs its texts and their JSON, plus what holding it costs.
        fn weigh(_: &u64, turn: &TrimmedTurn) -> usize {
            64 + turn
                .iter()
                .map(|t| {
                    let meta = 96 + t.meta.first_error.as_ref().map_or(0, String::len);
                    let pointer = t.pointer_original.as_ref().map_or(0, |(_, p)| 32 + p.len());
                    meta + pointer
                        + t.replacement.as_ref().map_or(8, |t| {
                            64 + t.text.len() + t.json.len() + 16 * t.pointed.len()
                        })
                })
                .sum::<usize>()
        }
        TrimMemo {
            turns: std::sync::Mutex::new(BoundedMemo::new(TrimMemo::MAX_BYTES, weigh)),
            walks: std::sync::Mutex::new(BoundedMemo::new(
                TrimMemo::MAX_WALK_BYTES,
                |session, walk| 64 + session.len() + walk.weight(),
            )),
            #[cfg(test)]
            resumed: Default::default(),
            #[cfg(test)]
            known_spans: Default::default(),
        }
    }
}

#[cfg(test)]
mod tests;
mod walk;
