//! `tollgate serve` (the HTTP API and a Worker in one process) and `tollgate api` (the API
//! alone, for many Workers on PostgreSQL): the listener, its options and the API-only command are
//! `tollgate_api::serve`'s, shared with the `tollgate-api` binary; this module adds the Worker, and
//! pushes a locked agent folder it serves as the agent's newest version.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use tollgate_api::serve::HttpArgs;

use super::worker::{WorkerArgs, build};
use tollgate_api::api::{ApiState, router};
use tollgate_process::metrics::Metrics;
use tollgate_process::setup::StopSignals;
use tollgate_sessions::agents::ServingAgent;

/// Options of `tollgate serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The Worker's options.
    #[command(flatten)]
    pub worker: WorkerArgs,
    /// The HTTP API's options.
    #[command(flatten)]
    pub http: HttpArgs,
    /// Who pushes the agent folder as a version, when it is locked (default: `$USER`).
    #[arg(long = "pushed-by", env = "USER", default_value = "tollgate:local")]
    pub pushed_by: String,
}

/// Pushes the agent folder `serve --agent DIR` loaded as the agent's newest version, when it is
/// locked (a version is an immutable, locked bundle; an unlocked development folder, whose tools
/// may be dropped in while it serves, is not pushed); the line saying what happened.
///
/// # Errors
/// The store failed, or the folder changed since it was loaded.
async fn push_served(
    store: &dyn tollgate_store::Store,
    agent: &tollgate_worker::agent::Agent,
    by: &str,
) -> anyhow::Result<String> {
    let name = agent.name();
    if !agent.is_locked() {
        return Ok(format!(
            "agent `{name}` is unlocked, so it is not pushed as a version (`tollgate agent push {}` locks and pushes it)",
            agent.dir().display()
        ));
    }
    let pushed = tollgate_worker::pull::push(store, agent.dir(), name, agent.digest(), by).await?;
    Ok(match (pushed.created, pushed.current) {
        (false, _) => format!("agent {name}@{} is this folder already; nothing was pushed", pushed.version),
        (true, true) => format!("pushed {name}@{} ({}), current", pushed.version, agent.digest()),
        (true, false) => format!(
            "pushed {name}@{} ({}); this server's sessions run it, and new sessions through `tollgate api` \
             get it after: tollgate agent promote {name}@{}",
            pushed.version,
            agent.digest(),
            pushed.version
        ),
    })
}

/// Runs `tollgate serve`.
pub async fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let mut http = args.http.load()?;
    let metrics = Arc::new(Metrics::default());
    let (worker, store) = build(&args.worker).await?;
    if let Some(principals) = &http.auth.principals {
        check_approver_groups(&worker.agent().config, principals, args.http.auth.as_deref())?;
        check_high_risk_approvers(&worker.agent().config, principals, args.http.auth.as_deref())?;
    }
    if args.worker.agent.is_some() {
        eprintln!("{}", push_served(store.as_ref(), worker.agent(), &args.pushed_by).await?);
    }
    let worker = worker.with_metrics(metrics.clone());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let webhooks = http.start_webhooks(&store, &stop_rx).await?;
    let listener = http.bind().await?;
    let state = ApiState {
        store,
        auth: http.auth.clone(),
        metrics,
        stopping: stop_rx.clone(),
        agent: Some(ServingAgent {
            name: worker.agent().name().to_owned(),
            digest: worker.agent().session_agent(),
        }),
        sandbox: Some(worker.sandbox().name()),
        unclaimable_after: http.unclaimable_after,
        limits: http.limits,
        mcp_reads: Some(Arc::new(tollgate_worker::worker::mcp_calls::SandboxReads::new(
            worker.agent().clone(),
        ))),
    };
    eprintln!(
        "tollgate serving on {} (agent {}, {}, sandbox {})",
        listener.url(),
        worker.agent().dir().display(),
        agent_note(worker.agent()),
        worker.sandbox().name()
    );
    let signals = StopSignals::listen();
    let worker_task = tokio::spawn({
        let mut stop = stop_rx.clone();
        let hurry = signals.nth(2);
        async move {
            worker
                .run_until(
                    async move {
                        let _ = stop.wait_for(|s| *s).await;
                    },
                    hurry,
                )
                .await
        }
    });
    tokio::spawn(async move {
        signals.nth(1).await;
        let _ = stop_tx.send(true);
    });
    listener.serve(router(state), stop_rx).await?;
    worker_task.await.context("the Worker stopped")?;
    if let Some(webhooks) = webhooks {
        webhooks.await.context("the webhook deliveries stopped")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Refuses an agent whose policy names an `approvers` group no principal of the auth file who
/// may decide is in: its calls could never be approved. Names each, with a did-you-mean.
///
/// # Errors
/// One such group or more, each named with its tool.
fn check_approver_groups(
    config: &tollgate_worker::config::AgentConfig,
    principals: &tollgate_api::auth::Principals,
    auth_file: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    let known = principals.approver_groups();
    let mut problems = Vec::new();
    for (tool, groups) in config.policies.approver_groups() {
        for group in groups.iter().filter(|group| !known.contains(group.as_str())) {
            let hint = tollgate_engine::tool_names::closest(group, known.iter().copied())
                .map_or_else(String::new, |near| format!(" (did you mean `{near}`?)"));
            problems
                .push(format!("`{tool}`: approvers group `{group}` has no approver or admin in it{hint}"));
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    let file = auth_file.map_or_else(|| "the auth file".to_owned(), |path| path.display().to_string());
    let have = if known.is_empty() {
        "none".to_owned()
    } else {
        known.iter().map(|g| format!("`{g}`")).collect::<Vec<_>>().join(", ")
    };
    anyhow::bail!(
        "{}: [policies]: {}; the groups of {file}'s approvers and admins are {have}: such calls could never be approved",
        config.path.display(),
        problems.join("; ")
    )
}

/// Refuses an agent whose policy asks more different approvers of a high-risk call
/// (`high_risk_approvers`) than the auth file has principals who may decide it: such a call could
/// never be approved. Names each tool with who may decide it.
///
/// # Errors
/// One such tool or more.
fn check_high_risk_approvers(
    config: &tollgate_worker::config::AgentConfig,
    principals: &tollgate_api::auth::Principals,
    auth_file: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    let groups: std::collections::BTreeMap<&str, &[String]> = config.policies.approver_groups().collect();
    let mut problems = Vec::new();
    for (tool, needed) in config.policies.high_risk_approvers_by_tool() {
        let deciders = principals.deciders(groups.get(tool).copied().unwrap_or_default());
        if deciders.len() < needed as usize {
            let who = if deciders.is_empty() { "nobody".to_owned() } else { deciders.join(", ") };
            problems.push(format!(
                "`{tool}`: high_risk_approvers = {needed}, but only {} may decide it ({who})",
                deciders.len()
            ));
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    let file = auth_file.map_or_else(|| "the auth file".to_owned(), |path| path.display().to_string());
    anyhow::bail!(
        "{}: [policies]: {}; add approvers to {file} or lower high_risk_approvers: a high-risk call could never be approved",
        config.path.display(),
        problems.join("; ")
    )
}

/// `digest sha256:… (locked)` or `(unlocked)`, for start-up lines.
pub fn agent_note(agent: &tollgate_worker::agent::Agent) -> String {
    let how = if agent.is_locked() { "locked" } else { "unlocked: tools/ is read at every step" };
    format!("digest {} ({how})", agent.digest())
}
