//! Insertion-time trimming of tool output.
//!
//! A tool result is trimmed once, when it enters the history, and never again: the result is a
//! pure function of the output bytes, the tool's profile and the context window, so the prefix
//! a provider cached stays valid. Output at or under the soft limit is returned byte for byte.
//! Above it:
//! - line-oriented output keeps a head, the salient middle lines and a tail around one marker;
//! - JSON stays valid JSON ([`json`]);
//! - grep-like search output keeps matches spread across files ([`search`]).
//!
//! The marker names the content id of the original, so it can be recalled whole later.

mod client_marks;
pub mod envelope;
pub(crate) mod fold;
pub mod json;
pub mod lines;
pub(crate) mod outline;
pub mod profile;
pub(crate) mod salient;
pub mod search;
pub mod terminal;

use serde_json::Value;

use crate::content_id::ContentId;
pub(crate) use client_marks::edit_echo;
pub use client_marks::{EDIT_ECHO_SCAN_BYTES, client_cut};
pub use lines::{LineBudget, LineTrimmer, TrimStats, marker_line};
pub use profile::{ConfigError, Mode, Profile, TrimConfig};
pub use salient::SalientLines;

/// The structure the trimmer recognised and used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Head + salient middle + tail.
    Lines,
    /// Structural JSON.
    Json,
    /// Search results spread across files.
    Search,
}

/// A trimmed tool output.
#[derive(Debug, Clone, PartialEq)]
pub struct Trimmed {
    /// What enters the history.
    pub text: String,
    /// Whether it differs from the original.
    pub trimmed: bool,
    /// The id of the original (recall key).
    pub id: ContentId,
    /// Size of the original, in bytes.
    pub original_bytes: usize,
    /// How it was trimmed.
    pub shape: Shape,
    /// The soft limit that applied, in bytes.
    pub limit: usize,
}

/// One tool output of an assistant turn.
#[derive(Debug, Clone, Copy)]
pub struct ToolOutput<'a> {
    /// The tool's name (decides the profile).
    pub tool: &'a str,
    /// The output text.
    pub text: &'a str,
}

/// Trims one tool output for a model with a `window`-token context.
pub fn trim_output(config: &TrimConfig, tool: &str, window: u64, text: &str) -> Trimmed {
    let profile = config.profile_for(tool);
    trim_with_limit(
        config,
        profile,
        config.limit_for_output(profile, window, text),
        text,
    )
}

/// Trims all outputs of one assistant turn: each gets its profile's limit, and when together
/// they exceed the turn budget the largest are cut down first (to a common level) until the
/// total fits.
pub fn trim_turn(config: &TrimConfig, window: u64, outputs: &[ToolOutput<'_>]) -> Vec<Trimmed> {
    let profiles: Vec<&Profile> = outputs.iter().map(|o| config.profile_for(o.tool)).collect();
    let own: Vec<usize> = profiles
        .iter()
        .zip(outputs)
        .map(|(p, o)| config.limit_for_output(p, window, o.text))
        .collect();
    let sizes: Vec<usize> = outputs
        .iter()
        .zip(&own)
        .map(|(o, &limit)| o.text.len().min(limit))
        .collect();
    let level = water_level(&sizes, config.turn_budget(window));
    outputs
        .iter()
        .zip(profiles)
        .zip(own)
        .map(|((o, profile), limit)| {
            let limit = match level {
                Some(level) if profile.mode != Mode::Never => {
                    limit.min(level.max(config.min_limit_bytes))
                }
                _ => limit,
            };
            trim_with_limit(config, profile, limit, o.text)
        })
        .collect()
}

/// The largest cap `c` such that `sum(min(size, c)) <= budget`, or `None` when all fit.
fn water_level(sizes: &[usize], budget: usize) -> Option<usize> {
    if sizes.iter().sum::<usize>() <= budget {
        return None;
    }
    let mut sorted = sizes.to_vec();
    sorted.sort_unstable();
    let mut remaining = budget;
    let mut left = sorted.len();
    for size in sorted {
        let share = remaining / left;
        if size > share {
            return Some(share);
        }
        remaining -= size;
        left -= 1;
    }
    None
}

/// Trims `text` with an explicit soft limit in bytes.
pub fn trim_with_limit(
    config: &TrimConfig,
    profile: &Profile,
    limit: usize,
    text: &str,
) -> Trimmed {
    let limit = limit.min(config.hard_cap_bytes);
    let original_bytes = text.len();
    // What a terminal would show, first (lossless: the id stays the original's, which recall
    // returns byte for byte).
    let id = ContentId::of(text.as_bytes());
    let rendered = (profile.mode != Mode::Never)
        .then(|| terminal::render(text))
        .flatten();
    let shown = rendered.as_deref().unwrap_or(text);
    // A search the client already cut keeps what the client kept (up to the limit).
    let limit = match config.search_limit(profile) {
        Some(cap)
            if shown.len() > cap
                && search::looks_like_search(shown)
                && !(config.client_cut_window_share > 0.0 && client_cut(shown)) =>
        {
            limit.min(cap)
        }
        _ => limit,
    };
    // JSON whose bulk is text (a command's output in an envelope) is trimmed as that text;
    // within the limit its fields are still shown as a terminal would, as the same output
    // unwrapped is shown.
    if profile.mode != Mode::Never
        && let Some(out) = envelope::trim_envelope(config, profile, limit, text, id, &trim_field)
    {
        return Trimmed {
            trimmed: out != text,
            text: out,
            id,
            original_bytes,
            shape: Shape::Json,
            limit,
        };
    }
    if shown.len() <= limit {
        return Trimmed {
            text: shown.to_owned(),
            trimmed: rendered.is_some(),
            id,
            original_bytes,
            shape: Shape::Lines,
            limit,
        };
    }
    let text = shown;
    let label = profile.name.as_str();
    let structured = text.len() <= config.structured_max_bytes;
    let (out, shape) = match profile.mode {
        Mode::Json | Mode::Auto if structured => {
            match try_json(text, limit, id).map(|t| (t, Shape::Json)) {
                Some(done) => done,
                None if profile.mode == Mode::Auto => try_search(config, text, limit, label, id)
                    .map(|t| (t, Shape::Search))
                    .unwrap_or_else(|| (trim_lines(config, profile, limit, text), Shape::Lines)),
                None => (trim_lines(config, profile, limit, text), Shape::Lines),
            }
        }
        Mode::Search if structured => try_search(config, text, limit, label, id)
            .map(|t| (t, Shape::Search))
            .unwrap_or_else(|| (trim_lines(config, profile, limit, text), Shape::Lines)),
        _ => (trim_lines(config, profile, limit, text), Shape::Lines),
    };
    Trimmed {
        trimmed: true,
        text: out,
        id,
        original_bytes,
        shape,
        limit,
    }
}

/// A text field of an envelope, trimmed as the same output unwrapped would be.
fn trim_field(config: &TrimConfig, profile: &Profile, limit: usize, text: &str) -> String {
    trim_with_limit(config, profile, limit, text).text
}

fn trim_lines(config: &TrimConfig, profile: &Profile, limit: usize, text: &str) -> String {
    let budget = line_budget_for(config, profile, limit, scan_prefix(text));
    let (out, _) = LineTrimmer::trim_all(budget, &profile.name, text.as_bytes());
    // The trimmer cuts only at char boundaries of valid UTF-8 input.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// How many leading bytes of an output decide its line budget: a streaming trimmer reads this
/// much before it starts, so the library and `ctxgc trim` split the same output the same way
/// in bounded memory.
pub const BUDGET_SCAN_BYTES: usize = 64 * 1024;

/// The first [`BUDGET_SCAN_BYTES`] of `text`, cut at a char boundary.
fn scan_prefix(text: &str) -> &str {
    let mut end = text.len().min(BUDGET_SCAN_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The line budget for an output of `profile` under `limit`, judged on `head`, the output's
/// first [`BUDGET_SCAN_BYTES`] (a numbered view of a file keeps both ends; a log keeps its
/// tail and salient lines).
pub fn line_budget_for(
    config: &TrimConfig,
    profile: &Profile,
    limit: usize,
    head: &str,
) -> LineBudget {
    let split = match profile.mode {
        Mode::Auto => Some(NUMBERED_VIEW_SPLIT),
        // A file read tool's view keeps its profile's own ends; a `lines` profile that asks for
        // error lines keeps them.
        Mode::Lines if profile.salient == 0.0 => Some([profile.head, profile.tail]),
        _ => None,
    };
    if let Some([head_share, tail_share]) = split.filter(|_| looks_like_numbered_view(head)) {
        // The outline gets what its lines take in the scanned prefix, up to its share: a view
        // without definitions (data, prose) keeps its head and tail in their ratio.
        let ends = (head_share + tail_share).max(f64::EPSILON);
        let (head_share, tail_share) = (head_share / ends, tail_share / ends);
        let body = limit.saturating_sub(lines::MARKER_RESERVE).max(1) as f64;
        let outline = salient::outline_bytes(head, config.line_max_bytes) as f64;
        let share = (outline / body).min(OUTLINE_MAX_SHARE);
        LineBudget {
            salient_lines: SalientLines::Outline,
            // A view that defines nothing is data or prose: a `#` there is a heading, not a
            // comment.
            fold_comments: outline > 0.0,
            ..LineBudget::from_shares(
                limit,
                head_share * (1.0 - share),
                tail_share * (1.0 - share),
                share,
                config.line_max_bytes,
            )
        }
    } else {
        config.line_budget(profile, limit)
    }
}

/// How a numbered view of a file (`nl -ba f | sed -n a,bp`, `cat -n`) that came through a shell
/// or a generic tool splits its head and tail. The agent chose the range, so both ends count: on
/// the shared GPT-5-mini sessions at a 32K window (where 440-line views get cut) 0.6 / 0.4 kept
/// 98.3% of later references against 97.7% with the terminal's log-shaped split (0.3 / 0.55),
/// 98.1% at 0.7 / 0.3 and 97.9% at 0.85 / 0.15 or 0.5 / 0.5, at the same cost.
const NUMBERED_VIEW_SPLIT: [f64; 2] = [0.6, 0.4];

/// The most of a cut view's kept bytes its outline may take (its definition lines,
/// [`SalientLines::Outline`]; in code "error" is a word, not an event). What agents quote later
/// from a cut view sits mostly in its middle, 40-70% of the way down, and is mostly a name or a
/// signature: on the shared GPT-5-mini sessions at a 32K window the outline took `lean` from
/// 89.6% of later references kept to 92.5% at the same cost (`safe`: 98.5%, unchanged). A
/// fixed 30% whose unused part went to the tail gave `lean` 93.7% but cost `safe` 0.6 points:
/// most of that difference was the tail growing, which is the ratio above, tuned apart.
const OUTLINE_MAX_SHARE: f64 = 0.3;

/// True when most lines start with a line number and a tab (`nl -ba`, `cat -n`) or an arrow
/// (Claude Code's `Read`): a view of a file, not a log.
fn looks_like_numbered_view(text: &str) -> bool {
    let mut total = 0usize;
    let mut numbered = 0usize;
    for line in text.lines().take(400) {
        total += 1;
        numbered += usize::from(outline::is_numbered(line.as_bytes()));
    }
    numbered >= 20 && numbered * 10 >= total * 8
}

/// The ids the markers of an earlier ctxgc trim in `text` name, first marker first: `text` is
/// then a trim, not an original (an integration trimmed the output when the tool returned it
/// and its framework keeps the trim). Only the markers a trim writes count (`[... ...; id r-…
/// ...]` and the JSON trimmer's `[... N more …; id r-…]`, also inside a JSON string), not a
/// pointer or an abstract that names another output.
pub fn marker_ids(text: &str) -> Vec<ContentId> {
    let mut ids = Vec::new();
    for (id, _) in markers(text) {
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    ids
}

/// `text` with each of its trim markers naming the way back the agent has, after the id
/// (`; id r-…, recall with mcp__ctxgc__recall_tool_result ...]`), or `None` when it has no
/// marker. The markers [`marker_ids`] reads, and only those; their ids still read the same.
pub fn name_recall(text: &str, way: &crate::agent_tools::RecallWay) -> Option<String> {
    let mut out = String::with_capacity(text.len() + 64);
    let mut copied = 0;
    for (id, after_id) in markers(text) {
        out.push_str(&text[copied..after_id]);
        out.push_str(&way.suffix(id));
        copied = after_id;
    }
    (copied > 0).then(|| {
        out.push_str(&text[copied..]);
        out
    })
}

/// The trim markers in `text`: each one's id and the offset just past it. A marker is one
/// line, `[... ` up to its `]`, and its id comes before it closes.
fn markers(text: &str) -> impl Iterator<Item = (ContentId, usize)> + '_ {
    const OPEN: &str = "[... ";
    const ID: &str = "; id ";
    let mut rest_at = 0;
    std::iter::from_fn(move || {
        while let Some(found) = text[rest_at..].find(OPEN) {
            let tail_at = rest_at + found + OPEN.len();
            let tail = &text[tail_at..];
            let end = tail.find(['\n', ']']).unwrap_or(tail.len());
            rest_at = tail_at + end;
            let marker = &tail[..end];
            if let Some(i) = marker.rfind("; id r-")
                && let Some(id) = marker[i + ID.len()..].get(..18).and_then(ContentId::parse)
            {
                return Some((id, tail_at + i + ID.len() + 18));
            }
        }
        None
    })
}

/// True when the text starts like a JSON object or array.
pub fn looks_like_json(text: &str) -> bool {
    matches!(text.trim_start().as_bytes().first(), Some(b'{' | b'['))
}

fn try_json(text: &str, limit: usize, id: ContentId) -> Option<String> {
    if !looks_like_json(text) {
        return None;
    }
    let value: Value = serde_json::from_str(text).ok()?;
    let pretty = text.trim().contains('\n');
    json::trim_json(&value, limit, pretty, id)
}

fn try_search(
    config: &TrimConfig,
    text: &str,
    limit: usize,
    label: &str,
    id: ContentId,
) -> Option<String> {
    if !search::looks_like_search(text) {
        return None;
    }
    search::trim_search(text, limit, config.line_max_bytes, label, id).map(|(out, _)| out)
}

#[cfg(test)]
mod tests;
