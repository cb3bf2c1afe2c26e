//! `ctxgc replay`: real transcripts through every policy, with cache models, prices and recall.

mod args;
mod calibration;
mod decisions;
mod load;
mod output;
mod relevance;
mod view;

use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use ctxgc_core::Transcript;
use ctxgc_core::config::Config;
use ctxgc_replay::cache::CacheKind;
use std::sync::Arc;

use ctxgc_replay::causes::{self, CacheWrite};
use ctxgc_replay::misses::ClientMisses;
use ctxgc_replay::policies::{self, Ctxgc, Exec, ExecPool, PolicyFactory};
use ctxgc_replay::prices::{self, Catalog, Pricing};
use ctxgc_replay::report::{self};
use ctxgc_replay::run::CLIENT_WINDOW;
use ctxgc_replay::run::{ClientModel, SessionRun, client_model, replay};
use ctxgc_replay::validate::{self, SessionCheck};
use ctxgc_replay::written;
use rayon::iter::{IntoParallelRefIterator, ParallelIterator};

use super::parse_window;
use crate::table::{num, policy_cells, render};
pub use args::ReplayArgs;
use calibration::calibrate;
use load::{SKIPPED_SHOWN, load};
use output::*;
use view::*;

fn policy(
    spec: &str,
    config: &Config,
    exec_timeout: std::time::Duration,
    pools: &mut Vec<Arc<ExecPool>>,
) -> Result<(String, PolicyFactory)> {
    if spec == "ctxgc" {
        // The built-in `ctxgc` is the configuration in force (`--config`).
        let config = config.clone();
        return Ok((
            spec.to_owned(),
            Box::new(move |c| Box::new(Ctxgc::for_session(c, config.clone(), "ctxgc".into()))),
        ));
    }
    if let Some(factory) = policies::builtin(spec) {
        return Ok((spec.to_owned(), factory));
    }
    if let Some(command) = spec.strip_prefix("exec:") {
        if command.trim().is_empty() {
            bail!("`exec:` needs a command, e.g. exec:'python3 my_policy.py'");
        }
        let pool = ExecPool::with_timeout(command, exec_timeout);
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
            Box::new(move |c| {
                Box::new(Exec::new(
                    shown.clone(),
                    pool.clone(),
                    c.window,
                    c.session.to_owned(),
                ))
            }),
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
            Box::new(move |c| Box::new(Ctxgc::for_session(c, config.clone(), shown.clone()))),
        ));
    }
    bail!(
        "unknown policy `{spec}`: use one of {}, a ctxgc.toml file, or exec:CMD",
        policies::BUILTIN.join(", ")
    )
}

/// The windows to replay at: those given (`client`: each session's client's own), or by
/// default the client's for a set of client logs and 32K, 64K and 200K for other transcripts.
fn windows_of(given: &[String], transcripts: &[Transcript]) -> Result<Vec<u64>> {
    if given.is_empty() {
        let clients = !transcripts.is_empty()
            && transcripts
                .iter()
                .all(|t| ctxgc_replay::run::client_window(t).is_some());
        return Ok(if clients {
            vec![CLIENT_WINDOW]
        } else {
            vec![32_000, 64_000, 200_000]
        });
    }
    given
        .iter()
        .map(|w| match w.trim() {
            "client" => Ok(CLIENT_WINDOW),
            w => parse_window(w),
        })
        .collect()
}

fn progress(len: usize, quiet: bool) -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() || quiet {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len as u64);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} session runs, {elapsed}")
    {
        bar.set_style(style);
    }
    bar
}

pub fn run(config: &Config, args: ReplayArgs) -> Result<ExitCode> {
    let (transcripts, sets, skipped) = load(&args)?;
    if let Some(out) = &args.fit_relevance {
        return relevance::fit(
            &transcripts,
            &sets,
            config,
            out,
            args.relevance_folds.as_deref(),
        );
    }
    let mut config = config.clone();
    if let Some(path) = &args.relevance {
        config.engine.relevance = std::sync::Arc::new(relevance::read(path)?);
    }
    let config = &config;
    for s in skipped.iter().take(SKIPPED_SHOWN) {
        eprintln!("skipped {}: {}", s.path, s.why);
    }
    if skipped.len() > SKIPPED_SHOWN {
        eprintln!(
            "... and {} more files that are not sessions (all of them in --json)",
            skipped.len() - SKIPPED_SHOWN
        );
    }
    let windows = windows_of(&args.window, &transcripts)?;
    let specs = if args.policy.is_empty() {
        policies::BUILTIN.iter().map(|s| (*s).to_owned()).collect()
    } else {
        args.policy.clone()
    };
    if !(args.exec_timeout > 0.0 && args.exec_timeout.is_finite()) {
        bail!(
            "invalid --exec-timeout {}: give a positive number of seconds",
            args.exec_timeout
        );
    }
    let exec_timeout = std::time::Duration::from_secs_f64(args.exec_timeout);
    let mut pools = Vec::new();
    let mut policies: Vec<(String, PolicyFactory)> = specs
        .iter()
        .map(|s| policy(s, config, exec_timeout, &mut pools))
        .collect::<Result<_>>()?;
    // The tables show the policies asked for; what the client itself kept in view (`of
    // client's`, `--misses`) is what `none` shows, so it runs beside them, unshown.
    let names: Vec<String> = policies.iter().map(|(n, _)| n.clone()).collect();
    if !names.iter().any(|n| n == "none") {
        policies.push((
            "none".into(),
            policies::builtin("none").context("the none policy")?,
        ));
    }
    let mut caches: Vec<CacheKind> = Vec::new();
    for name in &args.cache {
        caches.push(CacheKind::parse(name).with_context(|| {
            format!("unknown cache model `{name}`: use anthropic, openai, gemini or vllm")
        })?);
    }
    let catalog = match &args.cache_models {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read --cache-models {}", path.display()))?;
            Catalog::parse(&text).with_context(|| format!("in {}", path.display()))?
        }
        None => prices::builtin(),
    };
    let fallback = caches.first().copied().unwrap_or(CacheKind::Anthropic);
    let pricing = Pricing::of(&catalog, &transcripts, &caches, fallback);
    for warning in pricing.warnings(&catalog, &transcripts) {
        eprintln!("{warning}");
    }
    let cache_spec = &pricing.spec;
    if args.calibrate {
        return calibrate(&transcripts, &sets, &catalog, &pricing, windows[0]);
    }
    let models: Vec<Option<ClientModel>> = transcripts.iter().map(client_model).collect();

    let mut units: Vec<(usize, usize, u64)> = Vec::new();
    for t in 0..transcripts.len() {
        for p in 0..policies.len() {
            units.extend(windows.iter().map(|&w| (t, p, w)));
        }
    }
    let bar = progress(units.len(), args.json);
    let started = std::time::Instant::now();
    let runs: Vec<SessionRun> = units
        .par_iter()
        .map(|&(t, p, w)| {
            let run = replay(
                t,
                &transcripts[t],
                &policies[p].1,
                w,
                &cache_spec[t],
                models[t].as_ref(),
                args.misses || args.explain.is_some(),
            );
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

    if let Some(query) = &args.explain {
        for line in decisions::explain(query, &runs) {
            outln!("{line}")?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(query) = &args.explain_cache {
        let explained = explain_sections(
            query,
            &transcripts,
            &runs,
            &models,
            &catalog,
            &pricing,
            windows[0],
        )?;
        for section in explained {
            outln!("{}", section.title)?;
            let header: Vec<&str> = section.header.iter().map(String::as_str).collect();
            outln!("{}\n", render(&header, &section.rows))?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    // `recorded` when every session is a client log with the usage it was billed.
    let all_recorded = transcripts
        .iter()
        .all(|t| t.recording.is_some() && t.messages.iter().any(|m| m.usage.is_some()));
    // `none` against the bill, at a window: each session's simulated requests against the
    // usage it was billed for the same requests (those the log recorded usage for).
    let checks_at = |w: u64| -> Vec<SessionCheck> {
        transcripts
            .iter()
            .enumerate()
            .filter_map(|(i, t)| {
                let run = runs
                    .iter()
                    .find(|r| r.source == i && r.policy == "none" && r.window == w)?;
                let mut check = validate::check(
                    t,
                    (&sets[i].set, &sets[i].user),
                    run,
                    pricing.own_cache[i].name(),
                    &pricing.own[i],
                )?;
                check.from_bill = models[i]
                    .as_ref()
                    .map_or(0.0, |m| m.attached_tokens(t) as f64);
                Some(check)
            })
            .collect()
    };
    let validation = checks_at(windows[0]);
    let mut tables = Vec::new();
    for &w in &windows {
        for (k, &cache) in caches.iter().enumerate() {
            let prices = &pricing.per_cache[k];
            // The bill is comparable only where each session is priced as billed.
            let recorded = (all_recorded && pricing.own_cache.iter().all(|&k| k == cache))
                .then(|| report::recorded_row(&transcripts, &pricing.own))
                .flatten();
            // One `none` against the bill per report: the row's `vs none` and the note are the
            // validation's aggregate over the requests both hold, not the rows' totals (the
            // none row also prices requests the log recorded no usage for).
            let bill = recorded.as_ref().and_then(|_| {
                let other;
                let checks = if w == windows[0] {
                    &validation
                } else {
                    other = checks_at(w);
                    &other
                };
                let refs: Vec<&SessionCheck> = checks.iter().collect();
                let cost = validate::aggregate(&refs)[4]?;
                Some(BillCheck {
                    none_over_bill: cost,
                    requests: checks.iter().map(|c| c.requests).sum(),
                })
            });
            let mut rows = report::rows(&runs, w, cache, prices, &names, recorded);
            if let (Some(bill), Some(row)) =
                (&bill, rows.iter_mut().find(|r| r.policy == "recorded"))
            {
                row.cost_vs_none = Some(1.0 / bill.none_over_bill);
            }
            tables.push(Table {
                window: w,
                cache: cache.name(),
                model: Pricing::label(prices),
                rows,
                bill,
            });
        }
    }
    let cache_writes: Vec<CacheWrite> = transcripts
        .iter()
        .zip(&models)
        .filter_map(|(t, m)| {
            let m = m.as_ref()?;
            Some(causes::classify(t, m.calibration, &m.attachments))
        })
        .flatten()
        .collect();
    let writes_by_policy: Vec<PolicyWrites> = if transcripts.iter().any(|t| t.recording.is_some()) {
        names
            .iter()
            .map(|policy| {
                let mut total = [0u64; written::RUN_CAUSES.len()];
                for run in runs
                    .iter()
                    .filter(|r| &r.policy == policy && r.window == windows[0] && r.on_client_log)
                {
                    let cache = pricing.own_cache[run.source].name();
                    let per = written::classify_run(&transcripts[run.source], run, cache);
                    for (slot, n) in total.iter_mut().zip(per) {
                        *slot += n;
                    }
                }
                PolicyWrites {
                    policy: policy.clone(),
                    window: windows[0],
                    written: written::RUN_CAUSES.iter().copied().zip(total).collect(),
                }
            })
            .collect()
    } else {
        Vec::new()
    };
    let by_tool = if args.by_tool || transcripts.iter().any(|t| t.recording.is_some()) {
        windows
            .iter()
            .map(|&w| kind_table(&runs, w, &names))
            .collect()
    } else {
        Vec::new()
    };
    let client_misses: Vec<ClientMisses> = if args.misses {
        let runs = &runs;
        windows
            .iter()
            .flat_map(|&w| {
                names
                    .iter()
                    .filter_map(move |p| ctxgc_replay::misses::client_misses(runs, w, p))
            })
            .collect()
    } else {
        Vec::new()
    };
    let calibration = transcripts
        .iter()
        .zip(&models)
        .filter_map(|(t, m)| {
            Some(CalibrationRow {
                session: t.id.clone(),
                model: m.clone()?,
            })
        })
        .collect();
    let by_user = costs_by_user(&runs, &sets, &pricing, &names, windows[0]);
    let output = Output {
        sessions: transcripts.len(),
        skipped,
        calibration,
        tables,
        validation,
        by_user,
        cache_writes,
        writes_by_policy,
        by_tool,
        client_misses,
    };
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
            &output
                .tables
                .iter()
                .map(|t| (t.window, t.cache, t.model.as_str(), t.rows.as_slice()))
                .collect::<Vec<_>>(),
            &runs,
            chart,
            &transcripts[chart].id,
            windows[0],
            &sections(&output),
            Some(&bill_chart(
                &transcripts[chart],
                &runs,
                chart,
                &pricing,
                windows[0],
            )),
        );
        std::fs::write(path, html).with_context(|| format!("cannot write {}", path.display()))?;
    }
    let code = if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&output)?)?;
        return Ok(code);
    }
    let own_label = Pricing::label(&pricing.own);
    outln!(
        "Replayed {} sessions x {} policies x {} windows ({} session runs) in {:.1} s{}.\n",
        output.sessions,
        policies.len(),
        windows.len(),
        runs.len(),
        elapsed.as_secs_f64(),
        if output.skipped.is_empty() {
            String::new()
        } else {
            format!("; {} files skipped (not sessions)", output.skipped.len())
        }
    )?;
    for table in &output.tables {
        let window = if table.window == CLIENT_WINDOW {
            "Each session at its client's own window".to_owned()
        } else {
            format!("Window {} tokens", num(table.window))
        };
        outln!(
            "{window}, {} cache model, {} prices",
            table.cache,
            table.model
        )?;
        let (header, cells) = policy_cells(&table.rows);
        outln!("{}", render(&header, &cells))?;
        outln!("{}", crate::table::WITH_RECALLS_NOTE)?;
        if let Some(note) = path_note(&table.rows) {
            outln!("{note}")?;
        }
        if let Some(note) = recorded_note(&table.rows, table.bill, &own_label) {
            outln!("{note}")?;
        }
        outln!()?;
    }
    for section in sections(&output) {
        outln!("{}", section.title)?;
        let header: Vec<&str> = section.header.iter().map(String::as_str).collect();
        outln!("{}\n", render(&header, &section.rows))?;
    }
    if let Some(path) = &args.html {
        outln!("HTML report: {}", path.display())?;
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_policies_are_named() {
        let err = policy(
            "magic",
            &Config::default(),
            std::time::Duration::from_secs(1),
            &mut Vec::new(),
        )
        .err()
        .unwrap()
        .to_string();
        assert!(
            err.contains("unknown policy `magic`") && err.contains("claude-code"),
            "{err}"
        );
    }
}
