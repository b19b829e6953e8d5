//! The SQLite backend: [`SqliteStore`], the embedded default (one WAL file, zero set-up).
//!
//! It owns the connection set-up: one **writer** connection (every write and every claim goes
//! through it, each transaction `BEGIN IMMEDIATE`) and a small pool of readers (WAL lets them
//! read while the writer writes). The statements are the shared ones of the `backend` module.
//! sqlx runs each SQLite connection on its own thread, so no call blocks the async runtime and
//! no `spawn_blocking` is needed.
//!
//! Defaults: `journal_mode=WAL`, `synchronous=NORMAL`, `foreign_keys=ON`, `busy_timeout=10s`,
//! 4 reader connections.
//!
//! # Caveats
//!
//! - Wake-ups are in-process only: a second process writing the same file wakes nobody here;
//!   its steps are found by the poll fallback of [`crate::WorkSignal::wait`].
//! - `synchronous=NORMAL` survives a process crash, not necessarily a power loss.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Row, SqlSafeStr};

use crate::error::{check_row_version, stored_json};
use crate::signal::{EventSignal, Signals, WorkSignal};
use crate::*;

/// A [`Store`] on one SQLite file.
#[derive(Clone)]
pub struct SqliteStore {
    writer: SqlitePool,
    reader: SqlitePool,
    signals: Signals,
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
        let options = SqliteConnectOptions::from_str("sqlite://")?
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(10));
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .connect_with(options.clone())
            .await?;
        migrator().run(&writer).await?;
        let reader =
            SqlitePoolOptions::new().max_connections(4).connect_with(options.read_only(true)).await?;
        Ok(SqliteStore { writer, reader, signals: Signals::new() })
    }

    /// The writer pool, for tests that need raw SQL (e.g. to corrupt a row).
    #[doc(hidden)]
    pub fn raw_pool(&self) -> &SqlitePool {
        &self.writer
    }

    async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>, StoreError> {
        Ok(self.writer.begin_with("BEGIN IMMEDIATE").await?)
    }
    fn write_pool(&self) -> &SqlitePool {
        &self.writer
    }
    fn read_pool(&self) -> &SqlitePool {
        &self.reader
    }
}

fn migrator() -> Migrator {
    Migrator::with_migrations(vec![Migration::new(
        1,
        "init".into(),
        MigrationType::Simple,
        include_str!("../migrations/sqlite/0001_init.sql").into_sql_str(),
        false,
    )])
}

crate::backend::impl_store!(SqliteStore, sqlx::Sqlite, false);
