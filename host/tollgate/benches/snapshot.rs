//! Costs that should not grow with the conversation: a session snapshot, and the transcript a
//! Worker lays down to resume a session, for one generated session of `SNAPSHOT_ENTRIES`
//! (default 10,000) transcript entries.
//!
//! The entries cycle through a real transcript of the pinned CLI
//! (`host/protocol/tests/data/transcript/defer_resume_allow.jsonl`, 31 entries a turn,
//! ~1.3 KB each: prompts, answers, attachments, bookkeeping), each with a fresh uuid, committed a
//! turn at a time through `tollgate::convert::messages` as a Worker commits them. Rows, in one run:
//!
//! - "snapshot": `tollgate::sessions::snapshot`, what `GET /v1/sessions/{id}` and
//!   `tollgate session show` answer, reading the stored projection of the conversation.
//! - "snapshot from the item log (before)": the same answer computed as before the projection
//!   (every item read, `view::messages`): the baseline.
//! - "resume transcript": what a Worker does before it starts the CLI for a new turn: every item
//!   read, `plan_run_model`, `write_resume_file` (the `.jsonl` the CLI resumes from).
//!
//! On SQLite, and on a throwaway PostgreSQL when its binaries are installed.
//!
//! Run: `cargo bench -p tollgate --bench snapshot`.

use std::time::{Duration, Instant};

use tollgate::{convert, sessions};
use tollgate_engine::session::turn::{Plan, PlannedStart, plan_run_model};
use tollgate_engine::session::{CallEntry, Limits, RunState, StepInput, view};
use tollgate_protocol::TranscriptEntry;
use tollgate_store::testing::PgCluster;
use tollgate_store::{Commit, Finish, NewItem, Store, raw};

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

const TRANSCRIPT: &str = include_str!("../../protocol/tests/data/transcript/defer_resume_allow.jsonl");
const SESSION: &str = "long";

fn p(times: &mut [Duration], q: f64) -> f64 {
    times.sort();
    times[((times.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1e3
}

/// The real transcript's mirrored entries (the CLI never mirrors `api-request*`).
fn turn_entries() -> Vec<serde_json::Value> {
    TRANSCRIPT
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("a transcript line"))
        .filter(|e| !e["type"].as_str().unwrap_or_default().starts_with("api-request"))
        .collect()
}

/// Builds session [`SESSION`] with `entries` transcript entries, a turn per commit; returns the
/// bytes stored.
async fn build(store: &dyn Store, entries: usize) -> usize {
    let template = turn_entries();
    sessions::start(store, SESSION).await.unwrap();
    sessions::send(store, SESSION, "hello", None).await.unwrap();
    let claimed = store.claim("bench", Duration::from_secs(600)).await.unwrap().expect("the wake step");
    let (mut written, mut bytes) = (0, 0);
    while written < entries {
        let mut items = Vec::new();
        for entry in template.iter().take(entries - written) {
            let mut entry = entry.clone();
            let uuid = format!("00000000-0000-4000-8000-{written:012}");
            if entry.get("uuid").is_some() {
                entry["uuid"] = serde_json::Value::String(uuid.clone());
            }
            let text = entry.to_string();
            bytes += text.len();
            let body =
                format!(r#"{{"kind":"claude_transcript","session_id":"cli-long","entries":[{text}]}}"#);
            items.push(NewItem {
                kind: "claude_transcript".into(),
                uuid: entry.get("uuid").map(|_| uuid),
                turn_id: Some(format!("turn-{}", written / template.len() + 1)),
                body: raw(body).unwrap(),
            });
            written += 1;
        }
        let mut commit = Commit::finish(Finish::Keep);
        commit.messages = convert::messages(&items);
        commit.items = items;
        store.commit(&claimed, commit).await.unwrap();
    }
    let state = RunState {
        session_id: Some("cli-long".into()),
        prompts_through: 1,
        turns_ended: (entries / template.len()) as u64,
        ..RunState::default()
    };
    let mut done = Commit::finish(Finish::Done(raw("null").unwrap()));
    done.session.run_state = Some(state.to_raw());
    done.session.status = Some("idle".into());
    store.commit(&claimed, done).await.unwrap();
    bytes
}

/// The snapshot's conversation as it was computed before the projection: the whole item log.
async fn snapshot_from_items(store: &dyn Store) -> usize {
    let session = store.session(SESSION).await.unwrap().unwrap();
    let state = RunState::parse(session.run_state.get()).unwrap();
    let items = sessions::read_all_items(store, SESSION).await.unwrap();
    let messages = view::messages(&sessions::history(&items), &state);
    let calls = store.tool_calls(SESSION).await.unwrap();
    messages.len() + calls.len()
}

/// What a Worker does before starting the CLI for the next turn; returns the file's size.
async fn resume_transcript(store: &dyn Store, step: &StepInput, dir: &std::path::Path) -> u64 {
    let StepInput::RunModel(step) = step else { unreachable!() };
    let session = store.session(SESSION).await.unwrap().unwrap();
    let state = RunState::parse(session.run_state.get()).unwrap();
    let items = sessions::read_all_items(store, SESSION).await.unwrap();
    let calls: Vec<CallEntry> = Vec::new();
    let Plan::Run(run) =
        plan_run_model(step, 1, &state, &sessions::history(&items), &calls, &Limits::default()).unwrap()
    else {
        panic!("expected a segment");
    };
    let PlannedStart::NewTurn { session_id, entries, .. } = &run.start else {
        panic!("expected a new turn on the stored transcript");
    };
    // As the Worker's `run_model` does: each stored entry as the protocol's entry, then the file.
    let entries: Vec<TranscriptEntry> = entries.iter().cloned().map(TranscriptEntry::from).collect();
    let file = tollgate_claude::launch::write_resume_file(dir, dir, session_id, &entries).unwrap();
    std::fs::metadata(file).unwrap().len()
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let entries = env_or("SNAPSHOT_ENTRIES", 10_000) as usize;
    let rounds = env_or("SNAPSHOT_ROUNDS", 50) as usize;
    let dir = tempfile::Builder::new().prefix("tollgate-snapshot-").tempdir().unwrap();
    let cluster = PgCluster::start_or_skip();
    let mut backends = vec![("SQLite".to_owned(), format!("sqlite://{}", dir.path().join("s.db").display()))];
    if let Some(cluster) = &cluster {
        backends.push(("PostgreSQL".to_owned(), cluster.url()));
    }
    println!("| backend | measured | entries | p50 | p90 | p99 |\n|---|---|---|---|---|---|");
    for (name, url) in backends {
        let store = tollgate_store::open(&url).await.unwrap();
        let bytes = build(store.as_ref(), entries).await;
        let snapshot = sessions::snapshot(store.as_ref(), SESSION).await.unwrap().unwrap();
        assert_eq!(
            snapshot_from_items(store.as_ref()).await,
            snapshot.messages.len() + snapshot.tool_calls.len()
        );
        sessions::send(store.as_ref(), SESSION, "next", None).await.unwrap();
        let claimed = store.claim("bench", Duration::from_secs(600)).await.unwrap().expect("the next turn");
        let step = StepInput::parse(&claimed.step.kind, claimed.step.payload.get()).unwrap();
        let resume_dir = tempfile::tempdir().unwrap();
        let (mut fresh, mut before, mut resume) = (Vec::new(), Vec::new(), Vec::new());
        let mut file_size = 0;
        for _ in 0..rounds {
            let start = Instant::now();
            let snap = sessions::snapshot(store.as_ref(), SESSION).await.unwrap().unwrap();
            fresh.push(start.elapsed());
            assert!(!snap.messages.is_empty());
            let start = Instant::now();
            snapshot_from_items(store.as_ref()).await;
            before.push(start.elapsed());
            let start = Instant::now();
            file_size = resume_transcript(store.as_ref(), &step, resume_dir.path()).await;
            resume.push(start.elapsed());
        }
        for (what, times) in [
            ("snapshot (stored projection)", &mut fresh),
            ("snapshot from the item log (before)", &mut before),
            ("resume transcript (read, plan, write)", &mut resume),
        ] {
            println!(
                "| {name} | {what} | {entries} | {:.2} ms | {:.2} ms | {:.2} ms |",
                p(times, 0.5),
                p(times, 0.9),
                p(times, 0.99)
            );
        }
        eprintln!(
            "{name}: {entries} entries, {:.1} MB of entries stored, {} messages in the snapshot, resume file {:.1} MB",
            bytes as f64 / 1e6,
            snapshot.messages.len(),
            file_size as f64 / 1e6
        );
    }
}
