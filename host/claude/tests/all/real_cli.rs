//! The pinned Claude Code CLI against the mock model and the example tools (an in-test runner
//! that answers as the example guests do).
//!
//! Every test drives whole segments through `run_segment`, the way a Worker does: deferred calls
//! are run "in their step" by the test (with the call's idempotency key), recorded, and handed to
//! the next segment's gate. The payments service counts refunds, so a write that runs
//! twice is caught.

use std::sync::Arc;

use serde_json::{Value, json};
use tollgate_claude::tools::ToolRunner;
use tollgate_claude::tools::catalog;
use tollgate_claude::{
    AppHook, AppHookFuture, SegmentEvent, SegmentOutcome, SegmentReport, SegmentSpec, Start,
};
use tollgate_engine::catalog::ToolKind;
use tollgate_engine::gate::{DeferredCall, Gate};
use tollgate_engine::hooks::{HookAnswer, HookCall, HookEvent, HookMatcher};
use tollgate_engine::policy::{Effect, PolicyEntry};
use tollgate_engine::record::{Outcome, ToolCallRecord};
use tollgate_mock_model::MockModel;
use tollgate_protocol::{ResumeText, TranscriptEntry, UserPrompt};

use tollgate_mock_model::tool_result;

use crate::util::{
    ExampleTools, Payments, against_mock, completed, deferred, describe_with, dir, example_tools, gate,
    last_tool_result, real_cli, run,
};

/// One session as the store would hold it: the CLI session id and every entry so far.
#[derive(Default)]
struct Session {
    id: String,
    entries: Vec<TranscriptEntry>,
}

impl Session {
    /// Appends a segment's entries (the mirror suffix) and returns the outcome's details.
    fn absorb(&mut self, report: &SegmentReport) {
        if let Some(id) = report.outcome.session_id() {
            if !self.id.is_empty() {
                assert_eq!(self.id, id, "the session id changed");
            }
            self.id = id.to_owned();
        }
        self.entries.extend(report.outcome.entries().iter().cloned());
    }
}

/// What a test needs for one session against the real CLI.
struct World {
    cli: tollgate_claude::CliBinary,
    mock: MockModel,
    payments: Payments,
    tools: Arc<ExampleTools>,
    project: tempfile::TempDir,
}

impl World {
    async fn start(cli: tollgate_claude::CliBinary) -> World {
        let mock = MockModel::start().await.expect("start the mock model");
        let payments = Payments::start().await.expect("start payments");
        let tools = example_tools(&payments);
        World { cli, mock, payments, tools, project: dir() }
    }

    fn runner(&self) -> Arc<dyn ToolRunner> {
        self.tools.clone()
    }

    fn gate(&self) -> Gate {
        gate(&*self.tools)
    }

    fn fresh(&self, prompt: &str) -> SegmentSpec {
        against_mock(SegmentSpec::fresh(self.cli.clone(), self.project.path(), prompt), &self.mock)
    }

    fn resume(&self, session: &Session) -> SegmentSpec {
        let spec = SegmentSpec::resume(
            self.cli.clone(),
            self.project.path(),
            session.id.clone(),
            session.entries.clone(),
        );
        against_mock(spec, &self.mock)
    }

    fn next_turn(&self, session: &Session, prompt: &str) -> SegmentSpec {
        let mut transcript = ResumeText::default();
        transcript.push_entries(session.entries.iter().map(TranscriptEntry::as_str));
        let start = Start::Resume {
            session_id: session.id.clone(),
            transcript,
            prompt: Some(UserPrompt::blocks([prompt])),
        };
        against_mock(SegmentSpec::with_start(self.cli.clone(), self.project.path(), start), &self.mock)
    }

    /// Runs a deferred custom call the way `CallSingleAttemptTool` does, and records it.
    async fn run_step(&self, session: &Session, call: &DeferredCall) -> ToolCallRecord {
        let key = format!("{}/turn-1/{}", session.id, call.tool_use_id);
        let (text, is_error) = self
            .tools
            .run_deferred(&call.tool_name, &call.arguments, &key)
            .await
            .unwrap_or_else(|err| panic!("the deferred {} failed: {err}", call.tool_name));
        let outcome =
            if is_error { Outcome::Failed { error: text } } else { Outcome::Succeeded { output: text } };
        call.record(outcome)
    }

    fn text(&self, report: &SegmentReport) -> String {
        describe_with(report, &self.mock)
    }
}

#[tokio::test]
async fn a_read_tool_runs_inline_in_one_segment_and_the_model_sees_its_output() {
    let Some((cli, _slot)) = real_cli("a_read_tool_runs_inline").await else { return };
    let world = World::start(cli).await;
    let (report, events) =
        run(world.fresh(r#"call lookup_order {"order_id":"7"}"#), world.gate(), world.runner()).await;
    let text = world.text(&report);
    let result = completed(&report, &text);
    assert!(result.starts_with("called lookup_order: {"), "{text}");
    assert!(result.contains(r#""total_cents":4200"#), "{text}");

    // The model's second call carried the tool's own output.
    let requests = world.mock.message_requests();
    assert_eq!(requests.len(), 2, "{text}");
    let body = requests[1].body.clone().unwrap_or(Value::Null);
    let tool_use_id = body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .find(|block| block["type"] == "tool_use")
        .and_then(|block| block["id"].as_str().map(str::to_owned))
        .unwrap_or_else(|| panic!("no tool_use in the second request\n{text}"));
    let (seen, is_error) =
        tool_result(&body, &tool_use_id).unwrap_or_else(|| panic!("no tool result\n{text}"));
    assert!(!is_error && seen.contains(r#""status":"delivered""#), "{seen}\n{text}");

    // Deltas streamed the final answer; the inline call was reported; the tool is in the API request.
    let streamed: String = events
        .iter()
        .filter_map(|e| match e {
            tollgate_claude::SegmentEvent::TextDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert!(streamed.ends_with(&result), "deltas {streamed:?}\n{text}");
    assert!(
        events.iter().any(|e| matches!(e, tollgate_claude::SegmentEvent::ToolCallFinished { name, is_error: false, .. } if name == "lookup_order")),
        "{events:?}"
    );
    let offered = requests[0].body.as_ref().and_then(|b| b["tools"].as_array().cloned()).unwrap_or_default();
    assert!(offered.iter().any(|t| t["name"] == "mcp__tools__lookup_order"), "alwaysLoad missing\n{text}");
    assert!(!report.outcome.entries().is_empty(), "{text}");

    // The facts a trace reads: two model calls of the main conversation, no subagent, one model.
    let stats = &report.stats;
    assert_eq!(
        (stats.model_calls, stats.subagent_model_calls, stats.response_ids.len()),
        (2, 0, 2),
        "{text}"
    );
    assert!(stats.init_model.is_some(), "{text}");
    assert_eq!(stats.response_models.len(), 1, "{:?}\n{text}", stats.response_models);
    assert_eq!(stats.finish_reasons, ["tool_use", "end_turn"], "{text}");
}

#[tokio::test]
async fn a_write_defers_and_a_fresh_process_resumes_with_the_recorded_output_without_running_it_again() {
    let Some((cli, _slot)) = real_cli("a_write_defers_and_resumes").await else { return };
    let world = World::start(cli).await;
    let mut session = Session::default();

    let (report, _) = run(
        world.fresh(r#"call create_refund {"order_id":"7","amount_cents":500}"#),
        world.gate(),
        world.runner(),
    )
    .await;
    let text = world.text(&report);
    let call = deferred(&report, &text);
    assert_eq!((call.tool_name.as_str(), call.kind), ("create_refund", ToolKind::Custom), "{text}");
    assert_eq!(call.arguments, json!({"order_id": "7", "amount_cents": 500}), "{text}");
    assert_eq!(world.payments.count(), 0, "a deferred write ran inside the segment\n{text}");
    session.absorb(&report);

    let record = world.run_step(&session, &call).await;
    assert_eq!(world.payments.count(), 1);
    let posted = world.payments.requests()[0].text.to_ascii_lowercase();
    let key = format!("idempotency-key: {}/turn-1/{}", session.id, call.tool_use_id).to_ascii_lowercase();
    assert!(posted.contains(&key), "{posted}");
    let Outcome::Succeeded { output } = record.outcome.clone() else { panic!("{record:?}") };

    let (report, _) = run(world.resume(&session), world.gate().resuming(record), world.runner()).await;
    let text = world.text(&report);
    let result = completed(&report, &text);
    assert_eq!(result, format!("called create_refund: {output}"), "{text}");
    assert_eq!(last_tool_result(&world.mock, &call.tool_use_id), Some((output.clone(), false)), "{text}");
    assert_eq!(world.payments.count(), 1, "the resumed segment ran the write again\n{text}");
    assert_eq!(world.mock.message_requests().len(), 2, "one model call per segment\n{text}");
}

#[tokio::test]
async fn an_approved_bash_call_runs_on_resume_and_a_rejected_one_shows_the_rejection() {
    let Some((cli, _slot)) = real_cli("approved_and_rejected_bash").await else { return };
    let world = World::start(cli).await;
    let mut session = Session::default();
    let script = r#"call Bash {"command":"echo tollgate-bash-$((6*7))","description":"Print a marker"}"#;
    let (report, _) = run(world.fresh(script), world.gate(), world.runner()).await;
    let text = world.text(&report);
    let call = deferred(&report, &text);
    assert_eq!((call.tool_name.as_str(), call.kind), ("Bash", ToolKind::Cli), "{text}");
    session.absorb(&report);

    // Approved: the CLI runs the recorded command itself.
    let approved = call.record(Outcome::approved_cli_tool());
    let (report, _) = run(world.resume(&session), world.gate().resuming(approved), world.runner()).await;
    let text = world.text(&report);
    let result = completed(&report, &text);
    assert!(result.contains("tollgate-bash-42"), "{text}");

    // Rejected, from the same stored entries: the model reads the rejection, nothing runs.
    let rejected = call.record(Outcome::Rejected { message: Some("not on this machine".into()) });
    let (report, _) = run(world.resume(&session), world.gate().resuming(rejected), world.runner()).await;
    let text = world.text(&report);
    let result = completed(&report, &text);
    let (seen, is_error) =
        last_tool_result(&world.mock, &call.tool_use_id).unwrap_or_else(|| panic!("{text}"));
    assert!(is_error && seen.contains("The user rejected this call: not on this machine"), "{seen}\n{text}");
    assert!(!result.contains("tollgate-bash-42"), "{text}");
}

/// Rewrites every `create_refund` to 100 cents with a reason.
struct Rewriter;

impl AppHook for Rewriter {
    fn call(&self, call: HookCall) -> AppHookFuture {
        let answer = match (call.tool_name.as_deref(), call.tool_input) {
            (Some("mcp__tools__create_refund"), Some(mut rewritten)) => {
                rewritten["amount_cents"] = json!(100);
                rewritten["reason"] = json!("rewritten by the application hook");
                HookAnswer { updated_input: Some(rewritten), ..HookAnswer::default() }
            }
            _ => HookAnswer::default(),
        };
        Box::pin(async move { Ok(answer) })
    }
}

#[tokio::test]
async fn an_input_rewriting_hook_changes_the_deferred_calls_arguments() {
    let Some((cli, _slot)) = real_cli("an_input_rewriting_hook").await else { return };
    let world = World::start(cli).await;
    let mut spec = world.fresh(r#"call create_refund {"order_id":"7","amount_cents":500}"#);
    spec.app_hook = Some(Arc::new(Rewriter));
    spec.app_hook_matchers = vec![HookMatcher { event: HookEvent::PreToolUse, matcher: None }];
    let (report, _) = run(spec, world.gate(), world.runner()).await;
    let text = world.text(&report);
    let call = deferred(&report, &text);
    assert_eq!(
        call.arguments,
        json!({"order_id": "7", "amount_cents": 100, "reason": "rewritten by the application hook"}),
        "{text}"
    );
    assert_eq!(world.payments.count(), 0, "{text}");
}

#[tokio::test]
async fn of_two_writes_in_one_reply_the_first_defers_and_the_second_is_called_again_in_the_next_segment() {
    let Some((cli, _slot)) = real_cli("two_writes_in_one_reply").await else { return };
    let world = World::start(cli).await;
    let mut session = Session::default();
    let script = r#"call create_refund {"order_id":"7","amount_cents":100} && call create_refund {"order_id":"8","amount_cents":200}"#;

    let (report, _) = run(world.fresh(script), world.gate(), world.runner()).await;
    let text = world.text(&report);
    let first = deferred(&report, &text);
    assert_eq!(first.arguments["order_id"], "7", "{text}");
    let denials = report.stats.result.as_ref().map(|r| r.permission_denials.clone()).unwrap_or_default();
    assert_eq!(denials.len(), 1, "{text}");
    let second_id = denials[0].tool_use_id.clone();
    session.absorb(&report);

    let record = world.run_step(&session, &first).await;
    let (report, _) = run(world.resume(&session), world.gate().resuming(record), world.runner()).await;
    let text = world.text(&report);
    let again = deferred(&report, &text);
    assert_eq!(again.arguments["order_id"], "8", "{text}");
    assert_ne!(again.tool_use_id, second_id, "{text}");
    // The model read the retry text for the second call of the first reply.
    let requests = world.mock.message_requests();
    let body = requests.last().and_then(|r| r.body.clone()).unwrap_or(Value::Null);
    let (seen, is_error) = tool_result(&body, &second_id).unwrap_or_else(|| panic!("{text}"));
    assert!(is_error, "{text}");
    assert!(
        seen.contains(
            "mcp__tools__create_refund did not run. Only one tool call per reply can run outside this turn"
        ),
        "{seen}\n{text}"
    );
    session.absorb(&report);

    let record = world.run_step(&session, &again).await;
    let (report, _) = run(world.resume(&session), world.gate().resuming(record), world.runner()).await;
    let text = world.text(&report);
    let result = completed(&report, &text);
    assert_eq!(result.matches("called create_refund: {").count(), 2, "{text}");
    assert_eq!(world.payments.count(), 2, "{text}");
}

#[tokio::test]
async fn four_resumes_in_a_row_each_fed_only_the_stored_entries_including_a_plain_text_rejection() {
    let Some((cli, _slot)) = real_cli("four_resumes_in_a_row").await else { return };
    let world = World::start(cli).await;
    let mut session = Session::default();

    // Turn 1: a write, approved and run.
    let (report, _) = run(
        world.fresh(r#"call create_refund {"order_id":"7","amount_cents":500}"#),
        world.gate(),
        world.runner(),
    )
    .await;
    let text = world.text(&report);
    let call = deferred(&report, &text);
    session.absorb(&report);
    let record = world.run_step(&session, &call).await;
    let (report, _) = run(world.resume(&session), world.gate().resuming(record), world.runner()).await; // resume 1
    let text = world.text(&report);
    assert!(completed(&report, &text).starts_with("called create_refund: {"), "{text}");
    session.absorb(&report);

    // Turn 2: a write, rejected. The model reads exactly the rejection, with no hook-error prefix.
    let (report, _) = run(
        world.next_turn(&session, r#"call create_refund {"order_id":"8","amount_cents":300}"#), // resume 2
        world.gate(),
        world.runner(),
    )
    .await;
    let text = world.text(&report);
    let call = deferred(&report, &text);
    assert_eq!(call.arguments["order_id"], "8", "{text}");
    session.absorb(&report);
    let rejected = call.record(Outcome::Rejected { message: Some("wrong order".into()) });
    let (report, _) = run(world.resume(&session), world.gate().resuming(rejected), world.runner()).await; // resume 3
    let text = world.text(&report);
    assert_eq!(
        completed(&report, &text),
        "called create_refund (error): The user rejected this call: wrong order",
        "{text}"
    );
    assert_eq!(
        last_tool_result(&world.mock, &call.tool_use_id),
        Some(("The user rejected this call: wrong order".to_owned(), true)),
        "{text}"
    );
    session.absorb(&report);

    // Turn 3: the model still sees everything.
    let (report, _) = run(world.next_turn(&session, "recall"), world.gate(), world.runner()).await; // resume 4
    let text = world.text(&report);
    let recall = completed(&report, &text);
    assert!(recall.contains("refunded"), "{recall}\n{text}");
    assert!(recall.contains("The user rejected this call: wrong order"), "{recall}\n{text}");
    assert_eq!(world.payments.count(), 1, "{text}");
    assert_eq!(world.mock.message_requests().len(), 5, "one model call per segment\n{text}");
}

/// Starts a warm CLI with `spec`'s launch and waits until it has booted (it then waits for its
/// `initialize`).
async fn warm_cli(spec: &SegmentSpec) -> tollgate_claude::pool::WarmCli {
    let mut warm = tollgate_claude::pool::WarmCli::spawn(spec).expect("a warm CLI starts");
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    assert!(warm.is_waiting(), "the warm CLI exited or wrote before its initialize");
    warm
}

#[tokio::test]
async fn a_pre_started_cli_runs_a_fresh_segment_and_a_pre_started_resume_reads_the_file_written_after_its_spawn()
 {
    let Some((cli, _slot)) = real_cli("pre-started CLIs").await else { return };
    let world = World::start(cli).await;
    let mut session = Session::default();

    let spec = world.fresh(r#"call create_refund {"order_id":"7","amount_cents":500}"#);
    let warm = warm_cli(&spec).await;
    let pid = warm.pid();
    let report = tollgate_claude::run_segment_on(spec, Some(warm), world.gate(), world.runner(), None).await;
    let text = world.text(&report);
    let call = deferred(&report, &text);
    assert_eq!((report.stats.warm, report.stats.pid), (true, Some(pid)), "{text}");
    session.absorb(&report);
    let record = world.run_step(&session, &call).await;
    let Outcome::Succeeded { output } = record.outcome.clone() else { panic!("{record:?}") };

    // Started with `--resume=<session>` before the resume file exists: the segment writes it into
    // the warm CLI's own config directory before `initialize`.
    let spec = world.resume(&session);
    let warm = warm_cli(&spec).await;
    let pid = warm.pid();
    let resume_file = warm.dirs().config().join("projects");
    assert!(!resume_file.exists(), "nothing of the session is there before the take");
    let report = tollgate_claude::run_segment_on(
        spec,
        Some(warm),
        world.gate().resuming(record),
        world.runner(),
        None,
    )
    .await;
    let text = world.text(&report);
    assert_eq!(completed(&report, &text), format!("called create_refund: {output}"), "{text}");
    assert_eq!((report.stats.warm, report.stats.pid), (true, Some(pid)), "{text}");
    assert_eq!(last_tool_result(&world.mock, &call.tool_use_id), Some((output, false)), "{text}");
    assert_eq!(world.payments.count(), 1, "the resumed segment ran the write again\n{text}");
}

/// Parks a spare for `spec`'s fresh launch and waits until it has booted and answered its
/// `initialize`.
async fn parked_cli(spec: &SegmentSpec) -> tollgate_claude::pool::WarmCli {
    let mut warm = tollgate_claude::pool::WarmCli::park(spec).expect("a spare parks");
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    assert!(warm.is_waiting() && warm.is_parked(), "the parked CLI exited");
    assert!(
        warm.cwd().ends_with("park") && warm.cwd().starts_with(std::env::temp_dir()),
        "{}",
        warm.cwd().display()
    );
    warm
}

#[tokio::test]
async fn a_parked_spare_claimed_by_a_fresh_segment_works_in_the_segments_cwd_with_its_prompt_and_tools() {
    let Some((cli, _slot)) = real_cli("a parked spare").await else { return };
    let world = World::start(cli).await;
    let mut spec = world.fresh(r#"call lookup_order {"order_id":"7"}"#);
    spec.system_prompt = Some("You are the refunds agent of session s-parked.".into());
    spec.append_system_prompt = Some("Answer in one line.".into());
    let cwd = spec.cwd.canonicalize().unwrap();
    let warm = parked_cli(&spec).await;
    let pid = warm.pid();
    let report =
        tollgate_claude::run_segment_on(spec.clone(), Some(warm), world.gate(), world.runner(), None).await;
    let text = world.text(&report);
    let answer = completed(&report, &text);
    // The sdk MCP server connected at the claim: the inline read ran and the model saw it.
    assert!(
        answer.starts_with("called lookup_order: ") && answer.contains("\"order_id\":\"7\""),
        "{answer}\n{text}"
    );
    assert_eq!((report.stats.warm, report.stats.pid), (true, Some(pid)), "{text}");
    assert!(report.stats.to_claimed.is_some() && report.stats.claim_refused.is_none(), "{text}");
    // It ran as if started in the segment's cwd: every entry it mirrored says so.
    let entries = report.outcome.entries();
    let cwd_field = format!("\"cwd\":{}", serde_json::Value::from(cwd.to_string_lossy()));
    assert!(
        !entries.is_empty()
            && entries.iter().all(|e| !e.as_str().contains("\"cwd\"") || e.as_str().contains(&cwd_field)),
        "{text}"
    );
    assert!(entries.iter().any(|e| e.as_str().contains(&cwd_field)), "{text}");

    // The model's request is the one a CLI started for the segment makes: same system prompt,
    // same tools.
    let cold = tollgate_claude::run_segment(spec, world.gate(), world.runner(), None).await;
    let text = world.text(&cold);
    assert_eq!(completed(&cold, &text), answer, "{text}");
    let requests = world.mock.message_requests();
    assert_eq!(requests.len(), 4, "two model calls per segment\n{text}");
    let body = |i: usize, key: &str| requests[i].body.as_ref().map(|b| b[key].clone()).unwrap_or_default();
    assert!(
        body(0, "system").to_string().contains("session s-parked")
            && body(0, "system").to_string().contains("Answer in one line."),
        "{}",
        body(0, "system")
    );
    for key in ["system", "tools"] {
        assert_eq!(
            body(0, key),
            body(2, key),
            "the parked and the cold segment's first request differ in {key}"
        );
    }
}

#[tokio::test]
async fn a_claim_the_cli_refuses_sends_no_prompt_and_the_segment_runs_on_a_cli_of_its_own() {
    let Some((cli, _slot)) = real_cli("a refused claim").await else { return };
    let world = World::start(cli).await;
    // The workspace's own settings set `env`, which only a start applies: the CLI refuses the
    // claim of a spare parked elsewhere.
    let settings = world.project.path().join(".claude");
    std::fs::create_dir_all(&settings).unwrap();
    std::fs::write(settings.join("settings.json"), r#"{"env":{"TOLLGATE_PROJECT_SETTING":"1"}}"#).unwrap();
    let mut spec = world.fresh("say hello");
    spec.setting_sources = Some(vec!["project".into()]);
    let warm = parked_cli(&spec).await;
    let parked = warm.pid();
    let report = tollgate_claude::run_segment_on(spec, Some(warm), world.gate(), world.runner(), None).await;
    let text = world.text(&report);
    assert_eq!(completed(&report, &text), "said: hello", "{text}");
    let refused = report.stats.claim_refused.clone().unwrap_or_default();
    assert!(refused.starts_with("project_settings_not_claimable"), "{refused:?}\n{text}");
    assert!(!report.stats.warm && report.stats.pid != Some(parked), "{text}");
    assert_eq!(world.mock.message_requests().len(), 1, "the spare took no prompt\n{text}");
    let gone = std::time::Instant::now();
    while std::path::Path::new(&format!("/proc/{parked}/cmdline")).exists()
        && !std::fs::read_to_string(format!("/proc/{parked}/stat")).unwrap_or_default().contains(") Z")
    {
        assert!(gone.elapsed() < std::time::Duration::from_secs(10), "the refused spare still runs");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_cancelled_segment_interrupts_the_cli_mid_stream_and_it_ends_its_turn() {
    let Some((cli, _slot)) = real_cli("a cancelled segment").await else { return };
    let world = World::start(cli).await;
    let mut spec = world.fresh("drip 20 20 ;; hold cancel-me ;; say a long answer that never ends");
    let (cancel, cancelled) = tokio::sync::watch::channel(false);
    spec.cancel = Some(cancelled);
    spec.cancel_grace = std::time::Duration::from_secs(20);
    let segment = tokio::spawn(run(spec, world.gate(), world.runner()));
    world.mock.wait_for_gate("cancel-me", std::time::Duration::from_secs(60)).await.expect("streaming");
    cancel.send(true).unwrap();
    let (report, events) = segment.await.unwrap();
    let text = world.text(&report);
    assert!(
        matches!(report.outcome, SegmentOutcome::Cancelled { killed: false }),
        "the CLI ended its turn on the interrupt, within the grace\n{text}"
    );
    let result = report.stats.result.as_ref().unwrap_or_else(|| panic!("a result frame\n{text}"));
    assert!(result.is_error, "{text}");
    assert!(
        events.iter().any(|e| matches!(e, tollgate_claude::SegmentEvent::TextDelta { .. })),
        "it was streaming: {events:?}"
    );
    world.mock.open_gate("cancel-me");
}

/// The model's thinking and its inline CLI tool calls (a built-in read and an allowed `Bash`)
/// reach the caller as they happen, beside the custom tool the tool server runs.
#[tokio::test]
async fn thinking_and_inline_cli_tool_calls_are_reported_as_they_happen() {
    let Some((cli, _slot)) = real_cli("thinking_and_inline_cli_tool_calls").await else { return };
    let world = World::start(cli).await;
    let notes = world.project.path().join("notes.txt");
    std::fs::write(&notes, "order 7 shipped late\n").expect("write the notes");
    let script = format!(
        "think the customer asks about order 7 ;; call Read {} && call Bash {} && call lookup_order {} ;; \
         think all three answered",
        json!({"file_path": notes}),
        json!({"command": "echo inline-bash-$((6*7))", "description": "Print a marker"}),
        json!({"order_id": "7"}),
    );
    let policies = tollgate_engine::policy::Policies::default()
        .with("Read", PolicyEntry::new(Effect::Read))
        .and_then(|p| p.with("Bash", PolicyEntry::new(Effect::Read)))
        .expect("valid policies");
    let gate = Gate::new(policies, catalog("tools", &world.tools.tools()).expect("a catalog"));
    let (report, events) = run(world.fresh(&script), gate, world.runner()).await;
    let text = world.text(&report);
    let result = completed(&report, &text);
    assert!(result.contains("inline-bash-42") && result.contains("order 7 shipped late"), "{text}");

    let thinking: String = events
        .iter()
        .filter_map(|e| match e {
            SegmentEvent::ReasoningDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(thinking, "the customer asks about order 7all three answered", "{events:?}\n{text}");
    let calls: Vec<(String, ToolKind, &'static str)> = events
        .iter()
        .filter_map(|e| match e {
            SegmentEvent::ToolCallStarted { name, kind, .. } => Some((name.clone(), *kind, "started")),
            SegmentEvent::ToolCallFinished { name, kind, is_error: false, .. } => {
                Some((name.clone(), *kind, "succeeded"))
            }
            SegmentEvent::ToolCallFinished { name, kind, is_error: true, .. } => {
                Some((name.clone(), *kind, "failed"))
            }
            _ => None,
        })
        .collect();
    for (name, kind) in [("Read", ToolKind::Cli), ("Bash", ToolKind::Cli), ("lookup_order", ToolKind::Custom)]
    {
        let of = |what| calls.iter().filter(|c| c.0 == name && c.1 == kind && c.2 == what).count();
        assert_eq!((of("started"), of("succeeded")), (1, 1), "{name}: {calls:?}\n{text}");
    }
    let read_input = events.iter().find_map(|e| match e {
        SegmentEvent::ToolCallStarted { name, input, .. } if name == "Read" => Some(input.clone()),
        _ => None,
    });
    assert_eq!(read_input, Some(json!({"file_path": notes})), "{events:?}");
    // Thinking comes before the calls it leads to, and after their results.
    let first_call = events.iter().position(|e| matches!(e, SegmentEvent::ToolCallStarted { .. }));
    let last_thought = events.iter().rposition(|e| matches!(e, SegmentEvent::ReasoningDelta { .. }));
    let first_thought = events.iter().position(|e| matches!(e, SegmentEvent::ReasoningDelta { .. }));
    assert!(first_thought < first_call && first_call < last_thought, "{events:?}");
}
