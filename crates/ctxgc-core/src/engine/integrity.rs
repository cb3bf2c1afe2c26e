//! Checks that a prompt is acceptable to both providers after an event.
//!
//! - every tool result answers a call made earlier, and every structured call is answered
//!   (the last assistant message may still be waiting for its results);
//! - Anthropic shape: after the system prompt the first turn is a user turn; consecutive
//!   user-role messages (user text and tool results) render as one turn in which tool results
//!   come first, so a tool result may not follow user text within a run of user-role messages.

use std::collections::BTreeSet;

use crate::transcript::{Block, Message, Role};

/// What is wrong with a prompt.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IntegrityError {
    /// A tool result with no earlier call.
    #[error("message {index}: tool result for call '{call_id}' has no earlier tool call")]
    OrphanResult {
        /// Message index.
        index: usize,
        /// The call id.
        call_id: String,
    },
    /// A structured call never answered.
    #[error("message {index}: tool call '{call_id}' has no result")]
    UnansweredCall {
        /// Message index.
        index: usize,
        /// The call id.
        call_id: String,
    },
    /// A tool result after user text in one Anthropic user turn.
    #[error(
        "message {index}: tool result after user text in the same user turn (Anthropic requires tool results first)"
    )]
    ResultAfterText {
        /// Message index.
        index: usize,
    },
    /// The conversation does not open with a user turn.
    #[error("message {index}: the first turn after the system prompt must be a user turn")]
    FirstTurnNotUser {
        /// Message index.
        index: usize,
    },
}

fn user_role(role: Role) -> bool {
    matches!(role, Role::User | Role::Tool)
}

/// Checks a prompt; `Ok` when both providers would accept its structure.
pub fn check(messages: &[Message]) -> Result<(), IntegrityError> {
    let mut open: BTreeSet<(usize, String)> = BTreeSet::new();
    let mut called: BTreeSet<String> = BTreeSet::new();
    let last_assistant = messages.iter().rposition(|m| m.role == Role::Assistant);
    for (index, m) in messages.iter().enumerate() {
        for block in &m.content {
            match block {
                Block::ToolCall(call) => {
                    called.insert(call.id.clone());
                    if !call.implicit {
                        open.insert((index, call.id.clone()));
                    }
                }
                Block::ToolResult(result) => {
                    if !called.contains(&result.call_id) {
                        return Err(IntegrityError::OrphanResult {
                            index,
                            call_id: result.call_id.clone(),
                        });
                    }
                    open.retain(|(_, id)| *id != result.call_id);
                }
                _ => {}
            }
        }
    }
    if let Some((index, call_id)) = open.into_iter().find(|(i, _)| Some(*i) != last_assistant) {
        return Err(IntegrityError::UnansweredCall { index, call_id });
    }
    if let Some(first) = messages.iter().position(|m| m.role != Role::System)
        && !user_role(messages[first].role)
    {
        return Err(IntegrityError::FirstTurnNotUser { index: first });
    }
    let mut seen_text_in_turn = false;
    for (index, m) in messages.iter().enumerate() {
        match m.role {
            Role::Tool if seen_text_in_turn => {
                return Err(IntegrityError::ResultAfterText { index });
            }
            Role::User => seen_text_in_turn = true,
            Role::Tool => {}
            _ => seen_text_in_turn = false,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::ToolCall;

    fn call(id: &str) -> Message {
        Message {
            role: Role::Assistant,
            content: vec![Block::ToolCall(ToolCall {
                id: id.into(),
                name: "bash".into(),
                arguments: "{}".into(),
                implicit: false,
            })],
            usage: None,
        }
    }

    #[test]
    fn detects_orphans_and_order_problems() {
        let user = Message::text(Role::User, "u");
        let result = |id: &str| Message::tool_result(id, None, "r", false);
        assert_eq!(check(&[user.clone(), call("a"), result("a")]), Ok(()));
        assert_eq!(
            check(&[user.clone(), call("a")]),
            Ok(()),
            "pending call at the end"
        );
        assert!(matches!(
            check(&[user.clone(), result("x")]),
            Err(IntegrityError::OrphanResult { .. })
        ));
        assert!(matches!(
            check(&[
                user.clone(),
                call("a"),
                user.clone(),
                call("b"),
                result("b")
            ]),
            Err(IntegrityError::UnansweredCall { .. })
        ));
        assert!(matches!(
            check(&[user.clone(), call("a"), user.clone(), result("a")]),
            Err(IntegrityError::ResultAfterText { .. })
        ));
        assert!(matches!(
            check(&[call("a"), result("a")]),
            Err(IntegrityError::FirstTurnNotUser { .. })
        ));
    }
}
