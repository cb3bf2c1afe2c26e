//! The tools ctxgc offers the model: `trim_tool_result` and `recall_tool_result`.
//!
//! Their schemas are paid for on every request, so they are kept short (measured in the tests:
//! under 150 o200k tokens together).

use serde_json::{Value, json};

use crate::ContentId;
use crate::recall::{self, RecallQuery};

/// Name of the tool that replaces the latest tool result with the model's summary.
pub const TRIM_TOOL: &str = "trim_tool_result";
/// Name of the tool that returns an original.
pub const RECALL_TOOL: &str = "recall_tool_result";

fn specs() -> [(&'static str, &'static str, Value); 2] {
    [
        (
            TRIM_TOOL,
            "Replace the latest tool result with your summary of what matters in it; the original stays recallable.",
            json!({"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]}),
        ),
        (
            RECALL_TOOL,
            "Get the original of a trimmed or summarised tool output by its id (r-...), optionally only lines (\"40-80\") or lines matching a regex.",
            json!({"type": "object", "properties": {
                "id": {"type": "string"},
                "lines": {"type": "string"},
                "pattern": {"type": "string"}
            }, "required": ["id"]}),
        ),
    ]
}

/// How the agent behind a request can get an original back, which trim markers then name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecallWay {
    /// A tool of this name: ctxgc's MCP server as the client names it
    /// (`mcp__ctxgc__recall_tool_result`), or the proxy's injected tool.
    Tool(String),
    /// `ctxgc recall ID` in the agent's shell, its only tool.
    Shell,
}

impl RecallWay {
    /// What a trim marker or an abstract adds after the id it shows.
    pub fn suffix(&self, id: ContentId) -> String {
        match self {
            RecallWay::Tool(name) => format!(", recall with {name}"),
            RecallWay::Shell => format!(", recall with `ctxgc recall {id}`"),
        }
    }

    /// How a summary says outputs are recalled ([`crate::engine::Policy::recall_hint`]).
    pub fn hint(&self) -> String {
        match self {
            RecallWay::Tool(name) => format!("{name} and their id"),
            RecallWay::Shell => "`ctxgc recall ID` in the shell".into(),
        }
    }
}

/// Shell tools as the common agents name them.
const SHELL_TOOLS: [&str; 9] = [
    "Bash",
    "bash",
    "shell",
    "shell_command",
    "exec_command",
    "local_shell",
    "terminal",
    "run_shell_command",
    "run_command",
];

/// The way back a request's agent has, from the names of the tools it declares and whether the
/// proxy adds its own (`injected`): a declared tool whose name ends in `recall_tool_result`
/// (ctxgc's MCP server), else the injected tool, else the shell when every declared tool is a
/// shell, else none.
pub fn recall_way(declared: &[&str], injected: bool) -> Option<RecallWay> {
    if let Some(mcp) = declared.iter().find(|name| name.ends_with(RECALL_TOOL)) {
        return Some(RecallWay::Tool((*mcp).to_owned()));
    }
    if injected {
        return Some(RecallWay::Tool(RECALL_TOOL.to_owned()));
    }
    (!declared.is_empty() && declared.iter().all(|name| SHELL_TOOLS.contains(name)))
        .then_some(RecallWay::Shell)
}

/// The name of ctxgc's MCP recall tool when a client lists it in text, as Claude Code lists the
/// MCP tools it defers (loaded by its ToolSearch tool, absent from `tools` until then): the
/// first `mcp__…recall_tool_result` word in `text`.
pub fn listed_recall_tool(text: &str) -> Option<&str> {
    text.match_indices("mcp__").find_map(|(start, _)| {
        let word = &text[start..];
        let len = word
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
            .unwrap_or(word.len());
        word[..len].ends_with(RECALL_TOOL).then(|| &word[..len])
    })
}

/// The names of the tools a request body declares, in any of the four APIs' shapes (Chat's
/// `function.name`, Responses' and Messages' `name`, Gemini's `functionDeclarations`).
pub fn declared_tool_names(body: &Value) -> Vec<&str> {
    let mut names = Vec::new();
    for tool in body
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        // A Responses namespace (Codex's MCP servers): its tools, named within it.
        if tool.get("type").and_then(Value::as_str) == Some("namespace") {
            let inner = tool
                .get("tools")
                .and_then(Value::as_array)
                .into_iter()
                .flatten();
            names.extend(inner.filter_map(|t| t.get("name").and_then(Value::as_str)));
            continue;
        }
        if let Some(name) = tool.pointer("/function/name").or_else(|| tool.get("name")) {
            names.extend(name.as_str());
        }
        for declaration in tool
            .get("functionDeclarations")
            .or_else(|| tool.get("function_declarations"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            names.extend(declaration.get("name").and_then(Value::as_str));
        }
    }
    names
}

/// `recall_tool_result`'s description and its JSON Schema, for servers that declare the tool
/// themselves (the MCP server).
pub fn recall_spec() -> (&'static str, Value) {
    let [_, (_, description, schema)] = specs();
    (description, schema)
}

/// The answer to a `recall_tool_result` call whose id alone names the original, as the MCP
/// server and `ctxgc recall` without a session give it: found in any session whose id starts
/// with `scope` (the caller's tenant), then answered as the proxy answers it. `Err` is the text
/// the model gets instead (a wrong argument, an unknown id), so it can correct the call.
pub fn recall_by_id(
    store: &dyn crate::store::OriginalStore,
    scope: &str,
    arguments: &Value,
    max_bytes: usize,
) -> Result<String, String> {
    let (id, query) = match parse_call(RECALL_TOOL, arguments) {
        Some(Ok(AgentCall::Recall { id, query })) => (id, query),
        Some(Err(message)) => return Err(message),
        // The recall tool's name reads as a recall, never as another call.
        Some(Ok(AgentCall::Trim { .. })) | None => {
            return Err("error: `id` (r-...) is required".into());
        }
    };
    let original = match store.find(scope, id) {
        Ok(Some((_, original))) => original,
        Ok(None) => {
            return Err(format!(
                "error: no original with id {id} in this store (past its retention, or another caller's)"
            ));
        }
        Err(e) => return Err(format!("error: the store cannot be read: {e}")),
    };
    recall::recall(&original, &query, max_bytes).map_err(|e| format!("error: {e}"))
}

/// Definitions for OpenAI Chat Completions (`tools`).
pub fn chat_completions() -> Vec<Value> {
    specs()
        .into_iter()
        .map(|(name, description, parameters)| {
            json!({"type": "function", "function": {"name": name, "description": description, "parameters": parameters}})
        })
        .collect()
}

/// Definitions for OpenAI Responses (`tools`).
pub fn responses() -> Vec<Value> {
    specs()
        .into_iter()
        .map(|(name, description, parameters)| {
            json!({"type": "function", "name": name, "description": description, "parameters": parameters})
        })
        .collect()
}

/// Definitions for Anthropic Messages (`tools`).
pub fn anthropic() -> Vec<Value> {
    specs()
        .into_iter()
        .map(|(name, description, input_schema)| json!({"name": name, "description": description, "input_schema": input_schema}))
        .collect()
}

/// Definitions for Gemini (`tools`: one tool holding both `functionDeclarations`).
pub fn gemini() -> Vec<Value> {
    let declarations: Vec<Value> = specs()
        .into_iter()
        .map(|(name, description, parameters)| json!({"name": name, "description": description, "parameters": parameters}))
        .collect();
    vec![json!({"functionDeclarations": declarations})]
}

/// A call of one of ctxgc's tools, its arguments checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentCall {
    /// `trim_tool_result`: show `summary` instead of the latest tool result.
    Trim {
        /// The model's summary, trimmed of surrounding whitespace.
        summary: String,
    },
    /// `recall_tool_result`: the original of `id`, whole or in part.
    Recall {
        /// Which original.
        id: ContentId,
        /// Which part of it.
        query: RecallQuery,
    },
}

/// Reads a call of tool `name` with JSON `arguments`: `None` when the tool is not one of
/// ctxgc's, `Some(Err(text))` with the answer the model gets when an argument is wrong (so it
/// can correct the call), else the call. The proxy and the Python package both read calls here.
pub fn parse_call(name: &str, arguments: &Value) -> Option<Result<AgentCall, String>> {
    let arg = |key: &str| arguments.get(key).and_then(Value::as_str);
    Some(match name {
        TRIM_TOOL => match arg("summary").map(str::trim).filter(|s| !s.is_empty()) {
            Some(summary) => Ok(AgentCall::Trim {
                summary: summary.to_owned(),
            }),
            None => Err("error: `summary` is required and must not be empty".into()),
        },
        RECALL_TOOL => parse_recall(arg("id"), arg("lines"), arg("pattern")),
        _ => return None,
    })
}

fn parse_recall(
    id: Option<&str>,
    lines: Option<&str>,
    pattern: Option<&str>,
) -> Result<AgentCall, String> {
    let raw_id = id.ok_or("error: `id` (r-...) is required")?;
    let id = ContentId::parse(raw_id.trim()).ok_or_else(|| {
        format!(
            "error: `{raw_id}` is not an id; ids look like r-0123456789abcdef and appear in trim markers, summaries and abstracts"
        )
    })?;
    let lines = match lines {
        Some(l) => Some(
            recall::parse_lines(l)
                .ok_or_else(|| format!("error: `lines` must look like \"40-80\", not `{l}`"))?,
        ),
        None => None,
    };
    Ok(AgentCall::Recall {
        id,
        query: RecallQuery {
            lines,
            pattern: pattern.map(str::to_owned),
            context: 2,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::Encoding;

    #[test]
    fn a_deferred_mcp_tool_is_found_where_it_is_listed() {
        let text = "deferred tools:\\nWebFetch\\nmcp__ctxgc__recall_tool_result\\n";
        assert_eq!(
            listed_recall_tool(text),
            Some("mcp__ctxgc__recall_tool_result")
        );
        assert_eq!(listed_recall_tool("call recall_tool_result"), None);
        assert_eq!(listed_recall_tool("nothing"), None);
    }

    #[test]
    fn the_recall_way_is_the_tool_the_agent_has() {
        let way = |names: &[&str], injected| recall_way(names, injected);
        let mcp = ["Bash", "Read", "mcp__ctxgc__recall_tool_result"];
        assert_eq!(
            way(&mcp, true),
            Some(RecallWay::Tool("mcp__ctxgc__recall_tool_result".into()))
        );
        assert_eq!(
            way(&["Bash", "Read"], true),
            Some(RecallWay::Tool(RECALL_TOOL.into()))
        );
        assert_eq!(way(&["bash"], false), Some(RecallWay::Shell));
        assert_eq!(way(&["Bash", "Read"], false), None);
        assert_eq!(way(&[], false), None);
        let gemini = json!({"tools": [{"functionDeclarations": [{"name": "run_shell_command"}]}]});
        assert_eq!(declared_tool_names(&gemini), ["run_shell_command"]);
        let chat = json!({"tools": [{"type": "function", "function": {"name": "bash"}}]});
        assert_eq!(declared_tool_names(&chat), ["bash"]);
    }

    #[test]
    fn schemas_are_cheap() {
        for (api, tools) in [
            ("chat", chat_completions()),
            ("responses", responses()),
            ("anthropic", anthropic()),
            ("gemini", gemini()),
        ] {
            let tokens: usize = tools
                .iter()
                .map(|t| Encoding::O200kBase.count(&t.to_string()))
                .sum();
            eprintln!("{api}: the two tool definitions take {tokens} o200k tokens");
            assert!(tokens < 150, "{api}: {tokens} tokens");
        }
    }
}
