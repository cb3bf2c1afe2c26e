//! Events across requests, replicas on one store, summaries, a store that stalls, and the window.

use super::*;

#[tokio::test]
async fn compaction_across_requests_is_prefix_stable_between_events() {
    let window = 12_000;
    let h = start_with(Box::new(MemoryStore::default()), window, true).await;
    let mut messages = vec![
        json!({"role": "system", "content": "You are a coding agent."}),
        json!({"role": "user", "content": "Fix the flaky test. You must not change the public API."}),
    ];
    let mut sent: Vec<Vec<Value>> = Vec::new();
    let mut counter = ctxgc_core::tokens::TokenCounter::openai();
    for turn in 0..60 {
        let id = format!("call_{turn}");
        messages.push(json!({"role": "assistant", "content": format!("Step {turn}: I will run the next check."), "tool_calls": [{"id": id, "type": "function", "function": {"name": "bash", "arguments": format!("{{\"command\":\"pytest -k case_{turn}\"}}")}}]}));
        let output = format!(
            "{}\nexit status: {}\n",
            words(if turn % 4 == 0 { 900 } else { 250 }, turn),
            turn % 2
        );
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": output}));
        let body = json!({"model": "gpt-5", "messages": messages});
        let seen = h.chat(&body).await;
        let upstream: Value = serde_json::from_slice(&seen.2).unwrap();
        let msgs = upstream["messages"].as_array().unwrap().clone();
        let request =
            ctxgc_formats::ApiRequest::parse(ctxgc_formats::Api::ChatCompletions, &seen.2).unwrap();
        let tokens = counter.count_messages(&request.transcript().unwrap().messages);
        assert!(
            (tokens as u64) < window,
            "turn {turn}: {tokens} tokens sent to a {window}-token model"
        );
        sent.push(msgs);
    }
    // Between events the upstream prompt is append-only: request N+1 starts with request N.
    let breaks = sent
        .windows(2)
        .filter(|w| !(w[1].len() >= w[0].len() && w[1][..w[0].len()] == w[0][..]))
        .count();
    let events = h.state.stats().events as usize;
    eprintln!("{events} events over 60 turns at a {window}-token window");
    assert!(events >= 1, "the engine ran");
    assert_eq!(
        breaks, events,
        "every prefix change is an event, and nothing else changes the prefix"
    );
    assert!(events <= 12, "events are rare: {events} in 60 turns");
    assert!(sent.iter().any(|m| m.iter().any(|x| {
        x["content"]
            .as_str()
            .is_some_and(|c| c.starts_with("[ctxgc context summary"))
    })));
    // The client rewinds to its first exchange: no stale summary or pruning is applied.
    let rewound = json!({"model": "gpt-5", "messages": messages[..4].to_vec()});
    let seen = h.chat(&rewound).await;
    let upstream: Value = serde_json::from_slice(&seen.2).unwrap();
    let msgs = upstream["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 4);
    assert_eq!(msgs[1], messages[1]);
    assert!(!msgs.iter().any(|x| {
        x["content"]
            .as_str()
            .is_some_and(|c| c.starts_with("[ctxgc context summary"))
    }));
}

/// What `ctxgc serve` does by default (`[proxy] cold_events`): while the cache is warm no
/// event runs, however long the history, and the prompt only grows; the first request after the
/// session was idle past the cache's lifetime prunes old outputs (it rewrites the cached prefix
/// anyway), and the requests after it extend that new prefix.
#[tokio::test]
async fn by_default_an_event_runs_only_after_the_cache_went_cold() {
    // Chat Completions: OpenAI's cache lifetime applies.
    let policy = Policy {
        cold_cache_secs: 1,
        openai_cold_cache_secs: 1,
        ..Policy::default()
    };
    let h = start_full(
        Box::new(MemoryStore::default()),
        200_000,
        Some((policy, true)),
        None,
    )
    .await;
    let mut messages = vec![
        json!({"role": "system", "content": "You are a coding agent."}),
        json!({"role": "user", "content": "Fix the flaky test."}),
    ];
    let mut sent: Vec<Vec<Value>> = Vec::new();
    let turn_once = async |messages: &mut Vec<Value>, turn: usize| {
        let id = format!("call_{turn}");
        messages.push(json!({"role": "assistant", "content": format!("Step {turn}."), "tool_calls": [{"id": id, "type": "function", "function": {"name": "bash", "arguments": format!("{{\"command\":\"pytest -k case_{turn}\"}}")}}]}));
        let output = format!("{}\nexit status: {}\n", words(900, turn), turn % 2);
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": output}));
        // A model without OpenAI's extended retention: its cache lives minutes.
        let seen = h
            .chat(&json!({"model": "gpt-4o", "messages": messages}))
            .await;
        let upstream: Value = serde_json::from_slice(&seen.2).unwrap();
        upstream["messages"].as_array().unwrap().clone()
    };
    for turn in 0..30 {
        sent.push(turn_once(&mut messages, turn).await);
    }
    assert_eq!(
        h.state.stats().events,
        0,
        "no event while the cache is warm"
    );
    assert_eq!(
        sent.last().unwrap(),
        &messages,
        "a warm request passes whole"
    );
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let cold = turn_once(&mut messages, 30).await;
    assert_eq!(
        h.state.stats().events,
        1,
        "the request after the pause pruned"
    );
    let size = |m: &[Value]| serde_json::to_vec(m).unwrap().len();
    assert!(
        size(&cold) * 2 < size(&messages),
        "old outputs pruned: {} of {} bytes sent",
        size(&cold),
        size(&messages)
    );
    assert_eq!(cold[..2], messages[..2], "the system prompt and task stay");
    let next = turn_once(&mut messages, 31).await;
    assert_eq!(h.state.stats().events, 1);
    assert_eq!(
        next[..cold.len()],
        cold[..],
        "the next request extends the pruned prefix"
    );
}

/// A client that changes the fixed part of its conversation (its system prompt, tools, or
/// thinking settings) has the provider write every message again: the request that carries the
/// change may run the event a pause would, and no pause is needed. A side conversation of the
/// same client session with its own system prompt (Claude Code's sub-agents and title requests
/// share its session id) is a conversation of its own and changes nothing.
#[tokio::test]
async fn an_event_rides_on_a_change_the_client_made_to_its_fixed_part() {
    let h = start_full(
        Box::new(MemoryStore::default()),
        200_000,
        Some((Policy::default(), true)),
        None,
    )
    .await;
    let session = json!({"user_id": "user_abc_account_def_session_s-fixed"});
    let system = |version: &str| json!([{"type": "text", "text": format!("You are a coding agent ({version}).")}]);
    let mut messages = vec![json!({"role": "user", "content": "Fix the flaky test."})];
    let send = async |messages: &[Value], system: Value, thinking: Option<u32>| {
        let mut body = json!({"model": "claude-sonnet-4-5", "max_tokens": 1_000,
            "metadata": session, "system": system, "messages": messages});
        if let Some(budget) = thinking {
            body["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
        }
        let seen = h.post("/v1/messages", &body).await;
        let upstream: Value = serde_json::from_slice(&seen.2).unwrap();
        upstream["messages"].as_array().unwrap().clone()
    };
    let turn = |messages: &mut Vec<Value>, turn: usize| {
        let id = format!("toolu_{turn}");
        messages.push(json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "Bash", "input": {"command": format!("pytest -k case_{turn}")}}]}));
        let output = format!("{}\nexit status: {}\n", words(900, turn), turn % 2);
        messages.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": output}]}));
    };
    for t in 0..30 {
        turn(&mut messages, t);
        send(&messages, system("v1"), None).await;
        // A side request of the same session: another conversation, another system prompt.
        let side = [json!({"role": "user", "content": format!("Title for turn {t}?")})];
        send(&side, system("titles"), None).await;
    }
    assert_eq!(
        h.state.stats().events,
        0,
        "no event while the cache is warm"
    );
    turn(&mut messages, 30);
    let changed = send(&messages, system("v1"), Some(2_000)).await;
    assert_eq!(
        h.state.stats().events,
        1,
        "the request whose thinking settings changed pruned"
    );
    let size = |m: &[Value]| serde_json::to_vec(m).unwrap().len();
    assert!(
        size(&changed) * 2 < size(&messages),
        "old outputs pruned: {} of {} bytes sent",
        size(&changed),
        size(&messages)
    );
    turn(&mut messages, 31);
    let next = send(&messages, system("v1"), Some(2_000)).await;
    assert_eq!(h.state.stats().events, 1, "the same fixed part: no event");
    // Breakpoints move with the end of the prompt; the content before them stays.
    assert_eq!(
        ctxgc_proxy::rewrite::lineage::hash_messages(&next[..changed.len()]),
        ctxgc_proxy::rewrite::lineage::hash_messages(&changed),
        "the pruned prefix is extended"
    );
}

#[tokio::test]
async fn a_second_replica_continues_the_lineage_from_the_shared_store() {
    // Two replicas on one SQLite file.
    let dir = std::env::temp_dir().join(format!("ctxgc-replicas-{}", std::process::id()));
    let db = dir.join("shared.sqlite");
    replicas_continue_each_other(
        Box::new(ctxgc_store::SqliteStore::open(&db).unwrap()),
        Box::new(ctxgc_store::SqliteStore::open(&db).unwrap()),
    )
    .await;
    let _ = std::fs::remove_dir_all(dir);
    // Two replicas on one Redis (a real redis-server).
    let Some((_server, url)) = redis_server::start() else {
        return;
    };
    replicas_continue_each_other(
        Box::new(ctxgc_store::RedisStore::connect(&url).unwrap()),
        Box::new(ctxgc_store::RedisStore::connect(&url).unwrap()),
    )
    .await;
}

/// A team's Redis: TLS with its own CA, a password, an ACL user limited to its key prefix.
/// Two replicas share it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_a_tls_redis_with_an_acl_user() {
    ctxgc_summarize::install_crypto();
    let dir = std::env::temp_dir().join(format!("ctxgc-proxy-tls-{}", std::process::id()));
    let (ca, cert, key) = redis_server::make_certificates(&dir);
    let args: Vec<String> = [
        "--tls-cert-file",
        &cert.display().to_string(),
        "--tls-key-file",
        &key.display().to_string(),
        "--tls-ca-cert-file",
        &ca.display().to_string(),
        "--tls-auth-clients",
        "no",
        "--user",
        "default",
        "off",
        "--user",
        "proxy",
        "on",
        ">acl-SECRET",
        "~team:*",
        "+@all",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let Some((_server, url)) = redis_server::start_with(&args) else {
        return;
    };
    let port = url.rsplit(':').next().unwrap();
    let tls_url = format!("rediss://proxy:acl-SECRET@127.0.0.1:{port}");
    let store = || {
        ctxgc_store::RedisStore::connect_with(
            &tls_url,
            ctxgc_store::RedisOptions {
                key_prefix: "team".into(),
                ca_file: Some(ca.clone()),
                ..Default::default()
            },
        )
        .unwrap()
    };
    replicas_continue_each_other(Box::new(store()), Box::new(store())).await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn reported_usage_calibrates_the_sessions_token_estimates() {
    let h = start_with(Box::new(MemoryStore::default()), 200_000, true).await;
    let body = json!({"model": "gpt-5", "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}],
        "messages": [{"role": "user", "content": words(2_000, 1)}]});
    let request = client().post(format!("{}/v1/chat/completions", h.proxy));
    answer_of(request.header("x-ctxgc-session", "cal").json(&body)).await;
    let session = h.state.named_session(&HeaderMap::new(), "cal");
    let usage = h.state.stats().usage[session.as_str()].clone();
    // The fake upstream reports 100 prompt tokens for a prompt ctxgc counts in the thousands:
    // calibration never lowers the estimates (an overflow fails, an early event only costs).
    assert!(usage.estimated_tokens > 2_000, "{usage:?}");
    assert_eq!(usage.calibration.known(), Some(1.0));
}

#[tokio::test]
async fn anthropic_and_responses_compaction_is_prefix_stable_and_keeps_tool_pairs() {
    use ctxgc_formats::Api;
    for api in [Api::Messages, Api::Responses] {
        let window = 12_000;
        let h = start_with(Box::new(MemoryStore::default()), window, true).await;
        let (path, key) = if api == Api::Messages {
            ("/v1/messages", "messages")
        } else {
            ("/v1/responses", "input")
        };
        let mut items = vec![
            json!({"role": "user", "content": "Fix the flaky test. You must not change the public API."}),
        ];
        let mut sent: Vec<Vec<Value>> = Vec::new();
        let mut counter = ctxgc_core::tokens::TokenCounter::new(
            if api == Api::Messages {
                ctxgc_core::tokens::ProviderFamily::Anthropic
            } else {
                ctxgc_core::tokens::ProviderFamily::Openai
            },
            Default::default(),
        );
        // A message the client pins, mid-history: Claude Code's environment block, a Codex
        // developer message. Compaction used to drop it.
        let pinned = if api == Api::Messages {
            json!({"role": "system", "content": [{"type": "text", "text": "# Environment\n - Primary working directory: /home/dev/project"}]})
        } else {
            json!({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "# Environment\n - Primary working directory: /home/dev/project"}]})
        };
        for turn in 0..60 {
            items.extend(turn_items(api, turn));
            if turn == 5 {
                items.push(pinned.clone());
            }
            let body = if api == Api::Messages {
                json!({"model": "claude-sonnet-4-5", "max_tokens": 1000, "system": "You are a coding agent.", "messages": items})
            } else {
                json!({"model": "gpt-5", "instructions": "You are a coding agent.", "input": items})
            };
            let seen = h.post(path, &body).await;
            let upstream: Value = serde_json::from_slice(&seen.2).unwrap();
            let msgs = upstream[key].as_array().unwrap().clone();
            let request = ctxgc_formats::ApiRequest::parse(api, &seen.2).unwrap();
            let tokens = counter.count_messages(&request.transcript().unwrap().messages);
            assert!(
                (tokens as u64) < window,
                "{}: turn {turn}: {tokens} tokens sent to a {window}-token model",
                api.name()
            );
            assert_pairs(&msgs, turn);
            if turn >= 5 {
                let kept = msgs
                    .iter()
                    .filter(|m| without_cache_control(m) == pinned)
                    .count();
                assert_eq!(kept, 1, "{}: turn {turn}: the pinned message", api.name());
            }
            let breakpoints = upstream.to_string().matches("cache_control").count();
            assert!(breakpoints <= 4, "turn {turn}: {breakpoints} breakpoints");
            sent.push(msgs.iter().map(without_cache_control).collect());
        }
        let breaks = sent
            .windows(2)
            .filter(|w| !(w[1].len() >= w[0].len() && w[1][..w[0].len()] == w[0][..]))
            .count();
        let events = h.state.stats().events as usize;
        eprintln!(
            "{}: {events} events over 60 turns at a {window}-token window",
            api.name()
        );
        assert!(events >= 1, "the engine ran");
        assert_eq!(
            breaks,
            events,
            "{}: every prefix change is an event, and nothing else changes the prefix",
            api.name()
        );
        assert!(events <= 12, "events are rare: {events} in 60 turns");
        assert!(sent.iter().any(|m| {
            m.iter()
                .any(|x| x["content"].to_string().contains("[ctxgc context summary"))
        }));
        if api == Api::Messages {
            // A token count of the latest history sees what the last request sent (lineage
            // applied), runs no event, and a count of some other history ends no lineage.
            // The messages the upstream got for a body sent to `path`, breakpoints aside.
            let upstream_messages = async |path: &str, body: Value| -> Vec<Value> {
                let seen = h.post(path, &body).await;
                let sent: Value = serde_json::from_slice(&seen.2).unwrap();
                sent["messages"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(without_cache_control)
                    .collect()
            };
            let counted = upstream_messages(
                "/v1/messages/count_tokens",
                json!({"model": "claude-sonnet-4-5", "system": "You are a coding agent.", "messages": items}),
            )
            .await;
            assert_eq!(
                &counted,
                sent.last().unwrap(),
                "count_tokens sees the lineage"
            );
            // Same session, a history the lineage does not cover (its first exchange only).
            let other = json!({"model": "claude-sonnet-4-5", "system": "You are a coding agent.", "messages": items[..3]});
            h.post("/v1/messages/count_tokens", &other).await;
            assert_eq!(h.state.stats().events as usize, events);
            let again = upstream_messages(
                path,
                json!({"model": "claude-sonnet-4-5", "max_tokens": 1000, "system": "You are a coding agent.", "messages": items}),
            )
            .await;
            assert_eq!(
                &again,
                sent.last().unwrap(),
                "the lineage survived the counts"
            );
        }
    }
}

/// Defect guarded: one process-wide lock on the store was held across the LLM summary call, so a
/// one-line request of an unrelated session took 7.0 s instead of 0.13 s while an 8 s summary
/// ran. Now a request of session B completes within 50 ms of its usual time while session A's
/// summary call sleeps 5 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_summary_in_one_session_adds_nothing_to_another() {
    let h = start_full(
        Box::new(ctxgc_store::SqliteStore::in_memory().unwrap()),
        12_000,
        Some(always()),
        Some("/slow-summarizer/v1"),
    )
    .await;
    let one_line = |n: usize| {
        json!({"model": "gpt-5", "prompt_cache_key": "b", "messages": [
            {"role": "user", "content": format!("What is {n} + 1?")}
        ]})
    };
    let time_b = async |n: usize| {
        let started = std::time::Instant::now();
        h.chat(&one_line(n)).await;
        started.elapsed()
    };
    let mut usual = Vec::new();
    for n in 0..7 {
        usual.push(time_b(n).await);
    }
    usual.sort();
    let usual = usual[usual.len() / 2];
    let summary_asked = || h.upstream.log.any_path("/slow-summarizer");
    let (_, during) = tokio::join!(chat_session(&h, 40), async {
        let waiting = std::time::Instant::now();
        while !summary_asked() {
            assert!(
                waiting.elapsed() < Duration::from_secs(60),
                "no compaction came"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let asked = std::time::Instant::now();
        let mut during = Vec::new();
        for n in 100..105 {
            during.push(time_b(n).await);
        }
        assert!(
            asked.elapsed() < SLOW_SUMMARY,
            "session B was measured while A's summary call slept"
        );
        during
    });
    for took in during {
        assert!(
            took < usual + Duration::from_millis(50),
            "session B took {took:?} while A's summary slept; usually {usual:?}"
        );
    }
    assert_eq!(h.state.stats().fail_open, 0);
}

#[tokio::test]
async fn an_llm_summarizer_writes_compactions_and_the_extractive_summary_stands_in_when_it_fails() {
    // The LLM writes the summary.
    let h = start_full(
        Box::new(MemoryStore::default()),
        12_000,
        Some(always()),
        Some("/summarizer/v1"),
    )
    .await;
    let turns = chat_session(&h, 40).await;
    let summarized = turns
        .iter()
        .any(|(_, sent, _)| String::from_utf8_lossy(sent).contains("LLM-WRITTEN SUMMARY"));
    assert!(summarized, "a compaction carries the LLM's summary");
    let asked = h
        .upstream
        .log
        .all()
        .iter()
        .filter(|r| r.path == "/summarizer/v1/chat/completions")
        .count();
    assert!(asked >= 1);
    assert_eq!(h.state.stats().fail_open, 0);

    // The LLM is down: the compaction is summarised extractively (the request is neither
    // failed nor forwarded unchanged), and the LLM is not asked again during the cooldown.
    let h = start_full(
        Box::new(MemoryStore::default()),
        12_000,
        Some(always()),
        Some("http://127.0.0.1:9/v1"),
    )
    .await;
    let turns = chat_session(&h, 40).await;
    let stats = h.state.stats();
    assert_eq!(stats.fail_open, 0);
    assert_eq!(
        stats.summarizer_failures, 1,
        "one failure, then the cooldown"
    );
    let summarised =
        |sent: &Bytes| String::from_utf8_lossy(sent).contains("[ctxgc context summary");
    let first = turns.iter().position(|t| summarised(&t.1)).unwrap();
    assert!(first > 0, "the session compacted");
    assert!(
        stats.events >= 2,
        "later compactions ran too (extractive): {} events",
        stats.events
    );
    let logs = h.logs.text();
    assert!(logs.contains("summarizer failed"), "{logs}");
    assert!(
        !logs.contains("sk-summarizer-SECRET"),
        "keys never reach the logs"
    );
}

/// Defect guarded: with the store file locked by another process, requests waited in steps of
/// SQLite's 5 s busy timeout under one global lock. A request now fails open (forwarded
/// unchanged, counted) within the store deadline, and the next one after the lock is released
/// is trimmed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_store_locked_by_another_process_fails_open_within_the_deadline() {
    let dir = std::env::temp_dir().join(format!("ctxgc-locked-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let db = dir.join("store.sqlite");
    let deadline = Duration::from_millis(300);
    let store = ctxgc_store::SqliteStore::open_with_timeout(&db, deadline).unwrap();
    let h = start(Box::new(store)).await;
    let other = rusqlite::Connection::open(&db).unwrap();
    other.execute_batch("BEGIN IMMEDIATE;").unwrap();
    let body = one_output("alice", &log_text(4000));
    let (sent, took) = timed(&h, "sk-alice", &body).await;
    assert_eq!(
        serde_json::from_slice::<Value>(&sent).unwrap(),
        body,
        "forwarded unchanged"
    );
    assert!(took < deadline * 4, "failed open after {took:?}");
    assert_eq!(h.state.stats().fail_open, 1);
    let logs = h.logs.text();
    assert!(logs.contains("locked"), "the log says why: {logs}");
    other.execute_batch("COMMIT;").unwrap();
    // The store rests a moment after a failure (its calls fail open at once meanwhile), then
    // is tried again.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let (sent, _) = timed(&h, "sk-alice", &body).await;
    assert!(sent.len() < body.to_string().len() / 2, "trimmed again");
    assert_eq!(h.state.stats().fail_open, 1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Defect guarded: a Redis command that timed out left its connection in use; when Redis
/// resumed, the next command read the abandoned reply, and Bob's request carried Alice's
/// output. Now Alice's request fails open within the store deadline while Redis is paused, and
/// after it resumes Bob's request carries only Bob's data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_redis_fails_open_within_the_deadline_and_leaks_nothing() {
    let Some((server, url)) = redis_server::start() else {
        return;
    };
    let deadline = Duration::from_millis(300);
    let store = ctxgc_store::RedisStore::connect_with_timeout(&url, deadline).unwrap();
    let h = start(Box::new(store)).await;
    let alice_output = format!(
        "ALICE-ONLY: prod db password is hunter2\n{}",
        log_text(4000)
    );
    let alice = one_output("alice", &alice_output);
    timed(&h, "sk-alice", &alice).await;
    server.pause();
    let (sent, took) = timed(&h, "sk-alice", &one_output("alice", &log_text(5000))).await;
    assert!(took < deadline * 4, "failed open after {took:?}");
    assert_eq!(h.state.stats().fail_open, 1);
    assert!(
        String::from_utf8_lossy(&sent).contains("[04999]"),
        "forwarded whole"
    );
    server.resume();
    // Past the store's rest after its failure.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    for _ in 0..3 {
        let (sent, _) = timed(&h, "sk-bob", &one_output("bob", &log_text(4500))).await;
        let sent = String::from_utf8_lossy(&sent);
        assert!(
            !sent.contains("ALICE") && !sent.contains("hunter2"),
            "{sent}"
        );
        assert!(sent.contains("bob: run the build"));
    }
    assert_eq!(h.state.stats().fail_open, 1, "the store works again");
}

/// A proxy with the default policy, events only after a pause, at `window`; and the prompt's
/// limit there.
async fn windowed(window: u64) -> (Harness, usize) {
    let policy = Policy::default();
    let limit = policy.prompt_limit(window);
    let store = Box::new(MemoryStore::default());
    (
        start_full(store, window, Some((policy, true)), None).await,
        limit,
    )
}

/// A prompt past the window is a failed request. In front of a client that keeps its own
/// window (events only after a pause: the proxy's default), a session driven far past the
/// model's window never sends a prompt past it with any API: the event that makes it fit runs
/// on a warm cache too, keeps every call with its result, is logged and counted.
#[tokio::test]
async fn a_session_past_the_window_is_made_to_fit_with_every_api() {
    use ctxgc_formats::Api;
    for api in [Api::ChatCompletions, Api::Messages, Api::Responses] {
        let (h, limit) = windowed(12_000).await;
        let path = match api {
            Api::Messages => "/v1/messages",
            Api::Responses => "/v1/responses",
            _ => "/v1/chat/completions",
        };
        let mut items = vec![json!({"role": "user", "content": "Fix the flaky test."})];
        let mut counter =
            ctxgc_core::tokens::TokenCounter::new(api.wire().family(), Default::default());
        let mut passed = 0;
        for turn in 0..30 {
            if api == Api::ChatCompletions {
                items.extend(chat_turn(turn));
            } else {
                items.extend(turn_items(api, turn));
            }
            let body = match api {
                Api::Messages => {
                    json!({"model": "claude-sonnet-4-5", "max_tokens": 1000, "system": "You are a coding agent.", "messages": items})
                }
                Api::Responses => {
                    json!({"model": "gpt-5", "instructions": "You are a coding agent.", "input": items})
                }
                _ => json!({"model": "gpt-4o", "messages": items}),
            };
            let client_tokens = counter.count_messages(
                &ctxgc_formats::ApiRequest::parse(api, body.to_string().as_bytes())
                    .unwrap()
                    .transcript()
                    .unwrap()
                    .messages,
            );
            passed += usize::from(client_tokens > limit);
            let seen = h.post(path, &body).await;
            let request = ctxgc_formats::ApiRequest::parse(api, &seen.2).unwrap();
            let tokens = counter.count_messages(&request.transcript().unwrap().messages);
            assert!(
                tokens <= limit,
                "{}: turn {turn}: {tokens} tokens sent, the limit is {limit}",
                api.name()
            );
            if api != Api::ChatCompletions {
                let sent: Value = serde_json::from_slice(&seen.2).unwrap();
                let key = if api == Api::Messages {
                    "messages"
                } else {
                    "input"
                };
                assert_pairs(sent[key].as_array().unwrap(), turn);
            }
        }
        assert!(
            passed > 10,
            "{}: the client's history passed the window",
            api.name()
        );
        let stats = h.state.stats();
        assert_eq!(stats.fail_open, 0, "{}", api.name());
        assert!(stats.events >= 1, "{}", api.name());
        let metrics = client()
            .get(format!("{}/metrics", h.proxy))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            metrics.lines().any(
                |l| l.starts_with("ctxgc_window_fits_total{outcome=\"fits\"}")
                    && !l.ends_with(" 0")
            ),
            "{}: {metrics}",
            api.name()
        );
        assert!(h.logs.text().contains("prompt past the window"));
    }
}

/// A body larger in bytes than the prompt's limit is counted only when the session's last
/// count, plus the bytes added since, no longer holds it under the limit: most of a long
/// session's requests skip the view and the count (0 is recorded, which calibrates nothing),
/// some count again, and none the proxy sends passes the limit.
#[tokio::test]
async fn a_long_session_is_counted_again_only_when_its_bound_nears_the_limit() {
    let (h, limit) = windowed(200_000).await;
    let session = h.state.named_session(&HeaderMap::new(), "bound");
    let mut counter = ctxgc_core::tokens::TokenCounter::openai();
    let mut items = vec![json!({"role": "user", "content": "Fix the flaky test."})];
    let (mut skipped, mut counted) = (0, 0);
    for turn in 0..64 {
        items.extend(chat_turn(turn));
        let body = json!({"model": "gpt-4o", "messages": items});
        let bytes = body.to_string().len();
        let request = client().post(format!("{}/v1/chat/completions", h.proxy));
        answer_of(request.header("x-ctxgc-session", "bound").json(&body)).await;
        let sent = as_seen(h.upstream.log.last().unwrap()).2;
        let sent =
            ctxgc_formats::ApiRequest::parse(ctxgc_formats::Api::ChatCompletions, &sent).unwrap();
        let tokens = counter.count_messages(&sent.transcript().unwrap().messages);
        assert!(
            tokens <= limit,
            "turn {turn}: {tokens} tokens sent, the limit is {limit}"
        );
        // Within the proxy's margin of the limit in bytes, a body is counted.
        if bytes + 4_096 <= limit {
            continue;
        }
        match h.state.stats().usage[session.as_str()].estimated_tokens {
            0 => skipped += 1,
            estimate => {
                counted += 1;
                assert!(
                    estimate as usize >= tokens,
                    "turn {turn}: {estimate} < {tokens}"
                );
            }
        }
    }
    // Past the limit in bytes from about the 30th turn, at about 40% of it in tokens: counted
    // there, then again each time the bytes added since take the bound past the limit.
    assert!(
        skipped >= 20 && counted >= 2,
        "skipped {skipped}, counted {counted}"
    );
    assert_eq!(h.state.stats().fail_open, 0);
}

/// Claude Code's 1M-context sessions announce it (the `context-1m` beta); Claude 5 models run
/// at 1M anyway. Such a session is not cut as if it had the table's 200K: assuming a smaller
/// window than the real one would hide what the client keeps and rewrite its cached prefix.
#[tokio::test]
async fn a_long_context_session_is_not_cut_to_the_tables_window() {
    let upstream = FakeUpstream::start(upstream_reply).await;
    let base = common::settings(&upstream.url);
    let settings = ProxySettings {
        max_body_bytes: 8 * 1024 * 1024,
        rewrite: RewriteSettings {
            cache: Default::default(),
            model_windows: true,
            engine: Some(Policy::default()),
            events_only_when_cold: true,
            ..base.rewrite.clone()
        },
        ..base
    };
    let (proxy, _state) = common::serve(settings).await;
    // About 280K tokens of conversation: past 200K, well inside 1M.
    let mut messages = vec![json!({"role": "user", "content": "Read the whole module."})];
    for turn in 0..10 {
        messages.push(json!({"role": "assistant", "content": format!("Part {turn}.")}));
        messages.push(json!({"role": "user", "content": words(8_000, turn)}));
    }
    let send = async |session: &str, model: &str, beta: Option<&str>| {
        let mut request = client()
            .post(format!("{proxy}/v1/messages"))
            .header("x-ctxgc-session", session);
        if let Some(beta) = beta {
            request = request.header("anthropic-beta", beta);
        }
        let body = json!({"model": model, "max_tokens": 1000, "messages": messages});
        answer_of(request.json(&body)).await;
        let sent: Value = serde_json::from_slice(&upstream.log.last().unwrap().body).unwrap();
        sent["messages"].as_array().unwrap().len()
    };
    let whole = messages.len();
    assert_eq!(
        send(
            "beta",
            "claude-sonnet-4-5",
            Some("interleaved-thinking-2025-05-14,context-1m-2025-08-07")
        )
        .await,
        whole,
        "the beta's 1M"
    );
    assert_eq!(
        send("five", "claude-opus-5", None).await,
        whole,
        "a Claude 5 model's 1M"
    );
    assert!(
        send("plain", "claude-sonnet-4-5", None).await < whole,
        "at 200K the same history is cut to fit"
    );
}
