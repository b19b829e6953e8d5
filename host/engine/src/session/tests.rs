use serde_json::json;
use serde_json::value::RawValue;

use super::client::{HumanDecision, user_message};
use super::tools::{Begin, ToolRun, begin_tool_step, on_approval, on_resume_turn, on_tool_result};
use super::turn::{
    Claims, HistoryItem, Plan, PlannedStart, SegmentResult, SegmentRun, TranscriptSource, on_segment,
    on_unusable_rows, plan_run_model,
};
use super::view::messages;
use super::*;
use crate::events::EventKind;
use crate::gate::DeferredCall;
use crate::policy::{Effect, Handling, ToolPolicy};

fn prompt(seq: i64, text: &str) -> (i64, ItemKind, String) {
    (seq, ItemKind::UserPrompt, json!({"kind": "user_prompt", "text": text}).to_string())
}

fn items<'a>(rows: &'a [(i64, ItemKind, String)]) -> Vec<HistoryItem<'a>> {
    rows.iter().map(|(seq, kind, body)| HistoryItem { seq: *seq, kind: Some(*kind), body }).collect()
}

fn entry(text: &str) -> Box<RawValue> {
    RawValue::from_string(text.to_owned()).unwrap()
}

fn plan(
    step: &RunModelStep,
    attempt: i64,
    state: &RunState,
    rows: &[(i64, ItemKind, String)],
    calls: &[CallEntry],
) -> Plan {
    plan_run_model(
        step,
        Claims::nth(attempt),
        state,
        &items(rows),
        TranscriptSource::Items,
        calls,
        &Limits::default(),
    )
    .unwrap()
}

fn run_of(plan: Plan) -> SegmentRun {
    match plan {
        Plan::Run(run) => *run,
        Plan::Finish(t) => panic!("expected a segment, got {t:?}"),
    }
}

fn deferred(tool: &str, effect: Effect, runs_in: DeferredRun, requires_approval: bool) -> DeferredCall {
    DeferredCall {
        tool_use_id: "toolu_1".into(),
        tool_name: tool.into(),
        kind: ToolKind::Custom,
        arguments: json!({"order_id": "7"}),
        policy: ToolPolicy { effect, requires_approval },
        handling: Handling::Deferred { requires_approval, runs_in },
        held_back: Vec::new(),
    }
}

fn defer(state: &RunState, call: DeferredCall) -> (SegmentRun, Transition) {
    let rows = [prompt(1, "refund order 7")];
    let run = run_of(plan(&RunModelStep::default(), 1, state, &rows, &[]));
    let t = on_segment(
        &run,
        state,
        &[],
        SegmentResult::Deferred {
            session_id: "cli-1".into(),
            call,
            entries: vec![
                entry(r#"{"type":"user","uuid":"u1"}"#),
                entry(r#"{"type":"assistant","uuid":"a1"}"#),
            ],
            usage: Usage { input_tokens: 10, cached_input_tokens: 0, output_tokens: 5, model_calls: 1 },
            cost_usd: Some(0.01),
        },
    );
    (run, t)
}

#[test]
fn a_new_turn_sends_every_prompt_no_completed_turn_answered() {
    let state = RunState { prompts_through: 1, ..RunState::default() };
    let rows = [prompt(1, "old"), prompt(2, "first"), prompt(3, "second")];
    let run = run_of(plan(&RunModelStep::default(), 1, &state, &rows, &[]));
    assert_eq!(run.turn_id, "turn-1");
    assert_eq!(run.prompts_upto, 3);
    match run.start {
        PlannedStart::Fresh { prompts } => assert_eq!(texts(&prompts), ["first", "second"]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_wake_with_no_new_prompt_finishes_without_a_segment() {
    let state = RunState { prompts_through: 1, ..RunState::default() };
    match plan(&RunModelStep::default(), 1, &state, &[prompt(1, "answered")], &[]) {
        Plan::Finish(t) => {
            assert!(t.steps.is_empty() && t.run_state.is_none());
            assert_eq!(
                t.status,
                Some(SessionStatus::Idle),
                "a wake that finds nothing leaves the session idle"
            );
        }
        Plan::Run(run) => panic!("ran {run:?}"),
    }
}

#[test]
fn a_completed_segment_stores_each_entry_byte_for_byte_and_queues_the_next_turn_conditionally() {
    let state = RunState::default();
    let run = run_of(plan(&RunModelStep::default(), 1, &state, &[prompt(1, "hi")], &[]));
    let spaced =
        r#"{"type":"assistant", "uuid":"a1","message":{"content":[{"type":"text","text":"hello"}]}}"#;
    let t = on_segment(
        &run,
        &state,
        &[],
        SegmentResult::Completed {
            session_id: "cli-1".into(),
            result: "hello".into(),
            entries: vec![entry(r#"{"type":"user","uuid":"u1"}"#), entry(spaced)],
            usage: Usage { input_tokens: 3, cached_input_tokens: 1, output_tokens: 2, model_calls: 1 },
            cost_usd: Some(0.5),
        },
    );
    assert_eq!(t.finish, Finish::Done(json!({"outcome": "completed"})));
    assert_eq!(t.items.len(), 2);
    assert_eq!(t.items[1].uuid.as_deref(), Some("a1"));
    assert_eq!(
        t.items[1].body.get(),
        format!(r#"{{"kind":"claude_transcript","session_id":"cli-1","entries":[{spaced}]}}"#)
    );
    let next = t.run_state.unwrap();
    assert_eq!((next.prompts_through, next.turns_ended, next.cost_usd), (1, 1, 0.5));
    assert!(next.turn.is_none() && next.turn_entries.is_empty());
    assert_eq!(t.status, Some(SessionStatus::Idle));
    assert_eq!(t.steps[0].kind, StepKind::RunModel);
    assert_eq!(t.steps[0].only_if_prompts_after, Some(1));
    assert_eq!(t.usage.model_calls, 1);
}

#[test]
fn the_next_turn_resumes_the_stored_transcript_with_its_prompt() {
    let state = RunState { prompts_through: 1, turns_ended: 1, ..RunState::default() };
    let transcript =
        r#"{"kind":"claude_transcript","session_id":"cli-1","entries":[{"type":"assistant","uuid":"a1"}]}"#;
    let rows = [prompt(1, "hi"), (2, ItemKind::ClaudeTranscript, transcript.to_owned()), prompt(3, "again")];
    let run = run_of(plan(&RunModelStep::default(), 1, &state, &rows, &[]));
    assert_eq!(run.turn_id, "turn-2");
    match run.start {
        PlannedStart::NewTurn { session_id, transcript, prompts } => {
            assert_eq!(session_id, "cli-1");
            assert_eq!(
                transcript.entries.iter().map(|e| e.get()).collect::<Vec<_>>(),
                [r#"{"type":"assistant","uuid":"a1"}"#]
            );
            assert!(transcript.chunks.is_empty());
            assert_eq!(texts(&prompts), ["again"]);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_transcript_kept_in_chunks_is_resumed_from_them_without_its_items() {
    let state = RunState { prompts_through: 1, turns_ended: 1, ..RunState::default() };
    let rows = [prompt(1, "hi"), prompt(3, "again")];
    let chunks = TranscriptSource::Chunks {
        session_id: Some("cli-1".into()),
        chunks: vec!["{\"uuid\":\"u1\"}\n".into(), "{\"uuid\":\"a1\"}\n".into()],
    };
    let limits = Limits::default();
    let step = RunModelStep::default();
    let Plan::Run(run) =
        plan_run_model(&step, Claims::nth(1), &state, &items(&rows), chunks, &[], &limits).unwrap()
    else {
        panic!("expected a segment");
    };
    match run.start {
        PlannedStart::NewTurn { session_id, transcript, prompts } => {
            assert_eq!(session_id, "cli-1");
            assert_eq!(transcript.chunks, ["{\"uuid\":\"u1\"}\n", "{\"uuid\":\"a1\"}\n"]);
            assert!(transcript.entries.is_empty());
            assert_eq!(texts(&prompts), ["again"]);
        }
        other => panic!("{other:?}"),
    }
    // No chunk stored yet: the session's first segment.
    let none = TranscriptSource::Chunks { session_id: None, chunks: Vec::new() };
    let Plan::Run(run) =
        plan_run_model(&step, Claims::nth(1), &state, &items(&rows), none, &[], &limits).unwrap()
    else {
        panic!("expected a segment");
    };
    assert!(matches!(run.start, PlannedStart::Fresh { .. }), "{:?}", run.start);
}

#[test]
fn a_write_that_needs_approval_waits_as_a_row_on_its_interrupt() {
    let (_, t) = defer(
        &RunState::default(),
        deferred("create_refund", Effect::NonIdempotentWrite, DeferredRun::CallSingleAttemptTool, true),
    );
    assert_eq!(t.status, Some(SessionStatus::AwaitingApproval));
    assert_eq!(t.interrupts[0].interrupt_id, "toolu_1");
    assert_eq!(t.interrupts[0].request.to_value()["tool_name"], "create_refund");
    assert_eq!(t.interrupts[0].request.to_value()["arguments"], json!({"order_id": "7"}));
    assert_eq!(t.steps[0].kind, StepKind::AwaitToolApproval);
    assert_eq!(t.steps[0].start, Start::OnInterrupt("toolu_1".into()));
    assert_eq!(t.calls[0].state, CallState::PendingApproval);
    let next = t.run_state.unwrap();
    assert_eq!(
        next.turn,
        Some(TurnState { turn_id: "turn-1".into(), prompts_upto: 1, ahead: Vec::new(), trace: None })
    );
    assert_eq!(next.session_id.as_deref(), Some("cli-1"));
    assert_eq!(next.turn_entries.len(), 2);
    assert!(t.events.iter().any(|e| e.kind == EventKind::InterruptOpened));
}

fn trace(span_id: &str) -> TurnTrace {
    TurnTrace {
        trace_id: "0af7651916cd43dd8448eb211c80319c".into(),
        span_id: span_id.into(),
        started_at_ms: 1_000,
    }
}

#[test]
fn the_trace_a_new_turn_starts_with_is_stored_when_it_defers_and_kept_by_its_resumed_segments() {
    let rows = [prompt(1, "refund order 7")];
    let mut run = run_of(plan(&RunModelStep::default(), 1, &RunState::default(), &rows, &[]));
    assert_eq!(run.trace, None, "a new turn's trace is the Worker's to fix");
    run.trace = Some(trace("b7ad6b7169203331"));
    let call =
        deferred("create_refund", Effect::NonIdempotentWrite, DeferredRun::CallSingleAttemptTool, true);
    let t = on_segment(
        &run,
        &RunState::default(),
        &[],
        SegmentResult::Deferred {
            session_id: "cli-1".into(),
            call,
            entries: vec![entry(r#"{"type":"assistant","uuid":"a1"}"#)],
            usage: Usage::default(),
            cost_usd: None,
        },
    );
    let state = t.run_state.unwrap();
    assert_eq!(state.turn.as_ref().and_then(|turn| turn.trace.clone()), Some(trace("b7ad6b7169203331")));
    // The stored form names it, and reads back.
    let stored = state.to_raw();
    assert!(stored.get().contains(r#""trace":{"trace_id":"0af7651916cd43dd8448eb211c80319c""#), "{stored}");
    assert_eq!(RunState::parse(stored.get()).unwrap().turn, state.turn);

    // The resumed segment plans with the stored trace, whichever Worker claims it.
    let recorded = CallEntry::new(
        "toolu_1",
        "create_refund",
        ToolKind::Custom,
        json!({"order_id": "7"}),
        "turn-1",
        CallState::Succeeded { output: "done".into() },
    );
    let resumed = run_of(plan(&resume_step(), 1, &state, &rows, &[recorded]));
    assert_eq!(resumed.trace, Some(trace("b7ad6b7169203331")));

    // A transition that already carries the turn's trace keeps it.
    let mut again = Transition::new(Finish::Keep);
    again.run_state = Some(state.clone());
    turn::with_trace(&mut again, &trace("00f067aa0ba902b7"));
    assert_eq!(again.run_state.unwrap().turn.unwrap().trace, Some(trace("b7ad6b7169203331")));
    // One without gets it.
    let mut fresh = Transition::new(Finish::Keep);
    fresh.run_state = Some(RunState {
        turn: Some(TurnState { turn_id: "turn-1".into(), prompts_upto: 0, ahead: Vec::new(), trace: None }),
        ..RunState::default()
    });
    turn::with_trace(&mut fresh, &trace("00f067aa0ba902b7"));
    assert_eq!(fresh.run_state.unwrap().turn.unwrap().trace, Some(trace("00f067aa0ba902b7")));
}

#[test]
fn a_turn_state_stored_before_traces_reads_without_one() {
    let stored = r#"{"version":1,"session_id":"cli-1","turn_entries":[],"turn":{"turn_id":"turn-1","prompts_upto":1}}"#;
    let state = RunState::parse(stored).unwrap();
    assert_eq!(state.turn.unwrap().trace, None);
}

#[test]
fn an_approval_free_idempotent_write_goes_straight_to_call_tool() {
    let (_, t) = defer(
        &RunState::default(),
        deferred("create_refund", Effect::IdempotentWrite, DeferredRun::CallTool, false),
    );
    assert!(t.interrupts.is_empty());
    assert_eq!(t.steps[0].kind, StepKind::CallTool);
    assert_eq!(t.calls[0].state, CallState::Queued);
    assert_eq!(t.status, Some(SessionStatus::Running));
}

fn pending_call(runs_in: DeferredRun, kind: ToolKind) -> CallEntry {
    let tool = if kind == ToolKind::Cli { "Bash" } else { "create_refund" };
    CallEntry {
        requires_approval: true,
        runs_in,
        ..CallEntry::new(
            "toolu_1",
            tool,
            kind,
            json!({"order_id": "7"}),
            "turn-1",
            CallState::PendingApproval,
        )
    }
}

#[test]
fn an_approval_with_an_edited_input_runs_the_edited_input_and_keeps_the_original() {
    let call = pending_call(DeferredRun::CallSingleAttemptTool, ToolKind::Custom);
    let edit = HumanDecision {
        approved: true,
        message: None,
        updated_input: Some(json!({"order_id": "8"})),
        ..Default::default()
    };
    let t = on_approval(&call, &edit);
    let queued = &t.calls[0];
    assert_eq!(queued.arguments, json!({"order_id": "8"}));
    assert_eq!(queued.original_arguments, Some(json!({"order_id": "7"})));
    assert_eq!(
        queued.idempotency_key("s"),
        call.idempotency_key("s"),
        "the key names the call, not its input"
    );
    let stored = CallEntry::parse(&queued.to_value().to_string()).unwrap();
    assert_eq!(&stored, queued);
    let done = super::tools::on_tool_result(
        true,
        1,
        queued,
        super::tools::ToolRun::Output { text: "refunded r_1".into(), is_error: false, images: Vec::new() },
    );
    assert_eq!(
        done.calls[0].state,
        CallState::Succeeded {
            output: "The approver changed the input from {\"order_id\":\"7\"} to {\"order_id\":\"8\"}.\nrefunded r_1"
                .into()
        }
    );
}

#[test]
fn an_edited_cli_tool_records_the_edited_input_for_the_replay() {
    let call = pending_call(DeferredRun::ResumedSegment, ToolKind::Cli);
    let edit = HumanDecision {
        approved: true,
        message: None,
        updated_input: Some(json!({"command": "echo ok"})),
        ..Default::default()
    };
    let t = on_approval(&call, &edit);
    assert_eq!(t.calls[0].arguments, json!({"command": "echo ok"}));
    assert_eq!(t.calls[0].original_arguments, Some(json!({"order_id": "7"})));
    // The resumed segment replays it with the edited input and the note of the edit.
    let (state, calls) = approved_cli_call(t);
    let run = run_of(plan(&resume_step(), 1, &state, &[prompt(1, "run it")], &calls));
    let PlannedStart::ResumeCall { pending, .. } = run.start else { panic!("{:?}", run.start) };
    assert_eq!(pending.arguments, json!({"command": "echo ok"}));
    assert!(pending.note.is_some_and(|note| note.contains("echo ok")));
}

/// The state and calls after `approved` (the approval of the deferred CLI call `toolu_1`).
fn approved_cli_call(approved: Transition) -> (RunState, Vec<CallEntry>) {
    let (_, deferred_t) = defer(
        &RunState::default(),
        deferred("Bash", Effect::NonIdempotentWrite, DeferredRun::ResumedSegment, true),
    );
    (deferred_t.run_state.unwrap(), approved.calls)
}

fn resume_step() -> RunModelStep {
    RunModelStep { turn_id: Some("turn-1".into()), resume: Some("toolu_1".into()) }
}

#[test]
fn an_edit_equal_to_the_original_is_no_edit() {
    let call = pending_call(DeferredRun::CallTool, ToolKind::Custom);
    let same = HumanDecision {
        approved: true,
        message: None,
        updated_input: Some(json!({"order_id": "7"})),
        ..Default::default()
    };
    assert_eq!(on_approval(&call, &same).calls[0].original_arguments, None);
}

#[test]
fn a_rejection_records_the_reviewers_text_and_resumes_the_turn() {
    let call = pending_call(DeferredRun::CallSingleAttemptTool, ToolKind::Custom);
    let t = on_approval(
        &call,
        &HumanDecision {
            approved: false,
            message: Some("not this order".into()),
            updated_input: None,
            ..Default::default()
        },
    );
    assert_eq!(t.calls[0].state, CallState::Rejected { message: Some("not this order".into()) });
    assert_eq!(t.steps[0].kind, StepKind::ResumeTurn);
    let resumed = on_resume_turn(&CallStep { turn_id: "turn-1".into(), tool_call_id: "toolu_1".into() });
    assert_eq!(resumed.steps[0].kind, StepKind::RunModel);
    assert_eq!(resumed.steps[0].payload, json!({"turn_id": "turn-1", "resume": "toolu_1"}));
}

#[test]
fn an_approved_cli_tool_is_recorded_from_what_its_run_in_the_resumed_segment_returned() {
    use super::tools::{CliRun, on_cli_run};
    let call = pending_call(DeferredRun::ResumedSegment, ToolKind::Cli);
    let t = on_approval(&call, &HumanDecision { approved: true, ..Default::default() });
    assert_eq!(t.calls[0].state, CallState::Queued, "approved, not run: no record yet");
    assert!(t.calls[0].record().is_none());
    assert_eq!(t.steps[0].kind, StepKind::ResumeTurn);
    assert!(t.events.iter().all(|e| e.kind != EventKind::ToolCallFinished), "{:?}", t.events);
    let approved = t.calls[0].clone();
    // The resumed segment replays the approval: the CLI runs it.
    let (state, calls) = approved_cli_call(t);
    let run = run_of(plan(&resume_step(), 1, &state, &[prompt(1, "run it")], &calls));
    let PlannedStart::ResumeCall { pending, .. } = run.start else { panic!("{:?}", run.start) };
    assert_eq!(pending.outcome, Outcome::approved_cli_tool());

    let (ran, event) = on_cli_run(&approved, CliRun::Result { text: "2".into(), is_error: false }).unwrap();
    assert_eq!(ran.state, CallState::Succeeded { output: "2".into() });
    assert_eq!((event.kind, &event.payload["status"]), (EventKind::ToolCallFinished, &json!("succeeded")));
    let failed = CliRun::Result { text: "Exit code 1".into(), is_error: true };
    assert_eq!(
        on_cli_run(&approved, failed).unwrap().0.state,
        CallState::Failed { error: "Exit code 1".into() }
    );
    let (unknown, _) = on_cli_run(&approved, CliRun::NoResult).unwrap();
    assert_eq!(unknown.state, CallState::OutcomeUnknown, "let run, and the segment ended without its result");
    assert!(on_cli_run(&approved, CliRun::NotStarted).is_none(), "never ran: still approved");
    assert!(on_cli_run(&ran, CliRun::NoResult).is_none(), "a record stays as it is");
}

#[test]
fn a_turn_that_fails_before_an_approved_cli_call_reported_records_it_outcome_unknown() {
    let call = pending_call(DeferredRun::ResumedSegment, ToolKind::Cli);
    let t = on_approval(&call, &HumanDecision { approved: true, ..Default::default() });
    let (state, calls) = approved_cli_call(t);
    let Plan::Finish(mut t) =
        plan(&resume_step(), RUN_MODEL_ATTEMPTS + 1, &state, &[prompt(1, "run it")], &calls)
    else {
        panic!("must not run")
    };
    super::inline::settle_on_turn_failure(&mut t, &calls);
    assert_eq!(t.calls.iter().map(|c| &c.state).collect::<Vec<_>>(), [&CallState::OutcomeUnknown]);
    let note = t.items.iter().find(|i| i.kind == ItemKind::TurnFailureNote).expect("a note");
    assert!(
        note.body.get().contains("Bash") && note.body.get().contains("outcome_unknown"),
        "{}",
        note.body.get()
    );
}

#[test]
fn an_approved_single_attempt_write_is_marked_started_before_it_runs_and_never_runs_twice() {
    let call = pending_call(DeferredRun::CallSingleAttemptTool, ToolKind::Custom);
    let approved = on_approval(
        &call,
        &HumanDecision { approved: true, message: None, updated_input: None, ..Default::default() },
    );
    assert_eq!(approved.steps[0].kind, StepKind::CallSingleAttemptTool);
    let queued = approved.calls[0].clone();
    let Begin::Run { idempotency_key, attempt, mark_started } = begin_tool_step("s-1", true, 1, &queued)
    else {
        panic!("the first claim runs the tool");
    };
    assert_eq!((idempotency_key.as_str(), attempt), ("s-1/turn-1/toolu_1", 1));
    assert_eq!(mark_started.finish, Finish::Keep);
    let started = mark_started.calls[0].clone();
    assert_eq!(started.state, CallState::Started { attempt: 1 });
    // The Worker died after the mark: the next claim records outcome_unknown and resumes.
    let Begin::Finish(t) = begin_tool_step("s-1", true, 2, &started) else { panic!("must not run again") };
    assert_eq!(t.calls[0].state, CallState::OutcomeUnknown);
    assert_eq!(t.steps[0].kind, StepKind::ResumeTurn);
    // A Worker that died before the mark may run it: nothing started.
    assert!(matches!(begin_tool_step("s-1", true, 2, &queued), Begin::Run { .. }));
}

#[test]
fn a_single_attempt_write_that_errors_is_outcome_unknown_at_once() {
    let call = pending_call(DeferredRun::CallSingleAttemptTool, ToolKind::Custom);
    let t = on_tool_result(true, 1, &call, ToolRun::Error { message: "trap".into() });
    assert_eq!(t.calls[0].state, CallState::OutcomeUnknown);
}

#[test]
fn a_failed_calls_diagnostics_stay_in_its_entry_and_out_of_the_record_the_model_replays() {
    let traceback = "Traceback (most recent call last):\n  | ValueError: refund r_9 failed";
    for (single_attempt, runs_in) in
        [(true, DeferredRun::CallSingleAttemptTool), (false, DeferredRun::CallTool)]
    {
        let call =
            CallEntry { diagnostics: Some(traceback.into()), ..pending_call(runs_in, ToolKind::Custom) };
        let t = on_tool_result(
            single_attempt,
            1,
            &call,
            ToolRun::Failed { message: "ValueError: failed".into() },
        );
        let finished = &t.calls[0];
        assert_eq!(finished.diagnostics.as_deref(), Some(traceback), "kept on the stored entry");
        let record = serde_json::to_string(&finished.record().expect("final")).unwrap();
        assert!(!record.contains("Traceback"), "the replayed record leaves it out: {record}");
        let stored = CallEntry::parse(&finished.to_value().to_string()).unwrap();
        assert_eq!(stored.diagnostics.as_deref(), Some(traceback), "it round-trips");
    }
}

#[test]
fn an_idempotent_write_retries_under_one_key_then_records_outcome_unknown() {
    let call =
        CallEntry { state: CallState::Queued, ..pending_call(DeferredRun::CallTool, ToolKind::Custom) };
    for attempt in 1..CALL_TOOL_ATTEMPTS {
        let Begin::Run { idempotency_key, .. } = begin_tool_step("s-1", false, attempt, &call) else {
            panic!()
        };
        assert_eq!(idempotency_key, "s-1/turn-1/toolu_1");
        let t = on_tool_result(false, attempt, &call, ToolRun::Error { message: "503".into() });
        assert!(matches!(t.finish, Finish::Retry(_)), "attempt {attempt}: {t:?}");
    }
    let t = on_tool_result(false, CALL_TOOL_ATTEMPTS, &call, ToolRun::Error { message: "503".into() });
    assert_eq!(t.calls[0].state, CallState::OutcomeUnknown);
    // Claimed a fourth time after crashes: no run at all.
    let started = CallEntry { state: CallState::Started { attempt: 3 }, ..call };
    assert!(matches!(begin_tool_step("s-1", false, 4, &started), Begin::Finish(_)));
    // Crashed mid-call before the limit: runs again with the same key.
    assert!(matches!(begin_tool_step("s-1", false, 2, &started), Begin::Run { attempt: 2, .. }));
}

#[test]
fn only_what_a_tool_returns_or_provably_never_sent_is_a_definite_failure() {
    use super::tools::{Settled, settle};
    let failed = |error: &str| Settled::Record(Outcome::Failed { error: error.into() });
    let unknown = Settled::Record(Outcome::OutcomeUnknown);
    let own = || ToolRun::Failed { message: "gone".into() };
    let thrown = || ToolRun::Error { message: "KeyError: 'refund_id'".into() };
    let contained = || ToolRun::Contained { message: "connection refused".into() };
    // A single-attempt write.
    assert_eq!(
        settle(own(), "create_refund", true, 1, true),
        unknown,
        "its own failure may follow an effect"
    );
    assert_eq!(settle(thrown(), "create_refund", true, 1, true), unknown);
    let never = failed(
        "The request of create_refund never left this machine, so it did not take effect: connection refused",
    );
    assert_eq!(settle(contained(), "create_refund", true, 1, true), never);
    // An idempotent write: an exception is attempted again, its own failure is final.
    assert_eq!(settle(own(), "record_credit", false, 1, true), failed("gone"));
    assert!(matches!(settle(thrown(), "record_credit", false, 1, true), Settled::Retry { .. }));
    assert_eq!(settle(thrown(), "record_credit", false, CALL_TOOL_ATTEMPTS, false), unknown);
    assert!(matches!(
        settle(contained(), "record_credit", false, 1, true),
        Settled::Record(Outcome::Failed { .. })
    ));
    // After an earlier attempt started, "never sent" holds for this attempt only.
    assert!(matches!(settle(contained(), "record_credit", false, 2, false), Settled::Retry { .. }));
    assert_eq!(settle(contained(), "record_credit", false, CALL_TOOL_ATTEMPTS, false), unknown);
}

#[test]
fn a_deferred_write_that_never_sent_anything_is_failed_and_one_that_may_have_is_unknown() {
    let call = pending_call(DeferredRun::CallSingleAttemptTool, ToolKind::Custom);
    let refused = on_tool_result(true, 1, &call, ToolRun::Contained { message: "connection refused".into() });
    let Some(error) = refused.calls[0].state.text() else { panic!("{:?}", refused.calls[0].state) };
    assert!(error.contains("never left this machine") && error.contains("connection refused"), "{error}");
    assert_eq!(refused.calls[0].state.name(), "failed");
    let own = on_tool_result(true, 1, &call, ToolRun::Failed { message: "unparsable answer".into() });
    assert_eq!(own.calls[0].state, CallState::OutcomeUnknown);
    // A retried idempotent call whose later attempt never sent anything: the first one may have.
    let started = CallEntry { state: CallState::Started { attempt: 1 }, ..call };
    let later = on_tool_result(false, 2, &started, ToolRun::Contained { message: "refused".into() });
    assert!(matches!(later.finish, Finish::Retry(_)), "{later:?}");
}

#[test]
fn tool_results_become_records() {
    let call = pending_call(DeferredRun::CallTool, ToolKind::Custom);
    let ok = on_tool_result(
        false,
        1,
        &call,
        ToolRun::Output { text: "r_1".into(), is_error: false, images: Vec::new() },
    );
    assert_eq!(ok.calls[0].state, CallState::Succeeded { output: "r_1".into() });
    let refused = on_tool_result(
        false,
        1,
        &call,
        ToolRun::Output { text: "no".into(), is_error: true, images: Vec::new() },
    );
    assert_eq!(refused.calls[0].state, CallState::Failed { error: "no".into() });
    let invalid =
        on_tool_result(true, 1, &call, ToolRun::Refused { message: "Input validation error: x".into() });
    assert_eq!(invalid.calls[0].state, CallState::Failed { error: "Input validation error: x".into() });
}

#[test]
fn the_resumed_segment_replays_the_record_over_the_transcript_and_the_turn_entries() {
    let (_, deferred_t) = defer(
        &RunState::default(),
        deferred("create_refund", Effect::NonIdempotentWrite, DeferredRun::CallSingleAttemptTool, true),
    );
    let state = deferred_t.run_state.unwrap();
    let call =
        CallEntry { state: CallState::Succeeded { output: "r_1".into() }, ..deferred_t.calls[0].clone() };
    let step = RunModelStep { turn_id: Some("turn-1".into()), resume: Some("toolu_1".into()) };
    let run = run_of(plan(&step, 1, &state, &[prompt(1, "refund order 7")], std::slice::from_ref(&call)));
    match &run.start {
        PlannedStart::ResumeCall { session_id, transcript, pending } => {
            assert_eq!(session_id, "cli-1");
            assert_eq!(transcript.entries.len(), 2);
            assert_eq!(pending.outcome, crate::record::Outcome::Succeeded { output: "r_1".into() });
        }
        other => panic!("{other:?}"),
    }
    // The answer stores the turn's earlier entries and the new ones.
    let t = on_segment(
        &run,
        &state,
        &[call],
        SegmentResult::Completed {
            session_id: "cli-1".into(),
            result: "refunded".into(),
            entries: vec![entry(r#"{"type":"assistant","uuid":"a2"}"#)],
            usage: Usage::default(),
            cost_usd: None,
        },
    );
    let uuids: Vec<_> = t.items.iter().map(|i| i.uuid.clone().unwrap()).collect();
    assert_eq!(uuids, ["u1", "a1", "a2"]);
}

#[test]
fn a_failing_segment_retries_then_fails_the_turn_and_leaves_a_note_for_the_next_prompt() {
    let (_, deferred_t) = defer(
        &RunState::default(),
        deferred("create_refund", Effect::NonIdempotentWrite, DeferredRun::CallSingleAttemptTool, true),
    );
    let state = deferred_t.run_state.unwrap();
    let call =
        CallEntry { state: CallState::Succeeded { output: "r_1".into() }, ..deferred_t.calls[0].clone() };
    let calls = [call];
    let step = RunModelStep { turn_id: Some("turn-1".into()), resume: Some("toolu_1".into()) };
    let rows = [prompt(1, "refund order 7")];
    let failed = || SegmentResult::Failed { error: "CLI error result".into(), retryable: true };
    for attempt in 1..RUN_MODEL_ATTEMPTS {
        let run = run_of(plan(&step, attempt, &state, &rows, &calls));
        let t = on_segment(&run, &state, &calls, failed());
        assert!(matches!(t.finish, Finish::Retry(_)));
        assert!(t.run_state.is_none(), "a retry changes no state");
    }
    let run = run_of(plan(&step, RUN_MODEL_ATTEMPTS, &state, &rows, &calls));
    let t = on_segment(&run, &state, &calls, failed());
    let next = t.run_state.clone().unwrap();
    assert_eq!(next.last_turn_error.as_deref(), Some("CLI error result"));
    assert!(next.turn.is_none() && next.turn_entries.is_empty());
    assert_eq!(next.prompts_through, 0, "the failed prompt goes to the next turn");
    assert_eq!(t.items.len(), 1, "no transcript of a failed turn, only the note");
    assert_eq!(t.items[0].kind, ItemKind::TurnFailureNote);
    assert_eq!(
        t.items[0].body.get(),
        json!({"kind": "user_prompt", "text": "[Tollgate] The previous turn failed after these tool calls ran:\n\
            - create_refund {\"order_id\": \"7\"} -> succeeded: r_1\n\
            Do not repeat these tool calls unless the user asks again."})
        .to_string()
    );
    assert!(t.events.iter().any(|e| e.kind == EventKind::TurnFailed));
    // The next turn sends the failed prompt, the note and its own prompt.
    let rows = [
        prompt(1, "refund order 7"),
        (2, ItemKind::TurnFailureNote, t.items[0].body.get().to_owned()),
        prompt(3, "and?"),
    ];
    let run = run_of(plan(&RunModelStep::default(), 1, &next, &rows, &calls));
    assert_eq!(run.turn_id, "turn-2");
    match run.start {
        PlannedStart::Fresh { prompts } => {
            assert_eq!(prompts.len(), 3);
            assert!(prompts[1].text.starts_with("[Tollgate] The previous turn failed"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_failure_that_cannot_succeed_fails_the_turn_at_once_without_a_note_when_nothing_ran() {
    let state = RunState::default();
    let run = run_of(plan(&RunModelStep::default(), 1, &state, &[prompt(1, "hi")], &[]));
    let t = on_segment(
        &run,
        &state,
        &[],
        SegmentResult::Failed { error: "bad options".into(), retryable: false },
    );
    assert!(t.items.is_empty());
    assert_eq!(t.run_state.unwrap().last_turn_error.as_deref(), Some("bad options"));
}

#[test]
fn a_segment_claimed_past_its_attempts_fails_the_turn_without_running() {
    let state = RunState::default();
    match plan(&RunModelStep::default(), RUN_MODEL_ATTEMPTS + 1, &state, &[prompt(1, "hi")], &[]) {
        Plan::Finish(t) => assert!(t.run_state.unwrap().last_turn_error.unwrap().contains("3 attempts")),
        Plan::Run(_) => panic!("must not run"),
    }
}

#[test]
fn the_spend_limit_stops_new_segments() {
    let state = RunState { cost_usd: 1.5, ..RunState::default() };
    let limits = Limits { spend_limit_usd: Some(1.0), ..Limits::default() };
    let rows = [prompt(1, "hi")];
    match plan_run_model(
        &RunModelStep::default(),
        Claims::nth(1),
        &state,
        &items(&rows),
        TranscriptSource::Items,
        &[],
        &limits,
    )
    .unwrap()
    {
        Plan::Finish(t) => assert!(t.run_state.unwrap().last_turn_error.unwrap().contains("spend limit")),
        Plan::Run(_) => panic!("must not run"),
    }
}

#[test]
fn a_future_or_corrupt_run_state_is_refused_by_name() {
    assert!(matches!(
        RunState::parse(r#"{"version":2,"x":1}"#),
        Err(EngineError::FutureVersion { found: 2, .. })
    ));
    let corrupt = RunState::parse(r#"{"version":1,"turn_entries":"no"}"#).unwrap_err();
    assert!(corrupt.to_string().contains("run state is corrupt"), "{corrupt}");
    assert!(RunState::parse("[]").is_err());
    let state = RunState::parse(RunState::default().to_raw().get()).unwrap();
    assert_eq!(state.version, 1);
}

#[test]
fn the_run_state_keeps_the_seed_fields_and_entry_bytes() {
    let state = RunState {
        session_id: Some("cli-1".into()),
        turn_entries: vec![entry(r#"{"uuid": "u1",  "type":"user"}"#)],
        ..RunState::default()
    };
    let text = state.to_raw().get().to_owned();
    assert!(
        text.starts_with(
            r#"{"version":1,"session_id":"cli-1","turn_entries":[{"uuid": "u1",  "type":"user"}]"#
        ),
        "{text}"
    );
}

/// The texts of planned prompts.
fn texts(prompts: &[super::turn::Prompt]) -> Vec<&str> {
    prompts.iter().map(|p| p.text.as_str()).collect()
}

#[test]
fn a_message_with_images_keeps_them_by_reference_and_its_turn_plans_them_with_its_text() {
    let chart = crate::media::MediaRef {
        digest: format!("sha256:{}", "a".repeat(64)),
        media_type: "image/png".into(),
    };
    let message = user_message("What does this chart show?", std::slice::from_ref(&chart)).unwrap();
    let body: serde_json::Value = serde_json::from_str(message.item.body.get()).unwrap();
    assert_eq!(
        body,
        json!({"kind": "user_prompt", "text": "What does this chart show?", "images": [{"digest": chart.digest, "media_type": "image/png"}]})
    );
    assert_eq!(message.events[0].payload["images"][0]["digest"], chart.digest.as_str());
    let item = message.item.body.get().to_owned();
    let state = RunState::default();
    let run = run_of(plan(&RunModelStep::default(), 1, &state, &[(1, ItemKind::UserPrompt, item)], &[]));
    match &run.start {
        PlannedStart::Fresh { prompts } => {
            assert_eq!(prompts[0].text, "What does this chart show?");
            assert_eq!(prompts[0].images, [chart]);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn user_messages_must_have_text() {
    assert!(user_message("  ", &[]).is_err());
    let message = user_message("Refund order 7", &[]).unwrap();
    assert_eq!(message.item.body.get(), r#"{"kind":"user_prompt","text":"Refund order 7"}"#);
    assert_eq!(message.wake.kind, StepKind::RunModel);
    assert_eq!(
        message.wake.session_status,
        Some(SessionStatus::Running),
        "running from the moment it is queued"
    );
}

#[test]
fn a_turn_that_ends_while_a_message_waits_queues_the_next_turn_as_running() {
    let state = RunState::default();
    let run = run_of(plan(&RunModelStep::default(), 1, &state, &[prompt(1, "hi")], &[]));
    let t = on_segment(
        &run,
        &state,
        &[],
        SegmentResult::Completed {
            session_id: "cli-1".into(),
            result: "hello".into(),
            entries: vec![],
            usage: Usage::default(),
            cost_usd: None,
        },
    );
    assert_eq!(t.status, Some(SessionStatus::Idle));
    assert_eq!(t.steps[0].only_if_prompts_after, Some(1));
    assert_eq!(t.steps[0].session_status, Some(SessionStatus::Running), "running only if it is enqueued");
}

#[test]
fn every_failed_turn_names_its_reason_in_the_event() {
    let state = RunState::default();
    let run = run_of(plan(&RunModelStep::default(), 1, &state, &[prompt(1, "hi")], &[]));
    let t = on_segment(&run, &state, &[], SegmentResult::Failed { error: "bad".into(), retryable: false });
    let event = t.events.iter().find(|e| e.kind == EventKind::TurnFailed).unwrap();
    assert_eq!(event.payload, json!({"turn_id": "turn-1", "error": "bad", "reason": "segment_failed"}));
    for reason in [FailureReason::SpendLimit, FailureReason::MaxTurns, FailureReason::MaxBudgetUsd] {
        let over = SegmentResult::LimitReached { error: "limit".into(), reason };
        let t = on_segment(&run, &state, &[], over);
        let event = t.events.iter().find(|e| e.kind == EventKind::TurnFailed).unwrap();
        assert_eq!(event.payload["reason"], reason.as_str());
        assert!(matches!(t.finish, Finish::Done(_)), "{reason}: not retried: {:?}", t.finish);
    }
    let Plan::Finish(t) =
        plan(&RunModelStep::default(), RUN_MODEL_ATTEMPTS + 1, &state, &[prompt(1, "hi")], &[])
    else {
        panic!("must not run")
    };
    assert_eq!(t.events[0].payload["reason"], FailureReason::SegmentFailed.as_str());
    let lost = DEFAULT_MAX_LOST_WORKERS + 1;
    let claims = Claims { attempt: lost + 1, lost };
    let Plan::Finish(t) = plan_run_model(
        &RunModelStep::default(),
        claims,
        &state,
        &items(&[prompt(1, "hi")]),
        TranscriptSource::Items,
        &[],
        &Limits::default(),
    )
    .unwrap() else {
        panic!("must not run")
    };
    assert_eq!(t.events[0].payload["reason"], FailureReason::WorkerStopped.as_str());
}

/// Plans a new turn's segment on a claim with `lost` lost claims before it, under `limits`.
fn plan_after_lost(attempt: i64, lost: i64, limits: &Limits) -> Plan {
    let rows = [prompt(1, "hi")];
    let step = RunModelStep::default();
    let claims = Claims { attempt, lost };
    plan_run_model(&step, claims, &RunState::default(), &items(&rows), TranscriptSource::Items, &[], limits)
        .unwrap()
}

#[test]
fn claims_whose_worker_was_lost_do_not_count_toward_the_three_attempts() {
    let state = RunState::default();
    let limits = Limits::default();
    // Three Workers SIGKILLed in a row: the fourth claim still runs, as a first attempt.
    let run = run_of(plan_after_lost(4, 3, &limits));
    assert_eq!(
        (run.attempt, run.counted_attempt()),
        (4, 1),
        "events name the claim; the count leaves out the lost"
    );
    let failed = || SegmentResult::Failed { error: "CLI error result".into(), retryable: true };
    let t = on_segment(&run, &state, &[], failed());
    assert!(matches!(t.finish, Finish::Retry(_)), "its own first failure is retried: {:?}", t.finish);
    let run = run_of(plan_after_lost(6, 3, &limits));
    let t = on_segment(&run, &state, &[], failed());
    assert!(matches!(t.finish, Finish::Done(_)), "its own third failure ends the turn: {:?}", t.finish);
    let event = t.events.iter().find(|e| e.kind == EventKind::TurnFailed).unwrap();
    assert_eq!(event.payload["reason"], FailureReason::SegmentFailed.as_str());
}

#[test]
fn a_segment_that_loses_more_workers_than_allowed_fails_its_turn_with_its_own_reason() {
    let limits = Limits { max_lost_workers: 2, ..Limits::default() };
    assert!(matches!(plan_after_lost(3, 2, &limits), Plan::Run(_)), "two lost Workers are allowed");
    let Plan::Finish(t) = plan_after_lost(4, 3, &limits) else { panic!("a third lost Worker stops it") };
    let event = t.events.iter().find(|e| e.kind == EventKind::TurnFailed).unwrap();
    assert_eq!(event.payload["reason"], FailureReason::WorkerStopped.as_str());
    let error = t.run_state.unwrap().last_turn_error.unwrap();
    assert!(error.contains("lost its Worker 3 times") && error.contains("the 2 allowed"), "{error}");
    assert_eq!(Limits::default().max_lost_workers, 10);
}

#[test]
fn unusable_rows_with_a_readable_run_state_fail_the_turn_like_any_other() {
    let (_, deferred_t) = defer(
        &RunState::default(),
        deferred("create_refund", Effect::NonIdempotentWrite, DeferredRun::CallSingleAttemptTool, true),
    );
    let state = deferred_t.run_state.unwrap();
    let t = on_unusable_rows(
        Some("turn-1"),
        Some(&state),
        &[],
        Some(1),
        "the tool call record is corrupt".into(),
    );
    assert_eq!(
        t.finish,
        Finish::Done(json!({"outcome": "turn_failed", "error": "the tool call record is corrupt"}))
    );
    let next = t.run_state.unwrap();
    assert_eq!(next.last_turn_error.as_deref(), Some("the tool call record is corrupt"));
    assert!(next.turn.is_none() && next.turn_entries.is_empty(), "the suspended turn is over");
    assert_eq!(t.status, Some(SessionStatus::Idle));
    assert_eq!(t.steps[0].only_if_prompts_after, Some(1), "the turn's own prompts do not rerun at once");
    let event = &t.events[0];
    assert_eq!((event.kind, &event.payload["reason"]), (EventKind::TurnFailed, &json!("unusable_rows")));
    assert_eq!(event.payload["turn_id"], "turn-1");

    let fresh = on_unusable_rows(None, Some(&RunState::default()), &[], None, "x".into());
    assert!(fresh.steps.is_empty(), "prompts unknown: no next turn that would fail the same way");
    assert_eq!(fresh.events[0].payload["turn_id"], "turn-1");
}

#[test]
fn unusable_rows_without_a_run_state_leave_it_alone_and_say_why() {
    let t = on_unusable_rows(None, None, &[], Some(4), "corrupt row in `sessions` (s): not JSON".into());
    assert!(t.run_state.is_none(), "an unreadable run state is never overwritten");
    assert!(t.items.is_empty() && t.calls.is_empty());
    assert_eq!(t.status, Some(SessionStatus::Idle));
    assert!(matches!(t.finish, Finish::Done(_)));
    assert_eq!(
        t.events[0].payload,
        json!({"turn_id": null, "error": "corrupt row in `sessions` (s): not JSON", "reason": "unusable_rows"})
    );
    assert_eq!(t.steps.len(), 1);
    assert_eq!(t.steps[0].only_if_prompts_after, Some(4));
}

#[test]
fn stored_steps_parse_by_kind() {
    assert_eq!(StepInput::parse("RunModel", "{}").unwrap(), StepInput::RunModel(RunModelStep::default()));
    assert!(
        StepInput::parse("CallTool", r#"{"turn_id":"t"}"#)
            .unwrap_err()
            .to_string()
            .contains("CallTool step payload")
    );
    assert!(matches!(StepInput::parse("Nope", "{}"), Err(EngineError::UnknownStep { .. })));
}

#[test]
fn a_call_entry_in_its_final_state_is_the_record_wire_format_plus_its_step_fields() {
    let call = CallEntry {
        state: CallState::Succeeded { output: "r_1".into() },
        ..pending_call(DeferredRun::CallSingleAttemptTool, ToolKind::Custom)
    };
    let value = call.to_value();
    let record: crate::record::ToolCallRecord = serde_json::from_value(value.clone()).unwrap();
    assert_eq!(record.outcome, crate::record::Outcome::Succeeded { output: "r_1".into() });
    assert_eq!(CallEntry::parse(&value.to_string()).unwrap(), call);
}

#[test]
fn the_conversation_view_shows_prompts_and_answers_as_text() {
    let transcript = json!({"kind": "claude_transcript", "session_id": "c", "entries": [
        {"type": "user", "message": {"role": "user", "content": "hi"}},
        {"type": "assistant", "message": {"id": "m1", "content": [{"type": "text", "text": "hello"}]}},
        {"type": "assistant", "message": {"id": "m1", "content": [{"type": "tool_use", "name": "x"}]}},
        {"type": "user", "isMeta": true, "message": {"content": "Continue from where you left off."}},
        {"type": "user", "message": {"content": [{"type": "tool_result", "content": "x"}]}},
    ]})
    .to_string();
    let rows = [prompt(1, "hi"), (2, ItemKind::ClaudeTranscript, transcript), prompt(3, "queued")];
    let state = RunState { prompts_through: 1, ..RunState::default() };
    let shown = messages(&items(&rows), &state);
    let pairs: Vec<_> = shown.iter().map(|m| (m.role, m.text.as_str(), m.pending)).collect();
    assert_eq!(pairs, [("user", "hi", false), ("assistant", "hello", false), ("user", "queued", true)]);
}

#[test]
fn an_approval_carries_the_groups_its_policy_names_as_approvers() {
    let call =
        deferred("create_refund", Effect::NonIdempotentWrite, DeferredRun::CallSingleAttemptTool, true);
    let (_, mut t) = defer(&RunState::default(), call.clone());
    let unrestricted = t.clone();
    super::turn::with_approvers(&mut t, &crate::policy::Policies::default());
    assert_eq!(t.interrupts, unrestricted.interrupts, "no approvers, no change");
    let policies =
        crate::policy::Policies::default().with_approvers("create_refund", vec!["finance".into()]).unwrap();
    super::turn::with_approvers(&mut t, &policies);
    assert_eq!(t.interrupts[0].request.to_value()["approvers"], json!(["finance"]));
    let opened = t.events.iter().find(|e| e.kind == EventKind::InterruptOpened).expect("opened");
    assert_eq!(
        opened.payload["request"]["approvers"],
        json!(["finance"]),
        "the event shows the same request"
    );
}

#[test]
fn an_approval_carries_its_policys_summary_rendered_with_the_call_arguments_and_its_confirmation() {
    let call =
        deferred("create_refund", Effect::NonIdempotentWrite, DeferredRun::CallSingleAttemptTool, true);
    let (_, mut t) = defer(&RunState::default(), call.clone());
    let plain = t.clone();
    super::turn::with_summaries(&mut t, &crate::policy::Policies::default());
    assert_eq!(t.interrupts, plain.interrupts, "no template, no change");
    let policies = crate::policy::Policies::from_value(&json!({
        "create_refund": { "effect": "non_idempotent_write", "summary": "Refund {amount_cents|money:EUR} on order {order_id}",
                           "confirm_above": { "amount_cents": 100000 } },
    }))
    .unwrap();
    super::turn::with_summaries(&mut t, &policies);
    let expected = "Refund — on order 7";
    assert_eq!(t.interrupts[0].request.to_value()["summary"], json!(expected));
    let opened = t.events.iter().find(|e| e.kind == EventKind::InterruptOpened).expect("opened");
    assert_eq!(opened.payload["request"]["summary"], json!(expected), "the event shows the same request");
    let confirm = json!({ "argument": "amount_cents", "above": 100000 });
    assert_eq!(t.interrupts[0].request.to_value()["confirm_above"], confirm);
}

#[test]
fn an_approval_carries_its_policys_deadline_resolved_for_whoever_fires_it() {
    use crate::policy::{ApprovalDeadline, Policies, PolicyEntry};
    let call =
        deferred("create_refund", Effect::NonIdempotentWrite, DeferredRun::CallSingleAttemptTool, true);
    let (_, mut t) = defer(&RunState::default(), call.clone());
    let plain = t.clone();
    super::turn::with_deadlines(&mut t, &Policies::default());
    assert_eq!(t.interrupts, plain.interrupts, "no deadline, no change");
    let policies = Policies::default()
        .with("create_refund", PolicyEntry::new(Effect::NonIdempotentWrite))
        .unwrap()
        .with_deadline(
            "create_refund",
            Some(ApprovalDeadline::escalate_after(2, vec!["oncall".into()], None)),
        )
        .unwrap();
    super::turn::with_deadlines(&mut t, &policies);
    let stamped = json!({
        "approval_timeout_secs": 2, "on_timeout": "escalate", "escalate_to": ["oncall"],
        "escalation_timeout_secs": 2,
    });
    assert_eq!(
        t.interrupts[0].request.to_value()["deadline"],
        stamped,
        "the default second deadline filled in"
    );
    let opened = t.events.iter().find(|e| e.kind == EventKind::InterruptOpened).expect("opened");
    assert_eq!(opened.payload["request"]["deadline"], stamped, "the event shows the same request");
    assert_eq!(
        crate::deadline::first_deadline(&t.interrupts[0].request).unwrap(),
        Some(std::time::Duration::from_secs(2))
    );
}

fn session_approval(by: &str) -> HumanDecision {
    HumanDecision {
        approved: true,
        scope: client::DecisionScope::Session,
        granted: Some(client::GrantStamp { granted_by: by.into(), granted_at: 1_700_000 }),
        ..HumanDecision::default()
    }
}

/// A later turn's segment that ends deferred on `call` (`toolu_2`), with the session's `rows`
/// and `calls`.
fn defer_later(rows: &[(i64, ItemKind, String)], calls: &[CallEntry], call: DeferredCall) -> Transition {
    let state = RunState { prompts_through: 1, turns_ended: 1, ..RunState::default() };
    let run = run_of(plan(&RunModelStep::default(), 1, &state, rows, calls));
    let call = DeferredCall { tool_use_id: "toolu_2".into(), ..call };
    let result = SegmentResult::Deferred {
        session_id: "cli-1".into(),
        call,
        entries: vec![],
        usage: Usage::default(),
        cost_usd: None,
    };
    on_segment(&run, &state, calls, result)
}

/// The first refund, approved with `scope: "session"` by `ann`, and done.
fn granted_refund() -> CallEntry {
    let approved = on_approval(
        &pending_call(DeferredRun::CallSingleAttemptTool, ToolKind::Custom),
        &session_approval("ann"),
    );
    CallEntry { state: CallState::Succeeded { output: "r_1".into() }, ..approved.calls[0].clone() }
}

#[test]
fn an_approval_with_session_scope_records_a_grant_on_the_call_and_still_runs_it_in_its_step() {
    let call = pending_call(DeferredRun::CallSingleAttemptTool, ToolKind::Custom);
    let t = on_approval(&call, &session_approval("ann"));
    assert_eq!(t.steps[0].kind, StepKind::CallSingleAttemptTool);
    let grant = t.calls[0].grants_session.clone().expect("a grant");
    assert_eq!(
        grant,
        grants::GrantRef {
            tool_name: "create_refund".into(),
            granted_by: "ann".into(),
            granted_at: 1_700_000,
            decision_id: "toolu_1".into(),
        }
    );
    let once = on_approval(&call, &HumanDecision { approved: true, ..HumanDecision::default() });
    assert_eq!(once.calls[0].grants_session, None, "a call-scoped approval grants nothing");
}

#[test]
fn a_granted_tools_next_call_gets_no_interrupt_and_is_recorded_approved_under_the_grant() {
    let rows = [prompt(1, "refund order 7"), prompt(2, "refund order 8")];
    let first = granted_refund();
    let t = defer_later(
        &rows,
        std::slice::from_ref(&first),
        deferred("create_refund", Effect::NonIdempotentWrite, DeferredRun::CallSingleAttemptTool, true),
    );
    assert!(t.interrupts.is_empty(), "{:?}", t.interrupts);
    // It still runs where its policy says: the durable single-attempt step.
    assert_eq!(t.steps.len(), 1);
    assert_eq!(t.steps[0].kind, StepKind::CallSingleAttemptTool);
    assert_eq!(t.status, Some(SessionStatus::Running));
    let call = &t.calls[0];
    assert_eq!(call.tool_call_id, "toolu_2");
    assert_eq!(call.state, CallState::Queued);
    assert_eq!(call.approved_under, first.grants_session);
    assert_eq!(call.grants_session, None);
    let event = t.events.iter().find(|e| e.kind == EventKind::ApprovedUnderGrant).expect("an event");
    assert_eq!(event.payload["grant"]["granted_by"], "ann");
    assert_eq!(event.payload["grant"]["decision_id"], "toolu_1");
    assert_eq!(event.payload["tool_call_id"], "toolu_2");
}

#[test]
fn another_tool_still_waits_for_approval_under_a_grant() {
    let rows = [prompt(1, "refund order 7"), prompt(2, "close the account")];
    let t = defer_later(
        &rows,
        &[granted_refund()],
        deferred("close_account", Effect::NonIdempotentWrite, DeferredRun::CallSingleAttemptTool, true),
    );
    assert_eq!(t.interrupts.len(), 1);
    assert_eq!(t.status, Some(SessionStatus::AwaitingApproval));
    assert_eq!(t.calls[0].approved_under, None);
}

#[test]
fn a_revoked_grant_needs_approval_again() {
    let first = granted_refund();
    let calls = [first.clone()];
    let grants = grants::session_grants(&[], &calls).unwrap();
    assert_eq!(grants.len(), 1);
    let revocation = grants::Revocation { revoked_by: "bob".into(), revoked_at: 1_800_000 };
    assert!(
        grants::revocation_item(&grants, "close_account", &revocation).is_none(),
        "no grant: nothing to revoke"
    );
    let item = grants::revocation_item(&grants, "create_refund", &revocation).expect("an item");
    assert_eq!(item.kind, ItemKind::GrantRevoked);
    let rows = [
        prompt(1, "refund order 7"),
        (2, ItemKind::GrantRevoked, item.body.get().to_owned()),
        prompt(3, "refund order 9"),
    ];
    let listed = grants::session_grants(&items(&rows), &calls).unwrap();
    assert_eq!(listed[0].revoked, Some(revocation.clone()));
    assert!(grants::active_grant(&listed, "create_refund").is_none());
    assert!(grants::revocation_item(&listed, "create_refund", &revocation).is_none(), "revoked twice: 404");
    let t = defer_later(
        &rows,
        &calls,
        deferred("create_refund", Effect::NonIdempotentWrite, DeferredRun::CallSingleAttemptTool, true),
    );
    assert_eq!(t.interrupts.len(), 1);
    assert_eq!(t.calls[0].state, CallState::PendingApproval);
    assert_eq!(t.calls[0].approved_under, None);
    // The revocation is no prompt: the planner does not send it to the model.
    let state = RunState { prompts_through: 1, turns_ended: 1, ..RunState::default() };
    let run = run_of(plan(&RunModelStep::default(), 1, &state, &rows, &calls));
    match run.start {
        PlannedStart::Fresh { prompts } => assert_eq!(texts(&prompts), ["refund order 9"]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn run_state_and_decisions_stored_before_grants_still_parse() {
    let decision = client::parse_decision(r#"{"approved":true,"message":null}"#).unwrap();
    assert_eq!(decision.scope, client::DecisionScope::Call);
    let call =
        CallEntry::parse(&pending_call(DeferredRun::CallTool, ToolKind::Custom).to_value().to_string())
            .unwrap();
    assert_eq!(call.approved_under, None);
    assert!(!pending_call(DeferredRun::CallTool, ToolKind::Custom).to_value().to_string().contains("grant"));
}

// ---- Batches: interrupts opened ahead ----

fn refund(id: &str, order: &str) -> DeferredCall {
    let call =
        deferred("create_refund", Effect::NonIdempotentWrite, DeferredRun::CallSingleAttemptTool, true);
    DeferredCall {
        tool_use_id: id.into(),
        arguments: json!({"order_id": order, "amount_cents": 500}),
        ..call
    }
}

fn held(id: &str, order: &str) -> crate::gate::HeldBackCall {
    let call = refund(id, order);
    crate::gate::HeldBackCall {
        tool_use_id: call.tool_use_id,
        tool_name: call.tool_name,
        kind: call.kind,
        arguments: call.arguments,
        policy: call.policy,
        handling: call.handling,
    }
}

/// Turn 1's segment `attempt` of a turn in `state`, ending deferred on `call`, with the interrupts
/// ahead in `ahead_states`.
fn batch_segment(
    state: &RunState,
    call: DeferredCall,
    ahead_states: Vec<(String, batches::AheadState)>,
) -> Transition {
    let rows = [prompt(1, "refund orders 7, 8 and 9")];
    let step = match &state.turn {
        Some(turn) => RunModelStep { turn_id: Some(turn.turn_id.clone()), resume: Some("toolu_1".into()) },
        None => RunModelStep::default(),
    };
    let calls = [CallEntry {
        state: CallState::Succeeded { output: "r_1".into() },
        ..pending_call(DeferredRun::CallSingleAttemptTool, ToolKind::Custom)
    }];
    let calls: &[CallEntry] = if state.turn.is_some() { &calls } else { &[] };
    let mut run = run_of(plan(&step, 1, state, &rows, calls));
    run.ahead_states = ahead_states;
    let result = SegmentResult::Deferred {
        session_id: "cli-1".into(),
        call,
        entries: vec![],
        usage: Usage::default(),
        cost_usd: None,
    };
    on_segment(&run, state, calls, result)
}

/// A reply asked for refunds 7, 8 and 9: 7 deferred, 8 and 9 held back.
fn first_batch() -> Transition {
    let call = DeferredCall {
        held_back: vec![held("toolu_2", "8"), held("toolu_3", "9")],
        ..refund("toolu_1", "7")
    };
    batch_segment(&RunState::default(), call, Vec::new())
}

#[test]
fn held_back_calls_get_interrupts_ahead_in_one_batch_with_the_deferred_call_and_one_wait() {
    let t = first_batch();
    let ids: Vec<&str> = t.interrupts.iter().map(|i| i.interrupt_id.as_str()).collect();
    assert_eq!(ids, ["toolu_1", "toolu_2", "toolu_3"]);
    for interrupt in &t.interrupts {
        assert_eq!(interrupt.request.to_value()["type"], "tool_approval");
        assert_eq!(interrupt.request.to_value()["batch_id"], "toolu_1", "{:?}", interrupt.request);
        assert_eq!(interrupt.request.to_value()["tool_name"], "create_refund");
    }
    assert_eq!(t.interrupts[0].request.to_value().get("ahead"), None);
    assert_eq!(t.interrupts[2].request.to_value()["ahead"], true);
    assert_eq!(
        t.interrupts[2].request.to_value()["arguments"],
        json!({"order_id": "9", "amount_cents": 500})
    );
    // One waiting step, on the deferred call's own interrupt: one approval round.
    assert_eq!(t.steps.len(), 1);
    assert_eq!(t.steps[0].start, Start::OnInterrupt("toolu_1".into()));
    assert_eq!(t.events.iter().filter(|e| e.kind == EventKind::InterruptOpened).count(), 3);
    assert_eq!(t.events.iter().filter(|e| e.kind == EventKind::ApprovalAwaited).count(), 1);
    assert_eq!(t.calls.len(), 1, "held-back calls are not tool calls while their turn runs");
    assert_eq!(t.calls[0].batch_id.as_deref(), Some("toolu_1"));
    let turn = t.run_state.as_ref().and_then(|s| s.turn.clone()).expect("the turn");
    let ahead: Vec<(&str, &str)> =
        turn.ahead.iter().map(|a| (a.interrupt_id.as_str(), a.batch_id.as_str())).collect();
    assert_eq!(ahead, [("toolu_2", "toolu_1"), ("toolu_3", "toolu_1")]);
    // The run state round-trips.
    let state = RunState::parse(t.run_state.as_ref().unwrap().to_raw().get()).unwrap();
    assert_eq!(state.turn, Some(turn));
}

#[test]
fn a_single_deferred_call_opens_no_batch() {
    let t = batch_segment(&RunState::default(), refund("toolu_1", "7"), Vec::new());
    assert_eq!(t.interrupts.len(), 1);
    assert_eq!(t.interrupts[0].request.to_value().get("batch_id"), None);
    assert_eq!(t.calls[0].batch_id, None);
    assert!(t.run_state.unwrap().turn.unwrap().ahead.is_empty());
}

fn after_first() -> RunState {
    first_batch().run_state.expect("a run state")
}

fn decided_by(approved: bool, message: Option<&str>) -> batches::AheadState {
    batches::AheadState::Decided(HumanDecision {
        approved,
        message: message.map(str::to_owned),
        granted: Some(client::GrantStamp { granted_by: "ann".into(), granted_at: 1_700_000 }),
        ..HumanDecision::default()
    })
}

#[test]
fn a_repeat_of_a_call_approved_ahead_runs_in_its_step_with_no_interrupt_and_names_the_decision() {
    let state = after_first();
    // The model repeats 9 with its keys in another order.
    let repeat =
        DeferredCall { arguments: json!({"amount_cents": 500, "order_id": "9"}), ..refund("toolu_9", "9") };
    let t = batch_segment(&state, repeat, vec![("toolu_3".into(), decided_by(true, None))]);
    assert!(t.interrupts.is_empty(), "{:?}", t.interrupts);
    assert_eq!(t.steps.len(), 1);
    assert_eq!(t.steps[0].kind, StepKind::CallSingleAttemptTool);
    assert_eq!(t.status, Some(SessionStatus::Running));
    assert!(!t.events.iter().any(|e| e.kind == EventKind::ApprovalAwaited), "nobody is waited on");
    let call = &t.calls[0];
    assert_eq!((call.tool_call_id.as_str(), &call.state), ("toolu_9", &CallState::Queued));
    assert_eq!(
        call.decided_ahead,
        Some(batches::AheadRef {
            decision_id: "toolu_3".into(),
            batch_id: "toolu_1".into(),
            decided_by: Some("ann".into()),
            decided_at: Some(1_700_000),
        })
    );
    let used = t.events.iter().find(|e| e.kind == EventKind::DecidedAheadUsed).expect("the event");
    assert_eq!((&used.payload["decision_id"], &used.payload["approved"]), (&json!("toolu_3"), &json!(true)));
    let turn = t.run_state.unwrap().turn.unwrap();
    assert_eq!(turn.ahead[1].used_by.as_deref(), Some("toolu_9"));
    assert_eq!(turn.ahead[0].used_by, None);
}

#[test]
fn a_repeat_of_a_call_rejected_ahead_records_the_rejection_at_once() {
    let state = after_first();
    let t = batch_segment(
        &state,
        refund("toolu_8", "8"),
        vec![("toolu_2".into(), decided_by(false, Some("not 8")))],
    );
    assert!(t.interrupts.is_empty());
    assert_eq!(t.steps[0].kind, StepKind::ResumeTurn, "the model reads the rejection on resume");
    assert_eq!(t.calls[0].state, CallState::Rejected { message: Some("not 8".into()) });
    assert_eq!(t.calls[0].decided_ahead.as_ref().map(|a| a.decision_id.as_str()), Some("toolu_2"));
}

#[test]
fn a_repeat_of_a_call_still_open_ahead_waits_on_that_interrupt() {
    let state = after_first();
    let t =
        batch_segment(&state, refund("toolu_8", "8"), vec![("toolu_2".into(), batches::AheadState::Open)]);
    assert!(t.interrupts.is_empty(), "no second interrupt");
    assert_eq!(t.steps[0].kind, StepKind::AwaitToolApproval);
    assert_eq!(t.steps[0].start, Start::OnInterrupt("toolu_2".into()));
    assert_eq!(t.status, Some(SessionStatus::AwaitingApproval));
    assert_eq!(t.calls[0].state, CallState::PendingApproval);
    assert_eq!(t.calls[0].decided_ahead.as_ref().map(|a| a.decision_id.as_str()), Some("toolu_2"));
    // Applying the decision later names who made it.
    let applied = on_approval(
        &t.calls[0],
        match &decided_by(true, None) {
            batches::AheadState::Decided(d) => d,
            batches::AheadState::Open => unreachable!(),
        },
    );
    assert_eq!(applied.calls[0].decided_ahead.as_ref().and_then(|a| a.decided_by.as_deref()), Some("ann"));
}

#[test]
fn a_repeat_with_another_input_does_not_use_the_decision_and_opens_its_own_interrupt() {
    let state = after_first();
    let other =
        DeferredCall { arguments: json!({"order_id": "8", "amount_cents": 400}), ..refund("toolu_8", "8") };
    let t = batch_segment(&state, other, vec![("toolu_2".into(), decided_by(true, None))]);
    assert_eq!(t.interrupts.len(), 1);
    assert_eq!(t.interrupts[0].interrupt_id, "toolu_8");
    assert_eq!(t.steps[0].start, Start::OnInterrupt("toolu_8".into()));
    assert_eq!(t.calls[0].decided_ahead, None);
    assert!(t.run_state.unwrap().turn.unwrap().ahead.iter().all(|a| a.used_by.is_none()));
}

#[test]
fn the_turns_end_records_unused_decisions_and_closes_open_interrupts_ahead() {
    let mut state = after_first();
    state.turn.as_mut().unwrap().ahead[0].used_by = Some("toolu_8".into());
    let rows = [prompt(1, "refund orders 7, 8 and 9")];
    let step = RunModelStep { turn_id: Some("turn-1".into()), resume: Some("toolu_1".into()) };
    let done = CallEntry {
        state: CallState::Succeeded { output: "r_1".into() },
        ..pending_call(DeferredRun::CallSingleAttemptTool, ToolKind::Custom)
    };
    let run = run_of(plan(&step, 1, &state, &rows, std::slice::from_ref(&done)));
    let completed = SegmentResult::Completed {
        session_id: "cli-1".into(),
        result: "done".into(),
        entries: vec![],
        usage: Usage::default(),
        cost_usd: None,
    };
    let t = on_segment(&run, &state, std::slice::from_ref(&done), completed);
    assert_eq!(t.calls.len(), 1);
    let unused = &t.calls[0];
    assert_eq!((unused.tool_call_id.as_str(), &unused.state), ("toolu_3", &CallState::Unused));
    assert_eq!(unused.state.name(), "unused");
    assert_eq!(unused.record(), None, "an unused call never ran: no record for the model or a failure note");
    assert_eq!(unused.decided_ahead.as_ref().map(|a| a.batch_id.as_str()), Some("toolu_1"));
    assert_eq!(t.close_interrupts.len(), 1);
    assert_eq!(t.close_interrupts[0].interrupt_id, "toolu_3");
    let closing: HumanDecision = serde_json::from_value(t.close_interrupts[0].resolution.clone()).unwrap();
    assert!(!closing.approved);
    let [resolved] = t.close_interrupts[0].events.as_slice() else { panic!("one event") };
    assert_eq!(resolved.kind, EventKind::InterruptResolved);
    assert_eq!(
        (&resolved.payload["interrupt_id"], &resolved.payload["closed"], &resolved.payload["decided_by"]),
        (&json!("toolu_3"), &json!(true), &Value::Null)
    );
    assert!(
        t.events.iter().any(|e| e.kind == EventKind::AheadUnused && e.payload["interrupt_id"] == "toolu_3")
    );
    assert_eq!(t.run_state.unwrap().turn, None, "a decision ahead does not carry into the next turn");

    // A failed turn does the same.
    let failed = SegmentResult::Failed { error: "boom".into(), retryable: false };
    let t = on_segment(&run, &state, &[done], failed);
    assert_eq!(t.close_interrupts.len(), 1);
    assert_eq!(t.calls.iter().filter(|c| c.state == CallState::Unused).count(), 1);
}
