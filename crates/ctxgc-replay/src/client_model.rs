//! What a client log tells the replay beyond its messages: the client's model of its own
//! requests (how they are counted, where the client changed its own prompt, what it attached),
//! fitted once per session on the usage the provider billed, and the window it ran at.

use ctxgc_core::{Role, Transcript};
use serde::Serialize;

use crate::client::{Attachment, Calibration, client_prompt};

/// What a client log tells the replay beyond its messages, estimated once per session from the
/// usage the provider recorded: how to count (see [`Calibration`]) and where the client changed
/// its own prompt (a rewritten system prompt, cleared old tool results) in ways the log does
/// not show. Replays of the client's requests (`none`, and what runs in front of the client)
/// make the same changes at the same requests, so they pay the same rewrites the client paid.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ClientModel {
    /// How the log's requests are counted.
    pub calibration: Calibration,
    /// Tokens of the fixed prefix that stays cached whatever this session does: the part the
    /// client kept when it changed the rest, and that requests after a pause past the TTL still
    /// read, kept warm by the client's other sessions (the mean of what such requests read).
    pub static_prefix_tokens: Option<usize>,
    /// Tokens of the fixed prefix the session's first request read (warm from the client's
    /// other sessions), where that is part of it: the prefix is split there too, so the
    /// first request reads what it did.
    pub first_read_tokens: Option<usize>,
    /// (assistant message index of the request, first changed message; None: the fixed prefix).
    pub prompt_changes: Vec<(usize, Option<usize>)>,
    /// Tokens the client sent after each of its compactions beyond what the log holds (the
    /// files and plans it re-attaches), as (compaction's first message, tokens): counted with
    /// the compaction's first message in every request of that segment.
    pub hidden_after_compaction: Vec<(usize, usize)>,
    /// Content the client attached mid-session that the log does not hold, sized from the
    /// recorded usage; counted with its message, wherever a request carries it unchanged.
    pub attachments: Vec<Attachment>,
    /// The scale of each compaction's segment that has one of its own, as (compaction's first
    /// message, provider tokens per counted token); others count at the calibration's.
    pub segment_scales: Vec<(usize, f64)>,
}

impl ClientModel {
    /// Tokens of the requests with billed usage that are [`Attachment`]s (sized from the bill,
    /// not counted from the log), summed over the session: what a report says of how much of
    /// its prompts it took from the bill.
    pub fn attached_tokens(&self, t: &Transcript) -> u64 {
        let compactions = t
            .recording
            .as_ref()
            .map_or(&[][..], |r| r.compactions.as_slice());
        let segment = |i: usize| segment_of(compactions, i);
        t.messages
            .iter()
            .enumerate()
            .filter(|(_, m)| m.role == Role::Assistant && m.usage.is_some())
            .map(|(i, _)| carried(&self.attachments, i, &segment))
            .sum()
    }

    /// Provider tokens per counted token in the request for assistant message `index`.
    pub(crate) fn scale_at(&self, index: usize) -> f64 {
        scale_at(&self.segment_scales, self.calibration.scale, index)
    }
}

/// The scale of the request for assistant message `index`: its compaction segment's own in
/// `segment_scales` (compaction's first message, scale), else `session`'s.
fn scale_at(segment_scales: &[(usize, f64)], session: f64, index: usize) -> f64 {
    segment_scales
        .iter()
        .rev()
        .find(|(at, _)| *at <= index)
        .map_or(session, |s| s.1)
}

/// Which of the client's compaction segments message `index` is in (0: before the first).
fn segment_of(compactions: &[ctxgc_core::ClientCompaction], index: usize) -> usize {
    compactions.iter().filter(|c| c.at <= index).count()
}

/// The model of a transcript with recorded usage (a client log, or an agent's trajectory that
/// kept the provider's usage); `None` for other transcripts.
pub fn client_model(t: &Transcript) -> Option<ClientModel> {
    let ClientFit {
        calibration,
        segment_scales,
        hidden_after_compaction,
        attachments,
    } = fit(t)?;
    let mut prompt_changes = Vec::new();
    let mut static_reads = Vec::new();
    let mut first_read = None;
    for write in crate::causes::classify(t, calibration, &attachments) {
        match write.cause {
            crate::causes::WriteCause::PrefixChange { message, .. } => {
                prompt_changes.push((write.request, message));
                if message.is_none() {
                    static_reads.push(write.read as usize);
                }
            }
            // What a request after a pause past the TTL still read was kept warm by the
            // client's other sessions; what one read nothing says they did not, that time.
            crate::causes::WriteCause::TtlExpiry { .. } => {
                static_reads.push(write.read as usize);
            }
            // The session's first request read what the client's other sessions left warm
            // (Claude Code's system prompt and tools are the same in every session of a
            // version): exactly that much, whatever later pauses read.
            crate::causes::WriteCause::ColdStart => first_read = Some(write.read as usize),
            _ => {}
        }
    }
    // The mean, zeros counted: the fixed prefix is warm after some pauses and cold after
    // others, and the model's one warm part must read as much in sum as they did. A median
    // of the non-zero reads made every pause read it, which put big sessions' simulated
    // writes at 0.72x of what was recorded.
    let prefix = calibration.prefix_tokens;
    let static_prefix_tokens = (!static_reads.is_empty())
        .then(|| static_reads.iter().map(|&r| r.min(prefix)).sum::<usize>() / static_reads.len())
        .filter(|&s| s > 0 && s < prefix);
    Some(ClientModel {
        calibration,
        static_prefix_tokens,
        first_read_tokens: first_read.filter(|&r| r > 0 && r < prefix),
        prompt_changes,
        hidden_after_compaction,
        attachments,
        segment_scales,
    })
}

/// The calibration (fitted on the requests before the client's first compaction, when there
/// are enough of them: the client adds content of its own after a compaction), for each
/// compaction the tokens its first request held beyond what the log shows (files and plans the
/// client re-attached), as (compaction's first message, tokens), and the content the client
/// attached mid-session that the log does not hold ([`Attachment`]).
fn fit(t: &Transcript) -> Option<ClientFit> {
    let no_recording = ctxgc_core::Recording::default();
    let recording = t.recording.as_ref().unwrap_or(&no_recording);
    let mut counter = crate::counting::counter();
    let mut sums = vec![0usize; t.messages.len() + 1];
    for (i, m) in t.messages.iter().enumerate() {
        sums[i + 1] = sums[i] + counter.count_message(m);
    }
    // (assistant index, counted tokens of its request, recorded prompt tokens)
    let points: Vec<(usize, f64, f64)> = t
        .messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.role == Role::Assistant)
        .filter_map(|(i, m)| {
            let usage = m.usage.filter(|u| u.prompt_tokens > 0)?;
            let (range, system) = client_prompt(t, i);
            let counted = sums[range.end] - sums[range.start] + sums[system] + 3;
            Some((i, counted as f64, usage.prompt_tokens as f64))
        })
        .collect();
    let segment = |i: usize| segment_of(&recording.compactions, i);
    // The requests the scale is fitted on: those before the client's first compaction, when
    // there are two or more, else all.
    let first_compaction = recording.compactions.first().map_or(usize::MAX, |c| c.at);
    let before = points.iter().filter(|p| p.0 < first_compaction).count();
    let fitted = |p: &&(usize, f64, f64)| before < 2 || p.0 < first_compaction;
    let sample: Vec<(f64, f64)> = points.iter().filter(fitted).map(|p| (p.1, p.2)).collect();
    // Claude Code's logs leave attachments out; a Codex rollout's growth past its count is the
    // turn's own reasoning, which the provider drops again at the next user message.
    let attaches = recording.client.starts_with("claude");
    let mut scale = least_squares_slope(&sample)?;
    let mut attachments = Vec::new();
    // The first fit is pulled by the attachments; each round fits again without those found.
    for _ in 0..ATTACHMENT_ROUNDS {
        if !attaches {
            break;
        }
        attachments = attachments_of(t, &points, &|_| scale, &segment);
        let attached = |p: &(usize, f64, f64)| carried(&attachments, p.0, &segment) as f64;
        let adjusted: Vec<(f64, f64)> = points
            .iter()
            .filter(fitted)
            .map(|p| (p.1, p.2 - attached(p)))
            .collect();
        scale = least_squares_slope(&adjusted)?;
    }
    // Each compaction's segment at its own scale where it has requests enough to fit one:
    // what follows a compaction is other content (a summary, other files), and a session-wide
    // scale a few percent off puts its longest prompts past the window the client ran at.
    let mut segment_scales: Vec<(usize, f64)> = Vec::new();
    for (k, c) in recording.compactions.iter().enumerate() {
        let mine: Vec<&(usize, f64, f64)> =
            points.iter().filter(|p| segment(p.0) == k + 1).collect();
        let spread = mine.iter().map(|p| p.1).fold(0.0, f64::max)
            - mine.iter().map(|p| p.1).fold(f64::MAX, f64::min);
        if mine.len() < SEGMENT_MIN_REQUESTS || spread < SEGMENT_MIN_SPREAD_TOKENS {
            continue;
        }
        let attached = |p: &(usize, f64, f64)| carried(&attachments, p.0, &segment) as f64;
        let sample: Vec<(f64, f64)> = mine.iter().map(|p| (p.1, p.2 - attached(p))).collect();
        segment_scales.push((c.at, least_squares_slope(&sample)?));
    }
    let scale_at = |i: usize| scale_at(&segment_scales, scale, i);
    if attaches {
        attachments = attachments_of(t, &points, &scale_at, &segment);
    }
    let &(_, m1, r1) = points.first()?;
    let prefix = (r1 - scale * m1).max(0.0);
    let hidden = recording
        .compactions
        .iter()
        .filter_map(|c| {
            let &(i, counted, recorded) = points.iter().find(|p| p.0 > c.at)?;
            let extra = recorded - (prefix + scale_at(i) * counted);
            (extra >= 1.0).then(|| (c.at, extra.round() as usize))
        })
        .collect();
    Some(ClientFit {
        calibration: Calibration {
            prefix_tokens: prefix.round() as usize,
            scale,
        },
        segment_scales,
        hidden_after_compaction: hidden,
        attachments,
    })
}

/// What [`fit`] finds in a client log.
struct ClientFit {
    calibration: Calibration,
    segment_scales: Vec<(usize, f64)>,
    hidden_after_compaction: Vec<(usize, usize)>,
    attachments: Vec<Attachment>,
}

/// Requests and the spread of their counted prompts a compaction's segment needs for a scale
/// of its own.
const SEGMENT_MIN_REQUESTS: usize = 5;
const SEGMENT_MIN_SPREAD_TOKENS: f64 = 10_000.0;

/// Tokens of the attachments a request for assistant message `index` carries: those of its
/// segment (`segment` of a message index: the client's compactions before it) that came before
/// it.
fn carried(attachments: &[Attachment], index: usize, segment: &dyn Fn(usize) -> usize) -> u64 {
    attachments
        .iter()
        .filter(|a| a.at < index && segment(a.at) == segment(index))
        .map(|a| a.tokens as u64)
        .sum()
}

/// The least-squares slope of recorded over counted prompt tokens (1 when the counts do not
/// vary), clamped to what a tokenizer's difference can be.
fn least_squares_slope(sample: &[(f64, f64)]) -> Option<f64> {
    let n = sample.len() as f64;
    if n == 0.0 {
        return None;
    }
    let (mx, my) = (
        sample.iter().map(|p| p.0).sum::<f64>() / n,
        sample.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let var: f64 = sample.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let cov: f64 = sample.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    Some(if var > 0.0 { cov / var } else { 1.0 }.clamp(0.7, 2.0))
}

/// Rounds of finding attachments and fitting the scale again without them.
const ATTACHMENT_ROUNDS: usize = 3;

/// Growth of a recorded prompt past what the log's new messages count, below which it is taken
/// for counting noise (Claude's tokenizer against o200k varies by a few percent per message)
/// rather than content the log does not hold. Source: on `client-logs/claude-code-procrypto`
/// (2.0.76-2.1.6) the growth past the count is in jumps: 427 over 1,000 tokens (4.3M tokens),
/// the 117 over 10K (80% of them) nearly all at a slash command or skill whose files the log
/// does not hold; on the other Claude Code users' logs 3 (3K tokens).
const ATTACHMENT_MIN_TOKENS: f64 = 1_000.0;

/// The attachments that explain each request's recorded growth over the previous request of
/// its segment, at `scale_at` (of the request's message index) provider tokens per counted
/// token.
fn attachments_of(
    t: &Transcript,
    points: &[(usize, f64, f64)],
    scale_at: &dyn Fn(usize) -> f64,
    segment: &dyn Fn(usize) -> usize,
) -> Vec<Attachment> {
    points
        .windows(2)
        .filter(|w| segment(w[0].0) == segment(w[1].0))
        .filter_map(|w| {
            let (previous, next) = (w[0], w[1]);
            let excess = (next.2 - previous.2) - scale_at(next.0) * (next.1 - previous.1);
            if excess < ATTACHMENT_MIN_TOKENS {
                return None;
            }
            // The newest message the client added since the previous request.
            let at = (previous.0 + 1..next.0)
                .rev()
                .find(|&i| t.messages[i].role != Role::Assistant)?;
            Some(Attachment {
                at,
                tokens: excess.round() as usize,
            })
        })
        .collect()
}

/// The table key of sessions replayed each at its client's own window ([`client_window`]).
pub const CLIENT_WINDOW: u64 = 0;

/// The window a client log's session ran at: its model's (Claude 200K, GPT-5.x 272K,
/// `crates/ctxgc-core/data/models.toml`), or the long context (1M) when the client billed a
/// prompt larger than that (Claude Code's 1M-context sessions); a log that names no model, its
/// client's default (Codex: GPT-5.x); `None` for a transcript that is not a client's log or
/// names no model ctxgc knows.
pub fn client_window(t: &Transcript) -> Option<u64> {
    let client = t.recording.as_ref()?.client.as_str();
    // A log that names no model ran the client's default one (Codex: GPT-5.x).
    let model = t.model.as_deref().or(match client {
        c if c.starts_with("codex") => Some("gpt-5"),
        c if c.starts_with("claude") => Some("claude"),
        _ => None,
    })?;
    let window = ctxgc_core::models::known_window(model)?;
    let largest = t
        .messages
        .iter()
        .filter_map(|m| m.usage)
        .map(|u| u.prompt_tokens)
        .max()
        .unwrap_or(0);
    Some(if largest > window {
        window.max(ctxgc_core::models::LONG_CONTEXT_WINDOW)
    } else {
        window
    })
}

/// The window `t` runs at in the table of `window`: that window, or for [`CLIENT_WINDOW`] its
/// client's ([`client_window`]; a transcript that is no client's log, its model's known window,
/// else 200K).
pub fn session_window(t: &Transcript, window: u64) -> u64 {
    if window != CLIENT_WINDOW {
        return window;
    }
    client_window(t)
        .or_else(|| ctxgc_core::models::known_window(t.model.as_deref()?))
        .unwrap_or(DEFAULT_SESSION_WINDOW)
}

/// The window of a session that names no model ctxgc knows, in a table of clients' windows.
const DEFAULT_SESSION_WINDOW: u64 = 200_000;
