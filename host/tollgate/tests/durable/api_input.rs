//! Bad input to every route of the HTTP API, over real HTTP to `tollgate api` on SQLite: each
//! refusal is a JSON error with the right status that names the field, the parameter or the
//! limit, and the server goes on answering.

use serde_json::{Value, json};

use crate::tls::{ApiServer, Pki};
use crate::world::api;

struct Answer {
    status: u16,
    body: Value,
}

impl Answer {
    fn error(&self) -> (&str, &str, &str) {
        let error = &self.body["error"];
        (
            error["code"].as_str().unwrap_or_else(|| panic!("no error code in {}", self.body)),
            error["field"].as_str().unwrap_or(""),
            error["message"].as_str().unwrap_or(""),
        )
    }
}

/// Sends `request`; the answer is checked against the OpenAPI document (see [`api`]) and must be
/// JSON.
async fn call(request: reqwest::RequestBuilder) -> Answer {
    let answer = api(request).await;
    let (status, content_type, text) = (answer.status, answer.content_type, answer.text);
    let body = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!("{status} answered with a body that is not JSON ({e}, {content_type:?}): {text}")
    });
    assert_eq!(content_type.as_deref(), Some("application/json"), "{status}: {text}");
    Answer { status, body }
}

/// Asserts a JSON error of `status` and `code` naming `field`, with `words` in its message.
fn refused(answer: &Answer, status: u16, code: &str, field: &str, words: &[&str], what: &str) {
    assert_eq!(answer.status, status, "{what}: {}", answer.body);
    let (got_code, got_field, message) = answer.error();
    assert_eq!((got_code, got_field), (code, field), "{what}: {}", answer.body);
    for word in words {
        assert!(message.contains(word), "{what}: `{word}` not in {message:?}");
    }
}

async fn server() -> (Pki, ApiServer, reqwest::Client) {
    tollgate_api_types::tls::install_crypto_provider();
    let pki = Pki::new();
    let server = ApiServer::start(&pki.dir.path().join("api.db"), &["--insecure-open"], &[])
        .await
        .expect("tollgate api starts");
    (pki, server, reqwest::Client::new())
}

#[tokio::test(flavor = "multi_thread")]
async fn bodies_too_large_not_json_or_malformed_get_json_errors_naming_the_limit_or_the_position() {
    let (_pki, server, http) = server().await;
    let url = &server.url;
    let created = call(http.post(format!("{url}/v1/sessions")).json(&json!({"session_id": "s"}))).await;
    assert_eq!(created.status, 201, "{}", created.body);
    let messages = format!("{url}/v1/sessions/s/messages");

    let big = json!({"text": "x".repeat(600 * 1024)}).to_string();
    let decide = format!("{url}/v1/sessions/s/interrupts/i1");
    let answer = call(http.post(&decide).header("content-type", "application/json").body(big)).await;
    refused(&answer, 413, "body_too_large", "body", &["524288 bytes"], "a 600 KiB decision");
    // A message may carry images: its limit is larger.
    let huge = json!({"text": "x".repeat(5 * 1024 * 1024)}).to_string();
    let answer = call(http.post(&messages).header("content-type", "application/json").body(huge)).await;
    refused(&answer, 413, "body_too_large", "body", &["4194304 bytes"], "a 5 MiB message");

    let answer = call(
        http.post(&messages).header("content-type", "application/json").body("{\n  \"text\": \"hi\",\n}"),
    )
    .await;
    refused(&answer, 400, "invalid_json", "body", &["line 3, column 1"], "a trailing comma");
    let answer =
        call(http.post(&messages).header("content-type", "application/json").body("{\"text\": \"hi\"")).await;
    refused(&answer, 400, "invalid_json", "body", &["EOF", "line 1, column 13"], "a cut body");
    let answer =
        call(http.post(&messages).header("content-type", "application/json").body("{\"text\":\"a\"} {}"))
            .await;
    refused(&answer, 400, "invalid_json", "body", &["trailing characters"], "two values");
    // A wrong value still names its field.
    let answer = call(http.post(&messages).json(&json!({"text": 5}))).await;
    refused(&answer, 400, "invalid_request", "text", &["invalid type"], "a number as text");
    // serde reads a struct from an array of its fields: a body is an object, or refused.
    let sessions = format!("{url}/v1/sessions");
    for (url, body, kind) in [
        (&messages, "[\"hi\"]", "an array"),
        (&sessions, "[null,null]", "an array"),
        (&sessions, "null", "null"),
        (&messages, " \"hi\"", "a string"),
    ] {
        let answer = call(http.post(url).header("content-type", "application/json").body(body)).await;
        refused(&answer, 400, "invalid_request", "body", &[&format!("not {kind}")], body);
    }
    // A malformed idempotency key is refused whether or not the request has a message to key,
    // and before the session is created.
    // A body key the header overrides is still checked.
    for (header, body, field, what) in [
        (Some("a key!"), json!({"session_id": "k1"}), "Idempotency-Key", "a header key without a message"),
        (
            Some("a key!"),
            json!({"session_id": "k2", "message": "hi"}),
            "Idempotency-Key",
            "a header key with a message",
        ),
        (None, json!({"session_id": "k3", "client_key": ""}), "client_key", "an empty body key, no message"),
        (
            Some("good-key"),
            json!({"session_id": "k4", "message": "hi", "client_key": "bad key"}),
            "client_key",
            "a bad body key beside a good header",
        ),
    ] {
        let mut request = http.post(&sessions).json(&body);
        if let Some(key) = header {
            request = request.header("idempotency-key", key);
        }
        refused(&call(request).await, 400, "invalid_request", field, &["-_.:/@"], what);
        let id = body["session_id"].as_str().unwrap();
        let answer = call(http.get(format!("{sessions}/{id}"))).await;
        assert_eq!(answer.status, 404, "{what}: nothing is created: {}", answer.body);
    }

    let answer =
        call(http.post(&messages).header("content-type", "text/plain").body("{\"text\":\"hi\"}")).await;
    refused(
        &answer,
        415,
        "unsupported_media_type",
        "Content-Type",
        &["application/json", "text/plain"],
        "text/plain",
    );
    let answer = call(
        http.post(&messages).header("content-type", "application/x-www-form-urlencoded").body("text=hi"),
    )
    .await;
    refused(&answer, 415, "unsupported_media_type", "Content-Type", &["x-www-form-urlencoded"], "a form");
    let answer = call(http.post(&messages).body("{\"text\":\"hi\"}")).await;
    refused(&answer, 415, "unsupported_media_type", "Content-Type", &["(none)"], "no content type");
    let answer = call(
        http.post(&messages)
            .header("content-type", "application/json; charset=utf-8")
            .body("{\"text\":\"hi\"}"),
    )
    .await;
    assert_eq!(answer.status, 202, "a JSON content type with a charset is JSON: {}", answer.body);
    // An empty POST /v1/sessions needs no content type: it creates a session with a fresh id.
    let answer = call(http.post(format!("{url}/v1/sessions"))).await;
    assert_eq!(answer.status, 201, "{}", answer.body);
    let decide = format!("{url}/v1/sessions/s/interrupts/toolu_1");
    let answer =
        call(http.post(&decide).header("content-type", "text/plain").body("{\"approved\":true}")).await;
    refused(&answer, 415, "unsupported_media_type", "Content-Type", &[], "a decision as text/plain");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn query_parameters_are_checked_on_every_route_naming_the_parameter_and_the_allowed_values() {
    let (_pki, server, http) = server().await;
    let url = &server.url;
    let get = |path: &str| call(http.get(format!("{url}{path}")));

    let answer = get("/v1/sessions?status=bogus").await;
    refused(
        &answer,
        400,
        "invalid_request",
        "status",
        &["idle, running, awaiting_approval", "`bogus`"],
        "status",
    );
    for status in ["idle", "running", "awaiting_approval"] {
        let answer = get(&format!("/v1/sessions?status={status}")).await;
        assert_eq!(answer.status, 200, "{status}: {}", answer.body);
    }
    let answer = get("/v1/sessions?bogus=1").await;
    refused(
        &answer,
        400,
        "invalid_request",
        "bogus",
        &["unknown query parameter", "status, after, limit"],
        "unknown",
    );
    let answer = get("/v1/sessions?limit=5&limit=6").await;
    refused(&answer, 400, "invalid_request", "limit", &["twice"], "limit twice");
    for limit in ["0", "-5", "1001", "99999999999999999999999", "ten", ""] {
        let answer = get(&format!("/v1/sessions?limit={limit}")).await;
        refused(&answer, 400, "invalid_request", "limit", &["from 1 to 1000"], &format!("limit={limit}"));
    }
    let answer = get(&format!("/v1/sessions?after={}", "a".repeat(300))).await;
    refused(&answer, 400, "invalid_request", "after", &["200 characters"], "a 300-byte after");
    let answer = get("/v1/sessions?after=zzz&limit=1000").await;
    assert_eq!(answer.status, 200, "{}", answer.body);

    let answer = get("/v1/interrupts?status=done").await;
    refused(&answer, 400, "invalid_request", "status", &["pending", "`done`"], "interrupt status");
    let answer = get("/v1/interrupts?limit=0").await;
    refused(&answer, 400, "invalid_request", "limit", &["from 1 to 1000"], "interrupt limit");
    let answer = get("/v1/interrupts?after=x").await;
    refused(
        &answer,
        400,
        "invalid_request",
        "after",
        &["`next_after` of the previous page"],
        "interrupt after",
    );
    let answer = get("/v1/interrupts?before=x").await;
    refused(&answer, 400, "invalid_request", "before", &["status, after, limit"], "interrupt before");

    call(http.post(format!("{url}/v1/sessions")).json(&json!({"session_id": "q"}))).await;
    for (path, body) in [
        ("/v1/sessions?dry_run=1", json!({})),
        ("/v1/sessions/q/messages?dry_run=1", json!({"text": "hi"})),
        ("/v1/sessions/q/interrupts/toolu_1?dry_run=1", json!({"approved": true})),
    ] {
        let answer = call(http.post(format!("{url}{path}")).json(&body)).await;
        refused(&answer, 400, "invalid_request", "dry_run", &["this route takes: none"], path);
    }
    let answer = get("/v1/sessions/q?verbose=1").await;
    refused(&answer, 400, "invalid_request", "verbose", &["this route takes: none"], "a snapshot parameter");
    for (query, field) in
        [("after=-1", "after"), ("after=x", "after"), ("follow=maybe", "follow"), ("x=1", "x")]
    {
        let answer = get(&format!("/v1/sessions/q/events?{query}")).await;
        refused(&answer, 400, "invalid_request", field, &[], query);
    }
    let answer = call(http.get(format!("{url}/v1/sessions/q/events")).header("last-event-id", "soon")).await;
    refused(&answer, 400, "invalid_request", "Last-Event-ID", &[], "Last-Event-ID");
    let answer = call(http.get(format!("{url}/v1/sessions/q/events")).header("last-event-id", "-3")).await;
    refused(&answer, 400, "invalid_request", "Last-Event-ID", &[], "a negative Last-Event-ID");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn ids_in_the_path_that_cannot_exist_and_wrong_methods_get_json_errors() {
    let (_pki, server, http) = server().await;
    let url = &server.url;

    let answer = call(http.get(format!("{url}/v1/sessions/%FF%FE"))).await;
    refused(&answer, 400, "invalid_request", "id", &["UTF-8"], "a non-UTF-8 id");
    let answer = call(http.get(format!("{url}/v1/sessions/%FF/events"))).await;
    refused(&answer, 400, "invalid_request", "id", &["UTF-8"], "a non-UTF-8 id for events");
    let long = "a".repeat(300);
    let answer = call(http.get(format!("{url}/v1/sessions/{long}"))).await;
    refused(&answer, 400, "invalid_request", "id", &["1 to 200 characters"], "a 300-byte id");
    let answer =
        call(http.post(format!("{url}/v1/sessions/{long}/messages")).json(&json!({"text": "hi"}))).await;
    refused(&answer, 400, "invalid_request", "id", &["1 to 200 characters"], "a message to a 300-byte id");
    let answer =
        call(http.post(format!("{url}/v1/sessions/s/interrupts/{long}")).json(&json!({"approved": true})))
            .await;
    refused(
        &answer,
        400,
        "invalid_request",
        "interrupt_id",
        &["1 to 200 characters"],
        "a 300-byte interrupt id",
    );
    // The document's lengths count characters: 150 of two bytes each are within them.
    let wide = "é".repeat(150);
    let answer =
        call(http.post(format!("{url}/v1/sessions/s/interrupts/{wide}")).json(&json!({"approved": true})))
            .await;
    refused(&answer, 404, "session_not_found", "", &[], "an interrupt id of 150 characters (300 bytes)");
    let answer = call(http.get(format!("{url}/v1/sessions/{wide}"))).await;
    refused(&answer, 404, "session_not_found", "", &[], "a session id of 150 characters (300 bytes)");
    for query in
        [format!("/v1/sessions?after={wide}"), format!("/v1/audit?principal={wide}&session_id={wide}")]
    {
        let answer = call(http.get(format!("{url}{query}"))).await;
        assert_eq!(answer.status, 200, "{query}: {}", answer.body);
    }
    let answer =
        call(http.post(format!("{url}/v1/sessions/s/interrupts/%C3%28")).json(&json!({"approved": true})))
            .await;
    refused(&answer, 400, "invalid_request", "interrupt_id", &["UTF-8"], "a non-UTF-8 interrupt id");
    let answer = call(http.post(format!("{url}/v1/sessions")).json(&json!({"session_id": long}))).await;
    refused(
        &answer,
        400,
        "invalid_request",
        "session_id",
        &["1 to 200 characters"],
        "creating a 300-byte id",
    );
    let answer = call(http.get(format!("{url}/v1/sessions/unknown"))).await;
    refused(&answer, 404, "session_not_found", "", &["unknown"], "an unknown session");

    let answer = call(http.delete(format!("{url}/v1/sessions"))).await;
    refused(&answer, 405, "method_not_allowed", "", &["DELETE"], "DELETE /v1/sessions");
    let answer = call(http.put(format!("{url}/v1/sessions/s/messages"))).await;
    refused(&answer, 405, "method_not_allowed", "", &["PUT"], "PUT a message");
    let answer = call(http.get(format!("{url}/v2/nothing"))).await;
    refused(&answer, 404, "not_found", "", &["/openapi.json"], "an unknown route");

    // Still serving.
    let answer = call(http.get(format!("{url}/v1/sessions"))).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    server.stop().await;
}
