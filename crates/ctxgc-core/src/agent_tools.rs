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
