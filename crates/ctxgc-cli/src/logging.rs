//! Where the long-running commands log: `tracing` to stderr, as text or JSON lines, filtered by
//! `RUST_LOG` (default `info`). Nothing logged carries a key: the proxy logs tenant hashes and
//! session ids, and URLs with their credentials redacted.

use anyhow::Result;

/// The format of log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

/// Installs the process's subscriber.
pub fn init(format: LogFormat) -> Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // A log line that cannot be written (a full disk under a redirected stderr) is lost,
        // never fatal: tracing's own report of the failure goes through `eprintln!`, which
        // panics when stderr fails, and a panic in a request's task drops the client's
        // connection, so a full disk had failed every request the proxy logged.
        .log_internal_errors(false);
    let installed = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
        LogFormat::Json => builder.json().with_current_span(true).try_init(),
    };
    installed.map_err(|e| anyhow::anyhow!("cannot install the logger: {e}"))
}
