//! Events: prune or compaction, summaries, agent trims, repeats, when events stop, and what a compaction keeps.

use super::*;

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
