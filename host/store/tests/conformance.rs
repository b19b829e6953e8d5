//! The store conformance suite (`tollgate_store_testing::conformance`) on each backend, one test
//! per case per backend: `sqlite::<case>` on a fresh file, `postgres::<case>` on a fresh schema
//! of this binary's one throwaway cluster. Run one case alone by its path:
//! `cargo test -p tollgate-store --test conformance postgres::events_continue_after_a_seq`.
//!
//! The PostgreSQL tests need the binaries (`scripts/install-postgres.sh`); without them they fail,
//! unless `TOLLGATE_SKIP_MISSING=postgres`, where they skip, saying so.

use tollgate_store::{SqliteStore, Store, StoreError};
use tollgate_store_testing::PgCluster;

tollgate_store_testing::store_conformance_tests!();

#[tokio::test]
async fn reopening_a_sqlite_file_keeps_its_sessions_and_migrates_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let run_state = tollgate_store::raw(r#"{"version":1}"#).unwrap();
    let session = tollgate_store::NewSession {
        session_id: "s".into(),
        status: "idle".into(),
        run_state,
        agent: None,
        agent_name: None,
    };
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

/// A new idle session `id` with an empty run state.
fn idle_session(id: &str) -> tollgate_store::NewSession {
    tollgate_store::NewSession {
        session_id: id.into(),
        status: "idle".into(),
        run_state: tollgate_store::raw(r#"{"version":1}"#).unwrap(),
        agent: None,
        agent_name: None,
    }
}

/// The NOTIFY path across processes: a second handle (its own pool and listener, as another
/// Worker process would have) is woken by a commit made through the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_message_wakes_a_worker_of_another_store_handle_through_notify() {
    use tollgate_store::{NewItem, NewStep, UserMessage, raw};
    let Some(cluster) = PgCluster::shared() else { return };
    let api = cluster.store("notify", 2).await;
    let worker = tollgate_store::PgStore::connect_with(cluster.schema_options("notify").await.unwrap(), 2)
        .await
        .unwrap();
    let session = idle_session("s");
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

/// Two handles on one SQLite file, as an `api` and a `worker` process have: a step and an event
/// committed through one wake the other's Worker and readers (its watch of `data_version`), and
/// its own commits are not seen twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_commit_wakes_the_workers_and_readers_of_another_handle_on_the_same_file() {
    use std::time::Duration;
    use tollgate_store::{NewEvent, NewItem, NewStep, UserMessage, raw};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let api = tollgate_store::SqliteStore::open(&path).await.unwrap();
    let worker = tollgate_store::SqliteStore::open(&path).await.unwrap();
    let session = idle_session("s");
    api.create_session(session).await.unwrap();
    // The session's creation is another handle's commit too: let that wake-up pass.
    tokio::time::sleep(tollgate_store::sqlite::WATCH_EVERY * 3).await;
    let mut work = worker.work_signal();
    let mut events = worker.event_signal("s");
    assert!(!work.wait(tollgate_store::sqlite::WATCH_EVERY * 3).await, "nothing new yet");
    let waiter = tokio::spawn(async move {
        (work.wait(Duration::from_secs(20)).await, events.wait(Duration::from_secs(20)).await)
    });
    api.send_user_message(UserMessage {
        session_id: "s".into(),
        client_key: "k".into(),
        item: NewItem { kind: "user_prompt".into(), uuid: None, turn_id: None, body: raw("{}").unwrap() },
        wake: Some(NewStep::now("RunModel", raw("{}").unwrap())),
        events: vec![NewEvent { kind: "user_message".into(), payload: raw("{}").unwrap() }],
    })
    .await
    .unwrap();
    assert_eq!(waiter.await.unwrap(), (true, true), "woken by the watch, not by the timeouts");
    let claimed = worker.claim("w", Duration::from_secs(60)).await.unwrap();
    assert!(claimed.is_some(), "the other handle claims the step");
    // A handle's own commits change nothing its watch sees: no second wake-up for them.
    tokio::time::sleep(tollgate_store::sqlite::WATCH_EVERY * 3).await;
    let mut own = worker.work_signal();
    worker.create_session(idle_session("t")).await.unwrap();
    assert!(!own.wait(tollgate_store::sqlite::WATCH_EVERY * 5).await, "its own commit woke it");
}

/// Schema 5 rebuilds SQLite's audit table to widen its CHECK: a file at schema 4 with audit rows
/// keeps every row and id, new ids continue after them, and the append-only triggers still hold.
#[tokio::test]
async fn migrating_a_sqlite_file_to_schema_5_keeps_its_audit_rows_ids_and_triggers() {
    use sqlx::SqlSafeStr;
    use sqlx::migrate::{Migration, MigrationType};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.db");
    let schema_4 = [
        (1, "init", include_str!("../migrations/sqlite/0001_init.sql")),
        (2, "agent_digest", include_str!("../migrations/sqlite/0002_agent_digest.sql")),
        (3, "audit", include_str!("../migrations/sqlite/0003_audit.sql")),
        (4, "webhook_outbox", include_str!("../migrations/sqlite/0004_webhook_outbox.sql")),
    ];
    {
        let options = sqlx::sqlite::SqliteConnectOptions::new().filename(&path).create_if_missing(true);
        let pool = sqlx::SqlitePool::connect_with(options).await.unwrap();
        sqlx::raw_sql(
            "CREATE TABLE _sqlx_migrations (version BIGINT PRIMARY KEY, description TEXT NOT NULL,
                 installed_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP, success BOOLEAN NOT NULL,
                 checksum BLOB NOT NULL, execution_time BIGINT NOT NULL)",
        )
        .execute(&pool)
        .await
        .unwrap();
        for (version, name, sql) in schema_4 {
            sqlx::raw_sql(sql.into_sql_str()).execute(&pool).await.unwrap();
            let applied =
                Migration::new(version, name.into(), MigrationType::Simple, sql.into_sql_str(), false);
            sqlx::query(
                "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
                 VALUES ($1, $2, true, $3, 0)",
            )
            .bind(version)
            .bind(name)
            .bind(applied.checksum.to_vec())
            .execute(&pool)
            .await
            .unwrap();
        }
        for (id, decision) in [(7, "approved"), (9, "rejected")] {
            sqlx::query(
                "INSERT INTO audit (audit_id, row_version, session_id, interrupt_id, principal, decision,
                     reason, tool_name, input, edited_input, decided_at)
                 VALUES ($1, 1, 's', 'i', 'alice', $2, 'why', 'create_refund', '{\"a\": 1}', NULL, 5)",
            )
            .bind(id)
            .bind(decision)
            .execute(&pool)
            .await
            .unwrap();
        }
        let refused = sqlx::query(
            "INSERT INTO audit (row_version, session_id, interrupt_id, principal, decision, decided_at)
             VALUES (1, 's', 'i', 'x', 'expired', 0)",
        )
        .execute(&pool)
        .await;
        assert!(refused.is_err(), "schema 4 does not know `expired`");
        pool.close().await;
    }
    let store = SqliteStore::open(&path).await.expect("migrates to schema 5");
    let rows = store
        .audit()
        .audit_entries(&tollgate_store::AuditQuery { limit: 10, ..Default::default() })
        .await
        .unwrap();
    let kept: Vec<(i64, &str, &str)> =
        rows.iter().map(|r| (r.audit_id, r.principal.as_str(), r.decision.as_str())).collect();
    assert_eq!(kept, [(7, "alice", "approved"), (9, "alice", "rejected")], "rows and ids kept");
    assert_eq!(rows[0].input.as_ref().map(|i| i.get()), Some("{\"a\": 1}"), "byte for byte");
    let next: i64 = sqlx::query_scalar(
        "INSERT INTO audit (row_version, session_id, interrupt_id, principal, decision, decided_at)
         VALUES (1, 's', 'i', 'tollgate:deadline', 'expired', 6) RETURNING audit_id",
    )
    .fetch_one(store.raw_pool())
    .await
    .unwrap();
    assert_eq!(next, 10, "ids continue after the highest kept");
    for sql in ["UPDATE audit SET principal = 'mallory'", "DELETE FROM audit"] {
        let refused = sqlx::query(sql).execute(store.raw_pool()).await;
        assert!(refused.is_err_and(|e| e.to_string().contains("append-only")), "{sql}");
    }
    let bad = sqlx::query(
        "INSERT INTO audit (row_version, session_id, interrupt_id, principal, decision, decided_at)
         VALUES (1, 's', 'i', 'x', 'maybe', 0)",
    )
    .execute(store.raw_pool())
    .await;
    assert!(bad.is_err(), "the CHECK still refuses an unknown decision");
}

/// A session with one queued `RunModel`, claimed through `worker`: a turn in progress whose step
/// another handle's Worker holds.
async fn claimed_elsewhere(api: &dyn Store, worker: &dyn Store) -> tollgate_store::Claimed {
    use tollgate_store::{NewItem, NewStep, UserMessage, raw};
    api.create_session(idle_session("s")).await.unwrap();
    api.send_user_message(UserMessage {
        session_id: "s".into(),
        client_key: "k".into(),
        item: NewItem { kind: "user_prompt".into(), uuid: None, turn_id: None, body: raw("{}").unwrap() },
        wake: Some(NewStep::now("RunModel", raw("{}").unwrap())),
        events: vec![],
    })
    .await
    .unwrap();
    worker.claim("w", std::time::Duration::from_secs(60)).await.unwrap().expect("the step")
}

/// A cancel asked through one handle (an API process) wakes the readers of the session on
/// another handle (the Worker process holding its step), which then reads the request.
async fn a_cancel_reaches_the_worker_of_another_handle(api: &dyn Store, worker: &dyn Store) {
    use tollgate_store::CancelRequest;
    let claimed = claimed_elsewhere(api, worker).await;
    let mut heard = worker.event_signal("s");
    // Earlier commits of the other handle may still be on their way: let them pass.
    while heard.wait(std::time::Duration::from_millis(500)).await {}
    let request = CancelRequest { session_id: "s".into(), requested_by: "alice".into(), events: vec![] };
    let receipt = api.request_cancel(request).await.unwrap();
    assert_eq!(receipt.step_id, claimed.step.step_id);
    assert!(
        heard.wait(std::time::Duration::from_secs(20)).await,
        "woken across processes, not by the timeout"
    );
    let pending = worker.pending_cancel("s").await.unwrap().expect("the request");
    assert_eq!(pending.requested_by, "alice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_cancel_request_wakes_the_worker_of_another_handle_on_the_same_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let api = SqliteStore::open(&path).await.unwrap();
    let worker = SqliteStore::open(&path).await.unwrap();
    a_cancel_reaches_the_worker_of_another_handle(&api, &worker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_cancel_request_wakes_the_worker_of_another_handle_through_notify() {
    let Some(cluster) = PgCluster::shared() else { return };
    let api = cluster.store("cancel", 2).await;
    let worker = tollgate_store::PgStore::connect_with(cluster.schema_options("cancel").await.unwrap(), 2)
        .await
        .unwrap();
    a_cancel_reaches_the_worker_of_another_handle(&api, &worker).await;
}

/// Schema 10 rebuilds SQLite's audit table again to add `cancelled`: rows, ids and the
/// append-only triggers are kept.
#[tokio::test]
async fn migrating_a_sqlite_file_to_schema_10_keeps_its_audit_rows_and_takes_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.db");
    let store = SqliteStore::open(&path).await.unwrap();
    sqlx::query(
        "INSERT INTO audit (audit_id, row_version, session_id, interrupt_id, principal, decision, decided_at)
         VALUES (4, 1, 's', 'i', 'alice', 'revoked', 5)",
    )
    .execute(store.raw_pool())
    .await
    .unwrap();
    // Back to schema 9: the CHECK of schema 5, and the migration not applied.
    sqlx::raw_sql(
        "DROP TRIGGER audit_no_update; DROP TRIGGER audit_no_delete;
         CREATE TABLE audit_v9 AS SELECT * FROM audit; DROP TABLE audit;
         CREATE TABLE audit (audit_id INTEGER PRIMARY KEY AUTOINCREMENT, row_version integer NOT NULL,
             session_id text NOT NULL, interrupt_id text NOT NULL, principal text NOT NULL,
             decision text NOT NULL CHECK (decision IN ('approved', 'rejected', 'escalated', 'expired', 'revoked')),
             reason text, tool_name text, input text, edited_input text, decided_at integer NOT NULL);
         INSERT INTO audit SELECT * FROM audit_v9; DROP TABLE audit_v9;
         CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
             BEGIN SELECT RAISE(ABORT, 'audit rows are append-only: UPDATE refused'); END;
         CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
             BEGIN SELECT RAISE(ABORT, 'audit rows are append-only: DELETE refused'); END;
         ALTER TABLE sessions DROP COLUMN cancel_requested_by;
         ALTER TABLE sessions DROP COLUMN cancel_requested_at;
         DELETE FROM _sqlx_migrations WHERE version = 10;",
    )
    .execute(store.raw_pool())
    .await
    .unwrap();
    let refused = sqlx::query(
        "INSERT INTO audit (row_version, session_id, interrupt_id, principal, decision, decided_at)
         VALUES (1, 's', 'turn-1', 'x', 'cancelled', 0)",
    )
    .execute(store.raw_pool())
    .await;
    assert!(refused.is_err(), "schema 9 does not know `cancelled`");
    drop(store);
    let store = SqliteStore::open(&path).await.expect("migrates to schema 10");
    let next: i64 = sqlx::query_scalar(
        "INSERT INTO audit (row_version, session_id, interrupt_id, principal, decision, decided_at)
         VALUES (1, 's', 'turn-1', 'alice', 'cancelled', 6) RETURNING audit_id",
    )
    .fetch_one(store.raw_pool())
    .await
    .unwrap();
    assert_eq!(next, 5, "ids continue after the highest kept");
    let rows = store
        .audit()
        .audit_entries(&tollgate_store::AuditQuery { limit: 10, ..Default::default() })
        .await
        .unwrap();
    let kept: Vec<(i64, &str)> = rows.iter().map(|r| (r.audit_id, r.decision.as_str())).collect();
    assert_eq!(kept, [(4, "revoked"), (5, "cancelled")]);
    for sql in ["UPDATE audit SET principal = 'mallory'", "DELETE FROM audit"] {
        let refused = sqlx::query(sql).execute(store.raw_pool()).await;
        assert!(refused.is_err_and(|e| e.to_string().contains("append-only")), "{sql}");
    }
    assert_eq!(store.pending_cancel("s").await.unwrap(), None, "the columns are back");
}
