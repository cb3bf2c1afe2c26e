//! A store that stalls, and the window.

use super::*;

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

/// A prompt past the window is a failed request. In front of a client that keeps its own
/// window (events only after a pause: the proxy's default), a session driven far past the
/// model's window never sends a prompt past it with any API: the event that makes it fit runs
/// on a warm cache too, keeps every call with its result, is logged and counted.
#[tokio::test]
async fn a_session_past_the_window_is_made_to_fit_with_every_api() {
    use ctxgc_formats::Api;
    for api in [Api::ChatCompletions, Api::Messages, Api::Responses] {
        let window = 12_000;
        let policy = Policy::default();
        let limit = policy.prompt_limit(window);
        let h = start_full(
            Box::new(MemoryStore::default()),
            window,
            Some((policy, true)),
            None,
        )
        .await;
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
        request
            .json(&body)
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
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
