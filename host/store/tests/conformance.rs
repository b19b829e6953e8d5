//! The store conformance suite (`tollgate_store::testing::conformance`) on each backend: SQLite on
//! a fresh file per case, PostgreSQL on a fresh schema per case in one throwaway cluster.
//!
//! The PostgreSQL run needs the binaries (`scripts/install-postgres.sh`); without them it is
//! skipped with a note, and it fails instead when `TOLLGATE_REQUIRE_POSTGRES=1`.

use tollgate_store::testing::PgCluster;
use tollgate_store::testing::conformance::{Harness, run_all};
use tollgate_store::{SqliteStore, Store, StoreError};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_sqlite_store_keeps_the_store_contract() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_owned();
    run_all(|case| {
        let path = root.join(format!("{case}.db"));
        async move { Harness::sqlite(SqliteStore::open(&path).await.expect("open SQLite store")) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_postgres_store_keeps_the_store_contract() {
    let Some(cluster) = PgCluster::start_or_skip() else { return };
    let cluster = &cluster;
    run_all(|case| async move { Harness::postgres(cluster.store(case, 8).await) }).await;
}

#[tokio::test]
async fn reopening_a_sqlite_file_keeps_its_sessions_and_migrates_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let run_state = tollgate_store::raw(r#"{"version":1}"#).unwrap();
    let session =
        tollgate_store::NewSession { session_id: "s".into(), status: "idle".into(), run_state, agent: None };
    assert!(store.create_session(session).await.unwrap());
    drop(store);
    let again = SqliteStore::open(&path).await.unwrap();
    assert_eq!(again.session("s").await.unwrap().unwrap().status, "idle");
}

#[tokio::test]
async fn a_database_migrated_by_a_newer_build_is_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.db");
    let store = SqliteStore::open(&path).await.unwrap();
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
         VALUES (99, 'from the future', true, x'00', 0)",
    )
    .execute(store.raw_pool())
    .await
    .unwrap();
    drop(store);
    let err = SqliteStore::open(&path).await.expect_err("newer schema");
    assert!(matches!(err, StoreError::Migrate { .. }), "{err}");
    assert!(!err.is_retryable());
}

#[tokio::test]
async fn an_unknown_url_scheme_is_refused() {
    let err = tollgate_store::open("mysql://x").await.err().expect("unsupported");
    assert!(matches!(err, StoreError::UnsupportedUrl { .. }), "{err}");
}

/// The NOTIFY path across processes: a second handle (its own pool and listener, as another
/// Worker process would have) is woken by a commit made through the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_message_wakes_a_worker_of_another_store_handle_through_notify() {
    use tollgate_store::{NewItem, NewSession, NewStep, UserMessage, raw};
    let Some(cluster) = PgCluster::start_or_skip() else { return };
    let api = cluster.store("notify", 2).await;
    let worker = tollgate_store::PgStore::connect_with(cluster.schema_options("notify").await.unwrap(), 2)
        .await
        .unwrap();
    let session = NewSession {
        session_id: "s".into(),
        status: "idle".into(),
        run_state: raw(r#"{"version":1}"#).unwrap(),
        agent: None,
    };
    api.create_session(session).await.unwrap();
    let mut signal = worker.work_signal();
    let waiter = tokio::spawn(async move { signal.wait(std::time::Duration::from_secs(20)).await });
    api.send_user_message(UserMessage {
        session_id: "s".into(),
        client_key: "k".into(),
        item: NewItem { kind: "user_prompt".into(), uuid: None, turn_id: None, body: raw("{}").unwrap() },
        wake: Some(NewStep::now("RunModel", raw("{}").unwrap())),
        events: vec![],
    })
    .await
    .unwrap();
    assert!(waiter.await.unwrap(), "woken by NOTIFY, not by the timeout");
    let claimed = worker.claim("w", std::time::Duration::from_secs(60)).await.unwrap();
    assert!(claimed.is_some(), "the other handle claims the step");
}
