//! Claude Code session logs (`~/.claude/projects/<project>/<session>.jsonl`).
//!
//! One JSON object per line. Conversation lines (`user`, `assistant`, `system`) carry a `uuid`
//! and a `parentUuid`; the conversation is the chain that ends at the last of them (earlier
//! branches were abandoned by a rewind or an edit). A `compact_boundary` system line starts a
//! new chain after the client's own compaction (its `logicalParentUuid` links to the history
//! before it), and the `isCompactSummary` user line after it is the summary the client sent in
//! place of that history. One API call is split over several assistant lines that share a
//! `requestId`; they are merged into one message, with the usage the provider billed. Sub-agent
//! lines (`isSidechain`, and every line of an `agent-*.jsonl` file) form sessions of their own.
//! An `attachment` line that holds the text the client rendered from it (2.1.3xx: files an `@`
//! reference pulled in, memory files, listings) is a message of its rendered role. Bookkeeping
//! lines (`summary`, `file-history-snapshot`, `queue-operation`, attachments without rendered
//! text, `permission-mode`, hook summaries, `api-request`) carry nothing the model was sent and
//! are skipped.
//!
//! The log has neither the system prompt nor the tool definitions: a replay estimates that
//! fixed prefix from the recorded usage.

use std::collections::HashMap;

use ctxgc_core::{Block, ClientCompaction, Message, RecordedUsage, Recording, Role, Transcript};
use serde_json::Value;

use super::time::rfc3339_ms;
use crate::FormatError;
use crate::anthropic::block_to_core;

/// Whether a parsed JSONL line looks like a Claude Code log line.
pub(crate) fn is_claude_code_line(line: &Value) -> bool {
    let Some(kind) = line.get("type").and_then(Value::as_str) else {
        return false;
    };
    line.get("payload").is_none()
        && match kind {
            "summary" => line.get("leafUuid").is_some(),
            "file-history-snapshot" => line.get("snapshot").is_some(),
            "queue-operation" => line.get("operation").is_some(),
            // user, assistant, system, attachment, progress, permission-mode, ...
            _ => line.get("sessionId").is_some(),
        }
}

/// One conversation line, as far as the import needs it.
struct Entry<'a> {
    line: &'a Value,
    uuid: &'a str,
    parent: Option<&'a str>,
    kind: &'a str,
    sidechain: bool,
    at_ms: Option<i64>,
}

impl<'a> Entry<'a> {
    /// Any line with a `uuid`: newer versions put `attachment` and `progress` lines in the
    /// chain too, and the chain must pass through them.
    fn parse(line: &'a Value) -> Option<Entry<'a>> {
        let kind = line.get("type")?.as_str()?;
        let str_of = |key: &str| line.get(key).and_then(Value::as_str);
        Some(Entry {
            line,
            uuid: str_of("uuid")?,
            parent: str_of("parentUuid").or_else(|| str_of("logicalParentUuid")),
            kind,
            sidechain: line.get("isSidechain").and_then(Value::as_bool) == Some(true),
            at_ms: str_of("timestamp").and_then(rfc3339_ms),
        })
    }

    fn is_message(&self) -> bool {
        matches!(self.kind, "user" | "assistant") && self.line.get("message").is_some()
    }
}

/// Imports every session of one log: the main conversation first (when there is one), then
/// each sub-agent conversation, named `{id}.agent-{n}`.
pub(crate) fn import(lines: &[Value], id: &str) -> Result<Vec<Transcript>, FormatError> {
    let entries: Vec<Entry> = lines.iter().filter_map(Entry::parse).collect();
    let by_uuid: HashMap<&str, usize> = entries
        .iter()
        .enumerate()
        .map(|(i, e)| (e.uuid, i))
        .collect();
    let version = lines
        .iter()
        .find_map(|l| l.get("version").and_then(Value::as_str))
        .unwrap_or("unknown");
    let client = format!("claude-code {version}");
    let mut sessions = Vec::new();
    // The main conversation ends at its last message line.
    if let Some(leaf) = entries.iter().rposition(|e| !e.sidechain && e.is_message()) {
        let chain = chain_to(&entries, &by_uuid, leaf);
        sessions.push(build(&entries, &chain, id.to_owned(), &client)?);
    }
    // Each sub-agent conversation ends at a sidechain line that no other sidechain line follows.
    let mut has_child = vec![false; entries.len()];
    for e in entries.iter().filter(|e| e.sidechain) {
        if let Some(&p) = e.parent.and_then(|p| by_uuid.get(p)) {
            has_child[p] = true;
        }
    }
    let leaves = (0..entries.len())
        .filter(|&i| entries[i].sidechain && entries[i].is_message() && !has_child[i]);
    for (n, leaf) in leaves.enumerate() {
        let chain = chain_to(&entries, &by_uuid, leaf);
        let name = if sessions.is_empty() && n == 0 {
            id.to_owned()
        } else {
            format!("{id}.agent-{}", n + 1)
        };
        sessions.push(build(&entries, &chain, name, &client)?);
    }
    if sessions.is_empty() {
        return Err(FormatError::shape(
            "file",
            "a Claude Code log with no conversation lines (only bookkeeping)",
        ));
    }
    Ok(sessions)
}

/// The entries from the root to `leaf`, in order (a parent that is not in the file ends it),
/// with the results of parallel tool calls that hang off the chain rather than on it.
fn chain_to(entries: &[Entry], by_uuid: &HashMap<&str, usize>, leaf: usize) -> Vec<usize> {
    let mut chain = vec![leaf];
    let mut at = leaf;
    while let Some(&parent) = entries[at].parent.and_then(|p| by_uuid.get(p)) {
        if chain.len() > entries.len() {
            break; // a cycle: never in a real log, but never loop on one either
        }
        chain.push(parent);
        at = parent;
    }
    chain.reverse();
    with_parallel_results(entries, chain)
}

/// Claude Code writes each tool call of one response as its own assistant line, each line the
/// parent of the next, and each call's result as a user line whose parent is that call's line:
/// the chain runs through the last call's result, and the other results hang off it. They
/// were sent (the API refuses a call without its result), so each goes in after the
/// response's last line, in the order they were written. A side line that is not the result of
/// a call on the chain (a prompt the user rewound and edited) stays out.
fn with_parallel_results(entries: &[Entry], chain: Vec<usize>) -> Vec<usize> {
    let on_chain: std::collections::HashSet<usize> = chain.iter().copied().collect();
    let uuids: HashMap<&str, usize> = chain.iter().map(|&i| (entries[i].uuid, i)).collect();
    let answered: std::collections::HashSet<&str> = chain
        .iter()
        .flat_map(|&i| result_ids(&entries[i]))
        .collect();
    let mut hanging: HashMap<usize, Vec<usize>> = HashMap::new();
    for (i, e) in entries.iter().enumerate() {
        let Some(&parent) = e.parent.and_then(|p| uuids.get(p)) else {
            continue;
        };
        let ids = result_ids(e);
        let calls = call_ids(&entries[parent]);
        if on_chain.contains(&i)
            || e.kind != "user"
            || ids.is_empty()
            || !ids
                .iter()
                .all(|id| calls.contains(id) && !answered.contains(id))
        {
            continue;
        }
        hanging.entry(parent).or_default().push(i);
    }
    if hanging.is_empty() {
        return chain;
    }
    let mut out = Vec::with_capacity(chain.len() + hanging.len());
    let mut pending: Vec<usize> = Vec::new();
    for &i in &chain {
        // The response's lines end where a line that is not the assistant's begins.
        if entries[i].kind != "assistant" && !pending.is_empty() {
            pending.sort_unstable();
            out.append(&mut pending);
        }
        out.push(i);
        if let Some(results) = hanging.get(&i) {
            pending.extend(results);
        }
    }
    pending.sort_unstable();
    out.append(&mut pending);
    out
}

/// The tool call ids a line's message answers.
fn result_ids<'a>(e: &Entry<'a>) -> Vec<&'a str> {
    ids_of(e, "tool_result", "tool_use_id")
}

/// The tool call ids a line's message makes.
fn call_ids<'a>(e: &Entry<'a>) -> Vec<&'a str> {
    ids_of(e, "tool_use", "id")
}

fn ids_of<'a>(e: &Entry<'a>, kind: &str, key: &str) -> Vec<&'a str> {
    e.line
        .get("message")
        .and_then(|m| m.get("content"))
        .and_then(Value::as_array)
        .map(|blocks| {
            blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some(kind))
                .filter_map(|b| b.get(key).and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default()
}

fn build(
    entries: &[Entry],
    chain: &[usize],
    id: String,
    client: &str,
) -> Result<Transcript, FormatError> {
    let mut t = Transcript {
        id,
        ..Transcript::default()
    };
    let mut recording = Recording {
        client: client.to_owned(),
        ..Recording::default()
    };
    let mut push = |t: &mut Transcript, message: Message, at: Option<i64>| {
        t.messages.push(message);
        recording.sent_ms.push(at);
    };
    let mut last_request: Option<&str> = None;
    let mut previous_at: Option<i64> = None;
    let mut models = super::ModelTally::default();
    for &i in chain {
        let e = &entries[i];
        let at = format!("line with uuid {}", e.uuid);
        if let Some(message) = rendered_attachment(e) {
            // Sent with the next request, as the log rendered it.
            last_request = None;
            push(&mut t, message, e.at_ms);
            continue;
        }
        if !e.is_message() {
            continue;
        }
        let message = &e.line["message"];
        // The client's record of a call the provider refused ("Prompt is too long", an
        // overloaded API): nothing the model said, never sent back in a later request, and
        // nothing billed. The next request is the one the session went on with.
        if e.kind == "assistant"
            && e.line.get("isApiErrorMessage").and_then(Value::as_bool) == Some(true)
        {
            continue;
        }
        match e.kind {
            "assistant" => {
                let request = e
                    .line
                    .get("requestId")
                    .or_else(|| message.get("id"))
                    .and_then(Value::as_str);
                let blocks = content_blocks(message, &at)?;
                let usage = usage(message.get("usage"));
                let continues = request.is_some()
                    && request == last_request
                    && t.messages.last().is_some_and(|m| m.role == Role::Assistant);
                if continues {
                    if let Some(last) = t.messages.last_mut() {
                        last.content.extend(blocks);
                        // Later lines of a call carry the final output count.
                        if usage.is_some() {
                            last.usage = usage;
                        }
                    }
                } else {
                    // `<synthetic>` names the client's own canned replies (an interrupted or
                    // failed call), no model the provider ran.
                    models.note(message.get("model").filter(|m| *m != "<synthetic>"));
                    // The request was sent when its last input was written.
                    let sent = previous_at.or(e.at_ms);
                    push(
                        &mut t,
                        Message {
                            role: Role::Assistant,
                            content: blocks,
                            usage,
                        },
                        sent,
                    );
                }
                last_request = request;
            }
            _ => {
                last_request = None;
                let summary = e.line.get("isCompactSummary").and_then(Value::as_bool) == Some(true);
                let first = t.messages.len();
                for m in user_messages(message, &at)? {
                    push(&mut t, m, e.at_ms);
                }
                if summary && t.messages.len() > first {
                    recording.compactions.push(ClientCompaction {
                        at: first,
                        len: t.messages.len() - first,
                    });
                }
            }
        }
        // Lines of parallel work can be a few milliseconds out of order.
        previous_at = previous_at.max(e.at_ms);
    }
    t.recording = Some(recording);
    t.model = models.most_used();
    crate::resolve_tool_names(&mut t);
    Ok(t)
}

/// An `attachment` line as the client sent it, where the log says (`rendered`, with its
/// `renderedRole`; Claude Code 2.1.3xx): the files an `@` reference or a slash command pulled
/// in, the memory files, the environment and skill listings, each a `<system-reminder>`.
/// Earlier versions log no `rendered` text, and a replay sizes what they attached from the
/// usage they were billed.
fn rendered_attachment(e: &Entry) -> Option<Message> {
    if e.kind != "attachment" {
        return None;
    }
    let role = match e.line.get("renderedRole").and_then(Value::as_str)? {
        "user" => Role::User,
        "system" => Role::System,
        _ => return None,
    };
    let content: Vec<Block> = e
        .line
        .get("rendered")?
        .as_array()?
        .iter()
        .filter_map(|part| match part.get("content")? {
            Value::String(text) => Some(Block::text(text.as_str())),
            _ => None,
        })
        .collect();
    (!content.is_empty()).then_some(Message {
        role,
        content,
        usage: None,
    })
}

/// The blocks of a line's message (a string content is one text block).
fn content_blocks(message: &Value, at: &str) -> Result<Vec<Block>, FormatError> {
    match message.get("content") {
        Some(Value::String(s)) => Ok(vec![Block::text(s.as_str())]),
        Some(Value::Array(blocks)) => Ok(blocks.iter().map(block_to_core).collect()),
        _ => Err(FormatError::shape(
            at,
            "a message needs `content` (a string or an array of blocks)",
        )),
    }
}

/// A user line: its tool results (one tool message each), then the rest as one user message.
fn user_messages(message: &Value, at: &str) -> Result<Vec<Message>, FormatError> {
    let blocks = content_blocks(message, at)?;
    let mut out = Vec::new();
    let mut rest = Vec::new();
    for block in blocks {
        match block {
            Block::ToolResult(result) => out.push(Message {
                role: Role::Tool,
                content: vec![Block::ToolResult(result)],
                usage: None,
            }),
            other => rest.push(other),
        }
    }
    if !rest.is_empty() {
        out.push(Message {
            role: Role::User,
            content: rest,
            usage: None,
        });
    }
    Ok(out)
}

/// Anthropic usage: `input_tokens` are the uncached ones; cache reads and writes come on top.
fn usage(value: Option<&Value>) -> Option<RecordedUsage> {
    let value = value?;
    let n = |key: &str| value.get(key).and_then(Value::as_u64).unwrap_or(0);
    let input = value.get("input_tokens")?.as_u64()?;
    let read = n("cache_read_input_tokens");
    let written = n("cache_creation_input_tokens");
    let written_1h = value
        .get("cache_creation")
        .and_then(|c| c.get("ephemeral_1h_input_tokens"))
        .and_then(Value::as_u64)
        .unwrap_or(0);
    Some(RecordedUsage {
        prompt_tokens: input + read + written,
        cached_tokens: read,
        completion_tokens: n("output_tokens"),
        cache_write_tokens: written,
        cache_write_1h_tokens: written_1h,
    })
}
