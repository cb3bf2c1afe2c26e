//! Walking a recorded transcript through a [`Session`] as a live agent would.
//!
//! Messages enter in order; the tool results of one assistant turn enter together (they share
//! the turn budget); before each assistant message the agent sends a request, so that is where
//! due events run and where `on_request` sees the prompt.

use crate::engine::session::{EngineError, EventRecord, Session};
use crate::engine::summarizer::Summarizer;
use crate::store::OriginalStore;
use crate::transcript::{Message, Role, Transcript};

/// One request the agent sent.
pub struct RequestView<'a> {
    /// Index in the source transcript of the assistant message this request produced.
    pub source_index: usize,
    /// The session, as it is when the request is sent.
    pub session: &'a Session,
    /// The event that ran just before this request, if any.
    pub event: Option<&'a EventRecord>,
}

/// Drives `source` through `session`. Calls `on_request` once per assistant message.
pub fn drive(
    source: &Transcript,
    session: &mut Session,
    store: &dyn OriginalStore,
    mut summarizer: Option<&mut (dyn Summarizer + '_)>,
    mut on_request: impl FnMut(RequestView<'_>),
) -> Result<(), EngineError> {
    let mut pending: Vec<Message> = Vec::new();
    for (index, message) in source.messages.iter().enumerate() {
        if message.role == Role::Tool {
            pending.push(message.clone());
            continue;
        }
        if !pending.is_empty() {
            session.insert_tool_results(store, std::mem::take(&mut pending))?;
        }
        if message.role == Role::Assistant {
            let event = session.run_due_event(summarizer.as_deref_mut())?;
            on_request(RequestView {
                source_index: index,
                session,
                event: event.as_ref(),
            });
        }
        session.push(message.clone());
    }
    if !pending.is_empty() {
        session.insert_tool_results(store, pending)?;
    }
    Ok(())
}

/// A compact, readable rendering of a prompt: one line per message (summaries in full).
pub fn outline(messages: &[Message]) -> String {
    let mut out = String::new();
    for (i, m) in messages.iter().enumerate() {
        let text = match m.tool_results().next() {
            Some(r) => format!(
                "({}) {}",
                r.tool_name.as_deref().unwrap_or("tool"),
                r.text()
            ),
            None => {
                let mut t = m.text_content();
                for call in m.tool_calls().filter(|c| !c.implicit) {
                    t.push_str(&format!(" <call {} {}>", call.name, call.arguments));
                }
                t
            }
        };
        if text.starts_with(crate::engine::summary::SUMMARY_HEADER) {
            out.push_str(&format!("#{i} {}:\n{text}\n", m.role.as_str()));
            continue;
        }
        let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
        let clipped: String = one_line.chars().take(150).collect();
        let more = if one_line.chars().count() > 150 {
            "…"
        } else {
            ""
        };
        out.push_str(&format!("#{i} {}: {clipped}{more}\n", m.role.as_str()));
    }
    out
}
