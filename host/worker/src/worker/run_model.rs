//! `RunModel`: plan the segment from the session's rows, start the CLI with the agent's options
//! and tools, stream its events into the store as they come, and commit how it ended.

use std::ffi::OsString;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc;
use tollgate_claude::launch::{apply_options, prompts_to_initialize};
use tollgate_claude::{
    AppHook, AppHookFuture, CliDecider, DeciderFuture, SegmentEvent, SegmentOutcome, SegmentSpec, Start,
    run_segment, run_segment_on,
};
use tollgate_engine::catalog::DEFAULT_TOOL_SERVER_NAME;
use tollgate_engine::events::{Payload, TurnStarted};
use tollgate_engine::gate::Gate;
use tollgate_engine::hooks::HookCall;
use tollgate_engine::session::batches::AheadState;
use tollgate_engine::session::client::parse_decision;
use tollgate_engine::session::inline;
use tollgate_engine::session::tools::CliRun;
use tollgate_engine::session::turn::{self, PlannedStart, SegmentResult, SegmentRun};
use tollgate_engine::session::{
    CallEntry, ItemKind, NewItem, RunModelStep, RunState, Usage, grants, subagents,
};
use tollgate_protocol::TranscriptEntry;
use tollgate_sandbox::{OptionsContext, ToolSet};
use tollgate_store::Claimed;
use tracing::{info, warn};

use super::flush::flush_events;
use super::inline_writes::{Recorder, SegmentTools};
use super::model_step::{Effect, EndRead, EndReads, Ended, Grants, ModelStep, Rows, Warm};
use super::{StepError, Worker, warm, workspace};
use crate::agent::Agent;
use crate::proxy::SpendLimit;
use crate::telemetry::{InlineTools, Scope, SegmentTrace};
use crate::tool_runner::SandboxTools;
use tollgate_sessions::convert;
use tollgate_sessions::media;
use tollgate_sessions::reads;

/// Runs a `RunModel` step: drives its [`ModelStep`] machine, reading, running the segment and
/// writing what it asks.
pub(super) async fn run(worker: &Worker, claimed: &Claimed, step: &RunModelStep) -> Result<(), StepError> {
    let session_id = &claimed.step.session_id;
    let store = worker.store.as_ref();
    let session = store.session(session_id).await?.ok_or_else(|| {
        tollgate_engine::session::EngineError::Inconsistent(format!(
            "step {} of a missing session",
            claimed.step.step_id
        ))
    })?;
    let state = RunState::parse(session.run_state.get())?;
    let (items, transcript) = reads::plan_inputs(store, session_id).await?;
    let calls = read_calls(store, session_id).await?;
    let claims = turn::Claims { attempt: claimed.step.attempt, lost: claimed.step.lost };
    let config = &worker.agent.config;
    let rows = Rows { state, history: &reads::history(&items), transcript, calls: &calls };
    let (mut machine, mut effect) = ModelStep::plan(&config.policies, step, claims, rows, &config.limits)?;
    if let Some(trace) = super::first_step_trace(claimed) {
        machine.start_trace(trace);
    }
    let mut ran = None;
    loop {
        effect = match effect {
            Effect::RunSegment => {
                let (ended, segment) = segment(worker, claimed, step, &calls, &mut machine).await;
                let effect = machine.notify_ended(ended);
                let result = machine.result().expect("the segment ended");
                let run = machine.run_ref();
                log_end(session_id, &run.turn_id, run.attempt, result);
                ran = Some(segment.finish(result).await?);
                effect
            }
            Effect::ReadEnd(reads) => {
                let turn_id = machine.run_ref().turn_id.clone();
                machine.notify_end_read(read_end(worker, session_id, machine.state(), &turn_id, reads).await?)
            }
            Effect::Cancel { request, cost_usd } => {
                // A write whose tool call still runs gets its record first.
                if let Some(ran) = &ran {
                    ran.recorder.settle().await;
                }
                return super::cancel::apply(worker, claimed, request, cost_usd).await;
            }
            Effect::Review(mut transition) => {
                super::review::review_approvals(worker, session_id, &mut transition, machine.calls()).await;
                machine.notify_reviewed(*transition)
            }
            Effect::Commit(transition) => {
                let outcome = worker.commit(claimed, *transition).await.map(|_| ());
                machine.notify_committed(outcome)?
            }
            Effect::Prestart(warm) => {
                if let Some(next) = ran.and_then(|ran| ran.next_warm) {
                    next.start(worker, warm).await;
                }
                return Ok(());
            }
            Effect::Done => return Ok(()),
        }
    }
}

/// Logs a segment that failed or stopped at a limit.
fn log_end(session_id: &str, turn_id: &str, attempt: i64, result: &SegmentResult) {
    match result {
        SegmentResult::Failed { error, retryable } => {
            warn!(session = %session_id, turn = %turn_id, attempt, retryable, error = %error, "segment failed");
        }
        SegmentResult::LimitReached { error, reason } => {
            warn!(session = %session_id, turn = %turn_id, attempt, reason = reason.as_str(), error = %error, "segment stopped at a limit");
        }
        SegmentResult::Completed { .. } | SegmentResult::Deferred { .. } => {}
    }
}

/// Reads where the session stands at the segment's end, as `reads` asks ([`EndReads`]).
async fn read_end(
    worker: &Worker,
    session_id: &str,
    state: &RunState,
    turn_id: &str,
    reads: EndReads,
) -> Result<EndRead, StepError> {
    let store = worker.store.as_ref();
    let cancel = if reads.cancel { store.pending_cancel(session_id).await? } else { None };
    if cancel.is_some() {
        return Ok(EndRead { cancel, ..EndRead::default() });
    }
    // Inline writes recorded during the segment count in its end (a failing turn's note).
    let calls = read_calls(store, session_id).await?;
    let grants = if reads.grants {
        let revocations = reads::read_all_items_of_kind(store, session_id, ItemKind::GrantRevoked).await?;
        let grants = grants::session_grants(&reads::history(&revocations), &calls)?;
        Some(Grants { grants, ahead: ahead_states(worker, session_id, state, turn_id).await? })
    } else {
        None
    };
    Ok(EndRead { cancel, calls, grants })
}

/// What runs beside a segment while it runs: its trace, the writer of what it streams, the
/// recorder of its inline writes and the launch to pre-start after it.
struct Running {
    trace: SegmentTrace,
    flusher: tokio::task::JoinHandle<Result<InlineTools, StepError>>,
    recorder: Recorder,
    next_warm: Option<NextWarm>,
}

/// A segment that ran: what a cancel waits for, and the launch to pre-start after it.
struct Ran {
    recorder: Recorder,
    next_warm: Option<NextWarm>,
}

impl Running {
    /// Waits until every streamed event is written, and ends the trace with `result`.
    async fn finish(self, result: &SegmentResult) -> Result<Ran, StepError> {
        let Running { trace, flusher, recorder, next_warm } = self;
        let tools = match flusher.await {
            Ok(Ok(tools)) => tools,
            Ok(Err(err)) => return Err(err),
            Err(join) => {
                warn!(error = %join, "the event writer stopped");
                InlineTools::default()
            }
        };
        trace.finish(result, tools);
        Ok(Ran { recorder, next_warm })
    }
}

/// Runs the planned segment with the model proxy's access, the agent's tools and a watch for a
/// client's cancel, and says how it ended. Never fails: every problem is a failed segment.
async fn segment(
    worker: &Worker,
    claimed: &Claimed,
    step: &RunModelStep,
    calls: &[CallEntry],
    machine: &mut ModelStep<'_>,
) -> (Ended, Running) {
    let session_id = &claimed.step.session_id;
    let spent_before_usd = machine.state().cost_usd;
    let run = machine.run_mut();
    info!(session = %session_id, turn = %run.turn_id, attempt = run.attempt, resume = ?step.resume, "segment starting");
    let mut trace = SegmentTrace::start(Scope {
        session_id: session_id.clone(),
        turn_id: run.turn_id.clone(),
        attempt: run.attempt,
        turn: run.trace.clone(),
    });
    let (events_tx, events_rx) = mpsc::unbounded_channel();
    let mut first = Vec::new();
    if step.resume.is_none() {
        first.push(
            Payload::TurnStarted(TurnStarted { turn_id: run.turn_id.clone(), attempt: run.attempt }).into(),
        );
    }
    let flusher = tokio::spawn(flush_events(
        worker.clone(),
        claimed.clone(),
        run.turn_id.clone(),
        run.attempt,
        first,
        events_rx,
    ));
    // The segment's access to the model: a token of the Worker's proxy, revoked when it is dropped
    // below, once the CLI is gone.
    let limit = SpendLimit { limit_usd: worker.agent.config.limits.spend_limit_usd, spent_before_usd };
    let access = match worker.model_proxy().await {
        Ok(proxy) => Ok((proxy.base_url(), proxy.register(limit))),
        Err(err) => Err(err.to_string()),
    };
    // Loaded once: the segment serves them, and an interrupt it opens carries their schemas.
    let tool_set = worker.agent.tools().await;
    if let Ok(tools) = &tool_set {
        super::report_unavailable(worker, tools).await;
    }
    // A client's cancel interrupts the segment as soon as it arrives.
    let cancel = super::cancel::watch(worker.store.clone(), session_id);
    let recorder = Recorder::new(cancel.signal.clone());
    let mut recording = Recording { claimed, calls, recorder: recorder.clone(), subagents: Vec::new() };
    let mut model = None;
    let (result, cli_run) = match (&access, &tool_set) {
        (Ok((base_url, token)), Ok(tools)) => {
            let mut access =
                ModelAccess { base_url, token: token.token(), limit, warm_token: None, next_warm: None };
            let ran = run_cli(worker, run, tools, events_tx, &mut trace, &mut access, &mut recording).await;
            model = Some(access);
            ran
        }
        (Err(error), _) => {
            (SegmentResult::Failed { error: error.clone(), retryable: true }, CliRun::NotStarted)
        }
        (_, Err(err)) => {
            let error = format!("the agent's tools did not load: {err:#}");
            (SegmentResult::Failed { error, retryable: true }, CliRun::NotStarted)
        }
    };
    drop(cancel);
    // A warm CLI the segment ran on came with its own token: the segment's accounting is that one's.
    let (warm_token, next_warm) = model.map_or((None, None), |model| (model.warm_token, model.next_warm));
    let proxy = match &warm_token {
        Some(token) => Some(token.summary()),
        None => access.as_ref().ok().map(|(_, token)| token.summary()),
    };
    if let Some(summary) = &proxy {
        trace.proxied(summary);
    }
    let schemas = match &tool_set {
        Ok(tools) => tools.tools().iter().map(|t| (t.name.clone(), t.input_schema.clone())).collect(),
        Err(_) => Vec::new(),
    };
    let ended = Ended { result, cli_run, proxy, subagents: recording.subagents, schemas };
    (ended, Running { trace, flusher, recorder, next_warm })
}

/// Where the turn's unused interrupts opened ahead stand
/// ([`tollgate_engine::session::batches`]): open, or decided (with who decided and when, from the
/// audit row).
async fn ahead_states(
    worker: &Worker,
    session_id: &str,
    state: &RunState,
    turn_id: &str,
) -> Result<Vec<(String, AheadState)>, StepError> {
    let Some(turn) = state.turn.as_ref().filter(|turn| turn.turn_id == turn_id) else {
        return Ok(Vec::new());
    };
    let mut states = Vec::new();
    for ahead in turn.ahead.iter().filter(|a| a.used_by.is_none()) {
        let interrupt = worker.store.interrupt(session_id, &ahead.interrupt_id).await?;
        let state = match interrupt.and_then(|i| i.resolution) {
            Some(resolution) => {
                let mut decision = parse_decision(resolution.get())?;
                decision.granted =
                    super::tool_steps::decided_by(worker, session_id, &ahead.interrupt_id).await?;
                AheadState::Decided(decision)
            }
            None => AheadState::Open,
        };
        states.push((ahead.interrupt_id.clone(), state));
    }
    Ok(states)
}

/// What records a segment: for its inline writes, the step's claim (and so the session), the
/// session's calls when the segment started (for the writes an earlier attempt of the segment
/// made) and what the step shares with the writes ([`Recorder`]); and the items of the subagent
/// transcripts it ran, stored with its end.
struct Recording<'a> {
    claimed: &'a Claimed,
    calls: &'a [CallEntry],
    recorder: Recorder,
    subagents: Vec<NewItem>,
}

/// The session's deferred and inline calls, as stored.
pub(super) async fn read_calls(
    store: &dyn tollgate_store::Store,
    session_id: &str,
) -> Result<Vec<CallEntry>, StepError> {
    Ok(store
        .tool_calls(session_id)
        .await?
        .iter()
        .map(|record| CallEntry::parse(record.record.get()))
        .collect::<Result<Vec<_>, _>>()?)
}

/// Where a segment's CLI reaches the model: the proxy, the segment's token and its spend limit;
/// and what the segment tells its step about warm CLIs: the token of the warm CLI it ran on
/// (which the proxy's accounting of the segment is), and the launch to pre-start after it.
struct ModelAccess<'a> {
    base_url: &'a str,
    token: &'a str,
    limit: SpendLimit,
    warm_token: Option<crate::proxy::SegmentToken>,
    next_warm: Option<NextWarm>,
}

/// The launch of a segment that ran, to pre-start a CLI like it once the segment's end is
/// committed ([`warm`]).
struct NextWarm {
    spec: SegmentSpec,
    cwd: warm::Cwd,
}

impl NextWarm {
    /// Starts the CLI the step's machine asked for: a resume at once, while the tool step runs; a
    /// fresh one once the Worker has no step in hand.
    async fn start(self, worker: &Worker, which: Warm) {
        let NextWarm { mut spec, cwd } = self;
        match which {
            Warm::Resume(session_id) => {
                spec.start = Start::Resume { session_id, transcript: Default::default(), prompt: None };
                warm::prestart(worker, spec, &cwd, false).await;
            }
            Warm::Fresh => warm::prestart_when_idle(worker, spec, cwd),
        }
    }
}

/// Runs the CLI for `run` and reports how it ended, and what the CLI said about its model calls
/// to `trace`, with what came of the approved CLI call it resumed, if any. Never fails: every
/// problem is a failed segment the state machine retries or turns into the turn's error. The
/// stored transcript moves out of `run.start` into the resume file's text (it can be megabytes;
/// nothing reads it from `run` afterwards).
async fn run_cli(
    worker: &Worker,
    run: &mut SegmentRun,
    tools: &ToolSet,
    events: mpsc::UnboundedSender<SegmentEvent>,
    trace: &mut SegmentTrace,
    model: &mut ModelAccess<'_>,
    recording: &mut Recording<'_>,
) -> (SegmentResult, CliRun) {
    let session_id = recording.claimed.step.session_id.as_str();
    let agent = &worker.agent;
    let failed =
        |error: String, retryable: bool| (SegmentResult::Failed { error, retryable }, CliRun::NotStarted);
    let ctx = OptionsContext {
        session_id: session_id.to_owned(),
        turn_id: run.turn_id.clone(),
        attempt: u32::try_from(run.attempt).unwrap_or(u32::MAX),
    };
    let options = match agent.options(&ctx).await {
        Ok(options) => options,
        Err(err) => {
            let retryable =
                matches!(err, tollgate_sandbox::FactoryError::Call(ref call) if call.is_retryable());
            return failed(err.to_string(), retryable);
        }
    };
    trace.requested_model(options.model.as_deref());
    let runner: Arc<dyn tollgate_claude::tools::ToolRunner> =
        SegmentTools::new(SandboxTools(tools.clone()), worker, recording.claimed, run, &recording.recorder);
    let (gate, start) = match gate_and_start(worker, session_id, run, tools, &runner, recording.calls).await {
        Ok(both) => both,
        Err((error, retryable)) => return failed(error, retryable),
    };
    let fresh = matches!(run.start, PlannedStart::Fresh { .. });
    let (mut spec, cwd_kind) = match launch(worker, session_id, &options, start, model).await {
        Ok(launch) => launch,
        Err(error) => return failed(error, true),
    };
    spec.cancel = Some(recording.recorder.cancelled());
    let taken = warm::take(worker, &spec, &cwd_kind, fresh, model.limit);
    model.next_warm = Some(NextWarm { spec: spec.clone(), cwd: cwd_kind });
    if agent.has_cli_policy() {
        spec.cli_decider = Some(Arc::new(FactoryDecider { agent: agent.clone() }));
    }
    if !spec.app_hook_matchers.is_empty() {
        spec.app_hook = Some(Arc::new(FactoryHooks { agent: agent.clone(), ctx: ctx.clone() }));
    }
    let (report, warm_key) = match taken {
        Some(taken) => {
            let (cli, token, key) = taken.into_parts();
            model.warm_token = Some(token);
            (run_segment_on(spec, Some(cli), gate, runner, Some(events)).await, Some(key))
        }
        None => (run_segment(spec, gate, runner, Some(events)).await, None),
    };
    if let (Some(reason), Some(key)) = (&report.stats.claim_refused, warm_key) {
        warm::claim_refused(worker, session_id, key, reason);
    }
    trace.ran(&report.stats);
    info!(pid = report.stats.pid.unwrap_or_default(), warm = report.stats.warm,
        to_initialized_ms = ?report.stats.to_initialized.map(|d| d.as_millis()),
        to_claimed_ms = ?report.stats.to_claimed.map(|d| d.as_millis()),
        total_ms = report.stats.total.as_millis() as u64, "segment ran");
    let cli_run = report.stats.resumed_cli_call.clone();
    (segment_result(worker, session_id, &run.turn_id, report, recording).await, cli_run)
}

/// The segment's gate (its policies, the turn's records, the inline writes an earlier attempt
/// made, the call it resumes) and how its CLI starts, with the images the CLI reads back (the
/// stored transcript, the prompts, recorded results) loaded from the store first. An error says
/// whether another attempt may do better.
async fn gate_and_start(
    worker: &Worker,
    session_id: &str,
    run: &mut SegmentRun,
    tools: &ToolSet,
    runner: &Arc<dyn tollgate_claude::tools::ToolRunner>,
    calls: &[CallEntry],
) -> Result<(Gate, Start), (String, bool)> {
    let agent = &worker.agent;
    let catalog = match tollgate_claude::tools::catalog(DEFAULT_TOOL_SERVER_NAME, &runner.tools()) {
        // A call of a tool of a component that did not load reads which one, and why.
        Ok(catalog) => tools
            .unavailable()
            .iter()
            .fold(catalog, |catalog, u| catalog.with_unavailable(u.component.clone(), u.reason.clone())),
        Err(err) => return Err((format!("the agent's tools cannot be offered: {err}"), false)),
    };
    let store = worker.store.as_ref();
    let retry = |err: &dyn std::fmt::Display| (err.to_string(), true);
    let mut inline_writes = inline::unseen_writes(run, calls);
    load_replayed_images(store, session_id, run, &mut inline_writes).await.map_err(|e| retry(&e))?;
    let mut gate = Gate::new(agent.config.policies.clone(), catalog)
        .with_turn_records(run.turn_records.iter().cloned())
        .with_inline_writes(inline_writes);
    if agent.has_cli_policy() {
        gate = gate.with_cli_decider();
    }
    let start = match &mut run.start {
        PlannedStart::Fresh { prompts } => Start::Fresh {
            prompt: media::user_prompt(store, session_id, prompts).await.map_err(|e| retry(&e))?,
        },
        PlannedStart::NewTurn { session_id: cli_session, transcript, prompts } => {
            let prompt = media::user_prompt(store, session_id, prompts).await.map_err(|e| retry(&e))?;
            media::restore_transcript(store, session_id, transcript).await.map_err(|e| retry(&e))?;
            Start::Resume {
                session_id: cli_session.clone(),
                transcript: convert::resume_text(std::mem::take(transcript)),
                prompt: Some(prompt),
            }
        }
        PlannedStart::ResumeCall { session_id: cli_session, transcript, pending } => {
            media::restore_transcript(store, session_id, transcript).await.map_err(|e| retry(&e))?;
            gate = gate.resuming(pending.clone());
            Start::Resume {
                session_id: cli_session.clone(),
                transcript: convert::resume_text(std::mem::take(transcript)),
                prompt: None,
            }
        }
    };
    Ok((gate, start))
}

/// The CLI's launch: where it runs (the options' `cwd`, else the session's workspace, made
/// ready), in which box, with what environment (the Worker's CLI settings, the model proxy's
/// access, the options'), the agent's hooks and its system prompt in `initialize`.
async fn launch(
    worker: &Worker,
    session_id: &str,
    options: &tollgate_engine::options::CheckedOptions,
    start: Start,
    model: &ModelAccess<'_>,
) -> Result<(SegmentSpec, warm::Cwd), String> {
    let (cwd, cwd_kind) = match &options.cwd {
        Some(cwd) => (cwd.into(), warm::Cwd::Named),
        None => {
            let root = worker.workspace_root();
            (root.join(workspace::folder_name(session_id)), warm::Cwd::Session { root })
        }
    };
    let mut spec = SegmentSpec::with_start(worker.cli.clone(), cwd, start);
    match worker.box_config().await.map_err(|err| err.to_string())? {
        Some(config) => {
            let copy_workspace = matches!(cwd_kind, warm::Cwd::Session { .. });
            spec.sandbox = Some(tollgate_claude::SegmentBox { config, copy_workspace });
        }
        None => warn!(session = %session_id,
            "this segment's CLI runs without a box (--sandbox none): the agent's commands reach whatever the Worker's user can"),
    }
    spec.env.extend(cli_settings_env());
    spec.env.extend(model_env(model.base_url, model.token, |name| std::env::var_os(name)));
    apply_options(&mut spec, options);
    // The agent's own hooks: registered with the launch (a warm CLI must have the same ones),
    // asked of the options factory with this segment's context.
    spec.app_hook_matchers.clone_from(&options.hooks);
    // The per-session system prompt (the example factory names the session) goes in `initialize`,
    // so every session of the agent has the same launch and a warm CLI can serve it.
    prompts_to_initialize(&mut spec);
    spec.timeout = worker.agent.config.segment_timeout;
    let box_owner = spec.sandbox.as_ref().and_then(|b| b.config.user.owner());
    if let warm::Cwd::Session { root } = &cwd_kind {
        workspace::prepare(root, session_id, box_owner)?;
    }
    Ok((spec, cwd_kind))
}

/// How the segment ended, as the engine takes it: its transcript entries stored with their images
/// by reference (each image once in the session's media), its usage counted with its subagents'
/// model calls; the subagents' transcripts go to `recording`.
async fn segment_result(
    worker: &Worker,
    session_id: &str,
    turn_id: &str,
    report: tollgate_claude::SegmentReport,
    recording: &mut Recording<'_>,
) -> SegmentResult {
    let store = worker.store.as_ref();
    let cost_usd = report.stats.result.as_ref().and_then(|r| r.total_cost_usd);
    // Every model call of the segment counts, its subagents' included (distinct message IDs).
    let model_calls =
        i64::try_from(report.stats.model_calls + report.stats.subagent_model_calls).unwrap_or(i64::MAX);
    let raw =
        |entries: &[TranscriptEntry]| -> Vec<_> { entries.iter().map(|e| e.as_raw().to_owned()).collect() };
    recording.subagents = report
        .outcome
        .subagents()
        .iter()
        .map(|subagent| subagents::subagent_item(turn_id, &subagent.agent_id, &raw(&subagent.entries)))
        .collect();
    match report.outcome {
        SegmentOutcome::Completed { session_id: cli_session, result, entries, usage, .. } => {
            match media::store_entries(store, session_id, raw(&entries)).await {
                Ok(entries) => SegmentResult::Completed {
                    session_id: cli_session,
                    result,
                    entries,
                    usage: usage_of(&usage, model_calls),
                    cost_usd,
                },
                Err(err) => SegmentResult::Failed { error: err.to_string(), retryable: true },
            }
        }
        SegmentOutcome::Deferred { session_id: cli_session, call, entries, usage, .. } => {
            match media::store_entries(store, session_id, raw(&entries)).await {
                Ok(entries) => SegmentResult::Deferred {
                    session_id: cli_session,
                    call,
                    entries,
                    usage: usage_of(&usage, model_calls),
                    cost_usd,
                },
                Err(err) => SegmentResult::Failed { error: err.to_string(), retryable: true },
            }
        }
        other => unfinished(other),
    }
}

/// A segment's usage as the session counts it: every input token (cached or not), the cached
/// ones, the output, and its `model_calls`.
fn usage_of(usage: &tollgate_protocol::Usage, model_calls: i64) -> Usage {
    let total = usage.input_tokens + usage.cache_creation_input_tokens + usage.cache_read_input_tokens;
    Usage {
        input_tokens: i64::try_from(total).unwrap_or(i64::MAX),
        cached_input_tokens: i64::try_from(usage.cache_read_input_tokens).unwrap_or(i64::MAX),
        output_tokens: i64::try_from(usage.output_tokens).unwrap_or(i64::MAX),
        model_calls,
    }
}

/// A segment that did not answer: failed (with the tail of the CLI's stderr when its error does
/// not say it), stopped at a limit, or cancelled — then its step applies the cancel request
/// instead, and without one (never: only this step's commit clears it) another attempt runs.
fn unfinished(outcome: SegmentOutcome) -> SegmentResult {
    match outcome {
        SegmentOutcome::Failed { error } => match error.limit_reason() {
            Some(reason) => SegmentResult::LimitReached { error: error.to_string(), reason },
            None => {
                let retryable = error.is_retryable();
                let mut text = error.to_string();
                let stderr = error.stderr().trim();
                if !stderr.is_empty() && !text.contains(stderr) {
                    let tail: String =
                        stderr.chars().rev().take(600).collect::<Vec<_>>().into_iter().rev().collect();
                    text = format!("{text} (CLI stderr: {tail})");
                }
                SegmentResult::Failed { error: text, retryable }
            }
        },
        SegmentOutcome::Cancelled { killed } => SegmentResult::Failed {
            error: format!(
                "the segment was cancelled{}",
                if killed { " (its CLI was killed after the grace)" } else { "" }
            ),
            retryable: true,
        },
        other => {
            SegmentResult::Failed { error: format!("unexpected segment outcome {other:?}"), retryable: true }
        }
    }
}

/// Loads the bytes of the images the segment may replay: its turn's records (the resumed call's
/// among them) and the inline writes an earlier attempt recorded.
async fn load_replayed_images(
    store: &dyn tollgate_store::Store,
    session_id: &str,
    run: &mut SegmentRun,
    writes: &mut [tollgate_engine::gate::InlineWrite],
) -> Result<(), media::MediaFailure> {
    for record in &mut run.turn_records {
        media::load_record(store, session_id, record).await?;
    }
    if let PlannedStart::ResumeCall { pending, .. } = &mut run.start {
        media::load_record(store, session_id, pending).await?;
    }
    for write in writes {
        media::load_images(store, session_id, &mut write.images).await?;
    }
    Ok(())
}

/// The Worker's CLI settings a segment's CLI gets: tuning, never credentials. Everything else of
/// the Worker's environment stays out (the segment's environment is an allow-list,
/// [`tollgate_claude::transport::inherited_allowed_variables`]); the options' `env` comes after and
/// wins.
const CLI_SETTINGS: &[&str] = &[
    "CLAUDE_CODE_MAX_RETRIES",
    "CLAUDE_CODE_MAX_OUTPUT_TOKENS",
    "API_TIMEOUT_MS",
    "ANTHROPIC_MODEL",
    "ANTHROPIC_SMALL_FAST_MODEL",
    "ANTHROPIC_DEFAULT_OPUS_MODEL",
    "ANTHROPIC_DEFAULT_SONNET_MODEL",
    "ANTHROPIC_DEFAULT_HAIKU_MODEL",
];

fn cli_settings_env() -> Vec<(OsString, OsString)> {
    CLI_SETTINGS.iter().filter_map(|name| Some((OsString::from(name), std::env::var_os(name)?))).collect()
}

/// How the CLI reaches the model: the proxy's URL and the segment's token as its API key. When the
/// Worker has an outbound proxy set, loopback is added to `NO_PROXY` so the CLI reaches the model
/// proxy directly (docs/PROTOCOL.md, "Launch"). `var` reads the Worker's environment.
fn model_env(
    base_url: &str,
    token: &str,
    var: impl Fn(&str) -> Option<OsString>,
) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> =
        vec![("ANTHROPIC_BASE_URL".into(), base_url.into()), ("ANTHROPIC_API_KEY".into(), token.into())];
    let proxied = ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"]
        .iter()
        .any(|name| var(name).is_some_and(|v| !v.is_empty()));
    if proxied {
        for name in ["NO_PROXY", "no_proxy"] {
            let existing = var(name).map(|v| v.to_string_lossy().into_owned());
            if name == "no_proxy" && existing.is_none() {
                continue;
            }
            let existing = existing.unwrap_or_default();
            let has = |host: &str| existing.split(',').any(|h| h.trim() == host);
            let mut value = existing.clone();
            for host in ["127.0.0.1", "localhost"] {
                if !has(host) {
                    if !value.is_empty() {
                        value.push(',');
                    }
                    value.push_str(host);
                }
            }
            env.push((name.into(), value.into()));
        }
    }
    env
}

/// The options factory's `decide-cli-tool`, which the segment asks from a task of its own.
struct FactoryDecider {
    agent: Arc<Agent>,
}

impl CliDecider for FactoryDecider {
    fn decide(&self, tool_name: String, input: Value) -> DeciderFuture {
        let agent = self.agent.clone();
        Box::pin(async move {
            let Some(factory) = agent.factory() else { return Ok(None) };
            factory.decide_cli_tool(&tool_name, &input.to_string()).await.map_err(|e| e.to_string())
        })
    }
}

/// The options factory's `hooks.on-hook`, which the segment asks from a task of its own with the
/// segment's context (the one its options were built with).
struct FactoryHooks {
    agent: Arc<Agent>,
    ctx: OptionsContext,
}

impl AppHook for FactoryHooks {
    fn call(&self, call: HookCall) -> AppHookFuture {
        let (agent, ctx) = (self.agent.clone(), self.ctx.clone());
        Box::pin(async move {
            let Some(factory) = agent.factory() else {
                return Err("the agent has no options factory to run its hooks".to_owned());
            };
            factory.on_hook(&ctx, &call).await.map_err(|e| e.to_string())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cli_reaches_the_model_through_the_proxy_with_its_token_and_loopback_is_not_proxied() {
        let worker_env = |name: &str| match name {
            "HTTPS_PROXY" => Some(OsString::from("http://proxy:3128")),
            "NO_PROXY" => Some(OsString::from("internal.example")),
            "ANTHROPIC_API_KEY" => Some(OsString::from("sk-real")),
            _ => None,
        };
        let env = model_env("http://127.0.0.1:5", "tgp-1-abc", worker_env);
        let get =
            |name: &str| env.iter().find(|(n, _)| n == name).map(|(_, v)| v.to_string_lossy().into_owned());
        assert_eq!(get("ANTHROPIC_BASE_URL").as_deref(), Some("http://127.0.0.1:5"));
        assert_eq!(get("ANTHROPIC_API_KEY").as_deref(), Some("tgp-1-abc"));
        assert_eq!(get("NO_PROXY").as_deref(), Some("internal.example,127.0.0.1,localhost"));
        assert_eq!(get("no_proxy"), None);
        assert!(env.iter().all(|(_, v)| v != "sk-real"));
        let direct = model_env("http://127.0.0.1:5", "t", |_| None);
        assert_eq!(direct.len(), 2, "no outbound proxy, no NO_PROXY");
    }
}
