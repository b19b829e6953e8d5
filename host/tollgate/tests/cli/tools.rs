//! `tollgate tools list|call|check` on an agent directory made of the built examples.

use std::path::Path;
use std::process::{Command, Output};

use tollgate_test_guests as guests;

/// An agent directory with the two example tools, a `tollgate.toml` and the options factory.
fn agent() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("tools")).unwrap();
    std::fs::copy(guests::ORDERS, dir.path().join("tools/orders.wasm")).unwrap();
    std::fs::copy(guests::PAYMENTS, dir.path().join("tools/payments.wasm")).unwrap();
    std::fs::copy(guests::SUPPORT_FACTORY, dir.path().join("agent.wasm")).unwrap();
    std::fs::write(
        dir.path().join("tollgate.toml"),
        "[agent]\noptions_factory = \"agent.wasm\"\n\n[tools.payments]\nallowed_outbound_hosts = [\"https://payments.example.com\"]\nconfig = { PAYMENTS_URL = { env = \"TOLLGATE_TEST_PAYMENTS_URL\" } }\nmemory_mb = 64\n",
    )
    .unwrap();
    dir
}

fn tollgate(dir: &Path, args: &[&str]) -> Output {
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-cwasm-cache");
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["tools", "--cache-dir"])
        .arg(&cache)
        .args(args.iter().map(|a| a.replace("DIR", &dir.display().to_string())))
        .output()
        .unwrap()
}

fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn list_prints_a_table_and_json() {
    let dir = agent();
    let output = tollgate(dir.path(), &["list", "DIR"]);
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("NAME") && lines[0].contains("DESCRIPTION"), "{stdout}");
    assert!(lines[1].starts_with("lookup_order") && lines[1].contains("read-only"), "{stdout}");
    assert!(lines[2].starts_with("create_refund") && lines[2].contains("open-world"), "{stdout}");

    let output = tollgate(dir.path(), &["list", "DIR", "--json"]);
    let tools: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(tools[0]["name"], "lookup_order");
    assert_eq!(tools[0]["input_schema"]["required"], serde_json::json!(["order_id"]));
    assert_eq!(tools[1]["annotations"]["open_world"], true);
}

#[test]
fn call_prints_the_output_and_the_exit_code_tells_success_from_tool_errors() {
    let dir = agent();
    let output = tollgate(dir.path(), &["call", "DIR", "lookup_order", r#"{"order_id":"7"}"#]);
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(stdout.trim(), r#"{"order_id":"7","status":"delivered","total_cents":4200,"currency":"EUR"}"#);

    let output = tollgate(dir.path(), &["call", "DIR", "lookup_order", r#"{"order_id":"0"}"#]);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(text(&output).0.trim(), "order 0 not found");
}

#[test]
fn call_with_bad_arguments_names_the_problem_and_fails() {
    let dir = agent();
    for (args, expected) in [("{not json", "not valid JSON"), (r#"{"order":"7"}"#, "order_id")] {
        let output = tollgate(dir.path(), &["call", "DIR", "lookup_order", args]);
        let (_, stderr) = text(&output);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("lookup_order") && stderr.contains(expected), "{args}: {stderr}");
    }
}

#[test]
fn call_passes_the_deferred_execution_to_the_tool() {
    let dir = agent();
    // No PAYMENTS_URL in the environment: the tool says so, proving it ran as a deferred call.
    let output = tollgate(
        dir.path(),
        &[
            "call",
            "DIR",
            "create_refund",
            r#"{"order_id":"7","amount_cents":100}"#,
            "--attempt",
            "2",
            "--idempotency-key",
            "k-1",
        ],
    );
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr.contains("PAYMENTS_URL is not configured"), "{stderr}");
    let output =
        tollgate(dir.path(), &["call", "DIR", "create_refund", r#"{"order_id":"7","amount_cents":100}"#]);
    assert!(text(&output).1.contains("PAYMENTS_URL is not configured"), "config is checked first");
}

#[test]
fn check_prints_each_components_grants_and_the_factorys_options() {
    let dir = agent();
    let output = tollgate(dir.path(), &["check", "DIR"]);
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(stdout.contains("orders (") && stdout.contains("manifest: none (everything denied)"), "{stdout}");
    assert!(stdout.contains("outbound: https://payments.example.com"), "{stdout}");
    assert!(stdout.contains("config: PAYMENTS_URL (env TOLLGATE_TEST_PAYMENTS_URL, unset)"), "{stdout}");
    assert!(stdout.contains("limits: memory 64 MiB"), "{stdout}");
    assert!(
        stdout.contains("options factory")
            && stdout.contains("decides built-in tool calls")
            && stdout.contains("reviews calls before approval"),
        "{stdout}"
    );
    assert!(stdout.trim_end().ends_with("ok: 2 components, 2 tools"), "{stdout}");
}

#[test]
fn check_fails_on_a_policy_for_a_misspelled_tool_and_lists_the_tools_left_to_default_effect() {
    let dir = agent();
    let config = std::fs::read_to_string(dir.path().join("tollgate.toml")).unwrap();
    // The agent's tools are lookup_order and create_refund.
    let with = |policies: &str| {
        std::fs::write(dir.path().join("tollgate.toml"), format!("{config}\n[policies]\n{policies}\n"))
            .unwrap();
        tollgate(dir.path(), &["check", "DIR"])
    };
    let output = with("default_effect = \"read\"\ncreate_refnud = { effect = \"non_idempotent_write\" }");
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "[policies]: `create_refnud` names no tool of this agent (did you mean `create_refund`?)"
        ),
        "{stderr}"
    );
    // lookup_order is annotated read-only; create_refund has no hint that classifies it.
    let output = with("default_effect = \"unclassified\"");
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stdout.contains(
            "no policy or annotation classifies create_refund: they get default_effect (unclassified)"
        ),
        "{stdout}"
    );
    let output = with("create_refund = { effect = \"non_idempotent_write\" }");
    let (stdout, _) = text(&output);
    assert!(!stdout.contains("no policy or annotation classifies"), "{stdout}");
}

#[test]
fn check_fails_on_a_summary_placeholder_or_threshold_that_names_no_argument_of_the_tool() {
    let dir = agent();
    let config = std::fs::read_to_string(dir.path().join("tollgate.toml")).unwrap();
    let with = |fields: &str| {
        let policy = format!("create_refund = {{ effect = \"non_idempotent_write\", {fields} }}");
        std::fs::write(dir.path().join("tollgate.toml"), format!("{config}\n[policies]\n{policy}\n"))
            .unwrap();
        tollgate(dir.path(), &["check", "DIR"])
    };
    let output = with(r#"summary = "Refund {amount|money:EUR} on order {order_id}""#);
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "[policies] `create_refund.summary`: placeholder `{amount}` names no argument of `create_refund`"
        ),
        "{stderr}"
    );
    let output = with("confirm_above = { amount = 100000 }");
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "[policies] `create_refund.confirm_above`: `amount` names no argument of `create_refund`"
        ),
        "{stderr}"
    );
    let output = with(
        r#"summary = "Refund {amount_cents|money:EUR} on order {order_id}", confirm_above = { amount_cents = 100000 }"#,
    );
    let (_, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
}

#[test]
fn check_fails_on_a_tool_named_bash_and_names_it() {
    let dir = agent();
    std::fs::copy(guests::IMPOSTOR, dir.path().join("tools/shell.wasm")).unwrap();
    let output = tollgate(dir.path(), &["check", "DIR"]);
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr.contains("shell.wasm") && stderr.contains("`Bash`") && stderr.contains("built-in"),
        "{stderr}"
    );
}

#[test]
fn check_on_a_folder_with_tools_but_no_tollgate_toml_says_what_it_checked() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("tools")).unwrap();
    std::fs::copy(guests::ORDERS, dir.path().join("tools/orders.wasm")).unwrap();
    std::fs::write(dir.path().join("tools/orders.toml"), "memory_mb = 32\n").unwrap();
    let output = tollgate(dir.path(), &["check", "DIR"]);
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    let first = stdout.lines().next().unwrap_or_default();
    assert_eq!(
        first,
        format!(
            "no tollgate.toml in {0}: checking {0}/tools/*.wasm as tool components, manifests from the \
             <name>.toml beside each component, none meaning everything denied",
            dir.path().display()
        )
    );
    assert!(stdout.contains("limits: memory 32 MiB"), "the manifest beside it was read: {stdout}");
    assert!(stdout.trim_end().ends_with("ok: 1 components, 1 tools"), "{stdout}");

    let empty = tempfile::tempdir().unwrap();
    std::fs::create_dir(empty.path().join("tools")).unwrap();
    let output = tollgate(empty.path(), &["check", "DIR"]);
    let (_, stderr) = text(&output);
    assert!(!output.status.success());
    assert!(
        stderr.contains("nothing to load")
            && stderr.contains("no tollgate.toml")
            && stderr.contains("tools/"),
        "{stderr}"
    );
}

#[test]
fn check_names_the_config_keys_a_tool_may_read_but_never_their_values() {
    let dir = agent();
    let secret = "sk-live-cli-check-7Hq2";
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-cwasm-cache");
    let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["tools", "--cache-dir"])
        .arg(&cache)
        .args(["check"])
        .arg(dir.path())
        .env("TOLLGATE_TEST_PAYMENTS_URL", secret)
        .env("RUST_LOG", "trace,cranelift_codegen=warn,regalloc2=warn,wasmtime_cranelift=warn")
        .output()
        .unwrap();
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(stdout.contains("config: PAYMENTS_URL (env TOLLGATE_TEST_PAYMENTS_URL, set)"), "{stdout}");
    assert!(
        !stdout.contains(secret) && !stderr.contains(secret),
        "the value was printed:\n{stdout}\n{stderr}"
    );
}
