//! `ctxgc import`: transcripts -> summary table (+ canonical JSONL).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use ctxgc_core::config::Config;
use ctxgc_core::tokens::{ProviderFamily, TokenCounter};
use ctxgc_formats::import::{self, Imported};

use crate::table::{num, render};

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// Transcript files or directories (searched recursively).
    #[arg(required = true, value_name = "FILE_OR_DIR")]
    pub paths: Vec<PathBuf>,
    /// Write one canonical JSONL file per session into this directory (names made unique per
    /// source; an existing file is never overwritten).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

#[derive(Default)]
struct Totals {
    formats: BTreeSet<String>,
    sessions: u64,
    messages: u64,
    tool_results: u64,
    tool_chars: u64,
    tokens: u64,
}

impl Totals {
    fn add(&mut self, imported: &Imported, counter: &mut TokenCounter) {
        let t = &imported.transcript;
        self.formats.insert(imported.format.to_string());
        self.sessions += 1;
        self.messages += t.messages.len() as u64;
        self.tool_results += t.tool_result_count() as u64;
        self.tool_chars += t.tool_output_chars() as u64;
        self.tokens += counter.count_messages(&t.messages) as u64;
    }

    fn row(&self, name: String) -> Vec<String> {
        vec![
            name,
            self.formats.iter().cloned().collect::<Vec<_>>().join(", "),
            num(self.sessions),
            num(self.messages),
            num(self.tool_results),
            num(self.tool_chars),
            num(self.tokens),
        ]
    }
}

/// One output file name per session: its id, or where two sources share an id (the same
/// instance in two sets), the id prefixed with its source's folder, then numbered.
struct Names(BTreeSet<String>);

impl Names {
    fn unique(&mut self, imported: &Imported) -> String {
        let id = &imported.transcript.id;
        let folder = imported
            .path
            .parent()
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut candidates = vec![id.clone()];
        if !folder.is_empty() {
            candidates.push(format!("{folder}__{id}"));
        }
        let name = candidates
            .into_iter()
            .chain((2..).map(|n| format!("{id}-{n}")))
            .find(|c| !self.0.contains(c))
            .unwrap_or_else(|| id.clone());
        self.0.insert(name.clone());
        name
    }
}

/// Writes one session; an existing file is never overwritten.
fn write_new(file: &std::path::Path, text: &str) -> Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(file)
        .with_context(|| {
            format!(
                "cannot write {} (an existing file is never overwritten: give an empty directory)",
                file.display()
            )
        })?;
    f.write_all(text.as_bytes())
        .with_context(|| format!("cannot write {}", file.display()))
}

pub fn run(config: &Config, args: ImportArgs) -> Result<ExitCode> {
    if let Some(out) = &args.out {
        std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    }
    let mut names = Names(BTreeSet::new());
    let mut written = 0usize;
    let mut counter = TokenCounter::new(ProviderFamily::Openai, config.tokens.clone());
    let mut rows = Vec::new();
    let mut all = Totals::default();
    let mut failures = 0usize;
    for path in &args.paths {
        let mut totals = Totals::default();
        for result in import::import_each(std::slice::from_ref(path)) {
            match result {
                Ok(imported) => {
                    totals.add(&imported, &mut counter);
                    all.add(&imported, &mut counter);
                    if let Some(out) = &args.out {
                        let file = out.join(format!("{}.jsonl", names.unique(&imported)));
                        match write_new(&file, &import::write_jsonl(&imported.transcript)) {
                            Ok(()) => written += 1,
                            Err(e) => {
                                failures += 1;
                                eprintln!("error: {e:#}");
                            }
                        }
                    }
                }
                Err(e) => {
                    failures += 1;
                    eprintln!("error: {e}");
                }
            }
        }
        rows.push(totals.row(path.display().to_string()));
    }
    if args.paths.len() > 1 {
        rows.push(all.row("total".into()));
    }
    println!(
        "{}",
        render(
            &[
                "source",
                "format",
                "sessions",
                "messages",
                "tool results",
                "tool-output chars",
                "tokens (o200k)"
            ],
            &rows
        )
    );
    if let Some(out) = &args.out {
        println!(
            "Wrote {written} session file(s) to {} ({} session(s) imported).",
            out.display(),
            all.sessions
        );
    }
    if failures > 0 {
        eprintln!("{failures} file(s) could not be imported or written");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
