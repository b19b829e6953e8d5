//! What of a call may have left the machine ([`Reach`]), as the host needs it to tell a write that
//! may have taken effect from one that provably did not: the example refund tool against a
//! service that answers, one that refuses the connection, one that never answers, and a host off
//! the allow-list; a call with no request; a writable directory.

use tollgate_sandbox::{CallError, DeferredExecution, Reach};
use tollgate_test_guests as guests;

use crate::util::{TestServer, ToolsDir};

const REFUND: &str = r#"{"order_id":"7","amount_cents":1}"#;

fn execution() -> DeferredExecution {
    DeferredExecution::new("session-42", "turn-1", "toolu_01", 1)
}

/// The payments example, allowed to reach every loopback port, with `url` as its service and
/// `extra` manifest lines.
async fn payments(url: &str, extra: &str) -> tollgate_sandbox::ToolSet {
    ToolsDir::new()
        .component("payments", guests::PAYMENTS)
        .manifest(
            "payments",
            &format!(
                "allowed_outbound_hosts = [\"http://127.0.0.1:*\"]\ntimeout_ms = 2000\n{extra}\n\
                 [config]\nPAYMENTS_URL = \"{url}\"\n"
            ),
        )
        .load()
        .await
}

/// A loopback port nothing listens on: connecting to it is refused.
async fn closed_port() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    port
}

#[tokio::test]
async fn a_request_that_reached_the_service_may_have_taken_effect_even_when_the_call_failed() {
    let busy = TestServer::start(503, "busy").await;
    let report =
        payments(&busy.url(), "").await.call_reporting("create_refund", REFUND, Some(&execution())).await;
    assert!(matches!(report.result, Err(CallError::Retryable { .. })), "{:?}", report.result);
    assert_eq!(busy.received().len(), 1);
    assert_eq!(report.reach, Reach::MayHaveLeft);
}

#[tokio::test]
async fn a_refused_connection_and_a_denied_host_never_left_the_machine() {
    let refused = format!("http://127.0.0.1:{}", closed_port().await);
    let report =
        payments(&refused, "").await.call_reporting("create_refund", REFUND, Some(&execution())).await;
    let Err(error) = &report.result else {
        panic!("a refused connection fails the call: {:?}", report.result)
    };
    assert!(error.message_for_model().contains("unreachable"), "{error}");
    assert_eq!(report.reach, Reach::Contained, "the connection was refused: nothing was sent");

    let other = TestServer::start(200, "{}").await;
    let denied = ToolsDir::new()
        .component("payments", guests::PAYMENTS)
        .manifest(
            "payments",
            &format!(
                "allowed_outbound_hosts = [\"http://example.invalid\"]\n[config]\nPAYMENTS_URL = \"{}\"\n",
                other.url()
            ),
        )
        .load()
        .await;
    let report = denied.call_reporting("create_refund", REFUND, Some(&execution())).await;
    assert!(matches!(report.result, Err(CallError::Failed { .. })), "{:?}", report.result);
    assert!(other.received().is_empty());
    assert_eq!(report.reach, Reach::Contained, "the allow-list refused it before any connection");
}

#[tokio::test]
async fn a_request_written_to_a_service_that_never_answers_may_have_taken_effect() {
    // Accepts, reads, never answers: the call runs into its deadline after the request was sent.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let report = payments(&url, "").await.call_reporting("create_refund", REFUND, Some(&execution())).await;
    assert!(matches!(report.result, Err(CallError::DeadlineExceeded { .. })), "{:?}", report.result);
    assert_eq!(report.reach, Reach::MayHaveLeft);
    silent.abort();
}

#[tokio::test]
async fn a_call_without_a_request_is_contained_unless_it_may_write_a_granted_directory() {
    let tools = ToolsDir::new().component("orders", guests::ORDERS).load().await;
    let report = tools.call_reporting("lookup_order", r#"{"order_id":"7"}"#, None).await;
    assert!(report.result.is_ok());
    assert_eq!(report.reach, Reach::Contained);
    let invalid = tools.call_reporting("lookup_order", r#"{"order":"7"}"#, None).await;
    assert!(matches!(invalid.result, Err(CallError::InvalidArguments { .. })));
    assert_eq!(invalid.reach, Reach::Contained, "refused before it ran");

    let dir = tempfile::tempdir().unwrap();
    let grant = format!(
        "[[dirs]]\npath = {:?}\nguest = \"/data\"\nwritable = true\n",
        dir.path().display().to_string()
    );
    let port = closed_port().await;
    let report = payments(&format!("http://127.0.0.1:{port}"), &grant)
        .await
        .call_reporting("create_refund", REFUND, Some(&execution()))
        .await;
    assert!(report.result.is_err());
    assert_eq!(report.reach, Reach::MayHaveLeft, "its writes to /data are not watched");
}
