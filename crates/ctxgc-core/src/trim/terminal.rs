//! Terminal output as a terminal would show it.
//!
//! Programs that think they write to a terminal send colour codes (SGR), cursor movements,
//! carriage returns and backspaces: a progress bar redraws one line hundreds of times, and each
//! frame is billed as tokens though the screen only ever showed the last. Rendering applies them
//! as a terminal would, per line: `\r` returns to the line's start and later text overwrites,
//! `ESC[K` erases, `ESC[nG`/`C`/`D` move the cursor, a backspace steps back; colours, other
//! escape sequences (OSC titles, charset switches) and other control characters disappear. The
//! original stays what the output's id names, so recall still gives it byte for byte.
//!
//! [`Renderer`] does it on a stream, in memory bounded by one line: the library's [`render`],
//! `ctxgc trim` and `ctxgc run` all go through it, so they show the same bytes.

/// The longest line a renderer holds, in characters. A terminal wraps long lines at its width;
/// the renderer wraps at this one, so a line that never ends (or a cursor moved far right)
/// cannot grow memory without bound.
pub const MAX_LINE_CHARS: usize = 1 << 20;

/// The output as rendered, or `None` when rendering changes nothing (then it is shown as it
/// is). Rendering is idempotent: a rendered text holds nothing a terminal would interpret.
pub fn render(text: &str) -> Option<String> {
    if first_special(text.as_bytes()) == text.len() {
        return None;
    }
    let mut renderer = Renderer::default();
    let mut out = Vec::with_capacity(text.len());
    renderer.push(text.as_bytes(), &mut out);
    renderer.finish(&mut out);
    // The renderer writes whole chars of valid input.
    let out = String::from_utf8(out).ok()?;
    (out != text).then_some(out)
}

/// A byte a terminal interprets rather than shows: control characters other than tab and line
/// feed, and the lead byte of U+0080..U+00BF (where the C1 controls live), which sends its line
/// down the slow path to be decoded and judged as a char. Branch-free, so scans vectorise.
#[inline(always)]
fn is_special(b: u8) -> bool {
    ((b < 0x20) & (b != b'\t') & (b != b'\n')) | (b == 0x7f) | (b == 0xc2)
}

/// The index of the first special byte, or the length: 32 bytes at a time while none is found
/// (plain text, the common case, goes at memory speed).
fn first_special(bytes: &[u8]) -> usize {
    const STEP: usize = 32;
    let mut at = 0;
    for block in bytes.chunks_exact(STEP) {
        if block.iter().fold(false, |any, &b| any | is_special(b)) {
            break;
        }
        at += STEP;
    }
    at + bytes[at..]
        .iter()
        .position(|&b| is_special(b))
        .unwrap_or(bytes.len() - at)
}

/// Where the escape-sequence parser is, between chunks.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
enum Escape {
    /// Plain text.
    #[default]
    Ground,
    /// After ESC.
    Start,
    /// Inside `ESC [`, with the parameters so far (bounded: a parameter list longer than a
    /// terminal would read is dropped).
    Csi(String),
    /// Inside an operating-system command (`ESC ]`), up to BEL or `ESC \`.
    Osc,
    /// After ESC inside an operating-system command (`ESC \` may end it).
    OscEnd,
    /// After a charset designation (`ESC (` and kin), which takes one more character.
    Charset,
}

/// Renders terminal output pushed in chunks of any size; complete lines are written out as
/// soon as their `\n` arrives.
#[derive(Debug, Default)]
pub struct Renderer {
    line: Vec<char>,
    col: usize,
    escape: Escape,
    /// The bytes of a UTF-8 char split between chunks.
    partial: Vec<u8>,
}

impl Renderer {
    /// A renderer at the start of a stream.
    pub fn new() -> Renderer {
        Renderer::default()
    }

    /// Renders `bytes`, writing each line completed by them to `out`.
    pub fn push(&mut self, mut bytes: &[u8], out: &mut Vec<u8>) {
        if !self.partial.is_empty() {
            // Complete the char split at the end of the last chunk.
            let need = utf8_len(self.partial[0]).saturating_sub(self.partial.len());
            let take = need.min(bytes.len());
            self.partial.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if self.partial.len() < utf8_len(self.partial[0]) && bytes.is_empty() {
                return;
            }
            let partial = std::mem::take(&mut self.partial);
            self.decode(&partial, out);
            // A lead byte followed by too few continuation bytes decoded to U+FFFD and left
            // nothing pending; anything left is fed below.
        }
        while !bytes.is_empty() {
            if self.at_line_start() {
                // Fast path: whole lines with nothing to interpret pass through as they are.
                let plain = first_special(bytes);
                let through = memchr::memrchr(b'\n', &bytes[..plain]).map_or(0, |i| i + 1);
                out.extend_from_slice(&bytes[..through]);
                bytes = &bytes[through..];
                if bytes.is_empty() {
                    break;
                }
            }
            // Slow path up to the end of this line (or of the chunk).
            let end = memchr::memchr(b'\n', bytes).map_or(bytes.len(), |i| i + 1);
            let (line, rest) = bytes.split_at(end);
            self.decode(line, out);
            bytes = rest;
        }
    }

    /// Ends the stream: writes the unfinished last line, if any.
    pub fn finish(mut self, out: &mut Vec<u8>) {
        if !self.partial.is_empty() {
            // A char cut off by the end of the stream.
            self.partial.clear();
            self.feed('\u{FFFD}', out);
        }
        self.write_line(out);
    }

    fn at_line_start(&self) -> bool {
        self.escape == Escape::Ground && self.line.is_empty() && self.col == 0
    }

    /// Decodes `bytes` as UTF-8 (invalid bytes become U+FFFD; a char cut at the end waits for
    /// the next chunk) and feeds the chars.
    fn decode(&mut self, mut bytes: &[u8], out: &mut Vec<u8>) {
        loop {
            match std::str::from_utf8(bytes) {
                Ok(text) => {
                    text.chars().for_each(|c| self.feed(c, out));
                    return;
                }
                Err(e) => {
                    let (valid, rest) = bytes.split_at(e.valid_up_to());
                    // Checked valid just above.
                    let text = std::str::from_utf8(valid).unwrap_or_default();
                    text.chars().for_each(|c| self.feed(c, out));
                    match e.error_len() {
                        Some(bad) => {
                            self.feed('\u{FFFD}', out);
                            bytes = &rest[bad..];
                        }
                        None => {
                            self.partial.extend_from_slice(rest);
                            return;
                        }
                    }
                }
            }
        }
    }

    fn feed(&mut self, c: char, out: &mut Vec<u8>) {
        match std::mem::take(&mut self.escape) {
            Escape::Ground => self.ground(c, out),
            Escape::Start => match c {
                '[' => self.escape = Escape::Csi(String::new()),
                ']' => self.escape = Escape::Osc,
                '(' | ')' | '*' | '+' => self.escape = Escape::Charset,
                // Any other escape: two characters, nothing to show.
                _ => {}
            },
            Escape::Csi(mut params) => {
                if ('\u{40}'..='\u{7e}').contains(&c) {
                    self.csi(&params, c);
                } else {
                    if params.len() < 64 {
                        params.push(c);
                    }
                    self.escape = Escape::Csi(params);
                }
            }
            Escape::Osc => match c {
                '\u{7}' => {}
                '\u{1b}' => self.escape = Escape::OscEnd,
                _ => self.escape = Escape::Osc,
            },
            Escape::OscEnd => {
                if c != '\\' {
                    self.ground(c, out);
                }
            }
            Escape::Charset => {}
        }
    }

    fn ground(&mut self, c: char, out: &mut Vec<u8>) {
        match c {
            '\n' => {
                self.write_line(out);
                out.push(b'\n');
            }
            '\r' => self.col = 0,
            '\u{8}' => self.col = self.col.saturating_sub(1),
            '\u{1b}' => self.escape = Escape::Start,
            '\t' => self.put(c, out),
            c if c.is_control() => {}
            c => self.put(c, out),
        }
    }

    fn csi(&mut self, params: &str, last: char) {
        let n = |default: usize| params.trim().parse::<usize>().unwrap_or(default);
        match last {
            'K' => match n(0) {
                0 => self.line.truncate(self.col),
                1 => self
                    .line
                    .iter_mut()
                    .take(self.col + 1)
                    .for_each(|c| *c = ' '),
                _ => self.line.clear(),
            },
            'G' => self.col = n(1).saturating_sub(1).min(MAX_LINE_CHARS),
            'C' => self.col = (self.col + n(1).max(1)).min(MAX_LINE_CHARS),
            'D' => self.col = self.col.saturating_sub(n(1).max(1)),
            // Colours and everything else: nothing to show.
            _ => {}
        }
    }

    /// Writes `c` at the cursor, over what is there, padding with spaces when the cursor is
    /// past the line's end; a line at the width limit wraps first.
    fn put(&mut self, c: char, out: &mut Vec<u8>) {
        if self.col >= MAX_LINE_CHARS {
            self.write_line(out);
            out.push(b'\n');
        }
        while self.line.len() < self.col {
            self.line.push(' ');
        }
        if self.col < self.line.len() {
            self.line[self.col] = c;
        } else {
            self.line.push(c);
        }
        self.col += 1;
    }

    /// Writes the current line (without its newline) and starts a new one.
    fn write_line(&mut self, out: &mut Vec<u8>) {
        let mut buf = [0u8; 4];
        for c in self.line.drain(..) {
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
        }
        self.col = 0;
    }
}

/// The length of the UTF-8 sequence a lead byte starts (1 for anything that is not a lead).
fn utf8_len(lead: u8) -> usize {
    match lead {
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf7 => 4,
        _ => 1,
    }
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

    fn render_in_chunks(raw: &[u8], size: usize) -> Vec<u8> {
        let mut renderer = Renderer::new();
        let mut out = Vec::new();
        for chunk in raw.chunks(size.max(1)) {
            renderer.push(chunk, &mut out);
        }
        renderer.finish(&mut out);
        out
    }

    #[test]
    fn any_chunking_renders_the_same_bytes() {
        let raw = "\u{1b}[1mbold\u{1b}[0m é°ü ✓ 🚀\r\u{1b}[Kdone\u{1b}]0;t\u{1b}\\x\nplain line\n\
                   tab\there\u{7}\u{0}\r\nprogress 1%\rprogress 100%\n\u{1b}(Bcharset\nlast";
        let whole = render(raw).unwrap();
        for size in 1..=17 {
            let out = render_in_chunks(raw.as_bytes(), size);
            assert_eq!(String::from_utf8(out).unwrap(), whole, "chunks of {size}");
        }
        // Plain text passes through byte for byte, however it is cut.
        let plain = "one\ntwo °C\nthree";
        assert_eq!(render_in_chunks(plain.as_bytes(), 2), plain.as_bytes());
    }

    #[test]
    fn control_characters_alone_are_dropped() {
        assert_eq!(render("bell\u{7} here\n").as_deref(), Some("bell here\n"));
        assert_eq!(render("a\u{85}b").as_deref(), Some("ab"));
        assert_eq!(render("25 °C"), None);
    }

    #[test]
    fn invalid_utf8_becomes_replacement_chars() {
        let out = render_in_chunks(b"ok\r\xffX\xe2\x9c", 1);
        assert_eq!(String::from_utf8(out).unwrap(), "\u{FFFD}X\u{FFFD}");
    }

    #[test]
    fn memory_stays_bounded_on_a_line_that_never_ends() {
        let mut renderer = Renderer::new();
        let mut out = Vec::new();
        let chunk = "x".repeat(64 * 1024);
        for _ in 0..40 {
            renderer.push(chunk.as_bytes(), &mut out);
            assert!(renderer.line.len() <= MAX_LINE_CHARS);
        }
        renderer.push(b"\x1b[999999999999G!", &mut out);
        assert!(renderer.line.len() <= MAX_LINE_CHARS + 1);
        renderer.finish(&mut out);
        assert_eq!(out.iter().filter(|&&b| b == b'x').count(), 40 * 64 * 1024);
    }
}
