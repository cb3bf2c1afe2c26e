//! Invariants of insertion-time trimming, over random inputs.

use proptest::prelude::*;

use super::*;

fn config() -> TrimConfig {
    TrimConfig::default()
}

/// Text made of lines of mixed ASCII, multi-byte chars and salient words.
fn text_strategy() -> impl Strategy<Value = String> {
    let line = prop_oneof![
        "[a-z ]{0,60}",
        "[é€😀a-z]{0,40}",
        Just("error: something failed".to_owned()),
        Just("warning: unused variable".to_owned()),
        "[a-z]{200,3000}",
    ];
    prop::collection::vec(line, 0..400).prop_map(|lines| {
        let mut s = lines.join("\n");
        if s.len() % 3 == 0 {
            s.push('\n');
        }
        s
    })
}

fn tool_strategy() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        Just("bash"),
        Just("read_file"),
        Just("grep"),
        Just("web_fetch"),
        Just("mystery")
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn output_is_valid_bounded_idempotent_and_deterministic(
        text in text_strategy(),
        tool in tool_strategy(),
        window in 2_000u64..300_000,
    ) {
        let c = config();
        let once = trim_output(&c, tool, window, &text);
        // Bounded: never longer than the soft limit (the marker is inside the budget).
        if once.trimmed {
            prop_assert!(once.text.len() <= once.limit, "{} > {}", once.text.len(), once.limit);
        } else {
            prop_assert_eq!(&once.text, &text, "under the limit: unchanged byte for byte");
        }
        // Idempotent: trimming trimmed text changes nothing.
        let twice = trim_output(&c, tool, window, &once.text);
        prop_assert!(!twice.trimmed);
        prop_assert_eq!(&twice.text, &once.text);
        // Deterministic.
        prop_assert_eq!(trim_output(&c, tool, window, &text), once);
    }

    #[test]
    fn streaming_in_any_chunks_gives_the_same_bytes(
        text in text_strategy(),
        limit in 600usize..20_000,
        chunk in 1usize..5000,
    ) {
        let budget = LineBudget::from_shares(limit, 0.3, 0.5, 0.2, 120);
        let (whole, whole_stats) = LineTrimmer::trim_all(budget.clone(), "terminal", text.as_bytes());
        let mut trimmer = LineTrimmer::new(budget, "terminal");
        let mut out = Vec::new();
        for piece in text.as_bytes().chunks(chunk) {
            trimmer.push(piece, &mut out);
        }
        let stats = trimmer.finish(&mut out);
        prop_assert_eq!(&out, &whole);
        prop_assert_eq!(stats, whole_stats);
        // Never splits a UTF-8 char.
        prop_assert!(std::str::from_utf8(&whole).is_ok());
        prop_assert!(whole.len() <= limit.max(text.len().min(limit)));
    }
}

/// A numbered view of code: definitions, docstrings, comment blocks, blank lines, long lines.
fn code_view_strategy() -> impl Strategy<Value = String> {
    let line = prop_oneof![
        r"    [a-z_]{1,20} = [a-z_]{1,30}\([0-9]{0,4}\)",
        r"(def|class) [a-z_]{1,12}\(self\):",
        r#"    ("""|'''|r""")[a-zé ]{0,40}(""")?"#,
        r"    (#|//|///|/\*|\*/| \*) [a-z€ ]{0,50}",
        r"#(include|define|\[derive)[a-z ]{0,20}",
        Just(String::new()),
        "[a-z]{200,3000}",
    ];
    prop::collection::vec(line, 30..400)
        .prop_map(|lines| numbered_view(lines.len(), '\t', |i| lines[i - 1].clone()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]

    #[test]
    fn a_folded_view_is_bounded_idempotent_and_the_same_in_any_chunks(
        view in code_view_strategy(),
        window in 2_000u64..64_000,
        chunk in 1usize..3000,
    ) {
        let c = config();
        let once = trim_output(&c, "bash", window, &view);
        prop_assert!(once.text.len() <= once.limit.max(view.len().min(once.limit)));
        let twice = trim_output(&c, "bash", window, &once.text);
        prop_assert_eq!(&twice.text, &once.text);
        prop_assert_eq!(streamed_bash(&view, once.limit, chunk), once.text);
    }
}

#[test]
fn json_output_stays_json_and_bounded() {
    let rows: Vec<serde_json::Value> = (0..5000)
        .map(|i| serde_json::json!({"id": i, "path": format!("src/file_{i}.rs"), "ok": i % 7 != 0}))
        .collect();
    let text = serde_json::to_string(&rows).unwrap();
    let out = trim_output(&config(), "api_call", 32_000, &text);
    assert_eq!(out.shape, Shape::Json);
    assert!(out.text.len() <= out.limit);
    let back: serde_json::Value = serde_json::from_str(&out.text).unwrap();
    assert_eq!(back[0]["id"], 0);
    assert_eq!(back.as_array().unwrap().last().unwrap()["id"], 4999);
}

#[test]
fn file_reads_get_no_salient_lines() {
    let code = crate::test_text::with_line_at(
        0..3000,
        1500,
        "    return Err(Error::new(\"error: bad\"));\n",
        |i| format!("    let value_{i} = compute({i});\n"),
    );
    let out = trim_output(&config(), "read_file", 32_000, &code);
    assert!(out.trimmed);
    assert!(
        !out.text.contains("Error::new"),
        "code is not scanned for 'error'"
    );
    assert!(out.text.contains("trimmed from file read output"));
    // Head-heavy: more kept lines come from the start than from the end.
    let marker_at = out.text.find("[... ").unwrap();
    assert!(marker_at > out.text.len() / 2);
}

#[test]
fn terminal_failure_in_the_middle_of_50k_is_visible() {
    let mut log = String::new();
    for i in 0..1200 {
        log.push_str(&format!("   Compiling crate_{i} v0.1.{i}\n"));
        if i == 611 {
            log.push_str("error[E0308]: mismatched types --> src/engine.rs:88:17\n");
        }
    }
    log.push_str("exit status: 101\n");
    assert!(log.len() > 30_000);
    let out = trim_output(&config(), "bash", 32_000, &log);
    assert!(
        out.text
            .contains("error[E0308]: mismatched types --> src/engine.rs:88:17")
    );
    assert!(
        out.text.ends_with("exit status: 101\n"),
        "the end (exit code) is kept"
    );
    insta::assert_snapshot!("terminal_failure", out.text);
}

#[test]
fn search_results_are_spread_across_files() {
    let mut grep = String::new();
    for f in 0..40 {
        for m in 0..30 {
            grep.push_str(&format!(
                "crates/c{f}/src/lib.rs:{}:pub fn parse_{m}() {{}}\n",
                m + 1
            ));
        }
    }
    let out = trim_output(&config(), "grep", 32_000, &grep);
    assert_eq!(out.shape, Shape::Search);
    assert!(out.text.len() <= out.limit);
    for f in 0..40 {
        assert!(
            out.text.contains(&format!("crates/c{f}/src/lib.rs:1:")),
            "file {f}"
        );
    }
}

#[test]
fn a_search_run_in_a_shell_gets_the_search_limit_and_a_log_its_own() {
    let mut grep = String::new();
    for f in 0..40 {
        for m in 0..12 {
            grep.push_str(&format!("src/m{f}.py:{}:    def parse_{m}(self):\n", m + 1));
        }
    }
    let log: String = (0..grep.len() / 40)
        .map(|i| format!("[{i:05}] compiling module_{i:05} .... ok\n"))
        .collect();
    assert!((14_000..24_000).contains(&grep.len()) && (14_000..24_000).contains(&log.len()));
    let c = config();
    let searched = trim_output(&c, "bash", 200_000, &grep);
    assert_eq!(searched.shape, Shape::Search);
    assert_eq!(searched.limit, 6_000, "1,500 tokens");
    assert!(searched.text.len() <= 6_000);
    for f in 0..40 {
        assert!(
            searched.text.contains(&format!("src/m{f}.py:1:")),
            "file {f}"
        );
    }
    let logged = trim_output(&c, "bash", 200_000, &log);
    assert!(
        !logged.trimmed,
        "a log this size is under the terminal's 24 KB"
    );
    // A grep tool has its own profile and limit.
    assert!(!trim_output(&c, "grep", 200_000, &grep).trimmed);
}

#[test]
fn parallel_results_share_a_turn_budget_largest_first() {
    let c = config();
    let big = "x\n".repeat(40_000);
    let medium = "y\n".repeat(4_000);
    let small = "z\n".repeat(100);
    let outputs = [
        ToolOutput {
            tool: "bash",
            text: &big,
        },
        ToolOutput {
            tool: "bash",
            text: &medium,
        },
        ToolOutput {
            tool: "bash",
            text: &small,
        },
    ];
    let window = 32_000;
    let trimmed = trim_turn(&c, window, &outputs);
    let total: usize = trimmed.iter().map(|t| t.text.len()).sum();
    assert!(
        total <= c.turn_budget(window) + 3 * lines::MARKER_RESERVE,
        "{total}"
    );
    assert!(!trimmed[2].trimmed, "the small one is untouched");
    assert!(trimmed[0].trimmed);
    // Alone, each result would get its own (larger) limit.
    let alone = trim_output(&c, "bash", window, &big);
    assert!(alone.text.len() >= trimmed[0].text.len());
}

#[test]
fn water_level_caps_the_largest() {
    assert_eq!(water_level(&[10, 20, 30], 100), None);
    assert_eq!(water_level(&[10, 50, 100], 90), Some(40));
    assert_eq!(water_level(&[100, 100], 100), Some(50));
}

#[test]
fn never_tools_are_only_hard_capped() {
    let c = config();
    let notes = "remember this\n".repeat(1000);
    let out = trim_output(&c, "memory", 8_000, &notes);
    assert!(!out.trimmed, "{} bytes is under the hard cap", notes.len());
    let huge = "remember this\n".repeat(20_000);
    let out = trim_output(&c, "memory", 8_000, &huge);
    assert!(out.trimmed);
    assert!(out.text.len() <= c.hard_cap_bytes);
}

#[test]
fn an_error_in_the_middle_of_a_timestamped_log_slice_is_kept() {
    // `cat big.log | sed -n 2900,3300p`: every line starts with a timestamp, which used to pass
    // for grep's `path:line:` and got the slice trimmed as search results.
    let log: String = (2900..3300)
        .map(|i| {
            if i == 3100 {
                "2025-12-02 09:51:40,123 ERROR app.db: connection refused (errno 111)\n".to_owned()
            } else {
                format!(
                    "2025-12-02 09:{:02}:{:02},123 INFO app.server: request {i} served in {} ms\n",
                    (i / 60) % 60,
                    i % 60,
                    i % 97
                )
            }
        })
        .collect();
    let out = trim_output(&config(), "bash", 32_000, &log);
    assert!(out.trimmed);
    assert!(
        out.text.contains("connection refused (errno 111)"),
        "{}",
        out.text
    );
    assert!(!out.text.contains("matching lines"), "not search output");
}

#[test]
fn terminal_output_enters_as_a_terminal_shows_it_and_the_original_stays_recallable() {
    let mut raw = String::from("\u{1b}[1mCompiling\u{1b}[0m app\n");
    for i in 0..=400 {
        raw.push_str(&format!(
            "\r\u{1b}[K\u{1b}[32m[{:<40}]\u{1b}[0m {i}/400",
            "=".repeat(i / 10)
        ));
    }
    raw.push_str("\nerror: test failed, exit status: 101\n");
    let out = trim_output(&config(), "bash", 200_000, &raw);
    assert!(out.trimmed, "rendered, so not the original bytes");
    assert_eq!(
        out.text,
        format!(
            "Compiling app\n[{}] 400/400\nerror: test failed, exit status: 101\n",
            "=".repeat(40)
        )
    );
    assert_eq!(out.id, ContentId::of(raw.as_bytes()), "the original's id");
    assert_eq!(out.original_bytes, raw.len());
    // Memory and todo tools are never touched.
    let never = trim_output(&config(), "TodoWrite", 200_000, "a\rb");
    assert!(!never.trimmed && never.text == "a\rb");
}

/// `view` trimmed as `ctxgc trim --tool bash` streams it, in `chunk`-byte pieces, under `limit`:
/// the budget judged on the prefix the library reads too.
fn streamed_bash(view: &str, limit: usize, chunk: usize) -> String {
    let config = config();
    let profile = config.profile_for("bash");
    let budget = line_budget_for(&config, profile, limit, scan_prefix(view));
    let mut trimmer = LineTrimmer::new(budget, &profile.name);
    let mut streamed = Vec::new();
    for piece in view.as_bytes().chunks(chunk) {
        trimmer.push(piece, &mut streamed);
    }
    trimmer.finish(&mut streamed);
    String::from_utf8(streamed).unwrap()
}

/// A view of `lines` numbered lines as `nl -ba` (`sep` a tab) or Claude Code's `Read` (an
/// arrow) shows it, line `i` reading `body(i)`.
fn numbered_view(lines: usize, sep: char, body: impl Fn(usize) -> String) -> String {
    (1..=lines)
        .map(|i| format!("{i:>6}{sep}{}\n", body(i)))
        .collect()
}

#[test]
fn a_numbered_file_view_in_a_shell_is_cut_like_code_not_like_a_log() {
    // `nl -ba src/engine.py | sed -n '1,900p'` at a 32K window: the terminal's limit applies,
    // but a word like "error" in code is no event, and the range's end counts as its start.
    let view = numbered_view(900, '\t', |i| {
        crate::test_text::line_or(i, 450, "    raise ValueError(\"error: bad input\")", |i| {
            format!("    value_{i} = compute(value_{})", i - 1)
        })
    });
    assert!(looks_like_numbered_view(&view));
    let out = trim_output(&config(), "bash", 32_000, &view);
    assert!(out.trimmed);
    assert!(!out.text.contains("bad input"), "no salient lines in code");
    let kept = |range: std::ops::RangeInclusive<usize>| {
        range
            .filter(|i| out.text.contains(&format!("{i:>6}\t")))
            .count()
    };
    let (head, tail) = (kept(1..=450), kept(451..=900));
    // Head and tail in the split's proportion (0.6 / 0.4), not the log's (0.3 / 0.55).
    assert!(head > tail && tail * 2 > head, "head {head}, tail {tail}");
    // The outline takes nothing where the view defines nothing.
    assert!(!out.text.contains("notable"));
    // A log is not a view: its numbers are not followed by a tab.
    assert!(!looks_like_numbered_view(
        &"12 passed, 0 failed\n".repeat(40)
    ));
}

#[test]
fn a_cut_numbered_view_keeps_the_outline_of_its_middle() {
    // A 900-line module viewed at a 32K window: the functions defined in the cut middle stay
    // listed, each line with its own number, and the marker says how many.
    let view = numbered_view(900, '\t', |i| {
        if i % 50 == 0 {
            format!("def handler_{i}(request, *args):")
        } else {
            format!("    value_{i} = compute(value_{})", i - 1)
        }
    });
    let out = trim_output(&config(), "bash", 32_000, &view);
    assert!(out.trimmed && out.text.len() <= out.limit);
    let middle = out
        .text
        .split_once("trimmed from")
        .map(|(_, rest)| rest)
        .unwrap();
    for i in [400, 450, 500] {
        assert!(
            middle.contains(&format!("{i:>6}\tdef handler_{i}(request, *args):\n")),
            "handler_{i} in {middle}"
        );
    }
    assert!(
        !middle.contains("[line "),
        "a numbered line shows its own number"
    );
    let notable: usize = out
        .text
        .split("; ")
        .find_map(|part| part.strip_suffix(" notable lines kept below"))
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(notable >= 3, "{notable}");
    // A streamed trim (`ctxgc trim`) in small chunks gives the same bytes: the budget is judged
    // on the prefix both read, and the outline is scanned line by line as it streams.
    assert_eq!(streamed_bash(&view, out.limit, 777), out.text);
}

#[test]
fn a_file_read_tools_numbered_view_keeps_its_outline_and_its_profiles_ends() {
    // Claude Code's `Read` numbers lines with an arrow; the file read profile is head-heavy.
    let view = numbered_view(1500, '\u{2192}', |i| {
        if i % 100 == 0 {
            format!("export function route{i}(req, res) {{")
        } else {
            format!("  const v{i} = load({i});")
        }
    });
    let out = trim_output(&config(), "Read", 32_000, &view);
    assert!(out.trimmed && out.text.contains("trimmed from file read output"));
    assert!(
        out.text
            .contains("   700\u{2192}export function route700(req, res) {\n")
    );
    let marker_at = out.text.find("[... ").unwrap();
    let tail_at = out.text.rfind("route").unwrap();
    assert!(
        marker_at > (out.text.len() - marker_at) / 2,
        "head-heavy: {marker_at}"
    );
    assert!(tail_at > marker_at);
}

#[test]
fn a_lines_profile_that_asks_for_error_lines_keeps_them_in_a_numbered_view() {
    // `cat -n build.log` under a user's `lines` profile with a salient share: a log, not code.
    let log = numbered_view(3000, '\t', |i| {
        crate::test_text::line_or(i, 1500, "error: linker failed", |i| {
            format!("def step_{i}(): compiling unit {i}")
        })
    });
    let mut config = config();
    let mut logs = config.profile_for("bash").clone();
    logs.name = "logs".into();
    logs.tools = vec!["build".into()];
    logs.mode = Mode::Lines;
    config.profiles.insert(0, logs);
    let out = trim_output(&config, "build", 32_000, &log);
    assert!(out.trimmed);
    assert!(out.text.contains("error: linker failed"), "{}", out.text);
}

/// A Python module as a numbered view: each function opens with a docstring and a comment
/// block, then `code_lines` lines of code.
fn commented_module(functions: usize, code_lines: usize) -> String {
    let mut lines: Vec<String> = Vec::new();
    for f in 0..functions {
        lines.push(format!("def handler_{f}(request):"));
        lines.push(format!("    \"\"\"Handle request kind {f}."));
        lines.extend((0..6).map(|i| format!("    More words about kind {f}, part {i}.")));
        lines.push("    \"\"\"".to_owned());
        lines.push(format!("    setup_{f}()"));
        lines.extend((0..4).map(|i| format!("    # why step {i} of kind {f} is needed")));
        lines.extend((0..code_lines).map(|i| format!("    value_{f}_{i} = compute({f}, {i})")));
    }
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    numbered_view(lines.len(), '\t', |i| lines[i - 1].to_owned())
}

#[test]
fn a_cut_view_of_code_folds_its_comments_and_docstrings_to_their_first_line() {
    let view = commented_module(40, 12);
    let out = trim_output(&config(), "bash", 32_000, &view);
    assert!(out.trimmed && out.text.len() <= out.limit);
    // Each docstring and comment block keeps its first line; the rest is hidden, and the
    // view's own numbers show the gap.
    assert!(
        out.text
            .contains("     2\t    \"\"\"Handle request kind 0.\n")
    );
    assert!(
        out.text
            .contains("    11\t    # why step 0 of kind 0 is needed\n")
    );
    assert!(!out.text.contains("More words about kind 0"));
    assert!(!out.text.contains("why step 3 of kind 0"));
    assert!(out.text.contains("    15\t    value_0_0 = compute(0, 0)\n"));
    let marker = out.text.lines().find(|l| l.starts_with("[... ")).unwrap();
    assert!(
        marker.contains("trimmed from terminal output, comments folded; "),
        "{marker}"
    );
    assert!(marker.ends_with(&format!("id {} ...]", out.id)), "{marker}");
    // More of the code is kept than without the fold, in the same bytes.
    let code_kept = |text: &str| text.matches(" = compute(").count();
    let plain = commented_module(40, 12)
        .replace("\t    #", "\t    x#")
        .replace("\t    \"\"\"", "\t    x\"\"\"");
    let unfolded = trim_output(&config(), "bash", 32_000, &plain);
    assert!(
        code_kept(&out.text) > code_kept(&unfolded.text) * 5 / 4,
        "{} vs {}",
        code_kept(&out.text),
        code_kept(&unfolded.text)
    );
    // Trimming again changes nothing; a streamed trim in small chunks gives the same bytes.
    let again = trim_output(&config(), "bash", 32_000, &out.text);
    assert!(!again.trimmed && again.text == out.text);
    assert_eq!(streamed_bash(&view, out.limit, 333), out.text);
}

#[test]
fn a_view_that_fits_once_its_comments_fold_keeps_all_its_code() {
    let view = commented_module(30, 4);
    let out = trim_output(&config(), "bash", 32_000, &view);
    assert!(view.len() > out.limit, "the view is over the limit");
    assert!(out.trimmed && out.text.len() <= out.limit);
    for f in 0..30 {
        for i in 0..4 {
            assert!(
                out.text
                    .contains(&format!("value_{f}_{i} = compute({f}, {i})"))
            );
        }
    }
    // What the fold hid is counted in a marker after the view: per function, 7 docstring
    // lines and 3 comment lines.
    let (body, marker) = out.text.trim_end().rsplit_once('\n').unwrap();
    let hidden_chars = view.chars().count() - body.chars().count() - 1;
    assert_eq!(
        marker,
        format!(
            "[... {} chars (300 lines) of comments folded in terminal output; id {} ...]",
            lines::group(hidden_chars as u64),
            out.id
        )
    );
}

#[test]
fn a_view_of_prose_folds_nothing() {
    // A markdown file read with `cat -n`: `#` opens a heading there, and nothing is defined.
    let doc = numbered_view(900, '\t', |i| match i % 6 {
        0 => format!("# Part {i}"),
        1 => format!("## Section {i}"),
        2 => format!("### Step {i}"),
        _ => format!("Some prose about step {i}, with enough words to fill a line."),
    });
    let out = trim_output(&config(), "bash", 32_000, &doc);
    assert!(out.trimmed);
    assert!(!out.text.contains("comments folded"), "{}", out.text);
    assert!(
        out.text
            .contains("     1\t## Section 1\n     2\t### Step 2\n")
    );
}

/// `kept_share_max` on a profile cuts a long output in proportion to its size (never below the
/// floor); off by default, so the built-in limits stand.
#[test]
fn a_profile_may_keep_at_most_a_share_of_an_output() {
    let log: String = (0..1_500)
        .map(|i| format!("2026-11-24T10:00:00Z INFO step {i} ok\n"))
        .collect();
    assert!(log.len() > 55_000);
    let config = TrimConfig::default();
    let whole = trim_output(&config, "terminal", 200_000, &log);
    assert!(
        whole.text.len() > log.len() / 3,
        "the built-in limit: about 24 KB"
    );
    let toml = "[[profiles]]\nname = \"terminal\"\nkept_share_max = 0.25\n";
    let shared: TrimConfig = toml::from_str(toml).unwrap();
    shared.validate().unwrap();
    let quarter = trim_output(&shared, "terminal", 200_000, &log);
    assert!(
        quarter.text.len() <= log.len() / 4 + 200,
        "{}",
        quarter.text.len()
    );
    // A short output is never taken below the floor.
    let short = &log[..20_000];
    let kept = trim_output(&shared, "terminal", 200_000, short);
    assert!(
        kept.text.len() * 10 >= config.kept_share_floor_bytes * 8,
        "{} bytes kept of 20,000",
        kept.text.len()
    );
    let bad: TrimConfig =
        toml::from_str("[[profiles]]\nname = \"terminal\"\nkept_share_max = 0\n").unwrap();
    assert!(bad.validate().is_err());
}

/// An output the client already cut (here as Codex marks it) keeps what the client kept, up to
/// a tenth of the window; the same lines unmarked are cut as any search is.
#[test]
fn an_output_the_client_already_cut_is_not_cut_again_below_what_it_kept() {
    let lines: String = (1..=300)
        .map(|i| {
            format!("src/module_{i}.rs:{i}: fn handler_{i}() -> Result<(), Error> {{ todo!() }}\n")
        })
        .collect();
    let marked = format!(
        "Warning: truncated output (original token count: 14363)\nTotal output lines: 1200\n\n{lines}"
    );
    let config = TrimConfig::default();
    assert!(client_cut(&marked) && !client_cut(&lines));
    let kept = trim_output(&config, "shell_command", 200_000, &marked);
    assert_eq!(kept.text, marked, "kept as the client cut it");
    let unmarked = trim_output(&config, "shell_command", 200_000, &lines);
    assert!(
        unmarked.text.len() < lines.len() / 2,
        "a search the client did not cut is cut"
    );
    // At a 32K window, a tenth of the window (12.8 KB) of it.
    let small = trim_output(&config, "shell_command", 32_000, &marked);
    assert!(
        small.text.len() < marked.len() && small.text.len() > 10_000,
        "{}",
        small.text.len()
    );
    // Codex's later forms: a header, then the middle cut by tokens or by lines (inside its
    // JSON envelope, as rollouts of late 2025 hold it).
    let by_tokens = format!(
        "Exit code: 0\nWall time: 0.2 seconds\nTotal output lines: 1792\nOutput:\n{}\u{2026}4677 tokens truncated\u{2026}{}",
        &lines[..6_000],
        &lines[lines.len() - 6_000..]
    );
    let by_lines = serde_json::json!({
        "output": format!("Total output lines: 934\n\n{}\n[... omitted 678 of 934 lines ...]\n\n{}", &lines[..6_000], &lines[lines.len() - 6_000..]),
        "metadata": {"exit_code": 0, "duration_seconds": 1.0}
    })
    .to_string();
    // Its versions of September to November 2025 wrote the line and byte marks without the
    // header, on a line of their own.
    let headerless = serde_json::json!({
        "output": format!("{}\n[... omitted 130 of 386 lines ...]\n\n{}", &lines[..6_000], &lines[lines.len() - 4_000..]),
        "metadata": {"exit_code": 0, "duration_seconds": 0.2}
    })
    .to_string();
    let by_bytes = format!(
        "{}\n[... output truncated to fit 10240 bytes ...]\n\n{}",
        &lines[..6_000],
        &lines[lines.len() - 4_000..]
    );
    for cut in [&by_tokens, &by_lines, &headerless, &by_bytes] {
        assert!(client_cut(cut), "{}", &cut[..80]);
        let kept = trim_output(&config, "shell_command", 200_000, cut);
        assert_eq!(&kept.text, cut, "kept as Codex cut it");
    }
    // A program that prints a line count, or a file that quotes the marks, is no client's cut.
    assert!(!client_cut(&format!("Total output lines: 1200\n{lines}")));
    assert!(!client_cut(&format!(
        "{lines}\n// Codex writes \u{2026}12 tokens truncated\u{2026} where it cut\n"
    )));
    assert!(!client_cut(&format!(
        "Total output lines: 3\n[... omitted a few lines ...]\n{lines}"
    )));
    assert!(!client_cut(&format!(
        "{lines}\n// Codex writes [... omitted 3 of 10 lines ...] where it cut\n"
    )));
    assert!(!client_cut(&format!(
        "{lines}\n[... omitted some of 10 lines ...]\n{lines}"
    )));
    assert!(!client_cut(&format!(
        "Total output lines: 3\n[... omitted 3 of lines ...]\n{lines}"
    )));
    // An output of nothing but closings is read in one pass (a quadratic scan took minutes).
    let closings = format!("Total output lines: 9\n{}", " lines ...]".repeat(200_000));
    let started = std::time::Instant::now();
    assert!(!client_cut(&closings));
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
    // mini-swe-agent's elision and Gemini CLI's mark count too; off with a zero share.
    assert!(client_cut(
        "<output_head>a</output_head><elided_chars>9 characters elided</elided_chars>"
    ));
    assert!(client_cut(
        "Output too large. Showing first 8,000 and last 32,000 characters."
    ));
    let off = TrimConfig {
        client_cut_window_share: 0.0,
        ..TrimConfig::default()
    };
    assert!(
        trim_output(&off, "shell_command", 200_000, &marked)
            .text
            .len()
            < marked.len() / 2
    );
}

/// A marker names the way back the agent has, and still reads as the same id.
#[test]
fn markers_name_the_recall_way() {
    use crate::agent_tools::RecallWay;
    let text: String = (0..3000).map(|i| format!("log line {i}\n")).collect();
    let trimmed = trim_output(&TrimConfig::default(), "terminal", 32_000, &text).text;
    let ids = marker_ids(&trimmed);
    assert_eq!(ids.len(), 1);
    let tool = RecallWay::Tool("mcp__ctxgc__recall_tool_result".into());
    let named = name_recall(&trimmed, &tool).unwrap();
    assert!(
        named.contains(&format!(
            "; id {}, recall with mcp__ctxgc__recall_tool_result",
            ids[0]
        )),
        "{named}"
    );
    assert_eq!(marker_ids(&named), ids);
    let shell = name_recall(&trimmed, &RecallWay::Shell).unwrap();
    assert!(shell.contains(&format!("recall with `ctxgc recall {}`", ids[0])));
    assert_eq!(name_recall("no marker here", &tool), None);
    // A pointer or an abstract is not a trim marker.
    assert_eq!(
        name_recall(
            "[lines 1-9 same as the result of c1 (id r-0123456789abcdef)]",
            &tool
        ),
        None
    );
}

/// An echo of the agent's own edit keeps its head and tail up to `edit_echo_max_bytes`: the
/// agent just wrote those lines. The same lines as a file read, or an edit's error, are not
/// echoes; 0 turns the cap off.
#[test]
fn an_echo_of_the_agents_own_edit_keeps_its_head_and_tail() {
    let snippet: String = (1..=120)
        .map(|i| format!("{i:>6}\u{2192}    let value_{i} = compute_{i}(input, &config)?;\n"))
        .collect();
    let echo = format!(
        "The file /src/app/main.rs has been updated. Here's the result of running `cat -n` on a snippet of the edited file:\n{snippet}"
    );
    let config = TrimConfig::default();
    assert!(edit_echo(&echo));
    let kept = trim_output(&config, "Edit", 200_000, &echo);
    assert!(kept.trimmed, "an echo of 6 KB is cut");
    assert!(kept.text.len() < 1_024 + 400, "{}", kept.text.len());
    assert!(
        kept.text
            .starts_with("The file /src/app/main.rs has been updated.")
    );
    assert!(kept.text.contains("value_120"), "its tail stays");
    // The text editor tool's form, and Claude Code's `Write` of an existing file, are echoes too.
    let edited = format!(
        "The file /repo/a.py has been edited. Here's the result of running `cat -n` on a snippet of /repo/a.py:\n{snippet}"
    );
    assert!(edit_echo(&edited));
    // A read of the same lines, an edit's error and a new file are not.
    assert!(!edit_echo(&snippet));
    assert_eq!(
        trim_output(&config, "Read", 200_000, &snippet).text,
        snippet
    );
    assert!(!edit_echo(
        "<tool_use_error>String to replace not found in file.\nString: fn main()</tool_use_error>"
    ));
    assert!(!edit_echo("File created successfully at: /src/app/new.rs"));
    assert!(!edit_echo(&format!(
        "The file has been updated. Here's the result of running `cat -n` on a snippet of the edited file\n{snippet}"
    )));
    let off = TrimConfig {
        edit_echo_max_bytes: 0,
        ..TrimConfig::default()
    };
    assert_eq!(trim_output(&off, "Edit", 200_000, &echo).text, echo);
}
