//! The conformance cases of cancel requests ([`crate::Store::request_cancel`]): one pending
//! request per session, kept until a commit clears it, waking the Worker that holds the step,
//! queueing a step that waits, and refusing decisions meanwhile.

use std::time::Duration;

use super::{Harness, LONG, claimed_session, done, event, j, message, new_session, parked_on_i1};
use tollgate_store::*;

fn cancel(session: &str, by: &str) -> CancelRequest {
    CancelRequest {
        session_id: session.into(),
        requested_by: by.into(),
        events: vec![event("cancel_requested", &format!(r#"{{"requested_by":"{by}"}}"#))],
    }
}

fn cancelled_by(principal: &str) -> tollgate_store::audit::NewAuditEntry {
    tollgate_store::audit::NewAuditEntry {
        principal: principal.into(),
        decision: AuditDecision::Cancelled,
        reason: Some("cancelled turn-1".into()),
        tool_name: None,
        input: None,
        edited_input: None,
    }
}

/// A commit that ends the step and clears the cancel request with `alice`'s audit row about
/// `turn-1`.
fn applied() -> Commit {
    Commit { cancel: CancelChange::Clear { audit: Some(("turn-1".into(), cancelled_by("alice"))) }, ..done() }
}

pub(super) async fn a_cancel_request_needs_a_step_in_flight_and_is_kept_once(h: Harness) {
    let s = &*h.store;
    new_session(s, "s").await;
    let idle = s.request_cancel(cancel("s", "alice")).await;
    assert!(matches!(idle, Err(StoreError::NothingToCancel { .. })), "{idle:?}");
    assert!(s.read_events("s", 0, 10).await.unwrap().is_empty(), "nothing written");
    assert_eq!(s.pending_cancel("s").await.unwrap(), None);
    let missing = s.request_cancel(cancel("missing", "alice")).await;
    assert!(matches!(missing, Err(StoreError::SessionNotFound { .. })), "{missing:?}");
    assert_eq!(s.pending_cancel("missing").await.unwrap(), None);

    let sent = s.send_user_message(message("s", "k1", "hello")).await.unwrap();
    let nobody = s.request_cancel(cancel("s", "")).await;
    assert!(matches!(nobody, Err(StoreError::Invalid { .. })), "{nobody:?}");
    let first = s.request_cancel(cancel("s", "alice")).await.unwrap();
    assert!(!first.replayed);
    assert_eq!(Some(first.step_id), sent.step_id, "the queued step is the one it stops");
    assert_eq!(first.pending.requested_by, "alice");
    assert!(first.pending.requested_at > 0, "the database's time");
    assert_eq!(s.pending_cancel("s").await.unwrap(), Some(first.pending.clone()));
    let events = s.read_events("s", 0, 10).await.unwrap();
    assert_eq!(events.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>(), ["cancel_requested"]);
    assert_eq!(events[0].step, None, "a client's event");

    let again = s.request_cancel(cancel("s", "bob")).await.unwrap();
    assert!(again.replayed, "one request per session");
    assert_eq!(again.pending, first.pending, "the first request stays");
    assert_eq!(s.read_events("s", 0, 10).await.unwrap().len(), 1, "no second event");
    // A queued step stays queued: the Worker that claims it sees the request.
    let claimed = s.claim("w1", LONG).await.unwrap().expect("still claimable");
    assert_eq!(claimed.step.step_id, first.step_id);
    // A commit that keeps it changes nothing; one that clears it ends it.
    s.commit(&claimed, Commit::finish(Finish::Keep)).await.unwrap();
    assert!(s.pending_cancel("s").await.unwrap().is_some());
    s.commit(&claimed, Commit { cancel: CancelChange::Clear { audit: None }, ..done() }).await.unwrap();
    assert_eq!(s.pending_cancel("s").await.unwrap(), None);
    assert_eq!(h.count("SELECT count(*) FROM audit").await, 0, "no row was asked for");
    let over = s.request_cancel(cancel("s", "alice")).await;
    assert!(matches!(over, Err(StoreError::NothingToCancel { .. })), "the turn is over: {over:?}");
}

pub(super) async fn a_cancel_request_queues_a_waiting_step_and_refuses_decisions_until_a_commit_clears_it(
    h: Harness,
) {
    let s = &*h.store;
    let c = claimed_session(s, "s").await;
    s.commit(&c, parked_on_i1()).await.unwrap();
    assert!(s.claim("w1", LONG).await.unwrap().is_none(), "parked on i1");
    let receipt = s.request_cancel(cancel("s", "alice")).await.unwrap();
    let queued = s.step(receipt.step_id).await.unwrap().expect("the waiting step");
    assert_eq!(queued.state, StepState::Queued, "queued by the request, not by a decision");

    let decide = |key: &str| Resolution {
        session_id: "s".into(),
        interrupt_id: "i1".into(),
        client_key: key.into(),
        resolution: j(r#"{"approved":true}"#),
        events: vec![event("interrupt_resolved", "{}")],
        partial_events: Vec::new(),
    };
    let refused = s.resolve_interrupt(decide("k1")).await;
    assert!(
        matches!(&refused, Err(StoreError::CancelPending { requested_by, .. }) if requested_by == "alice"),
        "{refused:?}"
    );
    let entry = tollgate_store::audit::NewAuditEntry {
        decision: AuditDecision::Approved,
        reason: None,
        ..cancelled_by("bob")
    };
    let audited = s.audit().resolve_interrupt_as(decide("k2"), entry).await;
    assert!(matches!(audited, Err(StoreError::CancelPending { .. })), "{audited:?}");
    assert!(s.interrupt("s", "i1").await.unwrap().unwrap().resolution.is_none(), "still open");
    assert_eq!(h.count("SELECT count(*) FROM audit").await, 0, "no decision, no row");

    let claimed = s.claim("w1", LONG).await.unwrap().expect("the queued step");
    assert_eq!(claimed.step.step_id, receipt.step_id);
    let mut cancelling = applied();
    cancelling.close_interrupts.push(CloseInterrupt {
        interrupt_id: "i1".into(),
        resolution: j(r#"{"approved":false,"message":"cancelled"}"#),
        events: vec![event("interrupt_resolved", r#"{"closed":true}"#)],
    });
    cancelling.events.push(event("turn_cancelled", r#"{"turn_id":"turn-1"}"#));
    s.commit(&claimed, cancelling).await.unwrap();
    assert_eq!(s.pending_cancel("s").await.unwrap(), None, "cleared");
    assert!(s.step_in_flight("s").await.unwrap().is_none());
    let rows = s.audit().audit_entries(&AuditQuery { limit: 10, ..AuditQuery::default() }).await.unwrap();
    let [row] = rows.as_slice() else { panic!("one row: {rows:?}") };
    assert_eq!(
        (row.session_id.as_str(), row.interrupt_id.as_str(), row.principal.as_str(), row.decision),
        ("s", "turn-1", "alice", AuditDecision::Cancelled)
    );
    assert_eq!(row.reason.as_deref(), Some("cancelled turn-1"));
    // The interrupt closed with the turn: a late decision is refused as for any decided one.
    let late = s.resolve_interrupt(decide("k1")).await;
    assert!(matches!(late, Err(StoreError::InterruptAlreadyResolved { .. })), "{late:?}");
}

pub(super) async fn a_step_committed_waiting_while_a_cancel_is_pending_is_queued_at_once(h: Harness) {
    let s = &*h.store;
    let c = claimed_session(s, "s").await;
    let receipt = s.request_cancel(cancel("s", "alice")).await.unwrap();
    assert_eq!(receipt.step_id, c.step.step_id, "the claimed step");
    assert_eq!(
        s.step(c.step.step_id).await.unwrap().unwrap().state,
        StepState::Claimed,
        "left to its Worker"
    );
    // The step ends before its Worker saw the request, waiting on an interrupt.
    let parked = s.commit(&c, parked_on_i1()).await.unwrap();
    let next = parked.step_ids[0].expect("enqueued");
    assert_eq!(s.step(next).await.unwrap().unwrap().state, StepState::Queued, "nobody would wake it");
    let claimed = s.claim("w1", LONG).await.unwrap().expect("claimable now");
    assert_eq!(claimed.step.step_id, next);
    s.commit(&claimed, applied()).await.unwrap();
    assert_eq!(s.pending_cancel("s").await.unwrap(), None);
}

pub(super) async fn a_cancel_request_wakes_the_readers_of_that_session(h: Harness) {
    let s = h.store.clone();
    let c = claimed_session(&*s, "s").await;
    new_session(&*s, "other").await;
    let mut readers = s.event_signal("s");
    let mut others = s.event_signal("other");
    let waiter = tokio::spawn(async move { readers.wait(Duration::from_secs(10)).await });
    s.request_cancel(cancel("s", "alice")).await.unwrap();
    assert!(waiter.await.unwrap(), "the Worker holding the step hears of it");
    assert!(!others.wait(Duration::from_millis(100)).await, "another session's readers do not");
    s.commit(&c, applied()).await.unwrap();
}

pub(super) async fn a_commit_that_clears_a_cancel_with_an_audit_row_writes_both_or_neither(h: Harness) {
    let s = &*h.store;
    let c = claimed_session(s, "s").await;
    s.request_cancel(cancel("s", "alice")).await.unwrap();
    let invalid =
        Commit { cancel: CancelChange::Clear { audit: Some(("turn-1".into(), cancelled_by(""))) }, ..done() };
    let refused = s.commit(&c, invalid).await;
    assert!(matches!(refused, Err(StoreError::Invalid { .. })), "{refused:?}");
    assert!(s.pending_cancel("s").await.unwrap().is_some(), "still pending");
    assert_eq!(s.step(c.step.step_id).await.unwrap().unwrap().state, StepState::Claimed, "nothing written");
    h.exec("ALTER TABLE audit RENAME TO audit_away").await;
    let failed = s.commit(&c, applied()).await;
    h.exec("ALTER TABLE audit_away RENAME TO audit").await;
    assert!(failed.is_err(), "the audit row could not be written: {failed:?}");
    assert!(s.pending_cancel("s").await.unwrap().is_some(), "rolled back with its audit row");
    s.commit(&c, applied()).await.expect("written once the trail takes it");
    assert_eq!(s.pending_cancel("s").await.unwrap(), None);
    assert_eq!(h.count("SELECT count(*) FROM audit WHERE decision = 'cancelled'").await, 1);
}
