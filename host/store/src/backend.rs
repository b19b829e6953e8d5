//! The [`crate::Store`] implementation both backends share, written once as ordinary generic
//! code over the sqlx database: `impl<B: Backend> Store for B`.
//!
//! This module owns the order of statements inside each transaction and the decoding of rows.
//! It does not own the SQL text (the [`crate::dialect`] module renders it once per dialect), nor
//! connections, pools or wake-ups across processes: a backend module supplies those by
//! implementing [`Backend`] (read it first).
//!
//! # Caveats
//!
//! - Lock order in every writing transaction: the session row first ([`Sql::lock_session`]),
//!   then steps. A commit and a concurrent `send_user_message` on PostgreSQL therefore queue on
//!   the session row instead of deadlocking on the in-flight index.
//! - The sqlx bounds (what `DB` must encode and decode) are not in the `where` clauses: Rust does
//!   not carry a trait's `where` clauses to its users, so `#[sqlx_bounds(DB)]`
//!   (`tollgate-store-macros`) adds the one list to each generic item that needs it.

use std::future::Future;
use std::marker::PhantomData;
use std::time::Duration;

use serde_json::value::RawValue;
use sqlx::{Pool, Row, Transaction};
use tollgate_engine::events::{AgentUpgraded, Payload};
use tollgate_store_macros::sqlx_bounds;

use crate::dialect::Dialect;
use crate::error::{check_row_version, stored_json};
pub(crate) use crate::group::{Durability, TxFuture};
use crate::signal::{EventSignal, Signals, WorkSignal};
use crate::*;

/// What a backend module supplies to the shared code: its pools, how it opens a write
/// transaction, its writability probe, and its wake-ups across processes.
pub(crate) trait Backend: Send + Sync + 'static {
    /// The sqlx database, which picks the dialect.
    type Db: Dialect;

    /// Opens a write transaction (SQLite: `BEGIN IMMEDIATE`, so the write lock is held from the
    /// start).
    fn begin_write(&self) -> impl Future<Output = Result<Transaction<'static, Self::Db>, StoreError>> + Send;

    /// The pool for single-statement writes.
    fn write_pool(&self) -> &Pool<Self::Db>;

    /// Runs `write` in a write transaction and commits it (SQLite: in the next group commit,
    /// [`crate::group`]). `write` must neither commit nor roll back: an `Ok` is committed, an
    /// error undoes all it did.
    fn write<T, F>(
        &self,
        durability: Durability,
        write: F,
    ) -> impl Future<Output = Result<T, StoreError>> + Send
    where
        T: Send + 'static,
        F: for<'t, 'c> FnOnce(&'t mut Transaction<'c, Self::Db>) -> TxFuture<'t, T> + Send + 'static;

    /// Runs `write`, one statement, on the writer (PostgreSQL: on a connection of the pool, in
    /// its own implicit transaction; SQLite: in the next group commit).
    fn write_one<T, F>(
        &self,
        durability: Durability,
        write: F,
    ) -> impl Future<Output = Result<T, StoreError>> + Send
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut <Self::Db as sqlx::Database>::Connection) -> TxFuture<'c, T>
            + Send
            + 'static;

    /// The pool for reads.
    fn read_pool(&self) -> &Pool<Self::Db>;

    /// See [`Store::probe_write`].
    fn check_writable(&self) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// This process's wake-ups.
    fn signals(&self) -> &Signals;

    /// Wakes other processes after a commit that queued work (`work`) or appended events
    /// (`events`) to the session; never fails (a lost wake-up is covered by the waiters' poll).
    fn notify_others(&self, session_id: &str, work: bool, events: bool) -> impl Future<Output = ()> + Send;
}

/// [`Backend::write`] in a write transaction of its own ([`Backend::begin_write`]), committed
/// when `write` returns `Ok`: PostgreSQL's, and SQLite's without group commit.
pub(crate) async fn in_own_transaction<B, T, F>(backend: &B, write: F) -> Result<T, StoreError>
where
    B: Backend,
    F: for<'t, 'c> FnOnce(&'t mut Transaction<'c, B::Db>) -> TxFuture<'t, T> + Send + 'static,
{
    let mut tx = backend.begin_write().await?;
    let value = write(&mut tx).await?;
    tx.commit().await?;
    Ok(value)
}

/// [`Backend::write_one`] on a connection of the write pool, in the statement's own transaction:
/// PostgreSQL's, and SQLite's without group commit.
pub(crate) async fn on_write_connection<B, T, F>(backend: &B, write: F) -> Result<T, StoreError>
where
    B: Backend,
    F: for<'c> FnOnce(&'c mut <B::Db as sqlx::Database>::Connection) -> TxFuture<'c, T> + Send + 'static,
{
    let mut conn = backend.write_pool().acquire().await?;
    write(&mut conn).await
}

/// Wakes Workers (`work`) and the session's readers (`events`) after a commit: other processes
/// first, then this one.
pub(crate) async fn wake<B: Backend>(backend: &B, session_id: &str, work: bool, events: bool) {
    backend.notify_others(session_id, work, events).await;
    if work {
        backend.signals().work_ready();
    }
    if events {
        backend.signals().events_appended(session_id);
    }
}

/// The helpers of the `Store` implementation, generic over the database: a namespace (never
/// constructed), so that their bounds are stated once for all of them.
pub(crate) struct Sql<DB>(PhantomData<DB>);

/// An interrupt read under its session's lock ([`Sql::lock_interrupt`]).
pub(crate) struct LockedInterrupt {
    /// The session's next item seq.
    pub(crate) item_seq: i64,
    /// The session's next event seq.
    pub(crate) event_seq: i64,
    /// The interrupt as stored.
    pub(crate) interrupt: Interrupt,
    /// The client key its resolution was made under, if resolved by a client.
    pub(crate) client_key: Option<String>,
    /// The database clock (ms since the epoch) in the same statement.
    pub(crate) db_now: i64,
}

#[sqlx_bounds(DB)]
impl<DB> Sql<DB>
where
    DB: Dialect,
{
    /// Locks the session row (PostgreSQL: row lock; SQLite: the write lock is held) and
    /// returns its next item and event seqs.
    pub(crate) async fn lock_session(
        tx: &mut Transaction<'_, DB>,
        session_id: &str,
    ) -> Result<(i64, i64), StoreError> {
        let row =
            sqlx::query(DB::statements().lock_session).bind(session_id).fetch_optional(&mut **tx).await?;
        let Some(row) = row else {
            return Err(StoreError::SessionNotFound { session_id: session_id.to_owned() });
        };
        check_row_version("sessions", session_id, row.try_get("row_version")?)?;
        Ok((row.try_get("next_item_seq")?, row.try_get("next_event_seq")?))
    }

    /// Locks the session ([`Self::lock_session`]) and reads its interrupt `interrupt_id`, for a
    /// write that decides or changes it (a resolution, an escalation).
    pub(crate) async fn lock_interrupt(
        tx: &mut Transaction<'_, DB>,
        session_id: &str,
        interrupt_id: &str,
    ) -> Result<LockedInterrupt, StoreError> {
        let (item_seq, event_seq) = Self::lock_session(tx, session_id).await?;
        let row = sqlx::query(DB::statements().interrupt_to_resolve)
            .bind(session_id)
            .bind(interrupt_id)
            .fetch_optional(&mut **tx)
            .await?;
        let Some(row) = row else {
            return Err(StoreError::InterruptNotFound {
                session_id: session_id.to_owned(),
                interrupt_id: interrupt_id.to_owned(),
            });
        };
        Ok(LockedInterrupt {
            item_seq,
            event_seq,
            interrupt: Self::decode_interrupt(&row)?,
            client_key: row.try_get("client_key")?,
            db_now: row.try_get("db_now")?,
        })
    }

    /// The session's pending cancel request, read in `tx` (after its lock).
    async fn pending_cancel(
        tx: &mut Transaction<'_, DB>,
        session_id: &str,
    ) -> Result<Option<PendingCancel>, StoreError> {
        let row =
            sqlx::query(DB::statements().pending_cancel).bind(session_id).fetch_optional(&mut **tx).await?;
        row.map(|row| Self::decode_cancel(&row)).transpose().map(Option::flatten)
    }

    /// A `pending_cancel` row's request, if it holds one.
    fn decode_cancel(row: &DB::Row) -> Result<Option<PendingCancel>, StoreError> {
        let requested_by: Option<String> = row.try_get("cancel_requested_by")?;
        let requested_at: Option<i64> = row.try_get("cancel_requested_at")?;
        Ok(requested_by
            .map(|requested_by| PendingCancel { requested_by, requested_at: requested_at.unwrap_or(0) }))
    }

    /// Whether interrupt `interrupt_id` of the session is resolved; `None` when there is none.
    async fn interrupt_resolved(
        tx: &mut Transaction<'_, DB>,
        session_id: &str,
        interrupt_id: &str,
    ) -> Result<Option<bool>, StoreError> {
        let row = sqlx::query(DB::statements().interrupt_to_resolve)
            .bind(session_id)
            .bind(interrupt_id)
            .fetch_optional(&mut **tx)
            .await?;
        row.map(|row| Ok(Sql::<DB>::decode_interrupt(&row)?.resolution.is_some())).transpose()
    }

    async fn append_item(
        tx: &mut Transaction<'_, DB>,
        session_id: &str,
        seq: &mut i64,
        item: &NewItem,
    ) -> Result<Option<i64>, StoreError> {
        let done = sqlx::query(DB::statements().append_item)
            .bind(session_id)
            .bind(*seq)
            .bind(ROW_VERSION)
            .bind(item.kind.as_str())
            .bind(item.uuid.as_deref())
            .bind(item.turn_id.as_deref())
            .bind(item.body.get())
            .execute(&mut **tx)
            .await?;
        if DB::rows_affected(&done) == 1 {
            *seq += 1;
            Ok(Some(*seq - 1))
        } else {
            Ok(None)
        }
    }

    /// An item row of `session_id`.
    fn decode_item(session_id: &str, row: &DB::Row) -> Result<Item, StoreError> {
        let seq: i64 = row.try_get("seq")?;
        let key = key2(session_id, seq);
        check_row_version("items", &key, row.try_get("row_version")?)?;
        Ok(Item {
            seq,
            kind: row.try_get("kind")?,
            uuid: row.try_get("uuid")?,
            turn_id: row.try_get("turn_id")?,
            body: stored_json("items", &key, "body", row.try_get("body")?)?,
            created_at: row.try_get("created_at")?,
        })
    }

    pub(crate) async fn append_event(
        tx: &mut Transaction<'_, DB>,
        session_id: &str,
        seq: &mut i64,
        event: &NewEvent,
        step: Option<(i64, i64)>,
    ) -> Result<i64, StoreError> {
        sqlx::query(DB::statements().append_event)
            .bind(session_id)
            .bind(*seq)
            .bind(ROW_VERSION)
            .bind(event.kind.as_str())
            .bind(event.payload.get())
            .bind(step.map(|s| s.0))
            .bind(step.map(|s| s.1))
            .execute(&mut **tx)
            .await?;
        *seq += 1;
        Ok(*seq - 1)
    }

    /// Inserts a step. `or_skip`: skip it (Ok(None)) when another step is in flight, instead of
    /// failing with `StepInFlight`.
    async fn insert_step(
        tx: &mut Transaction<'_, DB>,
        session_id: &str,
        step: &NewStep,
        or_skip: bool,
    ) -> Result<Option<i64>, StoreError> {
        let sql = DB::statements();
        if let Some((after, kind)) = &step.only_if_items_after {
            let found = sqlx::query(sql.item_after)
                .bind(session_id)
                .bind(*after)
                .bind(kind.as_str())
                .fetch_optional(&mut **tx)
                .await?;
            if found.is_none() {
                return Ok(None);
            }
        }
        let (state, interrupt_id, delay) = match &step.start {
            StepStart::Now => ("queued", None, Some(0)),
            StepStart::After(d) => ("queued", None, Some(ms(*d))),
            StepStart::OnInterrupt(id) => ("waiting", Some(id.as_str()), None),
        };
        let row = sqlx::query(if or_skip { sql.insert_step_or_skip } else { sql.insert_step })
            .bind(session_id)
            .bind(ROW_VERSION)
            .bind(step.kind.as_str())
            .bind(step.payload.get())
            .bind(state)
            .bind(interrupt_id)
            .bind(delay)
            .fetch_optional(&mut **tx)
            .await
            .map_err(|e| unique_or(e, || StoreError::StepInFlight { session_id: session_id.to_owned() }))?;
        match row {
            Some(row) => Ok(Some(row.try_get("step_id")?)),
            None => Ok(None),
        }
    }

    pub(crate) async fn save_seqs(
        tx: &mut Transaction<'_, DB>,
        session_id: &str,
        item_seq: i64,
        event_seq: i64,
        update: &SessionUpdate,
    ) -> Result<(), StoreError> {
        if let Some(run_state) = &update.run_state {
            check_run_state(run_state)?;
        }
        sqlx::query(DB::statements().save_session)
            .bind(session_id)
            .bind(item_seq)
            .bind(event_seq)
            .bind(update.status.as_deref())
            .bind(update.run_state.as_ref().map(|r| r.get()))
            .bind(update.add_usage.input_tokens)
            .bind(update.add_usage.cached_input_tokens)
            .bind(update.add_usage.output_tokens)
            .bind(update.add_usage.model_calls)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    fn decode_agent(row: &DB::Row) -> Result<Option<AgentDigest>, StoreError> {
        let digest: Option<String> = row.try_get("agent_digest")?;
        let pinned: bool = row.try_get("agent_pinned")?;
        Ok(digest.map(|digest| AgentDigest { digest, pinned }))
    }

    /// The claim a claiming statement returned as `row` (none: nothing was due).
    fn claimed(row: Option<&DB::Row>, worker_id: &str) -> Result<Option<Claimed>, StoreError> {
        let Some(row) = row else { return Ok(None) };
        let step = Self::decode_step(row)?;
        Ok(Some(Claimed {
            fence: step.fence,
            lease_until: step.due_at.unwrap_or_default(),
            worker_id: worker_id.to_owned(),
            step,
        }))
    }

    fn decode_step(row: &DB::Row) -> Result<Step, StoreError> {
        let step_id: i64 = row.try_get("step_id")?;
        let key = step_id.to_string();
        check_row_version("steps", &key, row.try_get("row_version")?)?;
        let state: String = row.try_get("state")?;
        let state = StepState::parse(&state).ok_or_else(|| StoreError::Corrupt {
            table: "steps",
            key: key.clone(),
            detail: format!("unknown state `{state}`"),
        })?;
        let output: Option<String> = row.try_get("output")?;
        Ok(Step {
            step_id,
            session_id: row.try_get("session_id")?,
            kind: row.try_get("kind")?,
            payload: stored_json("steps", &key, "payload", row.try_get("payload")?)?,
            state,
            attempt: row.try_get("attempt")?,
            fence: row.try_get("fence")?,
            lost: row.try_get("lost")?,
            due_at: row.try_get("due_at")?,
            interrupt_id: row.try_get("interrupt_id")?,
            output: output.map(|o| stored_json("steps", &key, "output", o)).transpose()?,
            created_at: row.try_get("created_at")?,
        })
    }

    /// A step's [`Commit`], in `tx`: the fence checked, then everything it changes; the receipt
    /// and whether it queued work.
    pub(crate) async fn commit_in(
        tx: &mut Transaction<'_, DB>,
        claimed: &Claimed,
        commit: &Commit,
    ) -> Result<(CommitReceipt, bool), StoreError> {
        let sql = DB::statements();
        let sid = claimed.step.session_id.as_str();
        let step_id = claimed.step.step_id;
        let lost = || StoreError::LeaseLost { step_id, fence: claimed.fence };
        let (mut item_seq, mut event_seq) = Self::lock_session(tx, sid).await?;
        let (first_item_seq, first_event_seq) = (item_seq, event_seq);
        let fenced = match &commit.finish {
            Finish::Done(output) => {
                sqlx::query(sql.finish_done).bind(step_id).bind(claimed.fence).bind(output.get())
            }
            Finish::Retry(delay) => {
                sqlx::query(sql.finish_retry).bind(step_id).bind(claimed.fence).bind(ms(*delay))
            }
            Finish::Keep => sqlx::query(sql.finish_keep).bind(step_id).bind(claimed.fence),
        };
        if DB::rows_affected(&fenced.execute(&mut **tx).await?) != 1 {
            return Err(lost());
        }
        if !matches!(commit.finish, Finish::Keep) {
            // The claim ends: what its segment streamed is in this commit's items now.
            sqlx::query(sql.delete_live_text).bind(sid).bind(step_id).execute(&mut **tx).await?;
        }
        let mut receipt = CommitReceipt::default();
        for item in &commit.items {
            receipt.item_seqs.push(Self::append_item(tx, sid, &mut item_seq, item).await?);
        }
        for message in &commit.messages {
            let Some(Some(item_seq)) = receipt.item_seqs.get(message.item) else {
                continue; // its item was a repeat, stored before, and so was the message
            };
            if let Some(key) = message.merge_key.as_deref() {
                let merged = sqlx::query(sql.merge_message)
                    .bind(sid)
                    .bind(key)
                    .bind(message.text.as_str())
                    .bind(*item_seq)
                    .execute(&mut **tx)
                    .await?;
                if DB::rows_affected(&merged) == 1 {
                    continue;
                }
            }
            sqlx::query(sql.insert_message)
                .bind(sid)
                .bind(ROW_VERSION)
                .bind(message.role.as_str())
                .bind(message.merge_key.as_deref())
                .bind(message.text.as_str())
                .bind(*item_seq)
                .bind(message.images.as_deref())
                .execute(&mut **tx)
                .await?;
        }
        if let Some(chunk) = &commit.transcript {
            let mut lines = String::new();
            let mut last_seq = None;
            for (index, text) in &chunk.lines {
                // An item that was a repeat was stored before, and so were its lines.
                if let Some(Some(item_seq)) = receipt.item_seqs.get(*index) {
                    lines.push_str(text);
                    last_seq = Some(*item_seq);
                }
            }
            if let Some(item_seq) = last_seq.filter(|_| !lines.is_empty()) {
                sqlx::query(sql.insert_transcript_chunk)
                    .bind(sid)
                    .bind(item_seq)
                    .bind(ROW_VERSION)
                    .bind(chunk.cli_session_id.as_str())
                    .bind(lines.as_str())
                    .execute(&mut **tx)
                    .await?;
            }
        }
        for call in &commit.tool_calls {
            sqlx::query(sql.upsert_tool_call)
                .bind(sid)
                .bind(call.tool_call_id.as_str())
                .bind(ROW_VERSION)
                .bind(call.status.as_str())
                .bind(call.record.get())
                .execute(&mut **tx)
                .await?;
        }
        for interrupt in &commit.interrupts {
            sqlx::query(sql.insert_interrupt)
                .bind(sid)
                .bind(interrupt.interrupt_id.as_str())
                .bind(ROW_VERSION)
                .bind(interrupt.request.get())
                .bind(interrupt.deadline.map(ms))
                .execute(&mut **tx)
                .await
                .map_err(|e| {
                    unique_or(e, || StoreError::Invalid {
                        what: format!("interrupt `{}` already exists in `{sid}`", interrupt.interrupt_id),
                    })
                })?;
        }
        let mut close_events = Vec::new();
        for close in &commit.close_interrupts {
            if Self::interrupt_resolved(tx, sid, &close.interrupt_id).await? != Some(false) {
                continue;
            }
            close_events.extend(&close.events);
            sqlx::query(sql.resolve_interrupt)
                .bind(sid)
                .bind(close.interrupt_id.as_str())
                .bind(close.resolution.get())
                .bind(crate::types::CLOSED_BY_TOLLGATE)
                .execute(&mut **tx)
                .await?;
        }
        let mut queued = matches!(commit.finish, Finish::Retry(_));
        let clears_cancel = matches!(commit.cancel, CancelChange::Clear { .. });
        let mut session_update = commit.session.clone();
        for step in &commit.steps {
            let id = Self::insert_step(tx, sid, step, false).await?;
            queued |= id.is_some() && !matches!(step.start, StepStart::OnInterrupt(_));
            // Waiting on an interrupt decided already (a batch's, decided ahead of time while the
            // segment ran): nothing will wake it, so it is queued now.
            if let (Some(_), StepStart::OnInterrupt(interrupt_id)) = (id, &step.start)
                && Self::interrupt_resolved(tx, sid, interrupt_id).await? == Some(true)
            {
                sqlx::query(sql.queue_waiting_step)
                    .bind(sid)
                    .bind(interrupt_id.as_str())
                    .fetch_optional(&mut **tx)
                    .await?;
                queued = true;
            }
            if id.is_some() && step.session_status.is_some() {
                session_update.status.clone_from(&step.session_status);
            }
            receipt.step_ids.push(id);
        }
        // A turn being cancelled waits on nobody: its step is queued, so a Worker cancels it.
        let waits = commit.steps.iter().any(|step| matches!(step.start, StepStart::OnInterrupt(_)));
        if waits && !clears_cancel && Self::pending_cancel(tx, sid).await?.is_some() {
            let woken = sqlx::query(sql.queue_waiting_steps).bind(sid).fetch_all(&mut **tx).await?;
            queued |= !woken.is_empty();
        }
        if let CancelChange::Clear { audit } = &commit.cancel {
            sqlx::query(sql.clear_cancel).bind(sid).execute(&mut **tx).await?;
            if let Some((about, entry)) = audit {
                crate::audit::check_entry(entry)?;
                crate::audit::insert(tx, sid, about, entry).await?;
            }
        }
        for event in close_events {
            Self::append_event(tx, sid, &mut event_seq, event, Some((step_id, claimed.fence))).await?;
        }
        for event in &commit.events {
            let seq =
                Self::append_event(tx, sid, &mut event_seq, event, Some((step_id, claimed.fence))).await?;
            receipt.event_seqs.push(seq);
        }
        let session_changed = session_update.status.is_some()
            || session_update.run_state.is_some()
            || session_update.add_usage != Usage::default();
        if session_changed || item_seq != first_item_seq || event_seq != first_event_seq {
            Self::save_seqs(tx, sid, item_seq, event_seq, &session_update).await?;
        }
        Ok((receipt, queued))
    }

    pub(crate) fn decode_interrupt(row: &DB::Row) -> Result<Interrupt, StoreError> {
        let session_id: String = row.try_get("session_id")?;
        let interrupt_id: String = row.try_get("interrupt_id")?;
        let key = key2(&session_id, &interrupt_id);
        check_row_version("interrupts", &key, row.try_get("row_version")?)?;
        let resolution: Option<String> = row.try_get("resolution")?;
        Ok(Interrupt {
            request: stored_json("interrupts", &key, "request", row.try_get("request")?)?,
            resolution: resolution.map(|r| stored_json("interrupts", &key, "resolution", r)).transpose()?,
            created_at: row.try_get("created_at")?,
            resolved_at: row.try_get("resolved_at")?,
            deadline_at: row.try_get("deadline_at")?,
            escalated_at: row.try_get("escalated_at")?,
            approvals: match row.try_get::<Option<String>, _>("approvals")? {
                None => Vec::new(),
                Some(text) => serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
                    table: "interrupts",
                    key: key.clone(),
                    detail: format!("`approvals` is not a list of approvals: {e}"),
                })?,
            },
            session_id,
            interrupt_id,
        })
    }
}

#[sqlx_bounds(DB)]
#[async_trait::async_trait]
impl<B, DB> Store for B
where
    B: Backend<Db = DB>,
    DB: Dialect + crate::outbox::OutboxDialect,
{
    async fn create_session(&self, session: NewSession) -> Result<bool, StoreError> {
        check_new_session(&session)?;
        let done = sqlx::query(DB::statements().create_session)
            .bind(session.session_id.as_str())
            .bind(ROW_VERSION)
            .bind(session.status.as_str())
            .bind(session.run_state.get())
            .bind(session.agent.as_ref().map(|a| a.digest.as_str()))
            .bind(session.agent.as_ref().is_some_and(|a| a.pinned))
            .bind(session.agent_name.as_deref())
            .execute(self.write_pool())
            .await?;
        Ok(DB::rows_affected(&done) == 1)
    }

    async fn session(&self, session_id: &str) -> Result<Option<Session>, StoreError> {
        let row =
            sqlx::query(DB::statements().session).bind(session_id).fetch_optional(self.read_pool()).await?;
        let Some(row) = row else { return Ok(None) };
        check_row_version("sessions", session_id, row.try_get("row_version")?)?;
        let run_state = stored_json("sessions", session_id, "run_state", row.try_get("run_state")?)?;
        check_run_state(&run_state).map_err(|_| StoreError::Corrupt {
            table: "sessions",
            key: session_id.to_owned(),
            detail: "run_state has no integer `version`".into(),
        })?;
        Ok(Some(Session {
            session_id: row.try_get("session_id")?,
            status: row.try_get("status")?,
            run_state,
            usage: Usage {
                input_tokens: row.try_get("usage_input_tokens")?,
                cached_input_tokens: row.try_get("usage_cached_input_tokens")?,
                output_tokens: row.try_get("usage_output_tokens")?,
                model_calls: row.try_get("usage_model_calls")?,
            },
            next_item_seq: row.try_get("next_item_seq")?,
            next_event_seq: row.try_get("next_event_seq")?,
            created_at: row.try_get("created_at")?,
            updated_at: row.try_get("updated_at")?,
            agent: Sql::<DB>::decode_agent(&row)?,
            agent_name: row.try_get("agent_name")?,
        }))
    }

    async fn send_user_message(&self, message: UserMessage) -> Result<MessageReceipt, StoreError> {
        send(self, message, None, &[]).await
    }

    async fn resolve_interrupt(&self, r: Resolution) -> Result<ResolveReceipt, StoreError> {
        resolve(self, r, None).await
    }

    async fn claim(&self, worker_id: &str, lease: Duration) -> Result<Option<Claimed>, StoreError> {
        let (worker, lease) = (worker_id.to_owned(), ms(lease));
        self.write_one(Durability::Lazy, move |conn| {
            Box::pin(async move {
                let row = sqlx::query(DB::statements().claim)
                    .bind(worker.as_str())
                    .bind(lease)
                    .bind(ROW_VERSION)
                    .fetch_optional(&mut *conn)
                    .await?;
                // A row that does not decode is still claimed (kept out of the queue until its
                // lease ends), so it cannot stand before every other step.
                Ok(Sql::<DB>::claimed(row.as_ref(), &worker))
            })
        })
        .await?
    }

    async fn claim_for(
        &self,
        worker_id: &str,
        lease: Duration,
        scope: &ClaimScope,
    ) -> Result<Option<Claimed>, StoreError> {
        for digest in &scope.digests {
            check_digest(digest)?;
        }
        for name in &scope.agents {
            check_agent_name(name).map_err(|what| StoreError::Invalid { what })?;
        }
        // "" stands for unpinned.
        let unpinned = (!scope.pinned_only).then_some("");
        let pins: Vec<&str> = unpinned.into_iter().chain(scope.digests.iter().map(String::as_str)).collect();
        let pins = serde_json::to_string(&pins).expect("strings serialize");
        let agents = serde_json::to_string(&scope.agents).expect("strings serialize");
        let (worker, lease) = (worker_id.to_owned(), ms(lease));
        self.write_one(Durability::Lazy, move |conn| {
            Box::pin(async move {
                let row = sqlx::query(DB::statements().claim_for)
                    .bind(worker.as_str())
                    .bind(lease)
                    .bind(ROW_VERSION)
                    .bind(agents.as_str())
                    .bind(pins.as_str())
                    .fetch_optional(&mut *conn)
                    .await?;
                // A row that does not decode is still claimed (kept out of the queue until its
                // lease ends), so it cannot stand before every other step.
                Ok(Sql::<DB>::claimed(row.as_ref(), &worker))
            })
        })
        .await?
    }

    async fn upgrade_session(&self, session_id: &str, to: &str) -> Result<UpgradeReceipt, StoreError> {
        check_digest(to)?;
        let sql = DB::statements();
        let sid = session_id;
        let mut tx = self.begin_write().await?;
        let (item_seq, mut event_seq) = Sql::lock_session(&mut tx, sid).await?;
        let row = sqlx::query(sql.agent_of_session).bind(sid).fetch_one(&mut *tx).await?;
        let from = Sql::<DB>::decode_agent(&row)?;
        let name: Option<String> = row.try_get("agent_name")?;
        let target = AgentDigest { digest: to.to_owned(), pinned: true };
        let step = sqlx::query(sql.busy_step).bind(sid).fetch_optional(&mut *tx).await?;
        let mut queued = false;
        if let Some(step) = step {
            let (id, kind, state, attempt): (i64, String, String, i64) = (
                step.try_get("step_id")?,
                step.try_get("kind")?,
                step.try_get("state")?,
                step.try_get("attempt")?,
            );
            let busy = |detail: String| StoreError::SessionBusy { session_id: sid.to_owned(), detail };
            match state.as_str() {
                "claimed" => return Err(busy(format!("step {id} ({kind}) is claimed"))),
                "queued" if attempt > 0 => {
                    return Err(busy(format!(
                        "step {id} ({kind}) ran {attempt} attempt(s) and is queued again"
                    )));
                }
                "queued" => queued = true,
                _ => {}
            }
        }
        let owner = crate::agents::pin_owner(&mut tx, sid, name.as_deref(), to).await?;
        if from.as_ref() == Some(&target) && name.as_deref() == Some(owner.as_str()) {
            return Ok(UpgradeReceipt { from, to: target, event_seq: None });
        }
        sqlx::query(sql.pin_session)
            .bind(sid)
            .bind(to)
            .bind(true)
            .bind(owner.as_str())
            .execute(&mut *tx)
            .await?;
        sqlx::query(sql.pin_steps).bind(sid).bind(to).bind(owner.as_str()).execute(&mut *tx).await?;
        let upgraded = Payload::AgentUpgraded(AgentUpgraded {
            from: from.as_ref().map(|a| a.digest.clone()),
            from_pinned: from.as_ref().is_some_and(|a| a.pinned),
            to: to.to_owned(),
        });
        let event = NewEvent {
            kind: upgraded.kind().as_str().to_owned(),
            payload: RawValue::from_string(upgraded.to_value().to_string()).expect("JSON"),
        };
        let seq = Sql::append_event(&mut tx, sid, &mut event_seq, &event, None).await?;
        Sql::save_seqs(&mut tx, sid, item_seq, event_seq, &SessionUpdate::default()).await?;
        tx.commit().await?;
        wake(self, sid, queued, true).await;
        Ok(UpgradeReceipt { from, to: target, event_seq: Some(seq) })
    }

    async fn heartbeat(&self, claimed: &Claimed, lease: Duration) -> Result<i64, StoreError> {
        let (step_id, fence, lease) = (claimed.step.step_id, claimed.fence, ms(lease));
        self.write_one(Durability::Lazy, move |conn| {
            Box::pin(async move {
                let row = sqlx::query(DB::statements().heartbeat)
                    .bind(step_id)
                    .bind(fence)
                    .bind(lease)
                    .fetch_optional(&mut *conn)
                    .await?;
                match row {
                    Some(row) => Ok(row.try_get("due_at").map_err(StoreError::from)),
                    None => Err(StoreError::LeaseLost { step_id, fence }),
                }
            })
        })
        .await?
    }

    async fn commit(&self, claimed: &Claimed, commit: Commit) -> Result<CommitReceipt, StoreError> {
        let sid = claimed.step.session_id.clone();
        let events = !commit.events.is_empty();
        let claimed = claimed.clone();
        let (receipt, queued) = self
            .write(Durability::Synced, move |tx| {
                Box::pin(async move { Sql::commit_in(tx, &claimed, &commit).await })
            })
            .await?;
        wake(self, &sid, queued, events).await;
        Ok(receipt)
    }

    async fn release(&self, claimed: &Claimed) -> Result<(), StoreError> {
        let (step_id, fence) = (claimed.step.step_id, claimed.fence);
        let sid: String = self
            .write_one(Durability::Lazy, move |conn| {
                Box::pin(async move {
                    let row = sqlx::query(DB::statements().release)
                        .bind(step_id)
                        .bind(fence)
                        .fetch_optional(&mut *conn)
                        .await?;
                    let Some(row) = row else { return Err(StoreError::LeaseLost { step_id, fence }) };
                    Ok(row.try_get("session_id").map_err(StoreError::from))
                })
            })
            .await??;
        wake(self, &sid, true, false).await;
        Ok(())
    }

    async fn fork_session(&self, fork: NewFork) -> Result<Lineage, StoreError> {
        check_run_state(&fork.run_state)?;
        if let Some(agent) = &fork.agent {
            check_digest(&agent.digest)?;
        }
        if let Some(name) = &fork.agent_name {
            check_agent_name(name).map_err(|what| StoreError::Invalid { what })?;
        }
        let entry = crate::audit::NewAuditEntry {
            principal: fork.forked_by.clone(),
            decision: AuditDecision::Forked,
            reason: Some(format!(
                "forked from session {} at turn {}{}",
                fork.parent_id,
                fork.turn,
                if fork.dry { " (dry: writes answered from its records or refused)" } else { "" }
            )),
            tool_name: None,
            input: None,
            edited_input: None,
        };
        crate::audit::check_entry(&entry)?;
        if fork.turn < 1 || fork.through_item_seq < 0 {
            return Err(StoreError::Invalid {
                what: format!(
                    "a fork is taken at a turn from 1 and an item seq from 0, not turn {} and item {}",
                    fork.turn, fork.through_item_seq
                ),
            });
        }
        let sql = DB::statements();
        let (fid, pid, cut) = (fork.session_id.as_str(), fork.parent_id.as_str(), fork.through_item_seq);
        let mut tx = self.begin_write().await?;
        let Some(parent) = sqlx::query(sql.fork_source).bind(pid).fetch_optional(&mut *tx).await? else {
            return Err(StoreError::SessionNotFound { session_id: pid.to_owned() });
        };
        check_row_version("sessions", pid, parent.try_get("row_version")?)?;
        let next_item_seq: i64 = parent.try_get("next_item_seq")?;
        if cut >= next_item_seq {
            return Err(StoreError::Invalid {
                what: format!(
                    "session `{pid}` has {} items: a fork cannot inherit up to item {cut}",
                    next_item_seq - 1
                ),
            });
        }
        // The parent's own rows start after its own cut, if it is a fork itself.
        let base = sqlx::query(sql.lineage).bind(pid).fetch_optional(&mut *tx).await?;
        let (base_item, base_message): (i64, i64) = match &base {
            Some(row) => (row.try_get("through_item_seq")?, row.try_get("through_message_seq")?),
            None => (0, 0),
        };
        let message_cut: i64 =
            sqlx::query(sql.message_cut).bind(pid).bind(cut).fetch_one(&mut *tx).await?.try_get("n")?;
        let created = sqlx::query(sql.create_fork_session)
            .bind(fid)
            .bind(ROW_VERSION)
            .bind("idle")
            .bind(fork.run_state.get())
            .bind(fork.agent.as_ref().map(|a| a.digest.as_str()))
            .bind(fork.agent.as_ref().is_some_and(|a| a.pinned))
            .bind(fork.agent_name.as_deref())
            .bind(fork.forked_by.as_str())
            .bind(cut + 1)
            .bind(parent.try_get::<i64, _>("unprojected")?)
            .bind(parent.try_get::<i64, _>("unchunked")?)
            .execute(&mut *tx)
            .await?;
        if DB::rows_affected(&created) != 1 {
            return Err(StoreError::SessionExists { session_id: fid.to_owned() });
        }
        sqlx::query(sql.inherit_ranges)
            .bind(fid)
            .bind(pid)
            .bind(cut)
            .bind(message_cut)
            .bind(ROW_VERSION)
            .execute(&mut *tx)
            .await?;
        if cut > base_item {
            sqlx::query(sql.insert_range)
                .bind(fid)
                .bind(cut)
                .bind(base_item)
                .bind(ROW_VERSION)
                .bind(pid)
                .bind(base_message)
                .bind(message_cut.max(base_message))
                .execute(&mut *tx)
                .await?;
        }
        let created_at: i64 = sqlx::query(sql.insert_fork)
            .bind(fid)
            .bind(pid)
            .bind(ROW_VERSION)
            .bind(fork.turn)
            .bind(cut)
            .bind(message_cut)
            .bind(fork.dry)
            .bind(fork.forked_by.as_str())
            .fetch_one(&mut *tx)
            .await?
            .try_get("created_at")?;
        crate::audit::insert(&mut tx, fid, &format!("turn-{}", fork.turn), &entry).await?;
        tx.commit().await?;
        Ok(Lineage {
            session_id: fork.session_id,
            parent_id: fork.parent_id,
            turn: fork.turn,
            through_item_seq: cut,
            through_message_seq: message_cut,
            dry: fork.dry,
            forked_by: fork.forked_by,
            created_at,
        })
    }

    async fn lineage(&self, session_id: &str) -> Result<Option<Lineage>, StoreError> {
        let row =
            sqlx::query(DB::statements().lineage).bind(session_id).fetch_optional(self.read_pool()).await?;
        let Some(row) = row else { return Ok(None) };
        check_row_version("forks", session_id, row.try_get("row_version")?)?;
        Ok(Some(Lineage {
            session_id: row.try_get("session_id")?,
            parent_id: row.try_get("parent_id")?,
            turn: row.try_get("turn")?,
            through_item_seq: row.try_get("through_item_seq")?,
            through_message_seq: row.try_get("through_message_seq")?,
            dry: row.try_get("dry")?,
            forked_by: row.try_get("forked_by")?,
            created_at: row.try_get("created_at")?,
        }))
    }

    async fn step(&self, step_id: i64) -> Result<Option<Step>, StoreError> {
        let row = sqlx::query(DB::statements().step).bind(step_id).fetch_optional(self.read_pool()).await?;
        row.map(|r| Sql::<DB>::decode_step(&r)).transpose()
    }

    async fn read_items(&self, session_id: &str, after: i64, limit: i64) -> Result<Vec<Item>, StoreError> {
        let rows = sqlx::query(DB::statements().items)
            .bind(session_id)
            .bind(after)
            .bind(limit)
            .fetch_all(self.read_pool())
            .await?;
        rows.iter().map(|row| Sql::<DB>::decode_item(session_id, row)).collect()
    }

    async fn read_items_of_kind(
        &self,
        session_id: &str,
        kind: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<Item>, StoreError> {
        let rows = sqlx::query(DB::statements().items_of_kind)
            .bind(session_id)
            .bind(kind)
            .bind(after)
            .bind(limit)
            .fetch_all(self.read_pool())
            .await?;
        rows.iter().map(|row| Sql::<DB>::decode_item(session_id, row)).collect()
    }

    async fn read_messages(
        &self,
        session_id: &str,
        before: Option<i64>,
        limit: i64,
    ) -> Result<MessagePage, StoreError> {
        let unprojected = sqlx::query(DB::statements().unprojected)
            .bind(session_id)
            .fetch_optional(self.read_pool())
            .await?;
        let Some(unprojected) = unprojected else { return Ok(MessagePage::default()) };
        if unprojected.try_get::<i64, _>("unprojected")? != 0 {
            return Ok(MessagePage { projected: false, messages: Vec::new() });
        }
        let rows = sqlx::query(DB::statements().messages)
            .bind(session_id)
            .bind(before.unwrap_or(i64::MAX))
            .bind(limit)
            .fetch_all(self.read_pool())
            .await?;
        let mut messages = rows
            .iter()
            .map(|row| {
                let seq: i64 = row.try_get("seq")?;
                check_row_version("messages", &key2(session_id, seq), row.try_get("row_version")?)?;
                Ok(StoredMessage {
                    seq,
                    role: row.try_get("role")?,
                    text: row.try_get("text")?,
                    images: row.try_get("images")?,
                    item_seq: row.try_get("item_seq")?,
                    created_at: row.try_get("created_at")?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        messages.reverse();
        Ok(MessagePage { projected: true, messages })
    }

    async fn read_transcript(&self, session_id: &str) -> Result<StoredTranscript, StoreError> {
        let unchunked =
            sqlx::query(DB::statements().unchunked).bind(session_id).fetch_optional(self.read_pool()).await?;
        let Some(unchunked) = unchunked else { return Ok(StoredTranscript::default()) };
        if unchunked.try_get::<i64, _>("unchunked")? != 0 {
            return Ok(StoredTranscript::default());
        }
        let rows = sqlx::query(DB::statements().transcript_chunks)
            .bind(session_id)
            .fetch_all(self.read_pool())
            .await?;
        let mut transcript = StoredTranscript { chunked: true, cli_session_id: None, chunks: Vec::new() };
        transcript.chunks.reserve(rows.len());
        for row in &rows {
            let seq: i64 = row.try_get("item_seq")?;
            check_row_version("transcript_chunks", &key2(session_id, seq), row.try_get("row_version")?)?;
            transcript.cli_session_id = Some(row.try_get("cli_session_id")?);
            transcript.chunks.push(row.try_get("lines")?);
        }
        Ok(transcript)
    }

    async fn read_events(&self, session_id: &str, after: i64, limit: i64) -> Result<Vec<Event>, StoreError> {
        let rows = sqlx::query(DB::statements().events)
            .bind(session_id)
            .bind(after)
            .bind(limit)
            .fetch_all(self.read_pool())
            .await?;
        rows.iter()
            .map(|row| {
                let seq: i64 = row.try_get("seq")?;
                let key = key2(session_id, seq);
                check_row_version("events", &key, row.try_get("row_version")?)?;
                let step_id: Option<i64> = row.try_get("step_id")?;
                let fence: Option<i64> = row.try_get("fence")?;
                Ok(Event {
                    seq,
                    kind: row.try_get("kind")?,
                    payload: stored_json("events", &key, "payload", row.try_get("payload")?)?,
                    step: step_id.zip(fence),
                    created_at: row.try_get("created_at")?,
                })
            })
            .collect()
    }

    async fn put_live_text(&self, claimed: &Claimed, live: &NewLiveText) -> Result<(), StoreError> {
        let written = sqlx::query(DB::statements().put_live_text)
            .bind(claimed.step.step_id)
            .bind(claimed.fence)
            .bind(ROW_VERSION)
            .bind(live.turn_id.as_str())
            .bind(live.attempt)
            .bind(live.text.as_str())
            .bind(live.offset)
            .bind(live.from_seq)
            .execute(self.write_pool())
            .await?;
        if DB::rows_affected(&written) != 1 {
            return Err(StoreError::LeaseLost { step_id: claimed.step.step_id, fence: claimed.fence });
        }
        wake(self, &claimed.step.session_id, false, true).await;
        Ok(())
    }

    async fn live_text(&self, session_id: &str) -> Result<Option<LiveText>, StoreError> {
        let row =
            sqlx::query(DB::statements().live_text).bind(session_id).fetch_optional(self.read_pool()).await?;
        let Some(row) = row else { return Ok(None) };
        check_row_version("live_text", session_id, row.try_get("row_version")?)?;
        Ok(Some(LiveText {
            step_id: row.try_get("step_id")?,
            fence: row.try_get("fence")?,
            turn_id: row.try_get("turn_id")?,
            attempt: row.try_get("attempt")?,
            offset: row.try_get("text_offset")?,
            from_seq: row.try_get("from_seq")?,
            text: row.try_get("text")?,
            updated_at: row.try_get("updated_at")?,
        }))
    }

    async fn interrupt(&self, session_id: &str, interrupt_id: &str) -> Result<Option<Interrupt>, StoreError> {
        let row = sqlx::query(DB::statements().interrupt)
            .bind(session_id)
            .bind(interrupt_id)
            .fetch_optional(self.read_pool())
            .await?;
        row.map(|r| Sql::<DB>::decode_interrupt(&r)).transpose()
    }

    async fn list_sessions(
        &self,
        status: Option<&str>,
        after: &str,
        limit: i64,
    ) -> Result<Vec<SessionSummary>, StoreError> {
        let rows = sqlx::query(DB::statements().sessions)
            .bind(after)
            .bind(status)
            .bind(limit)
            .fetch_all(self.read_pool())
            .await?;
        rows.iter()
            .map(|row| {
                let session_id: String = row.try_get("session_id")?;
                check_row_version("sessions", &session_id, row.try_get("row_version")?)?;
                Ok(SessionSummary {
                    session_id,
                    status: row.try_get("status")?,
                    created_at: row.try_get("created_at")?,
                    updated_at: row.try_get("updated_at")?,
                    agent: Sql::<DB>::decode_agent(row)?,
                    agent_name: row.try_get("agent_name")?,
                })
            })
            .collect()
    }

    async fn open_interrupts_by_agent(&self) -> Result<Vec<(String, i64)>, StoreError> {
        let rows = sqlx::query(DB::statements().open_interrupts_by_agent).fetch_all(self.read_pool()).await?;
        rows.iter().map(|row| Ok((row.try_get("agent")?, row.try_get("n")?))).collect()
    }

    async fn count_open_interrupts(&self) -> Result<i64, StoreError> {
        let row = sqlx::query(DB::statements().count_open_interrupts).fetch_one(self.read_pool()).await?;
        Ok(row.try_get("n")?)
    }

    async fn open_interrupts(
        &self,
        after: Option<&InterruptCursor>,
        limit: i64,
    ) -> Result<Vec<Interrupt>, StoreError> {
        let (created_at, session_id, interrupt_id) = match after {
            Some(cursor) => (cursor.created_at, cursor.session_id.as_str(), cursor.interrupt_id.as_str()),
            None => (i64::MIN, "", ""),
        };
        let rows = sqlx::query(DB::statements().open_interrupts)
            .bind(created_at)
            .bind(session_id)
            .bind(interrupt_id)
            .bind(limit)
            .fetch_all(self.read_pool())
            .await?;
        rows.iter().map(Sql::<DB>::decode_interrupt).collect()
    }

    async fn request_cancel(&self, request: CancelRequest) -> Result<CancelReceipt, StoreError> {
        let sql = DB::statements();
        let sid = request.session_id.as_str();
        let by = request.requested_by.as_str();
        if by.is_empty() || by.len() > crate::audit::MAX_AUDIT_TEXT {
            return Err(StoreError::Invalid {
                what: format!(
                    "who asks to cancel must be 1 to {} bytes, not {} bytes",
                    crate::audit::MAX_AUDIT_TEXT,
                    by.len()
                ),
            });
        }
        let mut tx = self.begin_write().await?;
        let (item_seq, mut event_seq) = Sql::lock_session(&mut tx, sid).await?;
        let Some(step) = sqlx::query(sql.busy_step).bind(sid).fetch_optional(&mut *tx).await? else {
            return Err(StoreError::NothingToCancel { session_id: sid.to_owned() });
        };
        let (step_id, state): (i64, String) = (step.try_get("step_id")?, step.try_get("state")?);
        if let Some(pending) = Sql::pending_cancel(&mut tx, sid).await? {
            return Ok(CancelReceipt { pending, step_id, replayed: true });
        }
        let row = sqlx::query(sql.request_cancel).bind(sid).bind(by).fetch_one(&mut *tx).await?;
        let pending =
            PendingCancel { requested_by: by.to_owned(), requested_at: row.try_get("cancel_requested_at")? };
        for event in &request.events {
            Sql::append_event(&mut tx, sid, &mut event_seq, event, None).await?;
        }
        let queued = state == StepState::Waiting.as_str();
        if queued {
            sqlx::query(sql.queue_waiting_steps).bind(sid).fetch_all(&mut *tx).await?;
        }
        Sql::save_seqs(&mut tx, sid, item_seq, event_seq, &SessionUpdate::default()).await?;
        tx.commit().await?;
        // The events wake the Worker that holds a running step, in this process or another.
        wake(self, sid, queued, true).await;
        Ok(CancelReceipt { pending, step_id, replayed: false })
    }

    async fn pending_cancel(&self, session_id: &str) -> Result<Option<PendingCancel>, StoreError> {
        let row = sqlx::query(DB::statements().pending_cancel)
            .bind(session_id)
            .fetch_optional(self.read_pool())
            .await?;
        row.map(|row| Sql::<DB>::decode_cancel(&row)).transpose().map(Option::flatten)
    }

    async fn tool_call(
        &self,
        session_id: &str,
        tool_call_id: &str,
    ) -> Result<Option<ToolCallRecord>, StoreError> {
        let row = sqlx::query(DB::statements().tool_call)
            .bind(session_id)
            .bind(tool_call_id)
            .fetch_optional(self.read_pool())
            .await?;
        let Some(row) = row else { return Ok(None) };
        let key = key2(session_id, tool_call_id);
        check_row_version("tool_calls", &key, row.try_get("row_version")?)?;
        Ok(Some(ToolCallRecord {
            tool_call_id: tool_call_id.to_owned(),
            status: row.try_get("status")?,
            record: stored_json("tool_calls", &key, "record", row.try_get("record")?)?,
        }))
    }

    async fn tool_calls(&self, session_id: &str) -> Result<Vec<ToolCallRecord>, StoreError> {
        let rows =
            sqlx::query(DB::statements().tool_calls).bind(session_id).fetch_all(self.read_pool()).await?;
        rows.iter()
            .map(|row| {
                let tool_call_id: String = row.try_get("tool_call_id")?;
                let key = key2(session_id, &tool_call_id);
                check_row_version("tool_calls", &key, row.try_get("row_version")?)?;
                Ok(ToolCallRecord {
                    status: row.try_get("status")?,
                    record: stored_json("tool_calls", &key, "record", row.try_get("record")?)?,
                    tool_call_id,
                })
            })
            .collect()
    }

    async fn step_in_flight(&self, session_id: &str) -> Result<Option<Step>, StoreError> {
        let row = sqlx::query(DB::statements().step_in_flight)
            .bind(session_id)
            .fetch_optional(self.read_pool())
            .await?;
        row.map(|r| Sql::<DB>::decode_step(&r)).transpose()
    }

    async fn unclaimed_steps(
        &self,
        older_than: Duration,
        session_id: Option<&str>,
    ) -> Result<Vec<UnclaimedSteps>, StoreError> {
        let rows = sqlx::query(DB::statements().unclaimed_steps)
            .bind(ms(older_than))
            .bind(session_id)
            .fetch_all(self.read_pool())
            .await?;
        rows.iter()
            .map(|row| {
                Ok(UnclaimedSteps {
                    agent: row.try_get("agent")?,
                    steps: row.try_get("n")?,
                    oldest_due_at: row.try_get("oldest")?,
                })
            })
            .collect()
    }

    async fn probe_write(&self) -> Result<(), StoreError> {
        self.check_writable().await
    }

    fn outbox(&self) -> Option<&dyn Outbox> {
        Some(self)
    }

    fn audit(&self) -> &dyn crate::audit::AuditLog {
        self
    }

    fn deadlines(&self) -> &dyn crate::deadlines::Deadlines {
        self
    }

    fn media(&self) -> &dyn crate::media::MediaStore {
        self
    }

    fn agents(&self) -> &dyn crate::agents::AgentRegistry {
        self
    }

    fn versions(&self) -> &dyn crate::versions::AgentVersions {
        self
    }

    fn work_signal(&self) -> WorkSignal {
        self.signals().work_signal()
    }

    fn event_signal(&self, session_id: &str) -> EventSignal {
        self.signals().event_signal(session_id)
    }
}

/// [`Store::send_user_message`], and with `audit` an audit row about interrupt `audit.0` in the
/// same transaction (the [`crate::audit::AuditLog::send_user_message_as`] path): written only when
/// the message is (never on a replay).
#[sqlx_bounds(DB)]
pub(crate) async fn send<B, DB>(
    backend: &B,
    message: UserMessage,
    audit: Option<(&str, &crate::audit::NewAuditEntry)>,
    media: &[crate::media::NewMedia],
) -> Result<MessageReceipt, StoreError>
where
    B: Backend<Db = DB>,
    DB: Dialect,
{
    const OP: &str = "send_user_message";
    let sql = DB::statements();
    let sid = message.session_id.as_str();
    let request =
        serde_json::json!([message.item.kind, message.item.uuid, message.item.turn_id, message.item.body])
            .to_string();
    let mut tx = backend.begin_write().await?;
    let (mut item_seq, mut event_seq) = Sql::lock_session(&mut tx, sid).await?;
    let known = sqlx::query(sql.idempotency_key)
        .bind(sid)
        .bind(OP)
        .bind(message.client_key.as_str())
        .fetch_optional(&mut *tx)
        .await?;
    if let Some(row) = known {
        let stored: String = row.try_get("request")?;
        if stored != request {
            return Err(StoreError::IdempotencyConflict {
                session_id: sid.to_owned(),
                operation: OP,
                client_key: message.client_key,
            });
        }
        let response: String = row.try_get("response")?;
        let corrupt = |detail: String| StoreError::Corrupt {
            table: "idempotency_keys",
            key: key2(sid, &message.client_key),
            detail,
        };
        let (item_seq, step_id): (i64, Option<i64>) =
            serde_json::from_str(&response).map_err(|e| corrupt(e.to_string()))?;
        return Ok(MessageReceipt { item_seq, step_id, replayed: true });
    }
    crate::media::insert(&mut tx, sid, media).await?;
    let Some(seq) = Sql::append_item(&mut tx, sid, &mut item_seq, &message.item).await? else {
        return Err(StoreError::Invalid {
            what: format!("the session already holds an item with uuid {:?}", message.item.uuid),
        });
    };
    for event in &message.events {
        Sql::append_event(&mut tx, sid, &mut event_seq, event, None).await?;
    }
    let step_id = match &message.wake {
        Some(step) => Sql::insert_step(&mut tx, sid, step, true).await?,
        None => None,
    };
    let woken_status = message.wake.as_ref().and_then(|w| w.session_status.clone());
    let update = SessionUpdate { status: step_id.and(woken_status), ..SessionUpdate::default() };
    sqlx::query(sql.insert_idempotency_key)
        .bind(sid)
        .bind(OP)
        .bind(message.client_key.as_str())
        .bind(request.as_str())
        .bind(serde_json::json!([seq, step_id]).to_string().as_str())
        .execute(&mut *tx)
        .await?;
    if let Some((interrupt_id, entry)) = audit {
        crate::audit::insert(&mut tx, sid, interrupt_id, entry).await?;
    }
    Sql::save_seqs(&mut tx, sid, item_seq, event_seq, &update).await?;
    tx.commit().await?;
    wake(backend, sid, step_id.is_some(), !message.events.is_empty()).await;
    Ok(MessageReceipt { item_seq: seq, step_id, replayed: false })
}

/// Who resolves an interrupt ([`resolve`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Decider {
    /// A client: refused once the interrupt's deadline passed ([`StoreError::InterruptExpired`]).
    Client,
    /// A client whose authority was checked against the interrupt as it was with `escalated_at`:
    /// as [`Decider::Client`], and refused ([`StoreError::InterruptEscalated`]) when an escalation
    /// changed who may decide since.
    ClientAsOf(Option<i64>),
    /// The interrupt's deadline `deadline_at` ([`crate::deadlines`]): only when that is the
    /// interrupt's deadline now and it passed ([`StoreError::DeadlineNotDue`] otherwise).
    Deadline(i64),
}

/// [`Store::resolve_interrupt`], and with `audit` its audit row in the same transaction (the
/// [`crate::audit::AuditLog`] path): written only when the decision is (never on a replay).
#[sqlx_bounds(DB)]
pub(crate) async fn resolve<B, DB>(
    backend: &B,
    r: Resolution,
    audit: Option<&crate::audit::NewAuditEntry>,
) -> Result<ResolveReceipt, StoreError>
where
    B: Backend<Db = DB>,
    DB: Dialect,
{
    resolve_by(backend, r, audit, Decider::Client).await
}

/// [`resolve`] by `decider`.
#[sqlx_bounds(DB)]
pub(crate) async fn resolve_by<B, DB>(
    backend: &B,
    r: Resolution,
    audit: Option<&crate::audit::NewAuditEntry>,
    decider: Decider,
) -> Result<ResolveReceipt, StoreError>
where
    B: Backend<Db = DB>,
    DB: Dialect,
{
    let sql = DB::statements();
    let sid = r.session_id.as_str();
    let mut tx = backend.begin_write().await?;
    let LockedInterrupt { item_seq, mut event_seq, interrupt, client_key, db_now } =
        Sql::lock_interrupt(&mut tx, sid, &r.interrupt_id).await?;
    let expired = |deadline_at| StoreError::InterruptExpired {
        session_id: sid.to_owned(),
        interrupt_id: r.interrupt_id.clone(),
        deadline_at,
    };
    if let Some(resolution) = interrupt.resolution {
        if client_key.as_deref() != Some(r.client_key.as_str()) {
            // Resolved at or after its deadline: only the deadline resolves then.
            if let (Decider::Client | Decider::ClientAsOf(_), Some(deadline_at), Some(resolved_at)) =
                (decider, interrupt.deadline_at, interrupt.resolved_at)
                && resolved_at >= deadline_at
            {
                return Err(expired(deadline_at));
            }
            return Err(StoreError::InterruptAlreadyResolved {
                session_id: sid.to_owned(),
                interrupt_id: r.interrupt_id,
                resolution,
            });
        }
        if resolution.get() != r.resolution.get() {
            return Err(StoreError::IdempotencyConflict {
                session_id: sid.to_owned(),
                operation: "resolve_interrupt",
                client_key: r.client_key,
            });
        }
        let step = sqlx::query(sql.step_of_interrupt)
            .bind(sid)
            .bind(r.interrupt_id.as_str())
            .fetch_optional(&mut *tx)
            .await?;
        let step_id = step.map(|s| s.try_get("step_id")).transpose()?;
        return Ok(ResolveReceipt { step_id, replayed: true, partial: None });
    }
    if let Some(pending) = Sql::pending_cancel(&mut tx, sid).await? {
        return Err(StoreError::CancelPending {
            session_id: sid.to_owned(),
            interrupt_id: r.interrupt_id,
            requested_by: pending.requested_by,
        });
    }
    if let Decider::ClientAsOf(seen) = decider
        && seen != interrupt.escalated_at
    {
        return Err(StoreError::InterruptEscalated {
            session_id: sid.to_owned(),
            interrupt_id: r.interrupt_id,
            escalated_at: interrupt.escalated_at,
        });
    }
    match (decider, interrupt.deadline_at) {
        (Decider::Client | Decider::ClientAsOf(_), Some(deadline_at)) if deadline_at <= db_now => {
            return Err(expired(deadline_at));
        }
        (Decider::Client | Decider::ClientAsOf(_), _) => {}
        (Decider::Deadline(fired), Some(deadline_at)) if fired == deadline_at && deadline_at <= db_now => {}
        (Decider::Deadline(fired), now_at) => {
            return Err(StoreError::DeadlineNotDue {
                session_id: sid.to_owned(),
                interrupt_id: r.interrupt_id,
                detail: match now_at {
                    None => "it has no deadline".to_owned(),
                    Some(at) if at != fired => format!("its deadline is {at} now, not {fired}"),
                    Some(at) => format!("its deadline {at} has not passed (database clock {db_now})"),
                },
            });
        }
    }
    // An approval of an interrupt that needs several approvers counts once per principal, under
    // the session's lock: two approvers at once are counted one after the other.
    let required = approvals_required(&interrupt.request);
    if let Some(entry) = audit.filter(|e| e.decision == AuditDecision::Approved && required > 1) {
        let mut approvals = interrupt.approvals;
        if let Some(earlier) = approvals.iter().find(|a| a.principal == entry.principal) {
            if earlier.client_key != r.client_key {
                return Err(StoreError::AlreadyApprovedBy {
                    session_id: sid.to_owned(),
                    interrupt_id: r.interrupt_id,
                    principal: entry.principal.clone(),
                    required,
                });
            }
            let so_far = u32::try_from(approvals.len()).unwrap_or(u32::MAX);
            let partial = Some(PartialApproval { approvals: so_far, required });
            return Ok(ResolveReceipt { step_id: None, replayed: true, partial });
        }
        if approvals.len() + 1 < required as usize {
            approvals.push(Approval {
                principal: entry.principal.clone(),
                client_key: r.client_key.clone(),
                approved_at: db_now,
            });
            let listed = serde_json::to_string(&approvals).expect("approvals serialize");
            sqlx::query(sql.record_approvals)
                .bind(sid)
                .bind(r.interrupt_id.as_str())
                .bind(listed.as_str())
                .execute(&mut *tx)
                .await?;
            for event in &r.partial_events {
                Sql::append_event(&mut tx, sid, &mut event_seq, event, None).await?;
            }
            let partial_entry = NewAuditEntry { decision: AuditDecision::PartiallyApproved, ..entry.clone() };
            crate::audit::insert(&mut tx, sid, &r.interrupt_id, &partial_entry).await?;
            Sql::save_seqs(&mut tx, sid, item_seq, event_seq, &SessionUpdate::default()).await?;
            tx.commit().await?;
            wake(backend, sid, false, !r.partial_events.is_empty()).await;
            let so_far = u32::try_from(approvals.len()).unwrap_or(u32::MAX);
            return Ok(ResolveReceipt {
                step_id: None,
                replayed: false,
                partial: Some(PartialApproval { approvals: so_far, required }),
            });
        }
    }
    sqlx::query(sql.resolve_interrupt)
        .bind(sid)
        .bind(r.interrupt_id.as_str())
        .bind(r.resolution.get())
        .bind(r.client_key.as_str())
        .execute(&mut *tx)
        .await?;
    let step = sqlx::query(sql.queue_waiting_step)
        .bind(sid)
        .bind(r.interrupt_id.as_str())
        .fetch_optional(&mut *tx)
        .await?;
    let step_id: Option<i64> = step.map(|s| s.try_get("step_id")).transpose()?;
    for event in &r.events {
        Sql::append_event(&mut tx, sid, &mut event_seq, event, None).await?;
    }
    if let Some(entry) = audit {
        crate::audit::insert(&mut tx, sid, &r.interrupt_id, entry).await?;
    }
    Sql::save_seqs(&mut tx, sid, item_seq, event_seq, &SessionUpdate::default()).await?;
    tx.commit().await?;
    wake(backend, sid, step_id.is_some(), !r.events.is_empty()).await;
    Ok(ResolveReceipt { step_id, replayed: false, partial: None })
}

/// How many different approvers an interrupt's request asks for: its `approvals_required` (set
/// when the options factory's review found the call high risk and the tool's policy asks for
/// more approvers), else 1.
fn approvals_required(request: &RawValue) -> u32 {
    #[derive(serde::Deserialize)]
    struct Asked {
        approvals_required: Option<u32>,
    }
    serde_json::from_str::<Asked>(request.get()).ok().and_then(|a| a.approvals_required).unwrap_or(1).max(1)
}

/// The key of a row for error messages.
fn key2(a: &str, b: impl std::fmt::Display) -> String {
    format!("{a}/{b}")
}

/// Milliseconds of a duration, saturating.
pub(crate) fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Checks a session to create: its run state and its agent digest.
pub(crate) fn check_new_session(session: &NewSession) -> Result<(), StoreError> {
    check_run_state(&session.run_state)?;
    if let Some(agent) = &session.agent {
        check_digest(&agent.digest)?;
    }
    if let Some(name) = &session.agent_name {
        check_agent_name(name).map_err(|what| StoreError::Invalid { what })?;
    }
    Ok(())
}

/// Checks a run state: a JSON object with an integer `version` of at least 1.
fn check_run_state(run_state: &RawValue) -> Result<(), StoreError> {
    #[derive(serde::Deserialize)]
    struct Versioned {
        version: u64,
    }
    match serde_json::from_str::<Versioned>(run_state.get()) {
        Ok(v) if v.version >= 1 => Ok(()),
        _ => Err(StoreError::Invalid {
            what: "the run state must be a JSON object with an integer `version` >= 1".into(),
        }),
    }
}

/// Checks an agent digest given to the store: 1 to 200 bytes.
pub(crate) fn check_digest(digest: &str) -> Result<(), StoreError> {
    if digest.is_empty() || digest.len() > 200 {
        return Err(StoreError::Invalid {
            what: format!("an agent digest must be 1 to 200 bytes, not {} bytes", digest.len()),
        });
    }
    Ok(())
}

/// `on_unique()` for a unique violation, else the error as it is.
fn unique_or(e: sqlx::Error, on_unique: impl FnOnce() -> StoreError) -> StoreError {
    match &e {
        sqlx::Error::Database(db) if db.is_unique_violation() => on_unique(),
        _ => e.into(),
    }
}
