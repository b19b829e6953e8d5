//! The Worker: claims steps from the store, runs them, and commits each result with its state
//! change in one transaction.
//!
//! [`Worker::run`] is the loop: up to `concurrency` steps at once, each under a lease that a
//! heartbeat task extends; a wake-up from the store (LISTEN/NOTIFY on PostgreSQL, in-process on
//! SQLite) or the poll fallback starts the next claim. Each claimed step runs in
//! [`run_model`] (a CLI segment) or [`tool_steps`] (approval, tool calls, resume), which ask
//! `tollgate_engine::session` what the result changes. A Worker whose lease was lost (it was
//! frozen, or the database clock moved past it) stops the step and can commit nothing: the store
//! checks every write against the claim's fence.
//!
//! # Caveats
//!
//! - A step whose rows do not parse (a corrupt or future-version run state or record) is not run:
//!   it is put back with a long delay and logged, so nothing is lost and an operator can repair
//!   or upgrade; see [`PARKED_RETRY`].
//! - SIGKILL loses nothing that was committed; the step's lease expires and another Worker (or
//!   this one, restarted) claims it with a higher attempt.
//! - Segments reach the model through the Worker's [`ModelProxy`], started at the first segment;
//!   the CLI gets a per-segment token, never the Worker's API key.
//! - A segment's CLI works in its session's workspace, `<workspace root>/<session id>` (0700),
//!   unless the options name a `cwd`. The workspace stays between segments on this host; a
//!   session continued by a Worker on another host starts with an empty one.

mod run_model;
mod tool_steps;
pub mod workspace;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, watch};
use tollgate_claude::CliBinary;
use tollgate_engine::session::{StepInput, Transition};
use tollgate_store::{Claimed, CommitReceipt, Store, StoreError};
use tracing::{debug, error, info, warn};

use crate::agent::Agent;
use crate::convert;
use crate::metrics::Metrics;
use crate::proxy::{ModelProxy, ProxyError, Upstream};

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
    /// Where sessions' workspaces (the CLI's default working folder) go; `None` is
    /// [`default_workspace_root`].
    pub workspace_root: Option<std::path::PathBuf>,
}

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
            workspace_root: None,
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
        Worker { store, agent, cli, config: Arc::new(config), metrics: Arc::default(), proxy: Arc::default() }
    }

    /// The model proxy, started at the first call with the Worker's own `ANTHROPIC_*` upstream.
    pub(crate) async fn model_proxy(&self) -> Result<&ModelProxy, ProxyError> {
        self.proxy.get_or_try_init(|| ModelProxy::start(Upstream::from_env(), self.metrics.clone())).await
    }

    /// The root of the sessions' workspaces.
    pub fn workspace_root(&self) -> std::path::PathBuf {
        self.config.workspace_root.clone().unwrap_or_else(default_workspace_root)
    }

    /// Records into `metrics` (shared with the API's `/metrics` in `tollgate serve`).
    #[must_use]
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// The metrics it records into.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Runs until `shutdown` resolves, then waits for the steps in hand.
    pub async fn run(&self, shutdown: impl std::future::Future<Output = ()>) {
        let slots = Arc::new(Semaphore::new(self.config.concurrency.max(1)));
        let mut work = self.store.work_signal();
        let mut tasks = tokio::task::JoinSet::new();
        info!(worker = %self.config.worker_id, concurrency = self.config.concurrency, "worker started");
        tokio::pin!(shutdown);
        loop {
            let permit = tokio::select! {
                permit = slots.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
                () = &mut shutdown => break,
            };
            while tasks.try_join_next().is_some() {}
            let claimed = tokio::select! {
                claimed = self.store.claim(&self.config.worker_id, self.config.lease) => claimed,
                () = &mut shutdown => break,
            };
            match claimed {
                Ok(Some(claimed)) => {
                    let worker = self.clone();
                    tasks.spawn(async move {
                        worker.run_claimed(claimed).await;
                        drop(permit);
                    });
                }
                Ok(None) => {
                    drop(permit);
                    tokio::select! {
                        _ = work.wait(self.config.poll) => {}
                        () = &mut shutdown => break,
                    }
                }
                Err(err) => {
                    drop(permit);
                    warn!(error = %err, "claim failed; trying again");
                    tokio::select! {
                        () = tokio::time::sleep(self.config.poll) => {}
                        () = &mut shutdown => break,
                    }
                }
            }
        }
        info!(steps = tasks.len(), "worker stopping; finishing the steps in hand");
        while tasks.join_next().await.is_some() {}
    }

    /// Runs one claimed step under its heartbeat.
    async fn run_claimed(&self, claimed: Claimed) {
        let step = &claimed.step;
        debug!(step = step.step_id, kind = %step.kind, session = %step.session_id, attempt = step.attempt, "claimed");
        let (lost_tx, mut lost_rx) = watch::channel(false);
        let heartbeat = {
            let store = self.store.clone();
            let claim = claimed.clone();
            let (lease, every) = (self.config.lease, self.config.heartbeat);
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    match store.heartbeat(&claim, lease).await {
                        Ok(_) => {}
                        Err(StoreError::LeaseLost { .. }) => {
                            let _ = lost_tx.send(true);
                            return;
                        }
                        Err(err) => warn!(error = %err, "heartbeat failed; the lease may expire"),
                    }
                }
            })
        };
        let started = std::time::Instant::now();
        let result = tokio::select! {
            result = self.execute(&claimed) => result,
            _ = lost_rx.wait_for(|lost| *lost) => Err(StepError::LeaseLost),
        };
        heartbeat.abort();
        let outcome = match &result {
            Ok(()) => "committed",
            Err(StepError::LeaseLost) => "lease_lost",
            Err(StepError::Engine(_)) => "parked",
            Err(StepError::Store(_)) => "store_error",
        };
        self.metrics.step(&claimed.step.kind, outcome, started.elapsed());
        match result {
            Ok(()) => debug!(step = claimed.step.step_id, "committed"),
            Err(StepError::LeaseLost) => warn!(
                step = claimed.step.step_id,
                kind = %claimed.step.kind,
                session = %claimed.step.session_id,
                fence = claimed.fence,
                "lease lost: the step's result was dropped, another Worker runs it"
            ),
            Err(StepError::Engine(err)) => {
                error!(step = claimed.step.step_id, session = %claimed.step.session_id, error = %err,
                    "the step's rows cannot be used; parked for {} s, nothing was changed", PARKED_RETRY.as_secs());
                let park = tollgate_store::Commit::finish(tollgate_store::Finish::Retry(PARKED_RETRY));
                if let Err(err) = self.store.commit(&claimed, park).await {
                    warn!(error = %err, "could not park the step");
                }
            }
            Err(StepError::Store(err)) => {
                warn!(step = claimed.step.step_id, error = %err, "the store failed; the step runs again when its lease expires");
            }
        }
    }

    async fn execute(&self, claimed: &Claimed) -> Result<(), StepError> {
        let step = &claimed.step;
        match StepInput::parse(&step.kind, step.payload.get())? {
            StepInput::RunModel(input) => run_model::run(self, claimed, &input).await,
            StepInput::AwaitToolApproval(input) => tool_steps::approval(self, claimed, &input).await,
            StepInput::CallTool(input) => tool_steps::call(self, claimed, &input, false).await,
            StepInput::CallSingleAttemptTool(input) => tool_steps::call(self, claimed, &input, true).await,
            StepInput::ResumeTurn(input) => tool_steps::resume(self, claimed, &input).await,
        }
    }

    /// Commits `transition` for the claim; retries a retryable store error a few times.
    pub(crate) async fn commit(
        &self,
        claimed: &Claimed,
        transition: Transition,
    ) -> Result<CommitReceipt, StepError> {
        let commit = convert::commit(transition);
        let mut delay = Duration::from_millis(50);
        for _ in 0..4 {
            match self.store.commit(claimed, commit.clone()).await {
                Err(err) if err.is_retryable() => {
                    warn!(error = %err, "commit failed; trying again");
                    tokio::time::sleep(delay).await;
                    delay *= 4;
                }
                other => return Ok(other?),
            }
        }
        Ok(self.store.commit(claimed, commit).await?)
    }
}
