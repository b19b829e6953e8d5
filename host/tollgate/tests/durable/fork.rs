//! Forking a session with the real CLI against the mock model, through `tollgate session fork`
//! and `POST /v1/sessions/{id}/fork` on `tollgate serve`: a fork taken before a refund, while the
//! original waits for that refund's approval, refunds again (its own call, its own key); a dry
//! fork answers the same refund from the original's record and runs nothing; a fork after the
//! refund never runs it again. Each fork resumes the original's conversation, read through its
//! lineage from the store (the model sees the earlier turn); bad input is a 4xx with nothing
//! stored.

use serde_json::json;
use tollgate_api::api::types::Snapshot;

use crate::served::{Served, stdout_of};
use crate::world::{Refund, World, api};

const REFUND: &str = r#"call create_refund {"order_id":"7","amount_cents":500}"#;

/// Waits until `session` waits for approval, and returns the interrupt's id.
async fn waiting(world: &World, session: &str) -> String {
    let s = world
        .wait_for(session, "an approval", |s| {
            s.status == "awaiting_approval" && !s.pending_interrupts.is_empty()
        })
        .await;
    s.pending_interrupts[0].interrupt_id.clone()
}

/// Waits until `session` ended `turns` turns of its own (a fork counts from its first own turn),
/// checking that its conversation read through its lineage is the one its items give.
async fn idle(world: &World, session: &str, turns: usize) -> Snapshot {
    let s = world.wait_idle_after(session, turns).await;
    assert_eq!(s.last_turn_error, None, "{}", world.diagnostics());
    s
}

/// `POST /v1/sessions/{id}/fork` with `body`.
async fn fork(url: &str, session: &str, body: serde_json::Value) -> crate::world::Answer {
    api(reqwest::Client::new().post(format!("{url}/v1/sessions/{session}/fork")).json(&body)).await
}

/// Whether the latest model request carried `needle` in its messages: the conversation the CLI
/// resumed from.
fn last_request_has(world: &World, needle: &str) -> bool {
    let requests = world.mock.message_requests();
    let body = requests.last().and_then(|r| r.body.clone()).unwrap_or_default();
    body["messages"].to_string().contains(needle)
}

#[tokio::test(flavor = "multi_thread")]
async fn forks_before_a_refund_refund_again_unless_dry_and_forks_after_it_never_run_it_again() {
    let Some(world) = World::new("fork: before and after a refund", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    let served = Served::start(&world, "serve", None).await;
    let url = served.url.clone();

    // The original: turn 1 says hello, turn 2 asks for a refund and waits for its approval.
    stdout_of(
        &served.tollgate(&["session", "start", "o", "--message", "say hello from turn one"]).await,
        "start",
    );
    world.wait_idle_after("o", 1).await;
    stdout_of(&served.tollgate(&["session", "send", "o", REFUND]).await, "send");
    let original_refund = waiting(&world, "o").await;

    // Bad input: the waiting turn, a turn that does not exist, turn 0. Nothing is stored.
    let at_waiting = fork(&url, "o", json!({"at_turn": 2, "session_id": "no1"})).await;
    assert_eq!(
        (at_waiting.status, &at_waiting.body["error"]["code"]),
        (409, &json!("fork_refused")),
        "{}",
        at_waiting.text
    );
    assert!(at_waiting.text.contains("waiting for approval"), "{}", at_waiting.text);
    let beyond = fork(&url, "o", json!({"at_turn": 3, "session_id": "no2"})).await;
    assert_eq!(
        (beyond.status, &beyond.body["error"]["code"]),
        (404, &json!("turn_not_found")),
        "{}",
        beyond.text
    );
    let zero = fork(&url, "o", json!({"at_turn": 0, "session_id": "no3"})).await;
    assert_eq!(zero.status, 404, "{}", zero.text);
    let missing = fork(&url, "nobody", json!({"at_turn": 1})).await;
    assert_eq!((missing.status, &missing.body["error"]["code"]), (404, &json!("session_not_found")));
    let cli_refused = served.tollgate(&["session", "fork", "o", "--at-turn", "2"]).await;
    assert!(!cli_refused.status.success());
    assert!(String::from_utf8_lossy(&cli_refused.stderr).contains("fork_refused"), "{cli_refused:?}");
    for id in ["no1", "no2", "no3"] {
        assert!(world.store.session(id).await.unwrap().is_none(), "a refused fork stored {id}");
    }

    // A fork before the refund, taken while the original waits for its approval.
    let forked =
        stdout_of(&served.tollgate(&["session", "fork", "o", "--at-turn", "1", "--id", "f"]).await, "fork");
    assert!(forked.contains("session f forked from o at turn 1"), "{forked}");
    let f = world.snapshot("f").await;
    let from = f.forked_from.clone().expect("forked_from");
    assert_eq!((from.session.as_str(), from.turn, from.dry), ("o", 1, false));
    assert_eq!((f.status.as_str(), f.cost_usd, f.usage.model_calls), ("idle", 0.0, 0), "spend from zero");
    assert!(f.grants.is_empty() && f.tool_calls.is_empty() && f.pending_interrupts.is_empty());
    assert_eq!(f.messages.len(), 2, "the history up to turn 1: {:?}", f.messages);
    assert_eq!(f.started_by.as_deref(), Some("tollgate:open"), "the forker is its starter");
    assert!(f.decisions.iter().any(|d| d.decision == tollgate_api::api::types::AuditDecision::Forked));
    let shown = stdout_of(&served.tollgate(&["session", "show", "f"]).await, "show");
    assert!(shown.contains("forked from o at turn 1"), "{shown}");

    // Its own refund: its own interrupt and key; approved, it runs: a fork taken before a refund
    // refunds again.
    stdout_of(&served.tollgate(&["session", "send", "f", REFUND]).await, "send to the fork");
    let fork_refund = waiting(&world, "f").await;
    assert!(last_request_has(&world, "say hello from turn one"), "the fork resumed the original's turn 1");
    assert_eq!(world.payments.count(), 0, "nothing ran yet");
    stdout_of(&served.tollgate(&["approvals", "approve", "f", &fork_refund]).await, "approve the fork's");
    world.wait_idle_after("f", 1).await;
    assert_eq!(world.payments.count(), 1, "the fork refunded\n{}", world.diagnostics());
    // The original still waits, untouched; approved, it refunds too.
    let o = world.snapshot("o").await;
    assert_eq!((o.status.as_str(), o.pending_interrupts.len()), ("awaiting_approval", 1));
    stdout_of(
        &served.tollgate(&["approvals", "approve", "o", &original_refund]).await,
        "approve the original's",
    );
    world.wait_idle_after("o", 2).await;
    assert_eq!(world.payments.count(), 2, "the original refunded once");

    // A dry fork before the refund: the same refund is answered from the original's record.
    let dry = fork(&url, "o", json!({"at_turn": 1, "dry": true, "session_id": "d"})).await;
    assert_eq!(dry.status, 201, "{}", dry.text);
    assert_eq!(dry.body["forked_from"]["dry"], json!(true));
    stdout_of(&served.tollgate(&["session", "send", "d", REFUND]).await, "send to the dry fork");
    let dry_refund = waiting(&world, "d").await;
    stdout_of(&served.tollgate(&["approvals", "approve", "d", &dry_refund]).await, "approve the dry fork's");
    let d = idle(&world, "d", 1).await;
    assert_eq!(world.payments.count(), 2, "a dry fork runs no refund\n{}", world.diagnostics());
    let original_output = world.snapshot("o").await.tool_calls[0].state.text().map(str::to_owned);
    assert_eq!(d.tool_calls[0].state.text().map(str::to_owned), original_output, "the original's record");
    // Another refund than the original's: refused, nothing runs.
    stdout_of(
        &served
            .tollgate(&["session", "send", "d", r#"call create_refund {"order_id":"8","amount_cents":900}"#])
            .await,
        "an unrecorded refund",
    );
    let other = waiting(&world, "d").await;
    stdout_of(&served.tollgate(&["approvals", "approve", "d", &other]).await, "approve it");
    let d = idle(&world, "d", 2).await;
    assert_eq!(world.payments.count(), 2, "an unrecorded write is refused in a dry fork");
    let refused = d.tool_calls.iter().find(|c| c.tool_call_id == other).expect("the call");
    assert_eq!(refused.state.name(), "failed", "{refused:?}");
    assert!(refused.state.text().unwrap_or_default().contains("dry fork"), "{refused:?}");

    // A fork after the refund: the refund is history and never runs again; a fork of the fork too.
    stdout_of(&served.tollgate(&["session", "fork", "o", "--at-turn", "2", "--id", "a"]).await, "fork after");
    stdout_of(&served.tollgate(&["session", "send", "a", "say after the refund"]).await, "send");
    let a = idle(&world, "a", 1).await;
    assert!(last_request_has(&world, "amount_cents"), "the fork's model saw the refund's turn");
    assert!(a.tool_calls.is_empty(), "no call of its own");
    stdout_of(
        &served.tollgate(&["session", "fork", "a", "--at-turn", "3", "--id", "aa"]).await,
        "fork of a fork",
    );
    stdout_of(&served.tollgate(&["session", "send", "aa", "say deeper"]).await, "send");
    let aa = idle(&world, "aa", 1).await;
    assert_eq!(aa.forked_from.as_ref().map(|f| (f.session.as_str(), f.turn)), Some(("a", 3)));
    assert!(
        last_request_has(&world, "say after the refund")
            && last_request_has(&world, "say hello from turn one")
    );
    assert_eq!(world.payments.count(), 2, "history never runs again");
}
