//! Segment benchmark: the host's own overhead per segment and per defer+resume pair, and its
//! memory, against two baselines on the same CLI, the same mock model and the same script.
//!
//! ```sh
//! CARGO_TARGET_DIR=target/h-claude cargo bench -p tollgate-claude --bench segment
//! # knobs: BENCH_N=10 (measured rounds), BENCH_WARMUP=1, TS_SDK_NODE_MODULES=<dir>/node_modules
//! # (default tools/ts-sdk/node_modules, installed by scripts/install-ts-sdk.sh)
//! ```
//!
//! Three drivers run interleaved in every round, against one `tollgate-mock-model` in this
//! process:
//!
//! - **host**: `run_segment` in a child process of its own (this binary with `BENCH_ROLE=host`), so
//!   its peak RSS is the host's alone; once on the host as before, once in its box
//!   (`tollgate_box`: bubblewrap, the box's init, the workspace copied in and out, the model
//!   reached through the box's relay), so the box's cost is the paired difference, and once in a
//!   box without the CLI's managed settings, which splits that cost into the box's own and what
//!   the CLI spends on those settings;
//! - **bare**: this process spawns the CLI with the same argv, environment and `initialize`, and
//!   answers with canned lines (fixed MCP answers, a fixed hook decision): no gate, no rmcp, no
//!   process-group handling;
//! - **TS SDK**: `benches/ts_sdk_driver.mjs`, the official `@anthropic-ai/claude-agent-sdk`
//!   `query()` as in the team's `ts-baseline` measurements (skipped, saying so, when the SDK pinned
//!   in `tools/ts-sdk` is not installed: `scripts/install-ts-sdk.sh`).
//!
//! Wall times run from just before the driver starts the segment to the CLI reaped (and, for the
//! host and bare, the scratch directories removed). Overhead = host − bare, paired per round. On a
//! busy 2-core machine the CLI's own ±100s of ms swamp that difference, so the table also gives the
//! host process's own CPU time per segment (`getrusage`), which that noise does not inflate, and
//! the CLI's own CPU time and page faults, unboxed (the host child's reaped children) and boxed
//! (as the box's init reaped it), paired: what the box makes the CLI itself do.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tollgate_claude::launch::{ArgvOptions, argv, write_resume_file};
use tollgate_claude::tools::{CallFuture, ToolOutput, ToolRunner, ToolSpec, catalog};
use tollgate_claude::{CliBinary, CliLocator, SegmentOutcome, SegmentSpec, run_segment};
use tollgate_engine::gate::Gate;
use tollgate_engine::policy::{Annotations, Policies};
use tollgate_engine::record::Outcome;
use tollgate_protocol::{
    HookAnswer, HookMatcher, HostFrame, Initialize, PermissionAnswer, PermissionDecision, ResumeText,
    TranscriptEntry, UserPrompt,
};

use tollgate_testing::ts_sdk;

const TEXT_SCRIPT: &str = "say hello";
const PAIR_SCRIPT: &str = r#"call note {"text":"x"}"#;
const RECORDED: &str = "noted: x";

/// The one tool of the benchmark: `note`, unclassified, so every call defers.
struct BenchTools;

impl ToolRunner for BenchTools {
    fn tools(&self) -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "note".into(),
            description: "Take a note.".into(),
            input_schema: json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
            annotations: Annotations::default(),
        }]
    }

    fn call<'a>(&'a self, _name: &'a str, arguments: &'a Value) -> CallFuture<'a> {
        Box::pin(async move {
            Ok(ToolOutput::text(format!("noted: {}", arguments["text"].as_str().unwrap_or(""))))
        })
    }
}

/// The `tools/list` answer the bare driver gives: what the host's rmcp server lists for `BenchTools`.
fn bare_tools_list() -> Value {
    json!({"tools": [{"name": "note", "description": "Take a note.",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        "annotations": {"readOnlyHint": false, "destructiveHint": false, "idempotentHint": false, "openWorldHint": false},
        "_meta": {"anthropic/alwaysLoad": true}}]})
}

fn mock_env(mock_url: &str) -> Vec<(OsString, OsString)> {
    [
        ("ANTHROPIC_BASE_URL", mock_url),
        ("ANTHROPIC_API_KEY", "dummy"),
        ("HTTPS_PROXY", "http://127.0.0.1:1"),
        ("NO_PROXY", "127.0.0.1,localhost"),
    ]
    .into_iter()
    .map(|(k, v)| (OsString::from(k), OsString::from(v)))
    .collect()
}

/// CPU time (user + system) this process has used so far, in ms: the host's own work, which the
/// scheduling noise of a busy machine does not inflate the way it inflates wall times.
fn cpu_ms() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct we pass and reads nothing else.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 * 1000.0 + t.tv_usec as f64 / 1000.0;
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// What this process's reaped children (and the children they reaped) used so far: for an
/// unboxed segment, its CLI and the `git` calls the CLI waited for.
fn children_usage() -> tollgate_box::CliUsage {
    // SAFETY: getrusage writes into the zeroed struct we pass and reads nothing else.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        usage
    };
    tollgate_box::CliUsage::from_rusage(&usage)
}

/// The CLI's CPU time (ms) and page faults between two [`children_usage`] readings.
fn cli_usage_json(usage: Option<tollgate_box::CliUsage>) -> (Value, Value) {
    match usage {
        Some(u) => (json!(u.cpu_us as f64 / 1000.0), json!(u.minor_faults + u.major_faults)),
        None => (Value::Null, Value::Null),
    }
}

/// Waits (up to 2 s) until every child of this process has been reaped: a boxed segment returns
/// once the box's init has reported, before `bwrap` exits, and `bwrap`'s usage (the box's, CLI
/// included) must not land in the next unboxed segment's [`children_usage`].
async fn children_reaped() {
    let has_children = || {
        std::fs::read_dir("/proc/self/task").into_iter().flatten().flatten().any(|task| {
            std::fs::read_to_string(task.path().join("children")).is_ok_and(|c| !c.trim().is_empty())
        })
    };
    let deadline = Instant::now() + Duration::from_secs(2);
    while has_children() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn own_memory() -> Value {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    json!({"vmhwm_kb": field("VmHWM:"), "vmrss_kb": field("VmRSS:")})
}

// ------------------------------------------------------------------------------------------------
// The host child: runs segments on command.
// ------------------------------------------------------------------------------------------------

/// The box of the `boxtext` runs: this package's init, the Worker's user rule, and the mock model
/// relayed through a Unix socket (as the Worker's model proxy serves one), kept for the child's life.
async fn bench_box(mock_url: &str) -> (Arc<tollgate_box::BoxConfig>, tempfile::TempDir) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("socket dir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).expect("chmod");
    let socket = dir.path().join("model.sock");
    let listener = tokio::net::UnixListener::bind(&socket).expect("bind the model socket");
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let addr: std::net::SocketAddr =
        mock_url.trim_start_matches("http://").parse().expect("the mock's address");
    tokio::spawn(async move {
        while let Ok((mut unix, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut tcp) = tokio::net::TcpStream::connect(addr).await {
                    let _ = tcp.set_nodelay(true);
                    let _ = tokio::io::copy_bidirectional(&mut unix, &mut tcp).await;
                }
            });
        }
    });
    let bwrap = tollgate_box::probe::find_bwrap(None).expect("bwrap (scripts/setup.sh installs it)");
    // SAFETY: geteuid has no preconditions.
    let user = tollgate_box::BoxUser::for_worker(unsafe { libc::geteuid() }, None);
    let mut config = tollgate_box::BoxConfig::new(bwrap, env!("CARGO_BIN_EXE_claude-box-init"), user);
    config.model = Some(tollgate_box::config::Relay { port: addr.port(), socket });
    (Arc::new(config), dir)
}

async fn host_child() {
    let mock_url = std::env::var("MOCK_URL").expect("MOCK_URL");
    let project = PathBuf::from(std::env::var("PROJECT").expect("PROJECT"));
    let (box_config, _socket_dir) = bench_box(&mock_url).await;
    let workspace = tempfile::tempdir().expect("a workspace");
    if let Some((uid, gid)) = box_config.user.owner() {
        std::os::unix::fs::chown(workspace.path(), Some(uid), Some(gid))
            .expect("give the workspace to the box's user");
    }
    let cli = CliBinary::locate(&CliLocator::default()).await.expect("a supported CLI");
    let runner: Arc<dyn ToolRunner> = Arc::new(BenchTools);
    let gate = || Gate::new(Policies::default(), catalog("tools", &BenchTools.tools()).expect("catalog"));
    let spec = |start: SegmentSpec| {
        let mut spec = start;
        spec.env.extend(mock_env(&mock_url));
        spec
    };
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(command)) = lines.next_line().await {
        let answer = match command.trim() {
            "text" => {
                let cpu = cpu_ms();
                let children = children_usage();
                let started = Instant::now();
                let report = run_segment(
                    spec(SegmentSpec::fresh(cli.clone(), &project, TEXT_SCRIPT)),
                    gate(),
                    runner.clone(),
                    None,
                )
                .await;
                let total = started.elapsed();
                let after = children_usage();
                let (cli_cpu_ms, cli_faults) = cli_usage_json(Some(tollgate_box::CliUsage {
                    cpu_us: after.cpu_us - children.cpu_us,
                    minor_faults: after.minor_faults - children.minor_faults,
                    major_faults: after.major_faults - children.major_faults,
                    max_rss_kb: after.max_rss_kb,
                }));
                let ok = matches!(&report.outcome, SegmentOutcome::Completed { result, .. } if result == "said: hello");
                json!({"ok": ok, "to_result_ms": report.stats.to_result.map(ms), "total_ms": ms(total), "cpu_ms": cpu_ms() - cpu,
                       "cli_cpu_ms": cli_cpu_ms, "cli_faults": cli_faults, "to_spawn_ms": report.stats.to_spawn.map(ms),
                       "error": format!("{:?}", report.outcome).chars().take(300).collect::<String>()})
            }
            which @ ("boxtext" | "boxtext-project") => {
                // The same segment in its box, in a workspace copied in and out.
                let cpu = cpu_ms();
                let started = Instant::now();
                let mut boxed = spec(SegmentSpec::fresh(cli.clone(), workspace.path(), TEXT_SCRIPT));
                if which == "boxtext-project" {
                    // An agent whose options read the project's settings: its box holds the
                    // CLI's managed settings, which lock them.
                    boxed.setting_sources = Some(vec!["project".to_owned()]);
                }
                boxed.sandbox =
                    Some(tollgate_claude::SegmentBox { config: box_config.clone(), copy_workspace: true });
                let report = run_segment(boxed, gate(), runner.clone(), None).await;
                let total = started.elapsed();
                let returned_ns = tollgate_box::monotonic_ns();
                let ok = matches!(&report.outcome, SegmentOutcome::Completed { result, .. } if result == "said: hello");
                // Where the box's time went, from the init's monotonic timestamps.
                let t = report.stats.box_report.as_ref().map(|r| r.timings).unwrap_or_default();
                let between = |from: u64, to: u64| (from > 0 && to >= from).then(|| (to - from) as f64 / 1e6);
                // The CLI's own usage, as the box's init reaped it (the host may not have reaped
                // `bwrap` yet: it stops waiting once the init has reported).
                let (cli_cpu_ms, cli_faults) =
                    cli_usage_json(report.stats.box_report.as_ref().and_then(|r| r.cli_usage));
                children_reaped().await;
                json!({"ok": ok, "to_result_ms": report.stats.to_result.map(ms), "total_ms": ms(total), "cpu_ms": cpu_ms() - cpu,
                       "cli_cpu_ms": cli_cpu_ms, "cli_faults": cli_faults, "to_spawn_ms": report.stats.to_spawn.map(ms),
                       "bwrap_ms": report.stats.spawned_ns.and_then(|s| between(s, t.init_started_ns)),
                       "init_ms": between(t.init_started_ns, t.cli_spawned_ns),
                       "teardown_ms": between(t.cli_exited_ns, t.reported_ns),
                       "after_report_ms": between(t.reported_ns, returned_ns),
                       "error": format!("{:?} {}", report.outcome, report.stats.stderr_tail).chars().take(400).collect::<String>()})
            }
            "pair" => {
                let cpu = cpu_ms();
                let started = Instant::now();
                let first = run_segment(
                    spec(SegmentSpec::fresh(cli.clone(), &project, PAIR_SCRIPT)),
                    gate(),
                    runner.clone(),
                    None,
                )
                .await;
                let defer_ms = ms(started.elapsed());
                let SegmentOutcome::Deferred { session_id, call, entries, .. } = first.outcome else {
                    println!("{}", json!({"ok": false, "error": format!("{:?}", first.outcome)}));
                    continue;
                };
                let record = call.record(Outcome::Succeeded { output: RECORDED.into() });
                let resumed = Instant::now();
                let second = run_segment(
                    spec(SegmentSpec::resume(cli.clone(), &project, session_id, entries)),
                    gate().resuming(record),
                    runner.clone(),
                    None,
                )
                .await;
                let resume_ms = ms(resumed.elapsed());
                let ok = matches!(&second.outcome, SegmentOutcome::Completed { result, .. } if result == "called note: noted: x");
                json!({"ok": ok, "defer_ms": defer_ms, "resume_ms": resume_ms, "pair_ms": ms(started.elapsed()), "cpu_ms": cpu_ms() - cpu,
                       "error": format!("{:?}", second.outcome).chars().take(300).collect::<String>()})
            }
            "mem" => own_memory(),
            other => json!({"error": format!("unknown command {other}")}),
        };
        println!("{answer}");
    }
}

// ------------------------------------------------------------------------------------------------
// The bare driver: the same launch, canned answers.
// ------------------------------------------------------------------------------------------------

#[derive(Default)]
struct BareRun {
    ok: bool,
    /// Start → the `initialize` answer (the CLI booted, loaded its config and read `initialize`).
    to_ready_ms: f64,
    /// Start → `system/init`, written when a turn starts, just before the model call.
    to_turn_ms: f64,
    to_result_ms: f64,
    total_ms: f64,
    session_id: String,
    entries: Vec<TranscriptEntry>,
    result: String,
}

#[derive(serde::Deserialize)]
struct Mirror {
    entries: Vec<Box<RawValue>>,
}

/// When the bare driver starts its clock.
#[derive(Clone, Copy, PartialEq)]
enum Start {
    /// At the spawn: what every segment pays today.
    Cold,
    /// After the CLI was spawned this long ago and waits for `initialize` (`--await-initialize`),
    /// the resume file (if any) laid down before the spawn: a CLI started before its step.
    Prestarted(Duration),
    /// As `Prestarted`, but the resume file is written only after the spawn, just before
    /// `initialize`: whether the CLI reads it that late.
    PrestartedFileLate(Duration),
}

async fn bare_segment(
    cli: &Path,
    mock_url: &str,
    project: &Path,
    prompt: Option<&str>,
    resume: Option<(&str, &[TranscriptEntry])>,
    hook_decision: PermissionDecision,
    start: Start,
) -> BareRun {
    let mut started = Instant::now();
    let scratch = tempfile::tempdir().expect("scratch");
    let (home, config, tmp) =
        (scratch.path().join("home"), scratch.path().join("config"), scratch.path().join("tmp"));
    for dir in [&home, &config, &tmp] {
        std::fs::create_dir(dir).expect("dir");
    }
    if let Some((session, entries)) = resume
        && !matches!(start, Start::PrestartedFileLate(_))
    {
        write_resume_file(&config, project, session, &resume_text(entries)).expect("resume file");
    }
    let args = argv(&ArgvOptions { resume: resume.map(|(s, _)| s), ..ArgvOptions::default() });
    let mut command = tokio::process::Command::new(cli);
    command
        .args(&args)
        .current_dir(project)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for (name, _) in std::env::vars_os() {
        let upper = name.to_string_lossy().to_ascii_uppercase();
        if upper.starts_with("CLAUDE") || upper.starts_with("ANTHROPIC") {
            command.env_remove(&name);
        }
    }
    command
        .env("HOME", &home)
        .env("CLAUDE_CONFIG_DIR", &config)
        .env("TMPDIR", &tmp)
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .envs(mock_env(mock_url));
    let mut child = command.spawn().expect("spawn the CLI");
    let mut stdin = child.stdin.take();
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
    if let Start::Prestarted(wait) | Start::PrestartedFileLate(wait) = start {
        tokio::time::sleep(wait).await;
        started = Instant::now();
        if let (Start::PrestartedFileLate(_), Some((session, entries))) = (start, resume) {
            write_resume_file(&config, project, session, &resume_text(entries)).expect("resume file");
        }
    }
    let init = Initialize::new()
        .pre_tool_use(HookMatcher::all_tools("tollgate_gate").timeout(60))
        .sdk_mcp_server("tools");
    let mut out = HostFrame::initialize("tollgate_initialize", init).to_line();
    if let Some(prompt) = prompt {
        out.push_str(&HostFrame::User(UserPrompt::blocks([prompt])).to_line());
    }
    if let Some(stdin) = stdin.as_mut() {
        let _ = stdin.write_all(out.as_bytes()).await;
    }
    let mut run = BareRun::default();
    while let Ok(Some(line)) = stdout.next_line().await {
        if line.contains("\"type\":\"transcript_mirror\"") {
            if let Ok(mirror) = serde_json::from_str::<Mirror>(&line) {
                run.entries.extend(
                    mirror
                        .entries
                        .into_iter()
                        .filter_map(|e| TranscriptEntry::from_raw(e.get().to_owned()).ok()),
                );
            }
            continue;
        }
        let Ok(frame) = serde_json::from_str::<Value>(&line) else { continue };
        match frame["type"].as_str() {
            Some("control_response")
                if run.to_ready_ms == 0.0 && frame["response"]["request_id"] == "tollgate_initialize" =>
            {
                run.to_ready_ms = ms(started.elapsed());
            }
            Some("system") if run.to_turn_ms == 0.0 && frame["subtype"] == "init" => {
                run.to_turn_ms = ms(started.elapsed());
            }
            Some("control_request") => {
                let id = frame["request_id"].as_str().unwrap_or_default();
                let request = &frame["request"];
                let answer = match request["subtype"].as_str() {
                    Some("mcp_message") => {
                        let message = &request["message"];
                        match message["method"].as_str() {
                            Some("initialize") => HostFrame::mcp_response(
                                id,
                                json!({"jsonrpc": "2.0", "id": message["id"],
                                "result": {"protocolVersion": "2025-11-25", "capabilities": {"tools": {"listChanged": false}},
                                           "serverInfo": {"name": "tools", "version": "1.0.0"}}}),
                            ),
                            Some("tools/list") => HostFrame::mcp_response(
                                id,
                                json!({"jsonrpc": "2.0", "id": message["id"], "result": bare_tools_list()}),
                            ),
                            Some("tools/call") => HostFrame::mcp_response(
                                id,
                                json!({"jsonrpc": "2.0", "id": message["id"],
                                "result": {"content": [{"type": "text", "text": RECORDED}], "isError": false}}),
                            ),
                            _ => HostFrame::mcp_notification_ack(id),
                        }
                    }
                    Some("hook_callback") => HostFrame::hook_answer(
                        id,
                        HookAnswer {
                            decision: Some(hook_decision),
                            reason: None,
                            updated_input: None,
                            additional_context: None,
                        },
                    ),
                    Some("can_use_tool") => {
                        HostFrame::permission_answer(id, PermissionAnswer::allow(request["input"].clone()))
                    }
                    _ => HostFrame::error_response(id, "unsupported"),
                };
                if let Some(stdin) = stdin.as_mut() {
                    let _ = stdin.write_all(answer.to_line().as_bytes()).await;
                }
            }
            Some("result") if run.to_result_ms == 0.0 => {
                run.to_result_ms = ms(started.elapsed());
                run.session_id = frame["session_id"].as_str().unwrap_or_default().to_owned();
                run.result = frame["result"].as_str().unwrap_or_default().to_owned();
                run.ok = frame["is_error"] == false;
                stdin = None;
            }
            _ => {}
        }
    }
    let _ = child.wait().await;
    drop(scratch);
    run.total_ms = ms(started.elapsed());
    run
}

// ------------------------------------------------------------------------------------------------
// Child drivers and the table.
// ------------------------------------------------------------------------------------------------

struct Driver {
    _child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    stdout: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Driver {
    fn start(mut command: tokio::process::Command) -> std::io::Result<Driver> {
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).kill_on_drop(true);
        let mut child = command.spawn()?;
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
        Ok(Driver { _child: child, stdin, stdout })
    }

    async fn ask(&mut self, command: &str) -> Value {
        self.stdin.write_all(format!("{command}\n").as_bytes()).await.expect("write to a driver");
        let line = self.stdout.next_line().await.ok().flatten().unwrap_or_default();
        serde_json::from_str(&line).unwrap_or_else(|_| json!({"error": format!("driver said {line:?}")}))
    }
}

#[derive(Default)]
struct Series(Vec<f64>);

impl Series {
    fn push(&mut self, value: Option<f64>) {
        if let Some(v) = value {
            self.0.push(v);
        }
    }

    fn sorted(&self) -> Vec<f64> {
        let mut v = self.0.clone();
        v.sort_by(|a, b| a.total_cmp(b));
        v
    }

    fn pct(&self, p: f64) -> Option<f64> {
        let v = self.sorted();
        if v.is_empty() {
            return None;
        }
        let rank = ((p / 100.0) * (v.len() - 1) as f64).round() as usize;
        Some(v[rank.min(v.len() - 1)])
    }

    fn cell(&self) -> String {
        let v = self.sorted();
        match (self.pct(50.0), v.first(), v.last()) {
            (Some(p50), Some(min), Some(max)) => format!("{p50:.1} ({min:.1}–{max:.1})"),
            _ => "—".into(),
        }
    }
}

/// A row of the overhead table: `series`' p50 and p90, and the goal.
fn overhead_row(label: &str, series: &Series, goal: &str) {
    let at = |p| series.pct(p).unwrap_or(f64::NAN);
    let goal = if goal.is_empty() { String::new() } else { format!("{goal} ") };
    println!("| {label} | {:.1} | {:.1} | {goal}|", at(50.0), at(90.0));
}

fn paired(a: &Series, b: &Series) -> Series {
    Series(a.0.iter().zip(&b.0).map(|(x, y)| x - y).collect())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    if std::env::var("BENCH_ROLE").as_deref() == Ok("host") {
        host_child().await;
        return;
    }
    // `cargo bench` passes `--bench`; nothing else is accepted.
    let rounds: usize = std::env::var("BENCH_N").ok().and_then(|v| v.parse().ok()).unwrap_or(10);
    let warmup: usize = std::env::var("BENCH_WARMUP").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    let cli = CliBinary::locate(&CliLocator::default()).await.unwrap_or_else(|e| panic!("{e}"));
    let mock = tollgate_mock_model::MockModel::start().await.expect("mock");
    let project = tempfile::Builder::new().prefix("tollgate-bench-project-").tempdir().expect("project");

    let mut host_cmd = tokio::process::Command::new(std::env::current_exe().expect("current exe"));
    host_cmd.env("BENCH_ROLE", "host").env("MOCK_URL", mock.base_url()).env("PROJECT", project.path());
    let mut host = Driver::start(host_cmd).expect("start the host child");

    let mut ts = if let Some(modules) = ts_sdk::node_modules() {
        let mut cmd = tokio::process::Command::new("node");
        cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/ts_sdk_driver.mjs"))
            .env("TS_SDK_NODE_MODULES", &modules)
            .env("CLAUDE_BIN", cli.path())
            .env("MOCK_URL", mock.base_url())
            .env("PROJECT", project.path())
            .env("PROMPT", TEXT_SCRIPT);
        Driver::start(cmd).ok()
    } else {
        None
    };

    let (mut host_text, mut host_text_result, mut bare_text, mut bare_text_result) =
        (Series::default(), Series::default(), Series::default(), Series::default());
    let (mut ts_text, mut ts_text_result) = (Series::default(), Series::default());
    let (mut host_pair, mut bare_pair) = (Series::default(), Series::default());
    let (mut host_text_cpu, mut host_pair_cpu) = (Series::default(), Series::default());
    let mut failures = Vec::new();
    // Rows: → initialize answered, → system/init, → result, → exited; columns: cold text,
    // pre-started text, cold resume, pre-started resume, pre-started with the file written late.
    let mut phases: [[Series; 5]; 4] = Default::default();
    let mut late_ok: Vec<bool> = Vec::new();
    let (mut boxed_text, mut boxed_text_result, mut boxed_cpu) =
        (Series::default(), Series::default(), Series::default());
    // The box's parts (ms): `bwrap` making it, the init up to the CLI, the init after it.
    let (mut box_bwrap, mut box_init, mut box_teardown, mut box_after_report) =
        (Series::default(), Series::default(), Series::default(), Series::default());
    // Segment start → spawn, unboxed (scratch folders) and boxed (the box's folder and argv).
    let (mut host_to_spawn, mut box_to_spawn) = (Series::default(), Series::default());
    // The CLI's own CPU time (ms) and page faults, unboxed and boxed.
    let (mut cli_cpu, mut boxed_cli_cpu, mut cli_faults, mut boxed_cli_faults) =
        (Series::default(), Series::default(), Series::default(), Series::default());
    // The boxed segment of an agent that reads project settings, so its box locks them with the
    // CLI's managed settings: to exit, to `result`, the CLI's CPU time and page faults.
    let (mut locked_text, mut locked_result, mut locked_cli_cpu, mut locked_cli_faults) =
        (Series::default(), Series::default(), Series::default(), Series::default());
    for round in 0..warmup + rounds {
        let measured = round >= warmup;
        // The host's three segments (unboxed, boxed, boxed reading project settings) run
        // in an order that turns each round, so none gains from another's warm caches.
        let (mut h, mut hb, mut hu) = (Value::Null, Value::Null, Value::Null);
        for turn in 0..3 {
            match (round + turn) % 3 {
                0 => h = host.ask("text").await,
                1 => hb = host.ask("boxtext").await,
                _ => hu = host.ask("boxtext-project").await,
            }
        }
        let b = bare_segment(
            cli.path(),
            &mock.base_url(),
            project.path(),
            Some(TEXT_SCRIPT),
            None,
            PermissionDecision::Allow,
            Start::Cold,
        )
        .await;
        let t = match ts.as_mut() {
            Some(ts) => ts.ask("run").await,
            None => Value::Null,
        };
        let hp = host.ask("pair").await;
        let bp_first = bare_segment(
            cli.path(),
            &mock.base_url(),
            project.path(),
            Some(PAIR_SCRIPT),
            None,
            PermissionDecision::Defer,
            Start::Cold,
        )
        .await;
        let bp_second = bare_segment(
            cli.path(),
            &mock.base_url(),
            project.path(),
            None,
            Some((&bp_first.session_id, &bp_first.entries)),
            PermissionDecision::Allow,
            Start::Cold,
        )
        .await;
        // The same text turn and resume with the CLI started 1.5 s before the clock (and, for the
        // resume, once more with its transcript file written only after the spawn).
        let prestart = Duration::from_millis(1500);
        let mock_url = mock.base_url();
        let bare = |prompt, resume, decision, start| {
            bare_segment(cli.path(), &mock_url, project.path(), prompt, resume, decision, start)
        };
        let warm_text =
            bare(Some(TEXT_SCRIPT), None, PermissionDecision::Allow, Start::Prestarted(prestart)).await;
        let resume = Some((bp_first.session_id.as_str(), bp_first.entries.as_slice()));
        let warm_resume = bare(None, resume, PermissionDecision::Allow, Start::Prestarted(prestart)).await;
        let late_resume =
            bare(None, resume, PermissionDecision::Allow, Start::PrestartedFileLate(prestart)).await;
        let checks = [
            ("host text", h["ok"] == true, h.to_string()),
            ("boxed host text", hb["ok"] == true, hb.to_string()),
            ("boxed host text, project settings locked", hu["ok"] == true, hu.to_string()),
            ("bare text", b.ok && b.result == "said: hello", b.result.clone()),
            ("ts text", t.is_null() || t["ok"] == true, t.to_string()),
            ("host pair", hp["ok"] == true, hp.to_string()),
            (
                "bare pair",
                bp_second.ok && bp_second.result == "called note: noted: x",
                bp_second.result.clone(),
            ),
            ("pre-started text", warm_text.ok && warm_text.result == "said: hello", warm_text.result.clone()),
            (
                "pre-started resume",
                warm_resume.ok && warm_resume.result == "called note: noted: x",
                warm_resume.result.clone(),
            ),
        ];
        // Whether a resume file written after the spawn works is what this run finds out.
        late_ok.push(late_resume.ok && late_resume.result == "called note: noted: x");
        for (what, ok, detail) in checks {
            if !ok {
                failures.push(format!("round {round} {what}: {detail}"));
            }
        }
        if !measured {
            continue;
        }
        host_text.push(h["total_ms"].as_f64());
        host_text_result.push(h["to_result_ms"].as_f64());
        boxed_text.push(hb["total_ms"].as_f64());
        boxed_text_result.push(hb["to_result_ms"].as_f64());
        boxed_cpu.push(hb["cpu_ms"].as_f64());
        host_to_spawn.push(h["to_spawn_ms"].as_f64());
        box_to_spawn.push(hb["to_spawn_ms"].as_f64());
        box_bwrap.push(hb["bwrap_ms"].as_f64());
        box_init.push(hb["init_ms"].as_f64());
        box_teardown.push(hb["teardown_ms"].as_f64());
        box_after_report.push(hb["after_report_ms"].as_f64());
        locked_text.push(hu["total_ms"].as_f64());
        locked_result.push(hu["to_result_ms"].as_f64());
        // Paired rows need every side.
        let usage = |v: &Value| Some((v["cli_cpu_ms"].as_f64()?, v["cli_faults"].as_f64()?));
        if let (Some(unboxed), Some(boxed), Some(locked)) = (usage(&h), usage(&hb), usage(&hu)) {
            for (cpu, faults, (ms, count)) in [
                (&mut cli_cpu, &mut cli_faults, unboxed),
                (&mut boxed_cli_cpu, &mut boxed_cli_faults, boxed),
                (&mut locked_cli_cpu, &mut locked_cli_faults, locked),
            ] {
                cpu.push(Some(ms));
                faults.push(Some(count));
            }
        }
        bare_text.push(Some(b.total_ms));
        bare_text_result.push(Some(b.to_result_ms));
        ts_text.push(t["to_end_ms"].as_f64());
        ts_text_result.push(t["to_result_ms"].as_f64());
        host_pair.push(hp["pair_ms"].as_f64());
        host_text_cpu.push(h["cpu_ms"].as_f64());
        host_pair_cpu.push(hp["cpu_ms"].as_f64());
        bare_pair.push(Some(bp_first.total_ms + bp_second.total_ms));
        for (column, run) in [(0, &b), (1, &warm_text), (2, &bp_second), (3, &warm_resume), (4, &late_resume)]
        {
            for (row, value) in
                [run.to_ready_ms, run.to_turn_ms, run.to_result_ms, run.total_ms].into_iter().enumerate()
            {
                phases[row][column].push((value > 0.0).then_some(value));
            }
        }
        eprintln!("round {}/{rounds} done", round + 1 - warmup);
    }
    let host_mem = host.ask("mem").await;
    let ts_mem = match ts.as_mut() {
        Some(ts) => ts.ask("mem").await,
        None => Value::Null,
    };

    let text_overhead = paired(&host_text, &bare_text);
    let box_overhead = paired(&boxed_text, &host_text);
    let box_result_overhead = paired(&boxed_text_result, &host_text_result);
    let result_overhead = paired(&host_text_result, &bare_text_result);
    let pair_overhead = paired(&host_pair, &bare_pair);
    let host_kb = host_mem["vmhwm_kb"].as_u64().unwrap_or(0);
    let ts_kb = ts_mem["vmhwm_kb"].as_u64();
    println!();
    println!(
        "Segment benchmark: CLI {} ({}), tollgate-mock-model, N={rounds} rounds (+{warmup} warm-up), ms as p50 (min–max)",
        cli.version(),
        cli.path().display()
    );
    println!();
    println!(
        "| one-reply text turn (`{TEXT_SCRIPT}`) | tollgate host | tollgate host, boxed | bare spawn | TS Agent SDK |"
    );
    println!("|---|---|---|---|---|");
    println!(
        "| start → `result` | {} | {} | {} | {} |",
        host_text_result.cell(),
        boxed_text_result.cell(),
        bare_text_result.cell(),
        ts_text_result.cell()
    );
    println!(
        "| start → CLI exited (+ cleanup) | {} | {} | {} | {} |",
        host_text.cell(),
        boxed_text.cell(),
        bare_text.cell(),
        ts_text.cell()
    );
    println!();
    println!("| host overhead (host − bare, paired per round) | p50 | p90 | goal |");
    println!("|---|---|---|---|");
    overhead_row("per segment, to exit", &text_overhead, "≤ 15 ms p50");
    overhead_row("per segment, to `result`", &result_overhead, "");
    overhead_row(&format!("per defer+resume pair (`{PAIR_SCRIPT}`)"), &pair_overhead, "");
    overhead_row("the box, per segment to exit (boxed host − host, paired)", &box_overhead, "≤ 15 ms p50");
    overhead_row("the box, per segment to `result`", &box_result_overhead, "");
    overhead_row(
        "the box of an agent reading project settings (locked), per segment to exit (paired)",
        &paired(&locked_text, &host_text),
        "",
    );
    overhead_row(
        "the box of an agent reading project settings (locked), to `result`",
        &paired(&locked_result, &host_text_result),
        "",
    );
    println!("| host's own CPU time (user+sys, getrusage) per segment | {} | | |", host_text_cpu.cell());
    println!("| host's own CPU time per boxed segment | {} | | |", boxed_cpu.cell());
    println!(
        "| segment start → spawn, unboxed / boxed (the box's folder and `/etc`) | {} / {} | | |",
        host_to_spawn.cell(),
        box_to_spawn.cell()
    );
    println!("| the box: spawn → its init runs (`bwrap` makes the box) | {} | | |", box_bwrap.cell());
    println!("| the box: init → CLI started (copy-in, relays, limits) | {} | | |", box_init.cell());
    println!("| the box: CLI gone → report written (copy-out) | {} | | |", box_teardown.cell());
    println!(
        "| the box: report written → segment returned (workspace swap, clean-up) | {} | | |",
        box_after_report.cell()
    );
    println!(
        "| the CLI's own CPU time (user+sys, with the `git` it ran) per segment, unboxed / boxed / boxed locked | {} / {} / {} | | |",
        cli_cpu.cell(),
        boxed_cli_cpu.cell(),
        locked_cli_cpu.cell()
    );
    overhead_row("the CLI's own CPU time, boxed − unboxed (paired)", &paired(&boxed_cli_cpu, &cli_cpu), "");
    overhead_row(
        "the CLI's settings lock and project settings: boxed locked − boxed",
        &paired(&locked_cli_cpu, &boxed_cli_cpu),
        "",
    );
    println!(
        "| the CLI's page faults per segment, unboxed / boxed / boxed locked | {} / {} / {} | | |",
        cli_faults.cell(),
        boxed_cli_faults.cell(),
        locked_cli_faults.cell()
    );
    overhead_row(
        "the CLI's page faults, boxed − unboxed (paired)",
        &paired(&boxed_cli_faults, &cli_faults),
        "",
    );
    overhead_row(
        "the CLI's settings lock and project settings: boxed locked − boxed",
        &paired(&locked_cli_faults, &boxed_cli_faults),
        "",
    );
    println!("| host's own CPU time per defer+resume pair | {} | | |", host_pair_cpu.cell());
    println!();
    println!("| defer+resume pair | tollgate host | bare spawn |");
    println!("|---|---|---|");
    println!("| start → resumed CLI exited | {} | {} |", host_pair.cell(), bare_pair.cell());
    println!();
    println!("| host process peak RSS (VmHWM, CLI children not included) | kB |");
    println!("|---|---|");
    println!("| tollgate host (this crate, in its own process, after all rounds) | {host_kb} |");
    match ts_kb {
        Some(kb) => {
            println!("| TS Agent SDK's Node host (same rounds) | {kb} |");
            println!("| ratio (goal ≤ 0.25) | {:.3} |", host_kb as f64 / kb as f64);
        }
        None => println!(
            "| TS Agent SDK's Node host (recorded in ts-baseline/README.md) | 91868 (ratio {:.3}) |",
            host_kb as f64 / 91868.0
        ),
    }
    println!();
    println!(
        "Where a bare segment's time goes, and what a CLI started before its step would save (ms from the clock's start, p50 (min–max)):"
    );
    println!();
    println!(
        "| phase | cold text turn | pre-started text turn | cold resume | pre-started resume | pre-started, file after spawn |"
    );
    println!("|---|---|---|---|---|---|");
    let names = ["→ `initialize` answered", "→ `system/init` (turn starts)", "→ `result`", "→ exited"];
    for (name, row) in names.iter().zip(&phases) {
        let cells: Vec<String> = row.iter().map(Series::cell).collect();
        println!("| {name} | {} |", cells.join(" | "));
    }
    println!(
        "| runs that gave the expected answer (the others: see failures) | | | | | {}/{} |",
        late_ok.iter().skip(warmup).filter(|ok| **ok).count(),
        late_ok.len().saturating_sub(warmup)
    );
    if !failures.is_empty() {
        println!();
        println!("{} run(s) gave an unexpected outcome:", failures.len());
        for failure in &failures {
            println!("- {failure}");
        }
    }
    drop(host);
    drop(ts);
}

/// Stored entries in the form a resume file takes.
fn resume_text(entries: &[TranscriptEntry]) -> ResumeText {
    let mut text = ResumeText::default();
    text.push_entries(entries.iter().map(TranscriptEntry::as_str));
    text
}
