//! `/mcp/{agent}` end to end: MCP clients (rmcp's, over Streamable HTTP) call the example agent's
//! tools through `tollgate serve --auth` and `tollgate api` + a Worker. A read answers at once; a
//! refund that needs approval waits in the inbox (a Tasks client gets a task, any other client an
//! answer that names the interrupt), runs once after the decision, and a retried call replays the
//! record. Bad calls are clear MCP errors that store nothing.

use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig, ErrorCode,
    GetTaskParams, Implementation, TaskPayload, TaskStatus,
};
use rmcp::service::ServiceError;
use serde_json::{Value, json};

use crate::served::{Served, add_principal};
use crate::world::{Refund, World, api};

use tollgate_testing::mcp::{Client, client};

fn call(tool: &str, arguments: Value) -> CallToolRequestParams {
    CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments.as_object().unwrap().clone())
}

fn text(result: &CallToolResult) -> String {
    result.content.iter().filter_map(|c| c.as_text().map(|t| t.text.clone())).collect::<Vec<_>>().join("\n")
}

async fn complete(client: &Client, params: CallToolRequestParams) -> CallToolResult {
    match client.call_tool_once(params).await.expect("tools/call answers") {
        CallToolResponse::Complete(result) => result,
        other => panic!("expected a result, got {other:?}"),
    }
}

/// Polls `tasks/get` until the task ends (60 s at most; `what` names it in the failure).
async fn terminal(client: &Client, task_id: &str, world: &World, what: &str) -> rmcp::model::DetailedTask {
    let polled = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let got = client.peer().get_task(GetTaskParams::new(task_id.to_owned())).await.unwrap();
            if got.task.status().is_terminal() {
                return got.task;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    polled.await.unwrap_or_else(|_| panic!("{what}\n{}", world.diagnostics()))
}

/// Calls `params` until the answer is an outcome, not "awaits" nor "still running" (60 s at most).
async fn settled(client: &Client, params: CallToolRequestParams, world: &World) -> CallToolResult {
    let polled = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let result = complete(client, params.clone()).await;
            if !text(&result).contains("awaits") && !text(&result).contains("still running") {
                return result;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    polled.await.unwrap_or_else(|_| panic!("the call never settled\n{}", world.diagnostics()))
}

/// The JSON-RPC error of a call that must fail.
fn rpc_error(outcome: Result<CallToolResponse, ServiceError>) -> (ErrorCode, String) {
    match outcome {
        Err(ServiceError::McpError(error)) => (error.code, error.message.to_string()),
        other => panic!("expected an MCP error, got {other:?}"),
    }
}

async fn sessions_count(url: &str, token: &str) -> usize {
    let page = api(reqwest::Client::new().get(format!("{url}/v1/sessions")).bearer_auth(token)).await;
    page.body["sessions"].as_array().map_or(0, Vec::len)
}

async fn decide(url: &str, token: &str, session: &str, interrupt: &str, approved: bool, message: &str) {
    let answer = api(reqwest::Client::new()
        .post(format!("{url}/v1/sessions/{session}/interrupts/{interrupt}"))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(json!({"approved": approved, "message": message}).to_string()))
    .await;
    assert_eq!(answer.status, 200, "{}", answer.text);
}

const REFUND: &str = "create_refund";

fn refund_args() -> Value {
    json!({"order_id": "7", "amount_cents": 500})
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plain_client_reads_at_once_and_a_refund_waits_in_the_inbox_then_runs_once_under_serve() {
    let Some(world) =
        World::new("mcp: a plain client through serve", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    let file = world.dir.path().join("auth.toml");
    let carl = add_principal(&world, &file, "carl", &["client", "approver"], &[]).await;
    let fina = add_principal(&world, &file, "fina", &["approver"], &[]).await;
    let vera = add_principal(&world, &file, "vera", &["viewer"], &[]).await;
    let served =
        Served::start_with(&world, "serve", "127.0.0.1:0", &["--auth", file.to_str().unwrap()]).await;
    let url = served.url.clone();
    let agent = served.agent_name(&carl).await;
    let carl_mcp = client(&url, &agent, &carl, false).await;

    let tools = carl_mcp.list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert!(names.contains(&"lookup_order") && names.contains(&REFUND), "{names:?}");
    let lookup = tools.iter().find(|t| t.name == "lookup_order").unwrap();
    assert_eq!(lookup.annotations.as_ref().and_then(|a| a.read_only_hint), Some(true));
    assert!(lookup.input_schema.contains_key("properties"), "{:?}", lookup.input_schema);

    // A read runs at once and stores nothing.
    let read = complete(&carl_mcp, call("lookup_order", json!({"order_id": "7"}))).await;
    assert_ne!(read.is_error, Some(true), "{read:?}");
    assert!(text(&read).contains('7'), "{}", text(&read));
    assert_eq!(sessions_count(&url, &carl).await, 0, "a read in serve stores nothing");

    // Bad calls: clear errors, nothing stored.
    let (code, message) = rpc_error(carl_mcp.call_tool_once(call("create_refundd", json!({}))).await);
    assert_eq!(code, ErrorCode::INVALID_PARAMS);
    assert!(message.contains("unknown tool `create_refundd`") && message.contains(REFUND), "{message}");
    let (code, message) = rpc_error(
        carl_mcp.call_tool_once(call(REFUND, json!({"order_id": 7, "amount_cents": "five"}))).await,
    );
    assert_eq!(code, ErrorCode::INVALID_PARAMS);
    assert!(message.contains("create_refund") && message.contains("amount_cents"), "{message}");
    let vera_mcp = client(&url, &agent, &vera, false).await;
    assert!(vera_mcp.list_all_tools().await.is_ok(), "a viewer may list");
    let (_, message) = rpc_error(vera_mcp.call_tool_once(call(REFUND, refund_args())).await);
    assert!(message.contains("`client` or `admin`"), "{message}");
    let nobody = reqwest::Client::new()
        .post(format!("{url}/mcp/{agent}"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(nobody.status(), 401);
    assert_eq!(nobody.headers()["www-authenticate"], "Bearer");
    assert_eq!(sessions_count(&url, &carl).await, 0, "no bad call stored anything");

    // The refund waits for a person; the answer names the interrupt, and nothing ran.
    let waiting = complete(&carl_mcp, call(REFUND, refund_args())).await;
    let said = text(&waiting);
    assert!(said.contains("awaits a person's approval") && said.contains("mcpcall_"), "{said}");
    // Carl started the call's session, so the session service names who else must decide it.
    assert!(
        said.contains("waiting for approval by an approver other than carl, who started the session"),
        "{said}"
    );
    let session = waiting.meta.as_ref().and_then(|m| m.get("io.tollgate/session")).and_then(Value::as_str);
    let session = session.expect("the session is named").to_owned();
    let interrupt = said.split("interrupt ").nth(1).unwrap().split(')').next().unwrap().to_owned();
    assert_eq!(world.payments.count(), 0);
    // The inbox shows who asked; the caller may not approve their own call.
    let inbox = api(reqwest::Client::new().get(format!("{url}/v1/interrupts")).bearer_auth(&fina)).await;
    assert_eq!(inbox.body["interrupts"][0]["request"]["requested_by"], "carl", "{}", inbox.text);
    let own = api(reqwest::Client::new()
        .post(format!("{url}/v1/sessions/{session}/interrupts/{interrupt}"))
        .bearer_auth(&carl)
        .header("content-type", "application/json")
        .body(r#"{"approved":true}"#))
    .await;
    assert_eq!((own.status, &own.body["error"]["code"]), (403, &json!("own_session")), "{}", own.text);
    // Asked again before the decision: the same interrupt, still nothing ran.
    let again = complete(&carl_mcp, call(REFUND, json!({"amount_cents": 500, "order_id": "7"}))).await;
    assert!(text(&again).contains(&interrupt), "{}", text(&again));
    assert_eq!(
        sessions_count(&url, &carl).await,
        1,
        "the same call in another key order is the same session"
    );

    decide(&url, &fina, &session, &interrupt, true, "ok").await;
    let outcome = settled(&carl_mcp, call(REFUND, refund_args()), &world).await;
    assert_ne!(outcome.is_error, Some(true), "{outcome:?}");
    assert_eq!(world.payments.count(), 1, "approved: it ran once");
    for _ in 0..3 {
        let replayed = complete(&carl_mcp, call(REFUND, refund_args())).await;
        assert_eq!(text(&replayed), text(&outcome), "a retry replays the record");
    }
    assert_eq!(world.payments.count(), 1, "never twice");
    // The session's starter is the client; the audit names the approver.
    let trail =
        api(reqwest::Client::new().get(format!("{url}/v1/audit?session_id={session}")).bearer_auth(&fina))
            .await;
    assert_eq!(trail.body["entries"][0]["principal"], "fina", "{}", trail.text);
    let snapshot = world.snapshot(&session).await;
    assert_eq!(snapshot.status, "idle");
    // `/metrics` counts the answers: the three bad calls refused, the rest answered.
    let metrics =
        reqwest::Client::new().get(format!("{url}/metrics")).bearer_auth(&fina).send().await.unwrap();
    let metrics = metrics.text().await.unwrap();
    let refused = format!("tollgate_mcp_calls_total{{agent=\"{agent}\",answer=\"refused\"}} 3");
    assert!(metrics.contains(&refused), "{metrics}");
    assert!(metrics.contains(&format!("tollgate_mcp_calls_total{{agent=\"{agent}\",answer=\"result\"}}")));
    served.stop().await;
}

/// A Tasks client: the refund is a task, `working` until the decision, then `completed` with the
/// approver's reason as an error result. A forged or another principal's task id is unknown.
#[tokio::test(flavor = "multi_thread")]
async fn a_tasks_client_gets_a_task_that_completes_with_the_rejection_and_other_tasks_are_unknown() {
    let Some(world) =
        World::new("mcp: a Tasks client through serve", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    let file = world.dir.path().join("auth.toml");
    let carl = add_principal(&world, &file, "carl", &["client"], &[]).await;
    let dora = add_principal(&world, &file, "dora", &["client"], &[]).await;
    let fina = add_principal(&world, &file, "fina", &["approver"], &[]).await;
    let served =
        Served::start_with(&world, "serve", "127.0.0.1:0", &["--auth", file.to_str().unwrap()]).await;
    let url = served.url.clone();
    let agent = served.agent_name(&carl).await;
    let carl_mcp = client(&url, &agent, &carl, true).await;

    let read = match carl_mcp.call_tool_once(call("lookup_order", json!({"order_id": "7"}))).await.unwrap() {
        CallToolResponse::Complete(result) => result,
        other => panic!("a read is no task: {other:?}"),
    };
    assert!(text(&read).contains('7'));
    let task = match carl_mcp.call_tool_once(call(REFUND, refund_args())).await.unwrap() {
        CallToolResponse::Task(created) => created.task,
        other => panic!("expected a task, got {other:?}"),
    };
    assert_eq!(task.status, TaskStatus::Working);
    assert!(task.status_message.as_deref().unwrap_or_default().contains("awaiting approval"), "{task:?}");
    let got = carl_mcp.peer().get_task(GetTaskParams::new(task.task_id.clone())).await.unwrap();
    assert_eq!(got.task.status(), TaskStatus::Working);

    for forged in ["mcp-0000000000000000000000000000000000000000", "nope", "../etc"] {
        let refused = carl_mcp.peer().get_task(GetTaskParams::new(forged)).await;
        assert!(
            matches!(&refused, Err(ServiceError::McpError(e)) if e.message.contains("unknown task")),
            "{refused:?}"
        );
    }
    let dora_mcp = client(&url, &agent, &dora, true).await;
    let theirs = dora_mcp.peer().get_task(GetTaskParams::new(task.task_id.clone())).await;
    assert!(
        matches!(&theirs, Err(ServiceError::McpError(e)) if e.message.contains("unknown task")),
        "{theirs:?}"
    );

    let interrupt = tollgate_engine::session::mcp::call_id(&task.task_id);
    decide(&url, &fina, &task.task_id, &interrupt, false, "not this order").await;
    let done = terminal(&carl_mcp, &task.task_id, &world, "the task never completed").await;
    let TaskPayload::Completed { result } = &done.payload else { panic!("{done:?}") };
    assert_eq!(result["isError"], true, "{result:?}");
    let said = result["content"][0]["text"].as_str().unwrap_or_default();
    assert!(said.contains("rejected by fina") && said.contains("not this order"), "{said}");
    assert_eq!(world.payments.count(), 0, "a rejected refund never runs");
    served.stop().await;
}

/// `tollgate api` loads no bundle: it lists the tools the Worker published, and a read runs as a
/// durable step. A refund's task survives a SIGKILL of the API process and of the Worker: another
/// API answers `tasks/get` with the same state, and after the approval the refund runs once.
#[tokio::test(flavor = "multi_thread")]
async fn a_task_survives_the_api_and_the_worker_being_killed_on_postgres_and_the_refund_runs_once() {
    let Some(db) = crate::pg_database().await else { return };
    let test = "mcp: tollgate api + a Worker on PostgreSQL";
    let Some(world) = World::on_db(test, Refund::SingleAttemptWithApproval, &db).await else {
        return;
    };
    let file = world.dir.path().join("auth.toml");
    let carl = add_principal(&world, &file, "carl", &["client"], &[]).await;
    let fina = add_principal(&world, &file, "fina", &["approver"], &[]).await;
    let auth = ["--auth", file.to_str().unwrap()];
    let worker = world.worker("w1");
    let served = Served::start_api(&world, "api-1", &auth).await;
    let url = served.url.clone();
    // The Worker registers and publishes its tools when it starts.
    let agent = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let agents = api(reqwest::Client::new().get(format!("{url}/v1/agents")).bearer_auth(&carl)).await;
            if let Some(name) = agents.body["agents"][0]["name"].as_str() {
                let mcp = client(&url, name, &carl, true).await;
                if mcp.list_all_tools().await.is_ok_and(|tools| !tools.is_empty()) {
                    return name.to_owned();
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the Worker never published its tools\n{}", world.diagnostics()));
    let carl_mcp = client(&url, &agent, &carl, true).await;
    let read = match carl_mcp.call_tool_once(call("lookup_order", json!({"order_id": "7"}))).await.unwrap() {
        CallToolResponse::Complete(result) => result,
        other => panic!("a read answers: {other:?}"),
    };
    assert!(text(&read).contains('7'), "{read:?}");
    assert_eq!(sessions_count(&url, &carl).await, 1, "in `tollgate api` a read is a durable step");

    let task = match carl_mcp.call_tool_once(call(REFUND, refund_args())).await.unwrap() {
        CallToolResponse::Task(created) => created.task,
        other => panic!("expected a task, got {other:?}"),
    };
    served.kill().await;
    worker.kill().await;

    let served = Served::start_api(&world, "api-2", &auth).await;
    let url = served.url.clone();
    let carl_mcp = client(&url, &agent, &carl, true).await;
    let got = carl_mcp.peer().get_task(GetTaskParams::new(task.task_id.clone())).await.unwrap();
    assert_eq!(got.task.status(), TaskStatus::Working, "the same state from another process");
    let interrupt = tollgate_engine::session::mcp::call_id(&task.task_id);
    decide(&url, &fina, &task.task_id, &interrupt, true, "fine").await;
    let _worker = world.worker("w2");
    let done = terminal(&carl_mcp, &task.task_id, &world, "the task never completed").await;
    let TaskPayload::Completed { result } = &done.payload else { panic!("{done:?}") };
    assert_ne!(result["isError"], true, "{result:?}");
    assert_eq!(world.payments.count(), 1, "approved: it ran once");
    // The same call again (same arguments) replays the record: a task that is done at once.
    let again = carl_mcp.call_tool_once(call(REFUND, refund_args())).await.unwrap();
    assert!(matches!(again, CallToolResponse::Complete(_)), "{again:?}");
    assert_eq!(world.payments.count(), 1, "never twice");
    served.stop().await;
}

/// The pinned Claude Code CLI itself, started plainly (`claude -p … --mcp-config`) with Tollgate's
/// `/mcp/{agent}` as an HTTP MCP server, the mock model driving it.
async fn plain_cli(world: &World, mcp_config: &std::path::Path, script: &str) -> Value {
    let home = tempfile::tempdir().expect("home");
    let output = tokio::process::Command::new(world.cli())
        .args(["-p", script, "--output-format", "json", "--mcp-config"])
        .arg(mcp_config)
        .args([
            "--strict-mcp-config",
            "--allowedTools",
            "mcp__tollgate__lookup_order,mcp__tollgate__create_refund",
        ])
        .current_dir(home.path())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("CLAUDE_CONFIG_DIR", home.path().join(".claude"))
        .env("ANTHROPIC_BASE_URL", world.mock.base_url())
        .env("ANTHROPIC_API_KEY", "dummy")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("HTTPS_PROXY", "http://127.0.0.1:1")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("CLAUDE_CODE_MAX_RETRIES", "0")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), output).await.expect("the CLI ends").unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_claude_cli_calls_tollgate_over_mcp_and_its_refund_waits_for_approval_then_runs_once() {
    let Some(world) =
        World::new("mcp: the Claude Code CLI as a client", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    let file = world.dir.path().join("auth.toml");
    let carl = add_principal(&world, &file, "carl", &["client"], &[]).await;
    let fina = add_principal(&world, &file, "fina", &["approver"], &[]).await;
    let served =
        Served::start_with(&world, "serve", "127.0.0.1:0", &["--auth", file.to_str().unwrap()]).await;
    let url = served.url.clone();
    let agent = served.agent_name(&carl).await;
    let config = world.dir.path().join("mcp.json");
    let servers = json!({"mcpServers": {"tollgate": {
        "type": "http",
        "url": format!("{url}/mcp/{agent}"),
        "headers": {"Authorization": format!("Bearer {carl}")},
    }}});
    std::fs::write(&config, servers.to_string()).unwrap();
    let script =
        r#"call lookup_order {"order_id":"7"} && call create_refund {"order_id":"7","amount_cents":500}"#;

    let first = plain_cli(&world, &config, script).await;
    let said = first["result"].as_str().unwrap_or_default().to_owned();
    assert!(said.contains("called lookup_order: ") && said.contains("awaits a person's approval"), "{first}");
    assert_eq!(world.payments.count(), 0, "nothing ran yet");
    let inbox = api(reqwest::Client::new().get(format!("{url}/v1/interrupts")).bearer_auth(&fina)).await;
    let pending = &inbox.body["interrupts"][0];
    assert_eq!(pending["request"]["tool_name"], REFUND, "{}", inbox.text);
    assert_eq!(pending["request"]["requested_by"], "carl");
    let (session, interrupt) = (
        pending["session_id"].as_str().unwrap().to_owned(),
        pending["interrupt_id"].as_str().unwrap().to_owned(),
    );
    decide(&url, &fina, &session, &interrupt, true, "ok").await;
    world.wait_for(&session, "the refund", |s| s.status == "idle").await;
    assert_eq!(world.payments.count(), 1, "approved: it ran once");

    // The model asks again with the same arguments: it reads the outcome, and nothing runs again.
    for _ in 0..2 {
        let again = plain_cli(&world, &config, script).await;
        let said = again["result"].as_str().unwrap_or_default();
        assert!(said.contains("called create_refund: ") && !said.contains("awaits"), "{again}");
    }
    assert_eq!(world.payments.count(), 1, "never twice");
    served.stop().await;
}

/// `tollgate mcp --agent DIR` over stdio, as a local client (an editor, Claude Desktop) starts it:
/// the same tools and rules, the calls recorded under `--as`, the approval decided through a
/// `tollgate api` on the same store.
#[tokio::test(flavor = "multi_thread")]
async fn tollgate_mcp_serves_a_local_client_over_stdio_and_its_refund_is_approved_through_the_api() {
    let Some(world) = World::new("mcp: tollgate mcp over stdio", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    let file = world.dir.path().join("auth.toml");
    let fina = add_principal(&world, &file, "fina", &["approver"], &[]).await;
    let mut command = world.tollgate();
    command
        .args(["mcp", "--agent"])
        .arg(&world.agent)
        .args(["--db", &world.db, "--as", "carl", "--poll-secs", "0.2", "--worker-id", "stdio"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(world.dir.path().join("stdio.log")).unwrap())
        .kill_on_drop(true);
    let mut child = command.spawn().expect("start tollgate mcp");
    let (stdout, stdin) = (child.stdout.take().unwrap(), child.stdin.take().unwrap());
    let info = ClientConfig::new(ClientCapabilities::default(), Implementation::new("editor", "1"));
    let local = tokio::time::timeout(Duration::from_secs(60), info.serve((stdout, stdin)))
        .await
        .expect("it answers initialize")
        .unwrap_or_else(|e| {
            panic!("{e}: {}", std::fs::read_to_string(world.dir.path().join("stdio.log")).unwrap())
        });
    let names: Vec<String> =
        local.list_all_tools().await.unwrap().iter().map(|t| t.name.to_string()).collect();
    assert!(names.contains(&"lookup_order".to_owned()) && names.contains(&REFUND.to_owned()), "{names:?}");
    let read = complete(&local, call("lookup_order", json!({"order_id": "7"}))).await;
    assert!(text(&read).contains('7'), "{read:?}");
    let waiting = complete(&local, call(REFUND, refund_args())).await;
    assert!(text(&waiting).contains("awaits a person's approval"), "{}", text(&waiting));
    let session = waiting.meta.as_ref().and_then(|m| m.get("io.tollgate/session")).and_then(Value::as_str);
    let session = session.expect("the session is named").to_owned();
    assert_eq!(world.store.audit().started_by(&session).await.unwrap().as_deref(), Some("carl"));

    let served = Served::start_api(&world, "api", &["--auth", file.to_str().unwrap()]).await;
    let interrupt = tollgate_engine::session::mcp::call_id(&session);
    decide(&served.url, &fina, &session, &interrupt, true, "ok").await;
    let outcome = settled(&local, call(REFUND, refund_args()), &world).await;
    assert_ne!(outcome.is_error, Some(true), "{outcome:?}");
    assert_eq!(world.payments.count(), 1, "approved: it ran once");
    drop(local);
    let _ = tokio::time::timeout(Duration::from_secs(30), child.wait()).await;
    served.stop().await;
}

/// Keys and limits as an attacker would try them: a principal limited to another agent, a
/// malformed idempotency key, a key reused with other arguments (all refused, nothing stored); two
/// keys for the same arguments are two calls; an approver's edit is what runs, and the client
/// reads that it was edited.
#[tokio::test(flavor = "multi_thread")]
async fn keys_agents_and_an_approvers_edit_hold_for_an_mcp_client() {
    let Some(world) = World::new("mcp: keys, agents and edits", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    let file = world.dir.path().join("auth.toml");
    let carl = add_principal(&world, &file, "carl", &["client"], &[]).await;
    let fina = add_principal(&world, &file, "fina", &["approver"], &[]).await;
    let billing = add_principal(&world, &file, "bill", &["client"], &[]).await;
    // bill may use agent `billing` only.
    let auth = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, auth.replace("name = \"bill\"", "name = \"bill\"\nagents = [\"billing\"]"))
        .unwrap();
    let served =
        Served::start_with(&world, "serve", "127.0.0.1:0", &["--auth", file.to_str().unwrap()]).await;
    let url = served.url.clone();
    let agent = served.agent_name(&carl).await;

    let outsider = client(&url, &agent, &billing, false).await;
    let refused = outsider.list_all_tools().await;
    assert!(
        matches!(&refused, Err(ServiceError::McpError(e)) if e.message.contains("billing")),
        "{refused:?}"
    );

    let carl_mcp = client(&url, &agent, &carl, false).await;
    let keyed = |key: &str, amount: i64| {
        let mut params = call(REFUND, json!({"order_id": "7", "amount_cents": amount}));
        let mut meta = rmcp::model::MetaObject::new();
        meta.insert(tollgate_api::mcp::KEY_META.to_owned(), Value::from(key));
        params.meta = Some(meta.into());
        params
    };
    let (code, message) = rpc_error(carl_mcp.call_tool_once(keyed("bad key with spaces", 500)).await);
    assert_eq!(code, ErrorCode::INVALID_PARAMS, "{message}");
    assert_eq!(sessions_count(&url, &carl).await, 0, "nothing stored");

    let first = complete(&carl_mcp, keyed("refund-7-a", 500)).await;
    assert!(text(&first).contains("awaits"), "{}", text(&first));
    let (code, message) = rpc_error(carl_mcp.call_tool_once(keyed("refund-7-a", 900)).await);
    assert_eq!(code, ErrorCode::INVALID_PARAMS);
    assert!(message.contains("refund-7-a") && message.contains("other arguments"), "{message}");
    let second = complete(&carl_mcp, keyed("refund-7-b", 500)).await;
    assert_ne!(
        first.meta.as_ref().unwrap().get("io.tollgate/session"),
        second.meta.as_ref().unwrap().get("io.tollgate/session"),
        "another key is another call"
    );
    assert_eq!(sessions_count(&url, &carl).await, 2);

    // fina lowers the first refund before approving it: the edited input runs, and carl reads so.
    let session = first.meta.as_ref().unwrap()["io.tollgate/session"].as_str().unwrap().to_owned();
    let interrupt = tollgate_engine::session::mcp::call_id(&session);
    let edited = api(reqwest::Client::new()
        .post(format!("{url}/v1/sessions/{session}/interrupts/{interrupt}"))
        .bearer_auth(&fina)
        .header("content-type", "application/json")
        .body(
            json!({"approved": true, "updated_input": {"order_id": "7", "amount_cents": 400}}).to_string(),
        ))
    .await;
    assert_eq!(edited.status, 200, "{}", edited.text);
    world.wait_for(&session, "the edited refund", |s| s.status == "idle").await;
    let outcome = complete(&carl_mcp, keyed("refund-7-a", 500)).await;
    assert!(text(&outcome).contains("400"), "the client reads the edit: {}", text(&outcome));
    let sent = world.payments.requests();
    assert_eq!(sent.len(), 1);
    assert!(sent[0].body.contains("400") && !sent[0].body.contains("500"), "{}", sent[0].body);
    served.stop().await;
}

/// The policy's approval deadline applies to an MCP client's call as to a model's: nobody decides,
/// the deadline rejects it, and the task completes with that rejection; the refund never runs.
#[tokio::test(flavor = "multi_thread")]
async fn an_approval_deadline_rejects_an_mcp_call_nobody_decided_and_its_task_says_so() {
    let Some(world) = World::new("mcp: an approval deadline", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    world.refund_policy_with("approval_timeout_secs = 2");
    let file = world.dir.path().join("auth.toml");
    let carl = add_principal(&world, &file, "carl", &["client"], &[]).await;
    add_principal(&world, &file, "fina", &["approver"], &[]).await;
    let served =
        Served::start_with(&world, "serve", "127.0.0.1:0", &["--auth", file.to_str().unwrap()]).await;
    let agent = served.agent_name(&carl).await;
    let carl_mcp = client(&served.url, &agent, &carl, true).await;
    let task = match carl_mcp.call_tool_once(call(REFUND, refund_args())).await.unwrap() {
        CallToolResponse::Task(created) => created.task,
        other => panic!("expected a task, got {other:?}"),
    };
    let done = terminal(&carl_mcp, &task.task_id, &world, "the deadline never fired").await;
    let TaskPayload::Completed { result } = &done.payload else { panic!("{done:?}") };
    assert_eq!(result["isError"], true, "{result:?}");
    let said = result["content"][0]["text"].as_str().unwrap_or_default();
    assert!(said.contains("was rejected") && said.contains("did not run"), "{said}");
    assert_eq!(world.payments.count(), 0);
    served.stop().await;
}
