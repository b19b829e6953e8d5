//! What a fork costs: `Store::fork_session` of a session of 100 and of 10,000 transcript entries
//! (stored as a Worker stores them: a turn's entries with their messages and transcript chunk in
//! one commit, 500 entries a turn), on SQLite and PostgreSQL. Prints, per backend and size, the
//! fork's time (p50 and max of `BENCH_FORKS` forks, default 20, each at the session's last turn),
//! the rows it inserted (counted over every table of the store: the same for 100 and 10,000
//! entries is the goal) and what reading the fork's history through its lineage costs (its
//! transcript in resume form, and its first page of 1,000 items) beside reading the original's.
//!
//! Run: `cargo bench -p tollgate-store --bench fork` (PostgreSQL needs
//! `scripts/install-postgres.sh`; without it that backend's rows are left out, saying so).
//! Goal: a fork of a 10,000-entry session in at most 50 ms on each backend.

use std::time::{Duration, Instant};

use tollgate_store::*;
use tollgate_store_testing::PgCluster;

/// Entries a turn stores in one commit.
const PER_TURN: usize = 500;

/// Every table a fork could write to.
const TABLES: &[&str] = &[
    "sessions",
    "forks",
    "fork_history",
    "audit",
    "items",
    "messages",
    "transcript_chunks",
    "media",
    "events",
    "steps",
    "interrupts",
    "tool_calls",
    "idempotency_keys",
    "live_text",
    "checked_calls",
];

fn j(t: &str) -> Box<serde_json::value::RawValue> {
    raw(t).unwrap()
}

/// A session `id` of `entries` transcript entries over turns of [`PER_TURN`]; returns its last
/// item seq and its number of turns.
async fn seed(store: &dyn Store, id: &str, entries: usize) -> (i64, i64) {
    store
        .create_session(NewSession {
            session_id: id.into(),
            status: "idle".into(),
            run_state: j(r#"{"version":1}"#),
            agent: None,
            agent_name: None,
        })
        .await
        .unwrap();
    let mut turn = 0;
    let mut last = 0;
    for start in (0..entries).step_by(PER_TURN) {
        turn += 1;
        let message = UserMessage {
            session_id: id.into(),
            client_key: format!("k{turn}"),
            item: NewItem {
                kind: "user_prompt".into(),
                uuid: None,
                turn_id: None,
                body: j(r#"{"kind":"user_prompt","text":"go on"}"#),
            },
            wake: Some(NewStep::now("RunModel", j("{}"))),
            events: vec![],
        };
        store.send_user_message(message).await.unwrap();
        let claimed = store.claim("bench", Duration::from_secs(60)).await.unwrap().expect("a due step");
        let n = PER_TURN.min(entries - start);
        let mut commit = Commit::finish(Finish::Done(j("null")));
        let mut lines = Vec::with_capacity(n);
        for i in 0..n {
            let uuid = format!("{id}-e{}", start + i);
            let entry = format!(
                r#"{{"type":"assistant","uuid":"{uuid}","message":{{"id":"m{}","content":[{{"type":"text","text":"entry {i} of a long session, with some text to it"}}]}}}}"#,
                start + i
            );
            lines.push((i, format!("{entry}\n")));
            commit.items.push(NewItem {
                kind: "claude_transcript".into(),
                uuid: Some(uuid),
                turn_id: Some(format!("turn-{turn}")),
                body: j(&format!(r#"{{"kind":"claude_transcript","session_id":"cli","entries":[{entry}]}}"#)),
            });
            if i % 10 == 0 {
                commit.messages.push(NewMessage {
                    item: i,
                    role: "assistant".into(),
                    merge_key: None,
                    text: format!("entry {i}"),
                    images: None,
                });
            }
        }
        commit.transcript = Some(NewTranscriptChunk { cli_session_id: "cli".into(), lines });
        let receipt = store.commit(&claimed, commit).await.unwrap();
        last = receipt.item_seqs.iter().flatten().copied().max().unwrap_or(last);
    }
    (last, turn)
}

/// A count query's future, so both backends' pools fit one closure type.
type Count = std::pin::Pin<Box<dyn std::future::Future<Output = i64> + Send>>;

/// Rows in every table of the store.
async fn rows(count: &impl Fn(String) -> Count) -> i64 {
    let mut total = 0;
    for table in TABLES {
        total += count(format!("SELECT count(*) FROM {table}")).await;
    }
    total
}

struct Figures {
    entries: usize,
    p50: Duration,
    max: Duration,
    rows: i64,
    read_fork: Duration,
    read_original: Duration,
}

async fn measure(
    store: &dyn Store,
    count: &impl Fn(String) -> Count,
    entries: usize,
    forks: usize,
) -> Figures {
    let original = format!("s{entries}");
    let (last, turns) = seed(store, &original, entries).await;
    let mut times = Vec::with_capacity(forks);
    let mut inserted = None;
    for k in 0..forks {
        let before = rows(count).await;
        let fork = NewFork {
            session_id: format!("f{entries}-{k}"),
            parent_id: original.clone(),
            turn: turns,
            through_item_seq: last,
            run_state: j(r#"{"version":1}"#),
            agent: None,
            agent_name: None,
            forked_by: "bench".into(),
            dry: false,
        };
        let started = Instant::now();
        store.fork_session(fork).await.unwrap();
        times.push(started.elapsed());
        let added = rows(count).await - before;
        assert!(
            inserted.is_none_or(|n| n == added),
            "forks of one session inserted {inserted:?} and {added} rows"
        );
        inserted = Some(added);
    }
    times.sort();
    let read = |id: String| async move {
        let started = Instant::now();
        let transcript = store.read_transcript(&id).await.unwrap();
        let items = store.read_items(&id, 0, 1000).await.unwrap();
        assert_eq!(transcript.chunks.len(), turns as usize);
        assert_eq!(items.len(), 1000.min(last as usize));
        started.elapsed()
    };
    Figures {
        entries,
        p50: times[times.len() / 2],
        max: times[times.len() - 1],
        rows: inserted.unwrap_or_default(),
        read_fork: read(format!("f{entries}-0")).await,
        read_original: read(original).await,
    }
}

fn print(backend: &str, figures: &[Figures]) {
    for f in figures {
        let goal = if f.entries == 10_000 {
            if f.max <= Duration::from_millis(50) { "≤ 50 ms: met" } else { "≤ 50 ms: missed" }
        } else {
            ""
        };
        println!(
            "| {backend} | {} | {:.2} ms | {:.2} ms | {} | {:.1} ms | {:.1} ms | {goal} |",
            f.entries,
            f.p50.as_secs_f64() * 1e3,
            f.max.as_secs_f64() * 1e3,
            f.rows,
            f.read_fork.as_secs_f64() * 1e3,
            f.read_original.as_secs_f64() * 1e3,
        );
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let forks: usize = std::env::var("BENCH_FORKS").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
    println!("fork of a session at its last turn, {forks} forks per row\n");
    println!(
        "| backend | entries | fork p50 | fork max | rows inserted | fork's transcript + 1,000 items | the original's | goal |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteStore::open(&dir.path().join("fork.db")).await.unwrap();
    let pool = sqlite.raw_pool().clone();
    let count = move |sql: String| -> Count {
        let pool = pool.clone();
        Box::pin(async move {
            sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql)).fetch_one(&pool).await.unwrap()
        })
    };
    let mut figures = Vec::new();
    for entries in [100, 10_000] {
        figures.push(measure(&sqlite, &count, entries, forks).await);
    }
    print("SQLite (synchronous=FULL)", &figures);
    match PgCluster::start_or_skip() {
        Some(cluster) => {
            let pg = cluster.store("forkbench", 4).await;
            let pool = pg.raw_pool().clone();
            let count = move |sql: String| -> Count {
                let pool = pool.clone();
                Box::pin(async move {
                    sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql)).fetch_one(&pool).await.unwrap()
                })
            };
            let mut figures = Vec::new();
            for entries in [100, 10_000] {
                figures.push(measure(&pg, &count, entries, forks).await);
            }
            print("PostgreSQL", &figures);
        }
        None => println!("(PostgreSQL left out: no binaries; run scripts/install-postgres.sh)"),
    }
}
