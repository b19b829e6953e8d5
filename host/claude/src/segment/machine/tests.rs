//! The machine fed real CLI runs (the captured frames in `host/protocol/tests/data/frames`, CLI
//! 2.1.328) and bad input, its effects checked one by one.

use std::time::Duration;

use serde_json::{Value, json};
use tollgate_engine::gate::{CliToolDecision, Gate, McpPermit};
use tollgate_engine::hooks::HookAnswer;
use tollgate_engine::policy::{Annotations, Effect as PolicyEffect, Policies, PolicyEntry};
use tollgate_engine::record::{Outcome, ToolCallRecord, ToolResult};
use tollgate_protocol::{Initialize, UserPrompt};

use super::*;
use crate::tools::{ToolSpec, catalog};

const TOOL_ALLOW: &str = include_str!("../../../../protocol/tests/data/frames/tool_allow__run.jsonl");
const DEFER: &str = include_str!("../../../../protocol/tests/data/frames/defer_resume_allow__1-defer.jsonl");
const RESUME: &str =
    include_str!("../../../../protocol/tests/data/frames/defer_resume_allow__2-resume.jsonl");
const HTTP_500: &str = include_str!("../../../../protocol/tests/data/frames/errors__http500.jsonl");

/// One captured line: when, which way, the frame.
struct Captured {
    t: Duration,
    dir: String,
    frame: Value,
}

/// The lines of a capture. The probe that made them used its own ids: they are put back as this
/// host's (its `initialize` request id, its gate matcher's callback id), so the CLI's frames read
/// as they would to this host.
fn capture(text: &str) -> Vec<Captured> {
    let lines: Vec<Captured> = text
        .lines()
        .map(|line| {
            let value: Value = serde_json::from_str(line).expect("a captured line is JSON");
            Captured {
                t: Duration::from_secs_f64(value["t"].as_f64().expect("t")),
                dir: value["dir"].as_str().expect("dir").to_owned(),
                frame: value["frame"].clone(),
            }
        })
        .collect();
    let init = lines
        .iter()
        .find(|c| c.dir == "host->cli" && c.frame["request"]["subtype"] == "initialize")
        .expect("the capture has the host's initialize");
    let init_id = init.frame["request_id"].clone();
    let gate_hook = init.frame["request"]["hooks"]["PreToolUse"][0]["hookCallbackIds"][0].clone();
    lines
        .into_iter()
        .map(|mut c| {
            if c.dir == "cli->host" {
                if c.frame["type"] == "control_response" && c.frame["response"]["request_id"] == init_id {
                    c.frame["response"]["request_id"] = json!(INITIALIZE_ID);
                }
                if c.frame["request"]["subtype"] == "hook_callback"
                    && c.frame["request"]["callback_id"] == gate_hook
                {
                    c.frame["request"]["callback_id"] = json!(GATE_HOOK_ID);
                }
            }
            c
        })
        .collect()
}

/// What the probe answered to the CLI's request `request_id`.
fn captured_answer<'c>(lines: &'c [Captured], request_id: &str) -> &'c Value {
    &lines
        .iter()
        .find(|c| c.dir == "host->cli" && c.frame["response"]["request_id"] == request_id)
        .expect("the probe answered")
        .frame
}

/// An effect as a value, to compare.
fn shown(effect: Effect) -> Value {
    match effect {
        Effect::Write(frame) => json!({"write": serde_json::from_str::<Value>(&frame.to_json()).unwrap()}),
        Effect::CloseStdin => json!("close_stdin"),
        Effect::Mcp { request_id, server_name, message } => {
            json!({"mcp": {"request_id": request_id, "server": server_name, "method": message["method"]}})
        }
        Effect::Withdraw(request_id) => json!({"withdraw": request_id}),
        Effect::AskDecider { ticket, tool_name, input } => {
            json!({"ask_decider": {"ticket": ticket, "tool": tool_name, "input": input}})
        }
        Effect::AskAppHook { request_id, call } => {
            json!({"ask_app_hook": {"request_id": request_id, "tool": call.tool_name}})
        }
        Effect::Event(event) => json!({"event": format!("{event:?}")}),
        Effect::Shutdown { grace } => json!({"shutdown": grace.as_millis() as u64}),
    }
}

fn settings() -> Settings {
    Settings {
        server_name: "tools".into(),
        app_hook: false,
        cli_decider: false,
        initialize_timeout: Duration::from_secs(60),
        timeout: Duration::from_secs(900),
        drain_timeout: Duration::from_secs(10),
        cancel_grace: Duration::from_secs(5),
        max_line_bytes: 1024,
    }
}

/// The captures' one custom tool, `echo`, read-only by its annotations; `policies` may say
/// otherwise.
fn gate(policies: Policies) -> Gate {
    let echo = ToolSpec {
        name: "echo".into(),
        description: "Echo.".into(),
        input_schema: json!({"type": "object"}),
        annotations: Annotations { read_only: true, ..Annotations::default() },
    };
    Gate::new(policies, catalog("tools", &[echo]).expect("a valid catalog"))
}

fn fresh(prompt: &str) -> Opening {
    Opening::Initialize {
        initialize: Initialize::new(),
        prompt: Some(UserPrompt::blocks([prompt.to_owned()])),
    }
}

fn drain(machine: &mut SegmentMachine<'_>) -> Vec<Value> {
    std::iter::from_fn(|| machine.take_effect()).map(shown).collect()
}

/// Feeds one line at `t`; its effects.
fn feed(machine: &mut SegmentMachine<'_>, line: &str, t: Duration) -> Vec<Value> {
    machine.notify_stdout(LineEvent::Line(line.to_owned()), t);
    drain(machine)
}

/// Feeds every CLI line of a capture, then EOF; the effects of each line by the CLI's request id
/// (or frame type), in order.
fn replay(machine: &mut SegmentMachine<'_>, lines: &[Captured]) -> Vec<(String, Vec<Value>)> {
    let mut out = Vec::new();
    for c in lines.iter().filter(|c| c.dir == "cli->host") {
        let effects = feed(machine, &c.frame.to_string(), c.t);
        let key = c.frame["request_id"].as_str().unwrap_or(c.frame["type"].as_str().unwrap_or("")).to_owned();
        out.push((key, effects));
    }
    machine.notify_stdout(LineEvent::Eof, Duration::from_secs(2));
    out.push(("eof".into(), drain(machine)));
    out
}

fn exit() -> Exit {
    Exit { status: "exit status: 0".into(), stderr: String::new(), box_limit: None }
}

fn text_deltas(effects: &[(String, Vec<Value>)]) -> String {
    effects
        .iter()
        .flat_map(|(_, e)| e)
        .filter_map(|e| e["event"].as_str())
        .filter_map(|e| e.strip_prefix("TextDelta { text: \"").and_then(|e| e.strip_suffix("\" }")))
        .collect()
}

#[test]
fn a_read_only_call_is_allowed_inline_and_the_turn_completes() {
    let lines = capture(TOOL_ALLOW);
    let mut stats = SegmentStats::default();
    let mut machine = SegmentMachine::new(settings(), 7, gate(Policies::default()), fresh("hi"), &mut stats);
    let opening = drain(&mut machine);
    assert_eq!(opening.len(), 2, "{opening:?}");
    assert_eq!(opening[0]["write"]["request"]["subtype"], "initialize");
    assert_eq!(opening[0]["write"]["request_id"], INITIALIZE_ID);
    assert_eq!(opening[1]["write"]["type"], "user", "the prompt is pipelined after initialize");

    let effects = replay(&mut machine, &lines);
    // Every mcp_message goes to the bridge under its request id; nothing is answered here.
    let mcp: Vec<&Value> = effects.iter().flat_map(|(_, e)| e).filter(|e| e.get("mcp").is_some()).collect();
    assert_eq!(
        mcp.iter().map(|e| e["mcp"]["method"].as_str().unwrap()).collect::<Vec<_>>(),
        ["initialize", "notifications/initialized", "tools/list", "tools/call"]
    );
    // The hook is answered at once, allow, as the probe did.
    let hook_id = "a5b17f39-d804-48ea-b720-6d009e09c92f";
    let (_, hook) = effects.iter().find(|(id, _)| id == hook_id).expect("the hook_callback");
    assert_eq!(hook.len(), 1, "a custom tool's start is the tool server's to report: {hook:?}");
    let decision = "/response/response/hookSpecificOutput/permissionDecision";
    assert_eq!(hook[0]["write"].pointer(decision), Some(&json!("allow")));
    assert_eq!(captured_answer(&lines, hook_id).pointer(decision), Some(&json!("allow")));
    assert_eq!(text_deltas(&effects), "Calling echo.Echo said ping. Done.");
    let (_, at_result) = effects.iter().find(|(kind, _)| kind == "result").unwrap();
    assert_eq!(at_result, &[json!("close_stdin")]);
    assert_eq!(effects.last().unwrap().1, [json!({"shutdown": 5000})], "a finished turn may exit by itself");

    let outcome = machine.finish(exit()).expect("completed");
    let SegmentOutcome::Completed { session_id, result, .. } = outcome else { panic!("{outcome:?}") };
    assert_eq!(session_id, "21bff659-4833-49ff-a6b8-3dc9ce8124ed");
    assert_eq!(result, "Echo said ping. Done.");
    assert_eq!(stats.model_calls, 2);
    assert_eq!(stats.to_initialized, None, "this capture kept no initialize answer");
    assert_eq!(stats.to_first_delta, lines.iter().find(|c| c.frame["type"] == "stream_event").map(|c| c.t));
}

#[test]
fn a_deferred_write_is_answered_defer_and_ends_the_segment_on_it() {
    let lines = capture(DEFER);
    let mut stats = SegmentStats::default();
    let policies =
        Policies::default().with("echo", PolicyEntry::new(PolicyEffect::NonIdempotentWrite)).unwrap();
    let mut machine =
        SegmentMachine::new(settings(), 7, gate(policies), fresh("please echo ping"), &mut stats);
    drain(&mut machine);
    assert_eq!(machine.next_timer(), (Duration::from_secs(60), Timer::Initialize));

    let effects = replay(&mut machine, &lines);
    let hook_id = "b6dca1d2-61c1-4191-9379-e28279365c0e";
    let (_, hook) = effects.iter().find(|(id, _)| id == hook_id).unwrap();
    let decision = "/response/response/hookSpecificOutput/permissionDecision";
    assert_eq!(hook[0]["write"].pointer(decision), Some(&json!("defer")));
    assert_eq!(captured_answer(&lines, hook_id).pointer(decision), Some(&json!("defer")));

    let outcome = machine.finish(exit()).expect("deferred");
    let SegmentOutcome::Deferred { call, entries, .. } = outcome else { panic!("{outcome:?}") };
    assert_eq!((call.tool_use_id.as_str(), call.tool_name.as_str()), ("toolu_def_1", "echo"));
    assert_eq!(call.arguments, json!({"text": "ping"}));
    let mirrored: usize = lines
        .iter()
        .filter(|c| c.frame["type"] == "transcript_mirror")
        .map(|c| c.frame["entries"].as_array().unwrap().len())
        .sum();
    assert_eq!(entries.len(), mirrored, "every mirrored entry, the one after the result too");
    let init_answer = lines.iter().find(|c| c.frame["response"]["request_id"] == INITIALIZE_ID).unwrap();
    assert_eq!(stats.to_initialized, Some(init_answer.t));
    assert_eq!(stats.finish_reasons, ["tool_use"]);
}

#[test]
fn a_resumed_call_replays_its_record_and_the_turn_completes() {
    let lines = capture(RESUME);
    let mut stats = SegmentStats::default();
    let record = ToolCallRecord::new(
        "toolu_def_1",
        "echo",
        tollgate_engine::catalog::ToolKind::Custom,
        json!({"text": "ping"}),
        Outcome::Succeeded { output: "echo: ping".into() },
    );
    let policies =
        Policies::default().with("echo", PolicyEntry::new(PolicyEffect::NonIdempotentWrite)).unwrap();
    let opening = Opening::Initialize { initialize: Initialize::new(), prompt: None };
    let mut machine =
        SegmentMachine::new(settings(), 7, gate(policies).resuming(record), opening, &mut stats);
    assert_eq!(drain(&mut machine).len(), 1, "no prompt for a resumed deferred call");

    let mut effects = Vec::new();
    for c in lines.iter().filter(|c| c.dir == "cli->host") {
        effects.extend(feed(&mut machine, &c.frame.to_string(), c.t));
        if c.frame["request"]["message"]["method"] == "tools/call" {
            // The tool server asks before it runs the call: the record is replayed, not run again.
            let permit = machine.permit_mcp_call(Some("toolu_def_1"), "echo");
            assert_eq!(permit, McpPermit::Replay(ToolResult::text("echo: ping", false)));
        }
    }
    let hook = effects
        .iter()
        .find(|e| e["write"]["response"]["request_id"] == "73cf003a-02dc-4b97-8e68-0145126fb651");
    let output = &hook.expect("the hook is answered")["write"]["response"]["response"]["hookSpecificOutput"];
    assert_eq!(output["permissionDecision"], "allow");
    assert_eq!(output["updatedInput"], json!({"text": "ping"}), "the recorded arguments");
    machine.notify_stdout(LineEvent::Eof, Duration::from_secs(2));
    let outcome = machine.finish(exit()).expect("completed");
    let SegmentOutcome::Completed { result, .. } = outcome else { panic!("{outcome:?}") };
    assert_eq!(result, "Resumed and finished.");
}

#[test]
fn an_error_result_fails_the_segment_and_a_synthetic_reply_is_no_model() {
    let lines = capture(HTTP_500);
    let mut stats = SegmentStats::default();
    let mut machine = SegmentMachine::new(settings(), 7, gate(Policies::default()), fresh("hi"), &mut stats);
    drain(&mut machine);
    replay(&mut machine, &lines);
    let error = machine.finish(exit()).expect_err("an error result");
    assert!(matches!(error, SegmentError::ErrorResult { .. }), "{error:?}");
    assert!(stats.response_models.is_empty(), "{:?}", stats.response_models);
    assert_eq!(stats.response_ids.len(), 1);
}

/// The CLI's answer to `initialize` (trimmed to what the host reads).
const INIT_OK: &str = r#"{"type":"control_response","response":{"subtype":"success",
"request_id":"tollgate_initialize","response":{"hooks_applied":true}}}"#;

fn started(settings: Settings, gate: Gate, stats: &mut SegmentStats) -> SegmentMachine<'_> {
    let mut machine = SegmentMachine::new(settings, 7, gate, fresh("hi"), stats);
    drain(&mut machine);
    assert!(feed(&mut machine, INIT_OK, Duration::from_millis(400)).is_empty());
    machine
}

fn hook_line(request_id: &str, callback_id: &str, tool: &str, tool_use_id: &str) -> String {
    json!({"type": "control_request", "request_id": request_id, "request": {
        "subtype": "hook_callback", "callback_id": callback_id, "input": {
            "session_id": "s", "transcript_path": "/t", "cwd": "/w", "hook_event_name": "PreToolUse",
            "tool_name": tool, "tool_input": {"command": "ls"}, "tool_use_id": tool_use_id}}})
    .to_string()
}

#[test]
fn unknown_frames_and_blank_lines_are_skipped() {
    let mut stats = SegmentStats::default();
    let mut machine = started(settings(), gate(Policies::default()), &mut stats);
    assert!(feed(&mut machine, r#"{"type":"brand_new_kind","x":1}"#, Duration::ZERO).is_empty());
    assert!(feed(&mut machine, "   ", Duration::ZERO).is_empty());
    assert!(!machine.is_over());
}

#[test]
fn a_line_that_is_no_frame_stops_the_segment_at_once_naming_it() {
    let mut stats = SegmentStats::default();
    let mut machine = started(settings(), gate(Policies::default()), &mut stats);
    assert_eq!(feed(&mut machine, "not json at all", Duration::ZERO), [json!({"shutdown": 0})]);
    assert!(feed(&mut machine, INIT_OK, Duration::ZERO).is_empty(), "nothing is read after the end");
    let error = machine.finish(exit()).expect_err("malformed");
    let SegmentError::MalformedOutput { pid, excerpt, .. } = error else { panic!("{error:?}") };
    assert_eq!((pid, excerpt.as_str()), (7, "not json at all"));
}

#[test]
fn a_too_long_line_and_a_read_error_stop_the_segment() {
    let mut stats = SegmentStats::default();
    let mut machine = started(settings(), gate(Policies::default()), &mut stats);
    machine.notify_stdout(LineEvent::TooLong, Duration::ZERO);
    assert_eq!(drain(&mut machine), [json!({"shutdown": 0})]);
    let error = machine.finish(exit()).expect_err("too long");
    assert!(matches!(error, SegmentError::LineTooLong { limit: 1024, .. }), "{error:?}");

    let mut stats = SegmentStats::default();
    let mut machine = started(settings(), gate(Policies::default()), &mut stats);
    machine.notify_stdout(LineEvent::Error(std::io::Error::other("gone")), Duration::ZERO);
    assert!(matches!(machine.finish(exit()), Err(SegmentError::Io { .. })));
}

#[test]
fn bad_control_requests_are_answered_with_errors_and_the_segment_goes_on() {
    let mut stats = SegmentStats::default();
    let mut machine = started(settings(), gate(Policies::default()), &mut stats);
    let unreadable = r#"{"type":"control_request","request_id":"r1","request":{"subtype":"can_use_tool"}}"#;
    let effects = feed(&mut machine, unreadable, Duration::ZERO);
    assert_eq!(effects[0]["write"]["response"]["subtype"], "error", "{effects:?}");
    assert_eq!(effects[0]["write"]["response"]["request_id"], "r1");

    let effects = feed(&mut machine, &hook_line("r2", "hook_9", "Bash", "toolu_1"), Duration::ZERO);
    assert_eq!(effects.len(), 1);
    let error = effects[0]["write"]["response"]["error"].as_str().unwrap();
    assert!(error.starts_with("unknown hook callback id \"hook_9\""), "{error}");

    let other = r#"{"type":"control_request","request_id":"r3","request":{"subtype":"elicitation"}}"#;
    let effects = feed(&mut machine, other, Duration::ZERO);
    let error = effects[0]["write"]["response"]["error"].as_str().unwrap();
    assert!(error.contains("\"elicitation\""), "{error}");

    let cancel = r#"{"type":"control_cancel_request","request_id":"r4"}"#;
    assert_eq!(feed(&mut machine, cancel, Duration::ZERO), [json!({"withdraw": "r4"})]);
    assert!(!machine.is_over());
    // The requests were answered, the segment went on: with no result, it exited early.
    assert!(machine.finish(exit()).is_err_and(|e| matches!(e, SegmentError::ExitedEarly { .. })));
}

#[test]
fn initialize_refused_when_the_hooks_were_not_applied() {
    let mut stats = SegmentStats::default();
    let mut machine = SegmentMachine::new(settings(), 7, gate(Policies::default()), fresh("hi"), &mut stats);
    drain(&mut machine);
    let refused = INIT_OK.replace("true", "false");
    assert_eq!(feed(&mut machine, &refused, Duration::ZERO), [json!({"shutdown": 0})]);
    let error = machine.finish(exit()).expect_err("refused");
    let SegmentError::InitializeRefused { message, .. } = error else { panic!("{error:?}") };
    assert!(message.contains("hooks_applied is Some(false)"), "{message}");
}

#[test]
fn a_result_before_the_initialize_answer_still_ends_the_turn() {
    let lines = capture(TOOL_ALLOW);
    let result = lines.iter().find(|c| c.frame["type"] == "result").unwrap();
    let mut stats = SegmentStats::default();
    let mut machine = SegmentMachine::new(settings(), 7, gate(Policies::default()), fresh("hi"), &mut stats);
    drain(&mut machine);
    let effects = feed(&mut machine, &result.frame.to_string(), Duration::from_secs(1));
    assert_eq!(effects, [json!("close_stdin")]);
    // The initialize deadline (60 s) is still armed, the drain's (1 s + 10 s) comes first.
    assert_eq!(machine.next_timer(), (Duration::from_secs(11), Timer::Drain));
    machine.notify_timer(Timer::Drain);
    assert_eq!(drain(&mut machine), [json!({"shutdown": 5000})]);
    assert!(matches!(machine.finish(exit()), Ok(SegmentOutcome::Completed { .. })));
}

#[test]
fn deadlines_stop_the_segment_with_what_passed() {
    let mut stats = SegmentStats::default();
    let mut machine = SegmentMachine::new(settings(), 7, gate(Policies::default()), fresh("hi"), &mut stats);
    drain(&mut machine);
    machine.notify_timer(Timer::Initialize);
    assert_eq!(drain(&mut machine), [json!({"shutdown": 0})]);
    let error = machine.finish(exit()).expect_err("timeout");
    assert!(
        matches!(error, SegmentError::InitializeTimeout { waited, .. } if waited == Duration::from_secs(60))
    );

    let mut stats = SegmentStats::default();
    let mut machine = started(settings(), gate(Policies::default()), &mut stats);
    assert_eq!(machine.next_timer(), (Duration::from_secs(900), Timer::Segment));
    machine.notify_timer(Timer::Segment);
    assert!(matches!(machine.finish(exit()), Err(SegmentError::Timeout { .. })));
}

#[test]
fn a_cancelled_segment_interrupts_the_cli_and_is_killed_after_the_grace() {
    let mut stats = SegmentStats::default();
    let mut machine = started(settings(), gate(Policies::default()), &mut stats);
    machine.notify_cancel(Duration::from_secs(3));
    let effects = drain(&mut machine);
    assert_eq!(effects.len(), 1);
    assert_eq!(effects[0]["write"]["request"]["subtype"], "interrupt");
    machine.notify_cancel(Duration::from_secs(4));
    assert!(drain(&mut machine).is_empty(), "one interrupt");
    assert_eq!(machine.next_timer(), (Duration::from_secs(8), Timer::CancelGrace));
    machine.notify_timer(Timer::CancelGrace);
    assert_eq!(drain(&mut machine), [json!({"shutdown": 0})]);
    assert!(matches!(machine.finish(exit()), Ok(SegmentOutcome::Cancelled { killed: true })));
}

#[test]
fn a_turn_that_finished_before_the_interrupt_took_ends_as_it_finished() {
    let lines = capture(TOOL_ALLOW);
    let result = lines.iter().find(|c| c.frame["type"] == "result").unwrap();
    let mut stats = SegmentStats::default();
    let mut machine = started(settings(), gate(Policies::default()), &mut stats);
    machine.notify_cancel(Duration::from_secs(1));
    feed(&mut machine, &result.frame.to_string(), Duration::from_secs(2));
    assert_eq!(machine.next_timer().1, Timer::Drain, "the grace no longer counts once the turn ended");
    machine.notify_stdout(LineEvent::Eof, Duration::from_secs(2));
    assert!(matches!(machine.finish(exit()), Ok(SegmentOutcome::Completed { .. })));
}

#[test]
fn a_parked_spare_sends_its_prompt_once_the_claim_is_answered() {
    let claim = Opening::Claim {
        claim: tollgate_protocol::ClaimSession::new("/w"),
        prompt: Some(UserPrompt::blocks(["hi".to_owned()])),
    };
    let mut stats = SegmentStats::default();
    let mut machine = SegmentMachine::new(settings(), 7, gate(Policies::default()), claim, &mut stats);
    let opening = drain(&mut machine);
    assert_eq!(opening.len(), 1);
    assert_eq!(opening[0]["write"]["request"]["subtype"], "claim_session");
    assert!(feed(&mut machine, INIT_OK, Duration::ZERO).is_empty());
    assert_eq!(machine.next_timer(), (Duration::from_secs(60), Timer::Claim));
    let answered = json!({"type": "control_response",
        "response": {"subtype": "success", "request_id": "tollgate_claim", "response": {}}});
    let answered = answered.to_string();
    let effects = feed(&mut machine, &answered, Duration::from_millis(30));
    assert_eq!(effects.len(), 1);
    assert_eq!(effects[0]["write"]["type"], "user");
    assert_eq!(stats_claimed(&machine), Some(Duration::from_millis(30)));
}

fn stats_claimed(machine: &SegmentMachine<'_>) -> Option<Duration> {
    machine.stats.to_claimed
}

#[test]
fn a_parked_spare_that_fails_its_initialize_or_claim_is_a_refused_claim() {
    let claim = || Opening::Claim {
        claim: tollgate_protocol::ClaimSession::new("/w"),
        prompt: Some(UserPrompt::blocks(["hi".to_owned()])),
    };
    let mut stats = SegmentStats::default();
    let mut machine = SegmentMachine::new(settings(), 7, gate(Policies::default()), claim(), &mut stats);
    machine.notify_timer(Timer::Initialize);
    let error = machine.finish(exit()).expect_err("refused");
    let SegmentError::ClaimRefused { message, .. } = error else { panic!("{error:?}") };
    assert!(message.starts_with("no answer to the parked CLI's initialize"), "{message}");

    let mut stats = SegmentStats::default();
    let mut machine = SegmentMachine::new(settings(), 7, gate(Policies::default()), claim(), &mut stats);
    let refused = json!({"type": "control_response",
        "response": {"subtype": "error", "request_id": "tollgate_claim", "error": "busy"}});
    assert_eq!(
        feed(&mut machine, &refused.to_string(), Duration::ZERO).last(),
        Some(&json!({"shutdown": 0}))
    );
    let error = machine.finish(exit()).expect_err("refused");
    assert!(matches!(&error, SegmentError::ClaimRefused { message, .. } if message == "busy"), "{error:?}");
}

#[test]
fn the_cli_decider_is_asked_and_its_answer_goes_out_with_the_call_started() {
    let mut stats = SegmentStats::default();
    let settings = Settings { cli_decider: true, ..settings() };
    let mut machine = started(settings, gate(Policies::default()).with_cli_decider(), &mut stats);
    let effects = feed(&mut machine, &hook_line("r1", GATE_HOOK_ID, "Bash", "toolu_1"), Duration::ZERO);
    assert_eq!(effects, [json!({"ask_decider": {"ticket": 0, "tool": "Bash", "input": {"command": "ls"}}})]);
    machine.notify_decider_answer(0, Ok(Some(CliToolDecision::Allow)));
    let effects = drain(&mut machine);
    assert_eq!(effects.len(), 2, "{effects:?}");
    assert_eq!(effects[0]["write"]["response"]["request_id"], "r1");
    assert_eq!(
        effects[0]["write"].pointer("/response/response/hookSpecificOutput/permissionDecision"),
        Some(&json!("allow"))
    );
    assert!(effects[1]["event"].as_str().unwrap().starts_with("ToolCallStarted { tool_use_id: \"toolu_1\""));
    machine.notify_decider_answer(0, Ok(None));
    assert!(drain(&mut machine).is_empty(), "a ticket is answered once");
}

#[test]
fn an_application_hook_is_asked_and_its_checked_answer_goes_out() {
    let mut stats = SegmentStats::default();
    let settings = Settings { app_hook: true, ..settings() };
    let mut machine = started(settings, gate(Policies::default()), &mut stats);
    let effects = feed(&mut machine, &hook_line("r1", "tollgate_app_0", "Bash", "toolu_1"), Duration::ZERO);
    assert_eq!(effects, [json!({"ask_app_hook": {"request_id": "r1", "tool": "Bash"}})]);
    let answer = HookAnswer { context: Some("careful".into()), ..HookAnswer::default() };
    machine.notify_app_hook_answer("r1".into(), Ok(answer));
    let effects = drain(&mut machine);
    let output = &effects[0]["write"]["response"]["response"]["hookSpecificOutput"];
    assert_eq!(output["additionalContext"], "careful", "{effects:?}");
    assert!(output.get("permissionDecision").is_none(), "an application hook never decides");
    machine.notify_app_hook_answer("r9".into(), Ok(HookAnswer::default()));
    assert!(drain(&mut machine).is_empty(), "an answer nobody asked for is dropped");

    // Without an application hook, its matcher is answered `{}` at once.
    let mut stats = SegmentStats::default();
    let mut machine = started(self::settings(), gate(Policies::default()), &mut stats);
    let effects = feed(&mut machine, &hook_line("r2", "tollgate_app_0", "Bash", "toolu_2"), Duration::ZERO);
    assert_eq!(effects[0]["write"]["response"]["response"], json!({}));
}

#[test]
fn a_record_that_was_not_committed_stops_the_segment() {
    let mut stats = SegmentStats::default();
    let mut machine = started(settings(), gate(Policies::default()), &mut stats);
    machine.notify_not_recorded("the store is gone".into());
    assert_eq!(drain(&mut machine), [json!({"shutdown": 0})]);
    let error = machine.finish(exit()).expect_err("stopped");
    assert!(matches!(&error, SegmentError::NotRecorded { reason, .. } if reason == "the store is gone"));
}
