//! What the document says that utoipa's attributes cannot: the rules the server enforces across
//! fields (a message's images come with its text, an image's first bytes are its type's, a
//! session grant or an edit comes with an approval) and the
//! whole Server-Sent Event of each stream (`event`, `id`, and `data` as JSON of its schema).
//!
//! OpenAPI 3.1 has no item schema for `text/event-stream` (3.2 adds `itemSchema`); as tools read
//! 3.1, the stream's `schema` describes one event: an object of the event's fields, its `data` a
//! string whose `contentMediaType` is JSON and whose `contentSchema` is the payload's schema.
//! Keywords utoipa's builders lack go in through an object's extensions, one keyword each (its
//! map is unordered), so the document stays the same from one build to the next.

use serde_json::{Value, json};
use utoipa::openapi::extensions::Extensions;
use utoipa::openapi::schema::{AnyOfBuilder, Object, ObjectBuilder, Schema, Type};
use utoipa::openapi::{OpenApi, Ref, RefOr};

/// Standard base64 with padding, from a quartet boundary on, with canonical final bits (the
/// decoder refuses others).
const BASE64_TAIL: &str =
    "(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$";

/// Each image type's first bytes in base64 (the server's check), up to a quartet boundary.
const IMAGE_STARTS: [(&str, &str); 4] = [
    // 89 50 4E 47 0D 0A 1A 0A: ten characters and four bits.
    ("image/png", "^iVBORw0KGg(?:o=$|[o-r][A-Za-z0-9+/]"),
    // FF D8 FF.
    ("image/jpeg", "^/9j/"),
    // GIF87a or GIF89a.
    ("image/gif", "^R0lGOD[dl]h"),
    // RIFF, four bytes of size, WEBP.
    ("image/webp", "^UklGR[g-v][A-Za-z0-9+/]{4}[BFJNRVZdhlptx159]XRUJQ"),
];

/// Adds the cross-field rules and the streams' event schemas to `document`.
pub(super) fn declare(document: &mut OpenApi) {
    let components = document.components.get_or_insert_with(Default::default);
    let schemas = &mut components.schemas;
    if let Some(RefOr::T(Schema::Object(source))) = schemas.get_mut("ImageSource") {
        let starts = IMAGE_STARTS.iter().map(|(media_type, start)| {
            let close = if start.contains("(?:") { ")" } else { "" };
            json!({"properties": {
                "media_type": {"const": media_type},
                "data": {"pattern": format!("{start}{BASE64_TAIL}{close}")},
            }})
        });
        extend(source, "oneOf", Value::Array(starts.collect()));
    }
    if let Some(RefOr::T(Schema::Object(create))) = schemas.get_mut("CreateSession") {
        // `images` only with a `message`.
        let rule = json!({"images": {"anyOf": [
            {"properties": {"images": {"maxItems": 0}}},
            {"required": ["message"], "properties": {"message": {"type": "string"}}},
        ]}});
        extend(create, "dependentSchemas", rule);
    }
    if let Some(RefOr::T(Schema::Object(decide))) = schemas.get_mut("Decide") {
        // `scope: session` and `updated_input` only with an approval.
        let rule = json!([
            {"properties": {"approved": {"const": true}}},
            {"properties": {"scope": {"const": "call"}, "updated_input": {"type": "null"}}},
        ]);
        extend(decide, "anyOf", rule);
    }
    let events = [
        (
            "SessionSseEvent",
            "One event of `GET /v1/sessions/{id}/events`: `event` is the kind, `id` the seq (none on live text), `data` a StreamEvent as JSON.",
            "StreamEvent",
            event_field("The event's kind (the data's `kind`)", None),
            Some("^[0-9]+$"),
        ),
        (
            "InboxSseEvent",
            "One event of `GET /v1/interrupts/events`: `event` is `snapshot` or `changed`, `id` the inbox's version after it, `data` an InboxEvent as JSON.",
            "InboxEvent",
            event_field(
                "`snapshot` (the whole inbox) or `changed` (what changed)",
                Some(&["snapshot", "changed"]),
            ),
            None,
        ),
        (
            "SseErrorEvent",
            "The `error` event that ends a stream the store failed under: `data` a StreamError as JSON; resume with `Last-Event-ID`.",
            "StreamError",
            event_field("`error`", Some(&["error"])),
            None,
        ),
    ];
    for (name, description, data, event, id_pattern) in events {
        let mut id = ObjectBuilder::new().schema_type(Type::String).description(Some("The SSE `id`"));
        if let Some(pattern) = id_pattern {
            id = id.pattern(Some(pattern));
        }
        let mut data_field = ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some(format!("The payload: {data} as JSON")))
            .content_media_type("application/json")
            .build();
        extend(&mut data_field, "contentSchema", json!({"$ref": format!("#/components/schemas/{data}")}));
        let schema = ObjectBuilder::new()
            .schema_type(Type::Object)
            .description(Some(description))
            .property("event", event)
            .property("id", id)
            .property("data", data_field)
            .required("event")
            .required("data")
            .build();
        schemas.insert(name.to_owned(), RefOr::T(Schema::Object(schema)));
    }
    for (path, event) in
        [("/v1/sessions/{id}/events", "SessionSseEvent"), ("/v1/interrupts/events", "InboxSseEvent")]
    {
        let operation = document.paths.paths.get_mut(path).and_then(|item| item.get.as_mut());
        let answer = operation.and_then(|operation| operation.responses.responses.get_mut("200"));
        let Some(RefOr::T(answer)) = answer else { continue };
        if let Some(RefOr::T(content)) = answer.content.get_mut("text/event-stream") {
            let one = AnyOfBuilder::new()
                .item(Ref::from_schema_name(event))
                .item(Ref::from_schema_name("SseErrorEvent"))
                .description(Some("One Server-Sent Event (OpenAPI 3.1 describes a stream by its event)"));
            content.schema = Some(RefOr::T(Schema::AnyOf(one.build())));
        }
    }
}

/// The SSE `event` field: a string, one of `values` when given.
fn event_field(description: &str, values: Option<&[&str]>) -> Object {
    let field = ObjectBuilder::new().schema_type(Type::String).description(Some(description));
    match values {
        Some(values) => field.enum_values(Some(values.iter().copied())).build(),
        None => field.build(),
    }
}

/// Adds `keyword: value` to `object` (a keyword utoipa's builder lacks).
fn extend(object: &mut Object, keyword: &str, value: Value) {
    object.extensions.get_or_insert_with(Extensions::default).insert(keyword.to_owned(), value);
}
