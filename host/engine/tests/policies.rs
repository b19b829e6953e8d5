//! The `[policies]` fixtures in `tests/data/policies/`, read the way the `tollgate` binary reads
//! `tollgate.toml`: TOML → the `[policies]` table → [`Policies`].
//!
//! Each fixture has a test here; a new fixture needs one.

use std::path::PathBuf;

use tollgate_engine::catalog::{CatalogError, DEFAULT_TOOL_SERVER_NAME, ToolCatalog, ToolKind};
use tollgate_engine::policy::{DeferredRun, Effect, Handling, Policies, PolicyError, ToolPolicy};

fn fixture(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/policies").join(name);
    match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(error) => panic!("{}: {error}", path.display()),
    }
}

/// The `[policies]` table of a fixture as JSON, as the binary hands it over.
fn policies_value(name: &str) -> serde_json::Value {
    let document: toml::Table = match toml::from_str(&fixture(name)) {
        Ok(document) => document,
        Err(error) => panic!("{name}: {error}"),
    };
    let table = document.get("policies").cloned().unwrap_or_else(|| panic!("{name} has no [policies]"));
    match serde_json::to_value(table) {
        Ok(value) => value,
        Err(error) => panic!("{name}: {error}"),
    }
}

fn parse(name: &str) -> Result<Policies, PolicyError> {
    Policies::from_value(&policies_value(name))
}

#[derive(Debug, serde::Deserialize)]
struct Document {
    policies: Policies,
}

#[test]
fn the_support_agent_policies_parse_and_resolve() {
    let policies = match parse("support.toml") {
        Ok(policies) => policies,
        Err(error) => panic!("support.toml: {error}"),
    };
    assert_eq!(policies.default_effect(), Effect::Unclassified);
    assert_eq!(
        policies.resolve("create_refund", None).handling(ToolKind::Custom),
        Handling::Deferred { requires_approval: true, runs_in: DeferredRun::CallSingleAttemptTool }
    );
    assert_eq!(policies.resolve("lookup_order", None).handling(ToolKind::Custom), Handling::Inline);
    assert_eq!(
        policies.resolve("set_status", None).handling(ToolKind::Custom),
        Handling::Deferred { requires_approval: false, runs_in: DeferredRun::CallTool }
    );
    assert_eq!(policies.resolve("Grep", None).handling(ToolKind::Cli), Handling::Inline);
    assert_eq!(
        policies.resolve("Write", None).handling(ToolKind::Cli),
        Handling::Deferred { requires_approval: true, runs_in: DeferredRun::ResumedSegment }
    );
    assert_eq!(policies.resolve("mcp__github__create_issue", None).handling(ToolKind::Cli), Handling::Inline);
    assert_eq!(
        policies.resolve("Bash", None),
        ToolPolicy { effect: Effect::Unclassified, requires_approval: true }
    );
}

#[test]
fn the_policies_deserialize_straight_from_toml() {
    let document: Result<Document, _> =
        toml::from_str(&fixture("support.toml").replace("[agent]\nflow_type = \"SupportAgent\"\n", ""));
    let expected = parse("support.toml");
    match (document, expected) {
        (Ok(document), Ok(expected)) => assert_eq!(document.policies, expected),
        (document, expected) => panic!("{document:?} / {expected:?}"),
    }
}

#[test]
fn a_table_without_default_effect_defaults_to_unclassified() {
    let policies = parse("no-default.toml");
    assert_eq!(policies.map(|p| p.resolve("Bash", None).effect), Ok(Effect::Unclassified));
}

#[test]
fn an_unknown_effect_names_the_tool_and_the_value() {
    assert_eq!(
        parse("unknown-effect.toml"),
        Err(PolicyError::UnknownEffect {
            path: "create_refund.effect".to_owned(),
            value: "write".to_owned()
        })
    );
}

#[test]
fn an_unknown_field_names_the_tool_and_the_field() {
    assert_eq!(
        parse("unknown-field.toml"),
        Err(PolicyError::UnknownField { tool: "Bash".to_owned(), field: "approval".to_owned() })
    );
}

#[test]
fn an_unknown_default_effect_is_rejected() {
    assert_eq!(
        parse("bad-default.toml"),
        Err(PolicyError::UnknownEffect { path: "default_effect".to_owned(), value: "read_only".to_owned() })
    );
}

#[test]
fn a_requires_approval_that_is_not_a_boolean_is_rejected() {
    assert_eq!(
        parse("approval-not-bool.toml"),
        Err(PolicyError::WrongType {
            path: "Bash.requires_approval".to_owned(),
            expected: "a boolean",
            found: "a string",
        })
    );
}

#[test]
fn a_policy_without_effect_is_rejected() {
    assert_eq!(parse("missing-effect.toml"), Err(PolicyError::MissingEffect { tool: "Bash".to_owned() }));
}

#[test]
fn a_policy_naming_a_custom_tool_by_its_cli_name_is_rejected_against_the_catalog() {
    let policies = match parse("server-prefix.toml") {
        Ok(policies) => policies,
        Err(error) => panic!("server-prefix.toml parses on its own: {error}"),
    };
    let catalog = ToolCatalog::new(DEFAULT_TOOL_SERVER_NAME);
    assert_eq!(
        catalog.and_then(|catalog| catalog.check_policies(&policies)),
        Err(CatalogError::PolicyUsesServerPrefix {
            key: "mcp__tools__create_refund".to_owned(),
            bare: "create_refund".to_owned(),
        })
    );
}

#[test]
fn every_fixture_has_a_test() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/policies");
    let mut names: Vec<String> = match std::fs::read_dir(&dir) {
        Ok(entries) => entries
            .filter_map(|entry| entry.ok())
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(error) => panic!("{}: {error}", dir.display()),
    };
    names.sort();
    let source = include_str!("policies.rs");
    for name in names {
        assert!(
            source.contains(&format!("\"{name}\"")),
            "tests/data/policies/{name} has no test in tests/policies.rs"
        );
    }
}
