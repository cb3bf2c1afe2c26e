//! Helpers shared by the proxy's end-to-end tests.

use serde_json::Value;

/// `v` without any `cache_control` (clients and the proxy move Anthropic breakpoints from
/// request to request; the cached content is what matters).
pub fn without_cache_control(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| *k != "cache_control")
                .map(|(k, v)| (k.clone(), without_cache_control(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_cache_control).collect()),
        other => other.clone(),
    }
}
