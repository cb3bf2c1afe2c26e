//! `ctxgc mcp`: an MCP server on stdio whose one tool, `recall_tool_result`, answers the ids the
//! agent was shown (in trim markers, abstracts and summaries) from the store the proxy, the
//! hooks and `ctxgc run` file originals in.
//!
//! The tool's description, its schema and its answers are the core's
//! ([`ctxgc_core::agent_tools`]): the same call gets the same text here as from the proxy's
//! injected tool. The server never offers `trim_tool_result`: no agent lets an MCP tool replace
//! an earlier tool result in its own history (docs/agents.md says which way each agent trims).

use std::sync::Arc;

use ctxgc_core::agent_tools::{self, RECALL_TOOL};
use ctxgc_core::store::OriginalStore;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use serde_json::Value;

/// Why the server stopped.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// The client never completed the handshake.
    #[error("the MCP handshake failed: {0}")]
    Handshake(String),
    /// The server's task ended abnormally.
    #[error("the MCP server stopped: {0}")]
    Stopped(String),
}

/// The recall server: a store, and the part of it this caller may read.
#[derive(Clone)]
pub struct RecallServer {
    store: Arc<dyn OriginalStore>,
    scope: String,
    max_bytes: usize,
}

impl RecallServer {
    /// A server answering from `store`, within the sessions whose id starts with `scope` (the
    /// caller's tenant, `{tenant}.`; `""`: the whole store, for a store of one user's own),
    /// with answers of at most `max_bytes` (the trimmer's hard cap).
    pub fn new(store: Arc<dyn OriginalStore>, scope: String, max_bytes: usize) -> RecallServer {
        RecallServer {
            store,
            scope,
            max_bytes,
        }
    }

    /// The answer to a call of the tool named `name` with `arguments`.
    pub fn answer(&self, name: &str, arguments: &Value) -> CallToolResult {
        if name != RECALL_TOOL {
            return CallToolResult::error(vec![ContentBlock::text(format!(
                "error: no tool `{name}` here; this server has {RECALL_TOOL}"
            ))]);
        }
        match agent_tools::recall_by_id(&*self.store, &self.scope, arguments, self.max_bytes) {
            Ok(text) => CallToolResult::success(vec![ContentBlock::text(text)]),
            Err(message) => CallToolResult::error(vec![ContentBlock::text(message)]),
        }
    }

    /// Serves one client on stdin and stdout until it closes them.
    pub async fn serve_stdio(self) -> Result<(), McpError> {
        let running = self
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| McpError::Handshake(e.to_string()))?;
        running
            .waiting()
            .await
            .map_err(|e| McpError::Stopped(e.to_string()))?;
        Ok(())
    }
}

fn recall_tool() -> Tool {
    let (description, schema) = agent_tools::recall_spec();
    let schema = match schema {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    Tool::new(RECALL_TOOL, description, Arc::new(schema))
}

impl ServerHandler for RecallServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("ctxgc", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Tool outputs that ctxgc trimmed or summarised name an id (r-...); \
                 recall_tool_result returns the original, or only its lines or a pattern's.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![recall_tool()]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        // The store's calls block (SQLite, Redis): off the runtime's threads.
        let server = self.clone();
        let name = request.name.to_string();
        let result = tokio::task::spawn_blocking(move || server.answer(&name, &arguments))
            .await
            .map_err(|e| ErrorData::internal_error(format!("the recall failed: {e}"), None))?;
        Ok(result.into())
    }
}

#[cfg(test)]
mod tests;
