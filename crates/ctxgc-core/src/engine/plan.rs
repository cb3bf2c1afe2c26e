//! Planning an event: a pure function of the prompt, its token counts, the window and the
//! policy. Applying a plan (with a summarizer) is a separate step, so plans can be tested and
//! replayed without an LLM.
//!
//! Phase 1 prunes the middle with no LLM call: superseded file reads, older copies of identical
//! outputs, old outputs beyond the protected budget of recent tool output (one-line abstracts),
//! and huge tool-call arguments. Pruning is accepted alone only when it reclaims a real amount
//! and lands the prompt at least the runway under the threshold; otherwise the same event goes
//! on to phase 2 and compacts the middle into one summary.

use std::collections::BTreeMap;
use std::collections::HashMap;

use serde_json::Value;

use crate::engine::abstracts::{ResultMeta, abstract_line};
use crate::engine::facts::{self, FileAccess};
use crate::engine::policy::Policy;
use crate::engine::segments;
use crate::tokens::TokenCounter;
use crate::transcript::{Block, Message, Role, ToolCall};
use crate::trim::json::trim_json;

/// Framing tokens of a message (see `tokens`), for estimates of replaced messages.
const FRAMING: usize = 3;

/// What planning looks at.
#[derive(Clone, Copy)]
pub struct PlanInput<'a> {
    /// The prompt as the model sees it now.
    pub messages: &'a [Message],
    /// Tokens of each message.
    pub tokens: &'a [usize],
    /// Tokens sent on every request besides messages (tool definitions, reply priming).
    pub fixed_tokens: usize,
    /// Facts of tool outputs, by call id.
    pub metas: &'a BTreeMap<String, ResultMeta>,
    /// The model's context window.
    pub window: u64,
    /// Messages before this index stand for what an earlier event rewrote (its summary, its
    /// pruned prefix): a new event's tail may not start inside them.
    pub frozen: usize,
    /// The provider's prompt cache has expired (a pause past its TTL): the request rewrites
    /// its whole prefix anyway ([`Policy::cold_cache_secs`]).
    pub cache_cold: bool,
    /// The model's cache prices, when known ([`crate::models::cache_prices`]); else the
    /// policy's.
    pub cache_prices: Option<crate::provider_cache::CachePrices>,
    /// Whether the event may summarise the middle. Off in front of a client that keeps its own
    /// window (the proxy without `compact`): the client shows its history until its own
    /// compaction, and a summary would hide all of the middle; a prune hides only old tool
    /// outputs, each stored and recallable.
    pub may_compact: bool,
}

/// Assistant turns over which growth per turn is measured.
const GROWTH_TURNS: usize = 8;

impl PlanInput<'_> {
    /// Tokens of the whole prompt.
    pub fn total(&self) -> usize {
        self.tokens.iter().sum::<usize>() + self.fixed_tokens
    }

    /// Mean tokens a turn added recently: the messages since the `GROWTH_TURNS`-th last
    /// assistant message, divided by the assistant turns among them.
    pub fn growth_per_turn(&self) -> usize {
        let turns = crate::transcript::assistant_turns(self.messages);
        if turns.len() < 2 {
            return 0;
        }
        let from = turns[turns.len().saturating_sub(GROWTH_TURNS)];
        let count = turns.len() - turns.len().saturating_sub(GROWTH_TURNS);
        self.tokens[from..].iter().sum::<usize>() / count
    }
}

/// The kind of event a plan makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PlanKind {
    /// Phase 1 alone.
    PruneOnly,
    /// Phase 2: the middle becomes a summary.
    Compaction,
}

/// Why a message is pruned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PruneReason {
    /// A file read later edited, or read again whole or in the same part.
    Superseded,
    /// An older copy of an identical output.
    Duplicate,
    /// Beyond the protected budget of recent tool output.
    Old,
    /// Tool-call arguments over the size limit.
    HugeArguments,
    /// Assistant text over the runaway limit.
    RunawayText,
}

/// A change to one message.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PruneEdit {
    /// The message.
    pub index: usize,
    /// Why.
    pub reason: PruneReason,
    /// For results: the new text. For arguments: the call id and its new arguments.
    pub replacement: Replacement,
    /// Tokens before and after (estimates used for the runway rule).
    pub tokens_before: usize,
    /// See `tokens_before`.
    pub tokens_after: usize,
}

/// The new content of a pruned part.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub enum Replacement {
    /// The tool result's whole text.
    Result(String),
    /// An assistant message's text (its text blocks become this one).
    Text(String),
    /// One call's arguments.
    Arguments {
        /// The call.
        call_id: String,
        /// New arguments (valid JSON).
        arguments: String,
    },
}

/// An event to apply.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Plan {
    /// Prune-only or compaction.
    pub kind: PlanKind,
    /// Prompt tokens now.
    pub tokens_before: usize,
    /// Expected prompt tokens after the event.
    pub estimated_after: usize,
    /// End of the head.
    pub head_end: usize,
    /// Start of the tail.
    pub tail_start: usize,
    /// Phase-1 edits (prune-only plans).
    pub edits: Vec<PruneEdit>,
    /// Target summary size (compaction plans).
    pub summary_budget: usize,
    /// How the summary tells the agent to get outputs back ([`Policy::recall_hint`]).
    pub recall_hint: String,
}

/// The share of the prompt a request after the provider's cache expired would still send: the
/// event that pause makes free (planned as [`plan`] plans it on a cold cache) drops the rest; 1
/// when none would run. A keep-alive, which keeps the cache warm, gives that event up: this is
/// what it is weighed against ([`crate::cache_life::keepalive_due`]).
pub fn kept_if_cold(input: &PlanInput<'_>, policy: &Policy, counter: &TokenCounter) -> f64 {
    let cold = PlanInput {
        cache_cold: true,
        ..*input
    };
    plan(&cold, policy, counter)
        .filter(|p| p.tokens_before > 0)
        .map_or(1.0, |p| {
            (p.estimated_after as f64 / p.tokens_before as f64).clamp(0.0, 1.0)
        })
}

/// Plans the event that is due, if any.
pub fn plan(input: &PlanInput<'_>, policy: &Policy, counter: &TokenCounter) -> Option<Plan> {
    let total = input.total();
    let threshold = policy.threshold(input.window);
    let growth = input.growth_per_turn();
    // A cold cache makes an event free of cache cost: one due within the runway runs now, and
    // below that a prune that reclaims a real amount.
    let due = total >= threshold;
    let due_soon = input.cache_cold && total + policy.runway(input.window, growth) >= threshold;
    // Before any event is due: a prune of what is older than the newest outputs, at a cold
    // cache when it reclaims a real amount, at a warm one when it pays for the cache write.
    let early = !due && !due_soon;
    let assistant_turns = |messages: &[Message]| {
        messages
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .count()
    };
    let turns = assistant_turns(input.messages);
    // Events stay rare: a warm prune waits twice the runway's turns after the last event (what
    // it rewrote ends at `frozen`; before any event only the system prompt can stand there).
    let quiet = || {
        let frozen = input.frozen.min(input.messages.len());
        let since_event = turns - assistant_turns(&input.messages[..frozen]);
        since_event == turns || since_event >= policy.warm_prune_gap_turns
    };
    if early && !input.cache_cold && !(quiet() && early_prune_may_pay(input, policy, turns)) {
        return None;
    }
    let messages = input.messages;
    let head_end = segments::head_end(messages, policy.head_exchanges);
    let newest = newest_turns(input, policy.mask_keep_turns);
    // An early prune keeps a shorter tail: only the newest outputs (or turns) stay whole.
    let tail_budget = if early {
        match newest {
            Some(turns) => turns.all,
            None => policy
                .tail_budget(input.window)
                .min(policy.cold_protected_tokens),
        }
    } else {
        policy.tail_budget(input.window)
    };
    let tail_start = segments::tail_start(
        messages,
        input.tokens,
        tail_budget,
        policy.tail_ceiling,
        policy.tail_min_messages,
        head_end,
    );
    let tail_start = past_runaways(messages, policy, tail_start);
    // An event needs a middle, a tail, and a boundary outside what the last event rewrote.
    if tail_start < input.frozen || tail_start >= messages.len() || head_end >= tail_start {
        return None;
    }
    let reclaimed_by = |edits: &[PruneEdit]| -> usize {
        edits
            .iter()
            .map(|e| e.tokens_before.saturating_sub(e.tokens_after))
            .sum()
    };
    // An early prune protects only the newest outputs (and, at a warm cache, current reads).
    let (protected, keep_current_reads) = if early {
        (early_protected_tokens(input, policy), !input.cache_cold)
    } else {
        (policy.protected_tool_tokens(input.window), false)
    };
    let edits = prune_edits(
        input,
        policy,
        counter,
        (head_end, tail_start),
        protected,
        keep_current_reads,
    );
    let reclaimed = reclaimed_by(&edits);
    if early {
        if reclaimed < policy.cold_min_reclaim_tokens {
            return None;
        }
        let first = edits.iter().map(|e| e.index).min().unwrap_or(tail_start);
        if !input.cache_cold && !warm_prune_pays(input, policy, reclaimed, first, turns) {
            return None;
        }
        return Some(Plan {
            kind: PlanKind::PruneOnly,
            tokens_before: total,
            estimated_after: total - reclaimed,
            head_end,
            tail_start,
            edits,
            summary_budget: 0,
            recall_hint: policy.recall_hint.clone(),
        });
    }
    let target = threshold.saturating_sub(policy.runway(input.window, growth));
    let worth_pruning = reclaimed >= policy.min_reclaim(input.window);
    // What the client pins stays through a compaction: it is not reclaimed.
    let middle: usize = (head_end..tail_start)
        .filter(|&i| !segments::is_pinned(&messages[i]))
        .map(|i| input.tokens[i])
        .sum();
    let budget = policy.summary_budget(middle, input.window);
    let can_compact = tail_start > head_end && middle > budget + FRAMING;
    // Prune alone when that buys the runway; compact otherwise; when there is nothing to
    // compact, pruning alone is still better than nothing if it reclaims a real amount.
    let (kind, estimated_after, edits, summary_budget) =
        if worth_pruning && total - reclaimed <= target {
            (PlanKind::PruneOnly, total - reclaimed, edits, 0)
        } else if can_compact && input.may_compact {
            (
                PlanKind::Compaction,
                total - middle + budget + FRAMING,
                Vec::new(),
                budget,
            )
        } else if worth_pruning {
            (PlanKind::PruneOnly, total - reclaimed, edits, 0)
        } else {
            return None;
        };
    Some(Plan {
        kind,
        tokens_before: total,
        estimated_after,
        head_end,
        tail_start,
        edits,
        summary_budget,
        recall_hint: policy.recall_hint.clone(),
    })
}

/// A cheap bound checked on every request before planning an early prune at a warm cache: even
/// if every tool output older than the newest protected ones became nothing, and nothing before
/// the oldest of them changed, would the prune pay?
fn early_prune_may_pay(input: &PlanInput<'_>, policy: &Policy, turns: usize) -> bool {
    if policy.economic_margin <= 0.0 {
        return false;
    }
    let budget = early_protected_tokens(input, policy);
    let mut protected = 0usize;
    let mut old = 0usize;
    let mut oldest = None;
    for (i, m) in input.messages.iter().enumerate().rev() {
        if m.role != Role::Tool {
            continue;
        }
        if protected < budget {
            protected += input.tokens[i];
        } else {
            old += input.tokens[i];
            oldest = Some(i);
        }
    }
    oldest.is_some_and(|oldest| {
        old >= policy.cold_min_reclaim_tokens && warm_prune_pays(input, policy, old, oldest, turns)
    })
}

/// Whether a prune at a warm cache that reclaims `reclaimed` tokens, first changing message
/// `first`, pays for its cache write ([`Policy::prune_pays`]): the next request writes
/// everything from `first` on. Events stay rare, too: it must halve the prompt, so the next one
/// waits until the prompt has doubled again.
fn warm_prune_pays(
    input: &PlanInput<'_>,
    policy: &Policy,
    reclaimed: usize,
    first: usize,
    turns: usize,
) -> bool {
    let total = input.total();
    let kept: usize = input.tokens[..first].iter().sum::<usize>() + input.fixed_tokens;
    let rewritten = total.saturating_sub(reclaimed).saturating_sub(kept);
    reclaimed as f64 >= policy.warm_prune_min_share * total as f64
        && policy.prune_pays(reclaimed, rewritten, turns, input.cache_prices)
}

/// Tokens of the newest tool outputs an early prune keeps whole: with turn-based masking, the
/// newest `mask_keep_turns` turns' outputs; otherwise the newest `cold_protected_tokens`, or
/// the newest `cold_protected_turns` turns' outputs when they are more.
fn early_protected_tokens(input: &PlanInput<'_>, policy: &Policy) -> usize {
    match newest_turns(input, policy.mask_keep_turns) {
        Some(turns) => turns.tool_outputs,
        None => newest_turns(input, policy.cold_protected_turns)
            .map_or(0, |t| t.tool_outputs)
            .max(policy.cold_protected_tokens),
    }
}

/// Tokens of the newest turns' messages (from their assistant message on).
#[derive(Debug, Clone, Copy)]
struct NewestTurns {
    /// All their messages.
    all: usize,
    /// Their tool outputs.
    tool_outputs: usize,
}

/// The newest `turns` assistant turns' tokens, or `None` when turn-based masking is off.
fn newest_turns(input: &PlanInput<'_>, turns: usize) -> Option<NewestTurns> {
    if turns == 0 {
        return None;
    }
    let mut seen = 0usize;
    let mut newest = NewestTurns {
        all: 0,
        tool_outputs: 0,
    };
    for (m, &tokens) in input.messages.iter().zip(input.tokens).rev() {
        if m.role == Role::Assistant {
            seen += 1;
        }
        newest.all += tokens;
        if m.role == Role::Tool {
            newest.tool_outputs += tokens;
        }
        if seen == turns && m.role == Role::Assistant {
            break;
        }
    }
    Some(newest)
}

fn prune_edits(
    input: &PlanInput<'_>,
    policy: &Policy,
    counter: &TokenCounter,
    (head_end, tail_start): (usize, usize),
    budget: usize,
    keep_current_reads: bool,
) -> Vec<PruneEdit> {
    let messages = input.messages;
    let calls: BTreeMap<&str, (usize, &ToolCall)> = messages
        .iter()
        .enumerate()
        .flat_map(|(i, m)| m.tool_calls().map(move |c| (c.id.as_str(), (i, c))))
        .collect();

    // Protected: the newest tool outputs, up to the budget.
    let mut protected = vec![false; messages.len()];
    let mut used = 0usize;
    for (i, m) in messages.iter().enumerate().rev() {
        if m.role == Role::Tool && used < budget {
            protected[i] = true;
            used += input.tokens[i];
        }
    }

    // Files touched after each message: for superseded reads.
    let mut newest_for_id: BTreeMap<crate::content_id::ContentId, usize> = BTreeMap::new();
    for (i, m) in messages.iter().enumerate() {
        for r in m.tool_results() {
            if let Some(meta) = input.metas.get(&r.call_id) {
                newest_for_id.insert(meta.id, i);
            }
        }
    }
    let accesses: Vec<(usize, FileAccess, &ToolCall)> = messages
        .iter()
        .enumerate()
        .flat_map(|(i, m)| {
            m.tool_calls()
                .flat_map(move |c| facts::file_accesses(c).into_iter().map(move |a| (i, a, c)))
        })
        .collect();
    // The commands run, by the message of their call: a rerun of the same command supersedes
    // the earlier run's output (what a script printed before it was run again).
    let mut last_run: HashMap<String, usize> = HashMap::new();
    for (i, m) in messages.iter().enumerate() {
        for c in m.tool_calls() {
            if let Some(command) = facts::command_of(c) {
                last_run.insert(command, i);
            }
        }
    }

    let mut edits = Vec::new();
    for index in head_end..tail_start {
        let m = &messages[index];
        if m.role == Role::Assistant {
            edits.extend(huge_argument_edits(m, index, policy, counter));
            edits.extend(runaway_text_edit(m, index, policy, counter));
            continue;
        }
        let Some(result) = m.tool_results().next() else {
            continue;
        };
        let tool = result.tool_name.as_deref().unwrap_or("tool");
        if policy.is_protected_tool(tool) {
            continue;
        }
        let call = calls.get(result.call_id.as_str()).map(|(_, c)| *c);
        let call_index = calls
            .get(result.call_id.as_str())
            .map(|(i, _)| *i)
            .unwrap_or(index);
        let visible = result.text();
        let meta = input
            .metas
            .get(&result.call_id)
            .cloned()
            .unwrap_or_else(|| ResultMeta::of(&visible));
        let read_path = call.and_then(|c| match facts::file_accesses(c).as_slice() {
            [FileAccess::Read(p)] => Some(p.clone()),
            _ => None,
        });
        // A later write makes a read stale; a later read only when it shows at least as much
        // (the whole file, or the same part again): reading a big file in parts leaves each
        // part current.
        let superseded = read_path.as_ref().is_some_and(|path| {
            accesses.iter().any(|(i, a, later)| {
                *i > call_index
                    && a.path() == path
                    && match a {
                        FileAccess::Write(_) => true,
                        FileAccess::Read(_) => {
                            facts::reads_whole_file(later)
                                || call.is_some_and(|c| c.arguments == later.arguments)
                        }
                        FileAccess::Run(_) => false,
                    }
            })
        });
        // A script's run whose script was edited later printed what an older version did (as
        // a read of a file edited later, even among the recent outputs).
        let script_edited =
            call.map(facts::file_accesses)
                .is_some_and(|own| match own.as_slice() {
                    [FileAccess::Run(path)] => accesses.iter().any(|(i, a, _)| {
                        *i > call_index && matches!(a, FileAccess::Write(p) if p == path)
                    }),
                    _ => false,
                });
        // Run again later, the same command: the agent has moved past this run's output. Not
        // inside the protected recent outputs, which the agent may still be comparing.
        let rerun = !protected[index]
            && read_path.is_none()
            && call
                .and_then(facts::command_of)
                .and_then(|command| last_run.get(&command))
                .is_some_and(|&last| last > call_index);
        let newest = newest_for_id.get(&meta.id).copied().unwrap_or(index);
        let (reason, text) = if newest > index {
            let later = messages[newest]
                .tool_results()
                .next()
                .map(|r| r.call_id.clone())
                .unwrap_or_default();
            (
                PruneReason::Duplicate,
                format!(
                    "[same output as the later result of {later} (id {})]",
                    meta.id
                ),
            )
        } else if superseded {
            let abstract_text = abstract_line(tool, call, &meta);
            (
                PruneReason::Superseded,
                format!("{abstract_text} (stale: the file was edited or read again later)"),
            )
        } else if script_edited {
            let abstract_text = abstract_line(tool, call, &meta);
            (
                PruneReason::Superseded,
                format!("{abstract_text} (stale: the script was edited later)"),
            )
        } else if rerun {
            let abstract_text = abstract_line(tool, call, &meta);
            (
                PruneReason::Superseded,
                format!("{abstract_text} (the same command was run again later)"),
            )
        } else if !(protected[index] || keep_current_reads && read_path.is_some()) {
            // A prune at a warm cache leaves file reads that are still current: the agent
            // edits from them (on the GPT-5-mini sessions, pruning them too cost 3 points of
            // recall). At a cold cache they go like other old outputs.
            (PruneReason::Old, abstract_line(tool, call, &meta))
        } else {
            continue;
        };
        let before = input.tokens[index];
        let after = FRAMING + counter.count_text(&text);
        if after < before {
            edits.push(PruneEdit {
                index,
                reason,
                replacement: Replacement::Result(text),
                tokens_before: before,
                tokens_after: after,
            });
        }
    }
    keep_what_is_pointed_to(messages, &mut edits);
    edits
}

/// A result that a result still in view points to (a re-read or a re-run entered as "[lines
/// 1-80 same as the result of call_7 ...]") stays whole: the pointer shows its lines by naming
/// it. Keeping one may keep the results its own pointers name, hence the loop.
fn keep_what_is_pointed_to(messages: &[Message], edits: &mut Vec<PruneEdit>) {
    loop {
        let pruned: std::collections::BTreeSet<usize> = edits
            .iter()
            .filter(|e| matches!(e.replacement, Replacement::Result(_)))
            .map(|e| e.index)
            .collect();
        let mut named: Vec<&str> = Vec::new();
        for (i, m) in messages.iter().enumerate() {
            if pruned.contains(&i) {
                continue;
            }
            for result in m.tool_results() {
                for block in &result.content {
                    if let Block::Text { text } = block {
                        named.extend(crate::engine::repeats::pointed_call_ids(text));
                    }
                }
            }
        }
        if named.is_empty() {
            return;
        }
        let before = edits.len();
        edits.retain(|e| {
            !matches!(e.replacement, Replacement::Result(_))
                || !messages[e.index]
                    .tool_results()
                    .any(|r| named.contains(&r.call_id.as_str()))
        });
        if edits.len() == before {
            return;
        }
    }
}

fn huge_argument_edits(
    m: &Message,
    index: usize,
    policy: &Policy,
    counter: &TokenCounter,
) -> Vec<PruneEdit> {
    let mut edits = Vec::new();
    for call in m
        .tool_calls()
        .filter(|c| !c.implicit && c.arguments.len() > policy.huge_arguments_bytes)
    {
        let Ok(value) = serde_json::from_str::<Value>(&call.arguments) else {
            continue;
        };
        let limit = policy.huge_arguments_bytes / 4;
        let id = crate::content_id::ContentId::of(call.arguments.as_bytes());
        let Some(arguments) = trim_json(&value, limit.max(256), false, id) else {
            continue;
        };
        let before = counter.count_text(&call.arguments);
        let after = counter.count_text(&arguments);
        if after < before {
            edits.push(PruneEdit {
                index,
                reason: PruneReason::HugeArguments,
                replacement: Replacement::Arguments {
                    call_id: call.id.clone(),
                    arguments,
                },
                tokens_before: before,
                tokens_after: after,
            });
        }
    }
    edits
}

/// Whether an assistant message's text is a runaway.
fn is_runaway(m: &Message, policy: &Policy) -> bool {
    policy.runaway_text_bytes > 0
        && m.role == Role::Assistant
        && m.text_content().len() > policy.runaway_text_bytes
}

/// The tail starts after the last runaway assistant message in it, when a later turn starts
/// there: the tail keeps recent context whole, and a repetition loop is not context.
fn past_runaways(messages: &[Message], policy: &Policy, tail_start: usize) -> usize {
    let Some(runaway) = (tail_start..messages.len())
        .rev()
        .find(|&i| is_runaway(&messages[i], policy))
    else {
        return tail_start;
    };
    (runaway + 1..messages.len())
        .find(|&i| messages[i].role == Role::Assistant)
        .unwrap_or(tail_start)
}

/// What a runaway message keeps of its text, at each end, in bytes.
const RUNAWAY_KEEP_BYTES: usize = 2_000;

/// A runaway message's text cut to its head and tail around a marker naming its recall id
/// (the event stores the original; see [`super::event::hidden_originals`]).
fn runaway_text_edit(
    m: &Message,
    index: usize,
    policy: &Policy,
    counter: &TokenCounter,
) -> Option<PruneEdit> {
    if !is_runaway(m, policy) {
        return None;
    }
    let text = m.text_content();
    let id = crate::content_id::ContentId::of(text.as_bytes());
    let head = floor_char(&text, RUNAWAY_KEEP_BYTES);
    let tail_from = ceil_char(&text, text.len() - RUNAWAY_KEEP_BYTES);
    let cut = tail_from - head.len();
    let shortened = format!(
        "{head}\n[... {} bytes of this message cut (a runaway: repeated or dumped text); original: id {id} ...]\n{}",
        crate::trim::lines::group(cut as u64),
        &text[tail_from..]
    );
    let before = counter.count_text(&text);
    let after = counter.count_text(&shortened);
    (after < before).then_some(PruneEdit {
        index,
        reason: PruneReason::RunawayText,
        replacement: Replacement::Text(shortened),
        tokens_before: before,
        tokens_after: after,
    })
}

fn floor_char(s: &str, at: usize) -> &str {
    let mut at = at.min(s.len());
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    &s[..at]
}

fn ceil_char(s: &str, at: usize) -> usize {
    let mut at = at.min(s.len());
    while !s.is_char_boundary(at) {
        at += 1;
    }
    at
}

/// Applies phase-1 edits to messages (used by the session; exposed for replays).
pub fn apply_edits(messages: &mut [Message], edits: &[PruneEdit]) {
    for edit in edits {
        let message = &mut messages[edit.index];
        match &edit.replacement {
            Replacement::Result(text) => {
                for block in &mut message.content {
                    if let Block::ToolResult(result) = block {
                        result.content = vec![Block::text(text.clone())];
                    }
                }
            }
            Replacement::Arguments { call_id, arguments } => {
                for block in &mut message.content {
                    if let Block::ToolCall(call) = block
                        && call.id == *call_id
                    {
                        call.arguments = arguments.clone();
                    }
                }
            }
            Replacement::Text(text) => set_text(message, text),
        }
    }
}

/// Makes `text` a message's only text: its first text block, the others gone.
pub fn set_text(message: &mut Message, text: &str) {
    let mut first = true;
    message.content.retain_mut(|block| match block {
        Block::Text { text: t } if first => {
            first = false;
            *t = text.to_owned();
            true
        }
        Block::Text { .. } => false,
        _ => true,
    });
}
