//! Aggregating runs into one row per policy, per window and cache model.

use std::collections::BTreeMap;

use serde::Serialize;

use ctxgc_core::{Role, Transcript};

use crate::cache::{CacheKind, Served};
use crate::prices::ModelPrice;
use crate::run::{RequestRecord, SessionRun};

/// One line of the replay table.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Policy.
    pub policy: String,
    /// Agent requests (summarizer calls excluded).
    pub requests: usize,
    /// Input tokens of all requests, summarizer calls included.
    pub input_tokens: u64,
    /// Share of input tokens read from the cache.
    pub cached_share: f64,
    /// Cost in USD under the cache model's prices.
    pub cost: f64,
    /// Cost relative to the `none` policy.
    pub cost_vs_none: Option<f64>,
    /// History-rewriting events per 100 assistant turns.
    pub events_per_100_turns: f64,
    /// Summarizer calls.
    pub summarizer_calls: usize,
    /// Median index of the earliest message an event changed.
    pub earliest_changed_median: Option<usize>,
    /// Largest prompt.
    pub peak_prompt: usize,
    /// Requests whose prompt exceeded the window (they would have failed).
    pub overflows: usize,
    /// Reference recall (found / asked).
    pub recall: Option<f64>,
    /// On the requests a client sent: the share of the references `none` found (what the
    /// client itself kept in view) that the policy still shows. Recall under 100% on a
    /// client's path is mostly the client's own compactions; this is what the policy adds to
    /// that loss. `None` off client paths.
    pub recall_of_client: Option<f64>,
    /// Share of the gap between `none` and `foresight` that the policy closes:
    /// (cost of none - cost) / (cost of none - cost of foresight).
    pub gap_closed: Option<f64>,
    /// Cost when the agent recalls every reference the policy hid but stored, one recall round
    /// each (one more request on the current prefix, read from the cache, plus the recalled
    /// text): it assumes the agent notices what it misses. Equal to `cost` for a policy that
    /// stores nothing.
    pub cost_with_recalls: f64,
    /// Recall counting those recalled references as seen.
    pub recall_with_recalls: Option<f64>,
    /// On the cost-recall frontier: no other policy (foresight aside) is as cheap or cheaper
    /// at as much recall or more, and better in one.
    pub pareto: bool,
    /// On client logs: whether the policy ran on the requests the client sent (`client`), on
    /// the underlying conversation with the client's own compactions taken out
    /// (`underlying`), or on both kinds of session (`mixed`); `None` without client logs.
    pub path: Option<&'static str>,
}

/// Rows for one window and cache model, from runs of every policy over the same sessions,
/// after the `recorded` row when there is one; each run priced with `prices[run.source]` (its
/// session's own model where that is of this cache's provider).
pub fn rows(
    runs: &[SessionRun],
    window: u64,
    cache: CacheKind,
    prices: &[ModelPrice],
    policies: &[String],
    recorded: Option<Row>,
) -> Vec<Row> {
    rows_of(runs, &|_| true, window, cache, prices, policies, recorded)
}

/// [`rows`] over the runs `keep` selects (one user's sessions, say).
pub fn rows_of(
    runs: &[SessionRun],
    keep: &dyn Fn(&SessionRun) -> bool,
    window: u64,
    cache: CacheKind,
    prices: &[ModelPrice],
    policies: &[String],
    recorded: Option<Row>,
) -> Vec<Row> {
    let mut rows: Vec<Row> = recorded.into_iter().collect();
    rows.extend(policies.iter().map(|policy| {
        let mine: Vec<&SessionRun> = runs
            .iter()
            .filter(|r| r.window == window && &r.policy == policy && keep(r))
            .collect();
        let all = || mine.iter().flat_map(|r| r.requests.iter());
        let agent = || all().filter(|r| r.is_agent());
        let input: u64 = all().map(|r| r.tokens as u64).sum();
        let cached: u64 = all().map(|r| r.served[cache.name()].cached as u64).sum();
        let turns = agent().count();
        let events = agent().filter(|r| r.event.is_some()).count();
        let mut earliest: Vec<usize> = agent().filter_map(|r| r.earliest_changed).collect();
        earliest.sort_unstable();
        // Each request with the window its session ran at.
        let agent_at = || {
            mine.iter().flat_map(|run| {
                run.requests
                    .iter()
                    .filter(|r| r.is_agent())
                    .map(move |r| (r, run.limit))
            })
        };
        let (found, asked) = agent_at().fold((0, 0), |(f, a), (r, limit)| {
            (f + shown(r, limit), a + r.recall.1)
        });
        let recallable: usize = agent_at()
            .filter(|&(r, limit)| !overflows(r, limit))
            .map(|(r, _)| r.recallable)
            .sum();
        let cost: f64 = mine.iter().map(|r| r.cost(cache, &prices[r.source])).sum();
        let rounds: f64 = mine
            .iter()
            .flat_map(|run| {
                let price = &prices[run.source];
                run.requests.iter().filter(|r| r.is_agent()).map(move |r| {
                    r.recall_rounds
                        .iter()
                        .map(|&recalled| {
                            (r.tokens as f64 * price.cache_read
                                + (recalled + RECALL_CALL_TOKENS) as f64 * price.input
                                + RECALL_CALL_TOKENS as f64 * price.output)
                                / 1e6
                        })
                        .sum::<f64>()
                })
            })
            .sum();
        Row {
            policy: policy.clone(),
            requests: turns,
            input_tokens: input,
            cached_share: if input == 0 {
                0.0
            } else {
                cached as f64 / input as f64
            },
            cost,
            cost_vs_none: None,
            events_per_100_turns: if turns == 0 {
                0.0
            } else {
                events as f64 * 100.0 / turns as f64
            },
            summarizer_calls: all().filter(|r| r.summarizer).count(),
            earliest_changed_median: earliest.get(earliest.len() / 2).copied(),
            peak_prompt: agent().map(|r| r.tokens).max().unwrap_or(0),
            overflows: agent_at().filter(|&(r, limit)| overflows(r, limit)).count(),
            recall: (asked > 0).then(|| found as f64 / asked as f64),
            recall_of_client: recall_of_client(runs, &mine),
            gap_closed: None,
            cost_with_recalls: cost + rounds,
            recall_with_recalls: (asked > 0).then(|| (found + recallable) as f64 / asked as f64),
            pareto: false,
            path: path_of(&mine),
        }
    }));
    // `none` is the yardstick even when its row is not shown (its runs are there).
    let none_cost = rows
        .iter()
        .find(|r| r.policy == "none")
        .map(|r| r.cost)
        .or_else(|| {
            let none: Vec<&SessionRun> = runs
                .iter()
                .filter(|r| r.window == window && r.policy == "none" && keep(r))
                .collect();
            (!none.is_empty()).then(|| none.iter().map(|r| r.cost(cache, &prices[r.source])).sum())
        });
    if let Some(none) = none_cost {
        let foresight = rows
            .iter()
            .find(|r| r.policy == "foresight")
            .map(|r| r.cost);
        for row in &mut rows {
            row.cost_vs_none = (none > 0.0).then(|| row.cost / none);
            row.gap_closed = foresight
                .filter(|f| none - f > 0.0 && row.policy != "recorded")
                .map(|f| (none - row.cost) / (none - f));
        }
    }
    mark_pareto(&mut rows);
    rows
}

/// Whether a request's prompt is past the window: the provider refuses it, and the agent sees
/// nothing of it.
fn overflows(r: &RequestRecord, window: u64) -> bool {
    r.tokens as u64 > window
}

/// The references a request showed: none when it was past the window (a failed request shows
/// nothing, whatever it held).
fn shown(r: &RequestRecord, window: u64) -> usize {
    if overflows(r, window) { 0 } else { r.recall.0 }
}

/// Tokens of the recall call itself (the model's call, its answer framing).
const RECALL_CALL_TOKENS: usize = 40;

/// Marks the rows on the cost-recall frontier (the recorded row and the `foresight` bound
/// aside, and every row that overflows more often than the fewest do): no other row costs as
/// little or less at as much recall or more, and is better in one.
fn mark_pareto(rows: &mut [Row]) {
    let candidate = |r: &Row| r.policy != "foresight" && r.policy != "recorded";
    // A policy that overflows where another does not fails requests the other answers: it is
    // never on the frontier, however cheap.
    let fewest = rows
        .iter()
        .filter(|r| candidate(r))
        .map(|r| r.overflows)
        .min()
        .unwrap_or(0);
    let points: Vec<(f64, f64, bool)> = rows
        .iter()
        .map(|r| {
            let eligible = candidate(r) && r.overflows <= fewest;
            (r.cost, r.recall.unwrap_or(0.0), eligible)
        })
        .collect();
    for (i, row) in rows.iter_mut().enumerate() {
        let (cost, recall, eligible) = points[i];
        row.pareto = eligible
            && !points.iter().enumerate().any(|(j, &(c, r, e))| {
                j != i && e && c <= cost && r >= recall && (c < cost || r > recall)
            });
    }
}

/// Over a policy's runs on client paths: references found, per request at most as many as
/// `none` found in the same request, over those `none` found.
fn recall_of_client(runs: &[SessionRun], mine: &[&SessionRun]) -> Option<f64> {
    let client: Vec<&&SessionRun> = mine.iter().filter(|r| r.client_path).collect();
    if client.is_empty() {
        return None;
    }
    let (mut kept, mut of) = (0usize, 0usize);
    for run in client {
        let Some(none) = runs.iter().find(|r| {
            r.policy == "none" && r.source == run.source && r.window == run.window && r.client_path
        }) else {
            continue;
        };
        let found_by_none: BTreeMap<usize, usize> = none
            .requests
            .iter()
            .filter(|r| r.is_agent())
            .map(|r| (r.source_index, r.recall.0))
            .collect();
        for r in run.requests.iter().filter(|r| r.is_agent()) {
            let base = found_by_none.get(&r.source_index).copied().unwrap_or(0);
            kept += shown(r, run.limit).min(base);
            of += base;
        }
    }
    (of > 0).then(|| kept as f64 / of as f64)
}

fn path_of(runs: &[&SessionRun]) -> Option<&'static str> {
    let on_logs: Vec<&&SessionRun> = runs.iter().filter(|r| r.on_client_log).collect();
    let client = on_logs.iter().filter(|r| r.client_path).count();
    match (on_logs.len(), client) {
        (0, _) => None,
        (n, c) if c == n => Some("client"),
        (_, 0) => Some("underlying"),
        _ => Some("mixed"),
    }
}

/// The usage a request recorded, as the cache served it.
pub fn recorded_served(u: &ctxgc_core::RecordedUsage) -> Served {
    let written = u.cache_write_tokens.min(u.prompt_tokens);
    let read = u.cached_tokens.min(u.prompt_tokens - written);
    Served {
        cached: read as usize,
        written: written as usize,
        written_long: u.cache_write_1h_tokens.min(written) as usize,
        uncached: (u.prompt_tokens - written - read) as usize,
    }
}

/// The row priced from the usage the providers recorded, over the sessions that have it:
/// uncached input, cache reads and cache writes as billed (one-hour writes at their own price),
/// and the recorded output, each session at `prices[i]` (its own model's row).
pub fn recorded_row(transcripts: &[Transcript], prices: &[ModelPrice]) -> Option<Row> {
    let (mut requests, mut input, mut cached, mut cost) = (0usize, 0u64, 0u64, 0.0f64);
    let mut peak = 0usize;
    for (t, price) in transcripts.iter().zip(prices) {
        for m in t.messages.iter().filter(|m| m.role == Role::Assistant) {
            let Some(u) = m.usage else { continue };
            let served = recorded_served(&u);
            cost += price.cost(&served, u.completion_tokens as usize);
            requests += 1;
            input += u.prompt_tokens;
            cached += served.cached as u64;
            peak = peak.max(u.prompt_tokens as usize);
        }
    }
    (requests > 0).then(|| Row {
        policy: "recorded".into(),
        requests,
        input_tokens: input,
        cached_share: cached as f64 / input.max(1) as f64,
        cost,
        cost_vs_none: None,
        events_per_100_turns: 0.0,
        summarizer_calls: 0,
        earliest_changed_median: None,
        peak_prompt: peak,
        overflows: 0,
        recall: None,
        recall_of_client: None,
        gap_closed: None,
        cost_with_recalls: cost,
        recall_with_recalls: None,
        pareto: false,
        path: Some("client"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(policy: &str, client_path: bool, found: &[(usize, usize)]) -> SessionRun {
        SessionRun::for_test(
            policy,
            client_path,
            found.iter().map(|&recall| (recall, Vec::new())).collect(),
        )
    }

    #[test]
    fn the_frontier_holds_the_rows_no_other_row_beats() {
        let row = |policy: &str, cost: f64, recall: f64| Row {
            policy: policy.into(),
            requests: 1,
            input_tokens: 0,
            cached_share: 0.0,
            cost,
            cost_vs_none: None,
            events_per_100_turns: 0.0,
            summarizer_calls: 0,
            earliest_changed_median: None,
            peak_prompt: 0,
            overflows: 0,
            recall: Some(recall),
            recall_of_client: None,
            gap_closed: None,
            cost_with_recalls: cost,
            recall_with_recalls: None,
            pareto: false,
            path: None,
        };
        let mut rows = vec![
            row("none", 4.0, 1.0),
            row("a", 3.0, 0.98),
            row("b", 3.5, 0.97),
            row("c", 2.0, 0.80),
            row("foresight", 1.0, 1.0),
        ];
        mark_pareto(&mut rows);
        let on = |rows: &[Row]| -> Vec<String> {
            rows.iter()
                .filter(|r| r.pareto)
                .map(|r| r.policy.clone())
                .collect()
        };
        assert_eq!(on(&rows), ["none", "a", "c"]);
        // One that overflows where the others do not is never on it, and beats nobody.
        rows.push(Row {
            overflows: 3,
            ..row("d", 1.5, 0.99)
        });
        mark_pareto(&mut rows);
        assert_eq!(on(&rows), ["none", "a", "c"]);
    }

    #[test]
    fn a_request_past_the_window_shows_nothing() {
        let mut runs = vec![
            run("none", true, &[(4, 4), (6, 6)]),
            run("p", true, &[(4, 4), (6, 6)]),
        ];
        runs[1].requests[1].tokens = 200_001;
        for r in runs.iter_mut().flat_map(|run| run.requests.iter_mut()) {
            r.served
                .insert(CacheKind::Anthropic.name(), Served::default());
        }
        let rows = rows(
            &runs,
            200_000,
            CacheKind::Anthropic,
            &[crate::prices::default_for(CacheKind::Anthropic)],
            &["none".into(), "p".into()],
            None,
        );
        let p = rows.iter().find(|r| r.policy == "p").unwrap();
        assert_eq!(p.overflows, 1);
        assert_eq!(
            p.recall,
            Some(0.4),
            "the failed request's 6 references are lost"
        );
        assert_eq!(p.recall_of_client, Some(0.4));
        assert!(!p.pareto);
    }

    #[test]
    fn recall_of_the_client_counts_only_what_the_client_itself_kept_in_view() {
        // The client's own compaction hid 2 of 10 references; the policy lost 1 of the other 8.
        let runs = vec![
            run("none", true, &[(4, 4), (4, 6)]),
            run("p", true, &[(3, 4), (4, 6)]),
            run("underlying", false, &[(6, 6), (4, 4)]),
        ];
        let of = |policy: &str| {
            let mine: Vec<&SessionRun> = runs.iter().filter(|r| r.policy == policy).collect();
            recall_of_client(&runs, &mine)
        };
        assert_eq!(of("none"), Some(1.0));
        assert_eq!(of("p"), Some(7.0 / 8.0));
        assert_eq!(of("underlying"), None, "only on the client's path");
    }
}
