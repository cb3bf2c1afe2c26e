//! `ctxgc trim`: stdin -> stdout.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use ctxgc_core::config::Config;

use crate::stream::{StreamSpec, trim_stream};

/// Options shared by `trim` and `run`.
#[derive(Debug, Args)]
pub struct TrimOptions {
    /// Tool name whose profile applies (see `ctxgc config`).
    #[arg(long, default_value = "terminal")]
    pub tool: String,
    /// The model's context window in tokens (limits scale with it; default from the config).
    #[arg(long, value_name = "TOKENS", value_parser = super::parse_window)]
    pub window: Option<u64>,
    /// Trim to at most this many bytes, where that is less than the profile's limit (an agent
    /// that cuts longer outputs itself: Claude Code's failed commands at 10,000 characters).
    #[arg(long, value_name = "BYTES")]
    pub max_bytes: Option<usize>,
    /// Keep exactly the first N lines (with --tail: trim by line counts instead of bytes).
    #[arg(long, value_name = "N")]
    pub head: Option<u64>,
    /// Keep exactly the last N lines.
    #[arg(long, value_name = "N")]
    pub tail: Option<u64>,
    /// Also write the untrimmed output to this file.
    #[arg(long, value_name = "PATH")]
    pub save_original: Option<PathBuf>,
    /// File the original in the store under this session when the output is trimmed, so the
    /// id its marker shows is recallable (`ctxgc recall ID`, `ctxgc mcp`); the hooks pass the
    /// agent's session.
    #[arg(long, value_name = "NAME")]
    pub session: Option<String>,
    /// The recall tool the agent has, which the markers then name (`recall with NAME`), as
    /// the proxy's do: the hooks pass their agent's MCP tool. The output is then written when
    /// the trim is done, not as it streams.
    #[arg(long, value_name = "TOOL", requires = "session")]
    pub recall_with: Option<String>,
    /// The store `--session` files originals in (`sqlite:PATH`, default the one `ctxgc serve`
    /// and `ctxgc mcp` use; `redis://...`).
    #[arg(long, requires = "session")]
    pub store: Option<String>,
}

#[derive(Debug, Args)]
pub struct TrimArgs {
    #[command(flatten)]
    pub options: TrimOptions,
}

impl TrimOptions {
    /// Trims `input` to stdout.
    pub fn trim_to_stdout(&self, config: &Config, input: impl io::Read) -> Result<()> {
        let trim = &config.trim;
        let profile = trim.profile_for(&self.tool);
        let window = self.window.unwrap_or(trim.default_window);
        let spec = StreamSpec {
            config: trim,
            profile,
            limit: trim
                .soft_limit(profile, window)
                .min(self.max_bytes.unwrap_or(usize::MAX)),
            head_lines: self.head,
            tail_lines: self.tail,
        };
        let mut saved = match &self.save_original {
            Some(path) => {
                Some(BufWriter::new(File::create(path).with_context(|| {
                    format!("cannot create {}", path.display())
                })?))
            }
            None => None,
        };
        let stdout = io::stdout();
        let mut out = BufWriter::with_capacity(256 * 1024, stdout.lock());
        // Filing the original keeps it, and what was written, until the end.
        let mut filed = self.session.as_ref().map(|_| Filed::default());
        let result = match &mut filed {
            Some(filed) => {
                let mut original = Tee {
                    first: saved.as_mut().map(|w| w as &mut dyn Write),
                    second: &mut filed.original,
                };
                // Markers that name the recall tool are written once the trim is whole.
                let mut shown = Tee {
                    first: self
                        .recall_with
                        .is_none()
                        .then_some(&mut out as &mut dyn Write),
                    second: &mut filed.shown,
                };
                trim_stream(&spec, input, &mut shown, Some(&mut original))
            }
            None => trim_stream(
                &spec,
                input,
                &mut out,
                saved.as_mut().map(|w| w as &mut dyn Write),
            ),
        }
        .and_then(|report| {
            if let (Some(tool), Some(filed)) = (&self.recall_with, &filed) {
                let way = ctxgc_core::agent_tools::RecallWay::Tool(tool.clone());
                let shown = String::from_utf8_lossy(&filed.shown);
                match ctxgc_core::trim::name_recall(&shown, &way).filter(|_| report.trimmed) {
                    Some(named) => out.write_all(named.as_bytes())?,
                    None => out.write_all(&filed.shown)?,
                }
            }
            out.flush().map(|()| report)
        });
        let trimmed = match result {
            // A reader that went away (`| head`) is not an error.
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => false,
            other => other.context("trimming failed")?.trimmed,
        };
        if let Some(mut w) = saved {
            w.flush().context("cannot write the original")?;
        }
        // An output passed through whole names no id of its own (a marker in it is an earlier
        // trim's, whose original is not this text).
        if let (true, Some(filed), Some(session)) = (trimmed, filed, &self.session) {
            filed.file(config, self.store.as_deref(), session)?;
        }
        Ok(())
    }
}

/// An output kept whole while it is trimmed, to file its original under the ids the trim's
/// markers name.
#[derive(Default)]
struct Filed {
    original: Vec<u8>,
    shown: Vec<u8>,
}

impl Filed {
    fn file(self, config: &Config, store: Option<&str>, session: &str) -> Result<()> {
        let shown = String::from_utf8_lossy(&self.shown);
        let ids = ctxgc_core::trim::marker_ids(&shown);
        if ids.is_empty() {
            return Ok(());
        }
        let original = String::from_utf8_lossy(&self.original);
        let store = super::serve::open_store(store, config, None)?;
        let session = ctxgc_core::store::SessionId::new(session);
        let originals: Vec<_> = ids.iter().map(|id| (*id, &*original)).collect();
        store
            .put_all(&session, &originals)
            .context("cannot file the original in the store")?;
        Ok(())
    }
}

/// Writes to both.
struct Tee<'a> {
    first: Option<&'a mut dyn Write>,
    second: &'a mut Vec<u8>,
}

impl Write for Tee<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        if let Some(first) = self.first.as_deref_mut() {
            first.write_all(bytes)?;
        }
        self.second.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        match self.first.as_deref_mut() {
            Some(first) => first.flush(),
            None => Ok(()),
        }
    }
}

pub fn run(config: &Config, args: TrimArgs) -> Result<ExitCode> {
    args.options.trim_to_stdout(config, io::stdin().lock())?;
    Ok(ExitCode::SUCCESS)
}
