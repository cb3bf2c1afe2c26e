//! `ctxgc replay`: real transcripts through every policy, with cache models, prices and recall.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::Args;
use ctxgc_core::Transcript;
use ctxgc_core::config::Config;
use ctxgc_formats::import::{self, history};
use ctxgc_replay::cache::CacheKind;
use std::sync::Arc;

use ctxgc_replay::causes::{self, CacheWrite};
use ctxgc_replay::misses::ClientMisses;
use ctxgc_replay::policies::{self, Ctxgc, Exec, ExecPool, PolicyFactory};
use ctxgc_replay::prices::{self, Catalog, Pricing};
use ctxgc_replay::report::{self, Row};
use ctxgc_replay::run::CLIENT_WINDOW;
use ctxgc_replay::run::{ClientModel, SessionRun, client_model, replay};
use ctxgc_replay::validate::{self, SessionCheck};
use ctxgc_replay::written;
use rayon::iter::{IntoParallelRefIterator, ParallelIterator};
use serde::Serialize;
use std::collections::BTreeMap;

use super::parse_window;
use crate::table::{Section, num, policy_cells, render};

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Transcript files or directories, searched recursively: your own Claude Code history
    /// (`~/.claude/projects`) or Codex history (`~/.codex/sessions`) works as it is (see `ctxgc
    /// import` for the formats; files that are not sessions are listed and skipped). Nothing
    /// leaves this machine.
    #[arg(value_name = "FILE_OR_DIR")]
    pub paths: Vec<PathBuf>,
    /// Also replay this user's own agent history, found where each agent keeps it (Claude
    /// Code, Codex CLI, Gemini CLI, Hermes, opencode, Cline, Roo Code, Aider; on Linux, macOS
    /// and Windows). The default when no path and no --sample is given. Only session files are
    /// read: credential files beside them are never opened.
    #[arg(long)]
    pub history: bool,
    /// With --history: only these agents, comma-separated (claude-code, codex, gemini-cli,
    /// hermes, opencode, cline, roo-code, aider).
    #[arg(long, value_delimiter = ',', value_name = "NAME")]
    pub agent: Vec<String>,
    /// Replay the sample sessions bundled with ctxgc.
    #[arg(long)]
    pub sample: bool,
    /// Context windows, comma-separated (`32k,64k,200k`), or `client`: each session at the
    /// window its client ran (its model's: Claude 200K or 1M, GPT-5.x 272K). Default: `client`
    /// when every session is a client's log, else `32k,64k,200k`.
    #[arg(long, value_delimiter = ',')]
    pub window: Vec<String>,
    /// Policies: built-in names, a ctxgc.toml file, or `exec:CMD`. Default: all built-ins.
    #[arg(long, value_delimiter = ',')]
    pub policy: Vec<String>,
    /// Cache models to price with, comma-separated (anthropic, openai, gemini, vllm). A session
    /// whose log names its model is priced with that model's row under its own provider's cache;
    /// the other tables price it with their provider's default row.
    #[arg(long, default_value = "anthropic,openai", value_delimiter = ',')]
    pub cache: Vec<String>,
    /// A cache model table to use instead of the built-in one (the same TOML shape as
    /// `crates/ctxgc-replay/data/prices.toml`: add a model the table lacks, or change a price).
    #[arg(long, value_name = "FILE")]
    pub cache_models: Option<PathBuf>,
    /// For each session whose id contains SESSION: every request's recorded and simulated cache
    /// reads and writes (policy none), with the cause of each difference.
    #[arg(long, value_name = "SESSION")]
    pub explain_cache: Option<String>,
    /// Fit what the prefix caches' documentation leaves open (routing misses, how far a hit falls
    /// short) on the sessions' billed usage, and report the error on each set (or fold of
    /// sessions) left out of the fit, instead of the replay.
    #[arg(long)]
    pub calibrate: bool,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Also write a self-contained HTML report with charts.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Session shown in the HTML report's per-turn chart (default: the longest).
    #[arg(long)]
    pub chart_session: Option<String>,
    /// Also break input tokens down by tool (shell tools by command kind) and show what each
    /// policy keeps of each (always shown for client logs).
    #[arg(long)]
    pub by_tool: bool,
    /// Also list, for client logs, what each policy hid that the client itself still showed:
    /// by the tool it came from, by its age in turns, and the first examples.
    #[arg(long)]
    pub misses: bool,
    /// Seconds an `exec:` policy may take to answer one request; past that it is stopped, the
    /// failure reported and the request sent unchanged.
    #[arg(long, default_value_t = 120.0, value_name = "SECONDS")]
    pub exec_timeout: f64,
}

/// The sample sessions, embedded so `--sample` works from any directory.
const SAMPLES: &[(&str, &[u8])] = &[
    (
        "django__django-11885.traj.json",
        include_bytes!("../../samples/django__django-11885.traj.json"),
    ),
    (
        "django__django-14725.traj.json",
        include_bytes!("../../samples/django__django-14725.traj.json"),
    ),
    (
        "scikit-learn__scikit-learn-13328.traj.json",
        include_bytes!("../../samples/scikit-learn__scikit-learn-13328.traj.json"),
    ),
    (
        "sympy__sympy-15875.traj.json",
        include_bytes!("../../samples/sympy__sympy-15875.traj.json"),
    ),
    (
        "gpt4__swe-bench-dev-easy_first_only__default__t-0.00__p-0.95__pydicom__pydicom-1458.traj",
        include_bytes!(
            "../../samples/gpt4__swe-bench-dev-easy_first_only__default__t-0.00__p-0.95__pydicom__pydicom-1458.traj"
        ),
    ),
    (
        "replay__marshmallow-code__marshmallow-1867__function_calling__marshmallow-code__marshmallow-1867.traj",
        include_bytes!(
            "../../samples/replay__marshmallow-code__marshmallow-1867__function_calling__marshmallow-code__marshmallow-1867.traj"
        ),
    ),
];

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

#[derive(Serialize)]
struct Table {
    window: u64,
    cache: &'static str,
    model: String,
    rows: Vec<Row>,
    /// `none` against the bill, when the table has a `recorded` row.
    #[serde(skip_serializing_if = "Option::is_none")]
    bill: Option<BillCheck>,
}

/// One policy against `none` for each user's sessions (first window, each under its own
/// provider's cache and prices): the report's own rows, over that user's runs.
#[derive(Serialize)]
struct UserCosts {
    policy: String,
    window: u64,
    /// (user, cost over none's, share of what the client kept in view that the policy showed),
    /// in the order users first appear.
    users: Vec<(String, f64, Option<f64>)>,
}

/// [`UserCosts`] of every policy, when `origins` name more than one user. A user whose
/// sessions ran on more than one provider's cache has no single price table and is left out.
fn costs_by_user(
    runs: &[SessionRun],
    origins: &[Origin],
    pricing: &Pricing,
    names: &[String],
    window: u64,
) -> Vec<UserCosts> {
    let mut users: Vec<&str> = Vec::new();
    for o in origins {
        if !users.contains(&o.user.as_str()) {
            users.push(&o.user);
        }
    }
    if users.len() < 2 {
        return Vec::new();
    }
    let per_user: Vec<(&str, Vec<Row>)> = users
        .iter()
        .filter_map(|&user| {
            let mut caches = (0..origins.len())
                .filter(|&i| origins[i].user == user)
                .map(|i| pricing.own_cache[i]);
            let cache = caches.next()?;
            if caches.any(|c| c != cache) {
                return None;
            }
            let keep = |r: &SessionRun| origins[r.source].user == user;
            let rows = report::rows_of(runs, &keep, window, cache, &pricing.own, names, None);
            Some((user, rows))
        })
        .collect();
    names
        .iter()
        .filter(|p| p.as_str() != "none")
        .map(|policy| UserCosts {
            policy: policy.clone(),
            window,
            users: per_user
                .iter()
                .filter_map(|(user, rows)| {
                    let row = rows.iter().find(|r| &r.policy == policy)?;
                    Some(((*user).to_owned(), row.cost_vs_none?, row.recall_of_client))
                })
                .collect(),
        })
        .collect()
}

/// The simulated `none` over the billed cost, over the requests both hold (the validation's
/// aggregate): the one figure a report gives for how far the lab is from the bill.
#[derive(Serialize, Clone, Copy)]
struct BillCheck {
    none_over_bill: f64,
    requests: usize,
}

/// Input tokens by kind at one window: `none`'s, and each policy's as a share of them.
#[derive(Serialize)]
struct KindTable {
    window: u64,
    kinds: Vec<KindRow>,
}

#[derive(Serialize)]
struct KindRow {
    kind: String,
    none_tokens: u64,
    share_of_input: f64,
    /// Each policy's tokens of this kind over `none`'s, in table order.
    kept: Vec<(String, f64)>,
}

#[derive(Serialize)]
struct Output {
    sessions: usize,
    skipped: Vec<Skipped>,
    calibration: Vec<CalibrationRow>,
    tables: Vec<Table>,
    validation: Vec<SessionCheck>,
    /// Each policy's cost against `none`, user by user, when the sessions are several users'.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    by_user: Vec<UserCosts>,
    cache_writes: Vec<CacheWrite>,
    /// Each policy's simulated cache writes by cause, on the client logs (first window, each
    /// session under its own cache model).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    writes_by_policy: Vec<PolicyWrites>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    by_tool: Vec<KindTable>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    client_misses: Vec<ClientMisses>,
}

#[derive(Serialize)]
struct PolicyWrites {
    policy: String,
    window: u64,
    /// Tokens written, by cause (`written::RUN_CAUSES`).
    written: BTreeMap<&'static str, u64>,
}

#[derive(Serialize)]
struct Skipped {
    path: String,
    why: String,
}

#[derive(Serialize)]
struct CalibrationRow {
    session: String,
    #[serde(flatten)]
    model: ClientModel,
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

/// "at a 200,000-token window", or "at each client's own window".
fn at_window(window: u64) -> String {
    if window == CLIENT_WINDOW {
        "at each client's own window".into()
    } else {
        format!("at a {}-token window", num(window))
    }
}

/// How many skipped files the terminal report names.
const SKIPPED_SHOWN: usize = 20;

/// Where a session came from: its set (the path it was found under) and its user
/// ([`ctxgc_replay::users::user_of`]).
struct Origin {
    set: String,
    user: String,
}

impl Origin {
    /// A session of a set of one user.
    fn of_set(set: &str) -> Origin {
        Origin {
            set: set.to_owned(),
            user: set.to_owned(),
        }
    }
}

/// The sessions to replay with where each came from, and the files that are not sessions
/// (with why).
fn load(args: &ReplayArgs) -> Result<(Vec<Transcript>, Vec<Origin>, Vec<Skipped>)> {
    let mut out = Vec::new();
    let mut sets = Vec::new();
    if args.sample {
        for (name, bytes) in SAMPLES {
            for imported in import::import_bytes(Path::new(name), bytes)? {
                out.push(imported.transcript);
                sets.push(Origin::of_set("sample"));
            }
        }
    }
    let mut skipped = Vec::new();
    if args.history || (args.paths.is_empty() && !args.sample) {
        load_history(args, &mut out, &mut sets, &mut skipped)?;
    }
    for path in &args.paths {
        // A directory is a set; files given one by one belong to their directory's.
        let dir = if path.is_dir() {
            path.as_path()
        } else {
            path.parent().unwrap_or(path)
        };
        let set = dir.file_name().map_or_else(
            || dir.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        for result in import::import_paths(std::slice::from_ref(path)) {
            match result {
                Ok(imported) => {
                    // A client's log is one user's; an agent's trajectories (SWE-bench runs,
                    // named by task) are the set's.
                    let user = if imported.transcript.recording.is_some() {
                        ctxgc_replay::users::user_of(&imported.path, path, &set)
                    } else {
                        set.clone()
                    };
                    out.push(imported.transcript);
                    sets.push(Origin {
                        set: set.clone(),
                        user,
                    });
                }
                Err(e) => skipped.push(Skipped {
                    path: e.path.display().to_string(),
                    why: e.why,
                }),
            }
        }
    }
    if out.is_empty() {
        if let Some(first) = skipped.first() {
            bail!(
                "nothing to replay: no file is a session ({} skipped; {}: {})",
                skipped.len(),
                first.path,
                first.why
            );
        }
        bail!("nothing to replay: give transcript files or directories, or --sample");
    }
    Ok((out, sets, skipped))
}

/// Finds this user's agent histories, says what was found per agent, and imports them (each
/// agent a set).
fn load_history(
    args: &ReplayArgs,
    out: &mut Vec<Transcript>,
    sets: &mut Vec<Origin>,
    skipped: &mut Vec<Skipped>,
) -> Result<()> {
    for name in &args.agent {
        if !history::AGENTS.contains(&name.as_str()) {
            bail!(
                "unknown agent `{name}` for --agent: use {}",
                history::AGENTS.join(", ")
            );
        }
    }
    let home = history::Home::from_env()
        .context("cannot find your agents' history: no home folder (HOME or USERPROFILE)")?;
    let found = history::find(&home, &args.agent);
    let mut any = false;
    for agent in &found {
        if agent.files.is_empty() {
            let places: Vec<String> = agent
                .looked_in
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            eprintln!(
                "{}: nothing found (looked in {})",
                agent.agent,
                places.join(", ")
            );
            continue;
        }
        let first = out.len();
        let mut not_sessions = 0;
        for result in import::import_paths(&agent.files) {
            match result {
                Ok(imported) => {
                    out.push(imported.transcript);
                    sets.push(Origin::of_set(agent.agent));
                }
                Err(e) => {
                    not_sessions += 1;
                    skipped.push(Skipped {
                        path: e.path.display().to_string(),
                        why: e.why,
                    });
                }
            }
        }
        any |= out.len() > first;
        let times: Vec<i64> = out[first..]
            .iter()
            .filter_map(|t| t.recording.as_ref())
            .flat_map(|r| r.sent_ms.iter().flatten().copied())
            .collect();
        let span = match (times.iter().min(), times.iter().max()) {
            (Some(lo), Some(hi)) => format!("{} to {}", day(*lo), day(*hi)),
            _ => "dates not recorded".to_owned(),
        };
        eprintln!(
            "{}: {} sessions, {span}, {:.1} MB in {} files{}",
            agent.agent,
            out.len() - first,
            agent.bytes as f64 / 1e6,
            agent.files.len(),
            if not_sessions > 0 {
                format!(", {not_sessions} skipped (listed below)")
            } else {
                String::new()
            }
        );
    }
    if !any && args.paths.is_empty() && !args.sample {
        bail!(
            "nothing to replay: no agent history found on this machine (see above); give transcript files or directories, or --sample"
        );
    }
    Ok(())
}

/// A UTC calendar day, `2026-11-26`, of milliseconds since the Unix epoch.
fn day(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
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
                args.misses,
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

/// `--explain-cache`: for each session whose id contains `query` and that has billed usage,
/// every request recorded against simulated (policy none) with the cause of each difference,
/// the causes summed, and what the log billed beside the main thread (sub-agents).
fn explain_sections(
    query: &str,
    transcripts: &[Transcript],
    runs: &[SessionRun],
    models: &[Option<ClientModel>],
    catalog: &Catalog,
    pricing: &Pricing,
    window: u64,
) -> Result<Vec<Section>> {
    let none = policies::builtin("none").context("the none policy")?;
    let mut out = Vec::new();
    let billed = |i: usize| -> (usize, f64) {
        transcripts[i]
            .messages
            .iter()
            .filter_map(|m| m.usage.filter(|_| m.role == ctxgc_core::Role::Assistant))
            .fold((0, 0.0), |(n, cost), u| {
                (
                    n + 1,
                    cost + pricing.own[i]
                        .cost(&report::recorded_served(&u), u.completion_tokens as usize),
                )
            })
    };
    for (i, t) in transcripts.iter().enumerate() {
        if !t.id.contains(query) || !t.messages.iter().any(|m| m.usage.is_some()) {
            continue;
        }
        let kind = pricing.own_cache[i];
        let client = t.recording.as_ref().map(|r| r.client.as_str());
        let rules = catalog.rules_for_client(kind, &pricing.own[i], client);
        let own_run;
        let run = match runs
            .iter()
            .find(|r| r.source == i && r.policy == "none" && r.window == window)
        {
            Some(run) => run,
            None => {
                own_run = replay(
                    i,
                    t,
                    &none,
                    window,
                    &pricing.spec[i],
                    models[i].as_ref(),
                    false,
                );
                &own_run
            }
        };
        let writes = models[i]
            .as_ref()
            .map(|m| causes::classify(t, m.calibration, &m.attachments))
            .unwrap_or_default();
        let explained = ctxgc_replay::explain::explain(t, run, kind.name(), &rules, &writes);
        let cell = |v: usize| num(v as u64);
        let rows: Vec<Vec<String>> = explained
            .iter()
            .map(|e| {
                vec![
                    e.message.to_string(),
                    e.idle_ms
                        .map_or("-".into(), |ms| format!("{:.0}", ms as f64 / 1000.0)),
                    format!("{} / {}", num(e.prompt.0), num(e.prompt.1)),
                    format!("{} / {}", cell(e.recorded.cached), cell(e.simulated.cached)),
                    format!(
                        "{} / {}",
                        cell(e.recorded.written),
                        cell(e.simulated.written)
                    ),
                    format!(
                        "{} / {}",
                        cell(e.recorded.uncached),
                        cell(e.simulated.uncached)
                    ),
                    e.cause.clone(),
                ]
            })
            .collect();
        out.push(Section {
            title: format!(
                "Cache forensics: {} ({}, {} cache, priced as {}), policy none; each cell recorded / simulated",
                t.id,
                t.model.as_deref().unwrap_or("no model named"),
                kind.name(),
                pricing.own[i].cited()
            ),
            header: [
                "message",
                "idle s",
                "prompt",
                "cache reads",
                "cache writes",
                "uncached",
                "why they differ",
            ]
            .map(str::to_owned)
            .to_vec(),
            rows,
        });
        // The read tokens each cause accounts for.
        let mut by_cause: Vec<(&str, usize, i64)> = Vec::new();
        for e in &explained {
            let diff = e.simulated.cached as i64 - e.recorded.cached as i64;
            match by_cause.iter_mut().find(|(n, _, _)| *n == e.kind) {
                Some((_, count, sum)) => {
                    *count += 1;
                    *sum += diff;
                }
                None => by_cause.push((e.kind, 1, diff)),
            }
        }
        let (requests, cost) = billed(i);
        let mut rows: Vec<Vec<String>> = by_cause
            .into_iter()
            .map(|(name, count, diff)| {
                vec![name.to_owned(), count.to_string(), format!("{diff:+}")]
            })
            .collect();
        let agents: Vec<usize> = (0..transcripts.len())
            .filter(|&j| transcripts[j].id.starts_with(&format!("{}.agent-", t.id)))
            .collect();
        if !agents.is_empty() {
            let (n, c) = agents
                .iter()
                .map(|&j| billed(j))
                .fold((0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1));
            rows.push(vec![
                format!(
                    "beside the main thread: {} sub-agent sessions, ${c:.2} billed ({:.1}% of ${:.2} with the main thread's)",
                    agents.len(),
                    c * 100.0 / (c + cost).max(1e-12),
                    c + cost
                ),
                n.to_string(),
                "-".into(),
            ]);
        }
        out.push(Section {
            title: format!(
                "Why {}'s {} requests differ: requests per cause, and the cache reads the lab served beyond the bill (+) or short of it (-)",
                t.id, requests
            ),
            header: ["cause", "requests", "simulated - recorded reads"]
                .map(str::to_owned)
                .to_vec(),
            rows,
        });
    }
    if out.is_empty() {
        bail!("--explain-cache {query}: no session with billed usage has an id containing it");
    }
    Ok(out)
}

/// What groups sessions for leaving them out: their user or their set.
type OriginKey = fn(&Origin) -> &str;

/// A lifetime in whole seconds, `-` where there is none.
fn secs(ms: Option<i64>) -> String {
    ms.map_or("-".to_owned(), |ms| (ms / 1_000).to_string())
}

/// `--calibrate`: per prefix-cache provider, the values fitted on every session with billed
/// usage, then each set (or, with one set, each fifth of the sessions) left out in turn.
fn calibrate(
    transcripts: &[Transcript],
    sets: &[Origin],
    catalog: &Catalog,
    pricing: &Pricing,
    window: u64,
) -> Result<ExitCode> {
    use ctxgc_replay::cache::CacheRules;
    use ctxgc_replay::calibrate::{Errors, Observation, fit, leave_one_out, pooled};
    let none = policies::builtin("none").context("the none policy")?;
    let mut kinds: Vec<CacheKind> = pricing.own_cache.clone();
    kinds.sort_by_key(|k| k.name());
    kinds.dedup();
    let pct = |v: f64| format!("{v:.3}");
    let error_cells = |e: &Errors| {
        vec![
            pct(e.reads),
            pct(e.uncached),
            pct(e.cost),
            pct(e.median_cost),
        ]
    };
    let mut printed = false;
    for kind in kinds.into_iter().filter(|k| *k != CacheKind::Anthropic) {
        let mine: Vec<usize> = (0..transcripts.len())
            .filter(|&i| {
                pricing.own_cache[i] == kind
                    && transcripts[i].messages.iter().any(|m| m.usage.is_some())
            })
            .collect();
        let Some(&first) = mine.first() else { continue };
        let price = pricing.own[first].clone();
        // The table's values for these sessions: their client's own, when they all share one
        // the table has values for, else their provider's.
        let client_of = |i: usize| transcripts[i].recording.as_ref().map(|r| r.client.as_str());
        let base = catalog.rules_for_client(kind, &price, client_of(first));
        let base = if mine
            .iter()
            .all(|&i| catalog.rules_for_client(kind, &price, client_of(i)) == base)
        {
            base
        } else {
            catalog.rules(kind, &price)
        };
        // The prefix each request could read, unrounded, never expired and with nothing
        // calibrated: the fit applies each candidate's lifetime to the idle time before it.
        let raw = CacheRules {
            min_tokens: 0,
            step: 1,
            routing_miss: 0.0,
            lag_tokens: 0,
            ttl_ms: None,
            ttl_max_ms: None,
            ..base
        };
        // Left out in turn: each user when the sessions are several users', else each set, else
        // each fifth of the sessions.
        let names_by = |key: fn(&Origin) -> &str| {
            let mut names: Vec<&str> = mine.iter().map(|&i| key(&sets[i])).collect();
            names.sort_unstable();
            names.dedup();
            names
        };
        let (users, set_names) = (names_by(|o| &o.user), names_by(|o| &o.set));
        let (group_names, group_key): (&[&str], Option<OriginKey>) = if users.len() > 1 {
            (&users, Some(|o: &Origin| o.user.as_str()))
        } else if set_names.len() > 1 {
            (&set_names, Some(|o: &Origin| o.set.as_str()))
        } else {
            (&[], None)
        };
        let runs: Vec<(usize, SessionRun)> = mine
            .par_iter()
            .map(|&i| {
                let model = client_model(&transcripts[i]);
                (
                    i,
                    replay(
                        i,
                        &transcripts[i],
                        &none,
                        window,
                        &[(kind, raw)],
                        model.as_ref(),
                        false,
                    ),
                )
            })
            .collect();
        let mut obs = Vec::new();
        for (n, (i, run)) in runs.iter().enumerate() {
            let group = match group_key {
                Some(key) => group_names
                    .iter()
                    .position(|g| *g == key(&sets[*i]))
                    .unwrap_or(0),
                None => n % 5,
            };
            let mut previous_sent: Option<i64> = None;
            for r in run.requests.iter().filter(|r| r.is_agent()) {
                let idle_ms = r.sent_ms.zip(previous_sent).map(|(now, then)| now - then);
                previous_sent = r.sent_ms.or(previous_sent);
                let Some(u) = transcripts[*i].messages[r.source_index].usage else {
                    continue;
                };
                obs.push(Observation {
                    group,
                    session: *i,
                    prompt: r.tokens,
                    reachable: r.served[kind.name()].cached,
                    idle_ms,
                    recorded: report::recorded_served(&u),
                    output: u.completion_tokens as usize,
                });
            }
        }
        let Some(all) = fit(&obs, |_| true, &base, &price) else {
            continue;
        };
        let mut rows = vec![{
            let mut row = vec![
                "all".to_owned(),
                mine.len().to_string(),
                format!("{:.3}", all.routing_miss),
                all.lag_tokens.to_string(),
                secs(all.ttl_max_ms),
            ];
            row.extend(error_cells(&all.errors));
            row
        }];
        let held_out = leave_one_out(&obs, &base, &price);
        for held in &held_out {
            let sessions: std::collections::BTreeSet<usize> = obs
                .iter()
                .filter(|o| o.group == held.group)
                .map(|o| o.session)
                .collect();
            let name = match group_key {
                Some(_) => format!("left out: {}", group_names[held.group]),
                None => format!("left out: fold {} of 5", held.group + 1),
            };
            let mut row = vec![
                name,
                sessions.len().to_string(),
                format!("{:.3}", held.fit.routing_miss),
                held.fit.lag_tokens.to_string(),
                secs(held.fit.ttl_max_ms),
            ];
            row.extend(error_cells(&held.errors));
            rows.push(row);
        }
        if let Some(pooled) = pooled(&obs, &held_out, &base, &price) {
            let mut row = vec![
                "each left out, pooled".to_owned(),
                mine.len().to_string(),
                "-".to_owned(),
                "-".to_owned(),
                "-".to_owned(),
            ];
            row.extend(error_cells(&pooled));
            rows.push(row);
        }
        outln!(
            "Calibration of the {} cache on {} sessions' billed usage ({}; table now: routing_miss {:.3}, lag_tokens {}, ttl_max_secs {}), simulated `none` over recorded on the sessions named (fitted on all, or on all but those left out):",
            kind.name(),
            mine.len(),
            set_names.join(", "),
            base.routing_miss,
            base.lag_tokens,
            secs(base.ttl_max_ms)
        )?;
        let header = [
            "sessions",
            "n",
            "routing_miss",
            "lag_tokens",
            "ttl_max_secs",
            "reads",
            "uncached",
            "cost",
            "median session cost",
        ];
        outln!("{}", render(&header, &rows))?;
        if group_key.is_some() && held_out.len() > 1 {
            // Each group judged only by a fit that never saw it: the median one and the worst.
            let costs: Vec<(f64, &str)> = held_out
                .iter()
                .map(|h| (h.errors.cost, group_names[h.group]))
                .collect();
            if let Some((median, worst, name)) = validate::median_and_worst(&costs) {
                outln!(
                    "Cost of each {} left out, from the fit without them: median {median:.3}, worst {worst:.3} ({name}).",
                    if users.len() > 1 { "user" } else { "set" }
                )?;
            }
        }
        outln!()?;
        printed = true;
    }
    if !printed {
        bail!(
            "--calibrate needs sessions with billed usage served by a prefix cache (OpenAI, Gemini); Anthropic's cache has nothing to fit"
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The chart session's requests, recorded against simulated `none` under its own cache.
fn bill_chart(
    t: &Transcript,
    runs: &[SessionRun],
    source: usize,
    pricing: &Pricing,
    window: u64,
) -> crate::html::BillChart {
    let cache = pricing.own_cache[source].name();
    let requests = runs
        .iter()
        .find(|r| r.source == source && r.policy == "none" && r.window == window)
        .map(|run| {
            run.requests
                .iter()
                .filter(|r| r.is_agent())
                .filter_map(|r| {
                    let u = t.messages[r.source_index].usage?;
                    let rec = report::recorded_served(&u);
                    let sim = r.served.get(cache)?;
                    Some([
                        rec.cached as f64,
                        sim.cached as f64,
                        (rec.written + rec.uncached) as f64,
                        (sim.written + sim.uncached) as f64,
                    ])
                })
                .collect()
        })
        .unwrap_or_default();
    crate::html::BillChart { requests }
}

/// Beside a `recorded` row: what priced it, and how far the lab's `none` is from it (the
/// validation's aggregate, the figure the row's `vs none` inverts).
fn recorded_note(rows: &[Row], bill: Option<BillCheck>, priced_as: &str) -> Option<String> {
    let recorded = rows.iter().find(|r| r.policy == "recorded")?;
    let unbilled = rows
        .iter()
        .find(|r| r.policy == "none")
        .map_or(0, |n| n.requests.saturating_sub(recorded.requests));
    Some(format!(
        "`recorded` is the usage the provider billed, each session at its own model's prices ({priced_as}; 1-hour writes at their own price){}{}; the validation below compares them per set and user.",
        bill.map_or(String::new(), |b| format!(
            "; the lab's `none` costs {:.3}x of it over the {} requests both hold (the validation's aggregate; `vs none` of the row is its inverse)",
            b.none_over_bill, b.requests
        )),
        if unbilled > 0 {
            format!(
                "; `none` sends {unbilled} more requests than were billed: the log recorded no usage for them, and they are left out of that figure"
            )
        } else {
            String::new()
        }
    ))
}

/// What a table's `path` column means, when the replay had client logs.
fn path_note(rows: &[Row]) -> Option<String> {
    if rows.iter().all(|r| r.path.is_none()) {
        return None;
    }
    let underlying: Vec<&str> = rows
        .iter()
        .filter(|r| matches!(r.path, Some("underlying" | "mixed")))
        .map(|r| r.policy.as_str())
        .collect();
    let mut note = String::from(
        "Client logs: the fixed prefix they do not hold (system prompt, tool definitions) and the token scale are estimated per session from the recorded usage (`calibration` in --json); policies marked `client` ran on the requests the client sent, as a proxy in front of it would.",
    );
    if !underlying.is_empty() {
        note.push_str(&format!(
            " {} replace the client's own context management, so they ran on the underlying conversation (the client's compactions taken out).",
            underlying.join(", ")
        ));
    }
    Some(note)
}

fn kind_table(runs: &[SessionRun], window: u64, policies: &[String]) -> KindTable {
    let mut totals: BTreeMap<&str, BTreeMap<&str, u64>> = BTreeMap::new();
    for run in runs.iter().filter(|r| r.window == window) {
        let per = totals.entry(run.policy.as_str()).or_default();
        for (kind, tokens) in &run.by_kind {
            *per.entry(kind.as_str()).or_default() += tokens;
        }
    }
    let none = totals.get("none").cloned().unwrap_or_default();
    let all: u64 = none.values().sum();
    let mut kinds: Vec<KindRow> = none
        .iter()
        .map(|(kind, &tokens)| KindRow {
            kind: (*kind).to_owned(),
            none_tokens: tokens,
            share_of_input: tokens as f64 / all.max(1) as f64,
            kept: policies
                .iter()
                .filter(|p| p.as_str() != "none")
                .map(|p| {
                    let kept = totals
                        .get(p.as_str())
                        .and_then(|t| t.get(kind))
                        .copied()
                        .unwrap_or(0);
                    (p.clone(), kept as f64 / tokens.max(1) as f64)
                })
                .collect(),
        })
        .collect();
    kinds.sort_by(|a, b| b.none_tokens.cmp(&a.none_tokens).then(a.kind.cmp(&b.kind)));
    KindTable { window, kinds }
}

/// What each policy hid that the client showed (`--misses`): one summary per window, then the
/// first examples of each policy.
fn miss_sections(misses: &[ClientMisses]) -> Vec<Section> {
    let mut out = Vec::new();
    let mut windows: Vec<u64> = misses.iter().map(|m| m.window).collect();
    windows.dedup();
    let counts = |pairs: &mut dyn Iterator<Item = (&str, usize)>| {
        pairs
            .map(|(name, n)| format!("{name} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    for w in windows {
        let here: Vec<&ClientMisses> = misses.iter().filter(|m| m.window == w).collect();
        out.push(Section {
            title: format!(
                "What each policy hid that the client showed, {} (client paths; references the client's own request found and the policy's did not)",
                at_window(w)
            ),
            header: ["policy", "hidden", "by tool", "by age of the output"]
                .map(str::to_owned)
                .to_vec(),
            rows: here
                .iter()
                .map(|m| {
                    vec![
                        m.policy.clone(),
                        num(m.total as u64),
                        counts(&mut m.by_tool.iter().map(|(t, n)| (t.as_str(), *n))),
                        counts(&mut m.by_age.iter().copied()),
                    ]
                })
                .collect(),
        });
        for m in here.iter().filter(|m| !m.examples.is_empty()) {
            out.push(Section {
                title: format!(
                    "First references {} hid that the client showed, {}",
                    m.policy,
                    at_window(w)
                ),
                header: ["session", "request", "reference", "from", "turns ago"]
                    .map(str::to_owned)
                    .to_vec(),
                rows: m
                    .examples
                    .iter()
                    .map(|e| {
                        vec![
                            e.session.clone(),
                            e.request.to_string(),
                            e.miss.string.clone(),
                            e.miss.tool.clone(),
                            e.miss.turns_ago.to_string(),
                        ]
                    })
                    .collect(),
            });
        }
    }
    out
}

/// The report's sections beyond the policy tables: (title, header, rows).
fn sections(output: &Output) -> Vec<Section> {
    let mut out = Vec::new();
    for table in &output.by_tool {
        let policies: Vec<String> = table
            .kinds
            .first()
            .map(|k| k.kept.iter().map(|(p, _)| p.clone()).collect())
            .unwrap_or_default();
        let mut header = vec![
            "kind".to_owned(),
            "input tokens (none)".to_owned(),
            "share".to_owned(),
        ];
        header.extend(policies.iter().map(|p| format!("{p} keeps")));
        let rows = table
            .kinds
            .iter()
            .map(|k| {
                let mut row = vec![
                    k.kind.clone(),
                    num(k.none_tokens),
                    format!("{:.1}%", k.share_of_input * 100.0),
                ];
                row.extend(
                    k.kept
                        .iter()
                        .map(|(_, share)| format!("{:.0}%", share * 100.0)),
                );
                row
            })
            .collect();
        out.push(Section {
            title: format!(
                "Where the context goes {}: input tokens of every request by kind, and the share each policy keeps",
                at_window(table.window)
            ),
            header,
            rows,
        });
    }
    out.extend(miss_sections(&output.client_misses));
    out.extend(user_cost_section(&output.by_user));
    out.extend(validation_sections(&output.validation));
    if !output.cache_writes.is_empty() {
        let mut sessions: BTreeMap<&str, BTreeMap<&str, u64>> = BTreeMap::new();
        for w in &output.cache_writes {
            *sessions
                .entry(w.session.as_str())
                .or_default()
                .entry(w.cause.name())
                .or_default() += w.written;
        }
        let mut total: BTreeMap<&str, u64> = BTreeMap::new();
        let mut header = vec!["session".to_owned(), "tokens written".to_owned()];
        header.extend(causes::CAUSES.iter().map(|c| (*c).to_owned()));
        let row = |name: &str, per: &BTreeMap<&str, u64>| {
            let all: u64 = per.values().sum();
            let mut row = vec![name.to_owned(), num(all)];
            row.extend(causes::CAUSES.iter().map(|c| {
                format!(
                    "{:.1}%",
                    per.get(c).copied().unwrap_or(0) as f64 * 100.0 / all.max(1) as f64
                )
            }));
            row
        };
        let mut rows: Vec<Vec<String>> = Vec::new();
        for (session, per) in &sessions {
            for (cause, n) in per {
                *total.entry(cause).or_default() += n;
            }
            rows.push(row(session, per));
        }
        rows.push(row("all", &total));
        out.push(Section {
            title: "Why the cache was written (recorded usage of the client logs; share of written tokens by cause)".to_owned(),
            header,
            rows,
        });
    }
    if let Some(first) = output.writes_by_policy.first() {
        let none_ttl = output
            .writes_by_policy
            .iter()
            .find(|w| w.policy == "none")
            .map(|w| w.written["TTL expiry"]);
        let mut header = vec!["policy".to_owned(), "tokens written".to_owned()];
        header.extend(written::RUN_CAUSES.iter().map(|c| (*c).to_owned()));
        header.push("TTL expiry vs none".to_owned());
        let rows =
            output
                .writes_by_policy
                .iter()
                .map(|w| {
                    let all: u64 = w.written.values().sum();
                    let mut row = vec![w.policy.clone(), num(all)];
                    row.extend(written::RUN_CAUSES.iter().map(|c| {
                        format!("{:.1}%", w.written[c] as f64 * 100.0 / all.max(1) as f64)
                    }));
                    row.push(match none_ttl {
                        Some(n) if n > 0 => {
                            format!("{:.2}x", w.written["TTL expiry"] as f64 / n as f64)
                        }
                        _ => "-".to_owned(),
                    });
                    row
                })
                .collect();
        out.push(Section {
            title: format!(
                "Why the cache was written, by policy (simulated, client logs, {}, each session under its own cache model; share of written tokens by cause, and TTL-expiry writes over none's)",
                at_window(first.window)
            ),
            header,
            rows,
        });
    }
    out
}

/// Each policy against `none` user by user: the median user's cost, the user it saves least
/// for, and each user's cost with the share of what the client kept in view that the policy
/// showed.
fn user_cost_section(by_user: &[UserCosts]) -> Option<Section> {
    let first = by_user.first()?;
    let mut header = vec![
        "policy".to_owned(),
        "median user".to_owned(),
        "least saved".to_owned(),
    ];
    header.extend(first.users.iter().map(|(u, ..)| u.clone()));
    let rows = by_user
        .iter()
        .map(|p| {
            let costs: Vec<f64> = p.users.iter().map(|u| u.1).collect();
            let median = validate::spread(costs).map(|s| s.0);
            let worst = p.users.iter().max_by(|a, b| a.1.total_cmp(&b.1));
            let mut row = vec![
                p.policy.clone(),
                median.map_or("-".to_owned(), |m| format!("{m:.3}x")),
                worst.map_or("-".to_owned(), |(u, r, _)| format!("{r:.3}x ({u})")),
            ];
            row.extend(p.users.iter().map(|(_, cost, kept)| match kept {
                Some(k) => format!("{cost:.3}x, {:.1}%", k * 100.0),
                None => format!("{cost:.3}x"),
            }));
            row
        })
        .collect();
    Some(Section {
        title: format!(
            "Each policy against none, user by user ({}, each session under its own provider's cache and prices; cost vs none, and the share of what the client kept in view that the policy showed)",
            at_window(first.window)
        ),
        header,
        rows,
    })
}

/// The validation report: per set and cache model, simulated over recorded in aggregate, per
/// user (the median user and the worst, each user's sessions summed) and per session (median,
/// p10, p90) for every quantity, cost included; with several users, each user's own row.
fn validation_sections(checks: &[SessionCheck]) -> Vec<Section> {
    let mut groups: Vec<(&str, &'static str)> = Vec::new();
    for c in checks {
        if !groups.contains(&(c.set.as_str(), c.cache)) {
            groups.push((&c.set, c.cache));
        }
    }
    let show = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.3}"));
    // Cache writes only where the provider bills them apart.
    let shown = |cache: &'static str| {
        validate::QUANTITIES
            .iter()
            .enumerate()
            .filter(move |(i, _)| *i != 2 || cache == "anthropic")
    };
    let mut sections = Vec::new();
    for (set, cache) in groups {
        let mine: Vec<&SessionCheck> = checks
            .iter()
            .filter(|c| c.set == set && c.cache == cache)
            .collect();
        let models = {
            let mut m: Vec<&str> = mine.iter().map(|c| c.model.as_str()).collect();
            m.sort_unstable();
            m.dedup();
            m.join(", ")
        };
        let aggregate = validate::aggregate(&mine);
        let users = validate::by_user(&mine);
        let rows = shown(cache)
            .map(|(i, name)| {
                let spread = validate::spread(mine.iter().filter_map(|c| c.ratio(i)).collect());
                let by_user = validate::median_and_worst_user(&users, i);
                vec![
                    (*name).to_owned(),
                    show(aggregate[i]),
                    show(by_user.map(|u| u.0)),
                    by_user.map_or("-".to_owned(), |(_, worst, who)| {
                        if users.len() > 1 {
                            format!("{worst:.3} ({who})")
                        } else {
                            format!("{worst:.3}")
                        }
                    }),
                    show(spread.map(|s| s.0)),
                    show(spread.map(|s| s.1)),
                    show(spread.map(|s| s.2)),
                ]
            })
            .collect();
        let from_bill: f64 = mine.iter().map(|c| c.from_bill).sum();
        let recorded_prompt: f64 = mine.iter().map(|c| c.recorded[0]).sum();
        let sized = if from_bill > 0.0 {
            format!(
                "; {:.1}% of the recorded prompt tokens are content the logs do not hold, sized from the bill",
                from_bill * 100.0 / recorded_prompt.max(1.0)
            )
        } else {
            String::new()
        };
        sections.push(Section {
            title: format!(
                "Simulated `none` over recorded usage: {set}, {} sessions of {} user{}, {cache} cache model, priced as {models} (1.000 = the bill reproduced{sized})",
                mine.len(),
                users.len(),
                if users.len() == 1 { "" } else { "s" }
            ),
            header: [
                "quantity",
                "aggregate",
                "median user",
                "worst user",
                "median session",
                "p10",
                "p90",
            ]
            .map(str::to_owned)
            .to_vec(),
            rows,
        });
        if users.len() > 1 {
            let mut header = vec!["user".to_owned(), "sessions".into(), "requests".into()];
            header.extend(shown(cache).map(|(_, name)| (*name).to_owned()));
            let rows = users
                .iter()
                .map(|u| {
                    let mut row = vec![
                        u.user.clone(),
                        u.sessions.to_string(),
                        u.requests.to_string(),
                    ];
                    row.extend(shown(cache).map(|(i, _)| show(u.ratios[i])));
                    row
                })
                .collect();
            sections.push(Section {
                title: format!(
                    "Simulated `none` over recorded usage, user by user: {set}, {cache} cache model (each user's sessions summed)"
                ),
                header,
                rows,
            });
        }
    }
    sections
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
