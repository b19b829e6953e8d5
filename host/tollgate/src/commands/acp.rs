//! `tollgate acp --agent DIR`: the Agent Client Protocol over stdio (JSON-RPC lines on stdin and
//! stdout), the way editors (Zed, JetBrains) and ACP runners (`acpx`) start an agent, with a
//! Worker in the same process. Sessions, their turns and their pending approvals live in the
//! store: a client that goes away, or a process that is killed, loses nothing (`session/load`
//! from a new `tollgate acp` replays the session and asks its open approvals again).
//!
//! The caller is the local user, recorded as `--as NAME`. By default it may also decide the
//! approvals of the sessions it starts (the single-user setting: the editor's user is the
//! operator); `--separate-duties` leaves them to another approver (the inbox, `tollgate
//! approvals`), and the editor is told who is awaited instead.
//!
//! Only JSON-RPC reaches stdout: logs go to stderr.

use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use super::worker::{WorkerArgs, build};
use tollgate_sessions::agents::ServingAgent;
use tollgate_sessions::rights::{Caller, Role, Rules};
use tollgate_sessions::service::Sessions;

/// Options of `tollgate acp`.
#[derive(Debug, Args)]
pub struct AcpArgs {
    /// The Worker's options (the agent, the store, …).
    #[command(flatten)]
    pub worker: WorkerArgs,
    /// The name the sessions are started under (and their decisions recorded under).
    #[arg(long = "as", env = "USER", default_value = "tollgate:local")]
    pub principal: String,
    /// Separation of duties: the caller may not decide the approvals of the sessions it starts
    /// (another approver does; the client is told who is awaited).
    #[arg(long)]
    pub separate_duties: bool,
    /// Check the configuration an editor starts this with (the agent, its tools, the store, the
    /// model credential, the CLI, the box), print what it found and exit, speaking no ACP: 0 when
    /// everything would serve, 2 otherwise.
    #[arg(long)]
    pub check: bool,
}

/// Runs `tollgate acp`: until stdin closes, or SIGINT/SIGTERM.
pub async fn run(args: AcpArgs) -> anyhow::Result<ExitCode> {
    super::check_local_principal(&args.principal)?;
    let (worker, store) = build(&args.worker).await?;
    let agent = worker.agent().clone();
    if args.check {
        return check(&worker, &args).await;
    }
    let serving = ServingAgent { name: agent.name().to_owned(), digest: agent.session_agent() };
    let rules = Rules { separation_of_duties: args.separate_duties };
    let sessions = Sessions::new(store, rules, Some(serving));
    let caller = Caller {
        name: args.principal.clone(),
        roles: [Role::Client, Role::Approver].into(),
        groups: Default::default(),
        sole: false,
        agents: None,
    };
    eprintln!("tollgate ACP agent on stdio (agent {}, as {})", agent.name(), args.principal);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let worker_task = super::worker::spawn_until(worker, stop_rx.clone());
    let face = tollgate_acp::Face::new(sessions, caller, Some(agent.name().to_owned()));
    let signals = tollgate_process::setup::StopSignals::listen();
    let served = tokio::select! {
        served = tollgate_acp::serve(face, agent_client_protocol::Stdio::new()) => served,
        () = signals.nth(1) => Ok(()),
    };
    let _ = stop_tx.send(true);
    served.map_err(|why| anyhow::anyhow!("the ACP connection on stdio stopped: {why}"))?;
    worker_task.await.context("the Worker stopped")?;
    Ok(ExitCode::SUCCESS)
}

/// `tollgate acp --check`: what the configuration serves, on stdout (no ACP is spoken), once the
/// Worker was built (the agent, the store, the credential and the CLI were found, or the command
/// already failed naming what is wrong).
async fn check(worker: &tollgate_worker::worker::Worker, args: &AcpArgs) -> anyhow::Result<ExitCode> {
    let agent = worker.agent();
    let tools = agent.tools().await?;
    let names: Vec<&str> = tools.tools().iter().map(|t| t.name.as_str()).collect();
    println!(
        "agent {} ({}), {} custom tool(s): {}",
        agent.name(),
        agent.digest(),
        names.len(),
        names.join(", ")
    );
    println!("sandbox: {}", worker.sandbox().name());
    let decides = if args.separate_duties {
        "another approver decides its approvals (--separate-duties)"
    } else {
        "it decides the approvals of the sessions it starts"
    };
    println!("as {}: {decides}", args.principal);
    if tools.unavailable().is_empty() {
        println!("ok: an editor may start `tollgate acp` with these options");
        return Ok(ExitCode::SUCCESS);
    }
    for unavailable in tools.unavailable() {
        eprintln!("unavailable: tool component `{}`: {}", unavailable.component, unavailable.reason);
    }
    Ok(ExitCode::from(2))
}
