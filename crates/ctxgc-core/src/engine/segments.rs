//! Head, middle and tail: what an event may rewrite.
//!
//! The head (system prompt and first exchange) and the tail (the most recent turns, by token
//! budget) are never rewritten; the middle is. Boundaries never fall between a tool call and
//! its results (a tool message always stays in the segment of the assistant message that
//! called), nor between tool results and the user message that follows them: Anthropic sends
//! both as one wire message, so a boundary there could not be rendered on the wire, and the
//! proxy and the replay lab must cut at the same places.

use crate::transcript::{Message, Role};

/// Openings of the instruction blocks clients put in user turns (Codex's environment context
/// and AGENTS.md, user instructions), and of the summaries their own compactions leave (Claude
/// Code's and Codex's): an event never summarises a client's summary again.
const INSTRUCTION_OPENINGS: &[&str] = &[
    "<environment_context>",
    "<user_instructions>",
    "# AGENTS.md instructions",
    "<permissions instructions>",
    "This session is being continued from a previous conversation",
    "Another language model started to solve this problem",
];

/// Whether the client pins this message: system and developer messages wherever they stand
/// (Claude Code's environment block, Codex's developer messages) and the instruction blocks
/// clients send as user turns. Events keep them verbatim and in order.
pub fn is_pinned(message: &Message) -> bool {
    match message.role {
        Role::System => true,
        Role::User => {
            let text = message.text_content();
            let text = text.trim_start();
            INSTRUCTION_OPENINGS.iter().any(|o| text.starts_with(o))
        }
        _ => false,
    }
}

/// End (exclusive) of the head: leading system messages, then `exchanges` times a user turn
/// (with any pinned messages beside it) and the assistant turn that answers it with its tool
/// results.
pub fn head_end(messages: &[Message], exchanges: usize) -> usize {
    let mut i = 0;
    while i < messages.len() && messages[i].role == Role::System {
        i += 1;
    }
    for _ in 0..exchanges {
        while i < messages.len() && (messages[i].role == Role::User || is_pinned(&messages[i])) {
            i += 1;
        }
        if i < messages.len() && messages[i].role == Role::Assistant {
            i += 1;
        }
        while i < messages.len() && messages[i].role == Role::Tool {
            i += 1;
        }
    }
    while i < messages.len() && !is_boundary(messages, i) {
        i += 1;
    }
    i
}

/// Whether a segment may start at message `i`: not on a tool result, and not on a user
/// message that directly follows tool results (one wire turn in Anthropic's shape).
pub fn is_boundary(messages: &[Message], i: usize) -> bool {
    match messages.get(i).map(|m| m.role) {
        None => true,
        Some(Role::Tool) => false,
        Some(Role::User) => i == 0 || messages[i - 1].role != Role::Tool,
        Some(_) => true,
    }
}

/// Start of the tail: the most recent messages whose tokens fit `budget` (at least
/// `min_messages`), moved so it does not begin with a tool result, and extended back to the last
/// user message when that stays within `ceiling` times the budget.
pub fn tail_start(
    messages: &[Message],
    tokens: &[usize],
    budget: usize,
    ceiling: f64,
    min_messages: usize,
    head_end: usize,
) -> usize {
    let n = messages.len();
    let hard = (budget as f64 * ceiling) as usize;
    let mut start = n;
    let mut used = 0usize;
    while start > head_end {
        let next = tokens[start - 1];
        if used + next > budget && n - start >= min_messages {
            break;
        }
        used += next;
        start -= 1;
    }
    let sum = |from: usize| tokens[from..].iter().sum::<usize>();
    if start < n && messages[start].role == Role::Tool {
        // Walk back to the calling assistant message if the ceiling allows, else forward past
        // the results.
        let mut back = start;
        while back > head_end && messages[back].role == Role::Tool {
            back -= 1;
        }
        if messages[back].role != Role::Tool && sum(back) <= hard.max(used) {
            start = back;
        } else {
            while start < n && messages[start].role == Role::Tool {
                start += 1;
            }
        }
    }
    if let Some(last_user) = messages.iter().rposition(|m| m.role == Role::User)
        && last_user >= head_end
        && last_user < start
        && sum(last_user) <= hard
    {
        start = last_user;
    }
    // A user message after tool results starts the tail with its results and the calls they
    // answer: rounding forward instead would compact the user's latest words away.
    while start > head_end && !is_boundary(messages, start) {
        start -= 1;
    }
    start.max(head_end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::Message;

    fn convo(roles: &str) -> Vec<Message> {
        roles
            .chars()
            .map(|c| match c {
                's' => Message::text(Role::System, "s"),
                'u' => Message::text(Role::User, "u"),
                'a' => Message::text(Role::Assistant, "a"),
                _ => Message::tool_result("c", None, "t", false),
            })
            .collect()
    }

    /// A client's own compaction summary (Claude Code's, Codex's) is kept verbatim like its
    /// instructions: summarising it again would lose what the client kept.
    #[test]
    fn the_clients_own_compaction_summaries_are_pinned() {
        for text in [
            "This session is being continued from a previous conversation that ran out of \
             context. The conversation is summarized below:\nAnalysis: ...",
            "Another language model started to solve this problem and produced a summary of \
             its thinking process. ...",
            "<environment_context>\n  <cwd>/w</cwd>\n</environment_context>",
        ] {
            assert!(is_pinned(&Message::text(Role::User, text)), "{text}");
        }
        assert!(!is_pinned(&Message::text(
            Role::User,
            "Please continue from a previous conversation"
        )));
        assert!(!is_pinned(&Message::text(
            Role::Assistant,
            "This session is being continued from a previous conversation"
        )));
    }

    #[test]
    fn head_covers_system_and_first_exchange_with_its_results() {
        assert_eq!(head_end(&convo("suattauat"), 1), 5);
        // A user message right after the results is part of their turn.
        assert_eq!(head_end(&convo("suattuat"), 1), 6);
        assert_eq!(head_end(&convo("suattauat"), 0), 1);
        assert_eq!(head_end(&convo("uaua"), 2), 4);
    }

    #[test]
    fn tail_never_starts_with_a_tool_result() {
        let m = convo("suatatatatatat");
        let tokens = vec![10; m.len()];
        let start = tail_start(&m, &tokens, 35, 1.5, 3, 3);
        assert_eq!(m[start].role, Role::Assistant);
        assert!(m.len() - start >= 3);
    }

    #[test]
    fn tail_reaches_back_to_the_last_user_message_within_the_ceiling() {
        let m = convo("suatatuatatat");
        let tokens = vec![10; m.len()];
        // The user message at 6 follows results: the tail takes them and their call too.
        assert_eq!(tail_start(&m, &tokens, 50, 1.5, 3, 3), 4);
        let m = convo("suatatauatatat");
        let tokens = vec![10; m.len()];
        assert_eq!(tail_start(&m, &tokens, 50, 1.5, 3, 3), 7);
        let m = convo("suatatuatatat");
        let tokens = vec![10; m.len()];
        assert_eq!(
            tail_start(&m, &tokens, 30, 1.5, 3, 3),
            9,
            "too far back: not extended"
        );
    }
}
