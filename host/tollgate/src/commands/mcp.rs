//! `tollgate mcp --agent DIR`: the agent's tools to one local MCP client over stdio (JSON-RPC lines
//! on stdin and stdout), with a Worker in the same process: `/mcp/{agent}`'s server
//! (`tollgate_api::mcp`) without HTTP. The caller is the local user, recorded as `--as NAME`;
//! approvals are decided through the API of a `tollgate serve` or `tollgate api` on the same store
//! (or `tollgate approvals`), and a call waiting for one holds nothing here.
//!
//! Logs go to stderr: stdout is the protocol's.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;

use super::worker::{WorkerArgs, build};
use tollgate_api::api::ApiState;
use tollgate_api::auth::Auth;
use tollgate_api::mcp::AgentServer;
use tollgate_sessions::agents::ServingAgent;
use tollgate_sessions::rights::{Caller, Role};

/// Options of `tollgate mcp`.
#[derive(Debug, Args)]
pub struct McpArgs {
    /// The Worker's options (the agent, the store, …).
    #[command(flatten)]
    pub worker: WorkerArgs,
    /// The name the calls are recorded under (as who started each call's session); an approver of
    /// another name decides them.
    #[arg(long = "as", env = "USER", default_value = "tollgate:local")]
    pub principal: String,
}

/// Runs `tollgate mcp`: until stdin closes, or SIGINT/SIGTERM.
pub async fn run(args: McpArgs) -> anyhow::Result<ExitCode> {
    super::check_local_principal(&args.principal)?;
    let (worker, store) = build(&args.worker).await?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let agent = worker.agent().clone();
    let state = ApiState {
        store,
        auth: Arc::new(Auth::default()),
        metrics: Arc::default(),
        stopping: stop_rx.clone(),
        agent: Some(ServingAgent { name: agent.name().to_owned(), digest: agent.session_agent() }),
        sandbox: Some(worker.sandbox().name()),
        unclaimable_after: std::time::Duration::from_secs(60),
        limits: Default::default(),
        mcp_reads: Some(Arc::new(tollgate_worker::worker::mcp_calls::SandboxReads::new(agent.clone()))),
    };
    let caller = Caller {
        name: args.principal.clone(),
        roles: [Role::Client].into(),
        groups: Default::default(),
        sole: false,
        agents: None,
    };
    eprintln!("tollgate MCP server on stdio (agent {}, as {})", agent.name(), args.principal);
    let worker_task = super::worker::spawn_until(worker, stop_rx.clone());
    let signals = tollgate_process::setup::StopSignals::listen();
    let served = AgentServer::local(state, caller, agent.name()).serve_stdio(signals.nth(1)).await;
    let _ = stop_tx.send(true);
    served.map_err(|why| anyhow::anyhow!("the MCP server on stdio stopped: {why}"))?;
    worker_task.await.context("the Worker stopped")?;
    Ok(ExitCode::SUCCESS)
}
