//! The CLI's own limits with the real CLI: a turn that reaches `max_turns` or `max_budget_usd`
//! ends at once with that reason, after one attempt. A rerun would pay for its model calls again,
//! run its inline tools again, and stop at the same limit.

use serde_json::Value;

use crate::world::{Refund, World};

/// The agent: `Bash` only (read, inline), with `option` in its static `[options]` table.
fn limited_agent(world: &World, option: &str) {
    let agent = &world.agent;
    let _ = std::fs::remove_dir_all(agent.join("tools"));
    let _ = std::fs::remove_file(agent.join("agent.wasm"));
    let config = format!(
        "[agent]\nflow_type = \"Limited\"\n\
         [options]\nmodel = \"claude-sonnet-4-5\"\ntools = [\"Bash\"]\npermission_mode = \"default\"\n{option}\n\
         [policies]\ndefault_effect = \"unclassified\"\nBash = {{ effect = \"read\" }}\n"
    );
    std::fs::write(agent.join("tollgate.toml"), config).expect("write the agent config");
}

/// Runs one turn that calls `Bash` and answers (two model calls) under `option`, and checks it
/// failed once with `reason`, its CLI result's subtype `subtype` in the error.
async fn one_attempt_under(test: &str, option: &str, subtype: &str, reason: &str) {
    let Some(world) = World::new(test, Refund::SingleAttemptWithApproval).await else { return };
    limited_agent(&world, option);
    let worker = world.worker("a");
    world.send("s", r#"call Bash {"command":"echo limited"}"#).await;
    let failed = world.wait_idle_after("s", 1).await;
    let error = failed.last_turn_error.clone().unwrap_or_default();
    assert!(error.contains(subtype), "{error}\n{}", world.diagnostics());

    let events = world.events("s").await;
    let segments = worker.log_text().lines().filter(|line| line.contains("segment starting")).count();
    assert_eq!(segments, 1, "one attempt, not three\n{}", world.diagnostics());
    let retried: Vec<&str> =
        events.iter().filter(|e| e.kind == "attempt_failed").map(|e| e.payload.get()).collect();
    assert!(retried.is_empty(), "the limit is not retried: {retried:?}");
    let turn_failed = events.iter().find(|e| e.kind == "turn_failed").expect("a turn_failed event");
    let payload: Value = serde_json::from_str(turn_failed.payload.get()).expect("JSON");
    assert_eq!(payload["reason"], reason, "{payload}");
    let started = events.iter().filter(|e| e.kind == "turn_started").count();
    assert_eq!(started, 1, "one attempt of the segment");
    let echoes = world
        .mock
        .message_requests()
        .iter()
        .filter(|request| request.reply.message().is_some_and(|reply| reply.tool_uses().count() > 0))
        .count();
    assert_eq!(echoes, 1, "the inline Bash call ran once: {}", world.diagnostics());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_turn_that_reaches_max_turns_fails_at_once_with_that_reason() {
    one_attempt_under("max_turns", "max_turns = 1", "error_max_turns", "max_turns").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_turn_that_reaches_max_budget_usd_fails_at_once_with_that_reason() {
    one_attempt_under(
        "max_budget_usd",
        "max_budget_usd = 0.000001",
        "error_max_budget_usd",
        "max_budget_usd",
    )
    .await;
}
