//! Replaying one session under one policy at one window, through every cache model.

use std::collections::{BTreeMap, HashMap};

use ctxgc_core::tokens::TokenCounter;
use ctxgc_core::{Message, Role, Transcript};
use serde::Serialize;

use crate::cache::{Block, CacheKind, CacheModel, SentAt, Served, chain};
use crate::kinds::tool_kind;
use crate::policies::{PolicyFactory, ReplayEvent, SessionContext};
use crate::prices::ModelPrice;
use crate::recall::{RecallMemo, probes};

/// One request (or summarizer call) as the provider would have seen it.
#[derive(Debug, Clone, Serialize)]
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
    /// The event that ran before it, if any.
    pub event: Option<String>,
    /// Earliest message the event changed.
    pub earliest_changed: Option<usize>,
    /// Recall probes found / asked.
    pub recall: (usize, usize),
    /// When it was sent (milliseconds since the Unix epoch), where the log says.
    pub sent_ms: Option<i64>,
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
    /// Window.
    pub window: u64,
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
    fn serve(&mut self, blocks: &[Block], at: Option<SentAt>) -> BTreeMap<&'static str, Served> {
        self.0
            .iter_mut()
            .map(|(k, m)| (k.name(), m.serve_at(blocks, at)))
            .collect()
    }
}

/// How a client log's requests are counted. The log has neither the system prompt nor the
/// tool definitions, and Claude has no public tokenizer, so both are estimated once per session
/// from the usage the provider recorded: `scale` is the least-squares slope of recorded prompt
/// tokens over ctxgc's o200k count of the messages the client sent, and `prefix_tokens` what
/// the first call's recorded prompt holds beyond its scaled messages.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Calibration {
    /// Tokens of the fixed prefix (system prompt and tool definitions) the log does not hold.
    pub prefix_tokens: usize,
    /// Provider tokens per o200k token of the messages.
    pub scale: f64,
}

impl Default for Calibration {
    fn default() -> Self {
        Calibration {
            prefix_tokens: 0,
            scale: 1.0,
        }
    }
}

/// The message indices of the request that produced assistant message `index`, as the client
/// sent it: everything before it, or after the client's latest compaction its leading system
/// messages and what followed the compaction.
pub fn client_prompt(t: &Transcript, index: usize) -> (std::ops::Range<usize>, usize) {
    let system_end = t
        .messages
        .iter()
        .take_while(|m| m.role == Role::System)
        .count();
    let start = t
        .recording
        .as_ref()
        .and_then(|r| r.compactions.iter().rev().find(|c| c.at <= index))
        .map_or(0, |c| c.at.max(system_end));
    (start..index, if start > 0 { system_end } else { 0 })
}

/// The calibration of a client log with recorded usage; `None` for other transcripts.
pub fn calibrate(t: &Transcript) -> Option<Calibration> {
    t.recording.as_ref()?;
    let mut counter = TokenCounter::openai();
    let tokens: Vec<usize> = t
        .messages
        .iter()
        .map(|m| counter.count_message(m))
        .collect();
    let mut sums = vec![0usize; tokens.len() + 1];
    for (i, n) in tokens.iter().enumerate() {
        sums[i + 1] = sums[i] + n;
    }
    let points: Vec<(f64, f64)> = t
        .messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.role == Role::Assistant)
        .filter_map(|(i, m)| {
            let usage = m.usage.filter(|u| u.prompt_tokens > 0)?;
            let (range, system) = client_prompt(t, i);
            let counted = sums[range.end] - sums[range.start] + sums[system] + 3;
            Some((counted as f64, usage.prompt_tokens as f64))
        })
        .collect();
    let &(m1, r1) = points.first()?;
    let n = points.len() as f64;
    let (mx, my) = (
        points.iter().map(|p| p.0).sum::<f64>() / n,
        points.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let var: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let cov: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let scale = if var > 0.0 { cov / var } else { 1.0 }.clamp(0.7, 2.0);
    Some(Calibration {
        prefix_tokens: (r1 - scale * m1).max(0.0).round() as usize,
        scale,
    })
}

/// Blocks of a request: one for the tool definitions (if any), then one per message. The
/// breakpoints an agent places by default (end of the system prompt or tools, last message)
/// plus the policy's own.
fn blocks(
    counter: &mut TokenCounter,
    tools: (u64, usize),
    scale: f64,
    messages: &[Message],
    extra: &[usize],
) -> (Vec<Block>, Vec<u64>) {
    let mut spec = Vec::with_capacity(messages.len() + 1);
    let offset = usize::from(tools.1 > 0);
    if tools.1 > 0 {
        spec.push(tools);
    }
    let mut hashes = Vec::with_capacity(messages.len());
    for m in messages {
        let (hash, tokens) = counter.count_message_hashed(m);
        hashes.push(hash);
        spec.push((hash, scaled(tokens, scale)));
    }
    let mut blocks = chain(spec);
    if blocks.is_empty() {
        return (blocks, hashes);
    }
    let system_end = messages
        .iter()
        .take_while(|m| m.role == Role::System)
        .count();
    let first_bp = (system_end + offset).saturating_sub(1);
    let last = blocks.len() - 1;
    blocks[first_bp].breakpoint = true;
    blocks[last].breakpoint = true;
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

/// Replays `t` (the `source`-th transcript) under a policy at `window`.
pub fn replay(
    source: usize,
    t: &Transcript,
    policy: &PolicyFactory,
    window: u64,
    caches: &[(CacheKind, usize)],
    calibration: Option<Calibration>,
) -> SessionRun {
    let session = format!("{source}:{}", t.id);
    let context = SessionContext {
        window,
        session: &session,
        transcript: t,
    };
    let factory = policy;
    let mut policy = factory(&context);
    let recording = t.recording.as_ref();
    let client_path = recording.is_some() && !policy.replaces_client_context();
    let calibration = calibration.unwrap_or_default();
    let mut counter = TokenCounter::openai();
    let mut models = Caches(
        caches
            .iter()
            .map(|&(k, min)| (k, k.new_model(min)))
            .collect(),
    );
    let tools_tokens = calibration.prefix_tokens
        + scaled(counter.count_tools(&t.tools), calibration.scale)
        + policy.extra_tool_tokens();
    let tools_hash = xxhash_rust::xxh3::xxh3_64(
        serde_json::to_string(&t.tools)
            .unwrap_or_default()
            .as_bytes(),
    ) ^ policy.extra_tool_tokens() as u64;
    let tools = (tools_hash, tools_tokens);
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
    for (index, message) in t.messages.iter().enumerate() {
        if let Some(recording) = recording {
            if recording.is_replacement(index) && !client_path {
                continue;
            }
            if client_path && recording.compactions.iter().any(|c| c.at == index) {
                // The client dropped its history: what runs in front of it starts over.
                pending.clear();
                policy = factory(&context);
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
            let sent_ms = recording.and_then(|r| r.sent_at(index));
            let at = sent_ms.map(|ms| SentAt {
                ms,
                ttl_1h: message
                    .usage
                    .is_some_and(|u| u.cache_write_1h_tokens * 2 > u.cache_write_tokens),
            });
            let output = counter.count_message(message);
            let request = policy.request();
            let event: Option<ReplayEvent> = request.event;
            if let Some(summarizer) = event.as_ref().and_then(|e| e.summarizer_request.as_ref()) {
                let (b, _) = blocks(&mut counter, tools, calibration.scale, summarizer, &[]);
                requests.push(RequestRecord {
                    source_index: index,
                    tokens: b.iter().map(|b| b.tokens).sum(),
                    output: event.as_ref().map_or(0, |e| e.summary_tokens),
                    served: models.serve(&b, at),
                    summarizer: true,
                    event: None,
                    earliest_changed: None,
                    recall: (0, 0),
                    sent_ms,
                });
            }
            let (b, hashes) = blocks(
                &mut counter,
                tools,
                calibration.scale,
                request.messages,
                &request.breakpoints,
            );
            let offset = b.len() - request.messages.len();
            if offset > 0 {
                *by_kind.entry(PREFIX_KIND.into()).or_default() += b[0].tokens as u64;
            }
            for (m, block) in request.messages.iter().zip(&b[offset..]) {
                *by_kind.entry(kind_of(m, &kinds)).or_default() += block.tokens as u64;
            }
            let asked = probes.get(&index).map_or(&[][..], Vec::as_slice);
            let found = memo.found(asked, request.messages, &hashes);
            requests.push(RequestRecord {
                source_index: index,
                tokens: b.iter().map(|b| b.tokens).sum(),
                output,
                served: models.serve(&b, at),
                summarizer: false,
                event: event.as_ref().map(|e| e.kind.clone()),
                earliest_changed: event.as_ref().map(|e| e.earliest_changed),
                recall: (found, asked.len()),
                sent_ms,
            });
        }
        policy.push(message.clone());
    }
    SessionRun {
        source,
        session: t.id.clone(),
        policy: policy.name(),
        window,
        requests,
        client_path,
        on_client_log: recording.is_some(),
        by_kind,
    }
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
