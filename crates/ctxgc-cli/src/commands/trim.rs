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
    /// Keep exactly the first N lines (with --tail: trim by line counts instead of bytes).
    #[arg(long, value_name = "N")]
    pub head: Option<u64>,
    /// Keep exactly the last N lines.
    #[arg(long, value_name = "N")]
    pub tail: Option<u64>,
    /// Also write the untrimmed output to this file.
    #[arg(long, value_name = "PATH")]
    pub save_original: Option<PathBuf>,
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
            limit: trim.soft_limit(profile, window),
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
        let result = trim_stream(
            &spec,
            input,
            &mut out,
            saved.as_mut().map(|w| w as &mut dyn Write),
        )
        .and_then(|_| out.flush());
        match result {
            // A reader that went away (`| head`) is not an error.
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {}
            other => {
                other.context("trimming failed")?;
            }
        }
        if let Some(mut w) = saved {
            w.flush().context("cannot write the original")?;
        }
        Ok(())
    }
}

pub fn run(config: &Config, args: TrimArgs) -> Result<ExitCode> {
    args.options.trim_to_stdout(config, io::stdin().lock())?;
    Ok(ExitCode::SUCCESS)
}
