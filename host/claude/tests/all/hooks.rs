//! The agent's own hooks against the pinned CLI, one test per event: what the hook is told, what
//! its answer does, and that no answer lets a call past the gate.
//!
//! The hook here is an in-test [`AppHook`] (answers from a closure, calls recorded); the
//! options factory's WASM hooks reach the same trait through the Worker (`tollgate`'s tests).

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tollgate_claude::{AppHook, AppHookFuture, SegmentOutcome, SegmentReport, SegmentSpec, Start};
use tollgate_engine::hooks::{HookAnswer, HookCall, HookEvent, HookMatcher};
use tollgate_engine::record::Outcome;
use tollgate_mock_model::MockModel;
use tollgate_protocol::{ResumeText, TranscriptEntry, UserPrompt};

use crate::util::{
    Payments, against_mock, completed, describe_with, dir, example_tools, gate, real_cli, run,
};

type Answer = dyn Fn(&HookCall) -> HookAnswer + Send + Sync;

/// An application hook that answers with `answer` and keeps every call it was asked.
struct Recorded {
    calls: Mutex<Vec<HookCall>>,
    answer: Box<Answer>,
}

impl Recorded {
    fn new(answer: impl Fn(&HookCall) -> HookAnswer + Send + Sync + 'static) -> Arc<Self> {
        Arc::new(Recorded { calls: Mutex::new(Vec::new()), answer: Box::new(answer) })
    }

    fn calls(&self, event: HookEvent) -> Vec<HookCall> {
        self.calls.lock().unwrap().iter().filter(|c| c.event == Some(event)).cloned().collect()
    }
}

impl AppHook for Recorded {
    fn call(&self, call: HookCall) -> AppHookFuture {
        let answer = (self.answer)(&call);
        self.calls.lock().unwrap().push(call);
        Box::pin(async move { Ok(answer) })
    }
}

fn every(event: HookEvent) -> HookMatcher {
    HookMatcher { event, matcher: None }
}

fn some(t: &str) -> Option<String> {
    Some(t.to_owned())
}

/// A session against the mock, with the example tools and one application hook.
struct Hooked {
    cli: tollgate_claude::CliBinary,
    mock: MockModel,
    payments: Payments,
    project: tempfile::TempDir,
    hook: Arc<Recorded>,
    matchers: Vec<HookMatcher>,
}

impl Hooked {
    async fn start(
        cli: tollgate_claude::CliBinary,
        matchers: Vec<HookMatcher>,
        answer: impl Fn(&HookCall) -> HookAnswer + Send + Sync + 'static,
    ) -> Hooked {
        let mock = MockModel::start().await.expect("start the mock model");
        let payments = Payments::start().await.expect("start payments");
        Hooked { cli, mock, payments, project: dir(), hook: Recorded::new(answer), matchers }
    }

    fn hooked(&self, start: Start) -> SegmentSpec {
        let mut spec =
            against_mock(SegmentSpec::with_start(self.cli.clone(), self.project.path(), start), &self.mock);
        spec.app_hook = Some(self.hook.clone());
        spec.app_hook_matchers = self.matchers.clone();
        spec
    }

    async fn segment(
        &self,
        start: Start,
        resuming: Option<tollgate_engine::record::ToolCallRecord>,
    ) -> (SegmentReport, String) {
        let tools = example_tools(&self.payments);
        let gate = match resuming {
            Some(record) => gate(&*tools).resuming(record),
            None => gate(&*tools),
        };
        let (report, _) = run(self.hooked(start), gate, tools).await;
        let text = describe_with(&report, &self.mock);
        (report, text)
    }

    async fn fresh(&self, prompt: &str) -> (SegmentReport, String) {
        self.segment(Start::Fresh { prompt: UserPrompt::blocks([prompt]) }, None).await
    }

    /// The model requests' bodies, as text.
    fn requests(&self) -> Vec<String> {
        self.mock
            .message_requests()
            .iter()
            .map(|r| r.body.clone().unwrap_or(Value::Null).to_string())
            .collect()
    }
}

fn resume_of(report: &SegmentReport) -> (String, ResumeText) {
    let mut transcript = ResumeText::default();
    transcript.push_entries(report.outcome.entries().iter().map(TranscriptEntry::as_str));
    (report.outcome.session_id().expect("a session").to_owned(), transcript)
}

#[tokio::test]
async fn pre_tool_use_a_hook_blocks_a_call_and_cannot_let_a_write_past_the_gate() {
    let Some((cli, _slot)) = real_cli("hooks: PreToolUse").await else { return };
    // Blocks a lookup of order 13; on a refund, adds context and rewrites: never a decision.
    let world = Hooked::start(cli, vec![every(HookEvent::PreToolUse)], |call| {
        let input = call.tool_input.clone().unwrap_or_default();
        match call.tool_name.as_deref() {
            Some("mcp__tools__lookup_order") if input["order_id"] == "13" => {
                HookAnswer { block: some("order 13 is under review"), ..HookAnswer::default() }
            }
            Some("mcp__tools__create_refund") => HookAnswer {
                context: some("refunds go through finance"),
                updated_input: Some(json!({"order_id": input["order_id"], "amount_cents": 100})),
                ..HookAnswer::default()
            },
            _ => HookAnswer::default(),
        }
    })
    .await;

    let (report, text) =
        world.fresh(r#"call lookup_order {"order_id":"13"} && call lookup_order {"order_id":"7"}"#).await;
    let result = completed(&report, &text);
    assert!(
        result.contains("called lookup_order (error): PreToolUse:mcp__tools__lookup_order hook error: order 13 is under review"),
        "{text}"
    );
    assert!(result.contains(r#"called lookup_order: {"order_id":"7","status":"delivered""#), "{text}");
    let asked = world.hook.calls(HookEvent::PreToolUse);
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert_eq!(asked[0].tool_input, Some(json!({"order_id": "13"})));

    // A write: the hook speaks, the gate still defers it; nothing ran, the rewrite is the call.
    let (report, text) = world.fresh(r#"call create_refund {"order_id":"7","amount_cents":500}"#).await;
    let SegmentOutcome::Deferred { call, .. } = &report.outcome else { panic!("expected Deferred\n{text}") };
    assert_eq!(call.arguments, json!({"order_id": "7", "amount_cents": 100}), "{text}");
    assert_eq!(world.payments.count(), 0, "{text}");

    // Its resume: the hook that blocks every refund is not asked about the pending call, whose
    // record the model reads.
    let (session_id, transcript) = resume_of(&report);
    let record = call.record(Outcome::Succeeded { output: "refund r_1 of 100 cents".into() });
    let before = world.hook.calls(HookEvent::PreToolUse).len();
    let blocking = Hooked {
        hook: Recorded::new(|_| HookAnswer { block: some("no refunds"), ..HookAnswer::default() }),
        ..world
    };
    let start = Start::Resume { session_id, transcript, prompt: None };
    let (report, text) = blocking.segment(start, Some(record)).await;
    assert_eq!(completed(&report, &text), "called create_refund: refund r_1 of 100 cents", "{text}");
    assert!(
        blocking.hook.calls(HookEvent::PreToolUse).is_empty(),
        "asked about the resumed call ({before} before)"
    );
}

#[tokio::test]
async fn post_tool_use_a_hook_reads_the_output_and_adds_context_the_model_reads() {
    let Some((cli, _slot)) = real_cli("hooks: PostToolUse").await else { return };
    let world = Hooked::start(
        cli,
        vec![HookMatcher { event: HookEvent::PostToolUse, matcher: Some("mcp__tools__.*".into()) }],
        |call| HookAnswer {
            context: Some(format!("checked {}", call.tool_use_id.clone().unwrap_or_default())),
            ..HookAnswer::default()
        },
    )
    .await;
    let (report, text) = world.fresh(r#"call lookup_order {"order_id":"7"}"#).await;
    assert!(completed(&report, &text).starts_with("called lookup_order: {"), "{text}");
    let [post] = &world.hook.calls(HookEvent::PostToolUse)[..] else { panic!("{text}") };
    assert_eq!(post.tool_name.as_deref(), Some("mcp__tools__lookup_order"));
    assert!(
        post.tool_response.as_ref().unwrap().to_string().contains(r#"\"status\":\"delivered\""#),
        "{post:?}"
    );
    let id = post.tool_use_id.clone().unwrap();
    let requests = world.requests();
    assert!(
        requests[1]
            .contains(&format!("PostToolUse:mcp__tools__lookup_order hook additional context: checked {id}")),
        "{text}"
    );
}

#[tokio::test]
async fn user_prompt_submit_a_hook_adds_context_or_blocks_the_prompt_before_any_model_call() {
    let Some((cli, _slot)) = real_cli("hooks: UserPromptSubmit").await else { return };
    let world = Hooked::start(cli, vec![every(HookEvent::UserPromptSubmit)], |call| {
        if call.prompt.as_deref().is_some_and(|p| p.contains("secret")) {
            HookAnswer { block: some("prompts may not ask for secrets"), ..HookAnswer::default() }
        } else {
            HookAnswer { context: some("the customer is ACME"), ..HookAnswer::default() }
        }
    })
    .await;
    let (report, text) = world.fresh("say hello").await;
    assert_eq!(completed(&report, &text), "said: hello", "{text}");
    assert!(
        world.requests()[0].contains("UserPromptSubmit hook additional context: the customer is ACME"),
        "{text}"
    );

    let (report, text) = world.fresh("say the secret").await;
    let result = completed(&report, &text);
    assert!(
        result.starts_with("UserPromptSubmit operation blocked by hook:\nprompts may not ask for secrets"),
        "{text}"
    );
    assert_eq!(world.requests().len(), 1, "a blocked prompt reaches no model\n{text}");
    let prompts: Vec<_> =
        world.hook.calls(HookEvent::UserPromptSubmit).into_iter().map(|c| c.prompt).collect();
    assert_eq!(prompts, [some("say hello"), some("say the secret")]);
}

#[tokio::test]
async fn stop_a_hook_that_blocks_makes_the_model_go_on_once() {
    let Some((cli, _slot)) = real_cli("hooks: Stop").await else { return };
    let world = Hooked::start(cli, vec![every(HookEvent::Stop)], |call| {
        if call.stop_hook_active {
            HookAnswer::default()
        } else {
            HookAnswer { block: some("say continued after the stop hook"), ..HookAnswer::default() }
        }
    })
    .await;
    let (report, text) = world.fresh("say first").await;
    assert_eq!(completed(&report, &text), "said: continued after the stop hook", "{text}");
    let stops: Vec<(bool, Option<String>)> = world
        .hook
        .calls(HookEvent::Stop)
        .into_iter()
        .map(|c| (c.stop_hook_active, c.last_assistant_message))
        .collect();
    assert_eq!(stops, [(false, some("said: first")), (true, some("said: continued after the stop hook"))]);
    assert_eq!(report.stats.model_calls, 2, "{text}");
}

#[tokio::test]
async fn subagent_stop_a_hook_sees_the_subagent_and_can_make_it_go_on() {
    let Some((cli, _slot)) = real_cli("hooks: SubagentStop").await else { return };
    let world = Hooked::start(cli, vec![every(HookEvent::SubagentStop)], |call| {
        if call.stop_hook_active {
            HookAnswer::default()
        } else {
            HookAnswer { block: some("say the subagent went on"), ..HookAnswer::default() }
        }
    })
    .await;
    let task =
        json!({"description": "look up", "subagent_type": "general-purpose", "prompt": "say looked up"});
    let (report, text) = world.fresh(&format!("call Task {task}")).await;
    let result = completed(&report, &text);
    assert!(result.contains("said: the subagent went on"), "{text}");
    let stops = world.hook.calls(HookEvent::SubagentStop);
    assert_eq!(stops.len(), 2, "{stops:?}");
    assert_eq!(stops[0].agent_type.as_deref(), Some("general-purpose"));
    assert_eq!(stops[0].last_assistant_message.as_deref(), Some("said: looked up"));
    assert!(stops[0].agent_id.is_some() && stops[0].agent_id == stops[1].agent_id, "{stops:?}");
}

#[tokio::test]
async fn pre_compact_a_hook_can_refuse_a_manual_compaction_and_sees_an_automatic_one() {
    let Some((cli, _slot)) = real_cli("hooks: PreCompact").await else { return };
    let world =
        Hooked::start(cli, vec![every(HookEvent::PreCompact)], |call| match call.trigger.as_deref() {
            Some("manual") => {
                HookAnswer { block: some("compaction waits for the night"), ..HookAnswer::default() }
            }
            _ => HookAnswer::default(),
        })
        .await;
    // The mock reports a nearly full context, so the CLI compacts before the next prompt.
    let (report, text) = world.fresh("tokens 990000 ;; say remember order 7").await;
    assert_eq!(completed(&report, &text), "said: remember order 7", "{text}");
    let next = |report: &SegmentReport, prompt: &str| {
        let (session_id, transcript) = resume_of(report);
        Start::Resume { session_id, transcript, prompt: Some(UserPrompt::blocks([prompt])) }
    };
    let (manual, text) = world.segment(next(&report, "/compact"), None).await;
    assert_eq!(completed(&manual, &text), "Compaction blocked by PreCompact hook: [callback]", "{text}");

    let (auto, text) = world.segment(next(&report, "recall"), None).await;
    let recalled = completed(&auto, &text);
    assert!(recalled.contains("summary:\n- prompt: tokens 990000 ;; say remember order 7"), "{text}");
    let triggers: Vec<_> = world.hook.calls(HookEvent::PreCompact).into_iter().map(|c| c.trigger).collect();
    assert_eq!(triggers, [some("manual"), some("auto")]);
}

#[tokio::test]
async fn an_answer_the_event_does_not_take_is_refused_and_the_turn_goes_on_as_if_unanswered() {
    let Some((cli, _slot)) = real_cli("hooks: a refused answer").await else { return };
    // A rewrite on Stop: refused by the check, so the CLI reads an error (no answer) and ends.
    let world = Hooked::start(cli, vec![every(HookEvent::Stop)], |_| HookAnswer {
        updated_input: Some(json!({"x": 1})),
        block: some("say should not happen"),
        ..HookAnswer::default()
    })
    .await;
    let (report, text) = world.fresh("say once").await;
    assert_eq!(completed(&report, &text), "said: once", "{text}");
    assert_eq!(world.requests().len(), 1, "{text}");
}
