//! Shared helpers: configured CLIs and specs, the example tools, a payments service, and failure
//! messages that carry everything the CLI said.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Semaphore, SemaphorePermit, mpsc};
use tollgate_claude::tools::{CallFuture, ToolOutput, ToolRunError, ToolRunner, ToolSpec, catalog};
use tollgate_claude::{
    CliBinary, CliLocator, SegmentEvent, SegmentOutcome, SegmentReport, SegmentSpec, run_segment,
};
use tollgate_engine::gate::{DeferredCall, Gate};
use tollgate_engine::policy::{Annotations, Effect, Policies, PolicyEntry};
use tollgate_mock_model::MockModel;

/// Real-CLI runs cost ~240 MB and a core each: at most two at once (2 cores, shared).
static REAL_CLI_SLOTS: Semaphore = Semaphore::const_new(2);

/// A unique temporary directory, removed on drop.
pub fn dir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("tollgate-claude-test-").tempdir().expect("make a temp dir")
}

/// The scripted fake CLI.
pub fn fake_cli() -> CliBinary {
    CliBinary::unchecked(env!("CARGO_BIN_EXE_fake-claude"))
}

/// The pinned real CLI with its version checked, plus a slot; `None` (after `!! SKIPPED`) when it
/// is not installed and `TOLLGATE_SKIP_MISSING` names `cli`, a failure when it is not installed
/// otherwise ([`tollgate_testing::skip`]).
pub async fn real_cli(test: &str) -> Option<(CliBinary, SemaphorePermit<'static>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let locator = CliLocator { workspace_root: Some(root.clone()), ..CliLocator::default() };
    let pinned = root.join(tollgate_claude::cli::PINNED_INSTALL);
    if !pinned.exists() {
        let detail = format!("not installed at {}", pinned.display());
        tollgate_testing::skip::missing(tollgate_testing::skip::Dependency::Cli, test, &detail);
        return None;
    }
    let cli =
        CliBinary::locate(&locator).await.unwrap_or_else(|err| panic!("the pinned CLI is unusable: {err}"));
    let permit = REAL_CLI_SLOTS.acquire().await.expect("the semaphore is never closed");
    Some((cli, permit))
}

/// A spec for the mock model: base URL, dummy key, a refused proxy for everything else.
pub fn against_mock(mut spec: SegmentSpec, mock: &MockModel) -> SegmentSpec {
    spec = spec
        .env("ANTHROPIC_BASE_URL", mock.base_url())
        .env("ANTHROPIC_API_KEY", "dummy")
        .env("HTTPS_PROXY", "http://127.0.0.1:1")
        .env("HTTP_PROXY", "http://127.0.0.1:1")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("CLAUDE_CODE_MAX_RETRIES", "1");
    spec.timeout = Duration::from_secs(120);
    spec
}

/// Runs a segment and collects its events.
pub async fn run(
    spec: SegmentSpec,
    gate: Gate,
    runner: Arc<dyn ToolRunner>,
) -> (SegmentReport, Vec<SegmentEvent>) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let report = run_segment(spec, gate, runner, Some(tx)).await;
    let mut events = Vec::new();
    while let Ok(event) = rx.try_recv() {
        events.push(event);
    }
    (report, events)
}

/// Everything a failing assertion should show about a run.
pub fn describe(report: &SegmentReport) -> String {
    let outcome = match &report.outcome {
        SegmentOutcome::Completed { session_id, result, entries, usage, .. } => {
            format!("Completed session {session_id}: {result:?} ({} entries, {usage:?})", entries.len())
        }
        SegmentOutcome::Deferred { session_id, call, entries, .. } => {
            format!("Deferred session {session_id}: {call:?} ({} entries)", entries.len())
        }
        SegmentOutcome::Failed { error } => format!("Failed: {error}"),
        other => format!("{other:?}"),
    };
    let stats = &report.stats;
    format!(
        "outcome: {outcome}\npid {:?}, exit {:?}, model calls {}, total {:?}\nresult frame: {:?}\n--- CLI stderr ---\n{}",
        stats.pid, stats.exit_status, stats.model_calls, stats.total, stats.result, stats.stderr_tail
    )
}

/// The same, with the mock's requests (path and reply) appended.
pub fn describe_with(report: &SegmentReport, mock: &MockModel) -> String {
    let requests: Vec<Value> =
        mock.requests().iter().map(|r| json!({"path": r.path, "reply": r.reply})).collect();
    format!(
        "{}\n--- mock requests ---\n{}",
        describe(report),
        serde_json::to_string_pretty(&requests).unwrap_or_default()
    )
}

/// The tool result for `tool_use_id` in the mock's last model call.
pub fn last_tool_result(mock: &MockModel, tool_use_id: &str) -> Option<(String, bool)> {
    mock.message_requests().last()?.tool_result(tool_use_id)
}

/// The policies of the reference adapters' support agent: `create_refund` is a non-idempotent write,
/// `lookup_order` reads (its annotations), `Bash` has no policy (unclassified: approval); and
/// `Agent` (the `Task` tool, as the CLI names it in its hooks) reads, so a subagent runs inline.
pub fn policies() -> Policies {
    Policies::default()
        .with("create_refund", PolicyEntry::new(Effect::NonIdempotentWrite))
        .and_then(|p| p.with("Agent", PolicyEntry::new(Effect::Read)))
        .expect("a valid policy")
}

/// A gate for `runner`'s tools.
pub fn gate(runner: &dyn ToolRunner) -> Gate {
    Gate::new(policies(), catalog("tools", &runner.tools()).expect("valid tool names"))
}

pub use tollgate_mock_model::payments::Payments;

/// The example tools as an in-test runner, answering as the example guests do
/// (`examples/tools/rust/{orders,payments}`): `lookup_order` (read-only; orders "1" to "99",
/// delivered, 600 cents times the number) and `create_refund` (open-world; a deferred call POSTs
/// to `payments` with its idempotency key). The guests themselves run through the sandbox in the
/// `tollgate` crate's tests; this crate does not depend on the sandbox.
pub struct ExampleTools {
    payments: std::net::SocketAddr,
}

/// The example tools for `payments`.
pub fn example_tools(payments: &Payments) -> Arc<ExampleTools> {
    Arc::new(ExampleTools { payments: payments.addr })
}

impl ExampleTools {
    /// Runs a deferred call in its step, with its idempotency key: the output's text and whether
    /// it is an error result.
    pub async fn run_deferred(
        &self,
        name: &str,
        arguments: &Value,
        key: &str,
    ) -> Result<(String, bool), String> {
        match name {
            "create_refund" => self.post_refund(arguments, key).await,
            "lookup_order" => Ok(lookup_order(arguments)),
            other => Err(format!("no tool {other}")),
        }
    }

    /// `POST /refunds` with the `Idempotency-Key` header, as the guest sends it.
    async fn post_refund(&self, arguments: &Value, key: &str) -> Result<(String, bool), String> {
        let body = arguments.to_string();
        let request = format!(
            "POST /refunds HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\nidempotency-key: {key}\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n{body}",
            self.payments,
            body.len()
        );
        let mut socket = tokio::net::TcpStream::connect(self.payments).await.map_err(|e| e.to_string())?;
        socket.write_all(request.as_bytes()).await.map_err(|e| e.to_string())?;
        let mut response = String::new();
        socket.read_to_string(&mut response).await.map_err(|e| e.to_string())?;
        let (head, answer) = response.split_once("\r\n\r\n").ok_or("no HTTP answer")?;
        match head.split_whitespace().nth(1) {
            Some(status) if status.starts_with('2') => Ok((answer.to_owned(), false)),
            Some(status) if status.starts_with('4') => Ok((format!("refund refused: {answer}"), true)),
            other => Err(format!("payments service returned {other:?}")),
        }
    }
}

/// `lookup_order`'s answer: the order as JSON, or a tool-level error.
fn lookup_order(arguments: &Value) -> (String, bool) {
    let id = arguments["order_id"].as_str().unwrap_or_default();
    match id.parse::<u64>() {
        Ok(n @ 1..=99) if n.to_string() == id => (
            format!(
                r#"{{"order_id":"{id}","status":"delivered","total_cents":{},"currency":"EUR"}}"#,
                600 * n
            ),
            false,
        ),
        _ => (format!("order {id} not found"), true),
    }
}

impl ToolRunner for ExampleTools {
    fn tools(&self) -> Vec<ToolSpec> {
        vec![
            ToolSpec {
                name: "lookup_order".into(),
                description: "Looks an order up by its ID: its status, total and currency.".into(),
                input_schema: json!({
                    "type": "object",
                    "properties": {"order_id": {"type": "string", "description": "The order's ID, such as \"7\"."}},
                    "required": ["order_id"],
                    "additionalProperties": false,
                }),
                annotations: Annotations { read_only: true, idempotent: true, ..Annotations::default() },
            },
            ToolSpec {
                name: "create_refund".into(),
                description: "Refunds part or all of an order to the customer's original payment method."
                    .into(),
                input_schema: json!({
                    "type": "object",
                    "properties": {
                        "order_id": {"type": "string", "description": "The order to refund, such as \"7\"."},
                        "amount_cents": {"type": "integer", "minimum": 1, "description": "The amount to refund, in cents."},
                        "reason": {"type": "string", "description": "Why, in a few words."},
                    },
                    "required": ["order_id", "amount_cents"],
                    "additionalProperties": false,
                }),
                annotations: Annotations { open_world: true, ..Annotations::default() },
            },
        ]
    }

    fn call<'a>(&'a self, name: &'a str, arguments: &'a Value) -> CallFuture<'a> {
        Box::pin(async move {
            match name {
                "lookup_order" => {
                    let (text, is_error) = lookup_order(arguments);
                    Ok(ToolOutput { is_error, ..ToolOutput::text(text) })
                }
                "create_refund" => {
                    Err(ToolRunError { message: "create_refund must run as a deferred call".into() })
                }
                other => Err(ToolRunError { message: format!("no tool {other}") }),
            }
        })
    }
}

/// A read-only `echo` tool, for the fake CLI.
pub struct Echo;

impl ToolRunner for Echo {
    fn tools(&self) -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "echo".into(),
            description: "Echo the given text back.".into(),
            input_schema: json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
            annotations: Annotations { read_only: true, ..Annotations::default() },
        }]
    }

    fn call<'a>(&'a self, _name: &'a str, arguments: &'a Value) -> CallFuture<'a> {
        Box::pin(async move {
            match arguments["text"].as_str() {
                Some(text) => Ok(ToolOutput::text(format!("echo: {text}"))),
                None => Err(ToolRunError { message: "no text".into() }),
            }
        })
    }
}

/// The result of a segment that completed; panics with `text` (the segment described) otherwise.
pub fn completed(report: &SegmentReport, text: &str) -> String {
    match &report.outcome {
        SegmentOutcome::Completed { result, .. } => result.clone(),
        _ => panic!("expected Completed\n{text}"),
    }
}

/// The call of a segment that deferred; panics with `text` (the segment described) otherwise.
pub fn deferred(report: &SegmentReport, text: &str) -> DeferredCall {
    match &report.outcome {
        SegmentOutcome::Deferred { call, .. } => call.clone(),
        _ => panic!("expected Deferred\n{text}"),
    }
}
