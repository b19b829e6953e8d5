//! Guests that attack or break their host. Each test checks the clean, specific error and that
//! the next call on the same tool set still works.

use std::time::{Duration, Instant};

use tollgate_sandbox::{CallError, ToolSet};
use tollgate_test_guests as guests;

use crate::util::{TestServer, ToolsDir};

async fn hostile(manifest: &str) -> (ToolsDir, ToolSet) {
    let dir = ToolsDir::new().component("hostile", guests::HOSTILE).manifest("hostile", manifest);
    let tools = dir.load().await;
    (dir, tools)
}

async fn assert_next_call_works(tools: &ToolSet) {
    let output = tools.call("echo", r#"{"text":"still here"}"#, None).await.unwrap();
    assert_eq!(output.text(), "still here (attempt 1, key None)");
}

#[tokio::test]
async fn an_infinite_loop_is_stopped_near_its_deadline() {
    let (_dir, tools) = hostile("timeout_ms = 300\n").await;
    let started = Instant::now();
    let error = tools.call("spin", "{}", None).await.unwrap_err();
    let took = started.elapsed();
    assert_eq!(error, CallError::DeadlineExceeded { tool: "spin".into(), limit: Duration::from_millis(300) });
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_millis(1500),
        "stopped after {took:?}"
    );
    assert_next_call_works(&tools).await;
}

#[tokio::test]
async fn a_tool_sleeping_past_its_deadline_is_stopped_near_it() {
    let (_dir, tools) = hostile("timeout_ms = 300\n").await;
    let started = Instant::now();
    let error = tools.call("sleep", r#"{"ms":10000}"#, None).await.unwrap_err();
    let took = started.elapsed();
    assert!(matches!(error, CallError::DeadlineExceeded { .. }), "{error}");
    assert!(took < Duration::from_millis(1500), "stopped after {took:?}");
    assert_next_call_works(&tools).await;
}

#[tokio::test]
async fn a_memory_bomb_is_stopped_at_the_cap() {
    let (_dir, tools) = hostile("memory_mb = 32\n").await;
    let error = tools.call("memory_bomb", "{}", None).await.unwrap_err();
    assert_eq!(error, CallError::MemoryLimit { tool: "memory_bomb".into(), limit_bytes: 32 << 20 });
    assert!(error.to_string().contains("32 MiB"), "{error}");
    assert_next_call_works(&tools).await;
}

#[tokio::test]
async fn unbounded_recursion_traps_cleanly() {
    let (_dir, tools) = hostile("").await;
    let error = tools.call("recurse", "{}", None).await.unwrap_err();
    let text = error.to_string();
    assert!(matches!(error, CallError::Trapped { .. }), "{text}");
    assert!(text.contains("stack overflow") || text.contains("recursion"), "{text}");
    assert_next_call_works(&tools).await;
}

#[tokio::test]
async fn a_panic_is_reported_with_its_message() {
    let (_dir, tools) = hostile("").await;
    let error = tools.call("panic", "{}", None).await.unwrap_err();
    let text = error.to_string();
    assert!(matches!(error, CallError::Trapped { .. }), "{text}");
    assert!(text.contains("panicked") && text.contains("boom"), "{text}");
    assert!(!error.is_retryable());
    assert_next_call_works(&tools).await;
}

#[tokio::test]
async fn a_hundred_megabytes_of_output_is_refused_at_the_bound() {
    let (_dir, tools) = hostile("memory_mb = 400\n").await;
    let error = tools.call("big_output", r#"{"megabytes":100}"#, None).await.unwrap_err();
    assert_eq!(
        error,
        CallError::OutputTooLarge { tool: "big_output".into(), bytes: 100 << 20, limit: 1 << 20 }
    );
    assert_next_call_works(&tools).await;
}

#[tokio::test]
async fn floods_of_stdout_stderr_and_log_lines_are_bounded_and_harmless() {
    let (_dir, tools) = hostile("").await;
    assert_eq!(tools.call("print_flood", r#"{"megabytes":16}"#, None).await.unwrap().text(), "done");
    assert_eq!(tools.call("log_flood", r#"{"count":5000}"#, None).await.unwrap().text(), "logged");
    assert_next_call_works(&tools).await;
}

#[tokio::test]
async fn the_host_filesystem_is_out_of_reach() {
    let (_dir, tools) = hostile("").await;
    for path in ["/etc/passwd", "../../../../etc/passwd", "."] {
        let error = tools.call("read_file", &format!(r#"{{"path":"{path}"}}"#), None).await.unwrap_err();
        assert!(matches!(error, CallError::Failed { .. }), "{path}: {error}");
    }
    assert_next_call_works(&tools).await;
}

#[tokio::test]
async fn a_granted_directory_is_read_only_unless_granted_writable() {
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("hello.txt"), "hello from the host").unwrap();
    let writable = tempfile::tempdir().unwrap();
    let manifest = format!(
        "[[dirs]]\npath = \"{}\"\nguest = \"/data\"\n\n[[dirs]]\npath = \"{}\"\nguest = \"/out\"\nwritable = true\n",
        data.path().display(),
        writable.path().display()
    );
    let (_dir, tools) = hostile(&manifest).await;
    let read = tools.call("read_file", r#"{"path":"/data/hello.txt"}"#, None).await.unwrap();
    assert_eq!(read.text(), "hello from the host");
    let denied =
        tools.call("write_file", r#"{"path":"/data/new.txt","content":"x"}"#, None).await.unwrap_err();
    assert!(matches!(denied, CallError::Failed { .. }), "{denied}");
    assert!(!data.path().join("new.txt").exists());
    let escape =
        tools.call("read_file", r#"{"path":"/data/../../../../etc/passwd"}"#, None).await.unwrap_err();
    assert!(matches!(escape, CallError::Failed { .. }), "{escape}");
    tools.call("write_file", r#"{"path":"/out/new.txt","content":"made by the tool"}"#, None).await.unwrap();
    assert_eq!(std::fs::read_to_string(writable.path().join("new.txt")).unwrap(), "made by the tool");
}

#[tokio::test]
async fn the_host_environment_is_invisible_and_config_is_only_what_is_granted() {
    // SAFETY: set before any thread of this test reads the environment; no other test reads it.
    unsafe { std::env::set_var("TOLLGATE_TEST_SECRET", "hunter2") };
    let (_dir, tools) = hostile("[config]\nGRANTED = { env = \"TOLLGATE_TEST_SECRET\" }\n").await;
    let env = tools.call("read_env", r#"{"name":"TOLLGATE_TEST_SECRET"}"#, None).await.unwrap();
    assert_eq!(env.text(), "None of 0 variables");
    let granted = tools.call("config_get", r#"{"name":"GRANTED"}"#, None).await.unwrap();
    assert_eq!(granted.text(), "Some(\"hunter2\")");
    let other = tools.call("config_get", r#"{"name":"TOLLGATE_TEST_SECRET"}"#, None).await.unwrap();
    assert_eq!(other.text(), "None");
    assert_next_call_works(&tools).await;
}

#[tokio::test]
async fn http_reaches_allowed_hosts_only() {
    let allowed = TestServer::start(200, "welcome").await;
    let refused = TestServer::start(200, "should never be seen").await;
    let (_dir, tools) = hostile(&format!("allowed_outbound_hosts = [\"http://{}\"]\n", allowed.addr)).await;
    let ok = tools.call("http_get", &format!(r#"{{"url":"{}/hello"}}"#, allowed.url()), None).await.unwrap();
    assert_eq!(ok.text(), "200 welcome");
    let error =
        tools.call("http_get", &format!(r#"{{"url":"{}/steal"}}"#, refused.url()), None).await.unwrap_err();
    assert!(error.message_for_model().contains("outbound request denied"), "{error}");
    let alias = format!(r#"{{"url":"http://localhost:{}/alias"}}"#, allowed.addr.port());
    assert!(
        tools.call("http_get", &alias, None).await.is_err(),
        "`localhost` is not the granted `127.0.0.1`"
    );
    assert_eq!(allowed.received().len(), 1);
    assert!(refused.received().is_empty());
    assert_next_call_works(&tools).await;
}

#[tokio::test]
async fn raw_tcp_is_denied_unless_granted_to_that_address() {
    let target = TestServer::start(200, "").await;
    let other = TestServer::start(200, "").await;
    let (_dir, tools) = hostile("").await;
    let error =
        tools.call("tcp_connect", &format!(r#"{{"addr":"{}"}}"#, target.addr), None).await.unwrap_err();
    assert!(matches!(error, CallError::Failed { .. }), "{error}");
    assert_next_call_works(&tools).await;

    let (_dir, tools) = hostile(&format!("allowed_outbound_hosts = [\"tcp://{}\"]\n", target.addr)).await;
    assert_eq!(
        tools.call("tcp_connect", &format!(r#"{{"addr":"{}"}}"#, target.addr), None).await.unwrap().text(),
        "connected"
    );
    let error =
        tools.call("tcp_connect", &format!(r#"{{"addr":"{}"}}"#, other.addr), None).await.unwrap_err();
    assert!(matches!(error, CallError::Failed { .. }), "{error}");
    // Give the accept loop a moment to record the one granted connection.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(other.received().is_empty());
}
