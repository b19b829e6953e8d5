//! Recorded inline writes: the segment's tool runner, which runs an approval-free idempotent
//! write inside the segment and commits its record before the CLI reads the result.
//!
//! [`SegmentTools`] is the sandbox's tool set ([`SandboxTools`]) plus the segment's claim: reads
//! run as before ([`ToolRunner::call`]); a write the gate permitted as
//! [`McpPermit::RunRecorded`](tollgate_engine::gate::McpPermit::RunRecorded) goes to
//! [`ToolRunner::call_recorded`], which follows `tollgate_engine::session::inline`:
//!
//! 1. commit `started` (attempt n) under the claim's fence, with the step kept;
//! 2. run the tool with its `deferred-execution` (the key `<session>/<turn>/<tool call>`, the
//!    attempt) — the same as the `CallTool` step ([`super::tool_steps`]);
//! 3. commit the final record (or the attempt's failure, then the next attempt after a pause);
//! 4. only then answer the CLI with the record's result.
//!
//! A commit that fails (the lease was lost, the store is gone past the lease) returns
//! [`NotRecorded`]: the tool server never answers the call and the segment stops, so the CLI
//! never reads a result that is not durable.
//!
//! # Caveats
//!
//! - Once a client cancels the turn no attempt starts: the call is not answered. The step waits
//!   for a write that runs to get its record ([`Recorder::settle`]); the cancel records one still
//!   `started` (its Worker died, or it ran past the wait) as `outcome_unknown`.
//! - A Worker killed between the tool's run and the record's commit leaves `started`: the
//!   segment's rerun calls the tool again under the same key (the tool is idempotent), counting
//!   the attempt.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tollgate_claude::tools::{CallFuture, NotRecorded, RecordedCall, RecordedFuture, ToolRunner, ToolSpec};
use tollgate_engine::record::ToolResult;
use tollgate_engine::session::inline::{self, After, Begin};
use tollgate_engine::session::turn::SegmentRun;
use tollgate_engine::session::{CallEntry, TurnTrace};
use tollgate_sandbox::DeferredExecution;
use tollgate_store::Claimed;
use tracing::warn;

use super::{StepError, Worker, tool_steps};
use crate::telemetry::{Scope, ToolTrace};
use crate::tool_runner::SandboxTools;

/// The environment variable of a test fault point: when it is `after_inline_record`, the Worker
/// process SIGKILLs itself right after an inline write's record committed, before the CLI reads
/// the result. Only the crash tests set it.
pub const FAULT_ENV: &str = "TOLLGATE_TEST_FAULT";

/// The segment's custom tools: the sandbox's, with the claim that records inline writes.
pub(super) struct SegmentTools {
    pub(super) sandbox: SandboxTools,
    pub(super) worker: Worker,
    pub(super) claimed: Claimed,
    pub(super) turn_id: String,
    /// The turn's trace, the parent of the writes' spans.
    pub(super) turn: Option<TurnTrace>,
    /// Turns `true` when a client cancels the turn: no attempt of a write starts after that.
    pub(super) cancel: tokio::sync::watch::Receiver<bool>,
    /// Held (read) by every write while it runs, so the step can wait for them to end.
    pub(super) in_flight: Arc<tokio::sync::RwLock<()>>,
}

impl SegmentTools {
    /// The tools of `sandbox`, recording under `claimed` for `run`'s turn (see [`Recorder`]).
    pub(super) fn new(
        sandbox: SandboxTools,
        worker: &Worker,
        claimed: &Claimed,
        run: &SegmentRun,
        recorder: &Recorder,
    ) -> Arc<Self> {
        Arc::new(SegmentTools {
            sandbox,
            worker: worker.clone(),
            claimed: claimed.clone(),
            turn_id: run.turn_id.clone(),
            turn: run.trace.clone(),
            cancel: recorder.cancel.clone(),
            in_flight: recorder.in_flight.clone(),
        })
    }

    async fn commit(&self, transition: tollgate_engine::session::Transition) -> Result<(), NotRecorded> {
        self.worker.commit(&self.claimed, transition).await.map(|_| ()).map_err(|err: StepError| {
            warn!(session = %self.claimed.step.session_id, error = %err, "an inline write's commit failed; stopping the segment");
            NotRecorded { message: err.to_string() }
        })
    }

    async fn record(
        &self,
        name: &str,
        arguments: &Value,
        call: RecordedCall<'_>,
    ) -> Result<ToolResult, NotRecorded> {
        let session_id = &self.claimed.step.session_id;
        // Held until this write has its record (or its future is dropped).
        let _running = self.in_flight.read().await;
        let entry = inline::write(&self.turn_id, &call.run.record_id, name, arguments.clone());
        let mut attempt = call.run.attempts_before + 1;
        loop {
            if *self.cancel.borrow() {
                // The turn is being cancelled: its cancel records what already started.
                return Err(NotRecorded { message: "the turn was cancelled".into() });
            }
            let (idempotency_key, attempt_u32) = match inline::begin(session_id, &entry, attempt) {
                Begin::Recorded { call: done, transition } => {
                    self.commit(*transition).await?;
                    return Ok(result_of(self.worker.store.as_ref(), session_id, &done, call.cli_name).await);
                }
                Begin::Run { idempotency_key, attempt, mark_started } => {
                    // Durable before the side effect: a Worker that dies during the call leaves it.
                    self.commit(*mark_started).await?;
                    (idempotency_key, attempt)
                }
            };
            let execution = DeferredExecution {
                session_id: session_id.clone(),
                turn_id: self.turn_id.clone(),
                tool_call_id: entry.tool_call_id.clone(),
                attempt: attempt_u32,
                idempotency_key,
            };
            let scope = Scope {
                session_id: session_id.clone(),
                turn_id: self.turn_id.clone(),
                attempt,
                turn: self.turn.clone(),
            };
            let trace = ToolTrace::start(scope, name, &entry.tool_call_id);
            let (run, stderr) =
                tool_steps::run_in_sandbox(&self.worker, &self.sandbox.0, name, arguments, &execution).await;
            trace.finish(&run);
            // Its stderr when it failed goes in its record, not to the model.
            let entry =
                CallEntry { diagnostics: stderr.or_else(|| entry.diagnostics.clone()), ..entry.clone() };
            match inline::on_result(&entry, attempt, run) {
                After::Recorded { call: done, transition } => {
                    self.commit(*transition).await?;
                    if std::env::var(FAULT_ENV).as_deref() == Ok("after_inline_record") {
                        warn!("fault point after_inline_record: the Worker kills itself");
                        // SAFETY: kill(2) on this process; no memory is touched.
                        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
                    }
                    return Ok(result_of(self.worker.store.as_ref(), session_id, &done, call.cli_name).await);
                }
                After::Retry { transition, delay } => {
                    self.commit(*transition).await?;
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
            }
        }
    }
}

/// How long a cancelled segment's step waits for its writes in flight to get their records
/// ([`Recorder::settle`]).
pub(super) const SETTLE: Duration = Duration::from_secs(30);

/// What a segment's step shares with its inline writes: the signal that a client cancelled the
/// turn (no attempt starts after it), and a lock every write holds while it runs, so the step can
/// wait for them before it records the cancel. The CLI stops first: a write's tool call goes on
/// in the background, and its record would otherwise race the cancel's.
#[derive(Clone, Debug)]
pub(super) struct Recorder {
    cancel: tokio::sync::watch::Receiver<bool>,
    in_flight: Arc<tokio::sync::RwLock<()>>,
}

impl Recorder {
    /// A recorder whose writes stop starting once `cancel` turns `true`.
    pub(super) fn new(cancel: tokio::sync::watch::Receiver<bool>) -> Self {
        Recorder { cancel, in_flight: Arc::default() }
    }

    /// The cancel signal, for the segment's CLI.
    pub(super) fn cancelled(&self) -> tokio::sync::watch::Receiver<bool> {
        self.cancel.clone()
    }

    /// Waits until no write runs ([`SETTLE`] at most): each has its record, or was dropped and
    /// left `started`.
    pub(super) async fn settle(&self) {
        if tokio::time::timeout(SETTLE, self.in_flight.write()).await.is_err() {
            warn!("an inline write still runs after {} s; its record stays `started`", SETTLE.as_secs());
        }
    }
}

/// What the CLI reads for a recorded write: its record's result, as a replay would show it (its
/// images read back from the store).
async fn result_of(
    store: &dyn tollgate_store::Store,
    session_id: &str,
    call: &CallEntry,
    cli_name: &str,
) -> ToolResult {
    let Some(mut record) = call.record() else {
        return ToolResult::text(format!("{cli_name} has no record"), true);
    };
    if let Err(err) = tollgate_sessions::media::load_record(store, session_id, &mut record).await {
        // The record is committed: its result names the images not loaded.
        warn!(session = %session_id, error = %err, "the images of a recorded write were not read back");
    }
    record.tool_result(cli_name)
}

impl ToolRunner for SegmentTools {
    fn tools(&self) -> Vec<ToolSpec> {
        self.sandbox.tools()
    }

    fn call<'a>(&'a self, name: &'a str, arguments: &'a Value) -> CallFuture<'a> {
        self.sandbox.call(name, arguments)
    }

    fn call_recorded<'a>(
        &'a self,
        name: &'a str,
        arguments: &'a Value,
        call: RecordedCall<'a>,
    ) -> RecordedFuture<'a> {
        Box::pin(self.record(name, arguments, call))
    }
}
