//! The steps of a deferred call: `AwaitToolApproval`, `CallTool`, `CallSingleAttemptTool`,
//! `ResumeTurn`. The tool runs in the sandbox with its `deferred-execution` (attempt and
//! idempotency key) set.

use tollgate_engine::session::client::{DecisionScope, GrantStamp, parse_decision};
use tollgate_engine::session::tools::{self as rules, Begin, ToolRun};
use tollgate_engine::session::{CALL_TOOL_ATTEMPTS, CallEntry, CallStep, EngineError, Finish};
use tollgate_sandbox::{CallError, Content, DeferredExecution, Reach, ToolSet};
use tollgate_store::{Claimed, NewMedia};
use tracing::{info, warn};

use super::{StepError, Worker};
use crate::telemetry::{Scope, ToolTrace};
use tollgate_sessions::media;
use tollgate_sessions::reads;

async fn load_call(worker: &Worker, claimed: &Claimed, step: &CallStep) -> Result<CallEntry, StepError> {
    let session = &claimed.step.session_id;
    let record = worker.store.tool_call(session, &step.tool_call_id).await?.ok_or_else(|| {
        EngineError::Inconsistent(format!(
            "step {} names tool call {}, which has no record",
            claimed.step.step_id, step.tool_call_id
        ))
    })?;
    Ok(CallEntry::parse(record.record.get())?)
}

/// `AwaitToolApproval`, queued by the interrupt's resolution.
pub(super) async fn approval(worker: &Worker, claimed: &Claimed, step: &CallStep) -> Result<(), StepError> {
    let call = load_call(worker, claimed, step).await?;
    // The call's own interrupt, or the one opened ahead in a batch that it waits on.
    let interrupt_id = call.decided_ahead.as_ref().map_or(&step.tool_call_id, |ahead| &ahead.decision_id);
    let interrupt =
        worker.store.interrupt(&claimed.step.session_id, interrupt_id).await?.ok_or_else(|| {
            EngineError::Inconsistent(format!("no interrupt {interrupt_id} for the waiting approval"))
        })?;
    let Some(resolution) = interrupt.resolution else {
        return Err(EngineError::Inconsistent(format!("interrupt {interrupt_id} is not resolved yet")).into());
    };
    let mut decision = parse_decision(resolution.get())?;
    if (decision.approved && decision.scope == DecisionScope::Session) || call.decided_ahead.is_some() {
        // The grant (or the record of a decision made ahead) names who decided and when: the
        // decision's audit row.
        decision.granted = decided_by(worker, &claimed.step.session_id, interrupt_id).await?;
    }
    worker.commit(claimed, rules::on_approval(&call, &decision)).await?;
    Ok(())
}

/// Who decided interrupt `interrupt_id` and when: its latest audit row (none for an interrupt
/// nobody decided).
pub(super) async fn decided_by(
    worker: &Worker,
    session_id: &str,
    interrupt_id: &str,
) -> Result<Option<GrantStamp>, StepError> {
    let rows = reads::decisions(worker.store.as_ref(), session_id).await?;
    Ok(rows
        .iter()
        .rev()
        .find(|row| row.interrupt_id == interrupt_id)
        .map(|row| GrantStamp { granted_by: row.principal.clone(), granted_at: row.decided_at }))
}

/// `CallTool` (`single_attempt == false`) or `CallSingleAttemptTool`.
pub(super) async fn call(
    worker: &Worker,
    claimed: &Claimed,
    step: &CallStep,
    single_attempt: bool,
) -> Result<(), StepError> {
    let session = &claimed.step.session_id;
    let call = load_call(worker, claimed, step).await?;
    let (key, attempt) = match rules::begin_tool_step(session, single_attempt, claimed.step.attempt, &call) {
        Begin::Finish(transition) => {
            let ran_out = claimed.step.attempt > CALL_TOOL_ATTEMPTS;
            if call.state.outcome().is_none() {
                info!(session = %session, tool_call = %call.tool_call_id, attempt = claimed.step.attempt,
                    "not running the call again: {}", if ran_out { "attempts ran out" } else { "a single-attempt call that started" });
            }
            worker.commit(claimed, *transition).await?;
            if ran_out && !single_attempt && call.state.outcome().is_none() {
                // Its Worker stopped on every attempt.
                worker.metrics.poison_step(&claimed.step.kind);
            }
            return Ok(());
        }
        Begin::Run { idempotency_key, attempt, mark_started } => {
            // Durable before the side effect: a Worker that dies during the call leaves this mark.
            worker.commit(claimed, *mark_started).await?;
            (idempotency_key, attempt)
        }
    };
    let execution = DeferredExecution {
        session_id: session.clone(),
        turn_id: call.turn_id.clone(),
        tool_call_id: call.tool_call_id.clone(),
        attempt,
        idempotency_key: key,
    };
    let scope = Scope {
        session_id: session.clone(),
        turn_id: call.turn_id.clone(),
        attempt: i64::from(attempt),
        turn: worker.stored_turn_trace(session).await,
    };
    let trace = ToolTrace::start(scope, &call.tool_name, &call.tool_call_id);
    let (run, stderr) = match worker.agent.tools().await {
        // Nothing ran.
        Err(err) => {
            (ToolRun::Contained { message: format!("the agent's tools did not load: {err:#}") }, None)
        }
        Ok(tools) => {
            super::report_unavailable(worker, &tools).await;
            run_in_sandbox(worker, &tools, &call.tool_name, &call.arguments, &execution).await
        }
    };
    // What the tool wrote to stderr when it failed goes in its record, for operators (the model
    // reads the failure's message only).
    let call = CallEntry { diagnostics: stderr.or_else(|| call.diagnostics.clone()), ..call };
    trace.finish(&run);
    if let ToolRun::Contained { message } | ToolRun::Failed { message } | ToolRun::Error { message } = &run {
        warn!(session = %session, tool_call = %call.tool_call_id, attempt, error = %message, "tool call failed");
    }
    let errored = matches!(run, ToolRun::Error { .. });
    let transition = rules::on_tool_result(single_attempt, i64::from(attempt), &call, run);
    let gave_up = errored && !single_attempt && matches!(transition.finish, Finish::Done(_));
    worker.commit(claimed, transition).await?;
    if gave_up {
        // Every attempt failed: the call is recorded `outcome_unknown` and the turn goes on.
        worker.metrics.poison_step(&claimed.step.kind);
    }
    Ok(())
}

/// Runs a custom tool with its `deferred-execution` and says how the run ended, with what the
/// guest wrote to stderr when it failed by its own report (a traceback: for the record, not the
/// model). In a dry fork nothing runs: the original's record answers, or the call is refused
/// ([`tollgate_engine::session::fork::dry_answer`]).
pub(super) async fn run_in_sandbox(
    worker: &Worker,
    tools: &ToolSet,
    tool_name: &str,
    arguments: &serde_json::Value,
    execution: &DeferredExecution,
) -> (ToolRun, Option<String>) {
    match dry_original(worker, &execution.session_id).await {
        Ok(None) => {}
        Ok(Some(records)) => {
            info!(session = %execution.session_id, tool = tool_name, "a dry fork's write: answered from the original's records");
            return (tollgate_engine::session::fork::dry_answer(tool_name, arguments, &records), None);
        }
        // Nothing ran, and nothing may run before the fork is known not to be dry.
        Err(message) => return (ToolRun::Contained { message }, None),
    }
    if tools.get(tool_name).is_none() {
        // A tool of a component that did not load reads which one, and why.
        let message = match tools.not_loaded(tool_name) {
            CallError::UnknownTool { .. } => {
                tollgate_engine::texts::render(tollgate_engine::texts::TOOL_NOT_OFFERED, tool_name)
            }
            unavailable => unavailable.to_string(),
        };
        return (ToolRun::Refused { message }, None);
    }
    let report = tools.call_reporting(tool_name, &arguments.to_string(), Some(execution)).await;
    match report.result {
        Ok(output) => {
            // The record keeps the text and, stored once in the session's media, the images.
            let mut texts = Vec::new();
            let mut images = Vec::new();
            for content in output.content {
                match content {
                    Content::Text { text } => texts.push(text),
                    Content::Image { media_type, data } => images.push(NewMedia { media_type, data }),
                }
            }
            let images = match media::store_output_images(
                worker.store.as_ref(),
                &execution.session_id,
                images,
            )
            .await
            {
                Ok(images) => images,
                Err(err) => {
                    // The tool ran: its result is recorded, and the model told of what is missing.
                    warn!(session = %execution.session_id, tool = tool_name, error = %err, "the images of a tool result were not stored");
                    texts.push(format!("[the images of this result could not be stored: {err}]"));
                    Vec::new()
                }
            };
            (ToolRun::Output { text: texts.join("\n"), is_error: output.is_error, images }, None)
        }
        Err(err) => {
            if matches!(
                err,
                CallError::Trapped { .. }
                    | CallError::DeadlineExceeded { .. }
                    | CallError::MemoryLimit { .. }
            ) {
                worker.metrics.sandbox_trap();
            }
            let stderr = err.guest_stderr().map(str::to_owned);
            (tool_run_of(err, report.reach), stderr)
        }
    }
}

/// The calls of the session's original when the session is a dry fork (`None`: it is not one).
async fn dry_original(worker: &Worker, session_id: &str) -> Result<Option<Vec<CallEntry>>, String> {
    let unread =
        |err: &dyn std::fmt::Display| format!("whether this session is a dry fork could not be read: {err}");
    let lineage = worker.store.lineage(session_id).await.map_err(|e| unread(&e))?;
    let Some(lineage) = lineage.filter(|l| l.dry) else { return Ok(None) };
    let records = worker.store.tool_calls(&lineage.parent_id).await.map_err(|e| unread(&e))?;
    // A record that does not parse answers nothing: the call is refused rather than run.
    Ok(Some(records.iter().filter_map(|r| CallEntry::parse(r.record.get()).ok()).collect()))
}

/// How a sandbox error is recorded ([`tollgate_engine::session::tools::settle`] decides what each
/// means for the call): arguments that never reached the tool are refused; a failure of a call
/// whose every request never left the machine is contained; a tool's own permanent failure and
/// everything else (a thrown exception, a panic, a deadline) may have taken effect.
fn tool_run_of(err: CallError, reach: Reach) -> ToolRun {
    match err {
        CallError::InvalidArguments { problems, .. } => {
            ToolRun::Refused { message: format!("Input validation error: {}", problems.join("; ")) }
        }
        CallError::InvalidJson { reason, .. } => {
            ToolRun::Refused { message: format!("Input validation error: {reason}") }
        }
        CallError::UnknownTool { tool } => ToolRun::Refused {
            message: tollgate_engine::texts::render(tollgate_engine::texts::TOOL_NOT_OFFERED, &tool),
        },
        unavailable @ CallError::Unavailable { .. } => ToolRun::Refused { message: unavailable.to_string() },
        other if reach == Reach::Contained => ToolRun::Contained { message: other.message_for_model() },
        CallError::Failed { message, .. } => ToolRun::Failed { message },
        other => ToolRun::Error { message: other.to_string() },
    }
}

/// `ResumeTurn`.
pub(super) async fn resume(worker: &Worker, claimed: &Claimed, step: &CallStep) -> Result<(), StepError> {
    let call = load_call(worker, claimed, step).await?;
    if call.requested_by.is_some() {
        // An MCP client's call: no CLI resumes, the turn ends.
        return super::mcp_calls::recorded(worker, claimed, &call).await;
    }
    worker.commit(claimed, rules::on_resume_turn(step)).await?;
    Ok(())
}
