//! Cancelling a turn with the real CLI against the mock model: during a streaming segment (the
//! CLI interrupted mid-reply), during an inline write (its record kept, committed or
//! `outcome_unknown`, and the write run once), while waiting for approval (its interrupt closed
//! by nobody, a late decision refused with 409); by a client who did not start the session
//! (403). The request goes through the store to a Worker in another process (`tollgate api` and
//! `tollgate worker` on one SQLite file, or on PostgreSQL); each test then sends a message that
//! runs as usual.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tollgate_api::api::types::Snapshot;

use crate::served::{Served, stdout_of};
use crate::webhooks::Receiver;
use crate::world::{Refund, World, api};

/// A reply of ~800 characters, streamed in deltas and parked halfway at gate `gate`.
fn held_reply(gate: &str) -> String {
    let text = (0..160).map(|i| format!("w{i:03}")).collect::<Vec<_>>().join(" ");
    format!("drip 40 25 ;; hold {gate} ;; say {text}")
}

const REFUND: &str = r#"call create_refund {"order_id":"7","amount_cents":500}"#;

/// A webhooks file that sends `turn.cancelled` (and the turn ends) to `url`.
fn cancel_hooks(world: &World, url: &str) -> String {
    let path = world.dir.path().join("hooks.toml");
    std::fs::write(world.dir.path().join("hook.secret"), "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n").unwrap();
    std::fs::write(
        &path,
        format!(
            "[[webhooks]]\nname = \"ops\"\nurl = \"{url}\"\nsecret_file = \"hook.secret\"\n\
             events = [\"turn.cancelled\", \"turn.completed\"]\ntimeout_secs = 2\nretry_initial_secs = 1\n"
        ),
    )
    .unwrap();
    path.display().to_string()
}

/// `POST /v1/sessions/{id}/cancel` as the holder of `token`.
async fn cancel(url: &str, token: &str, session: &str) -> crate::world::Answer {
    api(reqwest::Client::new()
        .post(format!("{url}/v1/sessions/{session}/cancel"))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body("{}"))
    .await
}

/// `POST /v1/sessions` with a first message, as the holder of `token`.
async fn start(url: &str, token: &str, session: &str, message: &str) {
    let created = api(reqwest::Client::new()
        .post(format!("{url}/v1/sessions"))
        .bearer_auth(token)
        .json(&json!({"session_id": session, "message": message})))
    .await;
    assert_eq!(created.status, 201, "{}", created.text);
}

/// `POST /v1/sessions/{id}/messages` as the holder of `token`.
async fn send(url: &str, token: &str, session: &str, text: &str) {
    let sent = api(reqwest::Client::new()
        .post(format!("{url}/v1/sessions/{session}/messages"))
        .bearer_auth(token)
        .json(&json!({"text": text})))
    .await;
    assert_eq!(sent.status, 202, "{}", sent.text);
}

/// Waits until the session's turn `turn` ended cancelled and the session is idle.
async fn cancelled(world: &World, session: &str, turn: &str) -> Snapshot {
    world
        .wait_for(session, &format!("{turn} cancelled"), |s| {
            s.status == "idle"
                && s.cancel_requested.is_none()
                && s.last_turn_cancelled.as_ref().is_some_and(|c| c.turn_id == turn)
        })
        .await
}

/// Waits until a turn answered after `turns` earlier answers, and returns its answer.
async fn answered(world: &World, session: &str, turns: usize) -> String {
    let done = world
        .wait_for(session, "the next turn's answer", |s| {
            s.status == "idle" && s.messages.iter().filter(|m| m.role == "assistant").count() > turns
        })
        .await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());
    assert_eq!(done.last_turn_cancelled, None, "a completed turn clears it");
    done.messages.iter().rev().find(|m| m.role == "assistant").map(|m| m.text.clone()).unwrap_or_default()
}

/// The kinds of the session's events, in order, of those given.
async fn kinds(world: &World, session: &str, of: &[&str]) -> Vec<String> {
    world.events(session).await.into_iter().map(|e| e.kind).filter(|k| of.contains(&k.as_str())).collect()
}

/// The payload of the session's last event of `kind`.
async fn last_payload(world: &World, session: &str, kind: &str) -> Value {
    let events = world.events(session).await;
    let event = events.iter().rev().find(|e| e.kind == kind).unwrap_or_else(|| panic!("no {kind} event"));
    serde_json::from_str(event.payload.get()).unwrap()
}

/// The text of the latest model request's prompts.
fn last_prompt_text(world: &World) -> String {
    let requests = world.mock.message_requests();
    let body = requests.last().and_then(|r| r.body.clone()).unwrap_or(Value::Null);
    body["messages"].to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_cancels_its_streaming_turn_through_an_api_process_and_the_worker_process_stops_the_cli() {
    let test = "cancel: a streaming segment, api and worker processes on SQLite";
    let Some(world) = World::new(test, Refund::SingleAttemptWithApproval).await else { return };
    let file = world.dir.path().join("auth.toml");
    let add = crate::served::add_principal;
    let carl = add(&world, &file, "carl", &["client"], &[]).await;
    let dana = add(&world, &file, "dana", &["client"], &[]).await;
    let vera = add(&world, &file, "vera", &["viewer"], &[]).await;
    let ada = add(&world, &file, "ada", &["approver"], &[]).await;
    let receiver = Receiver::start(Vec::new()).await;
    let hooks = cancel_hooks(&world, &receiver.url);
    let file_arg = file.to_str().unwrap();
    let served = Served::start_api(&world, "api", &["--auth", file_arg, "--webhooks", &hooks]).await;
    let worker = world.worker("w");
    let url = served.url.clone();

    start(&url, &carl, "s", &held_reply("streaming")).await;
    world.mock.wait_for_gate("streaming", Duration::from_secs(90)).await.expect("streaming");
    world.wait_for("s", "streamed text", |s| s.live_text.as_ref().is_some_and(|l| !l.text.is_empty())).await;

    // Who may not: a viewer, and a client who did not start the session. Nothing is asked.
    let viewer = cancel(&url, &vera, "s").await;
    assert_eq!(
        (viewer.status, &viewer.body["error"]["code"]),
        (403, &json!("role_required")),
        "{}",
        viewer.text
    );
    let other = cancel(&url, &dana, "s").await;
    assert_eq!(
        (other.status, &other.body["error"]["code"]),
        (403, &json!("not_own_session")),
        "{}",
        other.text
    );
    assert!(other.body["error"]["message"].as_str().unwrap().contains("cancels only sessions it started"));
    assert!(world.snapshot("s").await.cancel_requested.is_none(), "refused: nothing asked");
    assert!(kinds(&world, "s", &["cancel_requested"]).await.is_empty());

    // The session's client asks, with the CLI client, and waits for the turn to end.
    let asked = Instant::now();
    let output =
        served.client_command(&["session", "cancel", "s", "--wait"]).env("TOLLGATE_TOKEN", &carl).output();
    let out = stdout_of(&output.await.expect("run tollgate session cancel"), "tollgate session cancel");
    assert!(out.contains("turn-1 of session s cancelled by carl"), "{out}\n{}", world.diagnostics());
    let done = cancelled(&world, "s", "turn-1").await;
    assert!(
        asked.elapsed() < Duration::from_secs(20),
        "the CLI was stopped at once, not at the segment's timeout: {:?}",
        asked.elapsed()
    );
    assert!(done.live_text.is_none() && done.turn_id.is_none(), "{done:#?}");
    assert_eq!(done.last_turn_error, None);
    let row =
        done.decisions.iter().find(|d| d.decision == tollgate_api::api::types::AuditDecision::Cancelled);
    let row = row.unwrap_or_else(|| panic!("an audit row: {:#?}", done.decisions));
    assert_eq!((row.principal.as_str(), row.interrupt_id.as_str()), ("carl", "turn-1"));
    assert_eq!(
        kinds(
            &world,
            "s",
            &["turn_started", "text_delta", "cancel_requested", "turn_cancelled", "turn_completed"]
        )
        .await
        .into_iter()
        .filter(|k| k != "text_delta")
        .collect::<Vec<_>>(),
        ["turn_started", "cancel_requested", "turn_cancelled"]
    );
    assert_eq!(last_payload(&world, "s", "turn_cancelled").await["cancelled_by"], "carl");
    let log = crate::world::plain(&worker.log_text());
    assert!(log.contains("interrupting the CLI") && log.contains("turn cancelled"), "{log}");
    receiver
        .wait_until("turn.cancelled", |r| r.iter().any(|r| r.json()["type"] == "turn.cancelled"), &world)
        .await;
    let hook = receiver.requests().into_iter().find(|r| r.json()["type"] == "turn.cancelled").unwrap().json();
    assert_eq!(
        (hook["data"]["turn_id"].as_str(), hook["data"]["cancelled_by"].as_str()),
        (Some("turn-1"), Some("carl"))
    );
    // Repeating the cancel of an idle session: nothing to cancel.
    let idle = cancel(&url, &ada, "s").await;
    assert_eq!((idle.status, &idle.body["error"]["code"]), (409, &json!("no_turn_running")), "{}", idle.text);

    // The next message runs as usual; the model reads that the last request was cancelled.
    world.mock.open_gate("streaming");
    send(&url, &carl, "s", "say hello again").await;
    assert_eq!(answered(&world, "s", 0).await, "said: hello again");
    let prompt = last_prompt_text(&world);
    assert!(prompt.contains("carl cancelled the previous turn") && prompt.contains("w000"), "{prompt}");
    receiver
        .wait_until("turn.completed", |r| r.iter().any(|r| r.json()["type"] == "turn.completed"), &world)
        .await;
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_turn_waiting_for_approval_is_cancelled_by_an_approver_and_a_late_approval_is_refused() {
    let test = "cancel: a turn waiting for approval, api and worker processes on SQLite";
    let Some(world) = World::new(test, Refund::SingleAttemptWithApproval).await else { return };
    let file = world.dir.path().join("auth.toml");
    let carl = crate::served::add_principal(&world, &file, "carl", &["client"], &[]).await;
    let ada = crate::served::add_principal(&world, &file, "ada", &["approver"], &[]).await;
    let served = Served::start_api(&world, "api", &["--auth", file.to_str().unwrap()]).await;
    let url = served.url.clone();
    let a = world.worker("a");
    start(&url, &carl, "s", REFUND).await;
    let waiting = world.wait_for("s", "the approval", |s| s.status == "awaiting_approval").await;
    let id = waiting.pending_interrupts[0].interrupt_id.clone();
    // No Worker runs now: the request waits in the store for the next one.
    a.terminate().await;
    let approve = || {
        api(reqwest::Client::new()
            .post(format!("{url}/v1/sessions/s/interrupts/{id}"))
            .bearer_auth(&ada)
            .json(&json!({"approved": true})))
    };

    let asked = cancel(&url, &ada, "s").await;
    assert_eq!(asked.status, 202, "an approver cancels a session it did not start: {}", asked.text);
    assert_eq!(asked.body["cancel_requested"]["requested_by"], "ada");
    let again = cancel(&url, &carl, "s").await;
    assert_eq!((again.status, &again.body["replayed"]), (202, &json!(true)), "{}", again.text);
    assert_eq!(again.body["cancel_requested"]["requested_by"], "ada", "the first request stays");
    let late = approve().await;
    assert_eq!((late.status, &late.body["error"]["code"]), (409, &json!("turn_cancelling")), "{}", late.text);
    let pending = world.snapshot("s").await;
    assert_eq!(pending.cancel_requested.as_ref().map(|c| c.requested_by.as_str()), Some("ada"));
    assert_eq!(pending.status, "awaiting_approval", "until a Worker applies it");

    let _b = world.worker("b");
    let done = cancelled(&world, "s", "turn-1").await;
    assert!(done.pending_interrupts.is_empty(), "{done:#?}");
    let call = &done.tool_calls[0];
    assert_eq!((call.tool_name.as_str(), call.state.name()), ("create_refund", "cancelled"), "{call:#?}");
    assert!(world.payments.requests().is_empty(), "the refund never ran");
    let resolved = last_payload(&world, "s", "interrupt_resolved").await;
    assert_eq!((resolved["closed"].clone(), resolved["decided_by"].clone()), (json!(true), Value::Null));
    assert_eq!(resolved["approved"], false);
    assert!(resolved["message"].as_str().unwrap().contains("ada cancelled the turn"), "{resolved}");
    let inbox =
        api(reqwest::Client::new().get(format!("{url}/v1/interrupts?status=pending")).bearer_auth(&ada))
            .await;
    assert_eq!(inbox.body["interrupts"], json!([]), "{}", inbox.text);
    let rows: Vec<(&str, &str)> =
        done.decisions.iter().map(|d| (d.principal.as_str(), d.interrupt_id.as_str())).collect();
    assert_eq!(rows, [("ada", "turn-1")], "the cancel's row, no decision's");
    let late = approve().await;
    assert_eq!(
        (late.status, &late.body["error"]["code"]),
        (409, &json!("interrupt_already_resolved")),
        "closed with its turn: {}",
        late.text
    );

    send(&url, &carl, "s", "recall").await;
    let answer = answered(&world, "s", 0).await;
    assert!(
        answer.contains("ada cancelled the previous turn") && answer.contains("create_refund"),
        "{answer}"
    );
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_inline_write_keeps_its_record_when_its_turn_is_cancelled_and_runs_once() {
    let test = "cancel: inline writes, committed, in flight and of a dead Worker";
    let Some(world) = crate::inline_writes::ledger_world(test).await else { return };
    let w = world.worker("w");
    let store = world.store.as_ref();

    // A write whose record committed before the cancel: kept as it is.
    let committed =
        r#"call record_credit {"order_id":"7","amount_cents":300} ;; drip 40 25 ;; hold after-write"#;
    world.send("done", committed).await;
    world.mock.wait_for_gate("after-write", Duration::from_secs(90)).await.expect("the final answer");
    tollgate_sessions::writes::cancel(store, "done", "carl").await.expect("cancel");
    let done = cancelled(&world, "done", "turn-1").await;
    let credit = &done.tool_calls[0];
    assert_eq!(
        (credit.tool_name.as_str(), credit.state.name()),
        ("record_credit", "succeeded"),
        "{credit:#?}"
    );
    assert_eq!(world.payments.keys().len(), 1);
    world.mock.open_gate("after-write");

    // A write in flight (its request held by the payments service) when the cancel comes: the
    // CLI is stopped at once, and the cancel waits for the write's record.
    world.payments.hold();
    world.send("s", crate::inline_writes::FLOW).await;
    world.payments.wait_for(2).await;
    assert_eq!(world.snapshot("s").await.tool_calls[0].state.name(), "started");
    tollgate_sessions::writes::cancel(store, "s", "carl").await.expect("cancel");
    // The segment ended (its CLI interrupted, or killed after the grace) with the write held.
    let started = Instant::now();
    while w.log_text().matches("segment ran").count() < 2 {
        assert!(started.elapsed() < Duration::from_secs(30), "{}", world.diagnostics());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(w.log_text().contains("interrupting the CLI"), "{}", world.diagnostics());
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(world.snapshot("s").await.cancel_requested.is_some(), "the cancel waits for the write");
    world.payments.release();
    let done = cancelled(&world, "s", "turn-1").await;
    let credit = &done.tool_calls[0];
    assert_eq!(credit.state.name(), "succeeded", "its record, committed after the CLI stopped: {credit:#?}");
    assert_eq!(world.payments.keys().len(), 2, "one request per session: {:?}", world.payments.keys());

    // A write whose Worker died during it, and whose turn is cancelled before another Worker
    // reran it: recorded `outcome_unknown`, never run again.
    world.payments.hold();
    world.send("k", crate::inline_writes::FLOW).await;
    world.payments.wait_for(3).await;
    w.kill().await;
    tollgate_sessions::writes::cancel(store, "k", "carl").await.expect("cancel");
    world.payments.release();
    let _b = world.worker("b");
    let done = cancelled(&world, "k", "turn-1").await;
    let credit = &done.tool_calls[0];
    assert_eq!(credit.state.name(), "outcome_unknown", "it may have taken effect: {credit:#?}");
    let finished = last_payload(&world, "k", "tool_call_finished").await;
    assert_eq!(
        (finished["status"].as_str(), finished["deferred"].as_bool()),
        (Some("outcome_unknown"), Some(false))
    );
    tollgate_sessions::writes::send(store, "k", "recall", None).await.expect("send");
    let answer = answered(&world, "k", 0).await;
    assert!(
        answer.contains("record_credit")
            && answer.contains("outcome_unknown")
            && answer.contains("carl cancelled"),
        "the model reads what became of the write: {answer}"
    );
    assert_eq!(world.payments.keys().len(), 3, "and it never ran again: {:?}", world.payments.keys());
}

#[tokio::test(flavor = "multi_thread")]
async fn on_postgresql_a_cancel_reaches_the_worker_process_during_a_segment_and_during_an_approval() {
    let Some(db) = crate::pg_database().await else { return };
    let test = "cancel: api and worker processes on PostgreSQL";
    let Some(world) = World::on_db(test, Refund::SingleAttemptWithApproval, &db).await else {
        return;
    };
    let served = Served::start_api(&world, "api", &["--token", "t0ken"]).await;
    let url = served.url.clone();
    let _w = world.worker("w");

    start(&url, "t0ken", "s", &held_reply("streaming")).await;
    world.mock.wait_for_gate("streaming", Duration::from_secs(90)).await.expect("streaming");
    let asked = Instant::now();
    assert_eq!(cancel(&url, "t0ken", "s").await.status, 202);
    let done = cancelled(&world, "s", "turn-1").await;
    assert!(asked.elapsed() < Duration::from_secs(20), "{:?}", asked.elapsed());
    assert_eq!(done.last_turn_cancelled.as_ref().unwrap().cancelled_by, "tollgate:token");
    world.mock.open_gate("streaming");

    send(&url, "t0ken", "s", REFUND).await;
    let waiting = world.wait_for("s", "the approval", |s| s.status == "awaiting_approval").await;
    let id = waiting.pending_interrupts[0].interrupt_id.clone();
    assert_eq!(cancel(&url, "t0ken", "s").await.status, 202);
    let done = cancelled(&world, "s", "turn-2").await;
    assert_eq!(done.tool_calls[0].state.name(), "cancelled");
    let late = api(reqwest::Client::new()
        .post(format!("{url}/v1/sessions/s/interrupts/{id}"))
        .bearer_auth("t0ken")
        .json(&json!({"approved": true})))
    .await;
    assert_eq!(late.status, 409, "{}", late.text);
    assert!(world.payments.requests().is_empty());

    send(&url, "t0ken", "s", "say hello").await;
    assert_eq!(answered(&world, "s", 0).await, "said: hello");
    let cancels =
        done.decisions.iter().filter(|d| d.decision == tollgate_api::api::types::AuditDecision::Cancelled);
    assert_eq!(cancels.map(|d| d.interrupt_id.as_str()).collect::<Vec<_>>(), ["turn-1", "turn-2"]);
    served.stop().await;
}
