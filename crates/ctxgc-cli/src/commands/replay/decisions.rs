//! `ctxgc replay --explain SESSION`: every decision the engine's events made on the sessions
//! whose id contains SESSION (each output pruned, kept or summarised, and why), then every
//! reference the agent went on to use that the policy did not show, with the decision that hid
//! it. On a client's log only what the client itself showed counts (`none` runs beside every
//! policy): a reference the client's own compaction dropped was hidden by nobody in front of it.

use std::collections::HashMap;

use ctxgc_core::engine::event::{Action, Decision};
use ctxgc_replay::run::SessionRun;

/// The report, as lines: one section per matching run that made decisions or hid references.
pub(super) fn explain(query: &str, runs: &[SessionRun]) -> Vec<String> {
    let mut out = Vec::new();
    for run in runs
        .iter()
        .filter(|r| r.session.contains(query) && r.policy != "none")
    {
        let client_missed = ctxgc_replay::misses::client_missed(runs, run).unwrap_or_default();
        let shown_by_client = |index: usize, string: &str| {
            !client_missed
                .get(&index)
                .is_some_and(|missed| missed.contains(string))
        };
        let events: Vec<_> = run
            .requests
            .iter()
            .filter(|r| !r.decisions.is_empty())
            .collect();
        let misses: Vec<_> = run
            .requests
            .iter()
            .filter(|r| {
                r.misses
                    .iter()
                    .any(|m| shown_by_client(r.source_index, &m.string))
            })
            .collect();
        if events.is_empty() && misses.is_empty() {
            continue;
        }
        let window = if run.window == ctxgc_replay::run::CLIENT_WINDOW {
            "the client's window".to_owned()
        } else {
            format!("{}K", run.window / 1000)
        };
        out.push(format!("{} (policy {}, {window})", run.session, run.policy));
        // The latest decision on each output so far, for the misses.
        let mut last: HashMap<&str, (usize, &Decision)> = HashMap::new();
        let mut hidden = Vec::new();
        for r in &run.requests {
            for d in &r.decisions {
                last.insert(d.call_id.as_str(), (r.source_index, d));
            }
            for m in r
                .misses
                .iter()
                .filter(|m| shown_by_client(r.source_index, &m.string))
            {
                let why = match last.get(m.call_id.as_str()) {
                    // Kept whole as it entered: the string was in what its trim cut.
                    Some((at, d)) if d.action == Action::Kept => format!(
                        "cut at insertion (the output's trim); the event before request {at} kept the rest: {}",
                        d.describe()
                    ),
                    Some((at, d)) => format!("{} before request {at}", d.describe()),
                    None => "cut at insertion (the output's trim), not by an event".to_owned(),
                };
                hidden.push(format!(
                    "    request {}: {:?} from {} {} ({} turns old): {why}",
                    r.source_index, m.string, m.tool, m.call_id, m.turns_ago
                ));
            }
            if r.decisions.is_empty() {
                continue;
            }
            let count = |a: Action| r.decisions.iter().filter(|d| d.action == a).count();
            out.push(format!(
                "  before request {} ({}): {} pruned, {} kept, {} summarised",
                r.source_index,
                r.event.as_deref().unwrap_or("event"),
                count(Action::Pruned),
                count(Action::Kept),
                count(Action::Summarised)
            ));
            for d in &r.decisions {
                out.push(format!("    {} {}: {}", d.call_id, d.tool, d.describe()));
            }
        }
        if !hidden.is_empty() {
            out.push(if run.client_path {
                "  what the agent used later that the client showed and this policy did not:".into()
            } else {
                "  what the agent used later that this policy did not show:".into()
            });
            out.extend(hidden);
        }
        out.push(String::new());
    }
    if out.is_empty() {
        out.push(format!(
            "no run of a session whose id contains {query:?} made a decision or hid a reference"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use ctxgc_replay::run::{Miss, RequestRecord, SessionRun};

    use super::explain;

    fn run(policy: &str, missed: &[&str]) -> SessionRun {
        SessionRun {
            source: 0,
            session: "client-log".into(),
            policy: policy.into(),
            window: 0,
            limit: 200_000,
            requests: vec![RequestRecord {
                source_index: 7,
                recall: (0, missed.len()),
                misses: missed
                    .iter()
                    .map(|s| Miss {
                        string: (*s).into(),
                        tool: "Read".into(),
                        turns_ago: 3,
                        call_id: "toolu_1".into(),
                    })
                    .collect(),
                ..RequestRecord::default()
            }],
            client_path: true,
            on_client_log: true,
            by_kind: BTreeMap::new(),
        }
    }

    /// A reference the client's own compaction dropped was hidden by nobody in front of it: the
    /// report names only what the client showed and the policy did not.
    #[test]
    fn only_what_the_client_showed_is_explained() {
        let runs = [
            run("ctxgc", &["dropped_by_client", "hidden_by_ctxgc"]),
            run("none", &["dropped_by_client"]),
        ];
        let report = explain("client-log", &runs).join("\n");
        assert!(report.contains("\"hidden_by_ctxgc\""), "{report}");
        assert!(!report.contains("dropped_by_client"), "{report}");
        let nothing = explain(
            "client-log",
            &[run("ctxgc", &["a_string"]), run("none", &["a_string"])],
        );
        assert_eq!(nothing.len(), 1, "{nothing:?}");
        assert!(nothing[0].starts_with("no run of a session"), "{nothing:?}");
    }
}
