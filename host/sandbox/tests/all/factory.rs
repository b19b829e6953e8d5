//! The options-factory component: typed options, per-call decisions on built-in tools, the
//! agent's own hooks and reviews of calls, from factories of `tollgate:agent@0.1.0` (the example's
//! as it was), 0.2.0 (the hooks test guest) and 0.3.0 (the example's, and the reviewer test guest).

use serde_json::json;
use tollgate_engine::gate::CliToolDecision;
use tollgate_engine::hooks::{HookAnswer, HookCall, HookEvent, HookMatcher};
use tollgate_engine::review::{PendingCall, Review, Risk, ToolRecord, ToolStatus};
use tollgate_sandbox::{FactoryError, LoadError, Manifests, OptionsContext};
use tollgate_test_guests as guests;

use crate::util::sandbox;

fn ctx() -> OptionsContext {
    OptionsContext { session_id: "session-42".into(), turn_id: "turn-1".into(), attempt: 1 }
}

#[tokio::test]
async fn the_example_factory_returns_typed_options() {
    for (path, version) in [(guests::SUPPORT_FACTORY, "0.3.0"), (guests::FACTORY_V1, "0.1.0")] {
        let factory = sandbox().load_options_factory(path.as_ref(), &Manifests::default()).await.unwrap();
        assert!(factory.has_cli_policy());
        assert_eq!((factory.version(), factory.has_hooks()), (version, false));
        assert_eq!(factory.has_review(), version == "0.3.0", "{version}");
        let options = factory.build_options(&ctx()).await.unwrap().into_inner();
        assert_eq!(options.model.as_deref(), Some("claude-sonnet-4-5"));
        assert!(options.append_system_prompt.unwrap().contains("session-42"));
        assert_eq!(options.tools, Some(vec!["Read".into(), "Grep".into(), "Bash".into()]));
        assert_eq!(options.permission_mode.as_deref(), Some("default"));
        assert_eq!(options.max_turns, Some(20));
    }
}

#[tokio::test]
async fn a_0_1_factory_still_decides_bash_calls() {
    let factory =
        sandbox().load_options_factory(guests::FACTORY_V1.as_ref(), &Manifests::default()).await.unwrap();
    assert_eq!(
        factory.decide_cli_tool("Bash", r#"{"command":"ls"}"#).await.unwrap(),
        Some(CliToolDecision::Allow)
    );
    assert_eq!(factory.review_call(&refund("9", 1000), &[]).await.unwrap(), None, "0.1.0 reviews nothing");
}

fn refund(order_id: &str, amount_cents: u64) -> PendingCall {
    PendingCall {
        session_id: "session-42".into(),
        turn_id: "turn-1".into(),
        tool_call_id: "toolu_9".into(),
        tool_name: "create_refund".into(),
        arguments: json!({"order_id": order_id, "amount_cents": amount_cents}).to_string(),
        effect: "non_idempotent_write".into(),
    }
}

fn looked_up(order_id: &str, total_cents: u64) -> ToolRecord {
    ToolRecord {
        tool_name: "lookup_order".into(),
        tool_call_id: format!("toolu_lookup_{order_id}"),
        input: json!({"order_id": order_id}).to_string(),
        status: ToolStatus::Succeeded,
        output: Some(
            json!({"order_id": order_id, "status": "delivered", "total_cents": total_cents, "currency": "EUR"})
                .to_string(),
        ),
        error: None,
    }
}

#[tokio::test]
async fn the_example_factory_checks_a_refund_against_the_orders_total() {
    let factory = sandbox()
        .load_options_factory(guests::SUPPORT_FACTORY.as_ref(), &Manifests::default())
        .await
        .unwrap();
    let recent = [looked_up("3", 1800), looked_up("9", 5400)];
    let review = async |call: PendingCall| factory.review_call(&call, &recent).await.unwrap().unwrap();
    assert_eq!(
        review(refund("9", 125_000)).await,
        Review { risk: Some(Risk::High), notes: vec!["refund exceeds the order total of €54.00".into()] }
    );
    assert_eq!(
        review(refund("9", 5400)).await,
        Review { risk: Some(Risk::Low), notes: vec!["refund is within the order total of €54.00".into()] }
    );
    let unknown = review(refund("12", 100)).await;
    assert_eq!(unknown.risk, Some(Risk::Medium), "{unknown:?}");
    assert!(unknown.notes[0].contains("order 12 was not looked up"), "{unknown:?}");
    let big = [looked_up("9", 1_234_567)];
    let thousands = factory.review_call(&refund("9", 2_000_000), &big).await.unwrap().unwrap();
    assert_eq!(thousands.notes, ["refund exceeds the order total of €12,345.67"]);
    let bash = PendingCall { tool_name: "Bash".into(), arguments: "{}".into(), ..refund("9", 1) };
    assert_eq!(review(bash).await, Review { risk: Some(Risk::Low), notes: vec![] });
}

/// A review that traps, loops or refuses is an error for the caller to record as a failed
/// review; one that answers too much is cut down; each call runs in a fresh instance, so a trap
/// leaves the factory usable.
#[tokio::test]
async fn a_review_that_traps_loops_or_refuses_is_an_error_and_the_factory_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reviewer.wasm");
    std::fs::copy(guests::REVIEWER_FACTORY, &path).unwrap();
    std::fs::write(dir.path().join("reviewer.toml"), "timeout_ms = 1000\n").unwrap();
    let factory = sandbox().load_options_factory(&path, &Manifests::default()).await.unwrap();
    assert_eq!((factory.version(), factory.has_review(), factory.has_hooks()), ("0.3.0", true, false));
    let call = |how: &str| PendingCall { arguments: json!({"review": how}).to_string(), ..refund("9", 1) };
    let trapped = factory.review_call(&call("trap"), &[]).await.unwrap_err();
    assert!(matches!(trapped, FactoryError::Call(_)), "{trapped}");
    let started = std::time::Instant::now();
    let looped = factory.review_call(&call("loop"), &[]).await.unwrap_err();
    assert!(matches!(looped, FactoryError::Call(_)), "{looped}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "the time limit stopped it");
    assert_eq!(
        factory.review_call(&call("refuse"), &[]).await.unwrap_err(),
        FactoryError::Refused("the review refused on purpose".into())
    );
    let flood = factory.review_call(&call("flood"), &[]).await.unwrap().unwrap();
    assert_eq!((flood.risk, flood.notes.len()), (Some(Risk::High), 10));
    assert!(flood.notes.iter().all(|note| note.chars().count() == 500));
    let answered = factory.review_call(&call("ok"), &[looked_up("9", 5400)]).await.unwrap().unwrap();
    assert_eq!(answered, Review { risk: Some(Risk::Medium), notes: vec!["lookup_order succeeded".into()] });
}

#[tokio::test]
async fn the_factory_reads_only_granted_config() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.wasm");
    std::fs::copy(guests::SUPPORT_FACTORY, &path).unwrap();
    std::fs::write(dir.path().join("agent.toml"), "[config]\nMODEL = \"claude-opus-4-1\"\n").unwrap();
    let factory = sandbox().load_options_factory(&path, &Manifests::default()).await.unwrap();
    assert_eq!(factory.build_options(&ctx()).await.unwrap().model.as_deref(), Some("claude-opus-4-1"));
}

#[tokio::test]
async fn the_factory_decides_bash_calls_as_code() {
    let factory = sandbox()
        .load_options_factory(guests::SUPPORT_FACTORY.as_ref(), &Manifests::default())
        .await
        .unwrap();
    let decide = async |name: &str, input: &str| factory.decide_cli_tool(name, input).await.unwrap();
    assert_eq!(decide("Bash", r#"{"command":"ls -la"}"#).await, Some(CliToolDecision::Allow));
    assert!(
        matches!(decide("Bash", r#"{"command":"rm -rf /"}"#).await, Some(CliToolDecision::Deny(m)) if m.contains("not allowed"))
    );
    assert_eq!(decide("Bash", r#"{"command":"curl x | sh"}"#).await, Some(CliToolDecision::RequireApproval));
    assert_eq!(decide("Read", r#"{"file_path":"/x"}"#).await, None);
}

#[tokio::test]
async fn a_tool_component_is_not_an_options_factory() {
    let error =
        sandbox().load_options_factory(guests::ORDERS.as_ref(), &Manifests::default()).await.unwrap_err();
    let text = error.to_string();
    assert!(matches!(error, LoadError::WrongWorld { .. }), "{text}");
    assert!(
        text.contains(
            "tollgate:agent/options@0.3.0, tollgate:agent/options@0.2.0 or tollgate:agent/options@0.1.0"
        ) && text.contains("tollgate:tool/tools@0.1.0"),
        "{text}"
    );
}

#[tokio::test]
async fn a_0_2_factory_names_its_hooks_in_its_options_and_runs_them() {
    let factory =
        sandbox().load_options_factory(guests::HOOKS_FACTORY.as_ref(), &Manifests::default()).await.unwrap();
    assert_eq!((factory.version(), factory.has_hooks(), factory.has_cli_policy()), ("0.2.0", true, false));
    let options = factory.build_options(&ctx()).await.unwrap().into_inner();
    let events: Vec<HookEvent> = options.hooks.iter().map(|m: &HookMatcher| m.event).collect();
    assert_eq!(
        events,
        [
            HookEvent::PreToolUse,
            HookEvent::PostToolUse,
            HookEvent::UserPromptSubmit,
            HookEvent::Stop,
            HookEvent::SubagentStop,
            HookEvent::PreCompact
        ]
    );
    assert_eq!(factory.decide_cli_tool("Bash", "{}").await.unwrap(), None, "no cli-policy export");

    let call = |event, f: &dyn Fn(&mut HookCall)| {
        let mut call = HookCall { event: Some(event), ..HookCall::default() };
        f(&mut call);
        call
    };
    let refund = call(HookEvent::PreToolUse, &|c| {
        c.tool_name = Some("mcp__tools__create_refund".into());
        c.tool_input = Some(json!({"order_id": "7", "amount_cents": 5000}));
    });
    let answer = factory.on_hook(&ctx(), &refund).await.unwrap();
    assert_eq!(answer.updated_input, Some(json!({"order_id": "7", "amount_cents": 1000})));
    assert_eq!(answer.context.as_deref(), Some("the application capped the refund at 1000 cents"));
    let post = call(HookEvent::PostToolUse, &|c| c.tool_name = Some("Read".into()));
    assert_eq!(
        factory.on_hook(&ctx(), &post).await.unwrap(),
        HookAnswer { context: Some("checked by the application hook: Read".into()), ..HookAnswer::default() }
    );
    let stop = call(HookEvent::Stop, &|c| c.last_assistant_message = Some("said: hook:continue".into()));
    assert_eq!(
        factory.on_hook(&ctx(), &stop).await.unwrap().block.as_deref(),
        Some("say continued after the stop hook")
    );
    let again = call(HookEvent::Stop, &|c| {
        c.last_assistant_message = Some("said: hook:continue".into());
        c.stop_hook_active = true;
    });
    assert_eq!(factory.on_hook(&ctx(), &again).await.unwrap(), HookAnswer::default());
    let compact = call(HookEvent::PreCompact, &|c| c.trigger = Some("manual".into()));
    assert!(factory.on_hook(&ctx(), &compact).await.unwrap().block.is_some());
}

#[tokio::test]
async fn a_0_1_factory_runs_no_hooks() {
    let factory =
        sandbox().load_options_factory(guests::FACTORY_V1.as_ref(), &Manifests::default()).await.unwrap();
    let stop = HookCall { event: Some(HookEvent::Stop), ..HookCall::default() };
    let error = factory.on_hook(&ctx(), &stop).await.unwrap_err();
    assert_eq!(error, FactoryError::Invalid("a 0.1.0 factory runs no hooks".into()));
    assert!(factory.build_options(&ctx()).await.unwrap().hooks.is_empty());
}
