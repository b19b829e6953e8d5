//! The `RunModel` step as a machine without I/O, as `tollgate_claude`'s segment machine is for a
//! segment: told what its driver ([`super::run_model::run`]) read or ran — the session's rows,
//! how the segment ended, where the session stands at that end, the factory's review, how the
//! commit went — it answers what to do next ([`Effect`]): run the segment, read, apply a cancel,
//! have the approvals reviewed, commit this transition, pre-start a warm CLI. Every decision of
//! the step is made here and unit-tested; the driver reads, runs and writes.
//!
//! ```text
//!  plan ──► Commit ────────────────────────────────────────────────► committed ─► Done
//!    └────► RunSegment ─► ended ─► ReadEnd ─► end_read ─┬─► Cancel (the step is over)
//!                                                      └─► (Review ─► reviewed) ─► Commit
//!                                                            committed ─► Prestart | Done
//! ```

use serde_json::Value;
use tollgate_engine::catalog::ToolKind;
use tollgate_engine::policy::Policies;
use tollgate_engine::session::batches::AheadState;
use tollgate_engine::session::grants::SessionGrant;
use tollgate_engine::session::tools::{CliRun, on_cli_run};
use tollgate_engine::session::turn::{self, Claims, HistoryItem, Plan, PlannedStart, SegmentRun};
use tollgate_engine::session::turn::{SegmentResult, TranscriptSource};
use tollgate_engine::session::{
    CallEntry, EngineError, FailureReason, Limits, NewItem, RunModelStep, RunState, StepKind, Transition,
    TurnTrace, inline, subagents,
};
use tollgate_sessions::edits;
use tollgate_store::PendingCancel;

use super::StepError;
use crate::proxy::ProxySummary;

/// What the driver does next.
#[derive(Debug)]
pub(crate) enum Effect {
    /// Run the planned segment ([`ModelStep::run_mut`] lends it), then [`ModelStep::notify_ended`].
    RunSegment,
    /// Read where the session stands now that the segment ended, then
    /// [`ModelStep::notify_end_read`].
    ReadEnd(EndReads),
    /// Let the inline writes still running record, then end the turn cancelled as `request` asked,
    /// with what the segment cost: the step is then over.
    Cancel {
        /// The client's request.
        request: PendingCancel,
        /// What the interrupted segment cost (US dollars).
        cost_usd: f64,
    },
    /// Have the options factory review the approvals the transition opens, then
    /// [`ModelStep::notify_reviewed`].
    Review(Box<Transition>),
    /// Commit the transition, then [`ModelStep::notify_committed`].
    Commit(Box<Transition>),
    /// Pre-start a warm CLI like the segment's: the step is then over.
    Prestart(Warm),
    /// The step is over.
    Done,
}

/// What [`Effect::ReadEnd`] reads besides the session's calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EndReads {
    /// The pending cancel request: one asked while the segment ran wins over how it ended,
    /// unless the turn completed.
    pub cancel: bool,
    /// The session's grants and where the turn's interrupts ahead stand: a deferred call is
    /// decided with what changed while the segment ran (a revoked grant, a decision made ahead).
    pub grants: bool,
}

/// Which warm CLI to pre-start once the segment's end is committed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Warm {
    /// A fresh CLI for the agent's next new session (after a fresh segment that completed).
    Fresh,
    /// A `--resume` of this CLI session, for the segment after the deferred call: only when the
    /// call's next step runs unattended (nothing holds a process for a human).
    Resume(String),
}

/// How the segment ended, as its driver saw it.
#[derive(Debug)]
pub(crate) struct Ended {
    /// What the CLI's run came to.
    pub result: SegmentResult,
    /// What came of the approved CLI call the segment resumed.
    pub cli_run: CliRun,
    /// What the model proxy measured of the segment's requests; `None` when it had no proxy.
    pub proxy: Option<ProxySummary>,
    /// The transcripts of the subagents that ran in it, stored with its end.
    pub subagents: Vec<NewItem>,
    /// The input schemas of the agent's custom tools, for an approver's edit.
    pub schemas: Vec<(String, Value)>,
}

/// Where the session stands at the segment's end.
#[derive(Debug, Default)]
pub(crate) struct EndRead {
    /// The pending cancel request, when asked for.
    pub cancel: Option<PendingCancel>,
    /// The session's calls, the inline writes the segment recorded among them.
    pub calls: Vec<CallEntry>,
    /// When asked for: the session's grants and where the turn's interrupts ahead stand.
    pub grants: Option<Grants>,
}

/// What decides a deferred call besides the policy, as it stands at the segment's end.
#[derive(Debug, Default)]
pub(crate) struct Grants {
    /// The session's grants, the revoked ones with their revocation.
    pub grants: Vec<SessionGrant>,
    /// Where the turn's interrupts opened ahead stand, by interrupt id.
    pub ahead: Vec<(String, AheadState)>,
}

/// One `RunModel` step. See the module docs.
#[derive(Debug)]
pub(crate) struct ModelStep<'a> {
    policies: &'a Policies,
    /// The approved CLI call the segment resumes, if it does.
    resume: Option<String>,
    state: RunState,
    /// The segment to run, once planned.
    run: Option<Box<SegmentRun>>,
    /// Whether it starts a fresh CLI session.
    fresh: bool,
    /// How the segment ended, until the end is read.
    ended: Option<Ended>,
    /// What the proxy measured the segment to cost.
    cost_usd: f64,
    /// What a segment that failed cost, added to the session's spend.
    failed_cost: f64,
    /// The session's calls at the segment's end.
    calls: Vec<CallEntry>,
    /// The warm CLI to pre-start once committed.
    warm: Option<Warm>,
    /// The custom tools' input schemas, for [`ModelStep::notify_reviewed`].
    schemas: Vec<(String, Value)>,
}

/// The rows a `RunModel` step is planned from.
pub(crate) struct Rows<'r> {
    /// The session's run state.
    pub state: RunState,
    /// Its items, in order.
    pub history: &'r [HistoryItem<'r>],
    /// Where its transcript comes from.
    pub transcript: TranscriptSource,
    /// Its calls.
    pub calls: &'r [CallEntry],
}

impl<'a> ModelStep<'a> {
    /// Plans `step` from the session's rows: either a segment to run or a transition to commit.
    pub(crate) fn plan(
        policies: &'a Policies,
        step: &RunModelStep,
        claims: Claims,
        rows: Rows<'_>,
        limits: &Limits,
    ) -> Result<(Self, Effect), EngineError> {
        let Rows { state, history, transcript, calls } = rows;
        let plan = turn::plan_run_model(step, claims, &state, history, transcript, calls, limits)?;
        let mut machine = ModelStep {
            policies,
            resume: step.resume.clone(),
            state,
            run: None,
            fresh: false,
            ended: None,
            cost_usd: 0.0,
            failed_cost: 0.0,
            calls: Vec::new(),
            warm: None,
            schemas: Vec::new(),
        };
        let effect = match plan {
            Plan::Finish(mut transition) => {
                inline::settle_on_turn_failure(&mut transition, calls);
                Effect::Commit(transition)
            }
            Plan::Run(run) => {
                machine.fresh = matches!(run.start, PlannedStart::Fresh { .. });
                machine.run = Some(run);
                Effect::RunSegment
            }
        };
        Ok((machine, effect))
    }

    /// The segment to run (after [`Effect::RunSegment`]).
    ///
    /// # Panics
    /// When no segment was planned: a driver that did not get [`Effect::RunSegment`].
    pub(crate) fn run_mut(&mut self) -> &mut SegmentRun {
        self.run.as_mut().expect("RunSegment was asked: a segment is planned")
    }

    /// Gives the planned segment `trace` when its turn has none yet: the trace the turn's first
    /// step fixes, stored with the turn if the segment defers a call. A turn in progress keeps its
    /// stored one.
    pub(crate) fn start_trace(&mut self, trace: TurnTrace) {
        if let Some(run) = self.run.as_mut() {
            run.trace.get_or_insert(trace);
        }
    }

    /// The planned segment, until its end is read.
    ///
    /// # Panics
    /// When no segment was planned.
    pub(crate) fn run_ref(&self) -> &SegmentRun {
        self.run.as_ref().expect("a segment is planned")
    }

    /// The session's run state when the step started.
    pub(crate) fn state(&self) -> &RunState {
        &self.state
    }

    /// How the segment ended, with the proxy's accounting (after [`ModelStep::notify_ended`]).
    pub(crate) fn result(&self) -> Option<&SegmentResult> {
        self.ended.as_ref().map(|ended| &ended.result)
    }

    /// The segment ended. A segment the proxy stopped at the spend limit fails with that reason;
    /// the cost of one whose requests went through the proxy is what the proxy measured; a failed
    /// segment's requests count against the limit too.
    pub(crate) fn notify_ended(&mut self, mut ended: Ended) -> Effect {
        if let Some(summary) = &ended.proxy {
            ended.result = with_proxy_accounting(ended.result, summary);
            self.cost_usd = summary.cost_usd;
            if matches!(ended.result, SegmentResult::Failed { .. } | SegmentResult::LimitReached { .. }) {
                self.failed_cost = summary.cost_usd;
            }
        }
        let reads = EndReads {
            cancel: !matches!(ended.result, SegmentResult::Completed { .. }),
            grants: matches!(ended.result, SegmentResult::Deferred { .. }),
        };
        self.schemas = std::mem::take(&mut ended.schemas);
        self.ended = Some(ended);
        Effect::ReadEnd(reads)
    }

    /// Where the session stands at the segment's end: a cancel asked meanwhile ends the turn;
    /// otherwise the segment's end is the engine's transition, with who may decide the approvals
    /// it opens, their deadlines and summaries, reviewed by the factory when it opens any.
    pub(crate) fn notify_end_read(&mut self, read: EndRead) -> Effect {
        let ended = self.ended.take().expect("the segment ended before its end is read");
        let mut run = self.run.take().expect("a segment ran");
        if let Some(request) = read.cancel {
            return Effect::Cancel { request, cost_usd: self.cost_usd };
        }
        let mut calls = read.calls;
        // The run of the approved CLI call the segment resumed: its record comes from it.
        let cli_record = self
            .resume
            .as_ref()
            .and_then(|id| calls.iter().find(|call| &call.tool_call_id == id && call.turn_id == run.turn_id))
            .and_then(|call| on_cli_run(call, ended.cli_run));
        if let Some((recorded, _)) = &cli_record
            && let Some(call) = calls.iter_mut().find(|call| call.tool_call_id == recorded.tool_call_id)
        {
            *call = recorded.clone();
        }
        if let Some(Grants { grants, ahead }) = read.grants {
            run.grants = grants;
            run.ahead_states = ahead;
        }
        self.warm = match &ended.result {
            SegmentResult::Completed { .. } if self.fresh => Some(Warm::Fresh),
            SegmentResult::Deferred { session_id, .. } => Some(Warm::Resume(session_id.clone())),
            _ => None,
        };
        let ran = matches!(ended.result, SegmentResult::Completed { .. } | SegmentResult::Deferred { .. });
        let mut transition = turn::on_segment(&run, &self.state, &calls, ended.result);
        if let Some((recorded, finished)) = cli_record {
            transition.calls.push(recorded);
            transition.events.insert(0, finished);
        }
        if ran {
            subagents::place(&mut transition.items, ended.subagents);
        }
        inline::settle_on_turn_failure(&mut transition, &calls);
        // The API may not load the agent: the interrupt carries who may decide it, its approval
        // deadline (which any Worker fires from the stored request) and the sentence an approver
        // reads first.
        turn::with_approvers(&mut transition, self.policies);
        turn::with_deadlines(&mut transition, self.policies);
        turn::with_summaries(&mut transition, self.policies);
        self.calls = calls;
        if transition.interrupts.is_empty() {
            self.notify_reviewed(transition)
        } else {
            Effect::Review(Box::new(transition))
        }
    }

    /// The session's calls at the segment's end (for the factory's review).
    pub(crate) fn calls(&self) -> &[CallEntry] {
        &self.calls
    }

    /// The factory reviewed the approvals (or has no review): the transition gets the schema an
    /// approver's edit must fit and the failed segment's cost, and is committed.
    pub(crate) fn notify_reviewed(&mut self, mut transition: Transition) -> Effect {
        if !transition.interrupts.is_empty() {
            let schemas = &self.schemas;
            edits::with_input_schemas(&mut transition, |tool, kind| match kind {
                ToolKind::Custom => schemas.iter().find(|(name, _)| name == tool).map(|(_, s)| s.clone()),
                ToolKind::Cli => edits::cli_tool_schema(tool),
            });
        }
        if self.failed_cost > 0.0 {
            let mut next = transition.run_state.take().unwrap_or_else(|| self.state.clone());
            next.cost_usd += self.failed_cost;
            transition.run_state = Some(next);
        }
        let unattended = transition
            .steps
            .iter()
            .any(|step| [StepKind::CallTool, StepKind::CallSingleAttemptTool].contains(&step.kind));
        if matches!(self.warm, Some(Warm::Resume(_))) && !unattended {
            self.warm = None;
        }
        Effect::Commit(Box::new(transition))
    }

    /// The commit went as `outcome` says: a failed one is the step's error (nothing is pre-started).
    pub(crate) fn notify_committed(&mut self, outcome: Result<(), StepError>) -> Result<Effect, StepError> {
        outcome?;
        Ok(self.warm.take().map_or(Effect::Done, Effect::Prestart))
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

#[cfg(test)]
mod tests {
    use serde_json::json;
    use serde_json::value::RawValue;
    use tollgate_engine::gate::DeferredCall;
    use tollgate_engine::policy::{DeferredRun, Effect as Kind, Handling, ToolPolicy};
    use tollgate_engine::session::{CallState, ItemKind, Usage};

    use super::*;

    /// One prompt to answer.
    fn prompt() -> (i64, String) {
        (1, json!({"kind": "user_prompt", "text": "refund order 7"}).to_string())
    }

    fn planned<'p>(policies: &'p Policies, rows: &[(i64, String)]) -> (ModelStep<'p>, Effect) {
        let history: Vec<HistoryItem<'_>> = rows
            .iter()
            .map(|(seq, body)| HistoryItem { seq: *seq, kind: Some(ItemKind::UserPrompt), body })
            .collect();
        let rows = Rows {
            state: RunState::default(),
            history: &history,
            transcript: TranscriptSource::Items,
            calls: &[],
        };
        ModelStep::plan(policies, &RunModelStep::default(), Claims::nth(1), rows, &Limits::default()).unwrap()
    }

    fn answered(proxy_cost: Option<f64>) -> Ended {
        let result = SegmentResult::Completed {
            session_id: "cli-1".into(),
            result: "refunded".into(),
            entries: vec![RawValue::from_string(r#"{"type":"assistant","uuid":"a1"}"#.into()).unwrap()],
            usage: Usage::default(),
            cost_usd: Some(9.0),
        };
        ended(result, proxy_cost)
    }

    fn ended(result: SegmentResult, proxy_cost: Option<f64>) -> Ended {
        let proxy =
            proxy_cost.map(|cost_usd| ProxySummary { requests: 1, cost_usd, ..ProxySummary::default() });
        Ended { result, cli_run: CliRun::NotStarted, proxy, subagents: Vec::new(), schemas: Vec::new() }
    }

    fn deferred(requires_approval: bool) -> SegmentResult {
        let (effect, runs_in) = (Kind::NonIdempotentWrite, DeferredRun::CallSingleAttemptTool);
        SegmentResult::Deferred {
            session_id: "cli-1".into(),
            call: DeferredCall {
                tool_use_id: "toolu_1".into(),
                tool_name: "create_refund".into(),
                kind: ToolKind::Custom,
                arguments: json!({"order_id": "7"}),
                policy: ToolPolicy { effect, requires_approval },
                handling: Handling::Deferred { requires_approval, runs_in },
                held_back: Vec::new(),
            },
            entries: Vec::new(),
            usage: Usage::default(),
            cost_usd: None,
        }
    }

    fn committed(effect: Effect) -> Transition {
        match effect {
            Effect::Commit(transition) => *transition,
            other => panic!("expected a commit, got {other:?}"),
        }
    }

    fn events(transition: &Transition) -> Vec<&str> {
        transition.events.iter().map(|e| e.kind.as_str()).collect()
    }

    #[test]
    fn a_wake_with_nothing_to_answer_commits_at_once_and_starts_no_cli() {
        let policies = Policies::default();
        let (mut step, effect) = planned(&policies, &[]);
        let transition = committed(effect);
        assert_eq!(
            transition.finish,
            tollgate_engine::session::Finish::Done(json!({"outcome": "nothing_to_do"}))
        );
        assert!(matches!(step.notify_committed(Ok(())), Ok(Effect::Done)));
    }

    #[test]
    fn a_cancel_asked_mid_tool_wins_over_the_interrupted_segment_and_charges_what_it_cost() {
        let policies = Policies::default();
        let (mut step, effect) = planned(&policies, &[prompt()]);
        assert!(matches!(effect, Effect::RunSegment));
        assert_eq!(step.run_mut().turn_id, "turn-1");
        let interrupted =
            SegmentResult::Failed { error: "the segment was cancelled".into(), retryable: true };
        let read = step.notify_ended(ended(interrupted, Some(0.25)));
        assert!(matches!(read, Effect::ReadEnd(EndReads { cancel: true, grants: false })), "{read:?}");
        let request = PendingCancel { requested_by: "ops".into(), requested_at: 5 };
        let effect = step.notify_end_read(EndRead { cancel: Some(request.clone()), ..EndRead::default() });
        match effect {
            Effect::Cancel { request: asked, cost_usd } => assert_eq!((asked, cost_usd), (request, 0.25)),
            other => panic!("the cancel wins: {other:?}"),
        }
    }

    #[test]
    fn a_completed_turn_is_not_cancelled_costs_what_the_proxy_measured_and_prestarts_a_fresh_cli() {
        let policies = Policies::default();
        let (mut step, _) = planned(&policies, &[prompt()]);
        let read = step.notify_ended(answered(Some(0.5)));
        assert!(matches!(read, Effect::ReadEnd(EndReads { cancel: false, grants: false })), "{read:?}");
        let transition = committed(step.notify_end_read(EndRead::default()));
        assert!(events(&transition).contains(&"turn_completed"), "{:?}", events(&transition));
        let state = transition.run_state.expect("the turn's end changes the run state");
        assert_eq!(state.cost_usd, 0.5, "the proxy's measure, not the CLI's 9.0");
        assert!(matches!(step.notify_committed(Ok(())), Ok(Effect::Prestart(Warm::Fresh))));
    }

    #[test]
    fn a_failed_commit_is_the_steps_error_and_prestarts_nothing() {
        let policies = Policies::default();
        let (mut step, _) = planned(&policies, &[prompt()]);
        step.notify_ended(answered(None));
        committed(step.notify_end_read(EndRead::default()));
        assert!(matches!(step.notify_committed(Err(StepError::LeaseLost)), Err(StepError::LeaseLost)));
    }

    #[test]
    fn a_failed_segment_adds_its_cost_and_one_stopped_at_the_spend_limit_fails_the_turn_for_good() {
        let policies = Policies::default();
        let (mut step, _) = planned(&policies, &[prompt()]);
        let failed = SegmentResult::Failed { error: "the CLI exited".into(), retryable: true };
        step.notify_ended(ended(failed, Some(0.5)));
        let transition = committed(step.notify_end_read(EndRead::default()));
        assert_eq!(
            transition.run_state.map(|s| s.cost_usd),
            Some(0.5),
            "its requests count against the limit"
        );
        assert!(matches!(step.notify_committed(Ok(())), Ok(Effect::Done)), "no warm CLI after a failure");

        let (mut step, _) = planned(&policies, &[prompt()]);
        let mut stopped = answered(Some(1.0));
        stopped.proxy.as_mut().unwrap().stopped = Some("the session's spend limit of $1 was reached".into());
        step.notify_ended(stopped);
        assert!(matches!(
            step.result(),
            Some(SegmentResult::LimitReached { reason: FailureReason::SpendLimit, .. })
        ));
        let transition = committed(step.notify_end_read(EndRead::default()));
        assert!(events(&transition).contains(&"turn_failed"), "{:?}", events(&transition));
    }

    #[test]
    fn a_deferred_write_reads_the_grants_and_is_reviewed_and_only_one_that_runs_unattended_prestarts() {
        let policies = Policies::default();
        let (mut step, _) = planned(&policies, &[prompt()]);
        let read = step.notify_ended(ended(deferred(true), None));
        assert!(matches!(read, Effect::ReadEnd(EndReads { cancel: true, grants: true })), "{read:?}");
        let reviewed =
            match step.notify_end_read(EndRead { grants: Some(Default::default()), ..EndRead::default() }) {
                Effect::Review(transition) => *transition,
                other => panic!("an approval opens: the factory reviews it first, {other:?}"),
            };
        assert_eq!(reviewed.interrupts.len(), 1);
        committed(step.notify_reviewed(reviewed));
        assert!(
            matches!(step.notify_committed(Ok(())), Ok(Effect::Done)),
            "nothing holds a process for a human"
        );

        let (mut step, _) = planned(&policies, &[prompt()]);
        step.notify_ended(ended(deferred(false), None));
        let transition = committed(
            step.notify_end_read(EndRead { grants: Some(Default::default()), ..EndRead::default() }),
        );
        assert!(transition.steps.iter().any(|s| s.kind == StepKind::CallSingleAttemptTool));
        assert!(
            matches!(step.notify_committed(Ok(())), Ok(Effect::Prestart(Warm::Resume(id))) if id == "cli-1")
        );
    }

    /// An approved `Bash` call, as the turn's first segment deferred it to a human and the human
    /// approved it: the run state and calls its resumed segment is planned from.
    fn an_approved_bash_call(policies: &Policies) -> (RunState, Vec<CallEntry>) {
        let (mut step, _) = planned(policies, &[prompt()]);
        let call = DeferredCall {
            tool_use_id: "toolu_bash".into(),
            tool_name: "Bash".into(),
            kind: ToolKind::Cli,
            arguments: json!({"command": "sleep 296 | cat"}),
            policy: ToolPolicy { effect: Kind::NonIdempotentWrite, requires_approval: true },
            handling: Handling::Deferred { requires_approval: true, runs_in: DeferredRun::ResumedSegment },
            held_back: Vec::new(),
        };
        let result = SegmentResult::Deferred {
            session_id: "cli-1".into(),
            call,
            entries: Vec::new(),
            usage: Usage::default(),
            cost_usd: None,
        };
        step.notify_ended(ended(result, None));
        let read = EndRead { grants: Some(Default::default()), ..EndRead::default() };
        let Effect::Review(deferred) = step.notify_end_read(read) else { panic!("it waits for approval") };
        let deferred = committed(step.notify_reviewed(*deferred));
        let approved = tollgate_engine::session::tools::on_approval(
            &deferred.calls[0],
            &tollgate_engine::session::client::HumanDecision { approved: true, ..Default::default() },
        );
        (deferred.run_state.expect("the turn is in progress"), approved.calls)
    }

    #[test]
    fn an_approved_cli_call_whose_resumed_segment_ended_without_its_result_is_recorded_outcome_unknown() {
        let policies = Policies::default();
        let (state, calls) = an_approved_bash_call(&policies);
        assert_eq!(calls[0].state, CallState::Queued, "approved, not run yet");
        let (seq, body) = prompt();
        let resumed = |cli_run: CliRun, result: SegmentResult| {
            let history = [HistoryItem { seq, kind: Some(ItemKind::UserPrompt), body: &body }];
            let rows = Rows {
                state: state.clone(),
                history: &history,
                transcript: TranscriptSource::Items,
                calls: &calls,
            };
            let step = RunModelStep { turn_id: Some("turn-1".into()), resume: Some("toolu_bash".into()) };
            let (mut step, effect) =
                ModelStep::plan(&policies, &step, Claims::nth(1), rows, &Limits::default()).unwrap();
            assert!(matches!(effect, Effect::RunSegment), "{effect:?}");
            step.notify_ended(Ended { cli_run, ..ended(result, None) });
            committed(step.notify_end_read(EndRead { calls: calls.clone(), ..EndRead::default() }))
        };
        // The CLI was let run it, and its segment was cut (killed, or at its timeout) before the
        // CLI reported a result: it may have run.
        let cut = SegmentResult::Failed { error: "the CLI exited early".into(), retryable: true };
        let transition = resumed(CliRun::NoResult, cut.clone());
        let recorded =
            transition.calls.iter().rev().find(|c| c.tool_call_id == "toolu_bash").expect("its record");
        assert_eq!(recorded.state, CallState::OutcomeUnknown, "{recorded:?}");
        assert_eq!(events(&transition)[0], "tool_call_finished", "{:?}", events(&transition));
        assert!(events(&transition).contains(&"attempt_failed"), "the next attempt tells the model");
        // Cut before the gate let the CLI run it: still approved, for the next attempt to run.
        let transition = resumed(CliRun::NotStarted, cut);
        assert!(transition.calls.iter().all(|c| c.tool_call_id != "toolu_bash"), "{:?}", transition.calls);
        // Its result, as the CLI reported it: the record.
        let failed = CliRun::Result { text: "No such file".into(), is_error: true };
        let transition = resumed(failed, answered(None).result);
        let recorded =
            transition.calls.iter().rev().find(|c| c.tool_call_id == "toolu_bash").expect("its record");
        assert_eq!(recorded.state, CallState::Failed { error: "No such file".into() });
    }

    #[test]
    fn the_trace_a_new_turn_starts_with_is_stored_with_the_turn_its_segment_defers() {
        let policies = Policies::default();
        let trace = |span: &str| TurnTrace {
            trace_id: "4bf92f3577b34da6a3ce929d0e0e4736".into(),
            span_id: span.into(),
            started_at_ms: 7,
        };
        let (mut step, _) = planned(&policies, &[prompt()]);
        step.start_trace(trace("00f067aa0ba902b7"));
        // A second call keeps the first: the turn's first step fixed it.
        step.start_trace(trace("53995c3f42cd8ad8"));
        assert_eq!(step.run_ref().trace, Some(trace("00f067aa0ba902b7")));
        step.notify_ended(ended(deferred(false), None));
        let transition = committed(
            step.notify_end_read(EndRead { grants: Some(Default::default()), ..EndRead::default() }),
        );
        let turn = transition.run_state.and_then(|state| state.turn).expect("the turn goes on");
        assert_eq!(turn.trace, Some(trace("00f067aa0ba902b7")));
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
}
