//! `ctxgc run -- CMD ARGS...`: run, trim the merged output, report the exit status.

use std::io::{self, Write};
use std::process::{Command, ExitCode, Stdio};

use anyhow::{Context, Result, bail};
use clap::Args;
use ctxgc_core::config::Config;

use super::trim::TrimOptions;

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub options: TrimOptions,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

pub fn run(config: &Config, args: RunArgs) -> Result<ExitCode> {
    let Some((program, rest)) = args.command.split_first() else {
        bail!("no command given: use `ctxgc run -- CMD ARGS...`");
    };
    // One pipe for both streams, so lines interleave as the command wrote them.
    let (reader, writer) = io::pipe().context("cannot create a pipe")?;
    let mut child = Command::new(program)
        .args(rest)
        .stdout(writer.try_clone().context("cannot duplicate the pipe")?)
        .stderr(writer)
        .stdin(Stdio::inherit())
        .spawn()
        .with_context(|| format!("cannot run `{program}`"))?;
    // `writer` moved into the child's handles; the parent's copies are closed once `Command` is
    // dropped, so the reader sees EOF when the child exits.
    args.options.trim_to_stdout(config, reader)?;
    let status = child.wait().context("cannot wait for the command")?;
    let (line, code) = describe(status);
    let mut stdout = io::stdout().lock();
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
    Ok(ExitCode::from(code))
}

/// The status line and the exit code to pass on (128 + signal, as shells do).
fn describe(status: std::process::ExitStatus) -> (String, u8) {
    if let Some(code) = status.code() {
        return (format!("exit status: {code}"), code as u8);
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return (
                format!("exit status: killed by signal {signal}"),
                (128 + signal).clamp(0, 255) as u8,
            );
        }
    }
    ("exit status: unknown".into(), 1)
}
