//! Bounds on a tool's input schema, checked at load before the schema is compiled, and on the
//! work of validating one call's arguments. Pure. Read [`SchemaBounds::check`] first.
//!
//! The JSON Schema validator cannot be interrupted, and its work grows with the schema *with its
//! `$ref`s expanded*: a schema whose levels are `allOf` of two `$ref`s to the next level is
//! small on disk but doubles at every level (24 levels: 2^24 subschemas for `{}`), and a long
//! chain of `$ref`s makes the compiler slow. So a schema is measured before the validator sees
//! it — its size, its nesting, its number of `$ref`s, and its *expansion*: how many subschemas
//! validating one value may visit with every `$ref` followed — and one that passes a bound is
//! refused with the bound's name. A call's validation work is then at most the expansion times
//! the number of values in the arguments, which [`SchemaBounds::check_call`] bounds as well.
//!
//! # Caveats
//! - Tool schemas must be self-contained: a `$ref` must point inside the schema (a JSON pointer
//!   `#/…` or an `$anchor`); `$dynamicRef`, `$recursiveRef` and a nested `$id` (which moves the
//!   base a `$ref` resolves against) are refused.
//! - The expansion counts subschemas, not the cost of each keyword (a `pattern`, `uniqueItems`
//!   on a long array); those are bounded by the arguments' size.

use std::collections::HashMap;

use serde_json::Value;

/// Limits on tool schemas and on validating arguments against them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SchemaBounds {
    /// Bytes of the schema's JSON text.
    pub(crate) max_bytes: usize,
    /// Nesting of the schema's JSON, and of its subschemas with `$ref`s followed.
    pub(crate) max_depth: usize,
    /// `$ref`s in the schema.
    pub(crate) max_refs: usize,
    /// Subschemas visited validating one value, every `$ref` followed.
    pub(crate) max_expansion: u64,
    /// Expansion times the values in one call's arguments.
    pub(crate) max_call_work: u64,
}

impl Default for SchemaBounds {
    fn default() -> Self {
        Self {
            max_bytes: 256 << 10,
            max_depth: 64,
            max_refs: 1_000,
            max_expansion: 20_000,
            max_call_work: 20_000_000,
        }
    }
}

/// What a schema passed, for the call-time bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SchemaCost {
    /// Subschemas visited validating one value, every `$ref` followed.
    pub(crate) expansion: u64,
}

/// Keywords whose value is one subschema applied to the same value (`in place`) or to a part
/// of it (`descends`).
const ONE_SCHEMA: &[(&str, bool)] = &[
    ("not", false),
    ("if", false),
    ("then", false),
    ("else", false),
    ("additionalProperties", true),
    ("additionalItems", true),
    ("unevaluatedProperties", true),
    ("unevaluatedItems", true),
    ("contains", true),
    ("propertyNames", true),
    ("items", true),
    ("contentSchema", true),
];
/// Keywords whose value is an array of subschemas.
const SCHEMA_ARRAYS: &[(&str, bool)] =
    &[("allOf", false), ("anyOf", false), ("oneOf", false), ("prefixItems", true), ("items", true)];
/// Keywords whose value is an object of subschemas.
const SCHEMA_MAPS: &[(&str, bool)] = &[
    ("properties", true),
    ("patternProperties", true),
    ("dependentSchemas", false),
    ("dependencies", false),
];
/// Keywords that hold subschemas only to be referred to.
const DEFINITIONS: &[&str] = &["$defs", "definitions"];

impl SchemaBounds {
    /// Checks the text of a schema before it is parsed.
    pub(crate) fn check_size(&self, text: &str) -> Result<(), String> {
        if text.len() > self.max_bytes {
            return Err(format!(
                "its input schema is {} KiB, more than the limit of {} KiB",
                text.len().div_ceil(1024),
                self.max_bytes >> 10
            ));
        }
        Ok(())
    }

    /// Checks a parsed schema: nesting, `$ref`s and expansion. The error names the bound.
    pub(crate) fn check(&self, schema: &Value) -> Result<SchemaCost, String> {
        let depth = json_depth(schema);
        if depth > self.max_depth {
            return Err(format!(
                "its input schema nests {depth} levels deep, more than the limit of {}",
                self.max_depth
            ));
        }
        let mut anchors = HashMap::new();
        let mut refs = 0usize;
        collect(schema, true, &mut anchors, &mut refs)?;
        if refs > self.max_refs {
            return Err(format!(
                "its input schema has {refs} `$ref`s, more than the limit of {}",
                self.max_refs
            ));
        }
        let mut walk = Walk { root: schema, anchors, bounds: self, memo: HashMap::new(), stack: Vec::new() };
        let expansion = walk.cost(schema, 0, 0)?;
        Ok(SchemaCost { expansion })
    }

    /// Checks that validating `arguments` against a schema of `cost` stays within the work a call
    /// may take.
    pub(crate) fn check_call(&self, cost: SchemaCost, arguments: &Value) -> Result<(), String> {
        let values = count_values(arguments);
        let work = cost.expansion.saturating_mul(values);
        if work > self.max_call_work {
            return Err(format!(
                "the arguments hold {values} JSON values; checking them against this schema ({} \
                 subschemas with `$ref`s followed) would take more than the validation budget of \
                 {} steps",
                cost.expansion, self.max_call_work
            ));
        }
        Ok(())
    }
}

/// The nesting depth of a JSON value, without recursion.
fn json_depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 1usize)];
    while let Some((v, d)) = stack.pop() {
        deepest = deepest.max(d);
        match v {
            Value::Array(items) => stack.extend(items.iter().map(|i| (i, d + 1))),
            Value::Object(map) => stack.extend(map.values().map(|i| (i, d + 1))),
            _ => {}
        }
    }
    deepest
}

/// The number of values in a JSON document, without recursion.
fn count_values(value: &Value) -> u64 {
    let mut count = 0u64;
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        count += 1;
        match v {
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => stack.extend(map.values()),
            _ => {}
        }
    }
    count
}

/// The subschemas of `schema`: (subschema, whether it applies to a part of the value).
fn children(schema: &serde_json::Map<String, Value>) -> Vec<(&Value, bool)> {
    let mut out = Vec::new();
    for (key, descends) in ONE_SCHEMA {
        if let Some(v) = schema.get(*key)
            && (v.is_object() || v.is_boolean())
        {
            out.push((v, *descends));
        }
    }
    for (key, descends) in SCHEMA_ARRAYS {
        if let Some(Value::Array(items)) = schema.get(*key) {
            out.extend(items.iter().map(|v| (v, *descends)));
        }
    }
    for (key, descends) in SCHEMA_MAPS {
        if let Some(Value::Object(map)) = schema.get(*key) {
            out.extend(map.values().filter(|v| v.is_object() || v.is_boolean()).map(|v| (v, *descends)));
        }
    }
    out
}

/// Walks every subschema (definitions included): counts `$ref`s, records `$anchor`s and refuses
/// what cannot be bounded. Recursion is bounded by the JSON depth checked before.
fn collect<'a>(
    value: &'a Value,
    root: bool,
    anchors: &mut HashMap<String, &'a Value>,
    refs: &mut usize,
) -> Result<(), String> {
    let Value::Object(schema) = value else { return Ok(()) };
    for keyword in ["$dynamicRef", "$recursiveRef"] {
        if schema.contains_key(keyword) {
            return Err(format!(
                "its input schema uses `{keyword}`; tool schemas must use plain `$ref`s inside the schema"
            ));
        }
    }
    if schema.get("$ref").is_some() {
        *refs += 1;
    }
    if let Some(Value::String(anchor)) = schema.get("$anchor") {
        anchors.insert(anchor.clone(), value);
    }
    if let Some(Value::String(id)) = schema.get("$id") {
        if let Some(anchor) = id.strip_prefix('#') {
            anchors.insert(anchor.to_string(), value);
        } else if !root {
            return Err(format!(
                "its input schema has a nested `$id` ({id}); tool schemas must be one self-contained document"
            ));
        }
    }
    for (child, _) in children(schema) {
        collect(child, false, anchors, refs)?;
    }
    for key in DEFINITIONS {
        if let Some(Value::Object(defs)) = schema.get(*key) {
            for def in defs.values() {
                collect(def, false, anchors, refs)?;
            }
        }
    }
    Ok(())
}

/// The expansion walk: the subschemas validating one value may visit, `$ref`s followed.
struct Walk<'a> {
    root: &'a Value,
    anchors: HashMap<String, &'a Value>,
    bounds: &'a SchemaBounds,
    /// Cost of each subschema already measured, by address.
    memo: HashMap<usize, u64>,
    /// The subschemas being measured, with how far into the value each applies.
    stack: Vec<(usize, usize)>,
}

impl<'a> Walk<'a> {
    /// The cost of `value` applied `into` levels into the arguments, `depth` subschemas deep.
    fn cost(&mut self, value: &'a Value, into: usize, depth: usize) -> Result<u64, String> {
        let Value::Object(schema) = value else { return Ok(1) };
        let key = value as *const Value as usize;
        if let Some(&cost) = self.memo.get(&key) {
            return Ok(cost);
        }
        if let Some(&(_, entered)) = self.stack.iter().rev().find(|(k, _)| *k == key) {
            if entered == into {
                return Err("its input schema has a `$ref` cycle that never moves into the value being \
                     checked (validation would never end)"
                    .into());
            }
            // A recursive type: each round descends into the value, so the value bounds it.
            return Ok(1);
        }
        if depth > self.bounds.max_depth {
            return Err(format!(
                "its input schema nests more than {} subschemas deep with its `$ref`s followed",
                self.bounds.max_depth
            ));
        }
        self.stack.push((key, into));
        let mut total = 1u64;
        if let Some(reference) = schema.get("$ref") {
            let target = self.resolve(reference)?;
            total = total.saturating_add(self.cost(target, into, depth + 1)?);
        }
        for (child, descends) in children(schema) {
            total = total.saturating_add(self.cost(child, into + usize::from(descends), depth + 1)?);
            if total > self.bounds.max_expansion {
                break;
            }
        }
        self.stack.pop();
        if total > self.bounds.max_expansion {
            return Err(format!(
                "its input schema expands to more than {} subschemas with its `$ref`s followed \
                 (validating one value could visit that many)",
                self.bounds.max_expansion
            ));
        }
        self.memo.insert(key, total);
        Ok(total)
    }

    /// The subschema a `$ref` points to.
    fn resolve(&self, reference: &Value) -> Result<&'a Value, String> {
        let Value::String(text) = reference else {
            return Err(format!("its input schema has a `$ref` that is not a string: {reference}"));
        };
        let not_inside = || {
            format!(
                "its input schema's `$ref` `{text}` does not point inside the schema; tool schemas must be self-contained"
            )
        };
        let fragment = text.strip_prefix('#').ok_or_else(not_inside)?;
        if fragment.is_empty() {
            return Ok(self.root);
        }
        if fragment.starts_with('/') {
            let pointer = percent_decode(fragment);
            return self.root.pointer(&pointer).ok_or_else(not_inside);
        }
        self.anchors.get(fragment).copied().ok_or_else(not_inside)
    }
}

/// Decodes `%XX` escapes of a URI fragment (JSON pointers in `$ref`s may use them).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = text.get(i + 1..i + 3)
            && let Ok(byte) = u8::from_str_radix(hex, 16)
        {
            out.push(byte);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Levels `l0`..`l{n}`, each `allOf` of two `$ref`s to the next.
    fn doubling(levels: usize) -> Value {
        let mut defs = serde_json::Map::new();
        for i in 0..levels {
            let next = format!("#/$defs/l{}", i + 1);
            defs.insert(format!("l{i}"), json!({"allOf": [{"$ref": next}, {"$ref": next}]}));
        }
        defs.insert(format!("l{levels}"), json!({"type": "object"}));
        json!({"type": "object", "$defs": defs, "$ref": "#/$defs/l0"})
    }

    fn chain(length: usize) -> Value {
        let mut defs = serde_json::Map::new();
        for i in 0..length {
            defs.insert(format!("c{i}"), json!({"$ref": format!("#/$defs/c{}", i + 1)}));
        }
        defs.insert(format!("c{length}"), json!({"type": "object"}));
        json!({"type": "object", "$defs": defs, "$ref": "#/$defs/c0"})
    }

    #[test]
    fn an_ordinary_schema_passes_and_costs_its_subschemas() {
        let schema = json!({
            "type": "object",
            "properties": {"order_id": {"type": "string"}, "item": {"$ref": "#/$defs/Item"}},
            "required": ["order_id"],
            "$defs": {"Item": {"type": "object", "properties": {"sku": {"type": "string"}}}}
        });
        let cost = SchemaBounds::default().check(&schema).unwrap();
        assert_eq!(cost.expansion, 5, "root, order_id, item, Item, sku");
    }

    #[test]
    fn a_recursive_type_passes_because_each_round_descends_into_the_value() {
        let schema = json!({
            "type": "object",
            "properties": {"tree": {"$ref": "#/$defs/Node"}},
            "$defs": {"Node": {"type": "object", "properties": {
                "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}}}
        });
        SchemaBounds::default().check(&schema).unwrap();
    }

    #[test]
    fn a_doubling_all_of_is_refused_for_its_expansion() {
        SchemaBounds::default().check(&doubling(10)).unwrap();
        let error = SchemaBounds::default().check(&doubling(24)).unwrap_err();
        assert!(error.contains("expands to more than 20000 subschemas"), "{error}");
    }

    #[test]
    fn a_long_ref_chain_is_refused_for_its_refs_and_depth() {
        let error = SchemaBounds::default().check(&chain(100_000)).unwrap_err();
        assert!(error.contains("100001 `$ref`s") && error.contains("limit of 1000"), "{error}");
        let error = SchemaBounds::default().check(&chain(500)).unwrap_err();
        assert!(error.contains("more than 64 subschemas deep"), "{error}");
        SchemaBounds::default().check(&chain(20)).unwrap();
    }

    #[test]
    fn a_cycle_in_place_is_refused() {
        let schema = json!({"type": "object", "$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"});
        let error = SchemaBounds::default().check(&schema).unwrap_err();
        assert!(error.contains("cycle"), "{error}");
        let root = json!({"type": "object", "anyOf": [{"$ref": "#"}]});
        assert!(SchemaBounds::default().check(&root).unwrap_err().contains("cycle"));
    }

    #[test]
    fn refs_outside_the_schema_and_dynamic_refs_are_refused() {
        for (schema, expected) in [
            (json!({"$ref": "https://example.com/s.json"}), "does not point inside"),
            (json!({"$ref": "#/$defs/missing"}), "does not point inside"),
            (json!({"$dynamicRef": "#meta"}), "$dynamicRef"),
            (json!({"properties": {"a": {"$id": "https://x/y", "type": "string"}}}), "nested `$id`"),
        ] {
            let error = SchemaBounds::default().check(&schema).unwrap_err();
            assert!(error.contains(expected), "{schema}: {error}");
        }
    }

    #[test]
    fn anchors_and_escaped_pointers_resolve() {
        let schema = json!({
            "properties": {"a": {"$ref": "#item"}, "b": {"$ref": "#/$defs/with%25percent"}},
            "$defs": {"i": {"$anchor": "item", "type": "string"}, "with%percent": {"type": "number"}}
        });
        SchemaBounds::default().check(&schema).unwrap();
    }

    #[test]
    fn deep_nesting_and_big_text_are_refused() {
        let mut deep = json!({"type": "string"});
        for _ in 0..40 {
            deep = json!({"type": "object", "properties": {"x": deep}});
        }
        let error = SchemaBounds::default().check(&deep).unwrap_err();
        assert!(error.contains("nests 82 levels deep, more than the limit of 64"), "{error}");
        let big = format!("{{\"description\":\"{}\"}}", "x".repeat(300 << 10));
        let error = SchemaBounds::default().check_size(&big).unwrap_err();
        assert!(error.contains("more than the limit of 256 KiB"), "{error}");
    }

    #[test]
    fn the_call_budget_weighs_the_arguments_against_the_expansion() {
        let bounds = SchemaBounds::default();
        let cost = SchemaCost { expansion: 10_000 };
        bounds.check_call(cost, &json!({"a": [1, 2, 3]})).unwrap();
        let big = Value::Array(vec![json!(1); 5_000]);
        let error = bounds.check_call(cost, &big).unwrap_err();
        assert!(error.contains("5001 JSON values") && error.contains("validation budget"), "{error}");
    }
}
