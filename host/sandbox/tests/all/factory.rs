//! The options-factory component: typed options and per-call decisions on built-in tools.

use tollgate_engine::gate::CliToolDecision;
use tollgate_sandbox::{LoadError, Manifests, OptionsContext};
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
        text.contains("tollgate:agent/options@0.1.0") && text.contains("tollgate:tool/tools@0.1.0"),
        "{text}"
    );
}
