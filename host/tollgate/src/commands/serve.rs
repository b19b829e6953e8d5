//! `tollgate serve` (the HTTP API and a Worker in one process) and `tollgate api` (the API
//! alone, for many Workers on PostgreSQL).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;

use super::worker::{WorkerArgs, build, shutdown_signal};
use crate::api::{ApiState, router};
use crate::metrics::Metrics;

/// Options of `tollgate serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub worker: WorkerArgs,
    #[command(flatten)]
    pub http: HttpArgs,
}

/// Options of `tollgate api`.
#[derive(Debug, Args)]
pub struct ApiArgs {
    /// The store: `sqlite://PATH` or `postgres://…`.
    #[arg(long, env = "TOLLGATE_DB")]
    pub db: String,
    #[command(flatten)]
    pub http: HttpArgs,
}

/// Where and how the API listens.
#[derive(Debug, Args)]
pub struct HttpArgs {
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080", env = "TOLLGATE_LISTEN")]
    pub listen: SocketAddr,
    /// Require `Authorization: Bearer <token>` on every route but `/healthz`.
    #[arg(long, env = "TOLLGATE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

/// Runs `tollgate serve`.
pub async fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let metrics = Arc::new(Metrics::default());
    let (worker, store) = build(&args.worker).await?;
    let worker = worker.with_metrics(metrics.clone());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let state = ApiState { store, token: token(args.http.token), metrics, stopping: stop_rx.clone() };
    let listener = bind(args.http.listen).await?;
    eprintln!(
        "tollgate serving on http://{} (agent {})",
        listener.local_addr()?,
        args.worker.agent.display()
    );
    let worker_task = tokio::spawn({
        let mut stop = stop_rx.clone();
        async move {
            worker
                .run(async move {
                    let _ = stop.wait_for(|s| *s).await;
                })
                .await
        }
    });
    let mut stop = stop_rx;
    let server = axum::serve(listener, router(state)).with_graceful_shutdown(async move {
        let _ = stop.wait_for(|s| *s).await;
    });
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = stop_tx.send(true);
    });
    server.await.context("the HTTP server failed")?;
    worker_task.await.context("the Worker stopped")?;
    Ok(ExitCode::SUCCESS)
}

/// Runs `tollgate api`.
pub async fn api(args: ApiArgs) -> anyhow::Result<ExitCode> {
    let store =
        tollgate_store::open(&args.db).await.with_context(|| format!("opening the store {}", args.db))?;
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let state =
        ApiState { store, token: token(args.http.token), metrics: Arc::default(), stopping: stop_rx.clone() };
    let listener = bind(args.http.listen).await?;
    eprintln!("tollgate API on http://{} (no Worker in this process)", listener.local_addr()?);
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = stop_tx.send(true);
    });
    axum::serve(listener, router(state))
        .with_graceful_shutdown(async move {
            let _ = stop_rx.wait_for(|s| *s).await;
        })
        .await
        .context("the HTTP server failed")?;
    Ok(ExitCode::SUCCESS)
}

fn token(token: Option<String>) -> Option<Arc<str>> {
    token.filter(|t| !t.trim().is_empty()).map(|t| Arc::from(t.trim()))
}

async fn bind(addr: SocketAddr) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await.with_context(|| format!("listening on {addr}"))
}
