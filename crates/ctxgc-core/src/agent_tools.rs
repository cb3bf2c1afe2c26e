//! The tools ctxgc offers the model: `trim_tool_result` and `recall_tool_result`.
//!
//! Their schemas are paid for on every request, so they are kept short (measured in the tests:
//! under 150 o200k tokens together).

use serde_json::{Value, json};

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
