//! Batches through `tollgate serve` and the real CLI: one reply asking for
//! three refunds shows all three approvals in the inbox at once, in one batch; a person decides
//! them in one sitting; the repeats the model makes (the CLI runs one deferred call per reply) use
//! the decisions made ahead, so the session waits on a person once — not three times. A decision
//! made ahead for a call the model never repeats (or repeats with another input) is recorded
//! `unused`, and an interrupt ahead still open when the turn ends is closed. On PostgreSQL, with
//! `tollgate api` and a Worker SIGKILLed after the batch was used, nothing runs twice.
//!
//! The approval-round figure is printed by
//! `cargo test -p tollgate --test durable batches -- --nocapture` (line `approval rounds …`).

use serde_json::{Value, json};

use crate::served::{Served, stdout_of};
use crate::world::{Refund, World, api};

fn refund(order: &str, amount: u32) -> String {
    format!(r#"call create_refund {{"order_id":"{order}","amount_cents":{amount}}}"#)
}

/// `POST …/interrupts/{id}` with `body` (the answer validated against the OpenAPI document).
async fn decide(served: &Served, id: &str, body: Value) {
    let url = format!("{}/v1/sessions/s/interrupts/{id}", served.url);
    let answer = api(reqwest::Client::new().post(url).bearer_auth("t0ken").json(&body)).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
}

/// The inbox: `GET /v1/interrupts`.
async fn inbox(served: &Served) -> Vec<Value> {
    let url = format!("{}/v1/interrupts", served.url);
    let answer = api(reqwest::Client::new().get(url).bearer_auth("t0ken")).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    answer.body["interrupts"].as_array().cloned().unwrap_or_default()
}

/// The interrupt (in the inbox) that asks for the refund of `order`.
fn asking_for<'a>(listed: &'a [Value], order: &str) -> &'a Value {
    listed
        .iter()
        .find(|i| i["arguments"]["order_id"] == order)
        .unwrap_or_else(|| panic!("no approval for order {order}: {listed:#?}"))
}

/// Times the session waited on a person: its `approval_awaited` events.
async fn approval_rounds(world: &World) -> usize {
    world.events("s").await.iter().filter(|e| e.kind == "approval_awaited").count()
}

#[tokio::test(flavor = "multi_thread")]
async fn three_refunds_in_one_reply_are_decided_in_one_sitting_and_the_session_waits_once() {
    let Some(world) = World::new("batch: three refunds", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let served = Served::start(&world, "serve", Some("t0ken")).await;
    let script = [refund("7", 500), refund("8", 500), refund("9", 500)].join(" && ");
    world.send("s", &script).await;

    // All three at once, in one batch: the inbox, the snapshot and `tollgate approvals list`.
    let waiting = world
        .wait_for("s", "three approvals", |s| {
            s.status == "awaiting_approval" && s.pending_interrupts.len() == 3
        })
        .await;
    let listed = inbox(&served).await;
    assert_eq!(listed.len(), 3, "{listed:#?}");
    let (seven, eight, nine) = (asking_for(&listed, "7"), asking_for(&listed, "8"), asking_for(&listed, "9"));
    let id = |i: &Value| i["interrupt_id"].as_str().expect("an id").to_owned();
    let (id7, id8, id9) = (id(seven), id(eight), id(nine));
    for item in [seven, eight, nine] {
        assert_eq!(item["batch_id"], json!(id7), "one batch, named by the deferred call: {item:#}");
        assert_eq!(item["request"]["batch_id"], json!(id7));
        assert_eq!(item["request"]["type"], "tool_approval");
        assert!(item["request"]["input_schema"]["properties"]["amount_cents"].is_object(), "{item:#}");
    }
    assert_eq!(seven["request"].get("ahead"), None, "the deferred call's own interrupt");
    assert_eq!((&eight["request"]["ahead"], &nine["request"]["ahead"]), (&json!(true), &json!(true)));
    assert!(waiting.pending_interrupts.iter().all(|p| p.batch_id.as_deref() == Some(id7.as_str())));
    let listing = served
        .client_command(&["approvals", "list"])
        .env("TOLLGATE_TOKEN", "t0ken")
        .output()
        .await
        .expect("tollgate approvals list");
    let table = stdout_of(&listing, "approvals list");
    assert!(table.lines().next().is_some_and(|h| h.contains("BATCH")), "{table}");
    for interrupt in [&id7, &id8, &id9] {
        assert!(table.lines().any(|l| l.contains(interrupt.as_str()) && l.contains(id7.as_str())), "{table}");
    }
    assert_eq!(world.payments.count(), 0, "nothing runs before its approval");

    // One sitting: reject 9, approve 8, approve 7 (the one the session waits on).
    decide(&served, &id9, json!({"approved": false, "message": "order 9 was refunded by phone"})).await;
    decide(&served, &id8, json!({"approved": true})).await;
    assert_eq!(world.snapshot("s").await.status, "awaiting_approval", "decisions ahead wake nothing");
    decide(&served, &id7, json!({"approved": true})).await;
    let done = world.wait_idle_after("s", 1).await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());

    // The two approved refunds ran exactly once each; the rejected one never ran.
    let paid = world.payments.requests();
    assert_eq!(paid.len(), 2, "{paid:?}");
    assert!(paid.iter().filter(|p| p.body.contains(r#""7""#)).count() == 1, "{paid:?}");
    assert!(paid.iter().filter(|p| p.body.contains(r#""8""#)).count() == 1, "{paid:?}");
    assert!(!paid.iter().any(|p| p.body.contains(r#""9""#)), "{paid:?}");

    // The repeats ran under the decisions made ahead; the records say which.
    let by_decision = |decision: &str| {
        done.tool_calls
            .iter()
            .find(|c| c.decided_ahead.as_ref().is_some_and(|a| a.decision_id == decision))
            .unwrap_or_else(|| panic!("no call ran under {decision}: {:#?}", done.tool_calls))
    };
    let (ran8, ran9) = (by_decision(&id8), by_decision(&id9));
    assert_eq!(ran8.state.name(), "succeeded");
    assert_ne!(ran8.tool_call_id, id8, "the model's repeat, a call of its own");
    let ahead8 = ran8.decided_ahead.clone().expect("decided ahead");
    assert_eq!(ahead8.batch_id, id7);
    let audit8 = done.decisions.iter().find(|d| d.interrupt_id == id8).expect("8's audit row");
    assert_eq!(ahead8.decided_by.as_deref(), Some(audit8.principal.as_str()));
    assert_eq!(ahead8.decided_at, Some(audit8.decided_at));
    assert_eq!(ran9.state.name(), "rejected");
    assert!(paid.iter().any(|p| p.idempotency_key == format!("s/turn-1/{}", ran8.tool_call_id)));
    assert!(paid.iter().any(|p| p.idempotency_key == format!("s/turn-1/{id7}")));
    assert_eq!(done.decisions.len(), 3, "one audit row per decision");
    assert!(!done.tool_calls.iter().any(|c| c.state.name() == "unused"), "{:#?}", done.tool_calls);

    // The model read the rejection, with the approver's reason.
    let (seen, is_error) = world.tool_result_seen(&ran9.tool_call_id).expect("the model saw 9's result");
    assert!(is_error && seen.contains("order 9 was refunded by phone"), "{seen}");
    let answer = done.messages.last().map(|m| m.text.clone()).unwrap_or_default();
    assert!(answer.contains("order 9 was refunded by phone"), "{answer}");
    assert!(inbox(&served).await.is_empty(), "nothing lingers in the inbox");

    // Approval rounds: times the session waited on a person.
    let rounds = approval_rounds(&world).await;
    let events = world.events("s").await;
    assert_eq!(events.iter().filter(|e| e.kind == "interrupt_opened").count(), 3);
    assert_eq!(events.iter().filter(|e| e.kind == "decided_ahead_used").count(), 2);
    eprintln!("approval rounds for a reply with three refunds: {rounds} (one per refund before batches: 3)");
    assert_eq!(rounds, 1, "{events:#?}");
    served.stop().await;
}

/// Refund 8 is approved ahead but the model repeats it with another amount: that repeat waits for
/// a decision of its own, and 8's decision ahead is recorded unused. Refund 9's interrupt ahead is
/// never decided and the model repeats it with another amount too: when the turn ends, it is
/// closed (decided by nobody, no audit row) and recorded unused.
#[tokio::test(flavor = "multi_thread")]
async fn a_decision_ahead_the_model_never_uses_is_recorded_unused_and_an_open_one_is_closed_at_the_turns_end()
{
    let Some(world) = World::new("batch: unused decisions", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let served = Served::start(&world, "serve", Some("t0ken")).await;
    let script = format!(
        r#"{} && {} again {{"order_id":"8","amount_cents":400}} && {} again {{"order_id":"9","amount_cents":300}}"#,
        refund("7", 500),
        refund("8", 500),
        refund("9", 500)
    );
    world.send("s", &script).await;
    world
        .wait_for("s", "three approvals", |s| {
            s.status == "awaiting_approval" && s.pending_interrupts.len() == 3
        })
        .await;
    let listed = inbox(&served).await;
    let id = |order: &str| asking_for(&listed, order)["interrupt_id"].as_str().expect("an id").to_owned();
    let (id7, id8, id9) = (id("7"), id("8"), id("9"));
    decide(&served, &id8, json!({"approved": true})).await;
    decide(&served, &id7, json!({"approved": true})).await;

    // The repeat of 8 has another amount: not the call decided ahead, so it asks again.
    let again = world
        .wait_for("s", "8's changed repeat", |s| {
            s.status == "awaiting_approval"
                && s.pending_interrupts
                    .iter()
                    .any(|p| p.arguments == json!({"order_id": "8", "amount_cents": 400}))
        })
        .await;
    let repeat8 = again
        .pending_interrupts
        .iter()
        .find(|p| p.arguments["amount_cents"] == 400)
        .map(|p| p.interrupt_id.clone())
        .expect("the repeat");
    assert_ne!(repeat8, id8);
    assert_eq!(world.payments.count(), 1, "only 7 ran so far");
    decide(&served, &repeat8, json!({"approved": true})).await;
    let repeat9 = world
        .wait_for("s", "9's changed repeat", |s| {
            s.pending_interrupts.iter().any(|p| p.arguments == json!({"order_id": "9", "amount_cents": 300}))
        })
        .await
        .pending_interrupts
        .iter()
        .find(|p| p.arguments["amount_cents"] == 300)
        .map(|p| p.interrupt_id.clone())
        .expect("9's repeat");
    assert!(inbox(&served).await.iter().any(|i| i["interrupt_id"] == json!(id9)), "9's ahead is still open");
    decide(&served, &repeat9, json!({"approved": false, "message": "no"})).await;
    let done = world.wait_idle_after("s", 1).await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());

    // What ran: 7 at 500 and 8 at 400, once each; never 8 at 500.
    let paid = world.payments.requests();
    assert_eq!(paid.len(), 2, "{paid:?}");
    assert!(paid.iter().any(|p| p.body.contains(r#""8""#) && p.body.contains("400")), "{paid:?}");
    assert!(!paid.iter().any(|p| p.body.contains(r#""8""#) && p.body.contains("500")), "{paid:?}");

    // The decisions ahead nobody used: recorded `unused`; 9's was closed, decided by nobody.
    let unused: Vec<_> = done.tool_calls.iter().filter(|c| c.state.name() == "unused").collect();
    let mut ids: Vec<&str> = unused.iter().map(|c| c.tool_call_id.as_str()).collect();
    ids.sort_unstable();
    let mut expected = [id8.as_str(), id9.as_str()];
    expected.sort_unstable();
    assert_eq!(ids, expected, "{:#?}", done.tool_calls);
    for call in &unused {
        let ahead = call.decided_ahead.as_ref().expect("its interrupt ahead");
        assert_eq!(
            (ahead.decision_id.as_str(), ahead.batch_id.as_str()),
            (call.tool_call_id.as_str(), id7.as_str())
        );
        assert_eq!(call.batch_id.as_deref(), Some(id7.as_str()));
    }
    assert!(done.decisions.iter().any(|d| d.interrupt_id == id8), "8's approval is in the audit trail");
    assert!(!done.decisions.iter().any(|d| d.interrupt_id == id9), "nobody decided 9 ahead");
    let closed = world.store.interrupt("s", &id9).await.unwrap().expect("9's interrupt");
    let resolution: Value = serde_json::from_str(closed.resolution.expect("closed").get()).unwrap();
    assert_eq!(resolution["approved"], false);
    assert!(resolution["message"].as_str().is_some_and(|m| m.contains("decided by nobody")), "{resolution}");
    assert!(inbox(&served).await.is_empty(), "nothing lingers in the inbox");
    let events = world.events("s").await;
    assert_eq!(events.iter().filter(|e| e.kind == "ahead_unused").count(), 2);
    let closing: Vec<Value> = events
        .iter()
        .filter(|e| e.kind == "interrupt_resolved")
        .map(|e| serde_json::from_str(e.payload.get()).unwrap())
        .filter(|p: &Value| p["closed"] == json!(true))
        .collect();
    assert_eq!(closing.len(), 1, "only 9's was still open: {closing:?}");
    assert_eq!((&closing[0]["interrupt_id"], &closing[0]["decided_by"]), (&json!(id9), &Value::Null));
    // A person deciding it now is told it is closed; nothing is stored.
    let url = format!("{}/v1/sessions/s/interrupts/{id9}", served.url);
    let late =
        api(reqwest::Client::new().post(url).bearer_auth("t0ken").json(&json!({"approved": true}))).await;
    assert_eq!(
        (late.status, &late.body["error"]["code"]),
        (409, &json!("interrupt_already_resolved")),
        "{}",
        late.text
    );
    assert!(late.text.contains("decided by nobody"), "{}", late.text);
    assert!(!world.snapshot("s").await.decisions.iter().any(|d| d.interrupt_id == id9));
    assert_eq!(events.iter().filter(|e| e.kind == "decided_ahead_used").count(), 0);
    assert_eq!(approval_rounds(&world).await, 3, "7, and each changed repeat");

    // A decision ahead does not carry into a later turn: refund 8 at 500 asks again.
    world.send("s", &refund("8", 500)).await;
    let next = world.wait_for("s", "the next turn's approval", |s| s.status == "awaiting_approval").await;
    assert_eq!(next.pending_interrupts.len(), 1);
    assert_eq!(world.payments.count(), 2);
    served.stop().await;
}

/// Refund 8 is still open when the model repeats it: the session waits on 8's interrupt ahead
/// (no second interrupt), and deciding it runs the repeat.
#[tokio::test(flavor = "multi_thread")]
async fn a_repeat_of_a_call_still_open_ahead_waits_on_that_interrupt() {
    let Some(world) =
        World::new("batch: waiting on an interrupt ahead", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    let served = Served::start(&world, "serve", Some("t0ken")).await;
    world.send("s", &[refund("7", 500), refund("8", 500)].join(" && ")).await;
    world
        .wait_for("s", "two approvals", |s| {
            s.status == "awaiting_approval" && s.pending_interrupts.len() == 2
        })
        .await;
    let listed = inbox(&served).await;
    let id8 = asking_for(&listed, "8")["interrupt_id"].as_str().unwrap().to_owned();
    let id7 = asking_for(&listed, "7")["interrupt_id"].as_str().unwrap().to_owned();
    decide(&served, &id7, json!({"approved": true})).await;
    let waiting = world
        .wait_for("s", "the repeat of 8 waiting", |s| {
            s.status == "awaiting_approval"
                && s.tool_calls.iter().any(|c| c.decided_ahead.as_ref().is_some_and(|a| a.decision_id == id8))
        })
        .await;
    assert_eq!(world.payments.count(), 1);
    let ids: Vec<&str> = waiting.pending_interrupts.iter().map(|p| p.interrupt_id.as_str()).collect();
    assert_eq!(ids, [id8.as_str()], "the interrupt ahead, not a second one");
    assert_eq!(inbox(&served).await.len(), 1);
    decide(&served, &id8, json!({"approved": true, "updated_input": {"order_id": "8", "amount_cents": 250}}))
        .await;
    let done = world.wait_idle_after("s", 1).await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());
    let paid = world.payments.requests();
    assert_eq!(paid.len(), 2, "{paid:?}");
    assert!(paid[1].body.contains("250"), "the approver's edit ran: {paid:?}");
    let ran = done.tool_calls.iter().find(|c| c.decided_ahead.is_some()).expect("the repeat");
    assert_eq!(ran.state.name(), "succeeded");
    assert!(ran.decided_ahead.as_ref().is_some_and(|a| a.decided_by.is_some()), "{ran:?}");
    let events = world.events("s").await;
    assert_eq!(events.iter().filter(|e| e.kind == "interrupt_opened").count(), 2);
    assert_eq!(approval_rounds(&world).await, 2, "7, then the repeat of 8 while 8 was still open");
    served.stop().await;
}

/// On PostgreSQL, with `tollgate api` (which does not load the agent) and a Worker that is
/// SIGKILLed in the turn's last segment, after the batch was decided and used: the new Worker
/// reruns that segment from the stored records, each approved refund ran once, and the session
/// still waited on a person once.
#[tokio::test(flavor = "multi_thread")]
async fn on_postgres_a_worker_sigkilled_after_the_batch_is_used_runs_nothing_twice() {
    let Some(db) = crate::pg_database().await else { return };
    let test = "batch: SIGKILL on PostgreSQL";
    let Some(world) = World::on_db(test, Refund::SingleAttemptWithApproval, &db).await else {
        return;
    };
    let served = Served::start_api(&world, "api", &["--token", "t0ken"]).await;
    let a = world.worker("a");
    let script =
        format!("{} ;; pause last", [refund("7", 500), refund("8", 500), refund("9", 500)].join(" && "));
    world.send("s", &script).await;
    world
        .wait_for("s", "three approvals", |s| {
            s.status == "awaiting_approval" && s.pending_interrupts.len() == 3
        })
        .await;
    let listed = inbox(&served).await;
    assert!(listed.iter().all(|i| i["batch_id"] == listed[0]["batch_id"]), "{listed:#?}");
    let id = |order: &str| asking_for(&listed, order)["interrupt_id"].as_str().expect("an id").to_owned();
    decide(&served, &id("9"), json!({"approved": false, "message": "not 9"})).await;
    decide(&served, &id("8"), json!({"approved": true})).await;
    decide(&served, &id("7"), json!({"approved": true})).await;
    world.mock.wait_for_gate("last", std::time::Duration::from_secs(90)).await.expect("the last segment");
    assert_eq!(world.payments.count(), 2);
    a.kill().await;
    world.mock.open_gate("last");
    let _b = world.worker("b");
    let done = world.wait_idle_after("s", 1).await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());
    assert_eq!(world.payments.count(), 2, "nothing ran twice: {:?}", world.payments.requests());
    let mut keys = world.payments.keys();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 2);
    assert!(!done.tool_calls.iter().any(|c| c.state.name() == "unused"), "{:#?}", done.tool_calls);
    let answer = done.messages.last().map(|m| m.text.clone()).unwrap_or_default();
    assert!(answer.contains("not 9"), "{answer}");
    assert_eq!(approval_rounds(&world).await, 1);
    served.stop().await;
}
