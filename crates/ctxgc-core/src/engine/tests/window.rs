//! No prompt past the window.

use super::*;

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
