//! `ctxgc replay`: real transcripts through every policy, with cache models, prices and recall.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::Args;
use ctxgc_core::Transcript;
use ctxgc_core::config::Config;
use ctxgc_formats::import;
use ctxgc_replay::cache::CacheKind;
use std::sync::Arc;

use ctxgc_replay::policies::{self, Ctxgc, Exec, ExecPool, PolicyFactory};
use ctxgc_replay::prices::{self, ModelPrice};
use ctxgc_replay::report::{self, Row};
use ctxgc_replay::run::{SessionRun, replay};
use ctxgc_replay::validate::{self, SessionCheck};
use rayon::prelude::*;
use serde::Serialize;

use crate::table::{num, render};

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Transcript files or directories (see `ctxgc import` for the formats).
    #[arg(value_name = "FILE_OR_DIR")]
    pub paths: Vec<PathBuf>,
    /// Replay the sample sessions bundled with ctxgc.
    #[arg(long)]
    pub sample: bool,
    /// Context windows, comma-separated (`32k,64k,200k`).
    #[arg(long, default_value = "32k,64k,200k", value_delimiter = ',')]
    pub window: Vec<String>,
    /// Policies: built-in names, a ctxgc.toml file, or `exec:CMD`. Default: all built-ins.
    #[arg(long, value_delimiter = ',')]
    pub policy: Vec<String>,
    /// Cache models to price with, comma-separated.
    #[arg(long, default_value = "anthropic,openai", value_delimiter = ',')]
    pub cache: Vec<String>,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Also write a self-contained HTML report with charts.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Session shown in the HTML report's per-turn chart (default: the longest).
    #[arg(long)]
    pub chart_session: Option<String>,
}

/// The sample sessions, embedded so `--sample` works from any directory.
const SAMPLES: &[(&str, &[u8])] = &[
    (
        "django__django-11885.traj.json",
        include_bytes!("../../../../data/samples/django__django-11885.traj.json"),
    ),
    (
        "django__django-14725.traj.json",
        include_bytes!("../../../../data/samples/django__django-14725.traj.json"),
    ),
    (
        "scikit-learn__scikit-learn-13328.traj.json",
        include_bytes!("../../../../data/samples/scikit-learn__scikit-learn-13328.traj.json"),
    ),
    (
        "sympy__sympy-15875.traj.json",
        include_bytes!("../../../../data/samples/sympy__sympy-15875.traj.json"),
    ),
    (
        "gpt4__swe-bench-dev-easy_first_only__default__t-0.00__p-0.95__pydicom__pydicom-1458.traj",
        include_bytes!(
            "../../../../data/samples/gpt4__swe-bench-dev-easy_first_only__default__t-0.00__p-0.95__pydicom__pydicom-1458.traj"
        ),
    ),
    (
        "replay__marshmallow-code__marshmallow-1867__function_calling__marshmallow-code__marshmallow-1867.traj",
        include_bytes!(
            "../../../../data/samples/replay__marshmallow-code__marshmallow-1867__function_calling__marshmallow-code__marshmallow-1867.traj"
        ),
    ),
];

/// `32k` -> 32000, `1m` -> 1000000.
pub fn parse_window(text: &str) -> Result<u64> {
    let t = text.trim().to_ascii_lowercase();
    let (digits, unit) = match t.strip_suffix('k') {
        Some(d) => (d, 1_000),
        None => match t.strip_suffix('m') {
            Some(d) => (d, 1_000_000),
            None => (t.as_str(), 1),
        },
    };
    let n: f64 = digits
        .parse()
        .with_context(|| format!("invalid window `{text}`: use e.g. 32000, 32k or 1m"))?;
    if n <= 0.0 {
        bail!("invalid window `{text}`: must be positive");
    }
    Ok((n * unit as f64) as u64)
}

fn policy(spec: &str, pools: &mut Vec<Arc<ExecPool>>) -> Result<(String, PolicyFactory)> {
    if let Some(factory) = policies::builtin(spec) {
        return Ok((spec.to_owned(), factory));
    }
    if let Some(command) = spec.strip_prefix("exec:") {
        if command.trim().is_empty() {
            bail!("`exec:` needs a command, e.g. exec:'python3 my_policy.py'");
        }
        let pool = ExecPool::new(command);
        pools.push(pool.clone());
        let name = std::env::var("CTXGC_EXEC_NAME").unwrap_or_else(|_| {
            format!(
                "exec:{}",
                command.split_whitespace().last().unwrap_or(command)
            )
        });
        let shown = name.clone();
        return Ok((
            name,
            Box::new(move |w| Box::new(Exec::new(shown.clone(), pool.clone(), w))),
        ));
    }
    let path = Path::new(spec);
    if path.extension().is_some_and(|e| e == "toml") {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read policy file {spec}"))?;
        let config = Config::from_toml(&text).with_context(|| format!("in policy file {spec}"))?;
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| spec.to_owned());
        let shown = name.clone();
        return Ok((
            name,
            Box::new(move |w| Box::new(Ctxgc::new(w, config.clone(), shown.clone()))),
        ));
    }
    bail!(
        "unknown policy `{spec}`: use one of {}, a ctxgc.toml file, or exec:CMD",
        policies::BUILTIN.join(", ")
    )
}

#[derive(Serialize)]
struct Table {
    window: u64,
    cache: &'static str,
    model: String,
    rows: Vec<Row>,
}

#[derive(Serialize)]
struct Output {
    sessions: usize,
    tables: Vec<Table>,
    validation: Vec<SessionCheck>,
}

fn load(args: &ReplayArgs) -> Result<Vec<Transcript>> {
    let mut out = Vec::new();
    if args.sample {
        for (name, bytes) in SAMPLES {
            out.extend(
                import::import_bytes(Path::new(name), bytes)?
                    .into_iter()
                    .map(|i| i.transcript),
            );
        }
    }
    for result in import::import_paths(&args.paths) {
        out.push(result?.transcript);
    }
    if out.is_empty() {
        bail!("nothing to replay: give transcript files or directories, or --sample");
    }
    Ok(out)
}

pub fn run(_config: &Config, args: ReplayArgs) -> Result<ExitCode> {
    let transcripts = load(&args)?;
    let windows: Vec<u64> = args
        .window
        .iter()
        .map(|w| parse_window(w))
        .collect::<Result<_>>()?;
    let specs = if args.policy.is_empty() {
        policies::BUILTIN.iter().map(|s| (*s).to_owned()).collect()
    } else {
        args.policy.clone()
    };
    let mut pools = Vec::new();
    let policies: Vec<(String, PolicyFactory)> = specs
        .iter()
        .map(|s| policy(s, &mut pools))
        .collect::<Result<_>>()?;
    let mut caches: Vec<CacheKind> = Vec::new();
    for name in &args.cache {
        caches.push(CacheKind::parse(name).with_context(|| {
            format!("unknown cache model `{name}`: use anthropic, openai or vllm")
        })?);
    }
    let priced: Vec<(CacheKind, ModelPrice)> = caches
        .iter()
        .map(|&c| (c, prices::default_for(c)))
        .collect();
    let cache_spec: Vec<(CacheKind, usize)> =
        priced.iter().map(|(c, p)| (*c, p.min_cacheable)).collect();

    let mut units: Vec<(usize, usize, u64)> = Vec::new();
    for t in 0..transcripts.len() {
        for p in 0..policies.len() {
            units.extend(windows.iter().map(|&w| (t, p, w)));
        }
    }
    let bar = if std::io::stderr().is_terminal() && !args.json {
        let bar = indicatif::ProgressBar::new(units.len() as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} session runs, {elapsed}")
                .expect("valid template"),
        );
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    let started = std::time::Instant::now();
    let runs: Vec<SessionRun> = units
        .par_iter()
        .map(|&(t, p, w)| {
            let run = replay(t, &transcripts[t], &policies[p].1, w, &cache_spec);
            bar.inc(1);
            run
        })
        .collect();
    bar.finish_and_clear();
    let elapsed = started.elapsed();
    let failures: Vec<String> = pools.iter().flat_map(|p| p.errors()).collect();
    for f in &failures {
        eprintln!("error: external policy: {f}");
    }

    let names: Vec<String> = policies.iter().map(|(n, _)| n.clone()).collect();
    let mut tables = Vec::new();
    for &w in &windows {
        for (cache, price) in &priced {
            tables.push(Table {
                window: w,
                cache: cache.name(),
                model: price.name.clone(),
                rows: report::rows(&runs, w, *cache, price, &names),
            });
        }
    }
    let validation: Vec<SessionCheck> = transcripts
        .iter()
        .enumerate()
        .filter_map(|(i, t)| {
            let run = runs
                .iter()
                .find(|r| r.source == i && r.policy == "none" && r.window == windows[0])?;
            validate::check(t, run, "openai")
        })
        .collect();
    if let Some(path) = &args.html {
        let chart = match &args.chart_session {
            Some(id) => transcripts
                .iter()
                .position(|t| &t.id == id)
                .with_context(|| format!("--chart-session {id}: no such session"))?,
            None => (0..transcripts.len())
                .max_by_key(|&i| transcripts[i].messages.len())
                .unwrap_or(0),
        };
        let html = crate::html::report(
            &tables
                .iter()
                .map(|t| (t.window, t.cache, t.model.as_str(), t.rows.as_slice()))
                .collect::<Vec<_>>(),
            &runs,
            chart,
            &transcripts[chart].id,
            windows[0],
        );
        std::fs::write(path, html).with_context(|| format!("cannot write {}", path.display()))?;
    }
    let output = Output {
        sessions: transcripts.len(),
        tables,
        validation,
    };
    let code = if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&output)?);
        return Ok(code);
    }
    println!(
        "Replayed {} sessions x {} policies x {} windows ({} session runs) in {:.1} s.\n",
        output.sessions,
        policies.len(),
        windows.len(),
        runs.len(),
        elapsed.as_secs_f64()
    );
    for table in &output.tables {
        println!(
            "Window {} tokens, {} cache model, {} prices",
            num(table.window),
            table.cache,
            table.model
        );
        println!("{}\n", render_rows(&table.rows));
    }
    print_validation(&output.validation);
    if let Some(path) = &args.html {
        println!("HTML report: {}", path.display());
    }
    Ok(code)
}

fn render_rows(rows: &[Row]) -> String {
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.policy.clone(),
                r.requests.to_string(),
                num(r.input_tokens),
                format!("{:.1}%", r.cached_share * 100.0),
                format!("${:.2}", r.cost),
                r.cost_vs_none.map_or("-".into(), |c| format!("{:.2}x", c)),
                format!("{:.1}", r.events_per_100_turns),
                r.summarizer_calls.to_string(),
                r.earliest_changed_median
                    .map_or("-".into(), |e| e.to_string()),
                num(r.peak_prompt as u64),
                r.overflows.to_string(),
                r.recall
                    .map_or("-".into(), |x| format!("{:.1}%", x * 100.0)),
            ]
        })
        .collect();
    render(
        &[
            "policy",
            "requests",
            "input tokens",
            "cached",
            "cost",
            "vs none",
            "events/100 turns",
            "summarizer calls",
            "earliest changed (median)",
            "peak prompt",
            "overflows",
            "recall",
        ],
        &body,
    )
}

fn print_validation(checks: &[SessionCheck]) {
    if checks.is_empty() {
        return;
    }
    let prompt = validate::spread(checks.iter().map(|c| c.prompt_ratio).collect());
    let cached = validate::spread(checks.iter().filter_map(|c| c.cached_ratio).collect());
    let rec: f64 =
        checks.iter().map(|c| c.recorded_cached_share).sum::<f64>() / checks.len() as f64;
    let sim: f64 =
        checks.iter().map(|c| c.simulated_cached_share).sum::<f64>() / checks.len() as f64;
    println!(
        "Simulator vs recorded usage (policy none, OpenAI cache model, {} sessions with recorded usage):",
        checks.len()
    );
    if let Some((m, lo, hi)) = prompt {
        println!(
            "  prompt tokens, simulated / recorded per session: median {m:.3} (p10 {lo:.3}, p90 {hi:.3})"
        );
    }
    if let Some((m, lo, hi)) = cached {
        println!(
            "  cached tokens, simulated / recorded per session: median {m:.3} (p10 {lo:.3}, p90 {hi:.3})"
        );
    }
    println!(
        "  cached share of prompt tokens: recorded {:.1}%, simulated {:.1}% (mean over sessions)\n",
        rec * 100.0,
        sim * 100.0
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_parse() {
        assert_eq!(parse_window("32k").unwrap(), 32_000);
        assert_eq!(parse_window("1m").unwrap(), 1_000_000);
        assert_eq!(parse_window("64000").unwrap(), 64_000);
        assert!(
            parse_window("big")
                .unwrap_err()
                .to_string()
                .contains("invalid window `big`")
        );
    }

    #[test]
    fn unknown_policies_are_named() {
        let err = policy("magic", &mut Vec::new()).err().unwrap().to_string();
        assert!(
            err.contains("unknown policy `magic`") && err.contains("claude-code"),
            "{err}"
        );
    }
}
