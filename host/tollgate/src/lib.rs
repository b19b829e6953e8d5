//! The `tollgate` binary's library: the Worker, client calls on the store, and the command line.
//!
//! | module | owns |
//! | --- | --- |
//! | [`agent`] | an agent directory: `tollgate.toml`, the options factory, `tools/` |
//! | [`config`] | `tollgate.toml` itself: its schema, defaults and errors, parsed once |
//! | [`bundle`] | an agent's files, their digests, the agent digest and `tollgate.lock` |
//! | [`worker`] | claiming, running and committing steps |
//! | [`deadlines`] | firing approval deadlines that came due: expire or escalate (every Worker) |
//! | [`sessions`] | client calls: start, send, resolve, snapshot |
//! | [`convert`] | the state machine's values as the store's |
//! | [`media`] | images: a message's checked and stored, a transcript's by reference and back, a record's for its replay |
//! | [`tool_runner`] | the sandbox's tool set as the segment's tool runner |
//! | [`metrics`] | the Prometheus counters the Worker updates |
//! | [`proxy`] | the loopback model proxy: the CLI gets a per-segment token, never the API key |
//! | [`egress`] | the egress proxy of the agents' boxes: each connection checked against `[sandbox] allowed_outbound_hosts` and logged |
//! | [`api`] | the HTTP API: sessions, approvals, live events, health, metrics |
//! | [`auth`] | principals and roles: the auth file, tokens by hash, who may decide what (401 vs 403) |
//! | [`client`] | typed calls to the HTTP API and its event stream (SSE) |
//! | [`telemetry`] | logs on stderr and the OpenTelemetry spans of segments and tool calls |
//! | [`tls`] | TLS of the API: certificate and key files, the handshaking listener, trusted CAs |
//! | [`web`] | the web inbox at `/`: HTML, CSS and JavaScript modules embedded in the binary |
//! | [`webhooks`] | `[[webhooks]]`: signed deliveries from the store's outbox, retried with backoff |
//! | [`commands`] | one module per subcommand |
//!
//! `main.rs` only parses arguments and reports errors; [`run`] dispatches. Exit codes: 0 success,
//! 1 the tool answered with `is-error` (its output is still printed), 2 anything failed.

pub mod commands;

pub use tollgate_api::{api, auth, convert, edits, media, metrics, sessions, web, webhooks};
pub use tollgate_api_types::{client, tls};
pub use tollgate_worker::{agent, bundle, config, deadlines, egress, proxy, telemetry, tool_runner, worker};

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Tollgate: Claude Code agents as durable sessions, with tools as sandboxed WebAssembly
/// components.
#[derive(Debug, Parser)]
#[command(name = "tollgate", version, about)]
pub struct Cli {
    /// More logging on stderr (`-v` info, `-vv` debug); `RUST_LOG` overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Inspect and try tool components in the sandbox, without a model.
    Tools(commands::tools::ToolsArgs),
    /// Pin an agent's files: `agent lock DIR` writes DIR/tollgate.lock.
    Agent(commands::agent::AgentArgs),
    /// Run a Worker: claim and run the steps of sessions in a store.
    Worker(commands::worker::WorkerArgs),
    /// Serve the HTTP API with a Worker in the same process (SQLite beside the agent by default).
    Serve(commands::serve::ServeArgs),
    /// Serve the HTTP API only (Workers run elsewhere, on the same PostgreSQL database).
    Api(commands::serve::ApiArgs),
    /// Start, message, show and watch sessions through the HTTP API.
    Session(commands::session::SessionArgs),
    /// List, approve and reject the tool calls waiting for a decision, through the HTTP API.
    Approvals(commands::approvals::ApprovalsArgs),
    /// Manage the API's principals: `auth add NAME --role approver --auth FILE`.
    Auth(commands::auth::AuthArgs),
    /// Run the example support agent end to end, offline unless ANTHROPIC_API_KEY is set.
    Demo(commands::demo::DemoArgs),
}

/// What must happen while the process has one thread (the demo sets environment variables).
#[derive(Debug)]
pub struct Prepared {
    demo: Option<commands::demo::Prepared>,
}

/// Call first in `main`, before logging or telemetry start any thread. The process hides itself
/// from other processes of its user ([`hide_process`]); the servers create files only they may
/// read (umask `077`: the store, its WAL, the token file, segment scratch).
///
/// # Errors
/// The demo could not bind its loopback ports.
pub fn prepare(cli: &Cli) -> anyhow::Result<Prepared> {
    hide_process();
    if matches!(cli.command, Command::Worker(_) | Command::Serve(_) | Command::Api(_) | Command::Demo(_)) {
        // SAFETY: umask(2) cannot fail and has no memory effects.
        unsafe { libc::umask(0o077) };
    }
    Ok(Prepared {
        demo: match &cli.command {
            Command::Demo(_) => Some(commands::demo::prepare()?),
            _ => None,
        },
    })
}

/// Makes this process not dumpable (`PR_SET_DUMPABLE` 0): its `/proc/<pid>/environ`, `cmdline`'s
/// neighbours `fd`, `mem` and `maps` become root's, so another process of the same user (an
/// unboxed agent's command, any local program) cannot read the API key, the tokens or the
/// database URL out of it, nor attach to it. Children are dumpable again after `exec`.
pub fn hide_process() {
    // SAFETY: prctl with these arguments only changes this process's flags.
    let hidden = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } == 0;
    if !hidden {
        tracing::warn!(error = %std::io::Error::last_os_error(), "this process could not be made non-dumpable");
    }
}

/// Runs a parsed command line.
pub fn run(cli: Cli, prepared: Prepared) -> anyhow::Result<ExitCode> {
    let demo = prepared.demo;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        match cli.command {
            Command::Demo(args) => commands::demo::run(args, demo.expect("prepared above")).await,
            Command::Tools(args) => commands::tools::run(args).await,
            Command::Agent(args) => commands::agent::run(args).await,
            Command::Worker(args) => commands::worker::run(args).await,
            Command::Serve(args) => commands::serve::serve(args).await,
            Command::Api(args) => commands::serve::api(args).await,
            Command::Session(args) => commands::session::run(args).await,
            Command::Approvals(args) => commands::approvals::run(args).await,
            Command::Auth(args) => commands::auth::run(args),
        }
    })
}
