//! The refund flow per turn (issue 15): a read (`lookup_order`), an approval-free idempotent
//! write (`record_credit`, which POSTs to the stand-in payments service) and the model's final
//! answer, through `tollgate serve` (SQLite, the real CLI, the scripted mock model), with the
//! write **inline** (the default) and **deferred** (`inline = false`: the segment ends, a
//! `CallTool` step runs the write, a second CLI resumes); through the official **TypeScript Agent
//! SDK** (`benches/turn_ts_sdk.mjs`: `query()` with an in-process MCP server offering the same two
//! tools, allowed by a `PreToolUse` hook; skipped when its `node_modules` is missing); and a
//! **bare CLI spawn** (the pinned CLI in print mode answering one `say hello` against the same
//! mock: the floor of one process). All run interleaved, round by round, in the same run.
//!
//! Prints one table: CLI processes per turn (the Worker's `segment starting` log lines per turn),
//! wall per turn p50/p90 (from `POST /v1/sessions` with the message to the snapshot showing the
//! turn's answer, polled every 10 ms; the SDK's `query()` start to its end; the bare spawn from
//! spawn to exit), the host's own CPU per turn (user + system time of `tollgate serve` or of the
//! Node process, not of the CLIs they start; `/proc/<pid>/stat`) and its peak RSS (`VmHWM`), then
//! the ratios.
//!
//! ```sh
//! cargo bench -p tollgate --bench turn --profile dev   # BENCH_N=10 rounds (default), BENCH_WARMUP=1,
//!                                                      # TS_SDK_NODE_MODULES=<dir>/node_modules
//! ```

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader};
use tollgate_mock_model::MockModel;
use tollgate_mock_model::payments::Payments;

const FLOW: &str =
    r#"call lookup_order {"order_id":"7"} && call record_credit {"order_id":"7","amount_cents":300}"#;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// One `tollgate serve` and how many segments its Worker started.
struct Server {
    base: String,
    segments: Arc<AtomicUsize>,
    child: tokio::process::Child,
}

impl Server {
    fn pid(&self) -> u32 {
        self.child.id().expect("tollgate serve runs")
    }
}

/// User + system CPU time of process `pid` itself (not its children), in ms.
fn cpu_ms(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> =
        stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) * 1e3 / per_second
}

/// Peak RSS of process `pid`, in MB.
fn peak_rss_mb(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|kb| kb.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// The TypeScript Agent SDK driver: one Node process, one `run <n>` per turn.
struct TsSdk {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl TsSdk {
    fn start(world: &World) -> Option<TsSdk> {
        let modules = std::env::var("TS_SDK_NODE_MODULES")
            .unwrap_or_else(|_| "/tmp/tollgate-ts-sdk/node_modules".into());
        if !Path::new(&modules).join("@anthropic-ai/claude-agent-sdk").exists() {
            eprintln!("TS SDK skipped: no {modules}/@anthropic-ai/claude-agent-sdk");
            return None;
        }
        let project = world.dir.path().join("ts-project");
        std::fs::create_dir_all(&project).unwrap();
        let mut child = tokio::process::Command::new("node")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/turn_ts_sdk.mjs"))
            .env("TS_SDK_NODE_MODULES", &modules)
            .env("CLAUDE_BIN", &world.cli)
            .env("MOCK_URL", world.mock.base_url())
            .env("PAYMENTS_URL", &world.payments.url)
            .env("PROJECT", &project)
            .env("PROMPT", FLOW)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .ok()?;
        let stdin = child.stdin.take()?;
        let lines = BufReader::new(child.stdout.take()?).lines();
        Some(TsSdk { child, stdin, lines })
    }

    async fn turn(&mut self, round: usize) -> Duration {
        use tokio::io::AsyncWriteExt;
        self.stdin.write_all(format!("run {round}\n").as_bytes()).await.unwrap();
        let line = self.lines.next_line().await.unwrap().expect("the TS SDK driver answered");
        let answer: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(answer["ok"], true, "the TS SDK turn failed: {answer}");
        let result = answer["result"].as_str().unwrap_or_default();
        assert!(result.contains("4200") && result.contains("refund_id"), "the TS SDK turn: {answer}");
        Duration::from_secs_f64(answer["to_end_ms"].as_f64().unwrap() / 1e3)
    }

    fn pid(&self) -> u32 {
        self.child.id().expect("node runs")
    }
}

struct World {
    root: PathBuf,
    cli: PathBuf,
    dir: tempfile::TempDir,
    mock: MockModel,
    payments: Payments,
}

impl World {
    /// An agent directory: the example support agent plus `record_credit`, inline or not.
    fn agent(&self, name: &str, inline: bool) -> PathBuf {
        let agent = self.dir.path().join(name);
        std::fs::create_dir_all(agent.join("tools")).unwrap();
        for (from, to) in [
            (tollgate_test_guests::ORDERS, "tools/orders.wasm"),
            (tollgate_test_guests::PAYMENTS, "tools/payments.wasm"),
            (tollgate_test_guests::LEDGER, "tools/ledger.wasm"),
            (tollgate_test_guests::SUPPORT_FACTORY, "agent.wasm"),
        ] {
            std::fs::copy(from, agent.join(to)).unwrap();
        }
        let config =
            std::fs::read_to_string(self.root.join("examples/agents/support/tollgate.toml")).unwrap();
        let policy = if inline {
            "record_credit = { effect = \"idempotent_write\" }"
        } else {
            "record_credit = { effect = \"idempotent_write\", inline = false }"
        };
        let config = config.replace("create_refund = {", &format!("{policy}\ncreate_refund = {{"))
            + "\n[tools.ledger]\nallowed_outbound_hosts = [\"http://127.0.0.1:*\"]\n\
               config = { PAYMENTS_URL = { env = \"PAYMENTS_URL\" } }\ntimeout_ms = 5000\n";
        std::fs::write(agent.join("tollgate.toml"), config).unwrap();
        agent
    }

    async fn serve(&self, name: &str, inline: bool) -> Server {
        let agent = self.agent(name, inline);
        let db = format!("sqlite://{}", self.dir.path().join(format!("{name}.db")).display());
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(["serve", "--agent"])
            .arg(&agent)
            .args(["--db", &db, "--listen", "127.0.0.1:0", "--concurrency", "1"])
            .env_remove("TOLLGATE_TOKEN")
            .env_remove("TOLLGATE_TOKEN_FILE")
            .env("TOLLGATE_CLAUDE_CLI", &self.cli)
            .env("ANTHROPIC_BASE_URL", self.mock.base_url())
            .env("ANTHROPIC_API_KEY", "dummy")
            .env("HTTPS_PROXY", "http://127.0.0.1:1")
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env("CLAUDE_CODE_MAX_RETRIES", "0")
            .env("PAYMENTS_URL", &self.payments.url)
            .env("TOLLGATE_CACHE_DIR", self.dir.path().join("cache"))
            .env("RUST_LOG", "info")
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start tollgate serve");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let base = loop {
            let line = lines.next_line().await.unwrap().expect("tollgate serve exited before listening");
            if let Some(at) = line.find("tollgate serving on ") {
                let rest = &line[at + "tollgate serving on ".len()..];
                break rest.split_whitespace().next().unwrap().to_owned();
            }
        };
        let segments = Arc::new(AtomicUsize::new(0));
        let counter = segments.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                if line.contains("segment starting") {
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        Server { base, segments, child }
    }

    /// One bare CLI spawn in print mode: `say hello` against the mock, to its exit.
    async fn bare(&self, round: usize) -> Duration {
        let scratch = self.dir.path().join(format!("bare-{round}"));
        let (home, config, work) = (scratch.join("home"), scratch.join("config"), scratch.join("work"));
        for dir in [&home, &config, &work] {
            std::fs::create_dir_all(dir).unwrap();
        }
        let start = Instant::now();
        let output = tokio::process::Command::new(&self.cli)
            .args(["-p", &format!("say hello {round}"), "--output-format", "json"])
            .current_dir(&work)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &home)
            .env("CLAUDE_CONFIG_DIR", &config)
            .env("ANTHROPIC_BASE_URL", self.mock.base_url())
            .env("ANTHROPIC_API_KEY", "dummy")
            .env("HTTPS_PROXY", "http://127.0.0.1:1")
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env("CLAUDE_CODE_MAX_RETRIES", "0")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .stdin(Stdio::null())
            .output()
            .await
            .expect("spawn the CLI");
        let took = start.elapsed();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(stdout.contains("said: hello"), "the bare CLI did not answer: {stdout}");
        took
    }
}

/// One turn of the refund flow through `server`: the wall time and the segments it started.
async fn turn(client: &reqwest::Client, server: &Server, id: &str) -> (Duration, usize) {
    let before = server.segments.load(Ordering::Relaxed);
    let start = Instant::now();
    let response = client
        .post(format!("{}/v1/sessions", server.base))
        .json(&serde_json::json!({"session_id": id, "message": FLOW}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201, "{}", response.text().await.unwrap_or_default());
    loop {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let snapshot: serde_json::Value = client
            .get(format!("{}/v1/sessions/{id}", server.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert!(snapshot["last_turn_error"].is_null(), "{id} failed: {snapshot}");
        let answered =
            snapshot["messages"].as_array().and_then(|m| m.last()).is_some_and(|m| m["role"] == "assistant");
        if snapshot["status"] == "idle" && answered {
            let took = start.elapsed();
            let calls = snapshot["tool_calls"].as_array().map_or(0, Vec::len);
            assert_eq!(calls, 1, "the write is recorded: {snapshot}");
            assert_eq!(snapshot["tool_calls"][0]["status"], "succeeded", "{snapshot}");
            return (took, server.segments.load(Ordering::Relaxed) - before);
        }
        assert!(start.elapsed() < Duration::from_secs(120), "{id} did not finish: {snapshot}");
    }
}

fn quantile(times: &[Duration], q: f64) -> f64 {
    let mut sorted = times.to_vec();
    sorted.sort();
    sorted[((sorted.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1e3
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    tollgate::tls::install_crypto_provider();
    let rounds = env_or("BENCH_N", 10);
    let warmup = env_or("BENCH_WARMUP", 1);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap();
    let cli = root.join(tollgate_claude::cli::PINNED_INSTALL);
    assert!(cli.exists(), "the pinned CLI is not installed at {}; run scripts/setup.sh", cli.display());
    let world = World {
        root,
        cli,
        dir: tempfile::Builder::new().prefix("tollgate-turn-bench-").tempdir().unwrap(),
        mock: MockModel::start().await.unwrap(),
        payments: Payments::start().await.unwrap(),
    };
    let inline = world.serve("inline", true).await;
    let deferred = world.serve("deferred", false).await;
    let client = reqwest::Client::new();

    let mut ts = TsSdk::start(&world);

    // Per form: wall per turn, CLI processes per turn, host CPU per turn (ms).
    let mut walls: [Vec<Duration>; 4] = Default::default();
    let mut processes: [Vec<usize>; 2] = Default::default();
    let mut cpu: [Vec<f64>; 3] = Default::default();
    for round in 0..warmup + rounds {
        let measured = round >= warmup;
        for (i, server) in [&inline, &deferred].into_iter().enumerate() {
            let before = cpu_ms(server.pid());
            let (wall, clis) = turn(&client, server, &format!("{i}-{round}")).await;
            if measured {
                walls[i].push(wall);
                processes[i].push(clis);
                cpu[i].push(cpu_ms(server.pid()) - before);
            }
        }
        if let Some(ts) = ts.as_mut() {
            let before = cpu_ms(ts.pid());
            let wall = ts.turn(round).await;
            if measured {
                walls[2].push(wall);
                cpu[2].push(cpu_ms(ts.pid()) - before);
            }
        }
        let wall = world.bare(round).await;
        if measured {
            walls[3].push(wall);
        }
    }

    println!(
        "\nThe refund flow (a read, an approval-free idempotent write, the answer), {rounds} rounds \
         after {warmup} warm-up, interleaved, {} build; payments requests: {}\n",
        if cfg!(debug_assertions) { "debug" } else { "optimized" },
        world.payments.count()
    );
    println!(
        "| form | CLI processes per turn | wall per turn p50 | p90 | host CPU per turn (mean) | host peak RSS |\n\
         |---|---|---|---|---|---|"
    );
    let mean = |values: &[f64]| values.iter().sum::<f64>() / values.len().max(1) as f64;
    let per_turn = |counts: &[usize]| counts.iter().sum::<usize>() as f64 / counts.len().max(1) as f64;
    // (form, CLI processes per turn, host CPU per turn and peak RSS when measured)
    type Row<'a> = (&'a str, String, Option<(f64, f64)>);
    let rows: [Row<'_>; 4] = [
        (
            "Tollgate, write inline (default)",
            format!("{:.2}", per_turn(&processes[0])),
            Some((mean(&cpu[0]), peak_rss_mb(inline.pid()))),
        ),
        (
            "Tollgate, write deferred (`inline = false`)",
            format!("{:.2}", per_turn(&processes[1])),
            Some((mean(&cpu[1]), peak_rss_mb(deferred.pid()))),
        ),
        (
            "TypeScript Agent SDK `query()`",
            "1".into(),
            ts.as_ref().map(|ts| (mean(&cpu[2]), peak_rss_mb(ts.pid()))),
        ),
        ("bare CLI spawn (`-p \"say hello\"`, one model request)", "1".into(), None),
    ];
    for (i, (form, clis, host)) in rows.iter().enumerate() {
        if walls[i].is_empty() {
            continue;
        }
        let (cpu, rss) = host.map_or(("-".to_owned(), "-".to_owned()), |(cpu, rss)| {
            (format!("{cpu:.0} ms"), format!("{rss:.0} MB"))
        });
        println!(
            "| {form} | {clis} | {:.0} ms | {:.0} ms | {cpu} | {rss} |",
            quantile(&walls[i], 0.5),
            quantile(&walls[i], 0.9)
        );
    }
    let p50 = |i: usize| quantile(&walls[i], 0.5);
    println!(
        "\ninline / deferred (p50): {:.2}; inline / bare spawn (p50): {:.2}",
        p50(0) / p50(1),
        p50(0) / p50(3)
    );
    if !walls[2].is_empty() {
        println!(
            "inline / TS SDK (p50): {:.2}; deferred / TS SDK (p50): {:.2}",
            p50(0) / p50(2),
            p50(1) / p50(2)
        );
    }
}
