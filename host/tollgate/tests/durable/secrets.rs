//! What the agent can reach, tried as an attacker would: `Bash` commands through the real CLI read
//! the environment, the process tree and the store from the default working folder and must find
//! none of the Worker's secrets; the model proxy swaps its key in, revokes a segment's token when
//! the segment ends, and stops a segment at the spend limit.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tollgate_api::api::types::Snapshot;
use tollgate_store::Store;

use crate::world::{Refund, World};

const FAKE_API_KEY: &str = "sk-ant-fake-key-8c1f3a77e2";
const API_TOKEN: &str = "tollgate-api-token-5d2b91";
const REFUND_ID: &str = "re_SECRET_4242";

/// An agent with `Bash` only, allowed inline by its policy, and these `[agent]` lines.
pub(crate) fn bash_agent(agent: &Path, agent_table: &str) {
    let _ = std::fs::remove_dir_all(agent.join("tools"));
    let _ = std::fs::remove_file(agent.join("agent.wasm"));
    let config = format!(
        "[agent]\nflow_type = \"Attacker\"\n{agent_table}\n\
         [options]\nmodel = \"claude-sonnet-4-5\"\ntools = [\"Bash\"]\npermission_mode = \"default\"\n\
         [policies]\ndefault_effect = \"unclassified\"\nBash = {{ effect = \"read\" }}\n"
    );
    std::fs::write(agent.join("tollgate.toml"), config).expect("write the agent config");
}

/// A Worker process on `db` with more environment variables.
fn worker(world: &World, db: &str, env: &[(&str, &str)]) -> tokio::process::Child {
    let log = std::fs::File::create(world.dir.path().join("worker.log")).expect("log file");
    world
        .tollgate()
        .args(["worker", "--agent"])
        .arg(&world.agent)
        .args(["--db", db, "--worker-id", "w", "--poll-secs", "0.2", "--workspace-root"])
        .arg(world.dir.path().join("workspaces"))
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .expect("start a worker")
}

async fn send(store: &dyn Store, session: &str, text: &str) {
    let _ = tollgate_sessions::writes::start(store, session).await;
    tollgate_sessions::writes::send(store, session, text, None).await.expect("send");
}

/// Waits until `turns` turns of `session` ended, and returns its snapshot.
async fn turns_ended(world: &World, store: &dyn Store, session: &str, turns: usize) -> Snapshot {
    let start = Instant::now();
    loop {
        let events = store.read_events(session, 0, 100_000).await.expect("events");
        let ended = events.iter().filter(|e| e.kind == "turn_completed" || e.kind == "turn_failed").count();
        if ended >= turns {
            return tollgate_sessions::reads::snapshot(store, session)
                .await
                .expect("snapshot")
                .expect("exists");
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "turn {turns} of {session} never ended\n{}",
            world.diagnostics()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every `(tool use id, command)` the mock asked for, with the result the model was sent back.
pub(crate) fn bash_results(world: &World) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for request in world.mock.message_requests() {
        let Some(message) = request.reply.message() else { continue };
        for (id, _, input) in message.tool_uses() {
            let command = input["command"].as_str().unwrap_or_default().to_owned();
            let result = world.tool_result_seen(id).map(|(text, _)| text).unwrap_or_default();
            out.push((id.to_owned(), command, result));
        }
    }
    out
}

/// The value of `NAME=` in `env` output.
fn env_value(env: &str, name: &str) -> Option<String> {
    env.lines().find_map(|line| line.strip_prefix(&format!("{name}=")).map(str::to_owned))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_agent_finds_no_secret_in_its_environment_its_process_tree_or_the_store() {
    let Some(world) = World::new("secrets", Refund::SingleAttemptWithApproval).await else { return };
    bash_agent(&world.agent, "");
    // The operator's layout the attack used: the SQLite store inside the agent directory.
    let db = format!("sqlite://{}", world.agent.join("tollgate.db").display());
    let store: Arc<dyn Store> = tollgate_store::open(&db).await.expect("open the store");
    let mut worker =
        worker(&world, &db, &[("ANTHROPIC_API_KEY", FAKE_API_KEY), ("TOLLGATE_TOKEN", API_TOKEN)]);

    // Another customer's session puts a refund id in the store.
    send(store.as_ref(), "victim", &format!("say refunded {REFUND_ID} for order 7")).await;
    let victim = turns_ended(&world, store.as_ref(), "victim", 1).await;
    assert_eq!(victim.last_turn_error, None, "{}", world.diagnostics());
    let stored: Vec<u8> = ["tollgate.db", "tollgate.db-wal"]
        .iter()
        .flat_map(|name| std::fs::read(world.agent.join(name)).unwrap_or_default())
        .collect();
    assert!(
        stored.windows(REFUND_ID.len()).any(|w| w == REFUND_ID.as_bytes()),
        "the store files hold the refund id, so reading them would find it"
    );

    let commands = [
        "env",
        "cat /proc/self/environ",
        "cat /proc/$PPID/environ",
        "cat /proc/$PPID/cmdline",
        "grep -a refund ./tollgate.db",
        "cat tollgate.db",
        "pwd",
    ];
    let script: Vec<String> = commands
        .iter()
        .map(|command| format!("call Bash {}", serde_json::json!({"command": command})))
        .collect();
    send(store.as_ref(), "attacker", &script.join(" && ")).await;
    let attacker = turns_ended(&world, store.as_ref(), "attacker", 1).await;
    assert_eq!(attacker.last_turn_error, None, "{}", world.diagnostics());

    let results = bash_results(&world);
    assert_eq!(results.len(), commands.len(), "{results:#?}");
    for (id, command, result) in &results {
        assert!(!result.is_empty(), "{command} ({id}) sent the model no result\n{}", world.diagnostics());
        for secret in [FAKE_API_KEY, API_TOKEN, REFUND_ID] {
            assert!(!result.contains(secret), "`{command}` showed the model {secret}:\n{result}");
        }
    }
    let result_of = |wanted: &str| {
        results.iter().find(|(_, command, _)| command == wanted).map(|(_, _, r)| r.clone()).unwrap()
    };
    // The commands ran: the CLI holds the proxy's URL and a segment token, nothing else of the Worker.
    let env = result_of("env");
    let token = env_value(&env, "ANTHROPIC_API_KEY").expect("the CLI has a key");
    assert!(token.starts_with("tgp-"), "{env}");
    let base_url = env_value(&env, "ANTHROPIC_BASE_URL").expect("the CLI has a base URL");
    assert!(base_url.starts_with("http://127.0.0.1:") && base_url != world.mock.base_url(), "{env}");
    for name in ["TOLLGATE_", "PAYMENTS_URL", "RUST_LOG", "TOLLGATE_CLAUDE_CLI", "ANTHROPIC_AUTH_TOKEN"] {
        assert!(!env.lines().any(|line| line.starts_with(name)), "{name} reached the CLI:\n{env}");
    }
    assert!(result_of("cat /proc/self/environ").contains("ANTHROPIC_API_KEY=tgp-"));
    assert!(result_of("grep -a refund ./tollgate.db").contains("No such file"));
    let workspace = world.dir.path().join("workspaces/attacker");
    // The CLI may append its own `<system-reminder>` after a tool result. Inside its box the
    // session's workspace is `/workspace`; on the host it is private.
    let pwd = result_of("pwd");
    assert_eq!(pwd.lines().next(), Some("/workspace"), "{pwd}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&workspace).unwrap().permissions().mode() & 0o777, 0o700);

    // The model got the Worker's key in place of the token, on every request.
    for request in world.mock.message_requests() {
        assert_eq!(request.header("x-api-key"), Some(&format!("{}...", &FAKE_API_KEY[..6])[..]));
    }

    // The segment is over: its token is refused (asked of the proxy's own port: the box's is gone).
    let log = std::fs::read_to_string(world.dir.path().join("worker.log")).expect("the Worker's log");
    let proxy = log
        .lines()
        .find(|line| line.contains("model proxy listening"))
        .and_then(|line| line.split("127.0.0.1:").nth(1))
        .map(|rest| {
            format!("127.0.0.1:{}", rest.chars().take_while(char::is_ascii_digit).collect::<String>())
        })
        .unwrap_or_else(|| panic!("no proxy address in the log:\n{log}"));
    let answer = reqwest::Client::new()
        .post(format!("http://{proxy}/v1/messages?beta=true"))
        .header("x-api-key", &token)
        .header("content-type", "application/json")
        .body(r#"{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"say hi"}]}"#)
        .send()
        .await
        .expect("the proxy answers");
    assert_eq!(answer.status(), 401);
    let body: Value = answer.json().await.expect("a JSON error");
    assert_eq!(body["error"]["type"], "authentication_error");
    assert!(body["error"]["message"].as_str().unwrap().contains("revoked"), "{body}");
    let _ = worker.kill().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_segment_that_would_overspend_is_stopped_at_the_request_that_crosses_the_limit() {
    let Some(world) = World::new("spend limit", Refund::SingleAttemptWithApproval).await else { return };
    bash_agent(&world.agent, "spend_limit_usd = 0.0001");
    let mut worker = worker(&world, &world.db, &[]);

    world.send("s", r#"call Bash {"command":"echo one"}"#).await;
    let failed = world.wait_idle_after("s", 1).await;
    let error = failed.last_turn_error.clone().unwrap_or_default();
    assert!(
        error.contains("spend limit of $0.0001 was reached during the segment"),
        "{error}\n{}",
        world.diagnostics()
    );
    assert_eq!(world.mock.message_requests().len(), 1, "the second model request never left the Worker");
    assert!(failed.cost_usd >= 0.0001, "the failed segment's spend is counted: {}", failed.cost_usd);
    let events = world.events("s").await;
    let turn_failed = events.iter().find(|e| e.kind == "turn_failed").expect("a turn_failed event");
    let payload: serde_json::Value = serde_json::from_str(turn_failed.payload.get()).expect("JSON");
    assert_eq!(payload["reason"], "spend_limit", "{payload}");
    assert!(!events.iter().any(|e| e.kind == "attempt_failed"), "a spend stop is not retried");

    // The next turn does not start a segment at all.
    world.send("s", "say again").await;
    let again = world.wait_idle_after("s", 2).await;
    assert!(again.last_turn_error.unwrap_or_default().contains("spend limit"));
    assert_eq!(world.mock.message_requests().len(), 1);
    let _ = worker.kill().await;
}

/// A tool's `[config]` secret, read from the Worker's environment, reaches the tool (as its bearer
/// token to the payments service) and nothing else of a run: no line of the Worker's log at debug
/// level, no event, no byte of the store's files, not the snapshot.
#[tokio::test(flavor = "multi_thread")]
async fn a_tool_secret_reaches_the_tool_and_no_log_line_event_row_or_snapshot() {
    let Some(world) = World::new("tool secret", Refund::SingleAttemptWithApproval).await else { return };
    let secret = format!("sk-live-{}-Qx7tool", std::process::id());
    let tools = world.agent.join("tools");
    for name in ["orders.wasm", "payments.wasm"] {
        std::fs::remove_file(tools.join(name)).expect("remove an example tool");
    }
    let _ = std::fs::remove_file(world.agent.join("agent.wasm"));
    std::fs::copy(tollgate_test_guests::HOSTILE, tools.join("hostile.wasm")).expect("the hostile guest");
    std::fs::write(
        tools.join("hostile.toml"),
        "allowed_outbound_hosts = [\"http://127.0.0.1:*\"]\n\
         [config]\nSECRET = { env = \"TOLLGATE_TEST_TOOL_SECRET\" }\n",
    )
    .expect("its manifest");
    std::fs::write(
        world.agent.join("tollgate.toml"),
        "[agent]\nflow_type = \"ToolSecret\"\n\
         [options]\nmodel = \"claude-sonnet-4-5\"\npermission_mode = \"default\"\n\
         [policies]\ndefault_effect = \"unclassified\"\nuse_secret = { effect = \"read\" }\n",
    )
    .expect("the agent config");
    let mut worker =
        worker(&world, &world.db, &[("TOLLGATE_TEST_TOOL_SECRET", secret.as_str()), ("RUST_LOG", "debug")]);

    let args = serde_json::json!({
        "allowed_url": format!("{}/secret-check", world.payments.url),
        "denied_url": "http://localhost:9",
    });
    world.send("s", &format!("call use_secret {args}")).await;
    let done = world.wait_idle_after("s", 1).await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());
    let _ = worker.kill().await;

    let reached = world.payments.requests();
    let check = reached.iter().find(|r| r.path == "/secret-check").expect("the tool called the allowed host");
    assert!(check.text.contains(&format!("Bearer {secret}")), "the secret reached the tool: {}", check.text);
    let snapshot = serde_json::to_string(&done).expect("the snapshot as JSON");
    assert!(
        snapshot.contains("denied: true"),
        "the request with the secret in its query was denied: {snapshot}"
    );

    let log = std::fs::read_to_string(world.dir.path().join("worker.log")).expect("the Worker's log");
    assert!(log.contains("using the secret"), "the guest's own log line is there (debug level):\n{log}");
    assert!(!log.contains(&secret), "the secret is in the Worker's log:\n{log}");
    for event in world.events("s").await {
        assert!(
            !event.payload.get().contains(&secret),
            "event {} ({}) holds the secret",
            event.seq,
            event.kind
        );
    }
    assert!(!snapshot.contains(&secret), "the snapshot holds the secret");
    let db_file = world.db.trim_start_matches("sqlite://").to_owned();
    for file in [db_file.clone(), format!("{db_file}-wal")] {
        let bytes = std::fs::read(&file).unwrap_or_default();
        assert!(!bytes.windows(secret.len()).any(|w| w == secret.as_bytes()), "{file} holds the secret");
    }
}
