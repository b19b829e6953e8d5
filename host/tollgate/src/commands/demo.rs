//! `tollgate demo`: the example support agent end to end on the embedded SQLite store.
//!
//! It sends "Refund order 7", shows the read tool running inline, the refund waiting for
//! approval (a row, no process), approves it as a human would, and prints the answer and the
//! tool record. Without a model credential (`ANTHROPIC_API_KEY`, `ANTHROPIC_AUTH_TOKEN` or
//! `CLAUDE_CODE_OAUTH_TOKEN`) it starts the scripted mock model (and says so) and a stand-in
//! payments service on loopback; with one it uses Claude.
//!
//! [`prepare`] runs before the async runtime starts: it picks the loopback ports and sets the
//! environment the CLI and the payments tool's manifest read (setting variables is only sound
//! while the process has one thread).

use std::io::Write as _;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use tollgate_claude::{CliBinary, CliLocator};
use tollgate_engine::events::{EventKind, InterruptOpened, Payload};
use tollgate_engine::session::client::HumanDecision;
use tollgate_sandbox::{Sandbox, SandboxConfig};

use super::mock::{MockOptions, MockProcess};
use tollgate_sessions::agents::ServingAgent;
use tollgate_sessions::{reads, writes};
use tollgate_worker::agent::Agent;
use tollgate_worker::worker::{Worker, WorkerConfig};

/// What the demo says.
pub const PROMPT: &str = "Refund order 7";

/// The mock model's script for [`PROMPT`]: look the order up (inline) and refund it (deferred).
pub const MOCK_SCRIPT: &str = r#"call lookup_order {"order_id":"7"} && call create_refund {"order_id":"7","amount_cents":4200,"reason":"arrived broken"}"#;

/// Options of `tollgate demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// The agent directory (built by scripts/build-examples.sh).
    #[arg(long, default_value = "examples/agents/support")]
    pub agent: PathBuf,
    /// The store (default: a fresh SQLite file in a temporary directory).
    #[arg(long)]
    pub db: Option<String>,
    /// The `claude` binary (default: `$TOLLGATE_CLAUDE_CLI`, `tools/claude-cli` under the current
    /// directory, then `PATH`).
    #[arg(long)]
    pub claude: Option<PathBuf>,
    /// Do not approve the refund; leave it waiting and print how to decide it.
    #[arg(long)]
    pub no_approve: bool,
    /// The box the agent's CLI runs in.
    #[command(flatten)]
    pub sandbox: super::worker::SandboxArgs,
}

/// The loopback ports and services chosen before the runtime starts.
#[derive(Debug)]
pub struct Prepared {
    mock_port: Option<u16>,
    payments_port: Option<u16>,
}

/// Chooses ports and sets the environment; call before any thread starts.
///
/// # Errors
/// No loopback port could be bound.
pub fn prepare() -> anyhow::Result<Prepared> {
    // Any credential the model proxy swaps in (an API key, an auth token, a subscription's OAuth
    // token) means Claude.
    let offline = matches!(
        tollgate_worker::proxy::Upstream::from_env().credential,
        tollgate_worker::proxy::Credential::None
    );
    let mock_port = if offline {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        // SAFETY: called from `main` before the runtime and any other thread exist.
        unsafe {
            std::env::set_var("ANTHROPIC_BASE_URL", format!("http://127.0.0.1:{port}"));
            std::env::set_var("ANTHROPIC_API_KEY", "offline-demo");
            std::env::set_var("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
        }
        Some(port)
    } else {
        None
    };
    let payments = if std::env::var_os("PAYMENTS_URL").is_none() {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        // SAFETY: as above.
        unsafe { std::env::set_var("PAYMENTS_URL", format!("http://127.0.0.1:{port}")) };
        Some(port)
    } else {
        None
    };
    Ok(Prepared { mock_port, payments_port: payments })
}

/// Runs `tollgate demo`.
pub async fn run(args: DemoArgs, prepared: Prepared) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout();
    if !args.agent.join("tools/payments.wasm").is_file() {
        bail!(
            "{} has no built tools; run scripts/build-examples.sh first (scripts/demo.sh does both)",
            args.agent.display()
        );
    }
    // The mock model and the payments stand-in are one child process (`commands::mock`); with a
    // credential and a `PAYMENTS_URL`, none.
    let options = MockOptions {
        port: prepared.mock_port.unwrap_or(0),
        scenarios: vec![(PROMPT.to_owned(), MOCK_SCRIPT.to_owned())],
        payments: prepared.payments_port,
    };
    let mock = if prepared.mock_port.is_some() || prepared.payments_port.is_some() {
        let announce = |line: &str| println!("  {line}");
        Some(MockProcess::start(&options, announce).await.context("starting the mock model")?)
    } else {
        None
    };
    match (&mock, prepared.mock_port) {
        (Some(mock), Some(_)) => {
            println!(
                "No model credential (ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN or CLAUDE_CODE_OAUTH_TOKEN) is set: using the scripted mock model on {} (no network).",
                mock.base_url
            );
            println!("  It answers {PROMPT:?} with: {MOCK_SCRIPT}");
        }
        _ => println!("A model credential is set: using Claude."),
    }
    if let Some(url) = mock.as_ref().and_then(|mock| mock.payments_url.as_ref()) {
        println!("A stand-in payments service listens on {url}.");
    }

    let scratch = tempfile::Builder::new().prefix("tollgate-demo-").tempdir()?;
    let db =
        args.db.clone().unwrap_or_else(|| format!("sqlite://{}", scratch.path().join("demo.db").display()));
    let sandbox = Sandbox::new(SandboxConfig::default())?;
    let agent = Arc::new(Agent::load(&args.agent, sandbox).await?);
    let store = tollgate_store::open(&db).await.with_context(|| format!("opening {db}"))?;
    let locator = CliLocator {
        configured: args.claude.clone(),
        workspace_root: std::env::current_dir().ok(),
        ..CliLocator::default()
    };
    let cli = CliBinary::locate(&locator).await.context("finding the claude CLI (run scripts/setup.sh)")?;
    let config = WorkerConfig {
        worker_id: "demo-worker".into(),
        concurrency: 2,
        sandbox: args.sandbox.mode()?,
        ..WorkerConfig::default()
    };
    let serving = ServingAgent { name: agent.name().to_owned(), digest: agent.session_agent() };
    let worker = Worker::new(store.clone(), agent, cli, config);
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let worker_task = tokio::spawn(async move {
        worker
            .run(async move {
                let _ = stop_rx.wait_for(|s| *s).await;
            })
            .await
    });
    println!("Store: {db}\n");

    let session = format!("demo-{}", std::process::id());
    writes::start_by(store.as_ref(), &session, (&serving).into(), tollgate_sessions::rights::LOCAL).await?;
    writes::send(store.as_ref(), &session, PROMPT, Some("demo-prompt")).await?;
    println!("user> {PROMPT}");

    let started = Instant::now();
    let mut after = 0;
    let mut in_text = false;
    let outcome = 'events: loop {
        if started.elapsed() > Duration::from_secs(300) {
            break 'events Err(anyhow::anyhow!("the demo did not finish within 5 minutes"));
        }
        let events = store.read_events(&session, after, 200).await?;
        if events.is_empty() {
            store.event_signal(&session).wait(Duration::from_millis(200)).await;
            continue;
        }
        for event in events {
            after = event.seq;
            let Some(kind) = EventKind::parse(&event.kind) else { continue };
            let payload = Payload::parse(kind, event.payload.get())
                .with_context(|| format!("event {} ({}) of the demo session", event.seq, event.kind))?;
            if kind != EventKind::TextDelta && in_text {
                println!();
                in_text = false;
            }
            match payload {
                Payload::TextDelta(block) => {
                    if !in_text {
                        print!("assistant> ");
                        in_text = true;
                    }
                    print!("{}", block.text);
                    out.flush()?;
                }
                Payload::ToolCallStarted(call) if !call.deferred => {
                    println!("  -> {} runs inline (read-only, no approval)", call.tool_name);
                }
                Payload::ToolCallFinished(call) if !call.deferred => {
                    println!("  <- {} {}", call.tool_name, call.status);
                }
                Payload::InterruptOpened(opened) => {
                    let InterruptOpened { interrupt_id: id, request } = *opened;
                    println!(
                        "  || {} {} waits for approval: the segment ended, no process is held, the session is a row.",
                        request.tool_name, request.arguments
                    );
                    if args.no_approve {
                        println!("\nDecide it with the API, or: tollgate approvals approve {session} {id}");
                        break 'events Ok(false);
                    }
                    println!(
                        "  $ tollgate approvals approve {session} {id}    (the demo approves it for you)"
                    );
                    let decision = HumanDecision {
                        approved: true,
                        message: None,
                        updated_input: None,
                        ..Default::default()
                    };
                    writes::resolve(store.as_ref(), &session, &id, &decision, Some("demo-approval")).await?;
                }
                Payload::ToolCallStarted(call) => println!(
                    "  -> {} runs once, in its own durable step (attempt {})",
                    call.tool_name, call.attempt
                ),
                Payload::ToolCallFinished(call) => println!(
                    "  <- {} recorded {}; the CLI resumes with the recorded result",
                    call.tool_name, call.status
                ),
                Payload::AttemptFailed(failed) => println!("  (attempt failed, retrying: {})", failed.error),
                Payload::TurnCompleted(_) => break 'events Ok(true),
                Payload::TurnFailed(failed) => {
                    break 'events Err(anyhow::anyhow!("the turn failed: {}", failed.error));
                }
                _ => {}
            }
        }
    };
    if in_text {
        println!();
    }
    let _ = stop_tx.send(true);
    let completed = outcome?;
    let snapshot = reads::snapshot(store.as_ref(), &session).await?.context("the demo session vanished")?;
    if completed {
        let answer = snapshot.messages.iter().rev().find(|m| m.role == "assistant").map(|m| m.text.as_str());
        println!("\nFinal answer:\n{}\n", answer.unwrap_or("(none)"));
    }
    println!("Tool call records:");
    println!("  {:<16} {:<16} OUTPUT", "TOOL", "STATUS");
    for call in &snapshot.tool_calls {
        println!(
            "  {:<16} {:<16} {}",
            call.tool_name,
            call.state.name(),
            call.state.text().unwrap_or("null")
        );
    }
    let u = snapshot.usage;
    println!(
        "\nUsage: {} model calls, {} input tokens ({} cached), {} output tokens; session {session} is {}.",
        u.model_calls, u.input_tokens, u.cached_input_tokens, u.output_tokens, snapshot.status
    );
    worker_task.await.ok();
    Ok(ExitCode::SUCCESS)
}
