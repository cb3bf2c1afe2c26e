//! The provider-neutral conversation model.
//!
//! A [`Transcript`] is what an agent has sent (or would send) to a model: a list of
//! [`Message`]s made of [`Block`]s. It covers the OpenAI Chat Completions, OpenAI Responses and
//! Anthropic Messages APIs: tool calls and their results are first-class blocks, images and
//! thinking/reasoning blocks are carried opaquely so nothing the provider needs is lost.
//!
//! Tool results always live in messages of role [`Role::Tool`], one result per message, whatever
//! the provider's shape (Anthropic puts them in user turns; the formats crate splits and rejoins).

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// System or developer instructions.
    System,
    /// The human, or the harness speaking for them.
    User,
    /// The model.
    Assistant,
    /// The output of a tool call.
    Tool,
}

impl Role {
    /// The lowercase wire name (`"system"`, `"user"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// A tool invocation made by the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Provider call id (`call_...`, `toolu_...`), or a synthetic one for text-protocol agents.
    pub id: String,
    /// Tool name as the model called it.
    pub name: String,
    /// The arguments as the raw JSON text the model produced (kept as text: models sometimes
    /// produce invalid JSON, and re-serialising valid JSON would change bytes).
    pub arguments: String,
    /// True when the call is written inside the assistant's text (e.g. a fenced bash block of a
    /// text-protocol agent) rather than sent as a structured call. Implicit calls cost no extra
    /// tokens and are not rendered as structured calls.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub implicit: bool,
}

#[cfg(test)]
impl ToolCall {
    /// A non-implicit call with id `c` (for tests).
    pub(crate) fn for_test(name: &str, args: serde_json::Value) -> ToolCall {
        ToolCall {
            id: "c".into(),
            name: name.into(),
            arguments: args.to_string(),
            implicit: false,
        }
    }
}

impl ToolCall {
    /// The value of a string argument, if the arguments are a JSON object that has it.
    pub fn string_argument(&self, key: &str) -> Option<String> {
        let value: Value = serde_json::from_str(&self.arguments).ok()?;
        value.get(key)?.as_str().map(str::to_owned)
    }

    /// What the model wrote in its arguments, decoded: each string value of the JSON (nested
    /// ones too) on a line of its own, in double quotes when it is one line holding none (so it
    /// still reads as one string), each number on its own line, the keys left out. So
    /// `{"command": "grep \"Tools\" a.py"}` reads `grep "Tools" a.py`, and an escaped newline
    /// before `parse_args` starts a line with it, as the model meant. Arguments that are not
    /// JSON (a freeform tool's input) are their own text.
    pub fn argument_text(&self) -> Cow<'_, str> {
        fn values(value: &Value, out: &mut String) {
            match value {
                Value::String(s) if s.contains(['"', '\n']) => {
                    out.push_str(s);
                    out.push('\n');
                }
                Value::String(s) => {
                    out.push('"');
                    out.push_str(s);
                    out.push_str("\"\n");
                }
                Value::Array(items) => items.iter().for_each(|v| values(v, out)),
                Value::Object(map) => map.values().for_each(|v| values(v, out)),
                Value::Number(n) => {
                    out.push_str(&n.to_string());
                    out.push('\n');
                }
                Value::Bool(_) | Value::Null => {}
            }
        }
        match serde_json::from_str::<Value>(&self.arguments) {
            Ok(value) => {
                let mut out = String::with_capacity(self.arguments.len());
                values(&value, &mut out);
                Cow::Owned(out)
            }
            Err(_) => Cow::Borrowed(&self.arguments),
        }
    }
}

/// The output of a tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The id of the call this answers.
    pub call_id: String,
    /// Tool name, when known (OpenAI tool messages do not carry it; it is resolved from the call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    /// The result's parts: usually one text block; images and other blocks are kept.
    pub content: Vec<Block>,
    /// The tool reported failure (Anthropic `is_error`, a non-zero exit code).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
}

impl ToolResult {
    /// All text parts joined with newlines.
    pub fn text(&self) -> String {
        join_text(&self.content)
    }
}

/// One piece of a message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// A model-issued tool call.
    ToolCall(ToolCall),
    /// The output of a tool call.
    ToolResult(ToolResult),
    /// An image; `source` is the provider's own representation, kept as is.
    Image {
        /// The provider's image object (URL, base64 source, file id...).
        source: Value,
    },
    /// Thinking or reasoning, opaque (signatures and encrypted content must round-trip).
    Thinking {
        /// Visible reasoning text, when there is any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        /// The provider's whole block.
        raw: Value,
    },
}

impl Block {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Block {
        Block::Text { text: text.into() }
    }
}

/// Token usage that a provider reported for the request that produced a message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedUsage {
    /// Prompt (input) tokens, cached ones included.
    pub prompt_tokens: u64,
    /// Prompt tokens served from the provider's cache.
    #[serde(default)]
    pub cached_tokens: u64,
    /// Completion (output) tokens.
    #[serde(default)]
    pub completion_tokens: u64,
    /// Prompt tokens written to the provider's cache (Anthropic `cache_creation_input_tokens`;
    /// providers that do not bill writes report none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
    /// Of those, tokens written with the one-hour TTL.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_1h_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// Its blocks, in order.
    pub content: Vec<Block>,
    /// For assistant messages of recorded transcripts: the usage the provider reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<RecordedUsage>,
}

impl Message {
    /// A message of one text block.
    pub fn text(role: Role, text: impl Into<String>) -> Message {
        Message {
            role,
            content: vec![Block::text(text)],
            usage: None,
        }
    }

    /// A tool message holding one text result.
    pub fn tool_result(
        call_id: impl Into<String>,
        tool_name: Option<String>,
        text: impl Into<String>,
        is_error: bool,
    ) -> Message {
        Message {
            role: Role::Tool,
            content: vec![Block::ToolResult(ToolResult {
                call_id: call_id.into(),
                tool_name,
                content: vec![Block::text(text)],
                is_error,
            })],
            usage: None,
        }
    }

    /// The tool calls in this message.
    pub fn tool_calls(&self) -> impl Iterator<Item = &ToolCall> {
        self.content.iter().filter_map(|b| match b {
            Block::ToolCall(call) => Some(call),
            _ => None,
        })
    }

    /// The tool results in this message.
    pub fn tool_results(&self) -> impl Iterator<Item = &ToolResult> {
        self.content.iter().filter_map(|b| match b {
            Block::ToolResult(result) => Some(result),
            _ => None,
        })
    }

    /// The text blocks joined with newlines (tool results and calls excluded).
    pub fn text_content(&self) -> String {
        join_text(&self.content)
    }
}

/// Indices of the assistant messages: where each assistant turn starts.
pub fn assistant_turns(messages: &[Message]) -> Vec<usize> {
    messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.role == Role::Assistant)
        .map(|(i, _)| i)
        .collect()
}

fn join_text(blocks: &[Block]) -> String {
    let mut out = String::new();
    for block in blocks {
        if let Block::Text { text } = block {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(text);
        }
    }
    out
}

/// A whole conversation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Transcript {
    /// A stable name for the session (file stem, instance id...).
    pub id: String,
    /// The messages in order; system prompts are messages of role [`Role::System`].
    pub messages: Vec<Message>,
    /// Tool definitions the agent sent with each request (provider JSON, kept as is).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<Value>,
    /// For sessions read from a client's own log: when each request was sent and where the
    /// client compacted its own history.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recording: Option<Recording>,
    /// The model the agent's requests went to, as the log names it (`claude-opus-4-5-20251101`,
    /// `gpt-5-mini-2025-08-07`): it says which provider cache and prices served the session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// What a client's own session log says beyond the messages.
///
/// A client that compacts its own history (Claude Code's `compact_boundary`, Codex's `compacted`
/// records) sends, after the compaction, only its leading system messages and what it put in
/// place of the history. The transcript keeps the whole conversation and marks those
/// replacement messages, so a replay can follow either the requests the client really sent or
/// the underlying conversation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Recording {
    /// The client and its version (`claude-code 2.0.58`, `codex 0.169.0`).
    pub client: String,
    /// Milliseconds since the Unix epoch at which each message was sent, aligned with the
    /// transcript's messages; for an assistant message, when the request that produced it was
    /// sent.
    pub sent_ms: Vec<Option<i64>>,
    /// The client's own compactions, in order.
    pub compactions: Vec<ClientCompaction>,
    /// What the provider billed for the whole session, where the client records only a total
    /// (Hermes's `state.db`) instead of each request's usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub billed_total: Option<SessionBill>,
}

/// A session's billed usage summed over its requests, as a client that keeps only totals
/// records it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionBill {
    /// How many model requests the total covers, as the client counted them.
    pub requests: u64,
    /// The usage summed over those requests.
    pub usage: RecordedUsage,
}

/// One compaction the client made: `messages[at..at + len]` are what it put in place of the
/// history, and every later request starts with the leading system messages and `messages[at..]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientCompaction {
    /// Index of the first replacement message.
    pub at: usize,
    /// How many replacement messages there are.
    pub len: usize,
}

impl Recording {
    /// When message `index` was sent, if the log says.
    pub fn sent_at(&self, index: usize) -> Option<i64> {
        self.sent_ms.get(index).copied().flatten()
    }

    /// Whether message `index` is one the client wrote in place of compacted history.
    pub fn is_replacement(&self, index: usize) -> bool {
        self.compactions
            .iter()
            .any(|c| (c.at..c.at + c.len).contains(&index))
    }
}

impl Transcript {
    /// The name of the tool a call id refers to, looked up in earlier assistant messages.
    pub fn tool_name_for_call(&self, call_id: &str) -> Option<&str> {
        self.messages
            .iter()
            .flat_map(Message::tool_calls)
            .find(|call| call.id == call_id)
            .map(|call| call.name.as_str())
    }

    /// Number of tool results in the transcript.
    pub fn tool_result_count(&self) -> usize {
        self.messages.iter().flat_map(Message::tool_results).count()
    }

    /// Total characters of tool-result text.
    pub fn tool_output_chars(&self) -> usize {
        self.messages
            .iter()
            .flat_map(Message::tool_results)
            .map(|r| r.content.iter().map(block_text_chars).sum::<usize>())
            .sum()
    }
}

fn block_text_chars(block: &Block) -> usize {
    match block {
        Block::Text { text } => text.chars().count(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argument_text_decodes_what_the_model_wrote() {
        let call = |arguments: &str| ToolCall {
            id: "c".into(),
            name: "bash".into(),
            arguments: arguments.into(),
            implicit: false,
        };
        // Escaped quotes and newlines read as the model meant them; keys are left out; a value
        // of one line without quotes stays one quoted string.
        let grep = call(
            r#"{"command": ["bash", "-lc", "grep -n \"Tools\" a.py"], "old_string": "x = 1\nparse_args()", "timeout": 30}"#,
        );
        assert_eq!(
            grep.argument_text(),
            "\"bash\"\n\"-lc\"\ngrep -n \"Tools\" a.py\nx = 1\nparse_args()\n30\n"
        );
        // A freeform input is its own text.
        let patch = call("*** Begin Patch\n*** Update File: a.py");
        assert_eq!(patch.argument_text(), patch.arguments);
    }

    #[test]
    fn tool_name_resolves_from_the_call() {
        let t = Transcript {
            id: "s".into(),
            messages: vec![
                Message {
                    role: Role::Assistant,
                    content: vec![Block::ToolCall(ToolCall {
                        id: "c1".into(),
                        name: "bash".into(),
                        arguments: r#"{"command":"ls"}"#.into(),
                        implicit: false,
                    })],
                    usage: None,
                },
                Message::tool_result("c1", None, "a\nb", false),
            ],
            tools: vec![],
            recording: None,
            model: None,
        };
        assert_eq!(t.tool_name_for_call("c1"), Some("bash"));
        assert_eq!(t.tool_name_for_call("c2"), None);
        assert_eq!(t.tool_result_count(), 1);
        assert_eq!(t.tool_output_chars(), 3);
        let call = t.messages[0].tool_calls().next().unwrap();
        assert_eq!(call.string_argument("command").as_deref(), Some("ls"));
    }
}
