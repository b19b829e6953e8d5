//! Errors of the store: [`StoreError`], split into *terminal* and *retryable* ones.
//!
//! This module owns the error type every [`crate::Store`] method returns and the classification
//! of driver errors. It does not decide what a caller does about an error; it only says whether
//! trying the same call again can succeed ([`StoreError::is_retryable`]) and, for a store that is
//! unavailable for a while, why ([`UnavailableReason`]: unreachable, pool timeout, busy, disk
//! full, read-only, I/O), so that an API can answer 503 with `Retry-After` and a health check
//! can name the cause.
//!
//! # Caveats
//!
//! - [`StoreError::LeaseLost`] is terminal *for the attempt*: the Worker must stop the step's
//!   work and write nothing more for it. The step itself is not lost: its new holder runs it.
//! - A retryable error may come after the database committed (a connection dropped while the
//!   commit's reply was in flight). Calls with a client key are safe to repeat; a fenced commit
//!   repeated after such an error returns [`StoreError::LeaseLost`] only if another Worker
//!   claimed the step meanwhile.

use serde_json::value::RawValue;

/// Everything a store call can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The claim this call relied on is no longer the step's current claim (another Worker
    /// reclaimed it after the lease expired, or the step already finished). Nothing was written.
    #[error(
        "lease lost on step {step_id} (fence {fence}): the step was reclaimed or finished; nothing was committed"
    )]
    LeaseLost {
        /// The step.
        step_id: i64,
        /// The fence of the stale claim.
        fence: i64,
    },
    /// No session with this ID.
    #[error("no session `{session_id}`")]
    SessionNotFound {
        /// The session ID asked for.
        session_id: String,
    },
    /// No interrupt with this ID in the session.
    #[error("no interrupt `{interrupt_id}` in session `{session_id}`")]
    InterruptNotFound {
        /// The session.
        session_id: String,
        /// The interrupt ID asked for.
        interrupt_id: String,
    },
    /// The interrupt was already resolved under another client key.
    #[error("interrupt `{interrupt_id}` of session `{session_id}` is already resolved: {resolution}")]
    InterruptAlreadyResolved {
        /// The session.
        session_id: String,
        /// The interrupt.
        interrupt_id: String,
        /// The resolution that was stored first.
        resolution: Box<RawValue>,
    },
    /// The principal already approved this interrupt, which needs several different approvers,
    /// under another client key: an approval counts once per principal. Nothing was written.
    #[error(
        "principal `{principal}` already approved interrupt `{interrupt_id}` of session `{session_id}`, which needs {required} different approvers: another approver must"
    )]
    AlreadyApprovedBy {
        /// The session.
        session_id: String,
        /// The interrupt.
        interrupt_id: String,
        /// Who approved twice.
        principal: String,
        /// How many different approvers it needs.
        required: u32,
    },
    /// A decision arrived after the interrupt's approval deadline passed (whether or not a Worker
    /// has acted on it yet): it is refused and nothing is written. `deadline_at` is the deadline
    /// (ms since the epoch, database clock).
    #[error(
        "interrupt `{interrupt_id}` of session `{session_id}` expired: its approval deadline passed at {deadline_at} ms since the epoch (database clock) before this decision; nothing was written"
    )]
    InterruptExpired {
        /// The session.
        session_id: String,
        /// The interrupt.
        interrupt_id: String,
        /// The deadline that passed (ms, database clock).
        deadline_at: i64,
    },
    /// The decider's authority was checked against the interrupt before an escalation changed
    /// who may decide it (`escalated_at`: when; `None`: the interrupt the caller saw was escalated,
    /// and is not now). Nothing was written: check again against the interrupt as it is.
    #[error(
        "interrupt `{interrupt_id}` of session `{session_id}` was escalated to other approvers after this decision's check; nothing was written"
    )]
    InterruptEscalated {
        /// The session.
        session_id: String,
        /// The interrupt.
        interrupt_id: String,
        /// When it was escalated (ms, database clock).
        escalated_at: Option<i64>,
    },
    /// A deadline was fired that is not the interrupt's due deadline now: it has none, it has
    /// not passed yet, or it moved (an escalation set a new one). Nothing was written.
    #[error(
        "the deadline of interrupt `{interrupt_id}` of session `{session_id}` is not due: {detail}; nothing was written"
    )]
    DeadlineNotDue {
        /// The session.
        session_id: String,
        /// The interrupt.
        interrupt_id: String,
        /// Why, e.g. `it moved to 1700000000000 (escalated)`.
        detail: String,
    },
    /// A client key was reused with a different request.
    #[error(
        "client key `{client_key}` of `{operation}` in session `{session_id}` was used for a different request"
    )]
    IdempotencyConflict {
        /// The session.
        session_id: String,
        /// `send_user_message` or `resolve_interrupt`.
        operation: &'static str,
        /// The reused key.
        client_key: String,
    },
    /// The commit would put a second step in flight in the session (at most one step is queued,
    /// claimed or waiting per session). Nothing was written.
    #[error("session `{session_id}` already has a step in flight; nothing was committed")]
    StepInFlight {
        /// The session.
        session_id: String,
    },
    /// The session is running a step (claimed, or queued again after an attempt), so it cannot
    /// move to another agent now. Nothing was written.
    #[error(
        "session `{session_id}` is running a step ({detail}); only a waiting or idle session can be upgraded"
    )]
    SessionBusy {
        /// The session.
        session_id: String,
        /// What it is doing, e.g. `step 7 (RunModel) is claimed`.
        detail: String,
    },
    /// The session cannot be pinned to that digest: no Worker could run it there (the digest
    /// is unknown, of another agent, or of an unlocked bundle). Nothing was written.
    #[error("session `{session_id}` cannot move to {to}: {detail}")]
    UpgradeRefused {
        /// The session.
        session_id: String,
        /// The digest asked for.
        to: String,
        /// Why, naming what would make it possible.
        detail: String,
    },
    /// A cancel was asked of a session with no step in flight: no turn runs. Nothing was written.
    #[error("session `{session_id}` has no turn in progress to cancel")]
    NothingToCancel {
        /// The session.
        session_id: String,
    },
    /// A decision on an interrupt of a session whose turn is being cancelled
    /// ([`crate::Store::request_cancel`]): the interrupt closes with the turn. Nothing was written.
    #[error(
        "interrupt `{interrupt_id}` of session `{session_id}` is not decided: `{requested_by}` cancelled its turn"
    )]
    CancelPending {
        /// The session.
        session_id: String,
        /// The interrupt.
        interrupt_id: String,
        /// Who asked to cancel.
        requested_by: String,
    },
    /// No tool call with this ID in the session.
    #[error("no tool call `{tool_call_id}` in session `{session_id}`")]
    ToolCallNotFound {
        /// The session.
        session_id: String,
        /// The tool call ID asked for.
        tool_call_id: String,
    },
    /// A check mark was asked for a tool call that needs no attention: its outcome is known and
    /// it did not fail. Nothing was written.
    #[error(
        "tool call `{tool_call_id}` of session `{session_id}` is `{status}`: only an `outcome_unknown` or `failed` call is marked checked; nothing was written"
    )]
    NothingToCheck {
        /// The session.
        session_id: String,
        /// The tool call.
        tool_call_id: String,
        /// Its status.
        status: String,
    },
    /// A fork was asked under the id of a session that exists already. Nothing was written.
    #[error("session `{session_id}` exists already: a fork is a new session; nothing was written")]
    SessionExists {
        /// The id asked for.
        session_id: String,
    },
    /// The caller passed something the store refuses (e.g. a run state without a `version`).
    #[error("invalid input: {what}")]
    Invalid {
        /// What is wrong.
        what: String,
    },
    /// A stored row is not what this version wrote (bad JSON, unknown state). Only the call that
    /// read it fails; the row and every other row stay as they are.
    #[error("corrupt row in `{table}` ({key}): {detail}")]
    Corrupt {
        /// The table.
        table: &'static str,
        /// The row's key, e.g. `session-42/7`.
        key: String,
        /// What is wrong with it.
        detail: String,
    },
    /// A stored row was written by a newer Tollgate (its `row_version` is higher than this build
    /// knows). It is refused, left untouched, and never claimed by this build.
    #[error(
        "row in `{table}` ({key}) has format version {found}; this build reads up to {supported}: upgrade Tollgate"
    )]
    FutureVersion {
        /// The table.
        table: &'static str,
        /// The row's key.
        key: String,
        /// The row's version.
        found: i64,
        /// The newest version this build reads.
        supported: i64,
    },
    /// The database could not take the call now (unreachable, busy, disk full, read-only): the
    /// same call may succeed later. `reason` names the cause.
    #[error("database unavailable ({reason}): {source}")]
    Unavailable {
        /// Why, in one word an operator acts on.
        reason: UnavailableReason,
        /// The driver error.
        #[source]
        source: sqlx::Error,
    },
    /// The database refused the statement (a bug, or a schema this build does not know).
    #[error("database error: {source}")]
    Database {
        /// The driver error.
        #[source]
        source: sqlx::Error,
    },
    /// The schema could not be migrated (e.g. the database was migrated by a newer Tollgate).
    #[error("schema migration failed: {source}")]
    Migrate {
        /// The migrator's error.
        #[source]
        source: sqlx::migrate::MigrateError,
    },
    /// The connection string names no backend this store has.
    #[error("unsupported database URL `{url}`: use sqlite://PATH or postgres://…")]
    UnsupportedUrl {
        /// The URL given.
        url: String,
    },
}

/// Why the database is unavailable ([`StoreError::Unavailable`]); every cause heals by itself
/// once its fault ends (the store recycles connections the fault spoiled).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum UnavailableReason {
    /// No connection: refused, reset or closed, or the server is shutting down or starting.
    Unreachable,
    /// No pooled connection came free within the pool's acquire timeout.
    PoolTimeout,
    /// Lock contention, a serialization failure or a deadlock.
    Busy,
    /// The disk (or the filesystem's quota) is full.
    DiskFull,
    /// The database file or server is read-only.
    ReadOnly,
    /// The database file could not be read, written or opened.
    Io,
}

impl std::fmt::Display for UnavailableReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            UnavailableReason::Unreachable => "unreachable",
            UnavailableReason::PoolTimeout => "no connection within the acquire timeout",
            UnavailableReason::Busy => "busy",
            UnavailableReason::DiskFull => "disk full",
            UnavailableReason::ReadOnly => "read-only",
            UnavailableReason::Io => "I/O error",
        })
    }
}

impl UnavailableReason {
    /// A stable snake_case name, e.g. for JSON: `unreachable`, `pool_timeout`, `busy`,
    /// `disk_full`, `read_only`, `io`.
    pub fn code(self) -> &'static str {
        match self {
            UnavailableReason::Unreachable => "unreachable",
            UnavailableReason::PoolTimeout => "pool_timeout",
            UnavailableReason::Busy => "busy",
            UnavailableReason::DiskFull => "disk_full",
            UnavailableReason::ReadOnly => "read_only",
            UnavailableReason::Io => "io",
        }
    }
}

impl StoreError {
    /// Whether repeating the same call later can succeed. Only [`StoreError::Unavailable`] is
    /// retryable; everything else is terminal for this call.
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Unavailable { .. })
    }

    /// Why the database is unavailable, for a [`StoreError::Unavailable`]; `None` otherwise.
    pub fn unavailable(&self) -> Option<UnavailableReason> {
        match self {
            StoreError::Unavailable { reason, .. } => Some(*reason),
            _ => None,
        }
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(source: sqlx::Error) -> Self {
        match unavailable(&source) {
            Some(reason) => StoreError::Unavailable { reason, source },
            None => StoreError::Database { source },
        }
    }
}

/// The fault of a whole batch of writes (SQLite's group commit, [`crate::group`]), told to each
/// write of the batch with the same classification as the fault itself.
pub(crate) struct BatchFailure {
    reason: Option<UnavailableReason>,
    message: String,
}

impl BatchFailure {
    pub(crate) fn new(source: sqlx::Error) -> BatchFailure {
        BatchFailure { reason: unavailable(&source), message: source.to_string() }
    }

    /// The error one write of the batch is answered with.
    pub(crate) fn copy(&self) -> StoreError {
        let source = sqlx::Error::Protocol(format!(
            "the batch of writes this one was committed in failed: {}",
            self.message
        ));
        match self.reason {
            Some(reason) => StoreError::Unavailable { reason, source },
            None => StoreError::Database { source },
        }
    }
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(source: sqlx::migrate::MigrateError) -> Self {
        StoreError::Migrate { source }
    }
}

/// Connection, pool, lock-contention and resource errors are transient (the cause they name
/// ends: the server comes back, the disk gets space, the file becomes writable); statement
/// errors are not.
fn unavailable(error: &sqlx::Error) -> Option<UnavailableReason> {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => Some(UnavailableReason::Unreachable),
        sqlx::Error::PoolTimedOut => Some(UnavailableReason::PoolTimeout),
        sqlx::Error::Database(db) => db_unavailable(&db.code().unwrap_or_default()),
        _ => None,
    }
}

/// A database error code (PostgreSQL SQLSTATE, or SQLite's extended result code in decimal)
/// that names a passing fault.
fn db_unavailable(code: &str) -> Option<UnavailableReason> {
    // PostgreSQL's SQLSTATE has 5 characters (often digits only); SQLite's extended result
    // codes have at most 4 digits, the primary code in their low byte.
    if let Some(sqlite) = code.parse::<i64>().ok().filter(|_| code.len() < 5) {
        return match sqlite & 0xff {
            5 | 6 => Some(UnavailableReason::Busy),  // SQLITE_BUSY, SQLITE_LOCKED
            8 => Some(UnavailableReason::ReadOnly),  // SQLITE_READONLY
            10 | 14 => Some(UnavailableReason::Io),  // SQLITE_IOERR, SQLITE_CANTOPEN
            13 => Some(UnavailableReason::DiskFull), // SQLITE_FULL
            _ => None,
        };
    }
    match code {
        "40001" | "40P01" | "55P03" => Some(UnavailableReason::Busy), // serialization, deadlock, lock
        "53100" => Some(UnavailableReason::DiskFull),
        "25006" => Some(UnavailableReason::ReadOnly), // read_only_sql_transaction (a standby)
        "57P01" | "57P02" | "57P03" => Some(UnavailableReason::Unreachable), // shutdown, starting up
        _ if code.starts_with("08") => Some(UnavailableReason::Unreachable), // connection exceptions
        _ if code.starts_with("53") => Some(UnavailableReason::Busy), // out of memory, connections
        "58030" => Some(UnavailableReason::Io),
        _ => None,
    }
}

/// A row's format version check: refuse a newer row with a clear error.
pub(crate) fn check_row_version(table: &'static str, key: &str, found: i64) -> Result<(), StoreError> {
    if found > crate::ROW_VERSION {
        return Err(StoreError::FutureVersion {
            table,
            key: key.to_owned(),
            found,
            supported: crate::ROW_VERSION,
        });
    }
    if found < 1 {
        return Err(StoreError::Corrupt {
            table,
            key: key.to_owned(),
            detail: format!("row_version {found}"),
        });
    }
    Ok(())
}

/// A stored JSON column, checked and kept byte-exact.
pub(crate) fn stored_json(
    table: &'static str,
    key: &str,
    column: &str,
    text: String,
) -> Result<Box<RawValue>, StoreError> {
    RawValue::from_string(text).map_err(|e| StoreError::Corrupt {
        table,
        key: key.to_owned(),
        detail: format!("column `{column}` is not JSON: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passing_faults_are_named_and_retryable_while_statement_errors_are_not() {
        assert_eq!(db_unavailable("13"), Some(UnavailableReason::DiskFull));
        assert_eq!(db_unavailable("8"), Some(UnavailableReason::ReadOnly));
        assert_eq!(db_unavailable("1032"), Some(UnavailableReason::ReadOnly)); // SQLITE_READONLY_DBMOVED
        assert_eq!(db_unavailable("778"), Some(UnavailableReason::Io)); // SQLITE_IOERR_WRITE
        assert_eq!(db_unavailable("517"), Some(UnavailableReason::Busy)); // SQLITE_BUSY_SNAPSHOT
        assert_eq!(db_unavailable("2067"), None); // SQLITE_CONSTRAINT_UNIQUE
        assert_eq!(db_unavailable("53100"), Some(UnavailableReason::DiskFull));
        assert_eq!(db_unavailable("57P01"), Some(UnavailableReason::Unreachable));
        assert_eq!(db_unavailable("08006"), Some(UnavailableReason::Unreachable));
        assert_eq!(db_unavailable("25006"), Some(UnavailableReason::ReadOnly));
        assert_eq!(db_unavailable("23505"), None);
        let timeout = StoreError::from(sqlx::Error::PoolTimedOut);
        assert!(timeout.is_retryable());
        assert_eq!(timeout.unavailable(), Some(UnavailableReason::PoolTimeout));
        assert!(timeout.to_string().contains("acquire timeout"), "{timeout}");
        assert!(!StoreError::from(sqlx::Error::RowNotFound).is_retryable());
    }
}
