//! Fitting the relevance table (`ctxgc replay --fit-relevance`): examples from real sessions,
//! each tool output at each later request with what was known then (the engine's own
//! [`OutputIndex`]) and whether the agent used it afterwards (the lab's references: a string
//! the agent uses that it could only have learnt from a tool output, credited to the newest
//! output before the use that shows it), and how a table fitted without a user does on them.

use std::collections::BTreeMap;

use aho_corasick::AhoCorasick;
use ctxgc_core::engine::relevance::{Age, Features, OutputIndex, Relevance};
use ctxgc_core::{Role, Transcript};

use crate::recall::{message_text, probes};

/// Outputs younger than this many turns are not decided on: every event keeps them.
pub const MIN_AGE_TURNS: usize = 3;

/// One decision's worth of knowledge and what followed.
#[derive(Debug, Clone, Copy)]
pub struct Example {
    /// What was known.
    pub features: Features,
    /// Whether the agent used the output at or after that request.
    pub used_again: bool,
}

/// The examples of one session: every tool output at every request at least
/// [`MIN_AGE_TURNS`] after it.
pub fn examples(t: &Transcript) -> Vec<Example> {
    let messages = &t.messages;
    let index = OutputIndex::new(messages);
    let outputs = index.outputs();
    let uses = later_uses(t, &outputs);
    let requests: Vec<usize> = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.role == Role::Assistant)
        .map(|(i, _)| i)
        .collect();
    let mut out = Vec::new();
    for (k, &o) in outputs.iter().enumerate() {
        let last_use = uses[k];
        for &at in requests.iter().filter(|&&r| r > o) {
            let Some(features) = index.features(o, at) else {
                continue;
            };
            if features.age < Age::of(MIN_AGE_TURNS) {
                continue;
            }
            out.push(Example {
                features,
                used_again: last_use.is_some_and(|u| u >= at),
            });
        }
    }
    out
}

/// For each output (aligned with `outputs`), the last request that used what it showed: each
/// reference the lab checks ([`probes`]) is credited to the newest output before it holding
/// the string.
fn later_uses(t: &Transcript, outputs: &[usize]) -> Vec<Option<usize>> {
    let probes = probes(t);
    let strings: Vec<&str> = {
        let mut all: Vec<&str> = probes.values().flatten().map(String::as_str).collect();
        all.sort_unstable();
        all.dedup();
        all
    };
    let mut last = vec![None; outputs.len()];
    if strings.is_empty() {
        return last;
    }
    let Ok(matcher) = AhoCorasick::new(&strings) else {
        return last;
    };
    // Per string, the outputs showing it, in order.
    let mut holders: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (k, &o) in outputs.iter().enumerate() {
        let text = message_text(&t.messages[o]);
        let mut found: Vec<usize> = matcher
            .find_overlapping_iter(&text)
            .map(|m| m.pattern().as_usize())
            .collect();
        found.sort_unstable();
        found.dedup();
        for s in found {
            holders.entry(s).or_default().push(k);
        }
    }
    for (&at, used) in &probes {
        for s in used {
            let Ok(p) = strings.binary_search(&s.as_str()) else {
                continue;
            };
            let Some(list) = holders.get(&p) else {
                continue;
            };
            // The newest output before the request that shows the string.
            let before = list.partition_point(|&k| outputs[k] < at);
            if let Some(&k) = before.checked_sub(1).and_then(|b| list.get(b)) {
                last[k] = Some(last[k].map_or(at, |u: usize| u.max(at)));
            }
        }
    }
    last
}

/// How a table does on examples it was not fitted on, at one threshold: the share of old
/// outputs' bytes an event would prune (those under the threshold) and the share of the later
/// uses it would hide.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Judged {
    /// Examples.
    pub examples: usize,
    /// Examples the agent used again.
    pub used_again: usize,
    /// Share of the examples' bytes under the threshold.
    pub pruned_bytes: f64,
    /// Share of the used-again examples under the threshold.
    pub hidden_uses: f64,
}

/// `examples` judged by `table` at `threshold`.
pub fn judge(table: &Relevance, examples: &[Example], threshold: f64) -> Judged {
    let (mut bytes, mut pruned, mut used, mut hidden) = (0u64, 0u64, 0usize, 0usize);
    for e in examples {
        let under = table.estimate(&e.features).likelihood < threshold;
        bytes += e.features.bytes as u64;
        used += usize::from(e.used_again);
        if under {
            pruned += e.features.bytes as u64;
            hidden += usize::from(e.used_again);
        }
    }
    Judged {
        examples: examples.len(),
        used_again: used,
        pruned_bytes: pruned as f64 / bytes.max(1) as f64,
        hidden_uses: hidden as f64 / used.max(1) as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxgc_core::{Block, Message, ToolCall};

    fn call(id: &str, args: &str) -> Message {
        Message {
            role: Role::Assistant,
            content: vec![Block::ToolCall(ToolCall {
                id: id.into(),
                name: "Read".into(),
                arguments: args.into(),
                implicit: false,
            })],
            usage: None,
        }
    }

    #[test]
    fn a_later_use_labels_the_output_until_it_happens() {
        let mut messages = vec![
            Message::text(Role::User, "Fix the parser."),
            call("c1", r#"{"file_path": "src/parser.rs"}"#),
            Message::tool_result(
                "c1",
                Some("Read".into()),
                "fn parse_header_line() {}",
                false,
            ),
        ];
        for turn in 0..8 {
            let text = if turn == 6 {
                "Now I change parse_header_line".to_owned()
            } else {
                format!("step {turn}")
            };
            messages.push(Message::text(Role::Assistant, text));
            messages.push(Message::text(Role::User, "go on"));
        }
        let t = Transcript {
            messages,
            ..Transcript::default()
        };
        let examples = examples(&t);
        assert!(!examples.is_empty());
        // Used again at the requests up to the use, not after it.
        let labels: Vec<bool> = examples.iter().map(|e| e.used_again).collect();
        assert!(
            labels.first() == Some(&true) && labels.last() == Some(&false),
            "{labels:?}"
        );
    }
}
