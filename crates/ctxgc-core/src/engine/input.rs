//! What an event looks at: the prompt as the model sees it, its token counts, the window and
//! what the provider's cache holds. Planning and pruning both read it.

use std::collections::BTreeMap;

use crate::engine::abstracts::ResultMeta;
use crate::transcript::Message;

/// Framing tokens of a message (see `tokens`), for estimates of replaced messages.
pub(crate) const FRAMING: usize = 3;

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
    /// its whole prefix anyway ([`crate::engine::policy::Policy::cold_cache_secs`]).
    pub cache_cold: bool,
    /// The model's cache prices, when known ([`crate::models::cache_prices`]); else the
    /// policy's.
    pub cache_prices: Option<crate::provider_cache::CachePrices>,
    /// Whether the event may summarise the middle. Off in front of a client that keeps its own
    /// window (the proxy without `compact`): the client shows its history until its own
    /// compaction, and a summary would hide all of the middle; a prune hides only old tool
    /// outputs, each stored and recallable.
    pub may_compact: bool,
    /// Whether `window` is the model's real window, which a prompt must not pass
    /// (the plan's `must_fit`): not for a model whose window is only assumed (the proxy's guess for a
    /// model it does not know may be smaller than the real one, and cutting to it is not free).
    pub enforce_window: bool,
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
