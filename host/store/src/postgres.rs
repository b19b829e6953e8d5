//! The PostgreSQL backend: [`PgStore`], for many Workers on one database.
//!
//! It owns the pool, the migration, and the listener task that turns `NOTIFY tollgate_work` and
//! `NOTIFY tollgate_events` (sent right after the commit, never inside it: a notifying
//! transaction holds PostgreSQL's database-wide notify lock through its WAL flush, which
//! serialized all Workers' commits in the benchmark) into this process's [`crate::WorkSignal`] and [`crate::EventSignal`]. Claims use
//! `FOR UPDATE SKIP LOCKED`, so Workers never wait on each other's candidate rows.
//!
//! # Caveats
//!
//! - NOTIFY is not durable: after the listener reconnects it wakes every waiter once; waiters
//!   poll anyway.
//! - While the server is down every call fails within [`ACQUIRE_TIMEOUT`] with
//!   [`StoreError::Unavailable`] (`unreachable` or `pool_timeout`); nothing needs restarting when
//!   it returns: pooled connections are tested before use (a dead one is dropped), new ones are
//!   opened, and the listener resubscribes.
//! - Keep `synchronous_commit=on`: the store's guarantees assume a commit is durable when it
//!   returns.
//! - Dropping the last clone of a [`PgStore`] stops its listener task.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::SqlSafeStr;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};

use crate::backend::{Backend, Durability, TxFuture};
use crate::signal::{ALL_SESSIONS, Signals};
use crate::*;

/// A [`Store`] on a PostgreSQL database (the shared implementation of the `backend` module,
/// through its `Backend` seam).
#[derive(Clone)]
pub struct PgStore {
    pool: PgPool,
    signals: Signals,
    _listener: Arc<AbortOnDrop>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").finish_non_exhaustive()
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl PgStore {
    /// Connects with up to `max_connections`, migrates, and starts listening for wake-ups.
    ///
    /// # Errors
    /// The database is unreachable, or its schema is newer than this build.
    pub async fn connect(url: &str, max_connections: u32) -> Result<Self, StoreError> {
        Self::connect_with(PgConnectOptions::from_str(url)?, max_connections).await
    }

    /// As [`PgStore::connect`], with options (e.g. a `search_path` for tests).
    ///
    /// # Errors
    /// As [`PgStore::connect`].
    pub async fn connect_with(options: PgConnectOptions, max_connections: u32) -> Result<Self, StoreError> {
        let pool = PgPoolOptions::new()
            .max_connections(max_connections.max(1))
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .test_before_acquire(true)
            .connect_with(options)
            .await?;
        migrator().run(&pool).await?;
        let signals = Signals::new();
        let listener = subscribe(&pool).await?;
        let task = tokio::spawn(listen(pool.clone(), listener, signals.clone()));
        Ok(PgStore { pool, signals, _listener: Arc::new(AbortOnDrop(task)) })
    }

    /// The pool, for tests that need raw SQL (e.g. to corrupt a row).
    #[doc(hidden)]
    pub fn raw_pool(&self) -> &PgPool {
        &self.pool
    }
}

impl Backend for PgStore {
    type Db = sqlx::Postgres;

    async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, StoreError> {
        Ok(self.pool.begin().await?)
    }

    fn write_pool(&self) -> &PgPool {
        &self.pool
    }

    /// One transaction per write: PostgreSQL's own commits already overlap across connections.
    async fn write<T, F>(&self, _durability: Durability, write: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: for<'t, 'c> FnOnce(&'t mut sqlx::Transaction<'c, sqlx::Postgres>) -> TxFuture<'t, T>
            + Send
            + 'static,
    {
        crate::backend::in_own_transaction(self, write).await
    }

    /// Every write flushed: a claim the server lost in a crash could be made again while the
    /// Worker that held it, on another machine, still runs.
    async fn write_one<T, F>(&self, _durability: Durability, write: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut sqlx::PgConnection) -> TxFuture<'c, T> + Send + 'static,
    {
        crate::backend::on_write_connection(self, write).await
    }

    fn read_pool(&self) -> &PgPool {
        &self.pool
    }

    /// See [`Store::probe_write`]: a `DELETE … WHERE false` fails in a read-only transaction
    /// (a standby, `default_transaction_read_only`) and needs a live connection.
    async fn check_writable(&self) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM idempotency_keys WHERE false").execute(&mut *tx).await?;
        tx.rollback().await?;
        Ok(())
    }

    fn signals(&self) -> &Signals {
        &self.signals
    }

    /// Wakes other processes **after** the commit: a NOTIFY inside the transaction would hold
    /// PostgreSQL's database-wide notify lock through the commit's WAL flush and serialize every
    /// committing Worker. A lost notify (crash right after the commit, dropped connection) is
    /// covered by the waiters' poll; an error here is logged, never returned, because the change
    /// is already committed.
    async fn notify_others(&self, session_id: &str, work: bool, events: bool) {
        let sql = match (work, events) {
            (false, false) => return,
            (true, true) => "SELECT pg_notify('tollgate_work', ''), pg_notify('tollgate_events', $1)",
            (true, false) => "SELECT pg_notify('tollgate_work', $1)",
            (false, true) => "SELECT pg_notify('tollgate_events', $1)",
        };
        if let Err(e) = sqlx::query(sql).bind(session_id).execute(&self.pool).await {
            tracing::warn!(error = %e, "store: NOTIFY after commit failed; waiters will poll");
        }
    }
}

/// How long a call waits for a pooled connection (or for a new one while the server is down)
/// before it fails with [`crate::UnavailableReason::PoolTimeout`]: short, so that API writes
/// answer 503 quickly during an outage; the pool retries connecting within it (backing off up to
/// a fifth of it), so a call made as the server returns still succeeds.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(3);

/// The listener's first and longest wait between reconnection attempts.
const LISTEN_RETRY: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(2));

/// A listener on its own pooled connection, subscribed to the store's channels.
async fn subscribe(pool: &PgPool) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    // Reconnection is ours (see `listen`): one path for every way a connection dies.
    listener.eager_reconnect(false);
    listener.listen_all(["tollgate_work", "tollgate_events"]).await?;
    Ok(listener)
}

/// Forwards notifications to the in-process signals until the store is dropped. When the
/// connection breaks (any error, or the server closed it) the listener is dropped and a new one
/// subscribed, backing off while the server is down; once subscribed again it wakes every
/// waiter (notifications sent meanwhile are lost).
async fn listen(pool: PgPool, listener: PgListener, signals: Signals) {
    let mut listener = Some(listener);
    let mut retry = LISTEN_RETRY.0;
    loop {
        let Some(current) = listener.as_mut() else {
            match subscribe(&pool).await {
                Ok(fresh) => {
                    tracing::info!("store: PostgreSQL listener reconnected");
                    listener = Some(fresh);
                    retry = LISTEN_RETRY.0;
                    signals.work_ready();
                    signals.events_appended(ALL_SESSIONS);
                }
                Err(e) => {
                    tracing::debug!(error = %e, "store: PostgreSQL listener cannot reconnect yet");
                    tokio::time::sleep(retry).await;
                    retry = (retry * 2).min(LISTEN_RETRY.1);
                }
            }
            continue;
        };
        match current.try_recv().await {
            Ok(Some(n)) if n.channel() == "tollgate_work" => signals.work_ready(),
            Ok(Some(n)) => signals.events_appended(n.payload()),
            Ok(None) | Err(_) => {
                tracing::warn!("store: PostgreSQL listener lost its connection; reconnecting");
                listener = None;
                signals.work_ready();
                signals.events_appended(ALL_SESSIONS);
            }
        }
    }
}

fn migrator() -> Migrator {
    Migrator::with_migrations(vec![
        Migration::new(
            1,
            "init".into(),
            MigrationType::Simple,
            include_str!("../migrations/postgres/0001_init.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            2,
            "agent_digest".into(),
            MigrationType::Simple,
            include_str!("../migrations/postgres/0002_agent_digest.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            3,
            "audit".into(),
            MigrationType::Simple,
            include_str!("../migrations/postgres/0003_audit.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            4,
            "webhook_outbox".into(),
            MigrationType::Simple,
            include_str!("../migrations/postgres/0004_webhook_outbox.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            5,
            "deadlines".into(),
            MigrationType::Simple,
            include_str!("../migrations/postgres/0005_deadlines.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            7,
            "messages".into(),
            MigrationType::Simple,
            include_str!("../migrations/postgres/0007_messages.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            8,
            "live text".into(),
            MigrationType::Simple,
            include_str!("../migrations/postgres/0008_live_text.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            9,
            "transcript_chunks".into(),
            MigrationType::Simple,
            include_str!("../migrations/postgres/0009_transcript_chunks.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            10,
            "cancel".into(),
            MigrationType::Simple,
            include_str!("../migrations/postgres/0010_cancel.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            11,
            "lost_claims".into(),
            MigrationType::Simple,
            include_str!("../migrations/postgres/0011_lost_claims.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            12,
            "media".into(),
            MigrationType::Simple,
            include_str!("../migrations/postgres/0012_media.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            13,
            "agent_names".into(),
            MigrationType::Simple,
            include_str!("../migrations/postgres/0013_agent_names.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            14,
            "agent_versions".into(),
            MigrationType::Simple,
            include_str!("../migrations/postgres/0014_agent_versions.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            15,
            "approvals".into(),
            MigrationType::Simple,
            include_str!("../migrations/postgres/0015_approvals.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            16,
            "checked_calls".into(),
            MigrationType::Simple,
            include_str!("../migrations/postgres/0016_checked_calls.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            17,
            "agent_tools".into(),
            MigrationType::Simple,
            include_str!("../migrations/postgres/0017_agent_tools.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            18,
            "tools_unavailable".into(),
            MigrationType::Simple,
            include_str!("../migrations/postgres/0018_tools_unavailable.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            20,
            "forks".into(),
            MigrationType::Simple,
            include_str!("../migrations/postgres/0020_forks.sql").into_sql_str(),
            false,
        ),
    ])
}
