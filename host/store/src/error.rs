//! Errors of the store: [`StoreError`], split into *terminal* and *retryable* ones.
//!
//! This module owns the error type every [`crate::Store`] method returns and the classification
//! of driver errors. It does not decide what a caller does about an error; it only says whether
//! trying the same call again can succeed ([`StoreError::is_retryable`]).
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
    /// The database could not be reached or was busy: the same call may succeed later.
    #[error("database unavailable: {source}")]
    Unavailable {
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

impl StoreError {
    /// Whether repeating the same call later can succeed. Only [`StoreError::Unavailable`] is
    /// retryable; everything else is terminal for this call.
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Unavailable { .. })
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(source: sqlx::Error) -> Self {
        if is_transient(&source) {
            StoreError::Unavailable { source }
        } else {
            StoreError::Database { source }
        }
    }
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(source: sqlx::migrate::MigrateError) -> Self {
        StoreError::Migrate { source }
    }
}

/// Connection, pool and lock-contention errors are transient; statement errors are not.
fn is_transient(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => {
            let code = db.code().unwrap_or_default();
            // PostgreSQL: serialization failure, deadlock, connection exceptions, shutdown.
            // SQLite: SQLITE_BUSY (5) and SQLITE_LOCKED (6), with their extended codes.
            matches!(code.as_ref(), "40001" | "40P01" | "57P01" | "57P02" | "57P03")
                || code.starts_with("08")
                || code.parse::<i64>().is_ok_and(|c| matches!(c & 0xff, 5 | 6))
        }
        _ => false,
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
