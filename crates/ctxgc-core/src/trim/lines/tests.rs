use super::*;

fn budget(limit: usize) -> LineBudget {
    LineBudget::from_shares(limit, 0.3, 0.5, 0.2, 120)
}

fn numbered(n: usize) -> String {
    (1..=n)
        .map(|i| format!("line {i:05} of output\n"))
        .collect()
}

#[test]
fn short_input_is_unchanged() {
    let input = numbered(10);
    let (out, stats) = LineTrimmer::trim_all(budget(2000), "terminal", input.as_bytes());
    assert_eq!(out, input.as_bytes());
    assert!(!stats.trimmed);
    assert_eq!(stats.original_lines, 10);
}

#[test]
fn long_input_keeps_head_marker_and_tail_on_line_boundaries() {
    let input = numbered(1000);
    let (out, stats) = LineTrimmer::trim_all(budget(2000), "terminal", input.as_bytes());
    let text = String::from_utf8(out).unwrap();
    assert!(text.len() <= 2000, "{}", text.len());
    assert!(text.starts_with("line 00001 of output\n"));
    assert!(text.ends_with("line 01000 of output\n"));
    let marker = text.lines().find(|l| l.starts_with("[... ")).unwrap();
    let (first, last) = stats.cut_lines.unwrap();
    assert_eq!(
        marker,
        format!(
            "[... {} chars ({} lines, {first}-{last}) trimmed from terminal output; id {} ...]",
            group(stats.cut_chars),
            last - first + 1,
            stats.id
        )
    );
    // Every kept line is whole, and the kept head/tail plus the cut add up to the input.
    for line in text.lines().filter(|l| !l.starts_with('[')) {
        assert_eq!(line.len(), "line 00001 of output".len(), "{line:?}");
    }
    let kept_lines = text.lines().filter(|l| !l.starts_with('[')).count() as u64;
    assert_eq!(kept_lines + (last - first + 1), 1000);
}

#[test]
fn the_one_error_line_in_the_middle_survives() {
    let mut input = numbered(2000);
    let at = input.len() / 2;
    let at = at + input[at..].find('\n').unwrap() + 1;
    input.insert_str(at, "error[E0308]: mismatched types in src/lib.rs:42\n");
    let (out, stats) = LineTrimmer::trim_all(budget(3000), "terminal", input.as_bytes());
    let text = String::from_utf8(out).unwrap();
    assert_eq!(stats.salient_kept, 1);
    assert!(
        text.contains("] error[E0308]: mismatched types in src/lib.rs:42\n"),
        "{text}"
    );
    let line_no = input[..at].matches('\n').count() + 1;
    assert!(text.contains(&format!("[line {line_no}] error[E0308]")));
}

/// Codex cuts outputs itself and marks the cut (`…N tokens truncated…`); when ctxgc cuts
/// such an output again, the marker stays, so the agent knows both cuts happened.
#[test]
fn a_clients_own_truncation_marker_survives_a_second_cut() {
    let mut input = numbered(2000);
    let at = input.len() / 2;
    let at = at + input[at..].find('\n').unwrap() + 1;
    input.insert_str(at, "…48213 tokens truncated…\n");
    let (out, _) = LineTrimmer::trim_all(budget(3000), "terminal", input.as_bytes());
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("] …48213 tokens truncated…\n"), "{text}");
}

#[test]
fn a_single_huge_line_is_cut_at_char_boundaries() {
    let input = "é".repeat(10_000);
    let (out, stats) = LineTrimmer::trim_all(budget(1000), "web", input.as_bytes());
    let text = String::from_utf8(out).expect("valid UTF-8");
    assert!(text.len() <= 1000);
    assert!(stats.trimmed);
    assert_eq!(stats.cut_lines, Some((1, 1)));
}

#[test]
fn chunking_does_not_change_the_output() {
    let mut input = numbered(3000);
    input.insert_str(30_000, "\nFAILED test_x\n");
    let whole = LineTrimmer::trim_all(budget(4000), "terminal", input.as_bytes());
    for chunk in [1, 7, 100, 4096] {
        let mut trimmer = LineTrimmer::new(budget(4000), "terminal");
        let mut out = Vec::new();
        for piece in input.as_bytes().chunks(chunk) {
            trimmer.push(piece, &mut out);
        }
        let stats = trimmer.finish(&mut out);
        assert_eq!((out, stats), whole, "chunk size {chunk}");
    }
}

#[test]
fn explicit_line_counts_are_kept_as_asked_in_a_view_of_code() {
    // `ctxgc trim --head 3 --tail 3` on a commented view: the lines asked for, no fold.
    let view: String = (1..=40)
        .map(|i| format!("{i:>6}\t# comment line {i}\n"))
        .collect();
    let mut b = budget(1_000_000);
    b.fold_comments = true;
    b.trigger_lines = Some(6);
    b.head_lines = Some(3);
    b.tail_lines = Some(3);
    let (out, _) = LineTrimmer::trim_all(b, "x", view.as_bytes());
    let text = String::from_utf8(out).unwrap();
    assert_eq!(text.lines().count(), 7, "{text}");
    assert!(text.contains("comment line 2\n") && text.contains("comment line 39\n"));
    assert!(!text.contains("folded"), "{text}");
}

#[test]
fn head_and_tail_line_counts_are_honoured() {
    let mut b = budget(1_000_000);
    b.trigger_lines = Some(6);
    b.head_lines = Some(3);
    b.tail_lines = Some(3);
    let (out, stats) = LineTrimmer::trim_all(b.clone(), "x", numbered(20).as_bytes());
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 7, "{text}");
    assert_eq!(lines[2], "line 00003 of output");
    assert_eq!(lines[4], "line 00018 of output");
    assert_eq!(stats.cut_lines, Some((4, 17)));
    let (out, _) = LineTrimmer::trim_all(b, "x", numbered(6).as_bytes());
    assert_eq!(out, numbered(6).as_bytes());
}
