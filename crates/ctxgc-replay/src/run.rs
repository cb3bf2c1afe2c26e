//! Replaying one session under one policy at one window, through every cache model.

use std::collections::BTreeMap;

use ctxgc_core::tokens::TokenCounter;
use ctxgc_core::{Message, Role, Transcript};
use serde::Serialize;

use crate::cache::{Block, CacheKind, CacheModel, Served, chain};
use crate::policies::{PolicyFactory, ReplayEvent};
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
    fn serve(&mut self, blocks: &[Block]) -> BTreeMap<&'static str, Served> {
        self.0
            .iter_mut()
            .map(|(k, m)| (k.name(), m.serve(blocks)))
            .collect()
    }
}

/// Blocks of a request: one for the tool definitions (if any), then one per message. The
/// breakpoints an agent places by default (end of the system prompt or tools, last message)
/// plus the policy's own.
fn blocks(
    counter: &mut TokenCounter,
    tools: (u64, usize),
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
        spec.push((hash, tokens));
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

/// Replays `t` (the `source`-th transcript) under a policy at `window`.
pub fn replay(
    source: usize,
    t: &Transcript,
    policy: &PolicyFactory,
    window: u64,
    caches: &[(CacheKind, usize)],
) -> SessionRun {
    let mut policy = policy(window);
    let mut counter = TokenCounter::openai();
    let mut models = Caches(
        caches
            .iter()
            .map(|&(k, min)| (k, k.new_model(min)))
            .collect(),
    );
    let tools_tokens = counter.count_tools(&t.tools) + policy.extra_tool_tokens();
    let tools_hash = xxhash_rust::xxh3::xxh3_64(
        serde_json::to_string(&t.tools)
            .unwrap_or_default()
            .as_bytes(),
    ) ^ policy.extra_tool_tokens() as u64;
    let tools = (tools_hash, tools_tokens);
    let probes = probes(t);
    let mut memo = RecallMemo::default();
    let mut requests = Vec::new();
    let mut pending: Vec<Message> = Vec::new();
    for (index, message) in t.messages.iter().enumerate() {
        if message.role == Role::Tool {
            pending.push(message.clone());
            continue;
        }
        if !pending.is_empty() {
            policy.insert_tool_results(std::mem::take(&mut pending));
        }
        if message.role == Role::Assistant {
            let output = counter.count_message(message);
            let request = policy.request();
            let event: Option<ReplayEvent> = request.event;
            if let Some(summarizer) = event.as_ref().and_then(|e| e.summarizer_request.as_ref()) {
                let (b, _) = blocks(&mut counter, tools, summarizer, &[]);
                requests.push(RequestRecord {
                    source_index: index,
                    tokens: b.iter().map(|b| b.tokens).sum(),
                    output: event.as_ref().map_or(0, |e| e.summary_tokens),
                    served: models.serve(&b),
                    summarizer: true,
                    event: None,
                    earliest_changed: None,
                    recall: (0, 0),
                });
            }
            let (b, hashes) = blocks(&mut counter, tools, request.messages, &request.breakpoints);
            let asked = probes.get(&index).map_or(&[][..], Vec::as_slice);
            let found = memo.found(asked, request.messages, &hashes);
            requests.push(RequestRecord {
                source_index: index,
                tokens: b.iter().map(|b| b.tokens).sum(),
                output,
                served: models.serve(&b),
                summarizer: false,
                event: event.as_ref().map(|e| e.kind.clone()),
                earliest_changed: event.as_ref().map(|e| e.earliest_changed),
                recall: (found, asked.len()),
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
    }
}
