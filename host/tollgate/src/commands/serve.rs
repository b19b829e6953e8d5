//! `tollgate serve` (the HTTP API and a Worker in one process) and `tollgate api` (the API
//! alone, for many Workers on PostgreSQL): the listener, its options and the API-only command are
//! `tollgate_api::serve`'s, shared with the `tollgate-api` binary; this module adds the Worker.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
pub use tollgate_api::serve::{ApiArgs, HttpArgs, api};

use super::worker::{WorkerArgs, build};
use crate::api::{ApiState, router};
use crate::metrics::Metrics;
use tollgate_api::process::StopSignals;
use tollgate_api::sessions::ServingAgent;

/// Options of `tollgate serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub worker: WorkerArgs,
    #[command(flatten)]
    pub http: HttpArgs,
}

/// Runs `tollgate serve`.
pub async fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let mut http = args.http.load()?;
    let metrics = Arc::new(Metrics::default());
    let (worker, store) = build(&args.worker).await?;
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

/// `digest sha256:… (locked)` or `(unlocked)`, for start-up lines.
pub fn agent_note(agent: &crate::agent::Agent) -> String {
    let how = if agent.is_locked() { "locked" } else { "unlocked: tools/ is read at every step" };
    format!("digest {} ({how})", agent.digest())
}
