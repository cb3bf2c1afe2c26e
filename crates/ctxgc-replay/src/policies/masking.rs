//! Observation masking as the field runs it now: tool outputs outside a recent window are
//! replaced by a placeholder on every request (a rolling window), with no summary and no
//! recall.
//!
//! - The Complexity Trap (Lindenbauer et al., arXiv 2508.21433): SWE-agent's
//!   `last_n_observations` history processor keeping the last 10 turns' observations, which
//!   halved cost on SWE-bench Verified at an equal or better solve rate; older ones read
//!   "Old environment output: (N lines omitted)".
//! - OpenHands' `ObservationMaskingCondenser`: observations outside the last
//!   `attention_window` events (actions and observations; 100 by default) become `<MASKED>`.
//! - Anthropic's context editing `clear_tool_uses_20250919`, applied by the API on each request
//!   from the full history the client sends: past `trigger` input tokens (100K by default), every
//!   tool result but the newest `keep` tool uses (3) is cleared, when that clears at least
//!   `clear_at_least` tokens (none by default).

use ctxgc_core::{Message, Role};

use super::{History, ReplayEvent, ReplayPolicy, Request, result_text, set_result_text};

/// Which outputs stay whole.
#[derive(Debug, Clone, Copy)]
enum Window {
    /// The tool outputs of the newest this-many assistant turns.
    Turns(usize),
    /// The newest this-many events, an assistant turn and each tool result counting one.
    Events(usize),
}

/// A rolling observation mask.
pub struct ObservationMasking {
    name: &'static str,
    window: Window,
    placeholder: fn(&str) -> String,
    h: History,
}

impl ObservationMasking {
    /// The Complexity Trap's setting: the last 10 turns' observations.
    pub fn last_turns(turns: usize) -> ObservationMasking {
        ObservationMasking {
            name: "masking-last-10-turns",
            window: Window::Turns(turns),
            placeholder: |original| {
                format!(
                    "Old environment output: ({} lines omitted)",
                    original.lines().count()
                )
            },
            h: History::default(),
        }
    }

    /// OpenHands' `ObservationMaskingCondenser` with its default attention window.
    pub fn openhands(attention_window: usize) -> ObservationMasking {
        ObservationMasking {
            name: "openhands-masking",
            window: Window::Events(attention_window),
            placeholder: |_| "<MASKED>".to_owned(),
            h: History::default(),
        }
    }

    /// The index before which tool outputs are masked.
    fn boundary(&self) -> usize {
        let messages = &self.h.messages;
        let mut seen = 0usize;
        for (i, m) in messages.iter().enumerate().rev() {
            let counts = match self.window {
                Window::Turns(_) => m.role == Role::Assistant,
                Window::Events(_) => matches!(m.role, Role::Assistant | Role::Tool),
            };
            if counts {
                seen += 1;
            }
            let limit = match self.window {
                Window::Turns(n) | Window::Events(n) => n,
            };
            if seen >= limit && counts {
                return i;
            }
        }
        0
    }
}

impl ReplayPolicy for ObservationMasking {
    fn replaces_client_context(&self) -> bool {
        true
    }
    fn name(&self) -> String {
        self.name.into()
    }
    fn push(&mut self, m: Message) {
        self.h.push(m);
    }
    fn insert_tool_results(&mut self, results: Vec<Message>) {
        results.into_iter().for_each(|m| self.h.push(m));
    }
    fn request(&mut self) -> Request<'_> {
        let boundary = self.boundary();
        let mut first = None;
        for i in 0..boundary {
            if self.h.messages[i].role != Role::Tool {
                continue;
            }
            let Some(text) = result_text(&self.h.messages[i]) else {
                continue;
            };
            let masked = (self.placeholder)(&text);
            if text != masked && !is_placeholder(&text) {
                set_result_text(&mut self.h.messages[i], masked);
                self.h.recount(i);
                first.get_or_insert(i);
            }
        }
        Request {
            long_ttl: None,
            messages: &self.h.messages,
            breakpoints: vec![],
            stable_breakpoint: false,
            event: first.map(|i| ReplayEvent {
                kind: "mask".into(),
                summarizer_request: None,
                summary_tokens: 0,
                earliest_changed: i,
                decisions: Vec::new(),
            }),
        }
    }
}

/// Replaces the results at `indices` by [`ClearToolUses::PLACEHOLDER`]; the event, when one
/// was not cleared already (Anthropic's `clear_tool_uses`, also in `anthropic-context-editing`).
pub(super) fn clear_results(h: &mut History, indices: &[usize]) -> Option<ReplayEvent> {
    let mut first = None;
    for &i in indices {
        if result_text(&h.messages[i]).as_deref() != Some(ClearToolUses::PLACEHOLDER) {
            set_result_text(&mut h.messages[i], ClearToolUses::PLACEHOLDER.into());
            h.recount(i);
            first.get_or_insert(i);
        }
    }
    first.map(|i| ReplayEvent {
        kind: "clear".into(),
        summarizer_request: None,
        summary_tokens: 0,
        earliest_changed: i,
        decisions: Vec::new(),
    })
}

fn is_placeholder(text: &str) -> bool {
    text == "<MASKED>"
        || text == ClearToolUses::PLACEHOLDER
        || (text.starts_with("Old environment output: (") && text.ends_with(" lines omitted)"))
}

/// Anthropic's `clear_tool_uses_20250919` context edit, as the API applies it.
pub struct ClearToolUses {
    trigger: usize,
    keep: usize,
    clear_at_least: usize,
    h: History,
    /// Tokens of each message as the client sends it (the trigger counts these).
    sent: Vec<usize>,
}

impl ClearToolUses {
    pub(super) const PLACEHOLDER: &str = "[tool result cleared]";

    /// The API's defaults (trigger 100K input tokens, keep 3 tool uses, clear at least 0),
    /// the trigger lowered to 80% of a smaller window so the edit can act before it overflows.
    pub fn new(window: u64) -> ClearToolUses {
        ClearToolUses {
            trigger: 100_000.min(window as usize * 4 / 5),
            keep: 3,
            clear_at_least: 0,
            h: History::default(),
            sent: Vec::new(),
        }
    }

    /// With `clear_at_least` set (so a clear pays for the cache write it causes).
    pub fn clearing_at_least(window: u64, tokens: usize) -> ClearToolUses {
        ClearToolUses {
            clear_at_least: tokens,
            ..ClearToolUses::new(window)
        }
    }
}

impl ReplayPolicy for ClearToolUses {
    fn replaces_client_context(&self) -> bool {
        true
    }
    fn name(&self) -> String {
        if self.clear_at_least > 0 {
            format!("anthropic-clear-tool-uses-{}k", self.clear_at_least / 1000)
        } else {
            "anthropic-clear-tool-uses".into()
        }
    }
    fn push(&mut self, m: Message) {
        self.h.push(m);
        self.sent.push(*self.h.tokens.last().unwrap_or(&0));
    }
    fn insert_tool_results(&mut self, results: Vec<Message>) {
        results.into_iter().for_each(|m| self.push(m));
    }
    fn request(&mut self) -> Request<'_> {
        let mut event = None;
        if self.sent.iter().sum::<usize>() > self.trigger {
            let tools: Vec<usize> = (0..self.h.messages.len())
                .filter(|&i| self.h.messages[i].role == Role::Tool)
                .collect();
            let clear = &tools[..tools.len().saturating_sub(self.keep)];
            // Stateless, as the API: what this application clears is every result outside
            // `keep`, counted as the client sent it.
            let cleared: usize = clear.iter().map(|&i| self.sent[i]).sum();
            if cleared >= self.clear_at_least.max(1) {
                event = clear_results(&mut self.h, clear);
            }
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
    use ctxgc_core::{Block, ToolCall, ToolResult};

    fn feed(policy: &mut dyn ReplayPolicy, turns: usize, lines: usize) -> Vec<Option<usize>> {
        policy.push(Message::text(Role::System, "sys"));
        policy.push(Message::text(Role::User, "task"));
        let mut events = Vec::new();
        for t in 0..turns {
            policy.push(Message {
                role: Role::Assistant,
                content: vec![Block::ToolCall(ToolCall {
                    id: format!("c{t}"),
                    name: "bash".into(),
                    arguments: "{}".into(),
                    implicit: false,
                })],
                usage: None,
            });
            let text: String = (0..lines)
                .map(|i| format!("line {i} of turn {t}\n"))
                .collect();
            policy.insert_tool_results(vec![Message {
                role: Role::Tool,
                content: vec![Block::ToolResult(ToolResult {
                    call_id: format!("c{t}"),
                    tool_name: Some("bash".into()),
                    content: vec![Block::text(text)],
                    is_error: false,
                })],
                usage: None,
            }]);
            events.push(policy.request().event.map(|e| e.earliest_changed));
        }
        events
    }

    fn shown(policy: &mut dyn ReplayPolicy) -> Vec<String> {
        policy
            .request()
            .messages
            .iter()
            .filter_map(result_text)
            .collect()
    }

    #[test]
    fn the_last_ten_turns_stay_and_older_outputs_are_masked_every_turn() {
        let mut p = ObservationMasking::last_turns(10);
        let events = feed(&mut p, 14, 5);
        assert!(events[..10].iter().all(Option::is_none));
        assert!(
            events[10..].iter().all(Option::is_some),
            "rolling: {events:?}"
        );
        let texts = shown(&mut p);
        assert_eq!(texts[0], "Old environment output: (5 lines omitted)");
        assert!(texts[3].starts_with("Old environment output"));
        assert!(texts[4].starts_with("line 0 of turn 4"));
    }

    #[test]
    fn openhands_counts_actions_and_observations() {
        let mut p = ObservationMasking::openhands(6);
        feed(&mut p, 5, 3);
        let texts = shown(&mut p);
        assert_eq!(texts.iter().filter(|t| *t == "<MASKED>").count(), 2);
    }

    #[test]
    fn clear_tool_uses_keeps_three_past_the_trigger_and_honours_clear_at_least() {
        let mut p = ClearToolUses::new(5_000);
        let events = feed(&mut p, 12, 60);
        let first = events.iter().position(Option::is_some).unwrap();
        let texts = shown(&mut p);
        assert_eq!(
            texts
                .iter()
                .filter(|t| *t == ClearToolUses::PLACEHOLDER)
                .count(),
            9
        );
        let mut lazy = ClearToolUses::clearing_at_least(5_000, 3_000);
        let lazy_events = feed(&mut lazy, 12, 60);
        let lazy_first = lazy_events.iter().position(Option::is_some).unwrap();
        assert!(lazy_first > first, "{lazy_first} > {first}");
    }
}
