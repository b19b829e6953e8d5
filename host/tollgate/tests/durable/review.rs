//! The options factory's review of a call waiting for approval, end to end: `tollgate serve
//! --auth` runs the real CLI against the mock model with the example agent, whose factory checks a
//! refund against the order the session looked up. A refund over the order's total is high risk
//! with the note "refund exceeds the order total of €54.00", and with `high_risk_approvers = 2` it
//! needs two different approvers (the session's starter is none of them); one within the total is
//! low risk and one approval decides it. A factory whose review traps or loops leaves the refund
//! decidable, with a note that the review failed.

use serde_json::{Value, json};

use crate::served::Served;
use crate::served::add_principal;
use crate::world::{Refund, World, api};

/// Looks order 9 (€54.00) up and asks to refund `amount_cents` of it, in one reply.
fn refund_after_lookup(amount_cents: u64) -> String {
    format!(
        r#"call lookup_order {{"order_id":"9"}} && call create_refund {{"order_id":"9","amount_cents":{amount_cents}}}"#
    )
}

/// The open interrupt of session `session` as `GET /v1/interrupts` lists it.
async fn listed(http: &reqwest::Client, url: &str, token: &str, session: &str) -> Value {
    let inbox = api(http.get(format!("{url}/v1/interrupts")).bearer_auth(token)).await;
    assert_eq!(inbox.status, 200, "{}", inbox.text);
    let found = inbox.body["interrupts"].as_array().unwrap().iter().find(|i| i["session_id"] == session);
    found.cloned().unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refund_over_the_orders_total_is_high_risk_and_needs_two_approvers() {
    let Some(world) =
        World::new("review: a refund over the order's total", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    world.refund_policy_with("high_risk_approvers = 2");
    let file = world.dir.path().join("auth.toml");
    let carl = add_principal(&world, &file, "carl", &["client", "approver"], &[]).await;
    let alice = add_principal(&world, &file, "alice", &["approver"], &[]).await;
    let bob = add_principal(&world, &file, "bob", &["approver"], &[]).await;
    let served =
        Served::start_with(&world, "serve", "127.0.0.1:0", &["--auth", file.to_str().unwrap()]).await;
    let (url, http) = (served.url.clone(), reqwest::Client::new());
    let start = |session: &str, message: String| {
        http.post(format!("{url}/v1/sessions"))
            .bearer_auth(&carl)
            .header("content-type", "application/json")
            .body(json!({"session_id": session, "message": message}).to_string())
    };

    let started = api(start("over", refund_after_lookup(125_000))).await;
    assert!(started.status < 300, "{}", started.text);
    world.wait_for("over", "the refund's approval", |s| s.status == "awaiting_approval").await;
    let open = listed(&http, &url, &alice, "over").await;
    assert_eq!(
        open["review"],
        json!({"risk": "high", "notes": ["refund exceeds the order total of €54.00"]}),
        "{open}\n{}",
        world.diagnostics()
    );
    assert_eq!(
        (&open["approvals_required"], &open["request"]["review"]["risk"]),
        (&json!(2), &json!("high"))
    );
    let id = open["interrupt_id"].as_str().unwrap().to_owned();
    let decide = format!("{url}/v1/sessions/over/interrupts/{id}");
    let approve = |token: &str, key: &str| {
        http.post(&decide)
            .bearer_auth(token)
            .header("content-type", "application/json")
            .header("idempotency-key", key)
            .body(r#"{"approved":true}"#)
    };

    // The starter is no approver of their own session's calls.
    let own = api(approve(&carl, "c1")).await;
    assert_eq!((own.status, &own.body["error"]["code"]), (403, &json!("own_session")), "{}", own.text);
    // The first approval counts, audited as partial; the refund still waits.
    let first = api(approve(&alice, "a1")).await;
    assert_eq!(first.status, 200, "{}", first.text);
    assert_eq!(first.body["approvals"], json!({"approvals": 1, "required": 2}));
    let still = listed(&http, &url, &bob, "over").await;
    assert_eq!(
        still["approvals"].as_array().map(|a| a[0]["principal"].clone()),
        Some(json!("alice")),
        "{still}"
    );
    // The session's snapshot shows the same review and approvals on its pending approval.
    let snapshot = api(http.get(format!("{url}/v1/sessions/over")).bearer_auth(&bob)).await;
    let pending = &snapshot.body["pending_interrupts"][0];
    assert_eq!(
        (&pending["review"]["risk"], &pending["approvals_required"], &pending["approvals"][0]["principal"]),
        (&json!("high"), &json!(2), &json!("alice")),
        "{}",
        snapshot.text
    );
    assert_eq!(world.snapshot("over").await.status, "awaiting_approval");
    // The same principal again: a replay under the same key, refused under another.
    let replay = api(approve(&alice, "a1")).await;
    assert_eq!((replay.status, &replay.body["replayed"]), (200, &json!(true)), "{}", replay.text);
    let twice = api(approve(&alice, "a2")).await;
    assert_eq!(
        (twice.status, &twice.body["error"]["code"]),
        (409, &json!("already_approved")),
        "{}",
        twice.text
    );
    // A second approver decides it: the refund runs once.
    let second = api(approve(&bob, "b1")).await;
    assert_eq!(second.status, 200, "{}", second.text);
    assert!(second.body.get("approvals").is_none(), "{}", second.text);
    world.wait_for("over", "the refund's turn", |s| s.status == "idle").await;
    assert_eq!(world.payments.count(), 1, "the refund ran once");
    let audit = api(http.get(format!("{url}/v1/audit?session_id=over")).bearer_auth(&bob)).await;
    let decisions: Vec<(Value, Value)> = audit.body["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["principal"].clone(), e["decision"].clone()))
        .collect();
    assert_eq!(
        decisions,
        [(json!("alice"), json!("partially_approved")), (json!("bob"), json!("approved"))],
        "{}",
        audit.text
    );

    // Within the order's total: low risk, one approval decides.
    let started = api(start("within", refund_after_lookup(5_400))).await;
    assert!(started.status < 300, "{}", started.text);
    world.wait_for("within", "the refund's approval", |s| s.status == "awaiting_approval").await;
    let open = listed(&http, &url, &alice, "within").await;
    assert_eq!(
        open["review"],
        json!({"risk": "low", "notes": ["refund is within the order total of €54.00"]})
    );
    assert!(open.get("approvals_required").is_none(), "{open}");
    let id = open["interrupt_id"].as_str().unwrap();
    let once = api(http
        .post(format!("{url}/v1/sessions/within/interrupts/{id}"))
        .bearer_auth(&alice)
        .header("content-type", "application/json")
        .body(r#"{"approved":true}"#))
    .await;
    assert_eq!((once.status, once.body.get("approvals")), (200, None), "{}", once.text);
    world.wait_for("within", "the refund's turn", |s| s.status == "idle").await;
    assert_eq!(world.payments.count(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_review_that_traps_or_loops_leaves_the_refund_decidable() {
    for how in ["trap", "loop"] {
        let Some(world) =
            World::new("review: a factory whose review fails", Refund::SingleAttemptWithApproval).await
        else {
            return;
        };
        world.refund_policy_with("high_risk_approvers = 2");
        std::fs::copy(tollgate_test_guests::REVIEWER_FACTORY, world.agent.join("agent.wasm")).unwrap();
        std::fs::write(
            world.agent.join("agent.toml"),
            format!("timeout_ms = 1000\n[config]\nREVIEW = \"{how}\"\n"),
        )
        .unwrap();
        let served = Served::start(&world, "serve", None).await;
        let http = reqwest::Client::new();
        let url = served.url.clone();
        let started = api(http
            .post(format!("{url}/v1/sessions"))
            .header("content-type", "application/json")
            .body(json!({"session_id": "s", "message": refund_after_lookup(125_000)}).to_string()))
        .await;
        assert!(started.status < 300, "{}", started.text);
        world.wait_for("s", "the refund's approval", |s| s.status == "awaiting_approval").await;
        let inbox = api(http.get(format!("{url}/v1/interrupts"))).await;
        let open = &inbox.body["interrupts"][0];
        assert_eq!(open["review"]["risk"], Value::Null, "{how}: the risk is unknown: {open}");
        let note = open["review"]["notes"][0].as_str().unwrap_or_default();
        assert!(note.starts_with("The review failed: "), "{how}: {open}");
        assert!(open.get("approvals_required").is_none(), "{how}: an unknown risk needs one approver");
        let id = open["interrupt_id"].as_str().unwrap();
        let decided = api(http
            .post(format!("{url}/v1/sessions/s/interrupts/{id}"))
            .header("content-type", "application/json")
            .body(r#"{"approved":true}"#))
        .await;
        assert_eq!(decided.status, 200, "{how}: {}", decided.text);
        world.wait_for("s", "the refund's turn", |s| s.status == "idle").await;
        assert_eq!(world.payments.count(), 1, "{how}: the refund ran once");
    }
}
