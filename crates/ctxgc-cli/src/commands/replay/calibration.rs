//! `ctxgc replay --calibrate`: the cache models' parameters fitted on the billed usage, each
//! user judged by a fit that left it out.

use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use ctxgc_core::Transcript;
use ctxgc_replay::cache::CacheKind;

use ctxgc_replay::policies::{self};
use ctxgc_replay::prices::{Catalog, Pricing};
use ctxgc_replay::report::{self};
use ctxgc_replay::run::{SessionRun, client_model, replay};
use ctxgc_replay::validate::{self};
use rayon::iter::{IntoParallelRefIterator, ParallelIterator};

use super::load::{Origin, OriginKey};
use super::output::*;
use crate::table::render;

/// `--calibrate`: per prefix-cache provider, the values fitted on every session with billed
/// usage, then each set (or, with one set, each fifth of the sessions) left out in turn.
pub(super) fn calibrate(
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
