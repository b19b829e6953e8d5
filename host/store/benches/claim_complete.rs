//! Claim+complete throughput of the store: each operation is one `claim` and one `commit` that
//! finishes the step and enqueues the session's next step (two transactions, fsync'd), spread
//! over 200 sessions. Prints steps/s for SQLite and PostgreSQL with 1 and 4 Workers (tasks, each
//! with its own connection on PostgreSQL; SQLite funnels writes through its one writer), then
//! what 1,000 sessions waiting for approval cost.
//!
//! Run: `cargo bench -p tollgate-store --bench claim_complete` (PostgreSQL needs
//! `scripts/install-postgres.sh`; `BENCH_STEPS` sets the steps per run, default 4000).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tollgate_store::testing::PgCluster;
use tollgate_store::*;

const SESSIONS: usize = 200;
const LEASE: Duration = Duration::from_secs(60);

fn j(t: &str) -> Box<serde_json::value::RawValue> {
    raw(t).unwrap()
}

async fn seed(store: &dyn Store, sessions: usize, prefix: &str) {
    for i in 0..sessions {
        let id = format!("{prefix}{i}");
        store
            .create_session(NewSession {
                session_id: id.clone(),
                status: "idle".into(),
                run_state: j(r#"{"version":1}"#),
            })
            .await
            .unwrap();
        store
            .send_user_message(UserMessage {
                session_id: id,
                client_key: "k".into(),
                item: NewItem {
                    kind: "user_prompt".into(),
                    uuid: None,
                    turn_id: None,
                    body: j(r#"{"kind":"user_prompt","text":"go"}"#),
                },
                wake: Some(NewStep::now("RunModel", j("{}"))),
                events: vec![],
            })
            .await
            .unwrap();
    }
}

async fn run(store: Arc<dyn Store>, workers: usize, steps: usize) -> f64 {
    seed(&*store, SESSIONS, "s").await;
    let done = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..workers {
        let (store, done) = (store.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let me = format!("w{w}");
            while done.load(Ordering::Relaxed) < steps {
                let Some(c) = store.claim(&me, LEASE).await.unwrap() else {
                    tokio::task::yield_now().await;
                    continue;
                };
                let mut commit = Commit::finish(Finish::Done(j("null")));
                commit.steps.push(NewStep::now("Next", j("{}")));
                store.commit(&c, commit).await.unwrap();
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

/// Parks 1,000 sessions on an approval and times a claim that finds nothing to do.
async fn waiting(store: Arc<dyn Store>) -> (Duration, Duration) {
    seed(&*store, 1000, "wait").await;
    let started = Instant::now();
    while let Some(c) = store.claim("w", LEASE).await.unwrap() {
        let mut park = Commit::finish(Finish::Done(j("null")));
        park.interrupts.push(NewInterrupt { interrupt_id: "i".into(), request: j("{}") });
        park.steps.push(NewStep {
            kind: "AwaitToolApproval".into(),
            payload: j("{}"),
            start: StepStart::OnInterrupt("i".into()),
            only_if_items_after: None,
        });
        store.commit(&c, park).await.unwrap();
    }
    let parked = started.elapsed();
    let probe = Instant::now();
    for _ in 0..100 {
        assert!(store.claim("w", LEASE).await.unwrap().is_none());
    }
    (parked, probe.elapsed() / 100)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    let steps: usize = std::env::var("BENCH_STEPS").ok().and_then(|s| s.parse().ok()).unwrap_or(4000);
    let dir = tempfile::tempdir().unwrap();
    println!("| backend | Workers | steps | claim+complete steps/s |");
    println!("|---|---|---|---|");
    for workers in [1, 4] {
        let store = SqliteStore::open(&dir.path().join(format!("bench{workers}.db"))).await.unwrap();
        let rate = run(Arc::new(store), workers, steps).await;
        println!("| SQLite (WAL, synchronous=NORMAL) | {workers} | {steps} | {rate:.0} |");
    }
    let cluster = PgCluster::start_or_skip();
    if let Some(cluster) = &cluster {
        for workers in [1, 4] {
            let store = cluster.store(&format!("bench{workers}"), workers as u32 + 1).await;
            let rate = run(Arc::new(store), workers, steps / 2).await;
            println!("| PostgreSQL (synchronous_commit=on) | {workers} | {} | {rate:.0} |", steps / 2);
        }
    }
    println!();
    println!(
        "1,000 sessions waiting for approval: per session 1 session row, 1 item, 1 done step, 1 waiting step, 1 open interrupt, 1 idempotency key; no task, no lease."
    );
    let store = SqliteStore::open(&dir.path().join("waiting.db")).await.unwrap();
    let (parked, probe) = waiting(Arc::new(store)).await;
    println!("SQLite: parked 1,000 in {parked:?}; an empty claim with 1,000 waiting takes {probe:?}");
    if let Some(cluster) = &cluster {
        let (parked, probe) = waiting(Arc::new(cluster.store("waiting", 2).await)).await;
        println!("PostgreSQL: parked 1,000 in {parked:?}; an empty claim with 1,000 waiting takes {probe:?}");
    }
}
