//! `ctxgc replay --fit-relevance`: the relevance table fitted on the sessions given, each user
//! judged by a table fitted on the others.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};
use ctxgc_core::Transcript;
use ctxgc_core::config::Config;
use ctxgc_core::engine::relevance::Relevance;
use ctxgc_replay::relevance::{Example, Judged, examples, judge};
use rayon::iter::{IntoParallelRefIterator, ParallelIterator};

use super::load::Origin;
use crate::table::render;

/// The thresholds the report shows (likelihoods under which an old output is pruned).
const THRESHOLDS: [f64; 5] = [0.05, 0.1, 0.15, 0.2, 0.3];

/// A relevance table from its file.
pub(super) fn read(path: &Path) -> Result<Relevance> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read --relevance {}", path.display()))?;
    Relevance::from_json(&text).with_context(|| format!("in {}", path.display()))
}

/// Fits the table on every session, writes it to `out` (and each user's left-out table to
/// `folds`), and prints how each user's left-out table does on that user.
pub(super) fn fit(
    transcripts: &[Transcript],
    sets: &[Origin],
    config: &Config,
    out: &Path,
    folds: Option<&Path>,
) -> Result<ExitCode> {
    let per_session: Vec<Vec<Example>> = transcripts.par_iter().map(examples).collect();
    let mut users: Vec<String> = sets.iter().map(user_key).collect();
    users.sort();
    users.dedup();
    let others = |user: &str| -> Vec<(ctxgc_core::engine::relevance::Features, bool)> {
        per_session
            .iter()
            .zip(sets)
            .filter(|(_, o)| user_key(o) != user)
            .flat_map(|(e, _)| e.iter().map(|e| (e.features, e.used_again)))
            .collect()
    };
    let source = format!(
        "ctxgc replay --fit-relevance: {} sessions of {} users ({})",
        transcripts.len(),
        users.len(),
        users.join(", ")
    );
    let table = Relevance::fit(
        &source,
        per_session
            .iter()
            .flatten()
            .map(|e| (e.features, e.used_again)),
    );
    std::fs::write(out, table.to_json())
        .with_context(|| format!("cannot write {}", out.display()))?;
    if let Some(dir) = folds {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let threshold = config.engine.keep_likely_use;
    let mut rows = Vec::new();
    let mut at_threshold: Vec<(String, Judged)> = Vec::new();
    for user in &users {
        let left_out = Relevance::fit(&format!("{source}, without {user}"), others(user));
        if let Some(dir) = folds {
            let path = dir.join(format!("{}.json", user.replace(['/', ' '], "_")));
            std::fs::write(&path, left_out.to_json())
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        let mine: Vec<Example> = per_session
            .iter()
            .zip(sets)
            .filter(|(_, o)| user_key(o) == *user)
            .flat_map(|(e, _)| e.iter().copied())
            .collect();
        let mut row = vec![user.clone()];
        let base = judge(&left_out, &mine, 0.0);
        row.push(base.examples.to_string());
        row.push(format!(
            "{:.1}%",
            100.0 * base.used_again as f64 / base.examples.max(1) as f64
        ));
        for t in THRESHOLDS {
            let j = judge(&left_out, &mine, t);
            row.push(format!(
                "{:.0}% / {:.1}%",
                100.0 * j.pruned_bytes,
                100.0 * j.hidden_uses
            ));
        }
        at_threshold.push((user.clone(), judge(&left_out, &mine, threshold)));
        rows.push(row);
    }
    let mut header = vec![
        "user (left out)".to_owned(),
        "examples".into(),
        "used again".into(),
    ];
    header.extend(
        THRESHOLDS
            .iter()
            .map(|t| format!("under {t}: pruned bytes / hidden uses")),
    );
    println!(
        "Relevance table fitted on {} sessions of {} users, written to {}.\n",
        transcripts.len(),
        users.len(),
        out.display()
    );
    println!(
        "Each user judged by the table fitted without them: of the tool outputs {} turns old or more at each request, the share of their bytes an event would prune (likelihood under the threshold) and the share of the later uses among them it would hide (the age rule alone prunes them all: 100% / 100%)",
        ctxgc_replay::relevance::MIN_AGE_TURNS
    );
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    println!("{}", render(&header, &rows));
    at_threshold.sort_by(|a, b| a.1.hidden_uses.total_cmp(&b.1.hidden_uses));
    if let (Some(median), Some(worst)) = (
        at_threshold.get(at_threshold.len() / 2),
        at_threshold.last(),
    ) {
        println!(
            "At the engine's threshold ({threshold}, `[engine] keep_likely_use`): median user {} (prunes {:.0}% of old bytes, hides {:.1}% of their later uses); worst user {} ({:.0}%, {:.1}%).",
            median.0,
            100.0 * median.1.pruned_bytes,
            100.0 * median.1.hidden_uses,
            worst.0,
            100.0 * worst.1.pruned_bytes,
            100.0 * worst.1.hidden_uses
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// A user across sets: the set and the user (one user's Claude Code and Codex logs are two).
fn user_key(origin: &Origin) -> String {
    if origin.user == origin.set {
        origin.user.clone()
    } else {
        format!("{}/{}", origin.set, origin.user)
    }
}
