//! Cancelling a turn: a client asks, and the turn's step in flight ends it `cancelled` instead of
//! going on.
//!
//! A request is kept by the store, one per session, until a transition applies or drops it
//! ([`super::CancelRequestChange`]); [`request_event`] is the `cancel_requested` event written
//! with it. The step in flight meets it wherever it is:
//!
//! - a running segment is asked to stop (the CLI's `interrupt`, then a kill after a grace), and
//!   its step commits [`on_cancel`] instead of how the segment ended, unless the segment
//!   completed first;
//! - a step waiting for a decision is queued by the request, and its claim commits [`on_cancel`];
//! - any other step (queued, or a tool call that finishes first) commits [`on_cancel`] when it is
//!   claimed.
//!
//! A transition that ends the turn otherwise first (it completed or failed) drops the request.
//!
//! What [`on_cancel`] changes, in one transition:
//!
//! | the turn's call | becomes |
//! | --- | --- |
//! | `started` (a write that may have run: inline, or a tool step's attempt) | `outcome_unknown` |
//! | `pending_approval` (its interrupt closed if still open, decided by nobody) | `cancelled` |
//! | `queued` (approved, not run yet) | `cancelled` |
//! | final (`succeeded`, `failed`, …) | kept |
//!
//! and interrupts opened ahead in a batch are closed and their calls recorded `unused`, as at any
//! turn's end. The turn's transcript is dropped (as a failed turn's is), its prompts count as
//! answered, and a note for the next turn ([`crate::texts::turn_cancelled_note`]) quotes them with
//! the records above. The session goes `idle` (or runs the next turn when a message is queued),
//! the run state names who cancelled ([`super::RunState::last_turn_cancelled`]), and a
//! `turn_cancelled` event is appended.

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::client::HumanDecision;
use super::turn::{HistoryItem, closed_by_nobody, end_batches, is_prompt, next_turn};
use super::{
    CallEntry, CallState, CancelRequestChange, EngineError, Finish, ItemKind, NewEvent, NewItem,
    RunModelStep, RunState, SessionStatus, StepInput, Transition, raw,
};
use crate::events::{self, Payload};
use crate::record::{Outcome, ToolCallRecord};
use crate::texts;

/// A pending request to cancel the session's turn, as the store keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CancelRequest {
    /// The principal who asked.
    pub requested_by: String,
    /// When (ms since the epoch, the database's clock).
    pub requested_at: i64,
}

/// A turn that ended cancelled, kept in the run state and named by the audit trail.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnCancelled {
    /// The turn.
    pub turn_id: String,
    /// The principal who asked.
    pub cancelled_by: String,
}

/// The `cancel_requested` event of a request by `requested_by`.
pub fn request_event(requested_by: &str) -> NewEvent {
    Payload::CancelRequested(events::CancelRequested { requested_by: requested_by.to_owned() }).into()
}

/// The turn a claimed step belongs to, and the highest seq of the prompts it answers; `None` when
/// the step starts no turn (a wake whose messages an earlier turn answered).
fn turn_of(
    step: &StepInput,
    state: &RunState,
    items: &[HistoryItem<'_>],
) -> Result<Option<(String, i64)>, EngineError> {
    let named = match step {
        StepInput::RunModel(RunModelStep { turn_id: None, resume: None }) if state.turn.is_none() => {
            let upto = items
                .iter()
                .filter(|item| is_prompt(item.kind) && item.seq > state.prompts_through)
                .map(|item| item.seq)
                .max();
            return Ok(upto.map(|upto| (state.next_turn_id(), upto)));
        }
        StepInput::RunModel(RunModelStep { turn_id: Some(turn_id), resume: Some(_) }) => turn_id,
        // An MCP call's turn starts with this step ([`super::mcp`]).
        StepInput::McpCall(call) if state.turn.is_none() => return Ok(Some((call.turn_id.clone(), 0))),
        StepInput::McpCall(call)
        | StepInput::AwaitToolApproval(call)
        | StepInput::CallTool(call)
        | StepInput::CallSingleAttemptTool(call)
        | StepInput::ResumeTurn(call) => &call.turn_id,
        StepInput::RunModel(_) => {
            return Err(EngineError::Inconsistent(format!(
                "{step:?} does not match the turn in progress {:?}",
                state.turn
            )));
        }
    };
    match &state.turn {
        Some(turn) if &turn.turn_id == named => Ok(Some((turn.turn_id.clone(), turn.prompts_upto))),
        other => Err(EngineError::Inconsistent(format!(
            "{step:?} names {named}, but the turn in progress is {other:?}"
        ))),
    }
}

/// What cancelling the turn of the claimed `step` changes (see the module docs), at `request`.
/// `items` are the session's prompts (at least those after [`RunState::prompts_through`]);
/// `calls` its deferred and inline calls as they stand now.
///
/// # Errors
/// A step that does not match the turn in progress, or a prompt that does not parse.
pub fn on_cancel(
    step: &StepInput,
    state: &RunState,
    items: &[HistoryItem<'_>],
    calls: &[CallEntry],
    request: &CancelRequest,
) -> Result<Transition, EngineError> {
    let Some((turn_id, prompts_upto)) = turn_of(step, state, items)? else {
        // No turn to cancel: the request is moot.
        let mut t = Transition::new(Finish::Done(json!({"outcome": "nothing_to_do"})));
        t.status = Some(SessionStatus::Idle);
        t.cancel = CancelRequestChange::Drop;
        return Ok(t);
    };
    let by = request.requested_by.as_str();
    let mut t = Transition::new(Finish::Done(json!({"outcome": "turn_cancelled", "cancelled_by": by})));
    let not_decided = HumanDecision {
        approved: false,
        message: Some(texts::CANCELLED_BEFORE_DECISION.replace("{by}", by)),
        ..HumanDecision::default()
    };
    let mut records: Vec<ToolCallRecord> = Vec::new();
    for call in calls.iter().filter(|call| call.turn_id == turn_id) {
        let state = match call.state {
            // It may have taken effect.
            CallState::Started { .. } => Outcome::OutcomeUnknown.into(),
            CallState::PendingApproval => {
                let interrupt_id = call.decided_ahead.as_ref().map_or(&call.tool_call_id, |a| &a.decision_id);
                t.close_interrupts.push(closed_by_nobody(interrupt_id, &not_decided));
                CallState::Cancelled
            }
            CallState::Queued => CallState::Cancelled,
            _ => {
                records.extend(call.record());
                continue;
            }
        };
        let finished = call.with_state(state);
        t.events.push(finished.finished_event(!call.inline).into());
        records.extend(finished.record());
        t.calls.push(finished);
    }
    let mut prompts = Vec::new();
    for item in
        items.iter().filter(|i| is_prompt(i.kind) && i.seq > state.prompts_through && i.seq <= prompts_upto)
    {
        #[derive(Deserialize)]
        struct Prompt {
            text: String,
        }
        let prompt: Prompt = serde_json::from_str(item.body).map_err(|e| EngineError::Corrupt {
            what: format!("prompt item {}", item.seq),
            reason: e.to_string(),
        })?;
        prompts.push(prompt.text);
    }
    t.items.push(NewItem {
        kind: ItemKind::TurnFailureNote,
        uuid: None,
        turn_id: Some(turn_id.clone()),
        body: raw(
            &json!({"kind": "user_prompt", "text": texts::turn_cancelled_note(by, &prompts, &records)}),
        ),
    });
    let cancelled = TurnCancelled { turn_id: turn_id.clone(), cancelled_by: by.to_owned() };
    let mut next = state.clone();
    next.turn_entries.clear();
    next.turn = None;
    next.turns_ended += 1;
    next.prompts_through = next.prompts_through.max(prompts_upto);
    next.last_turn_error = None;
    next.last_turn_cancelled = Some(cancelled.clone());
    t.run_state = Some(next);
    t.status = Some(SessionStatus::Idle);
    t.steps.push(next_turn(prompts_upto));
    end_batches(&mut t, state, &turn_id);
    t.cancel = CancelRequestChange::Applied(cancelled);
    Ok(t.event(Payload::TurnCancelled(events::TurnCancelled {
        turn_id,
        cancelled_by: by.to_owned(),
        requested_at: request.requested_at,
    })))
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::catalog::ToolKind;
    use crate::events::EventKind;
    use crate::policy::DeferredRun;
    use crate::session::batches::{AheadCall, AheadRef};
    use crate::session::{CallStep, TurnState, inline};

    fn prompt(seq: i64, text: &str) -> (i64, ItemKind, String) {
        (seq, ItemKind::UserPrompt, json!({"kind": "user_prompt", "text": text}).to_string())
    }

    fn history<'a>(rows: &'a [(i64, ItemKind, String)]) -> Vec<HistoryItem<'a>> {
        rows.iter().map(|(seq, kind, body)| HistoryItem { seq: *seq, kind: Some(*kind), body }).collect()
    }

    fn alice() -> CancelRequest {
        CancelRequest { requested_by: "alice".into(), requested_at: 1_700_000_000_000 }
    }

    fn refund(state: CallState) -> CallEntry {
        CallEntry {
            requires_approval: true,
            runs_in: DeferredRun::CallSingleAttemptTool,
            ..CallEntry::new(
                "toolu_1",
                "create_refund",
                ToolKind::Custom,
                json!({"order_id": "7"}),
                "turn-2",
                state,
            )
        }
    }

    /// Turn 2 is suspended on a deferred call.
    fn suspended() -> RunState {
        RunState {
            turn: Some(TurnState {
                turn_id: "turn-2".into(),
                prompts_upto: 3,
                ahead: Vec::new(),
                trace: None,
            }),
            turns_ended: 1,
            prompts_through: 1,
            session_id: Some("cli-1".into()),
            ..RunState::default()
        }
    }

    fn call_step(kind: fn(CallStep) -> StepInput) -> StepInput {
        kind(CallStep { turn_id: "turn-2".into(), tool_call_id: "toolu_1".into() })
    }

    fn note(t: &Transition) -> String {
        let item = t.items.iter().find(|i| i.kind == ItemKind::TurnFailureNote).expect("a note");
        serde_json::from_str::<Value>(item.body.get()).unwrap()["text"].as_str().unwrap().to_owned()
    }

    #[test]
    fn a_new_turns_segment_cancelled_ends_the_turn_idle_with_its_prompts_answered_and_quoted() {
        let rows = [prompt(1, "say hi"), prompt(2, "hold streaming ;; say a long answer")];
        let state = RunState { prompts_through: 1, turns_ended: 1, ..RunState::default() };
        let step = StepInput::RunModel(RunModelStep::default());
        let t = on_cancel(&step, &state, &history(&rows), &[], &alice()).unwrap();

        assert_eq!(t.finish, Finish::Done(json!({"outcome": "turn_cancelled", "cancelled_by": "alice"})));
        assert_eq!(t.status, Some(SessionStatus::Idle));
        let cancelled = TurnCancelled { turn_id: "turn-2".into(), cancelled_by: "alice".into() };
        assert_eq!(t.cancel, CancelRequestChange::Applied(cancelled.clone()));
        let next = t.run_state.as_ref().expect("a run state");
        assert_eq!((next.turns_ended, next.prompts_through), (2, 2), "the prompt is answered");
        assert_eq!(next.last_turn_cancelled, Some(cancelled));
        assert!(next.turn.is_none() && next.turn_entries.is_empty() && next.last_turn_error.is_none());
        let ended = t.events.last().expect("an event");
        assert_eq!(ended.kind, EventKind::TurnCancelled);
        assert_eq!(
            ended.payload,
            json!({"turn_id": "turn-2", "cancelled_by": "alice", "requested_at": 1_700_000_000_000_i64})
        );
        let note = note(&t);
        assert!(note.contains("alice cancelled") && note.contains("> hold streaming"), "{note}");
        assert!(!note.contains("say hi"), "an earlier turn's prompt is not quoted: {note}");
        // A message queued during the turn starts the next one.
        assert_eq!(t.steps.len(), 1);
        assert_eq!(t.steps[0].only_if_prompts_after, Some(2));
    }

    #[test]
    fn the_next_turn_plans_only_the_new_message_after_the_note() {
        let rows = [prompt(1, "say a long answer")];
        let state = RunState::default();
        let t =
            on_cancel(&StepInput::RunModel(RunModelStep::default()), &state, &history(&rows), &[], &alice())
                .unwrap();
        let after = t.run_state.unwrap();
        let note = t.items[0].body.get().to_owned();
        let rows =
            [prompt(1, "say a long answer"), (2, ItemKind::TurnFailureNote, note), prompt(3, "say hello")];
        let plan = crate::session::turn::plan_run_model(
            &RunModelStep::default(),
            crate::session::turn::Claims::nth(1),
            &after,
            &history(&rows),
            crate::session::turn::TranscriptSource::Items,
            &[],
            &crate::session::Limits::default(),
        )
        .unwrap();
        let crate::session::turn::Plan::Run(run) = plan else { panic!("a segment runs") };
        assert_eq!(run.turn_id, "turn-2");
        let crate::session::turn::PlannedStart::Fresh { prompts } = &run.start else {
            panic!("{:?}", run.start)
        };
        assert_eq!(prompts.len(), 2, "{prompts:?}");
        assert!(prompts[0].text.starts_with("[Tollgate] alice cancelled"), "{prompts:?}");
        assert_eq!(prompts[1].text, "say hello");
    }

    #[test]
    fn a_turn_waiting_for_approval_closes_its_interrupt_decided_by_nobody_and_records_the_call_cancelled() {
        let rows = [prompt(1, "hi"), prompt(3, "refund order 7")];
        let calls = [refund(CallState::PendingApproval)];
        let step = call_step(StepInput::AwaitToolApproval);
        let t = on_cancel(&step, &suspended(), &history(&rows), &calls, &alice()).unwrap();

        assert_eq!(t.calls.len(), 1);
        assert_eq!(t.calls[0].state, CallState::Cancelled);
        assert!(t.calls[0].record().is_none(), "a cancelled call has no record to replay");
        assert_eq!(t.close_interrupts.len(), 1);
        let closed = &t.close_interrupts[0];
        assert_eq!(closed.interrupt_id, "toolu_1");
        assert_eq!(closed.resolution["approved"], false);
        assert!(closed.resolution["message"].as_str().unwrap().contains("alice cancelled the turn"));
        assert_eq!(closed.events[0].payload["decided_by"], Value::Null);
        assert_eq!(closed.events[0].payload["closed"], true);
        assert!(t.events.iter().any(|e| e.kind == EventKind::ToolCallFinished
            && e.payload["status"] == "cancelled"
            && e.payload["deferred"] == true));
        let note = note(&t);
        assert!(note.contains("> refund order 7") && !note.contains("These tool calls"), "{note}");
        assert_eq!(t.run_state.unwrap().prompts_through, 3);
    }

    #[test]
    fn a_call_waiting_on_an_interrupt_opened_ahead_closes_that_interrupt() {
        let mut waiting = refund(CallState::PendingApproval);
        waiting.decided_ahead = Some(AheadRef {
            decision_id: "toolu_0".into(),
            batch_id: "toolu_0".into(),
            decided_by: None,
            decided_at: None,
        });
        let step = call_step(StepInput::AwaitToolApproval);
        let t = on_cancel(&step, &suspended(), &[], &[waiting], &alice()).unwrap();
        assert_eq!(t.close_interrupts[0].interrupt_id, "toolu_0");
    }

    #[test]
    fn started_writes_become_outcome_unknown_queued_calls_cancelled_and_final_records_stay() {
        let inline_started = CallEntry {
            tool_call_id: "toolu_inline".into(),
            state: CallState::Started { attempt: 1 },
            ..inline::write("turn-2", "toolu_inline", "record_credit", json!({"amount_cents": 3}))
        };
        let single_started = refund(CallState::Started { attempt: 1 });
        let queued = CallEntry { tool_call_id: "toolu_q".into(), ..refund(CallState::Queued) };
        let done = CallEntry {
            tool_call_id: "toolu_done".into(),
            state: CallState::Succeeded { output: "r_1".into() },
            ..refund(CallState::Queued)
        };
        let other_turn = CallEntry { turn_id: "turn-1".into(), ..refund(CallState::Started { attempt: 1 }) };
        let calls = [inline_started, single_started, queued, done, other_turn];
        let step = call_step(StepInput::ResumeTurn);
        let t = on_cancel(&step, &suspended(), &[], &calls, &alice()).unwrap();

        let states: Vec<(&str, &str)> =
            t.calls.iter().map(|c| (c.tool_call_id.as_str(), c.state.name())).collect();
        assert_eq!(
            states,
            [("toolu_inline", "outcome_unknown"), ("toolu_1", "outcome_unknown"), ("toolu_q", "cancelled")]
        );
        let inline_event = t.events.iter().find(|e| e.payload["tool_call_id"] == "toolu_inline").unwrap();
        assert_eq!(inline_event.payload["deferred"], false);
        assert!(t.close_interrupts.is_empty(), "no call waited for a decision");
        let note = note(&t);
        assert!(note.contains("record_credit {\"amount_cents\": 3} -> outcome_unknown"), "{note}");
        assert!(note.contains("create_refund {\"order_id\": \"7\"} -> succeeded: r_1"), "{note}");
        assert!(
            !note.contains("cancelled\n") && !note.contains("-> cancelled"),
            "a cancelled call never ran: {note}"
        );
    }

    #[test]
    fn interrupts_opened_ahead_in_a_batch_are_closed_and_their_calls_unused() {
        let mut state = suspended();
        state.turn.as_mut().unwrap().ahead.push(AheadCall {
            interrupt_id: "toolu_9".into(),
            batch_id: "toolu_1".into(),
            tool_name: "create_refund".into(),
            kind: ToolKind::Custom,
            arguments: json!({"order_id": "8"}),
            runs_in: DeferredRun::CallSingleAttemptTool,
            used_by: None,
        });
        let step = call_step(StepInput::AwaitToolApproval);
        let t = on_cancel(&step, &state, &[], &[refund(CallState::PendingApproval)], &alice()).unwrap();
        let closed: Vec<&str> = t.close_interrupts.iter().map(|c| c.interrupt_id.as_str()).collect();
        assert_eq!(closed, ["toolu_1", "toolu_9"]);
        assert!(t.calls.iter().any(|c| c.tool_call_id == "toolu_9" && c.state == CallState::Unused));
    }

    #[test]
    fn a_step_of_another_turn_is_refused_and_a_wake_with_nothing_to_answer_drops_the_request() {
        let step = StepInput::ResumeTurn(CallStep { turn_id: "turn-9".into(), tool_call_id: "x".into() });
        let err = on_cancel(&step, &suspended(), &[], &[], &alice()).unwrap_err();
        assert!(matches!(err, EngineError::Inconsistent(_)), "{err:?}");

        let answered = RunState { prompts_through: 1, turns_ended: 1, ..RunState::default() };
        let rows = [prompt(1, "hi")];
        let t = on_cancel(
            &StepInput::RunModel(RunModelStep::default()),
            &answered,
            &history(&rows),
            &[],
            &alice(),
        )
        .unwrap();
        assert_eq!(t.cancel, CancelRequestChange::Drop);
        assert!(t.events.is_empty() && t.run_state.is_none());
    }

    #[test]
    fn a_turn_that_completes_or_fails_first_drops_a_request_made_during_it() {
        let failed = crate::session::turn::fail_turn(
            &suspended(),
            "turn-2",
            3,
            &[],
            crate::session::FailureReason::SegmentFailed,
            "boom".into(),
        );
        assert_eq!(failed.cancel, CancelRequestChange::Drop);
        let cancelled = RunState {
            last_turn_cancelled: Some(TurnCancelled { turn_id: "turn-1".into(), cancelled_by: "a".into() }),
            ..suspended()
        };
        let failed = crate::session::turn::fail_turn(
            &cancelled,
            "turn-2",
            3,
            &[],
            crate::session::FailureReason::SegmentFailed,
            "boom".into(),
        );
        assert_eq!(failed.run_state.unwrap().last_turn_cancelled, None, "the last turn failed");
        assert_eq!(
            crate::session::tools::on_resume_turn(&CallStep {
                turn_id: "t".into(),
                tool_call_id: "c".into()
            })
            .cancel,
            CancelRequestChange::Keep,
            "a step that goes on keeps the request for the next one"
        );
    }

    #[test]
    fn a_run_state_without_the_cancelled_field_still_reads_and_one_with_it_round_trips() {
        let old = RunState::parse(r#"{"version":1,"session_id":null,"turn_entries":[]}"#).unwrap();
        assert_eq!(old.last_turn_cancelled, None);
        let state = RunState {
            last_turn_cancelled: Some(TurnCancelled { turn_id: "turn-1".into(), cancelled_by: "bob".into() }),
            ..RunState::default()
        };
        let back = RunState::parse(state.to_raw().get()).unwrap();
        assert_eq!(back.last_turn_cancelled, state.last_turn_cancelled);
    }
}
