//! Engine invariants (property tests over random transcripts grown turn by turn) and the
//! behaviour of each rule on small, readable examples.

use proptest::prelude::*;

use super::*;
use crate::config::Config;
use crate::engine::drive::{drive, outline};
use crate::engine::integrity;
use crate::engine::plan::PruneReason;
use crate::engine::summary::SUMMARY_HEADER;
use crate::store::{MemoryStore, OriginalStore, SessionId};
use crate::tokens::{ProviderFamily, TokenCounter};
use crate::transcript::{Block, Message, Role, ToolCall, Transcript};
use serde_json::json;
use std::collections::BTreeMap;

mod events;
mod prunes;

/// A policy scaled down so that small random sessions cross the threshold several times.
fn small_config() -> Config {
    let mut c = Config::default();
    c.engine.min_reclaim_tokens = 400;
    c.engine.protected_min = 800;
    c.engine.protected_at_32k = 2_000;
    c.engine.runway_min_tokens = 200;
    c.engine.summary_min_tokens = 200;
    c.trim.min_limit_bytes = 1_024;
    c
}

/// `n` words of varied text (repeated characters would tokenize to almost nothing).
fn words(n: usize, seed: usize) -> String {
    (0..n)
        .map(|i| format!("word{} ", (i * 7919 + seed * 104_729) % 10_007))
        .collect()
}

fn call(id: &str, name: &str, args: serde_json::Value) -> Block {
    Block::ToolCall(ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: args.to_string(),
        implicit: false,
    })
}

#[derive(Debug, Clone)]
enum Step {
    User(String),
    Turn(Vec<(u8, usize, u8)>),
}

fn step_strategy() -> impl Strategy<Value = Step> {
    prop_oneof![
        1 => "[a-z ]{5,40}".prop_map(Step::User),
        6 => prop::collection::vec((0u8..4, 50usize..6_000, 0u8..6), 0..3).prop_map(Step::Turn),
    ]
}

/// Builds a transcript: tool kinds are a shell command (with an error now and then), a file
/// read (paths repeat, so re-reads and edits happen), a grep, and a file edit.
fn build(steps: &[Step]) -> Transcript {
    let mut messages = vec![
        Message::text(Role::System, "You are a coding agent."),
        Message::text(
            Role::User,
            "Fix the failing test. You must not change the public API.",
        ),
    ];
    let mut n = 0;
    for step in steps {
        match step {
            Step::User(text) => messages.push(Message::text(Role::User, text.as_str())),
            Step::Turn(calls) => {
                let mut content = vec![Block::text(format!("Step {n}. I will look further."))];
                let mut results = Vec::new();
                for &(kind, size, path) in calls {
                    n += 1;
                    let id = format!("call_{n}");
                    let path = format!("src/mod_{path}.rs");
                    let filler = words(size / 60, n);
                    let (name, args, output) = match kind {
                        0 => (
                            "bash",
                            serde_json::json!({"command": format!("cargo test -p m{n}")}),
                            (0..size / 40)
                                .map(|i| {
                                    if i == size / 80 && n % 3 == 0 {
                                        "error[E0308]: mismatched types\n".to_owned()
                                    } else {
                                        format!(
                                            "test case_{i} {} ... ok\n",
                                            &filler[..filler.len().min(i % 7 * 12)]
                                        )
                                    }
                                })
                                .collect::<String>()
                                + &format!("exit status: {}\n", n % 2),
                        ),
                        1 => (
                            "read_file",
                            serde_json::json!({"path": path}),
                            (0..size / 30)
                                .map(|i| format!("fn item_{i}_{n}() -> u32 {{ {i} }}\n"))
                                .collect(),
                        ),
                        2 => (
                            "grep",
                            serde_json::json!({"pattern": "fn item"}),
                            (0..size / 30)
                                .map(|i| format!("src/mod_{}.rs:{i}:fn item_{i}()\n", i % 5))
                                .collect(),
                        ),
                        _ => (
                            "edit_file",
                            serde_json::json!({"path": path, "new": filler}),
                            "ok".to_owned(),
                        ),
                    };
                    content.push(call(&id, name, args));
                    results.push(Message::tool_result(id, Some(name.into()), output, false));
                }
                messages.push(Message {
                    role: Role::Assistant,
                    content,
                    usage: None,
                });
                messages.extend(results);
            }
        }
    }
    Transcript {
        id: "random".into(),
        messages,
        tools: vec![],
        recording: None,
        model: None,
    }
}

fn without_durations(events: &[EventRecord]) -> Vec<EventRecord> {
    events
        .iter()
        .cloned()
        .map(|mut e| {
            e.duration_us = 0;
            e
        })
        .collect()
}

/// Drives a whole transcript through `session` with the extractive summarizer.
fn drive_through(source: &Transcript, session: &mut Session) {
    drive(source, session, &MemoryStore::default(), None, |_| {}).unwrap();
}

fn run(source: &Transcript, window: u64) -> (Session, MemoryStore, Vec<String>) {
    let config = small_config();
    let mut session = Session::new("s", window, &config, ProviderFamily::Openai);
    let store = MemoryStore::default();
    let mut violations = Vec::new();
    let mut previous: Option<Vec<Message>> = None;
    let mut head: Option<Vec<Message>> = None;
    drive(source, &mut session, &store, None, |view| {
        let prompt = view.session.prompt();
        if let Err(e) = integrity::check(prompt) {
            violations.push(format!("integrity at {}: {e}", view.source_index));
        }
        let rewrote = view.event.is_some_and(|e| e.kind.rewrites_history());
        if let Some(prev) = &previous
            && !rewrote
            && (prompt.len() < prev.len() || prompt[..prev.len()] != prev[..])
        {
            violations.push(format!(
                "prompt not append-only before message {}",
                view.source_index
            ));
        }
        let h = segments::head_end(prompt, 1);
        match &head {
            Some(saved) if prompt.len() >= saved.len() && prompt[..saved.len()] != saved[..] => {
                violations.push(format!("head changed at {}", view.source_index));
            }
            None if prompt.len() > h => head = Some(prompt[..h].to_vec()),
            _ => {}
        }
        if let Some(last_user) = source.messages[..view.source_index]
            .iter()
            .rev()
            .find(|m| m.role == Role::User)
        {
            let text = last_user.text_content();
            let kept = prompt.iter().any(|m| m.text_content() == text)
                || prompt.iter().any(|m| {
                    let t = m.text_content();
                    t.starts_with(SUMMARY_HEADER) && t.contains(&text)
                });
            if !kept {
                violations.push(format!("last user message lost at {}", view.source_index));
            }
        }
        previous = Some(prompt.to_vec());
    })
    .unwrap();
    (session, store, violations)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    #[test]
    fn engine_invariants_hold_on_random_sessions(steps in prop::collection::vec(step_strategy(), 5..45), window in 6_000u64..24_000) {
        let source = build(&steps);
        let (session, store, violations) = run(&source, window);
        prop_assert!(violations.is_empty(), "{violations:?}");
        integrity::check(session.prompt()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        // Every original is recallable, whole.
        for r in source.messages.iter().flat_map(Message::tool_results) {
            let text = r.text();
            let id = crate::ContentId::of(text.as_bytes());
            let stored = store.get(&crate::store::SessionId::new("s"), id).unwrap();
            prop_assert_eq!(stored.as_deref(), Some(text.as_str()));
            prop_assert_eq!(session.recall(&store, &id.to_string(), &Default::default()).unwrap(), text);
        }
        // Deterministic: the same input gives the same prompt and the same events.
        let (again, _, _) = run(&source, window);
        prop_assert_eq!(again.prompt(), session.prompt());
        prop_assert_eq!(without_durations(again.events()), without_durations(session.events()));
        // Events are rare: no two history rewrites on consecutive turns.
        let turns: Vec<usize> = session.events().iter().filter(|e| e.kind.rewrites_history()).map(|e| e.turn).collect();
        prop_assert!(turns.windows(2).all(|w| w[1] > w[0] + 1), "{turns:?}");
    }
}

/// A session of `turns` shell calls whose outputs are `size` bytes each.
fn shell_session(turns: usize, size: usize) -> Transcript {
    build(
        &(0..turns)
            .map(|_| Step::Turn(vec![(0, size, 0)]))
            .collect::<Vec<_>>(),
    )
}

/// `source` driven through a session at an 8K window, which must have compacted.
fn compacted_at_8k(source: &Transcript, config: &Config) -> Session {
    let mut session = Session::new("s", 8_000, config, ProviderFamily::Openai);
    drive_through(source, &mut session);
    assert!(
        session
            .events()
            .iter()
            .any(|e| e.kind == EventKind::Compaction),
        "{:?}",
        session.report()
    );
    session
}

struct Failing;
impl Summarizer for Failing {
    fn name(&self) -> &str {
        "test-llm"
    }
    fn summarize(&mut self, _: &SummaryRequest) -> Result<SummaryReply, SummarizerError> {
        Err(SummarizerError::Failed("HTTP 503 from upstream".into()))
    }
}

struct Echo(Vec<SummaryRequest>);
impl Summarizer for Echo {
    fn name(&self) -> &str {
        "echo"
    }
    fn summarize(&mut self, request: &SummaryRequest) -> Result<SummaryReply, SummarizerError> {
        self.0.push(request.clone());
        Ok(SummaryReply {
            body: "## Goal\n- fix it\n## Next steps\n- run the tests".into(),
            tokens_in: 1000,
            tokens_out: 20,
        })
    }
}

/// Real sessions (bundled MIT samples): the prompt just before and just after the first event of
/// each kind. django-14725 at 24K prunes; django-11885 at 16K compacts.
#[test]
fn snapshots_of_real_sessions() {
    let mut seen_kinds = Vec::new();
    for (file, window) in [
        ("django__django-14725", 24_000u64),
        ("django__django-11885", 16_000),
    ] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("../ctxgc-cli/samples/{file}.traj.json"));
        let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        let source = real_transcript(&doc);
        let mut session = Session::new(file, window, &Config::default(), ProviderFamily::Openai);
        let mut previous = String::new();
        let mut shots: Vec<(EventKind, String, String)> = Vec::new();
        drive(
            &source,
            &mut session,
            &MemoryStore::default(),
            None,
            |view| {
                let now = outline(view.session.prompt());
                if let Some(e) = view.event.filter(|e| e.kind.rewrites_history())
                    && !shots.iter().any(|(k, _, _)| *k == e.kind)
                {
                    shots.push((e.kind, previous.clone(), now.clone()));
                }
                previous = now;
            },
        )
        .unwrap();
        for (kind, before, after) in shots {
            let name = format!("{kind:?}").to_lowercase();
            insta::assert_snapshot!(format!("{file}_{window}_{name}_before"), before);
            insta::assert_snapshot!(format!("{file}_{window}_{name}_after"), after);
            seen_kinds.push(kind);
        }
    }
    assert!(
        seen_kinds.contains(&EventKind::PruneOnly) && seen_kinds.contains(&EventKind::Compaction),
        "{seen_kinds:?}"
    );
}

/// mini-swe-agent-1 text protocol, imported the way ctxgc-formats does (the core cannot depend
/// on it): a fenced bash block is an implicit call, the next user message its result.
fn real_transcript(doc: &serde_json::Value) -> Transcript {
    let mut messages = Vec::new();
    let mut pending: Option<String> = None;
    for (i, m) in doc["messages"].as_array().unwrap().iter().enumerate() {
        let text = m["content"].as_str().unwrap_or_default().to_owned();
        match m["role"].as_str().unwrap() {
            "system" => messages.push(Message::text(Role::System, text)),
            "assistant" => {
                let mut content = vec![Block::text(text.clone())];
                pending = None;
                if let (Some(start), 1) = (text.find("```bash\n"), text.matches("```bash").count())
                {
                    let body = &text[start + 8..];
                    let command = &body[..body.find("\n```").unwrap_or(body.len())];
                    let id = format!("call-{i}");
                    content.push(Block::ToolCall(ToolCall {
                        id: id.clone(),
                        name: "bash".into(),
                        arguments: serde_json::json!({"command": command}).to_string(),
                        implicit: true,
                    }));
                    pending = Some(id);
                }
                messages.push(Message {
                    role: Role::Assistant,
                    content,
                    usage: None,
                });
            }
            _ => match pending.take() {
                Some(id) => {
                    messages.push(Message::tool_result(id, Some("bash".into()), text, false))
                }
                None => messages.push(Message::text(Role::User, text)),
            },
        }
    }
    Transcript {
        id: "django".into(),
        messages,
        tools: vec![],
        recording: None,
        model: None,
    }
}

/// A Claude Code-like session: a reminder wrapped into the first user turn, the environment as a
/// `system` message in the middle of the history, and a shell that fails with exit code 3.
fn claude_code_like(turns: usize) -> Transcript {
    let mut messages = vec![
        Message::text(Role::System, "You are a coding agent."),
        Message {
            role: Role::User,
            content: vec![
                Block::text(
                    "<system-reminder>\nAttribution for git commits: end commit messages with Co-Authored-By: Agent.\n</system-reminder>\n",
                ),
                Block::text("Fix the failing deploy script."),
            ],
            usage: None,
        },
        Message::text(
            Role::System,
            "# Environment\n - Primary working directory: /home/dev/project",
        ),
    ];
    for i in 0..turns {
        let id = format!("c{i}");
        messages.push(Message {
            role: Role::Assistant,
            content: vec![
                Block::text(words(30, i)),
                call(
                    &id,
                    "Bash",
                    json!({"command": format!("./deploy.sh --step {i}")}),
                ),
            ],
            usage: None,
        });
        let output = if i == 2 {
            format!(
                "Exit code 3\n{}\nFATAL: disk quota exceeded on /var/lib/app\n{}",
                words(200, i),
                words(200, i + 1)
            )
        } else {
            words(400, i)
        };
        messages.push(Message::tool_result(
            &id,
            Some("Bash".into()),
            output,
            i == 2,
        ));
    }
    Transcript {
        id: "cc".into(),
        messages,
        tools: vec![],
        recording: None,
        model: None,
    }
}

/// `n` numbered lines of words: a build log that says nothing in particular.
fn log(n: usize, seed: usize) -> String {
    (0..n)
        .map(|i| format!("line {i}: {}\n", words(8, seed + i)))
        .collect()
}

/// A system prompt, the user's task, then one `make` call per output with its result.
fn make_session<const N: usize>(outputs: [String; N]) -> Vec<Message> {
    let mut messages = vec![
        Message::text(Role::System, "You are a coding agent."),
        Message::text(Role::User, "Fix the build."),
    ];
    for (i, output) in outputs.into_iter().enumerate() {
        let id = format!("c{i}");
        messages.push(Message {
            role: Role::Assistant,
            content: vec![call(&id, "bash", serde_json::json!({"command": "make"}))],
            usage: None,
        });
        messages.push(Message::tool_result(id, Some("bash".into()), output, false));
    }
    messages
}
