//! Claim+complete throughput of the store: each operation is one `claim` and one `commit` that
//! finishes the step and enqueues the session's next step (two transactions, fsync'd), spread
//! over 200 sessions. Prints steps/s for SQLite (in its `synchronous=FULL` mode, and in
//! `NORMAL` for what durability costs), each with group commit (the store's) beside one commit per
//! write, and PostgreSQL with 1 and 4 Workers (tasks, each
//! with its own connection on PostgreSQL; SQLite funnels writes through its one writer), then
//! the Workers' own claim (`claim_for`) scoped to 1 agent beside 20 (4 Workers, each serving every
//! agent; the ratio is the cost of more agents), then what 1,000 sessions waiting for approval cost, then a **SIGKILL-to-reclaim** table: how long
//! a step held by a killed Worker stays stuck before another Worker claims it.
//!
//! The reclaim measurement re-runs this binary as a victim Worker (`TOLLGATE_BENCH_CHILD=<db url>`
//! selects that mode, `TOLLGATE_BENCH_LEASE_MS` its lease): it claims the one queued step,
//! prints `claimed <step_id>`, and heartbeats every third of the lease (`heartbeat <lease_until>`)
//! until killed. The parent SIGKILLs it right after its first heartbeat, then polls `claim` every
//! 10 ms and prints, per backend and lease (1 s, 3 s), the p50 and p99 (the max for N <= 100)
//! time from the kill to the successful claim, and p50 minus the lease: what the store adds.
//!
//! Run: `cargo bench -p tollgate-store --bench claim_complete` (PostgreSQL needs
//! `scripts/install-postgres.sh`; `BENCH_STEPS` sets the steps per run, default 4000;
//! `BENCH_RECLAIM_N` the kills per backend and lease, default 5).

use std::io::Write;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader};

use sqlx::sqlite::SqliteSynchronous;
use tollgate_store::*;
use tollgate_store_testing::PgCluster;

const SESSIONS: usize = 200;
const LEASE: Duration = Duration::from_secs(60);
/// Set (to the store's URL) in the victim Worker's environment: `main` runs [`victim`].
const CHILD_ENV: &str = "TOLLGATE_BENCH_CHILD";
/// The victim's lease in milliseconds.
const CHILD_LEASE_ENV: &str = "TOLLGATE_BENCH_LEASE_MS";
/// How often the rescuer polls `claim` after the kill.
const POLL: Duration = Duration::from_millis(10);

fn j(t: &str) -> Box<serde_json::value::RawValue> {
    raw(t).unwrap()
}

async fn seed(store: &dyn Store, sessions: usize, prefix: &str) {
    seed_agents(store, sessions, prefix, 0).await;
}

/// [`seed`], the sessions spread over `agents` agents (`agent0`, …; 0: none named).
async fn seed_agents(store: &dyn Store, sessions: usize, prefix: &str, agents: usize) {
    for i in 0..sessions {
        let id = format!("{prefix}{i}");
        store
            .create_session(NewSession {
                session_id: id.clone(),
                status: "idle".into(),
                run_state: j(r#"{"version":1}"#),
                agent: None,
                agent_name: (agents > 0).then(|| format!("agent{}", i % agents)),
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
    run_scoped(store, workers, 1, steps, 0).await
}

/// [`run`] with `concurrency` steps at once per Worker (a Worker's `--concurrency`: that many tasks
/// under its id, each claiming and committing in turn), and the Workers' claim the one they make
/// (`claim_for`), each serving all of `agents` agents over whose sessions the steps are spread (0:
/// the unscoped `claim`).
async fn run_scoped(
    store: Arc<dyn Store>,
    workers: usize,
    concurrency: usize,
    steps: usize,
    agents: usize,
) -> f64 {
    seed_agents(&*store, SESSIONS, "s", agents).await;
    let scope = Arc::new(ClaimScope {
        agents: (0..agents).map(|a| format!("agent{a}")).collect(),
        digests: Vec::new(),
        pinned_only: false,
    });
    let done = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for task in 0..workers * concurrency {
        let (store, done, scope) = (store.clone(), done.clone(), scope.clone());
        tasks.push(tokio::spawn(async move {
            let me = format!("w{}", task / concurrency);
            while done.load(Ordering::Relaxed) < steps {
                let claimed = if agents == 0 {
                    store.claim(&me, LEASE).await
                } else {
                    store.claim_for(&me, LEASE, &scope).await
                };
                let Some(c) = claimed.unwrap() else {
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
        park.interrupts.push(NewInterrupt { interrupt_id: "i".into(), request: j("{}"), deadline: None });
        park.steps.push(NewStep {
            kind: "AwaitToolApproval".into(),
            payload: j("{}"),
            start: StepStart::OnInterrupt("i".into()),
            only_if_items_after: None,
            session_status: None,
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

/// The victim Worker: claims one step, says `claimed <step_id>`, then heartbeats every third of
/// the lease (`heartbeat <lease_until>`) until it is killed, or until its stdin closes (the
/// parent is gone, so no orphan outlives the bench).
async fn victim(url: &str) {
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        std::process::exit(0);
    });
    let lease_ms: u64 = std::env::var(CHILD_LEASE_ENV).unwrap().parse().unwrap();
    let lease = Duration::from_millis(lease_ms);
    let store = open(url).await.unwrap();
    let claimed = loop {
        if let Some(c) = store.claim("victim", lease).await.unwrap() {
            break c;
        }
        tokio::time::sleep(POLL).await;
    };
    println!("claimed {}", claimed.step.step_id);
    std::io::stdout().flush().unwrap();
    loop {
        tokio::time::sleep(lease / 3).await;
        let until = store.heartbeat(&claimed, lease).await.unwrap();
        println!("heartbeat {until}");
        std::io::stdout().flush().unwrap();
    }
}

/// `n` times: queues one step, lets a [`victim`] (this binary, re-run on the store at `url`)
/// claim it with `lease` and heartbeat once, SIGKILLs it, and times how long a rescuer polling
/// every [`POLL`] takes to claim the step.
async fn reclaim(store: &dyn Store, url: &str, lease: Duration, n: usize) -> Vec<Duration> {
    let session = format!("reclaim{}", lease.as_millis());
    let run_state = j(r#"{"version":1}"#);
    store
        .create_session(NewSession {
            session_id: session.clone(),
            status: "idle".into(),
            run_state,
            agent: None,
            agent_name: None,
        })
        .await
        .unwrap();
    let mut times = Vec::with_capacity(n);
    for rep in 0..n {
        let step_id = store
            .send_user_message(UserMessage {
                session_id: session.clone(),
                client_key: format!("k{rep}"),
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
            .unwrap()
            .step_id
            .expect("the session is idle, so the wake step is queued");
        let mut child = tokio::process::Command::new(std::env::current_exe().unwrap())
            .env(CHILD_ENV, url)
            .env(CHILD_LEASE_ENV, lease.as_millis().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        assert_eq!(lines.next_line().await.unwrap(), Some(format!("claimed {step_id}")));
        let beat = lines.next_line().await.unwrap().unwrap_or_default();
        assert!(beat.starts_with("heartbeat "), "victim said {beat:?}");
        child.start_kill().unwrap(); // SIGKILL on Unix, like `kill -9`
        let killed = Instant::now();
        let rescued = loop {
            if let Some(c) = store.claim("rescuer", LEASE).await.unwrap() {
                break c;
            }
            assert!(killed.elapsed() < lease * 3 + Duration::from_secs(10), "step {step_id} never reclaimed");
            tokio::time::sleep(POLL).await;
        };
        times.push(killed.elapsed());
        assert_eq!((rescued.step.step_id, rescued.step.attempt), (step_id, 2));
        store.commit(&rescued, Commit::finish(Finish::Done(j("null")))).await.unwrap();
        child.wait().await.unwrap();
    }
    times
}

/// One row of the reclaim table.
fn reclaim_row(backend: &str, lease: Duration, mut times: Vec<Duration>) {
    times.sort();
    // Nearest rank: for N <= 100, p99 is the max.
    let pct = |q: f64| times[((q * times.len() as f64).ceil() as usize).clamp(1, times.len()) - 1];
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let (p50, p99) = (pct(0.50), pct(0.99));
    println!(
        "| {backend} | {} s | {} | {:.0} ms | {:.0} ms | {:+.0} ms |",
        lease.as_secs(),
        times.len(),
        ms(p50),
        ms(p99),
        ms(p50) - ms(lease)
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    if let Ok(url) = std::env::var(CHILD_ENV) {
        return victim(&url).await;
    }
    let steps: usize = std::env::var("BENCH_STEPS").ok().and_then(|s| s.parse().ok()).unwrap_or(4000);
    let dir = tempfile::tempdir().unwrap();
    println!(
        "| backend | Workers × steps at once | steps | claim+complete steps/s | vs one commit per write |"
    );
    println!("|---|---|---|---|---|");
    // FULL is the store's mode (a commit survives a power cut); NORMAL is printed for its cost.
    // Each beside the same store committing every write on its own (the store before group
    // commit), run right before it.
    for (mode, synchronous) in [("NORMAL", SqliteSynchronous::Normal), ("FULL", SqliteSynchronous::Full)] {
        // A Worker one step at a time (`--concurrency 1`), one at its default 4, and four of those.
        for (workers, concurrency) in [(1, 1), (1, 4), (4, 4)] {
            let mut single = 0.0;
            for group in [false, true] {
                let path = dir.path().join(format!("bench-{mode}-{workers}x{concurrency}-{group}.db"));
                let store = Arc::new(SqliteStore::open_with(&path, synchronous, group).await.unwrap());
                let rate = run_scoped(store.clone(), workers, concurrency, steps, 0).await;
                let how = match store.group_commits() {
                    // Two writes a step (its claim and its commit), and the seeding's.
                    Some(commits) => {
                        format!("group commit, {:.1} writes a commit", (2 * steps) as f64 / commits as f64)
                    }
                    None => "one commit per write".to_owned(),
                };
                if !group {
                    single = rate;
                }
                println!(
                    "| SQLite (WAL, synchronous={mode}), {how} | {workers} × {concurrency} | {steps} | {rate:.0} | {:.2} |",
                    rate / single
                );
            }
        }
    }
    let cluster = PgCluster::start_or_skip();
    if let Some(cluster) = &cluster {
        for workers in [1, 4] {
            let store = cluster.store(&format!("bench{workers}"), workers as u32 + 1).await;
            let rate = run(Arc::new(store), workers, steps / 2).await;
            println!("| PostgreSQL (synchronous_commit=on) | {workers} × 1 | {} | {rate:.0} | |", steps / 2);
        }
    }
    println!();
    // The Worker's own claim, scoped by agent: one agent against twenty, with 4 Workers.
    println!("| backend | Workers | agents | steps | claim_for+complete steps/s | vs 1 agent |");
    println!("|---|---|---|---|---|---|");
    let mut backends: Vec<(&str, usize)> = vec![("SQLite (synchronous=FULL)", steps)];
    if cluster.is_some() {
        backends.push(("PostgreSQL", steps / 2));
    }
    for (backend, n) in backends {
        let mut one = 0.0;
        for agents in [1, 20] {
            let store: Arc<dyn Store> = match &cluster {
                Some(cluster) if backend == "PostgreSQL" => {
                    Arc::new(cluster.store(&format!("scoped{agents}"), 5).await)
                }
                _ => Arc::new(
                    SqliteStore::open(&dir.path().join(format!("scoped-{agents}.db"))).await.unwrap(),
                ),
            };
            let rate = run_scoped(store, 4, 1, n, agents).await;
            if agents == 1 {
                one = rate;
            }
            println!("| {backend} | 4 | {agents} | {n} | {rate:.0} | {:.2} |", rate / one);
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
    println!();
    let n: usize = std::env::var("BENCH_RECLAIM_N").ok().and_then(|s| s.parse().ok()).unwrap_or(5).max(1);
    let leases = [Duration::from_secs(1), Duration::from_secs(3)];
    println!("| backend | lease | N | p50 SIGKILL-to-reclaim | p99 (max for N <= 100) | p50 - lease |");
    println!("|---|---|---|---|---|---|");
    let path = dir.path().join("reclaim.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let url = format!("sqlite://{}", path.display());
    for lease in leases {
        reclaim_row("SQLite", lease, reclaim(&store, &url, lease, n).await);
    }
    if let Some(cluster) = &cluster {
        let store = cluster.store("reclaim", 2).await;
        let url = format!("{}?options=-c%20search_path%3Dreclaim", cluster.url());
        for lease in leases {
            reclaim_row("PostgreSQL", lease, reclaim(&store, &url, lease, n).await);
        }
    }
    println!(
        "A SIGKILLed Worker's step (it heartbeated just before dying) is claimed again once its lease runs out on the DB clock: reclaim = lease + at most one {}ms poll + one claim, so p50 - lease is what the store adds; a shorter lease rescues sooner but costs one heartbeat write per L/3 per running step.",
        POLL.as_millis()
    );
}
