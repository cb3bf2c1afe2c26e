//! `ctxgc compact`: runs transcripts through the engine turn by turn.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use ctxgc_core::config::Config;
use ctxgc_core::engine::drive::{drive, outline};
use ctxgc_core::engine::{EventRecord, Session, SessionReport, Summarizer};
use ctxgc_core::store::{MemoryStore, OriginalStore};
use ctxgc_core::tokens::{ProviderFamily, TokenCounter};
use ctxgc_core::{Message, Transcript};
use ctxgc_formats::import;
use ctxgc_store::SqliteStore;
use ctxgc_summarize::BlockingSummarizer;

use super::summarizer::{SummarizerArgs, SummarizerKind};
use rayon::iter::{IntoParallelRefIterator, ParallelIterator};
use serde::Serialize;

use crate::table::{num, render};

#[derive(Debug, Args)]
pub struct CompactArgs {
    /// Transcript files or directories.
    #[arg(required = true, value_name = "FILE_OR_DIR")]
    pub paths: Vec<PathBuf>,
    /// The model's context window in tokens (`32000`, `32k`).
    #[arg(long, default_value = "32k", value_parser = super::parse_window)]
    pub window: u64,
    #[command(flatten)]
    pub summarizer: SummarizerArgs,
    /// Where originals go: `memory` or `sqlite:PATH`.
    #[arg(long, default_value = "memory")]
    pub store: String,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// One session's outcome.
#[derive(Debug, Serialize)]
struct Outcome {
    session: String,
    requests: usize,
    /// Prompt tokens summed over every request, with the engine.
    prompt_tokens_with: u64,
    /// The same without it (everything verbatim).
    prompt_tokens_without: u64,
    peak_prompt_with: usize,
    peak_prompt_without: usize,
    report: SessionReport,
    events: Vec<EventRecord>,
    #[serde(skip)]
    final_prompt: Vec<Message>,
}

fn summarizer(args: &CompactArgs, config: &Config) -> Result<Option<BlockingSummarizer>> {
    let Some(client) = args.summarizer.llm()? else {
        return Ok(None);
    };
    Ok(Some(BlockingSummarizer::new(
        client,
        Duration::from_secs(config.engine.llm_cooldown_secs),
    )?))
}

fn run_one(
    transcript: &Transcript,
    args: &CompactArgs,
    config: &Config,
    store: &mut dyn OriginalStore,
    summarizer: Option<&mut dyn Summarizer>,
) -> Result<Outcome> {
    let family = match args.summarizer.summarizer {
        SummarizerKind::Anthropic => ProviderFamily::Anthropic,
        _ => ProviderFamily::Openai,
    };
    let mut session = Session::new(transcript.id.clone(), args.window, config, family);
    session.set_tools(transcript.tools.clone());
    let mut counter = TokenCounter::new(family, config.tokens.clone());
    let fixed = counter.count_tools(&transcript.tools) + 3;
    let source_tokens: Vec<usize> = transcript
        .messages
        .iter()
        .map(|m| counter.count_message(m))
        .collect();
    let mut with = 0u64;
    let mut without = 0u64;
    let (mut peak_with, mut peak_without) = (0usize, 0usize);
    let mut requests = 0usize;
    drive(transcript, &mut session, store, summarizer, |view| {
        let w = view.session.prompt_tokens();
        let wo = source_tokens[..view.source_index].iter().sum::<usize>() + fixed;
        with += w as u64;
        without += wo as u64;
        peak_with = peak_with.max(w);
        peak_without = peak_without.max(wo);
        requests += 1;
    })
    .with_context(|| format!("session {}", transcript.id))?;
    Ok(Outcome {
        session: transcript.id.clone(),
        requests,
        prompt_tokens_with: with,
        prompt_tokens_without: without,
        peak_prompt_with: peak_with,
        peak_prompt_without: peak_without,
        report: session.report(),
        events: session.events().to_vec(),
        final_prompt: session.prompt().to_vec(),
    })
}

pub fn run(config: &Config, args: CompactArgs) -> Result<ExitCode> {
    let mut transcripts = Vec::new();
    for result in import::import_paths(&args.paths) {
        transcripts.push(result?.transcript);
    }
    if transcripts.is_empty() {
        bail!("no transcripts found in {:?}", args.paths);
    }
    let mut llm = summarizer(&args, config)?;
    let outcomes: Vec<Outcome> = if llm.is_some() || args.store != "memory" {
        // One summarizer client and one store: sequential.
        let mut store: Box<dyn OriginalStore> = match args.store.strip_prefix("sqlite:") {
            Some(path) => Box::new(SqliteStore::open(path)?),
            None if args.store == "memory" => Box::new(MemoryStore::default()),
            None => bail!(
                "--store must be `memory` or `sqlite:PATH`, not `{}`",
                args.store
            ),
        };
        transcripts
            .iter()
            .map(|t| {
                run_one(
                    t,
                    &args,
                    config,
                    store.as_mut(),
                    llm.as_mut().map(|s| s as &mut dyn Summarizer),
                )
            })
            .collect::<Result<_>>()?
    } else {
        transcripts
            .par_iter()
            .map(|t| run_one(t, &args, config, &mut MemoryStore::default(), None))
            .collect::<Result<_>>()?
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&outcomes)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    if let [single] = outcomes.as_slice() {
        print_single(single, args.window)?;
    } else {
        print_many(&outcomes, args.window)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn print_single(o: &Outcome, window: u64) -> std::io::Result<()> {
    outln!(
        "Final prompt of {} at a {}-token window:\n",
        o.session,
        num(window)
    )?;
    outln!("{}", outline(&o.final_prompt))?;
    let rows: Vec<Vec<String>> = o
        .events
        .iter()
        .filter(|e| e.kind.rewrites_history())
        .map(|e| {
            vec![
                e.turn.to_string(),
                format!("{:?}", e.kind),
                num(e.tokens_before as u64),
                num(e.tokens_after as u64),
                num(e.reclaimed() as u64),
                e.earliest_changed.to_string(),
                format!(
                    "{}/{}",
                    num(e.summarizer_tokens_in as u64),
                    num(e.summarizer_tokens_out as u64)
                ),
                e.note.clone().unwrap_or_default(),
            ]
        })
        .collect();
    outln!(
        "{}",
        render(
            &[
                "turn",
                "event",
                "tokens before",
                "after",
                "reclaimed",
                "earliest changed",
                "summarizer in/out",
                "note"
            ],
            &rows
        )
    )?;
    let r = &o.report;
    outln!(
        "\n{} requests; {} insert-time trims; {} events ({} prune-only, {} compactions); prompt tokens over the session: {} with ctxgc, {} without ({:.1}% saved); peak prompt {} vs {}",
        o.requests,
        r.insert_trims,
        r.events,
        r.prune_only,
        r.compactions,
        num(o.prompt_tokens_with),
        num(o.prompt_tokens_without),
        saved(o.prompt_tokens_with, o.prompt_tokens_without),
        num(o.peak_prompt_with as u64),
        num(o.peak_prompt_without as u64),
    )?;
    if let Some(why) = &r.stopped {
        outln!("{why}")?;
    }
    Ok(())
}

fn saved(with: u64, without: u64) -> f64 {
    if without == 0 {
        0.0
    } else {
        100.0 * (1.0 - with as f64 / without as f64)
    }
}

fn print_many(outcomes: &[Outcome], window: u64) -> std::io::Result<()> {
    let mut rows: Vec<Vec<String>> = outcomes
        .iter()
        .map(|o| {
            vec![
                o.session.clone(),
                o.requests.to_string(),
                o.report.events.to_string(),
                o.report.prune_only.to_string(),
                o.report.compactions.to_string(),
                o.report
                    .mean_reclaimed_per_event
                    .map(|r| num(r as u64))
                    .unwrap_or_else(|| "-".into()),
                num(o.prompt_tokens_without),
                num(o.prompt_tokens_with),
                format!(
                    "{:.1}%",
                    saved(o.prompt_tokens_with, o.prompt_tokens_without)
                ),
            ]
        })
        .collect();
    let sessions = outcomes.len() as f64;
    let events: usize = outcomes.iter().map(|o| o.report.events).sum();
    let reclaimed: usize = outcomes
        .iter()
        .flat_map(|o| &o.events)
        .filter(|e| e.kind.rewrites_history())
        .map(EventRecord::reclaimed)
        .sum();
    let with: u64 = outcomes.iter().map(|o| o.prompt_tokens_with).sum();
    let without: u64 = outcomes.iter().map(|o| o.prompt_tokens_without).sum();
    rows.push(vec![
        format!("total ({} sessions)", outcomes.len()),
        outcomes
            .iter()
            .map(|o| o.requests)
            .sum::<usize>()
            .to_string(),
        format!("{events} ({:.2}/session)", events as f64 / sessions),
        outcomes
            .iter()
            .map(|o| o.report.prune_only)
            .sum::<usize>()
            .to_string(),
        outcomes
            .iter()
            .map(|o| o.report.compactions)
            .sum::<usize>()
            .to_string(),
        reclaimed
            .checked_div(events)
            .map_or_else(|| "-".into(), |r| num(r as u64)),
        num(without),
        num(with),
        format!("{:.1}%", saved(with, without)),
    ]);
    outln!("Window {} tokens", num(window))?;
    outln!(
        "{}",
        render(
            &[
                "session",
                "requests",
                "events",
                "prune-only",
                "compactions",
                "reclaimed/event",
                "prompt tokens without",
                "with ctxgc",
                "saved"
            ],
            &rows
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxgc_core::Role;

    #[test]
    fn a_session_runs_and_saves_tokens() {
        let mut messages = vec![
            Message::text(Role::System, "sys"),
            Message::text(Role::User, "fix it"),
        ];
        for i in 0..40 {
            messages.push(Message {
                role: Role::Assistant,
                content: vec![ctxgc_core::Block::ToolCall(ctxgc_core::ToolCall {
                    id: format!("c{i}"),
                    name: "bash".into(),
                    arguments: r#"{"command":"make"}"#.into(),
                    implicit: false,
                })],
                usage: None,
            });
            let out: String = (0..400)
                .map(|j| format!("step {i}.{j} compiled module_{j}\n"))
                .collect();
            messages.push(Message::tool_result(
                format!("c{i}"),
                Some("bash".into()),
                out,
                false,
            ));
        }
        let t = Transcript {
            id: "t".into(),
            messages,
            tools: vec![],
            recording: None,
            model: None,
        };
        let args = CompactArgs {
            paths: vec![],
            window: 32_000,
            summarizer: SummarizerArgs::extractive(),
            store: "memory".into(),
            json: false,
        };
        let o = run_one(
            &t,
            &args,
            &Config::default(),
            &mut MemoryStore::default(),
            None,
        )
        .unwrap();
        assert_eq!(o.requests, 40);
        assert!(
            o.prompt_tokens_with < o.prompt_tokens_without / 2,
            "{} vs {}",
            o.prompt_tokens_with,
            o.prompt_tokens_without
        );
        assert!(
            o.peak_prompt_with <= Config::default().engine.threshold(32_000) + 5_000,
            "{}",
            o.peak_prompt_with
        );
        assert!(o.report.events >= 1);
    }
}
