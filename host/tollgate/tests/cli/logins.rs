//! `tollgate worker`, `serve`, `mcp` and `acp` without a way to reach the model: refused at start, the
//! error saying which variable to set, before the store is opened; any one credential (or an
//! `ANTHROPIC_BASE_URL`) lets them past that check.

use std::process::{Command, Output};

/// `tollgate ARGS` with only `PATH` and `vars` in its environment.
fn tollgate(args: &[&str], vars: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(vars.iter().copied())
        .output()
        .unwrap()
}

#[test]
fn a_worker_without_a_model_credential_refuses_to_start_and_names_the_variables_to_set() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("tollgate.db").display());
    let agent = dir.path().join("no-agent");
    let agent = agent.to_str().unwrap();
    for command in [
        vec!["worker", "--agent", agent, "--db", &db],
        vec!["serve", "--agent", agent, "--db", &db, "--listen", "127.0.0.1:0"],
        // The stdio faces, with no $USER: the local principal is the default, and stdout stays
        // the protocol's (empty).
        vec!["mcp", "--agent", agent, "--db", &db],
        vec!["acp", "--agent", agent, "--db", &db],
    ] {
        let output = tollgate(&command, &[("ANTHROPIC_API_KEY", " ")]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{command:?}: {stderr}");
        let first = stderr.lines().next().unwrap_or_default();
        assert!(
            first.starts_with("error: no model credential: set ANTHROPIC_API_KEY"),
            "{command:?}: {stderr}"
        );
        for name in ["ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_BASE_URL"] {
            assert!(first.contains(name), "{command:?} names {name}: {first}");
        }
        assert!(!dir.path().join("tollgate.db").exists(), "{command:?}: refused before the store opened");
        assert!(output.stdout.is_empty(), "{command:?} wrote to stdout: {:?}", output.stdout);
    }
    // Each way to reach the model gets past the check (and on to the missing agent directory).
    for var in ["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_BASE_URL"]
    {
        let value = if var == "ANTHROPIC_BASE_URL" { "http://127.0.0.1:9" } else { "sk-test" };
        let output = tollgate(&["worker", "--agent", agent, "--db", &db], &[(var, value)]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{stderr}");
        assert!(!stderr.contains("no model credential") && stderr.contains("no-agent"), "{var}: {stderr}");
    }
}
