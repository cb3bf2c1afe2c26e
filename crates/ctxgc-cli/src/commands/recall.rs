//! `ctxgc recall`: an original from the store, by the recall id a trim marker, an abstract or a
//! summary names, for agents whose only tool is a shell (mini-swe-agent) and for people.

use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::Args;
use ctxgc_core::ContentId;
use ctxgc_core::config::Config;
use ctxgc_core::recall::{self, RecallQuery};
use ctxgc_core::store::{SessionId, Store};

#[derive(Debug, Args)]
pub struct RecallArgs {
    /// The recall id (`r-0123456789abcdef`), as a marker, abstract or summary shows it.
    pub id: String,
    /// The session the output belongs to (as the integration named it); without it, the id is
    /// looked up in every session of the store this caller may read (see `--key-env`).
    #[arg(long)]
    pub session: Option<String>,
    /// The environment variable holding the API key the agent sends through the proxy: only
    /// that caller's sessions are read (needed for a shared Redis store without `--session`).
    #[arg(long, value_name = "VAR")]
    pub key_env: Option<String>,
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
    let original = match &args.session {
        Some(name) => store.get(&SessionId::new(name.as_str()), id)?.with_context(|| {
            format!(
                "no original {id} in session `{name}` of this store (a different session or store, or past its retention)"
            )
        })?,
        None => {
            let scope = scope(&*store, config, args.key_env.as_deref())?;
            store.find(&scope, id)?.map(|(_, text)| text).with_context(|| {
                format!(
                    "no original {id} in this store (a different store, another caller's, or past its retention)"
                )
            })?
        }
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

/// The sessions a reader of the store given no session may look an id up in: those of the
/// caller whose key `key_env` names (its tenant, as the proxy keys it), else the whole store,
/// which only a store of one user's own allows (the SQLite file, readable by its owner only).
pub(crate) fn scope(store: &dyn Store, config: &Config, key_env: Option<&str>) -> Result<String> {
    let Some(var) = key_env else {
        if store.is_shared() {
            bail!(
                "a shared store holds many callers' originals: name the environment variable holding your API key with --key-env (ANTHROPIC_API_KEY, OPENAI_API_KEY...)"
            );
        }
        return Ok(String::new());
    };
    let key = std::env::var(var).ok().filter(|k| !k.trim().is_empty());
    let key = key.with_context(|| format!("--key-env {var}: the variable is not set"))?;
    let secret = ctxgc_proxy::existing_tenant_secret(config.proxy.tenant_secret.as_deref(), store)?
        .context("the store holds no tenant secret yet: no proxy has filed an original in it")?;
    Ok(format!("{}.", secret.tenant_of_credential(&key).as_str()))
}
