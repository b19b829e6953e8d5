//! Group commit for the SQLite backend: the writes of many callers share one transaction, and so
//! one `fsync` of the WAL.
//!
//! With `synchronous=FULL` every commit waits for the disk, so a writer doing one commit per
//! call is bound by the disk's flush rate, however many Workers call at once. A [`GroupWriter`]
//! is one task that takes the writes queued while the last batch was flushing, runs each inside
//! a `SAVEPOINT` of one `BEGIN IMMEDIATE` transaction, commits once, and only then answers each
//! caller. So:
//! - a call returns only after the commit that holds its changes is durable, as before;
//! - a call that fails (a lost fence, a bad row) is rolled back to its savepoint and answered
//!   with its own error; the others in its batch are not affected;
//! - a fault of the transaction itself (the commit fails, SQLite rolled the whole transaction
//!   back on a full disk or an I/O error) fails every call of the batch with the same reason,
//!   and none of their changes is kept.
//!
//! **Lazy writes.** A claim, a heartbeat and a release need no flush of their own
//! ([`Durability::Lazy`]): losing one in a power cut is the same as its lease running out, and
//! the Worker that held it died in the same power cut (an SQLite file is one machine's). The
//! next synced commit flushes the WAL up to and including it. A batch of lazy writes only is
//! committed with `synchronous=NORMAL` (set inside its transaction, which applies to its
//! commit); the writer pool's release hook sets the store's own mode back before the
//! connection is handed to anyone else, so no other write can commit with it.
//!
//! The batch takes the writer connection from the writer pool for its transaction and gives it
//! back after, so the writes that do not go through the group (rare ones: versions, audit
//! entries, migrations) interleave between batches.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::sqlite::SqliteSynchronous;
use sqlx::{Connection, Sqlite, SqliteConnection, SqlitePool, Transaction};
use tokio::sync::{mpsc, oneshot};

use crate::StoreError;
use crate::error::BatchFailure;

/// Whether a write must be flushed to disk before its caller is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Durability {
    /// Flushed: it survives a power cut once answered.
    Synced,
    /// Its batch may commit without a flush when every write in it is lazy (see the module doc).
    Lazy,
}

/// The future of a write run on the batch's transaction.
pub(crate) type TxFuture<'t, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 't>>;

/// The most writes in one batch: bounds how long the first of them waits for the last.
pub const MAX_BATCH: usize = 64;

/// The group-commit task of one SQLite store: stops when the last handle is dropped.
pub(crate) struct GroupWriter {
    jobs: mpsc::UnboundedSender<Box<dyn Job>>,
    task: tokio::task::JoinHandle<()>,
    /// Batches run so far.
    batches: Arc<AtomicU64>,
}

impl Drop for GroupWriter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl GroupWriter {
    /// Starts the task, which takes its connection from `pool` (whose release hook must set
    /// the store's `mode` back).
    pub(crate) fn start(pool: SqlitePool, mode: SqliteSynchronous) -> GroupWriter {
        let (jobs, queue) = mpsc::unbounded_channel();
        let batches = Arc::new(AtomicU64::new(0));
        GroupWriter { jobs, task: tokio::spawn(serve(pool, mode, queue, batches.clone())), batches }
    }

    /// How many batches (transactions) it has run.
    pub(crate) fn batches(&self) -> u64 {
        self.batches.load(Ordering::Relaxed)
    }

    /// Runs `write` in the next batch and answers once that batch is committed (or failed).
    ///
    /// `write` must not commit or roll back the transaction it is given: its changes are kept
    /// when it returns `Ok`, and undone (to its savepoint) when it returns an error.
    pub(crate) async fn run<T, F>(&self, durability: Durability, write: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: for<'t, 'c> FnOnce(&'t mut Transaction<'c, Sqlite>) -> TxFuture<'t, T> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let shape = Shape { durability, one_statement: false };
        self.queue(Box::new(Write { shape, write, reply }), answer).await
    }

    /// [`GroupWriter::run`] for a write of one statement, which SQLite makes atomic by itself:
    /// it needs no savepoint, and an error it returns does not undo what the statement did.
    pub(crate) async fn run_one<T, F>(&self, durability: Durability, write: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut SqliteConnection) -> TxFuture<'c, T> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let shape = Shape { durability, one_statement: true };
        self.queue(Box::new(WriteOne { shape, write, reply }), answer).await
    }

    async fn queue<T>(
        &self,
        job: Box<dyn Job>,
        answer: oneshot::Receiver<Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        self.jobs.send(job).map_err(|_| StoreError::from(sqlx::Error::PoolClosed))?;
        answer.await.unwrap_or(Err(StoreError::from(sqlx::Error::PoolClosed)))
    }
}

/// How a write is run.
#[derive(Clone, Copy)]
struct Shape {
    durability: Durability,
    /// One statement (see [`GroupWriter::run_one`]).
    one_statement: bool,
}

/// A queued write, its type erased.
trait Job: Send {
    fn shape(&self) -> Shape;
    /// Runs it on the batch's transaction, or for a write of one statement alone on the
    /// connection; what it left, to answer after the commit.
    fn run<'t, 'c>(
        self: Box<Self>,
        on: On<'t, 'c>,
    ) -> Pin<Box<dyn Future<Output = Box<dyn Ran>> + Send + 't>>;
    /// Answers it without running it: its batch could not start.
    fn fail(self: Box<Self>, error: StoreError);
}

/// A write that ran, waiting for its batch's commit.
trait Ran: Send {
    /// Whether it succeeded (its changes stay in the batch).
    fn succeeded(&self) -> bool;
    /// Answers its caller: its own error if it failed, else the batch's outcome.
    fn answer(self: Box<Self>, committed: Result<(), StoreError>);
}

/// Where a write runs.
enum On<'t, 'c> {
    /// In the batch's transaction.
    Tx(&'t mut Transaction<'c, Sqlite>),
    /// On the connection, in the statement's own transaction (a write of one statement alone).
    Conn(&'t mut SqliteConnection),
}

/// A write of several statements.
struct Write<T, F> {
    shape: Shape,
    write: F,
    reply: oneshot::Sender<Result<T, StoreError>>,
}

/// A write of one statement.
struct WriteOne<T, F> {
    shape: Shape,
    write: F,
    reply: oneshot::Sender<Result<T, StoreError>>,
}

struct Done<T> {
    outcome: Result<T, StoreError>,
    reply: oneshot::Sender<Result<T, StoreError>>,
}

impl<T, F> Job for Write<T, F>
where
    T: Send + 'static,
    F: for<'t, 'c> FnOnce(&'t mut Transaction<'c, Sqlite>) -> TxFuture<'t, T> + Send + 'static,
{
    fn shape(&self) -> Shape {
        self.shape
    }

    fn run<'t, 'c>(
        self: Box<Self>,
        on: On<'t, 'c>,
    ) -> Pin<Box<dyn Future<Output = Box<dyn Ran>> + Send + 't>> {
        let Write { write, reply, .. } = *self;
        Box::pin(async move {
            let outcome = match on {
                On::Tx(tx) => write(tx).await,
                // Never: only a write of one statement runs outside a transaction.
                On::Conn(_) => Err(StoreError::Invalid {
                    what: "a write of several statements outside a transaction".into(),
                }),
            };
            Box::new(Done { outcome, reply }) as Box<dyn Ran>
        })
    }

    fn fail(self: Box<Self>, error: StoreError) {
        let _ = self.reply.send(Err(error));
    }
}

impl<T, F> Job for WriteOne<T, F>
where
    T: Send + 'static,
    F: for<'c> FnOnce(&'c mut SqliteConnection) -> TxFuture<'c, T> + Send + 'static,
{
    fn shape(&self) -> Shape {
        self.shape
    }

    fn run<'t, 'c>(
        self: Box<Self>,
        on: On<'t, 'c>,
    ) -> Pin<Box<dyn Future<Output = Box<dyn Ran>> + Send + 't>> {
        let WriteOne { write, reply, .. } = *self;
        Box::pin(async move {
            let outcome = match on {
                On::Tx(tx) => write(tx).await,
                On::Conn(conn) => write(conn).await,
            };
            Box::new(Done { outcome, reply }) as Box<dyn Ran>
        })
    }

    fn fail(self: Box<Self>, error: StoreError) {
        let _ = self.reply.send(Err(error));
    }
}

impl<T: Send> Ran for Done<T> {
    fn succeeded(&self) -> bool {
        self.outcome.is_ok()
    }

    fn answer(self: Box<Self>, committed: Result<(), StoreError>) {
        let answer = match (self.outcome, committed) {
            (Err(own), _) => Err(own),
            (Ok(value), Ok(())) => Ok(value),
            (Ok(_), Err(batch)) => Err(batch),
        };
        let _ = self.reply.send(answer);
    }
}

/// The `PRAGMA` that sets `mode`.
pub(crate) fn synchronous_pragma(mode: SqliteSynchronous) -> &'static str {
    match mode {
        SqliteSynchronous::Off => "PRAGMA synchronous = OFF",
        SqliteSynchronous::Normal => "PRAGMA synchronous = NORMAL",
        SqliteSynchronous::Full => "PRAGMA synchronous = FULL",
        SqliteSynchronous::Extra => "PRAGMA synchronous = EXTRA",
    }
}

/// `BEGIN IMMEDIATE`, after setting the `synchronous` mode `switch` to (outside the transaction,
/// where SQLite takes it).
fn begin_sql(switch: Option<SqliteSynchronous>) -> &'static str {
    match switch {
        None => "BEGIN IMMEDIATE",
        Some(SqliteSynchronous::Off) => "PRAGMA synchronous = OFF; BEGIN IMMEDIATE",
        Some(SqliteSynchronous::Normal) => "PRAGMA synchronous = NORMAL; BEGIN IMMEDIATE",
        Some(SqliteSynchronous::Full) => "PRAGMA synchronous = FULL; BEGIN IMMEDIATE",
        Some(SqliteSynchronous::Extra) => "PRAGMA synchronous = EXTRA; BEGIN IMMEDIATE",
    }
}

/// How long the task keeps the writer connection while writes keep coming, before it lets the
/// writes that do not go through it have a turn.
const HOLD: Duration = Duration::from_millis(20);

/// How long the task keeps the writer connection with nothing queued (the timer's resolution,
/// so up to a millisecond), in case the next write comes right away.
const IDLE_HOLD: Duration = Duration::from_micros(500);

/// The writer connection while the task holds it, and the mode it is in.
struct Held {
    conn: PoolConnection<Sqlite>,
    /// In the lazy batches' mode (`synchronous=NORMAL`), not the store's own.
    lowered: bool,
    since: Instant,
}

/// The task: a batch is every write queued when the previous one ended, up to [`MAX_BATCH`]. It
/// keeps the writer connection from batch to batch while writes keep coming (up to [`HOLD`]),
/// and gives it back to the pool (whose release hook sets the store's mode back) when none is
/// queued or after a fault.
async fn serve(
    pool: SqlitePool,
    mode: SqliteSynchronous,
    mut queue: mpsc::UnboundedReceiver<Box<dyn Job>>,
    batches: Arc<AtomicU64>,
) {
    // Lazy batches lower the mode only when the store's is above `NORMAL`.
    let lower = matches!(mode, SqliteSynchronous::Full | SqliteSynchronous::Extra);
    let mut held: Option<Held> = None;
    let mut batch = Vec::with_capacity(MAX_BATCH);
    loop {
        let first = match queue.try_recv() {
            Ok(job) => job,
            Err(mpsc::error::TryRecvError::Disconnected) => return,
            Err(mpsc::error::TryRecvError::Empty) => {
                // A Worker's next write (its next claim after a commit) often comes right
                // after its answer: wait for it a moment with the connection before giving it
                // back, which costs a statement of the pool's release hook and one to acquire.
                let next = match held {
                    Some(_) => tokio::time::timeout(IDLE_HOLD, queue.recv()).await.ok(),
                    None => None,
                };
                match next {
                    Some(Some(job)) => job,
                    Some(None) => return,
                    None => {
                        held = None;
                        match queue.recv().await {
                            Some(job) => job,
                            None => return,
                        }
                    }
                }
            }
        };
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        if held.as_ref().is_some_and(|held| held.since.elapsed() >= HOLD) {
            held = None;
            tokio::task::yield_now().await;
        }
        let mut conn = match held.take() {
            Some(conn) => conn,
            None => match pool.acquire().await {
                Ok(conn) => Held { conn, lowered: false, since: Instant::now() },
                Err(error) => {
                    fail_unrun(std::mem::take(&mut batch), error);
                    continue;
                }
            },
        };
        let lazy = lower && batch.iter().all(|job| job.shape().durability == Durability::Lazy);
        let mut switch =
            (lazy != conn.lowered).then_some(if lazy { SqliteSynchronous::Normal } else { mode });
        if let Some(to) = switch.filter(|_| batch.len() == 1 && batch[0].shape().one_statement) {
            // A statement alone runs in its own transaction: the mode goes first.
            if let Err(error) = sqlx::query(synchronous_pragma(to)).execute(&mut *conn.conn).await {
                fail_unrun(std::mem::take(&mut batch), error);
                continue;
            }
            switch = None;
        }
        conn.lowered = lazy;
        let healthy = run_batch(&mut conn.conn, switch, std::mem::take(&mut batch)).await;
        batches.fetch_add(1, Ordering::Relaxed);
        if healthy {
            held = Some(conn);
        }
    }
}

const SAVEPOINT: &str = "SAVEPOINT tollgate_write";
const RELEASE: &str = "RELEASE SAVEPOINT tollgate_write";
const ROLLBACK_TO: &str = "ROLLBACK TO SAVEPOINT tollgate_write";

/// Runs `batch` in one transaction and answers every write. A write of one statement alone
/// runs as that statement (its own transaction); a write alone needs no savepoint (an error
/// drops the transaction); in a batch of several, each write of more than one statement runs in
/// a savepoint, undone when it fails.
async fn run_batch(
    conn: &mut SqliteConnection,
    switch: Option<SqliteSynchronous>,
    batch: Vec<Box<dyn Job>>,
) -> bool {
    let alone = batch.len() == 1;
    if alone && batch[0].shape().one_statement {
        // Its own implicit transaction: no `BEGIN`, `COMMIT` or savepoint to pay for.
        let mut healthy = true;
        for job in batch {
            let done = job.run(On::Conn(&mut *conn)).await;
            healthy = done.succeeded();
            done.answer(Ok(()));
        }
        return healthy;
    }
    // The mode switch and the `BEGIN` in one round trip to the connection's thread.
    let mut tx = match conn.begin_with(begin_sql(switch)).await {
        Ok(tx) => tx,
        Err(error) => {
            fail_unrun(batch, error);
            return false;
        }
    };
    let mut ran: Vec<Box<dyn Ran>> = Vec::with_capacity(batch.len());
    for job in batch {
        let guarded = !alone && !job.shape().one_statement;
        if guarded && let Err(error) = sqlx::query(SAVEPOINT).execute(&mut *tx).await {
            // The transaction is gone (SQLite rolled it back on a fault): nothing of it stays.
            let error = BatchFailure::new(error);
            job.fail(error.copy());
            fail_all(ran, tx, error);
            return false;
        }
        let done = job.run(On::Tx(&mut tx)).await;
        if !done.succeeded() && !guarded {
            if alone {
                // Dropping the transaction undoes it (the pool checks the connection).
                drop(tx);
                done.answer(Ok(()));
                return false;
            }
            // One statement: SQLite undid it if it failed; what it did before an error of
            // decoding stays, as it would have in a transaction of its own.
            done.answer(Ok(()));
            continue;
        }
        if guarded {
            let undo = if done.succeeded() { RELEASE } else { ROLLBACK_TO };
            let closed = match sqlx::query(undo).execute(&mut *tx).await {
                Ok(_) if !done.succeeded() => sqlx::query(RELEASE).execute(&mut *tx).await.err(),
                Ok(_) => None,
                Err(error) => Some(error),
            };
            if let Some(error) = closed {
                let error = BatchFailure::new(error);
                done.answer(Err(error.copy()));
                fail_all(ran, tx, error);
                return false;
            }
            if !done.succeeded() {
                // Undone already: its own error, now.
                done.answer(Ok(()));
                continue;
            }
        }
        ran.push(done);
    }
    match tx.commit().await {
        Ok(()) => {
            for done in ran {
                done.answer(Ok(()));
            }
            true
        }
        Err(error) => {
            let error = BatchFailure::new(error);
            for done in ran {
                done.answer(Err(error.copy()));
            }
            false
        }
    }
}

/// Answers every write of a batch that could not start with its fault.
fn fail_unrun(batch: Vec<Box<dyn Job>>, error: sqlx::Error) {
    let error = BatchFailure::new(error);
    for job in batch {
        job.fail(error.copy());
    }
}

/// Answers every write that ran with the batch's failure; `tx` is dropped, which rolls it back
/// (or, when SQLite had already, the writer pool closes the connection: see the backend's
/// healing).
fn fail_all(ran: Vec<Box<dyn Ran>>, tx: Transaction<'_, Sqlite>, error: BatchFailure) {
    drop(tx);
    for done in ran {
        done.answer(Err(error.copy()));
    }
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
    use tokio::sync::oneshot;

    use super::*;

    async fn pool(dir: &tempfile::TempDir) -> SqlitePool {
        let options = SqliteConnectOptions::from_str("sqlite://")
            .unwrap()
            .filename(dir.path().join("g.db"))
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full);
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .after_release(|conn, _| {
                Box::pin(async move {
                    sqlx::query("PRAGMA synchronous = FULL").execute(&mut *conn).await?;
                    Ok(true)
                })
            })
            .connect_with(options)
            .await
            .unwrap();
        sqlx::query("CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER NOT NULL)").execute(&pool).await.unwrap();
        pool
    }

    /// Inserts `k` then `k/2`; fails after the first when `fail`.
    async fn two_rows(group: &GroupWriter, k: String, fail: bool) -> Result<String, StoreError> {
        group
            .run(Durability::Synced, move |tx| {
                Box::pin(async move {
                    sqlx::query("INSERT INTO t VALUES (?, 1)").bind(k.as_str()).execute(&mut **tx).await?;
                    if fail {
                        return Err(StoreError::Invalid { what: format!("{k} failed after its first row") });
                    }
                    sqlx::query("INSERT INTO t VALUES (?, 2)")
                        .bind(format!("{k}/2"))
                        .execute(&mut **tx)
                        .await?;
                    Ok(k)
                })
            })
            .await
    }

    async fn keys(pool: &SqlitePool) -> Vec<String> {
        sqlx::query_scalar("SELECT k FROM t ORDER BY k").fetch_all(pool).await.unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_writes_share_commits_and_a_failing_one_is_undone_alone() {
        let dir = tempfile::tempdir().unwrap();
        let pool = pool(&dir).await;
        let group = Arc::new(GroupWriter::start(pool.clone(), SqliteSynchronous::Full));
        let tasks: Vec<_> = (0..64)
            .map(|i| {
                let group = group.clone();
                tokio::spawn(async move { two_rows(&group, format!("k{i:02}"), i == 17).await })
            })
            .collect();
        let mut failed = Vec::new();
        for task in tasks {
            if let Err(err) = task.await.unwrap() {
                failed.push(err.to_string());
            }
        }
        assert_eq!(failed, ["invalid input: k17 failed after its first row"], "only its own error");
        let keys = keys(&pool).await;
        assert_eq!(keys.len(), 63 * 2, "{keys:?}");
        assert!(!keys.iter().any(|k| k.starts_with("k17")), "the failed write left nothing: {keys:?}");
        assert!(group.batches() < 64, "64 writes at once in {} transactions", group.batches());
    }

    #[tokio::test]
    async fn a_write_alone_that_fails_is_undone_and_a_single_statement_keeps_what_it_did() {
        let dir = tempfile::tempdir().unwrap();
        let pool = pool(&dir).await;
        let group = GroupWriter::start(pool.clone(), SqliteSynchronous::Full);
        assert!(two_rows(&group, "a".into(), true).await.is_err());
        assert_eq!(keys(&pool).await, Vec::<String>::new());
        // One statement whose answer is an error after the statement ran (a row that does not
        // decode): what it wrote stays, as a statement of its own would.
        let err = group
            .run_one(Durability::Lazy, |conn| {
                Box::pin(async move {
                    sqlx::query("INSERT INTO t VALUES ('b', 1)").execute(&mut *conn).await?;
                    Err::<(), _>(StoreError::Invalid { what: "decoding".into() })
                })
            })
            .await
            .unwrap_err();
        assert!(err.to_string().contains("decoding"), "{err}");
        assert_eq!(keys(&pool).await, ["b"]);
    }

    fn read_mode<'t>(tx: &'t mut Transaction<'_, Sqlite>) -> TxFuture<'t, i64> {
        Box::pin(
            async move { Ok(sqlx::query_scalar::<_, i64>("PRAGMA synchronous").fetch_one(&mut **tx).await?) },
        )
    }

    #[tokio::test]
    async fn a_batch_sets_the_mode_it_was_given_before_its_transaction() {
        let dir = tempfile::tempdir().unwrap();
        let pool = pool(&dir).await;
        let mut conn = pool.acquire().await.unwrap();
        for (switch, expected) in
            [(Some(SqliteSynchronous::Normal), 1), (None, 1), (Some(SqliteSynchronous::Full), 2)]
        {
            let (reply, answer) = oneshot::channel();
            let write = read_mode;
            let shape = Shape { durability: Durability::Synced, one_statement: false };
            let job: Box<dyn Job> = Box::new(Write { shape, write, reply });
            assert!(run_batch(&mut conn, switch, vec![job]).await);
            assert_eq!(answer.await.unwrap().unwrap(), expected, "{switch:?}");
        }
    }

    #[tokio::test]
    async fn a_batch_of_lazy_writes_leaves_the_connection_synced_for_the_next_write() {
        let dir = tempfile::tempdir().unwrap();
        let pool = pool(&dir).await;
        let group = GroupWriter::start(pool.clone(), SqliteSynchronous::Full);
        let mode = group
            .run_one(Durability::Lazy, |conn| {
                Box::pin(async move {
                    sqlx::query("INSERT INTO t VALUES ('lazy', 1)").execute(&mut *conn).await?;
                    Ok(sqlx::query_scalar::<_, i64>("PRAGMA synchronous").fetch_one(&mut *conn).await?)
                })
            })
            .await
            .unwrap();
        assert_eq!(mode, 1, "a lazy write alone commits with NORMAL");
        let after: i64 = sqlx::query_scalar("PRAGMA synchronous").fetch_one(&pool).await.unwrap();
        assert_eq!(after, 2, "FULL again before anyone else writes");
        let synced = group
            .run(Durability::Synced, |tx| {
                Box::pin(async move {
                    Ok(sqlx::query_scalar::<_, i64>("PRAGMA synchronous").fetch_one(&mut **tx).await?)
                })
            })
            .await
            .unwrap();
        assert_eq!(synced, 2, "a synced write commits with FULL");
    }
}
