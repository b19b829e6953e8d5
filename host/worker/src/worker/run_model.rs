//! `RunModel`: plan the segment from the session's rows, start the CLI with the agent's options
//! and tools, stream its events into the store as they come, and commit how it ended.

use std::ffi::OsString;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;
use tollgate_claude::launch::{apply_options, prompts_to_initialize};
use tollgate_claude::{
    AppHook, AppHookFuture, CliDecider, DeciderFuture, SegmentEvent, SegmentOutcome, SegmentSpec, Start,
    run_segment, run_segment_on,
};
use tollgate_engine::catalog::{DEFAULT_TOOL_SERVER_NAME, ToolKind};
use tollgate_engine::events::{
    EventKind, Payload, TextBlock, ToolCallFinished, ToolCallStarted, TurnStarted,
};
use tollgate_engine::gate::Gate;
use tollgate_engine::hooks::HookCall;
use tollgate_engine::session::batches::AheadState;
use tollgate_engine::session::client::parse_decision;
use tollgate_engine::session::inline;
use tollgate_engine::session::tools::{CliRun, on_cli_run};
use tollgate_engine::session::turn::{self, Plan, PlannedStart, SegmentResult, SegmentRun};
use tollgate_engine::session::{
    CallEntry, FailureReason, ItemKind, NewEvent, NewItem, RunModelStep, RunState, StepKind, Transition,
    Usage, grants, subagents,
};
use tollgate_protocol::TranscriptEntry;
use tollgate_sandbox::{OptionsContext, ToolSet};
use tollgate_store::{Claimed, NewLiveText};
use tracing::{info, warn};

use super::inline_writes::{Recorder, SegmentTools};
use super::{StepError, Worker, warm, workspace};
use crate::agent::Agent;
use crate::proxy::{ProxySummary, SpendLimit};
use crate::telemetry::{InlineTools, Scope, SegmentTrace};
use crate::tool_runner::SandboxTools;
use tollgate_sessions::convert;
use tollgate_sessions::edits;
use tollgate_sessions::media;
use tollgate_sessions::reads;

/// How often streamed text and events are written while a segment runs ([`flush_events`]).
const EVENT_FLUSH: Duration = Duration::from_millis(200);

/// The unstored text at which a flush stores it as a `text_delta` block, so the live-text row it
/// overwrites stays at most about this long (plus one flush of text). A smaller bound stores more
/// rows, a larger one rewrites more bytes each flush: bench `stream_writes` measured 512, 1024
/// and 2048, and 512 is the one whose PostgreSQL WAL per segment is no larger than before
/// (0.9-1.0x, 1.2x and 1.8x for a 24,000-character reply) while rows still drop ~9x.
const LIVE_BLOCK_BYTES: usize = 512;

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
    let plan = turn::plan_run_model(
        step,
        claims,
        &state,
        &reads::history(&items),
        transcript,
        &calls,
        &worker.agent.config.limits,
    )?;
    let mut run = match plan {
        Plan::Finish(transition) => {
            let mut transition = *transition;
            inline::settle_on_turn_failure(&mut transition, &calls);
            worker.commit(claimed, transition).await?;
            return Ok(());
        }
        Plan::Run(run) => run,
    };
    info!(session = %session_id, turn = %run.turn_id, attempt = run.attempt, resume = ?step.resume, "segment starting");

    let mut trace = SegmentTrace::start(Scope {
        session_id: session_id.clone(),
        turn_id: run.turn_id.clone(),
        attempt: run.attempt,
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
    let limit = SpendLimit {
        limit_usd: worker.agent.config.limits.spend_limit_usd,
        spent_before_usd: state.cost_usd,
    };
    let access = match worker.model_proxy().await {
        Ok(proxy) => Ok((proxy.base_url(), proxy.register(limit))),
        Err(err) => Err(err.to_string()),
    };
    // A warm CLI the segment ran on came with its own token: the segment's accounting is that one's.
    let mut warm_token = None;
    let mut next_warm = None;
    let mut cli_run = CliRun::NotStarted;
    // Loaded once: the segment serves them, and an interrupt it opens carries their schemas.
    let tool_set = worker.agent.tools().await;
    if let Ok(tools) = &tool_set {
        super::report_unavailable(worker, tools).await;
    }
    // A client's cancel interrupts the segment as soon as it arrives.
    let cancel = super::cancel::watch(worker.store.clone(), session_id);
    let recorder = Recorder::new(cancel.signal.clone());
    // The transcripts of the subagents that ran in the segment, stored with its end.
    let mut subagent_items = Vec::new();
    let result = match (&access, &tool_set) {
        (Ok((base_url, token)), Ok(tools)) => {
            let mut model =
                ModelAccess { base_url, token: token.token(), limit, warm_token: None, next_warm: None };
            let mut recording =
                Recording { claimed, calls: &calls, recorder: recorder.clone(), subagents: Vec::new() };
            let result;
            (result, cli_run) =
                segment(worker, &mut run, tools, events_tx, &mut trace, &mut model, &mut recording).await;
            (warm_token, next_warm) = (model.warm_token, model.next_warm);
            subagent_items = recording.subagents;
            result
        }
        (Err(error), _) => {
            drop(events_tx);
            SegmentResult::Failed { error: error.clone(), retryable: true }
        }
        (_, Err(err)) => {
            drop(events_tx);
            SegmentResult::Failed {
                error: format!("the agent's tools did not load: {err:#}"),
                retryable: true,
            }
        }
    };
    let summary = match &warm_token {
        Some(token) => Some(token.summary()),
        None => access.as_ref().ok().map(|(_, token)| token.summary()),
    };
    drop(warm_token);
    drop(access);
    let result = match &summary {
        Some(summary) => {
            trace.proxied(summary);
            with_proxy_accounting(result, summary)
        }
        None => result,
    };
    // A failed segment's requests cost money too: they count against the limit.
    let failed_cost = match (&result, &summary) {
        (SegmentResult::Failed { .. } | SegmentResult::LimitReached { .. }, Some(summary)) => {
            summary.cost_usd
        }
        _ => 0.0,
    };
    // Every streamed event is written before the segment's end.
    let tools = match flusher.await {
        Ok(Ok(tools)) => tools,
        Ok(Err(err)) => return Err(err),
        Err(join) => {
            warn!(error = %join, "the event writer stopped");
            InlineTools::default()
        }
    };
    trace.finish(&result, tools);
    drop(cancel);
    // A cancel asked while the segment ran wins over how it ended, unless the turn completed.
    let asked = match &result {
        SegmentResult::Completed { .. } => None,
        _ => store.pending_cancel(session_id).await?,
    };
    if let Some(request) = asked {
        // A write whose tool call still runs gets its record first.
        recorder.settle().await;
        let cost = summary.as_ref().map_or(0.0, |summary| summary.cost_usd);
        return super::cancel::apply(worker, claimed, request, cost).await;
    }
    match &result {
        SegmentResult::Failed { error, retryable } => {
            warn!(session = %session_id, turn = %run.turn_id, attempt = run.attempt, retryable, error = %error, "segment failed");
        }
        SegmentResult::LimitReached { error, reason } => {
            warn!(session = %session_id, turn = %run.turn_id, attempt = run.attempt, reason = reason.as_str(), error = %error, "segment stopped at a limit");
        }
        _ => {}
    }
    // Inline writes recorded during the segment count in its end (a failing turn's note).
    let mut calls = read_calls(store, session_id).await?;
    // So does the run of the approved CLI call the segment resumed: its record comes from it.
    let cli_record = step
        .resume
        .as_ref()
        .and_then(|id| calls.iter().find(|call| &call.tool_call_id == id && call.turn_id == run.turn_id))
        .and_then(|call| on_cli_run(call, cli_run));
    if let Some((recorded, _)) = &cli_record
        && let Some(call) = calls.iter_mut().find(|call| call.tool_call_id == recorded.tool_call_id)
    {
        *call = recorded.clone();
    }
    if matches!(result, SegmentResult::Deferred { .. }) {
        // A grant revoked while the segment ran counts: read the session's revocations again.
        let revocations = reads::read_all_items_of_kind(store, session_id, ItemKind::GrantRevoked).await?;
        run.grants = grants::session_grants(&reads::history(&revocations), &calls)?;
        // So does a decision made ahead in a batch: read where the turn's interrupts ahead stand.
        run.ahead_states = ahead_states(worker, session_id, &state, &run.turn_id).await?;
    }
    let prestart = next_warm.and_then(|next| next.after(&result));
    let ran = matches!(result, SegmentResult::Completed { .. } | SegmentResult::Deferred { .. });
    let mut transition = turn::on_segment(&run, &state, &calls, result);
    if let Some((recorded, finished)) = cli_record {
        transition.calls.push(recorded);
        transition.events.insert(0, finished);
    }
    if ran {
        subagents::place(&mut transition.items, subagent_items);
    }
    inline::settle_on_turn_failure(&mut transition, &calls);
    // The API may not load the agent: the interrupt carries who may decide it.
    turn::with_approvers(&mut transition, &worker.agent.config.policies);
    // ... and its approval deadline, which any Worker fires from the stored request.
    turn::with_deadlines(&mut transition, &worker.agent.config.policies);
    // ... and the sentence an approver reads first.
    turn::with_summaries(&mut transition, &worker.agent.config.policies);
    // ... and the factory's review of the call, with the approvers a high risk needs.
    super::review::review_approvals(worker, session_id, &mut transition, &calls).await;
    // ... and the schema an approver's edit must fit.
    if !transition.interrupts.is_empty() {
        let custom = tool_set.as_ref().map(|tools| tools.tools()).unwrap_or_default();
        edits::with_input_schemas(&mut transition, |tool, kind| match kind {
            ToolKind::Custom => custom.iter().find(|t| t.name == tool).map(|t| t.input_schema.clone()),
            ToolKind::Cli => edits::cli_tool_schema(tool),
        });
    }
    if failed_cost > 0.0 {
        let mut next = transition.run_state.take().unwrap_or_else(|| state.clone());
        next.cost_usd += failed_cost;
        transition.run_state = Some(next);
    }
    let runs_unattended = transition
        .steps
        .iter()
        .any(|step| [StepKind::CallTool, StepKind::CallSingleAttemptTool].contains(&step.kind));
    worker.commit(claimed, transition).await?;
    if let Some(prestart) = prestart {
        prestart.start(worker, runs_unattended).await;
    }
    Ok(())
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
    fresh: bool,
}

impl NextWarm {
    /// What to pre-start after a segment that ended with `result`: after a completed fresh
    /// segment, a fresh CLI for the next new session; after a deferred one, a `--resume` of its
    /// session (started only if the call's next step runs without approval).
    fn after(self, result: &SegmentResult) -> Option<Prestart> {
        match result {
            SegmentResult::Completed { .. } if self.fresh => Some(Prestart { next: self, resume: None }),
            SegmentResult::Deferred { session_id, .. } => {
                Some(Prestart { next: self, resume: Some(session_id.clone()) })
            }
            _ => None,
        }
    }
}

/// A CLI to pre-start after the commit.
struct Prestart {
    next: NextWarm,
    /// The session a resume continues; `None` for a fresh CLI.
    resume: Option<String>,
}

impl Prestart {
    /// Starts it: a resume at once, while the tool step runs, and only when `runs_unattended`
    /// (the deferred call's next step is a tool call, not a human's decision: nothing holds a
    /// process for a human); a fresh one once the Worker has no step in hand.
    async fn start(self, worker: &Worker, runs_unattended: bool) {
        let Prestart { mut next, resume } = self;
        match resume {
            Some(session_id) if runs_unattended => {
                next.spec.start = Start::Resume { session_id, transcript: Default::default(), prompt: None };
                warm::prestart(worker, next.spec, &next.cwd, false).await;
            }
            Some(_) => {}
            None => warm::prestart_when_idle(worker, next.spec, next.cwd),
        }
    }
}

/// The segment's result with what the proxy measured: a segment the proxy stopped at the spend
/// limit fails with that reason (not retried), and the cost of a completed or deferred one is the
/// proxy's (every request priced, [`crate::proxy::prices`]) when its requests went through it.
fn with_proxy_accounting(result: SegmentResult, summary: &ProxySummary) -> SegmentResult {
    if let Some(reason) = &summary.stopped {
        return SegmentResult::LimitReached { error: reason.clone(), reason: FailureReason::SpendLimit };
    }
    let measured = |cli: Option<f64>| if summary.requests > 0 { Some(summary.cost_usd) } else { cli };
    match result {
        SegmentResult::Completed { session_id, result, entries, usage, cost_usd } => {
            SegmentResult::Completed { session_id, result, entries, usage, cost_usd: measured(cost_usd) }
        }
        SegmentResult::Deferred { session_id, call, entries, usage, cost_usd } => {
            SegmentResult::Deferred { session_id, call, entries, usage, cost_usd: measured(cost_usd) }
        }
        failed @ (SegmentResult::Failed { .. } | SegmentResult::LimitReached { .. }) => failed,
    }
}

/// Runs the CLI for `run` and reports how it ended, and what the CLI said about its model calls
/// to `trace`, with what came of the approved CLI call it resumed, if any. Never fails: every
/// problem is a failed segment the state machine retries or turns into the turn's error. The
/// stored transcript moves out of `run.start` into the resume file's text (it can be megabytes;
/// nothing reads it from `run` afterwards).
async fn segment(
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
    let tool_set_unavailable = tools.unavailable().to_vec();
    let tools = SegmentTools::new(
        SandboxTools(tools.clone()),
        worker,
        recording.claimed,
        &run.turn_id,
        &recording.recorder,
    );
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
    let unavailable = tool_set_unavailable;
    let runner: Arc<dyn tollgate_claude::tools::ToolRunner> = tools;
    let catalog = match tollgate_claude::tools::catalog(DEFAULT_TOOL_SERVER_NAME, &runner.tools()) {
        // A call of a tool of a component that did not load reads which one, and why.
        Ok(catalog) => unavailable
            .iter()
            .fold(catalog, |catalog, u| catalog.with_unavailable(u.component.clone(), u.reason.clone())),
        Err(err) => return failed(format!("the agent's tools cannot be offered: {err}"), false),
    };
    // What the CLI reads back that holds images (the stored transcript, the prompts, recorded
    // results) gets their bytes from the store first; a failed read fails the attempt.
    let store = worker.store.as_ref();
    let mut inline_writes = inline::unseen_writes(run, recording.calls);
    if let Err(err) = load_replayed_images(store, session_id, run, &mut inline_writes).await {
        return failed(err.to_string(), true);
    }
    let mut gate = Gate::new(agent.config.policies.clone(), catalog)
        .with_turn_records(run.turn_records.iter().cloned())
        .with_inline_writes(inline_writes);
    if agent.has_cli_policy() {
        gate = gate.with_cli_decider();
    }
    let fresh = matches!(run.start, PlannedStart::Fresh { .. });
    let start = match &mut run.start {
        PlannedStart::Fresh { prompts } => match media::user_prompt(store, session_id, prompts).await {
            Ok(prompt) => Start::Fresh { prompt },
            Err(err) => return failed(err.to_string(), true),
        },
        PlannedStart::NewTurn { session_id: cli_session, transcript, prompts } => {
            let prompt = media::user_prompt(store, session_id, prompts).await;
            let restored = media::restore_transcript(store, session_id, transcript).await;
            match (prompt, restored) {
                (Ok(prompt), Ok(())) => Start::Resume {
                    session_id: cli_session.clone(),
                    transcript: convert::resume_text(std::mem::take(transcript)),
                    prompt: Some(prompt),
                },
                (Err(err), _) | (_, Err(err)) => return failed(err.to_string(), true),
            }
        }
        PlannedStart::ResumeCall { session_id: cli_session, transcript, pending } => {
            if let Err(err) = media::restore_transcript(store, session_id, transcript).await {
                return failed(err.to_string(), true);
            }
            gate = gate.resuming(pending.clone());
            Start::Resume {
                session_id: cli_session.clone(),
                transcript: convert::resume_text(std::mem::take(transcript)),
                prompt: None,
            }
        }
    };
    let (cwd, cwd_kind) = match &options.cwd {
        Some(cwd) => (cwd.into(), warm::Cwd::Named),
        None => {
            let root = worker.workspace_root();
            (root.join(workspace::folder_name(session_id)), warm::Cwd::Session { root })
        }
    };
    let mut spec = SegmentSpec::with_start(worker.cli.clone(), cwd, start);
    match worker.box_config().await {
        Ok(Some(config)) => {
            let copy_workspace = matches!(cwd_kind, warm::Cwd::Session { .. });
            spec.sandbox = Some(tollgate_claude::SegmentBox { config, copy_workspace });
        }
        Ok(None) => warn!(session = %session_id,
            "this segment's CLI runs without a box (--sandbox none): the agent's commands reach whatever the Worker's user can"),
        Err(err) => return failed(err.to_string(), true),
    }
    spec.env.extend(cli_settings_env());
    spec.env.extend(model_env(model.base_url, model.token, |name| std::env::var_os(name)));
    apply_options(&mut spec, &options);
    // The agent's own hooks: registered with the launch (a warm CLI must have the same ones),
    // asked of the options factory with this segment's context.
    spec.app_hook_matchers.clone_from(&options.hooks);
    // The per-session system prompt (the example factory names the session) goes in `initialize`,
    // so every session of the agent has the same launch and a warm CLI can serve it.
    prompts_to_initialize(&mut spec);
    spec.timeout = agent.config.segment_timeout;
    let box_owner = spec.sandbox.as_ref().and_then(|b| b.config.user.owner());
    spec.cancel = Some(recording.recorder.cancelled());
    if let warm::Cwd::Session { root } = &cwd_kind
        && let Err(err) = workspace::prepare(root, session_id, box_owner)
    {
        return failed(err, true);
    }
    let taken = warm::take(worker, &spec, &cwd_kind, fresh, model.limit);
    model.next_warm = Some(NextWarm { spec: spec.clone(), cwd: cwd_kind, fresh });
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
    let cost_usd = report.stats.result.as_ref().and_then(|r| r.total_cost_usd);
    // Every model call of the segment counts, its subagents' included (distinct message IDs).
    let model_calls =
        i64::try_from(report.stats.model_calls + report.stats.subagent_model_calls).unwrap_or(i64::MAX);
    let usage_of = |u: &tollgate_protocol::Usage| {
        let total = u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens;
        Usage {
            input_tokens: i64::try_from(total).unwrap_or(i64::MAX),
            cached_input_tokens: i64::try_from(u.cache_read_input_tokens).unwrap_or(i64::MAX),
            output_tokens: i64::try_from(u.output_tokens).unwrap_or(i64::MAX),
            model_calls,
        }
    };
    let raw =
        |entries: &[TranscriptEntry]| -> Vec<_> { entries.iter().map(|e| e.as_raw().to_owned()).collect() };
    recording.subagents = report
        .outcome
        .subagents()
        .iter()
        .map(|subagent| subagents::subagent_item(&run.turn_id, &subagent.agent_id, &raw(&subagent.entries)))
        .collect();
    // Stored with their images by reference: each image once in the session's media.
    let result = match report.outcome {
        SegmentOutcome::Completed { session_id: cli_session, result, entries, usage, .. } => {
            match media::store_entries(store, session_id, raw(&entries)).await {
                Ok(entries) => SegmentResult::Completed {
                    session_id: cli_session,
                    result,
                    entries,
                    usage: usage_of(&usage),
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
                    usage: usage_of(&usage),
                    cost_usd,
                },
                Err(err) => SegmentResult::Failed { error: err.to_string(), retryable: true },
            }
        }
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
        // Its step applies the cancel request instead; without one (never: only this step's
        // commit clears it) another attempt runs.
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
    };
    (result, report.stats.resumed_cli_call)
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

/// Writes what the segment streams, every [`EVENT_FLUSH`], under the claim (so a reader tells
/// this attempt's text from a retried one's by step and fence), and times the inline tool calls
/// for their spans.
///
/// # Why text is written this way (write amplification of streaming)
///
/// The model's thinking is stored the same way as its text, as `reasoning_delta` blocks with
/// their own offsets (a block of one also ends where the other stream takes over), but has no
/// live row: a client sees it block by block.
///
/// Streamed text used to be a `text_delta` event per flush: a fenced transaction (session lock,
/// step fence, event row, seq) every 200 ms and a row per 200 ms of text, kept for ever beside the
/// transcript that holds the same text. Now:
///
/// - **Live**: every flush that has new text overwrites the session's one live-text row
///   ([`tollgate_store::Store::put_live_text`]: one fenced statement, no event, no seq) with the
///   text not stored as events yet, and where it starts. It wakes the session's readers
///   (in-process, and PostgreSQL `NOTIFY` for an API in another process), which send the new
///   text to SSE clients that asked for it (`?live=true`) and show the whole text in the
///   snapshot (`live_text`). The commit that ends the step deletes the row: by then the text is
///   in the transcript and the projection.
/// - **Stored**: one `text_delta` event per text block, with `offset`, its start in the
///   segment's text in characters: a block ends at the next tool event, at the segment's end, or
///   when the unstored text reaches [`LIVE_BLOCK_BYTES`] (512). So a client resuming with
///   `Last-Event-ID` still replays every text the log had (fewer, larger events), one that saw
///   the live text drops what it has by offset, and a live write stays bounded (it never rewrites
///   the whole of a long reply, which would cost bytes quadratic in its length).
///
/// A stale claim writes neither: both are checked against the fence, and `LeaseLost` stops
/// the segment's writer.
async fn flush_events(
    worker: Worker,
    claimed: Claimed,
    turn_id: String,
    attempt: i64,
    mut pending: Vec<NewEvent>,
    mut rx: mpsc::UnboundedReceiver<SegmentEvent>,
) -> Result<InlineTools, StepError> {
    let mut tools = InlineTools::default();
    let mut streams = Streams::default();
    let mut open = true;
    while open {
        let deadline = tokio::time::sleep(EVENT_FLUSH);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                event = rx.recv() => match event {
                    Some(event) => {
                        tools.on_event(&event);
                        push_event(&mut pending, &mut streams, &turn_id, attempt, event);
                    }
                    None => { open = false; break; }
                },
                () = &mut deadline => break,
            }
        }
        for stream in [&mut streams.reasoning, &mut streams.text] {
            if !open || stream.unstored_bytes() >= LIVE_BLOCK_BYTES {
                pending.extend(stream.block_event(&turn_id, attempt));
            }
        }
        let text = &mut streams.text;
        // The live row first, from what the log has so far: it covers the blocks about to be
        // committed, so a reader never finds the log ahead of it with a gap between.
        if open && text.unwritten() {
            match worker.store.put_live_text(&claimed, &text.live(&turn_id, attempt)).await {
                Ok(()) => text.written(),
                // A hint for readers: the next flush writes the text again.
                Err(err) if err.is_retryable() => warn!(error = %err, "the live text was not written"),
                Err(err) => return Err(err.into()),
            }
        }
        if !pending.is_empty() {
            let mut keep = Transition::keep();
            keep.events = std::mem::take(&mut pending);
            let kinds: Vec<EventKind> = keep.events.iter().map(|e| e.kind).collect();
            let receipt = worker.commit(&claimed, keep).await?;
            if text.from_seq.is_none() {
                text.from_seq = kinds
                    .iter()
                    .zip(&receipt.event_seqs)
                    .find_map(|(kind, seq)| (*kind == EventKind::TextDelta).then_some(*seq));
            }
            text.committed = text.stored;
        }
    }
    Ok(tools)
}

/// What a segment streams as text-like blocks: its text (also written live) and its thinking.
#[derive(Debug)]
struct Streams {
    text: StreamedText,
    reasoning: StreamedText,
}

impl Default for Streams {
    fn default() -> Self {
        Streams {
            text: StreamedText::of(Payload::TextDelta),
            reasoning: StreamedText::of(Payload::ReasoningDelta),
        }
    }
}

impl Streams {
    /// The `text_delta` and `reasoning_delta` events of what is not stored yet, in the order it
    /// streamed (at most one of them has any: a change of stream stores the other's block).
    fn block_events(&mut self, turn_id: &str, attempt: i64) -> impl Iterator<Item = NewEvent> {
        let reasoning = self.reasoning.block_event(turn_id, attempt);
        reasoning.into_iter().chain(self.text.block_event(turn_id, attempt))
    }
}

/// The text a segment streamed: all of it, how much of it the event log has (and from which
/// seq), and how much the live-text row has. The same for its thinking, stored as
/// `reasoning_delta` blocks (and written to no live row).
#[derive(Debug)]
struct StreamedText {
    /// The event of its stored blocks: `text_delta` or `reasoning_delta`.
    event: fn(TextBlock) -> Payload,
    /// Every text delta so far, joined.
    whole: String,
    /// Characters of `whole`.
    chars: usize,
    /// Bytes and characters of `whole` in `text_delta` events (committed or about to be).
    stored: (usize, usize),
    /// Bytes and characters of `whole` in committed `text_delta` events: where the live row starts.
    committed: (usize, usize),
    /// The seq of the first of them.
    from_seq: Option<i64>,
    /// Bytes of `whole` the live-text row covers (stored or in its text).
    live: usize,
}

impl StreamedText {
    fn of(event: fn(TextBlock) -> Payload) -> Self {
        StreamedText {
            event,
            whole: String::new(),
            chars: 0,
            stored: (0, 0),
            committed: (0, 0),
            from_seq: None,
            live: 0,
        }
    }

    fn push(&mut self, delta: &str) {
        self.whole.push_str(delta);
        self.chars += delta.chars().count();
    }

    /// The block event of the text not stored yet (`None` when there is none), which is then
    /// stored.
    fn block_event(&mut self, turn_id: &str, attempt: i64) -> Option<NewEvent> {
        let (bytes, chars) = self.stored;
        if bytes == self.whole.len() {
            return None;
        }
        let block = &self.whole[bytes..];
        let block = TextBlock {
            turn_id: turn_id.to_owned(),
            attempt,
            offset: u64::try_from(chars).unwrap_or(u64::MAX),
            text: block.to_owned(),
        };
        let event = (self.event)(block).into();
        self.stored = (self.whole.len(), self.chars);
        Some(event)
    }

    fn unstored_bytes(&self) -> usize {
        self.whole.len() - self.stored.0
    }

    /// The live-text row: the text after the committed blocks, and where it starts.
    fn live(&self, turn_id: &str, attempt: i64) -> NewLiveText {
        NewLiveText {
            turn_id: turn_id.to_owned(),
            attempt,
            offset: i64::try_from(self.committed.1).unwrap_or(i64::MAX),
            from_seq: self.from_seq,
            text: self.whole[self.committed.0..].to_owned(),
        }
    }

    fn unwritten(&self) -> bool {
        self.live != self.whole.len()
    }

    fn written(&mut self) {
        self.live = self.whole.len();
    }
}

fn push_event(
    pending: &mut Vec<NewEvent>,
    streams: &mut Streams,
    turn_id: &str,
    attempt: i64,
    event: SegmentEvent,
) {
    match event {
        SegmentEvent::TextDelta { text: delta } => {
            // The thinking before the text goes first, so the log keeps the order it streamed in.
            pending.extend(streams.reasoning.block_event(turn_id, attempt));
            streams.text.push(&delta);
        }
        SegmentEvent::ReasoningDelta { text: delta } => {
            pending.extend(streams.text.block_event(turn_id, attempt));
            streams.reasoning.push(&delta);
        }
        SegmentEvent::ToolCallStarted { tool_use_id, name, kind, input } => {
            // The text before the call goes first, so the log keeps the order it streamed in.
            pending.extend(streams.block_events(turn_id, attempt));
            pending.push(
                Payload::ToolCallStarted(ToolCallStarted {
                    turn_id: turn_id.to_owned(),
                    tool_call_id: tool_use_id,
                    tool_name: name,
                    kind: Some(kind),
                    arguments: input,
                    attempt,
                    deferred: false,
                })
                .into(),
            );
        }
        SegmentEvent::ToolCallFinished { tool_use_id, name, kind, is_error } => {
            pending.extend(streams.block_events(turn_id, attempt));
            pending.push(
                Payload::ToolCallFinished(ToolCallFinished {
                    turn_id: turn_id.to_owned(),
                    attempt: Some(attempt),
                    tool_call_id: tool_use_id,
                    tool_name: name,
                    kind: Some(kind),
                    status: if is_error { "failed" } else { "succeeded" }.to_owned(),
                    deferred: false,
                })
                .into(),
            );
        }
        other => warn!(event = ?other, "an unknown segment event was dropped"),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

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

    #[test]
    fn a_segment_stopped_at_the_spend_limit_fails_for_good_and_a_proxied_one_costs_what_the_proxy_measured() {
        let completed = || SegmentResult::Completed {
            session_id: "c".into(),
            result: "ok".into(),
            entries: Vec::new(),
            usage: Usage::default(),
            cost_usd: Some(9.0),
        };
        let mut summary = ProxySummary { requests: 2, cost_usd: 0.5, ..ProxySummary::default() };
        match with_proxy_accounting(completed(), &summary) {
            SegmentResult::Completed { cost_usd, .. } => assert_eq!(cost_usd, Some(0.5)),
            other => panic!("{other:?}"),
        }
        summary.stopped = Some("the session's spend limit of $1 was reached".into());
        match with_proxy_accounting(completed(), &summary) {
            SegmentResult::LimitReached { error, reason } => {
                assert!(error.contains("spend limit of $1 was reached"));
                assert_eq!(reason, FailureReason::SpendLimit);
            }
            other => panic!("{other:?}"),
        }
        let unproxied = ProxySummary::default();
        match with_proxy_accounting(completed(), &unproxied) {
            SegmentResult::Completed { cost_usd, .. } => assert_eq!(cost_usd, Some(9.0)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn streamed_text_is_stored_once_per_block_with_its_offset_in_characters() {
        let mut pending = Vec::new();
        let mut streams = Streams::default();
        let delta = |t: &str| SegmentEvent::TextDelta { text: t.into() };
        push_event(&mut pending, &mut streams, "t1", 2, delta("Héllo"));
        push_event(&mut pending, &mut streams, "t1", 2, delta(", "));
        assert!(pending.is_empty(), "text alone waits for its block's end");
        let text = &mut streams.text;
        assert!(text.unwritten());
        assert_eq!((text.live("t1", 2).offset, text.live("t1", 2).text.as_str()), (0, "Héllo, "));
        text.written();
        assert!(!text.unwritten(), "the live row has it all");
        let started = SegmentEvent::ToolCallStarted {
            tool_use_id: "tu1".into(),
            name: "lookup".into(),
            kind: ToolKind::Custom,
            input: json!({"order_id": "7"}),
        };
        push_event(&mut pending, &mut streams, "t1", 2, started);
        push_event(&mut pending, &mut streams, "t1", 2, delta("wörld"));
        let text = &mut streams.text;
        pending.extend(text.block_event("t1", 2));
        assert_eq!(text.block_event("t1", 2).map(|e| e.payload), None, "nothing is stored twice");
        let kinds: Vec<&str> = pending.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(kinds, ["text_delta", "tool_call_started", "text_delta"]);
        assert_eq!(
            pending[0].payload,
            json!({"turn_id": "t1", "attempt": 2, "offset": 0, "text": "Héllo, "})
        );
        assert_eq!(pending[2].payload, json!({"turn_id": "t1", "attempt": 2, "offset": 7, "text": "wörld"}));
        assert_eq!(text.whole, "Héllo, wörld");
        assert_eq!(text.unstored_bytes(), 0);
        push_event(&mut pending, &mut streams, "t1", 2, delta("!"));
        let text = &mut streams.text;
        let live = text.live("t1", 2);
        assert_eq!((live.offset, live.text.as_str()), (0, "Héllo, wörld!"), "nothing is committed yet");
        text.committed = text.stored;
        let live = text.live("t1", 2);
        assert_eq!((live.offset, live.text.as_str()), (12, "!"), "the tail after the committed blocks");
    }

    #[test]
    fn thinking_is_stored_as_reasoning_blocks_in_the_order_it_streamed_between_text_and_tool_calls() {
        let mut pending = Vec::new();
        let mut streams = Streams::default();
        let think = |t: &str| SegmentEvent::ReasoningDelta { text: t.into() };
        let say = |t: &str| SegmentEvent::TextDelta { text: t.into() };
        push_event(&mut pending, &mut streams, "t1", 1, think("Let me "));
        push_event(&mut pending, &mut streams, "t1", 1, think("löök."));
        assert!(pending.is_empty(), "thinking alone waits for its block's end");
        push_event(&mut pending, &mut streams, "t1", 1, say("Reading."));
        let read = SegmentEvent::ToolCallStarted {
            tool_use_id: "tu1".into(),
            name: "Read".into(),
            kind: ToolKind::Cli,
            input: json!({"file_path": "/etc/hostname"}),
        };
        push_event(&mut pending, &mut streams, "t1", 1, read);
        push_event(&mut pending, &mut streams, "t1", 1, think("Done."));
        let finished = SegmentEvent::ToolCallFinished {
            tool_use_id: "tu1".into(),
            name: "Read".into(),
            kind: ToolKind::Cli,
            is_error: false,
        };
        push_event(&mut pending, &mut streams, "t1", 1, finished);
        let kinds: Vec<&str> = pending.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(
            kinds,
            ["reasoning_delta", "text_delta", "tool_call_started", "reasoning_delta", "tool_call_finished"]
        );
        assert_eq!(
            pending[0].payload,
            json!({"turn_id": "t1", "attempt": 1, "offset": 0, "text": "Let me löök."})
        );
        assert_eq!(pending[3].payload, json!({"turn_id": "t1", "attempt": 1, "offset": 12, "text": "Done."}));
        assert_eq!(
            pending[2].payload,
            json!({"turn_id": "t1", "attempt": 1, "tool_call_id": "tu1", "tool_name": "Read", "kind": "cli",
                "arguments": {"file_path": "/etc/hostname"}, "deferred": false})
        );
        assert_eq!(pending[4].payload["status"], "succeeded");
    }
}
