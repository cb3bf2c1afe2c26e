//! `ctxgc mcp`: the MCP server agents run on stdio (`claude mcp add ctxgc -- ctxgc mcp`), whose
//! `recall_tool_result` answers the ids the agent was shown from the store the proxy, the hooks
//! and `ctxgc run` file originals in.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args;
use ctxgc_core::config::Config;
use ctxgc_mcp::RecallServer;

#[derive(Debug, Args)]
pub struct McpArgs {
    /// Where originals are: `sqlite:PATH` (default: the store `ctxgc serve`, the hooks and the
    /// Python package use), `redis://...` or `rediss://...` (a shared store: `--key-env` too).
    #[arg(long)]
    pub store: Option<String>,
    /// The environment variable holding the API key the agent sends (`ANTHROPIC_API_KEY`):
    /// recalls then read only that caller's sessions, as the proxy filed them.
    #[arg(long, value_name = "VAR")]
    pub key_env: Option<String>,
}

pub fn run(config: &Config, args: McpArgs) -> Result<ExitCode> {
    // Read only: no bound, so opening the store evicts nothing.
    let store = super::serve::open_store(args.store.as_deref(), config, None)?;
    let scope = super::recall::scope(&*store, config, args.key_env.as_deref())?;
    let store: Arc<dyn ctxgc_core::store::Store> = Arc::from(store);
    let server = RecallServer::new(store, scope, config.trim.hard_cap_bytes);
    // stdout is the protocol's: tracing writes to stderr only (logging.rs).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the MCP server's runtime")?;
    runtime.block_on(server.serve_stdio())?;
    Ok(ExitCode::SUCCESS)
}
