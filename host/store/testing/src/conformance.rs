//! The conformance suite: one function per rule of the [`tollgate_store::Store`] contract, each a test of
//! its own on every backend.
//!
//! Read the one list of cases first (`__store_conformance_cases!` below). It makes [`cases`],
//! a function per case, and a backend's test binary turns it into one test per case per
//! backend with [`store_conformance_tests!`](crate::store_conformance_tests): `sqlite::<case>`
//! on a fresh SQLite file, `postgres::<case>` on a fresh schema of the binary's one shared
//! cluster ([`crate::suite`]). A name listed and not written, or a case written and not listed,
//! fails to compile.
//!
//! # Caveats
//!
//! - Lease expiry is waited for by polling `claim` with a deadline (leases are on the database
//!   clock), never by sleeping a fixed time.
//! - [`Harness::exec`] runs raw SQL to damage rows; the SQL must be valid on both dialects.
//! - Cases run in parallel (libtest's threads), each on its own store: no case may rely on
//!   another's rows or on the machine being idle.

// A case written and not in the list is dead code: a compile error, not a case that never runs.
#![deny(dead_code)]

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tollgate_store::*;

/// A fresh store for one case, plus raw SQL access to it.
pub struct Harness {
    /// The store under test.
    pub store: Arc<dyn Store>,
    raw: Raw,
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness").finish_non_exhaustive()
    }
}

enum Raw {
    Sqlite(sqlx::SqlitePool),
    Pg(sqlx::PgPool),
}

impl Harness {
    /// A harness on a SQLite store.
    pub fn sqlite(store: SqliteStore) -> Self {
        Harness { raw: Raw::Sqlite(store.raw_pool().clone()), store: Arc::new(store) }
    }

    /// A harness on a PostgreSQL store.
    pub fn postgres(store: PgStore) -> Self {
        Harness { raw: Raw::Pg(store.raw_pool().clone()), store: Arc::new(store) }
    }

    /// Runs raw SQL against the store's database.
    ///
    /// # Panics
    /// When the SQL fails.
    pub async fn exec(&self, sql: &'static str) {
        match &self.raw {
            Raw::Sqlite(p) => sqlx::query(sql).execute(p).await.map(drop),
            Raw::Pg(p) => sqlx::query(sql).execute(p).await.map(drop),
        }
        .unwrap_or_else(|e| panic!("raw SQL `{sql}` failed: {e}"));
    }

    /// Runs raw SQL and returns the database's error text instead of panicking.
    pub async fn try_exec(&self, sql: &'static str) -> Result<(), String> {
        match &self.raw {
            Raw::Sqlite(p) => sqlx::query(sql).execute(p).await.map(drop),
            Raw::Pg(p) => sqlx::query(sql).execute(p).await.map(drop),
        }
        .map_err(|e| e.to_string())
    }

    /// A count from raw SQL (`SELECT count(*) …`).
    ///
    /// # Panics
    /// When the SQL fails.
    pub async fn count(&self, sql: &'static str) -> i64 {
        match &self.raw {
            Raw::Sqlite(p) => sqlx::query_scalar::<_, i64>(sql).fetch_one(p).await,
            Raw::Pg(p) => sqlx::query_scalar::<_, i64>(sql).fetch_one(p).await,
        }
        .unwrap_or_else(|e| panic!("raw SQL `{sql}` failed: {e}"))
    }
}

mod agents;
mod audit;
mod cancel;
mod deadlines;
mod forks;
mod media;
mod versions;

// The cases written in the files above, so that the one list below names them all alike.
use agents::*;
use audit::*;
use cancel::*;
use deadlines::*;
use forks::*;
use media::*;
use versions::*;

/// The one list of the store's conformance cases: it makes [`cases`] here and, through
/// [`store_conformance_tests!`](crate::store_conformance_tests), one test per case per backend.
///
/// A name listed and not written fails to compile (the table of [`cases`] calls it); a case
/// written and not listed fails to compile too (this module denies dead code).
#[doc(hidden)]
#[macro_export]
macro_rules! __store_conformance_cases {
    ($($then:tt)+) => {
        $($then)+! { conformance:
            a_new_session_reads_back_with_its_run_state_byte_exact,
            a_queued_step_is_claimed_once_with_attempt_one_and_fence_one,
            an_expired_lease_is_reclaimed_with_a_higher_attempt_and_fence,
            a_claim_that_takes_over_an_expired_lease_counts_a_lost_claim_and_a_retry_or_release_does_not,
            a_stale_fence_commits_nothing_and_returns_lease_lost,
            a_heartbeat_extends_the_lease_so_no_one_else_claims_the_step,
            a_commit_applies_items_records_interrupts_steps_session_and_events_together,
            a_commit_that_would_put_two_steps_in_flight_writes_nothing,
            transcript_entries_are_stored_once_by_uuid_and_byte_exact,
            events_continue_after_a_seq,
            send_user_message_is_idempotent_under_a_client_key,
            resolve_interrupt_queues_the_waiting_step_once_under_a_client_key,
            a_conditional_step_is_enqueued_only_when_new_items_arrived,
            a_retry_queues_the_step_again_and_keeps_its_attempt_count,
            a_corrupted_row_is_refused_with_a_clear_error_and_nothing_else_is_lost,
            a_future_version_row_is_refused_and_never_claimed,
            a_queued_step_wakes_a_waiting_worker,
            an_appended_event_wakes_a_reader_of_that_session,
            concurrent_workers_never_claim_a_step_twice,
            sessions_waiting_for_approval_are_rows_only,
            open_interrupts_are_read_by_pages_in_order_with_none_missed_or_repeated,
            messages_are_projected_in_the_commit_of_their_items_and_parts_of_one_message_join,
            a_session_from_before_the_projection_reads_as_unprojected,
            transcript_chunks_keep_the_lines_of_the_items_a_commit_stored_in_order,
            a_session_from_before_the_chunks_reads_as_unchunked,
            items_are_read_by_kind_in_order,
            sessions_are_listed_in_id_order_by_page_and_status,
            a_released_claim_is_claimable_at_once_with_the_same_attempt_and_stays_fenced,
            a_released_claim_wakes_a_waiting_worker,
            releasing_a_stale_claim_changes_nothing,
            a_step_sets_the_session_status_only_when_it_is_enqueued,
            interrupts_opened_ahead_are_closed_only_while_open_and_a_wait_on_a_decided_one_is_queued_at_once,
            live_text_is_one_overwritten_row_read_only_while_its_claim_holds_the_step,
            a_stale_fence_cannot_write_live_text_over_the_attempt_that_replaced_it,
            a_live_text_write_wakes_a_reader_of_that_session,
            // agents.rs
            a_session_keeps_the_agent_it_was_created_with_and_lists_it,
            claim_for_takes_only_steps_of_its_agents_unpinned_or_pinned_to_its_digests,
            a_pinned_only_claim_takes_no_unpinned_session,
            a_step_a_commit_enqueues_keeps_the_sessions_agent_and_pin,
            registering_an_agent_adopts_the_sessions_that_name_none_by_digest_or_as_the_only_agent,
            upgrading_a_waiting_session_moves_its_steps_to_the_new_digest_and_records_an_event,
            an_upgrade_no_worker_could_serve_is_refused_and_nothing_is_written,
            a_running_session_is_not_upgraded_and_nothing_is_written,
            published_tools_are_read_from_the_newest_registration_and_bad_ones_are_refused,
            unavailable_tools_are_one_report_per_worker_read_while_fresh_and_removed_when_none,
            // audit.rs
            a_session_records_who_started_it_once,
            a_decision_writes_exactly_one_audit_row_and_a_replay_writes_none,
            a_decision_whose_audit_row_fails_is_not_decided_at_all,
            audit_rows_cannot_be_updated_or_deleted,
            the_audit_trail_is_paged_and_filtered_by_session_principal_and_time,
            an_interrupt_needing_two_approvers_counts_each_principal_once,
            approvers_deciding_at_once_are_counted_one_after_the_other,
            a_call_needing_attention_is_listed_until_marked_checked_once_with_an_audit_row,
            // deadlines.rs
            a_deadline_is_set_on_the_database_clock_and_found_once_it_passed,
            an_expiry_rejects_once_with_its_audit_row_events_and_queued_step,
            a_decision_after_the_deadline_is_refused_even_before_anyone_fired_it,
            a_deadline_that_is_not_due_or_moved_is_not_fired_and_nothing_is_written,
            an_escalation_replaces_the_request_and_sets_the_second_deadline_once,
            firers_and_a_human_racing_on_one_deadline_leave_exactly_one_decision,
            a_revocation_message_writes_one_revoked_audit_row_and_a_replay_none,
            // cancel.rs
            a_cancel_request_needs_a_step_in_flight_and_is_kept_once,
            a_cancel_request_queues_a_waiting_step_and_refuses_decisions_until_a_commit_clears_it,
            a_step_committed_waiting_while_a_cancel_is_pending_is_queued_at_once,
            a_cancel_request_wakes_the_readers_of_that_session,
            a_commit_that_clears_a_cancel_with_an_audit_row_writes_both_or_neither,
            // media.rs
            an_image_is_stored_once_per_session_by_the_digest_of_its_bytes,
            a_message_and_its_images_are_stored_together_or_not_at_all,
            a_messages_images_are_kept_with_its_projection_and_not_merged,
            // versions.rs
            a_pushed_bundle_is_a_numbered_version_kept_once_by_content_and_the_first_is_current,
            promote_and_rollback_change_what_new_sessions_get_and_refuse_what_does_not_exist,
            a_bundle_the_store_cannot_keep_is_refused_naming_the_file_and_nothing_is_stored,
            // forks.rs
            a_fork_reads_its_parents_history_up_to_the_cut_and_writes_its_own_after_it,
            a_fork_of_a_fork_reads_through_both_and_inserts_rows_by_depth_not_by_length,
            a_session_a_fork_reads_from_cannot_be_deleted_and_the_fork_can,
            a_fork_the_store_refuses_writes_nothing,
        }
    };
}

__store_conformance_cases!(crate::suite::case_table);

// ---------------------------------------------------------------- helpers

const LONG: Duration = Duration::from_secs(60);

fn j(text: &str) -> Box<serde_json::value::RawValue> {
    raw(text).expect("test JSON")
}

fn prompt(text: &str) -> NewItem {
    NewItem {
        kind: "user_prompt".into(),
        uuid: None,
        turn_id: None,
        body: j(&serde_json::json!({"kind": "user_prompt", "text": text}).to_string()),
    }
}

fn entry(uuid: &str, body: &str) -> NewItem {
    NewItem {
        kind: "transcript_entry".into(),
        uuid: Some(uuid.into()),
        turn_id: Some("t1".into()),
        body: j(body),
    }
}

fn event(kind: &str, payload: &str) -> NewEvent {
    NewEvent { kind: kind.into(), payload: j(payload) }
}

fn message(session: &str, key: &str, text: &str) -> UserMessage {
    UserMessage {
        session_id: session.into(),
        client_key: key.into(),
        item: prompt(text),
        wake: Some(NewStep::now("RunModel", j(r#"{"turn":"t1"}"#))),
        events: vec![],
    }
}

async fn new_session(store: &dyn Store, id: &str) {
    let created = store
        .create_session(NewSession {
            session_id: id.into(),
            status: "idle".into(),
            run_state: j(r#"{"version":1}"#),
            agent: None,
            agent_name: None,
        })
        .await
        .expect("create_session");
    assert!(created, "session {id} was new");
}

/// A session with one prompt and its `RunModel` step, claimed by `w1`.
async fn claimed_session(store: &dyn Store, id: &str) -> Claimed {
    new_session(store, id).await;
    store.send_user_message(message(id, "k1", "hello")).await.expect("send_user_message");
    store.claim("w1", LONG).await.expect("claim").expect("a due step")
}

/// Claims until a step is due or `timeout` passes (a poll on the database clock).
async fn claim_within(
    store: &dyn Store,
    worker: &str,
    lease: Duration,
    timeout: Duration,
) -> Option<Claimed> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(c) = store.claim(worker, lease).await.expect("claim") {
            return Some(c);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn done() -> Commit {
    Commit::finish(Finish::Done(j("null")))
}

/// A commit that ends the step and parks an `AwaitToolApproval` step on a new interrupt `i1`.
fn parked_on_i1() -> Commit {
    let mut park = done();
    park.interrupts.push(NewInterrupt { interrupt_id: "i1".into(), request: j("{}"), deadline: None });
    park.steps.push(NewStep {
        kind: "AwaitToolApproval".into(),
        payload: j("{}"),
        start: StepStart::OnInterrupt("i1".into()),
        only_if_items_after: None,
        session_status: None,
    });
    park
}

// ---------------------------------------------------------------- cases

async fn a_new_session_reads_back_with_its_run_state_byte_exact(h: Harness) {
    let s = &*h.store;
    let run_state = r#"{"version":1,  "turn_entries" : [ {"a":"é\u00e9"} ]}"#;
    let new = NewSession {
        session_id: "s".into(),
        status: "idle".into(),
        run_state: j(run_state),
        agent: None,
        agent_name: None,
    };
    assert!(s.create_session(new.clone()).await.unwrap());
    let again = NewSession { status: "other".into(), ..new };
    assert!(!s.create_session(again).await.unwrap(), "a second create is a no-op");
    let got = s.session("s").await.unwrap().expect("stored");
    assert_eq!(got.run_state.get(), run_state);
    assert_eq!(got.status, "idle");
    assert_eq!(got.usage, Usage::default());
    assert!(s.session("missing").await.unwrap().is_none());
    let bad = NewSession {
        session_id: "b".into(),
        status: "idle".into(),
        run_state: j(r#"{"turn":1}"#),
        agent: None,
        agent_name: None,
    };
    assert!(matches!(s.create_session(bad).await, Err(StoreError::Invalid { .. })));
}

async fn a_queued_step_is_claimed_once_with_attempt_one_and_fence_one(h: Harness) {
    let s = &*h.store;
    let c = claimed_session(s, "s").await;
    assert_eq!((c.step.attempt, c.fence, c.step.state), (1, 1, StepState::Claimed));
    assert_eq!(c.step.kind, "RunModel");
    assert_eq!(c.step.payload.get(), r#"{"turn":"t1"}"#);
    assert_eq!(c.step.session_id, "s");
    assert!(c.lease_until > 0);
    assert!(s.claim("w2", LONG).await.unwrap().is_none(), "a held step is not claimed again");
}

async fn an_expired_lease_is_reclaimed_with_a_higher_attempt_and_fence(h: Harness) {
    let s = &*h.store;
    new_session(s, "s").await;
    s.send_user_message(message("s", "k1", "hello")).await.unwrap();
    let first = s.claim("w1", Duration::from_millis(1)).await.unwrap().expect("due");
    let second = claim_within(s, "w2", LONG, Duration::from_secs(10)).await.expect("reclaimed after expiry");
    assert_eq!(second.step.step_id, first.step.step_id);
    assert_eq!((second.step.attempt, second.fence), (2, 2));
    assert_eq!(second.worker_id, "w2");
}

async fn a_claim_that_takes_over_an_expired_lease_counts_a_lost_claim_and_a_retry_or_release_does_not(
    h: Harness,
) {
    let s = &*h.store;
    let first = claimed_session(s, "s").await;
    assert_eq!((first.step.attempt, first.step.lost), (1, 0));
    // The first holder is lost (its lease runs out): the next claim counts it.
    s.heartbeat(&first, Duration::from_millis(1)).await.unwrap();
    let second = claim_within(s, "w2", LONG, Duration::from_secs(10)).await.expect("reclaimed after expiry");
    assert_eq!((second.step.attempt, second.step.lost), (2, 1), "a lost claim counts in both");
    // A retry queues it again: the next claim loses nothing.
    s.commit(&second, Commit::finish(Finish::Retry(Duration::ZERO))).await.unwrap();
    let third = s.claim("w3", LONG).await.unwrap().expect("queued again");
    assert_eq!((third.step.attempt, third.step.lost), (3, 1));
    // Neither does a release.
    s.release(&third).await.unwrap();
    let fourth = s.claim("w4", Duration::from_millis(1)).await.unwrap().expect("released");
    assert_eq!((fourth.step.attempt, fourth.step.lost), (3, 1));
    let fifth = claim_within(s, "w5", LONG, Duration::from_secs(10)).await.expect("reclaimed after expiry");
    assert_eq!((fifth.step.attempt, fifth.step.lost), (4, 2));
    let stored = s.step(fifth.step.step_id).await.unwrap().unwrap();
    assert_eq!((stored.attempt, stored.lost), (4, 2), "the stored row says the same");
    // Every claim reads when the step was enqueued, whatever came of the claims before it (a
    // turn's start, for its trace).
    assert!(first.step.created_at > 0);
    for claim in [&second, &third, &fourth, &fifth] {
        assert_eq!(claim.step.created_at, first.step.created_at);
    }
    assert_eq!(stored.created_at, first.step.created_at);
}

async fn a_stale_fence_commits_nothing_and_returns_lease_lost(h: Harness) {
    let s = &*h.store;
    new_session(s, "s").await;
    s.send_user_message(message("s", "k1", "hello")).await.unwrap();
    let stale = s.claim("w1", Duration::from_millis(1)).await.unwrap().expect("due");
    let fresh = claim_within(s, "w2", LONG, Duration::from_secs(10)).await.expect("reclaimed");
    let mut late = done();
    late.items.push(entry("u1", r#"{"uuid":"u1"}"#));
    late.events.push(event("text_delta", r#"{"text":"late"}"#));
    late.session.status = Some("late".into());
    late.steps.push(NewStep::now("ResumeTurn", j("{}")));
    let err = s.commit(&stale, late).await.expect_err("stale fence");
    assert!(matches!(err, StoreError::LeaseLost { fence: 1, .. }), "{err}");
    assert!(!err.is_retryable());
    assert!(matches!(s.heartbeat(&stale, LONG).await, Err(StoreError::LeaseLost { .. })));
    let session = s.session("s").await.unwrap().unwrap();
    assert_eq!(session.status, "idle");
    assert_eq!(s.read_items("s", 0, 100).await.unwrap().len(), 1, "only the prompt");
    assert!(s.read_events("s", 0, 100).await.unwrap().is_empty());
    s.commit(&fresh, done()).await.expect("the current holder commits");
    assert_eq!(s.step(fresh.step.step_id).await.unwrap().unwrap().state, StepState::Done);
    assert!(
        matches!(s.commit(&fresh, done()).await, Err(StoreError::LeaseLost { .. })),
        "a finished step commits nothing more"
    );
}

async fn a_heartbeat_extends_the_lease_so_no_one_else_claims_the_step(h: Harness) {
    let s = &*h.store;
    new_session(s, "s").await;
    s.send_user_message(message("s", "k1", "hello")).await.unwrap();
    let c = s.claim("w1", Duration::from_millis(200)).await.unwrap().expect("due");
    let until = s.heartbeat(&c, LONG).await.expect("heartbeat");
    assert!(until >= c.lease_until + 50_000, "lease moved to about now + 60 s: {until} vs {}", c.lease_until);
    assert!(
        claim_within(s, "w2", LONG, Duration::from_millis(400)).await.is_none(),
        "still held after 400 ms"
    );
}

async fn a_commit_applies_items_records_interrupts_steps_session_and_events_together(h: Harness) {
    let s = &*h.store;
    let c = claimed_session(s, "s").await;
    let usage = Usage { input_tokens: 10, cached_input_tokens: 4, output_tokens: 3, model_calls: 1 };
    let commit = Commit {
        finish: Finish::Done(j(r#"{"deferred":"toolu_1"}"#)),
        items: vec![entry("u1", r#"{"type":"assistant","uuid":"u1"}"#)],
        tool_calls: vec![ToolCallRecord {
            tool_call_id: "toolu_1".into(),
            status: "pending_approval".into(),
            record: j(r#"{"tool_call_id":"toolu_1","status":"pending"}"#),
        }],
        interrupts: vec![NewInterrupt {
            interrupt_id: "i1".into(),
            request: j(r#"{"tool":"create_refund"}"#),
            deadline: None,
        }],
        messages: Vec::new(),
        transcript: None,
        close_interrupts: Vec::new(),
        steps: vec![NewStep {
            kind: "AwaitToolApproval".into(),
            payload: j(r#"{"tool_call_id":"toolu_1"}"#),
            start: StepStart::OnInterrupt("i1".into()),
            only_if_items_after: None,
            session_status: None,
        }],
        session: SessionUpdate {
            status: Some("awaiting_approval".into()),
            run_state: Some(j(r#"{"version":1,"turn":"t1"}"#)),
            add_usage: usage,
        },
        events: vec![event("interrupt_opened", r#"{"interrupt_id":"i1"}"#)],
        cancel: CancelChange::Keep,
    };
    let receipt = s.commit(&c, commit).await.expect("commit");
    assert_eq!(receipt.item_seqs, vec![Some(2)]);
    assert_eq!(receipt.event_seqs, vec![1]);
    let waiting = receipt.step_ids[0].expect("step enqueued");
    let step = s.step(waiting).await.unwrap().unwrap();
    assert_eq!((step.state, step.interrupt_id.as_deref()), (StepState::Waiting, Some("i1")));
    let done = s.step(c.step.step_id).await.unwrap().unwrap();
    assert_eq!(done.output.unwrap().get(), r#"{"deferred":"toolu_1"}"#);
    let session = s.session("s").await.unwrap().unwrap();
    assert_eq!(session.status, "awaiting_approval");
    assert_eq!(session.run_state.get(), r#"{"version":1,"turn":"t1"}"#);
    assert_eq!(session.usage, usage);
    assert_eq!(s.tool_call("s", "toolu_1").await.unwrap().unwrap().status, "pending_approval");
    assert!(s.interrupt("s", "i1").await.unwrap().unwrap().resolution.is_none());
    assert!(s.claim("w1", LONG).await.unwrap().is_none(), "a waiting step is not claimable");
    // Usage adds up over commits.
    s.resolve_interrupt(Resolution {
        session_id: "s".into(),
        interrupt_id: "i1".into(),
        client_key: "r1".into(),
        resolution: j(r#"{"approved":true}"#),
        events: vec![],
        partial_events: Vec::new(),
    })
    .await
    .unwrap();
    let c2 = s.claim("w1", LONG).await.unwrap().expect("queued by the resolution");
    let mut second = done_commit_with_usage(usage);
    second.tool_calls.push(ToolCallRecord {
        tool_call_id: "toolu_1".into(),
        status: "succeeded".into(),
        record: j(r#"{"status":"succeeded"}"#),
    });
    s.commit(&c2, second).await.unwrap();
    let session = s.session("s").await.unwrap().unwrap();
    assert_eq!(session.usage.input_tokens, 20);
    assert_eq!(session.usage.model_calls, 2);
    assert_eq!(s.tool_call("s", "toolu_1").await.unwrap().unwrap().record.get(), r#"{"status":"succeeded"}"#);
    let all = s.tool_calls("s").await.unwrap();
    assert_eq!(all.iter().map(|t| t.tool_call_id.as_str()).collect::<Vec<_>>(), vec!["toolu_1"]);
    assert!(s.step_in_flight("s").await.unwrap().is_none(), "the session is idle");
}

fn done_commit_with_usage(usage: Usage) -> Commit {
    let mut c = done();
    c.session.add_usage = usage;
    c
}

async fn a_commit_that_would_put_two_steps_in_flight_writes_nothing(h: Harness) {
    let s = &*h.store;
    let c = claimed_session(s, "s").await;
    let mut two = done();
    two.items.push(entry("u1", "{}"));
    two.events.push(event("e", "{}"));
    two.steps.push(NewStep::now("A", j("{}")));
    two.steps.push(NewStep::now("B", j("{}")));
    let err = s.commit(&c, two).await.expect_err("two steps in flight");
    assert!(matches!(err, StoreError::StepInFlight { .. }), "{err}");
    let mut keep = Commit::finish(Finish::Keep);
    keep.steps.push(NewStep::now("A", j("{}")));
    assert!(
        matches!(s.commit(&c, keep).await, Err(StoreError::StepInFlight { .. })),
        "the held step is in flight"
    );
    assert_eq!(s.read_items("s", 0, 10).await.unwrap().len(), 1);
    assert!(s.read_events("s", 0, 10).await.unwrap().is_empty());
    assert_eq!(s.step(c.step.step_id).await.unwrap().unwrap().state, StepState::Claimed);
    s.commit(&c, done()).await.expect("the claim is still good");
}

async fn transcript_entries_are_stored_once_by_uuid_and_byte_exact(h: Harness) {
    let s = &*h.store;
    let c = claimed_session(s, "s").await;
    let e1 = r#"{"type":"user","uuid":"u1","message":{"content":"caf\u00e9 é  spaced"},"parentUuid":null}"#;
    let e2 = r#"{"uuid":"u2","n":1.0e3}"#;
    let mut first = Commit::finish(Finish::Keep);
    first.items = vec![entry("u1", e1), entry("u2", e2)];
    assert_eq!(s.commit(&c, first).await.unwrap().item_seqs, vec![Some(2), Some(3)]);
    let mut again = done();
    again.items = vec![entry("u2", r#"{"uuid":"u2","changed":true}"#), entry("u3", r#"{"uuid":"u3"}"#)];
    assert_eq!(s.commit(&c, again).await.unwrap().item_seqs, vec![None, Some(4)]);
    let items = s.read_items("s", 1, 100).await.unwrap();
    let bodies: Vec<&str> = items.iter().map(|i| i.body.get()).collect();
    assert_eq!(bodies, vec![e1, e2, r#"{"uuid":"u3"}"#]);
    assert_eq!(items[0].uuid.as_deref(), Some("u1"));
    assert_eq!(items.iter().map(|i| i.seq).collect::<Vec<_>>(), vec![2, 3, 4]);
    assert_eq!(s.read_items("s", 0, 2).await.unwrap().len(), 2, "limit holds");
}

async fn events_continue_after_a_seq(h: Harness) {
    let s = &*h.store;
    let c = claimed_session(s, "s").await;
    let mut commit = done();
    commit.events = (1..=5).map(|i| event("text_delta", &format!(r#"{{"text":"{i}"}}"#))).collect();
    assert_eq!(s.commit(&c, commit).await.unwrap().event_seqs, vec![1, 2, 3, 4, 5]);
    let after = s.read_events("s", 2, 100).await.unwrap();
    assert_eq!(after.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![3, 4, 5]);
    assert_eq!(after[0].payload.get(), r#"{"text":"3"}"#);
    assert_eq!(after[0].step, Some((c.step.step_id, c.fence)));
    assert!(s.read_events("s", 5, 100).await.unwrap().is_empty());
    let mut m = message("s", "k2", "next");
    m.events.push(event("user_message", "{}"));
    s.send_user_message(m).await.unwrap();
    let next = s.read_events("s", 5, 100).await.unwrap();
    assert_eq!((next.len(), next[0].seq, next[0].step), (1, 6, None));
}

async fn send_user_message_is_idempotent_under_a_client_key(h: Harness) {
    let s = &*h.store;
    new_session(s, "s").await;
    let first = s.send_user_message(message("s", "k1", "hello")).await.unwrap();
    assert_eq!(first.item_seq, 1);
    assert!(first.step_id.is_some() && !first.replayed);
    let again = s.send_user_message(message("s", "k1", "hello")).await.unwrap();
    assert_eq!(again, MessageReceipt { replayed: true, ..first.clone() });
    assert_eq!(s.read_items("s", 0, 10).await.unwrap().len(), 1);
    let other = s.send_user_message(message("s", "k1", "different")).await;
    assert!(matches!(other, Err(StoreError::IdempotencyConflict { .. })), "{other:?}");
    let second = s.send_user_message(message("s", "k2", "more")).await.unwrap();
    assert_eq!((second.item_seq, second.step_id), (2, None), "a turn runs: no second step");
    let missing = s.send_user_message(message("nope", "k1", "x")).await;
    assert!(matches!(missing, Err(StoreError::SessionNotFound { .. })), "{missing:?}");
}

async fn resolve_interrupt_queues_the_waiting_step_once_under_a_client_key(h: Harness) {
    let s = &*h.store;
    let c = claimed_session(s, "s").await;
    let park = parked_on_i1();
    let waiting = s.commit(&c, park).await.unwrap().step_ids[0].unwrap();
    assert_eq!(s.open_interrupts(None, 10).await.unwrap().len(), 1);
    let parked = s.step_in_flight("s").await.unwrap().expect("the waiting step");
    assert_eq!((parked.step_id, parked.state), (waiting, StepState::Waiting));
    let decide = |key: &str, text: &str| Resolution {
        session_id: "s".into(),
        interrupt_id: "i1".into(),
        client_key: key.into(),
        resolution: j(text),
        events: vec![event("interrupt_resolved", "{}")],
        partial_events: Vec::new(),
    };
    let first = s.resolve_interrupt(decide("k1", r#"{"approved":true}"#)).await.unwrap();
    assert_eq!(first, ResolveReceipt { step_id: Some(waiting), replayed: false, partial: None });
    let again = s.resolve_interrupt(decide("k1", r#"{"approved":true}"#)).await.unwrap();
    assert_eq!(again, ResolveReceipt { step_id: Some(waiting), replayed: true, partial: None });
    assert_eq!(s.read_events("s", 0, 10).await.unwrap().len(), 1, "the repeat wrote nothing");
    let other = s.resolve_interrupt(decide("k2", r#"{"approved":false}"#)).await;
    match other {
        Err(StoreError::InterruptAlreadyResolved { resolution, .. }) => {
            assert_eq!(resolution.get(), r#"{"approved":true}"#)
        }
        other => panic!("expected InterruptAlreadyResolved, got {other:?}"),
    }
    let changed = s.resolve_interrupt(decide("k1", r#"{"approved":false}"#)).await;
    assert!(matches!(changed, Err(StoreError::IdempotencyConflict { .. })), "{changed:?}");
    assert!(s.open_interrupts(None, 10).await.unwrap().is_empty());
    let resumed = s.claim("w1", LONG).await.unwrap().expect("queued");
    assert_eq!((resumed.step.step_id, resumed.step.attempt), (waiting, 1));
    let missing = s.resolve_interrupt(Resolution { interrupt_id: "nope".into(), ..decide("k3", "{}") }).await;
    assert!(matches!(missing, Err(StoreError::InterruptNotFound { .. })), "{missing:?}");
}

async fn a_conditional_step_is_enqueued_only_when_new_items_arrived(h: Harness) {
    let s = &*h.store;
    let a = claimed_session(s, "s").await;
    let queued = s.send_user_message(message("s", "k2", "while running")).await.unwrap();
    assert_eq!((queued.item_seq, queued.step_id), (2, None));
    let next_turn = |after: i64| NewStep {
        kind: "RunModel".into(),
        payload: j("{}"),
        start: StepStart::Now,
        only_if_items_after: Some((after, "user_prompt".into())),
        session_status: None,
    };
    let mut end = done();
    end.steps.push(next_turn(1));
    assert!(s.commit(&a, end).await.unwrap().step_ids[0].is_some(), "a prompt arrived after seq 1");
    let b = s.claim("w1", LONG).await.unwrap().expect("the next turn");
    let mut end = done();
    end.steps.push(next_turn(2));
    assert_eq!(s.commit(&b, end).await.unwrap().step_ids, vec![None], "nothing after seq 2");
    assert!(s.claim("w1", LONG).await.unwrap().is_none());
    let woke = s.send_user_message(message("s", "k3", "later")).await.unwrap();
    assert!(woke.step_id.is_some(), "an idle session wakes on a message");
}

async fn a_retry_queues_the_step_again_and_keeps_its_attempt_count(h: Harness) {
    let s = &*h.store;
    let c = claimed_session(s, "s").await;
    s.commit(&c, Commit::finish(Finish::Retry(Duration::ZERO))).await.unwrap();
    let again = s.claim("w2", LONG).await.unwrap().expect("queued again");
    assert_eq!((again.step.step_id, again.step.attempt, again.fence), (c.step.step_id, 2, 2));
    s.commit(&again, Commit::finish(Finish::Retry(LONG))).await.unwrap();
    assert!(s.claim("w2", LONG).await.unwrap().is_none(), "not before its delay");
    let step = s.step(c.step.step_id).await.unwrap().unwrap();
    assert_eq!(step.state, StepState::Queued);
}

async fn a_corrupted_row_is_refused_with_a_clear_error_and_nothing_else_is_lost(h: Harness) {
    let s = &*h.store;
    new_session(s, "bad").await;
    new_session(s, "good").await;
    s.send_user_message(message("bad", "k1", "hi")).await.unwrap();
    s.send_user_message(message("good", "k1", "hi")).await.unwrap();
    h.exec("UPDATE sessions SET run_state = '{broken' WHERE session_id = 'bad'").await;
    h.exec("UPDATE items SET body = 'not json' WHERE session_id = 'bad'").await;
    let err = s.session("bad").await.expect_err("corrupt run state");
    assert!(matches!(err, StoreError::Corrupt { table: "sessions", .. }), "{err}");
    assert!(err.to_string().contains("bad"), "names the row: {err}");
    let err = s.read_items("bad", 0, 10).await.expect_err("corrupt item");
    assert!(matches!(err, StoreError::Corrupt { table: "items", .. }), "{err}");
    assert!(!err.is_retryable());
    assert_eq!(s.session("good").await.unwrap().unwrap().status, "idle");
    assert_eq!(s.read_items("good", 0, 10).await.unwrap().len(), 1);
    assert_eq!(h.count("SELECT count(*) FROM items").await, 2, "no row dropped");
    h.exec("UPDATE steps SET payload = '{' WHERE session_id = 'bad'").await;
    let claims = [s.claim("w1", LONG).await, s.claim("w1", LONG).await];
    let ok = claims.iter().filter(|c| matches!(c, Ok(Some(_)))).count();
    let corrupt =
        claims.iter().filter(|c| matches!(c, Err(StoreError::Corrupt { table: "steps", .. }))).count();
    assert_eq!((ok, corrupt), (1, 1), "the good step is claimed, the bad one refused: {claims:?}");
}

async fn a_future_version_row_is_refused_and_never_claimed(h: Harness) {
    let s = &*h.store;
    new_session(s, "s").await;
    let sent = s.send_user_message(message("s", "k1", "hi")).await.unwrap();
    h.exec("UPDATE steps SET row_version = 2").await;
    assert!(s.claim("w1", LONG).await.unwrap().is_none(), "a newer build's step is left to it");
    let err = s.step(sent.step_id.unwrap()).await.expect_err("future step");
    assert!(matches!(err, StoreError::FutureVersion { found: 2, supported: 1, .. }), "{err}");
    h.exec("UPDATE sessions SET row_version = 2").await;
    assert!(matches!(s.session("s").await, Err(StoreError::FutureVersion { table: "sessions", .. })));
    let write = s.send_user_message(message("s", "k2", "more")).await;
    assert!(matches!(write, Err(StoreError::FutureVersion { .. })), "{write:?}");
    assert_eq!(h.count("SELECT count(*) FROM items").await, 1, "nothing written");
}

async fn a_queued_step_wakes_a_waiting_worker(h: Harness) {
    let s = h.store.clone();
    new_session(&*s, "s").await;
    let mut idle = s.work_signal();
    assert!(!idle.wait(Duration::from_millis(50)).await, "no work: the wait times out");
    let mut signal = s.work_signal();
    let waiter = tokio::spawn(async move { signal.wait(Duration::from_secs(10)).await });
    s.send_user_message(message("s", "k1", "hi")).await.unwrap();
    assert!(waiter.await.unwrap(), "woken by the queued step, not the timeout");
}

async fn an_appended_event_wakes_a_reader_of_that_session(h: Harness) {
    let s = h.store.clone();
    new_session(&*s, "a").await;
    new_session(&*s, "b").await;
    let mut for_a = s.event_signal("a");
    let mut m = message("b", "k1", "hi");
    m.events.push(event("user_message", "{}"));
    s.send_user_message(m).await.unwrap();
    assert!(!for_a.wait(Duration::from_millis(100)).await, "b's event does not wake a's reader");
    let waiter = tokio::spawn(async move { for_a.wait(Duration::from_secs(10)).await });
    let mut m = message("a", "k1", "hi");
    m.events.push(event("user_message", "{}"));
    s.send_user_message(m).await.unwrap();
    assert!(waiter.await.unwrap(), "a's event wakes a's reader");
}

async fn concurrent_workers_never_claim_a_step_twice(h: Harness) {
    const SESSIONS: usize = 20;
    const STEPS_PER_SESSION: usize = 5;
    let s = h.store.clone();
    for i in 0..SESSIONS {
        new_session(&*s, &format!("s{i}")).await;
        s.send_user_message(message(&format!("s{i}"), "k", "go")).await.unwrap();
    }
    let seen = Arc::new(Mutex::new(HashSet::new()));
    let mut workers = Vec::new();
    for w in 0..4 {
        let (s, seen) = (s.clone(), seen.clone());
        workers.push(tokio::spawn(async move {
            let mut idle = 0;
            while idle < 20 {
                let Some(c) = s.claim(&format!("w{w}"), LONG).await.unwrap() else {
                    idle += 1;
                    tokio::task::yield_now().await;
                    continue;
                };
                idle = 0;
                assert_eq!(c.step.attempt, 1, "claimed once");
                assert!(seen.lock().unwrap().insert(c.step.step_id), "step {} claimed twice", c.step.step_id);
                let n: usize = c.step.payload.get().parse().unwrap_or(0);
                let mut commit = done();
                if n + 1 < STEPS_PER_SESSION {
                    commit.steps.push(NewStep::now("Next", j(&(n + 1).to_string())));
                }
                s.commit(&c, commit).await.unwrap();
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    assert_eq!(seen.lock().unwrap().len(), SESSIONS * STEPS_PER_SESSION);
    assert_eq!(
        h.count("SELECT count(*) FROM steps WHERE state = 'done'").await,
        (SESSIONS * STEPS_PER_SESSION) as i64
    );
}

async fn open_interrupts_are_read_by_pages_in_order_with_none_missed_or_repeated(h: Harness) {
    const N: usize = 23;
    let s = &*h.store;
    for i in 0..N {
        let c = claimed_session(s, &format!("p{i:02}")).await;
        s.commit(&c, parked_on_i1()).await.unwrap();
    }
    // One decided between pages is neither repeated nor a gap.
    let first = s.open_interrupts(None, 10).await.unwrap();
    assert_eq!(first.len(), 10);
    s.resolve_interrupt(Resolution {
        session_id: first[3].session_id.clone(),
        interrupt_id: "i1".into(),
        client_key: "k".into(),
        resolution: j("true"),
        events: vec![],
        partial_events: Vec::new(),
    })
    .await
    .unwrap();
    let mut seen: Vec<(i64, String)> = first.iter().map(|i| (i.created_at, i.session_id.clone())).collect();
    let mut after = first.last().map(InterruptCursor::of);
    loop {
        let page = s.open_interrupts(after.as_ref(), 10).await.unwrap();
        seen.extend(page.iter().map(|i| (i.created_at, i.session_id.clone())));
        if page.len() < 10 {
            break;
        }
        after = page.last().map(InterruptCursor::of);
    }
    assert_eq!(seen.len(), N, "every open interrupt once: {seen:?}");
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, seen, "oldest first, none repeated");
    let rest = s.open_interrupts(None, 100).await.unwrap();
    assert_eq!(rest.len(), N - 1, "the decided one is no longer open");
    assert!(s.open_interrupts(rest.last().map(InterruptCursor::of).as_ref(), 100).await.unwrap().is_empty());
}

fn part(item: usize, role: &str, key: Option<&str>, text: &str) -> NewMessage {
    NewMessage { item, role: role.into(), merge_key: key.map(str::to_owned), text: text.into(), images: None }
}

async fn messages_are_projected_in_the_commit_of_their_items_and_parts_of_one_message_join(h: Harness) {
    let s = &*h.store;
    let c = claimed_session(s, "m").await;
    let mut keep = Commit::finish(Finish::Keep);
    keep.items = vec![entry("u1", "{}"), entry("a1", "{}"), entry("a2", "{}")];
    keep.messages = vec![
        part(0, "user", None, "refund order 7"),
        part(1, "assistant", Some("msg_1"), "Looking it up."),
        part(2, "assistant", Some("msg_1"), "Done."),
    ];
    s.commit(&c, keep).await.unwrap();
    // A repeated item (its uuid stored already) adds no text; a new key is a new message.
    let mut done = done();
    // A key joins only the session's last message: `msg_1` after `msg_2` is a new message.
    done.items = vec![entry("a2", "{}"), entry("a3", "{}"), entry("a4", "{}")];
    done.messages = vec![
        part(0, "assistant", Some("msg_1"), "Done."),
        part(1, "assistant", Some("msg_2"), "Bye."),
        part(2, "assistant", Some("msg_1"), "Again."),
    ];
    s.commit(&c, done).await.unwrap();
    let page = s.read_messages("m", None, 100).await.unwrap();
    assert!(page.projected);
    let texts: Vec<(&str, &str)> = page.messages.iter().map(|m| (m.role.as_str(), m.text.as_str())).collect();
    assert_eq!(
        texts,
        [
            ("user", "refund order 7"),
            ("assistant", "Looking it up.\n\nDone."),
            ("assistant", "Bye."),
            ("assistant", "Again.")
        ]
    );
    assert_eq!(page.messages.iter().map(|m| m.seq).collect::<Vec<_>>(), [1, 2, 3, 4]);
    assert_eq!(page.messages[1].item_seq, page.messages[0].item_seq + 2, "the last item merged");
    // The newest first page, then the one before it.
    let last = s.read_messages("m", None, 2).await.unwrap().messages;
    assert_eq!(last.iter().map(|m| m.seq).collect::<Vec<_>>(), [3, 4]);
    let before = s.read_messages("m", Some(3), 5).await.unwrap().messages;
    assert_eq!(before.iter().map(|m| m.seq).collect::<Vec<_>>(), [1, 2]);
    // A commit that loses its lease stores no message either.
    let lost = Commit { messages: vec![part(0, "user", None, "late")], ..Commit::finish(Finish::Keep) };
    assert!(matches!(s.commit(&c, lost).await, Err(StoreError::LeaseLost { .. })));
    assert_eq!(s.read_messages("m", None, 100).await.unwrap().messages.len(), 4);
    let missing = s.read_messages("nobody", None, 10).await.unwrap();
    assert!(!missing.projected && missing.messages.is_empty());
}

async fn a_session_from_before_the_projection_reads_as_unprojected(h: Harness) {
    let s = &*h.store;
    new_session(s, "old").await;
    new_session(s, "new").await;
    h.exec("UPDATE sessions SET unprojected = 1 WHERE session_id = 'old'").await;
    assert!(!s.read_messages("old", None, 10).await.unwrap().projected);
    assert!(s.read_messages("new", None, 10).await.unwrap().projected);
}

fn chunk(session: &str, lines: &[(usize, &str)]) -> Option<NewTranscriptChunk> {
    Some(NewTranscriptChunk {
        cli_session_id: session.into(),
        lines: lines.iter().map(|(i, text)| (*i, (*text).to_owned())).collect(),
    })
}

async fn transcript_chunks_keep_the_lines_of_the_items_a_commit_stored_in_order(h: Harness) {
    let s = &*h.store;
    let c = claimed_session(s, "t").await;
    let empty = s.read_transcript("t").await.unwrap();
    assert_eq!((empty.chunked, empty.cli_session_id, empty.chunks.len()), (true, None, 0));
    let mut keep = Commit::finish(Finish::Keep);
    keep.items = vec![entry("u1", "{}"), entry("a1", "{}")];
    keep.transcript = chunk("cli-1", &[(0, "{\"uuid\":\"u1\"}\n"), (1, "{\"uuid\":\"a1\"}\n")]);
    s.commit(&c, keep).await.unwrap();
    // A repeated item (its uuid stored already) adds no line; an item with no line (a
    // `last-prompt`) adds nothing either.
    let mut done = done();
    done.items = vec![entry("a1", "{}"), entry("a2", "{}"), entry("lp", "{}")];
    done.transcript = chunk("cli-2", &[(0, "{\"uuid\":\"a1\"}\n"), (1, "{\"uuid\":\"a2\"}\n"), (2, "")]);
    s.commit(&c, done).await.unwrap();
    let read = s.read_transcript("t").await.unwrap();
    assert!(read.chunked);
    assert_eq!(read.cli_session_id.as_deref(), Some("cli-2"), "the last chunk's CLI session");
    assert_eq!(read.chunks, ["{\"uuid\":\"u1\"}\n{\"uuid\":\"a1\"}\n", "{\"uuid\":\"a2\"}\n"]);
    // A commit that loses its lease keeps no chunk.
    let lost = Commit {
        items: vec![entry("late", "{}")],
        transcript: chunk("cli-3", &[(0, "{\"uuid\":\"late\"}\n")]),
        ..Commit::finish(Finish::Keep)
    };
    assert!(matches!(s.commit(&c, lost).await, Err(StoreError::LeaseLost { .. })));
    assert_eq!(s.read_transcript("t").await.unwrap().chunks.len(), 2);
    let missing = s.read_transcript("nobody").await.unwrap();
    assert!(!missing.chunked && missing.chunks.is_empty());
}

async fn a_session_from_before_the_chunks_reads_as_unchunked(h: Harness) {
    let s = &*h.store;
    new_session(s, "old").await;
    new_session(s, "new").await;
    h.exec("UPDATE sessions SET unchunked = 1 WHERE session_id = 'old'").await;
    assert!(!s.read_transcript("old").await.unwrap().chunked);
    assert!(s.read_transcript("new").await.unwrap().chunked);
}

async fn items_are_read_by_kind_in_order(h: Harness) {
    let s = &*h.store;
    let c = claimed_session(s, "k").await;
    let mut keep = Commit::finish(Finish::Keep);
    keep.items = vec![entry("e1", "{}"), entry("e2", "{}")];
    s.commit(&c, keep).await.unwrap();
    s.send_user_message(message("k", "k2", "again")).await.unwrap();
    let prompts = s.read_items_of_kind("k", "user_prompt", 0, 10).await.unwrap();
    let entries = s.read_items_of_kind("k", "transcript_entry", 0, 10).await.unwrap();
    assert_eq!(prompts.len(), 2, "{prompts:?}");
    assert!(prompts.iter().all(|i| i.kind == "user_prompt"));
    assert_eq!(entries.iter().map(|i| i.uuid.as_deref().unwrap()).collect::<Vec<_>>(), ["e1", "e2"]);
    let after_first = s.read_items_of_kind("k", "user_prompt", prompts[0].seq, 10).await.unwrap();
    assert_eq!(after_first.len(), 1);
    assert_eq!(after_first[0].seq, prompts[1].seq);
}

async fn sessions_waiting_for_approval_are_rows_only(h: Harness) {
    const N: usize = 50;
    let s = &*h.store;
    for i in 0..N {
        let id = format!("s{i}");
        let c = claimed_session(s, &id).await;
        let park = parked_on_i1();
        s.commit(&c, park).await.unwrap();
    }
    assert!(s.claim("w1", LONG).await.unwrap().is_none(), "nothing to run while they wait");
    assert_eq!(s.open_interrupts(None, 1000).await.unwrap().len(), N);
    assert_eq!(s.count_open_interrupts().await.unwrap(), N as i64);
    assert_eq!(h.count("SELECT count(*) FROM steps WHERE state = 'waiting'").await, N as i64);
    assert_eq!(h.count("SELECT count(*) FROM steps WHERE state = 'claimed'").await, 0, "no lease held");
    s.resolve_interrupt(Resolution {
        session_id: "s7".into(),
        interrupt_id: "i1".into(),
        client_key: "k".into(),
        resolution: j("true"),
        events: vec![],
        partial_events: Vec::new(),
    })
    .await
    .unwrap();
    let c = s.claim("w1", LONG).await.unwrap().expect("the resolved one");
    assert_eq!(c.step.session_id, "s7");
}

async fn sessions_are_listed_in_id_order_by_page_and_status(h: Harness) {
    let s = &*h.store;
    for id in ["b", "a", "c"] {
        new_session(s, id).await;
    }
    let c = claimed_session(s, "d").await;
    let mut running = done();
    running.session.status = Some("running".into());
    s.commit(&c, running).await.unwrap();
    let ids = |list: Vec<SessionSummary>| list.into_iter().map(|x| x.session_id).collect::<Vec<_>>();
    assert_eq!(ids(s.list_sessions(None, "", 10).await.unwrap()), ["a", "b", "c", "d"]);
    assert_eq!(ids(s.list_sessions(None, "", 2).await.unwrap()), ["a", "b"]);
    assert_eq!(ids(s.list_sessions(None, "b", 10).await.unwrap()), ["c", "d"]);
    assert_eq!(ids(s.list_sessions(Some("running"), "", 10).await.unwrap()), ["d"]);
    assert_eq!(ids(s.list_sessions(Some("idle"), "", 10).await.unwrap()), ["a", "b", "c"]);
    assert!(s.list_sessions(Some("nope"), "", 10).await.unwrap().is_empty());
}

async fn a_released_claim_is_claimable_at_once_with_the_same_attempt_and_stays_fenced(h: Harness) {
    let s = &*h.store;
    let released = claimed_session(s, "s").await;
    let mut mark = Commit::finish(Finish::Keep);
    mark.tool_calls.push(ToolCallRecord {
        tool_call_id: "toolu_1".into(),
        status: "started".into(),
        record: j(r#"{"status":"started","attempt":1}"#),
    });
    s.commit(&released, mark).await.expect("the claim commits before it is released");
    s.release(&released).await.expect("release");
    let step = s.step(released.step.step_id).await.unwrap().unwrap();
    assert_eq!(step.state, StepState::Queued);
    let next = s.claim("w2", LONG).await.unwrap().expect("claimable at once, not after the 60 s lease");
    assert_eq!(next.step.step_id, released.step.step_id);
    assert_eq!(
        (next.step.attempt, next.fence),
        (1, 2),
        "the released attempt is not counted; the fence moves on"
    );
    assert_eq!(
        s.tool_call("s", "toolu_1").await.unwrap().unwrap().status,
        "started",
        "what the released claim committed stays"
    );
    let mut late = done();
    late.events.push(event("text_delta", r#"{"text":"late"}"#));
    late.session.status = Some("late".into());
    let err = s.commit(&released, late).await.expect_err("a released claim is stale");
    assert!(matches!(err, StoreError::LeaseLost { fence: 1, .. }), "{err}");
    assert!(matches!(s.heartbeat(&released, LONG).await, Err(StoreError::LeaseLost { .. })));
    assert!(matches!(s.release(&released).await, Err(StoreError::LeaseLost { .. })));
    assert!(s.read_events("s", 0, 10).await.unwrap().is_empty(), "the late commit wrote nothing");
    assert_ne!(s.session("s").await.unwrap().unwrap().status, "late");
    s.commit(&next, done()).await.expect("the new holder commits");
    assert_eq!(s.step(next.step.step_id).await.unwrap().unwrap().state, StepState::Done);
}

async fn a_released_claim_wakes_a_waiting_worker(h: Harness) {
    let s = h.store.clone();
    let c = claimed_session(&*s, "s").await;
    let mut signal = s.work_signal();
    let waiter = tokio::spawn(async move { signal.wait(Duration::from_secs(10)).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    s.release(&c).await.unwrap();
    assert!(waiter.await.unwrap(), "woken by the release, not the timeout");
}

async fn releasing_a_stale_claim_changes_nothing(h: Harness) {
    let s = &*h.store;
    new_session(s, "s").await;
    s.send_user_message(message("s", "k1", "hello")).await.unwrap();
    let stale = s.claim("w1", Duration::from_millis(1)).await.unwrap().expect("due");
    let fresh = claim_within(s, "w2", LONG, Duration::from_secs(10)).await.expect("reclaimed");
    let err = s.release(&stale).await.expect_err("stale");
    assert!(matches!(err, StoreError::LeaseLost { fence: 1, .. }), "{err}");
    let step = s.step(fresh.step.step_id).await.unwrap().unwrap();
    assert_eq!((step.state, step.attempt, step.fence), (StepState::Claimed, 2, 2), "still w2's");
    assert!(s.claim("w3", LONG).await.unwrap().is_none(), "still held");
    s.commit(&fresh, done()).await.expect("w2 still holds it");
    s.commit(&fresh, done()).await.expect_err("done");
    assert!(matches!(s.release(&fresh).await, Err(StoreError::LeaseLost { .. })), "a done step stays done");
    assert_eq!(s.step(fresh.step.step_id).await.unwrap().unwrap().state, StepState::Done);
}

async fn a_step_sets_the_session_status_only_when_it_is_enqueued(h: Harness) {
    let s = &*h.store;
    new_session(s, "s").await;
    let wake = |key: &str| {
        let mut m = message("s", key, key);
        m.wake = m.wake.map(|w| w.with_session_status("running"));
        m
    };
    let woke = s.send_user_message(wake("k1")).await.unwrap();
    assert!(woke.step_id.is_some());
    assert_eq!(s.session("s").await.unwrap().unwrap().status, "running", "queued: running at once");
    let c = s.claim("w1", LONG).await.unwrap().expect("the turn");
    let skipped = s.send_user_message(wake("k2")).await.unwrap();
    assert_eq!(skipped.step_id, None, "a turn runs: no wake");
    let next_turn = |after: i64| {
        NewStep {
            kind: "RunModel".into(),
            payload: j("{}"),
            start: StepStart::Now,
            only_if_items_after: Some((after, "user_prompt".into())),
            session_status: None,
        }
        .with_session_status("running")
    };
    let mut end = done();
    end.session.status = Some("idle".into());
    end.steps.push(next_turn(1));
    assert!(s.commit(&c, end).await.unwrap().step_ids[0].is_some(), "k2 arrived after seq 1");
    assert_eq!(s.session("s").await.unwrap().unwrap().status, "running", "the next turn is queued");
    let c2 = s.claim("w1", LONG).await.unwrap().expect("the next turn");
    let mut end = done();
    end.session.status = Some("idle".into());
    end.steps.push(next_turn(2));
    assert_eq!(s.commit(&c2, end).await.unwrap().step_ids, vec![None]);
    assert_eq!(s.session("s").await.unwrap().unwrap().status, "idle", "nothing queued: the commit's status");
}

/// Batches (docs/ARCHITECTURE.md, "Glossary", ahead): interrupts opened ahead with no step waiting
/// on them, decided in any order; a step that waits on one decided already is queued at once
/// (nothing else would wake it); at the turn's end a commit closes the ones still open and leaves
/// decided ones alone.
async fn interrupts_opened_ahead_are_closed_only_while_open_and_a_wait_on_a_decided_one_is_queued_at_once(
    h: Harness,
) {
    let s = &*h.store;
    let c = claimed_session(s, "s").await;
    let mut park = parked_on_i1();
    for ahead in ["i2", "i3", "i4"] {
        park.interrupts.push(NewInterrupt {
            interrupt_id: ahead.into(),
            request: j(r#"{"ahead":true}"#),
            deadline: None,
        });
    }
    s.commit(&c, park).await.unwrap();
    assert_eq!(s.open_interrupts(None, 10).await.unwrap().len(), 4, "all of the batch at once");
    let decide = |id: &str, text: &str| Resolution {
        session_id: "s".into(),
        interrupt_id: id.into(),
        client_key: format!("k-{id}"),
        resolution: j(text),
        events: Vec::new(),
        partial_events: Vec::new(),
    };
    // Decided ahead: no step waits on it, nothing is queued.
    let ahead = s.resolve_interrupt(decide("i2", r#"{"approved":true}"#)).await.unwrap();
    assert_eq!(ahead, ResolveReceipt { step_id: None, replayed: false, partial: None });
    s.resolve_interrupt(decide("i1", r#"{"approved":true}"#)).await.unwrap();
    let resumed = s.claim("w1", LONG).await.unwrap().expect("the waiting step");

    // The repeat of i2 waits on it: queued at once. i3 stays open, i4 is decided meanwhile.
    let mut wait = done();
    wait.steps.push(NewStep {
        kind: "AwaitToolApproval".into(),
        payload: j("{}"),
        start: StepStart::OnInterrupt("i2".into()),
        only_if_items_after: None,
        session_status: None,
    });
    let id = s.commit(&resumed, wait).await.unwrap().step_ids[0].expect("enqueued");
    let step = s.step(id).await.unwrap().unwrap();
    assert_eq!(step.state, StepState::Queued, "{step:?}");
    let next = s.claim("w1", LONG).await.unwrap().expect("claimable now");
    assert_eq!(next.step.step_id, id);
    s.resolve_interrupt(decide("i4", r#"{"approved":false}"#)).await.unwrap();

    // The turn ends: close i2 (decided), i3 (open), i4 (decided), "gone" (no such interrupt).
    let mut end = done();
    for id in ["i2", "i3", "i4", "gone"] {
        end.close_interrupts.push(CloseInterrupt {
            interrupt_id: id.into(),
            resolution: j(r#"{"approved":false,"message":"closed"}"#),
            events: vec![event("interrupt_resolved", &format!(r#"{{"interrupt_id":"{id}"}}"#))],
        });
    }
    end.events.push(event("turn_completed", "{}"));
    let before = s.read_events("s", 0, 100).await.unwrap().len();
    s.commit(&next, end).await.unwrap();
    let written: Vec<(String, String)> = s.read_events("s", 0, 100).await.unwrap()[before..]
        .iter()
        .map(|e| (e.kind.clone(), e.payload.get().to_owned()))
        .collect();
    assert_eq!(
        written,
        [
            ("interrupt_resolved".to_owned(), r#"{"interrupt_id":"i3"}"#.to_owned()),
            ("turn_completed".to_owned(), "{}".to_owned())
        ],
        "only the interrupt actually closed says so"
    );
    assert!(s.open_interrupts(None, 10).await.unwrap().is_empty(), "nothing lingers in the inbox");
    let closed = s.interrupt("s", "i3").await.unwrap().unwrap();
    assert_eq!(closed.resolution.unwrap().get(), r#"{"approved":false,"message":"closed"}"#);
    assert!(closed.resolved_at.is_some());
    let kept = s.interrupt("s", "i2").await.unwrap().unwrap();
    assert_eq!(kept.resolution.unwrap().get(), r#"{"approved":true}"#, "a decision is never overwritten");
    let kept = s.interrupt("s", "i4").await.unwrap().unwrap();
    assert_eq!(kept.resolution.unwrap().get(), r#"{"approved":false}"#);
    // A person deciding the closed one afterwards is told it is resolved.
    let late = s.resolve_interrupt(decide("i3", r#"{"approved":true}"#)).await;
    assert!(matches!(late, Err(StoreError::InterruptAlreadyResolved { .. })), "{late:?}");
}

fn live(attempt: i64, text: &str) -> NewLiveText {
    NewLiveText { turn_id: "t1".into(), attempt, offset: 0, from_seq: None, text: text.into() }
}

async fn live_text_is_one_overwritten_row_read_only_while_its_claim_holds_the_step(h: Harness) {
    let s = &*h.store;
    let c = claimed_session(s, "s").await;
    assert_eq!(s.live_text("s").await.unwrap(), None, "nothing streamed yet");
    s.put_live_text(&c, &live(1, "Hel")).await.expect("put");
    let tail = NewLiveText { offset: 7, from_seq: Some(3), ..live(1, "wörld") };
    s.put_live_text(&c, &tail).await.expect("put again");
    let got = s.live_text("s").await.unwrap().expect("the live text");
    assert_eq!(
        (got.step_id, got.fence, got.turn_id.as_str(), got.attempt, got.text.as_str()),
        (c.step.step_id, c.fence, "t1", 1, "wörld")
    );
    assert_eq!((got.offset, got.from_seq), (7, Some(3)));
    assert_eq!(h.count("SELECT count(*) FROM live_text").await, 1, "one row, overwritten");
    assert!(s.read_events("s", 0, 100).await.unwrap().is_empty(), "no event per write");
    s.commit(&c, Commit::finish(Finish::Keep)).await.expect("keep");
    assert!(s.live_text("s").await.unwrap().is_some(), "a Keep commit leaves it");
    s.commit(&c, done()).await.expect("done");
    assert_eq!(s.live_text("s").await.unwrap(), None, "the step's end supersedes it");
    assert_eq!(h.count("SELECT count(*) FROM live_text").await, 0, "and deletes the row");
    assert!(matches!(s.put_live_text(&c, &live(1, "late")).await, Err(StoreError::LeaseLost { .. })));
    assert_eq!(h.count("SELECT count(*) FROM live_text").await, 0, "a finished claim writes nothing");
}

async fn a_stale_fence_cannot_write_live_text_over_the_attempt_that_replaced_it(h: Harness) {
    let s = &*h.store;
    new_session(s, "s").await;
    s.send_user_message(message("s", "k1", "hello")).await.unwrap();
    let stale = s.claim("w1", Duration::from_millis(1)).await.unwrap().expect("due");
    s.put_live_text(&stale, &live(1, "dead attempt")).await.expect("still the holder");
    let fresh = claim_within(s, "w2", LONG, Duration::from_secs(10)).await.expect("reclaimed");
    assert_eq!(s.live_text("s").await.unwrap(), None, "a dead attempt's text is not read");
    let err = s.put_live_text(&stale, &live(1, "dead attempt, more")).await.expect_err("stale");
    assert!(matches!(err, StoreError::LeaseLost { fence: 1, .. }), "{err}");
    s.put_live_text(&fresh, &live(2, "retried")).await.expect("the holder writes");
    let err = s.put_live_text(&stale, &live(1, "dead again")).await.expect_err("stale");
    assert!(matches!(err, StoreError::LeaseLost { .. }), "{err}");
    let got = s.live_text("s").await.unwrap().expect("the retried attempt's text");
    assert_eq!((got.fence, got.attempt, got.text.as_str()), (fresh.fence, 2, "retried"));
    s.commit(&fresh, Commit::finish(Finish::Retry(Duration::from_secs(60)))).await.expect("retry");
    assert_eq!(s.live_text("s").await.unwrap(), None, "a requeued step has no live text");
    assert_eq!(h.count("SELECT count(*) FROM live_text").await, 0);
}

async fn a_live_text_write_wakes_a_reader_of_that_session(h: Harness) {
    let s = h.store.clone();
    let c = claimed_session(&*s, "s").await;
    let mut reader = s.event_signal("s");
    let waiter = tokio::spawn(async move { reader.wait(Duration::from_secs(10)).await });
    s.put_live_text(&c, &live(1, "hi")).await.unwrap();
    assert!(waiter.await.unwrap(), "the write wakes the session's reader");
}
