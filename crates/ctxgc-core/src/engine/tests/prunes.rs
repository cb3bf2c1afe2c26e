//! Which outputs a prune keeps and which it hides, warm and cold, and no prompt past the window.

use super::*;

/// A session through `source` with the early prune's rules alone (no economic prune), at a
/// cold cache, deciding with a relevance table of `cells`.
fn cold_with_table(source: &Transcript, cells: &[(&str, [u32; 2])]) -> Session {
    cold_with_table_and(source, cells, Config::default())
}

/// [`cold_with_table`] on top of `config`.
fn cold_with_table_and(
    source: &Transcript,
    cells: &[(&str, [u32; 2])],
    mut config: Config,
) -> Session {
    config.engine.economic_margin = 0.0;
    config.engine.relevance = std::sync::Arc::new(crate::engine::relevance::Relevance {
        source: "test".into(),
        cells: cells.iter().map(|(c, n)| ((*c).to_owned(), *n)).collect(),
    });
    let mut session = Session::new("s", 200_000, &config, ProviderFamily::Anthropic);
    drive_through(source, &mut session);
    make_cold(&mut session, &config);
    session
}

/// A pause past Anthropic's cache TTL: the session's next plan is made at a cold cache.
fn make_cold(session: &mut Session, config: &Config) {
    session.set_idle(
        Some(config.engine.cold_cache_secs + 1),
        ProviderFamily::Anthropic,
        None,
    );
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
    make_cold(&mut session, &config);
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
    let mut config = Config::default();
    // The age rule alone (`relevance_keeps_what_the_agent_still_works_with` has the table's).
    config.engine.keep_likely_use = 2.0;
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
    make_cold(&mut session, &config);
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
    // Only the cold rule runs here, by age alone.
    config.engine.economic_margin = 0.0;
    config.engine.keep_likely_use = 2.0;
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
    make_cold(&mut session, &config);
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

/// One turn: the agent calls `name` with `args` and the tool answers `output`.
fn turn(id: &str, name: &str, args: serde_json::Value, output: String) -> [Message; 2] {
    [
        Message {
            role: Role::Assistant,
            content: vec![call(id, name, args)],
            usage: None,
        },
        Message::tool_result(id, Some(name.into()), output, false),
    ]
}

/// `n` turns listing folders with the shell tool `shell` (a batch's ids are its own).
fn listings(shell: &str, n: usize) -> Vec<Message> {
    (0..n)
        .flat_map(|i| {
            turn(
                &format!("ls_{n}_{i}"),
                shell,
                json!({"command": format!("ls dir_{i}")}),
                "a.py\nb.py\n".to_owned(),
            )
        })
        .collect()
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
    config.engine.keep_likely_use = 2.0;
    let part = |i: usize| -> String {
        (0..200)
            .map(|l| format!("{:>6}\tline_{i}_{l} = compute_{l}(value)\n", i * 1000 + l))
            .collect()
    };
    let mut messages = vec![
        Message::text(Role::System, "You are a coding agent."),
        Message::text(Role::User, "Port the module."),
    ];
    let file = "/repo/src/big.py";
    // Past the head.
    messages.extend(listings("bash", 3));
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
    messages.extend(listings("bash", 4));
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
        make_cold(&mut session, &config);
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

/// A read of a file edited since (not read again) is asked of the table at an early prune, as
/// any old output is: an edit changes a few lines and the agent goes on working from the rest.
/// Rated likely to be used again, it stays whole (and the event says why); rated unlikely, it
/// goes as stale. A later read of the whole file supersedes it whatever the table says: the
/// newer read shows it.
#[test]
fn a_read_edited_since_stays_while_the_agent_works_from_it() {
    let file = "/repo/src/ledger.py";
    let body: String = (0..300)
        .map(|l| format!("{:>6}\u{2192}entry_{l} = settle_{l}(ledger)\n", l + 1))
        .collect();
    let source = |later: (&str, serde_json::Value)| {
        let mut messages = vec![
            Message::text(Role::System, "You are a coding agent."),
            Message::text(Role::User, "Fix the ledger."),
        ];
        messages.extend(listings("bash", 3));
        // An old build log the prune takes in any case: there is a prune to look at.
        let log: String = (0..400).map(|l| format!("compiling unit {l}\n")).collect();
        messages.extend(turn("make", "bash", json!({"command": "make"}), log));
        messages.extend(turn(
            "read_1",
            "Read",
            json!({"file_path": file}),
            body.clone(),
        ));
        messages.extend(turn("later", later.0, later.1, "ok".to_owned()));
        messages.extend(listings("bash", 4));
        Transcript {
            id: "edited".into(),
            messages,
            tools: vec![],
            recording: None,
            model: None,
        }
    };
    let edit = (
        "Edit",
        json!({"file_path": file, "old_string": "entry_3 = ", "new_string": "entry_3: int = "}),
    );
    let reread = ("Read", json!({"file_path": file}));
    // What the prune at a cold cache did with the read, in the words `--explain` prints.
    let fate = |t: &Transcript, likely: u32| -> String {
        let mut config = Config::default();
        config.engine.cold_protected_turns = 0;
        config.engine.cold_protected_tokens = 0;
        config.engine.keep_likely_use = 2.0;
        config.engine.keep_likely_stale = 0.1;
        let mut session = cold_with_table_and(t, &[("*/*/*/*", [likely, 100])], config);
        let plan = session.plan().expect("a prune at the cold cache");
        let record = session.apply(&plan, None).expect("the prune applies");
        record
            .decisions
            .iter()
            .find(|d| d.call_id == "read_1")
            .map(|d| d.describe())
            .unwrap_or_default()
    };
    let likely = fate(&source(edit.clone()), 90);
    assert!(
        likely.starts_with("kept whole though its file was edited since: likely to be used again"),
        "likely: stays, and says why: {likely}"
    );
    for (what, t, used) in [
        ("unlikely: goes as stale", source(edit), 2),
        (
            "read whole again: the newer read shows it",
            source(reread),
            90,
        ),
    ] {
        let fate = fate(&t, used);
        assert!(fate.starts_with("pruned: stale"), "{what}: {fate}");
    }
}

/// A pruned view of a file leaves its definition lines under the abstract, with the view's line
/// numbers, so the agent still sees what the file defines and where (inside a JSON envelope
/// too); a pruned command's output does not (its lines that look like definitions are not a
/// file's outline).
#[test]
fn a_pruned_file_read_keeps_its_definition_lines() {
    let mut config = Config::default();
    config.engine.cold_protected_turns = 0;
    config.engine.cold_protected_tokens = 0;
    config.engine.keep_likely_use = 2.0;
    // Claude Code's numbered `Read`: a class and 60 methods, each with a 20-line body.
    let file: String = std::iter::once("     1\u{2192}class Ledger:\n".to_owned())
        .chain((0..60).flat_map(|m| {
            let first = 2 + m * 21;
            std::iter::once(format!(
                "{first:>6}\u{2192}    def settle_{m}(self, entry):\n"
            ))
            .chain((1..=20).map(move |l| {
                format!(
                    "{:>6}\u{2192}        total_{m} = entry.amount_{l} * rate\n",
                    first + l
                )
            }))
        }))
        .collect();
    let mut messages = vec![
        Message::text(Role::System, "You are a coding agent."),
        Message::text(Role::User, "Fix the ledger."),
    ];
    messages.extend(listings("Bash", 3));
    messages.extend(turn(
        "read",
        "Read",
        json!({"file_path": "/repo/ledger.py"}),
        file.clone(),
    ));
    // Another such file through a tool that answers in a JSON envelope (the same one would
    // enter as a pointer to the read).
    messages.extend(turn(
        "enveloped",
        "shell",
        json!({"command": "cat /repo/ledger_copy.py"}),
        json!({"output": file.replace("settle_", "post_").replace("total_", "sum_"), "metadata": {"exit_code": 0}}).to_string(),
    ));
    messages.extend(turn(
        "run",
        "Bash",
        json!({"command": "python -m ledger --dump"}),
        file.replace('\u{2192}', " "),
    ));
    messages.extend(listings("Bash", 4));
    let transcript = Transcript {
        id: "outline".into(),
        messages,
        tools: vec![],
        recording: None,
        model: None,
    };
    let mut session = Session::new("s", 200_000, &config, ProviderFamily::Anthropic);
    drive_through(&transcript, &mut session);
    make_cold(&mut session, &config);
    let plan = session.plan().expect("a prune at the cold cache");
    let prompt = session.prompt();
    let replacement = |id: &str| -> String {
        plan.edits
            .iter()
            .find(|e| prompt[e.index].tool_results().any(|r| r.call_id == id))
            .map(|e| match &e.replacement {
                crate::engine::prune::Replacement::Result(text) => text.clone(),
                other => panic!("{id} was not replaced by a text: {other:?}"),
            })
            .unwrap_or_else(|| panic!("{id} was not pruned"))
    };
    let read = replacement("read");
    let (abstract_line, outline) = read
        .split_once("\nits definitions, as read:\n")
        .unwrap_or_else(|| panic!("no outline: {read}"));
    assert!(
        abstract_line.starts_with("[Read] /repo/ledger.py, 1,261 lines (60,411 chars); id r-"),
        "{read}"
    );
    let lines: Vec<&str> = outline.lines().collect();
    // The first 40 definitions, as the view numbered them, and how many more there were.
    assert_eq!(lines[0], "     1\u{2192}class Ledger:");
    assert_eq!(lines[1], "     2\u{2192}    def settle_0(self, entry):");
    assert_eq!(lines[39], "   800\u{2192}    def settle_38(self, entry):");
    assert_eq!(lines[40], "(and 21 more)");
    assert_eq!(lines.len(), 41);
    assert!(!read.contains("total_"), "a body line: {read}");
    let enveloped = replacement("enveloped");
    assert!(
        enveloped.contains("\nits definitions, as read:\n     1\u{2192}class Ledger:\n"),
        "{enveloped}"
    );
    let run = replacement("run");
    assert!(!run.contains("its definitions"), "{run}");
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
    make_cold(&mut session, &config);
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
    let original =
        crate::test_text::with_line_at(0..4_000, 2_000, "ERROR: disk quota exceeded\n", |i| {
            format!("step {i} ok\n")
        });
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

/// The learned table decides which old outputs a cold prune keeps: outputs of a kind the agent
/// went on to use stay, those of a kind it never used go, with the same transcript and age.
#[test]
fn relevance_keeps_what_the_agent_still_works_with() {
    let reads = build(
        &(0..40u8)
            .map(|i| Step::Turn(vec![(1, 6_000, i)]))
            .collect::<Vec<_>>(),
    );
    let pruned_with = |used: u32| old_pruned(&cold_with_reads_used(&reads, used));
    assert!(pruned_with(0) >= 20, "never used: the old reads go");
    assert_eq!(pruned_with(90), 0, "nine in ten used again: they stay");
}

/// A cold session through `reads` whose table says the agent used `used` in 100 such reads
/// again.
fn cold_with_reads_used(reads: &Transcript, used: u32) -> Session {
    let cells = [
        "file-read/*/unused/unnamed",
        "*/*/unused/unnamed",
        "*/*/*/*",
    ]
    .map(|cell| (cell, [used, 100]));
    cold_with_table(reads, &cells)
}

/// How many outputs the session's next plan prunes as old.
fn old_pruned(session: &Session) -> usize {
    session.plan().map_or(0, |plan| {
        plan.edits
            .iter()
            .filter(|e| e.reason == PruneReason::Old)
            .count()
    })
}

/// An event that is only due soon (a cold cache, the prompt within its runway of the threshold
/// but not at it) runs because the rewrite is free, not because the prompt must shrink: the
/// outputs the table rates likely to be used again stay, whatever pruning the rest buys, and
/// those it rates unlikely go as before.
#[test]
fn an_event_only_due_soon_keeps_what_the_agent_still_works_with() {
    // 52 reads of about 3K tokens each (as trimmed): past the threshold (180K at 200K) within
    // the runway of 8 turns of such growth, not at it.
    let reads = build(
        &(0..52u8)
            .map(|i| Step::Turn(vec![(1, 30_000, i)]))
            .collect::<Vec<_>>(),
    );
    let old_pruned_with = |used: u32| {
        let session = cold_with_reads_used(&reads, used);
        let total = session.prompt_tokens();
        assert!(
            (150_000..180_000).contains(&total),
            "due soon, not due: {total}"
        );
        old_pruned(&session)
    };
    assert!(old_pruned_with(0) >= 20, "never used: the old reads go");
    assert_eq!(old_pruned_with(90), 0, "nine in ten used again: they stay");
}

/// An event's record says what it did with each output and why, and the reasons the proxy's
/// dashboard keeps are filed under the ids the hidden originals are stored by.
#[test]
fn an_event_records_each_decision_and_its_reason() {
    use crate::engine::event::{Action, hidden_originals, hidden_reasons};

    let reads = build(
        &(0..40u8)
            .map(|i| Step::Turn(vec![(1, 6_000, i)]))
            .collect::<Vec<_>>(),
    );
    // Reads 20 to 39 turns old are rarely used again; younger ones often.
    let mut session = cold_with_table(
        &reads,
        &[
            ("file-read/20-39/unused/unnamed", [0, 1_000]),
            ("file-read/*/unused/unnamed", [50, 100]),
            ("*/*/unused/unnamed", [50, 100]),
            ("*/*/*/*", [50, 100]),
        ],
    );
    let plan = session.plan().expect("a prune at the cold cache");
    let before = session.prompt().to_vec();
    let apply_input = crate::engine::apply::ApplyInput {
        messages: &before,
        tokens: &before
            .iter()
            .map(|m| TokenCounter::openai().count_message(m))
            .collect::<Vec<_>>(),
        metas: &std::collections::BTreeMap::new(),
    };
    let edits = crate::engine::apply::apply(&plan, &apply_input, &TokenCounter::openai(), None);
    let record = session.apply(&plan, None).unwrap();
    let kept: Vec<_> = record
        .decisions
        .iter()
        .filter(|d| d.action == Action::Kept)
        .collect();
    let pruned: Vec<_> = record
        .decisions
        .iter()
        .filter(|d| d.action == Action::Pruned && d.reason == Some(PruneReason::Old))
        .collect();
    assert!(
        !kept.is_empty() && !pruned.is_empty(),
        "{:?}",
        record.decisions
    );
    for d in kept.iter().chain(&pruned) {
        let judged = d.judged.as_ref().expect("the table was asked");
        assert_eq!(judged.features.class, "file-read");
        let old = judged.features.age == crate::engine::relevance::Age::Under40;
        assert_eq!(d.action == Action::Pruned, old, "{}", d.describe());
        assert!(d.describe().contains("such outputs were used again"));
    }
    // Every reason is filed under an id whose original the event stores.
    let stored: Vec<_> = hidden_originals(&edits, &before)
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    let reasons = hidden_reasons(&edits, &before);
    assert_eq!(reasons.len(), pruned.len());
    assert!(reasons.iter().all(|(id, _)| stored.contains(id)));
}
