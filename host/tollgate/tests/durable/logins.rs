//! Logins with the real CLI: a Worker whose only credential is a Claude subscription's
//! `CLAUDE_CODE_OAUTH_TOKEN` runs a turn, and the model receives it the way the CLI itself sends
//! one (`Authorization: Bearer` and the `oauth-2025-04-20` beta), never the segment's token.

use std::process::Stdio;

use crate::world::{Refund, World};

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_logged_in_with_a_subscription_oauth_token_reaches_the_model_as_the_cli_would() {
    let Some(world) = World::new("logins: CLAUDE_CODE_OAUTH_TOKEN", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    let log = world.dir.path().join("oauth.log");
    let _worker = world
        .tollgate()
        .args(["worker", "--agent"])
        .arg(&world.agent)
        .args(["--db", &world.db, "--worker-id", "oauth", "--poll-secs", "0.2"])
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ANTHROPIC_AUTH_TOKEN")
        .env("CLAUDE_CODE_OAUTH_TOKEN", "sk-ant-oat01-subscription")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .kill_on_drop(true)
        .spawn()
        .expect("start a worker");
    world.send("s", "say hello").await;
    let done = world.wait_idle_after("s", 1).await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());
    assert_eq!(done.messages.last().map(|m| m.text.as_str()), Some("said: hello"));
    let requests = world.mock.message_requests();
    assert!(!requests.is_empty());
    for request in &requests {
        // The mock keeps 6 characters of a credential.
        assert_eq!(request.header("authorization"), Some("Bearer..."), "{:?}", request.headers);
        assert_eq!(request.header("x-api-key"), None, "the segment token stays in the Worker");
        let betas = request.header("anthropic-beta").unwrap_or_default();
        assert!(betas.split(',').any(|b| b == "oauth-2025-04-20"), "{betas}");
        assert!(betas.split(',').any(|b| b == "claude-code-20250219"), "the CLI's own betas kept: {betas}");
    }
}
