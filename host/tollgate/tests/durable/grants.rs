//! Allow for this session through `tollgate serve` and the real CLI: a refund approved with
//! `scope: "session"` lets the next turn's refund run with no approval, recorded under the grant;
//! once the grant is revoked, the next refund waits for approval again.

use serde_json::{Value, json};

use crate::served::Served;
use crate::world::{Refund, World, api};

fn refund(order: &str) -> String {
    format!(r#"call create_refund {{"order_id":"{order}","amount_cents":500}}"#)
}

/// `POST …/interrupts/{id}` with `body` (the answer validated against the OpenAPI document).
async fn decide(served: &Served, id: &str, body: Value) -> crate::world::Answer {
    let url = format!("{}/v1/sessions/s/interrupts/{id}", served.url);
    api(reqwest::Client::new().post(url).bearer_auth("t0ken").json(&body)).await
}

async fn revoke(served: &Served, tool: &str) -> crate::world::Answer {
    let url = format!("{}/v1/sessions/s/grants/{tool}", served.url);
    api(reqwest::Client::new().delete(url).bearer_auth("t0ken")).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refund_allowed_for_the_session_lets_the_next_refund_run_unasked_until_the_grant_is_revoked() {
    let Some(world) = World::new("grant: allow for this session", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    let served = Served::start(&world, "serve", Some("t0ken")).await;

    // Refund 1: approved with scope session (a rejection cannot grant: 400, nothing stored).
    world.send("s", &refund("7")).await;
    let waiting = world.wait_for("s", "the approval", |s| s.status == "awaiting_approval").await;
    let first = waiting.pending_interrupts[0].interrupt_id.clone();
    let bad = decide(&served, &first, json!({"approved": false, "scope": "session"})).await;
    assert_eq!((bad.status, &bad.body["error"]["field"]), (400, &json!("scope")), "{}", bad.text);
    assert_eq!(revoke(&served, "create_refund").await.status, 404, "no grant yet");
    let granted = decide(&served, &first, json!({"approved": true, "scope": "session"})).await;
    assert_eq!(granted.status, 200, "{}", granted.text);
    let one = world.wait_idle_after("s", 1).await;
    assert_eq!(one.last_turn_error, None, "{}", world.diagnostics());
    assert_eq!(world.payments.count(), 1);
    assert_eq!(one.decisions.len(), 1);
    let principal = one.decisions[0].principal.clone();
    assert_eq!(one.grants.len(), 1, "{:?}", one.grants);
    let grant = one.grants[0].grant.clone();
    assert_eq!((grant.tool_name.as_str(), grant.decision_id.as_str()), ("create_refund", first.as_str()));
    assert_eq!(grant.granted_by, principal);
    assert_eq!(grant.granted_at, one.decisions[0].decided_at, "the decision's database time");
    assert_eq!(one.grants[0].revoked, None);
    assert_eq!(one.tool_calls[0].grants_session.as_ref(), Some(&grant));

    // Refund 2, next turn: no interrupt, run in its step, recorded under the grant.
    world.send("s", &refund("8")).await;
    let two = world.wait_idle_after("s", 2).await;
    assert_eq!(two.last_turn_error, None, "{}", world.diagnostics());
    assert_eq!(world.payments.count(), 2, "the second refund ran with no approval");
    assert_eq!(two.decisions.len(), 1, "nobody was asked");
    let second = two.tool_calls.iter().find(|c| c.arguments["order_id"] == "8").expect("refund 2's record");
    assert_eq!(second.state.name(), "succeeded");
    assert_eq!(second.approved_under.as_ref(), Some(&grant), "{second:?}");
    assert!(second.requires_approval, "its policy still requires approval; the grant gave it");
    let events = world.events("s").await;
    let under: Vec<_> = events.iter().filter(|e| e.kind == "approved_under_grant").collect();
    assert_eq!(under.len(), 1, "{events:?}");
    assert!(under[0].payload.get().contains(&first), "{}", under[0].payload.get());
    assert_eq!(events.iter().filter(|e| e.kind == "interrupt_opened").count(), 1);

    // Revoke: refund 3 waits for approval again.
    let revoked = revoke(&served, "create_refund").await;
    assert_eq!(revoked.status, 200, "{}", revoked.text);
    assert_eq!(revoked.body["decision_ids"], json!([first]));
    let again = revoke(&served, "create_refund").await;
    assert_eq!(
        (again.status, &again.body["error"]["code"]),
        (404, &json!("grant_not_found")),
        "{}",
        again.text
    );
    let cli = served
        .client_command(&["approvals", "revoke", "s", "create_refund"])
        .env("TOLLGATE_TOKEN", "t0ken")
        .output()
        .await
        .unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&cli.stdout), String::from_utf8_lossy(&cli.stderr));
    assert!(!cli.status.success() && said.contains("grant_not_found"), "the CLI client too: {said}");
    let listed = world.snapshot("s").await;
    let revocation = listed.grants[0].revoked.clone().expect("revoked");
    assert_eq!(revocation.revoked_by, principal);
    // The revocation is in the audit trail: who, which grant (named by its decision), which tool.
    let revoked: Vec<_> = listed
        .decisions
        .iter()
        .filter(|d| d.decision == tollgate_api::api::types::AuditDecision::Revoked)
        .collect();
    let [row] = revoked.as_slice() else { panic!("one revoked row: {:?}", listed.decisions) };
    assert_eq!((row.principal.as_str(), row.interrupt_id.as_str()), (principal.as_str(), first.as_str()));
    assert_eq!(row.tool_name.as_deref(), Some("create_refund"));
    assert_eq!(listed.decisions.len(), 2, "the grant and its revocation; the 404s wrote nothing");
    world.send("s", &refund("9")).await;
    let waiting = world.wait_for("s", "the approval again", |s| s.status == "awaiting_approval").await;
    assert_eq!(world.payments.count(), 2, "refund 3 waits");
    let third = waiting.pending_interrupts[0].interrupt_id.clone();
    // Granted again, through the CLI client.
    let cli = served
        .client_command(&["approvals", "approve", "s", &third, "--for-session"])
        .env("TOLLGATE_TOKEN", "t0ken")
        .output()
        .await
        .unwrap();
    assert!(cli.status.success(), "{}", String::from_utf8_lossy(&cli.stderr));
    let three = world.wait_idle_after("s", 3).await;
    assert_eq!(three.last_turn_error, None, "{}", world.diagnostics());
    assert_eq!(world.payments.count(), 3);
    let last = three.tool_calls.iter().find(|c| c.arguments["order_id"] == "9").expect("refund 3's record");
    assert_eq!(last.approved_under, None);
    assert_eq!(last.grants_session.as_ref().map(|g| g.decision_id.as_str()), Some(third.as_str()));
    assert_eq!(three.grants.len(), 2, "{:?}", three.grants);
    assert!(three.grants[0].revoked.is_some() && three.grants[1].revoked.is_none());
}
