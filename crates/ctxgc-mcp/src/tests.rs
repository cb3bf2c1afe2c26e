use super::*;
use ctxgc_core::ContentId;
use ctxgc_core::store::{MemoryStore, SessionId};
use serde_json::json;

fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
}

#[test]
fn a_recall_answers_within_the_callers_scope_only() {
    let store = Arc::new(MemoryStore::default());
    let original: String = (1..=50).map(|i| format!("line {i}\n")).collect();
    let id = ContentId::of(original.as_bytes());
    store
        .put(&SessionId::new("aaaa.c-1"), id, &original)
        .unwrap_or_else(|e| panic!("{e}"));
    let ours = RecallServer::new(store.clone(), "aaaa.".into(), 100_000);
    let answer = ours.answer(
        RECALL_TOOL,
        &json!({"id": id.to_string(), "pattern": "line 42$"}),
    );
    assert_eq!(answer.is_error, Some(false));
    assert!(
        text_of(&answer).contains("42| line 42"),
        "{}",
        text_of(&answer)
    );
    let theirs = RecallServer::new(store, "bbbb.".into(), 100_000);
    let answer = theirs.answer(RECALL_TOOL, &json!({"id": id.to_string()}));
    assert_eq!(answer.is_error, Some(true));
    assert!(text_of(&answer).contains("no original with id"));
}

#[test]
fn a_bad_call_says_what_is_wrong() {
    let server = RecallServer::new(Arc::new(MemoryStore::default()), String::new(), 1000);
    let answer = server.answer(RECALL_TOOL, &json!({"id": "nope"}));
    assert!(text_of(&answer).contains("`nope` is not an id"));
    let answer = server.answer("trim_tool_result", &json!({}));
    assert!(text_of(&answer).contains("no tool `trim_tool_result`"));
}
