//! `ctxgc`: a thin command-line front end over the ctxgc libraries.

/// `println!` that returns the write's error instead of panicking, so that a reader closing
/// the pipe early (`ctxgc replay | head -1`) ends the command quietly (see [`main`]).
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)
    }};
}

/// `print!` counterpart of [`outln!`].
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout().lock(), $($arg)*)
    }};
}

mod commands;
mod html;
mod logging;
mod settings;
mod stream;
mod table;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// The version and the commit it was built from (see `build.rs`).
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("CTXGC_COMMIT"), ")");

/// ctxgc: context management for LLM agents.
#[derive(Debug, Parser)]
#[command(name = "ctxgc", version = VERSION, about, long_about = None)]
struct Cli {
    /// Configuration file (default: ./ctxgc.toml when present, else built-in defaults).
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Trim tool output read from stdin and write it to stdout (streaming, bounded memory).
    Trim(commands::trim::TrimArgs),
    /// Run a command, merge its stdout and stderr, trim them, print `exit status: N` and exit
    /// with the command's own code.
    Run(commands::run::RunArgs),
    /// Import agent transcripts (mini-swe-agent, SWE-agent, Claude Code session logs, Codex CLI
    /// rollouts, Gemini CLI chats, Hermes's state.db and sessions, opencode.db and its storage
    /// tree, Cline and Roo Code tasks, Aider histories, API request bodies, ctxgc JSONL), print a
    /// summary table and optionally write canonical JSONL. Everything stays on this machine.
    Import(commands::import::ImportArgs),
    /// Replay transcripts through every context policy with provider cache models, prices and a
    /// recall metric: what would each have cost, and what would the agent still have seen? Give
    /// it your own history (`~/.claude/projects`, `~/.codex/sessions`): it reads it here and
    /// sends nothing anywhere.
    Replay(commands::replay::ReplayArgs),
    /// What a client changed between consecutive requests that broke the provider's cached
    /// prefix (system reminders, tools, cleared results, cache_control...), from request bodies
    /// recorded in front of the provider.
    PrefixBreaks(commands::breaks::BreaksArgs),
    /// Run transcripts through the engine turn by turn: final prompt and event log (one
    /// file), or per-session events and prompt tokens with and without ctxgc (several).
    Compact(commands::compact::CompactArgs),
    /// Run the proxy for the OpenAI and Anthropic APIs (point an agent's base URL at it).
    Serve(commands::serve::ServeArgs),
    /// Print a running proxy's statistics.
    Stats(commands::serve::StatsArgs),
    /// Delete stored originals and states older than `[store] retention_days` (default 7) and
    /// compact the SQLite file.
    Gc(commands::serve::GcArgs),
    /// Print a stored original by its recall id (`r-...`), whole, by lines or by pattern: the
    /// recall a shell-only agent can run.
    Recall(commands::recall::RecallArgs),
    /// Serve `recall_tool_result` to an agent over MCP on stdio (`claude mcp add ctxgc -- ctxgc
    /// mcp`): the ids its trimmed outputs show, answered from the store.
    Mcp(commands::mcp::McpArgs),
    /// Answer an agent's hook (`ctxgc hook claude-code`, from the Claude Code plugin): trims
    /// Bash and MCP tool outputs where no proxy runs, filing originals for `ctxgc mcp`.
    Hook(commands::hook::HookArgs),
    /// Print the effective configuration as TOML.
    Config,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = settings::load(cli.config.as_deref()).and_then(|config| match cli.command {
        Command::Trim(args) => commands::trim::run(&config, args),
        Command::Run(args) => commands::run::run(&config, args),
        Command::Import(args) => commands::import::run(&config, args),
        Command::Compact(args) => commands::compact::run(&config, args),
        Command::Replay(args) => commands::replay::run(&config, args),
        Command::PrefixBreaks(args) => commands::breaks::run(args),
        Command::Serve(args) => commands::serve::run(&config, args),
        Command::Stats(args) => commands::serve::stats(args),
        Command::Gc(args) => commands::serve::gc(&config, args),
        Command::Recall(args) => commands::recall::run(&config, args),
        Command::Mcp(args) => commands::mcp::run(&config, args),
        Command::Hook(args) => commands::hook::run(&config, args),
        Command::Config => {
            out!("{}", config.to_toml())?;
            Ok(ExitCode::SUCCESS)
        }
    });
    match result {
        Ok(code) => code,
        // The reader went away (`| head`): what it wanted was written; nothing to report.
        Err(err) if closed_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("ctxgc: {err:#}");
            ExitCode::from(2)
        }
    }
}

fn closed_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
