//! The approvals inbox under load: how long an operator waits for the list, for a decision, and
//! for a new approval to appear on an open event stream.
//!
//! Part 1, the inbox API with `APPROVALS_PENDING` (default 1,000) sessions waiting for approval
//! (parked through the state machine's own transitions, no CLI: `tests/support/park.rs`), served
//! by `tollgate api` on SQLite, and on a throwaway PostgreSQL when its binaries are installed:
//! `GET /v1/interrupts` one page of 100, a walk of every page of 100, one page of all 1,000, and
//! `POST …/interrupts/{id}` approving one (each on a different session). Baseline: `GET /healthz`
//! in the same run (the HTTP stack alone).
//!
//! Part 2, an interrupt reaching an open event stream: the real CLI against the scripted mock
//! model defers a refund; the client has the session's event stream open before it sends the
//! message. "Delivery" is the arrival of `interrupt_opened` at the client minus its `created_at`
//! (the commit of the segment's end, on the database clock; the same machine's clock on both
//! backends here), "end to end" is from sending the message (the CLI's start and the model's
//! replies included). Deployments: `tollgate serve` on SQLite (API and Worker in one process),
//! `tollgate api` + `tollgate worker` on PostgreSQL (wake-ups by `LISTEN/NOTIFY`), and the same
//! split on one SQLite file (wake-ups cross processes there by each store's 100 ms watch of
//! `PRAGMA data_version`; before it, the stream's 1 s poll fallback and the Worker's 2 s one set
//! its figures).
//!
//! Run: `cargo bench -p tollgate --bench approvals` (needs the pinned CLI: scripts/setup.sh).
//! `APPROVALS_SAMPLES` (default 15) sets the CLI runs per deployment in part 2.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use serde_json::{Value, json};
use tollgate_mock_model::MockModel;
use tollgate_store_testing::PgCluster;

use tollgate_testing::{agent, park, serve};

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Samples of one measured operation.
struct Row {
    what: String,
    times: Vec<Duration>,
}

impl Row {
    fn new(what: impl Into<String>) -> Self {
        Row { what: what.into(), times: Vec::new() }
    }

    fn line(&self) -> String {
        let mut times = self.times.clone();
        times.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let at = |q: f64| times[((times.len() as f64 - 1.0) * q).round() as usize];
        format!(
            "| {} | {} | {:.2} ms | {:.2} ms | {:.2} ms |\n",
            self.what,
            times.len(),
            ms(at(0.5)),
            ms(at(0.99)),
            ms(*times.last().unwrap())
        )
    }
}

fn table(rows: &[Row]) -> String {
    let mut out = String::from("| measured | samples | p50 | p99 | max |\n|---|---|---|---|---|\n");
    for row in rows.iter().filter(|r| !r.times.is_empty()) {
        out.push_str(&row.line());
    }
    out
}

/// A `tollgate` child process, killed on drop.
struct Child {
    url: String,
    _child: tokio::process::Child,
}

struct Setup {
    root: PathBuf,
    dir: tempfile::TempDir,
    mock: MockModel,
}

impl Setup {
    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let cli = self.root.join(tollgate_claude::cli::PINNED_INSTALL);
        serve::command(args, &cli, &self.mock.base_url(), &self.dir.path().join("cache"))
    }

    fn agent(&self) -> PathBuf {
        self.dir.path().join("agent")
    }

    /// Starts `args` and waits for the line that names its address (`prefix` then the URL).
    async fn listening(&self, args: &[&str], prefix: &str) -> Child {
        let mut child = self.command(args).spawn().expect("start tollgate");
        let (url, mut lines) = serve::listening(&mut child, prefix).await;
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Child { url, _child: child }
    }

    fn worker(&self, db: &str) -> Child {
        let agent = self.agent();
        let child = self
            .command(&["worker", "--agent", agent.to_str().unwrap(), "--db", db])
            .stderr(Stdio::null())
            .spawn()
            .expect("start the worker");
        Child { url: String::new(), _child: child }
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    tollgate_api_types::tls::install_crypto_provider();
    let pending = env_or("APPROVALS_PENDING", 1000) as usize;
    let samples = env_or("APPROVALS_SAMPLES", 15) as usize;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap();
    assert!(
        root.join(tollgate_claude::cli::PINNED_INSTALL).exists(),
        "the pinned CLI is not installed; run scripts/setup.sh"
    );
    let dir = tempfile::Builder::new().prefix("tollgate-approvals-").tempdir().unwrap();
    agent::support_agent(&root, dir.path());
    let setup = Setup { root, dir, mock: MockModel::start().await.unwrap() };
    let http = reqwest::Client::new();
    let cluster = PgCluster::start_or_skip();

    println!("## The inbox with {pending} approvals waiting\n");
    let sqlite = format!("sqlite://{}", setup.dir.path().join("inbox.db").display());
    let mut backends = vec![("SQLite", sqlite)];
    if let Some(cluster) = &cluster {
        backends.push(("PostgreSQL", cluster.url()));
    }
    for (name, db) in &backends {
        let store = tollgate_store::open(db).await.unwrap();
        let seeding = Instant::now();
        for i in 0..pending {
            park::park_on_approval(store.as_ref(), &format!("w{i:04}")).await;
        }
        let seeded = seeding.elapsed();
        let api = setup
            .listening(&["api", "--db", db, "--listen", "127.0.0.1:0", "--insecure-open"], "tollgate API on ")
            .await;
        let rows = inbox_rows(&http, &api.url, pending).await;
        println!("{name} (`tollgate api`; {pending} parked in {:.1} s):\n", seeded.as_secs_f64());
        println!("{}", table(&rows));
    }

    println!("## An interrupt reaching an open event stream\n");
    let mut rows = Vec::new();
    let serve_db = format!("sqlite://{}", setup.dir.path().join("serve.db").display());
    {
        let agent = setup.agent();
        let serve = setup
            .listening(
                &[
                    "serve",
                    "--agent",
                    agent.to_str().unwrap(),
                    "--db",
                    &serve_db,
                    "--listen",
                    "127.0.0.1:0",
                    "--insecure-open",
                ],
                "tollgate serving on ",
            )
            .await;
        rows.extend(stream_rows("serve, SQLite", &http, &serve.url, samples).await);
    }
    // A second cluster: the first one's approved sessions would queue ahead of these.
    if let Some(cluster) = cluster.and_then(|_| PgCluster::start_or_skip()) {
        let db = cluster.url();
        let api = setup
            .listening(
                &["api", "--db", &db, "--listen", "127.0.0.1:0", "--insecure-open"],
                "tollgate API on ",
            )
            .await;
        let _worker = setup.worker(&db);
        rows.extend(stream_rows("api + worker, PostgreSQL", &http, &api.url, samples).await);
    }
    {
        let db = format!("sqlite://{}", setup.dir.path().join("split.db").display());
        let api = setup
            .listening(
                &["api", "--db", &db, "--listen", "127.0.0.1:0", "--insecure-open"],
                "tollgate API on ",
            )
            .await;
        let _worker = setup.worker(&db);
        rows.extend(stream_rows("api + worker, one SQLite file", &http, &api.url, samples).await);
    }
    println!("{}", table(&rows));
}

/// Times the inbox routes of the API at `url`, `pending` approvals waiting.
async fn inbox_rows(http: &reqwest::Client, url: &str, pending: usize) -> Vec<Row> {
    let get = |path: String| {
        let http = http.clone();
        async move {
            let start = Instant::now();
            let response = http.get(path).send().await.unwrap();
            assert!(response.status().is_success(), "{}", response.status());
            let body: Value = response.json().await.unwrap();
            (start.elapsed(), body)
        }
    };
    let mut health = Row::new("`GET /healthz` (baseline)");
    let mut first = Row::new("`GET /v1/interrupts?limit=100` (first page)");
    let mut walk = Row::new(format!("every page of 100, followed by `next_after` ({pending} approvals)"));
    let mut all = Row::new("`GET /v1/interrupts?limit=1000` (one page)");
    let mut decide = Row::new("`POST …/interrupts/{id}` approving one");
    for _ in 0..3 {
        get(format!("{url}/v1/interrupts?limit=100")).await; // warm the connection and the caches
    }
    for _ in 0..200 {
        health.times.push(get(format!("{url}/healthz")).await.0);
        first.times.push(get(format!("{url}/v1/interrupts?limit=100")).await.0);
    }
    for _ in 0..20 {
        let start = Instant::now();
        let (mut listed, mut query) = (0, String::new());
        loop {
            let (_, page) = get(format!("{url}/v1/interrupts?limit=100{query}")).await;
            listed += page["interrupts"].as_array().unwrap().len();
            match page["next_after"].as_str() {
                Some(next) => query = format!("&after={next}"),
                None => break,
            }
        }
        walk.times.push(start.elapsed());
        assert_eq!(listed, pending, "the walk listed every approval once");
        all.times.push(get(format!("{url}/v1/interrupts?limit=1000")).await.0);
    }
    for i in 0..pending.min(300) {
        let session = format!("w{i:04}");
        let start = Instant::now();
        let response = http
            .post(format!("{url}/v1/sessions/{session}/interrupts/toolu_{session}"))
            .json(&json!({"approved": true}))
            .send()
            .await
            .unwrap();
        let took = start.elapsed();
        assert_eq!(response.status(), 200, "{}", response.text().await.unwrap_or_default());
        decide.times.push(took);
    }
    vec![health, first, walk, all, decide]
}

fn now_ms() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64() * 1e3
}

/// Runs `samples` refunds through the API at `url`, each with its event stream open first, and
/// times the `interrupt_opened` event's arrival.
async fn stream_rows(deployment: &str, http: &reqwest::Client, url: &str, samples: usize) -> Vec<Row> {
    let mut delivery = Row::new(format!("{deployment}: commit → stream (delivery)"));
    let mut end_to_end = Row::new(format!("{deployment}: message sent → stream (CLI included)"));
    let tag = deployment.split([',', ' ']).next().unwrap().to_owned() + &format!("{}", now_ms() as u64);
    for i in 0..samples {
        let session = format!("{tag}-{i}");
        let created = http
            .post(format!("{url}/v1/sessions"))
            .json(&json!({"session_id": session}))
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), 201, "{}", created.text().await.unwrap_or_default());
        let stream = http
            .get(format!("{url}/v1/sessions/{session}/events"))
            .header("accept", "text/event-stream")
            .send()
            .await
            .unwrap();
        assert!(stream.status().is_success());
        let (arrived_tx, arrived_rx) = tokio::sync::oneshot::channel::<(f64, Instant, Value)>();
        let reader = tokio::spawn(async move {
            let mut body = stream.bytes_stream();
            let mut buffer = String::new();
            while let Some(Ok(chunk)) = body.next().await {
                buffer.push_str(&String::from_utf8_lossy(&chunk));
                while let Some(end) = buffer.find("\n\n") {
                    let frame: String = buffer.drain(..end + 2).collect();
                    let Some(data) = frame.lines().find_map(|l| l.strip_prefix("data:")) else { continue };
                    let event: Value = serde_json::from_str(data.trim()).unwrap();
                    if event["kind"] == "interrupt_opened" {
                        let _ = arrived_tx.send((now_ms(), Instant::now(), event));
                        return;
                    }
                }
            }
        });
        let sent = Instant::now();
        let message = json!({"text": r#"call create_refund {"order_id":"7","amount_cents":500}"#});
        let response =
            http.post(format!("{url}/v1/sessions/{session}/messages")).json(&message).send().await.unwrap();
        assert!(response.status().is_success(), "{}", response.text().await.unwrap_or_default());
        let (arrived_ms, arrived, event) = tokio::time::timeout(Duration::from_secs(120), arrived_rx)
            .await
            .unwrap_or_else(|_| panic!("{deployment}: no interrupt_opened within 120 s"))
            .expect("the stream ended before the interrupt");
        reader.abort();
        let created_at = event["created_at"].as_i64().expect("created_at") as f64;
        delivery.times.push(Duration::from_secs_f64((arrived_ms - created_at).max(0.0) / 1e3));
        end_to_end.times.push(arrived - sent);
    }
    vec![delivery, end_to_end]
}
