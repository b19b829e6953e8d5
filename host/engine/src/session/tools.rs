//! The steps of a deferred call: `AwaitToolApproval`, `CallTool`, `CallSingleAttemptTool` and
//! `ResumeTurn`.

use serde_json::{Value, json};

use super::client::{DecisionScope, HumanDecision};
use super::grants::GrantRef;
use super::{
    CALL_TOOL_ATTEMPTS, CallEntry, CallState, CallStep, Finish, NextStep, RunModelStep, SessionStatus, Start,
    StepKind, Transition,
};
use crate::catalog::ToolKind;
use crate::events::{self, Payload};
use crate::media::MediaRef;
use crate::policy::DeferredRun;
use crate::record::Outcome;
use crate::texts;

/// The step that runs an approved (or approval-free) deferred call.
pub(super) fn tool_step(call: &CallEntry, payload: Value) -> NextStep {
    let kind = match (call.kind, call.runs_in) {
        (ToolKind::Cli, _) | (_, DeferredRun::ResumedSegment) => StepKind::ResumeTurn,
        (ToolKind::Custom, DeferredRun::CallSingleAttemptTool) => StepKind::CallSingleAttemptTool,
        (ToolKind::Custom, DeferredRun::CallTool) => StepKind::CallTool,
    };
    NextStep { kind, payload, start: Start::Now, only_if_prompts_after: None, session_status: None }
}

fn call_step(call: &CallEntry) -> Value {
    serde_json::to_value(CallStep { turn_id: call.turn_id.clone(), tool_call_id: call.tool_call_id.clone() })
        .expect("serializes")
}

/// The call gets its final outcome; `ResumeTurn` follows.
fn record(call: &CallEntry, outcome: Outcome) -> Transition {
    let mut t = Transition::new(Finish::Done(json!({"status": outcome.status()})));
    let finished = call.with_state(outcome.into());
    t.steps.push(NextStep {
        kind: StepKind::ResumeTurn,
        payload: call_step(call),
        start: Start::Now,
        only_if_prompts_after: None,
        session_status: None,
    });
    t.status = Some(SessionStatus::Running);
    t = t.event(finished.finished_event(true));
    t.calls.push(finished);
    t
}

/// A claimed `AwaitToolApproval` whose interrupt has `decision`.
pub fn on_approval(call: &CallEntry, decision: &HumanDecision) -> Transition {
    if let Some(outcome) = call.state.outcome() {
        // Decided before (a repeat after a crash between commits cannot happen, but a record
        // that is final needs only the resume).
        return record(call, outcome);
    }
    // A decision made ahead in a batch: the record names who decided it and when.
    let mut stamped = call.clone();
    if let (Some(ahead), Some(stamp)) = (stamped.decided_ahead.as_mut(), decision.granted.as_ref()) {
        ahead.decided_by = Some(stamp.granted_by.clone());
        ahead.decided_at = Some(stamp.granted_at);
    }
    let call = &stamped;
    if !decision.approved {
        return record(call, Outcome::Rejected { message: decision.message.clone() });
    }
    let mut approved = call.clone();
    if let Some(input) = decision.updated_input.as_ref().filter(|input| **input != call.arguments) {
        approved.original_arguments = Some(call.arguments.clone());
        approved.arguments = input.clone();
    }
    if decision.scope == DecisionScope::Session {
        // The call's approval also allows the tool's later calls in the session.
        let stamp = decision.granted.clone();
        approved.grants_session = Some(GrantRef {
            tool_name: call.tool_name.clone(),
            granted_by: stamp.as_ref().map_or_else(String::new, |s| s.granted_by.clone()),
            granted_at: stamp.map_or(0, |s| s.granted_at),
            decision_id: call.tool_call_id.clone(),
        });
    }
    let call = &approved;
    match call.kind {
        // The resumed segment's CLI runs it; its record comes from what that run returned
        // ([`on_cli_run`]).
        ToolKind::Cli => {
            let mut t = Transition::new(Finish::Done(json!({"approved": true})));
            let queued = call.with_state(CallState::Queued);
            t.steps.push(tool_step(&queued, call_step(call)));
            t.calls.push(queued);
            t.status = Some(SessionStatus::Running);
            t
        }
        ToolKind::Custom => {
            let mut t = Transition::new(Finish::Done(json!({"approved": true})));
            let runs_in = match call.runs_in {
                // An approved custom read runs in CallTool (the reference adapters' "Effects and policies").
                DeferredRun::ResumedSegment => DeferredRun::CallTool,
                other => other,
            };
            let queued = CallEntry { runs_in, ..call.with_state(CallState::Queued) };
            t.steps.push(tool_step(&queued, call_step(call)));
            t.calls.push(queued);
            t.status = Some(SessionStatus::Running);
            t
        }
    }
}

/// What a claimed tool step does first.
#[derive(Clone, Debug)]
pub enum Begin {
    /// Run the tool under this key and attempt. Commit `mark_started` (it keeps the claim)
    /// before the call, and run nothing if that commit fails.
    Run {
        /// `<session>/<turn>/<tool call>`.
        idempotency_key: String,
        /// The attempt, from 1.
        attempt: u32,
        /// The "started" mark.
        mark_started: Box<Transition>,
    },
    /// Do not run the tool; commit this.
    Finish(Box<Transition>),
}

/// A claimed `CallTool` or `CallSingleAttemptTool`, claimed for the `attempt`-th time.
pub fn begin_tool_step(session_id: &str, single_attempt: bool, attempt: i64, call: &CallEntry) -> Begin {
    if let Some(outcome) = call.state.outcome() {
        return Begin::Finish(Box::new(record(call, outcome)));
    }
    let started_before = matches!(call.state, CallState::Started { .. });
    if (single_attempt && started_before) || attempt > CALL_TOOL_ATTEMPTS {
        // A single-attempt call that started may have taken effect: never run it again.
        return Begin::Finish(Box::new(record(call, Outcome::OutcomeUnknown)));
    }
    let mut mark = Transition::new(Finish::Keep);
    mark.calls.push(call.with_state(CallState::Started { attempt }));
    mark = mark.event(call.started_event(attempt, true));
    Begin::Run {
        idempotency_key: call.idempotency_key(session_id),
        attempt: u32::try_from(attempt).unwrap_or(u32::MAX),
        mark_started: Box::new(mark),
    }
}

/// How one run of a tool ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolRun {
    /// It returned (an `is_error` result is a failure the model reads).
    Output {
        /// The result's text.
        text: String,
        /// Whether it is an error result.
        is_error: bool,
        /// The result's images, stored already, after the text.
        images: Vec<MediaRef>,
    },
    /// It never ran: the arguments do not fit, or the tool is gone. Records `failed`.
    Refused {
        /// What the model reads.
        message: String,
    },
    /// It failed, and nothing it did left the machine (its connection was refused, the
    /// allow-list denied its request, it could not start): it provably did not take effect.
    Contained {
        /// What happened.
        message: String,
    },
    /// It reported a permanent failure of its own (`call-error::failed`), and may have taken
    /// effect before it did.
    Failed {
        /// Its message.
        message: String,
    },
    /// It failed (threw, panicked, trapped, timed out, a transient error), and may have taken
    /// effect.
    Error {
        /// What happened, for the log and the event.
        message: String,
    },
}

impl ToolRun {
    /// The images of an output (none for anything else).
    pub fn images(&self) -> &[MediaRef] {
        match self {
            ToolRun::Output { images, .. } => images,
            _ => &[],
        }
    }
}

/// What a run means for its call ([`settle`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settled {
    /// The call's final outcome.
    Record(Outcome),
    /// Run it again under the same key, after this attempt's failure.
    Retry {
        /// The failure, for the `attempt_failed` event.
        message: String,
    },
}

/// The contract of a tool's run, for a deferred call and a recorded inline write alike:
///
/// | run | idempotent write (attempt < 3) | its last attempt | single-attempt write |
/// | --- | --- | --- | --- |
/// | an output | `succeeded` | `succeeded` | `succeeded` |
/// | an `is-error` output, or refused arguments | `failed` | `failed` | `failed` |
/// | contained, on the call's first start | `failed`, "never left" | the same | the same |
/// | its own `failed` | `failed` | `failed` | `outcome_unknown` |
/// | an error (thrown, trapped, …) | attempted again | `outcome_unknown` | `outcome_unknown` |
///
/// Only what the tool returns (an output) or provably never did (refused, contained) is a
/// definite `failed`; an error that may have taken effect is retried under the call's key while
/// that is safe, then `outcome_unknown`. A contained failure after an earlier start of the call
/// (a retried attempt, a rerun after a crash) is an error: the earlier attempt may have taken
/// effect. `tool` names the tool in the "never left" text.
pub fn settle(run: ToolRun, tool: &str, single_attempt: bool, attempt: i64, first_start: bool) -> Settled {
    let may_retry = !single_attempt && attempt < CALL_TOOL_ATTEMPTS;
    match run {
        ToolRun::Output { text, is_error: false, .. } => Settled::Record(Outcome::Succeeded { output: text }),
        ToolRun::Output { text: error, is_error: true, .. } | ToolRun::Refused { message: error } => {
            Settled::Record(Outcome::Failed { error })
        }
        ToolRun::Contained { message } if first_start => {
            Settled::Record(Outcome::Failed { error: texts::never_left(tool, &message) })
        }
        ToolRun::Failed { message } if !single_attempt => Settled::Record(Outcome::Failed { error: message }),
        ToolRun::Contained { message } | ToolRun::Error { message } if may_retry => {
            Settled::Retry { message }
        }
        ToolRun::Contained { .. } | ToolRun::Failed { .. } | ToolRun::Error { .. } => {
            Settled::Record(Outcome::OutcomeUnknown)
        }
    }
}

/// What a tool run changes.
pub fn on_tool_result(single_attempt: bool, attempt: i64, call: &CallEntry, run: ToolRun) -> Transition {
    // The model reads that an approver changed its input, and how.
    let told = |text: String| match &call.original_arguments {
        Some(original) => format!("{}\n{text}", texts::input_edited_note(original, &call.arguments)),
        None => text,
    };
    let first_start = !matches!(call.state, CallState::Started { .. });
    // An output's images go with its record, whichever it is.
    let with_images = CallEntry { images: run.images().to_vec(), ..call.clone() };
    match settle(run, &call.tool_name, single_attempt, attempt, first_start) {
        Settled::Record(Outcome::Succeeded { output }) => {
            record(&with_images, Outcome::Succeeded { output: told(output) })
        }
        Settled::Record(Outcome::Failed { error }) => {
            record(&with_images, Outcome::Failed { error: told(error) })
        }
        Settled::Record(outcome) => record(call, outcome),
        Settled::Retry { message } => {
            let mut t = Transition::new(Finish::Retry(super::turn::retry_delay(attempt)));
            t.calls.push(call.with_state(CallState::Started { attempt }));
            t.event(Payload::AttemptFailed(events::AttemptFailed {
                turn_id: call.turn_id.clone(),
                step: StepKind::CallTool,
                tool_call_id: Some(call.tool_call_id.clone()),
                attempt,
                error: message,
                deferred: None,
            }))
        }
    }
}

/// What the resumed segment of an approved CLI call saw of its run (the segment runner reports
/// it; [`on_cli_run`] records it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum CliRun {
    /// The gate never let the CLI run it (the segment ended before the CLI asked): it did not
    /// run, and stays approved for the segment's next attempt.
    #[default]
    NotStarted,
    /// The gate let the CLI run it, and the segment ended without its tool result: it may have
    /// run.
    NoResult,
    /// The CLI's tool result for it.
    Result {
        /// Its text, as the model reads it.
        text: String,
        /// Whether the CLI reported it as an error (a command that failed, a denial).
        is_error: bool,
    },
}

/// The record of an approved CLI call from its resumed segment, the TypeScript seed's rule: the
/// CLI's tool result makes it `succeeded` (the result's text) or `failed` (the CLI's error); a
/// segment that let it run and ended without one makes it `outcome_unknown`. `None` while it
/// has not run, or has its record already. Commit the call and its `tool_call_finished` with the
/// segment's end.
pub fn on_cli_run(call: &CallEntry, run: CliRun) -> Option<(CallEntry, super::NewEvent)> {
    if call.kind != ToolKind::Cli || call.state != CallState::Queued {
        return None;
    }
    let outcome = match run {
        CliRun::NotStarted => return None,
        CliRun::NoResult => Outcome::OutcomeUnknown,
        CliRun::Result { text, is_error: false } => Outcome::Succeeded { output: text },
        CliRun::Result { text, is_error: true } => Outcome::Failed { error: text },
    };
    let finished = call.with_state(outcome.into());
    let event = finished.finished_event(true).into();
    Some((finished, event))
}

/// A claimed `ResumeTurn`: the turn's next segment replays the call's record.
pub fn on_resume_turn(step: &CallStep) -> Transition {
    let mut t = Transition::new(Finish::Done(Value::Null));
    t.steps.push(NextStep {
        kind: StepKind::RunModel,
        payload: serde_json::to_value(RunModelStep {
            turn_id: Some(step.turn_id.clone()),
            resume: Some(step.tool_call_id.clone()),
        })
        .expect("serializes"),
        start: Start::Now,
        only_if_prompts_after: None,
        session_status: None,
    });
    t.status = Some(SessionStatus::Running);
    t
}
