//! Deadlines that act by themselves, with the real CLI and the mock model: a refund whose policy
//! sets `approval_timeout_secs` waits for approval; the Worker is SIGKILLed, the deadline passes
//! with no Worker alive, a late human decision is a 409 `interrupt_expired` that stores nothing,
//! and a Worker started afterwards rejects the call with the text the model reads (audited as
//! `expired` by `tollgate:deadline`). An escalating deadline changes who may decide (403 before,
//! 200 after) and writes the `interrupt_escalated` event and webhook. On PostgreSQL, two Workers
//! started after the deadline fire it once.

use std::time::Duration;

use serde_json::{Value, json};

use crate::served::Served;
use crate::served::add_principal;
use crate::webhooks::{Receiver, write_hooks};
use crate::world::{Refund, World, api};

const REFUND: &str = r#"call create_refund {"order_id":"7","amount_cents":500}"#;
/// `POST …/interrupts/{id}` as `token` with `body` (validated against the OpenAPI document).
async fn decide(url: &str, session: &str, id: &str, token: &str, body: Value) -> crate::world::Answer {
    let url = format!("{url}/v1/sessions/{session}/interrupts/{id}");
    api(reqwest::Client::new().post(url).bearer_auth(token).json(&body)).await
}

/// Waits until the store lists interrupt `id` of `session` as due (its deadline passed on the
/// database clock).
async fn wait_due(world: &World, session: &str, id: &str) {
    let start = std::time::Instant::now();
    loop {
        let due = world.store.deadlines().due_deadlines(100).await.expect("due deadlines");
        if due.iter().any(|i| i.session_id == session && i.interrupt_id == id) {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "the deadline never came due");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The expiry story on `world` (its Workers on `db`), `firers` Workers started after the deadline.
async fn a_deadline_fires_after_its_worker_was_killed(world: World, firers: usize) {
    world.refund_policy_with("approval_timeout_secs = 2");
    let served = Served::start_api(&world, "api", &["--token", "t0ken"]).await;
    let first = world.worker("w1");
    world.send("s", REFUND).await;
    let waiting = world.wait_for("s", "the approval", |s| s.status == "awaiting_approval").await;
    let pending = &waiting.pending_interrupts[0];
    let id = pending.interrupt_id.clone();
    let deadline_at = pending.deadline_at.expect("the pending approval shows its deadline");
    let opened = world.store.interrupt("s", &id).await.unwrap().expect("the interrupt");
    assert_eq!(deadline_at, opened.created_at + 2_000, "2 s after it opened, on the database clock");
    let inbox =
        api(reqwest::Client::new().get(format!("{}/v1/interrupts", served.url)).bearer_auth("t0ken")).await;
    assert_eq!(inbox.body["interrupts"][0]["deadline_at"], json!(deadline_at), "{}", inbox.text);
    assert_eq!(
        inbox.body["interrupts"][0]["request"]["deadline"],
        json!({"approval_timeout_secs": 2, "on_timeout": "reject"}),
        "{}",
        inbox.text
    );

    // The Worker dies; the deadline passes with nobody to fire it.
    first.kill().await;
    wait_due(&world, "s", &id).await;
    let still = world.snapshot("s").await;
    assert_eq!(still.status, "awaiting_approval", "no Worker, nothing fired");

    // A human decision now is refused, naming the deadline, and stores nothing.
    let late = decide(&served.url, "s", &id, "t0ken", json!({"approved": true})).await;
    assert_eq!(
        (late.status, &late.body["error"]["code"]),
        (409, &json!("interrupt_expired")),
        "{}",
        late.text
    );
    let message = late.body["error"]["message"].as_str().unwrap_or_default().to_owned();
    assert!(
        message.contains(&deadline_at.to_string())
            && message.contains(&tollgate_api::webhooks::rfc3339_ms(deadline_at)),
        "names the deadline: {message}"
    );
    let after = world.snapshot("s").await;
    assert_eq!(after.status, "awaiting_approval");
    assert!(after.decisions.is_empty(), "no audit row: {:?}", after.decisions);
    assert!(world.store.interrupt("s", &id).await.unwrap().expect("open").resolution.is_none());
    assert!(!world.events("s").await.iter().any(|e| e.kind == "interrupt_resolved"), "no event");

    // Workers started after the deadline fire it (once), and the turn completes.
    let _firers: Vec<_> = (0..firers).map(|n| world.worker(&format!("w{}", n + 2))).collect();
    let done = world.wait_idle_after("s", 1).await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());
    assert_eq!(world.payments.count(), 0, "an expired refund never runs");
    let expiry = tollgate_engine::texts::approval_expired(2, &[]);
    assert_eq!(
        done.tool_calls[0].state,
        tollgate_api::api::types::CallState::Rejected { message: Some(expiry.clone()) }
    );
    let (seen, is_error) = world.tool_result_seen(&id).expect("the model saw the rejection");
    assert!(seen.starts_with(&format!("The user rejected this call: {expiry}")), "{seen}");
    assert!(is_error);
    let [decision] = done.decisions.as_slice() else { panic!("one audit row: {:?}", done.decisions) };
    assert_eq!(decision.principal, "tollgate:deadline");
    assert_eq!(decision.decision, tollgate_api::api::types::AuditDecision::Expired);
    assert_eq!(decision.reason.as_deref(), Some(expiry.as_str()));
    assert!(decision.decided_at >= deadline_at, "fired after its time");
    let events = world.events("s").await;
    assert_eq!(events.iter().filter(|e| e.kind == "interrupt_resolved").count(), 1, "fired once");
    assert_eq!(events.iter().filter(|e| e.kind == "decision_recorded").count(), 1);

    // A decision now is still the 409 that names the deadline; nothing more is stored.
    let again = decide(&served.url, "s", &id, "t0ken", json!({"approved": false})).await;
    assert_eq!(
        (again.status, &again.body["error"]["code"]),
        (409, &json!("interrupt_expired")),
        "{}",
        again.text
    );
    assert_eq!(world.snapshot("s").await.decisions.len(), 1);
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_two_second_deadline_rejects_the_call_after_its_worker_was_sigkilled_and_a_late_decision_is_refused()
 {
    let Some(world) =
        World::new("deadline: expiry across a SIGKILL", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    a_deadline_fires_after_its_worker_was_killed(world, 1).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn on_postgres_two_workers_started_after_the_deadline_fire_it_once() {
    let Some(db) = crate::pg_database().await else { return };
    let test = "deadline: expiry on PostgreSQL, two firers";
    let Some(world) = World::on_db(test, Refund::SingleAttemptWithApproval, &db).await else {
        return;
    };
    a_deadline_fires_after_its_worker_was_killed(world, 2).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_escalation_changes_who_may_decide_and_is_announced() {
    let Some(world) = World::new("deadline: escalation", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    world.refund_policy_with(
        r#"approvers = ["finance"], approval_timeout_secs = 4, on_timeout = "escalate", escalate_to = ["oncall"], escalation_timeout_secs = 600"#,
    );
    let file = world.dir.path().join("auth.toml");
    let carl = add_principal(&world, &file, "carl", &["client"], &[]).await;
    let fina = add_principal(&world, &file, "fina", &["approver"], &["finance"]).await;
    let olga = add_principal(&world, &file, "olga", &["approver"], &["oncall"]).await;
    let receiver = Receiver::start(Vec::new()).await;
    let hooks = write_hooks(&world, &receiver.url);
    let extra = ["--auth", file.to_str().unwrap(), "--webhooks", &hooks];
    let served = Served::start_with(&world, "serve", "127.0.0.1:0", &extra).await;
    let (url, http) = (served.url.clone(), reqwest::Client::new());
    let created = api(http.post(format!("{url}/v1/sessions")).bearer_auth(&carl).json(&json!({
        "session_id": "s", "message": REFUND,
    })))
    .await;
    assert_eq!(created.status, 201, "{}", created.text);
    let waiting = world.wait_for("s", "the approval", |s| s.status == "awaiting_approval").await;
    let id = waiting.pending_interrupts[0].interrupt_id.clone();
    assert_eq!(waiting.pending_interrupts[0].approvers, ["finance"]);

    // Before the deadline: only finance decides; oncall is refused and nothing is stored.
    let early = decide(&url, "s", &id, &olga, json!({"approved": true})).await;
    assert_eq!(
        (early.status, &early.body["error"]["code"]),
        (403, &json!("group_required")),
        "{}",
        early.text
    );
    assert_eq!(early.body["error"]["needed"], json!(["finance"]));
    assert!(
        world.snapshot("s").await.pending_interrupts[0].escalated_at.is_none(),
        "the 403 came before the escalation (4 s)"
    );

    // The deadline escalates it to oncall, with a second deadline of 600 s.
    let escalated = world
        .wait_for("s", "the escalation", |s| {
            s.pending_interrupts.first().is_some_and(|p| p.escalated_at.is_some())
        })
        .await;
    let pending = &escalated.pending_interrupts[0];
    assert_eq!(pending.approvers, ["oncall"], "who may decide now");
    let escalated_at = pending.escalated_at.expect("escalated");
    assert_eq!(pending.deadline_at, Some(escalated_at + 600_000), "the second deadline");
    let inbox = api(http.get(format!("{url}/v1/interrupts")).bearer_auth(&fina)).await;
    let listed = &inbox.body["interrupts"][0];
    assert_eq!(
        (&listed["request"]["approvers"], &listed["request"]["escalated_from"]),
        (&json!(["oncall"]), &json!(["finance"]))
    );
    assert_eq!(listed["escalated_at"], json!(escalated_at), "{}", inbox.text);
    let listing = served
        .client_command(&["approvals", "list"])
        .env("TOLLGATE_TOKEN", &fina)
        .output()
        .await
        .expect("run tollgate approvals list");
    let listing = String::from_utf8_lossy(&listing.stdout).into_owned();
    assert!(listing.contains("(escalated)") && listing.contains("oncall"), "{listing}");

    // Now finance is refused and oncall decides.
    let stale = decide(&url, "s", &id, &fina, json!({"approved": true})).await;
    assert_eq!(
        (stale.status, &stale.body["error"]["code"]),
        (403, &json!("group_required")),
        "{}",
        stale.text
    );
    assert_eq!(stale.body["error"]["needed"], json!(["oncall"]));
    let approved = decide(&url, "s", &id, &olga, json!({"approved": true})).await;
    assert_eq!(approved.status, 200, "{}", approved.text);
    let done = world.wait_idle_after("s", 1).await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());
    assert_eq!(world.payments.count(), 1, "the refund ran once");

    // The trail: escalated by the deadline, then approved by oncall.
    let trail: Vec<(String, tollgate_api::api::types::AuditDecision)> =
        done.decisions.iter().map(|d| (d.principal.clone(), d.decision)).collect();
    use tollgate_api::api::types::AuditDecision::{Approved, Escalated};
    assert_eq!(trail, [("tollgate:deadline".to_owned(), Escalated), ("olga".to_owned(), Approved)]);
    let events = world.events("s").await;
    let announced: Vec<Value> = events
        .iter()
        .filter(|e| e.kind == "interrupt_escalated")
        .map(|e| serde_json::from_str(e.payload.get()).unwrap())
        .collect();
    let [event] = announced.as_slice() else { panic!("one interrupt_escalated event: {announced:?}") };
    assert_eq!((&event["escalate_to"], &event["escalated_from"]), (&json!(["oncall"]), &json!(["finance"])));
    receiver
        .wait_until(
            "the interrupt.escalated webhook",
            |got| got.iter().any(|r| r.json()["type"] == "interrupt.escalated"),
            &world,
        )
        .await;
    let hook = receiver.requests().into_iter().find(|r| r.json()["type"] == "interrupt.escalated").unwrap();
    let data = &hook.json()["data"];
    assert_eq!((&data["interrupt_id"], &data["escalate_to"]), (&json!(id), &json!(["oncall"])), "{data}");
    served.stop().await;
}
