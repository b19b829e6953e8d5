//! Costs that should not grow with the conversation: a session snapshot, and the transcript a
//! Worker lays down to resume a session, for one generated session of `SNAPSHOT_ENTRIES`
//! (default 10,000) transcript entries.
//!
//! The entries cycle through a real transcript of the pinned CLI
//! (`host/protocol/tests/data/transcript/defer_resume_allow.jsonl`, 31 entries a turn,
//! ~1.3 KB each: prompts, answers, attachments, bookkeeping), each with a fresh uuid, committed a
//! turn at a time through `tollgate_sessions::convert::commit`'s parts (`messages`, `transcript`) as a
//! Worker commits them. Rows, in one run:
//!
//! - "snapshot": `tollgate_sessions::reads::snapshot`, what `GET /v1/sessions/{id}` and
//!   `tollgate session show` answer, reading the stored projection of the conversation.
//! - "snapshot from the item log (before)": the same answer computed as before the projection
//!   (every item read, `view::messages`): the baseline.
//! - "resume transcript from its chunks": what a Worker does before it starts the CLI for a new
//!   turn: `tollgate_sessions::reads::plan_inputs` (the transcript's chunks in resume form and the few items the
//!   plan reads), `plan_run_model`, `write_resume_file` (the `.jsonl` the CLI resumes from).
//! - "resume transcript from the item log (before)": the same file made as before the chunks
//!   (every item read and parsed, each entry checked): the baseline. Both files are compared.
//!
//! On SQLite, and on a throwaway PostgreSQL when its binaries are installed.
//!
//! Run: `cargo bench -p tollgate --bench snapshot`.

use std::time::{Duration, Instant};

use tollgate_engine::session::turn::{Claims, Plan, PlannedStart, TranscriptSource, plan_run_model};
use tollgate_engine::session::{CallEntry, Limits, RunState, StepInput, view};
use tollgate_sessions::convert;
use tollgate_store::{Commit, Finish, NewItem, Store, raw};
use tollgate_store_testing::PgCluster;

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
    tollgate_sessions::writes::start(store, SESSION).await.unwrap();
    tollgate_sessions::writes::send(store, SESSION, "hello", None).await.unwrap();
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
        commit.transcript = convert::transcript(&items);
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
    let items = tollgate_sessions::reads::read_all_items(store, SESSION).await.unwrap();
    let messages = view::messages(&tollgate_sessions::reads::history(&items), &state);
    let calls = store.tool_calls(SESSION).await.unwrap();
    messages.len() + calls.len()
}

/// The phases of a resume, timed apart.
#[derive(Default)]
struct ResumeTimes {
    read: Vec<Duration>,
    plan: Vec<Duration>,
    write: Vec<Duration>,
    total: Vec<Duration>,
}

/// What a Worker does before starting the CLI for the next turn, reading the transcript in
/// resume form (`chunks`, as `run_model` does) or, as before it existed, from the item log;
/// returns the file's size.
async fn resume_transcript(
    store: &dyn Store,
    step: &StepInput,
    dir: &std::path::Path,
    chunks: bool,
    times: &mut ResumeTimes,
) -> u64 {
    let StepInput::RunModel(step) = step else { unreachable!() };
    let start = Instant::now();
    let session = store.session(SESSION).await.unwrap().unwrap();
    let state = RunState::parse(session.run_state.get()).unwrap();
    let (items, source) = if chunks {
        tollgate_sessions::reads::plan_inputs(store, SESSION).await.unwrap()
    } else {
        (tollgate_sessions::reads::read_all_items(store, SESSION).await.unwrap(), TranscriptSource::Items)
    };
    assert_eq!(chunks, matches!(source, TranscriptSource::Chunks { .. }));
    let read = start.elapsed();
    let calls: Vec<CallEntry> = Vec::new();
    let Plan::Run(run) = plan_run_model(
        step,
        Claims::nth(1),
        &state,
        &tollgate_sessions::reads::history(&items),
        source,
        &calls,
        &Limits::default(),
    )
    .unwrap() else {
        panic!("expected a segment");
    };
    let PlannedStart::NewTurn { session_id, transcript, .. } = run.start else {
        panic!("expected a new turn on the stored transcript");
    };
    // As the Worker's `run_model` does.
    let text = convert::resume_text(transcript);
    let planned = start.elapsed();
    let file = tollgate_claude::launch::write_resume_file(dir, dir, &session_id, &text).unwrap();
    let total = start.elapsed();
    times.read.push(read);
    times.plan.push(planned - read);
    times.write.push(total - planned);
    times.total.push(total);
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
        let snapshot = tollgate_sessions::reads::snapshot(store.as_ref(), SESSION).await.unwrap().unwrap();
        assert_eq!(
            snapshot_from_items(store.as_ref()).await,
            snapshot.messages.len() + snapshot.tool_calls.len()
        );
        tollgate_sessions::writes::send(store.as_ref(), SESSION, "next", None).await.unwrap();
        let claimed = store.claim("bench", Duration::from_secs(600)).await.unwrap().expect("the next turn");
        let step = StepInput::parse(&claimed.step.kind, claimed.step.payload.get()).unwrap();
        let (resume_dir, before_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (mut fresh, mut before) = (Vec::new(), Vec::new());
        let (mut resume, mut resume_before) = (ResumeTimes::default(), ResumeTimes::default());
        let (mut file_size, mut file_before) = (0, 0);
        for _ in 0..rounds {
            let start = Instant::now();
            let snap = tollgate_sessions::reads::snapshot(store.as_ref(), SESSION).await.unwrap().unwrap();
            fresh.push(start.elapsed());
            assert!(!snap.messages.is_empty());
            let start = Instant::now();
            snapshot_from_items(store.as_ref()).await;
            before.push(start.elapsed());
            file_size = resume_transcript(store.as_ref(), &step, resume_dir.path(), true, &mut resume).await;
            file_before =
                resume_transcript(store.as_ref(), &step, before_dir.path(), false, &mut resume_before).await;
        }
        for (what, times) in [
            ("snapshot (stored projection)", &mut fresh),
            ("snapshot from the item log (before)", &mut before),
            ("resume transcript from its chunks (read, plan, write)", &mut resume.total),
            ("  of which: read the chunks and the plan's items", &mut resume.read),
            ("  of which: plan", &mut resume.plan),
            ("  of which: write the resume file", &mut resume.write),
            ("resume transcript from the item log (before)", &mut resume_before.total),
            ("  of which: read every item", &mut resume_before.read),
            ("  of which: plan (entries out of the items)", &mut resume_before.plan),
            ("  of which: write the resume file", &mut resume_before.write),
        ] {
            println!(
                "| {name} | {what} | {entries} | {:.2} ms | {:.2} ms | {:.2} ms |",
                p(times, 0.5),
                p(times, 0.9),
                p(times, 0.99)
            );
        }
        let file = |dir: &tempfile::TempDir| {
            let projects = std::fs::read_dir(dir.path().join("projects")).unwrap().next().unwrap().unwrap();
            std::fs::read(projects.path().join("cli-long.jsonl")).unwrap()
        };
        assert!(file(&resume_dir) == file(&before_dir), "the same resume file either way");
        assert_eq!(file_size, file_before);
        eprintln!(
            "{name}: {entries} entries, {:.1} MB of entries stored, {} messages in the snapshot, resume file {:.1} MB",
            bytes as f64 / 1e6,
            snapshot.messages.len(),
            file_size as f64 / 1e6
        );
    }
}
