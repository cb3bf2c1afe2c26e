//! The report's sections as the terminal shows them: the policies' tables, the bill, the
//! misses, `--explain`, the validation against billed usage.

use anyhow::{Context, Result, bail};
use ctxgc_core::Transcript;

use ctxgc_replay::causes::{self};
use ctxgc_replay::misses::ClientMisses;
use ctxgc_replay::policies::{self};
use ctxgc_replay::prices::{Catalog, Pricing};
use ctxgc_replay::report::{self, Row};
use ctxgc_replay::run::{ClientModel, SessionRun, replay};
use ctxgc_replay::validate::{self, SessionCheck};
use ctxgc_replay::written;
use std::collections::BTreeMap;

use super::output::*;
use crate::table::{Section, num};

/// `--explain-cache`: for each session whose id contains `query` and that has billed usage,
/// every request recorded against simulated (policy none) with the cause of each difference,
/// the causes summed, and what the log billed beside the main thread (sub-agents).
pub(super) fn explain_sections(
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

/// The chart session's requests, recorded against simulated `none` under its own cache.
pub(super) fn bill_chart(
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
pub(super) fn recorded_note(
    rows: &[Row],
    bill: Option<BillCheck>,
    priced_as: &str,
) -> Option<String> {
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
pub(super) fn path_note(rows: &[Row]) -> Option<String> {
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

pub(super) fn kind_table(runs: &[SessionRun], window: u64, policies: &[String]) -> KindTable {
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
pub(super) fn miss_sections(misses: &[ClientMisses]) -> Vec<Section> {
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
pub(super) fn sections(output: &Output) -> Vec<Section> {
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
pub(super) fn user_cost_section(by_user: &[UserCosts]) -> Option<Section> {
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
pub(super) fn validation_sections(checks: &[SessionCheck]) -> Vec<Section> {
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
