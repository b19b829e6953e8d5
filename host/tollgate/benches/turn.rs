//! The refund flow per turn: a read (`lookup_order`), an approval-free idempotent
//! write (`record_credit`, which POSTs to the stand-in payments service) and the model's final
//! answer, through `tollgate serve` (SQLite, the real CLI, the scripted mock model), with the
//! write **inline** (the default) and **deferred** (`inline = false`: the segment ends, a
//! `CallTool` step runs the write, a second CLI resumes), both with no warm CLIs (`--warm-clis 0`),
//! and inline **with the warm CLI pool** (the default `--warm-clis`: the turn runs on the CLI the
//! previous turn's Worker pre-started; its turn is followed by a 1.5 s pause so the next warm
//! CLI's start does not share the machine with the other forms' turns); through the official **TypeScript Agent
//! SDK** (`benches/turn_ts_sdk.mjs`: `query()` with an in-process MCP server offering the same two
//! tools, allowed by a `PreToolUse` hook; the SDK pinned in `tools/ts-sdk`, installed by
//! `scripts/install-ts-sdk.sh`; skipped, saying so, when it is not installed); and a
//! **bare CLI spawn** (the pinned CLI in print mode answering one `say hello` against the same
//! mock: the floor of one process). All run interleaved, round by round, in the same run.
//!
//! Prints one table: CLI processes per turn (the Worker's `segment starting` log lines, less the
//! segments that ran on a warm CLI, plus the warm CLIs it started, over all turns),
//! wall per turn p50/p90 (from `POST /v1/sessions` with the message to the `turn_completed`
//! event on the session's event stream; the SDK's `query()` start to its end; the bare spawn from
//! spawn to exit), the host's own CPU per turn (user + system time of `tollgate serve` or of the
//! Node process, not of the CLIs they start; `/proc/<pid>/stat`) and its peak RSS (`VmHWM`), then
//! the ratios; and what an idle warm CLI costs (its resident memory and the CPU its start took,
//! added up over its process tree: `bwrap`, the box's init and the CLI,
//! read from `/proc` just before the next warm turn).
//!
//! ```sh
//! cargo bench -p tollgate --bench turn --profile dev   # BENCH_N=10 rounds (default), BENCH_WARMUP=1,
//!                                                      # TS_SDK_NODE_MODULES=<dir>/node_modules
//!                                                      # (default tools/ts-sdk/node_modules),
//!                                                      # BENCH_VERBOSE=1: the Workers' `segment ran`
//!                                                      # and warm CLI log lines
//! ```

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader};
use tollgate_mock_model::MockModel;
use tollgate_mock_model::payments::Payments;

use tollgate_testing::{serve, ts_sdk};

const FLOW: &str =
    r#"call lookup_order {"order_id":"7"} && call record_credit {"order_id":"7","amount_cents":300}"#;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// One `tollgate serve` and what its Worker logged: segments started, segments on a warm CLI, warm
/// CLIs started.
struct Server {
    base: String,
    segments: Arc<AtomicUsize>,
    warm_hits: Arc<AtomicUsize>,
    warm_started: Arc<AtomicUsize>,
    child: tokio::process::Child,
}

impl Server {
    fn pid(&self) -> u32 {
        self.child.id().expect("tollgate serve runs")
    }

    /// CLI processes it started: cold segments and warm CLIs.
    fn processes(&self) -> usize {
        self.segments.load(Ordering::Relaxed) - self.warm_hits.load(Ordering::Relaxed)
            + self.warm_started.load(Ordering::Relaxed)
    }

    /// Its child processes (its CLIs, or the `bwrap` of each boxed one), from `/proc`.
    fn children(&self) -> Vec<u32> {
        children_of(self.pid())
    }
}

/// The child processes of `pid`, from `/proc`.
fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
        let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        out.extend(text.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
    }
    out
}

/// `pid` and every process under it: a boxed CLI is `bwrap`, the box's init and the CLI.
fn tree_of(pid: u32) -> Vec<u32> {
    let mut out = vec![pid];
    let mut at = 0;
    while at < out.len() {
        out.extend(children_of(out[at]));
        at += 1;
    }
    out
}

/// Resident memory of process `pid` now, in MB.
fn rss_mb(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|kb| kb.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
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
        let modules = ts_sdk::node_modules()?;
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

    async fn serve(&self, name: &str, inline: bool, warm: bool) -> Server {
        let agent = self.agent(name, inline);
        let db = format!("sqlite://{}", self.dir.path().join(format!("{name}.db")).display());
        let agent = agent.to_str().unwrap();
        let mut args = vec![
            "serve",
            "--agent",
            agent,
            "--db",
            &db,
            "--listen",
            "127.0.0.1:0",
            "--concurrency",
            "1",
            "--insecure-open",
        ];
        if !warm {
            args.extend(["--warm-clis", "0"]);
        }
        let mut child =
            serve::command(&args, &self.cli, &self.mock.base_url(), &self.dir.path().join("cache"))
                .env("PAYMENTS_URL", &self.payments.url)
                .env("RUST_LOG", "info")
                .spawn()
                .expect("start tollgate serve");
        let (base, mut lines) = serve::listening(&mut child, "tollgate serving on ").await;
        let segments = Arc::new(AtomicUsize::new(0));
        let warm_hits = Arc::new(AtomicUsize::new(0));
        let warm_started = Arc::new(AtomicUsize::new(0));
        let counters = [
            ("segment starting", segments.clone()),
            ("segment on a warm CLI", warm_hits.clone()),
            ("warm CLI started", warm_started.clone()),
        ];
        tokio::spawn(async move {
            let verbose = std::env::var_os("BENCH_VERBOSE").is_some();
            while let Ok(Some(line)) = lines.next_line().await {
                if verbose && (line.contains("segment ran") || line.contains("warm CLI")) {
                    eprintln!("{line}");
                }
                for (text, counter) in &counters {
                    if line.contains(text) {
                        counter.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
        Server { base, segments, warm_hits, warm_started, child }
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

/// One turn of the refund flow through `server`: the wall time, from `POST /v1/sessions` with
/// the message to the `turn_completed` event on the session's event stream (opened right after
/// the POST; it replays the session's events from the start), as a client waits for a turn.
async fn turn(client: &reqwest::Client, server: &Server, id: &str) -> Duration {
    let start = Instant::now();
    let response = client
        .post(format!("{}/v1/sessions", server.base))
        .json(&serde_json::json!({"session_id": id, "message": FLOW}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201, "{}", response.text().await.unwrap_or_default());
    let mut stream = client.get(format!("{}/v1/sessions/{id}/events", server.base)).send().await.unwrap();
    assert!(stream.status().is_success(), "{id}: the event stream answered {}", stream.status());
    let mut seen = String::new();
    let took = loop {
        let chunk = tokio::time::timeout(Duration::from_secs(120), stream.chunk())
            .await
            .unwrap_or_else(|_| panic!("{id} did not finish; its events:\n{seen}"))
            .unwrap()
            .unwrap_or_else(|| panic!("{id}'s event stream ended; its events:\n{seen}"));
        seen.push_str(&String::from_utf8_lossy(&chunk));
        let kinds: Vec<&str> =
            seen.lines().filter_map(|line| line.strip_prefix("event:")).map(str::trim).collect();
        assert!(!kinds.contains(&"turn_failed"), "{id} failed: {seen}");
        if kinds.contains(&"turn_completed") {
            break start.elapsed();
        }
    };
    drop(stream);
    let snapshot: serde_json::Value =
        client.get(format!("{}/v1/sessions/{id}", server.base)).send().await.unwrap().json().await.unwrap();
    let answered =
        snapshot["messages"].as_array().and_then(|m| m.last()).is_some_and(|m| m["role"] == "assistant");
    assert!(answered && snapshot["last_turn_error"].is_null(), "{id}: {snapshot}");
    let calls = snapshot["tool_calls"].as_array().map_or(0, Vec::len);
    assert_eq!(calls, 1, "the write is recorded: {snapshot}");
    assert_eq!(snapshot["tool_calls"][0]["status"], "succeeded", "{snapshot}");
    took
}

fn quantile(times: &[Duration], q: f64) -> f64 {
    let mut sorted = times.to_vec();
    sorted.sort();
    sorted[((sorted.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1e3
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    tollgate_api_types::tls::install_crypto_provider();
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
    let inline = world.serve("inline", true, false).await;
    let deferred = world.serve("deferred", false, false).await;
    let warm = world.serve("warm", true, true).await;
    let client = reqwest::Client::new();

    let mut ts = TsSdk::start(&world);

    // Per form (inline, deferred, TS SDK, bare, warm): wall per turn; host CPU per turn (ms).
    let mut walls: [Vec<Duration>; 5] = Default::default();
    let mut cpu: [Vec<f64>; 5] = Default::default();
    // An idle warm CLI just before the turn that takes it: resident MB, CPU its start took (ms).
    let (mut idle_rss, mut idle_cpu) = (Vec::new(), Vec::new());
    let servers: [(usize, &Server); 3] = [(0, &inline), (1, &deferred), (4, &warm)];
    for round in 0..warmup + rounds {
        let measured = round >= warmup;
        for (i, server) in servers {
            if i == 4 && measured {
                for pid in server.children() {
                    let tree = tree_of(pid);
                    idle_rss.push(tree.iter().map(|&p| rss_mb(p)).sum());
                    idle_cpu.push(tree.iter().map(|&p| cpu_ms(p)).sum());
                }
            }
            let before = cpu_ms(server.pid());
            let wall = turn(&client, server, &format!("{i}-{round}")).await;
            if measured {
                walls[i].push(wall);
                cpu[i].push(cpu_ms(server.pid()) - before);
            }
            if i == 4 {
                // Its next warm CLI starts now: let it start before the other forms' turns.
                tokio::time::sleep(Duration::from_millis(1500)).await;
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
    let turns = (warmup + rounds) as f64;

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
    let per_turn = |server: &Server| format!("{:.2}", server.processes() as f64 / turns);
    // (form, CLI processes per turn, host CPU per turn and peak RSS when measured)
    type Row<'a> = (&'a str, String, Option<(f64, f64)>);
    let rows: [Row<'_>; 5] = [
        (
            "Tollgate, write inline (default), `--warm-clis 0`",
            per_turn(&inline),
            Some((mean(&cpu[0]), peak_rss_mb(inline.pid()))),
        ),
        (
            "Tollgate, write deferred (`inline = false`), `--warm-clis 0`",
            per_turn(&deferred),
            Some((mean(&cpu[1]), peak_rss_mb(deferred.pid()))),
        ),
        (
            "TypeScript Agent SDK `query()`",
            "1".into(),
            ts.as_ref().map(|ts| (mean(&cpu[2]), peak_rss_mb(ts.pid()))),
        ),
        ("bare CLI spawn (`-p \"say hello\"`, one model request)", "1".into(), None),
        (
            "Tollgate, warm CLI pool (default `--warm-clis`)",
            per_turn(&warm),
            Some((mean(&cpu[4]), peak_rss_mb(warm.pid()))),
        ),
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
        "\ninline / deferred (p50): {:.2}; inline / bare spawn (p50): {:.2}; warm / inline (p50): {:.2}; \
         warm / bare spawn (p50): {:.2}",
        p50(0) / p50(1),
        p50(0) / p50(3),
        p50(4) / p50(0),
        p50(4) / p50(3)
    );
    if !walls[2].is_empty() {
        println!(
            "inline / TS SDK (p50): {:.2}; deferred / TS SDK (p50): {:.2}; warm / TS SDK (p50): {:.2}",
            p50(0) / p50(2),
            p50(1) / p50(2),
            p50(4) / p50(2)
        );
    }
    let warm_turns = warm.segments.load(Ordering::Relaxed);
    println!(
        "warm form: {} of {warm_turns} segments ran on a warm CLI; {} warm CLIs started",
        warm.warm_hits.load(Ordering::Relaxed),
        warm.warm_started.load(Ordering::Relaxed)
    );
    let median = |values: &mut Vec<f64>| {
        values.sort_by(f64::total_cmp);
        values.get(values.len() / 2).copied().unwrap_or(0.0)
    };
    println!(
        "an idle warm CLI (median of {}): {:.0} MB resident, {:.0} ms of CPU for its start",
        idle_rss.len(),
        median(&mut idle_rss),
        median(&mut idle_cpu)
    );
}
