//! What the client's own requests would have been billed without ctxgc: the replay lab's cache
//! model of the session's provider ([`ctxgc_replay::cache`], with the rules of its price
//! table, the model `none` is validated with against billed usage) run on the requests as the
//! clients sent them, at the times they came. Beside what the upstream billed for what was
//! sent, it says what ctxgc saved in the provider's own terms.
//!
//! Off the request path: each request's bytes (shared, not copied) go to a blocking task after
//! it was forwarded, with the byte ranges of its items when the request path's parse found
//! them ([`ctxgc_formats::Layout`]: a session's bodies after the first, on a proxy serving one
//! request at a time), so that the body is not scanned a second time. A request is cut into
//! blocks as the lab cuts one: its system prompt and tools, then each item of its conversation,
//! each with a hash of the prefix so far and its tokens, estimated from its bytes (`[trim]
//! bytes_per_token`) and scaled by the session's calibration to the upstream's counts. The
//! client's own breakpoints and TTL are read from the items that carry them.

use std::collections::HashMap;
use std::sync::Mutex;

use ctxgc_core::store::SessionId;
use ctxgc_formats::{Api, Layout};
use ctxgc_replay::cache::{Block, CacheKind, CacheModel, SentAt, Served, chain};
use serde_json::value::RawValue;

/// Sessions whose client-side cache is simulated, at most (the least recently used go first).
const MAX_SESSIONS: usize = 10_000;

/// One session's simulated cache.
struct Simulated {
    model: Box<dyn CacheModel>,
    /// When it was last used (a counter): the least recently used leave a full table.
    used: u64,
}

/// Requests waiting to be simulated, at most: each holds its body, so under a load the
/// simulation cannot keep up with, a request is not simulated (and its session's figure becomes
/// unknown) rather than bodies piling up in memory. One thread simulates, off the async
/// workers (a thread per request had cost the soak 9 MB of resident memory).
const QUEUE: usize = 2;

/// One of the client's requests to simulate.
pub(crate) struct Job {
    pub(crate) session: SessionId,
    pub(crate) api: Api,
    pub(crate) model: Option<String>,
    /// The client, where the lab's table has cache values of its own for it ([`crate::intake::identity::client_of`]).
    pub(crate) client: Option<&'static str>,
    pub(crate) raw: bytes::Bytes,
    /// Where `raw`'s items and members lie, when the request path's parse found it.
    pub(crate) layout: Option<Layout>,
    pub(crate) at_ms: i64,
}

/// Every session's simulated cache of its client's own requests, and the queue to its thread.
pub(crate) struct ClientBills {
    sessions: Mutex<HashMap<SessionId, Simulated>>,
    clock: std::sync::atomic::AtomicU64,
    queue: std::sync::mpsc::SyncSender<Job>,
    /// Taken by the thread when it starts.
    jobs: Mutex<Option<std::sync::mpsc::Receiver<Job>>>,
}

impl Default for ClientBills {
    fn default() -> Self {
        let (queue, jobs) = std::sync::mpsc::sync_channel(QUEUE);
        ClientBills {
            sessions: Mutex::default(),
            clock: std::sync::atomic::AtomicU64::new(0),
            queue,
            jobs: Mutex::new(Some(jobs)),
        }
    }
}

/// How the client's request would have been served, and the model its session is priced as.
pub(crate) struct ClientServed {
    pub(crate) served: Served,
}

impl ClientBills {
    /// Queues a request for the thread; `false` when the queue is full.
    pub(crate) fn offer(&self, job: Job) -> bool {
        self.queue.try_send(job).is_ok()
    }

    /// The queue's receiving end, once: whoever gets it starts the thread.
    pub(crate) fn take_jobs(&self) -> Option<std::sync::mpsc::Receiver<Job>> {
        self.jobs.lock().ok()?.take()
    }

    /// Runs the session's simulated cache on one request of the client (`raw`, of `api`, for
    /// `model`, laid out by `layout` when known) sent at `at_ms`, with `bytes_per_token` and the
    /// session's `calibration`.
    pub(crate) fn serve(
        &self,
        session: &SessionId,
        (api, model, client): (Api, Option<&str>, Option<&str>),
        (raw, layout): (&[u8], Option<&Layout>),
        at_ms: i64,
        (bytes_per_token, calibration): (f64, f64),
    ) -> Option<ClientServed> {
        let bytes_per_token = bytes_per_token.max(1.0) / calibration.max(0.1);
        let (blocks, long) = blocks_of(api, (raw, layout), bytes_per_token)?;
        let catalog = ctxgc_replay::prices::builtin_shared();
        let fallback = match api {
            Api::Messages => CacheKind::Anthropic,
            Api::Gemini => CacheKind::Gemini,
            _ => CacheKind::Openai,
        };
        let price = catalog.price_of(model, fallback).price;
        let kind = catalog.cache_of(&price);
        let used = self
            .clock
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut sessions = self.sessions.lock().ok()?;
        if !sessions.contains_key(session) && sessions.len() >= MAX_SESSIONS {
            // The least recently used tenth leaves.
            let mut ages: Vec<(u64, SessionId)> =
                sessions.iter().map(|(k, s)| (s.used, k.clone())).collect();
            ages.sort_unstable_by_key(|(u, _)| *u);
            for (_, k) in ages.into_iter().take(MAX_SESSIONS / 10) {
                sessions.remove(&k);
            }
        }
        let entry = sessions
            .entry(session.clone())
            .or_insert_with(|| Simulated {
                model: kind.new_model(catalog.rules_for_client(kind, &price, client)),
                used,
            });
        entry.used = used;
        let served = entry.model.serve_at(
            &blocks,
            Some(SentAt {
                ms: at_ms,
                long_ttl: long,
            }),
        );
        Some(ClientServed { served })
    }
}

/// The top-level members of a request, borrowed from its bytes (their JSON text).
type Members<'a> = HashMap<std::borrow::Cow<'a, str>, &'a [u8]>;

/// A request's top-level members and the items of its conversation array (`items_key`): from
/// `layout` when known, else read from its bytes. Either way the same members and items.
fn split<'a>(
    raw: &'a [u8],
    layout: Option<&Layout>,
    items_key: &'static str,
) -> Option<(Members<'a>, Vec<&'a [u8]>)> {
    let laid_out = layout.and_then(|layout| {
        let span = |(start, end): (usize, usize)| raw.get(start..end);
        let items = layout
            .item_spans()
            .iter()
            .map(|&s| span(s))
            .collect::<Option<Vec<_>>>()?;
        let members = layout
            .member_spans()
            .map(|(key, s)| Some((key.to_owned().into(), span(s)?)))
            .collect::<Option<Members<'a>>>()?;
        Some((members, items))
    });
    laid_out.or_else(|| split_request(raw, items_key))
}

/// A request's top-level members and the items of its conversation array (`items_key`), read
/// in one pass over its bytes (reading the members, then the array again, read the bulk twice).
/// `None` when it is not a JSON object with that array.
fn split_request<'a>(
    raw: &'a [u8],
    items_key: &'static str,
) -> Option<(Members<'a>, Vec<&'a [u8]>)> {
    use serde::de::{DeserializeSeed, MapAccess, Visitor};

    struct Split(&'static str);
    type Parts<'a> = (
        HashMap<std::borrow::Cow<'a, str>, &'a RawValue>,
        Option<Vec<&'a RawValue>>,
    );

    impl<'de> Visitor<'de> for Split {
        type Value = Parts<'de>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Parts<'de>, A::Error> {
            let mut members = HashMap::new();
            let mut items = None;
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                if key == self.0 {
                    items = Some(map.next_value::<Vec<&'de RawValue>>()?);
                } else {
                    members.insert(key, map.next_value::<&'de RawValue>()?);
                }
            }
            Ok((members, items))
        }
    }

    impl<'de> DeserializeSeed<'de> for Split {
        type Value = Parts<'de>;

        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Parts<'de>, D::Error> {
            d.deserialize_map(self)
        }
    }

    let mut de = serde_json::Deserializer::from_slice(raw);
    let (members, items) = Split(items_key).deserialize(&mut de).ok()?;
    de.end().ok()?;
    let members = members
        .into_iter()
        .map(|(k, v)| (k, v.get().as_bytes()))
        .collect();
    let items = items?.into_iter().map(|v| v.get().as_bytes()).collect();
    Some((members, items))
}

/// A request's blocks as the lab cuts them (system prompt and tools, then each item), with
/// `bytes_per_token` bytes to a token, and whether it asks for the long lifetime. `None` for a
/// body that is not a JSON object with the API's conversation array.
fn blocks_of(
    api: Api,
    (raw, layout): (&[u8], Option<&Layout>),
    bytes_per_token: f64,
) -> Option<(Vec<Block>, bool)> {
    let wire = api.wire();
    let (members, items) = split(raw, layout, wire.items_key())?;
    let tokens = |bytes: usize| ((bytes as f64 / bytes_per_token).ceil() as usize).max(1);
    // A breakpoint moves from request to request (clients mark their latest message): the
    // content it marks is what is cached, so blocks are hashed without their `cache_control`.
    // The block's hash and tokens, and whether it carries a breakpoint (one search of its
    // text for the key serves both).
    let block = |text: &[u8]| {
        let marked = memchr::memmem::find(text, CACHE_CONTROL.as_bytes()).is_some();
        let content = if marked {
            // JSON text is UTF-8 (a body that is not was never parsed this far).
            let text = String::from_utf8_lossy(text);
            std::borrow::Cow::Owned(without_cache_control(&text).into_owned().into_bytes())
        } else {
            std::borrow::Cow::Borrowed(text)
        };
        (
            (xxhash_rust::xxh3::xxh3_64(&content), tokens(content.len())),
            marked,
        )
    };
    let mut head = Vec::new();
    for key in wire.system_key().into_iter().chain(["tools"]) {
        if let Some(v) = members.get(key) {
            head.extend_from_slice(v);
        }
    }
    let mut parts: Vec<(u64, usize)> = Vec::with_capacity(items.len() + 1);
    let mut marks: Vec<bool> = Vec::with_capacity(items.len() + 1);
    let texts = (!head.is_empty())
        .then_some(head.as_slice())
        .into_iter()
        .chain(items.iter().copied());
    for text in texts {
        let (part, marked) = block(text);
        parts.push(part);
        marks.push(marked);
    }
    let long = asks_for_the_hour(raw)
        || members
            .get("prompt_cache_retention")
            .is_some_and(|v| *v == b"\"24h\"");
    let mut blocks = chain(parts);
    for (block, marked) in blocks.iter_mut().zip(marks) {
        block.breakpoint = marked;
    }
    Some((blocks, long))
}

const CACHE_CONTROL: &str = "\"cache_control\"";

/// Whether a request's bytes ask for Anthropic's hour on a breakpoint (`"ttl":"1h"`, with or
/// without a space), found with one substring search per `"ttl"` key, not a window per byte.
fn asks_for_the_hour(raw: &[u8]) -> bool {
    memchr::memmem::find_iter(raw, b"\"ttl\":").any(|at| {
        let value = &raw[at + 6..];
        let value = value.strip_prefix(b" ").unwrap_or(value);
        value.starts_with(b"\"1h\"")
    })
}

/// `text` (JSON) without its `"cache_control": {...}` members.
fn without_cache_control(text: &str) -> std::borrow::Cow<'_, str> {
    const KEY: &str = CACHE_CONTROL;
    if !text.contains(KEY) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(KEY) {
        // The member's object: from its `{` to the matching `}` (its values are short strings
        // without braces).
        let after = &rest[at + KEY.len()..];
        let open = after.find('{');
        let close = open.and_then(|o| after[o..].find('}').map(|c| o + c));
        let Some(close) = close else {
            break;
        };
        out.push_str(rest[..at].trim_end_matches([' ', ',']));
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sid() -> SessionId {
        SessionId::new("t.s")
    }

    /// A growing Anthropic conversation with the client's own breakpoint on its latest message:
    /// the second request reads what the first wrote; after a pause past five minutes it
    /// writes it all again; a client asking for the hour keeps it.
    #[test]
    fn the_hour_is_found_however_the_client_spaced_it() {
        assert!(asks_for_the_hour(
            br#"{"cache_control":{"type":"ephemeral","ttl":"1h"}}"#
        ));
        assert!(asks_for_the_hour(
            br#"{"cache_control": {"ttl": "1h", "type": "ephemeral"}}"#
        ));
        assert!(!asks_for_the_hour(
            br#"{"cache_control":{"type":"ephemeral","ttl":"5m"}}"#
        ));
        assert!(!asks_for_the_hour(br#"{"text":"ttl 1h","x":""ttl""}"#));
        assert!(
            !asks_for_the_hour(br#"{"a":""ttl":"}"#),
            "ends after the key"
        );
    }

    #[test]
    fn the_clients_own_requests_are_served_by_the_labs_cache_model() {
        let bills = ClientBills::default();
        let body = |n: usize, ttl: &str| {
            let messages: Vec<String> = (0..n)
                .map(|i| {
                    let cc = if i + 1 == n {
                        format!(r#","cache_control":{{"type":"ephemeral"{ttl}}}"#)
                    } else {
                        String::new()
                    };
                    format!(
                        r#"{{"role":"{}","content":[{{"type":"text","text":"{}"{cc}}}]}}"#,
                        if i % 2 == 0 { "user" } else { "assistant" },
                        "x".repeat(20_000)
                    )
                })
                .collect();
            format!(
                r#"{{"model":"claude-sonnet-4-5","system":[{{"type":"text","text":"{}","cache_control":{{"type":"ephemeral"}}}}],"messages":[{}]}}"#,
                "s".repeat(8_000),
                messages.join(",")
            )
        };
        let serve = |n: usize, at_ms: i64, ttl: &str| {
            bills
                .serve(
                    &sid(),
                    (Api::Messages, Some("claude-sonnet-4-5"), None),
                    (body(n, ttl).as_bytes(), None),
                    at_ms,
                    (4.0, 1.0),
                )
                .unwrap()
                .served
        };
        let first = serve(1, 0, "");
        assert_eq!(first.cached, 0);
        assert!(first.written > 5_000, "{first:?}");
        let second = serve(3, 10_000, "");
        assert!(second.cached >= first.written, "{second:?} after {first:?}");
        let late = serve(5, 10_000 + 600_000, "");
        assert!(
            late.cached < 3_000,
            "ten minutes later only what stays warm: {late:?}"
        );
        let hour = serve(7, 10_000 + 620_000, r#","ttl":"1h""#);
        let after = serve(9, 10_000 + 620_000 + 1_200_000, r#","ttl":"1h""#);
        assert!(after.cached >= hour.written, "{after:?} after {hour:?}");
        assert!(blocks_of(Api::Messages, (b"[1,2]", None), 4.0).is_none());
    }

    /// A body's blocks are the same whether its items are found by the request path's parse
    /// (its layout) or read here; the breakpoint, the hour and the retention are found either
    /// way, with members before and after the conversation.
    #[test]
    fn a_laid_out_body_is_cut_as_a_read_one() {
        let bodies = [
            r#"{"model":"claude-sonnet-4-5","system":[{"type":"text","text":"be brief"}],"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"text","text":"yes","cache_control":{"type":"ephemeral","ttl":"1h"}}]}],"tools":[{"name":"bash"}]}"#,
            r#"{"messages": [ {"role":"user","content":"a \"b\" é"} , {"role":"user","content":"c"} ], "model": "m", "tools": [], "max_tokens": 3}"#,
        ];
        let mut layouts = Vec::new();
        for (api, body) in [
            (Api::Messages, bodies[0]),
            (Api::ChatCompletions, bodies[1]),
        ] {
            let (_, layout) =
                ctxgc_formats::ApiRequest::parse_envelope_after(api, body.as_bytes(), None)
                    .unwrap();
            let layout = layout.expect("laid out");
            let read = blocks_of(api, (body.as_bytes(), None), 4.0).unwrap();
            let laid_out = blocks_of(api, (body.as_bytes(), Some(&layout)), 4.0).unwrap();
            assert_eq!(read, laid_out, "{body}");
            layouts.push((read, layout));
        }
        // The layout is what is read: another body's cuts this one elsewhere.
        let crossed = blocks_of(
            Api::Messages,
            (bodies[0].as_bytes(), Some(&layouts[1].1)),
            4.0,
        );
        assert_ne!(crossed.as_ref(), Some(&layouts[0].0));
        let responses =
            br#"{"model":"gpt-5","input":[{"role":"user","content":"x"}],"prompt_cache_retention":"24h"}"#;
        let (_, layout) =
            ctxgc_formats::ApiRequest::parse_envelope_after(Api::Responses, responses, None)
                .unwrap();
        let laid_out = blocks_of(Api::Responses, (responses, layout.as_ref()), 4.0).unwrap();
        assert!(
            laid_out.1,
            "the retention asked for is read from the layout"
        );
        assert_eq!(
            laid_out,
            blocks_of(Api::Responses, (responses, None), 4.0).unwrap()
        );
    }
}
