//! Plain-text tables for terminal reports.

use comfy_table::{Cell, CellAlignment, Table, presets};
use ctxgc_replay::report::Row;

/// A titled table of a report, shown in the terminal and in the HTML report alike.
pub struct Section {
    /// What the table shows.
    pub title: String,
    /// Column names.
    pub header: Vec<String>,
    /// Cells, row by row.
    pub rows: Vec<Vec<String>>,
}

/// A table with a header row; numeric cells are right-aligned.
pub fn render(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut table = Table::new();
    table.load_preset(presets::ASCII_MARKDOWN);
    table.set_header(header.iter().map(Cell::new));
    for row in rows {
        table.add_row(row.iter().map(|v| {
            let cell = Cell::new(v);
            if looks_numeric(v) {
                cell.set_alignment(CellAlignment::Right)
            } else {
                cell
            }
        }));
    }
    table.to_string()
}

fn looks_numeric(v: &str) -> bool {
    let core = v
        .trim_start_matches(['$', '-', '+'])
        .trim_end_matches(['%', 'x']);
    !core.is_empty()
        && core
            .chars()
            .all(|c| c.is_ascii_digit() || c == ',' || c == '.')
}

/// `1234567` -> `1,234,567`.
pub fn num(n: impl Into<u64>) -> String {
    ctxgc_core::trim::lines::group(n.into())
}

/// What a storing policy costs, relative to `none`, and shows when the agent recalls what it
/// hid (`-` for a policy that stores nothing, or hid nothing it stored).
fn with_recalls(r: &Row) -> String {
    match (r.recall_with_recalls, r.cost_vs_none) {
        (Some(recall), Some(vs)) if r.cost_with_recalls > r.cost => format!(
            "{:.3}x, {:.1}%",
            vs * r.cost_with_recalls / r.cost,
            recall * 100.0
        ),
        _ => "-".into(),
    }
}

/// The note under every policy table: what "with recalls" assumes.
pub const WITH_RECALLS_NOTE: &str = "with recalls: each reference a policy hid but stored is priced as one recall round (one more request on the current prefix, read from the cache, plus the recalled text) and counted as seen; it assumes the agent notices what it misses. overflows: requests past the window, which the provider refuses: they show nothing (recall counts them as lost), and a policy with more of them than another is never on the frontier. frontier: no other policy (foresight aside) is as cheap at as much recall.";

/// The policy table's columns.
pub fn policy_cells(rows: &[Row]) -> (Vec<&'static str>, Vec<Vec<String>>) {
    let with_path = rows.iter().any(|r| r.path.is_some());
    let with_gap = rows.iter().any(|r| r.gap_closed.is_some());
    let mut header = vec![
        "policy",
        "requests",
        "input tokens",
        "cached",
        "cost",
        "vs none",
    ];
    if with_gap {
        header.push("gap closed");
    }
    header.extend([
        "events/100 turns",
        "summarizer calls",
        "earliest changed (median)",
        "peak prompt",
        "overflows",
        "recall",
        "with recalls",
        "frontier",
    ]);
    if with_path {
        header.extend(["of client's", "path"]);
    }
    let cells = rows
        .iter()
        .map(|r| {
            let mut row = vec![
                r.policy.clone(),
                r.requests.to_string(),
                num(r.input_tokens),
                format!("{:.1}%", r.cached_share * 100.0),
                format!("${:.2}", r.cost),
                r.cost_vs_none.map_or("-".into(), |c| format!("{:.3}x", c)),
            ];
            if with_gap {
                row.push(
                    r.gap_closed
                        .map_or("-".into(), |g| format!("{:.0}%", g * 100.0)),
                );
            }
            row.extend([
                format!("{:.1}", r.events_per_100_turns),
                r.summarizer_calls.to_string(),
                r.earliest_changed_median
                    .map_or("-".into(), |e| e.to_string()),
                num(r.peak_prompt as u64),
                r.overflows.to_string(),
                r.recall
                    .map_or("-".into(), |x| format!("{:.1}%", x * 100.0)),
                with_recalls(r),
                if r.pareto { "yes" } else { "" }.to_owned(),
            ]);
            if with_path {
                row.push(
                    r.recall_of_client
                        .map_or("-".into(), |x| format!("{:.1}%", x * 100.0)),
                );
                row.push(r.path.unwrap_or("-").to_owned());
            }
            row
        })
        .collect();
    (header, cells)
}
