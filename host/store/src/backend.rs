//! The SQL both backends share, written once: [`impl_store!`] expands the whole [`crate::Store`]
//! implementation for a concrete sqlx database type, and [`render`] turns the shared SQL text
//! into each dialect.
//!
//! This module owns the statements and the order of writes inside each transaction. It does
//! not own connections, pools or wake-up plumbing (the backend modules do).
//!
//! # Caveats
//!
//! - SQL text uses PostgreSQL placeholders (`$1`) and the tokens `NOW_MS` (the database clock in
//!   ms) and `PIN_OF_SESSION` (a new step's pin, from session `$1`); [`render`] rewrites them. No other `$` may appear in the text.
//! - Lock order in every writing transaction: the session row first, then steps. A commit and a
//!   concurrent `send_user_message` on PostgreSQL therefore queue on the session row instead of
//!   deadlocking on the in-flight index.

/// The database clock in milliseconds.
const PG_NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";
const SQLITE_NOW_MS: &str = "CAST(unixepoch('subsec') * 1000 AS INTEGER)";

/// A new step's `pin`: the digest of the session `$1` when it is pinned, else `''` (any Worker).
const PIN_OF_SESSION: &str = "COALESCE((SELECT CASE WHEN agent_pinned THEN agent_digest END
    FROM sessions WHERE session_id = $1), '')";

/// Rewrites shared SQL for a dialect.
pub(crate) fn render(pg: bool, sql: &str) -> String {
    let sql = sql.replace("PIN_OF_SESSION", PIN_OF_SESSION);
    if pg {
        return sql.replace("NOW_MS", PG_NOW_MS);
    }
    let sql = sql.replace("NOW_MS", SQLITE_NOW_MS);
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '$' && chars.peek().is_some_and(char::is_ascii_digit) {
            out.push('?');
        } else {
            out.push(c);
        }
    }
    out
}

/// The key of a row for error messages.
pub(crate) fn key2(a: &str, b: impl std::fmt::Display) -> String {
    format!("{a}/{b}")
}

/// Milliseconds of a duration, saturating.
pub(crate) fn ms(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Checks a run state: a JSON object with an integer `version` of at least 1.
pub(crate) fn check_run_state(run_state: &serde_json::value::RawValue) -> Result<(), crate::StoreError> {
    #[derive(serde::Deserialize)]
    struct Versioned {
        version: u64,
    }
    match serde_json::from_str::<Versioned>(run_state.get()) {
        Ok(v) if v.version >= 1 => Ok(()),
        _ => Err(crate::StoreError::Invalid {
            what: "the run state must be a JSON object with an integer `version` >= 1".into(),
        }),
    }
}

pub(crate) const CLAIM_PG: &str = "WITH c AS (
        SELECT step_id FROM steps
        WHERE state IN ('queued', 'claimed') AND due_at <= NOW_MS AND row_version <= $3
        ORDER BY due_at LIMIT 1 FOR UPDATE SKIP LOCKED)
    UPDATE steps s SET state = 'claimed', lease_owner = $1, due_at = NOW_MS + $2,
        attempt = s.attempt + 1, fence = s.fence + 1, updated_at = NOW_MS
    FROM c WHERE s.step_id = c.step_id
    RETURNING s.step_id, s.session_id, s.row_version, s.kind, s.payload, s.state, s.interrupt_id,
        s.due_at, s.attempt, s.fence, s.output";

/// [`CLAIM_PG`] limited to steps whose `pin` is one of the JSON array `$4` (`""` and the Worker's
/// digests): the array becomes an init-plan constant, so `pin = ANY(…)` is an index condition of
/// `steps_due_pin (pin, due_at)` and only claimable rows are read.
pub(crate) const CLAIM_FOR_PG: &str = "WITH c AS (
        SELECT step_id FROM steps
        WHERE state IN ('queued', 'claimed') AND due_at <= NOW_MS AND row_version <= $3
            AND pin = ANY(ARRAY(SELECT jsonb_array_elements_text($4::jsonb)))
        ORDER BY due_at LIMIT 1 FOR UPDATE SKIP LOCKED)
    UPDATE steps s SET state = 'claimed', lease_owner = $1, due_at = NOW_MS + $2,
        attempt = s.attempt + 1, fence = s.fence + 1, updated_at = NOW_MS
    FROM c WHERE s.step_id = c.step_id
    RETURNING s.step_id, s.session_id, s.row_version, s.kind, s.payload, s.state, s.interrupt_id,
        s.due_at, s.attempt, s.fence, s.output";

/// [`CLAIM_SQLITE`] limited like [`CLAIM_FOR_PG`] (`pin IN` the JSON array `$4`).
pub(crate) const CLAIM_FOR_SQLITE: &str = "UPDATE steps SET state = 'claimed', lease_owner = $1,
        due_at = NOW_MS + $2, attempt = attempt + 1, fence = fence + 1, updated_at = NOW_MS
    WHERE step_id = (SELECT step_id FROM steps
        WHERE state IN ('queued', 'claimed') AND due_at <= NOW_MS AND row_version <= $3
            AND pin IN (SELECT value FROM json_each($4))
        ORDER BY due_at LIMIT 1)
    RETURNING step_id, session_id, row_version, kind, payload, state, interrupt_id, due_at, attempt,
        fence, output";

/// Checks an agent digest given to the store: 1 to 200 bytes.
pub(crate) fn check_digest(digest: &str) -> Result<(), crate::StoreError> {
    if digest.is_empty() || digest.len() > 200 {
        return Err(crate::StoreError::Invalid {
            what: format!("an agent digest must be 1 to 200 bytes, not {} bytes", digest.len()),
        });
    }
    Ok(())
}

/// One statement: SQLite takes the write lock before it reads, so the sub-select and the update
/// are atomic against every other writer (of this process or another).
pub(crate) const CLAIM_SQLITE: &str = "UPDATE steps SET state = 'claimed', lease_owner = $1,
        due_at = NOW_MS + $2, attempt = attempt + 1, fence = fence + 1, updated_at = NOW_MS
    WHERE step_id = (SELECT step_id FROM steps
        WHERE state IN ('queued', 'claimed') AND due_at <= NOW_MS AND row_version <= $3
        ORDER BY due_at LIMIT 1)
    RETURNING step_id, session_id, row_version, kind, payload, state, interrupt_id, due_at, attempt,
        fence, output";

fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.is_unique_violation())
}

pub(crate) fn unique_or(e: sqlx::Error, on_unique: impl FnOnce() -> crate::StoreError) -> crate::StoreError {
    if is_unique_violation(&e) { on_unique() } else { e.into() }
}

/// Expands `impl Store for $store` for the sqlx database `$db`. `$store` provides
/// `begin_write()`, `write_pool()`, `read_pool()`, `check_writable()` and a `signals` field; `$pg` selects the dialect.
macro_rules! impl_store {
    ($store:ty, $db:ty, $pg:expr) => {
        impl $store {
            fn q(sql: &'static str) -> sqlx::AssertSqlSafe<String> {
                sqlx::AssertSqlSafe($crate::backend::render($pg, sql))
            }

            /// Locks the session row (PostgreSQL: row lock; SQLite: the write lock is held) and
            /// returns its next item and event seqs.
            async fn lock_session(
                tx: &mut sqlx::Transaction<'static, $db>,
                session_id: &str,
            ) -> Result<(i64, i64), StoreError> {
                let row = sqlx::query(Self::q(
                    "UPDATE sessions SET updated_at = NOW_MS WHERE session_id = $1
                     RETURNING next_item_seq, next_event_seq, row_version",
                ))
                .bind(session_id)
                .fetch_optional(&mut **tx)
                .await?;
                let Some(row) = row else {
                    return Err(StoreError::SessionNotFound { session_id: session_id.to_owned() });
                };
                check_row_version("sessions", session_id, row.try_get("row_version")?)?;
                Ok((row.try_get("next_item_seq")?, row.try_get("next_event_seq")?))
            }

            async fn append_item(
                tx: &mut sqlx::Transaction<'static, $db>,
                session_id: &str,
                seq: &mut i64,
                item: &NewItem,
            ) -> Result<Option<i64>, StoreError> {
                let done = sqlx::query(Self::q(
                    "INSERT INTO items (session_id, seq, row_version, kind, uuid, turn_id, body, created_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, NOW_MS) ON CONFLICT DO NOTHING",
                ))
                .bind(session_id)
                .bind(*seq)
                .bind($crate::ROW_VERSION)
                .bind(&item.kind)
                .bind(item.uuid.as_deref())
                .bind(item.turn_id.as_deref())
                .bind(item.body.get())
                .execute(&mut **tx)
                .await?;
                if done.rows_affected() == 1 {
                    *seq += 1;
                    Ok(Some(*seq - 1))
                } else {
                    Ok(None)
                }
            }

            async fn append_event(
                tx: &mut sqlx::Transaction<'static, $db>,
                session_id: &str,
                seq: &mut i64,
                event: &NewEvent,
                step: Option<(i64, i64)>,
            ) -> Result<i64, StoreError> {
                sqlx::query(Self::q(
                    "INSERT INTO events (session_id, seq, row_version, kind, payload, step_id, fence, created_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, NOW_MS)",
                ))
                .bind(session_id)
                .bind(*seq)
                .bind($crate::ROW_VERSION)
                .bind(&event.kind)
                .bind(event.payload.get())
                .bind(step.map(|s| s.0))
                .bind(step.map(|s| s.1))
                .execute(&mut **tx)
                .await?;
                *seq += 1;
                Ok(*seq - 1)
            }

            /// Inserts a step. `or_skip`: skip it (Ok(None)) when another step is in flight,
            /// instead of failing with `StepInFlight`.
            async fn insert_step(
                tx: &mut sqlx::Transaction<'static, $db>,
                session_id: &str,
                step: &NewStep,
                or_skip: bool,
            ) -> Result<Option<i64>, StoreError> {
                if let Some((after, kind)) = &step.only_if_items_after {
                    let found = sqlx::query(Self::q(
                        "SELECT 1 FROM items WHERE session_id = $1 AND seq > $2 AND kind = $3 LIMIT 1",
                    ))
                    .bind(session_id)
                    .bind(*after)
                    .bind(kind)
                    .fetch_optional(&mut **tx)
                    .await?;
                    if found.is_none() {
                        return Ok(None);
                    }
                }
                let (state, interrupt_id, delay) = match &step.start {
                    StepStart::Now => ("queued", None, Some(0)),
                    StepStart::After(d) => ("queued", None, Some($crate::backend::ms(*d))),
                    StepStart::OnInterrupt(id) => ("waiting", Some(id.as_str()), None),
                };
                let sql = if or_skip {
                    Self::q(
                        "INSERT INTO steps (session_id, row_version, kind, payload, state, interrupt_id, due_at,
                             created_at, updated_at, pin)
                         VALUES ($1, $2, $3, $4, $5, $6, NOW_MS + $7, NOW_MS, NOW_MS, PIN_OF_SESSION)
                         ON CONFLICT DO NOTHING RETURNING step_id",
                    )
                } else {
                    Self::q(
                        "INSERT INTO steps (session_id, row_version, kind, payload, state, interrupt_id, due_at,
                             created_at, updated_at, pin)
                         VALUES ($1, $2, $3, $4, $5, $6, NOW_MS + $7, NOW_MS, NOW_MS, PIN_OF_SESSION)
                         RETURNING step_id",
                    )
                };
                let row = sqlx::query(sql)
                    .bind(session_id)
                    .bind($crate::ROW_VERSION)
                    .bind(&step.kind)
                    .bind(step.payload.get())
                    .bind(state)
                    .bind(interrupt_id)
                    .bind(delay)
                    .fetch_optional(&mut **tx)
                    .await
                    .map_err(|e| {
                        $crate::backend::unique_or(e, || StoreError::StepInFlight {
                            session_id: session_id.to_owned(),
                        })
                    })?;
                match row {
                    Some(row) => Ok(Some(row.try_get("step_id")?)),
                    None => Ok(None),
                }
            }

            async fn save_seqs(
                tx: &mut sqlx::Transaction<'static, $db>,
                session_id: &str,
                item_seq: i64,
                event_seq: i64,
                update: &SessionUpdate,
            ) -> Result<(), StoreError> {
                if let Some(run_state) = &update.run_state {
                    $crate::backend::check_run_state(run_state)?;
                }
                sqlx::query(Self::q(
                    "UPDATE sessions SET next_item_seq = $2, next_event_seq = $3,
                         status = COALESCE($4, status), run_state = COALESCE($5, run_state),
                         usage_input_tokens = usage_input_tokens + $6,
                         usage_cached_input_tokens = usage_cached_input_tokens + $7,
                         usage_output_tokens = usage_output_tokens + $8,
                         usage_model_calls = usage_model_calls + $9,
                         updated_at = NOW_MS
                     WHERE session_id = $1",
                ))
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

            /// Wakes other processes (PostgreSQL only) **after** the commit: a NOTIFY inside the
            /// transaction would hold PostgreSQL's database-wide notify lock through the commit's
            /// WAL flush and serialize every committing Worker. A lost notify (crash right after
            /// the commit, dropped connection) is covered by the waiters' poll; an error here is
            /// logged, never returned, because the change is already committed.
            async fn notify(&self, session_id: &str, work: bool, events: bool) {
                if !$pg || !(work || events) {
                    return;
                }
                let sql = match (work, events) {
                    (true, true) => "SELECT pg_notify('tollgate_work', ''), pg_notify('tollgate_events', $1)",
                    (true, false) => "SELECT pg_notify('tollgate_work', $1)",
                    _ => "SELECT pg_notify('tollgate_events', $1)",
                };
                if let Err(e) = sqlx::query(sql).bind(session_id).execute(self.write_pool()).await {
                    tracing::warn!(error = %e, "store: NOTIFY after commit failed; waiters will poll");
                }
            }

            fn decode_agent(row: &<$db as sqlx::Database>::Row) -> Result<Option<AgentDigest>, StoreError> {
                let digest: Option<String> = row.try_get("agent_digest")?;
                let pinned: bool = row.try_get("agent_pinned")?;
                Ok(digest.map(|digest| AgentDigest { digest, pinned }))
            }

            /// The claim a claiming statement returned as `row` (none: nothing was due).
            fn claimed(
                row: Option<&<$db as sqlx::Database>::Row>,
                worker_id: &str,
            ) -> Result<Option<Claimed>, StoreError> {
                let Some(row) = row else { return Ok(None) };
                let step = Self::decode_step(row)?;
                Ok(Some(Claimed {
                    fence: step.fence,
                    lease_until: step.due_at.unwrap_or_default(),
                    worker_id: worker_id.to_owned(),
                    step,
                }))
            }

            fn decode_step(row: &<$db as sqlx::Database>::Row) -> Result<Step, StoreError> {
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
                    due_at: row.try_get("due_at")?,
                    interrupt_id: row.try_get("interrupt_id")?,
                    output: output.map(|o| stored_json("steps", &key, "output", o)).transpose()?,
                })
            }

            fn decode_interrupt(row: &<$db as sqlx::Database>::Row) -> Result<Interrupt, StoreError> {
                let session_id: String = row.try_get("session_id")?;
                let interrupt_id: String = row.try_get("interrupt_id")?;
                let key = $crate::backend::key2(&session_id, &interrupt_id);
                check_row_version("interrupts", &key, row.try_get("row_version")?)?;
                let resolution: Option<String> = row.try_get("resolution")?;
                Ok(Interrupt {
                    request: stored_json("interrupts", &key, "request", row.try_get("request")?)?,
                    resolution: resolution
                        .map(|r| stored_json("interrupts", &key, "resolution", r))
                        .transpose()?,
                    created_at: row.try_get("created_at")?,
                    resolved_at: row.try_get("resolved_at")?,
                    session_id,
                    interrupt_id,
                })
            }
        }

        #[async_trait::async_trait]
        impl Store for $store {
            async fn create_session(&self, session: NewSession) -> Result<bool, StoreError> {
                $crate::backend::check_run_state(&session.run_state)?;
                if let Some(agent) = &session.agent {
                    $crate::backend::check_digest(&agent.digest)?;
                }
                let done = sqlx::query(Self::q(
                    "INSERT INTO sessions (session_id, row_version, status, run_state, created_at, updated_at,
                         agent_digest, agent_pinned)
                     VALUES ($1, $2, $3, $4, NOW_MS, NOW_MS, $5, $6) ON CONFLICT DO NOTHING",
                ))
                .bind(&session.session_id)
                .bind($crate::ROW_VERSION)
                .bind(&session.status)
                .bind(session.run_state.get())
                .bind(session.agent.as_ref().map(|a| a.digest.as_str()))
                .bind(session.agent.as_ref().is_some_and(|a| a.pinned))
                .execute(self.write_pool())
                .await?;
                Ok(done.rows_affected() == 1)
            }

            async fn session(&self, session_id: &str) -> Result<Option<Session>, StoreError> {
                let row = sqlx::query(Self::q(
                    "SELECT session_id, row_version, status, run_state, usage_input_tokens,
                         usage_cached_input_tokens, usage_output_tokens, usage_model_calls,
                         next_item_seq, next_event_seq, created_at, updated_at, agent_digest, agent_pinned
                     FROM sessions WHERE session_id = $1",
                ))
                .bind(session_id)
                .fetch_optional(self.read_pool())
                .await?;
                let Some(row) = row else { return Ok(None) };
                check_row_version("sessions", session_id, row.try_get("row_version")?)?;
                let run_state = stored_json("sessions", session_id, "run_state", row.try_get("run_state")?)?;
                $crate::backend::check_run_state(&run_state).map_err(|_| StoreError::Corrupt {
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
                    agent: Self::decode_agent(&row)?,
                }))
            }

            async fn send_user_message(&self, message: UserMessage) -> Result<MessageReceipt, StoreError> {
                const OP: &str = "send_user_message";
                let sid = message.session_id.as_str();
                let request = serde_json::json!([
                    message.item.kind,
                    message.item.uuid,
                    message.item.turn_id,
                    message.item.body
                ])
                .to_string();
                let mut tx = self.begin_write().await?;
                let (mut item_seq, mut event_seq) = Self::lock_session(&mut tx, sid).await?;
                let known = sqlx::query(Self::q(
                    "SELECT request, response FROM idempotency_keys
                     WHERE session_id = $1 AND operation = $2 AND client_key = $3",
                ))
                .bind(sid)
                .bind(OP)
                .bind(&message.client_key)
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
                        key: $crate::backend::key2(sid, &message.client_key),
                        detail,
                    };
                    let (item_seq, step_id): (i64, Option<i64>) =
                        serde_json::from_str(&response).map_err(|e| corrupt(e.to_string()))?;
                    return Ok(MessageReceipt { item_seq, step_id, replayed: true });
                }
                let Some(seq) = Self::append_item(&mut tx, sid, &mut item_seq, &message.item).await? else {
                    return Err(StoreError::Invalid {
                        what: format!("the session already holds an item with uuid {:?}", message.item.uuid),
                    });
                };
                for event in &message.events {
                    Self::append_event(&mut tx, sid, &mut event_seq, event, None).await?;
                }
                let step_id = match &message.wake {
                    Some(step) => Self::insert_step(&mut tx, sid, step, true).await?,
                    None => None,
                };
                let woken_status = message.wake.as_ref().and_then(|w| w.session_status.clone());
                let update = SessionUpdate {
                    status: step_id.and(woken_status),
                    ..SessionUpdate::default()
                };
                sqlx::query(Self::q(
                    "INSERT INTO idempotency_keys (session_id, operation, client_key, request, response, created_at)
                     VALUES ($1, $2, $3, $4, $5, NOW_MS)",
                ))
                .bind(sid)
                .bind(OP)
                .bind(&message.client_key)
                .bind(&request)
                .bind(serde_json::json!([seq, step_id]).to_string())
                .execute(&mut *tx)
                .await?;
                Self::save_seqs(&mut tx, sid, item_seq, event_seq, &update).await?;
                let woke = step_id.is_some();
                tx.commit().await?;
                self.notify(sid, woke, !message.events.is_empty()).await;
                if woke {
                    self.signals.work_ready();
                }
                if !message.events.is_empty() {
                    self.signals.events_appended(sid);
                }
                Ok(MessageReceipt { item_seq: seq, step_id, replayed: false })
            }

            async fn resolve_interrupt(&self, r: Resolution) -> Result<ResolveReceipt, StoreError> {
                let sid = r.session_id.as_str();
                let mut tx = self.begin_write().await?;
                let (item_seq, mut event_seq) = Self::lock_session(&mut tx, sid).await?;
                let row = sqlx::query(Self::q(
                    "SELECT session_id, interrupt_id, row_version, state, request, resolution, client_key,
                         created_at, resolved_at
                     FROM interrupts WHERE session_id = $1 AND interrupt_id = $2",
                ))
                .bind(sid)
                .bind(&r.interrupt_id)
                .fetch_optional(&mut *tx)
                .await?;
                let Some(row) = row else {
                    return Err(StoreError::InterruptNotFound {
                        session_id: sid.to_owned(),
                        interrupt_id: r.interrupt_id,
                    });
                };
                let interrupt = Self::decode_interrupt(&row)?;
                if let Some(resolution) = interrupt.resolution {
                    let key: Option<String> = row.try_get("client_key")?;
                    if key.as_deref() != Some(r.client_key.as_str()) {
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
                    let step = sqlx::query(Self::q(
                        "SELECT step_id FROM steps WHERE session_id = $1 AND interrupt_id = $2
                         ORDER BY step_id LIMIT 1",
                    ))
                    .bind(sid)
                    .bind(&r.interrupt_id)
                    .fetch_optional(&mut *tx)
                    .await?;
                    let step_id = step.map(|s| s.try_get("step_id")).transpose()?;
                    return Ok(ResolveReceipt { step_id, replayed: true });
                }
                sqlx::query(Self::q(
                    "UPDATE interrupts SET state = 'resolved', resolution = $3, client_key = $4,
                         resolved_at = NOW_MS
                     WHERE session_id = $1 AND interrupt_id = $2",
                ))
                .bind(sid)
                .bind(&r.interrupt_id)
                .bind(r.resolution.get())
                .bind(&r.client_key)
                .execute(&mut *tx)
                .await?;
                let step = sqlx::query(Self::q(
                    "UPDATE steps SET state = 'queued', due_at = NOW_MS, updated_at = NOW_MS
                     WHERE session_id = $1 AND interrupt_id = $2 AND state = 'waiting'
                     RETURNING step_id",
                ))
                .bind(sid)
                .bind(&r.interrupt_id)
                .fetch_optional(&mut *tx)
                .await?;
                let step_id: Option<i64> = step.map(|s| s.try_get("step_id")).transpose()?;
                for event in &r.events {
                    Self::append_event(&mut tx, sid, &mut event_seq, event, None).await?;
                }
                Self::save_seqs(&mut tx, sid, item_seq, event_seq, &SessionUpdate::default()).await?;
                tx.commit().await?;
                self.notify(sid, step_id.is_some(), !r.events.is_empty()).await;
                if step_id.is_some() {
                    self.signals.work_ready();
                }
                if !r.events.is_empty() {
                    self.signals.events_appended(sid);
                }
                Ok(ResolveReceipt { step_id, replayed: false })
            }

            async fn claim(&self, worker_id: &str, lease: Duration) -> Result<Option<Claimed>, StoreError> {
                let sql = if $pg { $crate::backend::CLAIM_PG } else { $crate::backend::CLAIM_SQLITE };
                let row = sqlx::query(Self::q(sql))
                    .bind(worker_id)
                    .bind($crate::backend::ms(lease))
                    .bind($crate::ROW_VERSION)
                    .fetch_optional(self.write_pool())
                    .await?;
                Self::claimed(row.as_ref(), worker_id)
            }

            async fn claim_for(
                &self,
                worker_id: &str,
                lease: Duration,
                digests: &[String],
            ) -> Result<Option<Claimed>, StoreError> {
                for digest in digests {
                    $crate::backend::check_digest(digest)?;
                }
                let pins: Vec<&str> = std::iter::once("").chain(digests.iter().map(String::as_str)).collect();
                let pins = serde_json::to_string(&pins).expect("strings serialize");
                let sql = if $pg { $crate::backend::CLAIM_FOR_PG } else { $crate::backend::CLAIM_FOR_SQLITE };
                let row = sqlx::query(Self::q(sql))
                    .bind(worker_id)
                    .bind($crate::backend::ms(lease))
                    .bind($crate::ROW_VERSION)
                    .bind(pins)
                    .fetch_optional(self.write_pool())
                    .await?;
                Self::claimed(row.as_ref(), worker_id)
            }

            async fn upgrade_session(&self, session_id: &str, to: &str) -> Result<UpgradeReceipt, StoreError> {
                $crate::backend::check_digest(to)?;
                let sid = session_id;
                let mut tx = self.begin_write().await?;
                let (item_seq, mut event_seq) = Self::lock_session(&mut tx, sid).await?;
                let row = sqlx::query(Self::q(
                    "SELECT agent_digest, agent_pinned FROM sessions WHERE session_id = $1",
                ))
                .bind(sid)
                .fetch_one(&mut *tx)
                .await?;
                let from = Self::decode_agent(&row)?;
                let target = AgentDigest { digest: to.to_owned(), pinned: true };
                let step = sqlx::query(Self::q(
                    "SELECT step_id, kind, state, attempt FROM steps
                     WHERE session_id = $1 AND state IN ('queued', 'claimed', 'waiting')",
                ))
                .bind(sid)
                .fetch_optional(&mut *tx)
                .await?;
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
                            return Err(busy(format!("step {id} ({kind}) ran {attempt} attempt(s) and is queued again")));
                        }
                        "queued" => queued = true,
                        _ => {}
                    }
                }
                if from.as_ref() == Some(&target) {
                    return Ok(UpgradeReceipt { from, to: target, event_seq: None });
                }
                sqlx::query(Self::q(
                    "UPDATE sessions SET agent_digest = $2, agent_pinned = $3 WHERE session_id = $1",
                ))
                .bind(sid)
                .bind(to)
                .bind(true)
                .execute(&mut *tx)
                .await?;
                sqlx::query(Self::q(
                    "UPDATE steps SET pin = $2, updated_at = NOW_MS
                     WHERE session_id = $1 AND state IN ('queued', 'waiting')",
                ))
                .bind(sid)
                .bind(to)
                .execute(&mut *tx)
                .await?;
                let payload = serde_json::json!({
                    "from": from.as_ref().map(|a| a.digest.as_str()),
                    "from_pinned": from.as_ref().is_some_and(|a| a.pinned),
                    "to": to,
                });
                let event = NewEvent {
                    kind: "agent_upgraded".to_owned(),
                    payload: serde_json::value::RawValue::from_string(payload.to_string()).expect("JSON"),
                };
                let seq = Self::append_event(&mut tx, sid, &mut event_seq, &event, None).await?;
                Self::save_seqs(&mut tx, sid, item_seq, event_seq, &SessionUpdate::default()).await?;
                tx.commit().await?;
                self.notify(sid, queued, true).await;
                if queued {
                    self.signals.work_ready();
                }
                self.signals.events_appended(sid);
                Ok(UpgradeReceipt { from, to: target, event_seq: Some(seq) })
            }

            async fn heartbeat(&self, claimed: &Claimed, lease: Duration) -> Result<i64, StoreError> {
                let row = sqlx::query(Self::q(
                    "UPDATE steps SET due_at = NOW_MS + $3, updated_at = NOW_MS
                     WHERE step_id = $1 AND fence = $2 AND state = 'claimed' RETURNING due_at",
                ))
                .bind(claimed.step.step_id)
                .bind(claimed.fence)
                .bind($crate::backend::ms(lease))
                .fetch_optional(self.write_pool())
                .await?;
                match row {
                    Some(row) => Ok(row.try_get("due_at")?),
                    None => Err(StoreError::LeaseLost { step_id: claimed.step.step_id, fence: claimed.fence }),
                }
            }

            async fn commit(&self, claimed: &Claimed, commit: Commit) -> Result<CommitReceipt, StoreError> {
                let sid = claimed.step.session_id.as_str();
                let step_id = claimed.step.step_id;
                let lost = || StoreError::LeaseLost { step_id, fence: claimed.fence };
                let mut tx = self.begin_write().await?;
                let (mut item_seq, mut event_seq) = Self::lock_session(&mut tx, sid).await?;
                let (first_item_seq, first_event_seq) = (item_seq, event_seq);
                let fenced = match &commit.finish {
                    Finish::Done(output) => sqlx::query(Self::q(
                        "UPDATE steps SET state = 'done', output = $3, due_at = NULL, lease_owner = NULL,
                             updated_at = NOW_MS
                         WHERE step_id = $1 AND fence = $2 AND state = 'claimed'",
                    ))
                    .bind(step_id)
                    .bind(claimed.fence)
                    .bind(output.get()),
                    Finish::Retry(delay) => sqlx::query(Self::q(
                        "UPDATE steps SET state = 'queued', due_at = NOW_MS + $3, lease_owner = NULL,
                             updated_at = NOW_MS
                         WHERE step_id = $1 AND fence = $2 AND state = 'claimed'",
                    ))
                    .bind(step_id)
                    .bind(claimed.fence)
                    .bind($crate::backend::ms(*delay)),
                    Finish::Keep => sqlx::query(Self::q(
                        "UPDATE steps SET updated_at = NOW_MS
                         WHERE step_id = $1 AND fence = $2 AND state = 'claimed'",
                    ))
                    .bind(step_id)
                    .bind(claimed.fence),
                };
                if fenced.execute(&mut *tx).await?.rows_affected() != 1 {
                    return Err(lost());
                }
                let mut receipt = CommitReceipt::default();
                for item in &commit.items {
                    receipt.item_seqs.push(Self::append_item(&mut tx, sid, &mut item_seq, item).await?);
                }
                for call in &commit.tool_calls {
                    sqlx::query(Self::q(
                        "INSERT INTO tool_calls (session_id, tool_call_id, row_version, status, record,
                             created_at, updated_at)
                         VALUES ($1, $2, $3, $4, $5, NOW_MS, NOW_MS)
                         ON CONFLICT (session_id, tool_call_id) DO UPDATE SET status = excluded.status,
                             record = excluded.record, row_version = excluded.row_version,
                             updated_at = excluded.updated_at",
                    ))
                    .bind(sid)
                    .bind(&call.tool_call_id)
                    .bind($crate::ROW_VERSION)
                    .bind(&call.status)
                    .bind(call.record.get())
                    .execute(&mut *tx)
                    .await?;
                }
                for interrupt in &commit.interrupts {
                    sqlx::query(Self::q(
                        "INSERT INTO interrupts (session_id, interrupt_id, row_version, state, request, created_at)
                         VALUES ($1, $2, $3, 'open', $4, NOW_MS)",
                    ))
                    .bind(sid)
                    .bind(&interrupt.interrupt_id)
                    .bind($crate::ROW_VERSION)
                    .bind(interrupt.request.get())
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| {
                        $crate::backend::unique_or(e, || StoreError::Invalid {
                            what: format!("interrupt `{}` already exists in `{sid}`", interrupt.interrupt_id),
                        })
                    })?;
                }
                let mut queued = matches!(commit.finish, Finish::Retry(_));
                let mut session_update = commit.session.clone();
                for step in &commit.steps {
                    let id = Self::insert_step(&mut tx, sid, step, false).await?;
                    queued |= id.is_some() && !matches!(step.start, StepStart::OnInterrupt(_));
                    if id.is_some() && step.session_status.is_some() {
                        session_update.status.clone_from(&step.session_status);
                    }
                    receipt.step_ids.push(id);
                }
                for event in &commit.events {
                    let seq =
                        Self::append_event(&mut tx, sid, &mut event_seq, event, Some((step_id, claimed.fence)))
                            .await?;
                    receipt.event_seqs.push(seq);
                }
                let session_changed = session_update.status.is_some()
                    || session_update.run_state.is_some()
                    || session_update.add_usage != Usage::default();
                if session_changed || item_seq != first_item_seq || event_seq != first_event_seq {
                    Self::save_seqs(&mut tx, sid, item_seq, event_seq, &session_update).await?;
                }
                let evented = !commit.events.is_empty();
                tx.commit().await?;
                self.notify(sid, queued, evented).await;
                if queued {
                    self.signals.work_ready();
                }
                if evented {
                    self.signals.events_appended(sid);
                }
                Ok(receipt)
            }

            async fn release(&self, claimed: &Claimed) -> Result<(), StoreError> {
                let row = sqlx::query(Self::q(
                    "UPDATE steps SET state = 'queued', due_at = NOW_MS, lease_owner = NULL,
                         attempt = attempt - 1, updated_at = NOW_MS
                     WHERE step_id = $1 AND fence = $2 AND state = 'claimed' RETURNING session_id",
                ))
                .bind(claimed.step.step_id)
                .bind(claimed.fence)
                .fetch_optional(self.write_pool())
                .await?;
                let Some(row) = row else {
                    return Err(StoreError::LeaseLost { step_id: claimed.step.step_id, fence: claimed.fence });
                };
                let sid: String = row.try_get("session_id")?;
                self.notify(&sid, true, false).await;
                self.signals.work_ready();
                Ok(())
            }

            async fn step(&self, step_id: i64) -> Result<Option<Step>, StoreError> {
                let row = sqlx::query(Self::q(
                    "SELECT step_id, session_id, row_version, kind, payload, state, interrupt_id, due_at,
                         attempt, fence, output
                     FROM steps WHERE step_id = $1",
                ))
                .bind(step_id)
                .fetch_optional(self.read_pool())
                .await?;
                row.map(|r| Self::decode_step(&r)).transpose()
            }

            async fn read_items(&self, session_id: &str, after: i64, limit: i64) -> Result<Vec<Item>, StoreError> {
                let rows = sqlx::query(Self::q(
                    "SELECT seq, row_version, kind, uuid, turn_id, body, created_at FROM items
                     WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
                ))
                .bind(session_id)
                .bind(after)
                .bind(limit)
                .fetch_all(self.read_pool())
                .await?;
                rows.iter()
                    .map(|row| {
                        let seq: i64 = row.try_get("seq")?;
                        let key = $crate::backend::key2(session_id, seq);
                        check_row_version("items", &key, row.try_get("row_version")?)?;
                        Ok(Item {
                            seq,
                            kind: row.try_get("kind")?,
                            uuid: row.try_get("uuid")?,
                            turn_id: row.try_get("turn_id")?,
                            body: stored_json("items", &key, "body", row.try_get("body")?)?,
                            created_at: row.try_get("created_at")?,
                        })
                    })
                    .collect()
            }

            async fn read_events(&self, session_id: &str, after: i64, limit: i64) -> Result<Vec<Event>, StoreError> {
                let rows = sqlx::query(Self::q(
                    "SELECT seq, row_version, kind, payload, step_id, fence, created_at FROM events
                     WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
                ))
                .bind(session_id)
                .bind(after)
                .bind(limit)
                .fetch_all(self.read_pool())
                .await?;
                rows.iter()
                    .map(|row| {
                        let seq: i64 = row.try_get("seq")?;
                        let key = $crate::backend::key2(session_id, seq);
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

            async fn interrupt(&self, session_id: &str, interrupt_id: &str) -> Result<Option<Interrupt>, StoreError> {
                let row = sqlx::query(Self::q(
                    "SELECT session_id, interrupt_id, row_version, request, resolution, created_at, resolved_at
                     FROM interrupts WHERE session_id = $1 AND interrupt_id = $2",
                ))
                .bind(session_id)
                .bind(interrupt_id)
                .fetch_optional(self.read_pool())
                .await?;
                row.map(|r| Self::decode_interrupt(&r)).transpose()
            }

            async fn list_sessions(
                &self,
                status: Option<&str>,
                after: &str,
                limit: i64,
            ) -> Result<Vec<SessionSummary>, StoreError> {
                let rows = sqlx::query(Self::q(
                    "SELECT session_id, row_version, status, created_at, updated_at, agent_digest, agent_pinned
                     FROM sessions
                     WHERE session_id > $1 AND ($2 IS NULL OR status = $2)
                     ORDER BY session_id LIMIT $3",
                ))
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
                            agent: Self::decode_agent(row)?,
                        })
                    })
                    .collect()
            }

            async fn count_open_interrupts(&self) -> Result<i64, StoreError> {
                let row = sqlx::query(Self::q("SELECT count(*) AS n FROM interrupts WHERE state = 'open'"))
                    .fetch_one(self.read_pool())
                    .await?;
                Ok(row.try_get("n")?)
            }

            async fn open_interrupts(&self, limit: i64) -> Result<Vec<Interrupt>, StoreError> {
                let rows = sqlx::query(Self::q(
                    "SELECT session_id, interrupt_id, row_version, request, resolution, created_at, resolved_at
                     FROM interrupts WHERE state = 'open'
                     ORDER BY created_at, session_id, interrupt_id LIMIT $1",
                ))
                .bind(limit)
                .fetch_all(self.read_pool())
                .await?;
                rows.iter().map(Self::decode_interrupt).collect()
            }

            async fn tool_call(
                &self,
                session_id: &str,
                tool_call_id: &str,
            ) -> Result<Option<ToolCallRecord>, StoreError> {
                let row = sqlx::query(Self::q(
                    "SELECT row_version, status, record FROM tool_calls
                     WHERE session_id = $1 AND tool_call_id = $2",
                ))
                .bind(session_id)
                .bind(tool_call_id)
                .fetch_optional(self.read_pool())
                .await?;
                let Some(row) = row else { return Ok(None) };
                let key = $crate::backend::key2(session_id, tool_call_id);
                check_row_version("tool_calls", &key, row.try_get("row_version")?)?;
                Ok(Some(ToolCallRecord {
                    tool_call_id: tool_call_id.to_owned(),
                    status: row.try_get("status")?,
                    record: stored_json("tool_calls", &key, "record", row.try_get("record")?)?,
                }))
            }

            async fn tool_calls(&self, session_id: &str) -> Result<Vec<ToolCallRecord>, StoreError> {
                let rows = sqlx::query(Self::q(
                    "SELECT tool_call_id, row_version, status, record FROM tool_calls
                     WHERE session_id = $1 ORDER BY created_at, tool_call_id",
                ))
                .bind(session_id)
                .fetch_all(self.read_pool())
                .await?;
                rows.iter()
                    .map(|row| {
                        let tool_call_id: String = row.try_get("tool_call_id")?;
                        let key = $crate::backend::key2(session_id, &tool_call_id);
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
                let row = sqlx::query(Self::q(
                    "SELECT step_id, session_id, row_version, kind, payload, state, interrupt_id, due_at,
                         attempt, fence, output
                     FROM steps WHERE session_id = $1 AND state IN ('queued', 'claimed', 'waiting')",
                ))
                .bind(session_id)
                .fetch_optional(self.read_pool())
                .await?;
                row.map(|r| Self::decode_step(&r)).transpose()
            }

            async fn probe_write(&self) -> Result<(), StoreError> {
                self.check_writable().await
            }

            fn work_signal(&self) -> WorkSignal {
                self.signals.work_signal()
            }

            fn event_signal(&self, session_id: &str) -> EventSignal {
                self.signals.event_signal(session_id)
            }
        }
    };
}

pub(crate) use impl_store;
