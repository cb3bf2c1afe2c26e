//! Terminal output as a terminal would show it.
//!
//! Programs that think they write to a terminal send colour codes (SGR), cursor movements,
//! carriage returns and backspaces: a progress bar redraws one line hundreds of times, and each
//! frame is billed as tokens though the screen only ever showed the last. Rendering applies them
//! as a terminal would, per line: `\r` returns to the line's start and later text overwrites,
//! `ESC[K` erases, `ESC[nG`/`C`/`D` move the cursor, a backspace steps back; colours and other
//! escape sequences (OSC titles, charset switches) disappear. The original stays what the
//! output's id names, so recall still gives it byte for byte.

/// The output as rendered, or `None` when it holds nothing a terminal would interpret (then it
/// is shown as it is). Rendering is idempotent: a rendered text holds no such sequence.
pub fn render(text: &str) -> Option<String> {
    if !text.bytes().any(|b| matches!(b, 0x1b | b'\r' | 0x08)) {
        return None;
    }
    let mut out = String::with_capacity(text.len());
    let mut line: Vec<char> = Vec::new();
    let mut col = 0usize;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' => {
                out.extend(line.drain(..));
                out.push('\n');
                col = 0;
            }
            '\r' => col = 0,
            '\u{8}' => col = col.saturating_sub(1),
            '\u{1b}' => match chars.next() {
                Some('[') => {
                    let mut params = String::new();
                    let mut last = None;
                    for c in chars.by_ref() {
                        if ('\u{40}'..='\u{7e}').contains(&c) {
                            last = Some(c);
                            break;
                        }
                        params.push(c);
                    }
                    let n = |default: usize| params.trim().parse::<usize>().unwrap_or(default);
                    match last {
                        Some('K') => match n(0) {
                            0 => line.truncate(col),
                            1 => line.iter_mut().take(col + 1).for_each(|c| *c = ' '),
                            _ => line.clear(),
                        },
                        Some('G') => col = n(1).saturating_sub(1),
                        Some('C') => col += n(1).max(1),
                        Some('D') => col = col.saturating_sub(n(1).max(1)),
                        // Colours and everything else: nothing to show.
                        _ => {}
                    }
                }
                Some(']') => {
                    // An operating-system command (a window title): up to BEL or ESC \.
                    while let Some(c) = chars.next() {
                        if c == '\u{7}' {
                            break;
                        }
                        if c == '\u{1b}' {
                            chars.next_if_eq(&'\\');
                            break;
                        }
                    }
                }
                // Charset designations take one more character.
                Some('(' | ')' | '*' | '+') => {
                    chars.next();
                }
                _ => {}
            },
            '\t' => put(&mut line, &mut col, c),
            c if c.is_control() => {}
            c => put(&mut line, &mut col, c),
        }
    }
    out.extend(line);
    Some(out)
}

/// Writes `c` at the cursor, over what is there, padding with spaces when the cursor is past
/// the line's end.
fn put(line: &mut Vec<char>, col: &mut usize, c: char) {
    while line.len() < *col {
        line.push(' ');
    }
    if *col < line.len() {
        line[*col] = c;
    } else {
        line.push(c);
    }
    *col += 1;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_as_a_terminal_shows() {
        let cases = [
            ("50%\r100%\n", "100%\n"),
            ("\u{1b}[32mok\u{1b}[0m done", "ok done"),
            (
                "pulling 10%\r\u{1b}[Kpulling 20%\r\u{1b}[Kpulling done\nnext\n",
                "pulling done\nnext\n",
            ),
            ("abc\u{8}\u{8}X", "aXc"),
            ("one\r\ntwo\r\n", "one\ntwo\n"),
            ("\u{1b}]0;title\u{7}text", "text"),
            ("\u{1b}(Bplain", "plain"),
            ("a\u{1b}[5Gb", "a   b"),
            ("long line\rshort", "shortline"),
        ];
        for (raw, shown) in cases {
            assert_eq!(render(raw).as_deref(), Some(shown), "{raw:?}");
            assert_eq!(render(shown), None, "idempotent: {shown:?}");
        }
        assert_eq!(render("no escapes\n"), None);
    }

    #[test]
    fn a_progress_bar_costs_its_last_frame() {
        let mut raw = String::new();
        for i in 0..=1000 {
            raw.push_str(&format!("\r\u{1b}[K[{:<50}] {i}/1000", "#".repeat(i / 20)));
        }
        raw.push_str("\nBuild finished: 0 errors\n");
        let shown = render(&raw).unwrap();
        assert_eq!(
            shown,
            format!("[{}] 1000/1000\nBuild finished: 0 errors\n", "#".repeat(50))
        );
        assert!(shown.len() * 100 < raw.len());
    }
}
