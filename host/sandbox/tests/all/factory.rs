//! The options-factory component: typed options, per-call decisions on built-in tools and the
//! agent's own hooks, from a `tollgate:agent@0.1.0` factory (the example's) and a 0.2.0 one.

use serde_json::json;
use tollgate_engine::gate::CliToolDecision;
use tollgate_engine::hooks::{HookAnswer, HookCall, HookEvent, HookMatcher};
use tollgate_sandbox::{FactoryError, LoadError, Manifests, OptionsContext};
use tollgate_test_guests as guests;

use crate::util::sandbox;

fn ctx() -> OptionsContext {
    OptionsContext { session_id: "session-42".into(), turn_id: "turn-1".into(), attempt: 1 }
}

#[tokio::test]
async fn the_example_factory_returns_typed_options() {
    let factory = sandbox()
        .load_options_factory(guests::SUPPORT_FACTORY.as_ref(), &Manifests::default())
        .await
        .unwrap();
    assert!(factory.has_cli_policy());
    assert_eq!(
        (factory.version(), factory.has_hooks()),
        ("0.1.0", false),
        "the example stays a 0.1.0 factory"
    );
    let options = factory.build_options(&ctx()).await.unwrap().into_inner();
    assert_eq!(options.model.as_deref(), Some("claude-sonnet-4-5"));
    assert!(options.append_system_prompt.unwrap().contains("session-42"));
    assert_eq!(options.tools, Some(vec!["Read".into(), "Grep".into(), "Bash".into()]));
    assert_eq!(options.permission_mode.as_deref(), Some("default"));
    assert_eq!(options.max_turns, Some(20));
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
        text.contains("tollgate:agent/options@0.2.0 or tollgate:agent/options@0.1.0")
            && text.contains("tollgate:tool/tools@0.1.0"),
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
    let factory = sandbox()
        .load_options_factory(guests::SUPPORT_FACTORY.as_ref(), &Manifests::default())
        .await
        .unwrap();
    let stop = HookCall { event: Some(HookEvent::Stop), ..HookCall::default() };
    let error = factory.on_hook(&ctx(), &stop).await.unwrap_err();
    assert_eq!(error, FactoryError::Invalid("a 0.1.0 factory runs no hooks".into()));
    assert!(factory.build_options(&ctx()).await.unwrap().hooks.is_empty());
}
