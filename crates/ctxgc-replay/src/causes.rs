//! Why the cache missed: every cache write a client log recorded, with its cause.
//!
//! A request reads from the cache what an earlier request wrote. When the previous request's
//! whole prompt is read back, the write is the conversation's growth. When it is not, the write
//! re-processes part of the prefix, and the log says why: the client compacted its history
//! between the two requests, or the pause exceeded the cache's TTL, or else something in the
//! prompt changed, at the first message past what was read (the system prompt or the tool
//! definitions when not even the fixed prefix was read).

use ctxgc_core::{Role, Transcript};
use serde::Serialize;

use crate::cache::anthropic::{TTL_1H_MS, TTL_MS};
use crate::client::{Attachment, Calibration, client_prompt};

/// Why a request wrote to the cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "cause", rename_all = "snake_case")]
pub enum WriteCause {
    /// The session's first request.
    ColdStart,
    /// The previous prompt was read back; only new messages were written.
    Growth,
    /// The pause since the previous request exceeded the cache's TTL.
    TtlExpiry {
        /// Milliseconds since the previous request.
        idle_ms: i64,
    },
    /// The client compacted its own history since the previous request.
    ClientCompaction,
    /// The prompt changed before the end of the previous one.
    PrefixChange {
        /// Index of the first message past what was read (None: inside the system prompt or
        /// the tool definitions).
        message: Option<usize>,
        /// That message's role.
        role: Option<&'static str>,
    },
}

impl WriteCause {
    /// The cause's name in tables.
    pub fn name(&self) -> &'static str {
        match self {
            WriteCause::ColdStart => "cold start",
            WriteCause::Growth => "growth",
            WriteCause::TtlExpiry { .. } => "TTL expiry",
            WriteCause::ClientCompaction => "client compaction",
            WriteCause::PrefixChange { .. } => "prefix change",
        }
    }
}

/// One recorded cache write.
#[derive(Debug, Clone, Serialize)]
pub struct CacheWrite {
    /// Session id.
    pub session: String,
    /// Index of the assistant message the request produced.
    pub request: usize,
    /// Tokens written.
    pub written: u64,
    /// Tokens read.
    pub read: u64,
    /// Why.
    #[serde(flatten)]
    pub cause: WriteCause,
}

/// Names of the causes, in table order.
pub const CAUSES: &[&str] = &[
    "growth",
    "TTL expiry",
    "client compaction",
    "prefix change",
    "cold start",
];

/// Every recorded cache write of a client log, classified; `calibration` and `attachments`
/// (content the log does not hold) place each write's first unread message.
pub fn classify(
    t: &Transcript,
    calibration: Calibration,
    attachments: &[Attachment],
) -> Vec<CacheWrite> {
    let Some(recording) = &t.recording else {
        return Vec::new();
    };
    let mut counter = crate::counting::counter();
    let mut tokens: Vec<f64> = t
        .messages
        .iter()
        .map(|m| counter.count_message(m) as f64 * calibration.scale)
        .collect();
    for a in attachments {
        if let Some(slot) = tokens.get_mut(a.at) {
            *slot += a.tokens as f64;
        }
    }
    let mut out = Vec::new();
    let mut previous: Option<(usize, u64, bool)> = None; // index, prompt tokens, 1h TTL
    for (index, m) in t.messages.iter().enumerate() {
        let Some(usage) = m.usage.filter(|_| m.role == Role::Assistant) else {
            continue;
        };
        let written = usage.cache_write_tokens;
        let read = usage.cached_tokens;
        let ttl_1h = usage.cache_write_1h_tokens * 2 > usage.cache_write_tokens;
        if written > 0 {
            let cause = match previous {
                None => WriteCause::ColdStart,
                Some((prev, prev_prompt, prev_1h)) => {
                    let slack = 256 + prev_prompt / 20;
                    let idle = recording
                        .sent_at(index)
                        .zip(recording.sent_at(prev))
                        .map(|(now, then)| now - then);
                    let ttl = if prev_1h { TTL_1H_MS } else { TTL_MS };
                    if read + slack >= prev_prompt {
                        WriteCause::Growth
                    } else if recording
                        .compactions
                        .iter()
                        .any(|c| c.at > prev && c.at <= index)
                    {
                        WriteCause::ClientCompaction
                    } else if let Some(idle_ms) = idle.filter(|&ms| ms > ttl) {
                        WriteCause::TtlExpiry { idle_ms }
                    } else {
                        let message = first_unread(t, &tokens, calibration, index, read);
                        WriteCause::PrefixChange {
                            message,
                            role: message.map(|i| t.messages[i].role.as_str()),
                        }
                    }
                }
            };
            out.push(CacheWrite {
                session: t.id.clone(),
                request: index,
                written,
                read,
                cause,
            });
        }
        previous = Some((index, usage.prompt_tokens, ttl_1h));
    }
    out
}

/// The first message of request `index`'s prompt that ends past `read` tokens.
fn first_unread(
    t: &Transcript,
    tokens: &[f64],
    calibration: Calibration,
    index: usize,
    read: u64,
) -> Option<usize> {
    let mut end = calibration.prefix_tokens as f64;
    if read as f64 <= end {
        return None;
    }
    let (range, system) = client_prompt(t, index);
    (0..system).chain(range).find(|&i| {
        end += tokens[i];
        end > read as f64
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxgc_core::{ClientCompaction, Message, RecordedUsage};

    fn assistant(prompt: u64, read: u64, written: u64) -> Message {
        Message {
            usage: Some(RecordedUsage {
                prompt_tokens: prompt,
                cached_tokens: read,
                cache_write_tokens: written,
                ..RecordedUsage::default()
            }),
            ..Message::text(Role::Assistant, "ok")
        }
    }

    #[test]
    fn writes_are_told_apart() {
        let minute = 60_000;
        let messages = vec![
            Message::text(Role::User, "a"),
            assistant(10_000, 0, 10_000), // cold start
            Message::text(Role::User, "b"),
            assistant(10_500, 10_000, 500), // growth
            Message::text(Role::User, "c"),
            assistant(11_000, 0, 11_000), // 10 minutes later: TTL
            Message::text(Role::User, "summary"),
            assistant(3_000, 0, 3_000), // after the client's compaction
            Message::text(Role::User, "d"),
            assistant(3_500, 0, 3_500), // nothing read, no pause: the system prompt changed
        ];
        let times = [0, 0, 1, 1, 11, 11, 12, 12, 13, 13];
        let t = crate::test_logs::recorded(
            messages,
            times.iter().map(|m| Some(m * minute)).collect(),
            vec![ClientCompaction { at: 6, len: 1 }],
        );
        let causes: Vec<&str> = classify(
            &t,
            Calibration {
                prefix_tokens: 2_000,
                scale: 1.0,
            },
            &[],
        )
        .iter()
        .map(|w| w.cause.name())
        .collect();
        assert_eq!(
            causes,
            [
                "cold start",
                "growth",
                "TTL expiry",
                "client compaction",
                "prefix change"
            ]
        );
    }
}
