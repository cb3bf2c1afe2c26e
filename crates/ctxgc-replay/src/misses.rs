//! What a policy in front of a client hid that the client itself still showed: per request,
//! the references `none` (the client's own request) found and the policy's request did not,
//! by the tool that produced them and how old they were. It says why "of client's" is under
//! 100%, on logs the lab has never seen (`ctxgc replay --misses`).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::run::{Miss, SessionRun};

/// How many examples a summary keeps.
const EXAMPLES: usize = 20;

/// One policy's misses at one window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClientMisses {
    /// Policy.
    pub policy: String,
    /// Window.
    pub window: u64,
    /// References the client's requests showed that the policy's did not.
    pub total: usize,
    /// The same by the tool they came from, most first.
    pub by_tool: Vec<(String, usize)>,
    /// The same by how many assistant turns old their output was.
    pub by_age: Vec<(&'static str, usize)>,
    /// The first few, in session and request order.
    pub examples: Vec<MissExample>,
}

/// One reference a policy hid that the client showed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MissExample {
    /// Session id.
    pub session: String,
    /// Index of the assistant message whose request missed it.
    pub request: usize,
    /// The miss.
    #[serde(flatten)]
    pub miss: Miss,
}

/// Age buckets, in assistant turns.
const AGES: [(&str, usize); 4] = [
    ("under 5 turns", 5),
    ("5-9 turns", 10),
    ("10-19 turns", 20),
    ("20 turns or more", usize::MAX),
];

fn age_bucket(turns: usize) -> &'static str {
    AGES.iter()
        .find(|(_, below)| turns < *below)
        .map_or(AGES[AGES.len() - 1].0, |(name, _)| name)
}

/// What the client itself did not show in each agent request of `run`'s session (its `none`
/// run on the client's path at the same window), by request; `None` when there is no such run
/// (off a client's path `none` shows everything).
pub fn client_missed<'a>(
    runs: &'a [SessionRun],
    run: &SessionRun,
) -> Option<BTreeMap<usize, BTreeSet<&'a str>>> {
    let none = runs.iter().find(|r| {
        r.policy == "none" && r.source == run.source && r.window == run.window && r.client_path
    })?;
    Some(
        none.requests
            .iter()
            .filter(|r| r.is_agent())
            .map(|r| {
                (
                    r.source_index,
                    r.misses.iter().map(|m| m.string.as_str()).collect(),
                )
            })
            .collect(),
    )
}

/// The misses of `policy` at `window` on client paths, against `none`'s in the same requests;
/// `None` when it ran on no client path.
pub fn client_misses(runs: &[SessionRun], window: u64, policy: &str) -> Option<ClientMisses> {
    let mine: Vec<&SessionRun> = runs
        .iter()
        .filter(|r| r.policy == policy && r.window == window && r.client_path)
        .collect();
    if mine.is_empty() || policy == "none" {
        return None;
    }
    let mut by_tool: BTreeMap<String, usize> = BTreeMap::new();
    let mut by_age: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut examples = Vec::new();
    let mut total = 0;
    for run in mine {
        let Some(client_missed) = client_missed(runs, run) else {
            continue;
        };
        for request in run.requests.iter().filter(|r| r.is_agent()) {
            let theirs = client_missed.get(&request.source_index);
            for miss in &request.misses {
                if theirs.is_some_and(|t| t.contains(miss.string.as_str())) {
                    continue;
                }
                total += 1;
                *by_tool.entry(miss.tool.clone()).or_default() += 1;
                *by_age.entry(age_bucket(miss.turns_ago)).or_default() += 1;
                if examples.len() < EXAMPLES {
                    examples.push(MissExample {
                        session: run.session.clone(),
                        request: request.source_index,
                        miss: miss.clone(),
                    });
                }
            }
        }
    }
    let mut by_tool: Vec<(String, usize)> = by_tool.into_iter().collect();
    by_tool.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let by_age = AGES
        .iter()
        .filter_map(|(name, _)| by_age.get(name).map(|&n| (*name, n)))
        .collect();
    Some(ClientMisses {
        policy: policy.to_owned(),
        window,
        total,
        by_tool,
        by_age,
        examples,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(policy: &str, misses: Vec<Vec<Miss>>) -> SessionRun {
        SessionRun::for_test(
            policy,
            true,
            misses.into_iter().map(|m| ((0, 0), m)).collect(),
        )
    }

    fn miss(string: &str, tool: &str, turns_ago: usize) -> Miss {
        Miss {
            string: string.into(),
            tool: tool.into(),
            turns_ago,
            call_id: "call_1".into(),
        }
    }

    #[test]
    fn only_what_the_client_showed_counts() {
        let runs = vec![
            // The client's own request missed `old_name` (its compaction dropped it).
            run("none", vec![vec![], vec![miss("old_name", "Read", 40)]]),
            run(
                "ctxgc",
                vec![
                    vec![miss("parse_header", "Read", 2)],
                    vec![
                        miss("old_name", "Read", 40),
                        miss("E0308", "Bash", 12),
                        miss("src/lib.rs", "Read", 3),
                    ],
                ],
            ),
        ];
        let m = client_misses(&runs, 200_000, "ctxgc").unwrap();
        assert_eq!(m.total, 3);
        assert_eq!(m.by_tool, vec![("Read".into(), 2), ("Bash".into(), 1)]);
        assert_eq!(m.by_age, vec![("under 5 turns", 2), ("10-19 turns", 1)]);
        assert_eq!(m.examples[0].miss.string, "parse_header");
        assert_eq!(m.examples[0].request, 1);
        assert!(client_misses(&runs, 200_000, "none").is_none());
        assert!(client_misses(&runs, 64_000, "ctxgc").is_none());
    }
}
