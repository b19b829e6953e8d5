//! The Worker: claims steps from the store, runs them, and commits each result with its state
//! change in one transaction.
//!
//! [`Worker::run`] is the loop: up to `concurrency` steps at once, each under a lease that a
//! heartbeat task extends; a wake-up from the store (LISTEN/NOTIFY on PostgreSQL; on SQLite
//! in-process, and a watch of the file for other processes' commits) or the poll fallback starts
//! the next claim. Each claimed step runs in
//! `run_model` (a CLI segment) or `tool_steps` (approval, tool calls, resume), which ask
//! `tollgate_engine::session` what the result changes. A Worker whose lease was lost (it was
//! frozen, or the database clock moved past it) stops the step and can commit nothing: the store
//! checks every write against the claim's fence. The claimed step's life (its heartbeat's cadence,
//! and what the Worker does once it ended: nothing, end its turn, park it, hand it back, drop it)
//! is `claimed`, a machine without I/O that `run_claimed` drives.
//!
//! A step of a session whose turn a client asked to cancel ends the turn `cancelled` instead of
//! running, and a running segment is interrupted as soon as the request arrives (`cancel`).
//!
//! Every Worker also fires approval deadlines that came due ([`crate::deadlines::run`], a task
//! beside the claim loop that sleeps until the next deadline the store reports); it stops when
//! the claims stop.
//!
//! Stopping ([`Worker::run`]'s `shutdown`, SIGTERM in `tollgate worker` and `tollgate serve`)
//! drains: no new claims; the steps in hand get [`WorkerConfig::drain`] to finish; then each one
//! left is stopped (its CLI's process group killed) and its claim released with
//! [`Store::release`], so another Worker takes it at once instead of after the lease.
//!
//! # Caveats
//!
//! - A step whose rows cannot be used (a corrupt run state, record or payload; rows that
//!   disagree) ends its turn with a `turn_failed` event (and `last_turn_error` when the run state
//!   is readable; an unreadable one is never overwritten), instead of being retried forever; see
//!   `tollgate_engine::session::turn::on_unusable_rows`. A row written by a *newer* Tollgate (or
//!   a step kind this build does not know) is not run: it is put back with a long delay and
//!   logged, for a newer Worker; see [`PARKED_RETRY`].
//! - SIGKILL loses nothing that was committed; the step's lease expires and another Worker (or
//!   this one, restarted) claims it with a higher attempt. The CLI dies with its Worker
//!   (`tollgate_claude::transport`), and the next Worker to start removes the segment
//!   directories it left (`tollgate_claude::launch::remove_stale_scratch`).
//! - A released step was stopped mid-way: what it committed stays (a single-attempt call's
//!   `started` mark makes its next claim record `outcome_unknown`, never a second run).
//! - Segments reach the model through the Worker's [`ModelProxy`], started at the first segment;
//!   the CLI gets a per-segment token, never the Worker's API key.
//! - After a fresh segment that completed, and after a segment deferred to an approval-free tool
//!   step, the Worker pre-starts the CLI the next segment is likely to need (`warm`: up to
//!   [`WorkerConfig::warm_clis`], each killed after [`WorkerConfig::warm_cli_ttl`] unused). Each
//!   holds an idle CLI's memory while it waits; nothing is pre-started for a call waiting on a
//!   human.
//! - A segment's CLI works in its session's workspace, `<workspace root>/<session id>` (0700),
//!   unless the options name a `cwd`. The workspace stays between segments on this host; a
//!   session continued by a Worker on another host starts with an empty one.

mod cancel;
mod claimed;
mod claiming;
mod flush;
mod inline_writes;
pub mod mcp_calls;
mod model_step;
mod review;
mod run_model;
mod tool_steps;
mod warm;
pub mod workspace;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, watch};
use tollgate_claude::CliBinary;
use tollgate_engine::events::EventKind;
use tollgate_engine::session::{
    CallEntry, EngineError, FailureReason, ItemKind, NewEvent, RunModelStep, RunState, StepInput, StepKind,
    Transition, TurnState, TurnTrace,
};
use tollgate_store::{ClaimScope, Claimed, CommitReceipt, Store, StoreError, UnavailableComponent};
use tracing::{debug, error, info, warn};

use crate::agent::Agent;
use crate::proxy::{ModelProxy, ProxyError, Upstream};
use crate::telemetry::{self, TurnEnd, TurnSpan};
use tollgate_process::metrics::Metrics;
use tollgate_sessions::convert;
use tollgate_sessions::reads;

/// How long a step whose rows cannot be read waits before it is tried again.
pub const PARKED_RETRY: Duration = Duration::from_secs(300);

/// How a Worker runs.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// Its name in claims and logs.
    pub worker_id: String,
    /// Steps (and so CLI processes) at once.
    pub concurrency: usize,
    /// The lease of a claim.
    pub lease: Duration,
    /// How often a held claim is extended.
    pub heartbeat: Duration,
    /// The longest wait between claims when no wake-up arrives.
    pub poll: Duration,
    /// How long a stopping Worker lets the steps in hand finish before it releases them.
    pub drain: Duration,
    /// Where sessions' workspaces (the CLI's default working folder) go; `None` is
    /// [`default_workspace_root`].
    pub workspace_root: Option<std::path::PathBuf>,
    /// At most this many pre-started CLIs waiting for a segment (the `warm` module); 0 starts none.
    pub warm_clis: usize,
    /// How long a pre-started CLI waits for a segment before it is killed.
    pub warm_cli_ttl: Duration,
    /// Whether the agent's CLIs run in boxes.
    pub sandbox: SandboxMode,
    /// Runs only sessions pinned to the agent's digest, never an unpinned (new) one.
    pub pinned_only: bool,
}

/// How a Worker runs its agent's CLIs.
#[derive(Clone, Debug, Default)]
pub enum SandboxMode {
    /// Each CLI, and everything it starts, in a bubblewrap box of its own ([`tollgate_box`]).
    Boxed(BoxSettings),
    /// On the host, as the Worker's user: the agent's commands reach whatever that user can (its
    /// files, its other processes, the store, loopback services). The commands' `--sandbox none`;
    /// the library's default, for tests of what does not concern the box.
    #[default]
    None,
}

impl SandboxMode {
    /// `bwrap` or `none`, as `/healthz` and the logs say it.
    pub fn name(&self) -> &'static str {
        match self {
            SandboxMode::Boxed(_) => "bwrap",
            SandboxMode::None => "none",
        }
    }
}

/// The programs and user of a Worker's boxes (the agent's `[sandbox]` table gives the rest).
#[derive(Clone, Debug)]
pub struct BoxSettings {
    /// `bwrap`.
    pub bwrap: std::path::PathBuf,
    /// The box init (`tollgate-box`, beside the `tollgate` binary).
    pub init: std::path::PathBuf,
    /// Who the boxes' processes are.
    pub user: tollgate_box::BoxUser,
}

/// The port of the model proxy inside every box.
pub const BOX_MODEL_PORT: u16 = 7470;
/// The port of the egress proxy inside every box.
pub const BOX_EGRESS_PORT: u16 = 3128;

/// The default of [`WorkerConfig::warm_clis`]: one warm fresh CLI and one warm resume.
pub const DEFAULT_WARM_CLIS: usize = 2;
/// The default of [`WorkerConfig::warm_cli_ttl`].
pub const DEFAULT_WARM_CLI_TTL: Duration = Duration::from_secs(60);

/// `<system temp dir>/tollgate-workspaces-<uid>`.
pub fn default_workspace_root() -> std::path::PathBuf {
    // SAFETY: getuid(2) cannot fail and has no memory effects.
    let uid = unsafe { libc::getuid() };
    std::env::temp_dir().join(format!("tollgate-workspaces-{uid}"))
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            worker_id: format!("worker-{}", std::process::id()),
            concurrency: 4,
            lease: Duration::from_secs(30),
            heartbeat: Duration::from_secs(10),
            poll: Duration::from_secs(2),
            drain: Duration::from_secs(30),
            workspace_root: None,
            warm_clis: DEFAULT_WARM_CLIS,
            warm_cli_ttl: DEFAULT_WARM_CLI_TTL,
            sandbox: SandboxMode::None,
            pinned_only: false,
        }
    }
}

/// A Worker. Cheap to clone (everything is shared).
#[derive(Clone)]
pub struct Worker {
    store: Arc<dyn Store>,
    agent: Arc<Agent>,
    cli: CliBinary,
    config: Arc<WorkerConfig>,
    metrics: Arc<Metrics>,
    proxy: Arc<tokio::sync::OnceCell<ModelProxy>>,
    /// The boxes' settings, made once the model proxy runs; `None` inside with `--sandbox none`.
    boxes: Arc<tokio::sync::OnceCell<Option<Arc<tollgate_box::BoxConfig>>>>,
    /// Pre-started CLIs; `None` when [`WorkerConfig::warm_clis`] is 0.
    warm: Option<Arc<warm::Pool>>,
    /// Steps in hand now (a fresh warm CLI starts only when there are none).
    in_hand: Arc<std::sync::atomic::AtomicUsize>,
    /// The tools this Worker last published for `/mcp/{agent}` ([`mcp_calls::publish`]), as JSON.
    published_tools: Arc<tokio::sync::Mutex<Option<String>>>,
    /// The unavailable tool components this Worker last reported to the store, and when
    /// ([`report_unavailable`]); `None` before the first report.
    reported_unavailable: Arc<tokio::sync::Mutex<Option<Reported>>>,
}

/// A report of unavailable tool components a Worker made to the store, and when.
type Reported = (Vec<UnavailableComponent>, Instant);

/// Counts a step in hand while it lives.
struct InHand(Arc<std::sync::atomic::AtomicUsize>);

impl InHand {
    fn new(count: &Arc<std::sync::atomic::AtomicUsize>) -> InHand {
        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        InHand(count.clone())
    }
}

impl Drop for InHand {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker").field("config", &self.config).finish_non_exhaustive()
    }
}

/// Why a step did not finish normally.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StepError {
    /// The claim is stale: another Worker holds the step. Nothing was written.
    #[error("the lease was lost; another Worker runs the step")]
    LeaseLost,
    /// The store failed.
    #[error(transparent)]
    Store(StoreError),
    /// The step's rows cannot be used.
    #[error(transparent)]
    Engine(#[from] tollgate_engine::session::EngineError),
    /// The Worker is stopping and its drain time is up: the step is handed back.
    #[error("the Worker is stopping; the step was handed back")]
    Released,
}

impl From<StoreError> for StepError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::LeaseLost { .. } => StepError::LeaseLost,
            other => StepError::Store(other),
        }
    }
}

impl Worker {
    /// A Worker for `agent` on `store`, starting `cli` for segments.
    pub fn new(store: Arc<dyn Store>, agent: Arc<Agent>, cli: CliBinary, config: WorkerConfig) -> Self {
        let metrics: Arc<Metrics> = Arc::default();
        let warm = (config.warm_clis > 0)
            .then(|| warm::new_pool(config.warm_clis, config.warm_cli_ttl, metrics.clone()));
        Worker {
            store,
            agent,
            cli,
            config: Arc::new(config),
            metrics,
            proxy: Arc::default(),
            boxes: Arc::default(),
            warm,
            in_hand: Arc::default(),
            published_tools: Arc::default(),
            reported_unavailable: Arc::default(),
        }
    }

    /// The model proxy, started at the first call with the Worker's own `ANTHROPIC_*` upstream.
    pub(crate) async fn model_proxy(&self) -> Result<&ModelProxy, ProxyError> {
        self.proxy.get_or_try_init(|| ModelProxy::start(Upstream::from_env(), self.metrics.clone())).await
    }

    /// The settings of the boxes the agent's CLIs run in (`None` with `--sandbox none`): the
    /// Worker's programs and user, the agent's `[sandbox]` limits and paths, the model proxy's
    /// socket and an egress proxy with the agent's `allowed_outbound_hosts`.
    pub(crate) async fn box_config(&self) -> Result<Option<Arc<tollgate_box::BoxConfig>>, ProxyError> {
        let proxy = self.model_proxy().await?;
        let config = self.boxes.get_or_init(|| async {
            let SandboxMode::Boxed(settings) = &self.config.sandbox else { return None };
            let sandbox = &self.agent.config.sandbox;
            let mut config = tollgate_box::BoxConfig::new(&settings.bwrap, &settings.init, settings.user);
            config.limits = sandbox.limits;
            config.read_only_paths.clone_from(&sandbox.read_only_paths);
            config.model = proxy.socket_path().map(|socket| tollgate_box::config::Relay {
                port: BOX_MODEL_PORT,
                socket: socket.to_path_buf(),
            });
            // `bwrap` runs as a root Worker's boxes' user and binds the socket by path: its
            // private folder is given to that user.
            if let (Some((uid, gid)), Some(folder)) =
                (settings.user.owner(), proxy.socket_path().and_then(std::path::Path::parent))
                && let Err(err) = std::os::unix::fs::lchown(folder, Some(uid), Some(gid))
            {
                warn!(folder = %folder.display(), %err, "the model proxy's socket folder could not be given to the boxes' user");
            }
            let egress = crate::egress::Egress::new(sandbox.allowed_outbound_hosts.clone());
            config.egress = Some((BOX_EGRESS_PORT, Arc::new(egress)));
            Some(Arc::new(config))
        });
        Ok(config.await.clone())
    }

    /// How the agent's CLIs run.
    pub fn sandbox(&self) -> &SandboxMode {
        &self.config.sandbox
    }

    /// The root of the sessions' workspaces.
    pub fn workspace_root(&self) -> std::path::PathBuf {
        self.config.workspace_root.clone().unwrap_or_else(default_workspace_root)
    }

    /// Records into `metrics` (shared with the API's `/metrics` in `tollgate serve`).
    #[must_use]
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        if let Some(pool) = &self.warm {
            pool.clear();
            self.warm =
                Some(warm::new_pool(self.config.warm_clis, self.config.warm_cli_ttl, metrics.clone()));
        }
        self.metrics = metrics;
        self
    }

    /// The process ids of the pre-started CLIs it holds now.
    pub fn warm_cli_pids(&self) -> Vec<u32> {
        self.warm.as_ref().map(|pool| pool.pids()).unwrap_or_default()
    }

    /// The agent it runs.
    pub fn agent(&self) -> &Arc<Agent> {
        &self.agent
    }

    /// The metrics it records into.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Runs until `shutdown` resolves, then drains: the steps in hand get
    /// [`WorkerConfig::drain`] to finish, and those left are stopped and released.
    pub async fn run(&self, shutdown: impl std::future::Future<Output = ()>) {
        self.run_until(shutdown, std::future::pending()).await;
    }

    /// [`Worker::run`], with the drain cut short when `hurry` resolves (an operator's second
    /// SIGTERM): the steps still in hand are stopped and released at once.
    pub async fn run_until(
        &self,
        shutdown: impl std::future::Future<Output = ()>,
        hurry: impl std::future::Future<Output = ()>,
    ) {
        let slots = Arc::new(Semaphore::new(self.config.concurrency.max(1)));
        let mut work = self.store.work_signal();
        let mut tasks = tokio::task::JoinSet::new();
        let (release_tx, release_rx) = watch::channel(false);
        let beside = self.start().await;
        // Only sessions of this agent: unpinned ones (unless told not to), and those pinned to its
        // digest.
        let scope = ClaimScope { pinned_only: self.config.pinned_only, ..self.agent.claim_scope() };
        let mut claiming = claiming::Claiming::new(Instant::now());
        tokio::pin!(shutdown);
        loop {
            let permit = tokio::select! {
                permit = slots.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
                () = &mut shutdown => break,
            };
            while tasks.try_join_next().is_some() {}
            let claim = self.store.claim_for(&self.config.worker_id, self.config.lease, &scope);
            tokio::pin!(claim);
            let claimed = tokio::select! {
                claimed = &mut claim => claimed,
                () = &mut shutdown => {
                    // The claim may be taken already: give it a moment, and hand it back.
                    if let Ok(Ok(Some(claimed))) = tokio::time::timeout(Duration::from_secs(2), claim).await {
                        self.release(&claimed).await;
                    }
                    break;
                }
            };
            let answer = match &claimed {
                Ok(Some(_)) => claiming::Answer::Claimed,
                Ok(None) => claiming::Answer::Empty,
                Err(_) => claiming::Answer::Failed,
            };
            let (next, recovered) = claiming.answered(answer, Instant::now());
            if let Some(failures) = recovered {
                info!(failures, "claims work again");
            }
            let wait = match (next, claimed) {
                (claiming::Next::Run, Ok(Some(claimed))) => {
                    let (worker, release) = (self.clone(), release_rx.clone());
                    tasks.spawn(async move {
                        worker.run_claimed(claimed, release).await;
                        drop(permit);
                    });
                    continue;
                }
                (claiming::Next::Idle(idle), _) => {
                    drop(permit);
                    self.idle(idle, &mut claiming).await;
                    None
                }
                (claiming::Next::Backoff { failures }, claimed) => {
                    drop(permit);
                    let wait = backoff(failures, self.config.poll.min(MAX_BACKOFF));
                    let error = claimed.err().map(|e| e.to_string()).unwrap_or_default();
                    warn!(%error, failures, retry_in_ms = wait.as_millis() as u64, "claim failed; trying again");
                    Some(wait)
                }
                (claiming::Next::Run, _) => unreachable!("a step is run only when one was claimed"),
            };
            // Until work is signalled (or one poll), or the back-off's wait.
            let wait = async {
                match wait {
                    None => {
                        let _ = work.wait(self.config.poll).await;
                    }
                    Some(wait) => tokio::time::sleep(wait).await,
                }
            };
            tokio::select! {
                () = wait => {}
                () = &mut shutdown => break,
            }
        }
        for task in beside {
            task.abort();
        }
        self.drain(tasks, hurry, release_tx).await;
        if let Some(pool) = &self.warm {
            pool.clear();
        }
        // A Worker that stopped serves nothing: its report of unavailable components goes too.
        if self.reported_unavailable.lock().await.as_ref().is_some_and(|(reported, _)| !reported.is_empty()) {
            let agent = &self.agent;
            let cleared = self
                .store
                .agents()
                .report_unavailable_tools(agent.name(), &self.config.worker_id, agent.digest(), &[])
                .await;
            if let Err(error) = cleared {
                warn!(%error, "removing this Worker's report of unavailable tool components failed; it \
                    goes stale on its own");
            }
        }
        info!(worker = %self.config.worker_id, "worker stopped");
    }

    /// What starts with the claim loop: segment folders of stopped Workers are removed, and the
    /// tasks that run beside the claims start (the agent's registration, then its tools'; the
    /// approval deadlines).
    async fn start(&self) -> [tokio::task::JoinHandle<()>; 2] {
        let boxes = match &self.config.sandbox {
            SandboxMode::Boxed(settings) => settings.user.owner().map(|(uid, _)| uid),
            SandboxMode::None => None,
        };
        let stale = tollgate_claude::launch::remove_stale_scratch(None, boxes);
        if stale > 0 {
            info!(removed = stale, "removed segment directories that stopped Workers left behind");
        }
        info!(worker = %self.config.worker_id, concurrency = self.config.concurrency, agent = %self.agent.name(),
            agent_digest = %self.agent.digest(), locked = self.agent.is_locked(), "worker started");
        let me = self.clone();
        let registration = tokio::spawn(async move {
            register(me.store.clone(), me.agent.clone()).await;
            // Then its tools, for `/mcp/{agent}` of a process that loads no bundle, and those that
            // did not load. An idle Worker looks again now and then: a file broken or mended while
            // no session runs is reported, and a report still true is repeated, so readers tell
            // it from one a Worker killed without a word left behind.
            let mut first = true;
            loop {
                if let Ok(tools) = me.agent.tools().await {
                    report_unavailable(&me, &tools).await;
                    if first {
                        mcp_calls::publish(&me, &tools).await;
                    }
                }
                first = false;
                tokio::time::sleep(tollgate_store::agents::REPORT_EVERY).await;
            }
        });
        // The series this Worker counts carry its agent and version: its number when the bundle
        // was pushed into the store (`3`), else `sha256:` and 12 hex digits of its digest.
        let pushed = match self.store.versions().agent_versions(self.agent.name()).await {
            Ok(versions) => versions.into_iter().find(|v| v.digest == self.agent.digest()).map(|v| v.version),
            Err(error) => {
                warn!(%error, "could not read the agent's versions; its metrics name the digest");
                None
            }
        };
        let version =
            pushed.map_or_else(|| self.agent.digest().chars().take(19).collect(), |k| k.to_string());
        self.metrics.set_agent(self.agent.name(), &version);
        // Approval deadlines fire beside the claims, on the database clock (`crate::deadlines`).
        let store = self.store.clone();
        let deadlines =
            tokio::spawn(async move { crate::deadlines::run(store.as_ref(), std::future::pending()).await });
        [registration, deadlines]
    }

    /// What an idle Worker does before it waits for work, as [`claiming::Idle`] says.
    async fn idle(&self, idle: claiming::Idle, claiming: &mut claiming::Claiming) {
        if idle.check_config && self.agent.config_changed_on_disk() {
            claiming.config_changed();
            warn!(file = %self.agent.config.path.display(),
                "the agent's configuration changed on disk; this Worker keeps the one it loaded \
                 (policies, grants, limits): restart it to apply");
        }
        // Sessions created without a name while this agent's registration was in flight.
        if idle.adopt {
            match self.store.agents().adopt_unnamed(self.agent.name(), self.agent.digest()).await {
                Ok(adopted) => {
                    if let Some(adopted @ 1..) = adopted {
                        info!(agent = %self.agent.name(), adopted, "adopted sessions that named no agent");
                    }
                    claiming.adopted(adopted, Instant::now());
                }
                Err(err) => warn!(error = %err, "adopting sessions that name no agent failed"),
            }
        }
    }

    /// Lets the steps in hand finish for [`WorkerConfig::drain`] (or until `hurry`), then stops
    /// and releases those left.
    async fn drain(
        &self,
        mut tasks: tokio::task::JoinSet<()>,
        hurry: impl std::future::Future<Output = ()>,
        release: watch::Sender<bool>,
    ) {
        if tasks.is_empty() {
            return;
        }
        info!(
            steps = tasks.len(),
            drain_secs = self.config.drain.as_secs_f64(),
            "worker stopping: no new claims; finishing the steps in hand"
        );
        let all_done = async { while tasks.join_next().await.is_some() {} };
        let drained = tokio::select! {
            drained = tokio::time::timeout(self.config.drain, all_done) => drained.is_ok(),
            () = hurry => {
                info!("asked again to stop: cutting the drain short");
                false
            }
        };
        if !drained {
            warn!(steps = tasks.len(), "the drain is over: stopping the steps in hand and releasing them");
            let _ = release.send(true);
            while tasks.join_next().await.is_some() {}
        }
    }

    /// Hands `claimed` back so another Worker claims it at once; a claim that is already stale
    /// needs nothing.
    async fn release(&self, claimed: &Claimed) {
        let mut delay = Duration::from_millis(50);
        for _ in 0..4 {
            match self.store.release(claimed).await {
                Ok(()) => {
                    info!(step = claimed.step.step_id, kind = %claimed.step.kind, session = %claimed.step.session_id,
                        "released the step to another Worker");
                    return;
                }
                Err(StoreError::LeaseLost { .. }) => return,
                Err(err) if err.is_retryable() => {
                    warn!(error = %err, "release failed; trying again");
                    tokio::time::sleep(delay).await;
                    delay *= 4;
                }
                Err(err) => {
                    warn!(error = %err, "release failed; the step runs again when its lease expires");
                    return;
                }
            }
        }
    }

    /// Runs one claimed step under its heartbeat, until it ends or `release` turns true.
    async fn run_claimed(&self, claimed: Claimed, mut release: watch::Receiver<bool>) {
        let _in_hand = InHand::new(&self.in_hand);
        let step = &claimed.step;
        debug!(step = step.step_id, kind = %step.kind, session = %step.session_id, attempt = step.attempt, "claimed");
        let (lost_tx, mut lost_rx) = watch::channel(false);
        let heartbeat = {
            let store = self.store.clone();
            let claim = claimed.clone();
            let (lease, every) = (self.config.lease, self.config.heartbeat);
            tokio::spawn(async move {
                let mut life = claimed::Lease::default();
                loop {
                    tokio::time::sleep(claimed::wait_for(life.next(), every, MAX_BACKOFF)).await;
                    let beat = match store.heartbeat(&claim, lease).await {
                        Ok(_) => claimed::Beat::Renewed,
                        Err(StoreError::LeaseLost { .. }) => claimed::Beat::Lost,
                        Err(err) => {
                            warn!(error = %err, failures = life.failures() + 1,
                                "heartbeat failed; retrying before the lease expires");
                            claimed::Beat::Failed
                        }
                    };
                    if !life.answered(beat) {
                        let _ = lost_tx.send(true);
                        return;
                    }
                }
            })
        };
        let started = Instant::now();
        // Dropping the step's future stops it: a segment's CLI process group is killed.
        let mut result = tokio::select! {
            result = self.execute(&claimed) => result,
            _ = lost_rx.wait_for(|lost| *lost) => Err(StepError::LeaseLost),
            Ok(_) = release.wait_for(|release| *release) => Err(StepError::Released),
        };
        heartbeat.abort();
        let mut settled = claimed::settle(&result, false);
        if let claimed::Settle::EndTurn(error) = settled {
            result = self.end_turn_on_unusable_rows(&claimed, error).await;
            settled = claimed::settle(&result, true);
        }
        self.metrics.step(&claimed.step.kind, settled.outcome(), started.elapsed());
        let error = result.err().map(|e| e.to_string()).unwrap_or_default();
        let step = &claimed.step;
        match settled {
            claimed::Settle::Release => self.release(&claimed).await,
            claimed::Settle::Committed => debug!(step = step.step_id, "committed"),
            claimed::Settle::LeaseLost => warn!(
                step = step.step_id,
                kind = %step.kind,
                session = %step.session_id,
                fence = claimed.fence,
                "lease lost: the step's result was dropped, another Worker runs it"
            ),
            claimed::Settle::Park | claimed::Settle::EndTurn(_) => {
                error!(step = step.step_id, session = %step.session_id, error = %error,
                    "the step's rows cannot be used by this build; parked for {} s, nothing was changed", PARKED_RETRY.as_secs());
                let park = tollgate_store::Commit::finish(tollgate_store::Finish::Retry(PARKED_RETRY));
                if let Err(err) = self.store.commit(&claimed, park).await {
                    warn!(error = %err, "could not park the step");
                }
            }
            claimed::Settle::StoreFailed => {
                warn!(step = step.step_id, error = %error, "the store failed; the step runs again when its lease expires");
            }
        }
    }

    /// Ends the turn of a step whose rows cannot be used, with `error` for the client (see the
    /// module's caveats). An error here (the failure could not be written either) parks the step.
    async fn end_turn_on_unusable_rows(&self, claimed: &Claimed, error: String) -> Result<(), StepError> {
        let step = &claimed.step;
        let store = self.store.as_ref();
        error!(step = step.step_id, kind = %step.kind, session = %step.session_id, error = %error,
            "the step's rows cannot be used; ending its turn");
        let state = match store.session(&step.session_id).await {
            Ok(Some(session)) => RunState::parse(session.run_state.get()).ok(),
            _ => None,
        };
        let calls: Vec<CallEntry> = match store.tool_calls(&step.session_id).await {
            Ok(records) => records.iter().filter_map(|r| CallEntry::parse(r.record.get()).ok()).collect(),
            Err(_) => Vec::new(),
        };
        let prompts_seen = reads::read_all_items(store, &step.session_id).await.ok().map(|items| {
            items
                .iter()
                .filter(|i| {
                    matches!(ItemKind::parse(&i.kind), Some(ItemKind::UserPrompt | ItemKind::TurnFailureNote))
                })
                .map(|i| i.seq)
                .max()
                .unwrap_or(0)
        });
        let turn_id = match StepInput::parse(&step.kind, step.payload.get()) {
            Ok(StepInput::RunModel(input)) => input.turn_id,
            Ok(
                StepInput::AwaitToolApproval(call)
                | StepInput::CallTool(call)
                | StepInput::CallSingleAttemptTool(call)
                | StepInput::ResumeTurn(call)
                | StepInput::McpCall(call),
            ) => Some(call.turn_id),
            Err(_) => None,
        };
        let transition = tollgate_engine::session::turn::on_unusable_rows(
            turn_id.as_deref(),
            state.as_ref(),
            &calls,
            prompts_seen,
            error.clone(),
        );
        match self.commit(claimed, transition).await {
            Ok(_) => Ok(()),
            Err(StepError::LeaseLost) => Err(StepError::LeaseLost),
            Err(other) => {
                warn!(error = %other, "the turn's failure could not be written");
                Err(StepError::Engine(EngineError::Inconsistent(error)))
            }
        }
    }

    async fn execute(&self, claimed: &Claimed) -> Result<(), StepError> {
        let step = &claimed.step;
        // A client asked to cancel the turn: its step ends it instead of running.
        if let Some(request) = self.store.pending_cancel(&step.session_id).await? {
            return cancel::apply(self, claimed, request, 0.0).await;
        }
        match StepInput::parse(&step.kind, step.payload.get())? {
            StepInput::RunModel(input) => run_model::run(self, claimed, &input).await,
            StepInput::AwaitToolApproval(input) => tool_steps::approval(self, claimed, &input).await,
            StepInput::CallTool(input) => tool_steps::call(self, claimed, &input, false).await,
            StepInput::CallSingleAttemptTool(input) => tool_steps::call(self, claimed, &input, true).await,
            StepInput::ResumeTurn(input) => tool_steps::resume(self, claimed, &input).await,
            StepInput::McpCall(input) => mcp_calls::request(self, claimed, &input).await,
        }
    }

    /// Commits `transition` for the claim; retries a retryable store error a few times.
    pub(crate) async fn commit(
        &self,
        claimed: &Claimed,
        transition: Transition,
    ) -> Result<CommitReceipt, StepError> {
        let failed_turns: Vec<&'static str> = transition
            .events
            .iter()
            .filter(|e| e.kind == EventKind::TurnFailed)
            .map(|e| {
                let reason = e.payload["reason"].as_str().unwrap_or_default();
                FailureReason::parse(reason).map_or("other", FailureReason::as_str)
            })
            .collect();
        let turn_span = self.turn_span(claimed, &transition).await;
        let commit = convert::commit(transition);
        // A store that is unavailable (a database restart, a full disk) is retried, backing off
        // with jitter, for as long as the lease: the step's work (a segment's model calls) is kept
        // if the store returns in time. Retrying is safe past that too, since the store checks
        // the claim's fence: a step another Worker took meanwhile answers `LeaseLost`.
        let deadline = Instant::now() + self.config.lease.max(Duration::from_secs(5));
        let mut failures = 0u32;
        let receipt = loop {
            match self.store.commit(claimed, commit.clone()).await {
                Err(err) if err.is_retryable() && Instant::now() < deadline => {
                    failures += 1;
                    warn!(error = %err, failures, "commit failed; trying again");
                    tokio::time::sleep(backoff(failures, MAX_BACKOFF)).await;
                }
                other => break other?,
            }
        };
        for reason in failed_turns {
            self.metrics.turn_failed(reason);
            if is_poison(reason) {
                self.metrics.poison_step(&claimed.step.kind);
            }
        }
        if let Some(span) = turn_span {
            span.record();
        }
        Ok(receipt)
    }

    /// The `invoke_agent` span of the turn `transition` ends, when it ends one and spans are
    /// exported: with the trace stored with the turn, or the one its first step fixed when that
    /// step ends it.
    async fn turn_span(&self, claimed: &Claimed, transition: &Transition) -> Option<TurnSpan> {
        if !telemetry::exporting() {
            return None;
        }
        let (turn_id, end) = transition.events.iter().find_map(turn_end)?;
        let session_id = &claimed.step.session_id;
        let stored = self.stored_turn(session_id).await.filter(|turn| turn.turn_id == turn_id);
        let trace = match stored {
            Some(turn) => turn.trace?,
            None => first_step_trace(claimed)?,
        };
        let plan = telemetry::turn_span(self.agent.name(), session_id, &turn_id, &end);
        Some(TurnSpan { trace, plan })
    }

    /// The stored trace of `session_id`'s turn in progress, when spans are exported.
    pub(crate) async fn stored_turn_trace(&self, session_id: &str) -> Option<TurnTrace> {
        if !telemetry::exporting() {
            return None;
        }
        self.stored_turn(session_id).await?.trace
    }

    /// `session_id`'s turn in progress as stored (`None` also when its row cannot be read: a
    /// span is not worth failing a step for).
    async fn stored_turn(&self, session_id: &str) -> Option<TurnState> {
        let session = self.store.session(session_id).await.ok()??;
        RunState::parse(session.run_state.get()).ok()?.turn
    }
}

/// A turn failure that means its step failed every time it ran (not a limit it reached).
fn is_poison(reason: &str) -> bool {
    [FailureReason::SegmentFailed, FailureReason::WorkerStopped, FailureReason::UnusableRows]
        .map(FailureReason::as_str)
        .contains(&reason)
}

/// Registers the agent this Worker serves in the store's registry (which adopts the sessions from
/// before agents had names; see `tollgate_store::agents`), retrying with backoff while the store
/// is unavailable. Claims do not wait for it: they go by the agent's name either way.
async fn register(store: Arc<dyn Store>, agent: Arc<Agent>) {
    let mut failures = 0u32;
    loop {
        match store.agents().register_agent(agent.name(), agent.digest(), agent.is_locked()).await {
            Ok(registration) => {
                if registration.adopted > 0 {
                    info!(agent = %agent.name(), adopted = registration.adopted,
                        "sessions from before agents had names now belong to this agent");
                }
                if registration.unnamed > 0 {
                    warn!(
                        unnamed = registration.unnamed,
                        "sessions name no agent and no Worker runs them: they recorded a digest no agent \
                         registered while several agents share this store; start a Worker of their agent"
                    );
                }
                return;
            }
            Err(err) => {
                failures += 1;
                let wait = backoff(failures, MAX_BACKOFF);
                warn!(error = %err, failures, retry_in_ms = wait.as_millis() as u64,
                    "registering the agent in the store failed; trying again");
                tokio::time::sleep(wait).await;
            }
        }
    }
}

/// The longest wait between retries of a failed claim or heartbeat (and never more than the
/// poll interval, resp. the heartbeat period): short, so work resumes within seconds of the
/// store's return.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// The wait before retry number `failures` (1, 2, …): 100 ms doubling up to `cap`, then a
/// random point in its upper half ("equal jitter"), so Workers that failed together do not
/// retry together.
fn backoff(failures: u32, cap: Duration) -> Duration {
    use std::hash::BuildHasher;
    let full = Duration::from_millis(100).saturating_mul(1 << failures.saturating_sub(1).min(16)).min(cap);
    // A fresh random seed per call: std's hasher keys are random per RandomState.
    let noise = std::collections::hash_map::RandomState::new().hash_one(failures);
    let half = full / 2;
    half + half.mul_f64((noise % 1000) as f64 / 1000.0)
}

/// Reports which of the agent's tool components did not load at the Worker's last look at
/// `tools/` (the log names each once per change, [`tollgate_sandbox::live`]): to this process's
/// `/metrics`, and to the store for every API process (`/healthz`, `/metrics`, the inbox) when the
/// list changed, or is not empty and was last reported [`tollgate_store::agents::REPORT_EVERY`]
/// ago or more. A report the store did not take is tried again at the next look.
pub(crate) async fn report_unavailable(worker: &Worker, tools: &tollgate_sandbox::ToolSet) {
    let components: Vec<UnavailableComponent> = tools
        .unavailable()
        .iter()
        .map(|u| UnavailableComponent {
            component: u.component.clone(),
            reason: u.reason.clone(),
            serving_last_good: u.serving_last_good,
        })
        .collect();
    let named = components.iter().map(|c| (c.component.clone(), c.reason.clone())).collect();
    worker.metrics.set_unavailable_tools(worker.agent.name(), named);
    let mut last = worker.reported_unavailable.lock().await;
    if !report_due(last.as_ref().map(|(reported, at)| (reported.as_slice(), at.elapsed())), &components) {
        return;
    }
    let agent = &worker.agent;
    let reported = worker
        .store
        .agents()
        .report_unavailable_tools(agent.name(), &worker.config.worker_id, agent.digest(), &components)
        .await;
    match reported {
        Ok(()) => *last = Some((components, Instant::now())),
        Err(error) => warn!(agent = %agent.name(), %error,
            "reporting the agent's unavailable tool components to the store failed; trying again at the next look"),
    }
}

/// Whether a Worker reports `now` to the store, given what it reported last and how long ago
/// (`None`: nothing yet, so its first report also clears one an earlier run left).
fn report_due(last: Option<(&[UnavailableComponent], Duration)>, now: &[UnavailableComponent]) -> bool {
    match last {
        None => true,
        Some((reported, age)) => {
            reported != now || (!now.is_empty() && age >= tollgate_store::agents::REPORT_EVERY)
        }
    }
}

/// The turn an event ends, and how.
fn turn_end(event: &NewEvent) -> Option<(String, TurnEnd)> {
    let end = match event.kind {
        EventKind::TurnCompleted => TurnEnd::Completed,
        EventKind::TurnCancelled => TurnEnd::Cancelled,
        EventKind::TurnFailed => {
            TurnEnd::Failed(event.payload["reason"].as_str().unwrap_or("other").to_owned())
        }
        _ => return None,
    };
    Some((event.payload["turn_id"].as_str()?.to_owned(), end))
}

/// The trace a turn's first step fixes ([`telemetry::turn_trace`]): a new turn's `RunModel`, or an
/// MCP client's call.
pub(crate) fn first_step_trace(claimed: &Claimed) -> Option<TurnTrace> {
    let step = &claimed.step;
    let first = match StepKind::parse(&step.kind)? {
        StepKind::RunModel => {
            serde_json::from_str::<RunModelStep>(step.payload.get()).ok()?.turn_id.is_none()
        }
        StepKind::McpCall => true,
        _ => false,
    };
    first.then(|| telemetry::turn_trace(&step.session_id, step.step_id, step.created_at))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_goes_to_the_store_when_it_changed_or_is_due_again_never_per_step() {
        let broken = |name: &str| UnavailableComponent {
            component: name.into(),
            reason: "not a component".into(),
            serving_last_good: false,
        };
        let one = [broken("truncated")];
        let every = tollgate_store::agents::REPORT_EVERY;
        let soon = Duration::from_secs(1);
        assert!(report_due(None, &[]), "the first report clears what an earlier run left");
        assert!(report_due(None, &one));
        assert!(!report_due(Some((&one, soon)), &one), "unchanged: not at every step");
        assert!(report_due(Some((&one, every)), &one), "still true: repeated now and then");
        assert!(report_due(Some((&one, soon)), &[broken("truncated"), broken("trapping")]), "changed");
        assert!(report_due(Some((&one, soon)), &[]), "mended");
        assert!(!report_due(Some((&[], every * 10)), &[]), "nothing to say, nothing repeated");
    }

    #[test]
    fn retries_back_off_exponentially_with_jitter_up_to_the_cap() {
        let cap = Duration::from_secs(2);
        for failures in 1..40 {
            let full = Duration::from_millis(100).saturating_mul(1 << (failures - 1).min(16)).min(cap);
            let wait = backoff(failures, cap);
            assert!(
                wait >= full / 2 && wait <= full,
                "retry {failures}: {wait:?} outside {full:?}/2..{full:?}"
            );
        }
        let waits: std::collections::HashSet<_> = (0..20).map(|_| backoff(8, cap)).collect();
        assert!(waits.len() > 1, "no jitter: {waits:?}");
    }
}
