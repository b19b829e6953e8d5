//! The SQLite backend: [`SqliteStore`], the embedded default (one WAL file, zero set-up).
//!
//! It owns the connection set-up: one **writer** connection (every write and every claim goes
//! through it, each transaction `BEGIN IMMEDIATE`) and a small pool of readers (WAL lets them
//! read while the writer writes) and implements the `backend` module's `Backend` seam, which
//! gives it the shared [`Store`] implementation.
//! sqlx runs each SQLite connection on its own thread, so no call blocks the async runtime and
//! no `spawn_blocking` is needed.
//!
//! Defaults: `journal_mode=WAL`, `synchronous=FULL`, `foreign_keys=ON`, `busy_timeout=10s`,
//! 4 reader connections.
//!
//! **Durability.** `synchronous=FULL` fsyncs the WAL at every commit, so a commit that returned
//! survives a power cut, above all the `started` mark that keeps a single-attempt
//! (non-idempotent) tool call from running twice. `NORMAL` would lose the last commits on power
//! loss; the store bench (`claim_complete`) prints what `FULL` costs.
//!
//! **Group commit.** A step's commit, its claim, heartbeat and release go through
//! `crate::group`: the writes queued while one batch was being flushed share the next
//! transaction and its one fsync, each answered only once that is durable. A claim, heartbeat
//! or release needs no flush of its own (losing it in a power cut is its lease running out, and
//! its Worker died in the same power cut); the next flushed commit makes it durable too. Other
//! writes take the writer connection between batches.
//!
//! **Healing.** A fault of the file or the disk (disk full, read-only, I/O error) fails the
//! calls it hits with [`StoreError::Unavailable`] naming the cause, and the store recovers by
//! itself once the fault ends, without a restart:
//! - a writer connection handed back inside a transaction (SQLite rolls a transaction back by
//!   itself on `SQLITE_FULL` or an I/O error, after which sqlx's `COMMIT`/`ROLLBACK` fails and
//!   its transaction depth stays above zero, so every later `BEGIN IMMEDIATE` failed with
//!   "attempted to call begin_with at non-zero transaction depth") is closed, not reused; the
//!   pool opens a fresh one;
//! - a writer connection opened while the file was not writable (SQLite then opens it
//!   read-only, silently, for its whole life) is found by a write probe (a `DELETE … WHERE 0`,
//!   which changes nothing but needs a writable file) run at most once per [`PROBE_EVERY`]
//!   before the connection is handed out, and replaced.
//!
//! # Caveats
//!
//! - Another process's commits to the same file (an `api` and a `worker` on one file) are seen
//!   by polling: every [`WATCH_EVERY`] a task reads `PRAGMA data_version` on the writer
//!   connection, which changes only when another connection committed, and wakes this store's
//!   Workers and every event reader (they re-read). So they wait ~0.1 s, not the poll fallback
//!   of [`crate::WorkSignal::wait`]; the poll costs one statement on the writer per interval.
//! - A full disk is seen by the write that needs new space: a small write may still succeed
//!   where a larger one fails (SQLite reuses the WAL file's space after a checkpoint).
//!   [`Store::probe_write`] (the health check) reports `disk_full` once less than
//!   [`MIN_FREE_BYTES`] is left on the file's filesystem, before a write fails.

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Connection, SqlSafeStr};

use crate::backend::{Backend, Durability, TxFuture};
use crate::group::GroupWriter;
use crate::signal::Signals;
use crate::*;

/// A [`Store`] on one SQLite file (the shared implementation of the `backend` module, through
/// its `Backend` seam).
#[derive(Clone)]
pub struct SqliteStore {
    writer: SqlitePool,
    reader: SqlitePool,
    signals: Signals,
    /// The file, whose filesystem's free space [`Store::probe_write`] checks.
    path: std::path::PathBuf,
    /// The task watching for other processes' commits; stopped when the last handle goes.
    _watch: Arc<Watch>,
    /// The group commit of the hot writes (claims, commits); stopped when the last handle goes.
    /// `None` only in the store bench, to measure it beside one commit per write.
    group: Option<Arc<GroupWriter>>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens (creating it if missing) and migrates the database file at `path`.
    ///
    /// # Errors
    /// The file cannot be opened, or its schema is newer than this build.
    pub async fn open(path: &Path) -> Result<Self, StoreError> {
        Self::open_with_synchronous(path, SqliteSynchronous::Full).await
    }

    /// [`SqliteStore::open`] with another `synchronous` mode: for the store bench, which prints
    /// what `FULL` costs against `NORMAL`. Only `FULL` keeps the store's durability contract.
    ///
    /// # Errors
    /// As [`SqliteStore::open`].
    #[doc(hidden)]
    pub async fn open_with_synchronous(
        path: &Path,
        synchronous: SqliteSynchronous,
    ) -> Result<Self, StoreError> {
        Self::open_with(path, synchronous, true).await
    }

    /// [`SqliteStore::open_with_synchronous`], with or without group commit: for the store
    /// bench, which prints what group commit gains beside one commit per write.
    ///
    /// # Errors
    /// As [`SqliteStore::open`].
    #[doc(hidden)]
    pub async fn open_with(
        path: &Path,
        synchronous: SqliteSynchronous,
        group_commit: bool,
    ) -> Result<Self, StoreError> {
        make_private(path)?;
        let options = SqliteConnectOptions::from_str("sqlite://")?
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(synchronous)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(10));
        let probe = Arc::new(ProbeClock { start: Instant::now(), last_ms: AtomicU64::new(0) });
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .before_acquire(move |conn, _| {
                let probe = probe.clone();
                Box::pin(async move { Ok(!probe.due() || writable(conn).await) })
            })
            .after_release(move |conn, _| {
                Box::pin(async move { outside_transaction(conn, synchronous).await })
            })
            .connect_with(options.clone())
            .await?;
        migrator().run(&writer).await?;
        // SQLite gives its `-wal` and `-shm` files the database's mode; ones an older version left
        // readable by others are made private too.
        for suffix in ["-wal", "-shm"] {
            let mut side = path.as_os_str().to_owned();
            side.push(suffix);
            if Path::new(&side).exists() {
                make_private(Path::new(&side))?;
            }
        }
        let reader =
            SqlitePoolOptions::new().max_connections(4).connect_with(options.read_only(true)).await?;
        let signals = Signals::new();
        let watch = Arc::new(Watch(tokio::spawn(watch_other_writers(writer.clone(), signals.clone()))));
        let group = group_commit.then(|| Arc::new(GroupWriter::start(writer.clone(), synchronous)));
        Ok(SqliteStore { writer, reader, signals, path: path.to_owned(), _watch: watch, group })
    }

    /// How many transactions its group commit has run (`None` without group commit): the store
    /// bench prints writes per commit from it.
    #[doc(hidden)]
    pub fn group_commits(&self) -> Option<u64> {
        self.group.as_ref().map(|group| group.batches())
    }

    /// The writer pool, for tests that need raw SQL (e.g. to corrupt a row).
    #[doc(hidden)]
    pub fn raw_pool(&self) -> &SqlitePool {
        &self.writer
    }
}

/// Creates `path` empty with mode `0600` when it is missing, and takes group and others' access
/// away when it exists: every session's rows are in it, and SQLite gives its journal files the
/// same mode.
fn make_private(path: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let io = |source: std::io::Error| StoreError::Invalid {
        what: format!("the store file {}: {source}", path.display()),
    };
    if !path.exists() {
        match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path) {
            Ok(_) => return Ok(()),
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(err) => return Err(io(err)),
        }
    }
    let mode = std::fs::metadata(path).map_err(io)?.permissions().mode();
    if mode & 0o077 != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o700)).map_err(io)?;
    }
    Ok(())
}

impl Backend for SqliteStore {
    type Db = sqlx::Sqlite;

    async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>, StoreError> {
        Ok(self.writer.begin_with("BEGIN IMMEDIATE").await?)
    }

    fn write_pool(&self) -> &SqlitePool {
        &self.writer
    }

    async fn write<T, F>(&self, durability: Durability, write: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: for<'t, 'c> FnOnce(&'t mut sqlx::Transaction<'c, sqlx::Sqlite>) -> TxFuture<'t, T>
            + Send
            + 'static,
    {
        match &self.group {
            Some(group) => group.run(durability, write).await,
            None => crate::backend::in_own_transaction(self, write).await,
        }
    }

    async fn write_one<T, F>(&self, durability: Durability, write: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut sqlx::SqliteConnection) -> TxFuture<'c, T> + Send + 'static,
    {
        match &self.group {
            Some(group) => group.run_one(durability, write).await,
            None => crate::backend::on_write_connection(self, write).await,
        }
    }

    fn read_pool(&self) -> &SqlitePool {
        &self.reader
    }

    /// Checks that a write can be taken now: a write transaction whose one statement changes
    /// nothing but needs a writable file, rolled back.
    /// A write probe, then the disk: the probe writes nothing, so it cannot see a full disk;
    /// a filesystem with less than [`MIN_FREE_BYTES`] left is reported as `disk_full` before a
    /// real write fails on it.
    async fn check_writable(&self) -> Result<(), StoreError> {
        let mut tx = self.begin_write().await?;
        sqlx::query(PROBE_SQL).execute(&mut *tx).await?;
        tx.rollback().await?;
        match free_bytes(&self.path) {
            Some(free) if free < MIN_FREE_BYTES => Err(StoreError::Unavailable {
                reason: UnavailableReason::DiskFull,
                source: sqlx::Error::Io(std::io::Error::new(
                    std::io::ErrorKind::StorageFull,
                    format!("{} KiB left on the filesystem of {}", free / 1024, self.path.display()),
                )),
            }),
            _ => Ok(()),
        }
    }

    fn signals(&self) -> &Signals {
        &self.signals
    }

    /// Nobody to tell: other processes on the file see the commit through their own watch
    /// (see the module's caveats).
    async fn notify_others(&self, _session_id: &str, _work: bool, _events: bool) {}
}

/// How often a store checks whether another process committed to its file.
pub const WATCH_EVERY: Duration = Duration::from_millis(100);

/// The task of [`watch_other_writers`], aborted on drop.
struct Watch(tokio::task::JoinHandle<()>);

impl Drop for Watch {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Every [`WATCH_EVERY`], reads `PRAGMA data_version` on the writer connection. It changes only
/// when *another* connection committed (this process writes through that connection alone), so
/// a change is another process's step or event: wake the Workers and every event reader. A
/// failed read (a fault of the file, a replaced connection) is skipped; a replaced connection's
/// first value may differ once, which costs one spurious wake-up.
async fn watch_other_writers(writer: SqlitePool, signals: Signals) {
    let mut last: Option<i64> = None;
    loop {
        tokio::time::sleep(WATCH_EVERY).await;
        if writer.is_closed() {
            return;
        }
        let Ok(version) = sqlx::query_scalar::<_, i64>("PRAGMA data_version").fetch_one(&writer).await else {
            continue;
        };
        if last.is_some_and(|last| last != version) {
            signals.work_ready();
            signals.events_appended(crate::signal::ALL_SESSIONS);
        }
        last = Some(version);
    }
}

/// Below this much free space on the database's filesystem, [`Store::probe_write`] reports the
/// disk full: the next write that needs a new page may fail.
pub const MIN_FREE_BYTES: u64 = 1024 * 1024;

/// The bytes an unprivileged process may still write on the filesystem holding `path` (`None`
/// when `statvfs` fails, e.g. the file is gone).
fn free_bytes(path: &Path) -> Option<u64> {
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c_path` is a NUL-terminated string and `stat` is a valid place for the result,
    // read only when the call succeeded.
    let stat = unsafe {
        if libc::statvfs(c_path.as_ptr(), stat.as_mut_ptr()) != 0 {
            return None;
        }
        stat.assume_init()
    };
    Some(stat.f_bavail.saturating_mul(stat.f_frsize))
}

/// How often, at most, an idle writer connection is probed for writability before use.
pub const PROBE_EVERY: Duration = Duration::from_secs(1);

/// A write that changes nothing: SQLite still needs a writable database for it, so it fails
/// with `SQLITE_READONLY` on a connection opened read-only.
const PROBE_SQL: &str = "DELETE FROM idempotency_keys WHERE 0";

/// Rate-limits the writer's probe to one per [`PROBE_EVERY`].
struct ProbeClock {
    start: Instant,
    last_ms: AtomicU64,
}

impl ProbeClock {
    /// Whether a probe is due now; marks it done.
    fn due(&self) -> bool {
        let now = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        let last = self.last_ms.load(Ordering::Relaxed);
        let every = u64::try_from(PROBE_EVERY.as_millis()).unwrap_or(u64::MAX);
        now.saturating_sub(last) >= every
            && self.last_ms.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    }
}

/// Whether the idle writer connection can write. Only a read-only or unopenable file condemns
/// the connection (it was opened read-only and stays so); anything else (e.g. busy) is left to
/// the call that uses it.
async fn writable(conn: &mut sqlx::SqliteConnection) -> bool {
    match sqlx::query(PROBE_SQL).execute(&mut *conn).await {
        Ok(_) => true,
        Err(e) => {
            let spoiled = matches!(
                StoreError::from(e),
                StoreError::Unavailable { reason: UnavailableReason::ReadOnly | UnavailableReason::Io, .. }
            );
            if spoiled {
                tracing::warn!("store: the SQLite writer connection cannot write; opening a new one");
            }
            !spoiled
        }
    }
}

/// Whether a released writer connection may go back to the pool: not when it is still inside a
/// transaction (a failed `COMMIT` or `ROLLBACK` after SQLite rolled back by itself leaves sqlx's
/// transaction depth above zero, and every later `BEGIN IMMEDIATE` on it would fail). Sets the
/// store's `synchronous` mode back first: a group commit of lazy writes lowers it for its own
/// commit ([`crate::group`]), and no other write may commit with it.
async fn outside_transaction(
    conn: &mut sqlx::SqliteConnection,
    synchronous: SqliteSynchronous,
) -> Result<bool, sqlx::Error> {
    // Runs after the rollback a dropped transaction queued on the connection's worker.
    let restore = crate::group::synchronous_pragma(synchronous);
    sqlx::query(restore).execute(&mut *conn).await?;
    if conn.is_in_transaction() {
        tracing::warn!("store: the SQLite writer connection was left inside a transaction; closing it");
        return Ok(false);
    }
    Ok(true)
}

fn migrator() -> Migrator {
    Migrator::with_migrations(vec![
        Migration::new(
            1,
            "init".into(),
            MigrationType::Simple,
            include_str!("../migrations/sqlite/0001_init.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            2,
            "agent_digest".into(),
            MigrationType::Simple,
            include_str!("../migrations/sqlite/0002_agent_digest.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            3,
            "audit".into(),
            MigrationType::Simple,
            include_str!("../migrations/sqlite/0003_audit.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            4,
            "webhook_outbox".into(),
            MigrationType::Simple,
            include_str!("../migrations/sqlite/0004_webhook_outbox.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            5,
            "deadlines".into(),
            MigrationType::Simple,
            include_str!("../migrations/sqlite/0005_deadlines.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            7,
            "messages".into(),
            MigrationType::Simple,
            include_str!("../migrations/sqlite/0007_messages.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            8,
            "live text".into(),
            MigrationType::Simple,
            include_str!("../migrations/sqlite/0008_live_text.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            9,
            "transcript_chunks".into(),
            MigrationType::Simple,
            include_str!("../migrations/sqlite/0009_transcript_chunks.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            10,
            "cancel".into(),
            MigrationType::Simple,
            include_str!("../migrations/sqlite/0010_cancel.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            11,
            "lost_claims".into(),
            MigrationType::Simple,
            include_str!("../migrations/sqlite/0011_lost_claims.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            12,
            "media".into(),
            MigrationType::Simple,
            include_str!("../migrations/sqlite/0012_media.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            13,
            "agent_names".into(),
            MigrationType::Simple,
            include_str!("../migrations/sqlite/0013_agent_names.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            14,
            "agent_versions".into(),
            MigrationType::Simple,
            include_str!("../migrations/sqlite/0014_agent_versions.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            15,
            "approvals".into(),
            MigrationType::Simple,
            include_str!("../migrations/sqlite/0015_approvals.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            16,
            "checked_calls".into(),
            MigrationType::Simple,
            include_str!("../migrations/sqlite/0016_checked_calls.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            17,
            "agent_tools".into(),
            MigrationType::Simple,
            include_str!("../migrations/sqlite/0017_agent_tools.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            18,
            "tools_unavailable".into(),
            MigrationType::Simple,
            include_str!("../migrations/sqlite/0018_tools_unavailable.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            20,
            "forks".into(),
            MigrationType::Simple,
            include_str!("../migrations/sqlite/0020_forks.sql").into_sql_str(),
            false,
        ),
    ])
}
