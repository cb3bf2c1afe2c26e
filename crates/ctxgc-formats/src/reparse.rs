//! Parsing a request body after the same caller's previous one.
//!
//! An agent's next request repeats its previous one and appends to it, so at 100K tokens most
//! of what a proxy parses it has parsed before. A body is parsed here with its [`Layout`]: where
//! each item of its conversation array lies in its bytes. The next body shares a byte prefix
//! with the previous one; the items wholly inside that prefix are the same items, so their
//! parsed values are cloned (clones cost a fraction of a parse: no scanning, no unescaping) and
//! the parse resumes after the last of them.
//!
//! The document is the one `serde_json` parses from the whole body (the tests hold them equal
//! on mutated bodies). Whatever this parse does not expect (a body that is not an object, a
//! repeated key, invalid JSON) returns `None`, and the caller parses the whole body, which also
//! gives the error.

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// Where a parsed body's conversation and other top-level members lie in its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// How many top-level members come before the conversation array.
    before: usize,
    /// The byte range of each item of the conversation array.
    items: Vec<(usize, usize)>,
    /// How many leading items were cloned from the previous body's parse, not parsed.
    reused: usize,
    /// The byte range of each other top-level member's value, in the body's order.
    members: Vec<MemberSpan>,
}

/// A top-level member's key and the byte range of its value.
type MemberSpan = (String, (usize, usize));

impl Layout {
    /// How many conversation items it locates.
    pub fn items(&self) -> usize {
        self.items.len()
    }

    /// How many leading items were cloned from the previous body's parse, not parsed.
    pub fn reused(&self) -> usize {
        self.reused
    }

    /// The byte range of each item of the conversation array, in order.
    pub fn item_spans(&self) -> &[(usize, usize)] {
        &self.items
    }

    /// Each top-level member but the conversation: its key and the byte range of its value, in
    /// the body's order.
    pub fn member_spans(&self) -> impl Iterator<Item = (&str, (usize, usize))> {
        self.members.iter().map(|(k, span)| (k.as_str(), *span))
    }
}

/// A body parsed before, with its layout: what a later body is parsed after.
#[derive(Debug, Clone, Copy)]
pub struct Previous<'a> {
    /// Its bytes.
    pub raw: &'a [u8],
    /// Its document as parsed (not as rewritten since).
    pub body: &'a Value,
    /// Its layout.
    pub layout: &'a Layout,
    /// How many leading bytes the body parsed after it shares with it, when the caller has
    /// counted them already ([`shared_prefix`] of the two): `None`, counted again here.
    pub shared: Option<usize>,
}

impl Previous<'_> {
    /// How many of its items a body sharing its first `common` bytes has the same. A number
    /// ends where the next byte is not a digit: only an item that closes itself (an object, an
    /// array, a string) is the same whatever follows it.
    fn items_shared(&self, common: usize) -> usize {
        let items = &self.layout.items;
        let mut shared = items.partition_point(|&(_, end)| end <= common);
        while shared > 0 && !matches!(self.raw[items[shared - 1].1 - 1], b'}' | b']' | b'"') {
            shared -= 1;
        }
        shared
    }

    /// Where the parse of a body sharing its first `common` bytes resumes: after the last item
    /// the two have the same (0: the body is parsed whole). What is left is what the parse
    /// reads.
    pub fn resumes_at(&self, common: usize) -> usize {
        match self.items_shared(common) {
            0 => 0,
            n => self.layout.items[n - 1].1,
        }
    }
}

/// A copy of what a later body's parse takes from a parsed body (its members before the
/// conversation and its conversation items), made ahead of that parse, off the request's path
/// ([`Spare::of`]): the parse then moves the items the two bodies share out of it instead of
/// cloning them, which at 100K tokens was most of the parse in the proxy. It must be a copy of
/// the very document the parse goes after ([`Previous::body`]); one whose counts do not match
/// that document's is not used.
#[derive(Debug, Clone, PartialEq)]
pub struct Spare {
    before: Map<String, Value>,
    items: Vec<Value>,
}

impl Spare {
    /// A copy of what a body parsed after `body` (laid out as `layout`, its array `items_key`)
    /// would otherwise clone from it. `None` when `body` is not such a document.
    pub fn of(body: &Value, layout: &Layout, items_key: &str) -> Option<Spare> {
        let object = body.as_object()?;
        let items = object.get(items_key)?.as_array()?;
        if items.len() != layout.items.len() || object.len() < layout.before {
            return None;
        }
        Some(Spare {
            before: object
                .iter()
                .take(layout.before)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            items: items.clone(),
        })
    }

    /// About how many items it holds (for a caller that bounds what it keeps).
    pub fn items(&self) -> usize {
        self.items.len()
    }
}

/// Parses `raw`, a JSON object, with the layout of its array `items_key` (`None` in the layout
/// when it has no such array). `None` when the body is not what this parse expects.
pub(crate) fn parse_with_layout(raw: &[u8], items_key: &str) -> Option<(Value, Option<Layout>)> {
    let mut c = Cursor { raw, at: 0 };
    c.eat(b'{')?;
    let mut map = Map::new();
    let mut layout = None;
    let mut spans = Vec::new();
    if c.peek()? == b'}' {
        c.at += 1;
    } else {
        members(&mut c, (&mut map, &mut spans), items_key, &mut layout)?;
    }
    c.end()?;
    if let Some(layout) = &mut layout {
        layout.members = spans;
    }
    Some((Value::Object(map), layout))
}

/// Parses `raw` after `previous`, cloning the items in their common byte prefix, or moving them
/// out of `spare`, a copy of them made beforehand ([`Spare::of`] of `previous.body`). `None` when
/// they share no whole item or `raw` is not what this parse expects.
pub(crate) fn parse_after(
    raw: &[u8],
    items_key: &str,
    previous: Previous<'_>,
    spare: Option<Spare>,
) -> Option<(Value, Option<Layout>)> {
    let common = previous
        .shared
        .unwrap_or_else(|| shared_prefix(raw, previous.raw));
    let layout = previous.layout;
    let shared = previous.items_shared(common);
    if shared == 0 {
        return None;
    }
    let old = previous.body.as_object()?;
    let old_items = old.get(items_key)?.as_array()?;
    if old_items.len() != layout.items.len() || old.len() < layout.before {
        return None;
    }
    let spare =
        spare.filter(|s| s.items.len() == old_items.len() && s.before.len() == layout.before);
    let (mut map, mut items) = match spare {
        Some(Spare { before, mut items }) => {
            items.truncate(shared);
            items.reserve(2);
            (before, items)
        }
        None => {
            let map: Map<String, Value> = old
                .iter()
                .take(layout.before)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let mut items = Vec::with_capacity(old_items.len() + 2);
            items.extend_from_slice(&old_items[..shared]);
            (map, items)
        }
    };
    let mut ranges = Vec::with_capacity(items.capacity());
    ranges.extend_from_slice(&layout.items[..shared]);
    let mut c = Cursor {
        raw,
        at: ranges[shared - 1].1,
    };
    if c.more(b']')? {
        elements(&mut c, &mut items, &mut ranges)?;
    }
    map.insert(items_key.to_owned(), Value::Array(items));
    // The members before the conversation lie before the shared items: the same bytes.
    let mut spans = layout.members[..layout.before.min(layout.members.len())].to_vec();
    let mut found = Some(Layout {
        before: layout.before,
        items: ranges,
        reused: shared,
        members: Vec::new(),
    });
    if c.more(b'}')? {
        members(&mut c, (&mut map, &mut spans), items_key, &mut found)?;
    }
    c.end()?;
    if let Some(found) = &mut found {
        found.members = spans;
    }
    Some((Value::Object(map), found))
}

/// A copy of `body`, parsed with `layout` after `previous` (given up here), that moves the
/// items it cloned from `previous` instead of cloning them a second time: what a caller keeps to
/// parse its next body after costs the new items and members only, and `previous` is not freed
/// item by item either. `previous` must be the document `body` was parsed after.
pub fn copy_reusing(body: &Value, layout: &Layout, items_key: &str, previous: Value) -> Value {
    let reused = layout.reused;
    let (Some(new), Value::Object(mut old)) = (body.as_object(), previous) else {
        return body.clone();
    };
    let new_items = new.get(items_key).and_then(Value::as_array);
    let (Some(Value::Array(mut items)), Some(new_items)) = (old.remove(items_key), new_items)
    else {
        return body.clone();
    };
    if items.len() < reused || new_items.len() < reused {
        return body.clone();
    }
    items.truncate(reused);
    items.extend_from_slice(&new_items[reused..]);
    let mut items = Some(Value::Array(items));
    new.iter()
        .map(|(k, v)| match items.take_if(|_| k == items_key) {
            Some(items) => (k.clone(), items),
            None => (k.clone(), v.clone()),
        })
        .collect::<Map<String, Value>>()
        .into()
}

/// How many leading bytes `a` and `b` share, compared a block at a time.
pub fn shared_prefix(a: &[u8], b: &[u8]) -> usize {
    const BLOCK: usize = 4096;
    let n = a.len().min(b.len());
    let mut at = 0;
    while at + BLOCK <= n && a[at..at + BLOCK] == b[at..at + BLOCK] {
        at += BLOCK;
    }
    at + a[at..n]
        .iter()
        .zip(&b[at..n])
        .take_while(|(x, y)| x == y)
        .count()
}

/// An object's members from a key on, through its closing brace; the array `items_key` is laid
/// out when `found` has none yet.
fn members(
    c: &mut Cursor<'_>,
    (map, spans): (&mut Map<String, Value>, &mut Vec<MemberSpan>),
    items_key: &str,
    found: &mut Option<Layout>,
) -> Option<()> {
    loop {
        let key: String = c.value()?;
        c.eat(b':')?;
        // A repeated key: the whole parse keeps the last value at the first one's place.
        if map.contains_key(&key) {
            return None;
        }
        if key == items_key && found.is_none() && c.peek()? == b'[' {
            c.at += 1;
            let before = map.len();
            let mut items = Vec::new();
            let mut ranges = Vec::new();
            if c.peek()? == b']' {
                c.at += 1;
            } else {
                elements(c, &mut items, &mut ranges)?;
            }
            map.insert(key, Value::Array(items));
            *found = Some(Layout {
                before,
                items: ranges,
                reused: 0,
                members: Vec::new(),
            });
        } else {
            c.skip_whitespace();
            let start = c.at;
            let value: Value = c.value()?;
            spans.push((key.clone(), (start, c.at)));
            map.insert(key, value);
        }
        if !c.more(b'}')? {
            return Some(());
        }
    }
}

/// An array's elements from one on, through its closing bracket, with their byte ranges.
fn elements(
    c: &mut Cursor<'_>,
    items: &mut Vec<Value>,
    ranges: &mut Vec<(usize, usize)>,
) -> Option<()> {
    loop {
        c.skip_whitespace();
        let start = c.at;
        let item: Value = c.value()?;
        ranges.push((start, c.at));
        items.push(item);
        if !c.more(b']')? {
            return Some(());
        }
    }
}

/// A position in a body.
struct Cursor<'a> {
    raw: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.raw.get(self.at) {
            self.at += 1;
        }
    }

    /// The next byte that is not whitespace.
    fn peek(&mut self) -> Option<u8> {
        self.skip_whitespace();
        self.raw.get(self.at).copied()
    }

    /// After a member or element: a comma (`true`, another follows) or the container's
    /// `close` (`false`), consumed; `None` for anything else.
    fn more(&mut self, close: u8) -> Option<bool> {
        let next = self.peek()?;
        if next != b',' && next != close {
            return None;
        }
        self.at += 1;
        Some(next == b',')
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// One JSON value, parsed by `serde_json` (with its settings and limits).
    fn value<T: DeserializeOwned>(&mut self) -> Option<T> {
        self.skip_whitespace();
        let mut stream =
            serde_json::Deserializer::from_slice(self.raw.get(self.at..)?).into_iter::<T>();
        let value = stream.next()?.ok()?;
        self.at += stream.byte_offset();
        Some(value)
    }

    /// Only whitespace is left.
    fn end(&mut self) -> Option<()> {
        self.skip_whitespace();
        (self.at == self.raw.len()).then_some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(raw: &[u8]) -> Option<Value> {
        serde_json::from_slice(raw).ok()
    }

    /// `raw` parsed with its layout, to parse later bodies after.
    fn laid_out(raw: &[u8]) -> (Value, Layout) {
        let (value, layout) = parse_with_layout(raw, "messages").unwrap();
        (value, layout.unwrap())
    }

    fn resumable<'a>(raw: &'a [u8], (body, layout): &'a (Value, Layout)) -> Previous<'a> {
        Previous {
            raw,
            body,
            layout,
            shared: None,
        }
    }

    /// A body of the shape agents send: members before and after the conversation, items with
    /// escapes, nesting, numbers and unicode.
    fn body(items: usize, spaced: bool) -> String {
        let mut messages = Vec::new();
        for i in 0..items {
            messages.push(serde_json::json!({
                "role": if i % 2 == 0 { "user" } else { "assistant" },
                "content": [{"type": "text", "text": format!("line {i}\n\t\"quoted\" \\ é 😀 {}", "x".repeat(i * 7))}],
                "n": i as f64 * 0.1 + 1e-7,
                "ok": i % 3 == 0,
                "none": null,
            }));
        }
        let v = serde_json::json!({
            "model": "m",
            "system": [{"type": "text", "text": "be brief"}],
            "messages": messages,
            "tools": [{"name": "bash", "input_schema": {"type": "object"}}],
            "max_tokens": 1024,
        });
        if spaced {
            serde_json::to_string_pretty(&v).unwrap()
        } else {
            serde_json::to_string(&v).unwrap()
        }
    }

    #[test]
    fn a_body_parses_as_the_whole_parse_does_with_its_items_laid_out() {
        for spaced in [false, true] {
            let raw = body(12, spaced);
            let (value, layout) = parse_with_layout(raw.as_bytes(), "messages").unwrap();
            assert_eq!(Some(&value), whole(raw.as_bytes()).as_ref());
            let layout = layout.unwrap();
            assert_eq!(layout.before, 2);
            assert_eq!(layout.items(), 12);
            for (i, &(start, end)) in layout.item_spans().iter().enumerate() {
                let item: Value = serde_json::from_slice(&raw.as_bytes()[start..end]).unwrap();
                assert_eq!(item, value["messages"][i]);
            }
            let spans: Vec<(&str, (usize, usize))> = layout.member_spans().collect();
            let members: Vec<&str> = spans.iter().map(|(k, _)| *k).collect();
            assert_eq!(members, ["model", "system", "tools", "max_tokens"]);
            for (key, (start, end)) in spans {
                let parsed: Value = serde_json::from_slice(&raw.as_bytes()[start..end]).unwrap();
                assert_eq!(parsed, value[key], "{key}");
            }
        }
    }

    #[test]
    fn a_longer_body_resumes_after_the_shared_items() {
        for spaced in [false, true] {
            let first = body(10, spaced);
            let parsed = laid_out(first.as_bytes());
            let previous = resumable(first.as_bytes(), &parsed);
            for next in [body(10, spaced), body(11, spaced), body(14, spaced)] {
                let (again, next_layout) =
                    parse_after(next.as_bytes(), "messages", previous, None).unwrap();
                assert_eq!(Some(&again), whole(next.as_bytes()).as_ref());
                // The shared bytes counted by the caller give the same parse.
                let common = shared_prefix(next.as_bytes(), first.as_bytes());
                let counted = Previous {
                    shared: Some(common),
                    ..previous
                };
                let told = parse_after(next.as_bytes(), "messages", counted, None).unwrap();
                assert_eq!((&told.0, &told.1), (&again, &next_layout));
                // A spare copy gives the same parse; one of another document is not used.
                let spare = Spare::of(&parsed.0, &parsed.1, "messages").unwrap();
                assert_eq!(spare.items(), 10);
                let spared = parse_after(next.as_bytes(), "messages", previous, Some(spare));
                assert_eq!(spared.as_ref(), Some(&(again.clone(), next_layout.clone())));
                let shorter = laid_out(body(9, spaced).as_bytes());
                let wrong = Spare::of(&shorter.0, &shorter.1, "messages");
                let unused = parse_after(next.as_bytes(), "messages", previous, wrong).unwrap();
                assert_eq!((&unused.0, &unused.1), (&again, &next_layout));
                // The parse resumed after the last item it reused.
                let resumed = next_layout.as_ref().unwrap();
                assert_eq!(
                    previous.resumes_at(common),
                    resumed.items[resumed.reused - 1].1
                );
                let next_layout = next_layout.unwrap();
                let (full, full_layout) = parse_with_layout(next.as_bytes(), "messages").unwrap();
                assert_eq!(again, full);
                let full_layout = full_layout.unwrap();
                assert_eq!(
                    (next_layout.before, &next_layout.items, &next_layout.members),
                    (full_layout.before, &full_layout.items, &full_layout.members)
                );
                assert_eq!((next_layout.reused, full_layout.reused), (10, 0));
                // What is kept for the next body is the same document.
                let kept = copy_reusing(&again, &next_layout, "messages", parsed.0.clone());
                assert_eq!(kept, again);
            }
        }
    }

    /// Every edit of a body at any place (a byte changed, cut, inserted, the items reordered)
    /// parses after the original as the whole parse parses it, or falls back to it.
    #[test]
    fn edited_bodies_parse_as_the_whole_parse_does_or_fall_back() {
        let first = body(6, false);
        let parsed = laid_out(first.as_bytes());
        let previous = resumable(first.as_bytes(), &parsed);
        let bytes = first.as_bytes();
        let mut edits: Vec<Vec<u8>> = Vec::new();
        for at in (0..bytes.len()).step_by(3) {
            for byte in [b'x', b'"', b',', b']', b'}', b' ', b'1', b'\\'] {
                let mut changed = bytes.to_vec();
                changed[at] = byte;
                edits.push(changed);
                let mut inserted = bytes.to_vec();
                inserted.insert(at, byte);
                edits.push(inserted);
            }
            edits.push(bytes[..at].to_vec());
            let mut cut = bytes[..at].to_vec();
            cut.extend_from_slice(&bytes[(at + 5).min(bytes.len())..]);
            edits.push(cut);
        }
        edits.push(br#"{"model":"m","messages":[1,2],"messages":[3]}"#.to_vec());
        edits.push(br#"[1,2]"#.to_vec());
        let numbers = br#"{"messages":[{"a":1},12,{"b":2}]}"#;
        let parsed_numbers = laid_out(numbers);
        let after_numbers = br#"{"messages":[{"a":1},123,{"b":2}]}"#;
        let resumed = resumable(numbers, &parsed_numbers);
        assert_eq!(
            parse_after(after_numbers, "messages", resumed, None).map(|(v, _)| v),
            whole(after_numbers)
        );
        let spare = Spare::of(&parsed.0, &parsed.1, "messages").unwrap();
        let mut checked = 0;
        for raw in &edits {
            let expected = whole(raw);
            // Moved out of a spare copy or cloned, the items parse the same.
            let spared = parse_after(raw, "messages", previous, Some(spare.clone()));
            assert_eq!(
                spared,
                parse_after(raw, "messages", previous, None),
                "{}",
                String::from_utf8_lossy(raw)
            );
            if let Some((value, layout)) = spared {
                if let Some(layout) = layout {
                    let kept = copy_reusing(&value, &layout, "messages", parsed.0.clone());
                    assert_eq!(kept, value, "{}", String::from_utf8_lossy(raw));
                    // The spans are those of the body's own parse.
                    let full = parse_with_layout(raw, "messages").and_then(|(_, l)| l);
                    let full = full.expect("a resumed body parses whole with a layout");
                    assert_eq!(
                        (&layout.items, &layout.members),
                        (&full.items, &full.members),
                        "{}",
                        String::from_utf8_lossy(raw)
                    );
                }
                assert_eq!(Some(value), expected, "{}", String::from_utf8_lossy(raw));
                checked += 1;
            }
            if let Some((value, _)) = parse_with_layout(raw, "messages") {
                assert_eq!(Some(value), expected, "{}", String::from_utf8_lossy(raw));
            }
        }
        assert!(checked > 100, "only {checked} edits resumed");
    }

    #[test]
    fn bodies_sharing_no_whole_item_or_with_repeated_keys_fall_back() {
        let first = body(3, false);
        let parsed = laid_out(first.as_bytes());
        let previous = resumable(first.as_bytes(), &parsed);
        let other = first.replacen("line 0", "LINE 0", 1);
        assert!(parse_after(other.as_bytes(), "messages", previous, None).is_none());
        let common = shared_prefix(other.as_bytes(), first.as_bytes());
        assert_eq!(previous.resumes_at(common), 0, "read whole");
        let repeated = first.replacen("\"max_tokens\"", "\"model\"", 1);
        assert!(parse_after(repeated.as_bytes(), "messages", previous, None).is_none());
        assert!(parse_with_layout(repeated.as_bytes(), "messages").is_none());
        // Not an array: parsed, without a layout.
        let (v, l) = parse_with_layout(br#"{"input":"hi"}"#, "input").unwrap();
        assert_eq!(v, serde_json::json!({"input": "hi"}));
        assert!(l.is_none());
    }
}
