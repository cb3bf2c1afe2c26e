//! `foresight`: the perfect-foresight bound that the other policies are measured against.
//!
//! At insertion, each tool output keeps only its first two and last two lines and the lines
//! that hold a string a later assistant message uses (the reference-recall strings of
//! [`crate::recall`]), so its recall is 100% by construction and its cost is what remains when
//! nothing the agent goes on to use is dropped. No real policy can know the future; the gap
//! between `none` and `foresight` is what is left on the table, and each policy's "gap closed"
//! is the share of it that the policy saves.

use std::collections::HashMap;

use aho_corasick::AhoCorasick;
use ctxgc_core::{Block, Message, Role, Transcript};

use super::{History, ReplayPolicy, Request, set_result_text};
use crate::recall::probes;

/// Lines kept at each end of every output.
const EDGE_LINES: usize = 2;

/// The bound for one session.
#[derive(Default)]
pub struct Foresight {
    h: History,
    /// Per call id, the kept text of each of its results in transcript order.
    kept: HashMap<String, Vec<String>>,
}

impl Foresight {
    /// Looks ahead over the whole session once.
    pub fn new(t: &Transcript) -> Foresight {
        let probes = probes(t);
        // Each string, with the last assistant message that uses it.
        let mut last_use: HashMap<&str, usize> = HashMap::new();
        for (&index, strings) in &probes {
            for s in strings {
                last_use.insert(s.as_str(), index);
            }
        }
        let mut patterns: Vec<&str> = last_use.keys().copied().collect();
        patterns.sort_unstable();
        let uses: Vec<usize> = patterns.iter().map(|p| last_use[p]).collect();
        let matcher = AhoCorasick::new(&patterns).ok();
        let mut kept: HashMap<String, Vec<String>> = HashMap::new();
        for (index, message) in t.messages.iter().enumerate() {
            if message.role != Role::Tool {
                continue;
            }
            for result in message.tool_results() {
                let text = result.text();
                let lines: Vec<&str> = text.split('\n').collect();
                let used_later = |line: &str| {
                    matcher.as_ref().is_some_and(|m| {
                        m.find_overlapping_iter(line)
                            .any(|hit| uses[hit.pattern().as_usize()] > index)
                    })
                };
                let keep: Vec<&str> = lines
                    .iter()
                    .enumerate()
                    .filter(|&(i, line)| {
                        i < EDGE_LINES || i + EDGE_LINES >= lines.len() || used_later(line)
                    })
                    .map(|(_, line)| *line)
                    .collect();
                kept.entry(result.call_id.clone())
                    .or_default()
                    .push(keep.join("\n"));
            }
        }
        for texts in kept.values_mut() {
            texts.reverse(); // popped in transcript order
        }
        Foresight {
            h: History::default(),
            kept,
        }
    }
}

impl ReplayPolicy for Foresight {
    fn name(&self) -> String {
        "foresight".into()
    }
    fn push(&mut self, m: Message) {
        self.h.push(m);
    }
    fn insert_tool_results(&mut self, results: Vec<Message>) {
        for mut m in results {
            let call_id = m.tool_results().next().map(|r| r.call_id.clone());
            let only_text = m
                .tool_results()
                .all(|r| r.content.iter().all(|b| matches!(b, Block::Text { .. })));
            if let Some(text) = call_id
                .and_then(|id| self.kept.get_mut(&id))
                .and_then(Vec::pop)
                .filter(|_| only_text)
            {
                set_result_text(&mut m, text);
            }
            self.h.push(m);
        }
    }
    fn request(&mut self) -> Request<'_> {
        Request {
            long_ttl: None,
            messages: &self.h.messages,
            breakpoints: vec![],
            stable_breakpoint: false,
            event: None,
        }
    }
}
