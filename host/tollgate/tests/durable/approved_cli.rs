//! An approved CLI tool's record comes from what it did, with the real CLI: the support agent's
//! options factory sends a `Bash` command with `|` or `&` to a human; once approved, the resumed
//! segment's CLI runs it, and the call is recorded from the CLI's tool result (`succeeded` with
//! its output, `failed` with its error), or `outcome_unknown` when the segment ended without one.

use crate::world::{Refund, World};

/// Sends `command` as a `Bash` call in `session`, approves it, and returns the finished turn's
/// one record: its status and text.
async fn approve_and_record(world: &World, session: &str, command: &str) -> (String, Option<String>) {
    world.send(session, &format!("call Bash {}", serde_json::json!({"command": command}))).await;
    let waiting = world.wait_for(session, "the approval", |s| s.status == "awaiting_approval").await;
    let id = waiting.pending_interrupts[0].interrupt_id.clone();
    assert_eq!(waiting.tool_calls[0].state.name(), "pending_approval");
    world.decide(session, &id, true, None, "k1").await;
    let done = world.wait_idle_after(session, 1).await;
    assert_eq!(done.last_turn_error, None, "{session}: {}", world.diagnostics());
    assert_eq!(done.tool_calls.len(), 1, "{session}: {done:#?}");
    let call = &done.tool_calls[0];
    assert_eq!(call.tool_call_id, id);
    let finished: Vec<String> = world
        .events(session)
        .await
        .iter()
        .filter(|e| e.kind == "tool_call_finished" && e.payload.get().contains(&id))
        .map(|e| e.payload.get().to_owned())
        .collect();
    assert_eq!(finished.len(), 1, "{session}: one tool_call_finished, from the run: {finished:?}");
    assert!(finished[0].contains(&format!(r#""status":"{}""#, call.state.name())), "{finished:?}");
    (call.state.name().to_owned(), call.state.text().map(str::to_owned))
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approved_bash_call_is_recorded_from_the_clis_result_of_its_run() {
    let Some(world) = World::new("approved CLI tool records", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let _a = world.worker("a");
    let (status, output) = approve_and_record(&world, "ran", "echo tollgate | wc -c").await;
    assert_eq!(status, "succeeded");
    let output = output.unwrap_or_default();
    assert!(output.trim_start().starts_with('9'), "the command's output, not a placeholder: {output:?}");

    let missing = world.dir.path().join("no-such-file");
    let command = format!("cat {} && echo never", missing.display());
    let (status, error) = approve_and_record(&world, "failed", &command).await;
    assert_eq!(status, "failed", "the command failed");
    let error = error.unwrap_or_default();
    assert!(error.contains("No such file") && !error.contains("never"), "the CLI's error: {error:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approved_bash_call_whose_segment_ends_without_its_result_is_outcome_unknown() {
    let Some(world) = World::new("approved CLI tool, no result", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    // The command outlives the segment: its CLI is stopped before it reports a result.
    let config = std::fs::read_to_string(world.agent.join("tollgate.toml")).expect("config");
    let config = config.replace("[agent]\n", "[agent]\nsegment_timeout_secs = 20\n");
    std::fs::write(world.agent.join("tollgate.toml"), config).expect("write config");
    let _a = world.worker("a");
    let (status, _) = approve_and_record(&world, "cut", "tail -f /dev/null | cat").await;
    assert_eq!(status, "outcome_unknown", "it ran, and nobody saw how it ended\n{}", world.diagnostics());
    let id = world.bash_call_id("tail -f /dev/null | cat");
    let (seen, is_error) = world.tool_result_seen(&id).expect("the next attempt told the model");
    assert!(is_error && seen.contains("is unknown"), "{seen}");
}
