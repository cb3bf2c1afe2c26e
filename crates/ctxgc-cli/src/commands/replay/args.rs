//! `ctxgc replay`'s arguments.

use std::path::PathBuf;

use clap::Args;

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Transcript files or directories, searched recursively: your own Claude Code history
    /// (`~/.claude/projects`) or Codex history (`~/.codex/sessions`) works as it is (see `ctxgc
    /// import` for the formats; files that are not sessions are listed and skipped). Nothing
    /// leaves this machine.
    #[arg(value_name = "FILE_OR_DIR")]
    pub paths: Vec<PathBuf>,
    /// Also replay this user's own agent history, found where each agent keeps it (Claude
    /// Code, Codex CLI, Gemini CLI, Hermes, opencode, Cline, Roo Code, Aider; on Linux, macOS
    /// and Windows). The default when no path and no --sample is given. Only session files are
    /// read: credential files beside them are never opened.
    #[arg(long)]
    pub history: bool,
    /// With --history: only these agents, comma-separated (claude-code, codex, gemini-cli,
    /// hermes, opencode, cline, roo-code, aider).
    #[arg(long, value_delimiter = ',', value_name = "NAME")]
    pub agent: Vec<String>,
    /// Replay the sample sessions bundled with ctxgc.
    #[arg(long)]
    pub sample: bool,
    /// Context windows, comma-separated (`32k,64k,200k`), or `client`: each session at the
    /// window its client ran (its model's: Claude 200K or 1M, GPT-5.x 272K). Default: `client`
    /// when every session is a client's log, else `32k,64k,200k`.
    #[arg(long, value_delimiter = ',')]
    pub window: Vec<String>,
    /// Policies: built-in names, a ctxgc.toml file, or `exec:CMD`. Default: all built-ins.
    #[arg(long, value_delimiter = ',')]
    pub policy: Vec<String>,
    /// Cache models to price with, comma-separated (anthropic, openai, gemini, vllm). A session
    /// whose log names its model is priced with that model's row under its own provider's cache;
    /// the other tables price it with their provider's default row.
    #[arg(long, default_value = "anthropic,openai", value_delimiter = ',')]
    pub cache: Vec<String>,
    /// A cache model table to use instead of the built-in one (the same TOML shape as
    /// `crates/ctxgc-replay/data/prices.toml`: add a model the table lacks, or change a price).
    #[arg(long, value_name = "FILE")]
    pub cache_models: Option<PathBuf>,
    /// For each session whose id contains SESSION, each policy's decisions: every output its
    /// events pruned (with the reason: stale, a duplicate, old, the window), kept because the
    /// agent is likely to use it again, or summarised, with what the relevance table said of
    /// it; then every reference the agent used later that the client showed and the policy did
    /// not, with the decision that hid it (or the insertion trim).
    #[arg(long, value_name = "SESSION")]
    pub explain: Option<String>,
    /// For each session whose id contains SESSION: every request's recorded and simulated cache
    /// reads and writes (policy none), with the cause of each difference.
    #[arg(long, value_name = "SESSION")]
    pub explain_cache: Option<String>,
    /// Fit what the prefix caches' documentation leaves open (routing misses, how far a hit falls
    /// short) on the sessions' billed usage, and report the error on each set (or fold of
    /// sessions) left out of the fit, instead of the replay.
    #[arg(long)]
    pub calibrate: bool,
    /// Fit the relevance table (how likely the agent is to use an old tool output again) on
    /// these sessions, write it to FILE, and report how a table fitted without each user does
    /// on that user's sessions, instead of the replay. The shipped table is
    /// `crates/ctxgc-core/data/relevance.json`.
    #[arg(long, value_name = "FILE")]
    pub fit_relevance: Option<PathBuf>,
    /// With --fit-relevance: also write each user's left-out table (`DIR/USER.json`, fitted on
    /// the other users), for replays that judge a user with a table that never saw them.
    #[arg(long, value_name = "DIR", requires = "fit_relevance")]
    pub relevance_folds: Option<PathBuf>,
    /// The relevance table the `ctxgc` policy decides with, instead of the shipped one.
    #[arg(long, value_name = "FILE", conflicts_with = "fit_relevance")]
    pub relevance: Option<PathBuf>,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Also write a self-contained HTML report with charts.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Session shown in the HTML report's per-turn chart (default: the longest).
    #[arg(long)]
    pub chart_session: Option<String>,
    /// Also break input tokens down by tool (shell tools by command kind) and show what each
    /// policy keeps of each (always shown for client logs).
    #[arg(long)]
    pub by_tool: bool,
    /// Also list, for client logs, what each policy hid that the client itself still showed:
    /// by the tool it came from, by its age in turns, and the first examples.
    #[arg(long)]
    pub misses: bool,
    /// Seconds an `exec:` policy may take to answer one request; past that it is stopped, the
    /// failure reported and the request sent unchanged.
    #[arg(long, default_value_t = 120.0, value_name = "SECONDS")]
    pub exec_timeout: f64,
}
