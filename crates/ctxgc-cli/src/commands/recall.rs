//! `ctxgc recall`: an original from the store, by the recall id a trim marker, an abstract or a
//! summary names, for agents whose only tool is a shell (mini-swe-agent) and for people.

use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::Args;
use ctxgc_core::ContentId;
use ctxgc_core::config::Config;
use ctxgc_core::recall::{self, RecallQuery};
use ctxgc_core::store::SessionId;

#[derive(Debug, Args)]
pub struct RecallArgs {
    /// The recall id (`r-0123456789abcdef`), as a marker, abstract or summary shows it.
    pub id: String,
    /// The session the output belongs to (as the integration named it).
    #[arg(long)]
    pub session: String,
    /// Where originals are: `sqlite:PATH` (default: the store `ctxgc serve` and the Python
    /// package use), `redis://...` or `rediss://...`.
    #[arg(long)]
    pub store: Option<String>,
    /// Only these lines, 1-based and inclusive (`40-80`), numbered.
    #[arg(long)]
    pub lines: Option<String>,
    /// Only the lines matching this regular expression, numbered, with `--context` lines
    /// around them.
    #[arg(long)]
    pub pattern: Option<String>,
    /// Lines of context around each match of `--pattern`.
    #[arg(long, default_value_t = 3)]
    pub context: usize,
}

pub fn run(config: &Config, args: RecallArgs) -> Result<ExitCode> {
    let Some(id) = ContentId::parse(args.id.trim()) else {
        bail!(
            "`{}` is not a recall id: ids look like r-0123456789abcdef and appear in trim markers, abstracts and summaries",
            args.id
        );
    };
    let lines = match args.lines.as_deref() {
        Some(spec) => Some(
            recall::parse_lines(spec)
                .with_context(|| format!("--lines must look like 40-80, not `{spec}`"))?,
        ),
        None => None,
    };
    // Read only: no bound, so opening the store evicts nothing.
    let store = super::serve::open_store(args.store.as_deref(), config, None)?;
    let session = SessionId::new(args.session.as_str());
    let Some(original) = store.get(&session, id)? else {
        bail!(
            "no original {id} in session `{}` of this store (a different session or store, or past its retention)",
            args.session
        );
    };
    let query = RecallQuery {
        lines,
        pattern: args.pattern,
        context: args.context,
    };
    let text = recall::recall(&original, &query, config.trim.hard_cap_bytes)?;
    out!("{text}")?;
    if !text.ends_with('\n') {
        outln!()?;
    }
    Ok(ExitCode::SUCCESS)
}
