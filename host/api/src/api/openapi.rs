//! The OpenAPI document of the HTTP API, generated: the handlers' `#[utoipa::path]` attributes
//! and the types of [`super::types`] give every route, parameter, body and answer; this module
//! adds what belongs to the whole API (its title, the bearer scheme) and the parameters several
//! routes share.
//!
//! The document is served at `/openapi.json` and kept as the snapshot `snapshots/openapi.snap`
//! beside this module: a test compares the two, so a change to the API's types or routes shows as a
//! diff to accept with `cargo insta review` (or `INSTA_UPDATE=always cargo test -p tollgate-api
//! --lib openapi`, then read the diff): it is the API's contract.

use std::sync::LazyLock;

use utoipa::openapi::Required;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{IntoParams, IntoResponses, Modify, OpenApi};

use super::types::ErrorBody;

mod limits;

/// What belongs to the whole API; the routes add themselves (see `super::routes`).
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Tollgate API",
        version = "0.1.0",
        description = "Durable Claude Code sessions with gated tool calls. Bearer-token auth on every route but /healthz when the server has a token or an auth file: 401 `unauthorized` when no principal has the token, 403 when the principal's roles (viewer reads; client also starts sessions, sends messages and forks sessions; approver also decides; admin does everything), the tool's approver groups or separation of duties (nobody decides an interrupt of a session they started) refuse the request, naming what is needed. Every error is an ErrorBody that names the field, query parameter or limit that was wrong. A route that does not exist answers 404 `not_found`, a method a route does not take 405 `method_not_allowed`, both as an ErrorBody."
    ),
    modifiers(&BearerScheme),
    security(("bearer" = [])),
    components(schemas(ErrorBody, super::types::StreamError)),
    tags(
        (name = "sessions", description = "Sessions, their messages and snapshots"),
        (name = "approvals", description = "Deferred tool calls waiting for a person, and the audit trail of decisions"),
        (name = "events", description = "A session's events, live"),
        (name = "agents", description = "Which agent digest a session runs under"),
        (name = "operations", description = "Health, metrics and this document"),
    )
)]
struct Base;

/// Adds the `bearer` HTTP scheme the document's `security` names.
struct BearerScheme;

impl Modify for BearerScheme {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme("bearer", SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)));
    }
}

/// The document without its routes.
pub(super) fn base() -> utoipa::openapi::OpenApi {
    Base::openapi()
}

/// The generated document, as served (pretty JSON).
pub fn document() -> &'static str {
    static DOCUMENT: LazyLock<String> = LazyLock::new(|| {
        let mut document = super::routes().into_openapi();
        // utoipa derives a body's `required` from its type; `POST /v1/sessions` also takes none.
        let create = document.paths.paths.get_mut("/v1/sessions").and_then(|item| item.post.as_mut());
        if let Some(utoipa::openapi::RefOr::T(body)) =
            create.and_then(|operation| operation.request_body.as_mut())
        {
            body.required = Some(Required::False);
        }
        limits::declare(&mut document);
        document.to_pretty_json().expect("the OpenAPI document serializes")
    });
    &DOCUMENT
}

/// The errors every route that reads the store can answer (besides its own 404 and 409).
#[derive(Debug, IntoResponses)]
pub enum ReadErrors {
    /// `invalid_request`: a query parameter, header or path id is wrong (named in `field`).
    #[response(status = 400)]
    BadRequest(ErrorBody),
    /// `unauthorized`: the bearer token is missing or wrong.
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// `stored_row_refused` (a stored row cannot be read; named) or `store_error`.
    #[response(status = 500)]
    Internal(ErrorBody),
    /// `store_unavailable` (the store cannot take the request now), `overloaded` (this server runs
    /// as many requests as it takes at once) or `request_timeout` (the request ran past the
    /// server's bound and was stopped; a write may have landed: repeat it with the same key); retry
    /// after `Retry-After` seconds.
    #[response(status = 503)]
    Unavailable(ErrorBody),
}

/// The errors every route that takes a JSON body can answer (besides its own 404 and 409).
#[derive(Debug, IntoResponses)]
pub enum WriteErrors {
    /// `invalid_request` (a field, query parameter, header or path id is wrong, named in `field`)
    /// or `invalid_json` (the body is not JSON; the position in `message`).
    #[response(status = 400)]
    BadRequest(ErrorBody),
    /// `unauthorized`: the bearer token is missing or wrong.
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// `role_required`: the principal is known but its roles do not allow this (the roles that
    /// would are in `needed`; the message names them too).
    #[response(status = 403)]
    Forbidden(ErrorBody),
    /// `body_too_large`: the body is over 512 KiB (a message's, which may carry images: 4 MiB);
    /// `image_too_large`: a message's images are over 2 MiB together (decoded).
    #[response(status = 413)]
    TooLarge(ErrorBody),
    /// `unsupported_media_type`: the body is not `application/json`.
    #[response(status = 415)]
    NotJson(ErrorBody),
    /// `stored_row_refused` (a stored row cannot be read; named) or `store_error`.
    #[response(status = 500)]
    Internal(ErrorBody),
    /// `store_unavailable` (the store cannot take the request now), `overloaded` (this server runs
    /// as many requests as it takes at once) or `request_timeout` (the request ran past the
    /// server's bound and was stopped; a write may have landed: repeat it with the same key); retry
    /// after `Retry-After` seconds.
    #[response(status = 503)]
    Unavailable(ErrorBody),
}

/// The `{id}` of a session's routes.
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct SessionId {
    /// The session id: 1-200 of letters, digits and `-_.:/@` (no session has another; any other
    /// id of 1-200 characters is a 404 `session_not_found`, a longer one a 400).
    #[param(pattern = "^[A-Za-z0-9._:/@-]{1,200}$")]
    pub id: String,
}

/// The `{interrupt_id}` of a decision.
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct InterruptId {
    /// The interrupt's id (its tool call's; 1-200 characters).
    #[param(min_length = 1, max_length = 200)]
    pub interrupt_id: String,
}

/// The `Idempotency-Key` header of a write.
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Header)]
pub struct IdempotencyKey {
    /// A client key: a repeat with the same key and request returns the first answer and writes
    /// nothing; the same key for another request is a 409 `idempotency_conflict`. It wins over the
    /// body's `client_key`. 1-200 of letters, digits and `-_.:/@`.
    #[param(rename = "Idempotency-Key", pattern = "^[A-Za-z0-9._:/@-]{1,200}$")]
    pub idempotency_key: Option<String>,
}

/// The `Last-Event-ID` header of the event stream.
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Header)]
pub struct LastEventId {
    /// Resume after this event seq (wins over `?after=`).
    #[param(rename = "Last-Event-ID", minimum = 0, value_type = i64, required = false)]
    pub last_event_id: Option<i64>,
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    #[test]
    fn the_openapi_snapshot_is_the_generated_document() {
        insta::with_settings!({ prepend_module_to_snapshot => false, description => "The HTTP API's contract: GET /openapi.json" }, {
            insta::assert_snapshot!("openapi", document());
        });
    }

    /// OpenAPI requires each `operationId` once (two handlers named `stream` made it invalid).
    #[test]
    fn every_operation_has_an_id_of_its_own() {
        let doc: Value = serde_json::from_str(document()).unwrap();
        let mut ids: Vec<&str> = doc["paths"]
            .as_object()
            .unwrap()
            .values()
            .flat_map(|path| path.as_object().unwrap().values())
            .map(|operation| operation["operationId"].as_str().expect("every operation has an id"))
            .collect();
        let all = ids.len();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), all, "an operationId is used twice: {ids:?}");
    }

    /// The limits the server enforces are in the document, so a client (or a fuzzer) that keeps
    /// to the document is not refused, and one that breaks it is.
    #[test]
    fn the_document_declares_the_limits_the_server_enforces() {
        let doc: Value = serde_json::from_str(document()).unwrap();
        let schemas = &doc["components"]["schemas"];
        let text = &schemas["SendMessage"]["properties"]["text"];
        assert_eq!((text["minLength"].as_u64(), text["maxLength"].as_u64()), (Some(1), Some(262_144)));
        let matches = |pattern: &Value, given: &str| {
            jsonschema::is_valid(
                &serde_json::json!({"type": "string", "pattern": pattern}),
                &Value::from(given),
            )
        };
        for (given, server) in [("hi", true), (" \t\n", false), ("\u{85}\u{3000}", false), ("\u{feff}", true)]
        {
            let server_takes = tollgate_engine::session::client::user_message(given, &[]).is_ok();
            assert_eq!(server_takes, server, "{given:?}");
            assert_eq!(
                matches(&text["pattern"], given),
                server,
                "the pattern and the server differ on {given:?}"
            );
        }
        assert_eq!(schemas["CreateSession"]["properties"]["message"]["pattern"], text["pattern"]);
        let id = "^[A-Za-z0-9._:/@-]{1,200}$";
        assert_eq!(schemas["CreateSession"]["properties"]["session_id"]["pattern"], id);
        for body in ["CreateSession", "SendMessage", "Decide"] {
            assert_eq!(schemas[body]["properties"]["client_key"]["pattern"], id, "{body}");
        }
        let param = |path: &str, method: &str, name: &str| -> Value {
            let params = doc["paths"][path][method]["parameters"].as_array().unwrap();
            params.iter().find(|p| p["name"] == name).unwrap_or_else(|| panic!("{path} {name}"))["schema"]
                .clone()
        };
        let decide = "/v1/sessions/{id}/interrupts/{interrupt_id}";
        assert_eq!(param(decide, "post", "id")["pattern"], id);
        assert_eq!(param(decide, "post", "Idempotency-Key")["pattern"], id);
        assert_eq!(param(decide, "post", "interrupt_id")["maxLength"], 200);
        assert_eq!(param("/v1/sessions", "get", "after")["maxLength"], 200);
        assert_eq!(param("/v1/interrupts", "get", "after")["maxLength"], 1024);
        assert_eq!(param("/v1/audit", "get", "principal")["minLength"], 1);
        assert_eq!(param("/v1/sessions/{id}/events", "get", "Last-Event-ID")["minimum"], 0);
        assert_eq!(schemas["SendMessage"]["properties"]["images"]["maxItems"], 8);
        assert!(schemas["CreateSession"]["dependentSchemas"]["images"].is_object(), "images need a message");
        // Each image type's first bytes, as the server checks them.
        let starts = schemas["ImageSource"]["oneOf"].as_array().unwrap();
        let png = &starts[0]["properties"]["data"]["pattern"];
        assert!(matches(png, "iVBORw0KGgoAAAANSUhEUg=="));
        assert!(!matches(png, "iVBORw0KGgoAAAANSUhEUh=="), "non-canonical final bits are refused");
        assert!(!matches(png, "/9j/4AAQ"), "a JPEG is not a PNG");
    }

    #[test]
    fn the_document_describes_every_route_its_bodies_the_event_stream_and_the_bearer_scheme() {
        let doc: Value = serde_json::from_str(document()).expect("the document is JSON");
        assert_eq!(doc["openapi"], "3.1.0");
        let operations = [
            ("/v1/sessions", "post", "201", "Created"),
            ("/v1/sessions", "get", "200", "SessionPage"),
            ("/v1/sessions/{id}", "get", "200", "Snapshot"),
            ("/v1/sessions/{id}/messages", "post", "202", "MessageReceipt"),
            ("/v1/sessions/{id}/interrupts/{interrupt_id}", "post", "200", "DecisionReceipt"),
            ("/v1/sessions/{id}/upgrade", "post", "200", "Upgraded"),
            ("/v1/agent-upgrades", "post", "200", "UpgradedAll"),
            ("/v1/interrupts", "get", "200", "InterruptList"),
            ("/v1/audit", "get", "200", "AuditPage"),
            ("/v1/me", "get", "200", "Me"),
            ("/healthz", "get", "200", "Health"),
        ];
        for (path, method, status, schema) in operations {
            let answer = &doc["paths"][path][method]["responses"][status];
            assert_eq!(
                answer["content"]["application/json"]["schema"]["$ref"],
                format!("#/components/schemas/{schema}"),
                "{method} {path} {status}"
            );
        }
        // A stream's schema is one whole event: `event`, `id`, and `data` as JSON of its schema.
        for (path, event, data) in [
            ("/v1/sessions/{id}/events", "SessionSseEvent", "StreamEvent"),
            ("/v1/interrupts/events", "InboxSseEvent", "InboxEvent"),
        ] {
            let schema =
                &doc["paths"][path]["get"]["responses"]["200"]["content"]["text/event-stream"]["schema"];
            let refs: Vec<&str> =
                schema["anyOf"].as_array().unwrap().iter().map(|r| r["$ref"].as_str().unwrap()).collect();
            assert_eq!(
                refs,
                [format!("#/components/schemas/{event}"), "#/components/schemas/SseErrorEvent".to_owned()],
                "{path}"
            );
            let event = &doc["components"]["schemas"][event];
            assert_eq!(event["required"], serde_json::json!(["event", "data"]), "{path}");
            assert_eq!(event["properties"]["data"]["contentMediaType"], "application/json", "{path}");
            assert_eq!(
                event["properties"]["data"]["contentSchema"]["$ref"],
                format!("#/components/schemas/{data}")
            );
        }
        for path in ["/metrics", "/openapi.json"] {
            assert!(doc["paths"][path]["get"]["responses"]["200"].is_object(), "{path}");
        }
        assert_eq!(doc["components"]["securitySchemes"]["bearer"]["scheme"], "bearer");
        assert_eq!(doc["security"], serde_json::json!([{"bearer": []}]));
        assert_eq!(doc["paths"]["/healthz"]["get"]["security"], serde_json::json!([{}]), "no auth");
        let bodies = [
            ("/v1/sessions", "CreateSession", false),
            ("/v1/sessions/{id}/messages", "SendMessage", true),
            ("/v1/sessions/{id}/interrupts/{interrupt_id}", "Decide", true),
            ("/v1/sessions/{id}/upgrade", "UpgradeSession", true),
            ("/v1/agent-upgrades", "UpgradeAll", true),
        ];
        for (path, body, required) in bodies {
            let request = &doc["paths"][path]["post"]["requestBody"];
            let schema = &request["content"]["application/json"]["schema"]["$ref"];
            assert_eq!(schema, &format!("#/components/schemas/{body}"), "{path}");
            assert_eq!(request["required"], required, "{path}");
            let schema = &doc["components"]["schemas"][body];
            assert_eq!(schema["additionalProperties"], false, "{body} refuses unknown fields");
        }
        let decide = &doc["paths"]["/v1/sessions/{id}/interrupts/{interrupt_id}"]["post"]["responses"];
        assert!(decide["401"].is_object() && decide["403"].is_object(), "401 and 403 are distinct");
        for shared in
            ["ToolCall", "CallState", "PendingApproval", "ApprovalRequest", "ErrorBody", "AuditRecord"]
        {
            assert!(doc["components"]["schemas"][shared].is_object(), "{shared}");
        }
    }
}
