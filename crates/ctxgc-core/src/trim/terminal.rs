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

/// The index of the first special byte, or the length: 16 bytes at a time with SSE2 (part of
/// every x86_64), so plain text, the common case, goes at memory speed.
#[cfg(target_arch = "x86_64")]
fn first_special(bytes: &[u8]) -> usize {
    use std::arch::x86_64::{
        __m128i, _mm_andnot_si128, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_min_epu8,
        _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
    };
    let mut at = 0;
    // SAFETY: SSE2 is in the x86_64 baseline, so these intrinsics exist on every x86_64 CPU;
    // each unaligned 16-byte load reads `bytes[at..at + 16]`, in bounds by the loop condition.
    unsafe {
        let below_space = _mm_set1_epi8(0x1f);
        let tab = _mm_set1_epi8(b'\t' as i8);
        let newline = _mm_set1_epi8(b'\n' as i8);
        let delete = _mm_set1_epi8(0x7f);
        let c1_lead = _mm_set1_epi8(0xc2_u8 as i8);
        while at + 16 <= bytes.len() {
            let x = _mm_loadu_si128(bytes.as_ptr().add(at).cast::<__m128i>());
            // x <= 0x1f, unsigned: min(x, 0x1f) == x.
            let control = _mm_cmpeq_epi8(_mm_min_epu8(x, below_space), x);
            let shown = _mm_or_si128(_mm_cmpeq_epi8(x, tab), _mm_cmpeq_epi8(x, newline));
            let special = _mm_or_si128(
                _mm_andnot_si128(shown, control),
                _mm_or_si128(_mm_cmpeq_epi8(x, delete), _mm_cmpeq_epi8(x, c1_lead)),
            );
            let mask = _mm_movemask_epi8(special);
            if mask != 0 {
                return at + mask.trailing_zeros() as usize;
            }
            at += 16;
        }
    }
    at + first_special_scalar(&bytes[at..])
}

/// [`first_special`] elsewhere.
#[cfg(not(target_arch = "x86_64"))]
fn first_special(bytes: &[u8]) -> usize {
    first_special_scalar(bytes)
}

/// The index of the first special byte, or the length, a byte at a time.
fn first_special_scalar(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .position(|&b| is_special(b))
        .unwrap_or(bytes.len())
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
    pub fn push(&mut self, bytes: &[u8], out: &mut Vec<u8>) {
        let mut scratch = Vec::new();
        self.push_to(bytes, &mut scratch, &mut |rendered| {
            out.extend_from_slice(rendered)
        });
    }

    /// Renders `bytes`, handing each line completed by them to `emit`, in order: runs of plain
    /// lines as slices of `bytes` itself (no copy), interpreted ones through `scratch`.
    pub fn push_to(
        &mut self,
        mut bytes: &[u8],
        scratch: &mut Vec<u8>,
        emit: &mut dyn FnMut(&[u8]),
    ) {
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
            self.decode(&partial, scratch);
            // A lead byte followed by too few continuation bytes decoded to U+FFFD and left
            // nothing pending; anything left is fed below.
        }
        while !bytes.is_empty() {
            if self.at_line_start() {
                // Fast path: whole lines with nothing to interpret pass through as they are.
                let plain = first_special(bytes);
                let through = memchr::memrchr(b'\n', &bytes[..plain]).map_or(0, |i| i + 1);
                if through > 0 {
                    if !scratch.is_empty() {
                        emit(scratch);
                        scratch.clear();
                    }
                    emit(&bytes[..through]);
                }
                bytes = &bytes[through..];
                if bytes.is_empty() {
                    break;
                }
            }
            // Slow path up to the end of this line (or of the chunk).
            let end = memchr::memchr(b'\n', bytes).map_or(bytes.len(), |i| i + 1);
            let (line, rest) = bytes.split_at(end);
            self.decode(line, scratch);
            bytes = rest;
        }
        if !scratch.is_empty() {
            emit(scratch);
            scratch.clear();
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

    #[test]
    fn the_vector_scan_finds_what_the_byte_scan_finds() {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        for round in 0..2_000 {
            let len = round % 97;
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    // Mostly plain text, now and then any byte.
                    if seed.is_multiple_of(9) {
                        (seed >> 8) as u8
                    } else {
                        b'a' + (seed % 26) as u8
                    }
                })
                .collect();
            assert_eq!(
                first_special(&bytes),
                first_special_scalar(&bytes),
                "{bytes:?}"
            );
        }
    }
}
