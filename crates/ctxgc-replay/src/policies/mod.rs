//! Context policies: ctxgc's and faithful emulations of what other agents do.
//!
//! A policy sees a session as a live agent does: messages and tool results arrive in order, and
//! before each assistant turn it builds the request (running its events when due). Each baseline
//! keeps its parameters in one place with their source.

mod baselines;
mod ctxgc;
mod exec;
mod foresight;
mod masking;

use ctxgc_core::engine::summary::{self, SummaryInput};
use ctxgc_core::tokens::TokenCounter;
use ctxgc_core::{Message, Role, Transcript};

pub use baselines::{
    AgentsTrimmer, ClaudeCode, Codex, ContextEditing, Hermes, Lifetime, None_, OpenCode,
};
pub use ctxgc::Ctxgc;
pub use exec::{Exec, ExecPool};
pub use foresight::Foresight;
pub use masking::{ClearToolUses, ObservationMasking};

/// An event a policy ran before a request.
#[derive(Debug, Clone)]
pub struct ReplayEvent {
    /// What kind (`compaction`, `prune`, `clear`, ...).
    pub kind: String,
    /// The summarizer's request, when the event called one (its input is billed).
    pub summarizer_request: Option<Vec<Message>>,
    /// Summary tokens the summarizer wrote (billed as output).
    pub summary_tokens: usize,
    /// Index of the earliest message the event changed.
    pub earliest_changed: usize,
    /// What the event did with each output, and why (ctxgc's engine says; `--explain`).
    pub decisions: Vec<ctxgc_core::engine::event::Decision>,
}

/// The request a policy sends.
pub struct Request<'a> {
    /// The messages, in order.
    pub messages: &'a [Message],
    /// Messages the policy marks with a cache breakpoint (besides the system prompt and the last
    /// message, which every agent marks).
    pub breakpoints: Vec<usize>,
    /// An explicit breakpoint at the end of the stable prefix (the leading system messages and
    /// the first user message after them), which the client's own requests lack (OpenAI's
    /// `prompt_cache_breakpoint`, GPT-5.6 on, as the proxy adds it).
    pub stable_breakpoint: bool,
    /// The event that ran for this request, if any.
    pub event: Option<ReplayEvent>,
    /// The cache lifetime the policy asks for (Anthropic's one-hour TTL, OpenAI's 24-hour
    /// retention); `None`: as the client asked.
    pub long_ttl: Option<bool>,
}

/// A context policy under replay.
pub trait ReplayPolicy: Send {
    /// Its name in tables.
    fn name(&self) -> String;
    /// A system, user or assistant message enters.
    fn push(&mut self, message: Message);
    /// The tool results of one assistant turn enter.
    fn insert_tool_results(&mut self, results: Vec<Message>);
    /// When the next request is sent (client logs record it), and whether it asked for the
    /// one-hour cache TTL: called before [`Self::request`].
    fn clock(&mut self, at: Option<crate::cache::SentAt>) {
        let _ = at;
    }
    /// The client changed its prompt for the next request (from the message at `from` of the
    /// request the client sent; `None`: from its fixed prefix), so that request rewrites
    /// the cache from there whatever the policy does: called before [`Self::clock`].
    fn client_changed_prompt(&mut self, from: Option<usize>) {
        let _ = from;
    }
    /// The request sent before the next assistant message.
    fn request(&mut self) -> Request<'_>;
    /// Tokens every request holds before its messages, in ctxgc's own count (the tool
    /// definitions, and a client's system prompt its log leaves out): what a proxy in front of
    /// the client sees in each request. Called once the policy is made.
    fn fixed_prefix(&mut self, tokens: usize) {
        let _ = tokens;
    }
    /// The prompt tokens the provider counted for the latest request (its answer's usage, as
    /// a proxy reads it): called after [`Self::request`], before the next message enters.
    fn observe_usage(&mut self, prompt_tokens: usize) {
        let _ = prompt_tokens;
    }
    /// Tokens of tool definitions the policy adds to every request.
    fn extra_tool_tokens(&self) -> usize {
        0
    }
    /// Whether the policy stands for an agent's own context management, replacing the client's.
    /// On a client's log such a policy runs on the underlying conversation (the client's own
    /// compactions taken out); every other policy runs on the requests the client really sent,
    /// as a proxy in front of that client would.
    fn replaces_client_context(&self) -> bool {
        false
    }
    /// Whether every original it hides is stored and recallable by an id the prompt shows
    /// (a hidden reference then costs one recall round rather than being lost).
    fn stores_originals(&self) -> bool {
        false
    }
    /// While the session is idle, how often the policy considers a keep-alive request (in
    /// milliseconds after the latest request); `None`: it sends none.
    fn keepalive_every_ms(&self) -> Option<i64> {
        None
    }
    /// Whether it sends a keep-alive now, `idle_ms` after the latest request.
    fn keepalive_due(&mut self, idle_ms: i64) -> bool {
        let _ = idle_ms;
        false
    }
}

/// What a policy is created for: one session at one window.
pub struct SessionContext<'a> {
    /// The context window.
    pub window: u64,
    /// A name unique among the sessions replayed together (external policies key state by it).
    pub session: &'a str,
    /// The whole session (only `foresight` looks ahead).
    pub transcript: &'a Transcript,
}

/// Creates a policy for one session.
pub type PolicyFactory = Box<dyn Fn(&SessionContext) -> Box<dyn ReplayPolicy> + Send + Sync>;

/// The built-in policies, by name.
pub fn builtin(name: &str) -> Option<PolicyFactory> {
    Some(match name {
        "none" => Box::new(|_| Box::new(None_::default())),
        "codex" => Box::new(|c| Box::new(Codex::new(c.window))),
        "claude-code" => Box::new(|c| Box::new(ClaudeCode::new(c.window))),
        "opencode" => Box::new(|c| Box::new(OpenCode::new(c.window))),
        "hermes" => Box::new(|c| Box::new(Hermes::new(c.window))),
        "openai-agents-trimmer" => Box::new(|_| Box::new(AgentsTrimmer::default())),
        "anthropic-context-editing" => Box::new(|c| Box::new(ContextEditing::new(c.window))),
        "anthropic-clear-tool-uses" => Box::new(|c| Box::new(ClearToolUses::new(c.window))),
        "anthropic-clear-tool-uses-10k" => {
            Box::new(|c| Box::new(ClearToolUses::clearing_at_least(c.window, 10_000)))
        }
        "masking-last-10-turns" => Box::new(|_| Box::new(ObservationMasking::last_turns(10))),
        "openhands-masking" => Box::new(|_| Box::new(ObservationMasking::openhands(100))),
        // On a client's log, ctxgc is what `ctxgc serve` does in front of that client.
        "ctxgc" => Box::new(|c| {
            Box::new(Ctxgc::for_session(
                c,
                ctxgc_core::config::Config::default(),
                "ctxgc".into(),
            ))
        }),
        "ctxgc-lean" => Box::new(|c| {
            let config = ctxgc_core::config::Config::with_preset(ctxgc_core::engine::Preset::Lean);
            Box::new(Ctxgc::for_session(c, config, "ctxgc-lean".into()))
        }),
        "ttl-1h-always" => Box::new(|_| Box::new(Lifetime::long("ttl-1h-always"))),
        "retention-24h" => Box::new(|_| Box::new(Lifetime::long("retention-24h"))),
        "keepalive-4min" => {
            Box::new(|_| Box::new(Lifetime::keepalive("keepalive-4min", 240_000, 3_600_000)))
        }
        "ctxgc-keepalive" => Box::new(|c| {
            let mut config = ctxgc_core::config::Config::default();
            config.cache.keepalive = true;
            Box::new(Ctxgc::for_session(c, config, "ctxgc-keepalive".into()))
        }),
        "foresight" => Box::new(|c| Box::new(Foresight::new(c.transcript))),
        _ => return None,
    })
}

/// Names of the built-in policies, in table order.
pub const BUILTIN: &[&str] = &[
    "none",
    "codex",
    "claude-code",
    "opencode",
    "hermes",
    "openai-agents-trimmer",
    "anthropic-context-editing",
    "anthropic-clear-tool-uses",
    "anthropic-clear-tool-uses-10k",
    "masking-last-10-turns",
    "openhands-masking",
    "ttl-1h-always",
    "retention-24h",
    "keepalive-4min",
    "ctxgc",
    "ctxgc-keepalive",
    "ctxgc-lean",
    "foresight",
];

/// A message list with its token counts (the common state of the baselines).
pub(crate) struct History {
    pub messages: Vec<Message>,
    pub tokens: Vec<usize>,
    pub counter: TokenCounter,
}

impl Default for History {
    fn default() -> Self {
        History {
            messages: Vec::new(),
            tokens: Vec::new(),
            counter: crate::counting::counter(),
        }
    }
}

impl History {
    pub fn push(&mut self, m: Message) {
        self.tokens.push(self.counter.count_message(&m));
        self.messages.push(m);
    }

    pub fn total(&self) -> usize {
        self.tokens.iter().sum::<usize>() + 3
    }

    pub fn replace(&mut self, messages: Vec<Message>) {
        self.tokens = messages
            .iter()
            .map(|m| self.counter.count_message(m))
            .collect();
        self.messages = messages;
    }

    pub fn recount(&mut self, index: usize) {
        self.tokens[index] = self.counter.count_message(&self.messages[index]);
    }

    /// The summarizer request for `messages[from..to]` (the prompt plus the instruction) and
    /// the summary the extractive summarizer writes at `budget` tokens: every policy that
    /// summarises gets the same summarizer, so the comparison is of policies, not of writers.
    pub fn summarize(&self, from: usize, to: usize, budget: usize) -> (Vec<Message>, String) {
        let metas = Default::default();
        let input = SummaryInput {
            messages: &self.messages,
            from,
            to,
            metas: &metas,
            budget,
            recall_hint: ctxgc_core::engine::policy::RECALL_TOOL_HINT,
        };
        let request = summary::llm_request_messages(&input);
        let body = summary::extractive_body(&input, &self.counter);
        (request, summary::compose(&input, &body, &self.counter))
    }

    /// Leading system messages.
    pub fn system_end(&self) -> usize {
        self.messages
            .iter()
            .take_while(|m| m.role == Role::System)
            .count()
    }
}

/// Replaces the text of a tool message's result.
pub(crate) fn set_result_text(message: &mut Message, text: String) {
    for block in &mut message.content {
        if let ctxgc_core::Block::ToolResult(r) = block {
            r.content = vec![ctxgc_core::Block::text(text.clone())];
        }
    }
}

/// The text of a tool message's result.
pub(crate) fn result_text(message: &Message) -> Option<String> {
    message.tool_results().next().map(|r| r.text())
}

/// `s` cut to at most `max` bytes at a char boundary.
pub(crate) fn floor(s: &str, max: usize) -> &str {
    let mut cut = max.min(s.len());
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    &s[..cut]
}

/// The last at most `max` bytes of `s`, from a char boundary.
pub(crate) fn ceil_tail(s: &str, max: usize) -> &str {
    let mut start = s.len().saturating_sub(max);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// One agent turn for policy tests: the assistant calls `bash` (`id`) and `output` comes back.
#[cfg(test)]
pub(crate) fn bash_turn(policy: &mut dyn ReplayPolicy, id: String, output: &str) {
    use ctxgc_core::{Block, ToolCall};
    policy.push(Message {
        role: Role::Assistant,
        content: vec![Block::ToolCall(ToolCall {
            id: id.clone(),
            name: "bash".into(),
            arguments: "{}".into(),
            implicit: false,
        })],
        usage: None,
    });
    policy.insert_tool_results(vec![Message::tool_result(
        id,
        Some("bash".into()),
        output,
        false,
    )]);
}
