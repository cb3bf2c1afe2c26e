//! The transcripts a replay reads: files, folders, the bundled samples and agent histories,
//! each named by the set (and user) it came from, and what could not be read and why.

use std::path::Path;

use anyhow::{Context, Result, bail};
use ctxgc_core::Transcript;
use ctxgc_formats::import::{self, history};

use serde::Serialize;

use super::args::ReplayArgs;

/// The sample sessions, embedded so `--sample` works from any directory.
pub(super) const SAMPLES: &[(&str, &[u8])] = &[
    (
        "django__django-11885.traj.json",
        include_bytes!("../../../samples/django__django-11885.traj.json"),
    ),
    (
        "django__django-14725.traj.json",
        include_bytes!("../../../samples/django__django-14725.traj.json"),
    ),
    (
        "scikit-learn__scikit-learn-13328.traj.json",
        include_bytes!("../../../samples/scikit-learn__scikit-learn-13328.traj.json"),
    ),
    (
        "sympy__sympy-15875.traj.json",
        include_bytes!("../../../samples/sympy__sympy-15875.traj.json"),
    ),
    (
        "gpt4__swe-bench-dev-easy_first_only__default__t-0.00__p-0.95__pydicom__pydicom-1458.traj",
        include_bytes!(
            "../../../samples/gpt4__swe-bench-dev-easy_first_only__default__t-0.00__p-0.95__pydicom__pydicom-1458.traj"
        ),
    ),
    (
        "replay__marshmallow-code__marshmallow-1867__function_calling__marshmallow-code__marshmallow-1867.traj",
        include_bytes!(
            "../../../samples/replay__marshmallow-code__marshmallow-1867__function_calling__marshmallow-code__marshmallow-1867.traj"
        ),
    ),
];

/// What groups sessions for leaving them out: their user or their set.
pub(super) type OriginKey = fn(&Origin) -> &str;

#[derive(Serialize)]
pub(super) struct Skipped {
    pub(super) path: String,
    pub(super) why: String,
}

/// How many skipped files the terminal report names.
pub(super) const SKIPPED_SHOWN: usize = 20;

/// Where a session came from: its set (the path it was found under) and its user
/// ([`ctxgc_replay::users::user_of`]).
pub(super) struct Origin {
    pub(super) set: String,
    pub(super) user: String,
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
pub(super) fn load(args: &ReplayArgs) -> Result<(Vec<Transcript>, Vec<Origin>, Vec<Skipped>)> {
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
pub(super) fn load_history(
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
pub(super) fn day(ms: i64) -> String {
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
