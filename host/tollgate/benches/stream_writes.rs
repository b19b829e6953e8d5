//! Write amplification of streamed text: what one segment that streams a reply
//! writes to the store, the way the Worker's `run_model::flush_events` wrote it before and
//! writes it now, measured in the same run on SQLite and PostgreSQL.
//!
//! A segment streams a reply of `chars` characters over `flushes` flushes (one per 200 ms, so
//! `flushes / 5` seconds of streaming), then commits its end: the transcript entry with the text,
//! its message in the projection and `turn_completed` (the same in both). The writes are issued
//! back to back (no 200 ms sleeps): the bench counts and times them.
//!
//! - **before**: each flush a `Keep` commit with one `text_delta` event of the flush's text
//!   (session lock, step fence, event row, seq; the old `flush_events`).
//! - **after**: each flush one fenced `put_live_text` of the text not stored yet (one row,
//!   overwritten; no event); a `text_delta` block event when that reaches 512 bytes and at the end;
//!   the end commit deletes the live row.
//!
//! Columns: write transactions; event rows appended; live-text writes; logical bytes (event
//! payloads, live text, item bodies, message text bound in the writes); what stays stored per
//! segment (event rows and bytes, live rows); physical bytes (PostgreSQL: WAL bytes from
//! `pg_current_wal_lsn`; SQLite: WAL file growth after a truncating checkpoint, a lower bound
//! once it passes the 4 MB auto-checkpoint); and the time of one flush's write (p50/p90/p99
//! over every flush of every segment).
//!
//! Run: `cargo bench -p tollgate --bench stream_writes` (`STREAM_SEGMENTS`, default 3 segments
//! per row; `STREAM_LIVE_BLOCK`, default the Worker's 512, the block bound "after" uses).

use std::time::{Duration, Instant};

use serde_json::json;
use tollgate_store::{Claimed, Commit, Finish, NewEvent, NewItem, NewLiveText, NewMessage, Store, raw};
use tollgate_store_testing::PgCluster;

/// The Worker's bound on unstored text (`run_model::LIVE_BLOCK_BYTES`); `STREAM_LIVE_BLOCK`
/// tries another.
const LIVE_BLOCK_BYTES: usize = 512;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn p(times: &mut [Duration], q: f64) -> f64 {
    times.sort();
    times[((times.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1e3
}

fn median(values: &mut [u64]) -> u64 {
    values.sort_unstable();
    values[values.len() / 2]
}

#[derive(Clone, Copy, PartialEq)]
enum Strategy {
    Before,
    After,
}

/// What one segment wrote.
#[derive(Default)]
struct Written {
    transactions: u64,
    event_rows: u64,
    live_writes: u64,
    logical_bytes: u64,
    stored_event_rows: u64,
    stored_event_bytes: u64,
    live_rows: u64,
    physical_bytes: u64,
}

/// Raw access for the physical measurement.
enum Raw {
    Sqlite { pool: sqlx::SqlitePool, wal: std::path::PathBuf },
    Pg(sqlx::PgPool),
}

impl Raw {
    async fn mark(&self) -> i64 {
        match self {
            Raw::Sqlite { pool, .. } => {
                sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)").execute(pool).await.unwrap();
                0
            }
            Raw::Pg(pool) => {
                sqlx::query_scalar::<_, i64>("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint")
                    .fetch_one(pool)
                    .await
                    .unwrap()
            }
        }
    }

    async fn since(&self, mark: i64) -> u64 {
        match self {
            Raw::Sqlite { wal, .. } => std::fs::metadata(wal).map(|m| m.len()).unwrap_or(0),
            Raw::Pg(_) => (self.mark().await - mark).max(0) as u64,
        }
    }

    async fn live_rows(&self, session: &str) -> u64 {
        let sql = "SELECT count(*) FROM live_text WHERE session_id = $1";
        let n: i64 = match self {
            Raw::Sqlite { pool, .. } => sqlx::query_scalar(sql).bind(session).fetch_one(pool).await.unwrap(),
            Raw::Pg(pool) => sqlx::query_scalar(sql).bind(session).fetch_one(pool).await.unwrap(),
        };
        n as u64
    }
}

/// Words drawn from a few hundred made-up ones by a fixed generator: as little compressible as
/// prose (PostgreSQL compresses a long value before storing it).
fn text_of(chars: usize) -> String {
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut text = String::new();
    while text.len() < chars {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let len = 2 + (seed % 8) as usize;
        for i in 0..len {
            text.push(char::from(b'a' + ((seed >> (8 + 5 * i)) % 26) as u8));
        }
        text.push(if seed.is_multiple_of(11) { '.' } else { ' ' });
    }
    text.truncate(chars);
    text
}

/// The segment's end, the same in both strategies: the transcript entry, its message, the
/// turn's end.
fn end_commit(session: &str, text: &str) -> (Commit, u64) {
    let entry = json!({"type": "assistant", "uuid": format!("{session}-u1"), "sessionId": "cli",
        "message": {"id": "msg_1", "role": "assistant", "content": [{"type": "text", "text": text}]}});
    let body = json!({"kind": "claude_transcript", "session_id": "cli", "entries": [entry]}).to_string();
    let completed = json!({"turn_id": "t1", "attempt": 1}).to_string();
    let bytes = (body.len() + text.len() + completed.len()) as u64;
    let mut done = Commit::finish(Finish::Done(raw("null").unwrap()));
    done.items.push(NewItem {
        kind: "claude_transcript".into(),
        uuid: Some(format!("{session}-u1")),
        turn_id: Some("t1".into()),
        body: raw(body).unwrap(),
    });
    done.messages.push(NewMessage {
        item: 0,
        role: "assistant".into(),
        merge_key: Some("msg_1".into()),
        text: text.to_owned(),
        images: None,
    });
    done.events.push(NewEvent { kind: "turn_completed".into(), payload: raw(completed).unwrap() });
    done.session.status = Some("idle".into());
    (done, bytes)
}

fn event(kind: &str, payload: serde_json::Value) -> (NewEvent, u64) {
    let payload = payload.to_string();
    let bytes = payload.len() as u64;
    (NewEvent { kind: kind.into(), payload: raw(payload).unwrap() }, bytes)
}

async fn segment(
    store: &dyn Store,
    raw_db: &Raw,
    session: &str,
    strategy: Strategy,
    chars: usize,
    flushes: usize,
    times: &mut Vec<Duration>,
) -> Written {
    let block_bytes = env_or("STREAM_LIVE_BLOCK", LIVE_BLOCK_BYTES as u64) as usize;
    tollgate_sessions::writes::start(store, session).await.unwrap();
    tollgate_sessions::writes::send(store, session, "say something long", None).await.unwrap();
    let claimed: Claimed = store.claim("bench", Duration::from_secs(600)).await.unwrap().expect("the step");
    let events_before = store.read_events(session, 0, 10_000).await.unwrap().len() as u64;
    let text = text_of(chars);
    let cuts: Vec<usize> = (1..=flushes).map(|i| i * chars / flushes).collect();
    let mut w = Written::default();
    let mark = raw_db.mark().await;
    let mut from = 0;
    // After: bytes and characters stored as blocks, the first block's seq.
    let (mut stored, mut from_seq) = ((0usize, 0usize), None);
    for to in cuts {
        let start = Instant::now();
        match strategy {
            Strategy::Before => {
                let chunk: String = text.chars().skip(from).take(to - from).collect();
                let (e, bytes) = event("text_delta", json!({"turn_id": "t1", "attempt": 1, "text": chunk}));
                let mut keep = Commit::finish(Finish::Keep);
                keep.events.push(e);
                store.commit(&claimed, keep).await.unwrap();
                w.event_rows += 1;
                w.logical_bytes += bytes;
            }
            Strategy::After => {
                // As `flush_events`: the live row from the committed blocks on, then the block
                // when the unstored text reached the bound.
                let whole: String = text.chars().take(to).collect();
                let live = NewLiveText {
                    turn_id: "t1".into(),
                    attempt: 1,
                    offset: stored.1 as i64,
                    from_seq,
                    text: whole[stored.0..].to_owned(),
                };
                store.put_live_text(&claimed, &live).await.unwrap();
                w.live_writes += 1;
                w.logical_bytes += live.text.len() as u64;
                if whole.len() - stored.0 >= block_bytes {
                    let block = &whole[stored.0..];
                    let (e, bytes) = event(
                        "text_delta",
                        json!({"turn_id": "t1", "attempt": 1, "offset": stored.1, "text": block}),
                    );
                    let mut keep = Commit::finish(Finish::Keep);
                    keep.events.push(e);
                    let receipt = store.commit(&claimed, keep).await.unwrap();
                    from_seq = from_seq.or(receipt.event_seqs.first().copied());
                    stored = (whole.len(), to);
                    w.transactions += 1;
                    w.event_rows += 1;
                    w.logical_bytes += bytes;
                }
            }
        }
        times.push(start.elapsed());
        w.transactions += 1;
        from = to;
    }
    if strategy == Strategy::After && stored.0 < text.len() {
        let (e, bytes) = event(
            "text_delta",
            json!({"turn_id": "t1", "attempt": 1, "offset": stored.1, "text": &text[stored.0..]}),
        );
        let mut keep = Commit::finish(Finish::Keep);
        keep.events.push(e);
        store.commit(&claimed, keep).await.unwrap();
        w.transactions += 1;
        w.event_rows += 1;
        w.logical_bytes += bytes;
    }
    let (done, bytes) = end_commit(session, &text);
    store.commit(&claimed, done).await.unwrap();
    w.transactions += 1;
    w.event_rows += 1;
    w.logical_bytes += bytes;
    w.physical_bytes = raw_db.since(mark).await;
    let stored = store.read_events(session, 0, 10_000).await.unwrap();
    w.stored_event_rows = stored.len() as u64 - events_before;
    w.stored_event_bytes =
        stored.iter().skip(events_before as usize).map(|e| e.payload.get().len() as u64).sum();
    w.live_rows = raw_db.live_rows(session).await;
    w
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let segments = env_or("STREAM_SEGMENTS", 3) as usize;
    let dir = tempfile::Builder::new().prefix("tollgate-stream-").tempdir().unwrap();
    let cluster = PgCluster::start_or_skip();
    let path = dir.path().join("s.db");
    let sqlite = tollgate_store::SqliteStore::open(&path).await.unwrap();
    let sqlite_raw = Raw::Sqlite { pool: sqlite.raw_pool().clone(), wal: dir.path().join("s.db-wal") };
    let mut backends: Vec<(&str, Box<dyn Store>, Raw)> = vec![("SQLite", Box::new(sqlite), sqlite_raw)];
    if let Some(cluster) = &cluster {
        let pg = cluster.store("stream", 8).await;
        let pg_raw = Raw::Pg(pg.raw_pool().clone());
        backends.push(("PostgreSQL", Box::new(pg), pg_raw));
    }
    // (characters, flushes): 2 s, 20 s and 80 s of streaming at 200 ms a flush.
    let scenarios = [(600usize, 10usize), (6_000, 100), (24_000, 400)];
    println!(
        "| backend | reply | strategy | write txns | event rows | live writes | logical bytes | stored events (rows, bytes) | live rows left | physical bytes | flush write p50 | p90 | p99 |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (name, store, raw_db) in &backends {
        for (chars, flushes) in scenarios {
            let mut ratio = Vec::new();
            for strategy in [Strategy::Before, Strategy::After] {
                let label = if strategy == Strategy::Before { "before" } else { "after" };
                let mut times = Vec::new();
                let mut all = Vec::new();
                for i in 0..segments {
                    let session = format!("{label}-{chars}-{i}");
                    all.push(
                        segment(store.as_ref(), raw_db, &session, strategy, chars, flushes, &mut times).await,
                    );
                }
                let m = |f: fn(&Written) -> u64| median(&mut all.iter().map(f).collect::<Vec<_>>());
                let row = (
                    m(|w| w.transactions),
                    m(|w| w.event_rows),
                    m(|w| w.live_writes),
                    m(|w| w.logical_bytes),
                    m(|w| w.stored_event_rows),
                    m(|w| w.stored_event_bytes),
                    m(|w| w.live_rows),
                    m(|w| w.physical_bytes),
                );
                ratio.push(row);
                println!(
                    "| {name} | {chars} chars / {flushes} flushes | {label} | {} | {} | {} | {} | {}, {} | {} | {} | {:.2} ms | {:.2} ms | {:.2} ms |",
                    row.0,
                    row.1,
                    row.2,
                    row.3,
                    row.4,
                    row.5,
                    row.6,
                    row.7,
                    p(&mut times, 0.5),
                    p(&mut times, 0.9),
                    p(&mut times, 0.99),
                );
            }
            let (b, a) = (ratio[0], ratio[1]);
            eprintln!(
                "{name} {chars} chars: stored event rows {:.2}x, stored event bytes {:.2}x, logical bytes {:.2}x, physical bytes {:.2}x (after/before)",
                a.4 as f64 / b.4 as f64,
                a.5 as f64 / b.5 as f64,
                a.3 as f64 / b.3 as f64,
                a.7 as f64 / b.7.max(1) as f64,
            );
        }
    }
}
