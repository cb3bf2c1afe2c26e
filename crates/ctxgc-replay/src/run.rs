//! Replaying one session under one policy at one window, through every cache model.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};

use ctxgc_core::tokens::TokenCounter;
use ctxgc_core::{Message, Role, Transcript};
use serde::Serialize;

use crate::cache::{Block, CacheKind, CacheModel, CacheRules, SentAt, Served, chain};
pub use crate::client::{Attachment, Calibration, client_prompt};
pub use crate::client_model::{
    CLIENT_WINDOW, ClientModel, client_model, client_window, session_window,
};
use crate::policies::{PolicyFactory, ReplayEvent, ReplayPolicy, SessionContext};
use crate::prices::ModelPrice;
use crate::recall::{RecallMemo, probes};
use ctxgc_core::tool_kind::tool_kind;

/// One request (or summarizer call) as the provider would have seen it. The default is an agent's
/// request that holds nothing (what tests fill in).
#[derive(Debug, Clone, Default, Serialize)]
pub struct RequestRecord {
    /// Index of the assistant message it produced in the source transcript.
    pub source_index: usize,
    /// Input tokens (tool definitions included).
    pub tokens: usize,
    /// Output tokens.
    pub output: usize,
    /// How each cache model served it.
    pub served: BTreeMap<&'static str, Served>,
    /// Whether this is a summarizer call rather than an agent request.
    pub summarizer: bool,
    /// Whether this is a keep-alive request (a read of the cached prefix while the session
    /// was idle) rather than an agent request.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub keepalive: bool,
    /// The event that ran before it, if any.
    pub event: Option<String>,
    /// Earliest message the event changed.
    pub earliest_changed: Option<usize>,
    /// Recall probes found / asked.
    pub recall: (usize, usize),
    /// For a policy that stores what it hides: the tokens of each original the agent would
    /// recall to see what the request misses (one recall round per original).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub recall_rounds: Vec<usize>,
    /// Of the probes the request misses, those such a recall would show again.
    #[serde(skip_serializing_if = "is_zero")]
    pub recallable: usize,
    /// When it was sent (milliseconds since the Unix epoch), where the log says.
    pub sent_ms: Option<i64>,
    /// It asked for the provider's long cache lifetime (the client's or the policy's choice).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub long_ttl: bool,
    /// On a client path, the references the request did not show, and where they came from
    /// (see [`crate::report::client_misses`]).
    #[serde(skip)]
    pub misses: Vec<Miss>,
    /// What the policy's event before it did with each output, and why (ctxgc's engine).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub decisions: Vec<ctxgc_core::engine::event::Decision>,
}

impl RequestRecord {
    /// Whether the agent sent it (not a summarizer call, not a keep-alive).
    pub fn is_agent(&self) -> bool {
        !self.summarizer && !self.keepalive
    }
}

#[cfg(test)]
impl SessionRun {
    /// A run of `policy` over one session whose requests (for assistant messages 1, 3, 5...)
    /// found `(found, asked)` references and missed `misses`.
    pub(crate) fn for_test(
        policy: &str,
        client_path: bool,
        requests: Vec<((usize, usize), Vec<Miss>)>,
    ) -> SessionRun {
        SessionRun {
            source: 0,
            session: "s".into(),
            policy: policy.into(),
            window: 200_000,
            limit: 200_000,
            requests: requests
                .into_iter()
                .enumerate()
                .map(|(i, (recall, misses))| RequestRecord {
                    source_index: i * 2 + 1,
                    recall,
                    misses,
                    ..RequestRecord::default()
                })
                .collect(),
            client_path,
            on_client_log: true,
            by_kind: BTreeMap::new(),
        }
    }
}

/// A reference a request did not show.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Miss {
    /// The string the agent went on to use.
    pub string: String,
    /// The tool whose output (the newest earlier one holding the string) it came from.
    pub tool: String,
    /// Assistant turns between that output and the request.
    pub turns_ago: usize,
    /// That output's call id.
    pub call_id: String,
}

/// One session x policy x window.
#[derive(Debug, Clone, Serialize)]
pub struct SessionRun {
    /// Index of the transcript among those replayed (ids can repeat across sources).
    pub source: usize,
    /// Session id.
    pub session: String,
    /// Policy name.
    pub policy: String,
    /// The table it belongs to: its window, or [`CLIENT_WINDOW`] for a session replayed at its
    /// client's own window.
    pub window: u64,
    /// The window it ran at: a request past it fails.
    pub limit: u64,
    /// Every request, summarizer calls included.
    pub requests: Vec<RequestRecord>,
    /// Whether it followed the requests the client sent (client logs, policies that do not
    /// replace the client's own context management) rather than the underlying conversation.
    pub client_path: bool,
    /// Whether the session is a client's log (it has a [`ctxgc_core::Recording`]).
    pub on_client_log: bool,
    /// Input tokens of the agent's requests by what they hold: `system prompt and tools`,
    /// `system`, `user`, `assistant`, and each tool output's kind (see [`crate::kinds`]).
    pub by_kind: BTreeMap<String, u64>,
}

impl SessionRun {
    /// Cost of the run under a cache model and its prices.
    pub fn cost(&self, cache: CacheKind, price: &ModelPrice) -> f64 {
        self.requests
            .iter()
            .map(|r| price.cost(&r.served[cache.name()], r.output))
            .sum()
    }
}

struct Caches(Vec<(CacheKind, Box<dyn CacheModel>)>);

impl Caches {
    fn preload(&mut self, blocks: &[Block], tokens: usize, at: Option<SentAt>) {
        for (_, m) in &mut self.0 {
            m.preload(blocks, tokens, at);
        }
    }

    fn serve(&mut self, blocks: &[Block], at: Option<SentAt>) -> BTreeMap<&'static str, Served> {
        self.0
            .iter_mut()
            .map(|(k, m)| (k.name(), m.serve_at(blocks, at)))
            .collect()
    }
}

/// What comes before the messages: the tool definitions and a client log's estimated fixed
/// prefix, as one block, or two where the client changed part of it during the session (the
/// unchanged part keeps its own breakpoint, as Claude Code marks its system blocks).
struct Prefix {
    blocks: Vec<(u64, usize)>,
}

/// How one request's blocks are built.
struct Layout<'a> {
    prefix: &'a Prefix,
    scale: f64,
    /// Salts mixed into message blocks (by position in the request) that the client changed.
    salts: &'a [(usize, u64)],
    /// Tokens the client sent with a message (by position) that the log does not hold.
    hidden: Option<(usize, usize)>,
    /// Tokens the client attached to a message the log holds without them, by the message's
    /// content hash: they go wherever the message goes, unchanged, in a policy's request.
    attached: &'a HashMap<u64, usize>,
    /// Whether the provider drops the reasoning of turns before the latest user message (the
    /// Responses API with a reasoning model, as Codex runs it), with each such message's
    /// (hash, tokens) without its reasoning, by its full hash.
    drops_earlier_reasoning: Option<&'a RefCell<HashMap<u64, (u64, usize)>>>,
}

/// The (hash, tokens) of `m` as the provider reads it once its reasoning is dropped.
fn without_reasoning(
    counter: &mut TokenCounter,
    memo: &RefCell<HashMap<u64, (u64, usize)>>,
    full_hash: u64,
    m: &Message,
) -> (u64, usize) {
    if let Some(&known) = memo.borrow().get(&full_hash) {
        return known;
    }
    let stripped = Message {
        content: m
            .content
            .iter()
            .filter(|b| !matches!(b, ctxgc_core::Block::Thinking { .. }))
            .cloned()
            .collect(),
        ..m.clone()
    };
    let (hash, tokens) = counter.count_message_hashed(&stripped);
    // Salted: a message that held nothing but reasoning must not read as an empty one.
    let counted = (hash ^ DROPPED_REASONING_SALT, tokens);
    memo.borrow_mut().insert(full_hash, counted);
    counted
}

/// Mixed into the hash of a message whose reasoning the provider dropped.
const DROPPED_REASONING_SALT: u64 = 0x005e_ed0f_d20b_be7d;

/// Blocks of a request: the prefix blocks, then one per message. The breakpoints an agent
/// places by default (end of the system prompt or tools, last message) plus the policy's own.
fn blocks(
    counter: &mut TokenCounter,
    layout: &Layout,
    messages: &[Message],
    (extra, stable): (&[usize], bool),
) -> (Vec<Block>, Vec<u64>) {
    let mut spec = Vec::with_capacity(messages.len() + 2);
    spec.extend(layout.prefix.blocks.iter().copied());
    let offset = spec.len();
    let mut hashes = Vec::with_capacity(messages.len());
    let mut attached_once: Vec<u64> = Vec::new();
    let latest_user = layout
        .drops_earlier_reasoning
        .and_then(|_| messages.iter().rposition(|m| m.role == Role::User));
    for (i, m) in messages.iter().enumerate() {
        let (hash, tokens) = counter.count_message_hashed(m);
        hashes.push(hash);
        let (block_hash, tokens) = match (layout.drops_earlier_reasoning, latest_user) {
            (Some(memo), Some(user))
                if i < user
                    && m.content
                        .iter()
                        .any(|b| matches!(b, ctxgc_core::Block::Thinking { .. })) =>
            {
                without_reasoning(counter, memo, hash, m)
            }
            _ => (hash, tokens),
        };
        // Once per request: a second message with the same text ("yes") carried nothing.
        let attached = match layout.attached.get(&hash) {
            Some(&n) if !attached_once.contains(&hash) => {
                attached_once.push(hash);
                n
            }
            _ => 0,
        };
        let salt = layout
            .salts
            .iter()
            .filter(|(at, _)| *at == i)
            .fold(0, |acc, (_, s)| acc ^ s);
        let hidden = layout.hidden.filter(|h| h.0 == i).map_or(0, |h| h.1);
        spec.push((
            block_hash ^ salt,
            scaled(tokens, layout.scale) + hidden + attached,
        ));
    }
    let mut blocks = chain(spec);
    if blocks.is_empty() {
        return (blocks, hashes);
    }
    for (block, m) in blocks[offset..].iter_mut().zip(messages) {
        block.parts = u32::try_from(m.content.len().max(1)).unwrap_or(u32::MAX);
    }
    let system_end = messages
        .iter()
        .take_while(|m| m.role == Role::System)
        .count();
    let first_bp = (system_end + offset).saturating_sub(1);
    let last = blocks.len() - 1;
    if offset > 1 {
        blocks[0].breakpoint = true;
        blocks[0].warm = true;
    }
    blocks[first_bp].breakpoint = true;
    blocks[last].breakpoint = true;
    // OpenAI's explicit breakpoint, where the proxy places it.
    let stable_end =
        ctxgc_core::cache_life::stable_prefix_end(messages.iter().map(|m| Some(m.role)))
            .map_or(first_bp, |i| i + offset);
    blocks[stable_end].explicit = stable;
    for &i in extra {
        if let Some(b) = blocks.get_mut(i + offset) {
            b.breakpoint = true;
        }
    }
    (blocks, hashes)
}

fn scaled(tokens: usize, scale: f64) -> usize {
    if scale == 1.0 {
        tokens
    } else {
        (tokens as f64 * scale).round() as usize
    }
}

/// Replays `t` (the `source`-th transcript) under a policy at `window` ([`CLIENT_WINDOW`]: its
/// client's own). With `record_misses`,
/// each request on a client path records what it hides that the client showed
/// ([`RequestRecord::misses`], for `ctxgc replay --misses`): finding where each came from reads
/// the history again, so it is done only when asked.
pub fn replay(
    source: usize,
    t: &Transcript,
    policy: &PolicyFactory,
    window: u64,
    caches: &[(CacheKind, CacheRules)],
    client: Option<&ClientModel>,
    record_misses: bool,
) -> SessionRun {
    let session = format!("{source}:{}", t.id);
    let limit = session_window(t, window);
    let context = SessionContext {
        window: limit,
        session: &session,
        transcript: t,
    };
    let factory = policy;
    let mut policy = factory(&context);
    let recording = t.recording.as_ref();
    let client_path = recording.is_some() && !policy.replaces_client_context();
    let no_model = ClientModel::default();
    let client = client.unwrap_or(&no_model);
    let calibration = client.calibration;
    let mut counter = crate::counting::counter();
    let mut models = Caches(
        caches
            .iter()
            .map(|&(k, rules)| (k, k.new_model(rules)))
            .collect(),
    );
    let tools_tokens = calibration.prefix_tokens
        + scaled(counter.count_tools(&t.tools), calibration.scale)
        + policy.extra_tool_tokens();
    // The same prefix in ctxgc's own count, as a proxy in front of the client would see it.
    let fixed_prefix = (calibration.prefix_tokens as f64 / calibration.scale).round() as usize
        + counter.count_tools(&t.tools);
    policy.fixed_prefix(fixed_prefix);
    let tools_hash = xxhash_rust::xxh3::xxh3_64(
        serde_json::to_string(&t.tools)
            .unwrap_or_default()
            .as_bytes(),
    ) ^ policy.extra_tool_tokens() as u64;
    // The fixed prefix in parts: split where the warm static part ends and where the first
    // request's read ended.
    let mut splits: Vec<usize> = [client.static_prefix_tokens, client.first_read_tokens]
        .into_iter()
        .flatten()
        .filter(|&at| at > 0 && at < tools_tokens)
        .collect();
    splits.sort_unstable();
    splits.dedup();
    let mut prefix = Prefix { blocks: Vec::new() };
    let mut from = 0;
    for (k, &at) in splits
        .iter()
        .chain(std::iter::once(&tools_tokens))
        .enumerate()
    {
        prefix.blocks.push((tools_hash ^ k as u64, at - from));
        from = at;
    }
    prefix.blocks.retain(|b| b.1 > 0);
    let mut salts: Vec<(usize, u64)> = Vec::new();
    let attached: HashMap<u64, usize> = if client_path {
        client
            .attachments
            .iter()
            .filter_map(|a| {
                let (hash, _) = counter.count_message_hashed(t.messages.get(a.at)?);
                Some((hash, a.tokens))
            })
            .collect()
    } else {
        HashMap::new()
    };
    // The Responses API drops the reasoning items of earlier turns from what the model reads
    // (and so from what the cache can serve past the first of them). Codex's rollouts are the
    // logs that hold such items.
    let drops_reasoning = recording.is_some_and(|r| r.client.starts_with("codex"));
    let reasoning_memo = RefCell::new(HashMap::new());
    let kinds = output_kinds(t);
    let probes = probes(t);
    let mut memo = RecallMemo::default();
    let mut requests = Vec::new();
    let mut by_kind: BTreeMap<String, u64> = BTreeMap::new();
    let mut pending: Vec<Message> = Vec::new();
    let system_end = t
        .messages
        .iter()
        .take_while(|m| m.role == Role::System)
        .count();
    let mut first_request = true;
    // The latest agent request: when it was sent, whether it asked for the long lifetime, and
    // its blocks (what a keep-alive reads again).
    let mut last_sent: Option<(i64, bool, Vec<Block>)> = None;
    for (index, message) in t.messages.iter().enumerate() {
        if let Some(recording) = recording {
            if recording.is_replacement(index) && !client_path {
                continue;
            }
            if client_path && recording.compactions.iter().any(|c| c.at == index) {
                // The client dropped its history: what runs in front of it starts over.
                pending.clear();
                salts.clear();
                policy = factory(&context);
                policy.fixed_prefix(fixed_prefix);
                for m in &t.messages[..system_end.min(index)] {
                    policy.push(m.clone());
                }
            }
        }
        if message.role == Role::Tool {
            pending.push(message.clone());
            continue;
        }
        if !pending.is_empty() {
            policy.insert_tool_results(std::mem::take(&mut pending));
        }
        if message.role == Role::Assistant {
            if client_path {
                prompt_changes_at(t, client, index, &mut prefix, &mut salts);
            }
            let hidden = if client_path {
                hidden_at(t, client, index)
            } else {
                None
            };
            let layout = Layout {
                prefix: &prefix,
                scale: client.scale_at(index),
                salts: &salts,
                hidden,
                attached: &attached,
                drops_earlier_reasoning: drops_reasoning.then_some(&reasoning_memo),
            };
            let sent_ms = recording.and_then(|r| r.sent_at(index));
            // Keep-alive requests the policy sends while the session is idle: each reads the
            // previous request's prefix again just before it would expire.
            if let Some(now) = sent_ms {
                keepalives(
                    policy.as_mut(),
                    &last_sent,
                    Some(now),
                    index,
                    &mut models,
                    &mut requests,
                );
            }
            let client_long = message
                .usage
                .is_some_and(|u| u.cache_write_1h_tokens * 2 > u.cache_write_tokens);
            let at = sent_ms.map(|ms| SentAt {
                ms,
                long_ttl: client_long,
            });
            let output = counter.count_message(message);
            if client_path {
                let from = client
                    .prompt_changes
                    .iter()
                    .filter(|c| c.0 == index)
                    .map(|c| c.1)
                    .min_by_key(|m| m.map_or(0, |m| m + 1));
                if let Some(from) = from {
                    policy.client_changed_prompt(from);
                }
            }
            policy.clock(at);
            let request = policy.request();
            // The policy's own cache-lifetime decision, where it makes one.
            let at = at.map(|a| SentAt {
                long_ttl: request.long_ttl.unwrap_or(a.long_ttl),
                ..a
            });
            let event: Option<ReplayEvent> = request.event;
            if let Some(summarizer) = event.as_ref().and_then(|e| e.summarizer_request.as_ref()) {
                let (b, _) = blocks(&mut counter, &layout, summarizer, (&[], false));
                requests.push(RequestRecord {
                    source_index: index,
                    tokens: b.iter().map(|b| b.tokens).sum(),
                    output: event.as_ref().map_or(0, |e| e.summary_tokens),
                    served: models.serve(&b, at),
                    summarizer: true,
                    keepalive: false,
                    event: None,
                    earliest_changed: None,
                    recall: (0, 0),
                    recall_rounds: Vec::new(),
                    recallable: 0,
                    sent_ms,
                    long_ttl: at.is_some_and(|a| a.long_ttl),
                    misses: Vec::new(),
                    decisions: Vec::new(),
                });
            }
            let (b, hashes) = blocks(
                &mut counter,
                &layout,
                request.messages,
                (&request.breakpoints, request.stable_breakpoint),
            );
            if first_request {
                first_request = false;
                // A session that resumes an earlier one reads what that one left cached.
                let resumed = message.usage.map_or(0, |u| u.cached_tokens as usize);
                if resumed > 0 {
                    models.preload(&b, resumed, at);
                }
            }
            let offset = b.len() - request.messages.len();
            for block in &b[..offset] {
                *by_kind.entry(PREFIX_KIND.into()).or_default() += block.tokens as u64;
            }
            for (m, block) in request.messages.iter().zip(&b[offset..]) {
                *by_kind.entry(kind_of(m, &kinds)).or_default() += block.tokens as u64;
            }
            let asked = probes.get(&index).map_or(&[][..], Vec::as_slice);
            let missing = memo.missing(asked, request.messages, &hashes);
            let found = asked.len() - missing.len();
            // Where each missing string came from, found once for the recall rounds and the
            // misses (each lookup reads the history back).
            let wants_rounds = policy.stores_originals();
            let wants_misses = client_path && record_misses;
            let sources: Vec<(&String, usize)> = if wants_rounds || wants_misses {
                missing
                    .iter()
                    .filter_map(|s| Some((*s, source_of(t, index, s)?)))
                    .collect()
            } else {
                Vec::new()
            };
            let (recall_rounds, recallable) = if wants_rounds {
                recall_rounds(t, &sources, &mut counter)
            } else {
                (Vec::new(), 0)
            };
            let misses = if wants_misses {
                misses(t, index, &sources)
            } else {
                Vec::new()
            };
            let tokens = b.iter().map(|b| b.tokens).sum();
            requests.push(RequestRecord {
                source_index: index,
                tokens,
                output,
                served: models.serve(&b, at),
                summarizer: false,
                keepalive: false,
                event: event.as_ref().map(|e| e.kind.clone()),
                earliest_changed: event.as_ref().map(|e| e.earliest_changed),
                decisions: event.map(|e| e.decisions).unwrap_or_default(),
                recall: (found, asked.len()),
                recall_rounds,
                recallable,
                sent_ms,
                long_ttl: at.is_some_and(|a| a.long_ttl),
                misses,
            });
            if let Some(a) = at {
                last_sent = Some((a.ms, a.long_ttl, b));
            }
            policy.observe_usage(tokens);
        }
        policy.push(message.clone());
    }
    // After its last request the session is idle for good, which the proxy cannot tell from a
    // pause: it goes on sending the keep-alives its decision finds due, and they are billed.
    let last_index = t.messages.len().saturating_sub(1);
    keepalives(
        policy.as_mut(),
        &last_sent,
        None,
        last_index,
        &mut models,
        &mut requests,
    );
    SessionRun {
        source,
        session: t.id.clone(),
        policy: policy.name(),
        window,
        limit,
        requests,
        client_path,
        on_client_log: recording.is_some(),
        by_kind,
    }
}

/// Keep-alives a session would send after the one it sent at `last` (when, whether it asked for
/// the long lifetime, its blocks), until the request sent `until` (or for as long as the policy
/// finds them due, when no request follows): each reads those blocks again just before they
/// would expire.
fn keepalives(
    policy: &mut dyn ReplayPolicy,
    last: &Option<(i64, bool, Vec<Block>)>,
    until: Option<i64>,
    source_index: usize,
    models: &mut Caches,
    requests: &mut Vec<RequestRecord>,
) {
    // A policy's own limits (budget, idle time) end its keep-alives; this one guards the lab
    // against a policy without any.
    const MOST: usize = 10_000;
    let (Some((last_ms, long_ttl, blocks)), Some(every)) =
        (last, policy.keepalive_every_ms().filter(|e| *e > 0))
    else {
        return;
    };
    let mut t = last_ms + every;
    let mut sent = 0;
    while until.is_none_or(|until| t < until) && sent < MOST && policy.keepalive_due(t - last_ms) {
        let ping = SentAt {
            ms: t,
            long_ttl: *long_ttl,
        };
        requests.push(RequestRecord {
            source_index,
            tokens: blocks.iter().map(|b| b.tokens).sum(),
            output: 1,
            served: models.serve(blocks, Some(ping)),
            summarizer: false,
            keepalive: true,
            event: None,
            earliest_changed: None,
            recall: (0, 0),
            recall_rounds: Vec::new(),
            recallable: 0,
            sent_ms: Some(t),
            long_ttl: *long_ttl,
            misses: Vec::new(),
            decisions: Vec::new(),
        });
        t += every;
        sent += 1;
    }
}

/// The most a recall returns, in tokens (the trim tool's hard cap, 128 KB, at 4 bytes a token).
const RECALL_MAX_TOKENS: usize = 32 * 1024;

/// The originals to recall for the strings a request misses, given the newest earlier tool
/// output that holds each (`sources`): one round per original, its tokens capped at what one
/// recall returns; and how many of the strings they hold.
fn recall_rounds(
    t: &Transcript,
    sources: &[(&String, usize)],
    counter: &mut TokenCounter,
) -> (Vec<usize>, usize) {
    let recallable = sources.len();
    let mut originals: Vec<usize> = sources.iter().map(|&(_, i)| i).collect();
    originals.sort_unstable();
    originals.dedup();
    let rounds = originals
        .into_iter()
        .map(|i| counter.count_message(&t.messages[i]).min(RECALL_MAX_TOKENS))
        .collect();
    (rounds, recallable)
}

/// The newest tool output before message `index` that holds `string`.
fn source_of(t: &Transcript, index: usize, string: &str) -> Option<usize> {
    (0..index).rev().find(|&i| {
        t.messages[i].role == Role::Tool
            && crate::recall::message_text(&t.messages[i]).contains(string)
    })
}

/// The references a request before message `index` misses, with where they came from
/// (`sources`: each missing string and the tool output that held it).
fn misses(t: &Transcript, index: usize, sources: &[(&String, usize)]) -> Vec<Miss> {
    sources
        .iter()
        .map(|&(string, source)| Miss {
            string: string.clone(),
            tool: t.messages[source]
                .tool_results()
                .find_map(|r| r.tool_name.clone())
                .unwrap_or_else(|| "tool".into()),
            turns_ago: t.messages[source..index]
                .iter()
                .filter(|m| m.role == Role::Assistant)
                .count(),
            call_id: t.messages[source]
                .tool_results()
                .next()
                .map(|r| r.call_id.clone())
                .unwrap_or_default(),
        })
        .collect()
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Applies the prompt changes the client made at request `index`: a new version of the
/// changing part of the fixed prefix, or of the first changed message (by its position in the
/// client's request) from here on.
fn prompt_changes_at(
    t: &Transcript,
    client: &ClientModel,
    index: usize,
    prefix: &mut Prefix,
    salts: &mut Vec<(usize, u64)>,
) {
    for (n, &(_, message)) in client
        .prompt_changes
        .iter()
        .enumerate()
        .filter(|(_, c)| c.0 == index)
    {
        let salt = xxhash_rust::xxh3::xxh3_64(&(n as u64).to_le_bytes());
        match message {
            None => {
                if let Some(last) = prefix.blocks.last_mut() {
                    last.0 ^= salt;
                }
            }
            Some(m) => {
                let (range, system) = client_prompt(t, index);
                let position = if m < system {
                    Some(m)
                } else {
                    (m >= range.start).then(|| system + m - range.start)
                };
                salts.extend(position.map(|p| (p, salt)));
            }
        }
    }
}

/// Where the tokens the client re-attached after its latest compaction go in request `index`:
/// with the compaction's first message, at its position in the request.
fn hidden_at(t: &Transcript, client: &ClientModel, index: usize) -> Option<(usize, usize)> {
    let (range, system) = client_prompt(t, index);
    client
        .hidden_after_compaction
        .iter()
        .find(|(at, _)| *at == range.start && range.start > 0)
        .map(|&(_, tokens)| (system, tokens))
}

/// The kind under which the fixed prefix (system prompt and tool definitions) is counted.
pub const PREFIX_KIND: &str = "system prompt and tools";

/// Each tool call id's output kind.
fn output_kinds(t: &Transcript) -> HashMap<&str, String> {
    t.messages
        .iter()
        .flat_map(Message::tool_calls)
        .map(|call| (call.id.as_str(), tool_kind(call)))
        .collect()
}

fn kind_of(m: &Message, kinds: &HashMap<&str, String>) -> String {
    match m.role {
        Role::Tool => m
            .tool_results()
            .next()
            .and_then(|r| kinds.get(r.call_id.as_str()))
            .cloned()
            .unwrap_or_else(|| "other tool output".into()),
        role => role.as_str().into(),
    }
}

#[cfg(test)]
mod tests;
