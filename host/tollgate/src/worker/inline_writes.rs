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
//! - A Worker killed between the tool's run and the record's commit leaves `started`: the
//!   segment's rerun calls the tool again under the same key (the tool is idempotent), counting
//!   the attempt.

use std::sync::Arc;

use serde_json::Value;
use tollgate_claude::tools::{CallFuture, NotRecorded, RecordedCall, RecordedFuture, ToolRunner, ToolSpec};
use tollgate_engine::record::ToolResult;
use tollgate_engine::session::CallEntry;
use tollgate_engine::session::inline::{self, After, Begin};
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
}

impl SegmentTools {
    /// The tools of `sandbox`, recording under `claimed` for `turn_id`.
    pub(super) fn new(sandbox: SandboxTools, worker: &Worker, claimed: &Claimed, turn_id: &str) -> Arc<Self> {
        Arc::new(SegmentTools {
            sandbox,
            worker: worker.clone(),
            claimed: claimed.clone(),
            turn_id: turn_id.to_owned(),
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
        let entry = inline::write(&self.turn_id, &call.run.record_id, name, arguments.clone());
        let mut attempt = call.run.attempts_before + 1;
        loop {
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
            let scope = Scope { session_id: session_id.clone(), turn_id: self.turn_id.clone(), attempt };
            let trace = ToolTrace::start(scope, name, &entry.tool_call_id);
            let run =
                tool_steps::run_in_sandbox(&self.worker, &self.sandbox.0, name, arguments, &execution).await;
            trace.finish(&run);
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
    if let Err(err) = crate::media::load_record(store, session_id, &mut record).await {
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
