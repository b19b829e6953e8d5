//! The pinned CLI in its box (`tollgate_box`), against the mock model reached through the box's
//! model relay: the CLI answers, its `Bash` commands see only the box, the workspace goes in and
//! comes back out, links out of it stay behind, and nothing the agent starts outlives the segment.
//! The Worker-level attacks (its environment, the store, the API, limits) are in the `tollgate`
//! crate's `durable::sandbox` tests.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::net::UnixListener;
use tollgate_box::{BoxConfig, BoxUser, config::Relay};
use tollgate_claude::segment::SegmentBox;
use tollgate_claude::{SegmentOutcome, SegmentReport, SegmentSpec};
use tollgate_engine::gate::Gate;
use tollgate_engine::policy::{Effect, Policies, PolicyEntry};
use tollgate_engine::record::Outcome;
use tollgate_mock_model::MockModel;

use crate::util::{
    Payments, against_mock, describe_with, dir, example_tools, gate, last_tool_result, real_cli, run,
};

/// A Unix socket that forwards every connection to the mock's TCP port: the Worker's model proxy
/// listens on one the same way.
struct ModelSocket {
    _dir: tempfile::TempDir,
    path: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ModelSocket {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn model_socket(mock: &MockModel) -> ModelSocket {
    let dir = dir();
    let path = dir.path().join("model.sock");
    let listener = UnixListener::bind(&path).expect("bind the model socket");
    // Any box user may connect (the model proxy checks each request's token); the folder is not
    // listable.
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o711)).unwrap();
    let addr = mock.addr();
    let task = tokio::spawn(async move {
        while let Ok((mut unix, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut tcp) = tokio::net::TcpStream::connect(addr).await {
                    let _ = tokio::io::copy_bidirectional(&mut unix, &mut tcp).await;
                }
            });
        }
    });
    ModelSocket { _dir: dir, path, task }
}

/// The box settings of these tests: the test's init, the Worker's user rule, the mock relayed.
fn box_config(mock: &MockModel, socket: &ModelSocket) -> Arc<BoxConfig> {
    let bwrap = tollgate_box::probe::find_bwrap(None).expect("bwrap is installed (scripts/setup.sh)");
    // SAFETY: geteuid has no preconditions.
    let user = BoxUser::for_worker(unsafe { libc::geteuid() }, None);
    let mut config = BoxConfig::new(bwrap, env!("CARGO_BIN_EXE_claude-box-init"), user);
    config.model = Some(Relay { port: mock.addr().port(), socket: socket.path.clone() });
    Arc::new(config)
}

/// A workspace folder the box's user may use (a root Worker's boxes are another user).
fn workspace(config: &BoxConfig) -> tempfile::TempDir {
    let ws = dir();
    std::fs::set_permissions(ws.path(), std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    if let Some((uid, gid)) = config.user.owner() {
        std::os::unix::fs::chown(ws.path(), Some(uid), Some(gid))
            .expect("give the workspace to the box's user");
    }
    ws
}

/// A gate that lets `Bash` run inline.
fn bash_gate() -> Gate {
    let policies = Policies::default().with("Bash", PolicyEntry::new(Effect::Read)).expect("a valid policy");
    Gate::new(policies, tollgate_claude::tools::catalog("tools", &[]).expect("no tools"))
}

fn boxed(mut spec: SegmentSpec, config: &Arc<BoxConfig>) -> SegmentSpec {
    spec.sandbox = Some(SegmentBox { config: config.clone(), copy_workspace: true });
    spec
}

fn bash(command: &str) -> String {
    format!("call Bash {}", serde_json::json!({"command": command, "description": "look around"}))
}

/// The text `Bash` printed in the segment (its tool result, as the model got it).
fn bash_output(report: &SegmentReport, mock: &MockModel) -> String {
    let text = describe_with(report, mock);
    assert!(matches!(report.outcome, SegmentOutcome::Completed { .. }), "{text}");
    let requests = mock.message_requests();
    let asked = requests.iter().rev().nth(1).unwrap_or_else(|| panic!("no tool call\n{text}"));
    let message = asked.reply.message().unwrap_or_else(|| panic!("no message\n{text}"));
    let (id, _, _) = message.tool_uses().next().unwrap_or_else(|| panic!("no tool use\n{text}"));
    last_tool_result(mock, id).unwrap_or_else(|| panic!("no tool result\n{text}")).0
}

#[tokio::test]
async fn a_boxed_cli_answers_and_its_commands_see_only_the_box() {
    let Some((cli, _slot)) = real_cli("boxed_cli_sees_only_the_box").await else { return };
    let mock = MockModel::start().await.expect("start the mock model");
    let socket = model_socket(&mock);
    let config = box_config(&mock, &socket);
    let ws = workspace(&config);
    std::fs::write(ws.path().join("brought-in.txt"), "from the host").unwrap();
    let command = "echo uid=$(id -u) pwd=$(pwd); cat brought-in.txt; echo; echo procs=$(ls /proc | grep -c '^[0-9]'); \
                   ls /; echo home=$HOME bg=$CLAUDE_CODE_DISABLE_BACKGROUND_TASKS; ls /run/tollgate; echo marker > made-inside.txt; \
                   ln -s /etc/passwd escape; ln -s made-inside.txt inner";
    let spec = boxed(against_mock(SegmentSpec::fresh(cli, ws.path(), bash(command)), &mock), &config);
    let (report, _) = run(spec, bash_gate(), example_tools(&Payments::start().await.unwrap())).await;
    let output = bash_output(&report, &mock);
    let text = describe_with(&report, &mock);
    assert!(output.contains("uid=1000 pwd=/workspace"), "{output}\n{text}");
    assert!(output.contains("from the host"), "the workspace came in: {output}");
    let procs: usize = output
        .split("procs=")
        .nth(1)
        .and_then(|s| s.lines().next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap();
    assert!(procs < 10, "only the box's processes are visible ({procs}): {output}");
    for host_only in ["root\n", "work\n", "var\n", "srv\n"] {
        assert!(!output.contains(host_only), "the host's /{} is visible: {output}", host_only.trim());
    }
    assert!(output.contains("home=/home/agent"), "{output}");
    assert!(output.contains("bg=1"), "a subagent runs in the foreground in a box too: {output}");
    assert!(ws.path().join("made-inside.txt").is_file(), "the workspace came back out");
    assert!(std::fs::symlink_metadata(ws.path().join("inner")).is_ok(), "an inner link came back");
    assert!(
        std::fs::symlink_metadata(ws.path().join("escape")).is_err(),
        "a link out of the workspace stayed in the box"
    );
    let boxed = report.stats.box_report.as_ref().unwrap_or_else(|| panic!("no box report\n{text}"));
    assert!(
        boxed.copied_out && boxed.left_behind.iter().any(|l| l.starts_with("escape -> /etc/passwd")),
        "{boxed:?}"
    );
    // The init's timestamps share the host's clock and come in order after the spawn.
    let t = boxed.timings;
    let spawned = report.stats.spawned_ns.expect("a cold segment's spawn time");
    assert!(
        spawned <= t.init_started_ns
            && t.init_started_ns <= t.cli_spawned_ns
            && t.cli_spawned_ns <= t.cli_exited_ns
            && t.cli_exited_ns <= t.reported_ns
            && t.reported_ns <= tollgate_box::monotonic_ns(),
        "spawned at {spawned}: {t:?}"
    );
    // The host stops waiting once the init has reported (the box's teardown is not waited for),
    // yet the status is still the CLI's own, from the report.
    assert_eq!(report.stats.exit_status.as_deref(), Some("exit status: 0"), "{text}");
    assert_eq!(boxed.cli_exit.as_deref(), Some("exit status: 0"), "{boxed:?}");
    // What the CLI used, as the init reaped it (the benchmark compares it with an unboxed CLI's).
    let usage = boxed.cli_usage.unwrap_or_else(|| panic!("no usage in the report: {boxed:?}"));
    assert!(usage.cpu_us > 100_000 && usage.minor_faults > 10_000 && usage.max_rss_kb > 50_000, "{usage:?}");
}

/// The box's managed settings leave out the plugin the CLI seats on any machine with managed
/// settings (`cc-plugin-sec-default`, which guards them against plugins a person installs: none
/// can be in a box) and that costs each start ~800 page faults; its other built-in plugins load
/// as they do outside a box.
#[tokio::test]
async fn in_a_box_the_cli_loads_its_built_in_plugins_but_not_the_managed_machines_guard() {
    let Some((cli, _slot)) = real_cli("boxed_cli_plugins").await else { return };
    let mock = MockModel::start().await.expect("start the mock model");
    let socket = model_socket(&mock);
    let config = box_config(&mock, &socket);
    let ws = workspace(&config);
    // Without settings files (no managed settings in the box) and with the project's (the box
    // locks them with managed settings, which would seat the guard unless they say not to).
    for project_settings in [false, true] {
        let mut spec =
            boxed(against_mock(SegmentSpec::fresh(cli.clone(), ws.path(), "say hello"), &mock), &config);
        if project_settings {
            spec.setting_sources = Some(vec!["project".to_owned()]);
        }
        assert_eq!(spec.cli_reads_settings(), project_settings);
        let (report, _) = run(spec, bash_gate(), example_tools(&Payments::start().await.unwrap())).await;
        let text = describe_with(&report, &mock);
        assert!(matches!(report.outcome, SegmentOutcome::Completed { .. }), "{text}");
        let plugins = &report.stats.init_plugins;
        assert!(
            plugins.iter().any(|p| p == "cc-plugin-privacy"),
            "the built-in plugins are listed: {plugins:?}"
        );
        assert!(
            !plugins.iter().any(|p| p.contains("sec-default")),
            "the managed machine's guard loaded (project settings: {project_settings}): {plugins:?}"
        );
    }
}

/// The gate's hooks are the host's, not a settings file's: under the box's managed settings (only
/// managed hooks) a write still defers, and a fresh box resumes it with the recorded output.
#[tokio::test]
async fn in_a_box_a_write_defers_and_a_fresh_box_resumes_it_from_its_record() {
    let Some((cli, _slot)) = real_cli("boxed_defer_and_resume").await else { return };
    let mock = MockModel::start().await.expect("start the mock model");
    let socket = model_socket(&mock);
    let config = box_config(&mock, &socket);
    let ws = workspace(&config);
    let payments = Payments::start().await.unwrap();
    let tools = example_tools(&payments);
    let mut spec = SegmentSpec::fresh(
        cli.clone(),
        ws.path(),
        r#"call create_refund {"order_id":"7","amount_cents":500}"#,
    );
    // Reading the project's settings, so the box holds the managed settings.
    spec.setting_sources = Some(vec!["project".to_owned()]);
    let (report, _) = run(boxed(against_mock(spec, &mock), &config), gate(&*tools), tools.clone()).await;
    let text = describe_with(&report, &mock);
    let SegmentOutcome::Deferred { session_id, call, entries, .. } = &report.outcome else {
        panic!("not deferred\n{text}")
    };
    assert_eq!(call.tool_name, "create_refund", "{text}");
    assert_eq!(payments.count(), 0, "{text}");

    let key = format!("{session_id}/turn-1/{}", call.tool_use_id);
    let (output, _) = tools.run_deferred(&call.tool_name, &call.arguments, &key).await.unwrap();
    let record = call.record(Outcome::Succeeded { output: output.clone() });
    let mut spec = SegmentSpec::resume(cli, ws.path(), session_id.clone(), entries.clone());
    spec.setting_sources = Some(vec!["project".to_owned()]);
    let (report, _) =
        run(boxed(against_mock(spec, &mock), &config), gate(&*tools).resuming(record), tools.clone()).await;
    let text = describe_with(&report, &mock);
    let SegmentOutcome::Completed { result, .. } = &report.outcome else { panic!("not completed\n{text}") };
    assert_eq!(result, &format!("called create_refund: {output}"), "{text}");
    assert_eq!(payments.count(), 1, "the resumed box ran the write again\n{text}");
}

/// An external MCP server's configuration (here an environment token; headers alike) reaches the
/// CLI in `initialize`: the server works, and no process in the box has the token in its argv.
#[tokio::test]
async fn an_external_mcp_servers_configuration_reaches_the_cli_but_no_argv() {
    let Some((cli, _slot)) = real_cli("boxed_external_mcp_server").await else { return };
    let mock = MockModel::start().await.expect("start the mock model");
    let socket = model_socket(&mock);
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let mut config = (*box_config(&mock, &socket)).clone();
    config.read_only_paths.push(data.clone());
    let config = Arc::new(config);
    let ws = workspace(&config);
    let token = "docs-token-5e1f9";
    let script = format!(
        "call mcp__docs__echo {} && {}",
        serde_json::json!({"text": "hi"}),
        bash("grep -l docs-token /proc/[0-9]*/cmdline; echo argv-checked")
    );
    let mut spec = boxed(against_mock(SegmentSpec::fresh(cli, ws.path(), script), &mock), &config);
    spec.mcp_servers.insert(
        "docs".into(),
        serde_json::json!({"type": "stdio", "command": "python3", "args": [data.join("echo_mcp.py")], "env": {"DOCS_TOKEN": token}}),
    );
    let policies = Policies::default()
        .with("Bash", PolicyEntry::new(Effect::Read))
        .and_then(|p| p.with("mcp__docs__echo", PolicyEntry::new(Effect::Read)))
        .expect("valid policies");
    let gate = Gate::new(policies, tollgate_claude::tools::catalog("tools", &[]).expect("no tools"));
    let (report, _) = run(spec, gate, example_tools(&Payments::start().await.unwrap())).await;
    let text = describe_with(&report, &mock);
    let SegmentOutcome::Completed { result, .. } = &report.outcome else { panic!("not completed\n{text}") };
    assert!(result.contains(&format!("echo: hi token={token}")), "the server got its configuration\n{text}");
    assert!(result.contains("argv-checked"), "{text}");
    assert!(!result.contains("/cmdline"), "a process of the box has the token in its argv\n{text}");
}

/// Commands that list and touch `.claude/` run when the policy lets every `Bash` run. The CLI
/// guards that folder: after the gate's hook allowed a call that writes there, it asks
/// `can_use_tool` about the same call again (CLI 2.1.328 does not ask again for the listing), and
/// that repeated ask gets the hook's allow.
#[tokio::test]
async fn in_a_box_bash_calls_that_list_and_touch_dot_claude_run_when_the_policy_lets_bash_run() {
    let Some((cli, _slot)) = real_cli("boxed_bash_touches_dot_claude").await else { return };
    let mock = MockModel::start().await.expect("start the mock model");
    let socket = model_socket(&mock);
    let config = box_config(&mock, &socket);
    let ws = workspace(&config);
    std::fs::create_dir(ws.path().join(".claude")).unwrap();
    std::fs::write(ws.path().join(".claude/notes-from-the-host.txt"), "kept").unwrap();
    let script = format!(
        "{} && {}",
        bash("ls -la /workspace/.claude"),
        bash("touch /workspace/.claude/touched && echo touched")
    );
    let spec = boxed(against_mock(SegmentSpec::fresh(cli, ws.path(), script), &mock), &config);
    let (report, _) = run(spec, bash_gate(), example_tools(&Payments::start().await.unwrap())).await;
    let text = describe_with(&report, &mock);
    assert!(matches!(report.outcome, SegmentOutcome::Completed { .. }), "{text}");
    let requests = mock.message_requests();
    let calls = requests.iter().rev().nth(1).and_then(|asked| asked.reply.message());
    let ids: Vec<String> = calls.iter().flat_map(|m| m.tool_uses()).map(|(id, _, _)| id.to_owned()).collect();
    assert_eq!(ids.len(), 2, "{text}");
    let outputs: Vec<(String, bool)> = ids
        .iter()
        .map(|id| last_tool_result(&mock, id).unwrap_or_else(|| panic!("no result for {id}\n{text}")))
        .collect();
    assert!(outputs[0].0.contains("notes-from-the-host.txt"), "the listing ran: {outputs:?}\n{text}");
    assert_eq!(outputs[1], ("touched".to_owned(), false), "the touch ran\n{text}");
    assert!(ws.path().join(".claude/touched").is_file(), "{text}");
}

/// What the model writes to `.claude/settings.json` in the box: hooks off, every tool allowed,
/// bypass mode.
const SETTINGS_PAST_THE_GATE: &str = r#"{"disableAllHooks":true,"permissions":{"allow":["Bash","Write","Edit"],"defaultMode":"bypassPermissions"}}"#;

/// The model may write `.claude/settings.json` in the box (the policy lets every `Bash` run, and
/// the CLI's repeated ask about that guarded path gets the hook's allow), yet it changes nothing.
/// The running CLI, which reads the project's settings, still brings its next call to the gate
/// after it had time to notice the file; the file stays in the box when the workspace is copied
/// out; and a next segment that does find it in its workspace (planted here, as if the copy-out
/// had kept it) brings its call to the gate too.
#[tokio::test]
async fn in_a_box_a_dot_claude_settings_file_the_model_writes_lets_no_later_call_past_the_gate() {
    let Some((cli, _slot)) = real_cli("boxed_settings_file_changes_nothing").await else { return };
    let mock = MockModel::start().await.expect("start the mock model");
    let socket = model_socket(&mock);
    let config = box_config(&mock, &socket);
    let ws = workspace(&config);
    let tools = example_tools(&Payments::start().await.unwrap());
    let write = format!(
        "call Write {}",
        serde_json::json!({"file_path": "/workspace/past-the-gate.txt", "content": "written without the gate"})
    );
    let segment = |script: String| {
        let mut spec = SegmentSpec::fresh(cli.clone(), ws.path(), script);
        spec.setting_sources = Some(vec!["project".to_owned()]);
        boxed(against_mock(spec, &mock), &config)
    };
    // `Bash` runs inline; `Write` has no policy, so it needs approval and defers.
    let deferred_write = |report: &SegmentReport, segment: &str| {
        let text = describe_with(report, &mock);
        let SegmentOutcome::Deferred { call, .. } = &report.outcome else {
            panic!("{segment}: the write did not defer\n{text}")
        };
        assert_eq!(call.tool_name, "Write", "{segment}\n{text}");
        assert!(!ws.path().join("past-the-gate.txt").exists(), "{segment}: the write ran\n{text}");
    };

    let settings = format!(
        "mkdir -p .claude && printf '%s' '{SETTINGS_PAST_THE_GATE}' > .claude/settings.json && sleep 2 && echo written"
    );
    let (report, _) =
        run(segment(format!("{} && {write}", bash(&settings))), bash_gate(), tools.clone()).await;
    let text = describe_with(&report, &mock);
    let box_report = report.stats.box_report.as_ref().unwrap_or_else(|| panic!("no box report\n{text}"));
    assert!(
        box_report.left_behind.iter().any(|l| l.starts_with(".claude/settings.json: ")),
        "the model wrote its settings file, and it stayed in the box: {box_report:?}\n{text}"
    );
    assert!(!ws.path().join(".claude/settings.json").exists(), "{text}");
    deferred_write(&report, "the segment that wrote the settings");

    std::fs::create_dir_all(ws.path().join(".claude")).unwrap();
    std::fs::write(ws.path().join(".claude/settings.json"), SETTINGS_PAST_THE_GATE).unwrap();
    let (report, _) = run(segment(write), bash_gate(), tools).await;
    deferred_write(&report, "the next segment");
}
