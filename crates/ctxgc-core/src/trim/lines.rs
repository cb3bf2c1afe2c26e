//! Head + salient middle + tail trimming of line-oriented text, streaming, in bounded memory.
//!
//! The same [`LineTrimmer`] trims a tool result held in memory and a 10 GB log piped into
//! `ctxgc trim`: input is pushed in chunks, the head is emitted as soon as it is known, the tail
//! lives in a fixed ring buffer and salient middle lines in a bounded reservoir. Memory is about
//! the soft limit plus one chunk, whatever the input size.
//!
//! A view of code that must be cut first folds its comments and docstrings to their first line
//! ([`fold`](crate::trim::fold)); a second trimmer cuts what is left, and one marker counts both.
//!
//! Guarantees (property-tested in `trim::tests`):
//! - input of at most `trigger_bytes` bytes (and lines) comes out unchanged, byte for byte;
//! - otherwise the output is at most `trigger_bytes` long, marker included, so trimming the
//!   output again changes nothing;
//! - cuts fall on line boundaries, or on UTF-8 char boundaries inside a single huge line;
//! - the output depends only on the input bytes and the budget.

use crate::content_id::{ContentId, ContentIdHasher};
use crate::trim::fold::{Folder, Hidden};
use crate::trim::salient::{self, Hit, Reservoir, SalientLines, is_continuation};

/// Bytes reserved for the marker line and the newline that may precede it. A marker is at most
/// about 220 bytes (numbers are bounded, the label is clipped to [`MAX_LABEL`]).
pub const MARKER_RESERVE: usize = 256;
/// Longest label (tool or profile name) shown in a marker.
pub const MAX_LABEL: usize = 32;
/// A partial line longer than this is scanned for salient words only in its first part.
const MAX_CARRY: usize = 64 * 1024;
const FIRST_HITS: usize = 16;
const LAST_HITS: usize = 64;

/// How much of each part to keep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineBudget {
    /// Input longer than this is trimmed; the output is never longer than this.
    pub trigger_bytes: usize,
    /// Input with more lines than this is trimmed even when short in bytes (`--head/--tail N`).
    pub trigger_lines: Option<u64>,
    /// Most bytes of the head.
    pub head_bytes: usize,
    /// Most lines of the head.
    pub head_lines: Option<u64>,
    /// Most bytes of the tail (plus any salient budget left unused).
    pub tail_bytes: usize,
    /// Most lines of the tail.
    pub tail_lines: Option<u64>,
    /// Bytes for salient middle lines (0 disables the scan).
    pub salient_bytes: usize,
    /// Longest salient line shown, in bytes.
    pub salient_line_max: usize,
    /// Which middle lines are salient: errors and warnings, or a file's outline.
    pub salient_lines: SalientLines,
    /// A view of code: when it is cut, its comment and docstring runs first fold to their first
    /// line ([`fold`](crate::trim::fold)), and head, outline and tail are taken from what is left.
    /// Not with `trigger_lines` (explicit line counts are kept as asked).
    pub fold_comments: bool,
}

impl LineBudget {
    /// Splits `limit` bytes (marker reserve excluded) by shares of head, tail and salient lines.
    pub fn from_shares(limit: usize, head: f64, tail: f64, salient: f64, line_max: usize) -> Self {
        let body = limit.saturating_sub(MARKER_RESERVE) as f64;
        let total = (head + tail + salient).max(f64::EPSILON);
        let head_bytes = (body * head / total).floor() as usize;
        let salient_bytes = (body * salient / total).floor() as usize;
        let tail_bytes = (body as usize).saturating_sub(head_bytes + salient_bytes);
        LineBudget {
            trigger_bytes: limit,
            trigger_lines: None,
            head_bytes,
            head_lines: None,
            tail_bytes,
            tail_lines: None,
            salient_bytes,
            salient_line_max: line_max,
            salient_lines: SalientLines::Events,
            fold_comments: false,
        }
    }
}

/// What a trim did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrimStats {
    /// The id of the whole original input.
    pub id: ContentId,
    /// Whether anything was cut.
    pub trimmed: bool,
    /// Size of the original, in bytes.
    pub original_bytes: u64,
    /// Lines of the original (a final line without newline counts).
    pub original_lines: u64,
    /// Bytes removed from between head and tail (salient lines are quoted, not restored).
    pub cut_bytes: u64,
    /// Chars removed from between head and tail.
    pub cut_chars: u64,
    /// First and last line (1-based) touched by the cut.
    pub cut_lines: Option<(u64, u64)>,
    /// Salient lines quoted below the marker.
    pub salient_kept: usize,
}

/// The marker line that replaces a cut middle.
pub fn marker_line(label: &str, stats: &TrimStats) -> String {
    let (first, last) = stats.cut_lines.unwrap_or((0, 0));
    let lines = last.saturating_sub(first) + 1;
    let mut m = format!(
        "[... {} chars ({} {}, {}-{}) trimmed from {} output",
        group(stats.cut_chars),
        group(lines),
        if lines == 1 { "line" } else { "lines" },
        first,
        last,
        clip_label(label),
    );
    if stats.salient_kept > 0 {
        m.push_str(&format!(
            "; {} notable {} kept below",
            stats.salient_kept,
            if stats.salient_kept == 1 {
                "line"
            } else {
                "lines"
            }
        ));
    }
    m.push_str(&format!("; id {} ...]", stats.id));
    m
}

/// The marker of a folded view of code: what the fold and any cut hid together (the view's
/// own line numbers show where).
fn fold_marker(label: &str, hidden: Hidden, cut: Option<&TrimStats>, id: ContentId) -> String {
    let cut_lines = cut
        .and_then(|c| c.cut_lines)
        .map_or(0, |(first, last)| last.saturating_sub(first) + 1);
    let lines = hidden.lines + cut_lines;
    let chars = hidden.chars + cut.map_or(0, |c| c.cut_chars);
    let (before, after) = match cut {
        Some(_) => ("trimmed from", " output, comments folded"),
        None => ("of comments folded in", " output"),
    };
    let mut m = format!(
        "[... {} chars ({} {}) {before} {}{after}",
        group(chars),
        group(lines),
        if lines == 1 { "line" } else { "lines" },
        clip_label(label),
    );
    if let Some(kept) = cut.map(|c| c.salient_kept).filter(|&k| k > 0) {
        m.push_str(&format!(
            "; {kept} notable {} kept below",
            if kept == 1 { "line" } else { "lines" }
        ));
    }
    m.push_str(&format!("; id {id} ...]"));
    m
}

/// `31204` -> `31,204`.
pub fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn clip_label(label: &str) -> &str {
    if label.len() <= MAX_LABEL {
        return label;
    }
    let mut cut = MAX_LABEL;
    while !label.is_char_boundary(cut) {
        cut -= 1;
    }
    &label[..cut]
}

/// A fixed-capacity ring of the most recent bytes.
struct Ring {
    buf: Vec<u8>,
    cap: usize,
    /// Index of the oldest byte when full.
    start: usize,
}

impl Ring {
    fn new(cap: usize) -> Ring {
        Ring {
            buf: Vec::with_capacity(cap.min(1 << 20)),
            cap,
            start: 0,
        }
    }

    fn push(&mut self, data: &[u8]) {
        if self.cap == 0 {
            return;
        }
        let data = &data[data.len().saturating_sub(self.cap)..];
        if self.buf.len() < self.cap {
            let room = self.cap - self.buf.len();
            let (now, rest) = data.split_at(data.len().min(room));
            self.buf.extend_from_slice(now);
            if rest.is_empty() {
                return;
            }
            return self.push(rest);
        }
        // Full: overwrite the oldest bytes, in at most two copies.
        let first = data.len().min(self.cap - self.start);
        self.buf[self.start..self.start + first].copy_from_slice(&data[..first]);
        let second = data.len() - first;
        self.buf[..second].copy_from_slice(&data[first..]);
        self.start = (self.start + data.len()) % self.cap;
    }

    fn contiguous(self) -> Vec<u8> {
        let mut buf = self.buf;
        buf.rotate_left(self.start);
        buf
    }
}

struct Trimming {
    head_end: u64,
    head_chars: u64,
    head_newlines: u64,
    head_ends_line: bool,
    ring: Ring,
    carry: Vec<u8>,
    carry_offset: u64,
    carry_line: u64,
    reservoir: Reservoir,
}

enum Phase {
    Buffering(Vec<u8>),
    Trimming(Box<Trimming>),
    /// A view of code over the limit: its comments fold, and what is left is trimmed.
    Folding(Box<Folding>),
}

struct Folding {
    folder: Folder,
    /// Trims the folded text, with room left for the marker when it fits whole.
    inner: LineTrimmer,
}

impl Folding {
    fn push(&mut self, data: &[u8], out: &mut Vec<u8>) {
        let Folding { folder, inner } = self;
        folder.push(data, &mut |kept| inner.push(kept, out));
    }
}

/// Streaming head + salient + tail trimmer. See the module documentation.
pub struct LineTrimmer {
    budget: LineBudget,
    label: String,
    hasher: ContentIdHasher,
    total_bytes: u64,
    total_newlines: u64,
    total_chars: u64,
    last_byte: Option<u8>,
    phase: Phase,
}

impl LineTrimmer {
    /// A trimmer; `label` names the output in the marker (`terminal` -> "terminal output").
    pub fn new(budget: LineBudget, label: impl Into<String>) -> LineTrimmer {
        LineTrimmer {
            budget,
            label: label.into(),
            hasher: ContentIdHasher::default(),
            total_bytes: 0,
            total_newlines: 0,
            total_chars: 0,
            last_byte: None,
            phase: Phase::Buffering(Vec::new()),
        }
    }

    /// Trims a whole text at once.
    pub fn trim_all(budget: LineBudget, label: &str, input: &[u8]) -> (Vec<u8>, TrimStats) {
        let mut trimmer = LineTrimmer::new(budget, label);
        let mut out = Vec::with_capacity(input.len().min(trimmer.budget.trigger_bytes + 64));
        trimmer.push(input, &mut out);
        let stats = trimmer.finish(&mut out);
        (out, stats)
    }

    /// Feeds input; bytes that are final (the head) are appended to `out`.
    pub fn push(&mut self, data: &[u8], out: &mut Vec<u8>) {
        if data.is_empty() {
            return;
        }
        self.hasher.update(data);
        let offset = self.total_bytes;
        let newlines_before = self.total_newlines;
        let newlines = bytecount::count(data, b'\n') as u64;
        self.total_bytes += data.len() as u64;
        self.total_newlines += newlines;
        self.total_chars += bytecount::num_chars(data) as u64;
        self.last_byte = data.last().copied();
        match &mut self.phase {
            Phase::Buffering(buf) => {
                buf.extend_from_slice(data);
                if self.over_trigger() {
                    self.start_trimming(out);
                }
            }
            Phase::Trimming(state) => {
                feed(state, &self.budget, data, offset, newlines_before, newlines)
            }
            Phase::Folding(folding) => folding.push(data, out),
        }
    }

    fn line_count(&self) -> u64 {
        self.total_newlines + u64::from(self.last_byte.is_some_and(|b| b != b'\n'))
    }

    fn over_trigger(&self) -> bool {
        self.total_bytes > self.budget.trigger_bytes as u64
            || self
                .budget
                .trigger_lines
                .is_some_and(|max| self.line_count() > max)
    }

    fn start_trimming(&mut self, out: &mut Vec<u8>) {
        let Phase::Buffering(buf) =
            std::mem::replace(&mut self.phase, Phase::Buffering(Vec::new()))
        else {
            return;
        };
        if self.budget.fold_comments && self.budget.trigger_lines.is_none() {
            // The folded text is trimmed with the same shares; when it fits whole, the marker
            // that says what the fold hid must fit after it.
            let inner_budget = LineBudget {
                trigger_bytes: self.budget.trigger_bytes.saturating_sub(MARKER_RESERVE),
                fold_comments: false,
                ..self.budget.clone()
            };
            let mut folding = Box::new(Folding {
                folder: Folder::default(),
                inner: LineTrimmer::new(inner_budget, self.label.clone()),
            });
            folding.push(&buf, out);
            self.phase = Phase::Folding(folding);
            return;
        }
        let head_end = head_end(&buf, self.budget.head_bytes, self.budget.head_lines);
        let head = &buf[..head_end];
        out.extend_from_slice(head);
        let head_newlines = bytecount::count(head, b'\n') as u64;
        let mut state = Box::new(Trimming {
            head_end: head_end as u64,
            head_chars: bytecount::num_chars(head) as u64,
            head_newlines,
            head_ends_line: head_end == 0 || buf[head_end - 1] == b'\n',
            ring: Ring::new(self.budget.tail_bytes + self.budget.salient_bytes + 1),
            carry: Vec::new(),
            carry_offset: head_end as u64,
            carry_line: head_newlines + 1,
            reservoir: Reservoir::new(FIRST_HITS, LAST_HITS),
        });
        let rest = &buf[head_end..];
        let rest_newlines = bytecount::count(rest, b'\n') as u64;
        feed(
            &mut state,
            &self.budget,
            rest,
            head_end as u64,
            head_newlines,
            rest_newlines,
        );
        self.phase = Phase::Trimming(state);
    }

    /// Ends the input: appends the rest of the output (marker, salient lines, tail) to `out`.
    pub fn finish(mut self, out: &mut Vec<u8>) -> TrimStats {
        if matches!(self.phase, Phase::Buffering(_)) && self.over_trigger() {
            self.start_trimming(out);
        }
        if matches!(self.phase, Phase::Folding(_)) {
            return self.finish_folding(out);
        }
        let label = std::mem::take(&mut self.label);
        self.finish_with(out, |stats| marker_line(&label, stats))
    }

    /// Ends a folded view: the folded text trimmed, and one marker that counts what the fold
    /// and the cut hid together.
    fn finish_folding(self, out: &mut Vec<u8>) -> TrimStats {
        let id = self.hasher.finish();
        let original_lines = self.line_count();
        let Phase::Folding(folding) = self.phase else {
            unreachable!("finish_folding is called in the folding phase");
        };
        let Folding {
            mut folder,
            mut inner,
        } = *folding;
        folder.finish(&mut |kept| inner.push(kept, out));
        let hidden = folder.hidden();
        let label = self.label;
        let inner_stats = inner.finish_with(out, |cut| fold_marker(&label, hidden, Some(cut), id));
        if !inner_stats.trimmed {
            if !folder.kept_ends_line() {
                out.push(b'\n');
            }
            out.extend_from_slice(fold_marker(&label, hidden, None, id).as_bytes());
            out.push(b'\n');
        }
        TrimStats {
            id,
            trimmed: true,
            original_bytes: self.total_bytes,
            original_lines,
            cut_bytes: hidden.bytes + inner_stats.cut_bytes,
            cut_chars: hidden.chars + inner_stats.cut_chars,
            cut_lines: None,
            salient_kept: inner_stats.salient_kept,
        }
    }

    /// Ends the input of a trimmer that does not fold; `marker` words the cut.
    fn finish_with(
        mut self,
        out: &mut Vec<u8>,
        marker: impl FnOnce(&TrimStats) -> String,
    ) -> TrimStats {
        let id = self.hasher.finish();
        let untrimmed = TrimStats {
            id,
            trimmed: false,
            original_bytes: self.total_bytes,
            original_lines: self.line_count(),
            cut_bytes: 0,
            cut_chars: 0,
            cut_lines: None,
            salient_kept: 0,
        };
        if let Phase::Buffering(buf) = &self.phase {
            if !self.over_trigger() {
                out.extend_from_slice(buf);
                return untrimmed;
            }
            self.start_trimming(out);
        }
        let Phase::Trimming(state) = self.phase else {
            unreachable!("a trimmer that does not fold enters the trimming phase");
        };
        let Trimming {
            head_end,
            head_chars,
            head_newlines,
            head_ends_line,
            ring,
            carry,
            carry_offset,
            carry_line,
            mut reservoir,
        } = *state;
        let budget = &self.budget;
        if budget.salient_bytes > 0 && !carry.is_empty() {
            salient::scan_lines(
                budget.salient_lines,
                &carry,
                carry_offset,
                carry_line,
                budget.salient_line_max,
                |h| reservoir.push(h),
            );
        }
        let total = self.total_bytes;
        let tail = ring.contiguous();
        let r0 = total - tail.len() as u64;
        let boundary = TailBoundary {
            tail: &tail,
            r0,
            head_end,
            head_ends_line,
            total,
            max_lines: budget.tail_lines,
        };
        let first_start = boundary.start(budget.tail_bytes as u64);
        let mut hits = reservoir.select(head_end, first_start, budget.salient_bytes);
        let used: usize = hits.iter().map(salient::rendered_len).sum();
        let spare = (budget.salient_bytes - used) as u64;
        let start = boundary.start(budget.tail_bytes as u64 + spare);
        // Lines the grown tail now shows need no quoting.
        hits.retain(|h: &Hit| h.offset < start);

        let tail_slice = &tail[(start - r0) as usize..];
        let tail_newlines = bytecount::count(tail_slice, b'\n') as u64;
        let tail_chars = bytecount::num_chars(tail_slice) as u64;
        let newlines_before_start = self.total_newlines - tail_newlines;
        let byte_before_start_is_newline = if start > head_end {
            tail.get((start - r0 - 1) as usize)
                .is_none_or(|&b| b == b'\n')
        } else {
            head_ends_line
        };
        let last_cut_line = newlines_before_start + 1 - u64::from(byte_before_start_is_newline);
        let first_cut_line = head_newlines + 1;
        let stats = TrimStats {
            id,
            trimmed: true,
            original_bytes: total,
            original_lines: untrimmed.original_lines,
            cut_bytes: start - head_end,
            cut_chars: self.total_chars - head_chars - tail_chars,
            cut_lines: Some((first_cut_line, last_cut_line.max(first_cut_line))),
            salient_kept: hits.len(),
        };
        if !head_ends_line {
            out.push(b'\n');
        }
        out.extend_from_slice(marker(&stats).as_bytes());
        out.push(b'\n');
        for hit in &hits {
            salient::render_hit(hit, out);
        }
        out.extend_from_slice(tail_slice);
        stats
    }
}

/// Processes bytes after the head: keeps the tail ring current and scans complete lines.
fn feed(
    state: &mut Trimming,
    budget: &LineBudget,
    data: &[u8],
    offset: u64,
    newlines_before: u64,
    newlines: u64,
) {
    if data.is_empty() {
        return;
    }
    state.ring.push(data);
    if budget.salient_bytes == 0 {
        return;
    }
    let max_text = budget.salient_line_max;
    let reservoir = &mut state.reservoir;
    let Some(first_nl) = memchr::memchr(b'\n', data) else {
        if state.carry.is_empty() {
            state.carry_offset = offset;
            state.carry_line = newlines_before + 1;
        }
        append_bounded(&mut state.carry, data);
        return;
    };
    // The line carried over from the previous chunk ends here.
    append_bounded(&mut state.carry, &data[..=first_nl]);
    if state.carry.is_empty() {
        state.carry_offset = offset;
        state.carry_line = newlines_before + 1;
    }
    salient::scan_lines(
        budget.salient_lines,
        &state.carry,
        state.carry_offset,
        state.carry_line,
        max_text,
        |h| reservoir.push(h),
    );
    state.carry.clear();
    let last_nl = memchr::memrchr(b'\n', data).unwrap_or(first_nl);
    if last_nl > first_nl {
        salient::scan_lines(
            budget.salient_lines,
            &data[first_nl + 1..=last_nl],
            offset + first_nl as u64 + 1,
            newlines_before + 2,
            max_text,
            |h| reservoir.push(h),
        );
    }
    state.carry_offset = offset + last_nl as u64 + 1;
    state.carry_line = newlines_before + newlines + 1;
    append_bounded(&mut state.carry, &data[last_nl + 1..]);
}

fn append_bounded(carry: &mut Vec<u8>, data: &[u8]) {
    let room = MAX_CARRY.saturating_sub(carry.len());
    carry.extend_from_slice(&data[..data.len().min(room)]);
}

/// End of the head: the last line boundary within `max_bytes` (and `max_lines`), or a char
/// boundary inside the first line when that line alone is longer.
fn head_end(buf: &[u8], max_bytes: usize, max_lines: Option<u64>) -> usize {
    let window = &buf[..buf.len().min(max_bytes)];
    let mut end = match memchr::memrchr(b'\n', window) {
        Some(i) => i + 1,
        None => char_floor(buf, window.len()),
    };
    if let Some(max_lines) = max_lines {
        if max_lines == 0 {
            end = 0;
        } else if let Some(pos) = memchr::memchr_iter(b'\n', buf).nth(max_lines as usize - 1) {
            end = end.min(pos + 1);
        }
    }
    end
}

/// The largest char boundary at or below `at`.
fn char_floor(buf: &[u8], mut at: usize) -> usize {
    while at > 0 && at < buf.len() && is_continuation(buf[at]) {
        at -= 1;
    }
    at
}

/// Finds where the tail starts, in absolute offsets, given the ring contents.
struct TailBoundary<'a> {
    /// The ring: the last bytes of the input, starting at absolute offset `r0`.
    tail: &'a [u8],
    r0: u64,
    head_end: u64,
    head_ends_line: bool,
    total: u64,
    max_lines: Option<u64>,
}

impl TailBoundary<'_> {
    fn byte(&self, at: u64) -> u8 {
        self.tail[(at - self.r0) as usize]
    }

    /// The earliest start of a tail of at most `max_bytes` bytes (and `max_lines` lines).
    fn start(&self, max_bytes: u64) -> u64 {
        let lo = self.r0.max(self.head_end);
        let min_start = self.total.saturating_sub(max_bytes).max(lo);
        if min_start >= self.total {
            return self.total;
        }
        // The ring holds one byte more than any tail budget, so the byte before `min_start` is
        // in the ring unless `min_start` is the end of the head.
        let is_line_start = if min_start == self.head_end {
            self.head_ends_line
        } else {
            self.byte(min_start - 1) == b'\n'
        };
        let next_line_start = || {
            let from = (min_start - self.r0) as usize;
            memchr::memchr(b'\n', &self.tail[from..])
                .map(|i| self.r0 + (from + i) as u64 + 1)
                .filter(|&p| p < self.total)
        };
        let mut start = if is_line_start {
            min_start
        } else if let Some(p) = next_line_start() {
            p
        } else {
            // The last line alone is longer than the budget: cut inside it.
            let mut p = min_start;
            while p < self.total && is_continuation(self.byte(p)) {
                p += 1;
            }
            p
        };
        if let Some(max_lines) = self.max_lines {
            start = start.max(self.start_of_last_lines(max_lines, lo));
        }
        start
    }

    /// Start of the last `n` lines (a trailing newline does not open a new line).
    fn start_of_last_lines(&self, n: u64, lo: u64) -> u64 {
        if n == 0 {
            return self.total;
        }
        let region = &self.tail[(lo - self.r0) as usize..];
        let body = region.strip_suffix(b"\n").unwrap_or(region);
        match memchr::memrchr_iter(b'\n', body).nth(n as usize - 1) {
            Some(i) => lo + i as u64 + 1,
            None => lo,
        }
    }
}

#[cfg(test)]
mod tests;
