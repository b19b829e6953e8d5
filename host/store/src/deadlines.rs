//! Approval deadlines on the database clock: the [`Deadlines`] trait, implemented once for both
//! backends beside the shared [`crate::Store`] implementation, and reached from any store through
//! [`crate::Store::deadlines`].
//!
//! Read [`Deadlines`] first. A deadline is a column, not a timer: `interrupts.deadline_at` (ms,
//! database clock; migration 0005) is set when the interrupt is inserted, from the relative
//! duration its [`crate::NewInterrupt::deadline`] gives, so it survives every restart and every
//! Worker sees the same one. Whoever fires it (any Worker) finds it with
//! [`Deadlines::due_deadlines`], learns how long to sleep with [`Deadlines::next_deadline_in`],
//! and acts on it in one transaction: [`Deadlines::expire_interrupt`] (rejected, recorded as
//! `expired` by [`DEADLINE_PRINCIPAL`]) or [`Deadlines::escalate_interrupt`] (new request, new
//! deadline, recorded as `escalated`).
//!
//! It does not know what a request, an approver group or an escalation *means* (the engine and
//! the `tollgate` crate do): the caller hands it the resolution, the escalated request and the
//! events, opaque JSON like everything else in the store.
//!
//! # Caveats
//!
//! - Every decision and every firing locks the session row first, so a human deciding and a
//!   deadline firing at the same moment run one after the other: exactly one wins, and the other
//!   gets [`StoreError::InterruptAlreadyResolved`] (a firing), [`StoreError::InterruptExpired`] (a
//!   human after the deadline) or [`StoreError::DeadlineNotDue`] (a firing of a deadline that
//!   moved), with nothing written.
//! - A human decision after the deadline is refused even when no Worker fired it yet: the clock
//!   decides, not the Worker ([`StoreError::InterruptExpired`] names the deadline).

use std::sync::LazyLock;
use std::time::Duration;

use serde_json::value::RawValue;
use sqlx::Row;
use tollgate_store_macros::sqlx_bounds;

use crate::audit::NewAuditEntry;
use crate::backend::{Backend, Decider, LockedInterrupt, Sql, ms, wake};
use crate::dialect::Dialect;
use crate::*;

/// The principal of the audit rows a deadline writes.
pub const DEADLINE_PRINCIPAL: &str = "tollgate:deadline";

/// A deadline that rejects ([`Deadlines::expire_interrupt`]).
#[derive(Clone, Debug)]
pub struct Expiry {
    /// The rejection, as a client's would be (its client key makes a repeat a replay).
    pub resolution: Resolution,
    /// The deadline fired: the interrupt's `deadline_at` as [`Deadlines::due_deadlines`] read it.
    pub deadline_at: i64,
    /// The audit row (decision `expired`, principal [`DEADLINE_PRINCIPAL`]).
    pub entry: NewAuditEntry,
}

/// A deadline that hands the call to other approvers ([`Deadlines::escalate_interrupt`]).
#[derive(Clone, Debug)]
pub struct Escalation {
    /// The session.
    pub session_id: String,
    /// The interrupt.
    pub interrupt_id: String,
    /// The deadline fired: the interrupt's `deadline_at` as [`Deadlines::due_deadlines`] read it.
    pub deadline_at: i64,
    /// The interrupt's request from now on (e.g. its approvers replaced).
    pub request: Box<RawValue>,
    /// The second deadline, from the escalation's database time.
    pub next_deadline: Duration,
    /// Appended to the session's events (e.g. `interrupt_escalated`).
    pub events: Vec<NewEvent>,
    /// The audit row (decision `escalated`, principal [`DEADLINE_PRINCIPAL`]).
    pub entry: NewAuditEntry,
}

/// What an escalation wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EscalationReceipt {
    /// The new deadline (ms, database clock).
    pub deadline_at: i64,
    /// When it escalated (ms, database clock).
    pub escalated_at: i64,
    /// The seqs of the events appended.
    pub event_seqs: Vec<i64>,
}

/// Approval deadlines, on the same database as the sessions.
///
/// # Contract (checked by `testing::conformance` on both backends)
///
/// - **On the database clock.** An interrupt inserted with [`NewInterrupt::deadline`] `d` has
///   `deadline_at` = DB-now + `d`; it is due once DB-now reaches it, whatever any process's clock
///   says, and stays due (a row, no timer) until something fires it, across restarts.
/// - **Due ones are found.** [`Deadlines::due_deadlines`] returns open interrupts whose deadline
///   passed, earliest first; [`Deadlines::next_deadline_in`] how long until the earliest one
///   (zero when one is due, `None` when no open interrupt has a deadline).
/// - **Expiry is a rejection, once.** [`Deadlines::expire_interrupt`] resolves the interrupt,
///   queues its waiting step, appends the events and the audit row in one transaction, only if
///   the interrupt is open and `deadline_at` is its deadline and passed: otherwise nothing is
///   written and the answer is [`StoreError::InterruptAlreadyResolved`] (decided first; a
///   repeat under the same client key is a replay) or [`StoreError::DeadlineNotDue`].
/// - **Escalation, once.** [`Deadlines::escalate_interrupt`] replaces the request, sets
///   `escalated_at` and the second deadline, appends the events and the audit row in one
///   transaction, under the same conditions; a repeat finds the deadline moved
///   ([`StoreError::DeadlineNotDue`]) and writes nothing.
/// - **Late decisions are refused.** A client decision ([`Store::resolve_interrupt`],
///   [`crate::AuditLog::resolve_interrupt_as`]) on an interrupt whose deadline passed, or that its
///   deadline resolved, is [`StoreError::InterruptExpired`] naming the deadline; nothing is
///   written.
/// - **Who may decide is checked against the current interrupt.** A decision made through
///   [`Deadlines::resolve_interrupt_as_of`] with the `escalated_at` its authorization read is
///   refused ([`StoreError::InterruptEscalated`], nothing written) when an escalation came
///   between that read and the decision.
#[async_trait::async_trait]
pub trait Deadlines: Send + Sync {
    /// Up to `limit` open interrupts whose deadline passed (DB clock), earliest deadline first.
    /// Rows of a newer format are left out.
    async fn due_deadlines(&self, limit: i64) -> Result<Vec<Interrupt>, StoreError>;

    /// How long until the earliest deadline of an open interrupt (zero when one is due); `None`
    /// when no open interrupt has one.
    async fn next_deadline_in(&self) -> Result<Option<Duration>, StoreError>;

    /// Rejects the interrupt because its deadline passed (see the contract).
    async fn expire_interrupt(&self, expiry: Expiry) -> Result<ResolveReceipt, StoreError>;

    /// Hands the interrupt to other approvers because its deadline passed (see the contract).
    async fn escalate_interrupt(&self, escalation: Escalation) -> Result<EscalationReceipt, StoreError>;

    /// [`crate::AuditLog::resolve_interrupt_as`] by a client whose authority was checked against
    /// the interrupt as it was with `escalated_at` ([`Interrupt::escalated_at`] of the read the
    /// check used): when an escalation changed who may decide since, it is
    /// [`StoreError::InterruptEscalated`] and nothing is written (check again and retry).
    async fn resolve_interrupt_as_of(
        &self,
        resolution: Resolution,
        entry: NewAuditEntry,
        escalated_at: Option<i64>,
    ) -> Result<ResolveReceipt, StoreError>;
}

/// The deadline statements of one dialect, rendered once.
struct DeadlineStatements {
    /// Up to `$1` open interrupts due now, earliest first, `row_version <= $2`.
    due: &'static str,
    /// `wait`: ms from now until the earliest deadline of an open interrupt (null: none).
    next: &'static str,
    /// Escalates interrupt `$2` of session `$1`: request `$3`, second deadline `$4` ms from now;
    /// returns `deadline_at`, `escalated_at`.
    escalate: &'static str,
}

impl DeadlineStatements {
    fn render(now: &str) -> Self {
        let keep = |s: String| -> &'static str { s.leak() };
        let columns = "session_id, interrupt_id, row_version, request, resolution, created_at, resolved_at,
                 deadline_at, escalated_at, approvals";
        DeadlineStatements {
            due: keep(format!(
                "SELECT {columns} FROM interrupts
                 WHERE state = 'open' AND deadline_at IS NOT NULL AND deadline_at <= {now} AND row_version <= $2
                 ORDER BY deadline_at LIMIT $1"
            )),
            next: keep(format!(
                "SELECT min(deadline_at) - {now} AS wait FROM interrupts
                 WHERE state = 'open' AND deadline_at IS NOT NULL"
            )),
            escalate: keep(format!(
                "UPDATE interrupts SET request = $3, escalated_at = {now}, deadline_at = {now} + $4
                 WHERE session_id = $1 AND interrupt_id = $2 AND state = 'open'
                 RETURNING deadline_at, escalated_at"
            )),
        }
    }
}

/// The deadline statements of `DB`'s dialect.
fn statements<DB: Dialect>() -> &'static DeadlineStatements {
    static SQLITE: LazyLock<DeadlineStatements> =
        LazyLock::new(|| DeadlineStatements::render(<sqlx::Sqlite as Dialect>::NOW));
    static POSTGRES: LazyLock<DeadlineStatements> =
        LazyLock::new(|| DeadlineStatements::render(<sqlx::Postgres as Dialect>::NOW));
    DB::pick(&SQLITE, &POSTGRES)
}

#[sqlx_bounds(DB)]
#[async_trait::async_trait]
impl<B, DB> Deadlines for B
where
    B: Backend<Db = DB>,
    DB: Dialect,
{
    async fn due_deadlines(&self, limit: i64) -> Result<Vec<Interrupt>, StoreError> {
        let rows = sqlx::query(statements::<DB>().due)
            .bind(limit)
            .bind(ROW_VERSION)
            .fetch_all(self.read_pool())
            .await?;
        rows.iter().map(Sql::<DB>::decode_interrupt).collect()
    }

    async fn next_deadline_in(&self) -> Result<Option<Duration>, StoreError> {
        let row = sqlx::query(statements::<DB>().next).fetch_one(self.read_pool()).await?;
        let wait: Option<i64> = row.try_get("wait")?;
        Ok(wait.map(|w| Duration::from_millis(u64::try_from(w).unwrap_or(0))))
    }

    async fn expire_interrupt(&self, expiry: Expiry) -> Result<ResolveReceipt, StoreError> {
        crate::audit::check_entry(&expiry.entry)?;
        crate::backend::resolve_by(
            self,
            expiry.resolution,
            Some(&expiry.entry),
            Decider::Deadline(expiry.deadline_at),
        )
        .await
    }

    async fn resolve_interrupt_as_of(
        &self,
        resolution: Resolution,
        entry: NewAuditEntry,
        escalated_at: Option<i64>,
    ) -> Result<ResolveReceipt, StoreError> {
        crate::audit::check_entry(&entry)?;
        crate::backend::resolve_by(self, resolution, Some(&entry), Decider::ClientAsOf(escalated_at)).await
    }

    async fn escalate_interrupt(&self, e: Escalation) -> Result<EscalationReceipt, StoreError> {
        crate::audit::check_entry(&e.entry)?;
        let sql = statements::<DB>();
        let sid = e.session_id.as_str();
        let mut tx = self.begin_write().await?;
        let LockedInterrupt { item_seq, mut event_seq, interrupt, db_now, .. } =
            Sql::lock_interrupt(&mut tx, sid, &e.interrupt_id).await?;
        if let Some(resolution) = interrupt.resolution {
            return Err(StoreError::InterruptAlreadyResolved {
                session_id: sid.to_owned(),
                interrupt_id: e.interrupt_id,
                resolution,
            });
        }
        let not_due = |detail: String| StoreError::DeadlineNotDue {
            session_id: sid.to_owned(),
            interrupt_id: e.interrupt_id.clone(),
            detail,
        };
        match interrupt.deadline_at {
            None => return Err(not_due("it has no deadline".into())),
            Some(at) if at != e.deadline_at => {
                let why = if interrupt.escalated_at.is_some() { " (escalated)" } else { "" };
                return Err(not_due(format!("its deadline is {at} now, not {}{why}", e.deadline_at)));
            }
            Some(at) if at > db_now => {
                return Err(not_due(format!("its deadline {at} has not passed (database clock {db_now})")));
            }
            Some(_) => {}
        }
        let row = sqlx::query(sql.escalate)
            .bind(sid)
            .bind(e.interrupt_id.as_str())
            .bind(e.request.get())
            .bind(ms(e.next_deadline))
            .fetch_one(&mut *tx)
            .await?;
        let deadline_at: i64 = row.try_get("deadline_at")?;
        let escalated_at: i64 = row.try_get("escalated_at")?;
        let mut event_seqs = Vec::with_capacity(e.events.len());
        for event in &e.events {
            event_seqs.push(Sql::append_event(&mut tx, sid, &mut event_seq, event, None).await?);
        }
        crate::audit::insert(&mut tx, sid, &e.interrupt_id, &e.entry).await?;
        Sql::save_seqs(&mut tx, sid, item_seq, event_seq, &SessionUpdate::default()).await?;
        tx.commit().await?;
        wake(self, sid, false, !e.events.is_empty()).await;
        Ok(EscalationReceipt { deadline_at, escalated_at, event_seqs })
    }
}
