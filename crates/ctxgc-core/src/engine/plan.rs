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

use crate::engine::abstracts::{ResultMeta, abstract_line};
use crate::engine::input::FRAMING;
pub use crate::engine::input::PlanInput;
use crate::engine::policy::Policy;
use crate::engine::prune::{KeptOutput, past_runaways, prune_edits, runaway_text_edit};
pub use crate::engine::prune::{PruneEdit, PruneReason, Replacement};
use crate::engine::segments;
use crate::tokens::TokenCounter;
use crate::transcript::{Message, Role, ToolCall};

/// The kind of event a plan makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PlanKind {
    /// Phase 1 alone.
    PruneOnly,
    /// Phase 2: the middle becomes a summary.
    Compaction,
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
    /// The prompt did not fit the window ([`must_fit`]) and the event the policy's rules call
    /// for would not have made it fit: this one cuts what it has to (the newest outputs
    /// included, as the edits say), or, when even that is not enough, the most it can.
    pub fits_window: bool,
    /// Old outputs the prune kept because the agent is likely to use them again.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kept: Vec<KeptOutput>,
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

/// Whether the prompt of `input` does not fit the window with room for the answer
/// ([`Policy::prompt_limit`]): a request that would fail outright. The event that makes it fit
/// runs on it, whatever the economics, a stop after ineffective events or the cache say.
pub fn must_fit(input: &PlanInput<'_>, policy: &Policy) -> bool {
    input.enforce_window && input.total() > policy.prompt_limit(input.window)
}

/// Plans the event that is due, if any: the one the policy's rules call for, and, when the
/// prompt does not fit the window ([`must_fit`]) and that event would not make it fit, one that
/// does ([`fit_window`]).
pub fn plan(input: &PlanInput<'_>, policy: &Policy, counter: &TokenCounter) -> Option<Plan> {
    let planned = plan_due(input, policy, counter);
    if !must_fit(input, policy) {
        return planned;
    }
    match planned {
        Some(plan) if plan.estimated_after <= policy.prompt_limit(input.window) => Some(plan),
        planned => fit_window(input, policy, counter, planned),
    }
}

/// The event for a prompt past the window when the policy's own would not make it fit: the
/// planned prune's edits (a compaction that would land past the window is dropped), then every
/// older tool output becomes its abstract, oldest first (the head's last), until the prompt
/// lands the runway under the threshold; when it is still past the window, the newest turn's
/// outputs are trimmed further (head, tail and salient lines around a recall id), the largest
/// first, to what fits.
/// The head, the user's messages and the system prompt are never touched: when they alone do
/// not fit, the plan cuts what it can and says so (`fits_window` with `estimated_after` past
/// the limit).
fn fit_window(
    input: &PlanInput<'_>,
    policy: &Policy,
    counter: &TokenCounter,
    planned: Option<Plan>,
) -> Option<Plan> {
    let messages = input.messages;
    let window = input.window;
    let limit = policy.prompt_limit(window);
    let target = policy
        .threshold(window)
        .saturating_sub(policy.runway(window, input.growth_per_turn()))
        .min(limit);
    let (mut edits, compaction) = match planned {
        Some(plan) if plan.kind == PlanKind::PruneOnly => (plan.edits, None),
        planned => (Vec::new(), planned),
    };
    let mut total = input.total();
    for e in &edits {
        total -= e.tokens_before.saturating_sub(e.tokens_after);
    }
    let head_end = segments::head_end(messages, policy.head_exchanges);
    // Runaway texts first, the latest turn's too: a repetition loop is not context.
    for (i, m) in messages.iter().enumerate().skip(head_end) {
        if total <= target {
            break;
        }
        if edits.iter().any(|e| e.index == i) {
            continue;
        }
        if let Some(edit) = runaway_text_edit(m, i, policy, counter) {
            total -= edit.tokens_before.saturating_sub(edit.tokens_after);
            edits.push(edit);
        }
    }
    let newest = messages
        .iter()
        .rposition(|m| m.role == Role::Assistant)
        .unwrap_or(messages.len());
    let calls: BTreeMap<&str, &ToolCall> = messages
        .iter()
        .flat_map(|m| m.tool_calls().map(|c| (c.id.as_str(), c)))
        .collect();
    // An output this event may still cut: a tool result of no protected tool, not edited yet.
    let cuttable = |edits: &[PruneEdit], i: usize| {
        messages[i].role == Role::Tool
            && !edits.iter().any(|e| e.index == i)
            && messages[i]
                .tool_results()
                .next()
                .is_some_and(|r| !policy.is_protected_tool(r.tool_name.as_deref().unwrap_or("")))
    };
    // An output's abstract (the command, its exit code, its first error, the id).
    let abstract_of = |result: &crate::transcript::ToolResult| {
        let meta = input
            .metas
            .get(&result.call_id)
            .cloned()
            .unwrap_or_else(|| ResultMeta::of(&result.text()));
        let tool = result.tool_name.as_deref().unwrap_or("tool");
        abstract_line(
            tool,
            calls.get(result.call_id.as_str()).copied(),
            &meta,
            policy.recall_way.as_ref(),
        )
    };
    // Replaces output `i` by `text` when that is shorter: the tokens it reclaims.
    let cut_to = |edits: &mut Vec<PruneEdit>, i: usize, text: String| {
        let (before, after) = (input.tokens[i], FRAMING + counter.count_text(&text));
        if after >= before {
            return 0;
        }
        edits.push(PruneEdit {
            index: i,
            reason: PruneReason::Window,
            replacement: Replacement::Result(text),
            tokens_before: before,
            tokens_after: after,
            judged: None,
        });
        before - after
    };
    let older = (head_end..newest).chain(0..head_end.min(newest));
    for i in older {
        if total <= target {
            break;
        }
        if !cuttable(&edits, i) {
            continue;
        }
        let Some(result) = messages[i].tool_results().next() else {
            continue;
        };
        let text = abstract_of(result);
        total -= cut_to(&mut edits, i, text);
    }
    // The newest outputs, the largest first, each cut to what still fits.
    let mut newest_outputs: Vec<usize> = (newest..messages.len())
        .filter(|&i| cuttable(&edits, i))
        .collect();
    newest_outputs.sort_by_key(|&i| std::cmp::Reverse(input.tokens[i]));
    for i in newest_outputs {
        if total <= limit {
            break;
        }
        let Some(result) = messages[i].tool_results().next() else {
            continue;
        };
        let before = input.tokens[i];
        let room = before.saturating_sub(total - limit);
        let tool = result.tool_name.as_deref().unwrap_or("tool");
        let text = result.text();
        // With too little room for the trimmer's head, tail and salient lines, the abstract
        // says more: the command, its exit code, its first error and the id.
        let cut = if room < TRIMMED_MIN_TOKENS {
            abstract_of(result)
        } else {
            cut_to_fit(&text, tool, room, before, counter)
        };
        total -= cut_to(&mut edits, i, cut);
    }
    let pruned = (!edits.is_empty()).then(|| {
        edits.sort_by_key(|e| e.index);
        // The tail starts after the last edit: a later event may still compact what is older.
        // Never inside what an earlier event rewrote (`frozen`): the lineage's new cover is
        // counted from there.
        let last = edits.last().map_or(0, |e| e.index);
        let tail_start = ((last + 1).max(input.frozen)..messages.len())
            .find(|&i| segments::is_boundary(messages, i))
            .unwrap_or(messages.len());
        Plan {
            kind: PlanKind::PruneOnly,
            tokens_before: input.total(),
            estimated_after: total,
            head_end,
            tail_start,
            edits,
            summary_budget: 0,
            recall_hint: policy.recall_hint.clone(),
            fits_window: true,
            kept: Vec::new(),
        }
    });
    if pruned.as_ref().is_some_and(|p| p.estimated_after <= limit) {
        return pruned;
    }
    // Cutting outputs is not enough (the prompt is mostly the conversation itself): the middle
    // is summarised, even in front of a client that keeps its own window, since a request past
    // the window fails whatever the client would have shown. The lowest landing wins.
    let tail = segments::tail_start(
        messages,
        input.tokens,
        policy.tail_budget(window),
        policy.tail_ceiling,
        policy.tail_min_messages,
        head_end,
    );
    let tail = past_runaways(messages, policy, tail).max(input.frozen);
    let tail = (tail..messages.len())
        .find(|&i| segments::is_boundary(messages, i))
        .unwrap_or(messages.len());
    let forced = compaction_plan(input, policy, head_end, tail);
    [pruned, compaction, forced]
        .into_iter()
        .flatten()
        .min_by_key(|p| p.estimated_after)
        .map(|plan| Plan {
            fits_window: true,
            ..plan
        })
}

/// The compaction of `head_end..tail_start` (what the client pins stays), when the middle is
/// larger than its summary would be.
fn compaction_plan(
    input: &PlanInput<'_>,
    policy: &Policy,
    head_end: usize,
    tail_start: usize,
) -> Option<Plan> {
    if head_end >= tail_start || tail_start >= input.messages.len() {
        return None;
    }
    let middle: usize = (head_end..tail_start)
        .filter(|&i| !segments::is_pinned(&input.messages[i]))
        .map(|i| input.tokens[i])
        .sum();
    let budget = policy.summary_budget(middle, input.window);
    (middle > budget + FRAMING).then(|| Plan {
        kind: PlanKind::Compaction,
        tokens_before: input.total(),
        estimated_after: input.total() - middle + budget + FRAMING,
        head_end,
        tail_start,
        edits: Vec::new(),
        summary_budget: budget,
        recall_hint: policy.recall_hint.clone(),
        fits_window: false,
        kept: Vec::new(),
    })
}

/// Below this room (tokens) the newest output becomes its abstract rather than a trim too
/// short to hold a log's head, tail and error lines.
const TRIMMED_MIN_TOKENS: usize = 600;

/// What a cut to fit the window keeps of an output at the least, in bytes.
const WINDOW_CUT_MIN_BYTES: usize = 400;

/// `text`, the output of `tool` (of `tokens` tokens), cut by the trimmer to at most about `room`
/// tokens: head and tail around the salient lines (the error in the middle of a log, which a
/// plain cut of the middle would lose), with a marker naming the id the event stores it under.
/// The default trimming profiles apply: the plan does not see `[trim]`.
fn cut_to_fit(
    text: &str,
    tool: &str,
    room: usize,
    tokens: usize,
    counter: &TokenCounter,
) -> String {
    let config = crate::trim::TrimConfig::default();
    let profile = config.profile_for(tool);
    let bytes_per_token = text.len() as f64 / tokens.max(1) as f64;
    // The marker and framing take some of the room.
    let mut aim = room.saturating_sub(60);
    let mut out = text.to_owned();
    // Bytes per token vary along an output: a few more passes when a cut is still too long.
    for _ in 0..4 {
        let limit = ((aim as f64 * bytes_per_token) as usize).max(WINDOW_CUT_MIN_BYTES);
        if limit >= text.len() {
            return out;
        }
        out = crate::trim::trim_with_limit(&config, profile, limit, text).text;
        let counted = counter.count_text(&out);
        if counted <= room || limit == WINDOW_CUT_MIN_BYTES {
            break;
        }
        aim = aim.saturating_sub(counted - room);
    }
    out
}

/// Plans the event the policy's rules call for, if any.
fn plan_due(input: &PlanInput<'_>, policy: &Policy, counter: &TokenCounter) -> Option<Plan> {
    let total = input.total();
    let threshold = policy.threshold(input.window);
    let growth = input.growth_per_turn();
    // A cold cache makes an event free of cache cost: one due within the runway runs now, and
    // below that a prune that reclaims a real amount.
    let due = total >= threshold || must_fit(input, policy);
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
    // The prune's edits, and the outputs it kept as likely to be used again when it asks the
    // relevance table (`keep_likely`).
    let prune_with = |keep_likely: bool| {
        let mut kept = Vec::new();
        let edits = prune_edits(
            input,
            policy,
            counter,
            (head_end, tail_start),
            protected,
            (keep_current_reads, keep_likely),
            &mut kept,
        );
        (edits, kept)
    };
    let prune = |(edits, kept): (Vec<PruneEdit>, Vec<KeptOutput>)| Plan {
        kind: PlanKind::PruneOnly,
        tokens_before: total,
        estimated_after: total - reclaimed_by(&edits),
        head_end,
        tail_start,
        edits,
        summary_budget: 0,
        recall_hint: policy.recall_hint.clone(),
        fits_window: false,
        kept,
    };
    if early {
        let (edits, kept) = prune_with(true);
        let reclaimed = reclaimed_by(&edits);
        if reclaimed < policy.cold_min_reclaim_tokens {
            return None;
        }
        let first = edits.iter().map(|e| e.index).min().unwrap_or(tail_start);
        if !input.cache_cold && !warm_prune_pays(input, policy, reclaimed, first, turns) {
            return None;
        }
        return Some(prune((edits, kept)));
    }
    let target = threshold.saturating_sub(policy.runway(input.window, growth));
    // The outputs the agent is likely to use again stay when pruning the rest still buys the
    // runway: only where it does not would keeping them make the event compact, hiding more.
    // An event that is only due soon (a cold cache near the threshold) runs now because the
    // rewrite is free, not because the prompt must shrink: it keeps them whatever it buys (the
    // event comes when due, if the prompt gets there; a session whose reads grew the prompt
    // fast lost reads 2 turns old to a runway it never used).
    if policy.keep_likely_use <= 1.0 || policy.keep_likely_stale <= 1.0 {
        let lighter = prune_with(true);
        let reclaimed = reclaimed_by(&lighter.0);
        let buys_runway =
            reclaimed >= policy.min_reclaim(input.window) && total - reclaimed <= target;
        if buys_runway || !due {
            let worth_it = buys_runway || reclaimed >= policy.cold_min_reclaim_tokens;
            return worth_it.then(|| prune(lighter));
        }
    }
    let edits = prune_with(false);
    let reclaimed = reclaimed_by(&edits.0);
    let worth_pruning = reclaimed >= policy.min_reclaim(input.window);
    // Prune alone when that buys the runway; compact otherwise (what the client pins stays,
    // not reclaimed); when there is nothing to compact, pruning alone is still better than
    // nothing if it reclaims a real amount.
    if worth_pruning && total - reclaimed <= target {
        return Some(prune(edits));
    }
    input
        .may_compact
        .then(|| compaction_plan(input, policy, head_end, tail_start))
        .flatten()
        .or_else(|| worth_pruning.then(|| prune(edits)))
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
