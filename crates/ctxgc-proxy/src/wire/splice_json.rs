//! Rewriting a JSON body by splicing its bytes: the values at a few JSON pointers are replaced
//! by new strings and everything else is copied as the client sent it.
//!
//! Re-serialising a whole agent request costs about as much as parsing it (0.4 ms for 550 KB);
//! a rewrite that only swaps tool outputs needs neither. The scanner walks only into the
//! containers on a path to a target and skips everything else with a string-aware bracket
//! count. Anything unexpected (a target not found, malformed input) returns `None` and the
//! caller serialises the parsed value instead.

/// Replaces the value at each pointer with the given JSON text (already encoded); optionally
/// appends one top-level member (`key`, string value) before the closing brace. `None` when a
/// pointer is not found.
pub fn splice(
    raw: &[u8],
    replacements: &[(&str, &[u8])],
    append: Option<(&str, &str)>,
) -> Option<Vec<u8>> {
    splice_located(raw, None, replacements, append)
}

/// Where a body's conversation items lie in its bytes, as its parse found them: the items'
/// array (a top-level member) and each item's byte range.
#[derive(Debug, Clone, Copy)]
pub struct Located<'a> {
    /// The array's key.
    pub key: &'a str,
    /// Each item's start and end (exclusive) in the body.
    pub items: &'a [(usize, usize)],
}

/// [`splice`], going straight to the items that hold the targets when `located` says where
/// they lie: the rest of the body is copied, not scanned (at 100K tokens the scan was most of
/// a rewrite's splice). Targets outside the items, or items that do not hold them where
/// `located` says, fall back to the scan.
pub fn splice_located(
    raw: &[u8],
    located: Option<Located<'_>>,
    replacements: &[(&str, &[u8])],
    append: Option<(&str, &str)>,
) -> Option<Vec<u8>> {
    splice_known(raw, located, (replacements, &[]), append).map(|(out, _)| out)
}

/// A JSON pointer and the JSON text that replaces the value there.
pub type Replacement<'a> = (&'a str, &'a [u8]);

/// A byte range of a body: start, and end (exclusive).
pub type Range = (usize, usize);

/// [`splice_located`] where the values of some targets are known to lie where an earlier body
/// with the same bytes there had them (`known[k]`, the byte range of the value
/// `replacements[k]` replaces): only the others are looked for. Also gives where each target's
/// value lay, in the order of `replacements`, for the next body.
pub fn splice_known(
    raw: &[u8],
    located: Option<Located<'_>>,
    (replacements, known): (&[Replacement<'_>], &[Option<Range>]),
    append: Option<(&str, &str)>,
) -> Option<(Vec<u8>, Vec<Range>)> {
    if replacements.is_empty() {
        // Nothing inside the body changes: only its ends are looked at.
        let out = match append {
            Some((key, value)) => append_member(raw, key, value),
            None => Some(raw.to_vec()),
        };
        return out.map(|out| (out, Vec::new()));
    }
    let targets: Vec<&str> = replacements.iter().map(|(p, _)| *p).collect();
    let (start, end, spans) = located
        .and_then(|located| find_located(raw, &targets, located, known))
        .or_else(|| find(raw, &targets))?;
    let mut lay = vec![(0, 0); replacements.len()];
    for &(from, to, which) in &spans {
        lay[which] = (from, to);
    }
    let extra: usize = replacements.iter().map(|(_, t)| t.len() + 2).sum();
    let mut out = Vec::with_capacity(raw.len() + extra + 64);
    let mut at = 0;
    for &(from, to, which) in &spans {
        out.extend_from_slice(&raw[at..from]);
        out.extend_from_slice(replacements[which].1);
        at = to;
    }
    match append {
        None => out.extend_from_slice(&raw[at..]),
        Some((key, value)) => {
            // The body is an object: insert before its closing brace.
            let close = end - 1;
            if raw.get(start) != Some(&b'{') || raw[close] != b'}' || at > close {
                return None;
            }
            push_member(&mut out, raw, (at, start, close), (key, value))?;
        }
    }
    Some((out, lay))
}

/// Copies `raw[at..]` into `out` with the member `key: value` inserted before the closing brace
/// at `close` of the object opened at `start` (a comma first unless the object is empty).
fn push_member(
    out: &mut Vec<u8>,
    raw: &[u8],
    (at, start, close): (usize, usize, usize),
    (key, value): (&str, &str),
) -> Option<()> {
    out.extend_from_slice(&raw[at..close]);
    let empty = raw[start + 1..close].iter().all(u8::is_ascii_whitespace);
    if !empty {
        out.push(b',');
    }
    serde_json::to_writer(&mut *out, key).ok()?;
    out.push(b':');
    serde_json::to_writer(&mut *out, value).ok()?;
    out.extend_from_slice(&raw[close..]);
    Some(())
}

/// `raw`, a JSON object already parsed as one (a request body the proxy read), with the member
/// `key: value` appended before its closing brace. Only the ends of the body are looked at: a
/// valid object's first and last non-space bytes are its braces, and it is empty when nothing
/// but space lies between. `None` when the ends are not braces.
pub fn append_member(raw: &[u8], key: &str, value: &str) -> Option<Vec<u8>> {
    let start = raw.iter().position(|b| !b.is_ascii_whitespace())?;
    let close = raw.iter().rposition(|b| !b.is_ascii_whitespace())?;
    if raw[start] != b'{' || raw[close] != b'}' || close <= start {
        return None;
    }
    let mut out = Vec::with_capacity(raw.len() + key.len() + value.len() + 8);
    push_member(&mut out, raw, (0, start, close), (key, value))?;
    Some(out)
}

/// Replaces the first `count` elements of the top-level array `key` with `elements` (JSON
/// values, comma-separated, already encoded): what a lineage in force sends instead of the
/// client's first messages, spliced in without re-serialising the rest. `None` when the array
/// or its elements are not found.
pub fn splice_elements(
    raw: &[u8],
    (key, item_spans): (&str, Option<&[(usize, usize)]>),
    count: usize,
    elements: &[u8],
) -> Option<Vec<u8>> {
    let last = count.checked_sub(1)?;
    let first_target = format!("/{key}/0");
    let last_target = format!("/{key}/{last}");
    let targets: Vec<&str> = if last == 0 {
        vec![&first_target]
    } else {
        vec![&first_target, &last_target]
    };
    let (_, _, spans) = item_spans
        .and_then(|items| find_located(raw, &targets, Located { key, items }, &[]))
        .or_else(|| find(raw, &targets))?;
    let (from, to) = (spans.first()?.0, spans.last()?.1);
    let mut out = Vec::with_capacity(raw.len() + elements.len());
    out.extend_from_slice(&raw[..from]);
    out.extend_from_slice(elements);
    out.extend_from_slice(&raw[to..]);
    Some(out)
}

/// A target's value: its start and end in the bytes, and which target it is.
type Span = (usize, usize, usize);

/// Where each target's value is in `raw` (start, end, target index), in byte order, and where
/// the document starts and ends; `None` unless the whole of `raw` is one JSON value holding
/// every target once.
fn find(raw: &[u8], targets: &[&str]) -> Option<(usize, usize, Vec<Span>)> {
    let mut spans: Vec<Span> = Vec::with_capacity(targets.len());
    // Sorted, so that each value on the way asks whether it is a target, or holds one, in
    // log time: each item of a long session compared every target (100 targets in a 395 KB
    // body: 644 -> 499 us, `cargo bench -p ctxgc-proxy --bench rewrite`).
    let mut sorted: Vec<(&str, usize)> = targets.iter().copied().zip(0..).collect();
    sorted.sort_unstable();
    let mut scanner = Scanner {
        raw,
        targets: &sorted,
        found: &mut spans,
    };
    let start = scanner.ws(0);
    let end = scanner.value(start, "")?;
    if scanner.ws(end) != raw.len() || spans.len() != targets.len() {
        return None;
    }
    spans.sort_unstable();
    Some((start, end, spans))
}

/// [`find`] for targets inside conversation items whose byte ranges `located` gives: only those
/// items are scanned. `None` when a target is not inside an item, or an item does not end where
/// `located` says.
fn find_located(
    raw: &[u8],
    targets: &[&str],
    located: Located<'_>,
    known: &[Option<(usize, usize)>],
) -> Option<(usize, usize, Vec<Span>)> {
    let start = raw.iter().position(|b| !b.is_ascii_whitespace())?;
    let end = raw.iter().rposition(|b| !b.is_ascii_whitespace())? + 1;
    let mut spans: Vec<Span> = Vec::with_capacity(targets.len());
    // A known value opens and closes where it is said to lie (a string, an object, an array),
    // or nothing is taken on trust.
    for (which, &(from, to)) in known
        .iter()
        .enumerate()
        .filter_map(|(k, span)| Some((k, span.as_ref()?)))
        .take(targets.len())
    {
        let closed = from + 2 <= to
            && to <= end
            && matches!(
                (raw[from], raw[to - 1]),
                (b'"', b'"') | (b'{', b'}') | (b'[', b']')
            );
        if !closed {
            return None;
        }
        spans.push((from, to, which));
    }
    let mut sorted: Vec<(&str, usize)> = targets
        .iter()
        .copied()
        .zip(0..)
        .filter(|(_, k)| known.get(*k).is_none_or(Option::is_none))
        .collect();
    sorted.sort_unstable();
    let prefix = format!("/{}/", located.key);
    let mut items = sorted
        .iter()
        .map(|(target, _)| {
            let rest = target.strip_prefix(&prefix)?;
            rest.split('/').next()?.parse::<usize>().ok()
        })
        .collect::<Option<Vec<usize>>>()?;
    items.sort_unstable();
    items.dedup();
    let mut scanner = Scanner {
        raw,
        targets: &sorted,
        found: &mut spans,
    };
    for i in items {
        let &(from, to) = located.items.get(i)?;
        if from >= to || to > end || !matches!(raw[from], b'{' | b'[') {
            return None;
        }
        if scanner.value(from, &format!("{prefix}{i}"))? != to {
            return None;
        }
    }
    if spans.len() != targets.len() {
        return None;
    }
    spans.sort_unstable();
    Some((start, end, spans))
}

struct Scanner<'a, 'b> {
    raw: &'a [u8],
    /// The targets' pointers in byte order, each with its index among the targets.
    targets: &'b [(&'b str, usize)],
    found: &'b mut Vec<Span>,
}

/// Whether `target` sorts before every pointer inside `pointer` (`pointer/...`).
fn before_children(target: &str, pointer: &str) -> bool {
    let target = target.as_bytes();
    for (k, &b) in pointer
        .as_bytes()
        .iter()
        .chain(std::iter::once(&b'/'))
        .enumerate()
    {
        match target.get(k) {
            None => return true,
            Some(&c) if c != b => return c < b,
            Some(_) => {}
        }
    }
    false
}

impl Scanner<'_, '_> {
    fn ws(&self, mut at: usize) -> usize {
        while at < self.raw.len() && self.raw[at].is_ascii_whitespace() {
            at += 1;
        }
        at
    }

    /// The end of the string starting at `at` (just past its closing quote). Tool outputs
    /// escape a newline every few dozen bytes, so quotes are searched for, not escapes: a quote
    /// preceded by an odd run of backslashes is escaped.
    fn string_end(&self, at: usize) -> Option<usize> {
        let mut i = at + 1;
        loop {
            i += memchr::memchr(b'"', &self.raw[i..])?;
            let backslashes = self.raw[at + 1..i]
                .iter()
                .rev()
                .take_while(|&&b| b == b'\\')
                .count();
            if backslashes % 2 == 0 {
                return Some(i + 1);
            }
            i += 1;
        }
    }

    /// Skips any value at `at`; returns its end.
    fn skip(&self, at: usize) -> Option<usize> {
        match *self.raw.get(at)? {
            b'"' => self.string_end(at),
            b'{' | b'[' => {
                let mut depth = 0usize;
                let mut i = at;
                loop {
                    let k = memchr::memchr3(b'"', b'[', b'{', &self.raw[i..]);
                    // Closing brackets matter too: scan byte by byte between strings.
                    let next = match k {
                        Some(k) => i + k,
                        None => self.raw.len(),
                    };
                    for j in i..next {
                        match self.raw[j] {
                            b']' | b'}' => {
                                depth = depth.checked_sub(1)?;
                                if depth == 0 {
                                    return Some(j + 1);
                                }
                            }
                            _ => {}
                        }
                    }
                    match self.raw.get(next)? {
                        b'"' => i = self.string_end(next)?,
                        _ => {
                            depth += 1;
                            i = next + 1;
                        }
                    }
                }
            }
            _ => {
                let mut i = at;
                while i < self.raw.len()
                    && !matches!(self.raw[i], b',' | b'}' | b']')
                    && !self.raw[i].is_ascii_whitespace()
                {
                    i += 1;
                }
                (i > at).then_some(i)
            }
        }
    }

    /// Which target `pointer` is, if one, and whether a target lies inside it.
    fn wanted(&self, pointer: &str) -> (Option<usize>, bool) {
        let exact = self
            .targets
            .binary_search_by(|(t, _)| (*t).cmp(pointer))
            .ok()
            .map(|at| self.targets[at].1);
        let first_inside = self
            .targets
            .partition_point(|(t, _)| before_children(t, pointer));
        let inside = self.targets.get(first_inside).is_some_and(|(t, _)| {
            t.len() > pointer.len() && t.starts_with(pointer) && t.as_bytes()[pointer.len()] == b'/'
        });
        (exact, inside)
    }

    /// Scans the value at `at`, whose pointer is `pointer`; returns its end.
    fn value(&mut self, at: usize, pointer: &str) -> Option<usize> {
        let (exact, inside) = self.wanted(pointer);
        if let Some(k) = exact {
            let end = self.skip(at)?;
            self.found.push((at, end, k));
            return Some(end);
        }
        if !inside {
            return self.skip(at);
        }
        match *self.raw.get(at)? {
            b'{' => {
                let mut i = self.ws(at + 1);
                if self.raw.get(i) == Some(&b'}') {
                    return Some(i + 1);
                }
                loop {
                    if self.raw.get(i) != Some(&b'"') {
                        return None;
                    }
                    let key_end = self.string_end(i)?;
                    let key: String = serde_json::from_slice(&self.raw[i..key_end]).ok()?;
                    let child = format!("{pointer}/{}", key.replace('~', "~0").replace('/', "~1"));
                    i = self.ws(key_end);
                    if self.raw.get(i) != Some(&b':') {
                        return None;
                    }
                    i = self.ws(i + 1);
                    let end = self.value(i, &child)?;
                    i = self.ws(end);
                    match self.raw.get(i)? {
                        b',' => i = self.ws(i + 1),
                        b'}' => return Some(i + 1),
                        _ => return None,
                    }
                }
            }
            b'[' => {
                let mut i = self.ws(at + 1);
                if self.raw.get(i) == Some(&b']') {
                    return Some(i + 1);
                }
                let mut index = 0usize;
                loop {
                    let child = format!("{pointer}/{index}");
                    let end = self.value(i, &child)?;
                    i = self.ws(end);
                    index += 1;
                    match self.raw.get(i)? {
                        b',' => i = self.ws(i + 1),
                        b']' => return Some(i + 1),
                        _ => return None,
                    }
                }
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_is_appended_to_an_object_as_splice_would() {
        for raw in [
            &br#"{"model":"gpt-5","messages":[{"role":"user","content":"}"}]}"#[..],
            b" {\n \"a\": {\"b\": 1}\n}\n",
            b"{}",
            b"{ }",
        ] {
            let appended = splice(raw, &[], Some(("prompt_cache_retention", "24h"))).unwrap();
            let mut expected: serde_json::Value = serde_json::from_slice(raw).unwrap();
            expected["prompt_cache_retention"] = "24h".into();
            let v: serde_json::Value = serde_json::from_slice(&appended).unwrap();
            assert_eq!(v, expected, "{}", String::from_utf8_lossy(raw));
            // Only the ends are rewritten: the client's bytes come first, unchanged.
            let close = raw.iter().rposition(|&b| b == b'}').unwrap();
            assert_eq!(&appended[..close], &raw[..close]);
        }
        assert!(append_member(b"[1]", "k", "v").is_none());
        assert!(append_member(b"  ", "k", "v").is_none());
    }
    use proptest::prelude::*;
    use serde_json::{Value, json};

    /// Splices `reps` (pointer, text) encoding each text as a JSON string.
    fn splice_texts(
        raw: &[u8],
        reps: &[(String, String)],
        append: Option<(&str, &str)>,
    ) -> Option<Vec<u8>> {
        let owned: Vec<Vec<u8>> = reps
            .iter()
            .map(|(_, t)| serde_json::to_vec(t).unwrap())
            .collect();
        let encoded: Vec<(&str, &[u8])> = reps
            .iter()
            .zip(&owned)
            .map(|((p, _), j)| (p.as_str(), j.as_slice()))
            .collect();
        splice(raw, &encoded, append)
    }

    fn apply(
        value: &Value,
        replacements: &[(String, String)],
        append: Option<(&str, &str)>,
    ) -> Value {
        let mut v = value.clone();
        for (p, t) in replacements {
            *v.pointer_mut(p).unwrap() = Value::String(t.clone());
        }
        if let Some((k, val)) = append {
            v[k] = json!(val);
        }
        v
    }

    /// A body of `items` under `"messages"`, with each item's byte range as a parse finds it.
    /// `spans` with the ranges of items `unread` made empty: a scan that reads them fails.
    fn short_of(spans: &[(usize, usize)], unread: &[usize]) -> Vec<(usize, usize)> {
        let mut spans = spans.to_vec();
        for &i in unread {
            spans[i] = (0, 0);
        }
        spans
    }

    fn laid_out(items: &[Value]) -> (Vec<u8>, Vec<(usize, usize)>) {
        let mut raw = br#"{"model": "m", "messages": ["#.to_vec();
        let mut spans = Vec::new();
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                raw.extend_from_slice(b", ");
            }
            let start = raw.len();
            raw.extend_from_slice(&serde_json::to_vec(item).unwrap());
            spans.push((start, raw.len()));
        }
        raw.extend_from_slice(br#"], "stream": true}"#);
        (raw, spans)
    }

    #[test]
    fn a_located_splice_scans_only_the_targets_items_and_agrees_with_the_scan() {
        let items: Vec<Value> = (0..40)
            .map(|i| json!({"role": "tool", "content": format!("out \"{i}\" ]}}"), "n": [i]}))
            .collect();
        let (raw, spans) = laid_out(&items);
        let located = Located {
            key: "messages",
            items: &spans,
        };
        let encode = |reps: &[(String, String)]| -> Vec<(String, Vec<u8>)> {
            reps.iter()
                .map(|(p, t)| (p.clone(), serde_json::to_vec(t).unwrap()))
                .collect()
        };
        let reps: Vec<(String, String)> = [3, 30, 31, 4, 39]
            .iter()
            .map(|i| (format!("/messages/{i}/content"), format!("cut {i}")))
            .chain([("/messages/7".to_owned(), "whole".to_owned())])
            .collect();
        let owned = encode(&reps);
        let encoded: Vec<(&str, &[u8])> = owned
            .iter()
            .map(|(p, j)| (p.as_str(), j.as_slice()))
            .collect();
        let append = Some(("prompt_cache_key", "s"));
        let scanned = splice(&raw, &encoded, append).unwrap();
        let targets: Vec<&str> = encoded.iter().map(|(p, _)| *p).collect();
        // Found through the items alone, where the scan finds them.
        let direct = find_located(&raw, &targets, located, &[]).unwrap();
        assert_eq!(Some(direct), find(&raw, &targets));
        assert_eq!(
            splice_located(&raw, Some(located), &encoded, append).unwrap(),
            scanned
        );
        let parsed: Value = serde_json::from_slice(&scanned).unwrap();
        let body: Value = serde_json::from_slice(&raw).unwrap();
        assert_eq!(parsed, apply(&body, &reps, append));
        // A target outside the items, or ranges that do not fit the bytes, go back to the scan
        // (same bytes out).
        let model = [("/model", &b"\"m2\""[..]), encoded[0]];
        assert!(find_located(&raw, &["/model"], located, &[]).is_none());
        assert_eq!(
            splice_located(&raw, Some(located), &model, None),
            splice(&raw, &model, None)
        );
        let shifted: Vec<(usize, usize)> = spans.iter().map(|&(s, e)| (s + 1, e + 1)).collect();
        let wrong = Located {
            key: "messages",
            items: &shifted,
        };
        assert!(find_located(&raw, &targets, wrong, &[]).is_none());
        assert_eq!(
            splice_located(&raw, Some(wrong), &encoded, append).unwrap(),
            scanned
        );
        let short = Located {
            key: "messages",
            items: &spans[..10],
        };
        assert!(find_located(&raw, &targets, short, &[]).is_none());
        // Where each value lay, for the next body: given back, those are not looked for (the
        // items that hold them are not even read), and the bytes are the same.
        let (out, lay) = splice_known(&raw, Some(located), (&encoded, &[]), append).unwrap();
        assert_eq!(out, scanned);
        assert_eq!(&raw[lay[0].0..lay[0].1], br#""out \"3\" ]}""#);
        let mut known: Vec<Option<(usize, usize)>> = lay.iter().copied().map(Some).collect();
        known[1] = None;
        let blind = Located {
            key: "messages",
            items: &short_of(&spans, &[3, 4, 39, 7]),
        };
        assert!(find_located(&raw, &targets, blind, &known).is_some());
        assert!(find_located(&raw, &targets, blind, &[]).is_none());
        let again = splice_known(&raw, Some(blind), (&encoded, &known), append).unwrap();
        assert_eq!(again, (scanned.clone(), lay.clone()));
        // A known range that is not a string there: nothing is taken on trust.
        known[0] = Some((lay[0].0 + 1, lay[0].1));
        assert!(find_located(&raw, &targets, located, &known).is_none());
        assert_eq!(
            splice_known(&raw, Some(located), (&encoded, &known), append).unwrap(),
            (scanned.clone(), lay)
        );
        // The lineage's splice of leading elements goes to the first and last items alike.
        assert_eq!(
            splice_elements(&raw, ("messages", Some(&spans)), 5, b"{}"),
            splice_elements(&raw, ("messages", None), 5, b"{}")
        );
    }

    #[test]
    fn targets_among_siblings_whose_pointers_share_a_prefix_are_each_found_once() {
        // `/messages/1` holds `/messages/1/content` and not `/messages/10/content`, which
        // sorts after it; `/messages/1/content` itself is a target only where it is asked for.
        let messages: Vec<Value> = (0..120)
            .map(|i| json!({"role": "tool", "content": format!("output {i}"), "n": i}))
            .collect();
        let value = json!({"model": "m", "messages": messages});
        let raw = serde_json::to_vec(&value).unwrap();
        let reps: Vec<(String, String)> = [1, 10, 11, 100, 101, 119, 2, 12]
            .iter()
            .map(|i| (format!("/messages/{i}/content"), format!("cut {i}")))
            .chain([("/model".to_owned(), "m2".to_owned())])
            .collect();
        let out = splice_texts(&raw, &reps, None).unwrap();
        let parsed: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(parsed, apply(&value, &reps, None));
        assert_eq!(parsed["messages"][3]["content"], "output 3");
        // A target asked for twice, or one that is not there, finds nothing to splice.
        let twice = [reps[0].clone(), reps[0].clone()];
        assert!(splice_texts(&raw, &twice, None).is_none());
        let absent = [("/messages/120/content".to_owned(), "x".to_owned())];
        assert!(splice_texts(&raw, &absent, None).is_none());
        for (target, pointer, before) in [
            ("/messages/1/content", "/messages/1", false),
            ("/messages/1", "/messages/1", true),
            ("/messages/0/content", "/messages/1", true),
            ("/messages/10/content", "/messages/1", false),
            ("/messages/1.5", "/messages/1", true),
        ] {
            assert_eq!(
                before_children(target, pointer),
                before,
                "{target} {pointer}"
            );
        }
    }

    #[test]
    fn replaces_nested_strings_and_keeps_the_rest_verbatim() {
        let raw = br#"{ "model": "m", "messages": [ {"role": "user", "content": "a \"quoted\" [x] {y}"},
            {"role":"tool","content":[{"type":"text","text":"old \\ text"}]} ], "a/b": {"~k": "v"} }"#;
        let reps = vec![
            ("/messages/0/content".to_owned(), "new \"one\"".to_owned()),
            (
                "/messages/1/content/0/text".to_owned(),
                "two\nlines".to_owned(),
            ),
            ("/a~1b/~0k".to_owned(), "w".to_owned()),
        ];
        let out = splice_texts(raw, &reps, Some(("prompt_cache_key", "s-1"))).unwrap();
        let parsed: Value = serde_json::from_slice(&out).unwrap();
        let value: Value = serde_json::from_slice(raw).unwrap();
        assert_eq!(
            parsed,
            apply(&value, &reps, Some(("prompt_cache_key", "s-1")))
        );
        assert!(
            out.starts_with(br#"{ "model": "m", "messages": [ {"role": "user", "content": "new"#)
        );
    }

    #[test]
    fn missing_pointers_and_bad_input_give_none() {
        let raw = br#"{"messages": []}"#;
        assert!(splice(raw, &[("/messages/0/content", b"\"x\"")], None).is_none());
        assert!(splice(br#"{"a": "#, &[("/a", b"\"x\"")], None).is_none());
        assert_eq!(
            splice(b"{}", &[], Some(("k", "v"))).unwrap(),
            br#"{"k":"v"}"#.to_vec()
        );
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| json!(f)),
            ".{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec(("[a-z/~\"\\\\ ]{0,5}", inner), 0..6)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    fn pointers(v: &Value, at: String, out: &mut Vec<String>) {
        out.push(at.clone());
        match v {
            Value::Object(m) => m.iter().for_each(|(k, v)| {
                pointers(
                    v,
                    format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                )
            }),
            Value::Array(a) => a
                .iter()
                .enumerate()
                .for_each(|(i, v)| pointers(v, format!("{at}/{i}"), out)),
            _ => {}
        }
    }

    proptest! {
        #[test]
        fn splicing_equals_replacing_in_the_parsed_value(
            body in prop::collection::vec(("[a-z]{1,4}", arb_json()), 1..5),
            pick in prop::collection::vec(any::<prop::sample::Index>(), 0..4),
            text in ".{0,20}",
            pretty in any::<bool>(),
        ) {
            let value = Value::Object(body.into_iter().collect());
            let raw = if pretty { serde_json::to_vec_pretty(&value).unwrap() } else { serde_json::to_vec(&value).unwrap() };
            let mut all = Vec::new();
            pointers(&value, String::new(), &mut all);
            // Non-overlapping targets: drop any that lies inside another.
            let mut chosen: Vec<String> = Vec::new();
            for i in pick {
                let p = all[i.index(all.len())].clone();
                if p.is_empty() || chosen.iter().any(|c| p == *c || p.starts_with(&format!("{c}/")) || c.starts_with(&format!("{p}/"))) {
                    continue;
                }
                chosen.push(p);
            }
            let reps: Vec<(String, String)> = chosen.into_iter().map(|p| (p, text.clone())).collect();
            let out = splice_texts(&raw, &reps, Some(("zz_key", "v"))).expect("found");
            let parsed: Value = serde_json::from_slice(&out).unwrap();
            prop_assert_eq!(parsed, apply(&value, &reps, Some(("zz_key", "v"))));
        }
    }

    #[test]
    fn the_first_elements_of_an_array_are_replaced_by_others() {
        let raw = br#"{"model": "m", "messages": [ {"role":"user","content":"a"}, {"role":"tool","content":"b"} ,{"x":[1,2]}], "tail": 1}"#;
        let out =
            splice_elements(raw, ("messages", None), 2, br#"{"s":1},{"s":2},{"s":3}"#).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"model": "m", "messages": [{"s":1},{"s":2},{"s":3},{"x":[1,2]}], "tail": 1})
        );
        let one = splice_elements(raw, ("messages", None), 1, br#"{"s":0}"#).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&one).unwrap();
        assert_eq!(v["messages"][0], serde_json::json!({"s": 0}));
        assert_eq!(v["messages"].as_array().unwrap().len(), 3);
        assert!(splice_elements(raw, ("messages", None), 4, b"{}").is_none());
        assert!(splice_elements(raw, ("input", None), 1, b"{}").is_none());
        assert!(splice_elements(raw, ("messages", None), 0, b"{}").is_none());
    }
}
