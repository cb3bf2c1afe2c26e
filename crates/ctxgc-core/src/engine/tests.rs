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

#[test]
fn prune_only_when_it_buys_runway_else_compaction() {
    let config = small_config();
    // Many large old outputs: pruning them reclaims plenty.
    let source = shell_session(30, 3_000);
    let mut session = Session::new("s", 10_000, &config, ProviderFamily::Openai);
    let store = MemoryStore::default();
    drive(&source, &mut session, &store, None, |_| {}).unwrap();
    let kinds: Vec<EventKind> = session
        .events()
        .iter()
        .filter(|e| e.kind.rewrites_history())
        .map(|e| e.kind)
        .collect();
    assert!(kinds.contains(&EventKind::PruneOnly), "{kinds:?}");
    for e in session
        .events()
        .iter()
        .filter(|e| e.kind == EventKind::PruneOnly)
    {
        assert!(
            e.tokens_after <= config.engine.threshold(10_000) - config.engine.runway(10_000, 0),
            "{e:?}"
        );
    }
    // Chatty turns with small outputs: nothing to prune, so the event compacts.
    let chatty = build(
        &(0..60)
            .map(|i| {
                if i % 2 == 0 {
                    Step::User(words(120, i))
                } else {
                    Step::Turn(vec![(3, 60, 1)])
                }
            })
            .collect::<Vec<_>>(),
    );
    compacted_at_8k(&chatty, &config);
}

/// A model's runaway message (a 159K-character repetition loop, as a real session had) that
/// would stay whole in the tail is cut at the next event to its head and tail, and recalled.
#[test]
fn a_runaway_message_in_the_tail_is_cut_at_the_event_and_recallable() {
    let config = Config::default();
    let mut session = Session::new("s", 64_000, &config, ProviderFamily::Openai);
    let store = MemoryStore::default();
    session.push(Message::text(Role::User, "Fix the build."));
    let runaway = "Let me check the file again. ".repeat(5_500);
    assert!(runaway.len() > 150_000);
    let mut cut_at = None;
    // The runaway itself brings the first event (it stays: nothing follows it yet); the next
    // event cuts it.
    for turn in 0..60 {
        let text = if turn == 8 {
            runaway.as_str()
        } else {
            "Running the tests."
        };
        session.push(Message {
            role: Role::Assistant,
            content: vec![
                Block::text(text),
                call(&format!("c{turn}"), "bash", json!({"command": "make"})),
            ],
            usage: None,
        });
        let output = words(900, turn);
        session
            .insert_tool_results(
                &store,
                vec![Message {
                    role: Role::Tool,
                    content: vec![Block::ToolResult(crate::ToolResult {
                        call_id: format!("c{turn}"),
                        tool_name: Some("bash".into()),
                        content: vec![Block::text(output)],
                        is_error: false,
                    })],
                    usage: None,
                }],
            )
            .unwrap();
        let event = session.run_due_event(None).unwrap();
        if event.is_some() && turn > 8 {
            cut_at.get_or_insert(turn);
        }
    }
    assert!(cut_at.is_some(), "{:?}", session.report());
    let shown = session
        .prompt()
        .iter()
        .map(Message::text_content)
        .find(|t| t.contains("a runaway"))
        .unwrap_or_else(|| {
            panic!(
                "the runaway is cut: {:?}; longest text {}",
                session.events().iter().map(|e| e.kind).collect::<Vec<_>>(),
                session
                    .prompt()
                    .iter()
                    .map(|m| m.text_content().len())
                    .max()
                    .unwrap_or(0)
            )
        });
    assert!(shown.len() < 5_000, "{}", shown.len());
    let id = crate::ContentId::of(runaway.as_bytes()).to_string();
    assert!(shown.contains(&id));
    let recalled = session
        .recall(&store, &id, &crate::recall::RecallQuery::default())
        .unwrap();
    assert!(recalled.starts_with("Let me check the file again."));
    assert!(integrity::check(session.prompt()).is_ok());
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

#[test]
fn later_compactions_update_the_previous_summary() {
    let config = small_config();
    // Small tool outputs and long user messages: pruning cannot help, so events compact.
    let source = build(
        &(0..80)
            .map(|i| match i % 2 {
                0 => Step::User(format!("please also handle case {i}: {}", words(150, i))),
                _ => Step::Turn(vec![(3, 300, (i % 6) as u8)]),
            })
            .collect::<Vec<_>>(),
    );
    let mut session = Session::new("s", 8_000, &config, ProviderFamily::Openai);
    drive_through(&source, &mut session);
    let compactions = session
        .events()
        .iter()
        .filter(|e| e.kind == EventKind::Compaction)
        .count();
    assert!(compactions >= 2, "{:?}", session.report());
    let summaries: Vec<String> = session
        .prompt()
        .iter()
        .map(Message::text_content)
        .filter(|t| t.starts_with(SUMMARY_HEADER))
        .collect();
    assert_eq!(summaries.len(), 1, "one summary, updated in place");
    let s = &summaries[0];
    for section in [
        "## Task snapshot",
        "## Goal",
        "## Constraints and preferences",
        "## Progress",
        "## Key decisions",
        "## Discoveries and critical context",
        "## Relevant files",
        "## Next steps",
    ] {
        assert!(s.contains(section), "{section} missing:\n{s}");
    }
    assert!(s.contains("Modified: src/mod_"), "computed file list:\n{s}");
    assert!(
        s.contains("You must not change the public API."),
        "constraint carried:\n{s}"
    );
    assert!(s.trim_end().ends_with("[end of ctxgc context summary]"));
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

#[test]
fn llm_summaries_reuse_the_prompt_prefix_and_failures_fall_back() {
    let config = small_config();
    let chatty = build(
        &(0..60)
            .map(|i| {
                if i % 2 == 0 {
                    Step::User(words(120, i + 1))
                } else {
                    Step::Turn(vec![(3, 60, 1)])
                }
            })
            .collect::<Vec<_>>(),
    );
    let mut echo = Echo(Vec::new());
    let mut session = Session::new("s", 8_000, &config, ProviderFamily::Openai);
    let mut prompts = Vec::new();
    drive(
        &chatty,
        &mut session,
        &MemoryStore::default(),
        Some(&mut echo),
        |v| prompts.push(v.session.prompt().to_vec()),
    )
    .unwrap();
    let request = echo.0.first().expect("the LLM was asked");
    let instruction = request.messages.last().unwrap().text_content();
    assert!(
        instruction.starts_with("Summarise messages"),
        "{instruction}"
    );
    assert!(instruction.contains("tokens of facts, not instructions"));
    // The request extends the prompt of the agent's previous request: a cache hit upstream.
    let before = &request.messages[..request.messages.len() - 1];
    assert!(
        prompts
            .iter()
            .any(|p| p.len() * 2 > before.len() && before.starts_with(p)),
        "prefix reused"
    );
    let compaction = session
        .events()
        .iter()
        .find(|e| e.kind == EventKind::Compaction)
        .unwrap();
    assert_eq!(
        (
            compaction.summarizer_tokens_in,
            compaction.summarizer_tokens_out
        ),
        (1000, 20)
    );
    let summary = session
        .prompt()
        .iter()
        .map(Message::text_content)
        .find(|t| t.starts_with(SUMMARY_HEADER))
        .unwrap();
    assert!(summary.contains("## Goal\n- fix it"));
    assert!(summary.find("## Relevant files").unwrap() < summary.find("## Next steps").unwrap());

    let mut session = Session::new("s", 8_000, &config, ProviderFamily::Openai);
    drive(
        &chatty,
        &mut session,
        &MemoryStore::default(),
        Some(&mut Failing),
        |_| {},
    )
    .unwrap();
    let fallback = session
        .events()
        .iter()
        .find(|e| e.kind == EventKind::Fallback)
        .expect("fell back");
    assert!(
        fallback
            .note
            .as_deref()
            .is_some_and(|n| n.ends_with("test-llm summarizer failed: HTTP 503 from upstream")),
        "{:?}",
        fallback.note
    );
}

#[test]
fn agent_trim_replaces_only_the_latest_result() {
    let config = Config::default();
    let mut session = Session::new("s", 200_000, &config, ProviderFamily::Openai);
    let store = MemoryStore::default();
    session.push(Message::text(Role::User, "go"));
    assert!(matches!(
        session.agent_trim("nothing yet"),
        Err(EngineError::NothingToTrim)
    ));
    session.push(Message {
        role: Role::Assistant,
        content: vec![call("a", "bash", serde_json::json!({"command": "ls"}))],
        usage: None,
    });
    let listing = "file\n".repeat(500);
    session
        .insert_tool_results(
            &store,
            vec![Message::tool_result(
                "a",
                Some("bash".into()),
                listing.clone(),
                false,
            )],
        )
        .unwrap();
    let before = session.prompt().to_vec();
    let event = session.agent_trim("500 files, all named `file`").unwrap();
    assert_eq!(event.kind, EventKind::AgentTrim);
    assert_eq!(event.earliest_changed, 2);
    assert_eq!(
        session.prompt()[..2],
        before[..2],
        "only the latest result changed"
    );
    let text = session.prompt()[2].tool_results().next().unwrap().text();
    let id = crate::ContentId::of(listing.as_bytes());
    assert_eq!(
        text,
        format!("[summary by the model; original: id {id}] 500 files, all named `file`")
    );
    assert_eq!(
        session
            .recall(&store, &id.to_string(), &Default::default())
            .unwrap(),
        listing
    );
    session.push(Message::text(Role::User, "thanks"));
    assert!(matches!(
        session.agent_trim("again"),
        Err(EngineError::NothingToTrim)
    ));
    assert!(matches!(
        session.recall(&store, "r-0000000000000000", &Default::default()),
        Err(EngineError::UnknownId(_))
    ));
}

#[test]
fn repeated_outputs_enter_as_pointers() {
    let config = Config::default();
    let mut session = Session::new("s", 200_000, &config, ProviderFamily::Openai);
    let store = MemoryStore::default();
    session.push(Message::text(Role::User, "go"));
    let file: String = (0..300)
        .map(|i| format!("line {i} of the module\n"))
        .collect();
    for id in ["a", "b"] {
        session.push(Message {
            role: Role::Assistant,
            content: vec![call(id, "read_file", serde_json::json!({"path": "m.rs"}))],
            usage: None,
        });
        session
            .insert_tool_results(
                &store,
                vec![Message::tool_result(
                    id,
                    Some("read_file".into()),
                    file.clone(),
                    false,
                )],
            )
            .unwrap();
    }
    let second = session.prompt()[4].tool_results().next().unwrap().text();
    assert_eq!(
        second,
        format!(
            "[same output as the result of a (id {})]",
            crate::ContentId::of(file.as_bytes())
        )
    );
}

#[test]
fn ineffective_events_stop_automatic_events() {
    let mut config = small_config();
    config.engine.min_reclaim_tokens = 1;
    config.engine.min_reclaim_share = 0.0;
    // A first user message larger than the threshold: the head alone keeps every event above it.
    let mut source = shell_session(40, 2_000);
    source.messages[1] = Message::text(Role::User, words(3_000, 1));
    let mut session = Session::new("s", 6_000, &config, ProviderFamily::Openai);
    drive_through(&source, &mut session);
    let report = session.report();
    assert!(report.stopped.is_some(), "{report:?}");
    // Once stopped, an event runs only to make a prompt past the window fit.
    let rewrites: Vec<&EventRecord> = session
        .events()
        .iter()
        .filter(|e| e.kind.rewrites_history())
        .collect();
    let stop = rewrites
        .iter()
        .position(|e| e.note.as_deref().is_some_and(|n| n.contains("stopped")))
        .expect("a stopping event");
    assert!(stop < config.engine.max_ineffective_events, "{rewrites:?}");
    assert!(
        rewrites[stop + 1..].iter().all(|e| e
            .note
            .as_deref()
            .is_some_and(|n| n.starts_with("prompt past the window"))),
        "{rewrites:?}"
    );
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

/// Defects guarded: compaction dropped Claude Code's mid-history environment (`role: system`)
/// message, and the summary's goal was taken from the attribution reminder.
#[test]
fn compaction_keeps_pinned_messages_and_takes_the_goal_from_the_request() {
    let config = small_config();
    let session = compacted_at_8k(&claude_code_like(40), &config);
    let prompt = session.prompt();
    let env = prompt
        .iter()
        .filter(|m| m.text_content().starts_with("# Environment"))
        .count();
    assert_eq!(env, 1, "the environment stays, once");
    let summary = prompt
        .iter()
        .map(Message::text_content)
        .find(|t| t.starts_with(SUMMARY_HEADER))
        .unwrap();
    let goal = summary
        .split("## Goal\n")
        .nth(1)
        .and_then(|s| s.lines().next())
        .unwrap();
    assert!(goal.contains("Fix the failing deploy script"), "{goal}");
    assert!(!summary.contains("Co-Authored-By"), "{summary}");
}

/// Defects guarded: without recorded facts (a history the engine did not see inserted, as a
/// proxy receives it) the summary listed no tool outputs and no discoveries, and a failure whose
/// code was unknown was written as "exit 1".
#[test]
fn summaries_list_every_hidden_output_and_real_exit_codes_without_recorded_facts() {
    let source = claude_code_like(6);
    let counter = TokenCounter::openai();
    let metas = BTreeMap::new();
    let input = summary::SummaryInput {
        messages: &source.messages,
        from: 3,
        to: source.messages.len() - 2,
        metas: &metas,
        budget: 2_000,
        recall_hint: crate::engine::policy::RECALL_TOOL_HINT,
    };
    let body = summary::extractive_body(&input, &counter);
    let text = summary::compose(&input, &body, &counter);
    let outputs = text
        .split("## Tool outputs (recall by id)\n")
        .nth(1)
        .unwrap();
    assert_eq!(
        outputs
            .lines()
            .filter(|l| l.starts_with("- [Bash]"))
            .count(),
        5,
        "{outputs}"
    );
    assert!(outputs.contains("exit 3"), "{outputs}");
    assert!(
        text.contains("FATAL: disk quota exceeded on /var/lib/app"),
        "{text}"
    );
    assert!(text.contains("exit 3"), "{text}");
    assert!(!text.contains("exit 1"), "{text}");
}

/// A pause past the cache TTL makes the next request rewrite its whole prefix anyway: a prune
/// of older outputs then costs no cache write, so it runs though no event is due; without the
/// pause, the same prompt runs none. Outputs newer than `cold_protected_tokens` stay whole.
#[test]
fn a_cold_cache_prunes_old_outputs_though_no_event_is_due() {
    let mut config = Config::default();
    // Warm prunes that pay for themselves are the next test's; here only the cold rule runs.
    config.engine.economic_margin = 0.0;
    // 20 turns of 3 KB outputs: about 16K tokens, far under a 200K window's threshold.
    let source = shell_session(20, 3_000);
    let mut session = Session::new("s", 200_000, &config, ProviderFamily::Openai);
    drive_through(&source, &mut session);
    assert!(
        session.plan().is_none(),
        "nothing is due while the cache is warm"
    );
    session.set_idle(
        Some(config.engine.cold_cache_secs),
        ProviderFamily::Anthropic,
        None,
    );
    assert!(
        session.plan().is_none(),
        "a pause within the TTL changes nothing"
    );
    session.set_idle(
        Some(config.engine.cold_cache_secs + 1),
        ProviderFamily::Anthropic,
        None,
    );
    let plan = session.plan().expect("a prune at the cold cache");
    assert_eq!(plan.kind, PlanKind::PruneOnly);
    let before = session.prompt_tokens();
    let record = session.apply(&plan, None).unwrap();
    assert!(record.tokens_after + 5_000 < before, "{record:?}");
    // The newest outputs are whole.
    let whole: usize = session
        .prompt()
        .iter()
        .filter(|m| m.tool_results().any(|r| !r.text().starts_with('[')))
        .count();
    assert!(whole >= 2, "{whole} outputs left whole");
    // Off when the TTL is 0.
    let mut off = config.clone();
    off.engine.cold_cache_secs = 0;
    let mut session = Session::new("s", 200_000, &off, ProviderFamily::Openai);
    drive_through(&source, &mut session);
    session.set_idle(Some(3_600), ProviderFamily::Anthropic, None);
    assert!(session.plan().is_none());
}

/// A prune before any event is due, at a warm cache, runs only when it pays for its cache
/// write: reclaimed tokens x read price x the requests still expected (as many as so far) at
/// least `economic_margin` times the tokens it makes the next request write.
#[test]
fn a_warm_prune_runs_only_when_it_pays_for_its_cache_write() {
    let config = Config::default();
    let prunes = |session: &Session| -> Vec<(usize, usize)> {
        session
            .events()
            .iter()
            .filter(|e| e.kind.rewrites_history())
            .inspect(|e| assert_eq!(e.kind, EventKind::PruneOnly, "{e:?}"))
            .map(|e| (e.tokens_before, e.tokens_after))
            .collect()
    };
    // 40 turns of 6 KB outputs: far under a 200K window's threshold, most of it old output.
    let source = shell_session(40, 6_000);
    let mut session = Session::new("s", 200_000, &config, ProviderFamily::Openai);
    drive_through(&source, &mut session);
    let events = prunes(&session);
    assert!(
        !events.is_empty(),
        "old outputs cost more to keep than to rewrite"
    );
    assert!(events.len() <= 3, "each prune buys many turns: {events:?}");
    for (before, after) in &events {
        assert!(after * 2 < *before, "{events:?}");
    }

    // A young session is not expected to go on long enough to repay the write.
    let young = shell_session(6, 6_000);
    let mut session = Session::new("s", 200_000, &config, ProviderFamily::Openai);
    drive_through(&young, &mut session);
    assert!(prunes(&session).is_empty());

    // Off with a margin of 0.
    let mut off = config.clone();
    off.engine.economic_margin = 0.0;
    let mut session = Session::new("s", 200_000, &off, ProviderFamily::Openai);
    drive_through(&source, &mut session);
    assert!(prunes(&session).is_empty());
}

/// Defect guarded: a re-read enters as a pointer to the earlier read ("[same output as the
/// result of call_1 ...]"); an event then pruned the earlier read as superseded, so neither
/// copy of the file was in view any more. A result that a result in view points to stays whole.
#[test]
fn an_event_keeps_what_a_visible_pointer_names() {
    let mut counter = TokenCounter::openai();
    let file: String = (1..=300)
        .map(|i| format!("    let value_{i} = compute_{i}(input, {i});\n"))
        .collect();
    let read = |id: &str| Message {
        role: Role::Assistant,
        content: vec![Block::ToolCall(ToolCall {
            id: id.into(),
            name: "read_file".into(),
            arguments: json!({"path": "src/lib.rs"}).to_string(),
            implicit: false,
        })],
        usage: None,
    };
    let mut messages = vec![
        Message::text(Role::System, "You are a coding agent."),
        Message::text(Role::User, "Fix the bug in src/lib.rs."),
        read("call_0"),
        Message::tool_result("call_0", Some("read_file".into()), "small", false),
        read("call_1"),
        Message::tool_result("call_1", Some("read_file".into()), file.as_str(), false),
    ];
    for n in 2..8 {
        let id = format!("call_{n}");
        messages.push(Message {
            role: Role::Assistant,
            content: vec![Block::ToolCall(ToolCall {
                id: id.clone(),
                name: "bash".into(),
                arguments: json!({"command": format!("cargo test -p m{n}")}).to_string(),
                implicit: false,
            })],
            usage: None,
        });
        let log: String = (0..200)
            .map(|i| format!("test case_{n}_{i} ... ok\n"))
            .collect();
        messages.push(Message::tool_result(
            &id,
            Some("bash".into()),
            log.as_str(),
            false,
        ));
    }
    messages.push(read("call_8"));
    messages.push(Message::tool_result(
        "call_8",
        Some("read_file".into()),
        "[same output as the result of call_1 (id r-0123456789abcdef)]",
        false,
    ));
    let tokens: Vec<usize> = messages.iter().map(|m| counter.count_message(m)).collect();
    let metas = BTreeMap::new();
    let total: usize = tokens.iter().sum();
    let input = plan::PlanInput {
        messages: &messages,
        tokens: &tokens,
        fixed_tokens: 0,
        metas: &metas,
        // Due now.
        window: (total as f64 / 0.9) as u64 - 10,
        frozen: 0,
        cache_cold: false,
        cache_prices: None,
        may_compact: true,
        enforce_window: true,
    };
    // Pruning alone is enough here (no runway asked), so the plan says what it prunes.
    let policy = Policy {
        runway_share: 0.0,
        runway_min_tokens: 0,
        runway_turns: 0,
        min_reclaim_tokens: 0,
        ..Policy::default()
    };
    let plan = plan::plan(&input, &policy, &counter).expect("an event is due");
    assert_eq!(plan.kind, PlanKind::PruneOnly, "{plan:?}");
    let pruned: Vec<usize> = plan.edits.iter().map(|e| e.index).collect();
    assert!(pruned.contains(&7), "old test logs go: {pruned:?}");
    assert!(
        !pruned.contains(&5),
        "the read call_8 points to stays: {pruned:?}"
    );
}

/// Defect guarded: the warm prune's rule that current file reads stay whole was applied at a
/// cold cache too, which gave back most of what the cold prune saves on real Claude Code logs
/// (0.954x -> 0.972x of `none`). Warm, current reads stay; cold, old reads go like other output.
#[test]
fn current_reads_stay_at_a_warm_prune_and_go_at_a_cold_one() {
    let config = Config::default();
    // 40 turns, each reading a different file: every read is current.
    let reads = build(
        &(0..40u8)
            .map(|i| Step::Turn(vec![(1, 6_000, i)]))
            .collect::<Vec<_>>(),
    );
    let mut session = Session::new("s", 200_000, &config, ProviderFamily::Openai);
    drive_through(&reads, &mut session);
    assert!(
        session.events().iter().all(|e| !e.kind.rewrites_history()),
        "a warm prune leaves current reads whole"
    );
    session.set_idle(
        Some(config.engine.cold_cache_secs + 1),
        ProviderFamily::Anthropic,
        None,
    );
    let plan = session
        .plan()
        .expect("at a cold cache old reads are pruned");
    assert_eq!(plan.kind, PlanKind::PruneOnly);
    assert!(plan.estimated_after * 2 < plan.tokens_before, "{plan:?}");
}

/// Defect guarded: a prune at a cold cache kept only the newest 8K tokens of outputs, so after
/// a pause (the user reading, a sub-agent running) a file read two turns back was an abstract
/// when the agent went on to edit from it. The outputs of the newest `cold_protected_turns`
/// turns stay whole, however big; what is older goes.
#[test]
fn a_cold_prune_keeps_the_newest_turns_whole_however_big() {
    let mut config = Config::default();
    // Only the cold rule runs here.
    config.engine.economic_margin = 0.0;
    let turns = config.engine.cold_protected_turns;
    assert_eq!(turns, 10, "the published masking window");
    // 30 turns, each reading another 6 KB file: the newest 10 hold far more than 8K tokens,
    // and the whole stays under the window's threshold.
    let reads = build(
        &(0..30u8)
            .map(|i| Step::Turn(vec![(1, 6_000, i)]))
            .collect::<Vec<_>>(),
    );
    let mut session = Session::new("s", 200_000, &config, ProviderFamily::Anthropic);
    drive_through(&reads, &mut session);
    session.set_idle(
        Some(config.engine.cold_cache_secs + 1),
        ProviderFamily::Anthropic,
        None,
    );
    assert!(session.events().iter().all(|e| !e.kind.rewrites_history()));
    let plan = session.plan().expect("a prune at the cold cache");
    session.apply(&plan, None).unwrap();
    let whole: Vec<bool> = session
        .prompt()
        .iter()
        .flat_map(|m| m.tool_results())
        .map(|r| !r.text().starts_with('['))
        .collect();
    assert_eq!(whole.len(), 30);
    assert!(whole[30 - turns..].iter().all(|&w| w), "{whole:?}");
    // The first exchange is the head, kept as it is.
    assert!(whole[1..30 - turns].iter().all(|&w| !w), "{whole:?}");
}

/// Defect guarded: reading a big file in parts (`offset`/`limit`), or grepping it, counted as
/// reading it again, so every earlier part was pruned as stale while still current. A later
/// read makes an earlier one stale only when it shows the whole file or the same part; a write
/// always does.
#[test]
fn reads_of_other_parts_of_a_file_stay_current() {
    let mut config = Config::default();
    config.engine.cold_protected_turns = 0;
    config.engine.cold_protected_tokens = 0;
    let part = |i: usize| -> String {
        (0..200)
            .map(|l| format!("{:>6}\tline_{i}_{l} = compute_{l}(value)\n", i * 1000 + l))
            .collect()
    };
    let turn = |id: &str, name: &str, args: serde_json::Value, output: String| {
        [
            Message {
                role: Role::Assistant,
                content: vec![call(id, name, args)],
                usage: None,
            },
            Message::tool_result(id, Some(name.into()), output, false),
        ]
    };
    let mut messages = vec![
        Message::text(Role::System, "You are a coding agent."),
        Message::text(Role::User, "Port the module."),
    ];
    let file = "/repo/src/big.py";
    let filler = |n: usize| {
        (0..n)
            .flat_map(|i| {
                turn(
                    &format!("ls_{n}_{i}"),
                    "bash",
                    json!({"command": format!("ls dir_{i}")}),
                    "a.py\nb.py\n".to_owned(),
                )
            })
            .collect::<Vec<_>>()
    };
    // Past the head.
    messages.extend(filler(3));
    messages.extend(turn(
        "read_1",
        "Read",
        json!({"file_path": file, "offset": 1, "limit": 200}),
        part(1),
    ));
    messages.extend(turn(
        "read_2",
        "Read",
        json!({"file_path": file, "offset": 2001, "limit": 200}),
        part(2),
    ));
    messages.extend(turn(
        "grep_1",
        "Grep",
        json!({"pattern": "compute_", "path": file}),
        part(3),
    ));
    // The same part again, changed meanwhile (by a formatter, say).
    messages.extend(turn(
        "read_3",
        "Read",
        json!({"file_path": file, "offset": 2001, "limit": 200}),
        part(5),
    ));
    messages.extend(turn(
        "read_4",
        "Read",
        json!({"file_path": "/repo/src/other.py"}),
        part(4),
    ));
    // Before the tail.
    messages.extend(filler(4));
    let source = Transcript {
        id: "parts".into(),
        messages,
        tools: vec![],
        recording: None,
        model: None,
    };
    // Why the prune at a cold cache after `t` hides each result it hides, by call id.
    let reasons = |t: &Transcript| -> BTreeMap<String, PruneReason> {
        let mut session = Session::new("s", 200_000, &config, ProviderFamily::Anthropic);
        drive_through(t, &mut session);
        session.set_idle(
            Some(config.engine.cold_cache_secs + 1),
            ProviderFamily::Anthropic,
            None,
        );
        let plan = session.plan().expect("a prune at the cold cache");
        let prompt = session.prompt();
        plan.edits
            .iter()
            .flat_map(|e| {
                prompt[e.index]
                    .tool_results()
                    .map(|r| (r.call_id.clone(), e.reason))
            })
            .collect()
    };
    let first = reasons(&source);
    let reason_of = |id: &str| first.get(id).copied();
    assert_eq!(reason_of("read_1"), Some(PruneReason::Old));
    assert_eq!(
        reason_of("read_2"),
        Some(PruneReason::Superseded),
        "the same part read again later"
    );
    assert_eq!(reason_of("read_3"), Some(PruneReason::Old));

    // A whole read, or a write, makes every earlier part stale.
    for (name, args) in [
        ("Read", json!({"file_path": file})),
        (
            "Edit",
            json!({"file_path": file, "old_string": "a", "new_string": "b"}),
        ),
    ] {
        let mut later = source.clone();
        let at = later.messages.len() - 8;
        later
            .messages
            .splice(at..at, turn("last", name, args, "ok".to_owned()));
        assert_eq!(
            reasons(&later).get("read_1"),
            Some(&PruneReason::Superseded),
            "{name}"
        );
    }
}

/// In front of a client that keeps its own window (the proxy without `compact`), an event
/// never summarises: the client shows its whole history until its own compaction, and a
/// summary would hide all of the middle. Where a compaction would run, the session prunes
/// what pruning reclaims, or does nothing.
#[test]
fn a_session_that_may_not_compact_only_prunes() {
    let config = small_config();
    // Chatty turns and outputs: a session that may compact does.
    let mixed = build(
        &(0..60)
            .map(|i| {
                if i % 3 == 0 {
                    Step::User(words(120, i))
                } else {
                    Step::Turn(vec![(0, 1_500, 1)])
                }
            })
            .collect::<Vec<_>>(),
    );
    // Events that did not have to make a prompt past the window fit (a request past it
    // would fail, whatever the client shows: that one may compact).
    let kinds = |may_compact: bool| {
        let mut session = Session::new("s", 8_000, &config, ProviderFamily::Openai);
        session.set_may_compact(may_compact);
        let store = MemoryStore::default();
        drive(&mixed, &mut session, &store, None, |_| {}).unwrap();
        session
            .events()
            .iter()
            .filter(|e| e.kind.rewrites_history())
            .filter(|e| {
                !e.note
                    .as_deref()
                    .is_some_and(|n| n.starts_with("prompt past the window"))
            })
            .map(|e| e.kind)
            .collect::<Vec<_>>()
    };
    assert!(
        kinds(true).contains(&EventKind::Compaction),
        "{:?}",
        kinds(true)
    );
    let pruned = kinds(false);
    assert!(!pruned.is_empty(), "old outputs are still pruned");
    assert!(
        pruned.iter().all(|k| *k == EventKind::PruneOnly),
        "{pruned:?}"
    );
}

/// Defect guarded: after an event had replaced an output by its abstract, a new result with
/// the same text entered as `[same output as the result of call_… (id r-…)]`, a pointer to
/// nothing the model could see. It now enters as itself.
#[test]
fn a_repeat_of_a_pruned_output_enters_as_itself() {
    let mut config = Config::default();
    config.engine.economic_margin = 0.0;
    let source = shell_session(20, 3_000);
    let store = MemoryStore::default();
    let mut session = Session::new("s", 200_000, &config, ProviderFamily::Openai);
    drive(&source, &mut session, &store, None, |_| {}).unwrap();
    session.set_idle(
        Some(config.engine.cold_cache_secs + 1),
        ProviderFamily::Anthropic,
        None,
    );
    let plan = session.plan().expect("a prune at the cold cache");
    session.apply(&plan, None).unwrap();
    let (call_id, id) = session
        .prompt()
        .iter()
        .flat_map(|m| m.tool_results())
        .find(|r| r.text().starts_with('['))
        .map(|r| {
            (
                r.call_id.clone(),
                session.result_meta(&r.call_id).unwrap().id,
            )
        })
        .expect("a pruned output");
    let original = store.get(&SessionId::new("s"), id).unwrap().unwrap();
    session.push(Message {
        role: Role::Assistant,
        content: vec![call("again", "bash", json!({"command": "make"}))],
        usage: None,
    });
    session
        .insert_tool_results(
            &store,
            vec![Message::tool_result(
                "again",
                Some("bash".into()),
                original.clone(),
                false,
            )],
        )
        .unwrap();
    let entered = session
        .prompt()
        .last()
        .unwrap()
        .tool_results()
        .next()
        .unwrap()
        .text();
    assert!(
        !entered.contains(&format!("the result of {call_id} ")),
        "a pointer to the pruned {call_id}: {entered}"
    );
    assert_eq!(entered, original, "3 KB enters whole");
}

/// An integration trims an output when the tool returns it and its framework keeps the trim:
/// the session is handed the trim, whose marker names the original stored then. Abstracts and
/// recall name that original (not the trim), and the trim counts in the report.
#[test]
fn a_result_trimmed_before_the_session_names_its_true_original() {
    let config = Config::default();
    let store = MemoryStore::default();
    let sid = SessionId::new("s");
    let original: String = (0..4_000)
        .map(|i| {
            if i == 2_000 {
                "ERROR: disk quota exceeded\n".to_owned()
            } else {
                format!("step {i} ok\n")
            }
        })
        .collect();
    let trimmed = crate::trim::trim_output(&config.trim, "bash", 200_000, &original);
    assert!(trimmed.trimmed);
    store.put(&sid, trimmed.id, &original).unwrap();
    let mut session = Session::new("s", 200_000, &config, ProviderFamily::Openai);
    session.push(Message::text(Role::User, "go"));
    session.push(Message {
        role: Role::Assistant,
        content: vec![call("c1", "bash", json!({"command": "make"}))],
        usage: None,
    });
    session
        .insert_tool_results(
            &store,
            vec![Message::tool_result(
                "c1",
                Some("bash".into()),
                trimmed.text.clone(),
                false,
            )],
        )
        .unwrap();
    let meta = session.result_meta("c1").unwrap();
    assert_eq!(meta.id, trimmed.id, "the original's id, not the trim's");
    assert_eq!(meta.lines, 4_000);
    assert_eq!(
        store
            .get(&sid, crate::ContentId::of(trimmed.text.as_bytes()))
            .unwrap(),
        None,
        "the trim is not stored as an original"
    );
    let report = session.report();
    assert_eq!(report.insert_trims, 1, "{report:?}");
    let recalled = session
        .recall(
            &store,
            &trimmed.id.to_string(),
            &crate::recall::RecallQuery {
                pattern: Some("ERROR".into()),
                ..Default::default()
            },
        )
        .unwrap();
    assert!(
        recalled.contains("ERROR: disk quota exceeded"),
        "{recalled}"
    );
}

/// Defect guarded: the sample `django__django-11885` at 32K passed the window for 5 requests
/// because the engine counted with o200k while Gemini counts 1.31x as many tokens. A session
/// told the provider's counts plans in them, and no request passes the window.
#[test]
fn a_session_told_the_providers_counts_never_passes_the_window() {
    let config = small_config();
    let source = shell_session(40, 1_500);
    let window = 12_000u64;
    // The provider counts 30% more than ctxgc does.
    let provider = |ours: usize| ours * 13 / 10;
    let peak = |observe: bool| {
        let mut session = Session::new("s", window, &config, ProviderFamily::Openai);
        let store = MemoryStore::default();
        let mut pending = Vec::new();
        let mut peak = 0;
        for m in &source.messages {
            if m.role == Role::Tool {
                pending.push(m.clone());
                continue;
            }
            if !pending.is_empty() {
                session
                    .insert_tool_results(&store, std::mem::take(&mut pending))
                    .unwrap();
            }
            if m.role == Role::Assistant {
                session.run_due_event(None).unwrap();
                let counted = provider(session.prompt_tokens());
                peak = peak.max(counted);
                if observe {
                    session.observe_usage(counted);
                }
            }
            session.push(m.clone());
        }
        peak
    };
    assert!(peak(false) > window as usize, "uncalibrated, it passes");
    assert!(
        peak(true) <= config.engine.prompt_limit(window),
        "{}",
        peak(true)
    );
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

/// When older outputs are not enough, the newest output is cut to what fits, around its
/// original's id: a request past the window would fail.
#[test]
fn a_prompt_past_the_window_is_cut_to_fit_the_newest_output_too() {
    let policy = Policy::default();
    let counter = TokenCounter::openai();
    let newest = log(600, 7)
        + "error[E0308]: mismatched types in src/lib.rs\n"
        + &log(600, 9)
        + "exit status: 1\n";
    let messages = make_session([log(150, 1), log(150, 2), newest.clone()]);
    let mut counting = TokenCounter::openai();
    let tokens: Vec<usize> = messages.iter().map(|m| counting.count_message(m)).collect();
    let metas = std::collections::BTreeMap::new();
    let window = 8_000;
    let input = plan::PlanInput {
        messages: &messages,
        tokens: &tokens,
        fixed_tokens: 3,
        metas: &metas,
        window,
        frozen: 0,
        cache_cold: false,
        cache_prices: None,
        may_compact: false,
        enforce_window: true,
    };
    assert!(plan::must_fit(&input, &policy), "{}", input.total());
    let plan = plan::plan(&input, &policy, &counter).expect("an event");
    assert!(plan.fits_window);
    assert!(
        plan.estimated_after <= policy.prompt_limit(window),
        "{plan:?}"
    );
    let cut = plan
        .edits
        .iter()
        .find(|e| e.index == messages.len() - 1)
        .expect("the newest output is cut");
    let plan::Replacement::Result(text) = &cut.replacement else {
        panic!("{cut:?}")
    };
    let id = crate::ContentId::of(newest.as_bytes());
    assert!(text.contains(&format!("; id {id}")), "{text}");
    assert!(text.starts_with("line 0:"), "the head stays");
    assert!(
        text.contains("error[E0308]: mismatched types"),
        "the error in the middle stays"
    );
    assert!(text.ends_with("exit status: 1\n"), "the end stays");
    // Rendered and counted again, the prompt fits.
    let edits = apply::apply(
        &plan,
        &apply::ApplyInput {
            messages: &messages,
            tokens: &tokens,
            metas: &metas,
        },
        &counter,
        None,
    );
    let sent = edits.render(&messages);
    integrity::check(&sent).unwrap();
    let total: usize = sent
        .iter()
        .map(|m| counting.count_message(m))
        .sum::<usize>()
        + 3;
    assert!(total <= policy.prompt_limit(window), "{total}");
}

/// A prompt past the window whose older outputs lie in what an earlier event already rewrote
/// (`frozen`): the event that makes it fit may cut them, but its tail never starts inside that
/// prefix (the proxy's lineage counts its new cover from there; a tail before it underflowed
/// and failed the request open, as Claude Code's conformance run showed).
#[test]
fn a_window_fit_never_starts_its_tail_inside_what_an_earlier_event_kept() {
    let policy = Policy::default();
    let counter = TokenCounter::openai();
    let messages = make_session([log(400, 1), log(400, 2), "ok\n".to_owned()]);
    let mut counting = TokenCounter::openai();
    let tokens: Vec<usize> = messages.iter().map(|m| counting.count_message(m)).collect();
    let metas = std::collections::BTreeMap::new();
    // Everything but the newest output is what the earlier event's lineage holds.
    let frozen = messages.len() - 1;
    let input = plan::PlanInput {
        messages: &messages,
        tokens: &tokens,
        fixed_tokens: 3,
        metas: &metas,
        window: 8_000,
        frozen,
        cache_cold: false,
        cache_prices: None,
        may_compact: false,
        enforce_window: true,
    };
    assert!(plan::must_fit(&input, &policy), "{}", input.total());
    let plan = plan::plan(&input, &policy, &counter).expect("an event");
    assert!(plan.fits_window, "{plan:?}");
    assert!(
        plan.edits.iter().all(|e| e.index < frozen),
        "the older outputs are what it cuts: {plan:?}"
    );
    assert!(
        plan.tail_start >= frozen,
        "tail {} inside the kept prefix ({frozen})",
        plan.tail_start
    );
}
