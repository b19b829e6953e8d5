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
//! - Keep `synchronous_commit=on`: the store's guarantees assume a commit is durable when it
//!   returns.
//! - Dropping the last clone of a [`PgStore`] stops its listener task.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};
use sqlx::{Row, SqlSafeStr};

use crate::error::{check_row_version, stored_json};
use crate::signal::{ALL_SESSIONS, EventSignal, Signals, WorkSignal};
use crate::*;

/// A [`Store`] on a PostgreSQL database.
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
        let pool = PgPoolOptions::new().max_connections(max_connections.max(1)).connect_with(options).await?;
        migrator().run(&pool).await?;
        let signals = Signals::new();
        let mut listener = PgListener::connect_with(&pool).await?;
        listener.listen_all(["tollgate_work", "tollgate_events"]).await?;
        let task = tokio::spawn(listen(listener, signals.clone()));
        Ok(PgStore { pool, signals, _listener: Arc::new(AbortOnDrop(task)) })
    }

    /// The pool, for tests that need raw SQL (e.g. to corrupt a row).
    #[doc(hidden)]
    pub fn raw_pool(&self) -> &PgPool {
        &self.pool
    }

    async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, StoreError> {
        Ok(self.pool.begin().await?)
    }
    fn write_pool(&self) -> &PgPool {
        &self.pool
    }
    fn read_pool(&self) -> &PgPool {
        &self.pool
    }
}

/// Forwards notifications to the in-process signals until the store is dropped. On a broken
/// connection it wakes everyone (notifications may have been missed) and lets `recv` reconnect.
async fn listen(mut listener: PgListener, signals: Signals) {
    loop {
        match listener.recv().await {
            Ok(n) if n.channel() == "tollgate_work" => signals.work_ready(),
            Ok(n) => signals.events_appended(n.payload()),
            Err(e) => {
                tracing::warn!(error = %e, "store: PostgreSQL listener lost its connection; reconnecting");
                signals.work_ready();
                signals.events_appended(ALL_SESSIONS);
                // Back off so a database that is down does not spin this task.
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

fn migrator() -> Migrator {
    Migrator::with_migrations(vec![Migration::new(
        1,
        "init".into(),
        MigrationType::Simple,
        include_str!("../migrations/postgres/0001_init.sql").into_sql_str(),
        false,
    )])
}

crate::backend::impl_store!(PgStore, sqlx::Postgres, true);
