//! The crash tests' world: an agent directory built from source, a store, the mock model, a
//! payments service that can hold a refund, and Workers as child processes to SIGKILL.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::{Semaphore, SemaphorePermit};
use tollgate::sessions::{self, Snapshot};
use tollgate_engine::session::client::Decision;
use tollgate_mock_model::MockModel;
pub use tollgate_mock_model::payments::Payments;
use tollgate_store::{Event, Store};

/// Workers start real CLIs (~240 MB, a core each): two tests at once at most.
pub static SLOTS: Semaphore = Semaphore::const_new(2);

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("workspace root")
}

/// The pinned CLI, or `None` (loudly) when it is not installed and not required.
pub fn real_cli(test: &str) -> Option<PathBuf> {
    let pinned = root().join(tollgate_claude::cli::PINNED_INSTALL);
    if pinned.exists() {
        return Some(pinned);
    }
    let message = format!(
        "!! SKIPPED {test}: the real Claude Code CLI is not installed at {}; run scripts/install-claude-cli.sh",
        pinned.display()
    );
    assert!(std::env::var("TOLLGATE_REQUIRE_REAL_CLI").as_deref() != Ok("1"), "{message}");
    eprintln!("{message}");
    None
}

/// How the agent's `create_refund` is classified.
#[derive(Clone, Copy, Debug)]
pub enum Refund {
    /// The example's policy: non-idempotent, with approval.
    SingleAttemptWithApproval,
    /// Idempotent, with approval.
    IdempotentWithApproval,
}

/// One test's world.
pub struct World {
    pub dir: tempfile::TempDir,
    pub agent: PathBuf,
    pub db: String,
    pub store: Arc<dyn Store>,
    pub mock: MockModel,
    pub payments: Payments,
    cli: PathBuf,
    _slot: SemaphorePermit<'static>,
}

impl World {
    /// A world with the example support agent (its tools built from source) on a SQLite file.
    pub async fn new(test: &str, refund: Refund) -> Option<World> {
        Self::build(test, refund, None).await
    }

    /// The same on the store at `db`.
    pub async fn on_db(test: &str, refund: Refund, db: &str) -> Option<World> {
        Self::build(test, refund, Some(db)).await
    }

    async fn build(test: &str, refund: Refund, db: Option<&str>) -> Option<World> {
        let cli = real_cli(test)?;
        // reqwest has no TLS provider of its own (see tollgate::tls): the tests' clients need it.
        tollgate::tls::install_crypto_provider();
        let slot = SLOTS.acquire().await.expect("never closed");
        let dir = tempfile::Builder::new().prefix("tollgate-durable-").tempdir().expect("temp dir");
        let agent = dir.path().join("agent");
        std::fs::create_dir_all(agent.join("tools")).expect("agent dir");
        std::fs::copy(tollgate_test_guests::ORDERS, agent.join("tools/orders.wasm")).expect("orders");
        std::fs::copy(tollgate_test_guests::PAYMENTS, agent.join("tools/payments.wasm")).expect("payments");
        std::fs::copy(tollgate_test_guests::SUPPORT_FACTORY, agent.join("agent.wasm")).expect("factory");
        let config =
            std::fs::read_to_string(root().join("examples/agents/support/tollgate.toml")).expect("config");
        let config = match refund {
            Refund::SingleAttemptWithApproval => config,
            Refund::IdempotentWithApproval => config.replace(
                r#"create_refund = { effect = "non_idempotent_write", requires_approval = true }"#,
                r#"create_refund = { effect = "idempotent_write", requires_approval = true }"#,
            ),
        };
        std::fs::write(agent.join("tollgate.toml"), config).expect("write config");
        let db = db
            .map_or_else(|| format!("sqlite://{}", dir.path().join("tollgate.db").display()), str::to_owned);
        let store = tollgate_store::open(&db).await.expect("open the store");
        let mock = MockModel::start().await.expect("start the mock model");
        let payments = Payments::start().await.expect("start payments");
        Some(World { dir, agent, db, store, mock, payments, cli, _slot: slot })
    }

    /// Starts a Worker process with a short lease (3 s), so a SIGKILLed one is replaced quickly.
    pub fn worker(&self, name: &str) -> WorkerProcess {
        self.worker_with(
            name,
            &self.db,
            &["--lease-secs", "3", "--heartbeat-secs", "1", "--concurrency", "2"],
        )
    }

    /// Starts a Worker process on `db` with more arguments.
    pub fn worker_with(&self, name: &str, db: &str, extra: &[&str]) -> WorkerProcess {
        self.spawn_worker(name, db, extra, &[])
    }

    /// Starts a Worker process like [`World::worker`], with more environment variables.
    pub fn worker_with_env(&self, name: &str, env: &[(&str, &str)]) -> WorkerProcess {
        self.spawn_worker(
            name,
            &self.db,
            &["--lease-secs", "3", "--heartbeat-secs", "1", "--concurrency", "2"],
            env,
        )
    }

    /// The `tollgate` binary with this world's environment: the pinned CLI, the mock model, a
    /// refused proxy for everything else, the payments service, a private component cache.
    pub fn tollgate(&self) -> tokio::process::Command {
        let cache = self.dir.path().join("cache");
        let mut command = crate::chaos_common::tollgate_command(
            &self.cli,
            &self.mock.base_url(),
            &self.payments.url,
            &cache,
        );
        command.env("RUST_LOG", "info,tollgate::guest=debug");
        command
    }

    fn spawn_worker(&self, name: &str, db: &str, extra: &[&str], env: &[(&str, &str)]) -> WorkerProcess {
        self.spawn_worker_of(name, &self.agent, db, extra, env)
    }

    /// Starts a Worker process like [`World::worker`] that loads the agent directory `agent`.
    pub fn worker_of(&self, name: &str, agent: &Path) -> WorkerProcess {
        self.spawn_worker_of(
            name,
            agent,
            &self.db,
            &["--lease-secs", "3", "--heartbeat-secs", "1", "--concurrency", "2"],
            &[],
        )
    }

    fn spawn_worker_of(
        &self,
        name: &str,
        agent: &Path,
        db: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> WorkerProcess {
        let log = self.dir.path().join(format!("{name}.log"));
        let stderr = std::fs::File::create(&log).expect("log file");
        let child = self
            .tollgate()
            .args(["worker", "--agent"])
            .arg(agent)
            .args(["--db", db, "--worker-id", name, "--poll-secs", "0.2"])
            .args(extra)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .expect("start a worker");
        WorkerProcess { child, log }
    }

    /// Starts the session and sends `text`.
    pub async fn send(&self, session: &str, text: &str) {
        sessions::start(self.store.as_ref(), session).await.expect("start");
        sessions::send(self.store.as_ref(), session, text, None).await.expect("send");
    }

    /// Decides interrupt `id` under `key`.
    pub async fn decide(&self, session: &str, id: &str, approved: bool, message: Option<&str>, key: &str) {
        let decision = Decision { approved, message: message.map(str::to_owned) };
        sessions::resolve(self.store.as_ref(), session, id, &decision, Some(key)).await.expect("resolve");
    }

    /// The snapshot.
    pub async fn snapshot(&self, session: &str) -> Snapshot {
        sessions::snapshot(self.store.as_ref(), session).await.expect("snapshot").expect("the session exists")
    }

    /// Waits until the snapshot satisfies `done` (60 s at most), and returns it.
    pub async fn wait_for(&self, session: &str, what: &str, done: impl Fn(&Snapshot) -> bool) -> Snapshot {
        let start = Instant::now();
        loop {
            let snapshot = self.snapshot(session).await;
            if done(&snapshot) {
                return snapshot;
            }
            if start.elapsed() > Duration::from_secs(90) {
                panic!("timed out waiting for {what}; snapshot: {snapshot:#?}\n{}", self.diagnostics());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits for the turn to end (idle after a completed or failed turn numbered `turns`).
    pub async fn wait_idle_after(&self, session: &str, turns_ended: usize) -> Snapshot {
        let start = Instant::now();
        loop {
            let ended = self
                .events(session)
                .await
                .iter()
                .filter(|e| e.kind == "turn_completed" || e.kind == "turn_failed")
                .count();
            if ended >= turns_ended {
                return self.snapshot(session).await;
            }
            if start.elapsed() > Duration::from_secs(120) {
                panic!(
                    "timed out waiting for turn {turns_ended} to end; {:#?}\n{}",
                    self.snapshot(session).await,
                    self.diagnostics()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Every event of the session.
    pub async fn events(&self, session: &str) -> Vec<Event> {
        self.store.read_events(session, 0, 100_000).await.expect("events")
    }

    /// The text of the mock's log and the Workers' logs, for failure messages.
    pub fn diagnostics(&self) -> String {
        let mut out = String::new();
        for entry in std::fs::read_dir(self.dir.path()).into_iter().flatten().flatten() {
            if entry.path().extension().is_some_and(|e| e == "log") {
                let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
                let tail: String = text
                    .lines()
                    .rev()
                    .take(40)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join("\n");
                out.push_str(&format!("--- {} ---\n{tail}\n", entry.path().display()));
            }
        }
        let replies: Vec<Value> = self
            .mock
            .requests()
            .iter()
            .map(|r| serde_json::json!({"path": r.path, "reply": r.reply}))
            .collect();
        out.push_str(&format!(
            "--- mock: {} requests ---\n{}",
            replies.len(),
            serde_json::to_string(&replies).unwrap_or_default()
        ));
        out
    }

    /// The text and error flag of the tool result for `tool_use_id` in the mock's last request that
    /// carries one.
    pub fn tool_result_seen(&self, tool_use_id: &str) -> Option<(String, bool)> {
        self.mock.message_requests().iter().rev().find_map(|request| request.tool_result(tool_use_id))
    }
}

/// A Worker child process.
pub struct WorkerProcess {
    child: tokio::process::Child,
    pub log: PathBuf,
}

impl WorkerProcess {
    fn pid(&self) -> i32 {
        i32::try_from(self.child.id().expect("running")).expect("pid")
    }

    /// SIGKILL, and wait until it is gone.
    pub async fn kill(mut self) {
        // SAFETY: sending a signal to our own child's pid.
        unsafe { libc::kill(self.pid(), libc::SIGKILL) };
        let _ = self.child.wait().await;
    }

    /// SIGTERM, and wait until it has exited.
    pub async fn terminate(mut self) {
        // SAFETY: sending a signal to our own child's pid.
        unsafe { libc::kill(self.pid(), libc::SIGTERM) };
        let _ = self.child.wait().await;
    }

    /// SIGSTOP: frozen, holding whatever it holds.
    pub fn freeze(&self) {
        // SAFETY: as above.
        unsafe { libc::kill(self.pid(), libc::SIGSTOP) };
    }

    /// SIGCONT.
    pub fn thaw(&self) {
        // SAFETY: as above.
        unsafe { libc::kill(self.pid(), libc::SIGCONT) };
    }

    /// Whether it is still running (it has not exited).
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Its log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its resident memory in KiB, from `/proc`.
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }

    /// Its pid.
    pub fn id(&self) -> u32 {
        self.child.id().expect("running")
    }

    /// Sends `signal` and returns at once.
    pub fn signal(&self, signal: i32) {
        // SAFETY: sending a signal to our own child's pid.
        unsafe { libc::kill(self.pid(), signal) };
    }

    /// Waits until it has exited (60 s at most) and returns how.
    pub async fn exited(mut self) -> std::process::ExitStatus {
        tokio::time::timeout(Duration::from_secs(60), self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("the Worker did not exit; its log:\n{}", self.log_text()))
            .expect("wait for the Worker")
    }

    /// Its child processes, from `/proc`.
    pub fn children(&self) -> Vec<u32> {
        let mut out = Vec::new();
        for task in std::fs::read_dir(format!("/proc/{}/task", self.pid())).into_iter().flatten().flatten() {
            let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            out.extend(text.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
        }
        out
    }
}
