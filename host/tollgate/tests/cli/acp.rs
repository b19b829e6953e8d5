//! `tollgate acp --check`: the configuration an editor starts `tollgate acp` with, checked
//! without speaking ACP: what it would serve, exit 0; a tool component that does not load named,
//! exit 2.

use std::process::{Command, Output};

/// `tollgate acp --check` for the agent folder `agent` with a dummy model key.
fn check(agent: &std::path::Path, db: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["acp", "--check", "--as", "carl", "--db", db, "--agent"])
        .arg(agent)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("ANTHROPIC_API_KEY", "k")
        .output()
        .unwrap()
}

#[test]
fn acp_check_says_what_an_editors_options_would_serve_and_names_a_component_that_does_not_load() {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent");
    std::fs::create_dir_all(agent.join("tools")).unwrap();
    std::fs::write(
        agent.join("tollgate.toml"),
        "[agent]\nflow_type = \"Check\"\n[options]\nmodel = \"claude-sonnet-4-5\"\ntools = [\"Bash\"]\n\
         [policies]\nBash = { effect = \"read\" }\n",
    )
    .unwrap();
    let db = format!("sqlite://{}", dir.path().join("tollgate.db").display());
    let ok = check(&agent, &db);
    let (stdout, stderr) = (String::from_utf8_lossy(&ok.stdout), String::from_utf8_lossy(&ok.stderr));
    assert_eq!(ok.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("agent agent (sha256:") && stdout.contains("as carl: it decides"), "{stdout}");
    assert!(stdout.lines().last().unwrap().starts_with("ok: "), "{stdout}");

    std::fs::write(agent.join("tools/broken.wasm"), b"\0asm\x0d\0\x01\0truncated").unwrap();
    let broken = check(&agent, &db);
    let stderr = String::from_utf8_lossy(&broken.stderr);
    assert_eq!(broken.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("unavailable: tool component `broken`"), "{stderr}");
}
