//! Who started a session, and the append-only audit trail of decisions: the [`AuditLog`] trait,
//! implemented once for both backends beside the shared [`crate::Store`] implementation, and
//! reached from any store through [`crate::Store::audit`].
//!
//! Read [`AuditLog`] first. A decision made through [`AuditLog::resolve_interrupt_as`] writes the
//! interrupt's resolution, queues its waiting step, appends its events **and** inserts exactly one
//! `audit` row, in one transaction; a replay under the same client key writes nothing (no second
//! row). The `audit` table refuses every `UPDATE` and `DELETE` (triggers of migration 0003), so no
//! code path can rewrite the trail; it has no foreign key to `sessions` and outlives them.
//!
//! It does not know what a principal, a role or a tool *means* (the `tollgate` crate's auth module
//! does): names and inputs are opaque strings and JSON to it, like everything else in the store.
//!
//! # Caveats
//!
//! - [`AuditQuery::after`] pages by `audit_id`, which grows with every insert. On PostgreSQL two
//!   decisions committing concurrently may become visible out of id order, so a reader polling the
//!   newest page may see a lower id appear after a higher one; read a closed time range
//!   ([`AuditQuery::until`] in the past) for a complete export.
//! - [`crate::Store::resolve_interrupt`] writes no audit row: it is the store's primitive, kept
//!   for callers that decide without a principal. Tollgate decides through
//!   [`AuditLog::resolve_interrupt_as`] only.

use std::sync::LazyLock;

use serde_json::value::RawValue;
use sqlx::{Row, Transaction};
use tollgate_store_macros::sqlx_bounds;

use crate::backend::{Backend, Durability};
use crate::dialect::Dialect;
use crate::error::{check_row_version, stored_json};
use crate::*;

/// The longest principal name, reason text or tool name the trail takes, in bytes.
pub const MAX_AUDIT_TEXT: usize = 4096;

/// What a decision was: the engine's (`tollgate_engine::views::AuditDecision`), stored by its
/// name. The schema's CHECK lists [`AuditDecision::ALL`]: approved and rejected (schema 1),
/// escalated, expired and revoked (schema 5; escalated and expired by the deadline's principal
/// `tollgate:deadline`, revoked by who revoked the grant), cancelled (schema 10: the row's
/// `interrupt_id` holds the turn's id), partially approved (schema 15) and checked (schema 16:
/// the row's `interrupt_id` holds the tool call's id, its reason the person's note) and forked
/// (schema 20: the row's session is the fork, its `interrupt_id` the turn forked at).
pub use tollgate_engine::views::AuditDecision;

/// The audit row a decision writes ([`AuditLog::resolve_interrupt_as`]); the session, the
/// interrupt and the time (database clock) come from the decision itself.
#[derive(Clone, Debug)]
pub struct NewAuditEntry {
    /// Who decided (1 to [`MAX_AUDIT_TEXT`] bytes).
    pub principal: String,
    /// Approved or rejected.
    pub decision: AuditDecision,
    /// The decider's text (the rejection message the model reads, or a note).
    pub reason: Option<String>,
    /// The tool the decision is about.
    pub tool_name: Option<String>,
    /// The input the call was deferred with, exactly as given.
    pub input: Option<Box<RawValue>>,
    /// The input the decider replaced it with, when they edited it.
    pub edited_input: Option<Box<RawValue>>,
}

/// A person's mark that a tool call needing attention was checked ([`AuditLog::mark_checked`]).
#[derive(Clone, Debug)]
pub struct CheckMark {
    /// The session.
    pub session_id: String,
    /// The tool call (its record must be `outcome_unknown` or `failed`).
    pub tool_call_id: String,
    /// Who checked it (1 to [`MAX_AUDIT_TEXT`] bytes).
    pub principal: String,
    /// What they found (at most [`MAX_AUDIT_TEXT`] bytes).
    pub note: Option<String>,
}

/// A tool call's check mark, as stored (schema 16).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallCheck {
    /// The tool call.
    pub tool_call_id: String,
    /// Who checked it.
    pub checked_by: String,
    /// Their note.
    pub note: Option<String>,
    /// When (database clock, ms).
    pub checked_at: i64,
}

/// What [`AuditLog::mark_checked`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckReceipt {
    /// The call's mark: this one, or the one stored first.
    pub check: CallCheck,
    /// The call was already marked (by anyone): nothing was written.
    pub replayed: bool,
}

/// A tool call that needs attention: its outcome is unknown or it failed, and nobody marked it
/// checked ([`AuditLog::calls_needing_attention`]).
#[derive(Clone, Debug)]
pub struct AttentionCall {
    /// The session.
    pub session_id: String,
    /// The session's agent, when it names one.
    pub agent_name: Option<String>,
    /// The tool call.
    pub tool_call_id: String,
    /// `outcome_unknown` or `failed`.
    pub status: String,
    /// Its record, byte for byte.
    pub record: Box<RawValue>,
    /// When the record last changed (database clock, ms).
    pub updated_at: i64,
}

/// One row of the audit trail.
#[derive(Clone, Debug)]
pub struct AuditEntry {
    /// Its place in the trail: grows with every row, never reused.
    pub audit_id: i64,
    /// The session.
    pub session_id: String,
    /// The interrupt decided.
    pub interrupt_id: String,
    /// Who decided.
    pub principal: String,
    /// Approved or rejected.
    pub decision: AuditDecision,
    /// The decider's text.
    pub reason: Option<String>,
    /// The tool.
    pub tool_name: Option<String>,
    /// The original input, byte for byte.
    pub input: Option<Box<RawValue>>,
    /// The edited input, byte for byte.
    pub edited_input: Option<Box<RawValue>>,
    /// When the decision committed (database clock, ms).
    pub decided_at: i64,
}

/// A page of the trail to read ([`AuditLog::audit_entries`]): rows with `audit_id > after`, in
/// id order, matching every filter given. The default is the first page of
/// [`AuditQuery::DEFAULT_LIMIT`] rows of the whole trail (a page of 0 rows would read nothing).
#[derive(Clone, Debug)]
pub struct AuditQuery {
    /// Only this session's.
    pub session_id: Option<String>,
    /// Only this principal's.
    pub principal: Option<String>,
    /// Only decisions at or after this time (database clock, ms).
    pub since: Option<i64>,
    /// Only decisions before this time (database clock, ms).
    pub until: Option<i64>,
    /// The last `audit_id` of the previous page (0 for the first).
    pub after: i64,
    /// The page's size.
    pub limit: i64,
}

impl AuditQuery {
    /// The page size of [`AuditQuery::default`].
    pub const DEFAULT_LIMIT: i64 = 100;
}

impl Default for AuditQuery {
    fn default() -> Self {
        AuditQuery {
            session_id: None,
            principal: None,
            since: None,
            until: None,
            after: 0,
            limit: Self::DEFAULT_LIMIT,
        }
    }
}

/// Principals and the audit trail, on the same database as the sessions.
///
/// # Contract (checked by `testing::conformance` on both backends)
///
/// - [`AuditLog::resolve_interrupt_as`] is [`Store::resolve_interrupt`] plus exactly one audit
///   row, in the same transaction: both or neither. A replay (same client key and resolution)
///   returns `replayed: true` and writes no row; another key on a resolved interrupt is
///   [`StoreError::InterruptAlreadyResolved`] and writes no row.
/// - Audit rows are never changed or removed: the database refuses `UPDATE` and `DELETE`.
/// - [`AuditLog::create_session_by`] is [`Store::create_session`] recording who created the
///   session; an existing session keeps its creator.
/// - [`AuditLog::send_user_message_as`] is [`Store::send_user_message`] plus exactly one audit row
///   (a revoked grant), in the same transaction; a replay writes no row.
/// - Deadlines write their rows too ([`crate::deadlines::Deadlines`]): `escalated` and `expired`
///   by `tollgate:deadline`, each in the transaction that escalates or expires the interrupt.
#[async_trait::async_trait]
pub trait AuditLog: Send + Sync {
    /// Creates the session unless it exists, recording `principal` as its creator. `Ok(true)`:
    /// created; `Ok(false)`: it existed and was left unchanged (its creator too).
    async fn create_session_by(&self, session: NewSession, principal: &str) -> Result<bool, StoreError>;

    /// Who created the session: `Ok(None)` when the session does not exist or names nobody
    /// (created by [`Store::create_session`], or before schema 3).
    async fn started_by(&self, session_id: &str) -> Result<Option<String>, StoreError>;

    /// Resolves the interrupt as [`Store::resolve_interrupt`] does and records `entry` in the
    /// audit trail in the same transaction.
    async fn resolve_interrupt_as(
        &self,
        resolution: Resolution,
        entry: NewAuditEntry,
    ) -> Result<ResolveReceipt, StoreError>;

    /// [`Store::send_user_message`] plus one audit row about interrupt `interrupt_id` (e.g. a
    /// [`AuditDecision::Revoked`] grant, named by the decision that made it), in the same
    /// transaction: both or neither; a replay (same client key and message) writes no row.
    async fn send_user_message_as(
        &self,
        message: UserMessage,
        interrupt_id: &str,
        entry: NewAuditEntry,
    ) -> Result<MessageReceipt, StoreError>;

    /// A page of the trail (see [`AuditQuery`]).
    async fn audit_entries(&self, query: &AuditQuery) -> Result<Vec<AuditEntry>, StoreError>;

    /// Marks a tool call that needs attention as checked, and records a
    /// [`AuditDecision::Checked`] row, in one transaction. A call marked before (by anyone) keeps
    /// its first mark: `replayed`, nothing written.
    ///
    /// # Errors
    /// [`StoreError::ToolCallNotFound`]; [`StoreError::NothingToCheck`] when its record is neither
    /// `outcome_unknown` nor `failed`; [`StoreError::Invalid`] for a principal or note out of
    /// bounds. Nothing is written then.
    async fn mark_checked(&self, mark: CheckMark) -> Result<CheckReceipt, StoreError>;

    /// Up to `limit` tool calls of every session that need attention, oldest change first.
    async fn calls_needing_attention(&self, limit: i64) -> Result<Vec<AttentionCall>, StoreError>;

    /// The check marks of the session's tool calls.
    async fn call_checks(&self, session_id: &str) -> Result<Vec<CallCheck>, StoreError>;
}

/// The audit statements of one dialect, rendered once.
pub(crate) struct AuditStatements {
    /// [`crate::dialect::Statements::create_session`] plus `$8` the creator.
    create_session_by: &'static str,
    /// Session `$1`'s creator.
    started_by: &'static str,
    /// Inserts an audit row (`$1` row version, `$2` session, `$3` interrupt, `$4` principal, `$5`
    /// decision, `$6` reason, `$7` tool, `$8` input, `$9` edited input) at DB-now.
    insert: &'static str,
    /// Up to `$6` rows after id `$1`, filtered by session `$2`, principal `$3`, since `$4`, until
    /// `$5` (each unless null).
    list: &'static str,
    /// Tool call `$2` of session `$1`: its status and record.
    call_status: &'static str,
    /// The check mark of tool call `$2` of session `$1`.
    check_of: &'static str,
    /// Marks tool call `$2` of session `$1` checked by `$4` with note `$5` at DB-now (`$3` the row
    /// version), returning the time.
    insert_check: &'static str,
    /// Up to `$1` calls that need attention, oldest change first.
    attention: &'static str,
    /// The check marks of session `$1`.
    checks: &'static str,
}

impl AuditStatements {
    fn render(now: &str) -> Self {
        let keep = |s: String| -> &'static str { s.leak() };
        AuditStatements {
            create_session_by: keep(format!(
                "INSERT INTO sessions (session_id, row_version, status, run_state, created_at, updated_at,
                     agent_digest, agent_pinned, agent_name, started_by)
                 VALUES ($1, $2, $3, $4, {now}, {now}, $5, $6, $7, $8) ON CONFLICT DO NOTHING"
            )),
            started_by: "SELECT started_by FROM sessions WHERE session_id = $1",
            insert: keep(format!(
                "INSERT INTO audit (row_version, session_id, interrupt_id, principal, decision, reason,
                     tool_name, input, edited_input, decided_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, {now})"
            )),
            list: "SELECT audit_id, row_version, session_id, interrupt_id, principal, decision, reason,
                     tool_name, input, edited_input, decided_at
                 FROM audit
                 WHERE audit_id > $1 AND ($2 IS NULL OR session_id = $2) AND ($3 IS NULL OR principal = $3)
                     AND ($4 IS NULL OR decided_at >= $4) AND ($5 IS NULL OR decided_at < $5)
                 ORDER BY audit_id LIMIT $6",
            call_status: "SELECT status, record FROM tool_calls WHERE session_id = $1 AND tool_call_id = $2",
            check_of: "SELECT tool_call_id, checked_by, note, checked_at FROM checked_calls
                 WHERE session_id = $1 AND tool_call_id = $2",
            insert_check: keep(format!(
                "INSERT INTO checked_calls (session_id, tool_call_id, row_version, checked_by, note, checked_at)
                 VALUES ($1, $2, $3, $4, $5, {now}) RETURNING checked_at"
            )),
            attention: "SELECT t.session_id, s.agent_name, t.tool_call_id, t.status, t.record, t.updated_at
                 FROM tool_calls t JOIN sessions s ON s.session_id = t.session_id
                 WHERE t.status IN ('outcome_unknown', 'failed')
                     AND NOT EXISTS (SELECT 1 FROM checked_calls c
                         WHERE c.session_id = t.session_id AND c.tool_call_id = t.tool_call_id)
                 ORDER BY t.updated_at, t.session_id, t.tool_call_id LIMIT $1",
            checks: "SELECT tool_call_id, checked_by, note, checked_at FROM checked_calls
                 WHERE session_id = $1 ORDER BY checked_at, tool_call_id",
        }
    }
}

/// The audit statements of `DB`'s dialect.
fn statements<DB: Dialect>() -> &'static AuditStatements {
    static SQLITE: LazyLock<AuditStatements> =
        LazyLock::new(|| AuditStatements::render(<sqlx::Sqlite as Dialect>::NOW));
    static POSTGRES: LazyLock<AuditStatements> =
        LazyLock::new(|| AuditStatements::render(<sqlx::Postgres as Dialect>::NOW));
    DB::pick(&SQLITE, &POSTGRES)
}

/// Refuses an entry the trail cannot take; nothing is written.
pub(crate) fn check_entry(entry: &NewAuditEntry) -> Result<(), StoreError> {
    if entry.principal.is_empty() || entry.principal.len() > MAX_AUDIT_TEXT {
        return Err(StoreError::Invalid {
            what: format!(
                "an audit principal must be 1 to {MAX_AUDIT_TEXT} bytes, not {} bytes",
                entry.principal.len()
            ),
        });
    }
    for (field, text) in [("reason", &entry.reason), ("tool_name", &entry.tool_name)] {
        if let Some(text) = text.as_ref().filter(|t| t.len() > MAX_AUDIT_TEXT) {
            return Err(StoreError::Invalid {
                what: format!("an audit {field} must be at most {MAX_AUDIT_TEXT} bytes, not {}", text.len()),
            });
        }
    }
    Ok(())
}

/// Inserts `entry` for interrupt `interrupt_id` of `session_id` inside the decision's transaction.
#[sqlx_bounds(DB)]
pub(crate) async fn insert<DB>(
    tx: &mut Transaction<'_, DB>,
    session_id: &str,
    interrupt_id: &str,
    entry: &NewAuditEntry,
) -> Result<(), StoreError>
where
    DB: Dialect,
{
    sqlx::query(statements::<DB>().insert)
        .bind(ROW_VERSION)
        .bind(session_id)
        .bind(interrupt_id)
        .bind(entry.principal.as_str())
        .bind(entry.decision.as_str())
        .bind(entry.reason.as_deref())
        .bind(entry.tool_name.as_deref())
        .bind(entry.input.as_ref().map(|i| i.get()))
        .bind(entry.edited_input.as_ref().map(|i| i.get()))
        .execute(&mut **tx)
        .await?;
    Ok(())
}

#[sqlx_bounds(DB)]
#[async_trait::async_trait]
impl<B, DB> AuditLog for B
where
    B: Backend<Db = DB>,
    DB: Dialect,
{
    async fn create_session_by(&self, session: NewSession, principal: &str) -> Result<bool, StoreError> {
        crate::backend::check_new_session(&session)?;
        if principal.is_empty() || principal.len() > MAX_AUDIT_TEXT {
            return Err(StoreError::Invalid {
                what: format!("a session's creator must be 1 to {MAX_AUDIT_TEXT} bytes"),
            });
        }
        let done = sqlx::query(statements::<DB>().create_session_by)
            .bind(session.session_id.as_str())
            .bind(ROW_VERSION)
            .bind(session.status.as_str())
            .bind(session.run_state.get())
            .bind(session.agent.as_ref().map(|a| a.digest.as_str()))
            .bind(session.agent.as_ref().is_some_and(|a| a.pinned))
            .bind(session.agent_name.as_deref())
            .bind(principal)
            .execute(self.write_pool())
            .await?;
        Ok(DB::rows_affected(&done) == 1)
    }

    async fn started_by(&self, session_id: &str) -> Result<Option<String>, StoreError> {
        let row = sqlx::query(statements::<DB>().started_by)
            .bind(session_id)
            .fetch_optional(self.read_pool())
            .await?;
        match row {
            Some(row) => Ok(row.try_get::<Option<String>, _>("started_by")?),
            None => Ok(None),
        }
    }

    async fn resolve_interrupt_as(
        &self,
        resolution: Resolution,
        entry: NewAuditEntry,
    ) -> Result<ResolveReceipt, StoreError> {
        check_entry(&entry)?;
        crate::backend::resolve(self, resolution, Some(&entry)).await
    }

    async fn send_user_message_as(
        &self,
        message: UserMessage,
        interrupt_id: &str,
        entry: NewAuditEntry,
    ) -> Result<MessageReceipt, StoreError> {
        check_entry(&entry)?;
        crate::backend::send(self, message, Some((interrupt_id, &entry)), &[]).await
    }

    async fn audit_entries(&self, query: &AuditQuery) -> Result<Vec<AuditEntry>, StoreError> {
        let rows = sqlx::query(statements::<DB>().list)
            .bind(query.after)
            .bind(query.session_id.as_deref())
            .bind(query.principal.as_deref())
            .bind(query.since)
            .bind(query.until)
            .bind(query.limit)
            .fetch_all(self.read_pool())
            .await?;
        rows.iter()
            .map(|row| {
                let audit_id: i64 = row.try_get("audit_id")?;
                let key = audit_id.to_string();
                check_row_version("audit", &key, row.try_get("row_version")?)?;
                let decision: String = row.try_get("decision")?;
                let json = |column: &'static str| -> Result<Option<Box<RawValue>>, StoreError> {
                    let text: Option<String> = row.try_get(column)?;
                    text.map(|t| stored_json("audit", &key, column, t)).transpose()
                };
                Ok(AuditEntry {
                    audit_id,
                    session_id: row.try_get("session_id")?,
                    interrupt_id: row.try_get("interrupt_id")?,
                    principal: row.try_get("principal")?,
                    decision: AuditDecision::parse(&decision).ok_or_else(|| StoreError::Corrupt {
                        table: "audit",
                        key: key.clone(),
                        detail: format!("unknown decision `{decision}`"),
                    })?,
                    reason: row.try_get("reason")?,
                    tool_name: row.try_get("tool_name")?,
                    input: json("input")?,
                    edited_input: json("edited_input")?,
                    decided_at: row.try_get("decided_at")?,
                })
            })
            .collect()
    }

    async fn mark_checked(&self, mark: CheckMark) -> Result<CheckReceipt, StoreError> {
        check_entry(&NewAuditEntry {
            principal: mark.principal.clone(),
            decision: AuditDecision::Checked,
            reason: mark.note.clone(),
            tool_name: None,
            input: None,
            edited_input: None,
        })?;
        self.write(Durability::Synced, move |tx| {
            Box::pin(async move { mark_checked_in::<DB>(tx, mark).await })
        })
        .await
    }

    async fn calls_needing_attention(&self, limit: i64) -> Result<Vec<AttentionCall>, StoreError> {
        let rows = sqlx::query(statements::<DB>().attention).bind(limit).fetch_all(self.read_pool()).await?;
        rows.iter()
            .map(|row| {
                let session_id: String = row.try_get("session_id")?;
                let tool_call_id: String = row.try_get("tool_call_id")?;
                let key = format!("{session_id}/{tool_call_id}");
                Ok(AttentionCall {
                    agent_name: row.try_get("agent_name")?,
                    status: row.try_get("status")?,
                    record: stored_json("tool_calls", &key, "record", row.try_get("record")?)?,
                    updated_at: row.try_get("updated_at")?,
                    session_id,
                    tool_call_id,
                })
            })
            .collect()
    }

    async fn call_checks(&self, session_id: &str) -> Result<Vec<CallCheck>, StoreError> {
        let rows =
            sqlx::query(statements::<DB>().checks).bind(session_id).fetch_all(self.read_pool()).await?;
        rows.iter().map(call_check).collect()
    }
}

/// A check mark read from its row.
fn call_check<R: Row>(row: &R) -> Result<CallCheck, StoreError>
where
    for<'r> &'r str: sqlx::ColumnIndex<R>,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Option<String>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    Ok(CallCheck {
        tool_call_id: row.try_get("tool_call_id")?,
        checked_by: row.try_get("checked_by")?,
        note: row.try_get("note")?,
        checked_at: row.try_get("checked_at")?,
    })
}

/// [`AuditLog::mark_checked`] inside its transaction.
#[sqlx_bounds(DB)]
async fn mark_checked_in<DB>(
    tx: &mut Transaction<'_, DB>,
    mark: CheckMark,
) -> Result<CheckReceipt, StoreError>
where
    DB: Dialect,
{
    let sql = statements::<DB>();
    let (sid, call) = (mark.session_id.as_str(), mark.tool_call_id.as_str());
    let Some(row) = sqlx::query(sql.call_status).bind(sid).bind(call).fetch_optional(&mut **tx).await? else {
        return Err(StoreError::ToolCallNotFound {
            session_id: sid.to_owned(),
            tool_call_id: call.to_owned(),
        });
    };
    let status: String = row.try_get("status")?;
    let record: String = row.try_get("record")?;
    if let Some(first) = sqlx::query(sql.check_of).bind(sid).bind(call).fetch_optional(&mut **tx).await? {
        return Ok(CheckReceipt { check: call_check(&first)?, replayed: true });
    }
    if status != "outcome_unknown" && status != "failed" {
        return Err(StoreError::NothingToCheck {
            session_id: sid.to_owned(),
            tool_call_id: call.to_owned(),
            status,
        });
    }
    let checked_at: i64 = sqlx::query(sql.insert_check)
        .bind(sid)
        .bind(call)
        .bind(ROW_VERSION)
        .bind(mark.principal.as_str())
        .bind(mark.note.as_deref())
        .fetch_one(&mut **tx)
        .await?
        .try_get("checked_at")?;
    // The record names the tool and its arguments; the trail keeps them beside the mark.
    let fields: serde_json::Value = serde_json::from_str(&record).unwrap_or_default();
    let entry = NewAuditEntry {
        principal: mark.principal.clone(),
        decision: AuditDecision::Checked,
        reason: mark.note.clone(),
        tool_name: fields["tool_name"].as_str().map(str::to_owned),
        input: fields.get("arguments").and_then(|a| RawValue::from_string(a.to_string()).ok()),
        edited_input: None,
    };
    insert(tx, sid, call, &entry).await?;
    let check = CallCheck {
        tool_call_id: mark.tool_call_id,
        checked_by: mark.principal,
        note: mark.note,
        checked_at,
    };
    Ok(CheckReceipt { check, replayed: false })
}
