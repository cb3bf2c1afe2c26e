//! `ctxgc prefix-breaks`: what a client changed between consecutive requests that broke the
//! provider's cached prefix, from request bodies recorded in front of the provider.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::Args;
use ctxgc_replay::breaks;
use serde_json::Value;

use crate::table::{num, render};

#[derive(Debug, Args)]
pub struct BreaksArgs {
    /// JSONL files of request bodies in the order they were sent: one body per line, or one
    /// record per line with the body under `body` and its session under `session` (as a
    /// recording relay writes them). Without a session, a body's `metadata.user_id` or
    /// `prompt_cache_key` names it, else the file does.
    #[arg(value_name = "FILE", required = true)]
    pub files: Vec<PathBuf>,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// The session a body belongs to when its record does not say.
fn session_of(body: &Value, file: &str) -> String {
    body.pointer("/metadata/user_id")
        .or_else(|| body.get("prompt_cache_key"))
        .and_then(Value::as_str)
        .map_or_else(|| file.to_owned(), str::to_owned)
}

pub fn run(args: BreaksArgs) -> Result<ExitCode> {
    let mut requests = Vec::new();
    for path in &args.files {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let file = path.display().to_string();
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let value: Value = serde_json::from_str(line)
                .with_context(|| format!("{file}:{}: not JSON", n + 1))?;
            let (body, session) = match value.get("body") {
                Some(body) if body.is_object() => (
                    body.clone(),
                    value
                        .get("session")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                ),
                _ => (value.clone(), None),
            };
            // Token counts and failed requests are no prompt the cache served.
            let path = value.get("path").and_then(Value::as_str).unwrap_or("");
            let failed = value
                .get("status")
                .and_then(Value::as_u64)
                .is_some_and(|s| s != 200);
            if path.ends_with("count_tokens") || path.ends_with(":countTokens") || failed {
                continue;
            }
            if !(body.get("messages").is_some()
                || body.get("input").is_some()
                || body.get("contents").is_some())
            {
                bail!(
                    "{file}:{}: not a request body (no `messages`, `input` or `contents`)",
                    n + 1
                );
            }
            let session = session.unwrap_or_else(|| session_of(&body, &file));
            requests.push((session, body));
        }
    }
    let summary = breaks::compare(&requests);
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&summary)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    let lost: usize = summary.breaks.iter().map(|b| b.tokens_lost).sum();
    outln!(
        "{} sessions, {} consecutive pairs: {} extend the previous request, {} only move cache_control markers, {} break the cached prefix.\n",
        summary.sessions,
        summary.pairs,
        summary.extended,
        summary.cache_control_only,
        summary.breaks.len()
    )?;
    let rows: Vec<Vec<String>> = summary
        .by_kind()
        .into_iter()
        .map(|(kind, (count, tokens))| {
            vec![
                kind.name().to_owned(),
                count.to_string(),
                format!("{:.1}%", count as f64 * 100.0 / summary.pairs.max(1) as f64),
                num(tokens as u64),
                format!("{:.1}%", tokens as f64 * 100.0 / lost.max(1) as f64),
            ]
        })
        .collect();
    outln!(
        "{}",
        render(
            &[
                "what changed first",
                "breaks",
                "of pairs",
                "tokens after it (estimated)",
                "of tokens lost"
            ],
            &rows
        )
    )?;
    Ok(ExitCode::SUCCESS)
}
