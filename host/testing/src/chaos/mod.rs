//! The chaos soak, shared by `benches/chaos.rs` (the full run) and the
//! `durable` test `chaos` (the small form).
//!
//! [`run`] is the type-to-read-first's function: it starts the world, drives the faults, approves,
//! stops everything, collects what happened and hands it to [`check::check`].
//!
//! - **World.** One throwaway PostgreSQL ([`PgCluster`]); the scripted mock model; the stand-in
//!   payments service; an agent with `lookup_order` (read, inline), `record_credit` (an
//!   approval-free idempotent write: the `ledger` test guest) and `create_refund` (a
//!   non-idempotent write with approval); one `tollgate api` and [`Config::workers`] `tollgate
//!   worker` child processes of the real binary, each running the real CLI. Loopback only.
//! - **Sessions.** Session `chaos-<i>` sends the plain prompt `Chaos order <i>`, a mock scenario for
//!   `call lookup_order … && call record_credit … && call create_refund …`: a read, an
//!   approval-free idempotent write, then an approved non-idempotent write (the gate defers the
//!   credit, refuses the refund "call it again by itself", and the mock calls it again alone).
//!   A client loop creates the sessions, polls their snapshots and approves every pending
//!   interrupt, all through the HTTP API, retrying what fails while faults happen.
//! - **Faults.** SIGKILL a random Worker every 3–8 s and start it again (at most
//!   [`Config::max_kills`]); once 20 % of the sessions ended, SIGSTOP one Worker for the lease + 3 s,
//!   then SIGCONT; at 40 %, `pg_ctl restart -m fast`; at 60 %, `pg_terminate_backend` on every
//!   connection of the API (its connections carry `application_name=chaos-api`). A Worker or API
//!   that exits on its own is started again and reported.
//! - **End.** When every session ended, or at [`Config::timeout`] (the run fails with a message),
//!   the Workers and the API get SIGTERM (SIGKILL after 15 s), the CLIs still alive are listed
//!   (and killed), and the checker reads the store by SQL, the payments log, and the claims the
//!   Workers logged (`claimed step=… attempt=…`, at debug level).
//!
//! # Caveats
//!
//! - A run uses the whole machine: each CLI segment costs ~1 s of CPU and ~240 MB.
//! - The seed ([`Config::seed`], printed) chooses the kill times and victims; the machine's speed
//!   decides the rest, so a run is not replayed exactly.

pub mod check;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use sqlx::Row;
use tollgate_api_types::client::{ApiClient, CallError};
use tollgate_mock_model::MockModel;
use tollgate_mock_model::payments::Payments;
use tollgate_store_testing::PgCluster;

use self::check::{
    CallRow, Claim, EventRow, InterruptRow, Observed, Payment, ProcessNote, SessionRow, StepRow, Verdict,
};

/// How a soak runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// Sessions, each one turn of three tool calls.
    pub sessions: usize,
    /// Worker processes.
    pub workers: usize,
    /// Steps (CLIs) at once per Worker.
    pub concurrency: usize,
    /// At most this many SIGKILLs (`None`: until the sessions ended).
    pub max_kills: Option<usize>,
    /// A Worker is killed after a random wait in this range.
    pub kill_every: (Duration, Duration),
    /// The Workers' lease and heartbeat.
    pub lease: Duration,
    /// How often a Worker renews its lease.
    pub heartbeat: Duration,
    /// The run fails if the sessions have not all ended by then.
    pub timeout: Duration,
    /// Chooses kill times and victims.
    pub seed: u64,
}

impl Config {
    /// The full soak: `sessions` sessions, kills until they ended, 30 minutes at most.
    pub fn full(sessions: usize) -> Self {
        Config {
            sessions,
            workers: 3,
            concurrency: 2,
            max_kills: None,
            kill_every: (Duration::from_secs(3), Duration::from_secs(8)),
            lease: Duration::from_secs(5),
            heartbeat: Duration::from_secs(1),
            timeout: Duration::from_secs(1800),
            seed: SystemTime::now().duration_since(UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64),
        }
    }

    /// The test suite's form: 20 sessions, 3 kills; ~2.5 minutes on a busy 2-core machine, failed
    /// after 5.
    pub fn small() -> Self {
        Config { sessions: 20, max_kills: Some(3), timeout: Duration::from_secs(300), ..Config::full(20) }
    }
}

/// What a run did and what the checker found.
#[derive(Debug, Default)]
pub struct Report {
    /// The seed that chose the kill times and victims.
    pub seed: u64,
    /// Sessions started.
    pub sessions: usize,
    /// Workers SIGKILLed.
    pub kills: usize,
    /// Workers SIGSTOPped past their lease.
    pub stops: usize,
    /// PostgreSQL restarts.
    pub pg_restarts: usize,
    /// API connections closed by `pg_terminate_backend`.
    pub api_connections_closed: usize,
    /// Worker or API restarts after an exit the driver did not cause.
    pub unexpected_restarts: usize,
    /// Interrupts the client approved.
    pub approvals: usize,
    /// CLIs seen alive while their Worker was gone (during the run; the end is `cli-left`).
    pub orphan_clis_seen: usize,
    /// From start to the checker's verdict.
    pub duration: Duration,
    /// What the checker found.
    pub verdict: Verdict,
    /// Set when the run did not finish in time, or a fault could not be applied.
    pub failure: Option<String>,
    /// Where the logs are (kept when the run failed).
    pub logs: Option<PathBuf>,
}

impl Report {
    /// The violations, and the run's own failure.
    pub fn ok(&self) -> bool {
        self.verdict.violations.is_empty() && self.failure.is_none()
    }

    /// The table the issue asks for, then each violation.
    pub fn table(&self) -> String {
        let v = &self.verdict;
        let mut out = String::new();
        out.push_str("| kills | stops | PG restarts | API conns closed | sessions | completed | failed | duration | violations |\n");
        out.push_str("|---|---|---|---|---|---|---|---|---|\n");
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {:.1} s | {} |",
            self.kills,
            self.stops,
            self.pg_restarts,
            self.api_connections_closed,
            self.sessions,
            v.completed,
            v.failed,
            self.duration.as_secs_f64(),
            v.violations.len()
        );
        let _ = writeln!(
            out,
            "\nseed {}; approvals {}; unexpected exits restarted {}; orphan CLIs seen during the run {}; outcome_unknown {:?}; \
             checked {} events, {} claims, {} payments, {} call records",
            self.seed,
            self.approvals,
            self.unexpected_restarts,
            self.orphan_clis_seen,
            v.outcome_unknown,
            v.evidence.0,
            v.evidence.1,
            v.evidence.2,
            v.evidence.3
        );
        for (why, count) in &v.failures {
            let _ = writeln!(out, "failed turns ({count}): {why}");
        }
        if let Some(failure) = &self.failure {
            let _ = writeln!(out, "\nRUN FAILED: {failure}");
        }
        let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
        for violation in &v.violations {
            *by_kind.entry(violation.invariant).or_default() += 1;
        }
        if !v.violations.is_empty() {
            let _ = writeln!(out, "\nviolations by invariant: {by_kind:?}");
            for violation in &v.violations {
                let _ = writeln!(out, "- {violation}");
            }
        }
        if let Some(logs) = &self.logs {
            let _ = writeln!(out, "\nlogs kept in {}", logs.display());
        }
        out
    }
}

/// The agent's configuration: the example's, plus `record_credit` and the ledger's grants.
const EXTRA_CONFIG: &str = r#"
[tools.ledger]
allowed_outbound_hosts = ["http://127.0.0.1:*"]
config = { PAYMENTS_URL = { env = "PAYMENTS_URL" } }
timeout_ms = 5000
"#;

/// The script session `i`'s prompt stands for.
pub fn script(i: usize) -> String {
    let order = i % 99 + 1;
    format!(
        r#"call lookup_order {{"order_id":"{order}"}} && call record_credit {{"order_id":"{order}","amount_cents":{credit}}} && call create_refund {{"order_id":"{order}","amount_cents":{refund},"reason":"chaos"}}"#,
        credit = 100 + i,
        refund = 1000 + i
    )
}

/// A small deterministic generator (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn between(&mut self, (lo, hi): (Duration, Duration)) -> Duration {
        let span = hi.saturating_sub(lo).as_millis() as u64;
        lo + Duration::from_millis(if span == 0 { 0 } else { self.next() % span })
    }
}

/// A `tollgate` child process.
struct Proc {
    name: String,
    child: tokio::process::Child,
    pid: i32,
    stopped: bool,
}

impl Proc {
    fn signal(&self, signal: i32) {
        // SAFETY: a signal to our own child's pid (it is not reaped until we wait on it).
        unsafe { libc::kill(self.pid, signal) };
    }
}

/// The world of one run.
struct World {
    /// The run's directory (the agent, the logs, the Workers' state).
    dir: PathBuf,
    agent: PathBuf,
    cli: PathBuf,
    cli_exe: PathBuf,
    cluster: Arc<PgCluster>,
    mock: MockModel,
    payments: Payments,
    api_port: u16,
    spawned: AtomicUsize,
}

impl World {
    fn db(&self, application: &str) -> String {
        format!("{}?application_name={application}", self.cluster.url())
    }

    fn command(&self) -> tokio::process::Command {
        let mut command =
            tollgate_command(&self.cli, &self.mock.base_url(), &self.payments.url, &self.dir.join("private"));
        command
            .env_remove("TOLLGATE_DB")
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "info,tollgate_worker::worker=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .kill_on_drop(true);
        command
    }

    fn log(&self, name: &str) -> std::fs::File {
        let n = self.spawned.fetch_add(1, Ordering::Relaxed);
        std::fs::File::create(self.dir.join(format!("{n:04}-{name}.log"))).expect("a log file")
    }

    fn spawn_worker(&self, slot: usize, cfg: &Config) -> Proc {
        let n = self.spawned.load(Ordering::Relaxed);
        let name = format!("w{slot}.{n}");
        let child = self
            .command()
            .args(["worker", "--agent"])
            .arg(&self.agent)
            .args(["--db", &self.db("chaos-worker"), "--worker-id", &name, "--poll-secs", "0.5"])
            .args(["--lease-secs", &cfg.lease.as_secs_f64().to_string()])
            .args(["--heartbeat-secs", &cfg.heartbeat.as_secs_f64().to_string()])
            .args(["--concurrency", &cfg.concurrency.to_string()])
            .stderr(self.log(&name))
            .spawn()
            .expect("start a Worker");
        let pid = i32::try_from(child.id().expect("a fresh child has a pid")).expect("pid");
        Proc { name, child, pid, stopped: false }
    }

    fn spawn_api(&self) -> Proc {
        let child = self
            .command()
            .args(["api", "--db", &self.db("chaos-api"), "--listen", &format!("127.0.0.1:{}", self.api_port)])
            .arg("--insecure-open")
            .stderr(self.log("api"))
            .spawn()
            .expect("start the API");
        let pid = i32::try_from(child.id().expect("a fresh child has a pid")).expect("pid");
        Proc { name: "api".into(), child, pid, stopped: false }
    }
}

impl Drop for World {
    /// CLIs of this run that outlived their Worker die with the run, also when it is cut short.
    fn drop(&mut self) {
        kill_our_clis(self);
    }
}

/// Runs one soak on `cluster` with the CLI at `cli`, and returns its report (check
/// [`Report::ok`]).
/// The `tollgate` binary with the tests' environment: the pinned CLI `cli`, the mock model at
/// `model_url` (with a dummy key), a refused outbound proxy for everything else, the payments
/// service at `payments_url`, the suite's compiled components ([`crate::component_cache`]), its
/// state under `private_dir` and the sessions' workspaces beside it, and none of a developer's own
/// `TOLLGATE_*` token, listen or TLS settings. Shared with the durable tests' `World`.
pub fn tollgate_command(
    cli: &Path,
    model_url: &str,
    payments_url: &str,
    private_dir: &Path,
) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(crate::tollgate_binary());
    for name in [
        "TOLLGATE_TOKEN",
        "TOLLGATE_TOKEN_FILE",
        "TOLLGATE_LISTEN",
        "TOLLGATE_TLS_CERT",
        "TOLLGATE_TLS_KEY",
        "TOLLGATE_CA_CERT",
    ] {
        command.env_remove(name);
    }
    command
        .env("TOLLGATE_CLAUDE_CLI", cli)
        .env("ANTHROPIC_BASE_URL", model_url)
        .env("ANTHROPIC_API_KEY", "dummy")
        .env("HTTPS_PROXY", "http://127.0.0.1:1")
        .env("HTTP_PROXY", "http://127.0.0.1:1")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("CLAUDE_CODE_MAX_RETRIES", "0")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("PAYMENTS_URL", payments_url)
        .env("TOLLGATE_CACHE_DIR", crate::component_cache())
        // A server's own token file and the client's lookup of it stay in the test's folder, and
        // so do the sessions' workspaces (a flag wins), never the shared `/tmp` default.
        .env("XDG_STATE_HOME", private_dir.join("state"))
        .env("TOLLGATE_WORKSPACE_ROOT", private_dir.parent().unwrap_or(private_dir).join("workspaces"));
    command
}

/// Runs the soak `cfg` describes with the CLI at `cli` on `cluster`, and checks what happened.
pub async fn run(cfg: &Config, cli: &Path, cluster: PgCluster) -> Report {
    let started = Instant::now();
    let dir = tempfile::Builder::new().prefix("tollgate-chaos-").tempdir().expect("temp dir");
    let agent = dir.path().join("agent");
    std::fs::create_dir_all(agent.join("tools")).expect("agent dir");
    for (from, to) in [
        (tollgate_test_guests::ORDERS, "tools/orders.wasm"),
        (tollgate_test_guests::PAYMENTS, "tools/payments.wasm"),
        (tollgate_test_guests::LEDGER, "tools/ledger.wasm"),
        (tollgate_test_guests::SUPPORT_FACTORY, "agent.wasm"),
    ] {
        std::fs::copy(from, agent.join(to)).expect("copy a component");
    }
    let root = crate::root();
    let config = std::fs::read_to_string(root.join("examples/agents/support/tollgate.toml")).expect("config");
    let config = config
        // The soak checks the deferred CallTool step's claims and fences: `inline = false`.
        .replace(
            "create_refund = {",
            "record_credit = { effect = \"idempotent_write\", inline = false }\ncreate_refund = {",
        )
        + EXTRA_CONFIG;
    assert!(config.contains("record_credit"), "the example's policies moved; fix the chaos agent's config");
    std::fs::write(agent.join("tollgate.toml"), config).expect("write config");

    let mock = MockModel::start().await.expect("start the mock model");
    for i in 0..cfg.sessions {
        mock.add_scenario(format!("Chaos order {i}"), script(i));
    }
    let payments = Payments::start().await.expect("start payments");
    let api_port =
        std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a port").port();
    let cli_exe = std::fs::canonicalize(cli).unwrap_or_else(|_| cli.to_owned());
    let world = Arc::new(World {
        dir: dir.path().to_owned(),
        agent,
        cli: cli.to_owned(),
        cli_exe,
        cluster: Arc::new(cluster),
        mock,
        payments,
        api_port,
        spawned: AtomicUsize::new(0),
    });
    let mut report = Report { seed: cfg.seed, sessions: cfg.sessions, ..Report::default() };
    println!(
        "chaos: {} sessions, {} Workers × {}, lease {:?}, seed {}, timeout {:?}, logs in {}",
        cfg.sessions,
        cfg.workers,
        cfg.concurrency,
        cfg.lease,
        cfg.seed,
        cfg.timeout,
        world.dir.display()
    );

    let mut api = world.spawn_api();
    let mut workers: Vec<Proc> = (0..cfg.workers).map(|slot| world.spawn_worker(slot, cfg)).collect();
    let base = format!("http://127.0.0.1:{api_port}");
    let client = ApiClient::new(&base, None).expect("client");
    let ended = Arc::new(AtomicUsize::new(0));
    let approvals = Arc::new(AtomicUsize::new(0));
    let client_errors = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let deadline = started + cfg.timeout;

    // The client: one task per session, one approver.
    let mut tasks = tokio::task::JoinSet::new();
    let poll = Duration::from_millis((cfg.sessions as u64 * 25).clamp(1000, 5000));
    for i in 0..cfg.sessions {
        let (client, ended, errors) = (client.clone(), ended.clone(), client_errors.clone());
        tasks.spawn(async move {
            let id = format!("chaos-{i}");
            let prompt = format!("Chaos order {i}");
            // Spread the starts a little so the first claims do not all collide.
            tokio::time::sleep(Duration::from_millis(i as u64 * 20)).await;
            if let Err(e) = retry(deadline, || client.create_session(Some(&id), None)).await {
                errors.lock().unwrap().push(format!("{id}: create: {e}"));
                return;
            }
            if let Err(e) = retry(deadline, || client.send_message(&id, &prompt, Some("chaos-1"))).await {
                errors.lock().unwrap().push(format!("{id}: send: {e}"));
                return;
            }
            loop {
                tokio::time::sleep(poll).await;
                match retry(deadline, || client.snapshot(&id)).await {
                    Ok(s) => {
                        let answered = s.messages.last().is_some_and(|m| m.role == "assistant" && !m.pending);
                        if s.status == "idle" && (answered || s.last_turn_error.is_some()) {
                            ended.fetch_add(1, Ordering::Relaxed);
                            return;
                        }
                    }
                    Err(e) => {
                        errors.lock().unwrap().push(format!("{id}: snapshot: {e}"));
                        return;
                    }
                }
            }
        });
    }
    let approver = {
        let (client, approvals) = (client.clone(), approvals.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let Ok(Ok(pending)) =
                    tokio::time::timeout(Duration::from_secs(30), client.pending_interrupts()).await
                else {
                    continue;
                };
                for p in pending {
                    // A repeat (the listing lagged, or an answer was lost) is a replay.
                    if let Ok(Ok(receipt)) = tokio::time::timeout(
                        Duration::from_secs(30),
                        client.decide(&p.session_id, &p.interrupt_id, true, None),
                    )
                    .await
                        && !receipt.replayed
                    {
                        approvals.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        })
    };

    // The driver.
    let mut rng = Rng(cfg.seed);
    let mut next_kill = Instant::now() + rng.between(cfg.kill_every);
    let mut thaw_at: Option<Instant> = None;
    let mut restart: Option<tokio::task::JoinHandle<Result<(), String>>> = None;
    let (mut stop_done, mut pg_done, mut cut_done) = (false, false, false);
    let mut orphans: BTreeSet<u32> = BTreeSet::new();
    let mut unexpected: Vec<ProcessNote> = Vec::new();
    let mut last_scan = Instant::now();
    let mut last_progress = (0, Instant::now());
    let total = cfg.sessions.max(1);
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let done = ended.load(Ordering::Relaxed);
        if done != last_progress.0 {
            last_progress = (done, Instant::now());
        }
        if tasks.is_empty() || Instant::now() >= deadline {
            break;
        }
        while tasks.try_join_next().is_some() {}
        let progress = done * 100 / total;
        let now = Instant::now();
        // Processes that exited on their own: note, and start again.
        for (slot, worker) in workers.iter_mut().enumerate() {
            if let Ok(Some(status)) = worker.child.try_wait() {
                unexpected.push(ProcessNote {
                    what: format!(
                        "Worker {} exited by itself ({status}) at {:.1} s; log {}",
                        worker.name,
                        started.elapsed().as_secs_f64(),
                        last_lines(&world, &worker.name)
                    ),
                });
                report.unexpected_restarts += 1;
                *worker = world.spawn_worker(slot, cfg);
            }
        }
        if let Ok(Some(status)) = api.child.try_wait() {
            unexpected.push(ProcessNote {
                what: format!(
                    "the API exited by itself ({status}) at {:.1} s; log {}",
                    started.elapsed().as_secs_f64(),
                    last_lines(&world, "api")
                ),
            });
            report.unexpected_restarts += 1;
            api = world.spawn_api();
        }
        // SIGKILL a random Worker (not the stopped one) and start it again.
        if now >= next_kill && cfg.max_kills.is_none_or(|max| report.kills < max) {
            let candidates: Vec<usize> = (0..workers.len()).filter(|s| !workers[*s].stopped).collect();
            if !candidates.is_empty() {
                let slot = candidates[rng.below(candidates.len())];
                workers[slot].signal(libc::SIGKILL);
                let _ = workers[slot].child.wait().await;
                report.kills += 1;
                println!(
                    "chaos: {:6.1} s  SIGKILL {} ({done}/{} ended)",
                    started.elapsed().as_secs_f64(),
                    workers[slot].name,
                    cfg.sessions
                );
                workers[slot] = world.spawn_worker(slot, cfg);
            }
            next_kill = now + rng.between(cfg.kill_every);
        }
        // SIGSTOP one Worker past its lease, once.
        if !stop_done && progress >= 20 {
            let slot = rng.below(workers.len());
            workers[slot].signal(libc::SIGSTOP);
            workers[slot].stopped = true;
            thaw_at = Some(now + cfg.lease + Duration::from_secs(3));
            stop_done = true;
            report.stops += 1;
            println!("chaos: {:6.1} s  SIGSTOP {}", started.elapsed().as_secs_f64(), workers[slot].name);
        }
        if thaw_at.is_some_and(|at| now >= at) {
            for w in workers.iter_mut().filter(|w| w.stopped) {
                w.signal(libc::SIGCONT);
                w.stopped = false;
                println!("chaos: {:6.1} s  SIGCONT {}", started.elapsed().as_secs_f64(), w.name);
            }
            thaw_at = None;
        }
        // Restart PostgreSQL, once.
        if !pg_done && progress >= 40 {
            pg_done = true;
            println!("chaos: {:6.1} s  pg_ctl restart -m fast", started.elapsed().as_secs_f64());
            let cluster = world.cluster.clone();
            restart = Some(tokio::task::spawn_blocking(move || cluster.restart().map_err(|e| e.to_string())));
        }
        if let Some(handle) = restart.take_if(|h| h.is_finished()) {
            match handle.await {
                Ok(Ok(())) => {
                    report.pg_restarts += 1;
                    println!("chaos: {:6.1} s  PostgreSQL is back", started.elapsed().as_secs_f64());
                }
                Ok(Err(e)) => report.failure = Some(format!("could not restart PostgreSQL: {e}")),
                Err(e) => report.failure = Some(format!("the restart task failed: {e}")),
            }
        }
        // Close the API's database connections, once (after the restart, when it has some).
        if !cut_done && progress >= 60 && restart.is_none() {
            match close_api_connections(&world).await {
                Ok(0) => {} // none open at this instant: try again at the next tick
                Ok(n) => {
                    cut_done = true;
                    report.api_connections_closed = n;
                    println!(
                        "chaos: {:6.1} s  closed {n} API database connection(s)",
                        started.elapsed().as_secs_f64()
                    );
                }
                Err(e) => println!("chaos: closing the API's connections failed ({e}); trying again"),
            }
        }
        // CLIs whose Worker is gone.
        if now.duration_since(last_scan) >= Duration::from_secs(2) {
            last_scan = now;
            let alive: BTreeSet<u32> = workers.iter().map(|w| w.pid as u32).collect();
            for (pid, _) in our_clis(&world) {
                if !ancestors(pid).iter().any(|a| alive.contains(a)) {
                    orphans.insert(pid);
                }
            }
        }
        if now.duration_since(last_progress.1) > Duration::from_secs(30) && done > 0 {
            println!(
                "chaos: {:6.1} s  no session ended for 30 s ({done}/{} ended)",
                started.elapsed().as_secs_f64(),
                cfg.sessions
            );
            last_progress.1 = now;
        }
    }
    let ended_count = ended.load(Ordering::Relaxed);
    if ended_count < cfg.sessions && report.failure.is_none() {
        report.failure = Some(format!(
            "timed out after {:?}: {} of {} sessions had not ended (see the `stuck` violations)",
            cfg.timeout,
            cfg.sessions - ended_count,
            cfg.sessions
        ));
    }
    tasks.abort_all();
    approver.abort();
    if let Some(handle) = restart.take() {
        let _ = handle.await;
    }
    report.approvals = approvals.load(Ordering::Relaxed);
    report.orphan_clis_seen = orphans.len();
    report.duration = started.elapsed();
    for e in client_errors.lock().unwrap().iter() {
        println!("chaos: client gave up: {e}");
    }

    // Stop everything: SIGCONT, SIGTERM, SIGKILL after 15 s.
    for w in workers.iter_mut().chain(std::iter::once(&mut api)) {
        if w.stopped {
            w.signal(libc::SIGCONT);
        }
        w.signal(libc::SIGTERM);
    }
    for w in workers.iter_mut().chain(std::iter::once(&mut api)) {
        if tokio::time::timeout(Duration::from_secs(15), w.child.wait()).await.is_err() {
            println!("chaos: {} did not stop within 15 s of SIGTERM; SIGKILL", w.name);
            w.signal(libc::SIGKILL);
            let _ = w.child.wait().await;
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let cli_left: Vec<ProcessNote> = our_clis(&world)
        .into_iter()
        .map(|(pid, cmdline)| ProcessNote {
            what: format!("pid {pid} (parent {:?}): {cmdline}", ancestors(pid).first()),
        })
        .collect();
    kill_our_clis(&world);

    // Collect and check.
    let mut observed = match read_store(&world).await {
        Ok(o) => o,
        Err(e) => {
            report.failure = Some(format!("could not read the store: {e}"));
            Observed::default()
        }
    };
    observed.expected_sessions = (0..cfg.sessions).map(|i| format!("chaos-{i}")).collect();
    observed.payments = world
        .payments
        .requests()
        .into_iter()
        .enumerate()
        .map(|(at, r)| Payment {
            n: at + 1,
            path: r.path.clone(),
            key: r.idempotency_key.clone(),
            body: serde_json::from_str(&r.body).unwrap_or(Value::Null),
            at_us: micros(r.at),
        })
        .collect();
    observed.claims = read_claims(&world.dir);
    observed.cli_left = cli_left;
    observed.unexpected_exits = unexpected;
    report.verdict = check::check(&observed);
    drop(world);
    if !report.ok() {
        report.logs = Some(dir.keep());
    }
    report
}

/// Calls `f` until it succeeds, a non-retryable error comes, or `deadline` passes; the API and
/// the database are expected to fail now and then (5xx, dropped connections, a stalled answer:
/// each call gets 30 s).
async fn retry<T, F, Fut>(deadline: Instant, mut f: F) -> Result<T, CallError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, CallError>>,
{
    loop {
        match tokio::time::timeout(Duration::from_secs(30), f()).await {
            Err(_) if Instant::now() < deadline => {}
            Err(_) => {
                return Err(CallError::Decode {
                    url: String::new(),
                    reason: "no answer within 30 s, and the run's deadline passed".into(),
                });
            }
            Ok(Err(CallError::Transport { .. }) | Err(CallError::Api { status: 500.., .. }))
                if Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            Ok(other) => return other,
        }
    }
}

async fn close_api_connections(world: &World) -> Result<usize, sqlx::Error> {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(&world.db("chaos-driver")).await?;
    let rows = sqlx::query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'chaos-api'",
    )
    .fetch_all(&mut conn)
    .await?;
    let _ = conn.close().await;
    Ok(rows.len())
}

async fn read_store(world: &World) -> Result<Observed, sqlx::Error> {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(&world.db("chaos-checker")).await?;
    let mut o = Observed::default();
    for row in sqlx::query("SELECT session_id, status, run_state, next_event_seq FROM sessions")
        .fetch_all(&mut conn)
        .await?
    {
        let run_state: String = row.try_get("run_state")?;
        let state: Value = serde_json::from_str(&run_state).unwrap_or(Value::Null);
        o.sessions.push(SessionRow {
            session_id: row.try_get("session_id")?,
            status: row.try_get("status")?,
            last_turn_error: state.get("last_turn_error").and_then(Value::as_str).map(str::to_owned),
            next_event_seq: row.try_get("next_event_seq")?,
        });
    }
    for row in sqlx::query("SELECT step_id, session_id, kind, payload, state, fence FROM steps")
        .fetch_all(&mut conn)
        .await?
    {
        let payload: String = row.try_get("payload")?;
        let payload: Value = serde_json::from_str(&payload).unwrap_or(Value::Null);
        o.steps.push(StepRow {
            step_id: row.try_get("step_id")?,
            session_id: row.try_get("session_id")?,
            kind: row.try_get("kind")?,
            tool_call_id: payload.get("tool_call_id").and_then(Value::as_str).map(str::to_owned),
            state: row.try_get("state")?,
            fence: row.try_get("fence")?,
        });
    }
    for row in sqlx::query(
        "SELECT session_id, seq, kind, step_id, fence, created_at,
                CASE WHEN kind = 'tool_call_started' THEN payload END AS payload
         FROM events",
    )
    .fetch_all(&mut conn)
    .await?
    {
        let step: Option<i64> = row.try_get("step_id")?;
        let fence: Option<i64> = row.try_get("fence")?;
        let payload: Option<String> = row.try_get("payload")?;
        let at_ms: i64 = row.try_get("created_at")?;
        o.events.push(EventRow {
            session_id: row.try_get("session_id")?,
            seq: row.try_get("seq")?,
            kind: row.try_get("kind")?,
            step: step.zip(fence),
            at_us: at_ms * 1000,
            attempt: payload
                .and_then(|p| serde_json::from_str::<Value>(&p).ok())
                .and_then(|p| p.get("attempt").and_then(Value::as_i64)),
        });
    }
    for row in sqlx::query("SELECT session_id, tool_call_id, status, record FROM tool_calls")
        .fetch_all(&mut conn)
        .await?
    {
        let record: String = row.try_get("record")?;
        let record: Value = serde_json::from_str(&record).unwrap_or(Value::Null);
        let text = |k: &str| record.get(k).and_then(Value::as_str).map(str::to_owned);
        o.calls.push(CallRow {
            session_id: row.try_get("session_id")?,
            tool_call_id: row.try_get("tool_call_id")?,
            tool_name: text("tool_name").unwrap_or_default(),
            turn_id: text("turn_id").unwrap_or_default(),
            runs_in: text("runs_in").unwrap_or_default(),
            status: row.try_get("status")?,
            output: text("output"),
            error: text("error"),
        });
    }
    for row in
        sqlx::query("SELECT session_id, interrupt_id, state FROM interrupts").fetch_all(&mut conn).await?
    {
        o.interrupts.push(InterruptRow {
            session_id: row.try_get("session_id")?,
            interrupt_id: row.try_get("interrupt_id")?,
            state: row.try_get("state")?,
        });
    }
    let _ = conn.close().await;
    Ok(o)
}

fn micros(at: SystemTime) -> i64 {
    at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64)
}

/// The claims every Worker logged: `<RFC 3339 time> DEBUG …: claimed step=N … attempt=F`.
fn read_claims(dir: &Path) -> Vec<Claim> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".log") || name.contains("api") {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        out.extend(text.lines().filter_map(|line| parse_claim(line, &name)));
    }
    out
}

/// One claim line, or `None`.
pub fn parse_claim(line: &str, worker: &str) -> Option<Claim> {
    let at = line.find(": claimed ")?;
    let fields = &line[at + ": claimed ".len()..];
    let field = |name: &str| {
        fields.split_whitespace().find_map(|f| f.strip_prefix(name)?.strip_prefix('=')?.parse::<i64>().ok())
    };
    Some(Claim {
        step_id: field("step")?,
        fence: field("attempt")?,
        at_us: parse_rfc3339_micros(line.split_whitespace().next()?)?,
        worker: worker.to_owned(),
    })
}

/// `2026-12-02T22:10:00.123456Z` → µs since the epoch (UTC only, as tracing writes it).
pub fn parse_rfc3339_micros(text: &str) -> Option<i64> {
    let text = text.strip_suffix('Z')?;
    let (date, time) = text.split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.split(':').map(|p| p.parse::<i64>().ok());
    let (hh, mm, ss) = (t.next()??, t.next()??, t.next()??);
    let frac: String = frac.chars().chain(std::iter::repeat('0')).take(6).collect();
    let micros: i64 = frac.parse().ok()?;
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 86_400 + hh * 3600 + mm * 60 + ss) * 1_000_000) + micros)
}

/// The last lines of the newest log named `name`.
fn last_lines(world: &World, name: &str) -> String {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(&world.dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|f| f.to_string_lossy().ends_with(&format!("-{name}.log"))))
        .collect();
    logs.sort();
    let Some(log) = logs.pop() else { return String::new() };
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(5).collect();
    format!("{}: {}", log.display(), tail.into_iter().rev().collect::<Vec<_>>().join(" | "))
}

/// CLI processes of this run: the pinned binary, with this run's mock as its model.
fn our_clis(world: &World) -> Vec<(u32, String)> {
    let marker = format!("ANTHROPIC_BASE_URL={}", world.mock.base_url());
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else { continue };
        let Ok(exe) = std::fs::read_link(entry.path().join("exe")) else { continue };
        if exe != world.cli_exe {
            continue;
        }
        let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        if !environ.split(|b| *b == 0).any(|kv| kv == marker.as_bytes()) {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        out.push((pid, cmdline.chars().take(160).collect()));
    }
    out
}

fn kill_our_clis(world: &World) {
    for (pid, _) in our_clis(world) {
        // SAFETY: a signal to a CLI of this run (matched by binary and environment).
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
}

/// The parent, grandparent, … of `pid`, from `/proc/<pid>/stat`.
fn ancestors(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut at = pid;
    for _ in 0..64 {
        let stat = std::fs::read_to_string(format!("/proc/{at}/stat")).unwrap_or_default();
        // The fields after the command name (which is in parentheses and may hold spaces).
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else { break };
        let Some(parent) = rest.split_whitespace().nth(1).and_then(|p| p.parse::<u32>().ok()) else { break };
        if parent == 0 {
            break;
        }
        out.push(parent);
        at = parent;
    }
    out
}

#[cfg(test)]
mod tests {
    // Items by path: under `cargo clippy --all-targets` the bench compiles this module without
    // its `#[test]` functions, and a glob import would be unused there.
    #[test]
    fn a_worker_claim_line_parses_to_its_step_fence_and_time() {
        let line = "2026-12-02T22:10:00.123456Z DEBUG tollgate_worker::worker: claimed step=5 kind=RunModel session=chaos-1 attempt=2";
        let claim = super::parse_claim(line, "w0").expect("a claim");
        assert_eq!((claim.step_id, claim.fence), (5, 2));
        assert_eq!(claim.at_us, 1_796_249_400_123_456);
        assert!(
            super::parse_claim("2026-12-02T22:10:00Z  INFO tollgate_worker::worker: worker started", "w0")
                .is_none()
        );
    }

    #[test]
    fn rfc3339_times_convert_to_epoch_micros() {
        assert_eq!(super::parse_rfc3339_micros("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(super::parse_rfc3339_micros("2000-03-01T00:00:01.5Z"), Some(951_868_801_500_000));
        assert_eq!(super::parse_rfc3339_micros("not a time"), None);
    }

    #[test]
    fn every_session_script_makes_the_three_calls_in_order() {
        let script = tollgate_mock_model::script::parse(&super::script(7)).expect("a script");
        let tollgate_mock_model::script::Action::Call(calls) = script.action else { panic!("a call script") };
        let tools: Vec<&str> = calls.iter().map(|c| c.tool.as_str()).collect();
        assert_eq!(tools, ["lookup_order", "record_credit", "create_refund"]);
    }
}
