//! Instances prepared in advance of calls: each call still gets a never-used instance, and every limit
//! and grant holds per call on a prepared one. Each test first makes sure the call it checks runs
//! on a prepared instance (`settled`, then `prepared_instances`).

use std::time::{Duration, Instant};

use tollgate_sandbox::{CallError, Manifests, Sandbox, SandboxConfig, ToolSet};
use tollgate_test_guests as guests;

use crate::util::{ToolsDir, sandbox};

async fn hostile(manifest: &str) -> (ToolsDir, ToolSet) {
    let dir = ToolsDir::new().component("hostile", guests::HOSTILE).manifest("hostile", manifest);
    let tools = dir.load().await;
    (dir, tools)
}

/// Calls `echo` (the instance is then prepared for the next call) and waits until it is.
async fn prepare(tools: &ToolSet) {
    let output = tools.call("echo", r#"{"text":"warm"}"#, None).await.unwrap();
    assert_eq!(output.text(), "warm (attempt 1, key None)");
    tools.settled().await;
    assert_eq!(tools.prepared_instances(), 1, "the next instance is prepared after a call");
}

#[tokio::test]
async fn a_guest_global_state_does_not_survive_into_a_prepared_instance() {
    let (_dir, tools) = hostile("").await;
    for _ in 0..5 {
        prepare(&tools).await;
        assert_eq!(tools.call("counter", "{}", None).await.unwrap().text(), "1");
    }
}

#[tokio::test]
async fn back_to_back_calls_each_get_a_never_used_instance() {
    let (_dir, tools) = hostile("").await;
    for _ in 0..200 {
        assert_eq!(tools.call("counter", "{}", None).await.unwrap().text(), "1");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_never_share_an_instance() {
    let (_dir, tools) = hostile("").await;
    let mut calls = Vec::new();
    for _ in 0..100 {
        let tools = tools.clone();
        calls.push(tokio::spawn(async move { tools.call("counter", "{}", None).await.unwrap().text() }));
    }
    for call in calls {
        assert_eq!(call.await.unwrap(), "1");
    }
}

#[tokio::test]
async fn an_infinite_loop_on_a_prepared_instance_is_stopped_near_its_deadline() {
    let (_dir, tools) = hostile("timeout_ms = 300\n").await;
    prepare(&tools).await;
    let started = Instant::now();
    let error = tools.call("spin", "{}", None).await.unwrap_err();
    let took = started.elapsed();
    assert_eq!(error, CallError::DeadlineExceeded { tool: "spin".into(), limit: Duration::from_millis(300) });
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_millis(1500),
        "stopped after {took:?}"
    );
}

#[tokio::test]
async fn a_prepared_instance_deadline_starts_with_its_call_not_its_preparation() {
    let (_dir, tools) = hostile("timeout_ms = 300\n").await;
    prepare(&tools).await;
    // Prepared longer ago than the whole timeout: a deadline counted from preparation would
    // stop this call at once.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let output = tools.call("sleep", r#"{"ms":100}"#, None).await.unwrap();
    assert_eq!(output.text(), "awake");
    prepare(&tools).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let started = Instant::now();
    let error = tools.call("sleep", r#"{"ms":10000}"#, None).await.unwrap_err();
    assert!(matches!(error, CallError::DeadlineExceeded { .. }), "{error}");
    assert!(started.elapsed() < Duration::from_millis(1500), "stopped after {:?}", started.elapsed());
}

#[tokio::test]
async fn a_memory_bomb_on_a_prepared_instance_is_stopped_at_the_cap() {
    let (_dir, tools) = hostile("memory_mb = 32\n").await;
    for _ in 0..2 {
        prepare(&tools).await;
        let error = tools.call("memory_bomb", "{}", None).await.unwrap_err();
        assert_eq!(error, CallError::MemoryLimit { tool: "memory_bomb".into(), limit_bytes: 32 << 20 });
    }
}

#[tokio::test]
async fn a_prepared_instance_reports_only_its_own_panic() {
    let (_dir, tools) = hostile("").await;
    for _ in 0..2 {
        prepare(&tools).await;
        let text = tools.call("panic", "{}", None).await.unwrap_err().to_string();
        assert_eq!(text.matches("boom").count(), 1, "the stderr of one call only: {text}");
    }
    prepare(&tools).await;
    let error = tools.call("recurse", "{}", None).await.unwrap_err().to_string();
    assert!(error.contains("stack overflow") || error.contains("recursion"), "{error}");
}

#[tokio::test]
async fn a_prepared_instance_holds_its_grants_and_config_and_nothing_else() {
    let (_dir, tools) = hostile("[config]\nGREETING = \"hello\"\n").await;
    prepare(&tools).await;
    let output = tools.call("config_get", r#"{"name":"GREETING"}"#, None).await.unwrap();
    assert_eq!(output.text(), r#"Some("hello")"#);
    prepare(&tools).await;
    let output = tools.call("read_env", r#"{"name":"HOME"}"#, None).await.unwrap();
    assert_eq!(output.text(), "None of 0 variables");
    prepare(&tools).await;
    let error = tools.call("read_file", r#"{"path":"/etc/passwd"}"#, None).await.unwrap_err();
    assert!(matches!(error, CallError::Failed { .. }), "{error}");
}

/// A sandbox of its own (settings differ from the shared one), with the shared compile cache.
fn sandbox_with(config: impl FnOnce(&mut SandboxConfig)) -> Sandbox {
    let mut settings = sandbox().config().clone();
    config(&mut settings);
    Sandbox::new(settings).unwrap()
}

#[tokio::test]
async fn prepared_instances_stay_within_the_sandbox_cap() {
    let sandbox = sandbox_with(|c| c.prepared_instances = 1);
    let dirs = [ToolsDir::new(), ToolsDir::new()].map(|d| d.component("hostile", guests::HOSTILE));
    let mut sets = Vec::new();
    for dir in &dirs {
        sets.push(sandbox.load_tools(&dir.tools(), &Manifests::default()).await.unwrap());
    }
    for tools in &sets {
        assert_eq!(tools.call("counter", "{}", None).await.unwrap().text(), "1");
        tools.settled().await;
    }
    assert_eq!(sets.iter().map(ToolSet::prepared_instances).sum::<usize>(), 1);
    // The first set's call takes its instance: the second set may now have one.
    assert_eq!(sets[0].call("counter", "{}", None).await.unwrap().text(), "1");
    sets[0].settled().await;
    assert_eq!(sets.iter().map(ToolSet::prepared_instances).sum::<usize>(), 1);
}

#[tokio::test]
async fn big_components_and_a_zero_cap_are_never_prepared() {
    let small_only = sandbox_with(|c| c.prepare_max_component_bytes = 1024);
    let none = sandbox_with(|c| c.prepared_instances = 0);
    for sandbox in [small_only, none] {
        let dir = ToolsDir::new().component("hostile", guests::HOSTILE);
        let tools = sandbox.load_tools(&dir.tools(), &Manifests::default()).await.unwrap();
        for _ in 0..3 {
            assert_eq!(tools.call("counter", "{}", None).await.unwrap().text(), "1");
            tools.settled().await;
            assert_eq!(tools.prepared_instances(), 0);
        }
    }
}

#[tokio::test]
async fn a_prepared_instance_is_dropped_when_its_tool_is_not_called() {
    let sandbox = sandbox_with(|c| c.prepared_idle = Duration::from_millis(200));
    let dir = ToolsDir::new().component("hostile", guests::HOSTILE);
    let tools = sandbox.load_tools(&dir.tools(), &Manifests::default()).await.unwrap();
    prepare(&tools).await;
    let started = Instant::now();
    while tools.prepared_instances() == 1 {
        assert!(started.elapsed() < Duration::from_secs(10), "still prepared after {:?}", started.elapsed());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(tools.call("counter", "{}", None).await.unwrap().text(), "1");
}
