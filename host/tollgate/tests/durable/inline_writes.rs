//! Recorded inline writes with the real CLI: an approval-free idempotent write
//! (`record_credit`, the `ledger` test guest, which POSTs to the stand-in payments service with
//! its idempotency key) runs inside its segment and its record commits before the CLI reads the
//! result; a Worker SIGKILLed before that commit, and one killed right after it.

use crate::world::{Refund, World};

/// The refund flow of the issue's benchmark: a read, an approval-free idempotent write, then the
/// model's answer quoting both.
pub(crate) const FLOW: &str =
    r#"call lookup_order {"order_id":"7"} && call record_credit {"order_id":"7","amount_cents":300}"#;

/// The test fault point of `tollgate_worker::worker` (`inline_writes::FAULT_ENV`).
const FAULT_ENV: &str = "TOLLGATE_TEST_FAULT";

/// The example agent plus `record_credit` under the default policy of an approval-free
/// idempotent write (no `inline` key: inline is the default).
pub(crate) async fn ledger_world(test: &str) -> Option<World> {
    let world = World::new(test, Refund::SingleAttemptWithApproval).await?;
    std::fs::copy(tollgate_test_guests::LEDGER, world.agent.join("tools/ledger.wasm")).expect("ledger");
    let config = std::fs::read_to_string(world.agent.join("tollgate.toml")).expect("config");
    let config = config
        .replace("create_refund = {", "record_credit = { effect = \"idempotent_write\" }\ncreate_refund = {")
        + "\n[tools.ledger]\nallowed_outbound_hosts = [\"http://127.0.0.1:*\"]\n\
         config = { PAYMENTS_URL = { env = \"PAYMENTS_URL\" } }\ntimeout_ms = 5000\n";
    assert!(config.contains("record_credit = {"), "the example's policies moved");
    std::fs::write(world.agent.join("tollgate.toml"), config).expect("write config");
    Some(world)
}

/// CLI processes the Workers started: their `segment starting` log lines.
fn segments_started(world: &World) -> usize {
    std::fs::read_dir(world.dir.path())
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| entry.path().extension().is_some_and(|e| e == "log"))
        .map(|entry| {
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            text.lines().filter(|line| line.contains("segment starting")).count()
        })
        .sum()
}

/// The tool use IDs of the mock's `record_credit` calls, in order.
fn credit_call_ids(world: &World) -> Vec<String> {
    world
        .mock
        .message_requests()
        .iter()
        .filter_map(|request| request.reply.message())
        .flat_map(|reply| {
            reply
                .tool_uses()
                .filter(|(_, name, _)| name.ends_with("record_credit"))
                .map(|(id, ..)| id.to_owned())
        })
        .collect()
}

fn last_answer(snapshot: &tollgate_api::api::types::Snapshot) -> String {
    snapshot.messages.iter().rev().find(|m| m.role == "assistant").map(|m| m.text.clone()).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_read_an_approval_free_idempotent_write_and_an_answer_run_in_one_cli_process() {
    let Some(world) = ledger_world("one CLI process per turn").await else { return };
    let _a = world.worker("a");
    world.send("s", FLOW).await;
    let done = world.wait_idle_after("s", 1).await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());
    assert_eq!(segments_started(&world), 1, "the turn ran one CLI process\n{}", world.diagnostics());

    assert_eq!(done.tool_calls.len(), 1, "the write is recorded, the read is not: {done:#?}");
    let call = &done.tool_calls[0];
    assert_eq!((call.tool_name.as_str(), call.turn_id.as_str()), ("record_credit", "turn-1"));
    assert_eq!(call.state.name(), "succeeded", "{call:#?}");
    assert!(!call.requires_approval);
    assert_eq!(
        call.runs_in,
        tollgate_engine::policy::DeferredRun::CallTool,
        "the record's shape is CallTool's"
    );
    let key = format!("s/turn-1/{}", call.tool_call_id);
    assert_eq!(world.payments.keys(), [key], "one request, under the call's key");
    assert!(world.payments.requests()[0].body.contains(r#""attempt":1"#));

    let (seen, is_error) = world.tool_result_seen(&call.tool_call_id).expect("the model read the result");
    assert!(!is_error && seen.contains("r_1"), "{seen}");
    let recorded = call.state.text().expect("the record's output");
    // The CLI appends its system reminders to a tool result.
    assert!(seen.starts_with(recorded), "the model read what was recorded: {seen:?} vs {recorded:?}");
    let answer = last_answer(&done);
    assert!(answer.contains("4200") && answer.contains("r_1"), "the answer quotes both calls: {answer}");

    let events = world.events("s").await;
    let started: Vec<_> = events
        .iter()
        .filter(|e| e.kind == "tool_call_started" && e.payload.get().contains("record_credit"))
        .map(|e| e.payload.get().to_owned())
        .collect();
    assert_eq!(started.len(), 1, "{started:?}");
    assert!(
        started[0].contains(r#""attempt":1"#) && started[0].contains(r#""amount_cents":300"#),
        "{started:?}"
    );
    assert!(events.iter().any(|e| e.kind == "tool_call_finished"
        && e.payload.get().contains(&call.tool_call_id)
        && e.payload.get().contains(r#""status":"succeeded""#)));
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_after_an_inline_write_ran_and_before_its_record_calls_it_again_under_the_same_key() {
    let Some(world) = ledger_world("SIGKILL before an inline write's record").await else { return };
    world.payments.hold();
    let a = world.worker("a");
    world.send("s", FLOW).await;
    // The tool ran: its request reached the payments service, whose answer is held.
    world.payments.wait_for(1).await;
    let during = world.snapshot("s").await;
    assert_eq!(during.tool_calls.len(), 1, "{during:#?}");
    assert_eq!(during.tool_calls[0].state.name(), "started", "marked before the call: {during:#?}");
    a.kill().await;
    world.payments.release();

    let _b = world.worker("b");
    let done = world.wait_idle_after("s", 1).await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());
    assert_eq!(done.tool_calls.len(), 1, "one call, one record: {done:#?}");
    let call = &done.tool_calls[0];
    assert_eq!(call.state.name(), "succeeded", "{call:#?}");
    let keys = world.payments.keys();
    assert_eq!(keys.len(), 2, "called again after the crash: {keys:?}");
    assert_eq!(keys[0], keys[1], "with the same idempotency key");
    assert_eq!(keys[0], format!("s/turn-1/{}", call.tool_call_id));
    let bodies: Vec<String> = world.payments.requests().into_iter().map(|r| r.body).collect();
    assert!(bodies[1].contains(r#""attempt":2"#), "the rerun counts on from the started attempt: {bodies:?}");
    assert!(
        last_answer(&done).contains("r_2"),
        "the model read the second call's answer: {}",
        last_answer(&done)
    );
    let ids = credit_call_ids(&world);
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert_eq!(ids[0], call.tool_call_id, "the rerun's call, under a new ID, ran under the first call's key");
    assert_ne!(ids[0], ids[1]);
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_right_after_an_inline_writes_record_committed_replays_it_without_calling_again() {
    let Some(world) = ledger_world("SIGKILL after an inline write's record").await else { return };
    let a = world.worker_with_env("a", &[(FAULT_ENV, "after_inline_record")]);
    world.send("s", FLOW).await;
    let status = tokio::time::timeout(std::time::Duration::from_secs(120), a.exited())
        .await
        .unwrap_or_else(|_| panic!("Worker a never reached the fault point\n{}", world.diagnostics()));
    assert!(!status.success(), "{status:?}");
    let between = world.snapshot("s").await;
    assert_eq!(between.tool_calls.len(), 1, "{between:#?}");
    assert_eq!(between.tool_calls[0].state.name(), "succeeded", "committed before the kill");
    assert_eq!(world.payments.count(), 1);
    let recorded = between.tool_calls[0].state.text().map(str::to_owned);

    let b = world.worker("b");
    let done = world.wait_idle_after("s", 1).await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());
    assert_eq!(world.payments.count(), 1, "the record replayed; the write did not run again");
    assert_eq!(done.tool_calls.len(), 1, "{done:#?}");
    assert_eq!(done.tool_calls[0].state.text().map(str::to_owned), recorded);
    let answer = last_answer(&done);
    assert!(answer.contains("r_1") && answer.contains("4200"), "the rerun's model read the record: {answer}");
    // The rerun's model called again under a new tool use ID; the gate met the record by the
    // tool and its arguments and served it under that ID.
    let ids = credit_call_ids(&world);
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert_eq!(ids[0], done.tool_calls[0].tool_call_id, "the record is the first call's");
    assert_ne!(ids[0], ids[1]);
    let (seen, is_error) = world.tool_result_seen(&ids[1]).expect("the rerun's call got a result");
    let recorded = recorded.expect("a succeeded record has its output");
    assert!(!is_error && seen.starts_with(&recorded), "{seen:?} vs {recorded:?}");
    let b_segments = b.log_text().lines().filter(|line| line.contains("segment starting")).count();
    assert_eq!(b_segments, 1, "the rerun is one CLI process");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_that_lost_its_lease_during_an_inline_write_never_hands_the_result_to_its_cli() {
    let Some(world) = ledger_world("lease lost during an inline write").await else { return };
    world.payments.hold();
    let a = world.worker("a");
    world.send("s", FLOW).await;
    world.payments.wait_for(1).await;
    a.freeze();
    // B reclaims once A's 3 s lease expires; its rerun calls the write again under the same key.
    let _b = world.worker("b");
    world.payments.wait_for(2).await;
    world.payments.release();
    let done = world.wait_idle_after("s", 1).await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());
    let first = credit_call_ids(&world)[0].clone();
    a.thaw();
    // A's call returns; its record cannot commit (the fence moved on): the segment stops (or A's
    // heartbeat finds the lease lost first and stops the step: the CLI dies either way).
    let start = std::time::Instant::now();
    while !(a.log_text().contains("stopping the segment") || a.log_text().contains("lease lost")) {
        assert!(start.elapsed() < std::time::Duration::from_secs(30), "A never noticed: {}", a.log_text());
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert_eq!(
        world.tool_result_seen(&first),
        None,
        "A's CLI never read the result of the write whose record A could not commit\n{}",
        world.diagnostics()
    );
    let after = world.snapshot("s").await;
    assert_eq!(after.tool_calls, done.tool_calls, "A's late result changed no record");
    assert_eq!(after.tool_calls.len(), 1);
    assert_eq!(after.tool_calls[0].tool_call_id, first, "B ran it under A's record and key");
    let keys = world.payments.keys();
    assert_eq!(keys, [keys[0].clone(), keys[0].clone()], "one key for both calls");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_inline_write_that_fails_transiently_is_attempted_again_in_its_segment_under_one_key() {
    // `flaky` (the hostile guest, annotated idempotent, no policy: an approval-free idempotent
    // write) fails with a retryable error on attempts 1 and 2.
    let Some(world) = ledger_world("an inline write's attempts").await else { return };
    std::fs::copy(tollgate_test_guests::HOSTILE, world.agent.join("tools/hostile.wasm")).expect("hostile");
    // A writable directory, whose writes the sandbox does not watch: each failed attempt may have
    // taken effect, so it is attempted again (one that provably did nothing is failed at once).
    std::fs::create_dir(world.agent.join("scratch")).expect("scratch");
    let config = std::fs::read_to_string(world.agent.join("tollgate.toml")).expect("config")
        + "\n[[tools.hostile.dirs]]\npath = \"scratch\"\nguest = \"/scratch\"\nwritable = true\n";
    std::fs::write(world.agent.join("tollgate.toml"), config).expect("write config");
    let _a = world.worker("a");
    world.send("s", "call flaky").await;
    let done = world.wait_idle_after("s", 1).await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());
    assert_eq!(segments_started(&world), 1, "the attempts ran inside the one segment");
    assert_eq!(done.tool_calls.len(), 1, "{done:#?}");
    let call = &done.tool_calls[0];
    assert_eq!(call.state.name(), "succeeded", "{call:#?}");
    let key = format!("s/turn-1/{}", call.tool_call_id);
    assert_eq!(call.state.text(), Some(format!("ok on attempt 3 with key {key}").as_str()));
    let events = world.events("s").await;
    let failed: Vec<_> = events.iter().filter(|e| e.kind == "attempt_failed").collect();
    assert_eq!(failed.len(), 2, "{events:?}");
    assert!(failed[0].payload.get().contains("try again (attempt 1)"), "{:?}", failed[0]);
    let attempts: Vec<_> = events
        .iter()
        .filter(|e| e.kind == "tool_call_started" && e.payload.get().contains(&call.tool_call_id))
        .map(|e| serde_json::from_str::<serde_json::Value>(e.payload.get()).unwrap()["attempt"].clone())
        .collect();
    assert_eq!(attempts, [1, 2, 3], "{events:?}");
}
