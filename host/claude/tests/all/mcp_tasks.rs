//! What the pinned CLI does with MCP Tasks, one test per claim of docs/PROTOCOL.md ("MCP Tasks").
//!
//! The MCP server is `tests/data/tasks_mcp.py`: it declares tasks every way there is, answers a
//! `tools/call` that asks for a task with one (`working` until the test writes its `release` file,
//! then `completed` with `task result: <text>`), and logs every JSON-RPC message. The CLI runs
//! against `tollgate-mock-model` as a plain `claude -p` (print mode) or in stream-json mode as
//! Tollgate runs it, with its in-process (`sdk`) server answered here. "The flag" is the feature
//! flag that switches tasks on (`tengu_glowing_lark`), set the only way a public build reads it:
//! from the flag cache in `$CLAUDE_CONFIG_DIR/.claude.json`, made readable by
//! `CLAUDE_CODE_GB_DISK_CACHE_WHEN_TELEMETRY_OFF=1`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tollgate_claude::cli::CliBinary;
use tollgate_mock_model::MockModel;

use crate::util::{dir, real_cli};

const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";
const CAPABILITIES_META: &str = "io.modelcontextprotocol/clientCapabilities";
const PROTOCOL_META: &str = "io.modelcontextprotocol/protocolVersion";
const SCRIPT: &str = r#"call slow_write {"text":"hello"}"#;
/// The same call by its full name, where the in-process server has a `slow_write` too.
const SCRIPT_PROBE: &str = r#"call mcp__probe__slow_write {"text":"hello"}"#;
/// What the CLI tells the model when a call became a task it moved to the background.
const BACKGROUNDED: &str = "started server-side task";
/// The variables that switch the flag on, with [`flag_cache`]; and auto-background, which a
/// non-interactive CLI needs before it asks for a task.
const FLAG: (&str, &str) = ("CLAUDE_CODE_GB_DISK_CACHE_WHEN_TELEMETRY_OFF", "1");
const AUTO_BACKGROUND: (&str, &str) = ("CLAUDE_AUTO_BACKGROUND_TASKS", "1");

/// Extra environment variables of one run.
type Env<'a> = &'a [(&'a str, &'a str)];

/// The probe MCP server's state folder, and the server itself when it serves HTTP.
struct Probe {
    state: PathBuf,
    http: Option<(Child, u16)>,
}

impl Probe {
    fn script() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tasks_mcp.py")
    }

    async fn http(state: PathBuf) -> Probe {
        std::fs::create_dir_all(&state).unwrap();
        let child = Command::new("python3")
            .arg(Probe::script())
            .arg("--state")
            .arg(&state)
            .arg("--http")
            .kill_on_drop(true)
            .spawn()
            .expect("python3 runs the probe server");
        let port_file = state.join("port");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !port_file.exists() {
            assert!(Instant::now() < deadline, "the probe server never wrote its port");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let port = std::fs::read_to_string(&port_file).unwrap().parse().unwrap();
        Probe { state, http: Some((child, port)) }
    }

    fn stdio(state: PathBuf) -> Probe {
        std::fs::create_dir_all(&state).unwrap();
        Probe { state, http: None }
    }

    /// The `mcpServers` entry of a `--mcp-config`, named `probe`.
    fn servers(&self) -> Value {
        let server = match &self.http {
            Some((_, port)) => json!({"type": "http", "url": format!("http://127.0.0.1:{port}/mcp")}),
            None => json!({"type": "stdio", "command": "python3",
                           "args": [Probe::script(), "--state", self.state, "--stdio"]}),
        };
        json!({"probe": server})
    }

    fn touch(&self, name: &str) {
        std::fs::write(self.state.join(name), "").unwrap();
    }

    /// Every JSON-RPC request the server answered, in order: `{"request", "response"}`.
    fn log(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(self.state.join("log.jsonl")).unwrap_or_default();
        text.lines().map(|line| serde_json::from_str(line).unwrap()).collect()
    }

    fn requests(&self, method: &str) -> Vec<Value> {
        self.log().into_iter().filter(|entry| entry["request"]["method"] == method).collect()
    }

    async fn wait_for(&self, what: &str, done: impl Fn(&[Value]) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !done(&self.log()) {
            assert!(Instant::now() < deadline, "the probe server never saw {what}: {:#?}", self.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The client capabilities a logged request carries: `initialize`'s, else the 2026-07-28 `_meta`'s.
fn capabilities(entry: &Value) -> &Value {
    let params = &entry["request"]["params"];
    if params["capabilities"].is_object() {
        &params["capabilities"]
    } else {
        &params["_meta"][CAPABILITIES_META]
    }
}

/// Whether a request declares tasks, either way: the tasks extension or a 2025-11-25 `tasks`.
fn declares_tasks(entry: &Value) -> bool {
    let caps = capabilities(entry);
    caps["extensions"].get(TASKS_EXTENSION).is_some() || caps.get("tasks").is_some()
}

/// A fresh home with its config dir; with `flag`, the flag cache in its `.claude.json`.
fn home(flag: bool) -> tempfile::TempDir {
    let home = dir();
    std::fs::create_dir_all(home.path().join(".claude")).unwrap();
    if flag {
        flag_cache(&home.path().join(".claude"));
    }
    home
}

fn flag_cache(config_dir: &Path) {
    let config = json!({"cachedGrowthBookFeatures": {"tengu_glowing_lark": true}});
    std::fs::write(config_dir.join(".claude.json"), config.to_string()).unwrap();
}

/// The CLI's environment: nothing inherited but `PATH`, the mock as the model, no other traffic.
fn command(
    cli: &CliBinary,
    mock: &MockModel,
    home: &Path,
    config_dir: &Path,
    env: &[(&str, &str)],
) -> Command {
    let mut command = Command::new(cli.path());
    command
        .current_dir(home)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("CLAUDE_CONFIG_DIR", config_dir)
        .env("ANTHROPIC_BASE_URL", mock.base_url())
        .env("ANTHROPIC_API_KEY", "dummy")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("HTTPS_PROXY", "http://127.0.0.1:1")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("CLAUDE_CODE_MAX_RETRIES", "0")
        // Without it a stream-json or stdio run may call the model before the probe is connected
        // ("No such tool available"); the CLI goes on as soon as the server is up.
        .env("CLAUDE_CODE_MCP_STARTUP_WAIT_MS", "10000")
        .envs(env.iter().copied())
        .kill_on_drop(true);
    command
}

/// `claude -p SCRIPT` (print mode) with `servers`; its `result` message.
async fn print(
    cli: &CliBinary,
    mock: &MockModel,
    home: &Path,
    servers: &Value,
    env: &[(&str, &str)],
) -> Value {
    print_args(cli, mock, home, &home.join(".claude"), servers, env, &[]).await
}

async fn print_args(
    cli: &CliBinary,
    mock: &MockModel,
    home: &Path,
    config_dir: &Path,
    servers: &Value,
    env: &[(&str, &str)],
    args: &[&str],
) -> Value {
    let output = command(cli, mock, home, config_dir, env)
        .args(["-p", SCRIPT, "--output-format", "json", "--strict-mcp-config", "--mcp-config"])
        .arg(json!({"mcpServers": servers}).to_string())
        .args(["--allowedTools", "mcp__probe__slow_write"])
        .args(args)
        .stdin(Stdio::null())
        .output();
    let output = tokio::time::timeout(Duration::from_secs(60), output).await.expect("the CLI ends").unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// The tool results of the mock's last model call, as `(text, is_error)`.
fn tool_results(mock: &MockModel) -> Vec<(String, bool)> {
    let last = mock.message_requests().pop().expect("a model call");
    let body = last.body.expect("a JSON body");
    let mut results = Vec::new();
    for message in body["messages"].as_array().unwrap() {
        for block in message["content"].as_array().into_iter().flatten() {
            if block["type"] == "tool_result" {
                let id = block["tool_use_id"].as_str().unwrap();
                results.push(last_tool_result_of(&body, id));
            }
        }
    }
    results
}

fn last_tool_result_of(body: &Value, id: &str) -> (String, bool) {
    tollgate_mock_model::tool_result(body, id).expect("the tool result is in the request")
}

/// Every text the model was sent in the mock's last call, joined.
fn last_request_text(mock: &MockModel) -> String {
    mock.message_requests().pop().and_then(|r| r.body).map(|body| body.to_string()).unwrap_or_default()
}

/// The CLI in stream-json mode, as Tollgate runs it (`tollgate_claude::launch`), with an
/// in-process server `tools` answered here and the external `servers`.
struct Stream {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
    /// Every line the CLI wrote.
    frames: Vec<Value>,
    /// Every JSON-RPC message the CLI sent the in-process server.
    sdk: Vec<Value>,
}

impl Stream {
    async fn start(
        cli: &CliBinary,
        mock: &MockModel,
        home: &Path,
        config_dir: &Path,
        servers: &Value,
        env: &[(&str, &str)],
        resume: Option<&str>,
    ) -> Stream {
        let mut all = json!({"tools": {"type": "sdk", "name": "tools"}});
        all.as_object_mut().unwrap().extend(servers.as_object().unwrap().clone());
        let mut command = command(cli, mock, home, config_dir, env);
        command
            .args(["--output-format", "stream-json", "--verbose", "--input-format", "stream-json"])
            .arg("--permission-prompt-tool=stdio")
            .arg("--mcp-config")
            .arg(json!({"mcpServers": all}).to_string())
            .args([
                "--include-partial-messages",
                "--session-mirror",
                "--await-initialize",
                "--setting-sources=",
            ]);
        if let Some(session) = resume {
            command.arg(format!("--resume={session}"));
        }
        let mut child =
            command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut stream =
            Stream { stdin: child.stdin.take(), child, lines, frames: Vec::new(), sdk: Vec::new() };
        stream
            .send(json!({"type": "control_request", "request_id": "init",
                         "request": {"subtype": "initialize", "sdkMcpServers": ["tools"], "hooks": {}}}))
            .await;
        stream
    }

    async fn prompt(&mut self, text: &str) {
        self.send(json!({"type": "user", "session_id": "", "parent_tool_use_id": null,
                         "message": {"role": "user", "content": [{"type": "text", "text": text}]}}))
            .await;
    }

    async fn send(&mut self, frame: Value) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(format!("{frame}\n").as_bytes()).await.unwrap();
        stdin.flush().await.unwrap();
    }

    fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Reads frames (answering the CLI's control requests) until `until` holds for one, which
    /// it returns; `None` when stdout ends or `within` passes first.
    async fn next(&mut self, within: Duration, until: impl Fn(&Value) -> bool) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let line = match tokio::time::timeout_at(deadline, self.lines.next_line()).await {
                Ok(Ok(Some(line))) => line,
                _ => return None,
            };
            let Ok(frame) = serde_json::from_str::<Value>(&line) else { continue };
            self.frames.push(frame.clone());
            if frame["type"] == "control_request" {
                self.answer(&frame).await;
            }
            if until(&frame) {
                return Some(frame);
            }
        }
    }

    async fn result(&mut self) -> Value {
        let result = self.next(Duration::from_secs(60), |f| f["type"] == "result").await;
        result.unwrap_or_else(|| panic!("no result: {:#?}", self.frames))
    }

    /// The CLI's exit status, after stdout ends.
    async fn finish(&mut self) -> std::process::ExitStatus {
        self.close_stdin();
        while self.next(Duration::from_secs(60), |_| false).await.is_some() {}
        tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("the CLI exits")
            .unwrap()
    }

    async fn answer(&mut self, frame: &Value) {
        let request = &frame["request"];
        let response = match request["subtype"].as_str() {
            Some("mcp_message") => {
                self.sdk.push(request["message"].clone());
                json!({"mcp_response": sdk_answer(&request["message"])})
            }
            Some("can_use_tool") => json!({"behavior": "allow", "updatedInput": request["input"]}),
            _ => json!({}),
        };
        if self.stdin.is_some() {
            self.send(json!({"type": "control_response", "response": {
                "subtype": "success", "request_id": frame["request_id"], "response": response}}))
                .await;
        }
    }

    fn system(&self, subtype: &str) -> Vec<&Value> {
        self.frames.iter().filter(|f| f["type"] == "system" && f["subtype"] == subtype).collect()
    }
}

/// The in-process server `tools`: it declares tasks too, and answers every call at once.
fn sdk_answer(message: &Value) -> Value {
    let id = message.get("id").cloned().unwrap_or(json!(0));
    let result = match message["method"].as_str() {
        Some("initialize") => json!({
            "protocolVersion": message["params"]["protocolVersion"],
            "serverInfo": {"name": "tools", "version": "1"},
            "capabilities": {"tools": {}, "tasks": {"requests": {"tools": {"call": {}}}},
                             "extensions": {TASKS_EXTENSION: {}}},
        }),
        Some("tools/list") => json!({"tools": [{
            "name": "slow_write",
            "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
            "execution": {"taskSupport": "optional"},
            "_meta": {"anthropic/alwaysLoad": true},
        }]}),
        Some("tools/call") => json!({"content": [{"type": "text", "text": "ran now in process"}]}),
        _ => json!({}),
    };
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

#[tokio::test(flavor = "multi_thread")]
async fn by_default_no_run_declares_tasks_over_http_stdio_or_in_process_and_cli_is_renamed_sdk_cli() {
    let Some((cli, _slot)) = real_cli("mcp_tasks: print mode, default settings").await else { return };
    let mock = MockModel::start().await.unwrap();
    let work = dir();
    let cases: [(&str, bool, Env<'_>); 4] = [
        ("http", true, &[]),
        ("stdio", false, &[]),
        ("entrypoint-cli", true, &[("CLAUDE_CODE_ENTRYPOINT", "cli")]),
        ("legacy", true, &[("MCP_PROTOCOL_NEGOTIATION", "legacy")]),
    ];
    for (name, http, env) in cases {
        let state = work.path().join(name);
        let probe = if http { Probe::http(state).await } else { Probe::stdio(state) };
        let home = home(false);
        let result = print(&cli, &mock, home.path(), &probe.servers(), env).await;
        assert_eq!(result["result"], "called slow_write: ran now: hello", "{name}: {result}");
        let log = probe.log();
        let first = &log[0]["request"];
        if name == "legacy" {
            assert_eq!(first["method"], "initialize", "{name}: {log:#?}");
            assert_eq!(first["params"]["protocolVersion"], "2025-11-25");
        } else {
            assert_eq!(first["method"], "server/discover", "{name}: {log:#?}");
            assert_eq!(first["params"]["_meta"][PROTOCOL_META], "2026-07-28");
        }
        assert!(log.iter().all(|entry| !declares_tasks(entry)), "{name}: {log:#?}");
        let call = &probe.requests("tools/call")[0]["request"]["params"];
        assert!(call.get("task").is_none(), "{name}: {call}");
        let agent =
            mock.message_requests().pop().unwrap().header("user-agent").unwrap_or_default().to_owned();
        assert!(agent.contains("(external, sdk-cli"), "{name}: {agent}");
    }

    // Stream-json, as Tollgate runs it: the same, and the in-process server gets no capabilities.
    let probe = Probe::http(work.path().join("stream")).await;
    let home = home(false);
    let config_dir = home.path().join(".claude");
    let mut stream = Stream::start(&cli, &mock, home.path(), &config_dir, &probe.servers(), &[], None).await;
    stream.prompt(SCRIPT_PROBE).await;
    let result = stream.result().await;
    assert_eq!(result["result"], "called mcp__probe__slow_write: ran now: hello", "{result}");
    assert!(stream.finish().await.success());
    let log = probe.log();
    assert!(!log.is_empty() && log.iter().all(|entry| !declares_tasks(entry)), "stream: {log:#?}");
    let initialize = stream.sdk.iter().find(|m| m["method"] == "initialize").unwrap();
    assert_eq!(initialize["params"]["capabilities"], json!({}), "{initialize}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_flag_declares_tasks_on_discover_but_a_print_mode_call_asks_for_none_and_disable_wins() {
    let Some((cli, _slot)) = real_cli("mcp_tasks: print mode with the flag").await else { return };
    let mock = MockModel::start().await.unwrap();
    let work = dir();

    let probe = Probe::http(work.path().join("flag")).await;
    let home = home(true);
    let result = print(&cli, &mock, home.path(), &probe.servers(), &[FLAG, AUTO_BACKGROUND]).await;
    assert_eq!(result["result"], "called slow_write: ran now: hello", "{result}");
    for method in ["server/discover", "tools/list"] {
        let entry = &probe.requests(method)[0];
        assert!(declares_tasks(entry), "{method}: {entry:#}");
    }
    let call = &probe.requests("tools/call")[0];
    assert!(!declares_tasks(call), "a print-mode call is never a task: {call:#}");

    let probe = Probe::http(work.path().join("flag-legacy")).await;
    let home_legacy = self::home(true);
    let legacy = [FLAG, AUTO_BACKGROUND, ("MCP_PROTOCOL_NEGOTIATION", "legacy")];
    print(&cli, &mock, home_legacy.path(), &probe.servers(), &legacy).await;
    assert!(probe.log().iter().all(|entry| !declares_tasks(entry)), "legacy: {:#?}", probe.log());

    let probe = Probe::http(work.path().join("flag-disabled")).await;
    let home_off = self::home(true);
    let disabled = [FLAG, AUTO_BACKGROUND, ("CLAUDE_CODE_DISABLE_MCP_TASKS", "1")];
    print(&cli, &mock, home_off.path(), &probe.servers(), &disabled).await;
    assert!(probe.log().iter().all(|entry| !declares_tasks(entry)), "disabled: {:#?}", probe.log());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_the_cli_did_not_ask_for_reaches_the_model_as_an_error_result() {
    let Some((cli, _slot)) = real_cli("mcp_tasks: an unasked task").await else { return };
    let mock = MockModel::start().await.unwrap();
    let work = dir();
    for (name, env, said) in [
        ("modern", vec![], "Unsupported result type 'task' for tools/call"),
        ("legacy", vec![("MCP_PROTOCOL_NEGOTIATION", "legacy")], "returned a malformed result"),
    ] {
        let probe = Probe::http(work.path().join(name)).await;
        probe.touch("always_task");
        let home = home(false);
        print(&cli, &mock, home.path(), &probe.servers(), &env).await;
        let reply = &probe.requests("tools/call")[0]["response"]["result"];
        assert!(reply.get("taskId").is_some() || reply.get("task").is_some(), "{name}: {reply}");
        let (text, is_error) = tool_results(&mock).pop().unwrap();
        assert!(is_error && text.contains(said), "{name}: {text}");
        assert!(probe.requests("tasks/get").is_empty(), "{name}: never polled");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_in_process_server_is_initialized_without_capabilities_even_with_the_flag() {
    let Some((cli, _slot)) = real_cli("mcp_tasks: the in-process server").await else { return };
    let mock = MockModel::start().await.unwrap();
    let home = home(true);
    let mut cli = Stream::start(
        &cli,
        &mock,
        home.path(),
        &home.path().join(".claude"),
        &json!({}),
        &[FLAG, AUTO_BACKGROUND],
        None,
    )
    .await;
    cli.prompt(SCRIPT).await;
    let result = cli.result().await;
    assert_eq!(result["result"], "called slow_write: ran now in process", "{result}");
    let initialize = cli.sdk.iter().find(|m| m["method"] == "initialize").unwrap();
    assert_eq!(initialize["params"]["protocolVersion"], "2025-11-25");
    assert_eq!(initialize["params"]["capabilities"], json!({}), "{initialize}");
    let call = cli.sdk.iter().find(|m| m["method"] == "tools/call").unwrap();
    assert!(call["params"].get("task").is_none() && call["params"]["_meta"].get(CAPABILITIES_META).is_none());
    assert!(cli.finish().await.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn with_the_flag_and_auto_background_a_call_becomes_a_task_whose_result_comes_later_as_a_notification()
{
    let Some((cli, _slot)) = real_cli("mcp_tasks: a background task in stream-json mode").await else {
        return;
    };
    let mock = MockModel::start().await.unwrap();
    let work = dir();
    for (name, http) in [("http", true), ("stdio", false)] {
        let state = work.path().join(name);
        let probe = if http { Probe::http(state).await } else { Probe::stdio(state) };
        let home = home(true);
        let config_dir = home.path().join(".claude");
        let env = [FLAG, AUTO_BACKGROUND];
        let mut stream =
            Stream::start(&cli, &mock, home.path(), &config_dir, &probe.servers(), &env, None).await;
        stream.prompt(SCRIPT_PROBE).await;
        let first = stream.result().await;

        // The model went on at once: its tool result says the call became a background task.
        let (text, is_error) = tool_results(&mock).pop().unwrap();
        assert!(!is_error && text.contains(BACKGROUNDED), "{name}: {text}");
        assert!(first["result"].as_str().unwrap().contains(BACKGROUNDED), "{name}: {first}");
        let call = &probe.requests("tools/call")[0];
        assert!(declares_tasks(call), "{name}: the call asks for a task: {call:#}");
        assert_eq!(call["response"]["result"]["status"], "working");
        let started = stream.system("task_started");
        assert_eq!(started.len(), 1, "{name}: {:#?}", stream.frames);
        assert_eq!(started[0]["task_type"], "mcp_task");

        // It polls the task; once done, a turn of its own starts, stdin still open.
        probe.touch("release");
        let second = stream.result().await;
        assert_ne!(second["uuid"], first["uuid"]);
        assert_eq!(second["origin"]["kind"], "task-notification", "{name}: {second}");
        assert!(
            probe
                .log()
                .iter()
                .any(|e| e["request"]["method"] == "tasks/get"
                    && e["response"]["result"]["status"] == "completed"),
            "{name}: polled to the end"
        );
        let notified = stream.system("task_notification");
        assert_eq!(notified[0]["status"], "completed", "{name}: {notified:#?}");
        let sent = last_request_text(&mock);
        assert!(
            sent.contains("<task-notification>") && sent.contains("task result: hello"),
            "{name}: {sent}"
        );
        let (text, _) = tool_results(&mock).pop().unwrap();
        assert!(text.contains(BACKGROUNDED), "{name}: the tool result itself stays the placeholder: {text}");
        assert!(stream.finish().await.success());
    }
}

/// `projects/<key>/<session>/mcp-tasks/` under a config dir: where the CLI keeps its open tasks.
fn sidecars(config_dir: &Path) -> Vec<PathBuf> {
    let projects = config_dir.join("projects");
    let mut found = Vec::new();
    for project in std::fs::read_dir(projects).unwrap().flatten() {
        for session in std::fs::read_dir(project.path()).unwrap().flatten() {
            if let Ok(tasks) = std::fs::read_dir(session.path().join("mcp-tasks")) {
                found.extend(tasks.flatten().map(|t| t.path()));
            }
        }
    }
    found
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_open_at_exit_lives_on_only_in_a_sidecar_file_that_a_resume_needs() {
    let Some((cli, _slot)) = real_cli("mcp_tasks: exit and resume with a task open").await else { return };
    let mock = MockModel::start().await.unwrap();
    let work = dir();
    let probe = Probe::http(work.path().join("probe")).await;
    let home = home(true);
    let config_dir = home.path().join(".claude");
    let env = [FLAG, AUTO_BACKGROUND];

    // Exit with the task still working: the CLI stops following it, cancels nothing, and keeps
    // it in a file the mirror never carries.
    let mut first = Stream::start(&cli, &mock, home.path(), &config_dir, &probe.servers(), &env, None).await;
    first.prompt(SCRIPT_PROBE).await;
    let result = first.result().await;
    let session = result["session_id"].as_str().unwrap().to_owned();
    assert!(first.finish().await.success());
    assert_eq!(first.system("task_notification")[0]["status"], "stopped", "{:#?}", first.frames);
    assert!(probe.requests("tasks/cancel").is_empty());
    let sidecar = sidecars(&config_dir);
    assert_eq!(sidecar.len(), 1, "one sidecar file");
    let meta: Value = serde_json::from_slice(&std::fs::read(&sidecar[0]).unwrap()).unwrap();
    let task_id = probe.requests("tools/call")[0]["response"]["result"]["taskId"].clone();
    assert_eq!(meta["mcpTaskId"], task_id, "{meta}");
    assert_eq!(meta["protocol"], "sep2663");
    let mirrored: Vec<&Value> = first.frames.iter().filter(|f| f["type"] == "transcript_mirror").collect();
    assert!(!mirrored.is_empty());
    assert!(mirrored.iter().all(|f| !f["filePath"].as_str().unwrap().contains("mcp-tasks")));

    // Resumed as Tollgate resumes (a fresh config dir with the transcript only): the task is gone.
    let fresh = work.path().join("fresh");
    let transcript = std::fs::read_dir(config_dir.join("projects")).unwrap().next().unwrap().unwrap().path();
    let key = transcript.file_name().unwrap();
    std::fs::create_dir_all(fresh.join("projects").join(key)).unwrap();
    let file = format!("{session}.jsonl");
    std::fs::copy(transcript.join(&file), fresh.join("projects").join(key).join(&file)).unwrap();
    flag_cache(&fresh);
    let polled = probe.requests("tasks/get").len();
    let mut bare =
        Stream::start(&cli, &mock, home.path(), &fresh, &probe.servers(), &env, Some(&session)).await;
    bare.prompt("say resumed").await;
    bare.result().await;
    assert!(bare.finish().await.success());
    assert!(bare.system("task_started").is_empty(), "{:#?}", bare.frames);
    assert_eq!(probe.requests("tasks/get").len(), polled, "nobody polls the task");

    // Resumed in print mode with the sidecar there: not restored either.
    let printed = work.path().join("printed");
    copy_dir(&config_dir, &printed);
    let servers = probe.servers();
    print_args(&cli, &mock, home.path(), &printed, &servers, &env, &["--resume", &session]).await;
    assert_eq!(probe.requests("tasks/get").len(), polled, "print mode does not poll it");

    // Resumed in stream-json mode with the sidecar: restored, polled, and its result notified.
    let kept = work.path().join("kept");
    copy_dir(&config_dir, &kept);
    probe.touch("release");
    let mut resumed = Stream::start(&cli, &mock, home.path(), &kept, &servers, &env, Some(&session)).await;
    resumed.prompt("say resumed").await;
    resumed.result().await;
    assert_eq!(resumed.system("task_started")[0]["task_type"], "mcp_task", "{:#?}", resumed.frames);
    let notified = resumed.result().await;
    assert_eq!(notified["origin"]["kind"], "task-notification", "{notified}");
    assert!(probe.requests("tasks/get").len() > polled);
    let sent = last_request_text(&mock);
    assert!(sent.contains("<task-notification>") && sent.contains("task result: hello"), "{sent}");
    assert!(resumed.finish().await.success());
}

/// A pseudo-terminal: its controller side, and the other side for a child's stdio.
fn pseudo_terminal() -> (std::fs::File, std::os::fd::OwnedFd) {
    use std::os::fd::FromRawFd;
    let (mut controller, mut terminal) = (0, 0);
    let size = libc::winsize { ws_row: 40, ws_col: 120, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: openpty writes two fds it opened into the two integers; the null name and termios
    // pointers are allowed, the size pointer is valid for the call.
    let opened = unsafe {
        libc::openpty(&mut controller, &mut terminal, std::ptr::null_mut(), std::ptr::null(), &size)
    };
    assert_eq!(opened, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both fds were just opened by openpty and are owned by nobody else.
    unsafe { (std::fs::File::from_raw_fd(controller), std::os::fd::OwnedFd::from_raw_fd(terminal)) }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_interactive_cli_declares_tasks_by_default_and_notifies_the_result_as_soon_as_it_completes() {
    use std::io::Write;
    let Some((cli, _slot)) = real_cli("mcp_tasks: the interactive CLI").await else { return };
    let mock = MockModel::start().await.unwrap();
    let work = dir();
    let probe = Probe::http(work.path().join("probe")).await;
    let home = home(false);
    let cwd = home.path().canonicalize().unwrap();
    // What an interactive first start would ask: onboarding, the key, trusting the folder.
    let config = json!({
        "hasCompletedOnboarding": true, "theme": "dark",
        "customApiKeyResponses": {"approved": ["dummy"], "rejected": []},
        "projects": {cwd.to_str().unwrap(): {"hasTrustDialogAccepted": true, "hasCompletedProjectOnboarding": true}},
    });
    std::fs::write(home.path().join(".claude/.claude.json"), config.to_string()).unwrap();
    let (mut controller, terminal) = pseudo_terminal();
    let mut command = command(&cli, &mock, &cwd, &home.path().join(".claude"), &[("TERM", "xterm-256color")]);
    command
        .args(["--strict-mcp-config", "--mcp-config"])
        .arg(json!({"mcpServers": probe.servers()}).to_string())
        .args(["--allowedTools", "mcp__probe__slow_write"])
        .stdin(Stdio::from(terminal.try_clone().unwrap()))
        .stdout(Stdio::from(terminal.try_clone().unwrap()))
        .stderr(Stdio::from(terminal));
    // SAFETY: only async-signal-safe calls between fork and exec: a new session whose controlling
    // terminal is the pseudo-terminal on stdin.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command.spawn().unwrap();
    // Drain the screen, or the CLI blocks writing it.
    let mut screen = controller.try_clone().unwrap();
    std::thread::spawn(move || std::io::copy(&mut screen, &mut std::io::sink()));

    probe.wait_for("the tool list", |log| log.iter().any(|e| e["request"]["method"] == "tools/list")).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    controller.write_all(SCRIPT.as_bytes()).unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    controller.write_all(b"\r").unwrap();
    probe.wait_for("the call", |log| log.iter().any(|e| e["request"]["method"] == "tools/call")).await;

    let log = probe.log();
    assert!(log.iter().filter(|e| e["request"]["method"].is_string()).all(declares_tasks), "{log:#?}");
    let call = &probe.requests("tools/call")[0];
    assert_eq!(call["response"]["result"]["status"], "working", "{call:#}");
    mock.wait_for_requests(2, Duration::from_secs(20)).await.unwrap();
    let (text, is_error) = tool_results(&mock).pop().unwrap();
    assert!(!is_error && text.contains(BACKGROUNDED), "{text}");

    // Completed: the notification turn follows at once, with nothing else typed.
    probe.touch("release");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !last_request_text(&mock).contains("task result: hello") {
        assert!(Instant::now() < deadline, "no notification turn: {}", last_request_text(&mock));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(last_request_text(&mock).contains("<task-notification>"));
    child.kill().await.unwrap();
}
