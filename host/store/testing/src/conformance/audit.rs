//! The conformance cases of [`tollgate_store::audit::AuditLog`]: who started a session, and the audit
//! trail written atomically with each decision, once.

use super::{Harness, LONG, claimed_session, event, j, new_session, parked_on_i1};
use tollgate_store::*;

/// A session `id` whose tool calls `unknown`, `failed` and `fine` have those outcomes.
async fn with_outcomes(store: &dyn Store, id: &str) {
    let c = claimed_session(store, id).await;
    let mut commit = Commit::finish(Finish::Keep);
    for (call, status) in [("unknown", "outcome_unknown"), ("failed", "failed"), ("fine", "succeeded")] {
        commit.tool_calls.push(ToolCallRecord {
            tool_call_id: call.into(),
            status: status.into(),
            record: j(&format!(
                r#"{{"tool_name":"create_refund","arguments":{{"order_id":"{call}"}},"status":"{status}"}}"#
            )),
        });
    }
    store.commit(&c, commit).await.expect("record the outcomes");
}

pub(super) async fn a_call_needing_attention_is_listed_until_marked_checked_once_with_an_audit_row(
    h: Harness,
) {
    let s = &*h.store;
    with_outcomes(s, "s").await;
    let attention = |calls: Vec<AttentionCall>| -> Vec<(String, String)> {
        calls.into_iter().map(|c| (c.tool_call_id, c.status)).collect()
    };
    let mut listed = attention(s.audit().calls_needing_attention(10).await.unwrap());
    listed.sort(); // one commit: the same time on SQLite, a clock per row on PostgreSQL
    assert_eq!(listed, [("failed".into(), "failed".into()), ("unknown".into(), "outcome_unknown".into())]);
    let mark = |call: &str, principal: &str| CheckMark {
        session_id: "s".into(),
        tool_call_id: call.into(),
        principal: principal.into(),
        note: Some(format!("{principal} looked at the payments log")),
    };
    match s.audit().mark_checked(mark("fine", "alice")).await {
        Err(StoreError::NothingToCheck { status, .. }) => assert_eq!(status, "succeeded"),
        other => panic!("expected NothingToCheck, got {other:?}"),
    }
    match s.audit().mark_checked(mark("nope", "alice")).await {
        Err(StoreError::ToolCallNotFound { tool_call_id, .. }) => assert_eq!(tool_call_id, "nope"),
        other => panic!("expected ToolCallNotFound, got {other:?}"),
    }
    assert!(matches!(s.audit().mark_checked(mark("unknown", "")).await, Err(StoreError::Invalid { .. })));
    let first = s.audit().mark_checked(mark("unknown", "alice")).await.expect("mark");
    assert!(!first.replayed);
    assert_eq!(
        (first.check.checked_by.as_str(), first.check.note.as_deref()),
        ("alice", Some("alice looked at the payments log"))
    );
    let again = s.audit().mark_checked(mark("unknown", "bob")).await.expect("a second mark");
    assert!(again.replayed, "the first mark stands");
    assert_eq!(again.check, first.check);
    let listed = attention(s.audit().calls_needing_attention(10).await.unwrap());
    assert_eq!(listed, [("failed".into(), "failed".into())]);
    assert_eq!(s.audit().call_checks("s").await.unwrap(), [first.check]);
    let rows = s
        .audit()
        .audit_entries(&AuditQuery { session_id: Some("s".into()), ..AuditQuery::default() })
        .await
        .unwrap();
    let checked: Vec<_> = rows.iter().filter(|r| r.decision == AuditDecision::Checked).collect();
    assert_eq!(checked.len(), 1, "one audit row for one mark: {rows:?}");
    assert_eq!(
        (checked[0].interrupt_id.as_str(), checked[0].principal.as_str(), checked[0].tool_name.as_deref()),
        ("unknown", "alice", Some("create_refund"))
    );
    assert_eq!(checked[0].input.as_ref().map(|i| i.get()), Some(r#"{"order_id":"unknown"}"#));
}

/// A session `id` parked on interrupt `i1`, whose request asks for `required` approvers.
async fn parked_needing(store: &dyn Store, id: &str, required: u32) {
    let c = claimed_session(store, id).await;
    let mut park = parked_on_i1();
    park.interrupts[0].request = j(&format!(r#"{{"approvals_required":{required}}}"#));
    store.commit(&c, park).await.expect("park on i1");
}

fn approve(session: &str, key: &str) -> Resolution {
    Resolution {
        partial_events: vec![event("decision_recorded", r#"{"decision":"partially_approved"}"#)],
        ..decide(session, key, true)
    }
}

pub(super) async fn an_interrupt_needing_two_approvers_counts_each_principal_once(h: Harness) {
    let s = &*h.store;
    // Both parked first: a resolved interrupt queues its session's step, which the next claim
    // would take.
    parked_needing(s, "m", 2).await;
    parked_needing(s, "r", 2).await;
    let approved = AuditDecision::Approved;
    let first = s.audit().resolve_interrupt_as(approve("m", "k1"), entry("alice", approved)).await.unwrap();
    assert_eq!(first.partial, Some(PartialApproval { approvals: 1, required: 2 }));
    assert_eq!((first.replayed, first.step_id), (false, None), "nothing resumes yet");
    let open = s.interrupt("m", "i1").await.unwrap().expect("open");
    assert!(open.resolution.is_none(), "one approval of two leaves it open");
    assert_eq!(open.approvals.iter().map(|a| a.principal.as_str()).collect::<Vec<_>>(), ["alice"]);
    let rows = s.audit().audit_entries(&AuditQuery::default()).await.unwrap();
    assert_eq!(
        rows.iter().map(|r| (r.principal.as_str(), r.decision)).collect::<Vec<_>>(),
        [("alice", AuditDecision::PartiallyApproved)]
    );
    let events = s.read_events("m", 0, 10).await.unwrap();
    assert_eq!(events.len(), 1, "the partial approval's event, not the resolution's: {events:?}");
    // The same request again is a replay; the same principal under another key is refused.
    let again = s.audit().resolve_interrupt_as(approve("m", "k1"), entry("alice", approved)).await.unwrap();
    assert_eq!((again.replayed, again.partial), (true, first.partial));
    let twice = s.audit().resolve_interrupt_as(approve("m", "k2"), entry("alice", approved)).await;
    assert!(
        matches!(&twice, Err(StoreError::AlreadyApprovedBy { principal, required: 2, .. }) if principal == "alice"),
        "{twice:?}"
    );
    assert_eq!(h.count("SELECT count(*) FROM audit").await, 1, "nothing written by either");
    // A second principal decides it.
    let second = s.audit().resolve_interrupt_as(approve("m", "k3"), entry("bob", approved)).await.unwrap();
    assert_eq!((second.partial, second.replayed), (None, false));
    assert!(second.step_id.is_some(), "the waiting step resumes");
    let resolved = s.interrupt("m", "i1").await.unwrap().expect("resolved");
    assert_eq!(resolved.resolution.map(|r| r.get().to_owned()).as_deref(), Some(r#"{"approved":true}"#));
    let rows = s.audit().audit_entries(&AuditQuery::default()).await.unwrap();
    assert_eq!(
        rows.iter().map(|r| (r.principal.as_str(), r.decision)).collect::<Vec<_>>(),
        [("alice", AuditDecision::PartiallyApproved), ("bob", AuditDecision::Approved)]
    );
    // A rejection after a partial approval closes the interrupt at once.
    s.audit().resolve_interrupt_as(approve("r", "k1"), entry("alice", approved)).await.unwrap();
    let no = s
        .audit()
        .resolve_interrupt_as(decide("r", "k2", false), entry("carol", AuditDecision::Rejected))
        .await;
    assert_eq!(no.unwrap().partial, None);
    let closed = s.interrupt("r", "i1").await.unwrap().expect("resolved");
    assert_eq!(closed.resolution.map(|r| r.get().to_owned()).as_deref(), Some(r#"{"approved":false}"#));
}

pub(super) async fn approvers_deciding_at_once_are_counted_one_after_the_other(h: Harness) {
    let s = &*h.store;
    for (session, required) in [("two", 2), ("three", 3)] {
        parked_needing(s, session, required).await;
    }
    for (session, required) in [("two", 2), ("three", 3)] {
        if required == 3 {
            s.audit()
                .resolve_interrupt_as(approve(session, "k0"), entry("alice", AuditDecision::Approved))
                .await
                .unwrap();
        }
        let (bob, carol) = tokio::join!(
            s.audit().resolve_interrupt_as(approve(session, "kb"), entry("bob", AuditDecision::Approved)),
            s.audit().resolve_interrupt_as(approve(session, "kc"), entry("carol", AuditDecision::Approved)),
        );
        let receipts = [bob.unwrap(), carol.unwrap()];
        let partial = receipts.iter().filter(|r| r.partial.is_some()).count();
        assert_eq!(partial, 1, "{session}: one counted first, the other decided: {receipts:?}");
        let counted = receipts.iter().find_map(|r| r.partial).unwrap();
        assert_eq!(counted, PartialApproval { approvals: required - 1, required }, "{session}");
        let resolved = s.interrupt(session, "i1").await.unwrap().expect("resolved");
        assert!(resolved.resolution.is_some(), "{session}: the last approval decided it");
        let rows = s
            .audit()
            .audit_entries(&AuditQuery { session_id: Some(session.into()), ..AuditQuery::default() })
            .await
            .unwrap();
        let approved = rows.iter().filter(|r| r.decision == AuditDecision::Approved).count();
        let partly = rows.iter().filter(|r| r.decision == AuditDecision::PartiallyApproved).count();
        assert_eq!(
            (approved, partly),
            (1, required as usize - 1),
            "{session}: none lost, none twice: {rows:?}"
        );
    }
}

fn session(id: &str) -> NewSession {
    NewSession {
        session_id: id.into(),
        status: "idle".into(),
        run_state: j(r#"{"version":1}"#),
        agent: None,
        agent_name: None,
    }
}

fn entry(principal: &str, decision: AuditDecision) -> NewAuditEntry {
    NewAuditEntry {
        principal: principal.into(),
        decision,
        reason: Some("looks right".into()),
        tool_name: Some("create_refund".into()),
        input: Some(j(r#"{"order_id": "A-1",  "amount_cents":1200}"#)),
        edited_input: None,
    }
}

fn decide(session: &str, key: &str, approved: bool) -> Resolution {
    Resolution {
        session_id: session.into(),
        interrupt_id: "i1".into(),
        client_key: key.into(),
        resolution: j(&format!(r#"{{"approved":{approved}}}"#)),
        events: vec![event("interrupt_resolved", "{}")],
        partial_events: Vec::new(),
    }
}

/// A session `id` parked on interrupt `i1`.
async fn parked(store: &dyn Store, id: &str) {
    let c = claimed_session(store, id).await;
    store.commit(&c, parked_on_i1()).await.expect("park on i1");
}

pub(super) async fn a_session_records_who_started_it_once(h: Harness) {
    let s = &*h.store;
    assert!(s.audit().create_session_by(session("a"), "alice").await.unwrap());
    assert!(!s.audit().create_session_by(session("a"), "bob").await.unwrap(), "it existed");
    assert_eq!(s.audit().started_by("a").await.unwrap().as_deref(), Some("alice"), "the first creator stays");
    assert_eq!(s.session("a").await.unwrap().expect("created").status, "idle");
    new_session(s, "b").await;
    assert_eq!(s.audit().started_by("b").await.unwrap(), None, "create_session names nobody");
    assert_eq!(s.audit().started_by("missing").await.unwrap(), None);
    let nobody = s.audit().create_session_by(session("c"), "").await;
    assert!(matches!(nobody, Err(StoreError::Invalid { .. })), "{nobody:?}");
    assert!(s.session("c").await.unwrap().is_none(), "nothing written");
}

pub(super) async fn a_decision_writes_exactly_one_audit_row_and_a_replay_writes_none(h: Harness) {
    let s = &*h.store;
    parked(s, "s").await;
    let opened = s.interrupt("s", "i1").await.unwrap().expect("open");
    let first = s
        .audit()
        .resolve_interrupt_as(decide("s", "k1", true), entry("alice", AuditDecision::Approved))
        .await
        .unwrap();
    assert!(!first.replayed);
    assert_eq!(h.count("SELECT count(*) FROM audit").await, 1);
    let rows = s.audit().audit_entries(&AuditQuery { limit: 10, ..AuditQuery::default() }).await.unwrap();
    let [row] = rows.as_slice() else { panic!("one row: {rows:?}") };
    assert_eq!((row.session_id.as_str(), row.interrupt_id.as_str()), ("s", "i1"));
    assert_eq!((row.principal.as_str(), row.decision), ("alice", AuditDecision::Approved));
    assert_eq!(row.reason.as_deref(), Some("looks right"));
    assert_eq!(row.tool_name.as_deref(), Some("create_refund"));
    assert_eq!(
        row.input.as_ref().map(|i| i.get()),
        Some(r#"{"order_id": "A-1",  "amount_cents":1200}"#),
        "the input byte for byte"
    );
    assert!(row.edited_input.is_none());
    let resolved = s.interrupt("s", "i1").await.unwrap().expect("resolved");
    assert!(
        row.decided_at >= opened.created_at,
        "database clock: {} < {}",
        row.decided_at,
        opened.created_at
    );
    let resolved_at = resolved.resolved_at.expect("resolved");
    assert!(
        (0..60_000).contains(&(row.decided_at - resolved_at)),
        "the decision's time: {} vs {resolved_at}",
        row.decided_at
    );
    // A replay under the same key writes nothing, not even a second audit row.
    let again = s
        .audit()
        .resolve_interrupt_as(decide("s", "k1", true), entry("alice", AuditDecision::Approved))
        .await
        .unwrap();
    assert!(again.replayed);
    let other =
        s.audit().resolve_interrupt_as(decide("s", "k2", false), entry("bob", AuditDecision::Rejected)).await;
    assert!(matches!(other, Err(StoreError::InterruptAlreadyResolved { .. })), "{other:?}");
    assert_eq!(h.count("SELECT count(*) FROM audit").await, 1, "one decision, one row");
    assert_eq!(s.read_events("s", 0, 10).await.unwrap().len(), 1, "one decision, one event");
    // The store's primitive writes no audit row.
    parked_again(s).await;
    s.resolve_interrupt(Resolution { interrupt_id: "i2".into(), ..decide("s", "k3", true) }).await.unwrap();
    assert_eq!(h.count("SELECT count(*) FROM audit").await, 1);
}

/// Parks session `s` (whose `i1` step was resolved) on a new interrupt `i2`.
async fn parked_again(s: &dyn Store) {
    let resumed = s.claim("w1", LONG).await.unwrap().expect("the resumed step");
    let mut park = super::done();
    park.interrupts.push(NewInterrupt { interrupt_id: "i2".into(), request: j("{}"), deadline: None });
    park.steps.push(NewStep {
        kind: "AwaitToolApproval".into(),
        payload: j("{}"),
        start: StepStart::OnInterrupt("i2".into()),
        only_if_items_after: None,
        session_status: None,
    });
    s.commit(&resumed, park).await.expect("park on i2");
}

pub(super) async fn a_decision_whose_audit_row_fails_is_not_decided_at_all(h: Harness) {
    let s = &*h.store;
    parked(s, "s").await;
    let invalid =
        s.audit().resolve_interrupt_as(decide("s", "k1", true), entry("", AuditDecision::Approved)).await;
    assert!(matches!(invalid, Err(StoreError::Invalid { .. })), "{invalid:?}");
    // The audit insert is the transaction's last write: make it fail there.
    h.exec("ALTER TABLE audit RENAME TO audit_away").await;
    let failed = s
        .audit()
        .resolve_interrupt_as(decide("s", "k1", true), entry("alice", AuditDecision::Approved))
        .await;
    assert!(failed.is_err(), "the audit row could not be written: {failed:?}");
    h.exec("ALTER TABLE audit_away RENAME TO audit").await;
    let open = s.interrupt("s", "i1").await.unwrap().expect("the interrupt");
    assert!(open.resolution.is_none(), "the decision rolled back with its audit row");
    assert_eq!(s.open_interrupts(None, 10).await.unwrap().len(), 1);
    assert!(s.read_events("s", 0, 10).await.unwrap().is_empty(), "no event");
    assert_eq!(s.step_in_flight("s").await.unwrap().expect("still parked").state, StepState::Waiting);
    assert_eq!(h.count("SELECT count(*) FROM audit").await, 0);
    let decided = s
        .audit()
        .resolve_interrupt_as(decide("s", "k1", true), entry("alice", AuditDecision::Approved))
        .await
        .unwrap();
    assert!(!decided.replayed, "the same key decides once the trail takes it");
    assert_eq!(h.count("SELECT count(*) FROM audit").await, 1);
}

pub(super) async fn audit_rows_cannot_be_updated_or_deleted(h: Harness) {
    let s = &*h.store;
    parked(s, "s").await;
    s.audit()
        .resolve_interrupt_as(decide("s", "k1", false), entry("alice", AuditDecision::Rejected))
        .await
        .unwrap();
    let update = h.try_exec("UPDATE audit SET principal = 'mallory'").await;
    assert!(update.as_ref().is_err_and(|e| e.contains("append-only")), "{update:?}");
    let delete = h.try_exec("DELETE FROM audit").await;
    assert!(delete.as_ref().is_err_and(|e| e.contains("append-only")), "{delete:?}");
    let rows = s.audit().audit_entries(&AuditQuery { limit: 10, ..AuditQuery::default() }).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].principal.as_str(), rows[0].decision), ("alice", AuditDecision::Rejected));
}

pub(super) async fn the_audit_trail_is_paged_and_filtered_by_session_principal_and_time(h: Harness) {
    let s = &*h.store;
    for id in ["s1", "s2", "s3"] {
        parked(s, id).await;
    }
    for (id, who) in [("s1", "alice"), ("s2", "bob"), ("s3", "alice")] {
        s.audit()
            .resolve_interrupt_as(decide(id, "k", true), entry(who, AuditDecision::Approved))
            .await
            .unwrap();
    }
    let all = s.audit().audit_entries(&AuditQuery { limit: 10, ..AuditQuery::default() }).await.unwrap();
    let ids: Vec<&str> = all.iter().map(|e| e.session_id.as_str()).collect();
    assert_eq!(ids, ["s1", "s2", "s3"], "in the order decided");
    assert!(all.windows(2).all(|w| w[0].audit_id < w[1].audit_id && w[0].decided_at <= w[1].decided_at));
    let page = |after: i64| AuditQuery { after, limit: 2, ..AuditQuery::default() };
    let first = s.audit().audit_entries(&page(0)).await.unwrap();
    assert_eq!(first.len(), 2);
    let rest = s.audit().audit_entries(&page(first[1].audit_id)).await.unwrap();
    assert_eq!(rest.iter().map(|e| e.session_id.as_str()).collect::<Vec<_>>(), ["s3"]);
    let by = |q: AuditQuery| async move {
        let found = s.audit().audit_entries(&AuditQuery { limit: 10, ..q }).await.unwrap();
        found.into_iter().map(|e| e.session_id).collect::<Vec<_>>()
    };
    assert_eq!(
        by(AuditQuery { principal: Some("alice".into()), ..AuditQuery::default() }).await,
        ["s1", "s3"]
    );
    assert_eq!(by(AuditQuery { session_id: Some("s2".into()), ..AuditQuery::default() }).await, ["s2"]);
    // The default page reads rows (a page of 0 rows would read none).
    let query = AuditQuery { session_id: Some("s2".into()), ..AuditQuery::default() };
    assert_eq!(s.audit().audit_entries(&query).await.unwrap().len(), 1, "the default page has rows");
    let both = AuditQuery {
        session_id: Some("s2".into()),
        principal: Some("alice".into()),
        ..AuditQuery::default()
    };
    assert!(by(both).await.is_empty());
    for at in all.iter().map(|e| e.decided_at) {
        let since: Vec<String> =
            all.iter().filter(|e| e.decided_at >= at).map(|e| e.session_id.clone()).collect();
        assert_eq!(by(AuditQuery { since: Some(at), ..AuditQuery::default() }).await, since);
        let until: Vec<String> =
            all.iter().filter(|e| e.decided_at < at).map(|e| e.session_id.clone()).collect();
        assert_eq!(
            by(AuditQuery { until: Some(at), ..AuditQuery::default() }).await,
            until,
            "until is exclusive"
        );
    }
    let after_all = AuditQuery { since: Some(all[2].decided_at + 1), ..AuditQuery::default() };
    assert!(by(after_all).await.is_empty());
}
