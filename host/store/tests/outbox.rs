//! The outbox conformance suite (`tollgate_store_testing::outbox`) on each backend: SQLite on a
//! fresh file per case, PostgreSQL on a fresh schema per case in one throwaway cluster (skipped
//! without the binaries, a failure when `TOLLGATE_REQUIRE_POSTGRES=1`).

use tollgate_store::SqliteStore;
use tollgate_store_testing::PgCluster;
use tollgate_store_testing::conformance::Harness;
use tollgate_store_testing::outbox::run_all;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_sqlite_store_keeps_the_outbox_contract() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_owned();
    run_all(|case| {
        let path = root.join(format!("{case}.db"));
        async move { Harness::sqlite(SqliteStore::open(&path).await.expect("open SQLite store")) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_postgres_store_keeps_the_outbox_contract() {
    let Some(cluster) = PgCluster::start_or_skip() else { return };
    let cluster = &cluster;
    run_all(|case| async move { Harness::postgres(cluster.store(case, 8).await) }).await;
}
