//! Recorded inline writes: an approval-free `idempotent_write` custom tool that runs inside its
//! segment ([`Handling::Recorded`](crate::policy::Handling::Recorded)), with `CallTool`'s rules.
//!
//! The call is a [`CallEntry`] like a deferred one (`requires_approval: false`, `runs_in:
//! call_tool`, the same states and record), marked `inline`. While the segment runs, the Worker
//! commits, each under the segment's claim and fence, with the step kept
//! ([`Finish::Keep`](super::Finish::Keep)):
//!
//! 1. [`begin`]: `started` with the attempt, before the tool runs (a Worker that dies during the
//!    call leaves this mark; the rerun counts on from it and calls again under the same key);
//! 2. the tool runs under `<session>/<turn>/<tool call>` ([`CallEntry::idempotency_key`]);
//! 3. [`on_result`]: the final record — *before* the CLI receives the result; or, for a
//!    transient failure before the 3rd attempt, the attempt's failure, and the Worker starts
//!    the next attempt. After 3 attempts the record is `outcome_unknown`.
//!
//! A segment that reruns meets these writes again through the gate
//! ([`crate::gate::Gate::with_inline_writes`], fed by [`unseen_writes`]): a final record is
//! replayed without a call; a started one runs again under its own key.
//!
//! The events are the deferred step's (`tool_call_started` with the arguments and attempt,
//! `attempt_failed`, `tool_call_finished`), with `"deferred": false`.
//!
//! A turn that fails with a write still `started` (its Worker died during the call, and no rerun
//! met it again) records it `outcome_unknown` ([`settle_on_turn_failure`]), as it does an approved
//! CLI call whose run no segment reported.

use serde_json::Value;

use super::tools::{Settled, ToolRun};
use super::turn::{PlannedStart, SegmentRun};
use super::{CALL_TOOL_ATTEMPTS, CallEntry, CallState, StepKind, Transition};
use crate::catalog::ToolKind;
use crate::events::{self, EventKind, Payload};
use crate::gate::InlineWrite;
use crate::record::Outcome;

/// The turn's inline writes that the segment's CLI does not know of: those whose tool call ID
/// the transcript it starts with does not hold (an earlier attempt of this segment made them).
/// Hand them to [`crate::gate::Gate::with_inline_writes`].
pub fn unseen_writes(run: &SegmentRun, calls: &[CallEntry]) -> Vec<InlineWrite> {
    let transcript = match &run.start {
        PlannedStart::Fresh { .. } => None,
        PlannedStart::NewTurn { transcript, .. } | PlannedStart::ResumeCall { transcript, .. } => {
            Some(transcript)
        }
    };
    calls
        .iter()
        .filter(|call| call.inline && call.turn_id == run.turn_id)
        .filter(|call| {
            let quoted = format!("\"{}\"", call.tool_call_id);
            !transcript.is_some_and(|t| t.contains(&quoted))
        })
        .map(|call| InlineWrite {
            tool_call_id: call.tool_call_id.clone(),
            tool_name: call.tool_name.clone(),
            arguments: call.arguments.clone(),
            attempts: match call.state {
                CallState::Started { attempt } => attempt,
                _ => 0,
            },
            outcome: call.state.outcome(),
            images: call.images.iter().cloned().map(Into::into).collect(),
        })
        .collect()
}

/// A new inline write of `turn_id`, under `tool_call_id`, before its first attempt.
pub fn write(turn_id: &str, tool_call_id: &str, tool_name: &str, arguments: Value) -> CallEntry {
    CallEntry {
        inline: true,
        ..CallEntry::new(tool_call_id, tool_name, ToolKind::Custom, arguments, turn_id, CallState::Queued)
    }
}

/// What an inline write does before attempt `attempt`.
#[derive(Clone, Debug)]
pub enum Begin {
    /// Commit `mark_started`, then run the tool under this key and attempt; run nothing if that
    /// commit fails.
    Run {
        /// `<session>/<turn>/<tool call>`.
        idempotency_key: String,
        /// The attempt, from 1.
        attempt: u32,
        /// The "started" mark.
        mark_started: Box<Transition>,
    },
    /// Attempts ran out: commit this `outcome_unknown` record and give the CLI its result.
    Recorded {
        /// The final call.
        call: Box<CallEntry>,
        /// Its commit.
        transition: Box<Transition>,
    },
}

/// What an inline write does before attempt `attempt` (from 1): run it, or, past
/// [`CALL_TOOL_ATTEMPTS`], record `outcome_unknown` without running it.
pub fn begin(session_id: &str, call: &CallEntry, attempt: i64) -> Begin {
    if attempt > CALL_TOOL_ATTEMPTS {
        let (call, transition) = record(call, Outcome::OutcomeUnknown);
        return Begin::Recorded { call: Box::new(call), transition: Box::new(transition) };
    }
    let mut mark = Transition::keep();
    mark.calls.push(call.with_state(CallState::Started { attempt }));
    let mark = mark.event(call.started_event(attempt, false));
    Begin::Run {
        idempotency_key: call.idempotency_key(session_id),
        attempt: u32::try_from(attempt).unwrap_or(u32::MAX),
        mark_started: Box::new(mark),
    }
}

/// What one attempt's run changes.
#[derive(Clone, Debug)]
pub enum After {
    /// The call has its final record: commit `transition`, then give the CLI the record's result.
    Recorded {
        /// The final call.
        call: Box<CallEntry>,
        /// Its commit.
        transition: Box<Transition>,
    },
    /// A transient failure before the last attempt: commit `transition`, wait `delay`, and
    /// [`begin`] the next attempt.
    Retry {
        /// The attempt's failure (its event).
        transition: Box<Transition>,
        /// The pause before the next attempt.
        delay: std::time::Duration,
    },
}

/// What attempt `attempt`'s `run` changes (`CallTool`'s rules, [`super::tools::settle`]).
pub fn on_result(call: &CallEntry, attempt: i64, run: ToolRun) -> After {
    // An output's images go with its record.
    let call = &CallEntry { images: run.images().to_vec(), ..call.clone() };
    // Every attempt before this one started, and may have taken effect.
    match super::tools::settle(run, &call.tool_name, false, attempt, attempt == 1) {
        Settled::Record(outcome) => {
            let (call, transition) = record(call, outcome);
            After::Recorded { call: Box::new(call), transition: Box::new(transition) }
        }
        Settled::Retry { message } => {
            let mut t = Transition::keep();
            t.calls.push(call.with_state(CallState::Started { attempt }));
            let t = t.event(Payload::AttemptFailed(events::AttemptFailed {
                turn_id: call.turn_id.clone(),
                step: StepKind::CallTool,
                tool_call_id: Some(call.tool_call_id.clone()),
                attempt,
                error: message,
                deferred: Some(false),
            }));
            After::Retry { transition: Box::new(t), delay: super::turn::retry_delay(attempt) }
        }
    }
}

/// A transition that fails a turn (a `turn_failed` event) also records `outcome_unknown` for
/// each of the turn's calls [`is_left_unknown`]: an inline write still `started` (its Worker died
/// during the call and no rerun met it again), an approved CLI call whose run no segment
/// reported. It may have taken effect, and no later segment of the turn will call it.
pub fn settle_on_turn_failure(t: &mut Transition, calls: &[CallEntry]) {
    let failed: Vec<String> = t
        .events
        .iter()
        .filter(|e| e.kind == EventKind::TurnFailed)
        .filter_map(|e| e.payload.get("turn_id").and_then(Value::as_str).map(str::to_owned))
        .collect();
    for call in calls.iter().filter(|call| is_left_unknown(call) && failed.contains(&call.turn_id)) {
        let (unknown, recorded) = record(call, Outcome::OutcomeUnknown);
        t.calls.push(unknown);
        t.events.extend(recorded.events);
    }
}

/// Whether the failure of its turn leaves this call `outcome_unknown`: an inline write that
/// started and has no result, or an approved CLI call whose resumed segment never reported its
/// run (the tool may have run). [`settle_on_turn_failure`] records it so, and the turn's failure
/// note tells the model so.
pub fn is_left_unknown(call: &CallEntry) -> bool {
    (call.inline && matches!(call.state, CallState::Started { .. }))
        || (call.kind == ToolKind::Cli && call.state == CallState::Queued)
}

fn record(call: &CallEntry, outcome: Outcome) -> (CallEntry, Transition) {
    let finished = call.with_state(outcome.into());
    let mut t = Transition::keep().event(finished.finished_event(!call.inline));
    t.calls.push(finished.clone());
    (finished, t)
}

#[cfg(test)]
mod tests {
    use crate::session::turn::ResumeTranscript;
    use serde_json::json;
    use serde_json::value::RawValue;

    use super::*;
    use crate::session::Finish;

    fn credit() -> CallEntry {
        write("turn-1", "toolu_1", "record_credit", json!({"order_id": "7", "amount_cents": 100}))
    }

    fn run(start: PlannedStart) -> SegmentRun {
        SegmentRun {
            turn_id: "turn-1".into(),
            attempt: 2,
            lost_workers: 0,
            start,
            turn_records: Vec::new(),
            prompts_upto: 1,
            grants: Vec::new(),
            ahead_states: Vec::new(),
            trace: None,
        }
    }

    #[test]
    fn an_inline_write_is_marked_started_before_it_runs_under_the_calls_key() {
        let Begin::Run { idempotency_key, attempt, mark_started } = begin("s", &credit(), 1) else {
            panic!("the first attempt runs")
        };
        assert_eq!(idempotency_key, "s/turn-1/toolu_1");
        assert_eq!(attempt, 1);
        assert_eq!(mark_started.finish, Finish::Keep, "the segment keeps its claim");
        assert_eq!(mark_started.calls[0].state, CallState::Started { attempt: 1 });
        assert!(mark_started.calls[0].inline);
        assert_eq!(mark_started.events[0].kind, EventKind::ToolCallStarted);
        assert_eq!(mark_started.events[0].payload["arguments"]["order_id"], "7");
        assert!(mark_started.steps.is_empty() && mark_started.run_state.is_none());
    }

    #[test]
    fn its_result_is_the_deferred_steps_record_kept_under_the_claim_with_no_resume_step() {
        let After::Recorded { call, transition } = on_result(
            &credit(),
            1,
            ToolRun::Output { text: "credited c_1".into(), is_error: false, images: Vec::new() },
        ) else {
            panic!("an output is final")
        };
        assert_eq!(call.state, CallState::Succeeded { output: "credited c_1".into() });
        assert_eq!(transition.finish, Finish::Keep);
        assert!(transition.steps.is_empty(), "the segment goes on: no ResumeTurn");
        assert_eq!(transition.calls[0], *call);
        assert_eq!(transition.events[0].payload["status"], "succeeded");
        let record = call.record().expect("final");
        assert_eq!(record.tool_call_id, "toolu_1");
        assert_eq!(call.to_value()["inline"], true);
        assert_eq!(call.to_value()["runs_in"], "call_tool");
        let refused = on_result(&credit(), 1, ToolRun::Refused { message: "Input validation error".into() });
        assert!(matches!(refused, After::Recorded { call, .. } if call.state.name() == "failed"));
    }

    #[test]
    fn transient_failures_retry_three_attempts_then_record_outcome_unknown() {
        let error = || ToolRun::Error { message: "payments service unreachable".into() };
        for attempt in 1..CALL_TOOL_ATTEMPTS {
            let After::Retry { transition, delay } = on_result(&credit(), attempt, error()) else {
                panic!("attempt {attempt} retries")
            };
            assert_eq!(transition.events[0].kind, EventKind::AttemptFailed);
            assert!(delay.as_secs() >= 1);
        }
        let last = on_result(&credit(), CALL_TOOL_ATTEMPTS, error());
        assert!(matches!(last, After::Recorded { call, .. } if call.state == CallState::OutcomeUnknown));
        let past = begin("s", &credit(), CALL_TOOL_ATTEMPTS + 1);
        assert!(
            matches!(past, Begin::Recorded { call, .. } if call.state == CallState::OutcomeUnknown),
            "a rerun past the attempts records outcome_unknown without running the tool"
        );
    }

    #[test]
    fn an_inline_write_that_threw_is_retried_and_one_that_never_sent_anything_is_failed() {
        let thrown = ToolRun::Error { message: "ValueError: bad answer".into() };
        assert!(matches!(on_result(&credit(), 1, thrown), After::Retry { .. }));
        let refused = ToolRun::Contained { message: "connection refused".into() };
        let After::Recorded { call, .. } = on_result(&credit(), 1, refused.clone()) else {
            panic!("nothing left on the first attempt: final")
        };
        assert_eq!(call.state.name(), "failed");
        assert!(call.state.text().is_some_and(|t| t.contains("never left this machine")), "{call:?}");
        assert!(
            matches!(on_result(&credit(), 2, refused), After::Retry { .. }),
            "the first attempt may have taken effect"
        );
        let own = ToolRun::Failed { message: "credit note exists".into() };
        let After::Recorded { call, .. } = on_result(&credit(), 1, own) else {
            panic!("its own failure is final")
        };
        assert_eq!(call.state, CallState::Failed { error: "credit note exists".into() });
    }

    #[test]
    fn a_failing_turn_records_its_started_inline_writes_as_outcome_unknown() {
        let started = CallEntry { state: CallState::Started { attempt: 1 }, ..credit() };
        let done = CallEntry {
            tool_call_id: "toolu_2".into(),
            state: CallState::Succeeded { output: "c_1".into() },
            ..credit()
        };
        let other_turn =
            CallEntry { turn_id: "turn-2".into(), tool_call_id: "toolu_3".into(), ..started.clone() };
        let calls = [started, done, other_turn];
        let mut failing = Transition::keep().event(Payload::TurnFailed(events::TurnFailed {
            turn_id: Some("turn-1".into()),
            error: "gone".into(),
            reason: crate::session::FailureReason::SegmentFailed,
        }));
        settle_on_turn_failure(&mut failing, &calls);
        assert_eq!(failing.calls.len(), 1, "{:?}", failing.calls);
        assert_eq!(failing.calls[0].tool_call_id, "toolu_1");
        assert_eq!(failing.calls[0].state, CallState::OutcomeUnknown);
        assert_eq!(failing.events.last().map(|e| e.kind), Some(EventKind::ToolCallFinished));
        let mut completing = Transition::keep();
        settle_on_turn_failure(&mut completing, &calls);
        assert!(completing.calls.is_empty(), "only a failing turn settles them");
    }

    #[test]
    fn a_failed_turns_note_tells_the_model_its_unfinished_inline_write_is_outcome_unknown() {
        let started = CallEntry { state: CallState::Started { attempt: 1 }, ..credit() };
        let t = crate::session::turn::fail_turn(
            &crate::session::RunState::default(),
            "turn-1",
            1,
            &[started],
            crate::session::FailureReason::WorkerStopped,
            "stopped".into(),
        );
        let note = t.items.iter().find(|i| i.kind == crate::session::ItemKind::TurnFailureNote);
        let note = note.expect("a failure note").body.get();
        assert!(note.contains("record_credit") && note.contains("outcome_unknown"), "{note}");
    }

    #[test]
    fn a_rerun_meets_only_the_writes_its_transcript_does_not_hold() {
        let done = CallEntry { state: CallState::Succeeded { output: "c_1".into() }, ..credit() };
        let started = CallEntry {
            tool_call_id: "toolu_2".into(),
            state: CallState::Started { attempt: 1 },
            ..credit()
        };
        let deferred = CallEntry { inline: false, tool_call_id: "toolu_3".into(), ..done.clone() };
        let other_turn =
            CallEntry { turn_id: "turn-0".into(), tool_call_id: "toolu_4".into(), ..done.clone() };
        let calls = [done, started, deferred, other_turn];

        let fresh = unseen_writes(
            &run(PlannedStart::Fresh {
                prompts: vec![super::super::turn::Prompt { text: "x".into(), images: Vec::new() }],
            }),
            &calls,
        );
        let ids: Vec<_> = fresh.iter().map(|w| (w.tool_call_id.as_str(), w.attempts)).collect();
        assert_eq!(ids, [("toolu_1", 0), ("toolu_2", 1)]);
        assert_eq!(fresh[0].outcome, Some(Outcome::Succeeded { output: "c_1".into() }));
        assert_eq!(fresh[1].outcome, None);

        let entry = RawValue::from_string(
            r#"{"type":"assistant","message":{"content":[{"type":"tool_use","id":"toolu_1"}]}}"#.into(),
        )
        .unwrap();
        let line = format!("{}\n", entry.get());
        let from_entries = ResumeTranscript { chunks: Vec::new(), entries: vec![entry] };
        let from_chunks = ResumeTranscript { chunks: vec![line], entries: Vec::new() };
        for transcript in [from_entries, from_chunks] {
            let start = PlannedStart::NewTurn { session_id: "c".into(), transcript, prompts: vec![] };
            let resumed = unseen_writes(&run(start), &calls);
            assert_eq!(resumed.len(), 1, "toolu_1 is in the transcript: {resumed:?}");
            assert_eq!(resumed[0].tool_call_id, "toolu_2");
        }
    }
}
