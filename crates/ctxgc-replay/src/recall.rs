//! Reference recall: does the request still show what the agent went on to use?
//!
//! For each assistant message, the *salient strings* it uses are extracted: identifiers of 6+
//! characters that look like code (snake_case, camelCase, or with digits), file paths, numbers
//! of 4+ digits, quoted strings (4 to 60 characters), and error names and codes. A string counts
//! when it first appeared in an earlier tool output and nowhere in earlier user or system text
//! (so the agent could only have learnt it from a tool). Recall is the share of those strings
//! present verbatim in the request that produced the message. A policy with recall tools is
//! not credited for recalls the recorded agent never made: only the request text counts.

use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

use ctxgc_core::{Block, Message, Role, Transcript};
use regex::Regex;

// Constant patterns, compiled by every recall test: a failure is a broken build.
#[allow(clippy::expect_used)]
fn patterns() -> &'static [Regex] {
    static P: OnceLock<Vec<Regex>> = OnceLock::new();
    P.get_or_init(|| {
        [
            // Quoted strings.
            r#""([^"\n]{4,60})""#,
            r"'([^'\n]{4,60})'",
            r"`([^`\n]{4,60})`",
            // Paths with an extension or a directory.
            r"((?:[\w.-]+/)+[\w.-]+|[\w-]+\.(?:py|rs|js|ts|tsx|go|java|c|h|cpp|rb|php|json|toml|yaml|yml|md|txt|cfg|ini|sh|html|css))",
            // Error names and codes.
            r"\b([A-Z][A-Za-z]*(?:Error|Exception)|E\d{4}|[A-Z]{2,}\d{3,})\b",
            // Numbers of 4+ digits.
            r"\b(\d{4,})\b",
            // Code-like identifiers of 6+ characters.
            r"\b([A-Za-z_][A-Za-z0-9_]{5,})\b",
        ]
        .iter()
        .map(|p| Regex::new(p).expect("recall patterns are valid"))
        .collect()
    })
}

/// The first patterns, those of quoted strings.
const QUOTED_PATTERNS: usize = 3;

fn code_like(word: &str) -> bool {
    word.contains('_')
        || word.chars().any(|c| c.is_ascii_digit())
        || word.chars().skip(1).any(|c| c.is_ascii_uppercase())
}

/// The salient strings of a text.
pub fn salient_strings(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (i, re) in patterns().iter().enumerate() {
        for cap in re.captures_iter(text) {
            let s = cap.get(1).map_or("", |m| m.as_str());
            // A quote escaped in the writer's own language (a shell's `"{\"id\": \"ab12\"}"`)
            // ends the string before its backslash: the string is `ab12`, not `ab12\`.
            let s = if i < QUOTED_PATTERNS {
                s.strip_suffix('\\').unwrap_or(s)
            } else {
                s
            };
            let last = i == patterns().len() - 1;
            if s.len() < 4 || (last && !code_like(s)) || out.iter().any(|o| o == s) {
                continue;
            }
            out.push(s.to_owned());
        }
    }
    out.truncate(64);
    out
}

/// The searchable text of a message: its texts, tool results and call arguments.
pub fn message_text(m: &Message) -> String {
    let mut out = String::new();
    for block in &m.content {
        match block {
            Block::Text { text } => out.push_str(text),
            Block::ToolCall(c) => out.push_str(&c.arguments),
            Block::ToolResult(r) => out.push_str(&r.text()),
            _ => {}
        }
        out.push('\n');
    }
    out
}

/// For each assistant message index, the strings it uses that only a tool output could have
/// told it.
pub fn probes(t: &Transcript) -> BTreeMap<usize, Vec<String>> {
    let mut probes = BTreeMap::new();
    let mut tool_text = String::new();
    let mut other_text = String::new();
    for (i, m) in t.messages.iter().enumerate() {
        match m.role {
            Role::Assistant => {
                // The calls' arguments as the model meant them, not as JSON escaped them (else
                // `\"Tools\"` yields the string `Tools\`).
                let mine = m.text_content()
                    + "\n"
                    + &m.tool_calls()
                        .map(|c| c.argument_text())
                        .collect::<Vec<_>>()
                        .join("\n");
                let strings: Vec<String> = salient_strings(&mine)
                    .into_iter()
                    .filter(|s| tool_text.contains(s.as_str()) && !other_text.contains(s.as_str()))
                    .collect();
                if !strings.is_empty() {
                    probes.insert(i, strings);
                }
                other_text.push_str(&mine);
            }
            Role::Tool => tool_text.push_str(&message_text(m)),
            Role::User | Role::System => other_text.push_str(&message_text(m)),
        }
    }
    probes
}

/// Presence checks memoised per (message hash, string).
#[derive(Default)]
pub struct RecallMemo {
    seen: HashMap<(u64, String), bool>,
}

impl RecallMemo {
    /// How many of `strings` appear verbatim in the request (`hashes` are the messages' content
    /// hashes, aligned with `messages`).
    pub fn found(&mut self, strings: &[String], messages: &[Message], hashes: &[u64]) -> usize {
        strings.len() - self.missing(strings, messages, hashes).len()
    }

    /// Those of `strings` the request does not show.
    pub fn missing<'s>(
        &mut self,
        strings: &'s [String],
        messages: &[Message],
        hashes: &[u64],
    ) -> Vec<&'s String> {
        let mut texts: HashMap<usize, String> = HashMap::new();
        strings
            .iter()
            .filter(|s| {
                !(0..messages.len()).rev().any(|i| {
                    let key = (hashes[i], (*s).clone());
                    if let Some(&hit) = self.seen.get(&key) {
                        return hit;
                    }
                    let text = texts.entry(i).or_insert_with(|| message_text(&messages[i]));
                    let hit = memchr::memmem::find(text.as_bytes(), s.as_bytes()).is_some();
                    self.seen.insert(key, hit);
                    hit
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn salient_strings_are_code_like() {
        let s = salient_strings(
            "I'll fix `separability_matrix` in astropy/modeling/separable.py (line 2432); ValueError and E0308 seen. The result should work.",
        );
        for want in [
            "separability_matrix",
            "astropy/modeling/separable.py",
            "2432",
            "ValueError",
            "E0308",
        ] {
            assert!(s.iter().any(|x| x == want), "{want} missing from {s:?}");
        }
        assert!(!s.iter().any(|x| x == "should" || x == "result"), "{s:?}");
        // Quotes escaped inside a shell command delimit the strings they quote.
        let s = salient_strings(r#"curl -d "{\"voice\": \"T720Rsq\"}" api"#);
        assert!(s.iter().any(|x| x == "T720Rsq"), "{s:?}");
        assert!(!s.iter().any(|x| x.ends_with('\\')), "{s:?}");
    }

    /// A session: the user's `task`, one tool `output`, then the agent's `reply`.
    fn after_output(task: &str, output: &str, reply: Message) -> Transcript {
        Transcript {
            id: "t".into(),
            messages: vec![
                Message::text(Role::User, task),
                Message::tool_result("c", Some("bash".into()), output, false),
                reply,
            ],
            tools: vec![],
            recording: None,
            model: None,
        }
    }

    #[test]
    fn probes_count_only_what_came_from_tools() {
        let t = after_output(
            "fix parse_header please",
            "src/parser.rs:12: fn parse_header_v2()",
            Message::text(
                Role::Assistant,
                "parse_header calls parse_header_v2 in src/parser.rs",
            ),
        );
        let p = probes(&t);
        assert_eq!(
            p[&2],
            vec!["src/parser.rs".to_owned(), "parse_header_v2".to_owned()]
        );
    }

    #[test]
    fn probes_read_call_arguments_as_the_model_meant_them() {
        // A call's arguments are JSON: the string the model quoted is `ToolsPanel`, not
        // `ToolsPanel\` (cut at the escape), and a name after an escaped newline is `load_cfg`,
        // not `nload_cfg`.
        let t = after_output(
            "tidy the panel",
            r#"ui.py:3: title = "ToolsPanel"  # load_cfg() below"#,
            Message {
                role: Role::Assistant,
                content: vec![Block::ToolCall(ctxgc_core::ToolCall {
                    id: "c2".into(),
                    name: "bash".into(),
                    arguments: r#"{"command":"grep -n \"ToolsPanel\" ui.py\nload_cfg"}"#.into(),
                    implicit: false,
                })],
                usage: None,
            },
        );
        let p = probes(&t);
        assert_eq!(
            p[&2],
            vec![
                "ToolsPanel".to_owned(),
                "ui.py".to_owned(),
                "load_cfg".to_owned()
            ]
        );
    }
}
