//! The example tools end to end: results, argument validation, and outbound HTTP with the
//! idempotency key.

use tollgate_sandbox::{CallError, DeferredExecution};
use tollgate_test_guests as guests;

use crate::util::{TestServer, ToolsDir};

/// The payments example, allowed to reach `allowed` (`host:port`) and configured with `url`.
async fn payments(allowed: &str, url: &str) -> tollgate_sandbox::ToolSet {
    ToolsDir::new()
        .component("payments", guests::PAYMENTS)
        .manifest(
            "payments",
            &format!("allowed_outbound_hosts = [\"http://{allowed}\"]\n[config]\nPAYMENTS_URL = \"{url}\"\n"),
        )
        .load()
        .await
}

fn execution(attempt: u32) -> DeferredExecution {
    DeferredExecution::new("session-42", "turn-1", "toolu_01", attempt)
}

#[tokio::test]
async fn lookup_order_answers_known_orders_and_reports_unknown_ones_as_tool_errors() {
    let tools = ToolsDir::new().component("orders", guests::ORDERS).load().await;
    let found = tools.call("lookup_order", r#"{"order_id":"7"}"#, None).await.unwrap();
    assert!(!found.is_error);
    assert_eq!(found.text(), r#"{"order_id":"7","status":"delivered","total_cents":4200,"currency":"EUR"}"#);
    let missing = tools.call("lookup_order", r#"{"order_id":"700"}"#, None).await.unwrap();
    assert!(missing.is_error);
    assert_eq!(missing.text(), "order 700 not found");
}

#[tokio::test]
async fn arguments_that_fail_the_schema_are_refused_before_the_handler_runs() {
    let server = TestServer::start(200, r#"{"refund_id":"r1"}"#).await;
    let tools = payments(&server.addr.to_string(), &server.url()).await;
    let cases = [
        (r#"{"order_id":"7"}"#, "amount_cents"),
        (r#"{"order_id":"7","amount_cents":0}"#, "minimum"),
        (r#"{"order_id":7,"amount_cents":100}"#, "/order_id"),
        (r#"{"order_id":"7","amount_cents":100,"sneaky":true}"#, "sneaky"),
        (r#"[1,2]"#, "object"),
    ];
    for (arguments, expected) in cases {
        let error = tools.call("create_refund", arguments, Some(&execution(1))).await.unwrap_err();
        let text = error.to_string();
        assert!(matches!(error, CallError::InvalidArguments { .. }), "{arguments}: {text}");
        assert!(text.contains(expected), "{arguments}: {text}");
    }
    assert!(server.received().is_empty(), "the handler ran: {:?}", server.received());
}

#[tokio::test]
async fn invalid_json_and_unknown_tools_are_refused_by_name() {
    let tools = ToolsDir::new().component("orders", guests::ORDERS).load().await;
    let error = tools.call("lookup_order", "{order_id: 7", None).await.unwrap_err();
    assert!(
        matches!(error, CallError::InvalidJson { .. }) && error.to_string().contains("lookup_order"),
        "{error}"
    );
    let error = tools.call("lookup_orders", "{}", None).await.unwrap_err();
    assert_eq!(error, CallError::UnknownTool { tool: "lookup_orders".into() });
}

#[tokio::test]
async fn create_refund_posts_once_with_the_idempotency_key_to_an_allowed_host() {
    let server = TestServer::start(201, r#"{"refund_id":"rf_1","status":"succeeded"}"#).await;
    let tools = payments(&server.addr.to_string(), &server.url()).await;
    let output = tools
        .call(
            "create_refund",
            r#"{"order_id":"7","amount_cents":4200,"reason":"damaged"}"#,
            Some(&execution(1)),
        )
        .await
        .unwrap();
    assert_eq!(output.text(), r#"{"refund_id":"rf_1","status":"succeeded"}"#);
    let received = server.received();
    assert_eq!(received.len(), 1);
    assert_eq!((received[0].method.as_str(), received[0].path.as_str()), ("POST", "/refunds"));
    assert_eq!(received[0].header("idempotency-key"), Some("session-42/turn-1/toolu_01"));
    let body: serde_json::Value = serde_json::from_str(&received[0].body).unwrap();
    assert_eq!(body, serde_json::json!({"order_id":"7","amount_cents":4200,"reason":"damaged"}));
}

#[tokio::test]
async fn create_refund_maps_server_answers_to_errors_the_engine_can_act_on() {
    for (status, check) in [(503u16, "retryable"), (422, "refused")] {
        let server = TestServer::start(status, r#"{"error":"nope"}"#).await;
        let tools = payments(&server.addr.to_string(), &server.url()).await;
        let result =
            tools.call("create_refund", r#"{"order_id":"7","amount_cents":1}"#, Some(&execution(2))).await;
        match check {
            "retryable" => {
                let error = result.unwrap_err();
                assert!(error.is_retryable(), "{error}");
                assert_eq!(error.message_for_model(), "payments service returned 503");
            }
            _ => {
                let output = result.unwrap();
                assert!(output.is_error);
                assert_eq!(output.text(), r#"refund refused: {"error":"nope"}"#);
            }
        }
        assert_eq!(server.received()[0].header("idempotency-key"), Some("session-42/turn-1/toolu_01"));
    }
}

#[tokio::test]
async fn create_refund_without_its_config_or_outside_a_deferred_step_fails_cleanly() {
    let tools = ToolsDir::new().component("payments", guests::PAYMENTS).load().await;
    let error = tools
        .call("create_refund", r#"{"order_id":"7","amount_cents":1}"#, Some(&execution(1)))
        .await
        .unwrap_err();
    assert_eq!(
        error,
        CallError::Failed {
            tool: "create_refund".into(),
            message: "PAYMENTS_URL is not configured".into(),
            stderr: None
        }
    );

    let tools = ToolsDir::new()
        .component("payments", guests::PAYMENTS)
        .manifest("payments", "[config]\nPAYMENTS_URL = \"http://127.0.0.1:9\"\n")
        .load()
        .await;
    let error = tools.call("create_refund", r#"{"order_id":"7","amount_cents":1}"#, None).await.unwrap_err();
    assert_eq!(error.message_for_model(), "create_refund must run as a deferred call");
}

#[tokio::test]
async fn create_refund_to_a_host_off_the_allow_list_is_denied_and_never_connects() {
    let allowed = TestServer::start(200, "{}").await;
    let other = TestServer::start(200, "{}").await;
    let tools = payments(&allowed.addr.to_string(), &other.url()).await;
    let error = tools
        .call("create_refund", r#"{"order_id":"7","amount_cents":1}"#, Some(&execution(1)))
        .await
        .unwrap_err();
    assert!(!error.is_retryable(), "{error}");
    assert!(error.message_for_model().contains("outbound request denied"), "{error}");
    assert!(other.received().is_empty() && allowed.received().is_empty());
}

#[tokio::test]
async fn a_retryable_tool_sees_its_attempt_and_the_same_key_each_time() {
    let tools = ToolsDir::new().component("hostile", guests::HOSTILE).load().await;
    for attempt in 1..=2 {
        let error = tools.call("flaky", "{}", Some(&execution(attempt))).await.unwrap_err();
        assert_eq!(
            error,
            CallError::Retryable {
                tool: "flaky".into(),
                message: format!("try again (attempt {attempt})"),
                stderr: None
            }
        );
    }
    let output = tools.call("flaky", "{}", Some(&execution(3))).await.unwrap();
    assert_eq!(output.text(), "ok on attempt 3 with key session-42/turn-1/toolu_01");
}

#[tokio::test]
async fn every_call_gets_a_fresh_instance() {
    let tools = ToolsDir::new().component("hostile", guests::HOSTILE).load().await;
    for _ in 0..3 {
        assert_eq!(tools.call("counter", "{}", None).await.unwrap().text(), "1");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_calls_all_complete() {
    let tools = ToolsDir::new().component("orders", guests::ORDERS).load().await;
    let mut handles = Vec::new();
    for i in 0..200 {
        let tools = tools.clone();
        handles.push(tokio::spawn(async move {
            let id = i % 99 + 1;
            let output =
                tools.call("lookup_order", &format!(r#"{{"order_id":"{id}"}}"#), None).await.unwrap();
            assert!(output.text().contains(&format!("\"total_cents\":{}", 600 * id)));
        }));
    }
    for handle in handles {
        handle.await.unwrap();
    }
}
