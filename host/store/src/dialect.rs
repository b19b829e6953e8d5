//! What differs between the two SQL dialects, and nothing else: [`Dialect`], implemented for
//! `sqlx::Sqlite` and `sqlx::Postgres`, hands the shared store code ([`crate::backend`]) its
//! [`Statements`], each rendered **once** per dialect on first use and kept for the process's life.
//!
//! Read [`Statements`] first: every statement the store runs, in the order the store code uses
//! them, each written once in text both dialects share. The seam is small:
//!
//! | What | SQLite | PostgreSQL |
//! |---|---|---|
//! | the database clock in ms (`{now}` in the text) | `unixepoch('subsec')` | `clock_timestamp()` |
//! | claiming a step | one `UPDATE … WHERE step_id = (SELECT …)`: SQLite holds the write lock | `WITH … FOR UPDATE SKIP LOCKED` then `UPDATE … FROM` |
//! | a claim limited to agents and pins | `agent IN (SELECT value FROM json_each($4))` | `agent = ANY(ARRAY(SELECT jsonb_array_elements_text($4::jsonb)))` |
//! | rows a statement changed | `SqliteQueryResult::rows_affected` | `PgQueryResult::rows_affected` |
//!
//! Placeholders are `$1`, `$2`, … in both: sqlx binds SQLite's `$N` parameters by their number
//! (as it does `?N`), so the text needs no rewriting. Errors are classified in [`crate::error`]
//! from the codes of both databases; a unique violation is `is_unique_violation()` on both.
//!
//! It does not own connections, pools, transactions or wake-ups (the backend modules do), nor
//! the order of statements inside a transaction (the `backend` module does).

use std::sync::LazyLock;

/// One of the two SQL dialects the store speaks. Sealed: implemented for `sqlx::Sqlite` and
/// `sqlx::Postgres` only.
pub(crate) trait Dialect: sqlx::Database + sealed::Sealed {
    /// The database clock in ms since the epoch, as an SQL expression (`{now}` in the text).
    const NOW: &'static str;

    /// Every statement in this dialect, rendered on first use.
    fn statements() -> &'static Statements;

    /// How many rows a statement changed (the drivers' results share no trait for it).
    fn rows_affected(result: &Self::QueryResult) -> u64;

    /// This dialect's value of a pair kept per dialect (another module's statements, each
    /// rendered once with its dialect's [`Dialect::NOW`]).
    fn pick<T>(sqlite: &'static T, postgres: &'static T) -> &'static T;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for sqlx::Sqlite {}
    impl Sealed for sqlx::Postgres {}
}

impl Dialect for sqlx::Sqlite {
    const NOW: &'static str = "CAST(unixepoch('subsec') * 1000 AS INTEGER)";

    fn statements() -> &'static Statements {
        static SQLITE: LazyLock<Statements> = LazyLock::new(|| {
            let now = <sqlx::Sqlite as Dialect>::NOW;
            // One statement: SQLite takes the write lock before it reads, so the sub-select and
            // the update are atomic against every other writer (of this process or another).
            let claim = |only_pins: &str| {
                format!(
                    "UPDATE steps SET state = 'claimed', lease_owner = $1,
                         due_at = {now} + $2, attempt = attempt + 1, fence = fence + 1,
                         lost = lost + (CASE WHEN state = 'claimed' THEN 1 ELSE 0 END), updated_at = {now}
                     WHERE step_id = (SELECT step_id FROM steps
                         WHERE state IN ('queued', 'claimed') AND due_at <= {now} AND row_version <= $3
                             {only_pins}
                         ORDER BY due_at LIMIT 1)
                     RETURNING step_id, session_id, row_version, kind, payload, state, interrupt_id,
                         due_at, attempt, fence, lost, output, created_at"
                )
            };
            Statements::render(
                now,
                claim(""),
                claim(
                    "AND agent IN (SELECT value FROM json_each($4))
                     AND pin IN (SELECT value FROM json_each($5))",
                ),
            )
        });
        &SQLITE
    }

    fn rows_affected(result: &sqlx::sqlite::SqliteQueryResult) -> u64 {
        result.rows_affected()
    }

    fn pick<T>(sqlite: &'static T, _postgres: &'static T) -> &'static T {
        sqlite
    }
}

impl Dialect for sqlx::Postgres {
    const NOW: &'static str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

    fn statements() -> &'static Statements {
        static POSTGRES: LazyLock<Statements> = LazyLock::new(|| {
            let now = <sqlx::Postgres as Dialect>::NOW;
            // Workers never wait on each other's candidate rows (`SKIP LOCKED`). Limited to agents
            // and pins, the JSON arrays `$4` and `$5` become init-plan constants, so `agent = ANY(…)`
            // and `pin = ANY(…)` are index conditions of `steps_due_agent (agent, pin, due_at)` and
            // only claimable rows are read.
            let claim = |only_pins: &str| {
                format!(
                    "WITH c AS (
                         SELECT step_id FROM steps
                         WHERE state IN ('queued', 'claimed') AND due_at <= {now} AND row_version <= $3
                             {only_pins}
                         ORDER BY due_at LIMIT 1 FOR UPDATE SKIP LOCKED)
                     UPDATE steps s SET state = 'claimed', lease_owner = $1, due_at = {now} + $2,
                         attempt = s.attempt + 1, fence = s.fence + 1,
                         lost = s.lost + (CASE WHEN s.state = 'claimed' THEN 1 ELSE 0 END), updated_at = {now}
                     FROM c WHERE s.step_id = c.step_id
                     RETURNING s.step_id, s.session_id, s.row_version, s.kind, s.payload, s.state,
                         s.interrupt_id, s.due_at, s.attempt, s.fence, s.lost, s.output, s.created_at"
                )
            };
            Statements::render(
                now,
                claim(""),
                claim(
                    "AND agent = ANY(ARRAY(SELECT jsonb_array_elements_text($4::jsonb)))
                     AND pin = ANY(ARRAY(SELECT jsonb_array_elements_text($5::jsonb)))",
                ),
            )
        });
        &POSTGRES
    }

    fn rows_affected(result: &sqlx::postgres::PgQueryResult) -> u64 {
        result.rows_affected()
    }

    fn pick<T>(_sqlite: &'static T, postgres: &'static T) -> &'static T {
        postgres
    }
}

/// The columns of a step, as [`crate::backend`] decodes them.
const STEP_COLUMNS: &str = "step_id, session_id, row_version, kind, payload, state, interrupt_id, due_at, attempt, fence, lost, output, created_at";

/// The columns of an interrupt, as [`crate::backend`] decodes them.
const INTERRUPT_COLUMNS: &str =
    "session_id, interrupt_id, row_version, request, resolution, created_at, resolved_at, deadline_at,
     escalated_at, approvals";

/// Every statement of the store in one dialect. Parameters are `$1`, `$2`, … as the doc of each
/// names them; the store code binds them in that order.
pub(crate) struct Statements {
    // Inside a session's write transaction.
    /// Locks session `$1`'s row (the first write of every transaction) and returns
    /// `next_item_seq`, `next_event_seq`, `row_version`.
    pub lock_session: &'static str,
    /// Appends item (`$1` session, `$2` seq, `$3` row version, `$4` kind, `$5` uuid, `$6` turn,
    /// `$7` body); a repeated uuid is skipped.
    pub append_item: &'static str,
    /// Appends event (`$1` session, `$2` seq, `$3` row version, `$4` kind, `$5` payload, `$6`
    /// step, `$7` fence).
    pub append_event: &'static str,
    /// Whether session `$1` has an item of kind `$3` after seq `$2`.
    pub item_after: &'static str,
    /// Inserts a step (`$1` session, `$2` row version, `$3` kind, `$4` payload, `$5` state, `$6`
    /// interrupt, `$7` delay in ms), pinned as its session is; returns `step_id`. A second step
    /// in flight is a unique violation.
    pub insert_step: &'static str,
    /// [`Statements::insert_step`], but a second step in flight is skipped (no row returned).
    pub insert_step_or_skip: &'static str,
    /// Stores session `$1`'s next seqs (`$2` item, `$3` event), status `$4` and run state `$5`
    /// when given, and adds usage (`$6` input, `$7` cached input, `$8` output, `$9` model calls).
    pub save_session: &'static str,
    /// Session `$1`'s response to client key `$3` of operation `$2`.
    pub idempotency_key: &'static str,
    /// Records the response (`$5`) to request `$4` under client key `$3` of operation `$2`.
    pub insert_idempotency_key: &'static str,
    /// Interrupt `$2` of session `$1`, with its `state`, `client_key` and the database clock
    /// (`db_now`, ms).
    pub interrupt_to_resolve: &'static str,
    /// The step waiting (or that waited) on interrupt `$2` of session `$1`.
    pub step_of_interrupt: &'static str,
    /// Resolves interrupt `$2` of session `$1` with resolution `$3` under client key `$4`.
    pub resolve_interrupt: &'static str,
    /// Queues the step of session `$1` waiting on interrupt `$2`; returns its `step_id`.
    pub queue_waiting_step: &'static str,
    /// Sets the approvals so far (`$3`, JSON text) of open interrupt `$2` of session `$1`.
    pub record_approvals: &'static str,
    /// Session `$1`'s agent digest, pin and agent name.
    pub agent_of_session: &'static str,
    /// Session `$1`'s step in flight: `step_id`, `kind`, `state`, `attempt`.
    pub busy_step: &'static str,
    /// Pins session `$1` to digest `$2` (`$3`: pinned) of agent `$4`.
    pub pin_session: &'static str,
    /// Moves session `$1`'s queued and waiting steps to pin `$2` of agent `$3`.
    pub pin_steps: &'static str,
    /// Finishes step `$1` under fence `$2` with output `$3`.
    pub finish_done: &'static str,
    /// Queues step `$1` again under fence `$2` after `$3` ms.
    pub finish_retry: &'static str,
    /// Keeps step `$1`'s claim under fence `$2` (touches `updated_at` only).
    pub finish_keep: &'static str,
    /// Writes the live text of step `$1`'s session under fence `$2` (`$3` row version, `$4` turn,
    /// `$5` attempt, `$6` text, `$7` offset, `$8` from seq) while that claim holds the step,
    /// unless the row holds a later claim of the same step; one row changed or none.
    pub put_live_text: &'static str,
    /// Deletes session `$1`'s live text written by step `$2`.
    pub delete_live_text: &'static str,
    /// Inserts or replaces tool call `$2` of session `$1` (`$3` row version, `$4` status, `$5`
    /// record).
    pub upsert_tool_call: &'static str,
    /// Opens interrupt `$2` of session `$1` (`$3` row version, `$4` request, `$5` its deadline in
    /// ms from now, or null); an existing one is a unique violation.
    pub insert_interrupt: &'static str,
    /// Appends a blank line and text `$3` to session `$1`'s last message when its merge key is
    /// `$2`, and makes item seq `$4` its last item; changes no row otherwise.
    pub merge_message: &'static str,
    /// Adds a message to session `$1`'s projection with the next seq (`$2` row version, `$3` role,
    /// `$4` merge key, `$5` text, `$6` item seq).
    pub insert_message: &'static str,
    /// Keeps a transcript chunk (`$1` session, `$2` last item seq, `$3` row version, `$4` CLI
    /// session, `$5` lines).
    pub insert_transcript_chunk: &'static str,
    /// Creates session `$1` (`$2` row version, `$3` status, `$4` run state, `$5` agent digest,
    /// `$6` pinned, `$7` agent name) unless it exists.
    pub create_session: &'static str,

    // Forks (`Store::fork_session`), in the fork's transaction.
    /// Session `$1`'s `row_version`, `next_item_seq`, `unprojected` and `unchunked`.
    pub fork_source: &'static str,
    /// The highest message seq (`n`, 0: none) session `$1` reads, its own or through its
    /// lineage, whose item is at most `$2`.
    pub message_cut: &'static str,
    /// Creates fork `$1` (`$2` row version, `$3` status, `$4` run state, `$5` agent digest, `$6`
    /// pinned, `$7` agent name, `$8` starter, `$9` next item seq, `$10` unprojected, `$11`
    /// unchunked) unless it exists.
    pub create_fork_session: &'static str,
    /// Gives fork `$1` the history ranges of its parent `$2` that begin before item `$3`, cut at
    /// item `$3` and message `$4` (`$5` row version).
    pub inherit_ranges: &'static str,
    /// Adds a history range to session `$1`: items (`$3`, `$2`] and messages (`$6`, `$7`] of
    /// session `$5` (`$4` row version).
    pub insert_range: &'static str,
    /// Records fork `$1` of parent `$2` (`$3` row version, `$4` turn, `$5` item cut, `$6` message
    /// cut, `$7` dry, `$8` who forked it); returns `created_at`.
    pub insert_fork: &'static str,

    // Claims, one statement each.
    /// Claims the oldest due step for worker `$1` with a lease of `$2` ms, rows up to version
    /// `$3`; returns the step's columns.
    pub claim: &'static str,
    /// [`Statements::claim`] limited to steps whose `agent` is one of the JSON array `$4` and
    /// whose `pin` is one of the JSON array `$5`.
    pub claim_for: &'static str,
    /// Extends the lease of step `$1` under fence `$2` by `$3` ms; returns `due_at`.
    pub heartbeat: &'static str,
    /// Queues claimed step `$1` under fence `$2` at once, not counting the attempt; returns
    /// `session_id`.
    pub release: &'static str,

    // Reads.
    /// Session `$1`.
    pub session: &'static str,
    /// Step `$1`.
    pub step: &'static str,
    /// Up to `$3` items of session `$1` after seq `$2`.
    pub items: &'static str,
    /// Up to `$3` events of session `$1` after seq `$2`.
    pub events: &'static str,
    /// Up to `$4` items of kind `$2` of session `$1` after seq `$3` (index `items_kind`).
    pub items_of_kind: &'static str,
    /// Whether session `$1` predates the projection (`unprojected`).
    pub unprojected: &'static str,
    /// Whether session `$1` predates the transcript chunks (`unchunked`).
    pub unchunked: &'static str,
    /// Every transcript chunk of session `$1`, oldest first.
    pub transcript_chunks: &'static str,
    /// The last `$3` messages of session `$1` before seq `$2`, newest first.
    pub messages: &'static str,
    /// Interrupt `$2` of session `$1`.
    pub interrupt: &'static str,
    /// Up to `$3` sessions after id `$1`, with status `$2` unless it is null.
    pub sessions: &'static str,
    /// How many interrupts are open (`n`).
    pub count_open_interrupts: &'static str,
    /// Open interrupts by their session's agent (`''`: none): `agent`, `n`.
    pub open_interrupts_by_agent: &'static str,
    /// Up to `$4` open interrupts after the one keyed (`$1` created at, `$2` session, `$3`
    /// interrupt), oldest first (one range of the partial index `interrupts_open`).
    pub open_interrupts: &'static str,
    /// Tool call `$2` of session `$1`.
    pub tool_call: &'static str,
    /// Every tool call of session `$1`, in the order first written.
    pub tool_calls: &'static str,
    /// Session `$1`'s step in flight.
    pub step_in_flight: &'static str,
    /// Steps due for `$1` ms or more and not claimed (of session `$2` only, unless null): `agent`,
    /// `n`, `oldest` (the earliest `due_at`), by agent.
    pub unclaimed_steps: &'static str,
    /// Session `$1`'s live text while the claim that wrote it holds its step.
    pub live_text: &'static str,
    /// Session `$1`'s fork row (none: it is no fork).
    pub lineage: &'static str,

    // Cancel requests.
    /// Session `$1`'s pending cancel request: `cancel_requested_by` (null: none),
    /// `cancel_requested_at`.
    pub pending_cancel: &'static str,
    /// Keeps principal `$2`'s cancel request on session `$1` at the database time; returns
    /// `cancel_requested_at`.
    pub request_cancel: &'static str,
    /// Clears session `$1`'s cancel request.
    pub clear_cancel: &'static str,
    /// Queues every step of session `$1` that waits on an interrupt; returns their `step_id`.
    pub queue_waiting_steps: &'static str,
}

impl Statements {
    /// The statements with the clock expression `now` and the dialect's two claims. Runs once
    /// per dialect; the text is kept for the process's life.
    fn render(now: &str, claim: String, claim_for: String) -> Self {
        // A new step's pin: the digest of session `$1` when it is pinned, else `''` (any Worker
        // of its agent); its agent: the session's (`''`: none yet, no Worker claims it).
        let pin = "COALESCE((SELECT CASE WHEN agent_pinned THEN agent_digest END
            FROM sessions WHERE session_id = $1), '')";
        let agent = "COALESCE((SELECT agent_name FROM sessions WHERE session_id = $1), '')";
        let insert_step = format!(
            "INSERT INTO steps (session_id, row_version, kind, payload, state, interrupt_id, due_at,
                 created_at, updated_at, pin, agent)
             VALUES ($1, $2, $3, $4, $5, $6, {now} + $7, {now}, {now}, {pin}, {agent})"
        );
        let keep = |s: String| -> &'static str { s.leak() };
        Statements {
            lock_session: keep(format!(
                "UPDATE sessions SET updated_at = {now} WHERE session_id = $1
                 RETURNING next_item_seq, next_event_seq, row_version"
            )),
            // A uuid the session's inherited history holds is a repeat too (a fork's history).
            append_item: keep(format!(
                "INSERT INTO items (session_id, seq, row_version, kind, uuid, turn_id, body, created_at)
                 SELECT $1, $2, $3, $4, $5, $6, $7, {now}
                 WHERE $5 IS NULL OR NOT EXISTS (SELECT 1 FROM fork_history h
                     JOIN items i ON i.session_id = h.source_id AND i.uuid = $5
                         AND i.seq > h.after_seq AND i.seq <= h.through_seq
                     WHERE h.session_id = $1)
                 ON CONFLICT DO NOTHING"
            )),
            append_event: keep(format!(
                "INSERT INTO events (session_id, seq, row_version, kind, payload, step_id, fence, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, {now})"
            )),
            item_after: "SELECT 1 AS found FROM items WHERE session_id = $1 AND seq > $2 AND kind = $3
                 UNION ALL
                 SELECT 1 AS found FROM fork_history h JOIN items i ON i.session_id = h.source_id
                     AND i.seq > h.after_seq AND i.seq <= h.through_seq
                 WHERE h.session_id = $1 AND i.seq > $2 AND i.kind = $3
                 LIMIT 1",
            insert_step_or_skip: keep(format!("{insert_step} ON CONFLICT DO NOTHING RETURNING step_id")),
            insert_step: keep(format!("{insert_step} RETURNING step_id")),
            save_session: keep(format!(
                "UPDATE sessions SET next_item_seq = $2, next_event_seq = $3,
                     status = COALESCE($4, status), run_state = COALESCE($5, run_state),
                     usage_input_tokens = usage_input_tokens + $6,
                     usage_cached_input_tokens = usage_cached_input_tokens + $7,
                     usage_output_tokens = usage_output_tokens + $8,
                     usage_model_calls = usage_model_calls + $9,
                     updated_at = {now}
                 WHERE session_id = $1"
            )),
            idempotency_key: "SELECT request, response FROM idempotency_keys
                 WHERE session_id = $1 AND operation = $2 AND client_key = $3",
            insert_idempotency_key: keep(format!(
                "INSERT INTO idempotency_keys (session_id, operation, client_key, request, response, created_at)
                 VALUES ($1, $2, $3, $4, $5, {now})"
            )),
            interrupt_to_resolve: keep(format!(
                "SELECT session_id, interrupt_id, row_version, state, request, resolution,
                     client_key, created_at, resolved_at, deadline_at, escalated_at, approvals,
                     {now} AS db_now
                 FROM interrupts WHERE session_id = $1 AND interrupt_id = $2"
            )),
            step_of_interrupt: "SELECT step_id FROM steps WHERE session_id = $1 AND interrupt_id = $2
                 ORDER BY step_id LIMIT 1",
            resolve_interrupt: keep(format!(
                "UPDATE interrupts SET state = 'resolved', resolution = $3, client_key = $4,
                     resolved_at = {now}
                 WHERE session_id = $1 AND interrupt_id = $2"
            )),
            record_approvals: "UPDATE interrupts SET approvals = $3
                 WHERE session_id = $1 AND interrupt_id = $2 AND state = 'open'",
            queue_waiting_step: keep(format!(
                "UPDATE steps SET state = 'queued', due_at = {now}, updated_at = {now}
                 WHERE session_id = $1 AND interrupt_id = $2 AND state = 'waiting'
                 RETURNING step_id"
            )),
            agent_of_session: "SELECT agent_digest, agent_pinned, agent_name FROM sessions WHERE session_id = $1",
            busy_step: "SELECT step_id, kind, state, attempt FROM steps
                 WHERE session_id = $1 AND state IN ('queued', 'claimed', 'waiting')",
            pin_session: "UPDATE sessions SET agent_digest = $2, agent_pinned = $3, agent_name = $4
                 WHERE session_id = $1",
            pin_steps: keep(format!(
                "UPDATE steps SET pin = $2, agent = $3, updated_at = {now}
                 WHERE session_id = $1 AND state IN ('queued', 'waiting')"
            )),
            finish_done: keep(format!(
                "UPDATE steps SET state = 'done', output = $3, due_at = NULL, lease_owner = NULL,
                     updated_at = {now}
                 WHERE step_id = $1 AND fence = $2 AND state = 'claimed'"
            )),
            finish_retry: keep(format!(
                "UPDATE steps SET state = 'queued', due_at = {now} + $3, lease_owner = NULL,
                     updated_at = {now}
                 WHERE step_id = $1 AND fence = $2 AND state = 'claimed'"
            )),
            finish_keep: keep(format!(
                "UPDATE steps SET updated_at = {now}
                 WHERE step_id = $1 AND fence = $2 AND state = 'claimed'"
            )),
            put_live_text: keep(format!(
                "INSERT INTO live_text (session_id, row_version, step_id, fence, turn_id, attempt, text,
                     text_offset, from_seq, updated_at)
                 SELECT session_id, $3, step_id, fence, $4, $5, $6, $7, $8, {now} FROM steps
                 WHERE step_id = $1 AND fence = $2 AND state = 'claimed'
                 ON CONFLICT (session_id) DO UPDATE SET row_version = excluded.row_version,
                     step_id = excluded.step_id, fence = excluded.fence, turn_id = excluded.turn_id,
                     attempt = excluded.attempt, text = excluded.text,
                     text_offset = excluded.text_offset, from_seq = excluded.from_seq,
                     updated_at = excluded.updated_at
                 WHERE live_text.step_id <> excluded.step_id OR live_text.fence <= excluded.fence"
            )),
            delete_live_text: "DELETE FROM live_text WHERE session_id = $1 AND step_id = $2",
            upsert_tool_call: keep(format!(
                "INSERT INTO tool_calls (session_id, tool_call_id, row_version, status, record,
                     created_at, updated_at)
                 VALUES ($1, $2, $3, $4, $5, {now}, {now})
                 ON CONFLICT (session_id, tool_call_id) DO UPDATE SET status = excluded.status,
                     record = excluded.record, row_version = excluded.row_version,
                     updated_at = excluded.updated_at"
            )),
            insert_interrupt: keep(format!(
                "INSERT INTO interrupts (session_id, interrupt_id, row_version, state, request, created_at,
                     deadline_at)
                 VALUES ($1, $2, $3, 'open', $4, {now}, {now} + $5)"
            )),
            merge_message: "UPDATE messages SET text = text || '\n\n' || $3, item_seq = $4
                 WHERE session_id = $1 AND merge_key = $2
                     AND seq = (SELECT MAX(seq) FROM messages WHERE session_id = $1)",
            insert_message: keep(format!(
                "INSERT INTO messages (session_id, seq, row_version, role, merge_key, text, item_seq, images,
                     created_at)
                 SELECT $1,
                     COALESCE(MAX(seq), (SELECT through_message_seq FROM forks WHERE session_id = $1), 0) + 1,
                     $2, $3, $4, $5, $6, $7, {now}
                 FROM messages WHERE session_id = $1"
            )),
            insert_transcript_chunk: keep(format!(
                "INSERT INTO transcript_chunks (session_id, item_seq, row_version, cli_session_id, lines, created_at)
                 VALUES ($1, $2, $3, $4, $5, {now})"
            )),
            create_session: keep(format!(
                "INSERT INTO sessions (session_id, row_version, status, run_state, created_at, updated_at,
                     agent_digest, agent_pinned, agent_name)
                 VALUES ($1, $2, $3, $4, {now}, {now}, $5, $6, $7) ON CONFLICT DO NOTHING"
            )),
            fork_source: "SELECT row_version, next_item_seq, unprojected, unchunked FROM sessions
                 WHERE session_id = $1",
            message_cut: "SELECT COALESCE(MAX(seq), 0) AS n FROM (
                     SELECT seq FROM (SELECT seq FROM messages WHERE session_id = $1 AND item_seq <= $2
                         ORDER BY seq DESC LIMIT 1) own
                     UNION ALL
                     SELECT seq FROM (SELECT m.seq FROM fork_history h JOIN messages m
                         ON m.session_id = h.source_id AND m.seq > h.after_message_seq
                             AND m.seq <= h.through_message_seq
                         WHERE h.session_id = $1 AND m.item_seq <= $2 ORDER BY m.seq DESC LIMIT 1) inherited
                 ) cut",
            create_fork_session: keep(format!(
                "INSERT INTO sessions (session_id, row_version, status, run_state, created_at, updated_at,
                     agent_digest, agent_pinned, agent_name, started_by, next_item_seq, unprojected, unchunked)
                 VALUES ($1, $2, $3, $4, {now}, {now}, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT DO NOTHING"
            )),
            inherit_ranges: "INSERT INTO fork_history (session_id, through_seq, row_version, source_id, after_seq,
                     after_message_seq, through_message_seq)
                 SELECT $1, CASE WHEN through_seq < $3 THEN through_seq ELSE $3 END, $5, source_id, after_seq,
                     after_message_seq,
                     CASE WHEN through_message_seq < $4 THEN through_message_seq ELSE $4 END
                 FROM fork_history WHERE session_id = $2 AND after_seq < $3",
            insert_range: "INSERT INTO fork_history (session_id, through_seq, row_version, source_id, after_seq,
                     after_message_seq, through_message_seq)
                 VALUES ($1, $2, $4, $5, $3, $6, $7)",
            insert_fork: keep(format!(
                "INSERT INTO forks (session_id, row_version, parent_id, turn, through_item_seq,
                     through_message_seq, dry, forked_by, created_at)
                 VALUES ($1, $3, $2, $4, $5, $6, $7, $8, {now}) RETURNING created_at"
            )),
            claim: keep(claim),
            claim_for: keep(claim_for),
            heartbeat: keep(format!(
                "UPDATE steps SET due_at = {now} + $3, updated_at = {now}
                 WHERE step_id = $1 AND fence = $2 AND state = 'claimed' RETURNING due_at"
            )),
            release: keep(format!(
                "UPDATE steps SET state = 'queued', due_at = {now}, lease_owner = NULL,
                     attempt = attempt - 1, updated_at = {now}
                 WHERE step_id = $1 AND fence = $2 AND state = 'claimed' RETURNING session_id"
            )),
            session: "SELECT session_id, row_version, status, run_state, usage_input_tokens,
                     usage_cached_input_tokens, usage_output_tokens, usage_model_calls,
                     next_item_seq, next_event_seq, created_at, updated_at, agent_digest, agent_pinned,
                     agent_name
                 FROM sessions WHERE session_id = $1",
            step: keep(format!("SELECT {STEP_COLUMNS} FROM steps WHERE step_id = $1")),
            items: "SELECT seq, row_version, kind, uuid, turn_id, body, created_at FROM items
                 WHERE session_id = $1 AND seq > $2
                 UNION ALL
                 SELECT i.seq, i.row_version, i.kind, i.uuid, i.turn_id, i.body, i.created_at
                 FROM fork_history h JOIN items i ON i.session_id = h.source_id
                     AND i.seq > h.after_seq AND i.seq <= h.through_seq
                 WHERE h.session_id = $1 AND i.seq > $2
                 ORDER BY seq LIMIT $3",
            events: "SELECT seq, row_version, kind, payload, step_id, fence, created_at FROM events
                 WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
            interrupt: keep(format!(
                "SELECT {INTERRUPT_COLUMNS} FROM interrupts WHERE session_id = $1 AND interrupt_id = $2"
            )),
            items_of_kind: "SELECT seq, row_version, kind, uuid, turn_id, body, created_at FROM items
                 WHERE session_id = $1 AND kind = $2 AND seq > $3
                 UNION ALL
                 SELECT i.seq, i.row_version, i.kind, i.uuid, i.turn_id, i.body, i.created_at
                 FROM fork_history h JOIN items i ON i.session_id = h.source_id AND i.kind = $2
                     AND i.seq > h.after_seq AND i.seq <= h.through_seq
                 WHERE h.session_id = $1 AND i.seq > $3
                 ORDER BY seq LIMIT $4",
            unprojected: "SELECT unprojected FROM sessions WHERE session_id = $1",
            unchunked: "SELECT unchunked FROM sessions WHERE session_id = $1",
            transcript_chunks: "SELECT item_seq, row_version, cli_session_id, lines FROM transcript_chunks
                 WHERE session_id = $1
                 UNION ALL
                 SELECT c.item_seq, c.row_version, c.cli_session_id, c.lines
                 FROM fork_history h JOIN transcript_chunks c ON c.session_id = h.source_id
                     AND c.item_seq > h.after_seq AND c.item_seq <= h.through_seq
                 WHERE h.session_id = $1
                 ORDER BY item_seq",
            messages: "SELECT seq, row_version, role, text, images, item_seq, created_at FROM messages
                 WHERE session_id = $1 AND seq < $2
                 UNION ALL
                 SELECT m.seq, m.row_version, m.role, m.text, m.images, m.item_seq, m.created_at
                 FROM fork_history h JOIN messages m ON m.session_id = h.source_id
                     AND m.seq > h.after_message_seq AND m.seq <= h.through_message_seq
                 WHERE h.session_id = $1 AND m.seq < $2
                 ORDER BY seq DESC LIMIT $3",
            sessions: "SELECT session_id, row_version, status, created_at, updated_at, agent_digest, agent_pinned,
                     agent_name
                 FROM sessions
                 WHERE session_id > $1 AND ($2 IS NULL OR status = $2)
                 ORDER BY session_id LIMIT $3",
            count_open_interrupts: "SELECT count(*) AS n FROM interrupts WHERE state = 'open'",
            open_interrupts_by_agent: "SELECT COALESCE(s.agent_name, '') AS agent, count(*) AS n
                 FROM interrupts i JOIN sessions s ON s.session_id = i.session_id
                 WHERE i.state = 'open' GROUP BY COALESCE(s.agent_name, '') ORDER BY 1",
            open_interrupts: keep(format!(
                "SELECT {INTERRUPT_COLUMNS} FROM interrupts
                 WHERE state = 'open' AND (created_at, session_id, interrupt_id) > ($1, $2, $3)
                 ORDER BY created_at, session_id, interrupt_id LIMIT $4"
            )),
            tool_call: "SELECT row_version, status, record FROM tool_calls
                 WHERE session_id = $1 AND tool_call_id = $2",
            tool_calls: "SELECT tool_call_id, row_version, status, record FROM tool_calls
                 WHERE session_id = $1 ORDER BY created_at, tool_call_id",
            step_in_flight: keep(format!(
                "SELECT {STEP_COLUMNS} FROM steps
                 WHERE session_id = $1 AND state IN ('queued', 'claimed', 'waiting')"
            )),
            unclaimed_steps: keep(format!(
                "SELECT agent, count(*) AS n, min(due_at) AS oldest FROM steps
                 WHERE state IN ('queued', 'claimed') AND due_at <= {now} - $1
                     AND ($2 IS NULL OR session_id = $2)
                 GROUP BY agent ORDER BY agent"
            )),
            live_text: "SELECT l.row_version, l.step_id, l.fence, l.turn_id, l.attempt, l.text_offset,
                     l.from_seq, l.text, l.updated_at
                 FROM live_text l JOIN steps s ON s.step_id = l.step_id AND s.fence = l.fence
                 WHERE l.session_id = $1 AND s.state = 'claimed'",
            lineage: "SELECT session_id, row_version, parent_id, turn, through_item_seq, through_message_seq, dry,
                     forked_by, created_at
                 FROM forks WHERE session_id = $1",
            pending_cancel: "SELECT cancel_requested_by, cancel_requested_at FROM sessions WHERE session_id = $1",
            request_cancel: keep(format!(
                "UPDATE sessions SET cancel_requested_by = $2, cancel_requested_at = {now}
                 WHERE session_id = $1 RETURNING cancel_requested_at"
            )),
            clear_cancel: "UPDATE sessions SET cancel_requested_by = NULL, cancel_requested_at = NULL
                 WHERE session_id = $1",
            queue_waiting_steps: keep(format!(
                "UPDATE steps SET state = 'queued', due_at = {now}, updated_at = {now}
                 WHERE session_id = $1 AND state = 'waiting' RETURNING step_id"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// Every statement by name. Destructured without `..`, so a new statement must be added here.
    fn each(s: &'static Statements) -> Vec<(&'static str, &'static str)> {
        let Statements {
            lock_session,
            append_item,
            append_event,
            item_after,
            insert_step,
            insert_step_or_skip,
            save_session,
            idempotency_key,
            insert_idempotency_key,
            interrupt_to_resolve,
            step_of_interrupt,
            resolve_interrupt,
            queue_waiting_step,
            record_approvals,
            agent_of_session,
            busy_step,
            pin_session,
            pin_steps,
            finish_done,
            finish_retry,
            finish_keep,
            put_live_text,
            delete_live_text,
            upsert_tool_call,
            insert_interrupt,
            merge_message,
            insert_message,
            insert_transcript_chunk,
            create_session,
            fork_source,
            message_cut,
            create_fork_session,
            inherit_ranges,
            insert_range,
            insert_fork,
            claim,
            claim_for,
            heartbeat,
            release,
            session,
            step,
            items,
            events,
            items_of_kind,
            unprojected,
            unchunked,
            transcript_chunks,
            messages,
            interrupt,
            sessions,
            count_open_interrupts,
            open_interrupts_by_agent,
            open_interrupts,
            tool_call,
            tool_calls,
            step_in_flight,
            unclaimed_steps,
            live_text,
            lineage,
            pending_cancel,
            request_cancel,
            clear_cancel,
            queue_waiting_steps,
        } = s;
        vec![
            ("lock_session", *lock_session),
            ("append_item", *append_item),
            ("append_event", *append_event),
            ("item_after", *item_after),
            ("insert_step", *insert_step),
            ("insert_step_or_skip", *insert_step_or_skip),
            ("save_session", *save_session),
            ("idempotency_key", *idempotency_key),
            ("insert_idempotency_key", *insert_idempotency_key),
            ("interrupt_to_resolve", *interrupt_to_resolve),
            ("step_of_interrupt", *step_of_interrupt),
            ("resolve_interrupt", *resolve_interrupt),
            ("queue_waiting_step", *queue_waiting_step),
            ("record_approvals", *record_approvals),
            ("agent_of_session", *agent_of_session),
            ("busy_step", *busy_step),
            ("pin_session", *pin_session),
            ("pin_steps", *pin_steps),
            ("finish_done", *finish_done),
            ("finish_retry", *finish_retry),
            ("finish_keep", *finish_keep),
            ("put_live_text", *put_live_text),
            ("delete_live_text", *delete_live_text),
            ("upsert_tool_call", *upsert_tool_call),
            ("insert_interrupt", *insert_interrupt),
            ("merge_message", *merge_message),
            ("insert_message", *insert_message),
            ("insert_transcript_chunk", *insert_transcript_chunk),
            ("create_session", *create_session),
            ("fork_source", *fork_source),
            ("message_cut", *message_cut),
            ("create_fork_session", *create_fork_session),
            ("inherit_ranges", *inherit_ranges),
            ("insert_range", *insert_range),
            ("insert_fork", *insert_fork),
            ("claim", *claim),
            ("claim_for", *claim_for),
            ("heartbeat", *heartbeat),
            ("release", *release),
            ("session", *session),
            ("step", *step),
            ("items", *items),
            ("events", *events),
            ("items_of_kind", *items_of_kind),
            ("unprojected", *unprojected),
            ("unchunked", *unchunked),
            ("transcript_chunks", *transcript_chunks),
            ("messages", *messages),
            ("interrupt", *interrupt),
            ("sessions", *sessions),
            ("count_open_interrupts", *count_open_interrupts),
            ("open_interrupts_by_agent", *open_interrupts_by_agent),
            ("open_interrupts", *open_interrupts),
            ("tool_call", *tool_call),
            ("tool_calls", *tool_calls),
            ("step_in_flight", *step_in_flight),
            ("unclaimed_steps", *unclaimed_steps),
            ("live_text", *live_text),
            ("lineage", *lineage),
            ("pending_cancel", *pending_cancel),
            ("request_cancel", *request_cancel),
            ("clear_cancel", *clear_cancel),
            ("queue_waiting_steps", *queue_waiting_steps),
        ]
    }

    /// The `$N` placeholders of `sql`, each with the character after its digits.
    fn placeholders(sql: &str) -> Vec<(u32, Option<char>)> {
        let mut found = Vec::new();
        for (i, _) in sql.match_indices('$') {
            let rest = &sql[i + 1..];
            let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
            let n = rest[..digits].parse().unwrap_or_else(|_| panic!("`$` without a number in {sql}"));
            found.push((n, rest[digits..].chars().next()));
        }
        found
    }

    #[test]
    fn each_dialect_renders_its_statements_once_and_keeps_them() {
        assert!(std::ptr::eq(sqlx::Sqlite::statements(), sqlx::Sqlite::statements()));
        assert!(std::ptr::eq(sqlx::Postgres::statements(), sqlx::Postgres::statements()));
        let clocks = [
            ("SQLite", sqlx::Sqlite::statements(), "unixepoch"),
            ("PostgreSQL", sqlx::Postgres::statements(), "clock_timestamp"),
        ];
        for (dialect, statements, clock) in clocks {
            for (name, sql) in each(statements) {
                assert!(!sql.contains(['{', '}']), "{dialect} `{name}` kept a template token: {sql}");
                let other = if clock == "unixepoch" { "clock_timestamp" } else { "unixepoch" };
                assert!(!sql.contains(other), "{dialect} `{name}` uses the other dialect's clock: {sql}");
            }
            assert!(statements.lock_session.contains(clock), "{dialect}: {}", statements.lock_session);
        }
    }

    #[test]
    fn both_dialects_take_the_same_numbered_parameters_in_every_statement() {
        let sqlite = each(sqlx::Sqlite::statements());
        let postgres = each(sqlx::Postgres::statements());
        for ((name, lite), (_, pg)) in sqlite.into_iter().zip(postgres) {
            let numbers = |sql| placeholders(sql).into_iter().map(|p| p.0).collect::<BTreeSet<_>>();
            assert_eq!(numbers(lite), numbers(pg), "`{name}` binds different parameters:\n{lite}\n{pg}");
            let expected: BTreeSet<u32> = (1..=numbers(lite).len() as u32).collect();
            assert_eq!(numbers(lite), expected, "`{name}` skips a parameter number: {lite}");
        }
    }

    /// SQLite reads `$AAAA` as a named parameter whose name may go on with `::` or `(…)`, so a
    /// `$4::jsonb` in SQLite text would swallow the cast into the parameter's name: each `$N`
    /// must end at its digits.
    #[test]
    fn sqlite_reads_every_placeholder_as_a_plain_number() {
        for (name, sql) in each(sqlx::Sqlite::statements()) {
            for (n, next) in placeholders(sql) {
                let bad = next.is_some_and(|c| c.is_alphanumeric() || matches!(c, '_' | ':' | '(' | '$'));
                assert!(!bad, "`{name}`: `${n}` is followed by {next:?}: {sql}");
            }
        }
    }
}
