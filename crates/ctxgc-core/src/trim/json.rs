//! Structural trimming of JSON tool output: the result stays valid JSON.
//!
//! Long arrays keep their first items and their last item around a `"[... N more items ...]"`
//! entry, objects with very many keys keep their first keys, long strings are shortened, and
//! nesting depth is kept. Limits tighten step by step until the rendering fits the byte limit.

use serde_json::{Map, Value};

use crate::content_id::ContentId;
use crate::trim::lines::group;

/// One tightening step: most array items, most object keys, longest string (chars).
const LEVELS: &[(usize, usize, usize)] = &[
    (64, 256, 4096),
    (32, 128, 2048),
    (16, 64, 1024),
    (10, 48, 512),
    (6, 32, 256),
    (4, 24, 160),
    (3, 16, 96),
    (2, 12, 64),
    (2, 8, 40),
];

/// Trims `value` so its rendering fits `limit` bytes; `None` when no level fits.
pub fn trim_json(value: &Value, limit: usize, pretty: bool, id: ContentId) -> Option<String> {
    LEVELS.iter().find_map(|&(items, keys, chars)| {
        let trimmed = shrink(
            value,
            &Limits {
                items,
                keys,
                chars,
                id,
            },
        );
        let text = render(&trimmed, pretty);
        (text.len() <= limit).then_some(text)
    })
}

/// Renders like the input was: indented when the input had line breaks.
pub fn render(value: &Value, pretty: bool) -> String {
    let rendered = if pretty {
        serde_json::to_string_pretty(value)
    } else {
        serde_json::to_string(value)
    };
    rendered.unwrap_or_default()
}

struct Limits {
    items: usize,
    keys: usize,
    chars: usize,
    id: ContentId,
}

fn shrink(value: &Value, lim: &Limits) -> Value {
    match value {
        Value::String(s) => Value::String(shrink_string(s, lim)),
        Value::Array(items) if items.len() > lim.items => {
            let keep_first = lim.items.saturating_sub(1).max(1);
            let mut out: Vec<Value> = items[..keep_first].iter().map(|v| shrink(v, lim)).collect();
            let omitted = items.len() - keep_first - 1;
            out.push(Value::String(format!(
                "[... {} more items; id {} ...]",
                group(omitted as u64),
                lim.id
            )));
            out.push(shrink(&items[items.len() - 1], lim));
            Value::Array(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| shrink(v, lim)).collect()),
        Value::Object(map) => {
            let mut out = Map::new();
            for (k, v) in map.iter().take(lim.keys) {
                out.insert(k.clone(), shrink(v, lim));
            }
            if map.len() > lim.keys {
                let mut key = String::from("...");
                while map.contains_key(&key) {
                    key.push('.');
                }
                out.insert(
                    key,
                    Value::String(format!(
                        "[{} more keys; id {}]",
                        group((map.len() - lim.keys) as u64),
                        lim.id
                    )),
                );
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

fn shrink_string(s: &str, lim: &Limits) -> String {
    let Some((cut, _)) = s.char_indices().nth(lim.chars) else {
        return s.to_owned();
    };
    let rest = s[cut..].chars().count();
    // Every marker names the recall id of the whole output.
    format!(
        "{}[... {} more chars; id {}]",
        &s[..cut],
        group(rest as u64),
        lim.id
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn long_arrays_keep_first_and_last_and_stay_valid() {
        let items: Vec<Value> = (0..1000)
            .map(|i| json!({"id": i, "name": format!("item {i}")}))
            .collect();
        let value = json!({"total": 1000, "items": items});
        let id = ContentId::of(b"x");
        let out = trim_json(&value, 2000, false, id).unwrap();
        assert!(out.len() <= 2000);
        let back: Value = serde_json::from_str(&out).expect("still valid JSON");
        let arr = back["items"].as_array().unwrap();
        assert_eq!(arr[0]["id"], 0);
        assert_eq!(arr[arr.len() - 1]["id"], 999);
        let note = arr[arr.len() - 2].as_str().unwrap();
        assert!(
            note.starts_with("[... ") && note.contains("more items"),
            "{note}"
        );
        assert!(note.contains(&id.to_string()));
        assert_eq!(back["total"], 1000, "scalars kept");
    }

    #[test]
    fn long_strings_are_shortened_and_depth_is_kept() {
        let value = json!({"a": {"b": {"c": "x".repeat(50_000)}}});
        let id = ContentId::of(b"y");
        let out = trim_json(&value, 5000, true, id).unwrap();
        let back: Value = serde_json::from_str(&out).unwrap();
        let c = back["a"]["b"]["c"].as_str().unwrap();
        assert!(c.ends_with(&format!("more chars; id {id}]")), "{c}");
        assert!(out.contains('\n'), "pretty input stays pretty");
    }

    #[test]
    fn key_order_is_preserved() {
        let value: Value =
            serde_json::from_str(r#"{"z":1,"a":"long long long","m":[1,2,3]}"#).unwrap();
        let out = trim_json(&value, 1000, false, ContentId::of(b"z")).unwrap();
        assert_eq!(out, r#"{"z":1,"a":"long long long","m":[1,2,3]}"#);
    }
}
