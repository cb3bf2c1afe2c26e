//! What a compaction keeps and what its summary lists.

use super::*;

/// Defects guarded: compaction dropped Claude Code's mid-history environment (`role: system`)
/// message, and the summary's goal was taken from the attribution reminder.
#[test]
fn compaction_keeps_pinned_messages_and_takes_the_goal_from_the_request() {
    let config = small_config();
    let session = compacted_at_8k(&claude_code_like(40), &config);
    let prompt = session.prompt();
    let env = prompt
        .iter()
        .filter(|m| m.text_content().starts_with("# Environment"))
        .count();
    assert_eq!(env, 1, "the environment stays, once");
    let summary = prompt
        .iter()
        .map(Message::text_content)
        .find(|t| t.starts_with(SUMMARY_HEADER))
        .unwrap();
    let goal = summary
        .split("## Goal\n")
        .nth(1)
        .and_then(|s| s.lines().next())
        .unwrap();
    assert!(goal.contains("Fix the failing deploy script"), "{goal}");
    assert!(!summary.contains("Co-Authored-By"), "{summary}");
}

/// Defects guarded: without recorded facts (a history the engine did not see inserted, as a
/// proxy receives it) the summary listed no tool outputs and no discoveries, and a failure whose
/// code was unknown was written as "exit 1".
#[test]
fn summaries_list_every_hidden_output_and_real_exit_codes_without_recorded_facts() {
    let source = claude_code_like(6);
    let counter = TokenCounter::openai();
    let metas = BTreeMap::new();
    let input = summary::SummaryInput {
        messages: &source.messages,
        from: 3,
        to: source.messages.len() - 2,
        metas: &metas,
        budget: 2_000,
        recall_hint: crate::engine::policy::RECALL_TOOL_HINT,
    };
    let body = summary::extractive_body(&input, &counter);
    let text = summary::compose(&input, &body, &counter);
    let outputs = text
        .split("## Tool outputs (recall by id)\n")
        .nth(1)
        .unwrap();
    assert_eq!(
        outputs
            .lines()
            .filter(|l| l.starts_with("- [Bash]"))
            .count(),
        5,
        "{outputs}"
    );
    assert!(outputs.contains("exit 3"), "{outputs}");
    assert!(
        text.contains("FATAL: disk quota exceeded on /var/lib/app"),
        "{text}"
    );
    assert!(text.contains("exit 3"), "{text}");
    assert!(!text.contains("exit 1"), "{text}");
}
