//! A bound on a request's prompt tokens from its session's last count. An agent's next request
//! repeats its previous one's items byte for byte and adds a few; no vocabulary makes a token
//! of less than a byte, so the new items count at most as many tokens as they have bytes. A
//! body larger in bytes than the prompt's limit then needs no view and no count while that
//! bound stays under the limit: at 100K tokens, viewing and counting every message was most
//! of the proxy's events stage (`scripts/proxy-replay`, Codex's sessions), for requests that
//! were nowhere near the window.
//!
//! What a request is sent as is a function of its bytes (its model, system, tools and items)
//! while no lineage is in force: its earlier items' trims and repeat pointers are memoised by
//! the turns before them, so the items two requests share enter as the same text. A count is
//! only reused under those conditions, checked by hashes of the bytes around the new items.

use ctxgc_core::tokens::TokenCounter;

/// Tokens allowed per new item on top of its bytes: what a trim's marker or a renamed way back
/// may add to an output, and a message's framing (each one's JSON framing is longer in bytes
/// than its framing is in tokens already).
const PER_ITEM_SLACK: usize = 64;

/// What a request ctxgc counted in full leaves for its session's next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counted {
    /// How many conversation items it had.
    items: usize,
    /// A hash of its bytes up to the end of its last item (members before the items, and the
    /// items).
    head: u64,
    /// A hash of its bytes after its last item (the array's end, and members after it).
    tail: u64,
    /// ctxgc's count of its prompt as sent (tool definitions included, not calibrated).
    tokens: usize,
}

impl Counted {
    /// `raw`, whose items lie at `item_spans`, was counted as `tokens`; `None` without items.
    pub(crate) fn of(raw: &[u8], item_spans: &[(usize, usize)], tokens: usize) -> Option<Counted> {
        let &(_, end) = item_spans.last()?;
        Some(Counted {
            items: item_spans.len(),
            head: xxhash_rust::xxh3::xxh3_64(raw.get(..end)?),
            tail: xxhash_rust::xxh3::xxh3_64(raw.get(end..)?),
            tokens,
        })
    }

    /// The most tokens `raw` (items at `item_spans`) can count as, when it is the counted
    /// request with items added after its own and nothing else changed; `None` otherwise, or
    /// when a new item may hold an image or a document (counted at a fixed size, whatever its
    /// bytes).
    pub(crate) fn bound(
        &self,
        raw: &[u8],
        item_spans: &[(usize, usize)],
        counter: &TokenCounter,
    ) -> Option<usize> {
        let shared_end = item_spans.get(self.items.checked_sub(1)?)?.1;
        let &(_, end) = item_spans.last()?;
        if xxhash_rust::xxh3::xxh3_64(raw.get(..shared_end)?) != self.head
            || xxhash_rust::xxh3::xxh3_64(raw.get(end..)?) != self.tail
        {
            return None;
        }
        let added = raw.get(shared_end..end)?;
        let fixed_size = [&b"image"[..], b"document"]
            .iter()
            .any(|kind| memchr::memmem::find(added, kind).is_some());
        if fixed_size {
            return None;
        }
        let new_items = item_spans.len() - self.items;
        Some(self.tokens + counter.most_tokens_in(added.len()) + new_items * PER_ITEM_SLACK)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxgc_core::tokens::{ProviderFamily, TokenSettings};
    use ctxgc_formats::{Api, ApiRequest};
    use serde_json::{Value, json};

    fn laid_out(messages: &[Value]) -> (Vec<u8>, Vec<(usize, usize)>, ApiRequest) {
        let body = json!({"model": "gpt-5-mini", "messages": messages, "stream": true});
        let raw = serde_json::to_vec(&body).unwrap();
        let (request, layout) =
            ApiRequest::parse_envelope_after(Api::ChatCompletions, &raw, None).unwrap();
        (raw, layout.unwrap().item_spans().to_vec(), request)
    }

    fn exact(request: &ApiRequest, counter: &mut TokenCounter) -> usize {
        let items = request.body["messages"].as_array().unwrap();
        let view = Api::ChatCompletions.wire().view(None, items).unwrap();
        view.messages.iter().map(|m| counter.count_message(m)).sum()
    }

    fn turn(i: usize, output: &str) -> [Value; 2] {
        let id = format!("call_{i}");
        [
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function",
                "function": {"name": "exec_command", "arguments": format!("{{\"cmd\":\"cat f{i}\"}}")}}]}),
            json!({"role": "tool", "tool_call_id": id, "content": output}),
        ]
    }

    #[test]
    fn the_bound_holds_for_the_next_requests_and_only_for_them() {
        let mut counter = TokenCounter::new(ProviderFamily::Openai, TokenSettings::default());
        let mut messages = vec![json!({"role": "user", "content": "Fix the build."})];
        messages.extend(turn(
            0,
            "error[E0308]: mismatched types\n  --> src/main.rs:3:5",
        ));
        let (raw, spans, request) = laid_out(&messages);
        let counted = Counted::of(&raw, &spans, exact(&request, &mut counter)).unwrap();
        // Outputs whose bytes are fewest per token: digits, CJK, emoji, escapes.
        let outputs = [
            "0123456789".repeat(300),
            "函数调用失败。".repeat(200),
            "🚀✅".repeat(150),
            "\"quoted\"\t\\path\\\n".repeat(100),
        ];
        for (i, output) in outputs.iter().enumerate() {
            messages.extend(turn(i + 1, output));
            let (raw, spans, request) = laid_out(&messages);
            let bound = counted.bound(&raw, &spans, &counter).unwrap();
            let exact = exact(&request, &mut counter);
            assert!(bound >= exact, "{bound} < {exact} after output {i}");
        }
        let (raw, spans, _) = laid_out(&messages);
        // The same request again: its own count, with nothing added.
        let again = Counted::of(&raw, &spans, 100).unwrap();
        assert_eq!(again.bound(&raw, &spans, &counter), Some(100));
        // An earlier item changed, a member changed, fewer items, an image: no bound.
        let mut edited = messages.clone();
        edited[0]["content"] = json!("Fix the tests.");
        let (raw_e, spans_e, _) = laid_out(&edited);
        assert_eq!(again.bound(&raw_e, &spans_e, &counter), None);
        let other_model =
            serde_json::to_vec(&json!({"model": "gpt-5", "messages": messages, "stream": true}))
                .unwrap();
        assert_eq!(again.bound(&other_model, &spans, &counter), None);
        let (raw_s, spans_s, _) = laid_out(&messages[..3]);
        assert_eq!(again.bound(&raw_s, &spans_s, &counter), None);
        let mut with_image = messages.clone();
        with_image.push(json!({"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "https://x/a.png"}}]}));
        let (raw_i, spans_i, _) = laid_out(&with_image);
        assert_eq!(again.bound(&raw_i, &spans_i, &counter), None);
    }

    #[test]
    fn anthropic_counts_are_bounded_with_their_correction() {
        let counter = TokenCounter::new(ProviderFamily::Anthropic, TokenSettings::default());
        let plain = TokenCounter::new(ProviderFamily::Openai, TokenSettings::default());
        assert!(counter.most_tokens_in(1000) >= plain.most_tokens_in(1000) * 6 / 5);
    }
}
