//! Emulations of other agents' context policies. Parameters are grouped per policy with their
//! sources (the peers' code and docs as of 2025-2026, and the parameters ctxgc's issue tracker
//! recorded for them). Summaries, where a policy writes one, come from the same extractive
//! summarizer for every policy, at that policy's budget.

use ctxgc_core::{Message, Role};

use super::{
    History, ReplayEvent, ReplayPolicy, Request, ceil_tail, floor, result_text, set_result_text,
};

/// The message with its tool result's text passed through `f` (insertion-time truncation).
fn with_result(mut m: Message, f: impl Fn(&str) -> String) -> Message {
    if let Some(text) = result_text(&m) {
        set_result_text(&mut m, f(&text));
    }
    m
}

/// Everything verbatim.
#[derive(Default)]
pub struct None_ {
    h: History,
}

impl ReplayPolicy for None_ {
    fn name(&self) -> String {
        "none".into()
    }
    fn push(&mut self, m: Message) {
        self.h.push(m);
    }
    fn insert_tool_results(&mut self, results: Vec<Message>) {
        results.into_iter().for_each(|m| self.h.push(m));
    }
    fn request(&mut self) -> Request<'_> {
        Request {
            long_ttl: None,
            messages: &self.h.messages,
            breakpoints: vec![],
            stable_breakpoint: false,
            event: None,
        }
    }
}

/// Everything verbatim, with the field's ways of keeping the cache alive: the long lifetime on
/// every request (`ttl-1h-always`: Anthropic breakpoints at `"ttl": "1h"`, as proxies that
/// upgrade Claude Code's do, anthropics/claude-code#32671; `retention-24h`: OpenAI's
/// `prompt_cache_retention: "24h"`, which Codex users ask for, openai/codex#18130), or a
/// keep-alive request every 4 minutes while idle, for at most an hour (`keepalive-4min`:
/// context-guru's pings).
pub struct Lifetime {
    name: &'static str,
    /// What it sends: everything verbatim.
    none: None_,
    long: bool,
    keepalive: Option<(i64, i64)>,
}

impl Lifetime {
    /// The long lifetime always, under `name`.
    pub fn long(name: &'static str) -> Lifetime {
        Lifetime {
            name,
            none: None_::default(),
            long: true,
            keepalive: None,
        }
    }

    /// A keep-alive every `every_ms` while idle, up to `max_idle_ms`.
    pub fn keepalive(name: &'static str, every_ms: i64, max_idle_ms: i64) -> Lifetime {
        Lifetime {
            name,
            none: None_::default(),
            long: false,
            keepalive: Some((every_ms, max_idle_ms)),
        }
    }
}

impl ReplayPolicy for Lifetime {
    fn name(&self) -> String {
        self.name.into()
    }
    fn push(&mut self, m: Message) {
        self.none.push(m);
    }
    fn insert_tool_results(&mut self, results: Vec<Message>) {
        self.none.insert_tool_results(results);
    }
    fn request(&mut self) -> Request<'_> {
        let long_ttl = self.long.then_some(true);
        Request {
            long_ttl,
            ..self.none.request()
        }
    }
    fn keepalive_every_ms(&self) -> Option<i64> {
        self.keepalive.map(|(every, _)| every)
    }
    fn keepalive_due(&mut self, idle_ms: i64) -> bool {
        self.keepalive.is_some_and(|(_, max)| idle_ms <= max)
    }
}

/// Compacts the whole conversation after the system prompt into one summary message, keeping
/// `keep_users` tokens of the most recent user messages (Codex) or none.
fn compact_all(
    h: &mut History,
    summary_budget: usize,
    keep_user_tokens: usize,
    prefix: &str,
) -> ReplayEvent {
    let system_end = h.system_end();
    let to = h.messages.len();
    let (request, summary) = h.summarize(system_end, to, summary_budget);
    let mut kept_users: Vec<Message> = Vec::new();
    let mut used = 0;
    for (m, &t) in h.messages.iter().zip(&h.tokens).rev() {
        if m.role == Role::User && used + t <= keep_user_tokens {
            used += t;
            kept_users.push(m.clone());
        }
    }
    kept_users.reverse();
    let mut messages: Vec<Message> = h.messages[..system_end].to_vec();
    messages.extend(kept_users);
    messages.push(Message::text(Role::User, format!("{prefix}{summary}")));
    let summary_tokens = h.counter.count_text(&summary);
    h.replace(messages);
    ReplayEvent {
        kind: "compaction".into(),
        summarizer_request: Some(request),
        summary_tokens,
        earliest_changed: system_end,
        decisions: Vec::new(),
    }
}

/// Codex CLI (codex-rs): tool output truncated to 10,000 tokens, half head and half tail, with a
/// "Total output lines" header and a truncation marker; auto-compaction at 90% of the window
/// rebuilds history as the initial context, the most recent user messages (up to 20K tokens)
/// and the summary, introduced by Codex's summary prefix.
pub struct Codex {
    h: History,
    window: u64,
}

impl Codex {
    const TRUNCATE_TOKENS: usize = 10_000;
    const COMPACT_SHARE: f64 = 0.90;
    const USER_MESSAGE_TOKENS: usize = 20_000;
    const SUMMARY_TOKENS: usize = 2_000;
    const SUMMARY_PREFIX: &str = "Another language model started to solve this problem and produced a summary of its thinking process. You also have access to the state of the tools that were used by that language model. Use this to build on the work that has already been done and avoid duplicating work. Here is the summary produced by the other language model, use the information in this summary to assist with your own analysis:\n";

    /// For a window.
    pub fn new(window: u64) -> Codex {
        Codex {
            h: History::default(),
            window,
        }
    }

    fn truncate(&self, text: &str) -> String {
        let tokens = self.h.counter.count_text(text);
        if tokens <= Self::TRUNCATE_TOKENS {
            return text.to_owned();
        }
        let keep_bytes = text.len() * Self::TRUNCATE_TOKENS / tokens;
        let head = floor(text, keep_bytes / 2);
        let tail = ceil_tail(text, keep_bytes / 2);
        format!(
            "Total output lines: {}\n\n{head}…{} tokens truncated…{tail}",
            text.lines().count(),
            tokens - Self::TRUNCATE_TOKENS
        )
    }
}

impl ReplayPolicy for Codex {
    fn replaces_client_context(&self) -> bool {
        true
    }
    fn name(&self) -> String {
        "codex".into()
    }
    fn push(&mut self, m: Message) {
        self.h.push(m);
    }
    fn insert_tool_results(&mut self, results: Vec<Message>) {
        let truncated: Vec<Message> = results
            .into_iter()
            .map(|m| with_result(m, |t| self.truncate(t)))
            .collect();
        truncated.into_iter().for_each(|m| self.h.push(m));
    }
    fn request(&mut self) -> Request<'_> {
        let event =
            (self.h.total() as f64 >= self.window as f64 * Self::COMPACT_SHARE).then(|| {
                compact_all(
                    &mut self.h,
                    Self::SUMMARY_TOKENS,
                    Self::USER_MESSAGE_TOKENS,
                    Self::SUMMARY_PREFIX,
                )
            });
        Request {
            long_ttl: None,
            messages: &self.h.messages,
            breakpoints: vec![],
            stable_breakpoint: false,
            event,
        }
    }
}

/// Claude Code: tool output over 30,000 characters is cut in the middle; auto-compaction fires at
/// window - min(max output, 20K) - 13K (about 83.5% of 200K) and replaces the conversation with a
/// summary ("This session is being continued from a previous conversation..."). The floor of half
/// the window keeps the formula meaningful for small windows.
pub struct ClaudeCode {
    h: History,
    window: u64,
}

impl ClaudeCode {
    const MAX_OUTPUT_CHARS: usize = 30_000;
    const MAX_OUTPUT_TOKENS: u64 = 32_000;
    const BUFFER_TOKENS: u64 = 13_000;
    const SUMMARY_TOKENS: usize = 4_000;
    const PREFIX: &str = "This session is being continued from a previous conversation that ran out of context. The conversation is summarized below:\n";

    /// For a window.
    pub fn new(window: u64) -> ClaudeCode {
        ClaudeCode {
            h: History::default(),
            window,
        }
    }

    /// The auto-compaction threshold.
    pub fn threshold(window: u64) -> u64 {
        let t = window.saturating_sub(Self::MAX_OUTPUT_TOKENS.min(20_000) + Self::BUFFER_TOKENS);
        t.max(window / 2)
    }

    fn truncate(text: &str) -> String {
        if text.len() <= Self::MAX_OUTPUT_CHARS {
            return text.to_owned();
        }
        let head = floor(text, Self::MAX_OUTPUT_CHARS / 2);
        let tail = ceil_tail(text, Self::MAX_OUTPUT_CHARS / 2);
        format!(
            "{head}\n\n... [{} characters truncated] ...\n\n{tail}",
            text.len() - head.len() - tail.len()
        )
    }
}

impl ReplayPolicy for ClaudeCode {
    fn replaces_client_context(&self) -> bool {
        true
    }
    fn name(&self) -> String {
        "claude-code".into()
    }
    fn push(&mut self, m: Message) {
        self.h.push(m);
    }
    fn insert_tool_results(&mut self, results: Vec<Message>) {
        results
            .into_iter()
            .for_each(|m| self.h.push(with_result(m, Self::truncate)));
    }
    fn request(&mut self) -> Request<'_> {
        let event = (self.h.total() as u64 >= Self::threshold(self.window))
            .then(|| compact_all(&mut self.h, Self::SUMMARY_TOKENS, 0, Self::PREFIX));
        Request {
            long_ttl: None,
            messages: &self.h.messages,
            breakpoints: vec![],
            stable_breakpoint: false,
            event,
        }
    }
}

/// opencode: tool output truncated at 2,000 lines or 50 KB keeping the head; before each request
/// old tool outputs are pruned, protecting the newest 40K tokens of tool output and acting only
/// when more than 20K tokens would be freed ("[Old tool result content cleared]"); compaction
/// when the input reaches the limit minus 20K.
pub struct OpenCode {
    h: History,
    window: u64,
}

impl OpenCode {
    const MAX_LINES: usize = 2_000;
    const MAX_BYTES: usize = 50 * 1024;
    const PROTECT_TOKENS: usize = 40_000;
    const MIN_PRUNE_TOKENS: usize = 20_000;
    const RESERVE_TOKENS: u64 = 20_000;
    const CLEARED: &str = "[Old tool result content cleared]";
    const SUMMARY_TOKENS: usize = 2_000;

    /// For a window.
    pub fn new(window: u64) -> OpenCode {
        OpenCode {
            h: History::default(),
            window,
        }
    }

    fn truncate(text: &str) -> String {
        let lines = text.lines().count();
        if lines <= Self::MAX_LINES && text.len() <= Self::MAX_BYTES {
            return text.to_owned();
        }
        let mut end = 0;
        for (i, line) in text.split_inclusive('\n').enumerate() {
            if i == Self::MAX_LINES || end + line.len() > Self::MAX_BYTES {
                break;
            }
            end += line.len();
        }
        format!(
            "{}\n\n(Output truncated: showing the first {} of {lines} lines)",
            &text[..end],
            text[..end].lines().count()
        )
    }

    fn prune(&mut self) -> Option<ReplayEvent> {
        let mut protected = 0;
        let mut candidates = Vec::new();
        let mut freed = 0;
        for i in (0..self.h.messages.len()).rev() {
            if self.h.messages[i].role != Role::Tool {
                continue;
            }
            if protected < Self::PROTECT_TOKENS {
                protected += self.h.tokens[i];
                continue;
            }
            if result_text(&self.h.messages[i]).as_deref() != Some(Self::CLEARED) {
                freed += self.h.tokens[i];
                candidates.push(i);
            }
        }
        if freed <= Self::MIN_PRUNE_TOKENS {
            return None;
        }
        for &i in &candidates {
            set_result_text(&mut self.h.messages[i], Self::CLEARED.into());
            self.h.recount(i);
        }
        Some(ReplayEvent {
            kind: "prune".into(),
            summarizer_request: None,
            summary_tokens: 0,
            earliest_changed: *candidates.iter().min()?,
            decisions: Vec::new(),
        })
    }
}

impl ReplayPolicy for OpenCode {
    fn replaces_client_context(&self) -> bool {
        true
    }
    fn name(&self) -> String {
        "opencode".into()
    }
    fn push(&mut self, m: Message) {
        self.h.push(m);
    }
    fn insert_tool_results(&mut self, results: Vec<Message>) {
        results
            .into_iter()
            .for_each(|m| self.h.push(with_result(m, Self::truncate)));
    }
    fn request(&mut self) -> Request<'_> {
        let mut event = self.prune();
        let limit = self
            .window
            .saturating_sub(Self::RESERVE_TOKENS)
            .max(self.window / 4);
        if self.h.total() as u64 >= limit {
            event = Some(compact_all(&mut self.h, Self::SUMMARY_TOKENS, 0, ""));
        }
        Request {
            long_ttl: None,
            messages: &self.h.messages,
            breakpoints: vec![],
            stable_breakpoint: false,
            event,
        }
    }
}

/// Hermes agent: results over 100K characters are spilled with a 1,500-character head preview;
/// at the threshold (50% of the window, raised to 85% for windows under 128K) it prunes first
/// (old tool outputs outside a tail of 20% of the threshold, first 3 messages protected) and
/// keeps prune-only when it lands at least 20% under the threshold, else summarises the middle.
pub struct Hermes {
    h: History,
    window: u64,
}

impl Hermes {
    const SPILL_CHARS: usize = 100_000;
    const PREVIEW_CHARS: usize = 1_500;
    const PROTECT_FIRST: usize = 3;
    const TAIL_SHARE: f64 = 0.20;
    const RUNWAY_SHARE: f64 = 0.20;
    const PRUNED: &str = "[tool output pruned to save context]";

    /// For a window.
    pub fn new(window: u64) -> Hermes {
        Hermes {
            h: History::default(),
            window,
        }
    }

    fn threshold(&self) -> usize {
        let share = if self.window < 128_000 { 0.85 } else { 0.50 };
        (self.window as f64 * share) as usize
    }

    fn tail_start(&self) -> usize {
        let budget = (self.threshold() as f64 * Self::TAIL_SHARE) as usize;
        let mut used = 0;
        let mut start = self.h.messages.len();
        while start > Self::PROTECT_FIRST && used + self.h.tokens[start - 1] <= budget {
            used += self.h.tokens[start - 1];
            start -= 1;
        }
        while start < self.h.messages.len() && self.h.messages[start].role == Role::Tool {
            start += 1;
        }
        start.max(Self::PROTECT_FIRST.min(self.h.messages.len()))
    }
}

impl ReplayPolicy for Hermes {
    fn replaces_client_context(&self) -> bool {
        true
    }
    fn name(&self) -> String {
        "hermes".into()
    }
    fn push(&mut self, m: Message) {
        self.h.push(m);
    }
    fn insert_tool_results(&mut self, results: Vec<Message>) {
        for mut m in results {
            if let Some(text) = result_text(&m).filter(|t| t.len() > Self::SPILL_CHARS) {
                let preview = floor(&text, Self::PREVIEW_CHARS);
                set_result_text(
                    &mut m,
                    format!(
                        "{preview}\n[... output of {} chars saved to a file ...]",
                        text.len()
                    ),
                );
            }
            self.h.push(m);
        }
    }
    fn request(&mut self) -> Request<'_> {
        let threshold = self.threshold();
        if self.h.total() < threshold {
            return Request {
                long_ttl: None,
                messages: &self.h.messages,
                breakpoints: vec![],
                stable_breakpoint: false,
                event: None,
            };
        }
        let tail = self.tail_start();
        let mut pruned = self.h.messages.clone();
        let mut first = None;
        for (i, m) in pruned
            .iter_mut()
            .enumerate()
            .take(tail)
            .skip(Self::PROTECT_FIRST)
        {
            if m.role == Role::Tool && result_text(m).as_deref() != Some(Self::PRUNED) {
                set_result_text(m, Self::PRUNED.into());
                first.get_or_insert(i);
            }
        }
        let before = self.h.messages.clone();
        self.h.replace(pruned);
        let event = if self.h.total() <= (threshold as f64 * (1.0 - Self::RUNWAY_SHARE)) as usize {
            first.map(|i| ReplayEvent {
                kind: "prune".into(),
                summarizer_request: None,
                summary_tokens: 0,
                earliest_changed: i,
                decisions: Vec::new(),
            })
        } else {
            self.h.replace(before);
            let from = Self::PROTECT_FIRST.min(tail);
            let middle: usize = self.h.tokens[from..tail].iter().sum();
            let budget = (middle / 5).clamp(1_000, 4_000);
            let (request, summary) = self.h.summarize(from, tail, budget);
            let summary_tokens = self.h.counter.count_text(&summary);
            let mut messages = self.h.messages[..from].to_vec();
            messages.push(Message::text(Role::User, summary));
            messages.extend_from_slice(&self.h.messages[tail..]);
            self.h.replace(messages);
            Some(ReplayEvent {
                kind: "compaction".into(),
                summarizer_request: Some(request),
                summary_tokens,
                earliest_changed: from,
                decisions: Vec::new(),
            })
        };
        Request {
            long_ttl: None,
            messages: &self.h.messages,
            breakpoints: vec![],
            stable_breakpoint: false,
            event,
        }
    }
}

/// OpenAI Agents SDK `ToolOutputTrimmer` (recent_turns=2, max_output_chars=500,
/// preview_chars=200), applied on every model call: tool outputs older than the two most recent
/// turns and longer than 500 characters become a 200-character preview. No compaction.
#[derive(Default)]
pub struct AgentsTrimmer {
    h: History,
    /// Index of the first message not yet trimmed.
    trimmed_to: usize,
}

impl AgentsTrimmer {
    const RECENT_TURNS: usize = 2;
    const MAX_OUTPUT_CHARS: usize = 500;
    const PREVIEW_CHARS: usize = 200;
}

impl ReplayPolicy for AgentsTrimmer {
    fn replaces_client_context(&self) -> bool {
        true
    }
    fn name(&self) -> String {
        "openai-agents-trimmer".into()
    }
    fn push(&mut self, m: Message) {
        self.h.push(m);
    }
    fn insert_tool_results(&mut self, results: Vec<Message>) {
        results.into_iter().for_each(|m| self.h.push(m));
    }
    fn request(&mut self) -> Request<'_> {
        let turns = ctxgc_core::transcript::assistant_turns(&self.h.messages);
        let recent_from = turns
            .len()
            .checked_sub(Self::RECENT_TURNS)
            .map_or(0, |k| turns[k]);
        let mut first = None;
        for i in self.trimmed_to..recent_from {
            let Some(text) = result_text(&self.h.messages[i]) else {
                continue;
            };
            if text.chars().count() > Self::MAX_OUTPUT_CHARS {
                let preview: String = text.chars().take(Self::PREVIEW_CHARS).collect();
                set_result_text(
                    &mut self.h.messages[i],
                    format!("{preview}\n… [trimmed: {} chars]", text.chars().count()),
                );
                self.h.recount(i);
                first.get_or_insert(i);
            }
        }
        self.trimmed_to = self.trimmed_to.max(recent_from);
        let event = first.map(|i| ReplayEvent {
            kind: "trim".into(),
            summarizer_request: None,
            summary_tokens: 0,
            earliest_changed: i,
            decisions: Vec::new(),
        });
        Request {
            long_ttl: None,
            messages: &self.h.messages,
            breakpoints: vec![],
            stable_breakpoint: false,
            event,
        }
    }
}

/// Anthropic context editing (`clear_tool_uses_20250919`): when the input exceeds 100K tokens,
/// tool results other than the 3 most recent are replaced by a placeholder; server-side
/// compaction summarises the conversation at 150K when the window allows.
pub struct ContextEditing {
    h: History,
    window: u64,
}

impl ContextEditing {
    const TRIGGER_TOKENS: usize = 100_000;
    const KEEP_TOOL_USES: usize = 3;
    const COMPACT_TOKENS: usize = 150_000;
    const SUMMARY_TOKENS: usize = 4_000;

    /// For a window.
    pub fn new(window: u64) -> ContextEditing {
        ContextEditing {
            h: History::default(),
            window,
        }
    }
}

impl ReplayPolicy for ContextEditing {
    fn replaces_client_context(&self) -> bool {
        true
    }
    fn name(&self) -> String {
        "anthropic-context-editing".into()
    }
    fn push(&mut self, m: Message) {
        self.h.push(m);
    }
    fn insert_tool_results(&mut self, results: Vec<Message>) {
        results.into_iter().for_each(|m| self.h.push(m));
    }
    fn request(&mut self) -> Request<'_> {
        let mut event = None;
        if self.h.total() > Self::TRIGGER_TOKENS {
            let tools: Vec<usize> = self
                .h
                .messages
                .iter()
                .enumerate()
                .filter(|(_, m)| m.role == Role::Tool)
                .map(|(i, _)| i)
                .collect();
            let keep_from = tools.len().saturating_sub(Self::KEEP_TOOL_USES);
            event = super::masking::clear_results(&mut self.h, &tools[..keep_from]);
        }
        if self.window as usize > Self::COMPACT_TOKENS && self.h.total() > Self::COMPACT_TOKENS {
            event = Some(compact_all(&mut self.h, Self::SUMMARY_TOKENS, 0, ""));
        }
        Request {
            long_ttl: None,
            messages: &self.h.messages,
            breakpoints: vec![],
            stable_breakpoint: false,
            event,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn big(n: usize) -> String {
        (0..n)
            .map(|i| format!("line {i} of a long build log with words\n"))
            .collect()
    }

    #[test]
    fn truncation_formats() {
        let text = big(20_000);
        let codex = Codex::new(200_000).truncate(&text);
        assert!(
            codex.starts_with("Total output lines: 20000\n\n")
                && codex.contains("tokens truncated…")
        );
        let cc = ClaudeCode::truncate(&text);
        assert!(cc.contains("characters truncated] ...") && cc.len() < 31_000);
        let oc = OpenCode::truncate(&text);
        assert!(oc.ends_with("of 20000 lines)") && oc.len() < 52_000);
        assert_eq!(ClaudeCode::threshold(200_000), 167_000);
        assert_eq!(ClaudeCode::threshold(32_000), 16_000);
    }

    fn feed(policy: &mut dyn ReplayPolicy, turns: usize, output: &str) -> Vec<Option<String>> {
        policy.push(Message::text(Role::System, "sys"));
        policy.push(Message::text(Role::User, "task"));
        let mut events = Vec::new();
        for i in 0..turns {
            let r = policy.request();
            events.push(r.event.map(|e| e.kind));
            super::super::bash_turn(policy, format!("c{i}"), output);
        }
        events
    }

    #[test]
    fn triggers_fire_where_documented() {
        let out = big(300); // ~3K tokens per turn
        let codex = feed(&mut Codex::new(32_000), 20, &out);
        let first = codex.iter().position(Option::is_some).unwrap();
        assert!(
            (8..=12).contains(&first),
            "codex compacts near 90% of 32K: turn {first}"
        );
        let trimmer = feed(&mut AgentsTrimmer::default(), 5, &out);
        assert_eq!(trimmer[..3], [None, None, None]);
        assert_eq!(
            trimmer[3].as_deref(),
            Some("trim"),
            "outputs older than 2 turns trimmed on every call"
        );
        let editing = feed(&mut ContextEditing::new(200_000), 60, &out);
        let first = editing.iter().position(Option::is_some).unwrap();
        assert!(
            (30..=40).contains(&first),
            "context editing clears past 100K: turn {first}"
        );
        let opencode = feed(&mut OpenCode::new(200_000), 30, &out);
        assert!(
            opencode.iter().any(|e| e.as_deref() == Some("prune")),
            "{opencode:?}"
        );
        let claude = feed(&mut ClaudeCode::new(64_000), 20, &out);
        let first = claude.iter().position(Option::is_some).unwrap();
        assert!(
            (9..=12).contains(&first),
            "claude-code compacts at 32K of 64K: turn {first}"
        );
        assert_eq!(claude[first].as_deref(), Some("compaction"));
        // Hermes at 32K: threshold 85% (27.2K); prune-first lands well under it.
        let hermes = feed(&mut Hermes::new(32_000), 20, &out);
        let first = hermes.iter().position(Option::is_some).unwrap();
        assert!(
            (8..=10).contains(&first),
            "hermes at 85% of 32K: turn {first}"
        );
        assert_eq!(hermes[first].as_deref(), Some("prune"));
    }

    #[test]
    fn hermes_spills_huge_results_with_a_preview() {
        let mut h = Hermes::new(200_000);
        h.push(Message::text(Role::User, "task"));
        h.insert_tool_results(vec![Message::tool_result(
            "c",
            Some("bash".into()),
            "x".repeat(150_000),
            false,
        )]);
        let text = result_text(&h.h.messages[1]).unwrap();
        assert!(
            text.len() < 1_600
                && text.ends_with("[... output of 150000 chars saved to a file ...]"),
            "{}",
            text.len()
        );
    }
}
