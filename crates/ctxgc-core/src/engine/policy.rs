//! The engine's parameters (the `[engine]` table of `ctxgc.toml`), each with its reason.

use serde::{Deserialize, Serialize};

use crate::provider_cache::{self, CachePrices};
use crate::tokens::ProviderFamily;

/// [`Policy::recall_hint`] for an agent that has ctxgc's `recall_tool_result`.
pub const RECALL_TOOL_HINT: &str = "recall_tool_result and their id";

/// When events happen and how much each may rewrite.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Policy {
    /// An event is due when the prompt reaches this share of the context window (the threshold).
    pub trigger_share: f64,
    /// Room kept in the window for the model's answer, in tokens (at most
    /// `answer_reserve_share` of the window): a prompt past the window less this room does not
    /// fit ([`Policy::prompt_limit`]), and the event that makes it fit runs on that request
    /// whatever else would hold it back (a warm cache, events stopped, a client that keeps its
    /// own window), cutting the newest outputs too when it must.
    pub answer_reserve_tokens: usize,
    /// See `answer_reserve_tokens`.
    pub answer_reserve_share: f64,
    /// Exchanges after the system prompt that are never rewritten (the first user message, the
    /// assistant's answer and its tool results).
    pub head_exchanges: usize,
    /// Tail budget as a share of the threshold: the most recent messages that are never rewritten.
    pub tail_share: f64,
    /// The tail may grow to this multiple of its budget to reach the last user message or to
    /// avoid splitting a tool call from its results.
    pub tail_ceiling: f64,
    /// The tail keeps at least this many messages.
    pub tail_min_messages: usize,
    /// The most recent tool output tokens protected from pruning at a 32K window; the budget
    /// follows a power law of the window through this point and `protected_max` at 1M tokens
    /// (10K at 32K, 16K at 64K, 34K at 200K, 100K at 1M), never below `protected_min`.
    pub protected_at_32k: usize,
    /// Lower clamp of the protected tool-output budget, in tokens.
    pub protected_min: usize,
    /// The protected budget at a 1M window, and its upper clamp.
    pub protected_max: usize,
    /// Pruning is worth an event only when it reclaims at least max(this, window × share).
    pub min_reclaim_tokens: usize,
    /// See `min_reclaim_tokens`.
    pub min_reclaim_share: f64,
    /// Prune-only is accepted only when the prompt lands this far under the threshold:
    /// runway = max(runway_min_tokens, runway_share × threshold). Otherwise the same event
    /// compacts. Without this rule pruning fires again a few turns later and each firing breaks
    /// the cache (measured: up to +41% cost on our transcripts).
    pub runway_share: f64,
    /// See `runway_share`.
    pub runway_min_tokens: usize,
    /// The runway also covers this many turns at the session's recent growth per turn, so the
    /// next event is that many turns away whatever the turn size.
    pub runway_turns: usize,
    /// The runway never exceeds this share of the threshold (a target must stay reachable).
    pub runway_max_share: f64,
    /// Tool-call arguments longer than this (bytes) in the middle are shortened when pruning.
    pub huge_arguments_bytes: usize,
    /// An assistant message whose text is longer than this (bytes) is a runaway (a repetition
    /// loop, a dump): an event shortens it to its head and tail with its recall id, even in
    /// the tail (but for the latest turn). 0: never.
    pub runaway_text_bytes: usize,
    /// Tools whose outputs are never pruned (globs, case-insensitive).
    pub protected_tools: Vec<String>,
    /// How the agent gets a summarised output back, as a summary tells it ("recall_tool_result
    /// and their id"; a shell command for an agent whose only tool is a shell). Empty: the
    /// agent has no way (a proxy that does not offer the tool), and a summary names none.
    pub recall_hint: String,
    /// The way back the agent has, which an abstract names after its id (`None`: the abstract
    /// names the id only). Not configured: the proxy works it out per request from the
    /// agent's tools, as it does for trim markers.
    #[serde(skip)]
    pub recall_way: Option<crate::agent_tools::RecallWay>,
    /// Summary budget: this share of the compacted tokens, clamped to
    /// [`summary_min_tokens`, min(`summary_window_share` × window, `summary_max_tokens`)].
    pub summary_share: f64,
    /// See `summary_share`.
    pub summary_min_tokens: usize,
    /// See `summary_share`.
    pub summary_max_tokens: usize,
    /// See `summary_share`.
    pub summary_window_share: f64,
    /// After this many ineffective events in a row, automatic events stop (and say why).
    pub max_ineffective_events: usize,
    /// Seconds to wait before trying the LLM summarizer again after it failed.
    pub llm_cooldown_secs: u64,
    /// Seconds of silence after which the provider's prompt cache is taken as expired
    /// (Anthropic's default TTL is 5 minutes; OpenAI keeps prefixes 5 to 10 minutes): the next
    /// request writes its whole prefix anyway, so an event then breaks nothing. An event due
    /// within the runway runs then, and a prune that reclaims a real amount runs even when
    /// none is due. 0 turns this off. This is the TTL of Anthropic's default cache; see
    /// `openai_cold_cache_secs` for OpenAI's.
    pub cold_cache_secs: u64,
    /// The same for OpenAI and OpenAI-compatible APIs, which keep a cached prefix "5 to 10
    /// minutes" after its last use: an event after 6 minutes could break a cache still warm.
    pub openai_cold_cache_secs: u64,
    /// Tokens of the newest tool outputs a prune at a cold cache keeps whole (what is older
    /// costs its reads on every later request, and rewriting it costs nothing then).
    pub cold_protected_tokens: usize,
    /// Assistant turns whose tool outputs a prune at a cold cache keeps whole besides the
    /// newest `cold_protected_tokens`: a pause (the user reading, a sub-agent or a long build
    /// running) is often followed by work on what the agent just read, such as an edit quoting
    /// a file read a few turns back, however big it was. 0: tokens only.
    pub cold_protected_turns: usize,
    /// Tokens a prune at a cold cache must reclaim to run.
    pub cold_min_reclaim_tokens: usize,
    /// Price of a cached input token read, relative to an uncached one (0.1 at Anthropic and
    /// on GPT-5.x). With `cache_write_cost`, what an event is worth: see `economic_margin`.
    pub cache_read_cost: f64,
    /// Price of an input token written to the cache, relative to an uncached one (1.25 at
    /// Anthropic's 5-minute cache; 1.0 at OpenAI, which bills a write as plain input). The
    /// default is the dearer one, so an event is never judged cheaper than it is.
    pub cache_write_cost: f64,
    /// A prune runs before any event is due when what it saves, reclaimed tokens × read cost ×
    /// the requests the session is expected to make still, is at least this multiple of what
    /// it costs, the tokens after its first change written instead of read. The requests still
    /// to come are taken to be as many as the session has made (half of sessions that reached
    /// a turn go on at least that long again), at most `economic_horizon`. 0 turns this off.
    pub economic_margin: f64,
    /// See `economic_margin`.
    pub economic_horizon: usize,
    /// An early prune at a warm cache must reclaim at least this share of the prompt (`safe`:
    /// half, so the next one waits until the prompt has doubled again; `lean`: whatever pays).
    pub warm_prune_min_share: f64,
    /// Assistant turns between an event and the next early prune at a warm cache.
    pub warm_prune_gap_turns: usize,
    /// When above 0, an early prune keeps whole the outputs of the newest this-many assistant
    /// turns (and masks what is older, to abstracts with recall ids) instead of the newest
    /// `cold_protected_tokens`: observation masking, as in The Complexity Trap (arXiv
    /// 2508.21433: the last 10 turns' observations), in batches that pay for their cache write.
    pub mask_keep_turns: usize,
    /// An old output an event would prune (to its abstract) stays whole when the relevance
    /// table gives it at least this likelihood of being used again ([`Self::relevance`]: what
    /// the agent did with it so far, its kind and age): at an early prune, at an event only due
    /// soon, and at a due event when pruning the rest still buys its runway. Above 1: every old
    /// output goes, as the age rule alone says. `safe`: 0.03, chosen with each user judged by
    /// a table fitted without them (docs/replay.md, "What the agent will use again"): on the
    /// shared client logs 0.05 raised the worst user's share of what the client kept from 68.5%
    /// to 95.0% (94.5% by the count of 2026-11-29), 0.03 to 98.0%.
    pub keep_likely_use: f64,
    /// A file read that a later write of the file made stale (not a later read of it) stays
    /// whole, where a prune keeps what the agent is likely to use (as for `keep_likely_use`),
    /// when the relevance table gives it at least this likelihood of being used again: an edit
    /// changes a few lines, and the agent goes on working from the rest. Above 1: every stale
    /// read goes. `safe`: 0.1, chosen with each client user judged by a table fitted without
    /// them (docs/replay.md): the median user's share of what the client kept rose from 98.7%
    /// to 99.3%.
    pub keep_likely_stale: f64,
    /// The learned table behind `keep_likely_use` (the shipped one unless the lab fits its own,
    /// `ctxgc replay --relevance FILE`).
    #[serde(skip, default = "crate::engine::relevance::Relevance::shipped")]
    pub relevance: std::sync::Arc<crate::engine::relevance::Relevance>,
}

/// `lean`'s [`Policy::keep_likely_use`]: only the outputs most likely to be used again stay
/// (the recall tool is its safety net).
const LEAN_KEEP_LIKELY_USE: f64 = 0.15;

/// A named set of engine settings (`[engine] preset`, `ctxgc serve --preset`,
/// `ctxgc replay --policy ctxgc-lean`): explicit keys in `[engine]` still override it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Preset {
    /// The default: events only near the window or after a pause; recall first.
    #[default]
    Safe,
    /// Masks tool outputs older than the newest 10 turns whenever a batch pays for its cache
    /// write, and keeps half as much of each output at insertion as `safe` does at a 32K window,
    /// whatever the window (`[trim] limit_scale`, `budget_window_cap`), with the recall tool as
    /// the safety net: cheaper, at some recall.
    Lean,
}

impl Preset {
    /// `"safe"` or `"lean"`.
    pub fn parse(name: &str) -> Option<Preset> {
        match name {
            "safe" => Some(Preset::Safe),
            "lean" => Some(Preset::Lean),
            _ => None,
        }
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Preset::Safe => "safe",
            Preset::Lean => "lean",
        }
    }

    /// The `[trim] limit_scale` of this preset.
    pub fn limit_scale(self) -> f64 {
        match self {
            Preset::Safe => 1.0,
            Preset::Lean => 0.5,
        }
    }

    /// The `[trim] budget_window_cap` of this preset: the window past which insertion limits
    /// stop growing. `lean` keeps of each output what it keeps at a 32K window, whatever the
    /// window: a kept token is billed on every later request, and a larger window is room, not
    /// a reason to keep more. (On the shared GPT-5-mini sessions at 64K and 200K this took
    /// `lean` from 0.846x of `none` at 98.5% recall to 0.730x at 92.7%, the trade it makes at
    /// 32K.)
    pub fn budget_window_cap(self) -> u64 {
        match self {
            Preset::Safe => crate::trim::TrimConfig::default().budget_window_cap,
            Preset::Lean => 32_000,
        }
    }

    /// Whether the proxy runs events on any request (`[proxy] compact`), not only after a
    /// pause: masking in batches needs it.
    pub fn events_at_a_warm_cache(self) -> bool {
        self == Preset::Lean
    }

    /// The engine settings of this preset.
    pub fn policy(self) -> Policy {
        match self {
            Preset::Safe => Policy::default(),
            // A batch must pay for its cache write three times over, as in `safe`: on the
            // shared GPT-5-mini sessions a margin of 1 ran 8x the events for a higher cost
            // (sessions end sooner than "as long again" assumes).
            Preset::Lean => Policy {
                warm_prune_min_share: 0.0,
                warm_prune_gap_turns: 0,
                mask_keep_turns: 10,
                keep_likely_use: LEAN_KEEP_LIKELY_USE,
                // Stale reads go: `lean` masks old outputs anyway, and keeping them bought it
                // 0.4 points of the Claude Code client's share for 0.004x.
                keep_likely_stale: 2.0,
                ..Policy::default()
            },
        }
    }
}

/// Defaults tuned with the replay lab on the shared transcripts (README, "Replay"): an event at
/// 90% of the window, a tail of 15% of the threshold and a runway of 8 turns of growth gave the
/// lowest cost at the highest recall; 80% / 20% / 5 turns cost 3% more at 32K for less recall.
impl Default for Policy {
    fn default() -> Self {
        Policy {
            trigger_share: 0.90,
            answer_reserve_tokens: 8_192,
            answer_reserve_share: 0.10,
            head_exchanges: 1,
            tail_share: 0.15,
            tail_ceiling: 1.5,
            tail_min_messages: 3,
            protected_at_32k: 10_000,
            protected_min: 2_000,
            protected_max: 100_000,
            min_reclaim_tokens: 5_000,
            min_reclaim_share: 0.05,
            runway_share: 0.15,
            runway_min_tokens: 2_000,
            runway_turns: 8,
            runway_max_share: 0.5,
            huge_arguments_bytes: 4_000,
            runaway_text_bytes: 32_000,
            protected_tools: vec![
                "recall_tool_result".into(),
                "trim_tool_result".into(),
                "memory*".into(),
                "todo*".into(),
                "update_plan".into(),
            ],
            recall_hint: RECALL_TOOL_HINT.into(),
            recall_way: None,
            summary_share: 0.20,
            summary_min_tokens: 2_000,
            summary_max_tokens: 10_000,
            summary_window_share: 0.05,
            max_ineffective_events: 2,
            llm_cooldown_secs: 300,
            cold_cache_secs: provider_cache::ANTHROPIC_TTL_SECS,
            openai_cold_cache_secs: provider_cache::OPENAI_RETENTION_SECS,
            cold_protected_tokens: 8_000,
            cold_protected_turns: 10,
            cold_min_reclaim_tokens: 2_000,
            cache_read_cost: provider_cache::CACHE_READ_COST,
            cache_write_cost: provider_cache::ANTHROPIC_WRITE_COST,
            economic_margin: 3.0,
            economic_horizon: 100,
            warm_prune_min_share: 0.5,
            warm_prune_gap_turns: 16,
            mask_keep_turns: 0,
            keep_likely_use: 0.03,
            keep_likely_stale: 0.1,
            relevance: crate::engine::relevance::Relevance::shipped(),
        }
    }
}

/// What [`Policy::judge_event`] says of an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventVerdict {
    /// Ineffective events in a row, this one included (0 when it was effective).
    pub ineffective_in_a_row: usize,
    /// Why automatic events stop from now on, when they do.
    pub stop: Option<String>,
}

impl Policy {
    /// Whether a pause of `idle_secs` outlived the prompt cache of a provider of `family`.
    /// `requested_ttl_secs` is how long the client asked the provider to keep it (Anthropic's
    /// one-hour breakpoints, OpenAI's extended retention): a longer one keeps the cache warm
    /// longer, and an event then would break it, not ride a rewrite that happens anyway.
    pub fn is_cache_cold(
        &self,
        idle_secs: Option<u64>,
        family: ProviderFamily,
        requested_ttl_secs: Option<u64>,
    ) -> bool {
        let ttl = self.cold_after_secs(family, requested_ttl_secs);
        ttl.is_some_and(|ttl| idle_secs.is_some_and(|s| s > ttl))
    }

    /// How long a session must be idle before its cache counts as cold ([`Self::is_cache_cold`]
    /// past it); `None` when the policy never counts it cold.
    pub fn cold_after_secs(
        &self,
        family: ProviderFamily,
        requested_ttl_secs: Option<u64>,
    ) -> Option<u64> {
        let default = match family {
            ProviderFamily::Anthropic => self.cold_cache_secs,
            ProviderFamily::Openai => self.openai_cold_cache_secs.max(self.cold_cache_secs),
        };
        (self.cold_cache_secs > 0).then(|| default.max(requested_ttl_secs.unwrap_or(0)))
    }

    /// Whether a prune that reclaims `reclaimed` tokens and makes the next request write
    /// `rewritten` tokens instead of reading them pays for itself `economic_margin` times over
    /// within the requests a session `turns` turns old is expected to make still, at the
    /// model's cache `prices` (the policy's own when the model's are not known).
    pub fn prune_pays(
        &self,
        reclaimed: usize,
        rewritten: usize,
        turns: usize,
        prices: Option<CachePrices>,
    ) -> bool {
        if self.economic_margin <= 0.0 {
            return false;
        }
        let CachePrices { read, write } = prices.unwrap_or(CachePrices {
            read: self.cache_read_cost,
            write: self.cache_write_cost,
        });
        let remaining = turns.min(self.economic_horizon) as f64;
        let saved = reclaimed as f64 * read * remaining;
        let cost = rewritten as f64 * (write - read).max(0.0);
        saved >= self.economic_margin * cost
    }

    /// The most prompt tokens a request may hold: the window less the room for the answer.
    pub fn prompt_limit(&self, window: u64) -> usize {
        let reserve = (self.answer_reserve_tokens as f64)
            .min(window as f64 * self.answer_reserve_share.clamp(0.0, 0.5));
        (window as f64 - reserve.max(0.0)) as usize
    }

    /// Prompt tokens at which an event is due.
    pub fn threshold(&self, window: u64) -> usize {
        (window as f64 * self.trigger_share) as usize
    }

    /// How far under the threshold an event must land, given the recent growth per turn.
    pub fn runway(&self, window: u64, growth_per_turn: usize) -> usize {
        let threshold = self.threshold(window) as f64;
        let base = (threshold * self.runway_share).max(self.runway_min_tokens as f64);
        let growth = (self.runway_turns * growth_per_turn) as f64;
        base.max(growth.min(threshold * self.runway_max_share)) as usize
    }

    /// Tokens of the most recent tool outputs that pruning leaves alone.
    pub fn protected_tool_tokens(&self, window: u64) -> usize {
        let base = self.protected_at_32k.max(1) as f64;
        let exponent = (self.protected_max as f64 / base).ln() / (1_000_000f64 / 32_000.0).ln();
        let tokens = base * (window as f64 / 32_000.0).powf(exponent);
        (tokens.round() as usize).clamp(
            self.protected_min,
            self.protected_max.max(self.protected_min),
        )
    }

    /// Judges an event that took the prompt from `tokens_before` to `tokens_after`, after
    /// `ineffective_before` ineffective events in a row: an event is effective when it reclaims
    /// enough (the policy's minimum, or a tenth of the prompt) and lands under the threshold.
    /// After `max_ineffective_events` ineffective ones in a row, automatic events stop: firing
    /// again would only break the cache again. The session engine and the proxy both judge
    /// their events with it.
    pub fn judge_event(
        &self,
        window: u64,
        tokens_before: usize,
        tokens_after: usize,
        ineffective_before: usize,
    ) -> EventVerdict {
        let reclaimed = tokens_before.saturating_sub(tokens_after);
        let effective = reclaimed >= self.min_reclaim(window).min(tokens_before / 10)
            && tokens_after < self.threshold(window);
        if effective {
            return EventVerdict {
                ineffective_in_a_row: 0,
                stop: None,
            };
        }
        let in_a_row = ineffective_before + 1;
        EventVerdict {
            ineffective_in_a_row: in_a_row,
            stop: (in_a_row >= self.max_ineffective_events).then(|| {
                format!(
                    "automatic events stopped after {in_a_row} ineffective events in a row (last: {tokens_before} -> {tokens_after} tokens, threshold {})",
                    self.threshold(window)
                )
            }),
        }
    }

    /// The least a prune must reclaim to be worth an event.
    pub fn min_reclaim(&self, window: u64) -> usize {
        self.min_reclaim_tokens
            .max((window as f64 * self.min_reclaim_share) as usize)
    }

    /// Tail budget in tokens.
    pub fn tail_budget(&self, window: u64) -> usize {
        (self.threshold(window) as f64 * self.tail_share) as usize
    }

    /// Summary budget for `compacted` tokens. For small windows the window cap wins over the
    /// 2K floor (a 32K window gets at most 1.6K of summary).
    pub fn summary_budget(&self, compacted: usize, window: u64) -> usize {
        let upper =
            ((window as f64 * self.summary_window_share) as usize).min(self.summary_max_tokens);
        let lower = self.summary_min_tokens.min(upper);
        ((compacted as f64 * self.summary_share) as usize).clamp(lower, upper)
    }

    /// Whether a tool's outputs are protected from pruning.
    pub fn is_protected_tool(&self, tool: &str) -> bool {
        self.protected_tools
            .iter()
            .any(|g| crate::trim::profile::glob_matches(g, tool))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_scale_with_the_window() {
        let p = Policy::default();
        assert_eq!(p.protected_tool_tokens(32_000), 10_000);
        assert_eq!(p.protected_tool_tokens(64_000), 15_899);
        assert_eq!(p.protected_tool_tokens(200_000), 34_073);
        assert_eq!(p.protected_tool_tokens(1_000_000), 100_000);
        assert!((6_200..=6_400).contains(&p.protected_tool_tokens(16_000)));
        assert_eq!(p.min_reclaim(32_000), 5_000);
        assert_eq!(p.min_reclaim(1_000_000), 50_000);
        assert_eq!(p.threshold(200_000), 180_000);
        assert_eq!(
            p.prompt_limit(200_000),
            191_808,
            "8,192 tokens for the answer"
        );
        assert_eq!(
            p.prompt_limit(32_000),
            28_800,
            "at most a tenth of the window"
        );
        assert_eq!(p.runway(200_000, 0), 27_000);
        assert_eq!(p.runway(200_000, 5_000), 40_000, "8 turns of growth");
        assert_eq!(
            p.runway(200_000, 40_000),
            90_000,
            "capped at half the threshold"
        );
        assert_eq!(p.summary_budget(100_000, 32_000), 1_600);
        assert_eq!(p.summary_budget(5_000, 200_000), 2_000);
        assert_eq!(p.summary_budget(100_000, 200_000), 10_000);
        assert!(p.is_protected_tool("TodoWrite"));
    }

    #[test]
    fn two_ineffective_events_in_a_row_stop_events_and_an_effective_one_resets_the_count() {
        let p = Policy::default();
        let window = 100_000;
        let over = p.threshold(window) + 5_000;
        // Lands above the threshold: ineffective.
        let v = p.judge_event(window, over, p.threshold(window) + 100, 0);
        assert_eq!((v.ineffective_in_a_row, v.stop.is_some()), (1, false));
        let v = p.judge_event(window, over, p.threshold(window) + 100, 1);
        assert_eq!(v.ineffective_in_a_row, 2);
        assert!(v.stop.unwrap().contains("2 ineffective events"));
        // Reclaims a lot and lands low: effective, the count starts again.
        let v = p.judge_event(window, over, window as usize / 3, 1);
        assert_eq!(
            v,
            EventVerdict {
                ineffective_in_a_row: 0,
                stop: None
            }
        );
        // Lands low but reclaims almost nothing: ineffective.
        let low = window as usize / 3;
        assert_eq!(
            p.judge_event(window, low + 10, low, 0).ineffective_in_a_row,
            1
        );
    }

    #[test]
    fn a_prune_is_weighed_at_the_models_cache_prices() {
        let p = Policy::default();
        // 20K reclaimed, 30K rewritten, 20 requests still expected.
        let (reclaimed, rewritten, turns) = (20_000, 30_000, 20);
        let at = |read, write| Some(CachePrices { read, write });
        // Anthropic's write premium: 40K saved < 3 x 34.5K.
        assert!(!p.prune_pays(reclaimed, rewritten, turns, None));
        assert!(!p.prune_pays(reclaimed, rewritten, turns, at(0.1, 1.25)));
        // GPT-4o reads at half price: 200K saved >= 3 x 15K.
        assert!(p.prune_pays(reclaimed, rewritten, turns, at(0.5, 1.0)));
        // A margin of 0 turns warm prunes off whatever the prices.
        let off = Policy {
            economic_margin: 0.0,
            ..Policy::default()
        };
        assert!(!off.prune_pays(reclaimed, rewritten, turns, at(0.5, 1.0)));
    }
}
