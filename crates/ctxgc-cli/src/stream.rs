//! Trimming a byte stream (stdin, a child's output) into a writer, in bounded memory.
//!
//! Line-oriented output streams through [`LineTrimmer`]: its head is written as soon as it is
//! known and memory stays at about the soft limit plus one read buffer. Output that starts like
//! JSON or grep results is buffered up to `structured_max_bytes` so it can be trimmed
//! structurally; past that it falls back to streaming line trimming.

use std::io::{self, Read, Write};

use ctxgc_core::trim::search::search_verdict;
use ctxgc_core::trim::terminal::Renderer;
use ctxgc_core::trim::{self, LineBudget, LineTrimmer, Mode, Profile, TrimConfig, looks_like_json};

const CHUNK: usize = 256 * 1024;

/// A stream's start is first judged for structure at this many bytes (or its end).
const JUDGE_FIRST_BYTES: usize = 4 * 1024;

/// How to trim a stream.
pub struct StreamSpec<'a> {
    pub config: &'a TrimConfig,
    pub profile: &'a Profile,
    /// Soft limit in bytes.
    pub limit: usize,
    /// `--head N` / `--tail N` line counts, which replace the profile's byte split.
    pub head_lines: Option<u64>,
    pub tail_lines: Option<u64>,
}

/// The longest valid UTF-8 start of `bytes`.
fn valid_start(bytes: &[u8]) -> &str {
    match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or_default(),
    }
}

impl StreamSpec<'_> {
    fn line_budget(&self, prefix: &[u8]) -> LineBudget {
        let head = valid_start(&prefix[..prefix.len().min(trim::BUDGET_SCAN_BYTES)]);
        let mut budget = trim::line_budget_for(self.config, self.profile, self.limit, head);
        if self.head_lines.is_some() || self.tail_lines.is_some() {
            let head = self.head_lines.unwrap_or(0);
            let tail = self.tail_lines.unwrap_or(0);
            // Explicit line counts: trim when there are more lines than shown, and let the hard
            // cap bound the bytes.
            budget = LineBudget::from_shares(
                self.config.hard_cap_bytes,
                0.5,
                0.4,
                0.1,
                self.config.line_max_bytes,
            );
            budget.trigger_lines = Some(head + tail);
            budget.head_lines = Some(head);
            budget.tail_lines = Some(tail);
        }
        budget
    }

    /// Whether the line budget depends on the output's first bytes (explicit line counts
    /// replace it).
    fn wants_budget_scan(&self) -> bool {
        self.head_lines.is_none() && self.tail_lines.is_none()
    }

    fn wants_structure(&self) -> bool {
        self.head_lines.is_none()
            && self.tail_lines.is_none()
            && matches!(self.profile.mode, Mode::Auto | Mode::Json | Mode::Search)
    }
}

/// What happened to a stream.
#[derive(Debug, Default)]
pub struct StreamReport {
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub trimmed: bool,
}

/// Reads `input` to its end and writes the trimmed output; `original` receives every input byte
/// as it came, while the trimmer sees the output as a terminal would show it (unless the
/// profile's mode is `never`), rendered by the same code as the library's.
pub fn trim_stream(
    spec: &StreamSpec<'_>,
    input: impl Read,
    output: &mut impl Write,
    original: Option<&mut dyn Write>,
) -> io::Result<StreamReport> {
    let mut report = StreamReport::default();
    let mut source = Source {
        input,
        original,
        renderer: (spec.profile.mode != Mode::Never).then(Renderer::new),
        raw: vec![0u8; CHUNK],
        scratch: Vec::with_capacity(CHUNK),
        raw_bytes: 0,
        shown_bytes: 0,
        changed: false,
    };
    let mut prefix: Vec<u8> = Vec::new();
    let mut eof = false;
    // An echo of the agent's own edit is known by its first line and keeps less, as the library
    // judges it.
    let mut limit = spec.limit;
    if spec.wants_budget_scan() && spec.config.caps_edit_echoes(spec.profile) {
        // Each read's bytes are searched for the newline once.
        let mut searched = 0;
        while !eof
            && prefix.len() < trim::EDIT_ECHO_SCAN_BYTES
            && !prefix[searched..].contains(&b'\n')
        {
            searched = prefix.len();
            eof = !source.next_chunk(&mut |shown| prefix.extend_from_slice(shown))?;
        }
        limit = spec
            .config
            .edit_echo_limit(spec.profile, limit, valid_start(&prefix));
    }
    let spec = &StreamSpec { limit, ..*spec };

    // Decide the shape from the first bytes; buffer structured output while it stays small.
    let structured_max = spec.config.structured_max_bytes.max(spec.limit);
    let mut structured = spec.wants_structure();
    // Judged each time the start has doubled: reads of a few bytes each (a loaded pipe) cost
    // no more than one of the whole start, and buffering more never changes the output.
    let mut judged_at = 0usize;
    while structured {
        if !source.next_chunk(&mut |shown| prefix.extend_from_slice(shown))? {
            eof = true;
            break;
        }
        if prefix.len() > structured_max {
            structured = false;
        } else if prefix.len() >= (2 * judged_at).max(JUDGE_FIRST_BYTES) {
            judged_at = prefix.len();
            structured = could_be_structured(spec.profile.mode, &prefix);
        }
    }
    if structured
        && eof
        && let Ok(text) = std::str::from_utf8(&prefix)
    {
        // Already rendered: the library's render finds nothing more to do. Whole, an echo is
        // also known inside an envelope.
        let limit = spec.config.edit_echo_limit(spec.profile, spec.limit, text);
        let trimmed = trim::trim_with_limit(spec.config, spec.profile, limit, text);
        output.write_all(trimmed.text.as_bytes())?;
        report.bytes_in = source.raw_bytes;
        report.bytes_out = trimmed.text.len() as u64;
        report.trimmed = trimmed.trimmed || source.changed;
        return Ok(report);
    }

    // The budget is judged on the output's first bytes, as the library judges it.
    while !eof && prefix.len() < trim::BUDGET_SCAN_BYTES && spec.wants_budget_scan() {
        eof = !source.next_chunk(&mut |shown| prefix.extend_from_slice(shown))?;
    }
    let mut trimmer = LineTrimmer::new(spec.line_budget(&prefix), spec.profile.name.clone());
    let mut out = Vec::with_capacity(CHUNK);
    trimmer.push(&prefix, &mut out);
    drop(prefix);
    flush(output, &mut out, &mut report)?;
    while !eof {
        eof = !source.next_chunk(&mut |shown| trimmer.push(shown, &mut out))?;
        if !out.is_empty() {
            flush(output, &mut out, &mut report)?;
        }
    }
    let stats = trimmer.finish(&mut out);
    report.bytes_in = source.raw_bytes;
    report.trimmed = stats.trimmed || source.changed;
    flush(output, &mut out, &mut report)?;
    Ok(report)
}

/// The input, read a chunk at a time: saved raw, then rendered.
struct Source<'w, R> {
    input: R,
    original: Option<&'w mut dyn Write>,
    renderer: Option<Renderer>,
    raw: Vec<u8>,
    /// What the renderer interprets is written here before it is handed on.
    scratch: Vec<u8>,
    raw_bytes: u64,
    shown_bytes: u64,
    /// Whether rendering changed any byte.
    changed: bool,
}

impl<R: Read> Source<'_, R> {
    /// Reads the next chunk and hands what it renders to `emit` (plain lines as slices of the
    /// read buffer, no copy); `false` at the end of the input.
    fn next_chunk(&mut self, emit: &mut dyn FnMut(&[u8])) -> io::Result<bool> {
        let n = read_some(&mut self.input, &mut self.raw)?;
        let raw = &self.raw[..n];
        if let Some(w) = self.original.as_deref_mut() {
            w.write_all(raw)?;
        }
        self.raw_bytes += n as u64;
        let shown_bytes = &mut self.shown_bytes;
        let mut counted = |shown: &[u8]| {
            *shown_bytes += shown.len() as u64;
            emit(shown);
        };
        match (&mut self.renderer, n) {
            (None, 0) => Ok(false),
            (None, _) => {
                emit(raw);
                Ok(true)
            }
            (Some(_), 0) => {
                if let Some(renderer) = self.renderer.take() {
                    self.scratch.clear();
                    renderer.finish(&mut self.scratch);
                    if !self.scratch.is_empty() {
                        counted(&self.scratch);
                    }
                }
                // Rendering that changes a byte changes the length, but for contrived cursor
                // moves; this only decides what `ctxgc run` reports.
                self.changed = self.shown_bytes != self.raw_bytes;
                Ok(false)
            }
            (Some(renderer), _) => {
                renderer.push_to(raw, &mut self.scratch, &mut counted);
                Ok(true)
            }
        }
    }
}

/// Whether a stream's start may still turn out to be JSON or search results, whatever bytes
/// follow: the verdict must not depend on how the input was cut into reads (a pipe under load
/// hands over 27 bytes where another hands 64 KiB), or the same output would trim two ways. At
/// the end of the input the library decides on the whole text.
fn could_be_structured(mode: Mode, prefix: &[u8]) -> bool {
    let text = match std::str::from_utf8(prefix) {
        Ok(t) => t,
        // A multi-byte char cut at the end of the read is fine.
        Err(e) if e.error_len().is_none() => {
            std::str::from_utf8(&prefix[..e.valid_up_to()]).unwrap_or("")
        }
        Err(_) => return false,
    };
    // JSON is told by its first byte; nothing but whitespace yet may still be JSON.
    let json = matches!(mode, Mode::Auto | Mode::Json)
        && (text.trim_start().is_empty() || looks_like_json(text));
    // Search output is judged on complete lines; a verdict more lines could change is none yet.
    let complete = text.rfind('\n').map_or("", |i| &text[..i]);
    let search =
        matches!(mode, Mode::Auto | Mode::Search) && search_verdict(complete, false) != Some(false);
    json || search
}

fn read_some(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match input.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

fn flush(output: &mut impl Write, out: &mut Vec<u8>, report: &mut StreamReport) -> io::Result<()> {
    output.write_all(out)?;
    report.bytes_out += out.len() as u64;
    out.clear();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec<'a>(config: &'a TrimConfig, tool: &str, limit: usize) -> StreamSpec<'a> {
        StreamSpec {
            config,
            profile: config.profile_for(tool),
            limit,
            head_lines: None,
            tail_lines: None,
        }
    }

    /// An echo of the agent's own edit keeps what the library keeps of it, read a few bytes at
    /// a time (its first line spans reads) or whole, and in an envelope.
    #[test]
    fn streaming_caps_an_echo_of_the_agents_own_edit_as_the_library_does() {
        let config = TrimConfig::default();
        let snippet: String = (1..=150)
            .map(|i| format!("{i:>6}\u{2192}    let value_{i} = compute_{i}(input)?;\n"))
            .collect();
        let echo = format!(
            "The file /src/main.rs has been updated. Here's the result of running `cat -n` on a \
             snippet of the edited file:\n{snippet}"
        );
        let envelope = serde_json::json!({"output": echo, "exit_code": 0}).to_string();
        for (tool, text) in [("Edit", &echo), ("Write", &echo), ("terminal", &envelope)] {
            let profile = config.profile_for(tool);
            let s = spec(&config, tool, config.soft_limit(profile, 200_000));
            let expected = trim::trim_output(&config, tool, 200_000, text);
            assert!(expected.trimmed && expected.text.len() < 1_600, "{tool}");
            let mut out = Vec::new();
            let input = Trickle {
                bytes: text.as_bytes(),
                step: 7,
            };
            trim_stream(&s, input, &mut out, None).unwrap();
            assert_eq!(
                String::from_utf8(out).unwrap(),
                expected.text,
                "{tool}, trickled"
            );
            let mut out = Vec::new();
            trim_stream(&s, text.as_bytes(), &mut out, None).unwrap();
            assert_eq!(
                String::from_utf8(out).unwrap(),
                expected.text,
                "{tool}, whole"
            );
        }
        // The same lines as a read stream through whole.
        let s = spec(
            &config,
            "Read",
            config.soft_limit(config.profile_for("Read"), 200_000),
        );
        let mut out = Vec::new();
        trim_stream(&s, snippet.as_bytes(), &mut out, None).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), snippet);
    }

    #[test]
    fn streaming_matches_the_library_for_lines_json_and_search() {
        let config = TrimConfig::default();
        let log: String = (0..5000).map(|i| format!("step {i} ok\n")).collect();
        let json = serde_json::to_string(&(0..3000).collect::<Vec<u32>>()).unwrap();
        let grep: String = (0..2000)
            .map(|i| format!("src/f{}.rs:{}:hit\n", i % 37, i))
            .collect();
        for text in [log, json, grep] {
            let mut out = Vec::new();
            let s = spec(&config, "bash", 4000);
            trim_stream(&s, text.as_bytes(), &mut out, None).unwrap();
            let expected = trim::trim_with_limit(&config, s.profile, 4000, &text);
            assert_eq!(String::from_utf8(out).unwrap(), expected.text);
        }
    }

    /// A reader that hands its bytes over `step` at a time, as a loaded pipe does.
    struct Trickle<'a> {
        bytes: &'a [u8],
        step: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.step.min(buf.len()).min(self.bytes.len());
            buf[..n].copy_from_slice(&self.bytes[..n]);
            self.bytes = &self.bytes[n..];
            Ok(n)
        }
    }

    /// The same output trims to the same bytes however the input is cut into reads: search
    /// results behind a two-line wrapper (mini-swe-agent's `<returncode>`), and a log whose
    /// first lines look like search results, read 27 bytes at a time, whole, and by the library.
    #[test]
    fn the_trim_does_not_depend_on_how_the_input_is_read() {
        let config = TrimConfig::default();
        let grep: String = (0..600)
            .map(|i| format!("src/f{}.rs:{}:let value = compute({i});\n", i % 37, i))
            .collect();
        let wrapped = format!("<returncode>0</returncode>\n<output>\n{grep}</output>\n");
        let log_after_hits = format!(
            "{}{}",
            (0..5)
                .map(|i| format!("src/a.rs:{i}:hit\n"))
                .collect::<String>(),
            (0..5000)
                .map(|i| format!("step {i} ok\n"))
                .collect::<String>()
        );
        for text in [wrapped, log_after_hits] {
            let s = spec(&config, "bash", 4000);
            let expected = trim::trim_with_limit(&config, s.profile, 4000, &text);
            for step in [27, 4096, usize::MAX] {
                let mut out = Vec::new();
                let input = Trickle {
                    bytes: text.as_bytes(),
                    step,
                };
                trim_stream(&s, input, &mut out, None).unwrap();
                assert_eq!(
                    String::from_utf8(out).unwrap(),
                    expected.text,
                    "step {step}"
                );
            }
        }
    }

    #[test]
    fn original_is_saved_whole() {
        let config = TrimConfig::default();
        let text: String = (0..50_000).map(|i| format!("{i}\n")).collect();
        let (mut out, mut saved) = (Vec::new(), Vec::new());
        let report = trim_stream(
            &spec(&config, "bash", 3000),
            text.as_bytes(),
            &mut out,
            Some(&mut saved),
        )
        .unwrap();
        assert_eq!(saved, text.as_bytes());
        assert!(report.trimmed);
        assert_eq!(report.bytes_in, text.len() as u64);
    }

    #[test]
    fn terminal_output_is_rendered_as_the_library_renders_it() {
        let config = TrimConfig::default();
        let mut raw = String::new();
        for step in 0..3000 {
            raw.push_str(&format!("\u{1b}[32mcompiling\u{1b}[0m crate{step}\n"));
            for pct in (0..=100).step_by(10) {
                raw.push_str(&format!("\r\u{1b}[K[{pct:>3}%] downloading"));
            }
            raw.push('\n');
        }
        raw.push_str("error: build failed\n");
        for limit in [4000, 10_000_000] {
            let (mut out, mut saved) = (Vec::new(), Vec::new());
            let s = spec(&config, "terminal", limit);
            let report = trim_stream(&s, raw.as_bytes(), &mut out, Some(&mut saved)).unwrap();
            let expected = trim::trim_with_limit(&config, s.profile, limit, &raw);
            let out = String::from_utf8(out).unwrap();
            assert_eq!(out, expected.text, "limit {limit}");
            assert!(!out.contains('\u{1b}') && !out.contains('\r'));
            assert!(report.trimmed);
            assert_eq!(saved, raw.as_bytes(), "the original is saved raw");
        }
    }
}
