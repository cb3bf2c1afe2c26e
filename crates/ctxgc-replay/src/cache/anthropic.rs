//! Anthropic prompt caching with explicit breakpoints.
//!
//! Source: Anthropic, "Prompt caching" (docs.claude.com/en/docs/build-with-claude/prompt-caching,
//! 2025): at most 4 `cache_control` breakpoints per request; a breakpoint writes one cache entry,
//! the prefix up to that block; on a later request the system checks for a hit at each
//! breakpoint and walks back at most 20 blocks from it looking for an entry written earlier;
//! prompts shorter than the model's minimum (1,024 tokens for Sonnet/Opus, 2,048 for Haiku)
//! are not cached; writes cost 1.25x input (5-minute TTL), reads 0.1x.
//!
//! Tokens from the start up to the hit are read; tokens from the hit up to the last breakpoint
//! are written (a new entry at each breakpoint); tokens after the last breakpoint are plain
//! input. An entry lives 5 minutes (1 hour when the request that wrote it asked for it) from when
//! it was last written or read: a read refreshes it by its own lifetime, so an hour-long entry
//! read by a request that asks for 5 minutes still lives an hour (an entry's lifetime is set
//! when it is written; mixing lifetimes in one prompt is documented, and a read is a refresh of
//! the entry, not a write). Requests of unknown time never expire anything.

use std::collections::HashMap;

use super::{Block, CacheKind, CacheModel, CacheRules, SentAt, Served};
use ctxgc_core::provider_cache;

/// The default cache lifetime.
pub const TTL_MS: i64 = provider_cache::ANTHROPIC_TTL_SECS as i64 * 1_000;
/// The extended lifetime (`cache_control: {"type": "ephemeral", "ttl": "1h"}`).
pub const TTL_1H_MS: i64 = provider_cache::ANTHROPIC_LONG_TTL_SECS as i64 * 1_000;

/// One cache entry.
#[derive(Debug, Clone, Copy)]
struct Entry {
    expires: Option<i64>,
    /// The lifetime it was written with, by which a read refreshes it.
    ttl_ms: i64,
    /// Kept warm outside the session ([`Block::warm`]): never dropped when it expires.
    warm: bool,
}

/// The cache of one session.
#[derive(Debug)]
pub struct AnthropicCache {
    /// Entry (prefix chain hash) -> when it expires (None: never, written at an unknown time)
    /// and the lifetime it was written with.
    entries: HashMap<u64, Entry>,
    /// How many entries there were after the latest sweep of the expired ones: the next
    /// sweep comes when they have doubled, so what a long session holds stays bounded by its
    /// live entries at a constant cost per request.
    swept_len: usize,
    rules: CacheRules,
}

impl AnthropicCache {
    /// A cache with these rules.
    pub fn new(rules: CacheRules) -> AnthropicCache {
        AnthropicCache {
            entries: HashMap::new(),
            swept_len: 0,
            rules: CacheRules {
                max_breakpoints: rules.max_breakpoints.max(1),
                lookback_blocks: rules.lookback_blocks.max(1),
                ..rules
            },
        }
    }

    /// A cache with the documented rules and a model's minimum cacheable prompt.
    pub fn documented(min_cacheable: usize) -> AnthropicCache {
        AnthropicCache::new(CacheRules::documented(CacheKind::Anthropic, min_cacheable))
    }

    /// The newest live entry at most `lookback` content blocks back from breakpoint `bp`
    /// (the breakpoint's own block counts; a message of several blocks counts them all).
    fn lookup(
        &self,
        blocks: &[Block],
        bp: usize,
        lookback: usize,
        now: Option<i64>,
    ) -> Option<usize> {
        let mut counted = 0usize;
        for k in (0..=bp).rev() {
            if counted >= lookback {
                return None;
            }
            if self.live(&blocks[k], now) {
                return Some(k);
            }
            counted += blocks[k].parts.max(1) as usize;
        }
        None
    }

    /// The lifetime a request asks for its writes.
    fn ttl_ms(&self, at: Option<SentAt>) -> i64 {
        let ttl = match at {
            Some(SentAt { long_ttl: true, .. }) => self.rules.long_ttl_ms.or(self.rules.ttl_ms),
            _ => self.rules.ttl_ms,
        };
        ttl.unwrap_or(i64::MAX / 4)
    }

    /// A new entry for `block` written at `at`.
    fn written(&self, block: &Block, at: Option<SentAt>) -> Entry {
        let ttl_ms = self.ttl_ms(at);
        Entry {
            expires: at.map(|a| a.ms + ttl_ms),
            ttl_ms,
            warm: block.warm,
        }
    }

    /// Drops the entries expired at `now` once they may have doubled since the last sweep
    /// (an expired entry is never read again: a block kept warm outside the session aside).
    fn sweep(&mut self, now: Option<i64>) {
        let Some(now) = now else {
            return;
        };
        if self.entries.len() > 2 * self.swept_len + 64 {
            self.entries
                .retain(|_, e| e.warm || e.expires.is_none_or(|x| now <= x));
            self.swept_len = self.entries.len();
        }
    }

    /// A read at `now` refreshes the entry by its own lifetime.
    fn refresh(&mut self, chain: u64, now: Option<i64>) {
        if let Some(entry) = self.entries.get_mut(&chain) {
            entry.expires = now.map(|now| now + entry.ttl_ms);
        }
    }

    fn live(&self, block: &Block, now: Option<i64>) -> bool {
        match (self.entries.get(&block.chain), now) {
            (None, _) => false,
            (
                Some(Entry {
                    expires: Some(expires),
                    ..
                }),
                Some(now),
            ) => block.warm || now <= *expires,
            (Some(_), _) => true,
        }
    }
}

impl CacheModel for AnthropicCache {
    fn serve_at(&mut self, blocks: &[Block], at: Option<SentAt>) -> Served {
        let now = at.map(|a| a.ms);
        let (max_breakpoints, lookback) = (self.rules.max_breakpoints, self.rules.lookback_blocks);
        let min_cacheable = self.rules.min_tokens;
        let total: usize = blocks.iter().map(|b| b.tokens).sum();
        let mut ends = Vec::with_capacity(blocks.len());
        let mut acc = 0;
        for b in blocks {
            acc += b.tokens;
            ends.push(acc);
        }
        // The API rejects more than 4 breakpoints; keep the last 4, as clients place them.
        let mut breakpoints: Vec<usize> = blocks
            .iter()
            .enumerate()
            .filter(|(_, b)| b.breakpoint)
            .map(|(i, _)| i)
            .collect();
        if breakpoints.len() > max_breakpoints {
            breakpoints.drain(..breakpoints.len() - max_breakpoints);
        }
        let mut hit_end = 0usize; // tokens read from the cache
        for &bp in &breakpoints {
            if let Some(k) = self.lookup(blocks, bp, lookback, now) {
                hit_end = hit_end.max(ends[k]);
                self.refresh(blocks[k].chain, now);
            }
        }
        let last_bp_end = breakpoints.last().map_or(0, |&bp| ends[bp]);
        let mut written = 0;
        for &bp in &breakpoints {
            // A live entry at a breakpoint was just read and refreshed by its own lifetime;
            // anywhere else the breakpoint makes a new entry with this request's lifetime.
            if ends[bp] >= min_cacheable && !self.live(&blocks[bp], now) {
                let entry = self.written(&blocks[bp], at);
                self.entries.insert(blocks[bp].chain, entry);
            }
        }
        self.sweep(now);
        if last_bp_end >= min_cacheable && last_bp_end > hit_end {
            written = last_bp_end - hit_end;
        }
        Served {
            cached: hit_end,
            written,
            written_long: if at.is_some_and(|a| a.long_ttl) {
                written
            } else {
                0
            },
            uncached: total - hit_end - written,
        }
    }

    fn preload(&mut self, blocks: &[Block], tokens: usize, at: Option<SentAt>) {
        // The earlier session's last breakpoint ended where the read ends.
        if let Some(last) = super::within(blocks, tokens).last() {
            let entry = self.written(last, at);
            self.entries.insert(last.chain, entry);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::blocks;

    fn with_breakpoints(mut b: Vec<Block>, at: &[usize]) -> Vec<Block> {
        for &i in at {
            b[i].breakpoint = true;
        }
        b
    }

    #[test]
    fn writes_then_reads_at_breakpoints() {
        let mut cache = AnthropicCache::documented(1_024);
        // System 2,000 tokens (breakpoint), then two messages, breakpoint on the last.
        let r1 = with_breakpoints(blocks(&[(1, 2_000), (2, 300), (3, 200)]), &[0, 2]);
        assert_eq!(
            cache.serve(&r1),
            Served {
                cached: 0,
                written: 2_500,
                written_long: 0,
                uncached: 0
            }
        );
        // Next turn adds two messages; the lookback from the new last block finds the entry
        // at block 2 (two blocks back): 2,500 read, 700 written.
        let r2 = with_breakpoints(
            blocks(&[(1, 2_000), (2, 300), (3, 200), (4, 400), (5, 300)]),
            &[0, 4],
        );
        assert_eq!(
            cache.serve(&r2),
            Served {
                cached: 2_500,
                written: 700,
                written_long: 0,
                uncached: 0
            }
        );
    }

    #[test]
    fn an_edit_more_than_20_blocks_back_misses_all_but_the_system_entry() {
        let mut cache = AnthropicCache::documented(1_024);
        let mut spec: Vec<(u64, usize)> = vec![(1, 3_000)];
        spec.extend((2..=40).map(|i| (i, 100)));
        let r1 = with_breakpoints(blocks(&spec), &[0, 39]);
        cache.serve(&r1);
        // Rewrite block 5 (an event), then append one block: the last breakpoint's lookback
        // covers blocks 21..=40 only; no entry there matches the new chain. The system entry
        // still hits.
        spec[5].0 = 999;
        spec.push((41, 100));
        let r2 = with_breakpoints(blocks(&spec), &[0, 40]);
        let served = cache.serve(&r2);
        assert_eq!(served.cached, 3_000, "only the system prefix is read");
        assert_eq!(
            served.written,
            40 * 100,
            "everything after the system entry is written again"
        );
        // Had the previous request's last block been within 20 blocks, it would have hit.
        let mut short: Vec<(u64, usize)> = vec![(1, 3_000)];
        short.extend((2..=10).map(|i| (i, 100)));
        let mut cache = AnthropicCache::documented(1_024);
        cache.serve(&with_breakpoints(blocks(&short), &[0, 9]));
        short.push((11, 100));
        assert_eq!(
            cache
                .serve(&with_breakpoints(blocks(&short), &[0, 10]))
                .cached,
            3_900
        );
    }

    /// The lookback counts content blocks: a turn of parallel tool calls can put the previous
    /// entry out of reach although it is only a few messages back.
    #[test]
    fn the_lookback_counts_content_blocks_not_messages() {
        let mut cache = AnthropicCache::documented(1_024);
        let r1 = with_breakpoints(blocks(&[(1, 3_000), (2, 100)]), &[0, 1]);
        cache.serve(&r1);
        // One message with 12 tool calls, then one with their 12 results: 2 messages, 24 blocks.
        let mut r2 = with_breakpoints(blocks(&[(1, 3_000), (2, 100), (3, 300), (4, 900)]), &[0, 3]);
        r2[2].parts = 12;
        r2[3].parts = 12;
        let served = cache.serve(&r2);
        assert_eq!(served.cached, 3_000, "only the system entry is in reach");
        // The same two messages as single blocks are within reach.
        let mut cache = AnthropicCache::documented(1_024);
        cache.serve(&r1);
        let r2 = with_breakpoints(blocks(&[(1, 3_000), (2, 100), (3, 300), (4, 900)]), &[0, 3]);
        assert_eq!(cache.serve(&r2).cached, 3_100);
    }

    #[test]
    fn entries_expire_after_their_ttl_unless_read() {
        let at = |minutes: i64, long_ttl: bool| {
            Some(SentAt {
                ms: minutes * 60_000,
                long_ttl,
            })
        };
        let r = with_breakpoints(blocks(&[(1, 2_000), (2, 300)]), &[0, 1]);
        let mut cache = AnthropicCache::documented(1_024);
        assert_eq!(cache.serve_at(&r, at(0, false)).written, 2_300);
        // Read at minute 4 refreshes the entry: still there at minute 8.
        assert_eq!(cache.serve_at(&r, at(4, false)).cached, 2_300);
        assert_eq!(cache.serve_at(&r, at(8, false)).cached, 2_300);
        // Idle for 6 minutes: gone, written again.
        let served = cache.serve_at(&r, at(14, false));
        assert_eq!((served.cached, served.written), (0, 2_300));
        // With the one-hour TTL, a 30-minute pause still hits.
        let mut cache = AnthropicCache::documented(1_024);
        cache.serve_at(&r, at(0, true));
        assert_eq!(cache.serve_at(&r, at(30, true)).cached, 2_300);
        // Unknown times never expire.
        let mut cache = AnthropicCache::documented(1_024);
        cache.serve(&r);
        assert_eq!(cache.serve(&r).cached, 2_300);
    }

    /// An entry keeps the lifetime it was written with: read by a request that asks for five
    /// minutes, an hour-long entry still lives an hour, and the request writes only its own
    /// growth with five minutes.
    #[test]
    fn an_hour_long_entry_read_by_a_five_minute_request_keeps_its_hour() {
        let at = |minutes: i64, long_ttl: bool| {
            Some(SentAt {
                ms: minutes * 60_000,
                long_ttl,
            })
        };
        let mut cache = AnthropicCache::documented(1_024);
        let r1 = with_breakpoints(blocks(&[(1, 2_000), (2, 3_000)]), &[0, 1]);
        let served = cache.serve_at(&r1, at(0, true));
        assert_eq!((served.written, served.written_long), (5_000, 5_000));
        // One minute later, five minutes asked: the hour entry is read, the growth written.
        let r2 = with_breakpoints(blocks(&[(1, 2_000), (2, 3_000), (3, 400)]), &[0, 2]);
        let served = cache.serve_at(&r2, at(1, false));
        assert_eq!(
            (served.cached, served.written, served.written_long),
            (5_000, 400, 0)
        );
        // Twenty minutes later the five-minute entry is gone, the hour entry is not.
        let r3 = with_breakpoints(
            blocks(&[(1, 2_000), (2, 3_000), (3, 400), (4, 600)]),
            &[0, 3],
        );
        let served = cache.serve_at(&r3, at(21, false));
        assert_eq!((served.cached, served.written), (5_000, 1_000));
    }

    /// What a long session holds is bounded by its live entries: expired ones are swept, the
    /// entries of blocks kept warm outside the session kept.
    #[test]
    fn expired_entries_are_swept() {
        let mut cache = AnthropicCache::documented(1_024);
        for i in 0..2_000u64 {
            let mut r = with_breakpoints(blocks(&[(1, 2_000), (i + 2, 300)]), &[0, 1]);
            r[0].warm = true;
            // Ten minutes apart: each request's own entry has expired by the next.
            let at = Some(SentAt {
                ms: i as i64 * 600_000,
                long_ttl: false,
            });
            let served = cache.serve_at(&r, at);
            if i > 0 {
                assert_eq!(served.cached, 2_000, "the warm prefix is still read");
            }
        }
        assert!(
            cache.entries.len() < 200,
            "{} entries held",
            cache.entries.len()
        );
    }

    /// A session that resumes an earlier one: its first request reads what that one cached
    /// (the log records it), as far as whole messages go, and the entry expires as any other.
    #[test]
    fn a_resumed_session_reads_what_the_earlier_one_cached() {
        let at = |minutes: i64| {
            Some(SentAt {
                ms: minutes * 60_000,
                long_ttl: false,
            })
        };
        let r = with_breakpoints(
            blocks(&[(1, 2_000), (2, 30_000), (3, 40_000), (4, 5_000)]),
            &[0, 3],
        );
        let mut cache = AnthropicCache::documented(1_024);
        // Recorded: 71,800 read (the provider's count; the replay's ends at 72,000).
        cache.preload(&r, 71_800, at(0));
        let served = cache.serve_at(&r, at(0));
        assert_eq!((served.cached, served.written), (72_000, 5_000));
        // Without a preload the first request writes everything.
        let mut fresh = AnthropicCache::documented(1_024);
        assert_eq!(fresh.serve_at(&r, at(0)).written, 77_000);
        // A preload past its TTL is gone.
        let mut late = AnthropicCache::documented(1_024);
        late.preload(&r, 71_800, at(0));
        assert_eq!(late.serve_at(&r, at(6)).cached, 0);
    }

    #[test]
    fn below_the_minimum_nothing_is_cached() {
        let mut cache = AnthropicCache::documented(2_048);
        let r = with_breakpoints(blocks(&[(1, 1_500), (2, 100)]), &[0, 1]);
        assert_eq!(
            cache.serve(&r),
            Served {
                cached: 0,
                written: 0,
                written_long: 0,
                uncached: 1_600
            }
        );
        assert_eq!(cache.serve(&r).cached, 0);
    }
}
