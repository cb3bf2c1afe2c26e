//! The self-contained HTML report of `ctxgc replay --html`: tables and SVG charts, no scripts,
//! no external resources.

use std::fmt::Write;

use ctxgc_replay::report::Row;
use ctxgc_replay::run::SessionRun;

const COLORS: &[&str] = &[
    "#6b7280", "#2563eb", "#d97706", "#059669", "#7c3aed", "#db2777", "#0891b2", "#dc2626",
    "#65a30d", "#9333ea",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn color(i: usize) -> &'static str {
    COLORS[i % COLORS.len()]
}

/// A policy's colour: by its place among the policies, the same in every chart.
fn policy_color(policies: &[String], name: &str) -> &'static str {
    match policies.iter().position(|p| p == name) {
        Some(i) => color(i),
        None => "#111827", // `recorded`: what was billed, not a policy
    }
}

/// Prompt tokens per turn for each policy on one session, events marked.
fn turn_chart(runs: &[SessionRun], source: usize, window: u64, policies: &[String]) -> String {
    let (w, h, left, bottom, top) = (900.0, 360.0, 70.0, 40.0, 20.0);
    let series: Vec<(&String, Vec<(usize, bool)>)> = policies
        .iter()
        .filter_map(|p| {
            let run = runs
                .iter()
                .find(|r| r.source == source && &r.policy == p && r.window == window)?;
            Some((
                p,
                run.requests
                    .iter()
                    .filter(|r| r.is_agent())
                    .map(|r| (r.tokens, r.event.is_some()))
                    .collect(),
            ))
        })
        .collect();
    let turns = series
        .iter()
        .map(|(_, s)| s.len())
        .max()
        .unwrap_or(1)
        .max(2);
    let peak = series
        .iter()
        .flat_map(|(_, s)| s.iter().map(|(t, _)| *t))
        .max()
        .unwrap_or(1)
        .max(window as usize);
    let x = |i: usize| left + (w - left - 20.0) * i as f64 / (turns - 1) as f64;
    let y = |t: usize| top + (h - top - bottom) * (1.0 - t as f64 / peak as f64);
    let mut svg = format!(
        r#"<svg viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="prompt tokens per turn">"#
    );
    for k in 0..=4 {
        let t = peak * k / 4;
        let _ = write!(
            svg,
            r##"<line x1="{left}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#e5e7eb"/><text x="{}" y="{:.1}" font-size="11" text-anchor="end" fill="#374151">{}</text>"##,
            w - 20.0,
            left - 6.0,
            y(t) + 4.0,
            crate::table::num(t as u64),
            y = y(t)
        );
    }
    let wy = y(window as usize);
    let _ = write!(
        svg,
        r##"<line x1="{left}" x2="{}" y1="{wy:.1}" y2="{wy:.1}" stroke="#dc2626" stroke-dasharray="6 4"/><text x="{}" y="{:.1}" font-size="11" text-anchor="end" fill="#dc2626">window</text>"##,
        w - 20.0,
        w - 22.0,
        wy - 4.0
    );
    let _ = write!(
        svg,
        r##"<text x="{}" y="{}" font-size="12" text-anchor="middle" fill="#374151">assistant turn</text>"##,
        (w + left) / 2.0,
        h - 8.0
    );
    for (name, points) in &series {
        let c = policy_color(policies, name);
        let path: Vec<String> = points
            .iter()
            .enumerate()
            .map(|(k, (t, _))| format!("{:.1},{:.1}", x(k), y(*t)))
            .collect();
        let _ = write!(
            svg,
            r#"<polyline fill="none" stroke="{}" stroke-width="1.8" points="{}"><title>{}</title></polyline>"#,
            c,
            path.join(" "),
            esc(name)
        );
        for (k, (t, event)) in points.iter().enumerate() {
            if *event {
                let _ = write!(
                    svg,
                    r##"<circle cx="{:.1}" cy="{:.1}" r="4.5" fill="{}" stroke="#111827"><title>{} event at turn {k}</title></circle>"##,
                    x(k),
                    y(*t),
                    c,
                    esc(name)
                );
            }
        }
    }
    svg.push_str("</svg>");
    let mut legend = String::from(r#"<div class="legend">"#);
    for (name, _) in &series {
        let _ = write!(
            legend,
            r#"<span><i style="background:{}"></i>{}</span>"#,
            policy_color(policies, name),
            esc(name)
        );
    }
    legend.push_str("<span>● = event (history rewritten)</span></div>");
    svg + &legend
}

/// Horizontal bars, one per row.
fn bars(
    policies: &[String],
    rows: &[Row],
    value: impl Fn(&Row) -> Option<f64>,
    label: impl Fn(f64) -> String,
    max: f64,
) -> String {
    let (w, row_h, left) = (600.0, 26.0, 200.0);
    let h = row_h * rows.len() as f64 + 10.0;
    let mut svg = format!(r#"<svg viewBox="0 0 {w} {h}" width="{w}" height="{h}">"#);
    for (i, r) in rows.iter().enumerate() {
        let y = 5.0 + row_h * i as f64;
        let v = value(r).unwrap_or(0.0);
        let len = (w - left - 90.0) * (v / max.max(f64::EPSILON)).min(1.0);
        let _ = write!(
            svg,
            r##"<text x="{}" y="{:.1}" font-size="12" text-anchor="end" fill="#111827">{}</text><rect x="{left}" y="{y:.1}" width="{len:.1}" height="{:.1}" fill="{}"/><text x="{:.1}" y="{:.1}" font-size="12" fill="#111827">{}</text>"##,
            left - 8.0,
            y + 16.0,
            esc(&r.policy),
            row_h - 8.0,
            policy_color(policies, &r.policy),
            left + len + 6.0,
            y + 16.0,
            if value(r).is_some() {
                label(v)
            } else {
                "-".into()
            }
        );
    }
    svg.push_str("</svg>");
    svg
}

fn table<S: AsRef<str>>(header: &[S], cells: &[Vec<String>]) -> String {
    let mut out = String::from("<table><tr>");
    for h in header {
        let _ = write!(out, "<th>{}</th>", esc(h.as_ref()));
    }
    out.push_str("</tr>");
    for row in cells {
        out.push_str("<tr>");
        for cell in row {
            let _ = write!(out, "<td>{}</td>", esc(cell));
        }
        out.push_str("</tr>");
    }
    out.push_str("</table>");
    out
}

/// The whole page. `tables` are (window, cache, model, rows).
/// Cost (relative to `none`) against recall, one dot per policy, the Pareto frontier drawn
/// through the rows on it, `foresight` (the bound) as a ring.
fn frontier_chart(policies: &[String], rows: &[Row]) -> String {
    let (w, h, left, bottom, top, right) = (560.0, 320.0, 56.0, 40.0, 12.0, 150.0);
    let points: Vec<(&Row, f64, f64)> = rows
        .iter()
        .filter_map(|r| Some((r, r.recall?, r.cost_vs_none?)))
        .collect();
    if points.is_empty() {
        return String::new();
    }
    let min_recall = points.iter().map(|p| p.1).fold(1.0, f64::min).min(0.9);
    let max_cost = points.iter().map(|p| p.2).fold(1.0, f64::max);
    let min_cost = points.iter().map(|p| p.2).fold(1.0, f64::min).min(0.4);
    let x = |recall: f64| left + (recall - min_recall) / (1.0 - min_recall) * (w - left - right);
    let y = |cost: f64| top + (max_cost - cost) / (max_cost - min_cost) * (h - top - bottom);
    let mut svg = format!(
        r#"<svg viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" aria-label="cost against recall">"#
    );
    let _ = write!(
        svg,
        r##"<line x1="{left}" y1="{b}" x2="{r}" y2="{b}" stroke="#9ca3af"/><line x1="{left}" y1="{top}" x2="{left}" y2="{b}" stroke="#9ca3af"/><text x="{mx}" y="{ty}" font-size="11" text-anchor="middle">recall (higher is better)</text><text x="12" y="{my}" font-size="11" transform="rotate(-90 12 {my})" text-anchor="middle">cost vs none (lower is better)</text><text x="{left}" y="{ty}" font-size="10">{lo:.0}%</text><text x="{r}" y="{ty}" font-size="10" text-anchor="end">100%</text><text x="{lx}" y="{cy}" font-size="10" text-anchor="end">{maxc:.2}x</text><text x="{lx}" y="{b}" font-size="10" text-anchor="end">{minc:.2}x</text>"##,
        b = h - bottom,
        r = w - right,
        mx = (left + w - right) / 2.0,
        ty = h - bottom + 28.0,
        my = (top + h - bottom) / 2.0,
        lo = min_recall * 100.0,
        lx = left - 4.0,
        cy = top + 8.0,
        maxc = max_cost,
        minc = min_cost,
    );
    let mut frontier: Vec<&(&Row, f64, f64)> = points.iter().filter(|p| p.0.pareto).collect();
    frontier.sort_by(|a, b| a.1.total_cmp(&b.1));
    let path: Vec<String> = frontier
        .iter()
        .map(|p| format!("{:.1},{:.1}", x(p.1), y(p.2)))
        .collect();
    if path.len() > 1 {
        let _ = write!(
            svg,
            r##"<polyline points="{}" fill="none" stroke="#111827" stroke-dasharray="4 3"/>"##,
            path.join(" ")
        );
    }
    for (i, (row, recall, cost)) in points.iter().enumerate() {
        let (cx, cy) = (x(*recall), y(*cost));
        let color = policy_color(policies, &row.policy);
        if row.policy == "foresight" {
            let _ = write!(
                svg,
                r#"<circle cx="{cx:.1}" cy="{cy:.1}" r="6" fill="none" stroke="{color}" stroke-width="2"><title>foresight (the bound)</title></circle>"#
            );
        } else {
            let _ = write!(
                svg,
                r#"<circle class="point" data-policy="{p}" cx="{cx:.1}" cy="{cy:.1}" r="4.5" fill="{color}"><title>{p}: {c:.3}x at {rc:.1}%</title></circle>"#,
                p = esc(&row.policy),
                c = cost,
                rc = recall * 100.0
            );
        }
        let _ = write!(
            svg,
            r#"<text x="{lx:.1}" y="{ly:.1}" font-size="10" fill="{color}">{name}{mark}</text>"#,
            lx = w - right + 8.0,
            ly = top + 12.0 + i as f64 * 13.0,
            name = esc(&row.policy),
            mark = if row.pareto { " *" } else { "" },
        );
    }
    svg.push_str("</svg>");
    svg
}

/// Per request of one session, recorded against simulated: cache reads, and the input billed
/// at full price or more (writes and uncached input), as four lines.
pub struct BillChart {
    /// (recorded reads, simulated reads, recorded other input, simulated other input).
    pub requests: Vec<[f64; 4]>,
}

fn bill_chart(chart: &BillChart) -> String {
    let (w, h, left, bottom, top) = (900.0, 300.0, 70.0, 36.0, 16.0);
    let n = chart.requests.len().max(2) as f64;
    let max = chart
        .requests
        .iter()
        .flat_map(|r| r.iter().copied())
        .fold(1.0, f64::max);
    let x = |i: usize| left + (w - left - 10.0) * i as f64 / (n - 1.0);
    let y = |v: f64| top + (h - top - bottom) * (1.0 - v / max);
    let mut svg = format!(
        r##"<svg width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img"><line x1="{left}" y1="{}" x2="{}" y2="{}" stroke="#9ca3af"/><text x="4" y="{}" font-size="11">{}</text><text x="4" y="{}" font-size="11">0</text><text x="{left}" y="{}" font-size="11">request</text>"##,
        h - bottom,
        w - 10.0,
        h - bottom,
        top + 10.0,
        crate::table::num(max as u64),
        h - bottom,
        h - 6.0
    );
    let series = [
        ("recorded reads", "#2563eb", ""),
        ("simulated reads", "#2563eb", r#" stroke-dasharray="5 4""#),
        ("recorded writes and uncached", "#dc2626", ""),
        (
            "simulated writes and uncached",
            "#dc2626",
            r#" stroke-dasharray="5 4""#,
        ),
    ];
    for (k, (_, color, dash)) in series.iter().enumerate() {
        let points: Vec<String> = chart
            .requests
            .iter()
            .enumerate()
            .map(|(i, r)| format!("{:.1},{:.1}", x(i), y(r[k])))
            .collect();
        let _ = write!(
            svg,
            r#"<polyline fill="none" stroke="{color}" stroke-width="1.5"{dash} points="{}"/>"#,
            points.join(" ")
        );
    }
    svg.push_str("</svg><div class=\"legend\">");
    for (name, color, dash) in series {
        let _ = write!(
            svg,
            r#"<span><i style="background:{color};{}"></i>{}</span>"#,
            if dash.is_empty() { "" } else { "opacity:.5" },
            esc(name)
        );
    }
    svg.push_str("</div>");
    svg
}

pub fn report(
    tables: &[(u64, &str, &str, &[Row])],
    runs: &[SessionRun],
    chart_source: usize,
    chart_session: &str,
    chart_window: u64,
    sections: &[crate::table::Section],
    bill: Option<&BillChart>,
) -> String {
    let mut page = String::from(
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><title>ctxgc replay report</title><style>
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:24px;color:#111827;max-width:1100px}
h1{font-size:22px}h2{font-size:17px;margin-top:28px}table{border-collapse:collapse;font-size:13px;margin:8px 0}
td,th{border:1px solid #d1d5db;padding:4px 8px;text-align:right}td:first-child,th:first-child{text-align:left}
th{background:#f3f4f6}.legend span{margin-right:14px;font-size:12px}.legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:middle}
.pair{display:flex;gap:24px;flex-wrap:wrap}p.note{font-size:13px;color:#4b5563}
</style></head><body><h1>ctxgc replay report</h1>
<p class="note">Every policy replays the same sessions as a live agent would. Costs use the cache model and prices named per table; recall is the share of strings the agent used (learnt from tool outputs) still present verbatim in the request.</p>"#,
    );
    let policies: Vec<String> = tables
        .first()
        .map(|t| {
            t.3.iter()
                .filter(|r| r.policy != "recorded")
                .map(|r| r.policy.clone())
                .collect()
        })
        .unwrap_or_default();
    let _ = write!(
        page,
        "<h2>Prompt tokens per turn: {} at a {}-token window</h2>",
        esc(chart_session),
        crate::table::num(chart_window)
    );
    page.push_str(&turn_chart(runs, chart_source, chart_window, &policies));
    if let Some(bill) = bill.filter(|b| !b.requests.is_empty()) {
        let _ = write!(
            page,
            "<h2>What the provider billed against what the lab simulates: {}, policy none, input tokens per request</h2>",
            esc(chart_session)
        );
        page.push_str(&bill_chart(bill));
    }
    for (window, cache, model, rows) in tables {
        let _ = write!(
            page,
            "<h2>Window {} tokens, {} cache model ({} prices)</h2>",
            crate::table::num(*window),
            esc(cache),
            esc(model)
        );
        let (header, cells) = crate::table::policy_cells(rows);
        page.push_str(&table(&header, &cells));
        let max_cost = rows
            .iter()
            .filter_map(|r| r.cost_vs_none)
            .fold(1.0, f64::max);
        page.push_str(r#"<div class="pair"><div><b>Cost relative to none</b><br>"#);
        page.push_str(&bars(
            &policies,
            rows,
            |r| r.cost_vs_none,
            |v| format!("{v:.2}x"),
            max_cost,
        ));
        page.push_str("</div><div><b>Reference recall</b><br>");
        page.push_str(&bars(
            &policies,
            rows,
            |r| r.recall,
            |v| format!("{:.1}%", v * 100.0),
            1.0,
        ));
        page.push_str("</div></div>");
        page.push_str("<div><b>Cost and recall: the frontier</b><br>");
        page.push_str(&frontier_chart(&policies, rows));
        let _ = write!(
            page,
            r#"<p class="note">{}</p></div>"#,
            esc(crate::table::WITH_RECALLS_NOTE)
        );
    }
    for section in sections {
        let _ = write!(page, "<h2>{}</h2>", esc(&section.title));
        page.push_str(&table(&section.header, &section.rows));
    }
    page.push_str("</body></html>\n");
    page
}
