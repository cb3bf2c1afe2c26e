use super::*;

fn settings() -> RewriteSettings {
    RewriteSettings::trimming_at(32_000)
}

/// A conversation that reads a file (`c1`), then reads it again (`c2`).
fn read_twice(first: &str, second: &str) -> Value {
    json!({
        "model": "gpt-5",
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": first},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c2", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c2", "content": second}
        ]
    })
}

fn log(n: usize) -> String {
    (0..n).map(|i| format!("[{i:05}] step ok\n")).collect()
}

#[test]
fn chat_tool_results_are_trimmed_in_place_and_the_rest_is_untouched() {
    let body = json!({
        "model": "gpt-5", "prompt_cache_key": "k", "temperature": 0.3,
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": log(5000)}
        ]
    });
    let mut request = ApiRequest::parse(Api::ChatCompletions, body.to_string().as_bytes()).unwrap();
    let out = rewrite(&mut request, "s", &settings());
    let new: Value = serde_json::from_slice(&out.body.unwrap()).unwrap();
    let trimmed = new["messages"][2]["content"].as_str().unwrap();
    assert!(trimmed.contains("trimmed from terminal output") && trimmed.len() < 13_000);
    assert_eq!(out.originals.len(), 1);
    assert_eq!(out.originals[0].1, log(5000));
    assert_eq!(
        new["messages"].as_array().unwrap()[..2],
        body["messages"].as_array().unwrap()[..2]
    );
    assert_eq!(new["temperature"], 0.3);
    // The same history rewrites to the same bytes.
    let mut again = ApiRequest::parse(Api::ChatCompletions, body.to_string().as_bytes()).unwrap();
    assert_eq!(
        rewrite(&mut again, "s", &settings()).body,
        Some(request.to_bytes())
    );
}

/// A repeat of an output the session's events hid (the lineage's `hidden`) enters as
/// itself, not as a pointer to what the model no longer sees; with nothing hidden, the
/// same history points to it.
#[test]
fn a_repeat_never_points_to_a_hidden_output() {
    let file: String = (0..300)
        .map(|i| format!("line {i} of the module\n"))
        .collect();
    let body = read_twice(&file, &file);
    let second = |hidden: &[crate::rewrite::lineage::HiddenResult]| {
        let mut request =
            ApiRequest::parse(Api::ChatCompletions, body.to_string().as_bytes()).unwrap();
        let memo = TrimMemo::default();
        let out = rewrite_within(
            &mut request,
            None,
            "s",
            &settings(),
            &memo,
            &|_| false,
            hidden,
            None,
        )
        .unwrap();
        let new: Value = match out.body {
            Some(bytes) => serde_json::from_slice(&bytes).unwrap(),
            None => body.clone(),
        };
        new["messages"][4]["content"].as_str().unwrap().to_owned()
    };
    assert!(second(&[]).starts_with("[same output as the result of c1 "));
    let hidden = |from_result| crate::rewrite::lineage::HiddenResult {
        call_id: "c1".into(),
        from_result,
    };
    assert_eq!(second(&[hidden(1)]), file, "hidden before c2 entered");
    assert!(
        second(&[hidden(2)]).starts_with("[same output as the result of c1 "),
        "hidden after c2 entered: c2 entered as a pointer, and stays one"
    );
}

/// A repeat that points to lines of an earlier result names that result's id, and an id the
/// model sees must answer a recall: the earlier result, which entered whole (so nothing had
/// stored it), is stored with the request that first points to it, and not again once the
/// store has it.
#[test]
fn a_pointer_names_an_original_the_store_holds() {
    let file: String = (0..300)
        .map(|i| format!("line {i} of the module\n"))
        .collect();
    let edited = file.replace("line 150 of", "line 150 (edited) of");
    let body = read_twice(&file, &edited);
    let run = |stored: &dyn Fn(ContentId) -> bool| {
        let mut request =
            ApiRequest::parse(Api::ChatCompletions, body.to_string().as_bytes()).unwrap();
        let out = rewrite_with(
            &mut request,
            None,
            "s",
            &settings(),
            &TrimMemo::default(),
            stored,
        );
        let new: Value = serde_json::from_slice(&out.body.clone().unwrap()).unwrap();
        (
            new["messages"][4]["content"].as_str().unwrap().to_owned(),
            out,
        )
    };
    let (second, out) = run(&|_| false);
    assert!(
        second.starts_with("[lines 1-150 same as the result of c1 (id "),
        "{second}"
    );
    let first_id = ResultMeta::of(&file).id;
    let named: Vec<ContentId> = ctxgc_core::engine::repeats::pointed_ids(&second).collect();
    assert_eq!(named, [first_id, first_id]);
    let stored: Vec<ContentId> = out.originals.iter().map(|o| o.0).collect();
    assert!(
        stored.contains(&first_id),
        "the pointed-to original is stored"
    );
    assert!(
        out.originals.iter().any(|o| o.0 == first_id && o.1 == file),
        "as the client sent it"
    );
    let (_, again) = run(&|id| id == first_id);
    assert!(again.originals.iter().all(|o| o.0 != first_id));
}

#[test]
fn anthropic_and_responses_results_are_found() {
    let body = json!({"model": "c", "max_tokens": 10, "system": "sys", "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": log(9000)}]}]}
    ]});
    let mut request = ApiRequest::parse(Api::Messages, body.to_string().as_bytes()).unwrap();
    let out = rewrite(&mut request, "s", &settings());
    let new: Value = serde_json::from_slice(&out.body.unwrap()).unwrap();
    assert!(
        new["messages"][2]["content"][0]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("trimmed from file read output")
    );
    assert_eq!(
        new["system"][0]["cache_control"]["type"], "ephemeral",
        "breakpoints added"
    );
    assert_eq!(
        new["messages"][2]["content"][0]["cache_control"]["type"],
        "ephemeral"
    );

    let body = json!({"model": "gpt-5", "input": [
        {"type": "function_call", "call_id": "c", "name": "exec_command", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": log(9000)}
    ]});
    let mut request = ApiRequest::parse(Api::Responses, body.to_string().as_bytes()).unwrap();
    let out = rewrite(&mut request, "sess-1", &settings());
    let new: Value = serde_json::from_slice(&out.body.unwrap()).unwrap();
    assert!(
        new["input"][1]["output"]
            .as_str()
            .unwrap()
            .contains("trimmed from terminal output")
    );
    assert_eq!(new["prompt_cache_key"], "sess-1");
}

#[test]
fn nothing_to_do_means_no_new_body() {
    let body = json!({"model": "gpt-5", "prompt_cache_key": "k", "messages": [{"role": "user", "content": "hi"}]});
    let mut request = ApiRequest::parse(Api::ChatCompletions, body.to_string().as_bytes()).unwrap();
    assert!(rewrite(&mut request, "s", &settings()).body.is_none());
}

/// Defect guarded: `serve` shaped every request for an assumed 200K window, so a local
/// 32K model's outputs entered whole. The window now comes from the request's model.
#[test]
fn the_window_follows_the_requests_model() {
    let settings = RewriteSettings {
        cache: Default::default(),
        model_windows: true,
        ..settings()
    };
    let run = |model: &str| {
        let body = json!({
            "model": model,
            "messages": [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": log(1200)}
            ]
        });
        let mut request =
            ApiRequest::parse(Api::ChatCompletions, body.to_string().as_bytes()).unwrap();
        rewrite(&mut request, "s", &settings).bytes_saved
    };
    // 19 KB: under the terminal's limit at Claude's 200K (24 KB), over an unknown model's
    // at 32K (12.8 KB).
    assert_eq!(run("claude-sonnet-4-5"), 0);
    assert!(run("my-local-finetune") > 4_000);
    assert_eq!(settings.window_for(Some("gpt-5-mini"), false), 272_000);
    let fixed = RewriteSettings {
        cache: Default::default(),
        model_windows: false,
        ..settings.clone()
    };
    assert_eq!(fixed.window_for(Some("gpt-5-mini"), false), 32_000);
    // Only a real window is enforced: the table's, a long context asked for, `--window`.
    assert!(settings.knows_window(Some("gpt-5-mini"), false));
    assert!(!settings.knows_window(Some("my-local-finetune"), false));
    assert!(!settings.knows_window(None, false));
    assert!(settings.knows_window(None, true));
    assert_eq!(
        settings.window_for(Some("claude-sonnet-4-5"), true),
        1_000_000
    );
    assert!(fixed.knows_window(Some("my-local-finetune"), false));
}

/// A marker names the way back the request's agent has: its MCP recall tool (declared, or
/// listed as deferred in its opening message, as Claude Code lists it), else nothing; and the
/// same history gives the same bytes whether or not the tool has been loaded yet.
#[test]
fn markers_name_the_recall_tool_the_agent_has() {
    let body = |tools: Value, opening: &str| {
        json!({
            "model": "claude-sonnet-4-5", "max_tokens": 100, "tools": tools,
            "messages": [
                {"role": "user", "content": opening},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": log(5000)}]}
            ]
        })
    };
    let result = |body: Value| {
        let mut request = ApiRequest::parse(Api::Messages, body.to_string().as_bytes()).unwrap();
        let out = rewrite(&mut request, "s", &settings());
        let new: Value = serde_json::from_slice(&out.body.unwrap()).unwrap();
        new["messages"][2]["content"][0]["content"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let tool = |name: &str| json!({"name": name, "input_schema": {"type": "object"}});
    let bash = json!([tool("Bash"), tool("Read")]);
    let with_mcp = json!([
        tool("Bash"),
        tool("Read"),
        tool("mcp__ctxgc__recall_tool_result")
    ]);
    let deferred = "<system-reminder>deferred tools:\nWebFetch\nmcp__ctxgc__recall_tool_result\n</system-reminder>go";

    let plain = result(body(bash.clone(), "go"));
    assert!(
        plain.contains("trimmed from") && !plain.contains("recall with"),
        "{plain}"
    );
    let declared = result(body(with_mcp.clone(), "go"));
    assert!(declared.contains(", recall with mcp__ctxgc__recall_tool_result ...]"));
    let listed = result(body(bash, deferred));
    let loaded = result(body(with_mcp, deferred));
    assert_eq!(listed, loaded, "loading the deferred tool changes no byte");
    assert!(listed.contains("recall with mcp__ctxgc__recall_tool_result"));
    assert_eq!(
        trim::marker_ids(&listed),
        trim::marker_ids(&plain),
        "the same id"
    );
    // An agent whose only tool is a shell is shown the shell command.
    let shell = result(body(json!([tool("Bash")]), "go"));
    let id = trim::marker_ids(&plain)[0];
    assert!(shell.contains(&format!(", recall with `ctxgc recall {id}` ...]")));
}

/// A result names the tool of its call whether the call is just before it or far back (a
/// Responses turn of many parallel calls, then their outputs), and a later call that reuses an
/// id does not rename the results before it.
#[test]
fn results_name_their_calls_tool_near_or_far() {
    let calls = 24;
    let mut input: Vec<Value> = vec![json!({"role": "user", "content": "go"})];
    for k in 0..calls {
        input.push(json!({"type": "function_call", "call_id": format!("c{k}"), "name": format!("tool_{k}"), "arguments": "{}"}));
    }
    for k in 0..calls {
        input.push(json!({"type": "function_call_output", "call_id": format!("c{k}"), "output": format!("out {k}")}));
    }
    input.push(
        json!({"type": "function_call", "call_id": "c0", "name": "renamed", "arguments": "{}"}),
    );
    let body = json!({"model": "gpt-5", "input": input});
    let (found, _) = slots(&body, Api::Responses, SlotsFrom::START);
    assert_eq!(found.len(), calls);
    for (k, slot) in found.iter().enumerate() {
        assert_eq!(slot.call_id, format!("c{k}"));
        assert_eq!(slot.tool, format!("tool_{k}"), "{}", slot.call_id);
    }
    // A result whose call is nowhere: the generic tool.
    let orphan = json!({"model": "gpt-5", "input": [
        {"type": "function_call_output", "call_id": "gone", "output": "x"}]});
    assert_eq!(
        slots(&orphan, Api::Responses, SlotsFrom::START).0[0].tool,
        "tool"
    );
}

/// A session's next request goes on from where its previous walk ended (its splice from where
/// the strings it replaced lay), and gives what a walk from nothing gives (the same bytes,
/// originals, facts and savings): across a session that re-reads files, edits them, hides an
/// output, and changes the length of a member before its items. A walk starts again from the first turn
/// when the client changed an earlier item, when the first new result joins the last turn, when
/// a hide applies before it, and when the store lost an original it may have to write.
#[test]
fn a_walk_that_goes_on_from_the_previous_one_gives_what_a_walk_from_nothing_gives() {
    let file = |tag: &str, n: usize| -> String {
        (0..n)
            .map(|i| format!("{tag} line {i}: let value_{i} = compute({i});\n"))
            .collect()
    };
    let mut outputs: Vec<String> = Vec::new();
    for turn in 0..28 {
        outputs.push(match turn % 4 {
            0 => format!("{}read at turn {turn}\n", file("alpha", 200)),
            1 => file("beta", 150).replace("line 70:", &format!("line 70 (edit {turn}):")),
            2 => format!("{}\n{}", file("alpha", 120), log(40)),
            _ => log(300 + turn),
        });
    }
    // `turns` turns; the task said differently from turn 20 on; at 24, the last turn asks
    // for two outputs and the body stops after the first.
    let body = |turns: usize| -> Vec<u8> {
        let task = if turns >= 20 { "go on" } else { "go" };
        let mut messages = vec![json!({"role": "user", "content": task})];
        for (k, output) in outputs[..turns].iter().enumerate() {
            let id = format!("c{k}");
            let mut calls = vec![
                json!({"id": id, "type": "function", "function": {"name": "read_file", "arguments": "{}"}}),
            ];
            if k == 23 {
                calls.push(json!({"id": "c23b", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}));
            }
            messages.push(json!({"role": "assistant", "content": null, "tool_calls": calls}));
            messages.push(json!({"role": "tool", "tool_call_id": id, "content": output}));
            if k == 23 && turns > 24 {
                messages.push(
                    json!({"role": "tool", "tool_call_id": "c23b", "content": file("gamma", 90)}),
                );
            }
        }
        // A member before the items that changes length: they lie elsewhere in the bytes.
        let user = "u".repeat(1 + turns % 3);
        serde_json::to_vec(&json!({"model": "gpt-5", "user": user, "messages": messages})).unwrap()
    };
    let hidden = [crate::rewrite::lineage::HiddenResult {
        call_id: "c4".into(),
        from_result: 9,
    }];
    let shared = TrimMemo::default();
    let committed = std::cell::RefCell::new(std::collections::HashSet::new());
    let mut pointers = 0;
    let mut fresh_walks = Vec::new();
    for turns in 1..=outputs.len() {
        let raw = body(turns);
        let hides: &[_] = if turns > 12 { &hidden } else { &[] };
        if turns == 16 {
            // The store lost what it held (it restarted empty).
            committed.borrow_mut().clear();
        }
        let walk = |memo: &TrimMemo| {
            let (mut request, layout) =
                ApiRequest::parse_envelope_after(Api::ChatCompletions, &raw, None).unwrap();
            let client = ClientBytes {
                raw: &raw,
                item_spans: layout.as_ref().map(|l| l.item_spans()),
            };
            let stored = |id| committed.borrow().contains(&id);
            let out = rewrite_within(
                &mut request,
                Some(client),
                "s",
                &settings(),
                memo,
                &stored,
                hides,
                None,
            )
            .unwrap();
            let body = out.body.clone().unwrap_or_else(|| raw.clone());
            (body, out)
        };
        let before = shared.resumed.load(std::sync::atomic::Ordering::Relaxed);
        let (resumed, went_on) = walk(&shared);
        if shared.resumed.load(std::sync::atomic::Ordering::Relaxed) == before {
            fresh_walks.push(turns);
        }
        let (from_nothing, whole) = walk(&TrimMemo::default());
        assert_eq!(resumed, from_nothing, "request of {turns} turns");
        assert_eq!(went_on.originals, whole.originals, "{turns} turns");
        assert_eq!(went_on.metas, whole.metas, "{turns} turns");
        assert_eq!(went_on.bytes_saved, whole.bytes_saved, "{turns} turns");
        assert_eq!(went_on.kept_bytes, whole.kept_bytes, "{turns} turns");
        committed
            .borrow_mut()
            .extend(went_on.originals.iter().map(|(id, _)| *id));
        pointers = String::from_utf8_lossy(&resumed).matches("same as").count();
    }
    assert!(
        pointers >= 5,
        "the session repeats itself: {pointers} pointers"
    );
    assert!(
        committed.borrow().len() >= 5,
        "the session trims outputs and stores their originals"
    );
    // From nothing: the first request, the one whose hide applies before its previous walk's
    // last turn, the one after the store lost its originals, the one after the client changed
    // its task, and the one whose first new output joins the previous last turn.
    assert_eq!(fresh_walks, [1, 13, 16, 20, 25]);
    // The splices went straight to where the previous body had the strings they replace.
    let known = shared
        .known_spans
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        known >= 100,
        "{known} strings found where they were known to lie"
    );
}
