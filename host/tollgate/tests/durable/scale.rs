//! Many sessions: two Workers sharing PostgreSQL, a thousand sessions waiting for approval, and
//! rows the Worker must refuse without losing anything.

use std::time::{Duration, Instant};

use crate::park::park_on_approval;
use crate::world::{Refund, World};

/// Two Worker processes share the sessions of one PostgreSQL database, each segment started once.
/// That concurrent claims never take a step twice is the store's own case, many more claims at
/// once than here (`conformance::postgres::concurrent_workers_never_claim_a_step_twice`, 100
/// steps to 4 claimers): twenty sessions are enough for both Workers to take work.
#[tokio::test(flavor = "multi_thread")]
async fn two_workers_on_one_postgres_database_share_twenty_sessions_and_run_no_step_twice() {
    let Some(db) = crate::pg_database().await else { return };
    let Some(world) = World::on_db("two workers on PostgreSQL", Refund::SingleAttemptWithApproval, &db).await
    else {
        return;
    };
    let pg = ["--lease-secs", "60", "--heartbeat-secs", "5", "--concurrency", "2"];
    let a = world.worker_with("a", &world.db, &pg);
    let b = world.worker_with("b", &world.db, &pg);
    const SESSIONS: usize = 20;
    for i in 0..SESSIONS {
        world.send(&format!("s{i}"), &format!("say hello {i}")).await;
    }
    let start = Instant::now();
    for i in 0..SESSIONS {
        let done = world.wait_idle_after(&format!("s{i}"), 1).await;
        assert_eq!(done.last_turn_error, None, "s{i}: {}", world.diagnostics());
        assert_eq!(done.messages.last().map(|m| m.text.clone()), Some(format!("said: hello {i}")));
    }
    eprintln!("{SESSIONS} sessions on two Workers sharing PostgreSQL: {:?}", start.elapsed());
    assert_eq!(
        world.mock.message_requests().len(),
        SESSIONS,
        "one model call per session: no segment ran twice"
    );
    for i in 0..SESSIONS {
        let events = world.events(&format!("s{i}")).await;
        assert_eq!(events.iter().filter(|e| e.kind == "turn_started").count(), 1, "s{i}: {events:?}");
        assert_eq!(events.iter().filter(|e| e.kind == "turn_completed").count(), 1, "s{i}");
    }
    let ran = |log: &str| log.matches("segment starting").count();
    let (by_a, by_b) = (ran(&a.log_text()), ran(&b.log_text()));
    assert_eq!(by_a + by_b, SESSIONS, "every segment started once");
    assert!(by_a > 0 && by_b > 0, "both Workers took work: a {by_a}, b {by_b}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_thousand_sessions_waiting_for_approval_cost_the_worker_no_process_and_almost_no_memory() {
    let Some(world) = World::new("1,000 waiting sessions", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    const WAITING: usize = 1000;
    // The sessions name their agent as they would through the API (a store where they name none
    // makes the Worker adopt them all at its start: a one-time cost of ~7.5 MB of SQLite page
    // cache, measured here before they were named, that is not what this test is about).
    world.store.agents().register_agent("agent", "sha256:parked", false).await.unwrap();
    for i in 0..WAITING {
        park_on_approval(world.store.as_ref(), &format!("w{i}")).await;
    }
    assert_eq!(world.store.open_interrupts(None, 10_000).await.unwrap().len(), WAITING);
    // One Worker on the store with a thousand waiting sessions, one on an empty store.
    let busy = world.worker("busy");
    let empty_db = format!("sqlite://{}", world.dir.path().join("empty.db").display());
    let idle = world.worker_with("idle", &empty_db, &["--lease-secs", "3", "--heartbeat-secs", "1"]);
    tokio::time::sleep(Duration::from_secs(4)).await;
    // Both have polled for work many times; neither holds anything.
    let (busy_kib, idle_kib) = (busy.rss_kib(), idle.rss_kib());
    assert!(busy_kib > 0 && idle_kib > 0, "read /proc: {busy_kib} {idle_kib}");
    assert!(busy.children().is_empty(), "no process for a waiting session");
    let per_session = (busy_kib.saturating_sub(idle_kib) * 1024) as f64 / WAITING as f64;
    eprintln!(
        "RSS with {WAITING} waiting sessions: {busy_kib} KiB; on an empty store: {idle_kib} KiB; {per_session:.0} bytes per session"
    );
    assert!(
        per_session < 4096.0,
        "a waiting session cost the Worker {per_session:.0} bytes (busy {busy_kib} KiB, idle {idle_kib} KiB)"
    );
    // Still waiting, and still decidable: the Worker is alive on that store.
    assert_eq!(world.store.open_interrupts(None, 10_000).await.unwrap().len(), WAITING);
    world.send("live", "say still here").await;
    let done = world.wait_idle_after("live", 1).await;
    assert_eq!(
        done.messages.last().map(|m| m.text.as_str()),
        Some("said: still here"),
        "{}",
        world.diagnostics()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_future_version_or_corrupt_row_is_refused_by_name_and_nothing_else_is_lost() {
    let Some(world) = World::new("refused rows", Refund::SingleAttemptWithApproval).await else { return };
    for session in ["future", "corrupt", "good"] {
        tollgate_sessions::writes::start(world.store.as_ref(), session).await.unwrap();
    }
    let path = world.db.strip_prefix("sqlite://").unwrap().to_owned();
    {
        use sqlx::ConnectOptions;
        let mut conn =
            sqlx::sqlite::SqliteConnectOptions::new().filename(&path).connect().await.expect("open the file");
        sqlx::query(
            "UPDATE sessions SET run_state = '{\"version\":2,\"turns\":[]}' WHERE session_id = 'future'",
        )
        .execute(&mut conn)
        .await
        .unwrap();
        sqlx::query("UPDATE sessions SET run_state = '{\"version\":1,\"turn_entries\":7}' WHERE session_id = 'corrupt'")
            .execute(&mut conn)
            .await
            .unwrap();
    }
    let before = |s: &str| {
        let store = world.store.clone();
        let s = s.to_owned();
        async move { store.session(&s).await.unwrap().unwrap().run_state.get().to_owned() }
    };
    let (future_before, corrupt_before) = (before("future").await, before("corrupt").await);
    let a = world.worker("a");
    for session in ["future", "corrupt", "good"] {
        tollgate_sessions::writes::send(world.store.as_ref(), session, "say hi", Some("k1")).await.unwrap();
    }
    let good = world.wait_idle_after("good", 1).await;
    assert_eq!(good.messages.last().map(|m| m.text.as_str()), Some("said: hi"), "{}", world.diagnostics());
    let start = Instant::now();
    loop {
        let log = a.log_text();
        if log.contains("version 2, newer than this Tollgate reads")
            && log.contains("the run state is corrupt")
        {
            assert!(log.contains("parked"), "{log}");
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "the Worker did not refuse both rows:\n{log}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(before("future").await, future_before, "the refused row is unchanged");
    assert_eq!(before("corrupt").await, corrupt_before);
    let future =
        tollgate_sessions::reads::snapshot(world.store.as_ref(), "future").await.unwrap_err().to_string();
    assert!(future.contains("version 2"), "{future}");
    let corrupt =
        tollgate_sessions::reads::snapshot(world.store.as_ref(), "corrupt").await.unwrap_err().to_string();
    assert!(corrupt.contains("run state is corrupt"), "{corrupt}");
    // Their messages are kept. A newer Tollgate's row waits (parked) for a newer Worker; a corrupt
    // one ends its turn with an error event instead of waiting forever.
    for session in ["future", "corrupt"] {
        let items = tollgate_sessions::reads::read_all_items(world.store.as_ref(), session).await.unwrap();
        assert_eq!(items.len(), 1, "{session}: the message is stored");
    }
    let step = world.store.step_in_flight("future").await.unwrap().expect("the step is still there");
    assert_eq!(step.kind, "RunModel");
    assert!(world.store.step_in_flight("corrupt").await.unwrap().is_none());
    let events = world.events("corrupt").await;
    let failed = events.iter().find(|e| e.kind == "turn_failed").expect("a turn_failed event");
    assert!(failed.payload.get().contains("run state is corrupt"), "{}", failed.payload.get());
}
