//! `RunModel`: which segment to run ([`plan_run_model`]) and what its end changes
//! ([`on_segment`]), including a turn's failure and its note for the next prompt.

use std::time::Duration;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::batches::{self, AheadCall, AheadRef, AheadState};
use super::client::HumanDecision;
use super::grants::{GrantRef, SessionGrant, active_grant, session_grants};
use super::{
    CallEntry, CallState, CallStep, CancelRequestChange, CloseInterrupt, EngineError, FailureReason, Finish,
    ItemKind, Limits, NewInterrupt, NewItem, NextStep, RUN_MODEL_ATTEMPTS, RunModelStep, RunState,
    SessionStatus, Start, StepKind, Transition, TurnState, Usage, raw,
};
use crate::approval::ApprovalRequest;
use crate::events::{self, EventKind, Payload};
use crate::gate::{DeferredCall, HeldBackCall};
use crate::media::MediaRef;
use crate::policy::{DeferredRun, Handling, Policies};
use crate::record::ToolCallRecord;
use crate::texts;

/// One stored item, as the planner reads it.
#[derive(Clone, Copy, Debug)]
pub struct HistoryItem<'a> {
    /// Its seq.
    pub seq: i64,
    /// Its kind (`None`: a kind this version does not know, which nothing reads).
    pub kind: Option<ItemKind>,
    /// Its JSON.
    pub body: &'a str,
}

/// How the segment starts.
#[derive(Clone, Debug)]
pub enum PlannedStart {
    /// The session's first segment: a new CLI session with these prompts.
    Fresh {
        /// Oldest first.
        prompts: Vec<Prompt>,
    },
    /// A new turn of a session with a stored transcript: `--resume` with these prompts.
    NewTurn {
        /// The CLI session of the stored transcript.
        session_id: String,
        /// The stored transcript, byte for byte.
        transcript: ResumeTranscript,
        /// Oldest first.
        prompts: Vec<Prompt>,
    },
    /// The resumed segment of a turn: `--resume` without a prompt; the gate replays `pending`.
    ResumeCall {
        /// The CLI session of the turn.
        session_id: String,
        /// The stored transcript and the turn's entries so far.
        transcript: ResumeTranscript,
        /// The deferred call's final record.
        pending: ToolCallRecord,
    },
}

/// One prompt of a new turn: a user message (or a turn-failure note) as stored. The CLI gets its
/// text as one text block, then each image as an image block.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Prompt {
    /// The text.
    pub text: String,
    /// The images it carries, by reference.
    #[serde(default)]
    pub images: Vec<MediaRef>,
}

/// The item kinds [`plan_run_model`] reads besides the transcript: a caller that passes
/// [`TranscriptSource::Chunks`] may read only these.
pub const PLAN_ITEM_KINDS: [ItemKind; 3] =
    [ItemKind::UserPrompt, ItemKind::TurnFailureNote, ItemKind::GrantRevoked];

/// Where [`plan_run_model`] finds the session's stored transcript.
#[derive(Clone, Debug)]
pub enum TranscriptSource {
    /// In the transcript items among the items given: a session stored before the transcript was
    /// kept in resume form too.
    Items,
    /// Read apart, in resume form (the store's transcript chunks): whole lines of compact
    /// entries, oldest first, and the CLI session of the last chunk (`None`: none stored yet).
    Chunks {
        /// The CLI session of the last chunk.
        session_id: Option<String>,
        /// The chunks.
        chunks: Vec<String>,
    },
}

/// The transcript a resumed segment lays down, in order: `chunks` (in resume form already, to be
/// written as they are), then `entries` (one line each, after the resume-file rule picks them).
#[derive(Clone, Debug, Default)]
pub struct ResumeTranscript {
    /// Whole lines, each one compact entry and its `\n`.
    pub chunks: Vec<String>,
    /// Entries after the chunks, byte for byte.
    pub entries: Vec<Box<RawValue>>,
}

impl ResumeTranscript {
    /// Whether the text of any entry holds `needle`.
    pub fn contains(&self, needle: &str) -> bool {
        self.chunks.iter().any(|chunk| chunk.contains(needle))
            || self.entries.iter().any(|entry| entry.get().contains(needle))
    }
}

/// A segment to run.
#[derive(Clone, Debug)]
pub struct SegmentRun {
    /// The turn.
    pub turn_id: String,
    /// This claim of the segment's step, from 1: every claim has its own (events and streamed
    /// text name it).
    pub attempt: i64,
    /// The claims before this one that were lost (their Worker died): they do not count toward
    /// [`RUN_MODEL_ATTEMPTS`] ([`SegmentRun::counted_attempt`]).
    pub lost_workers: i64,
    /// How it starts.
    pub start: PlannedStart,
    /// The turn's other final records, for [`crate::gate::Gate::with_turn_records`].
    pub turn_records: Vec<ToolCallRecord>,
    /// The highest item seq of the prompts the turn answers.
    pub prompts_upto: i64,
    /// The session's grants: a deferred call of a tool with an active one is approved under it,
    /// with no interrupt.
    pub grants: Vec<SessionGrant>,
    /// Where the turn's interrupts opened ahead stand (by interrupt id), read by the Worker when
    /// the segment ends ([`super::batches`]); one missing counts as open.
    pub ahead_states: Vec<(String, AheadState)>,
    /// The turn's trace: the stored one of a turn in progress, else (a new turn) the Worker's
    /// for the turn's first step; stored with the turn when the segment defers a call.
    pub trace: Option<super::TurnTrace>,
}

impl SegmentRun {
    /// This attempt as [`RUN_MODEL_ATTEMPTS`] counts it: the claims whose Worker was lost left
    /// out, so a turn fails for its own failures, not for Workers that died under it.
    pub fn counted_attempt(&self) -> i64 {
        self.attempt - self.lost_workers
    }
}

/// What `RunModel` does.
#[derive(Clone, Debug)]
pub enum Plan {
    /// Run this segment, then call [`on_segment`].
    Run(Box<SegmentRun>),
    /// Do not run a segment; commit this.
    Finish(Box<Transition>),
}

/// How a segment ended, as the state machine needs it.
#[derive(Clone, Debug)]
pub enum SegmentResult {
    /// The model answered.
    Completed {
        /// The CLI session.
        session_id: String,
        /// The answer.
        result: String,
        /// The entries the segment added.
        entries: Vec<Box<RawValue>>,
        /// Its usage.
        usage: Usage,
        /// Its cost, as the CLI reported.
        cost_usd: Option<f64>,
    },
    /// The segment ended on one deferred call.
    Deferred {
        /// The CLI session.
        session_id: String,
        /// The call.
        call: DeferredCall,
        /// The entries the segment added.
        entries: Vec<Box<RawValue>>,
        /// Its usage.
        usage: Usage,
        /// Its cost.
        cost_usd: Option<f64>,
    },
    /// The segment failed.
    Failed {
        /// Why, for `last_turn_error`.
        error: String,
        /// Whether another attempt may succeed.
        retryable: bool,
    },
    /// A limit stopped the segment: the session's spend limit (the model proxy refused its next
    /// model request), or one of the CLI's own options (`max_turns`, `max_budget_usd`). The turn
    /// fails at once with `reason`: another attempt would pay for its model calls again, rerun
    /// its inline tools, and stop at the same limit.
    LimitReached {
        /// Why, for `last_turn_error`.
        error: String,
        /// The reason of the limit.
        reason: FailureReason,
    },
}

/// A transcript item's body as stored (`transcript_item` writes it):
/// `{"kind":"claude_transcript","session_id":…,"entries":[…]}`, its entries borrowed byte for
/// byte.
#[derive(Deserialize)]
pub struct TranscriptBody<'a> {
    /// The CLI session the entries belong to.
    pub session_id: String,
    /// The entries, in order.
    #[serde(borrow)]
    pub entries: Vec<&'a RawValue>,
}

impl<'a> TranscriptBody<'a> {
    /// Reads a stored transcript item's body.
    ///
    /// # Errors
    /// The body is not one.
    pub fn parse(body: &'a str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(body)
    }
}

/// How often a `RunModel` step was claimed, as the store counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claims {
    /// This claim, from 1 (the store's `Step::attempt`).
    pub attempt: i64,
    /// The claims before it that were lost: their Worker died, stalled past its lease or lost
    /// the store (the store's `Step::lost`).
    pub lost: i64,
}

impl Claims {
    /// The `attempt`-th claim, none lost before it.
    pub fn nth(attempt: i64) -> Self {
        Claims { attempt, lost: 0 }
    }
}

/// Decides the segment a claimed `RunModel` runs, on its `claims`-th claim.
///
/// `items` are the session's items in order (with its transcript items when `transcript` is
/// [`TranscriptSource::Items`]; they may be left out otherwise); `calls` its deferred calls.
///
/// # Errors
/// A stored row that does not parse, or rows that disagree.
pub fn plan_run_model(
    step: &RunModelStep,
    claims: Claims,
    state: &RunState,
    items: &[HistoryItem<'_>],
    transcript: TranscriptSource,
    calls: &[CallEntry],
    limits: &Limits,
) -> Result<Plan, EngineError> {
    let (turn_id, prompts_upto) = match (&step.turn_id, &step.resume, &state.turn) {
        (Some(turn_id), Some(_), Some(turn)) if &turn.turn_id == turn_id => {
            (turn_id.clone(), turn.prompts_upto)
        }
        (None, None, None) => {
            let upto = items
                .iter()
                .filter(|item| is_prompt(item.kind) && item.seq > state.prompts_through)
                .map(|item| item.seq)
                .max();
            match upto {
                Some(upto) => (state.next_turn_id(), upto),
                // A wake whose messages an earlier turn already answered.
                None => {
                    let mut t = Transition::new(Finish::Done(json!({"outcome": "nothing_to_do"})));
                    t.status = Some(SessionStatus::Idle);
                    t.cancel = CancelRequestChange::Drop;
                    return Ok(Plan::Finish(Box::new(t)));
                }
            }
        }
        _ => {
            return Err(EngineError::Inconsistent(format!(
                "RunModel {step:?} does not match the turn in progress {:?}",
                state.turn
            )));
        }
    };
    let Claims { attempt, lost: lost_workers } = claims;
    if lost_workers > limits.max_lost_workers {
        let error = format!(
            "the segment lost its Worker {lost_workers} times (killed, crashed or stalled past its \
             lease), more than the {} allowed",
            limits.max_lost_workers
        );
        let t = fail_turn(state, &turn_id, prompts_upto, calls, FailureReason::WorkerStopped, error);
        return Ok(Plan::Finish(Box::new(t)));
    }
    if attempt - lost_workers > RUN_MODEL_ATTEMPTS {
        let error = format!("the segment did not finish in {RUN_MODEL_ATTEMPTS} attempts");
        let t = fail_turn(state, &turn_id, prompts_upto, calls, FailureReason::SegmentFailed, error);
        return Ok(Plan::Finish(Box::new(t)));
    }
    if let Some(limit) = limits.spend_limit_usd
        && state.cost_usd >= limit
    {
        let error =
            format!("the session's spend limit of ${limit:.2} is reached (${:.4} spent)", state.cost_usd);
        let t = fail_turn(state, &turn_id, prompts_upto, calls, FailureReason::SpendLimit, error);
        return Ok(Plan::Finish(Box::new(t)));
    }

    let (mut transcript, transcript_session) = match transcript {
        TranscriptSource::Chunks { session_id, chunks } => {
            (ResumeTranscript { chunks, entries: Vec::new() }, session_id)
        }
        TranscriptSource::Items => {
            let mut entries = Vec::new();
            let mut session = None;
            for item in items.iter().filter(|item| item.kind == Some(ItemKind::ClaudeTranscript)) {
                let body = TranscriptBody::parse(item.body).map_err(|e| EngineError::Corrupt {
                    what: format!("transcript item {}", item.seq),
                    reason: e.to_string(),
                })?;
                entries.extend(body.entries.into_iter().map(ToOwned::to_owned));
                session = Some(body.session_id);
            }
            (ResumeTranscript { chunks: Vec::new(), entries }, session)
        }
    };
    let turn_records: Vec<ToolCallRecord> =
        calls.iter().filter(|call| call.turn_id == turn_id).filter_map(CallEntry::record).collect();

    let start = match &step.resume {
        Some(tool_call_id) => {
            let pending = calls
                .iter()
                .find(|call| &call.tool_call_id == tool_call_id && call.turn_id == turn_id)
                .and_then(replayed)
                .ok_or_else(|| {
                    EngineError::Inconsistent(format!("the resumed call {tool_call_id} has no final record"))
                })?;
            let session_id = state
                .session_id
                .clone()
                .ok_or_else(|| EngineError::Inconsistent("a suspended turn without a CLI session".into()))?;
            transcript.entries.extend(state.turn_entries.iter().cloned());
            PlannedStart::ResumeCall { session_id, transcript, pending }
        }
        None => {
            let mut prompts = Vec::new();
            for item in items
                .iter()
                .filter(|i| is_prompt(i.kind) && i.seq > state.prompts_through && i.seq <= prompts_upto)
            {
                let prompt: Prompt = serde_json::from_str(item.body).map_err(|e| EngineError::Corrupt {
                    what: format!("prompt item {}", item.seq),
                    reason: e.to_string(),
                })?;
                prompts.push(prompt);
            }
            match transcript_session {
                Some(session_id) => PlannedStart::NewTurn { session_id, transcript, prompts },
                None => PlannedStart::Fresh { prompts },
            }
        }
    };
    let grants = session_grants(items, calls)?;
    Ok(Plan::Run(Box::new(SegmentRun {
        turn_id,
        attempt,
        lost_workers,
        start,
        turn_records,
        prompts_upto,
        grants,
        ahead_states: Vec::new(),
        trace: state.turn.as_ref().and_then(|turn| turn.trace.clone()),
    })))
}

/// What a resumed segment replays for its deferred call: the final record, or for an approved CLI
/// call not run yet (its record comes from that run), the approval ([`crate::record::Outcome::approved_cli_tool`]:
/// the gate lets the CLI run it with the approved input).
fn replayed(call: &CallEntry) -> Option<ToolCallRecord> {
    match (call.kind, &call.state) {
        (crate::catalog::ToolKind::Cli, CallState::Queued) => {
            call.with_state(crate::record::Outcome::approved_cli_tool().into()).record()
        }
        _ => call.record(),
    }
}

pub(super) fn is_prompt(kind: Option<ItemKind>) -> bool {
    matches!(kind, Some(ItemKind::UserPrompt | ItemKind::TurnFailureNote))
}

/// Stores `trace` with the turn the transition leaves in progress, unless that turn has its trace
/// already: a turn's trace is fixed by the step that started it.
pub fn with_trace(t: &mut Transition, trace: &super::TurnTrace) {
    if let Some(turn) = t.run_state.as_mut().and_then(|state| state.turn.as_mut()) {
        turn.trace.get_or_insert_with(|| trace.clone());
    }
}

/// Stamps each tool approval interrupt the transition opens (and its `interrupt_opened` event)
/// with the tool's `approvers` (the groups whose principals alone may decide it), so a process
/// that decides without loading the agent (`tollgate api`) reads them from the stored request.
/// A tool whose policy names no approvers is left as it is.
pub fn with_approvers(t: &mut Transition, policies: &Policies) {
    t.stamp_requests(|request| {
        let approvers = policies.approvers(&request.tool_name);
        if approvers.is_empty() {
            return false;
        }
        request.approvers = approvers.to_vec();
        true
    });
}

/// Stamps each tool approval interrupt the transition opens (and its `interrupt_opened` event)
/// with the tool's approval deadline, resolved (`deadline`: `approval_timeout_secs`,
/// `on_timeout`, `escalate_to`, `escalation_timeout_secs`; see
/// [`crate::policy::ApprovalDeadline`]), so a Worker fires it from the stored request alone and
/// the store sets the deadline at insert. A tool without one is left as it is.
pub fn with_deadlines(t: &mut Transition, policies: &Policies) {
    t.stamp_requests(|request| {
        let Some(deadline) = policies.deadline(&request.tool_name) else { return false };
        request.deadline = Some(serde_json::to_value(deadline.resolved()).expect("serializes"));
        true
    });
}

/// Stamps each tool approval interrupt the transition opens (and its `interrupt_opened` event)
/// with how an approver reads it: its `summary` (the tool policy's template rendered with the
/// call's arguments) and the policy's `confirm_above`, so the inbox, the API and the webhooks
/// show them without loading the agent. A tool without either is left as it is.
pub fn with_summaries(t: &mut Transition, policies: &Policies) {
    t.stamp_requests(|request| {
        let summary = policies.summary(&request.tool_name);
        let confirm = policies.confirm_above(&request.tool_name);
        if let Some(summary) = summary {
            request.summary = Some(summary.render(&request.arguments));
        }
        if let Some(confirm) = confirm {
            request.confirm_above = Some(serde_json::to_value(confirm).expect("serializes"));
        }
        summary.is_some() || confirm.is_some()
    });
}

/// What the end of a segment changes. `calls` are the session's deferred calls (for a failing
/// turn's note).
pub fn on_segment(
    run: &SegmentRun,
    state: &RunState,
    calls: &[CallEntry],
    result: SegmentResult,
) -> Transition {
    match result {
        SegmentResult::Completed { session_id, result, entries, usage, cost_usd } => {
            turn_completed(run, state, Answered { session_id, result, entries, usage, cost_usd })
        }
        SegmentResult::Deferred { session_id, call, entries, usage, cost_usd } => {
            call_deferred(run, state, calls, Answered { session_id, result: call, entries, usage, cost_usd })
        }
        SegmentResult::Failed { error, retryable } => segment_failed(run, state, calls, error, retryable),
        SegmentResult::LimitReached { error, reason } => {
            fail_turn(state, &run.turn_id, run.prompts_upto, calls, reason, error)
        }
    }
}

/// What a segment that ran to its end brought back: its answer (`result`: the text, or the
/// deferred call) and what it added.
struct Answered<R> {
    session_id: String,
    result: R,
    entries: Vec<Box<RawValue>>,
    usage: Usage,
    cost_usd: Option<f64>,
}

/// The model answered: the turn is over, its entries (a resumed segment's with the turn's
/// earlier ones) become transcript items and the next turn may start.
fn turn_completed(run: &SegmentRun, state: &RunState, answered: Answered<String>) -> Transition {
    let Answered { session_id, result, entries, usage, cost_usd } = answered;
    let mut t = Transition::new(Finish::Done(json!({"outcome": "completed"})));
    let resumed = matches!(run.start, PlannedStart::ResumeCall { .. });
    let turn_entries = if resumed { state.turn_entries.as_slice() } else { &[] };
    for entry in turn_entries.iter().chain(&entries) {
        t.items.push(transcript_item(&session_id, &run.turn_id, entry));
    }
    let mut next = state.clone();
    next.session_id = Some(session_id);
    next.turn_entries.clear();
    next.turn = None;
    next.turns_ended += 1;
    next.prompts_through = run.prompts_upto;
    next.last_turn_error = None;
    next.last_turn_cancelled = None;
    next.cost_usd += cost_usd.unwrap_or(0.0);
    t.run_state = Some(next);
    t.usage = usage;
    t.status = Some(SessionStatus::Idle);
    t.cancel = CancelRequestChange::Drop;
    t.steps.push(next_turn(run.prompts_upto));
    end_batches(&mut t, state, &run.turn_id);
    t.event(Payload::TurnCompleted(events::TurnCompleted { turn_id: run.turn_id.clone(), result }))
}

/// The segment ended on one deferred call: its held-back calls open interrupts ahead, and the
/// call is settled in one of five ways: approved under a session grant
/// ([`approved_under_grant`]), by the decision on the call ahead it repeats
/// ([`decided_ahead_used`]), waiting on that call's open interrupt ([`await_approval`]), waiting
/// on an interrupt of its own ([`approval_requested`]), or approved as it is deferred when its
/// policy needs no approval ([`approved_as_deferred`]).
fn call_deferred(
    run: &SegmentRun,
    state: &RunState,
    calls: &[CallEntry],
    answered: Answered<DeferredCall>,
) -> Transition {
    let Answered { session_id, result: call, entries, usage, cost_usd } = answered;
    let Handling::Deferred { requires_approval, runs_in } = call.handling else {
        return fail_turn(
            state,
            &run.turn_id,
            run.prompts_upto,
            calls,
            FailureReason::InlineDeferred,
            format!("the CLI deferred {}, which runs inline", call.tool_name),
        );
    };
    let mut t =
        Transition::new(Finish::Done(json!({"outcome": "deferred", "tool_call_id": call.tool_use_id})));
    let mut next = state.clone();
    next.session_id = Some(session_id);
    if !matches!(run.start, PlannedStart::ResumeCall { .. }) {
        next.turn_entries.clear();
    }
    next.turn_entries.extend(entries);
    let mut ahead = turn_ahead(state, &run.turn_id);
    next.cost_usd += cost_usd.unwrap_or(0.0);
    t.usage = usage;
    let state = if requires_approval { CallState::PendingApproval } else { CallState::Queued };
    let entry = CallEntry {
        requires_approval,
        runs_in,
        ..CallEntry::new(
            &call.tool_use_id,
            &call.tool_name,
            call.kind,
            call.arguments.clone(),
            &run.turn_id,
            state,
        )
    };
    let call_step = serde_json::to_value(CallStep {
        turn_id: run.turn_id.clone(),
        tool_call_id: entry.tool_call_id.clone(),
    })
    .expect("serializes");
    let grant = if requires_approval { active_grant(&run.grants, &entry.tool_name) } else { None };
    // The call ahead this call repeats, when no grant approves it anyway.
    let repeat = if requires_approval && grant.is_none() {
        batches::find_repeat(&ahead, &entry.tool_name, entry.kind, &entry.arguments)
    } else {
        None
    };
    // The batch the segment's held-back calls join: the repeated call's, or this call's.
    let opened = batches::to_open(&ahead, repeat, &call.held_back);
    let batch_id = match repeat {
        Some(i) => Some(ahead[i].batch_id.clone()),
        None if !opened.is_empty() => Some(entry.tool_call_id.clone()),
        None => None,
    };
    t = open_ahead(t, run, &opened, batch_id.as_deref(), &mut ahead);
    if let Some(grant) = grant {
        t = approved_under_grant(t, run, entry, grant);
    } else if let Some(i) = repeat {
        let entry = repeats_ahead(entry, &mut ahead[i]);
        let used = &ahead[i];
        match run.ahead_states.iter().find(|(id, _)| *id == used.interrupt_id) {
            Some((_, AheadState::Decided(decision))) => {
                t = decided_ahead_used(t, run, &entry, used, decision)
            }
            _ => {
                // Still open: wait on that interrupt instead of opening a second one.
                await_approval(&mut t, &run.turn_id, &entry, call_step, used.interrupt_id.clone());
                t.calls.push(entry);
            }
        }
    } else if requires_approval {
        approval_requested(&mut t, run, entry, &call, batch_id, call_step);
    } else {
        approved_as_deferred(&mut t, &entry);
    }
    next.turn = Some(TurnState {
        turn_id: run.turn_id.clone(),
        prompts_upto: run.prompts_upto,
        ahead,
        trace: run.trace.clone(),
    });
    t.run_state = Some(next);
    t
}

/// The segment's held-back calls (`opened`) each open an interrupt ahead in batch `batch_id`, and
/// join the turn's calls `ahead`.
fn open_ahead(
    mut t: Transition,
    run: &SegmentRun,
    opened: &[&HeldBackCall],
    batch_id: Option<&str>,
    ahead: &mut Vec<AheadCall>,
) -> Transition {
    for held in opened {
        let batch_id = batch_id.unwrap_or_default().to_owned();
        let request = batches::ahead_request(&run.turn_id, held, &batch_id);
        let interrupt = NewInterrupt { interrupt_id: held.tool_use_id.clone(), request };
        t.events.push(interrupt.opened_event());
        t.interrupts.push(interrupt);
        let runs_in = match held.handling {
            Handling::Deferred { runs_in, .. } => runs_in,
            Handling::Inline | Handling::Recorded => DeferredRun::ResumedSegment,
        };
        ahead.push(AheadCall {
            interrupt_id: held.tool_use_id.clone(),
            batch_id,
            tool_name: held.tool_name.clone(),
            kind: held.kind,
            arguments: held.arguments.clone(),
            runs_in,
            used_by: None,
        });
    }
    t
}

/// Allowed for this session: approved under the grant, no interrupt. It still runs where its
/// policy says.
fn approved_under_grant(
    mut t: Transition,
    run: &SegmentRun,
    entry: CallEntry,
    grant: &GrantRef,
) -> Transition {
    let entry = CallEntry { approved_under: Some(grant.clone()), ..entry };
    let approved =
        super::tools::on_approval(&entry, &HumanDecision { approved: true, ..HumanDecision::default() });
    t.steps.extend(approved.steps);
    t.calls.extend(approved.calls);
    t.events.extend(approved.events);
    t.status = approved.status;
    t.event(Payload::ApprovedUnderGrant(events::ApprovedUnderGrant {
        turn_id: run.turn_id.clone(),
        tool_call_id: entry.tool_call_id.clone(),
        tool_name: entry.tool_name.clone(),
        arguments: entry.arguments.clone(),
        grant: grant.clone(),
    }))
}

/// The call repeats `used`, a call decided (or asked) ahead in a batch: it is marked as used by
/// the call, and the call as decided by it.
fn repeats_ahead(mut entry: CallEntry, used: &mut AheadCall) -> CallEntry {
    used.used_by = Some(entry.tool_call_id.clone());
    entry.batch_id = Some(used.batch_id.clone());
    entry.decided_ahead = Some(AheadRef {
        decision_id: used.interrupt_id.clone(),
        batch_id: used.batch_id.clone(),
        decided_by: None,
        decided_at: None,
    });
    entry
}

/// Decided ahead in a batch: the decision on the call ahead applies to this one, no new
/// interrupt.
fn decided_ahead_used(
    mut t: Transition,
    run: &SegmentRun,
    entry: &CallEntry,
    used: &AheadCall,
    decision: &HumanDecision,
) -> Transition {
    let applied = super::tools::on_approval(entry, decision);
    t.steps.extend(applied.steps);
    t.events.extend(applied.events);
    t.status = applied.status;
    t = t.event(Payload::DecidedAheadUsed(events::DecidedAheadUsed {
        turn_id: run.turn_id.clone(),
        tool_call_id: entry.tool_call_id.clone(),
        tool_name: entry.tool_name.clone(),
        decision_id: used.interrupt_id.clone(),
        batch_id: used.batch_id.clone(),
        approved: decision.approved,
    }));
    t.calls.extend(applied.calls);
    t
}

/// The call needs a person: an interrupt of its own, opened before the ones ahead (in batch
/// `batch_id` when it has one), and the session waits on it.
fn approval_requested(
    t: &mut Transition,
    run: &SegmentRun,
    mut entry: CallEntry,
    call: &DeferredCall,
    batch_id: Option<String>,
    call_step: Value,
) {
    let mut request = ApprovalRequest::new(
        &run.turn_id,
        &entry.tool_call_id,
        &entry.tool_name,
        entry.kind,
        entry.arguments.clone(),
        call.policy.effect,
    );
    request.batch_id.clone_from(&batch_id);
    entry.batch_id = batch_id;
    let interrupt = NewInterrupt { interrupt_id: entry.tool_call_id.clone(), request };
    let opened_at = t.events.iter().position(|e| e.kind == EventKind::InterruptOpened);
    t.events.insert(opened_at.unwrap_or(t.events.len()), interrupt.opened_event());
    t.interrupts.insert(0, interrupt);
    let interrupt_id = entry.tool_call_id.clone();
    await_approval(t, &run.turn_id, &entry, call_step, interrupt_id);
    t.calls.push(entry);
}

/// No approval needed: the call is approved as it is deferred.
pub(super) fn approved_as_deferred(t: &mut Transition, entry: &CallEntry) {
    let approved = super::tools::on_approval(
        entry,
        &HumanDecision { approved: true, message: None, updated_input: None, ..Default::default() },
    );
    t.steps.extend(approved.steps);
    t.calls.extend(approved.calls);
    t.events.extend(approved.events);
    t.status = approved.status;
}

/// The segment failed: another attempt of `RunModel` when the failure is retryable and attempts
/// are left, else the turn fails.
fn segment_failed(
    run: &SegmentRun,
    state: &RunState,
    calls: &[CallEntry],
    error: String,
    retryable: bool,
) -> Transition {
    if retryable && run.counted_attempt() < RUN_MODEL_ATTEMPTS {
        let mut t = Transition::new(Finish::Retry(retry_delay(run.attempt)));
        t.status = Some(SessionStatus::Running);
        t.event(Payload::AttemptFailed(events::AttemptFailed {
            turn_id: run.turn_id.clone(),
            step: StepKind::RunModel,
            tool_call_id: None,
            attempt: run.attempt,
            error,
            deferred: None,
        }))
    } else {
        fail_turn(state, &run.turn_id, run.prompts_upto, calls, FailureReason::SegmentFailed, error)
    }
}

/// The session waits on a person: `AwaitToolApproval` for `entry`, claimable once
/// `interrupt_id` (its own, or one opened ahead in a batch) is decided.
pub(super) fn await_approval(
    t: &mut Transition,
    turn_id: &str,
    entry: &CallEntry,
    call_step: Value,
    interrupt_id: String,
) {
    t.steps.push(NextStep {
        kind: StepKind::AwaitToolApproval,
        payload: call_step,
        start: Start::OnInterrupt(interrupt_id.clone()),
        only_if_prompts_after: None,
        session_status: None,
    });
    t.status = Some(SessionStatus::AwaitingApproval);
    t.events.push(
        Payload::ApprovalAwaited(events::ApprovalAwaited {
            turn_id: turn_id.to_owned(),
            tool_call_id: entry.tool_call_id.clone(),
            interrupt_id: interrupt_id.to_owned(),
        })
        .into(),
    );
}

/// The turn's calls ahead, when `state`'s turn in progress is `turn_id`.
fn turn_ahead(state: &RunState, turn_id: &str) -> Vec<AheadCall> {
    state
        .turn
        .as_ref()
        .filter(|turn| turn.turn_id == turn_id)
        .map(|turn| turn.ahead.clone())
        .unwrap_or_default()
}

/// The turn ends: every call ahead whose decision no call used is recorded `unused`, and its
/// interrupt is closed if still open ([`batches`]).
pub(super) fn end_batches(t: &mut Transition, state: &RunState, turn_id: &str) {
    let ahead = turn_ahead(state, turn_id);
    for unused in batches::turn_end(&ahead) {
        t.calls.push(CallEntry {
            tool_call_id: unused.interrupt_id.clone(),
            tool_name: unused.tool_name.clone(),
            kind: unused.kind,
            arguments: unused.arguments.clone(),
            turn_id: turn_id.to_owned(),
            requires_approval: true,
            runs_in: unused.runs_in,
            original_arguments: None,
            grants_session: None,
            approved_under: None,
            batch_id: Some(unused.batch_id.clone()),
            decided_ahead: Some(AheadRef {
                decision_id: unused.interrupt_id.clone(),
                batch_id: unused.batch_id.clone(),
                decided_by: None,
                decided_at: None,
            }),
            inline: false,
            images: Vec::new(),
            diagnostics: None,
            requested_by: None,
            state: CallState::Unused,
        });
        let closing = batches::closing_decision(turn_id);
        t.close_interrupts.push(closed_by_nobody(&unused.interrupt_id, &closing));
        t.events.push(
            Payload::AheadUnused(events::AheadUnused {
                turn_id: turn_id.to_owned(),
                interrupt_id: unused.interrupt_id.clone(),
                batch_id: unused.batch_id.clone(),
                tool_name: unused.tool_name.clone(),
                arguments: unused.arguments.clone(),
            })
            .into(),
        );
    }
}

/// Interrupt `interrupt_id` closed with `decision`, if still open: decided by nobody (Tollgate
/// closed it), its `interrupt_resolved` event saying so.
pub(super) fn closed_by_nobody(interrupt_id: &str, decision: &HumanDecision) -> CloseInterrupt {
    let (resolution, mut resolved) = super::client::resolution(interrupt_id, decision, None);
    for event in &mut resolved {
        event.payload["closed"] = json!(true);
    }
    CloseInterrupt { interrupt_id: interrupt_id.to_owned(), resolution, events: resolved }
}

/// The pause before attempt `attempt + 1`: 1 s, 2 s, 4 s, … at most 30 s.
pub fn retry_delay(attempt: i64) -> Duration {
    Duration::from_secs(1u64 << attempt.clamp(1, 6).saturating_sub(1)).min(Duration::from_secs(30))
}

/// A turn ends failed: `last_turn_error`, the note when some of its calls have final records, and
/// the next turn if a message is queued. The turn's transcript is dropped; its prompts and the
/// note go to the next turn.
pub(super) fn fail_turn(
    state: &RunState,
    turn_id: &str,
    prompts_upto: i64,
    calls: &[CallEntry],
    reason: FailureReason,
    error: String,
) -> Transition {
    let mut t = Transition::new(Finish::Done(json!({"outcome": "turn_failed", "error": error})));
    // An inline write left unfinished is settled `outcome_unknown` with the failure
    // (`inline::settle_on_turn_failure`): the note says so too.
    let ran: Vec<ToolCallRecord> = calls
        .iter()
        .filter(|call| call.turn_id == turn_id)
        .filter_map(|call| match super::inline::is_left_unknown(call) {
            true => call.with_state(crate::record::Outcome::OutcomeUnknown.into()).record(),
            false => call.record(),
        })
        .collect();
    if !ran.is_empty() {
        t.items.push(NewItem {
            kind: ItemKind::TurnFailureNote,
            uuid: None,
            turn_id: Some(turn_id.to_owned()),
            body: raw(&json!({"kind": "user_prompt", "text": texts::turn_failure_note(&ran)})),
        });
    }
    let mut next = state.clone();
    next.turn_entries.clear();
    next.turn = None;
    next.turns_ended += 1;
    next.last_turn_error = Some(error.clone());
    next.last_turn_cancelled = None;
    t.run_state = Some(next);
    t.status = Some(SessionStatus::Idle);
    t.cancel = CancelRequestChange::Drop;
    t.steps.push(next_turn(prompts_upto));
    end_batches(&mut t, state, turn_id);
    t.event(Payload::TurnFailed(events::TurnFailed { turn_id: Some(turn_id.to_owned()), error, reason }))
}

/// A claimed step whose stored rows cannot be used (a run state, record or payload that does not
/// parse, rows that disagree) ends its turn, instead of being tried again forever with no word
/// to anyone. `error` says what is wrong and is what the client reads.
///
/// - With the run state readable (`state`), this is an ordinary failed turn: `last_turn_error`,
///   the turn-failure note for `calls` that have records, and the next turn if a prompt arrived
///   after the turn's prompts.
/// - Without it, nothing overwrites the unreadable run state (an operator may repair it): the
///   step ends, the session goes `idle`, and a `turn_failed` event carries the error. A later
///   message starts a turn that fails the same way, with its own event, until the row is fixed.
///
/// `turn_id` is the turn the step names, if it names one; `prompts_seen` is the highest prompt
/// seq the Worker read (`None` when the items could not be read: then no next turn is queued,
/// as it would fail the same way).
pub fn on_unusable_rows(
    turn_id: Option<&str>,
    state: Option<&RunState>,
    calls: &[CallEntry],
    prompts_seen: Option<i64>,
    error: String,
) -> Transition {
    let reason = FailureReason::UnusableRows;
    match state {
        Some(state) => {
            let (turn_id, prompts_upto) = match &state.turn {
                Some(turn) => (turn.turn_id.clone(), Some(turn.prompts_upto)),
                None => (turn_id.map_or_else(|| state.next_turn_id(), str::to_owned), prompts_seen),
            };
            let mut t = fail_turn(state, &turn_id, prompts_upto.unwrap_or(i64::MAX), calls, reason, error);
            if prompts_upto.is_none() {
                t.steps.clear();
            }
            t
        }
        None => {
            let mut t = Transition::new(Finish::Done(json!({"outcome": "turn_failed", "error": error})));
            t.status = Some(SessionStatus::Idle);
            t.cancel = CancelRequestChange::Drop;
            t.steps.extend(prompts_seen.map(next_turn));
            t.event(Payload::TurnFailed(events::TurnFailed {
                turn_id: turn_id.map(str::to_owned),
                error,
                reason,
            }))
        }
    }
}

/// `RunModel` for the next turn, if a message arrived after the prompts this turn answered.
pub(super) fn next_turn(prompts_upto: i64) -> NextStep {
    NextStep {
        kind: StepKind::RunModel,
        payload: serde_json::to_value(RunModelStep::default()).expect("serializes"),
        start: Start::Now,
        only_if_prompts_after: Some(prompts_upto),
        session_status: Some(SessionStatus::Running),
    }
}

fn transcript_item(session_id: &str, turn_id: &str, entry: &RawValue) -> NewItem {
    let uuid = serde_json::from_str::<Value>(entry.get())
        .ok()
        .and_then(|v| v.get("uuid").and_then(Value::as_str).map(str::to_owned));
    // Built by hand so the entry keeps its bytes.
    let body = format!(
        r#"{{"kind":"claude_transcript","session_id":{},"entries":[{}]}}"#,
        Value::String(session_id.to_owned()),
        entry.get()
    );
    NewItem {
        kind: ItemKind::ClaudeTranscript,
        uuid,
        turn_id: Some(turn_id.to_owned()),
        body: RawValue::from_string(body).expect("a transcript item is JSON"),
    }
}
