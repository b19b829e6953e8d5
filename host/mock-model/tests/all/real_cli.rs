//! The real Claude Code CLI (the pinned npm package) against the mock: proof that the mock's SSE is what
//! the CLI reads.
//!
//! The CLI is `tools/claude-cli/node_modules/.bin/claude`, installed by `scripts/install-claude-cli.sh`.
//! When it is missing the tests fail, naming what to install, unless `TOLLGATE_SKIP_MISSING` names `cli`,
//! when they skip with a loud `!! SKIPPED` (`tollgate_store_testing::skip`). The stream-json frames are
//! written and read by hand here; the protocol crate owns the real types.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;
use tollgate_mock_model::MockModel;

use crate::util::PATIENCE;

/// A CLI run takes ~1 s on an idle machine; this is for a loaded one.
const CLI_PATIENCE: std::time::Duration = std::time::Duration::from_secs(90);

fn cli_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/claude-cli/node_modules/.bin/claude")
}

/// The installed CLI; or `None` (after `!! SKIPPED`) when it is missing and `TOLLGATE_SKIP_MISSING`
/// names `cli`, a failure when it is missing otherwise.
fn installed_cli(test: &str) -> Option<PathBuf> {
    let path = cli_path();
    if path.exists() {
        return Some(path);
    }
    let detail = format!("not installed at {}", path.display());
    tollgate_store_testing::skip::missing(tollgate_store_testing::skip::Dependency::Cli, test, &detail);
    None
}

/// What one CLI run printed.
#[derive(Debug)]
struct CliRun {
    frames: Vec<Value>,
    stderr: String,
    exit_code: Option<i32>,
}

impl CliRun {
    fn result(&self) -> &Value {
        self.frames.iter().find(|frame| frame["type"] == "result").expect("a result frame")
    }

    /// Everything a failing assertion should show.
    fn dump(&self, mock: &MockModel) -> String {
        let requests: Vec<Value> = mock
            .requests()
            .iter()
            .map(|request| json!({"path": request.path, "stream": request.is_streaming(), "reply": request.reply}))
            .collect();
        let frames: Vec<String> = self.frames.iter().map(Value::to_string).collect();
        format!(
            "exit code: {:?}\n--- stdout frames ---\n{}\n--- stderr ---\n{}\n--- mock requests ---\n{}",
            self.exit_code,
            frames.join("\n"),
            self.stderr,
            serde_json::to_string_pretty(&requests).unwrap()
        )
    }
}

/// Runs `claude --output-format stream-json --verbose --input-format stream-json` in `project` with
/// the isolated environment of docs/PROTOCOL.md, "Launch", writes one user prompt, reads frames
/// until the `result`, closes stdin and reads stdout to EOF.
async fn run_cli(cli: &Path, mock: &MockModel, project: &Path, prompt: &str) -> CliRun {
    let scratch = tempfile::tempdir().unwrap();
    let (home, config, tmp) =
        (scratch.path().join("home"), scratch.path().join("config"), scratch.path().join("tmp"));
    for dir in [&home, &config, &tmp] {
        std::fs::create_dir(dir).unwrap();
    }
    let mut command = Command::new(cli);
    command
        .args(["--output-format", "stream-json", "--verbose", "--input-format", "stream-json"])
        .current_dir(project)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // Inherited CLAUDE*/ANTHROPIC* variables and proxies would leak the developer's setup into the run.
    for (name, _) in std::env::vars_os() {
        let upper = name.to_string_lossy().to_ascii_uppercase();
        if upper.starts_with("CLAUDE") || upper.starts_with("ANTHROPIC") || upper.ends_with("_PROXY") {
            command.env_remove(&name);
        }
    }
    command
        .env("HOME", &home)
        .env("CLAUDE_CONFIG_DIR", &config)
        .env("TMPDIR", &tmp)
        .env("ANTHROPIC_BASE_URL", mock.base_url())
        .env("ANTHROPIC_API_KEY", "dummy")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("HTTPS_PROXY", "http://127.0.0.1:1")
        .env("NO_PROXY", "127.0.0.1,localhost")
        // A broken reply should fail fast, not back off for minutes.
        .env("CLAUDE_CODE_MAX_RETRIES", "1");
    let mut child = command.spawn().unwrap_or_else(|err| panic!("cannot start {}: {err}", cli.display()));

    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut stderr = child.stderr.take().unwrap();
    let stderr_task = tokio::spawn(async move {
        let mut text = String::new();
        let _ = tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut text).await;
        text
    });

    let frame = json!({"type": "user", "session_id": "", "parent_tool_use_id": null,
                       "message": {"role": "user", "content": [{"type": "text", "text": prompt}]}});
    stdin.write_all(format!("{frame}\n").as_bytes()).await.unwrap();
    stdin.flush().await.unwrap();

    let mut frames = Vec::new();
    let mut stdin = Some(stdin);
    let reading = async {
        while let Some(line) = stdout.next_line().await.unwrap() {
            let frame: Value = serde_json::from_str(&line)
                .unwrap_or_else(|err| panic!("stdout line is not JSON ({err}): {line}"));
            let is_result = frame["type"] == "result";
            frames.push(frame);
            if is_result {
                // The CLI never exits by itself after a result: closing stdin ends it.
                stdin.take();
            }
        }
    };
    let finished = tokio::time::timeout(CLI_PATIENCE, reading).await.is_ok();
    if !finished {
        let _ = child.start_kill();
    }
    let status = tokio::time::timeout(PATIENCE, child.wait()).await.ok().and_then(Result::ok);
    let stderr = stderr_task.await.unwrap_or_default();
    let run = CliRun { frames, stderr, exit_code: status.and_then(|status| status.code()) };
    assert!(finished, "the CLI did not finish within {CLI_PATIENCE:?}\n{}", run.dump(mock));
    run
}

#[tokio::test]
async fn the_real_cli_reads_the_mocks_sse_and_reports_the_scripted_answer() {
    let Some(cli) = installed_cli("the_real_cli_reads_the_mocks_sse_and_reports_the_scripted_answer") else {
        return;
    };
    let mock = MockModel::start().await.unwrap();
    let project = tempfile::tempdir().unwrap();
    let run = run_cli(&cli, &mock, project.path(), "say hello from mock").await;
    let dump = run.dump(&mock);

    let result = run.result();
    assert_eq!(result["subtype"], "success", "{dump}");
    assert_eq!(result["is_error"], false, "{dump}");
    assert_eq!(result["result"], "said: hello from mock", "{dump}");
    assert_eq!(run.exit_code, Some(0), "{dump}");
    let assistant_texts: Vec<&Value> = run
        .frames
        .iter()
        .filter(|frame| frame["type"] == "assistant")
        .flat_map(|frame| frame["message"]["content"].as_array().unwrap())
        .map(|block| &block["text"])
        .collect();
    assert_eq!(assistant_texts, vec!["said: hello from mock"], "{dump}");

    // One streamed model call and nothing else: a reply the CLI could not parse would have made it retry
    // without streaming (as CLI 2.1.328 does after a malformed stream).
    let requests = mock.requests();
    assert_eq!(requests.len(), 1, "{dump}");
    assert!(requests[0].is_messages_call() && requests[0].is_streaming(), "{dump}");
    assert_eq!(requests[0].header("x-api-key"), Some("dummy"));
    assert!(!run.stderr.contains("Could not parse"), "{dump}");
}

#[tokio::test]
async fn the_real_cli_runs_a_streamed_tool_call_and_the_mock_sees_its_result() {
    let Some(cli) = installed_cli("the_real_cli_runs_a_streamed_tool_call_and_the_mock_sees_its_result")
    else {
        return;
    };
    let mock = MockModel::start().await.unwrap();
    let project = tempfile::tempdir().unwrap();
    let note = project.path().join("note.txt");
    std::fs::write(&note, "the parcel left on Tuesday\n").unwrap();
    let script = format!("call Read {}", json!({"file_path": note}));
    let run = run_cli(&cli, &mock, project.path(), &script).await;
    let dump = run.dump(&mock);

    let result = run.result();
    assert_eq!(result["is_error"], false, "{dump}");
    let answer = result["result"].as_str().unwrap_or_default();
    assert!(answer.starts_with("called Read: "), "{dump}");
    assert!(answer.contains("the parcel left on Tuesday"), "{dump}");

    let requests = mock.message_requests();
    assert_eq!(requests.len(), 2, "{dump}");
    assert!(requests.iter().all(|request| request.is_streaming()), "{dump}");
    let tool_use =
        requests[0].reply.message().unwrap().tool_uses().next().map(|(id, ..)| id.to_owned()).unwrap();
    let second_messages = requests[1].body.as_ref().unwrap()["messages"].to_string();
    assert!(second_messages.contains(&tool_use), "the CLI sent back the mock's tool use ID\n{dump}");
}

#[tokio::test]
async fn the_real_cli_reports_a_scripted_failure_as_an_api_error_result() {
    let Some(cli) = installed_cli("the_real_cli_reports_a_scripted_failure_as_an_api_error_result") else {
        return;
    };
    let mock = MockModel::start().await.unwrap();
    let project = tempfile::tempdir().unwrap();
    let run = run_cli(&cli, &mock, project.path(), "fail").await;
    let dump = run.dump(&mock);

    let result = run.result();
    assert_eq!(result["is_error"], true, "{dump}");
    assert_eq!(result["api_error_status"], 500, "{dump}");
    assert_eq!(result["terminal_reason"], "api_error", "{dump}");
    assert!(result["result"].as_str().unwrap_or_default().contains("mock HTTP 500"), "{dump}");
    assert_eq!(run.exit_code, Some(1), "{dump}");
    // CLAUDE_CODE_MAX_RETRIES=1: the first attempt and one retry.
    assert_eq!(mock.message_requests().len(), 2, "{dump}");
}
