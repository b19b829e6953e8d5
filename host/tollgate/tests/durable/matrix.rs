//! The reference adapters' crash matrix with the real CLI, the mock model and Workers as child processes.

use std::time::Duration;

use tollgate_engine::session::client::HumanDecision;
use tollgate_sessions::error::ClientError;
use tollgate_store::StoreError;

use crate::world::{Refund, World};

const REFUND: &str = r#"call create_refund {"order_id":"7","amount_cents":500}"#;
const GATE_WAIT: Duration = Duration::from_secs(60);

fn pending_id(snapshot: &tollgate_api::api::types::Snapshot) -> String {
    snapshot.pending_interrupts[0].interrupt_id.clone()
}

fn last_answer(snapshot: &tollgate_api::api::types::Snapshot) -> String {
    snapshot.messages.iter().rev().find(|m| m.role == "assistant").map(|m| m.text.clone()).unwrap_or_default()
}

async fn awaiting(world: &World, session: &str) -> tollgate_api::api::types::Snapshot {
    world.wait_for(session, "the approval", |s| s.status == "awaiting_approval").await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_read_tool_runs_inline_and_a_second_turn_on_another_worker_replays_the_history() {
    let Some(world) = World::new("read tool and history replay", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    let a = world.worker("a");
    world.send("s", r#"call lookup_order {"order_id":"7"}"#).await;
    let first = world.wait_idle_after("s", 1).await;
    assert_eq!(first.last_turn_error, None, "{first:#?}\n{}", world.diagnostics());
    assert!(first.tool_calls.is_empty(), "an inline read is not recorded");
    assert!(last_answer(&first).contains("4200"), "the answer quotes the lookup: {first:#?}");
    let events = world.events("s").await;
    assert!(events.iter().any(|e| e.kind == "tool_call_started" && e.payload.get().contains("lookup_order")));
    assert!(events.iter().any(|e| e.kind == "text_delta"));
    a.kill().await;

    let _b = world.worker("b");
    world.send("s", "recall").await;
    let second = world.wait_idle_after("s", 2).await;
    assert_eq!(second.last_turn_error, None, "{}", world.diagnostics());
    let recalled = last_answer(&second);
    assert!(
        recalled.contains("lookup_order") && recalled.contains("4200"),
        "the resumed session saw turn 1: {recalled}"
    );
    assert_eq!(second.messages.iter().filter(|m| m.role == "user").count(), 2, "{second:#?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approved_write_survives_a_worker_restart_runs_once_and_shows_in_the_snapshot() {
    let Some(world) = World::new("approved write across a restart", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    let a = world.worker("a");
    world.send("s", REFUND).await;
    let waiting = awaiting(&world, "s").await;
    let id = pending_id(&waiting);
    assert_eq!(waiting.pending_interrupts[0].tool_name, "create_refund");
    assert_eq!(
        waiting.pending_interrupts[0].arguments,
        serde_json::json!({"order_id": "7", "amount_cents": 500})
    );
    // Waiting holds no process: the segment's CLI is gone.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(a.children().is_empty(), "no CLI while waiting for approval");
    a.kill().await;

    world.decide("s", &id, true, None, "k1").await;
    world.decide("s", &id, true, None, "k1").await; // repeated: replayed, nothing new
    let other = HumanDecision { approved: false, message: None, updated_input: None, ..Default::default() };
    let late = tollgate_sessions::writes::resolve(world.store.as_ref(), "s", &id, &other, Some("k2")).await;
    assert!(matches!(late, Err(ClientError::Store(StoreError::InterruptAlreadyResolved { .. }))), "{late:?}");

    let _b = world.worker("b");
    let done = world.wait_idle_after("s", 1).await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());
    assert_eq!(world.payments.count(), 1, "the refund ran once");
    assert_eq!(world.payments.keys(), [format!("s/turn-1/{id}")]);
    assert_eq!(done.status, "idle");
    assert!(done.pending_interrupts.is_empty());
    assert_eq!(done.tool_calls.len(), 1);
    assert_eq!(done.tool_calls[0].state.name(), "succeeded");
    assert!(done.tool_calls[0].state.text().unwrap().contains("r_1"));
    let (seen, is_error) = world.tool_result_seen(&id).expect("the resumed segment sent the tool result");
    assert!(seen.contains("r_1") && !is_error, "{seen}");
    assert!(last_answer(&done).contains("r_1"));
    assert_eq!(done.messages.first().map(|m| m.text.as_str()), Some(REFUND));
    assert!(
        done.usage.model_calls >= 2 && done.usage.input_tokens > 0 && done.usage.output_tokens > 0,
        "{:?}",
        done.usage
    );
    let events = world.events("s").await;
    for kind in [
        "user_message",
        "turn_started",
        "interrupt_opened",
        "interrupt_resolved",
        "tool_call_started",
        "tool_call_finished",
        "turn_completed",
    ] {
        assert!(events.iter().any(|e| e.kind == kind), "no {kind} event: {events:?}");
    }
    assert_eq!(
        events.iter().filter(|e| e.kind == "interrupt_resolved").count(),
        1,
        "the repeated decision wrote nothing"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rejected_write_never_runs_and_the_model_reads_the_reason() {
    let Some(world) = World::new("rejected write", Refund::SingleAttemptWithApproval).await else { return };
    let _a = world.worker("a");
    world.send("s", REFUND).await;
    let id = pending_id(&awaiting(&world, "s").await);
    world.decide("s", &id, false, Some("not this order"), "k").await;
    let done = world.wait_idle_after("s", 1).await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());
    assert_eq!(world.payments.count(), 0);
    assert_eq!(done.tool_calls[0].state.name(), "rejected");
    assert_eq!(
        done.tool_calls[0].state,
        tollgate_api::api::types::CallState::Rejected { message: Some("not this order".into()) }
    );
    let (seen, is_error) = world.tool_result_seen(&id).expect("the model saw a result");
    // The CLI may append its own `<system-reminder>` after a tool result.
    assert!(seen.starts_with("The user rejected this call: not this order"), "{seen}");
    assert!(is_error);
}

/// Approves the refund, SIGKILLs Worker A while the payments service holds the refund's request,
/// and lets Worker B finish the turn. Returns the call's id and the final snapshot.
async fn refund_killed_mid_call(world: &World) -> (String, tollgate_api::api::types::Snapshot) {
    world.payments.hold();
    let a = world.worker("a");
    world.send("s", REFUND).await;
    let id = pending_id(&awaiting(world, "s").await);
    world.decide("s", &id, true, None, "k").await;
    world.payments.wait_for(1).await;
    a.kill().await;
    world.payments.release();
    let _b = world.worker("b");
    let done = world.wait_idle_after("s", 1).await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());
    (id, done)
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_during_a_single_attempt_write_records_outcome_unknown_and_never_runs_it_again() {
    let Some(world) =
        World::new("SIGKILL during a single-attempt write", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    let (id, done) = refund_killed_mid_call(&world).await;
    assert_eq!(done.tool_calls[0].state.name(), "outcome_unknown");
    assert_eq!(world.payments.count(), 1, "never run twice");
    let (seen, is_error) = world.tool_result_seen(&id).expect("the model was told");
    assert!(seen.contains("unknown") && is_error, "{seen}");
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_during_an_idempotent_write_runs_it_again_under_the_same_key() {
    let Some(world) = World::new("SIGKILL during an idempotent write", Refund::IdempotentWithApproval).await
    else {
        return;
    };
    let (id, done) = refund_killed_mid_call(&world).await;
    assert_eq!(done.tool_calls[0].state.name(), "succeeded");
    let keys = world.payments.keys();
    assert_eq!(keys.len(), 2, "re-run after the crash: {keys:?}");
    assert_eq!(keys[0], keys[1], "with the same idempotency key");
    assert_eq!(keys[0], format!("s/turn-1/{id}"));
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_during_run_model_reruns_the_segment_on_another_worker() {
    let Some(world) = World::new("SIGKILL during RunModel", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let a = world.worker("a");
    world.send("s", "pause g1 ;; say hello").await;
    world.mock.wait_for_gate("g1", GATE_WAIT).await.expect("the first segment reached the model");
    a.kill().await;
    world.mock.open_gate("g1");
    let _b = world.worker("b");
    let done = world.wait_idle_after("s", 1).await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());
    assert_eq!(last_answer(&done), "said: hello");
    let events = world.events("s").await;
    assert_eq!(events.iter().filter(|e| e.kind == "turn_completed").count(), 1);
    let attempts: Vec<_> =
        events.iter().filter(|e| e.kind == "turn_started").map(|e| e.payload.get().to_owned()).collect();
    assert!(
        attempts.last().is_some_and(|p| p.contains(r#""attempt":2"#)),
        "the rerun is attempt 2: {attempts:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_during_a_resumed_segment_replays_the_record_without_running_the_tool_again() {
    let Some(world) = World::new("SIGKILL during a resumed segment", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    let a = world.worker("a");
    world.send("s", &format!("{REFUND} ;; pause g2")).await;
    let id = pending_id(&awaiting(&world, "s").await);
    world.decide("s", &id, true, None, "k").await;
    world.mock.wait_for_gate("g2", GATE_WAIT).await.expect("the resumed segment reached the model");
    assert_eq!(world.payments.count(), 1);
    a.kill().await;
    world.mock.open_gate("g2");
    let _b = world.worker("b");
    let done = world.wait_idle_after("s", 1).await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());
    assert_eq!(world.payments.count(), 1, "the record replayed; the refund did not run again");
    assert!(last_answer(&done).contains("r_1"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_frozen_past_its_lease_cannot_commit_late() {
    let Some(world) = World::new("frozen worker", Refund::SingleAttemptWithApproval).await else { return };
    let a = world.worker("a");
    world.send("s", "pause g3 ;; say hi").await;
    world.mock.wait_for_gate("g3", GATE_WAIT).await.expect("A's segment reached the model");
    a.freeze();
    let _b = world.worker("b");
    // B reclaims once A's 3 s lease expires, and its own segment reaches the gate.
    world.mock.wait_for_gate_arrivals("g3", 2, GATE_WAIT).await.expect("B's segment reached the model");
    world.mock.open_gate("g3");
    let done = world.wait_idle_after("s", 1).await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());
    a.thaw();
    let start = std::time::Instant::now();
    // The line A logs once its step ended (its future dropped, its CLI killed): whatever A tried
    // to write before it was refused by the fence, and nothing of A writes after it.
    while !crate::world::plain(&a.log_text()).contains("lease lost: the step's result was dropped") {
        assert!(start.elapsed() < Duration::from_secs(30), "A never noticed: {}", a.log_text());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let events = world.events("s").await;
    assert_eq!(events.iter().filter(|e| e.kind == "turn_completed").count(), 1, "{events:?}");
    let text_claims: std::collections::BTreeSet<_> =
        events.iter().filter(|e| e.kind == "text_delta").filter_map(|e| e.step).collect();
    assert_eq!(text_claims.len(), 1, "only B's claim wrote the answer's text: {events:?}");
    let after = world.snapshot("s").await;
    assert_eq!(after.messages.len(), done.messages.len(), "A's late result changed nothing");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cli_error_result_fails_the_turn_after_three_attempts_and_the_next_turn_works() {
    let Some(world) = World::new("CLI error result", Refund::SingleAttemptWithApproval).await else { return };
    let _a = world.worker("a");
    world.send("s", "fail 500").await;
    let failed = world.wait_idle_after("s", 1).await;
    let error = failed.last_turn_error.clone().expect("last_turn_error is set");
    assert!(!error.is_empty(), "{failed:#?}");
    let events = world.events("s").await;
    assert_eq!(events.iter().filter(|e| e.kind == "attempt_failed").count(), 2, "{events:?}");
    assert_eq!(events.iter().filter(|e| e.kind == "turn_failed").count(), 1);
    assert!(failed.tool_calls.is_empty());

    world.send("s", "say ok").await;
    let done = world.wait_idle_after("s", 2).await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());
    assert_eq!(last_answer(&done), "said: ok");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_turn_that_fails_after_a_write_leaves_the_note_for_the_next_prompt() {
    let Some(world) = World::new("turn failure note", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let _a = world.worker("a");
    world.send("s", &format!("{REFUND} ;; fail 500")).await;
    let id = pending_id(&awaiting(&world, "s").await);
    world.decide("s", &id, true, None, "k").await;
    let failed = world.wait_idle_after("s", 1).await;
    assert!(failed.last_turn_error.is_some(), "{failed:#?}");
    assert_eq!(world.payments.count(), 1);
    assert_eq!(failed.tool_calls[0].state.name(), "succeeded");

    world.send("s", "recall").await;
    let done = world.wait_idle_after("s", 2).await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());
    let last = world.mock.message_requests().last().and_then(|r| r.body.clone()).expect("a request");
    let prompt =
        last["messages"].as_array().unwrap().iter().rev().find(|m| m["role"] == "user").cloned().unwrap();
    // The CLI puts its own `<system-reminder>` blocks first.
    let texts: Vec<&str> = prompt["content"]
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .filter_map(|b| b["text"].as_str())
                .filter(|t| !t.starts_with("<system-reminder>"))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(texts.len(), 3, "the failed prompt, the note and the new prompt: {prompt}");
    assert!(texts[0].starts_with(REFUND));
    assert!(
        texts[1]
            .starts_with("[Tollgate] The previous turn failed after these tool calls ran:\n- create_refund "),
        "{}",
        texts[1]
    );
    assert!(
        texts[1].contains("-> succeeded: ")
            && texts[1].ends_with("Do not repeat these tool calls unless the user asks again.")
    );
    assert_eq!(texts[2], "recall");
    assert_eq!(world.payments.count(), 1, "the note kept the model from asking again");
}

/// The support agent's options factory decides every `Bash` call (`decide-cli-tool`), asked from
/// a task of the segment: a denial reaches the model with the factory's text, an allowed command
/// runs inside the segment, and "require approval" parks the call for a human.
#[tokio::test(flavor = "multi_thread")]
async fn the_options_factory_decides_each_bash_call_deny_allow_or_approval() {
    let Some(world) = World::new("CLI tool decider", Refund::SingleAttemptWithApproval).await else { return };
    let _a = world.worker("a");

    world.send("s", r#"call Bash {"command":"rm -rf /tmp/tollgate-nothing"}"#).await;
    let first = world.wait_idle_after("s", 1).await;
    assert_eq!(first.last_turn_error, None, "{}", world.diagnostics());
    let id = world.bash_call_id("rm -rf /tmp/tollgate-nothing");
    let (seen, is_error) = world.tool_result_seen(&id).expect("the model was told");
    assert!(seen.contains("Deleting files is not allowed for this agent."), "{seen}");
    assert!(is_error);

    world.send("s", r#"call Bash {"command":"echo decided-inline"}"#).await;
    let second = world.wait_idle_after("s", 2).await;
    assert_eq!(second.last_turn_error, None, "{}", world.diagnostics());
    let (seen, is_error) =
        world.tool_result_seen(&world.bash_call_id("echo decided-inline")).expect("the model saw the output");
    assert!(seen.contains("decided-inline") && !is_error, "{seen}");
    assert!(second.pending_interrupts.is_empty(), "an allowed command needs no approval");

    world.send("s", r#"call Bash {"command":"echo a | wc -c"}"#).await;
    let third = awaiting(&world, "s").await;
    assert_eq!(third.pending_interrupts.len(), 1, "{third:#?}");
}
