//! The conformance cases of [`crate::deadlines::Deadlines`]: deadlines on the database clock,
//! expiry and escalation written once and atomically, late decisions refused, and the audit
//! trail's schema-5 decisions (`escalated`, `expired`, `revoked`).

use std::time::Duration;

use super::{Harness, LONG, claimed_session, event, j, parked_on_i1};
use tollgate_store::*;

/// Session `id` parked on interrupt `i1` with `deadline`.
async fn parked_with(s: &dyn Store, id: &str, deadline: Option<Duration>) {
    let c = claimed_session(s, id).await;
    let mut park = parked_on_i1();
    park.interrupts[0].deadline = deadline;
    park.interrupts[0].request = j(r#"{"tool_name":"create_refund","approvers":["finance"]}"#);
    s.commit(&c, park).await.expect("park on i1");
}

/// Polls until interrupt `i1` of `id` is due (database clock), and returns its deadline.
async fn due(s: &dyn Store, id: &str) -> i64 {
    let give_up = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let due = s.deadlines().due_deadlines(100).await.expect("due_deadlines");
        if let Some(found) = due.iter().find(|i| i.session_id == id) {
            return found.deadline_at.expect("a due interrupt has a deadline");
        }
        assert!(tokio::time::Instant::now() < give_up, "the deadline of {id} never came due");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn rejection(session: &str, key: &str) -> Resolution {
    Resolution {
        session_id: session.into(),
        interrupt_id: "i1".into(),
        client_key: key.into(),
        resolution: j(r#"{"approved":false,"message":"no decision in time"}"#),
        events: vec![event("interrupt_resolved", r#"{"interrupt_id":"i1"}"#)],
        partial_events: Vec::new(),
    }
}

fn entry(principal: &str, decision: AuditDecision) -> NewAuditEntry {
    NewAuditEntry {
        principal: principal.into(),
        decision,
        reason: Some("no decision in time".into()),
        tool_name: Some("create_refund".into()),
        input: None,
        edited_input: None,
    }
}

fn expiry(session: &str, key: &str, deadline_at: i64) -> Expiry {
    Expiry {
        resolution: rejection(session, key),
        deadline_at,
        entry: entry(DEADLINE_PRINCIPAL, AuditDecision::Expired),
    }
}

fn escalation(session: &str, deadline_at: i64, next: Duration) -> Escalation {
    Escalation {
        session_id: session.into(),
        interrupt_id: "i1".into(),
        deadline_at,
        request: j(r#"{"tool_name":"create_refund","approvers":["oncall"],"escalated_from":["finance"]}"#),
        next_deadline: next,
        events: vec![event("interrupt_escalated", r#"{"interrupt_id":"i1","escalate_to":["oncall"]}"#)],
        entry: entry(DEADLINE_PRINCIPAL, AuditDecision::Escalated),
    }
}

fn human(session: &str, key: &str) -> (Resolution, NewAuditEntry) {
    let mut r = rejection(session, key);
    r.resolution = j(r#"{"approved":true}"#);
    (r, entry("alice", AuditDecision::Approved))
}

pub(super) async fn a_deadline_is_set_on_the_database_clock_and_found_once_it_passed(h: Harness) {
    let s = &*h.store;
    parked_with(s, "later", Some(Duration::from_secs(60))).await;
    parked_with(s, "never", None).await;
    let later = s.interrupt("later", "i1").await.unwrap().expect("open");
    assert_eq!(later.deadline_at, Some(later.created_at + 60_000), "insert time + the duration");
    assert_eq!(later.escalated_at, None);
    assert_eq!(s.interrupt("never", "i1").await.unwrap().expect("open").deadline_at, None);
    let wait = s.deadlines().next_deadline_in().await.unwrap().expect("one deadline");
    assert!(wait > Duration::from_secs(30) && wait <= Duration::from_secs(60), "{wait:?}");
    assert!(s.deadlines().due_deadlines(10).await.unwrap().is_empty(), "nothing is due yet");
    parked_with(s, "soon", Some(Duration::from_millis(1))).await;
    let at = due(s, "soon").await;
    let soon = s.interrupt("soon", "i1").await.unwrap().expect("open");
    assert_eq!(Some(at), soon.deadline_at);
    assert_eq!(s.deadlines().next_deadline_in().await.unwrap(), Some(Duration::ZERO), "one is due");
    let listed: Vec<String> =
        s.deadlines().due_deadlines(10).await.unwrap().into_iter().map(|i| i.session_id).collect();
    assert_eq!(listed, ["soon"], "only the due one, never the one without a deadline");
}

pub(super) async fn an_expiry_rejects_once_with_its_audit_row_events_and_queued_step(h: Harness) {
    let s = &*h.store;
    parked_with(s, "s", Some(Duration::from_millis(1))).await;
    let at = due(s, "s").await;
    let receipt = s.deadlines().expire_interrupt(expiry("s", "deadline:1", at)).await.unwrap();
    assert!(!receipt.replayed);
    assert!(receipt.step_id.is_some(), "the waiting step is queued");
    let resolved = s.interrupt("s", "i1").await.unwrap().expect("resolved");
    assert_eq!(
        resolved.resolution.as_ref().map(|r| r.get()),
        Some(r#"{"approved":false,"message":"no decision in time"}"#)
    );
    assert!(resolved.resolved_at.expect("resolved") >= at, "resolved on the database clock after it");
    let rows = s.audit().audit_entries(&AuditQuery { limit: 10, ..AuditQuery::default() }).await.unwrap();
    let [row] = rows.as_slice() else { panic!("one audit row: {rows:?}") };
    assert_eq!((row.principal.as_str(), row.decision), (DEADLINE_PRINCIPAL, AuditDecision::Expired));
    assert_eq!(s.read_events("s", 0, 10).await.unwrap().len(), 1, "its event");
    assert!(s.deadlines().due_deadlines(10).await.unwrap().is_empty(), "no longer due");
    assert_eq!(s.deadlines().next_deadline_in().await.unwrap(), None);
    // Once: the same firing again is a replay, another firer loses, a human is told it expired.
    let again = s.deadlines().expire_interrupt(expiry("s", "deadline:1", at)).await.unwrap();
    assert!(again.replayed);
    let other = s.deadlines().expire_interrupt(expiry("s", "deadline:2", at)).await;
    assert!(matches!(other, Err(StoreError::InterruptAlreadyResolved { .. })), "{other:?}");
    let (late, who) = human("s", "k1");
    let late = s.audit().resolve_interrupt_as(late, who).await;
    assert!(
        matches!(late, Err(StoreError::InterruptExpired { deadline_at, .. }) if deadline_at == at),
        "{late:?}"
    );
    assert_eq!(h.count("SELECT count(*) FROM audit").await, 1, "one row in all");
    let step = s.claim("w1", LONG).await.unwrap().expect("the queued step");
    assert_eq!(step.step.interrupt_id.as_deref(), Some("i1"));
}

pub(super) async fn a_decision_after_the_deadline_is_refused_even_before_anyone_fired_it(h: Harness) {
    let s = &*h.store;
    parked_with(s, "s", Some(Duration::from_millis(1))).await;
    let at = due(s, "s").await;
    let (late, who) = human("s", "k1");
    let refused = s.audit().resolve_interrupt_as(late.clone(), who).await;
    let Err(error @ StoreError::InterruptExpired { deadline_at, .. }) = refused else {
        panic!("expired: {refused:?}")
    };
    assert_eq!(deadline_at, at);
    assert!(error.to_string().contains(&at.to_string()), "names the deadline: {error}");
    let primitive = s.resolve_interrupt(late).await;
    assert!(matches!(primitive, Err(StoreError::InterruptExpired { .. })), "{primitive:?}");
    let open = s.interrupt("s", "i1").await.unwrap().expect("the interrupt");
    assert!(open.resolution.is_none(), "nothing stored");
    assert!(s.read_events("s", 0, 10).await.unwrap().is_empty(), "no event");
    assert_eq!(h.count("SELECT count(*) FROM audit").await, 0, "no audit row");
    assert_eq!(s.step_in_flight("s").await.unwrap().expect("still parked").state, StepState::Waiting);
    // A decision before the deadline still decides.
    parked_with(s, "t", Some(Duration::from_secs(60))).await;
    let (early, who) = human("t", "k1");
    assert!(!s.audit().resolve_interrupt_as(early, who).await.unwrap().replayed);
}

pub(super) async fn a_deadline_that_is_not_due_or_moved_is_not_fired_and_nothing_is_written(h: Harness) {
    let s = &*h.store;
    parked_with(s, "s", Some(Duration::from_secs(60))).await;
    let at = s.interrupt("s", "i1").await.unwrap().and_then(|i| i.deadline_at).expect("a deadline");
    let early = s.deadlines().expire_interrupt(expiry("s", "deadline:1", at)).await;
    assert!(
        matches!(&early, Err(StoreError::DeadlineNotDue { detail, .. }) if detail.contains("not passed")),
        "{early:?}"
    );
    let early = s.deadlines().escalate_interrupt(escalation("s", at, LONG)).await;
    assert!(matches!(early, Err(StoreError::DeadlineNotDue { .. })), "{early:?}");
    let wrong = s.deadlines().expire_interrupt(expiry("s", "deadline:1", at - 1)).await;
    assert!(matches!(wrong, Err(StoreError::DeadlineNotDue { .. })), "{wrong:?}");
    parked_with(s, "none", None).await;
    let none = s.deadlines().expire_interrupt(expiry("none", "deadline:1", at)).await;
    assert!(
        matches!(&none, Err(StoreError::DeadlineNotDue { detail, .. }) if detail.contains("no deadline")),
        "{none:?}"
    );
    let missing = s.deadlines().escalate_interrupt(escalation("none", at, LONG)).await;
    assert!(matches!(missing, Err(StoreError::DeadlineNotDue { .. })), "{missing:?}");
    assert!(s.interrupt("s", "i1").await.unwrap().expect("open").resolution.is_none());
    assert_eq!(
        s.interrupt("s", "i1").await.unwrap().expect("open").request.get(),
        r#"{"tool_name":"create_refund","approvers":["finance"]}"#
    );
    assert!(s.read_events("s", 0, 10).await.unwrap().is_empty());
    assert_eq!(h.count("SELECT count(*) FROM audit").await, 0);
}

pub(super) async fn an_escalation_replaces_the_request_and_sets_the_second_deadline_once(h: Harness) {
    let s = &*h.store;
    parked_with(s, "s", Some(Duration::from_millis(1))).await;
    let at = due(s, "s").await;
    let receipt =
        s.deadlines().escalate_interrupt(escalation("s", at, Duration::from_secs(60))).await.unwrap();
    assert_eq!(receipt.deadline_at, receipt.escalated_at + 60_000, "the second deadline");
    assert_eq!(receipt.event_seqs, [1]);
    let escalated = s.interrupt("s", "i1").await.unwrap().expect("open");
    assert!(escalated.resolution.is_none(), "still open");
    assert_eq!(escalated.request.get(), escalation("s", 0, LONG).request.get(), "the request replaced");
    assert_eq!(escalated.escalated_at, Some(receipt.escalated_at));
    assert_eq!(escalated.deadline_at, Some(receipt.deadline_at));
    let events = s.read_events("s", 0, 10).await.unwrap();
    assert_eq!(events.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>(), ["interrupt_escalated"]);
    let rows = s.audit().audit_entries(&AuditQuery { limit: 10, ..AuditQuery::default() }).await.unwrap();
    let [row] = rows.as_slice() else { panic!("one audit row: {rows:?}") };
    assert_eq!((row.principal.as_str(), row.decision), (DEADLINE_PRINCIPAL, AuditDecision::Escalated));
    assert!(s.deadlines().due_deadlines(10).await.unwrap().is_empty(), "the second one is not due");
    // Once: firing the first deadline again finds it moved; writes nothing.
    let again = s.deadlines().escalate_interrupt(escalation("s", at, Duration::from_secs(60))).await;
    assert!(
        matches!(&again, Err(StoreError::DeadlineNotDue { detail, .. }) if detail.contains("escalated")),
        "{again:?}"
    );
    let stale = s.deadlines().expire_interrupt(expiry("s", "deadline:1", at)).await;
    assert!(matches!(stale, Err(StoreError::DeadlineNotDue { .. })), "{stale:?}");
    assert_eq!(h.count("SELECT count(*) FROM audit").await, 1);
    assert_eq!(s.read_events("s", 0, 10).await.unwrap().len(), 1);
    // A decision checked against the interrupt before it was escalated is refused, unwritten.
    let (decision, who) = human("s", "k1");
    let stale = s.deadlines().resolve_interrupt_as_of(decision.clone(), who.clone(), None).await;
    assert!(
        matches!(stale, Err(StoreError::InterruptEscalated { escalated_at: Some(at), .. }) if at == receipt.escalated_at),
        "{stale:?}"
    );
    assert!(s.interrupt("s", "i1").await.unwrap().expect("open").resolution.is_none());
    assert_eq!(h.count("SELECT count(*) FROM audit").await, 1);
    // Checked against the escalated interrupt, before the second deadline, a human decides.
    let receipt =
        s.deadlines().resolve_interrupt_as_of(decision, who, Some(receipt.escalated_at)).await.unwrap();
    assert!(!receipt.replayed);
}

pub(super) async fn firers_and_a_human_racing_on_one_deadline_leave_exactly_one_decision(h: Harness) {
    let s = h.store.clone();
    for round in 0..5 {
        let id: &'static str = ["r0", "r1", "r2", "r3", "r4"][round];
        parked_with(&*s, id, Some(Duration::from_millis(30))).await;
        let at = s.interrupt(id, "i1").await.unwrap().and_then(|i| i.deadline_at).expect("a deadline");
        let mut tasks = tokio::task::JoinSet::new();
        for firer in 0..3 {
            let s = s.clone();
            tasks.spawn(async move {
                let key = format!("deadline:{firer}");
                let give_up = tokio::time::Instant::now() + Duration::from_secs(10);
                loop {
                    match s.deadlines().expire_interrupt(expiry(id, &key, at)).await {
                        Err(StoreError::DeadlineNotDue { .. }) if tokio::time::Instant::now() < give_up => {
                            tokio::time::sleep(Duration::from_millis(2)).await;
                        }
                        other => return ("firer", other.map(drop)),
                    }
                }
            });
        }
        let person = s.clone();
        tasks.spawn(async move {
            tokio::time::sleep(Duration::from_millis(25)).await;
            let (decision, who) = human(id, "k1");
            ("human", person.audit().resolve_interrupt_as(decision, who).await.map(drop))
        });
        let mut wins = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            let (who, result) = joined.expect("no panic");
            match result {
                Ok(()) => wins.push(who),
                Err(StoreError::InterruptAlreadyResolved { .. } | StoreError::InterruptExpired { .. }) => {}
                Err(other) => panic!("{who} failed otherwise: {other}"),
            }
        }
        assert_eq!(wins.len(), 1, "round {round}: exactly one decision: {wins:?}");
        let rows = s
            .audit()
            .audit_entries(&AuditQuery { session_id: Some(id.into()), limit: 10, ..AuditQuery::default() })
            .await
            .unwrap();
        assert_eq!(rows.len(), 1, "round {round}: one audit row: {rows:?}");
        let expected = if wins[0] == "human" { AuditDecision::Approved } else { AuditDecision::Expired };
        assert_eq!(rows[0].decision, expected);
        assert_eq!(s.read_events(id, 0, 10).await.unwrap().len(), 1, "round {round}: one event");
        // The decided call's step, out of the next round's way.
        let resumed = s.claim("w1", LONG).await.unwrap().expect("the queued step");
        assert_eq!(resumed.step.session_id, id);
        s.commit(&resumed, super::done()).await.unwrap();
    }
}

pub(super) async fn a_revocation_message_writes_one_revoked_audit_row_and_a_replay_none(h: Harness) {
    let s = &*h.store;
    parked_with(s, "s", None).await;
    let message = UserMessage {
        session_id: "s".into(),
        client_key: "revoke-1".into(),
        item: NewItem {
            kind: "grant_revoked".into(),
            uuid: None,
            turn_id: None,
            body: j(r#"{"kind":"grant_revoked","tool_name":"create_refund"}"#),
        },
        wake: None,
        events: vec![event("grant_revoked", r#"{"tool_name":"create_refund"}"#)],
    };
    let revoked = NewAuditEntry { reason: None, ..entry("alice", AuditDecision::Revoked) };
    let first = s.audit().send_user_message_as(message.clone(), "i1", revoked.clone()).await.unwrap();
    assert!(!first.replayed);
    let again = s.audit().send_user_message_as(message, "i1", revoked).await.unwrap();
    assert!(again.replayed);
    let rows = s.audit().audit_entries(&AuditQuery { limit: 10, ..AuditQuery::default() }).await.unwrap();
    let [row] = rows.as_slice() else { panic!("one audit row: {rows:?}") };
    assert_eq!(
        (row.principal.as_str(), row.decision, row.interrupt_id.as_str()),
        ("alice", AuditDecision::Revoked, "i1")
    );
    assert_eq!(s.read_events("s", 0, 10).await.unwrap().len(), 1, "one event");
    let update = h.try_exec("UPDATE audit SET decision = 'approved'").await;
    assert!(
        update.as_ref().is_err_and(|e| e.contains("append-only")),
        "schema 5 keeps the triggers: {update:?}"
    );
    let bad = h.try_exec("INSERT INTO audit (row_version, session_id, interrupt_id, principal, decision, decided_at) VALUES (1, 's', 'i1', 'x', 'maybe', 0)").await;
    assert!(bad.is_err(), "the CHECK still refuses unknown decisions");
}
