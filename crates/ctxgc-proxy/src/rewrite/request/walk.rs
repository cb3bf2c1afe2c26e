//! Where a session's walk of its tool results ended, kept for its next request.
//!
//! An agent's next request resends the items of its previous one byte for byte and appends to
//! them. What the walk worked out for those items (each result's facts, what it entered the
//! history as, the repeats it can point to, what replaces it) is a function of those items alone
//! (and of the window and the hides before them), so the next walk goes on from where the
//! previous one ended instead of walking, hashing and looking up every earlier turn again: at
//! 100K tokens that had been most of the rewrite, and it touched every byte of the history.
//!
//! Whether the items are the same is told by their bytes (one hash of the span they lie in),
//! which the parse located. A walk goes on only when that holds, the window and the hides it
//! applied are the same, the first new result does not join its last turn, and every original
//! it may have had to store is stored: then it gives what a walk from nothing gives.

use ctxgc_core::ContentId;

use super::{Entered, Progress, SlotsFrom};
use crate::rewrite::lineage::HiddenResult;

/// A session's walk as its latest request left it: where it ended, and the body it walked.
pub(super) struct Walk {
    /// The key of the conversation array and the window it trimmed for.
    pub(super) items_key: &'static str,
    pub(super) window: u64,
    /// How many items the body held, and the hash of the bytes they lie in.
    pub(super) items: usize,
    pub(super) items_hash: u64,
    /// Where a reading of the results after its items starts.
    pub(super) next_from: SlotsFrom,
    /// Where it ended: the results it saw enter as sent are read from the next body.
    pub(super) progress: Progress<'static>,
}

impl Walk {
    /// Whether a walk of a body of `items_key` trimmed for `window`, whose first items hash to
    /// `prefix_hash` over the span of as many items as this walk covered, goes on from this
    /// one, with the lineage's `hidden` results (in the order they apply) and `stored` telling
    /// which originals the store holds. (Whether its first new result joins the last turn is
    /// told once its results are read.)
    pub(super) fn goes_on(
        &self,
        (items_key, window): (&str, u64),
        prefix_hash: Option<u64>,
        hidden: &[&HiddenResult],
        stored: &dyn Fn(ContentId) -> bool,
    ) -> bool {
        let p = &self.progress;
        let same_items = prefix_hash == Some(self.items_hash) && !p.entered.is_empty();
        // The hides that apply up to its last turn are the ones it applied.
        let applied = hidden.iter().take_while(|h| h.from_result <= p.turn_start);
        let same_hides = applied.clone().count() == p.hides.len()
            && applied
                .zip(&p.hides)
                .all(|(h, (call_id, from))| h.call_id == *call_id && h.from_result == *from);
        self.items_key == items_key
            && self.window == window
            && same_items
            && same_hides
            && p.recallable.iter().all(|&id| stored(id))
    }

    /// About how many bytes it holds (its memo is bounded by bytes).
    pub(super) fn weight(&self) -> usize {
        let p = &self.progress;
        let metas: usize = p
            .metas
            .iter()
            .map(|(k, m)| 160 + k.len() + m.first_error.as_ref().map_or(0, String::len))
            .sum();
        let entered: usize = p
            .entered
            .iter()
            .map(|e| match e {
                Entered::Whole { within, .. } => 16 + within.len(),
                _ => 0,
            })
            .sum();
        256 + p.repeats.weight()
            + p.entered.capacity() * 24
            + entered
            + p.whole.len() * 32
            + metas
            + p.replaced
                .iter()
                .map(|(at, _)| 64 + at.len())
                .sum::<usize>()
            + p.spans.capacity() * 24
            + p.recallable.capacity() * 8
            + p.hides.iter().map(|(c, _)| 48 + c.len()).sum::<usize>()
    }
}

/// The hash of the bytes the first `prefix` items of a body lie in (`None` when it has fewer),
/// and of those all its items lie in: one pass over them.
pub(super) fn items_hashes(
    raw: &[u8],
    spans: &[(usize, usize)],
    prefix: usize,
) -> (Option<u64>, Option<u64>) {
    let (Some(&(start, _)), Some(&(_, end))) = (spans.first(), spans.last()) else {
        return (None, None);
    };
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    let split = match prefix.checked_sub(1).and_then(|last| spans.get(last)) {
        Some(&(_, split)) => {
            let Some(bytes) = raw.get(start..split) else {
                return (None, None);
            };
            hasher.update(bytes);
            Some(split)
        }
        None => None,
    };
    let prefix_hash = split.map(|_| hasher.digest());
    let Some(rest) = raw.get(split.unwrap_or(start)..end) else {
        return (None, None);
    };
    hasher.update(rest);
    (prefix_hash, Some(hasher.digest()))
}

#[cfg(test)]
mod tests {
    use super::items_hashes;

    #[test]
    fn the_hashes_cover_the_items_spans() {
        let raw = b"{\"messages\":[\"a\",\"bb\",\"ccc\"]}";
        let spans = [(13, 16), (17, 21), (22, 27)];
        let whole = xxhash_rust::xxh3::xxh3_64(&raw[13..27]);
        let two = xxhash_rust::xxh3::xxh3_64(&raw[13..21]);
        assert_eq!(items_hashes(raw, &spans, 2), (Some(two), Some(whole)));
        assert_eq!(items_hashes(raw, &spans, 0), (None, Some(whole)));
        assert_eq!(items_hashes(raw, &spans, 4), (None, Some(whole)));
        assert_eq!(items_hashes(raw, &[], 1), (None, None));
        assert_eq!(items_hashes(raw, &[(13, 99)], 1), (None, None));
    }
}
