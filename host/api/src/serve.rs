//! Serving the HTTP API as a process: the options that say where and how it listens
//! ([`HttpArgs`]), the listener, plain or over HTTPS with `--tls-cert`/`--tls-key`, and
//! [`api`], the API alone (`tollgate api` and the `tollgate-api` binary, for many Workers on
//! PostgreSQL). `tollgate serve` runs the same listener beside a Worker.
//!
//! Everything the options name (the certificate, its key, the token file, the webhooks file) is read and checked
//! before the store is opened or a port bound, so bad input stops the process before it serves
//! anything.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use axum::Router;
use clap::Args;

use crate::api::{ApiState, router};
use crate::tls::TlsListener;
use tollgate_process::setup::StopSignals;

/// Options of `tollgate api`.
#[derive(Debug, Args)]
pub struct ApiArgs {
    /// The store: `sqlite://PATH` or `postgres://…`.
    #[arg(long, env = "TOLLGATE_DB")]
    pub db: String,
    /// Where and how it listens.
    #[command(flatten)]
    pub http: HttpArgs,
}

/// Where and how the API listens.
#[derive(Debug, Args)]
pub struct HttpArgs {
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080", env = "TOLLGATE_LISTEN")]
    pub listen: SocketAddr,
    /// Require `Authorization: Bearer <token>` on every route but `/healthz`. On the command line
    /// it is visible to every local user (a warning says so): prefer `--token-file` or the
    /// environment.
    #[arg(long, env = "TOLLGATE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Read the bearer token from this file (one line; keep it `chmod 600`).
    #[arg(long, env = "TOLLGATE_TOKEN_FILE", value_name = "PATH")]
    pub token_file: Option<PathBuf>,
    /// The principals, their roles and groups: a TOML file of token hashes (`tollgate auth add`
    /// writes it). Beside `--token`, the token is one more admin.
    #[arg(long = "auth", env = "TOLLGATE_AUTH_FILE", value_name = "FILE")]
    pub auth: Option<PathBuf>,
    /// Serve HTTPS with this PEM certificate chain (leaf first); needs `--tls-key`.
    #[arg(long, env = "TOLLGATE_TLS_CERT", value_name = "PEM")]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of `--tls-cert`.
    #[arg(long, env = "TOLLGATE_TLS_KEY", value_name = "PEM")]
    pub tls_key: Option<PathBuf>,
    /// Send signed webhooks as this TOML file's `[[webhooks]]` say (see docs/guide/http-api.md, "Webhooks");
    /// its subscriptions replace those in the store.
    #[arg(long, env = "TOLLGATE_WEBHOOKS", value_name = "FILE")]
    pub webhooks: Option<PathBuf>,
    /// Serve the API with no authentication at all: anyone who reaches the address is an admin.
    /// Without it (and without `--token` or `--auth`) the server makes a random token into a
    /// `0600` file the client commands find (`~/.local/state/tollgate/api-<address>-<port>.token`).
    #[arg(long, conflicts_with_all = ["token", "token_file", "auth"])]
    pub insecure_open: bool,
    /// A step due this long that no Worker claimed counts as unclaimable: in `/metrics`, in
    /// `/healthz` (degraded) and in its session's snapshot.
    #[arg(long, default_value_t = 60, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub unclaimable_after_secs: u64,
    /// The longest a request may run before it is stopped and answered 503 `request_timeout`
    /// (event streams count until their first byte).
    #[arg(long, default_value_t = 30, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub request_timeout_secs: u64,
    /// Requests run at once; one more is answered 503 `overloaded` with `Retry-After: 1` at once
    /// (`/healthz` and `/metrics` are never turned away).
    #[arg(long, default_value_t = 512, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub max_concurrent_requests: u64,
}

/// What [`HttpArgs`] name, read and checked.
pub struct Http {
    listen: SocketAddr,
    /// Who may call: the token, the principals, or neither (open).
    pub auth: Arc<crate::auth::Auth>,
    /// Neither a token, an auth file nor `--insecure-open`: [`Http::bind`] makes a token.
    generate_token: bool,
    tls: Option<Arc<rustls::ServerConfig>>,
    webhooks: Option<Vec<crate::webhooks::Webhook>>,
    /// See [`HttpArgs::unclaimable_after_secs`].
    pub unclaimable_after: std::time::Duration,
    /// See [`HttpArgs::request_timeout_secs`] and [`HttpArgs::max_concurrent_requests`].
    pub limits: crate::api::edge::EdgeLimits,
}

impl HttpArgs {
    /// Reads the token and the certificate: every error names the file and the reason.
    pub fn load(&self) -> anyhow::Result<Http> {
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(crate::tls::server_config(cert, key)?),
            (Some(_), None) => anyhow::bail!(
                "--tls-cert needs --tls-key (or TOLLGATE_TLS_KEY): the certificate's private key"
            ),
            (None, Some(_)) => anyhow::bail!(
                "--tls-key needs --tls-cert (or TOLLGATE_TLS_CERT): the certificate it belongs to"
            ),
            (None, None) => None,
        };
        let token = crate::token::resolve(self.token.as_deref(), self.token_file.as_deref())?;
        let webhooks = match &self.webhooks {
            Some(path) => Some(crate::webhooks::config::load(path, &|var| std::env::var(var).ok())?),
            None => None,
        };
        let principals = self.auth.as_deref().map(crate::auth::Principals::load).transpose()?;
        if self.insecure_open {
            tracing::warn!(
                "--insecure-open: the API asks for no token; anyone who reaches {} can read every session and \
                 decide every approval",
                self.listen
            );
        }
        Ok(Http {
            listen: self.listen,
            generate_token: token.is_none() && principals.is_none() && !self.insecure_open,
            auth: Arc::new(crate::auth::Auth { token, principals }),
            tls,
            webhooks,
            unclaimable_after: std::time::Duration::from_secs(self.unclaimable_after_secs),
            limits: crate::api::edge::EdgeLimits {
                request_timeout: std::time::Duration::from_secs(self.request_timeout_secs),
                max_in_flight: usize::try_from(self.max_concurrent_requests).unwrap_or(usize::MAX),
            },
        })
    }
}

impl Http {
    /// Starts the webhook delivery loop when `--webhooks` was given; it runs until `stop`.
    pub async fn start_webhooks(
        &mut self,
        store: &Arc<dyn tollgate_store::Store>,
        stop: &tokio::sync::watch::Receiver<bool>,
    ) -> anyhow::Result<Option<tokio::task::JoinHandle<()>>> {
        let Some(hooks) = self.webhooks.take() else { return Ok(None) };
        let count = hooks.len();
        let deliverer = crate::webhooks::deliver::Deliverer::start(store.clone(), hooks)
            .await
            .context("starting the webhook deliveries")?;
        eprintln!("tollgate sending webhooks to {count} endpoint(s)");
        Ok(Some(tokio::spawn(deliverer.run(stop.clone()))))
    }

    /// Binds the address; warns when plain HTTP is served beyond loopback. A server given no way
    /// to authenticate gets a token of its own here, kept in the file the client commands look
    /// for under the bound address.
    pub async fn bind(&mut self) -> anyhow::Result<Listening> {
        let listener = tokio::net::TcpListener::bind(self.listen)
            .await
            .with_context(|| format!("listening on {}", self.listen))?;
        let local = listener.local_addr()?;
        if self.generate_token {
            let path = crate::token::generated_path(&local.ip().to_string(), local.port()).context(
                "no folder for the API's token (set XDG_STATE_HOME or HOME, or pass --token-file, --auth or \
                 --insecure-open)",
            )?;
            let token = crate::token::load_or_generate(&path)?;
            self.auth = Arc::new(crate::auth::Auth { token: Some(token), principals: None });
            eprintln!(
                "tollgate API token in {} (the tollgate client commands read it; pass --token, --auth or \
                 --insecure-open to choose otherwise)",
                path.display()
            );
        }
        match &self.tls {
            Some(config) => Ok(Listening::Tls(TlsListener::new(listener, config.clone())?, local)),
            None => {
                if !local.ip().is_loopback() {
                    tracing::warn!(
                        "serving plain HTTP on {local}, which is not a loopback address: the bearer token and \
                         every session cross the network unencrypted; pass --tls-cert and --tls-key"
                    );
                }
                Ok(Listening::Plain(listener, local))
            }
        }
    }
}

/// A bound listener, plain or TLS.
pub enum Listening {
    /// Plain HTTP on the address.
    Plain(tokio::net::TcpListener, SocketAddr),
    /// HTTPS on the address.
    Tls(TlsListener, SocketAddr),
}

impl Listening {
    /// `http://ADDR` or `https://ADDR`.
    pub fn url(&self) -> String {
        match self {
            Listening::Plain(_, addr) => format!("http://{addr}"),
            Listening::Tls(_, addr) => format!("https://{addr}"),
        }
    }

    /// Serves `app` until `stop` turns `true`.
    pub async fn serve(self, app: Router, stop: tokio::sync::watch::Receiver<bool>) -> anyhow::Result<()> {
        let until = |mut stop: tokio::sync::watch::Receiver<bool>| async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        match self {
            Listening::Plain(listener, _) => {
                // Server-Sent Events are small writes: without TCP_NODELAY each waits for the
                // client's delayed ACK (about 40 ms).
                let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
                    let _ = tcp.set_nodelay(true);
                });
                axum::serve(listener, app).with_graceful_shutdown(until(stop)).await
            }
            Listening::Tls(listener, _) => {
                axum::serve(listener, app).with_graceful_shutdown(until(stop)).await
            }
        }
        .context("the HTTP server failed")
    }
}

/// Runs `tollgate api`.
pub async fn api(args: ApiArgs) -> anyhow::Result<ExitCode> {
    let mut http = args.http.load()?;
    let store =
        tollgate_store::open(&args.db).await.with_context(|| format!("opening the store {}", args.db))?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let webhooks = http.start_webhooks(&store, &stop_rx).await?;
    let listener = http.bind().await?;
    let state =
        // No agent here: a session records the digest its request names, or none (any Worker).
        ApiState {
            store,
            auth: http.auth.clone(),
            metrics: Arc::default(),
            stopping: stop_rx.clone(),
            agent: None,
            sandbox: None,
            unclaimable_after: http.unclaimable_after,
            limits: http.limits,
            mcp_reads: None,
        };
    eprintln!("tollgate API on {} (no Worker in this process)", listener.url());
    let stopped = StopSignals::listen().nth(1);
    tokio::spawn(async move {
        stopped.await;
        let _ = stop_tx.send(true);
    });
    listener.serve(router(state), stop_rx).await?;
    if let Some(webhooks) = webhooks {
        webhooks.await.context("the webhook deliveries stopped")?;
    }
    Ok(ExitCode::SUCCESS)
}
