//! How a conformance case becomes a test: `case_table!` makes a suite's `cases` (a function per
//! case) from its one list, and [`store_conformance_tests!`](crate::store_conformance_tests) /
//! [`outbox_conformance_tests!`](crate::outbox_conformance_tests) make, in a test binary, the
//! modules `sqlite` and `postgres` with one `#[test]` per case, each calling [`on_sqlite`] or
//! [`on_postgres`].
//!
//! Run one case alone by its path, e.g.
//! `cargo test -p tollgate-store --test conformance postgres::events_continue_after_a_seq`.
//!
//! # Caveats
//!
//! - Each test has its own multi-threaded runtime (4 workers, as the suites had) and its own
//!   store; the PostgreSQL ones share the binary's one cluster ([`PgCluster::shared`]).
//! - Without PostgreSQL the `postgres::` tests fail, unless `TOLLGATE_SKIP_MISSING` names
//!   `postgres` ([`crate::skip`]).

use std::future::Future;
use std::pin::Pin;

use tollgate_store::SqliteStore;

use crate::PgCluster;
use crate::conformance::Harness;

/// What a case returns: its run, to be awaited on a runtime.
pub type CaseFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// One case of a suite: an async function of a fresh harness.
pub type Case = fn(Harness) -> CaseFuture;

/// Makes `pub mod cases` with one function per listed case, calling the case of that name in
/// the module where it is invoked. A listed name that is not written there fails to compile.
macro_rules! case_table {
    ($suite:ident: $($case:ident),* $(,)?) => {
        /// Every case of this suite, by name, as a [`Case`](crate::suite::Case) (made from the
        /// one list above).
        pub mod cases {
            $(
                #[doc = concat!("The case `", stringify!($case), "`.")]
                pub fn $case(h: $crate::conformance::Harness) -> $crate::suite::CaseFuture {
                    Box::pin(super::$case(h))
                }
            )*
        }
    };
}
pub(crate) use case_table;

/// Makes the modules `sqlite` and `postgres`, each with one test per case of `$suite`.
#[doc(hidden)]
#[macro_export]
macro_rules! __backend_tests {
    ($suite:ident: $($case:ident),* $(,)?) => {
        /// Each case on a fresh SQLite file.
        mod sqlite {
            $(
                #[test]
                fn $case() {
                    $crate::suite::on_sqlite(stringify!($case), $crate::$suite::cases::$case);
                }
            )*
        }

        /// Each case on a fresh schema of the binary's one PostgreSQL cluster.
        mod postgres {
            $(
                #[test]
                fn $case() {
                    $crate::suite::on_postgres(stringify!($case), $crate::$suite::cases::$case);
                }
            )*
        }
    };
}

/// In a test binary: one test per store conformance case per backend, `sqlite::<case>` and
/// `postgres::<case>`, from the one list in [`crate::conformance`].
#[macro_export]
macro_rules! store_conformance_tests {
    () => {
        $crate::__store_conformance_cases!($crate::__backend_tests);
    };
}

/// In a test binary: one test per outbox conformance case per backend, `sqlite::<case>` and
/// `postgres::<case>`, from the one list in [`crate::outbox`].
#[macro_export]
macro_rules! outbox_conformance_tests {
    () => {
        $crate::__outbox_conformance_cases!($crate::__backend_tests);
    };
}

/// Runs the case `name` on a fresh SQLite file.
///
/// # Panics
/// When the case fails, or the store cannot be opened.
pub fn on_sqlite(name: &str, case: Case) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join(format!("{name}.db"));
    run(case, async move { Harness::sqlite(SqliteStore::open(&path).await.expect("open SQLite store")) });
}

/// Runs the case `name` on a fresh schema (named after it) of the binary's one cluster; without
/// PostgreSQL, fails or skips as [`PgCluster::shared`] says.
///
/// # Panics
/// When the case fails, or the cluster or store cannot be had.
pub fn on_postgres(name: &str, case: Case) {
    let Some(cluster) = PgCluster::shared() else { return };
    run(case, async move { Harness::postgres(cluster.store(name, 8).await) });
}

/// Runs `case` on the harness `fresh` makes, on a runtime of its own; a failed case's panic is
/// the test's.
fn run(case: Case, fresh: impl Future<Output = Harness>) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async move {
        let harness = fresh.await;
        if let Err(e) = tokio::spawn(case(harness)).await {
            match e.try_into_panic() {
                Ok(panic) => std::panic::resume_unwind(panic),
                Err(e) => panic!("the case did not finish: {e}"),
            }
        }
    });
}
