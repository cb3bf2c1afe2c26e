use super::*;
use crate::cache::CacheKind;
use ctxgc_core::Block;

/// A client's log replays by default at the window its client ran: its model's, the long
/// context when it billed a larger prompt, its client's default model when it names none.
#[test]
fn a_client_log_runs_at_its_clients_window() {
    let log = |client: &str, model: Option<&str>, prompt: u64| {
        let mut answer = Message::text(Role::Assistant, "ok");
        answer.usage = Some(ctxgc_core::RecordedUsage {
            prompt_tokens: prompt,
            ..Default::default()
        });
        let mut t = crate::test_logs::recorded(
            vec![Message::text(Role::User, "go"), answer],
            vec![None, None],
            vec![],
        );
        t.recording.as_mut().unwrap().client = client.into();
        t.model = model.map(str::to_owned);
        t
    };
    assert_eq!(
        client_window(&log("codex 0.94.0", Some("gpt-5.2-codex"), 1)),
        Some(272_000)
    );
    assert_eq!(client_window(&log("codex 0.34.0", None, 1)), Some(272_000));
    let claude = log("claude-code 2.1.6", Some("claude-opus-4-5"), 150_000);
    assert_eq!(client_window(&claude), Some(200_000));
    let long = log("claude-code 2.1.6", Some("claude-opus-4-5"), 350_000);
    assert_eq!(
        client_window(&long),
        Some(1_000_000),
        "a 1M-context session"
    );
    assert_eq!(
        session_window(&long, 64_000),
        64_000,
        "a window asked for stands"
    );
    assert_eq!(session_window(&long, CLIENT_WINDOW), 1_000_000);
    let mut transcript = claude.clone();
    transcript.recording = None;
    assert_eq!(client_window(&transcript), None, "not a client's log");
}

/// A keep-alive policy sends its keep-alives in each pause and, after the session's last
/// request, for as long as it would in a pause (a proxy cannot tell the end from a pause):
/// `keepalive-4min` reads the prefix at 4 and 8 minutes into each 10-minute pause and every
/// 4 minutes for the hour after the last request.
#[test]
fn keepalives_go_on_after_the_last_request() {
    let minute = 60_000;
    let mut messages = vec![Message::text(Role::System, "You are a coding agent.")];
    let mut sent_ms = vec![Some(0)];
    for turn in 0..3 {
        messages.push(Message::text(Role::User, format!("step {turn}")));
        messages.push(Message::text(Role::Assistant, "ok"));
        sent_ms.extend([Some(turn * 10 * minute); 2]);
    }
    let t = crate::test_logs::recorded(messages, sent_ms, vec![]);
    let run = under_anthropic(&t, "keepalive-4min", None);
    let pings: Vec<i64> = run
        .requests
        .iter()
        .filter(|r| r.keepalive)
        .filter_map(|r| r.sent_ms)
        .map(|ms| ms / minute)
        .collect();
    let tail: Vec<i64> = (1..=15).map(|k| 20 + 4 * k).collect();
    assert_eq!(pings, [[4, 8, 14, 18].as_slice(), &tail].concat());
    assert_eq!(run.requests.iter().filter(|r| !r.keepalive).count(), 3);
}
/// `t` replayed at 200K under `policy` with Anthropic's documented cache.
fn under_anthropic(t: &Transcript, policy: &str, client: Option<&ClientModel>) -> SessionRun {
    let policy = crate::policies::builtin(policy).unwrap();
    let anthropic = CacheRules::documented(CacheKind::Anthropic, 0);
    replay(
        0,
        t,
        &policy,
        200_000,
        &[(CacheKind::Anthropic, anthropic)],
        client,
        false,
    )
}

/// A recorded usage for a test log.
fn billed(prompt: u64) -> Option<ctxgc_core::RecordedUsage> {
    Some(ctxgc_core::RecordedUsage {
        prompt_tokens: prompt,
        cached_tokens: prompt / 2,
        ..Default::default()
    })
}

/// Claude Code logs a slash command's text but not the files it attaches: the request
/// that first carried them grew by more than the log's new messages count. The lab finds
/// that growth, carries it with the command's message, and fits the tokenizers' scale
/// without it, so `none` sends what the client sent.
#[test]
fn content_a_client_log_does_not_hold_goes_with_its_message() {
    let mut counter = crate::counting::counter();
    let mut messages = vec![Message::text(Role::User, "start the plan")];
    for step in 0..8 {
        messages.push(Message::text(Role::Assistant, format!("step {step} done")));
        let text = format!("{} result {step}", "word ".repeat(300 + 150 * step));
        messages.push(Message::text(Role::User, text));
    }
    messages.push(Message::text(Role::Assistant, "finished"));
    // The 5th user message is a command whose files the log does not hold.
    let command = 8;
    let (scale, prefix, attached) = (1.2, 5_000.0, 20_000.0);
    let mut counted = 0usize;
    for (i, m) in messages.iter_mut().enumerate() {
        if m.role == Role::Assistant {
            let carried = if i > command { attached } else { 0.0 };
            let prompt = prefix + scale * (counted + 3) as f64 + carried;
            m.usage = billed(prompt.round() as u64);
        }
        counted += counter.count_message(m);
    }
    let n = messages.len();
    let mut t = crate::test_logs::recorded(messages, vec![None; n], vec![]);
    t.recording.as_mut().unwrap().client = "claude-code 2.1.6".into();
    let model = client_model(&t).unwrap();
    assert_eq!(model.attachments.len(), 1, "{:?}", model.attachments);
    assert_eq!(model.attachments[0].at, command);
    assert!(model.attachments[0].tokens.abs_diff(20_000) < 100);
    assert!((model.calibration.scale - 1.2).abs() < 0.01, "{model:?}");
    let run = under_anthropic(&t, "none", Some(&model));
    for r in run.requests.iter().filter(|r| r.is_agent()) {
        let recorded = t.messages[r.source_index].usage.unwrap().prompt_tokens as usize;
        assert!(
            r.tokens.abs_diff(recorded) * 100 < recorded,
            "request {}: {} against {recorded}",
            r.source_index,
            r.tokens
        );
    }
    // A Codex rollout's growth past its count is its turn's reasoning: nothing attached.
    t.recording.as_mut().unwrap().client = "codex 0.94.0".into();
    assert!(client_model(&t).unwrap().attachments.is_empty());
}

/// The Responses API drops the reasoning of turns before the latest user message: in a
/// Codex rollout the turn after one with reasoning reads only what came before that
/// reasoning, where a Claude Code log (whose provider keeps it) reads the whole prompt.
#[test]
fn codex_reads_stop_at_the_reasoning_of_an_earlier_turn() {
    let thinking = |text: &str| Block::Thinking {
        text: Some(text.into()),
        raw: serde_json::json!({"type": "reasoning"}),
    };
    let turn = |reasoning: &str, answer: &str| Message {
        role: Role::Assistant,
        content: vec![thinking(reasoning), Block::text(answer)],
        usage: None,
    };
    let messages = vec![
        Message::text(Role::System, "You are a coding agent. ".repeat(200)),
        Message::text(Role::User, "fix the parser"),
        turn("the parser fails on tabs", "looking at it"),
        turn("tabs are split wrongly", "fixed it"),
        Message::text(Role::User, "now the lexer"),
        turn("the lexer too", "done"),
    ];
    let reads = |client: &str| {
        let mut t = crate::test_logs::recorded(messages.clone(), vec![None; 6], vec![]);
        t.recording.as_mut().unwrap().client = client.into();
        let none = crate::policies::builtin("none").unwrap();
        let rules = CacheRules {
            min_tokens: 0,
            step: 1,
            ..CacheRules::documented(CacheKind::Openai, 0)
        };
        let run = replay(
            0,
            &t,
            &none,
            200_000,
            &[(CacheKind::Openai, rules)],
            None,
            false,
        );
        let agent: Vec<&RequestRecord> = run.requests.iter().filter(|r| r.is_agent()).collect();
        // The first request, the second (same turn), what the third (next turn) read.
        (
            agent[0].tokens,
            agent[1].tokens,
            agent[2].served["openai"].cached,
        )
    };
    let (first, second, third_codex) = reads("codex 0.94.0");
    let (_, second_claude, third_claude) = reads("claude-code 2.1.6");
    assert_eq!(second, second_claude);
    assert_eq!(third_claude, second, "the whole previous prompt is read");
    assert_eq!(
        third_codex, first,
        "read up to the first turn's reasoning, which the provider dropped"
    );
}
