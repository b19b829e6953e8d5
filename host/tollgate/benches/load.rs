//! Load test on loopback: `LOAD_SESSIONS` (default 200) concurrent sessions through the HTTP API of
//! `tollgate serve` against the scripted mock model, each one turn with the real Claude CLI.
//!
//! Prints the API latency (p50, p99, max) of `POST /v1/sessions` (create + first message),
//! `GET /v1/sessions/{id}` (the snapshot, polled until the turn ends) and `GET /v1/interrupts`
//! (the inbox, polled alongside), and sessions completed per minute. Bounded: it stops after
//! `LOAD_TIMEOUT_SECS` (default 900) and reports what finished. The Worker runs
//! `LOAD_CONCURRENCY` (default 4) CLI processes at once; a CLI run costs ~1 s of CPU, so on this
//! machine's 2 cores the CLI, not the API, sets the completion rate. The baseline row is a
//! `GET /healthz` measured in the same run: the cost of the HTTP stack alone.
//!
//! Run: `cargo bench -p tollgate --bench load` (needs the pinned CLI: scripts/setup.sh).

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tollgate_mock_model::MockModel;

use tollgate_testing::{agent as support_agent, serve};

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[derive(Default)]
struct Latencies(Mutex<Vec<(&'static str, Duration)>>);

impl Latencies {
    fn add(&self, route: &'static str, took: Duration) {
        self.0.lock().unwrap().push((route, took));
    }

    fn table(&self) -> String {
        let all = self.0.lock().unwrap();
        let mut out = String::from("| route | requests | p50 | p99 | max |\n|---|---|---|---|---|\n");
        for route in
            ["GET /healthz (baseline)", "POST /v1/sessions", "GET /v1/sessions/{id}", "GET /v1/interrupts"]
        {
            let mut times: Vec<Duration> = all.iter().filter(|(r, _)| *r == route).map(|(_, t)| *t).collect();
            if times.is_empty() {
                continue;
            }
            times.sort();
            let at = |q: f64| times[((times.len() as f64 - 1.0) * q).round() as usize];
            out.push_str(&format!(
                "| {route} | {} | {:.1} ms | {:.1} ms | {:.1} ms |\n",
                times.len(),
                at(0.5).as_secs_f64() * 1e3,
                at(0.99).as_secs_f64() * 1e3,
                times.last().unwrap().as_secs_f64() * 1e3
            ));
        }
        out
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    // reqwest has no TLS provider of its own (see tollgate_api_types::tls).
    tollgate_api_types::tls::install_crypto_provider();
    let sessions = env_or("LOAD_SESSIONS", 200) as usize;
    let timeout = Duration::from_secs(env_or("LOAD_TIMEOUT_SECS", 900));
    let concurrency = env_or("LOAD_CONCURRENCY", 4);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap();
    let cli = root.join(tollgate_claude::cli::PINNED_INSTALL);
    assert!(cli.exists(), "the pinned CLI is not installed at {}; run scripts/setup.sh", cli.display());

    let dir = tempfile::Builder::new().prefix("tollgate-load-").tempdir().unwrap();
    let agent = support_agent::support_agent(&root, dir.path());
    let mock = MockModel::start().await.unwrap();

    let concurrency = concurrency.to_string();
    let args = [
        "serve",
        "--agent",
        agent.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--concurrency",
        &concurrency,
        "--insecure-open",
    ];
    let mut server = serve::command(&args, &cli, &mock.base_url(), &dir.path().join("cache"))
        .spawn()
        .expect("start tollgate serve");
    let (base, mut lines) = serve::listening(&mut server, "tollgate serving on ").await;
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

    let client = reqwest::Client::builder().pool_max_idle_per_host(512).build().unwrap();
    let latencies = Arc::new(Latencies::default());
    for _ in 0..50 {
        let start = Instant::now();
        let response = client.get(format!("{base}/healthz")).send().await.unwrap();
        assert!(response.status().is_success());
        latencies.add("GET /healthz (baseline)", start.elapsed());
    }

    println!(
        "{sessions} sessions through http {base}, Worker concurrency {concurrency}, timeout {timeout:?}"
    );
    let started = Instant::now();
    let done = Arc::new(Mutex::new(Vec::<Duration>::new()));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..sessions {
        let (client, base, latencies, done) = (client.clone(), base.clone(), latencies.clone(), done.clone());
        tasks.spawn(async move {
            let id = format!("load-{i}");
            let began = Instant::now();
            let start = Instant::now();
            let response = client
                .post(format!("{base}/v1/sessions"))
                .json(&serde_json::json!({"session_id": id, "message": format!("say hello {i}")}))
                .send()
                .await
                .unwrap();
            latencies.add("POST /v1/sessions", start.elapsed());
            assert_eq!(response.status(), 201, "{}", response.text().await.unwrap_or_default());
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let start = Instant::now();
                let snapshot: serde_json::Value = client
                    .get(format!("{base}/v1/sessions/{id}"))
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                latencies.add("GET /v1/sessions/{id}", start.elapsed());
                if i % 10 == 0 {
                    let start = Instant::now();
                    let _ = client
                        .get(format!("{base}/v1/interrupts?status=pending"))
                        .send()
                        .await
                        .unwrap()
                        .bytes()
                        .await;
                    latencies.add("GET /v1/interrupts", start.elapsed());
                }
                let answered = snapshot["messages"]
                    .as_array()
                    .and_then(|m| m.last())
                    .is_some_and(|m| m["role"] == "assistant");
                if snapshot["status"] == "idle" && (answered || !snapshot["last_turn_error"].is_null()) {
                    assert!(snapshot["last_turn_error"].is_null(), "{id} failed: {snapshot}");
                    done.lock().unwrap().push(began.elapsed());
                    return;
                }
            }
        });
    }
    let finished_in_time = tokio::time::timeout(timeout, async {
        while let Some(result) = tasks.join_next().await {
            result.expect("a session task panicked");
        }
    })
    .await
    .is_ok();
    let elapsed = started.elapsed();
    let completed = done.lock().unwrap().len();
    tasks.abort_all();
    let _ = server.kill().await;

    println!("\n{}", latencies.table());
    println!(
        "| sessions | completed | wall time | sessions completed per minute | model requests |\n|---|---|---|---|---|\n| {sessions} | {completed} | {:.1} s | {:.1} | {} |",
        elapsed.as_secs_f64(),
        completed as f64 / elapsed.as_secs_f64() * 60.0,
        mock.message_requests().len()
    );
    if !finished_in_time {
        println!("\nstopped after {timeout:?}: {} sessions had not finished", sessions - completed);
    }
}
