//! When a repeated tool call is the same call: the same tool and the same *canonical* input.
//!
//! The canonical form of a JSON value is its compact text with every object's keys sorted (at
//! every depth), so key order and whitespace do not matter; everything else does (`500` and
//! `500.0` differ, as do `"7"` and `7`). Pure; used by the session's batches
//! ([`crate::session::batches`]) to match a call the model repeats with a decision made ahead.
//!
//! ```
//! use serde_json::json;
//! use tollgate_engine::gate::canonical::{canonical, same_input};
//!
//! let a: serde_json::Value = serde_json::from_str(r#"{ "b": [1, {"y":2,"x":1}], "a": "7" }"#).unwrap();
//! assert_eq!(canonical(&a), r#"{"a":"7","b":[1,{"x":1,"y":2}]}"#);
//! assert!(same_input(&a, &json!({"a": "7", "b": [1, {"x": 1, "y": 2}]})));
//! assert!(!same_input(&a, &json!({"a": 7, "b": [1, {"x": 1, "y": 2}]})));
//! ```

use serde_json::Value;

/// The canonical text of `value`: compact, object keys sorted at every depth.
pub fn canonical(value: &Value) -> String {
    let mut out = String::new();
    write(value, &mut out);
    out
}

/// Whether two inputs are the same once key order and whitespace are ignored.
pub fn same_input(a: &Value, b: &Value) -> bool {
    canonical(a) == canonical(b)
}

fn write(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write(&map[key.as_str()], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn key_order_and_whitespace_do_not_matter_at_any_depth() {
        let a: Value =
            serde_json::from_str("{\"order_id\" : \"7\",\n \"meta\": {\"z\": [1, 2], \"a\": null}}").unwrap();
        let b = json!({"meta": {"a": null, "z": [1, 2]}, "order_id": "7"});
        assert!(same_input(&a, &b));
        assert_eq!(canonical(&a), r#"{"meta":{"a":null,"z":[1,2]},"order_id":"7"}"#);
    }

    #[test]
    fn values_types_and_array_order_do_matter() {
        let base = json!({"order_id": "8", "amount_cents": 500});
        assert!(!same_input(&base, &json!({"order_id": "8", "amount_cents": 400})));
        assert!(!same_input(&base, &json!({"order_id": 8, "amount_cents": 500})));
        assert!(!same_input(&base, &json!({"order_id": "8", "amount_cents": 500.0})));
        assert!(!same_input(&base, &json!({"order_id": "8"})));
        assert!(!same_input(&json!([1, 2]), &json!([2, 1])));
    }

    #[test]
    fn keys_and_strings_are_escaped_as_json() {
        let tricky = json!({"a\"b": "line\nbreak"});
        assert_eq!(canonical(&tricky), r#"{"a\"b":"line\nbreak"}"#);
        assert_eq!(serde_json::from_str::<Value>(&canonical(&tricky)).unwrap(), tricky);
    }
}
