//! The `tollgate` binary's library: the command line over the workspace's crates. One module
//! of its own, [`commands`] (one per subcommand); everything else it runs is another crate's:
//!
//! | crate | what the commands use of it |
//! | --- | --- |
//! | `tollgate-api-types` | the API's wire types, its typed client, TLS (`session`, `approvals`) |
//! | `tollgate-api` | the HTTP API server, the auth file, webhooks, the web inbox (`serve`, `api`, `auth`) |
//! | `tollgate-sessions` | the session service (`demo`, `serve`, `mcp`, `acp`) |
//! | `tollgate-acp` | the ACP face (`acp`) |
//! | `tollgate-process` | logging, stop signals, metrics, the error report (every command) |
//! | `tollgate-worker` | the Worker, the model and egress proxies, deadlines, telemetry, agent directories (links wasmtime) |
//!
//! Nothing is re-exported: the tests and benches name the crate a thing lives in.
//!
//! `main.rs` only parses arguments and reports errors; [`run`] dispatches. Exit codes: 0 success,
//! 1 the tool answered with `is-error` (its output is still printed), 2 anything failed. The
//! package's other binary is `tollgate-box` (the box's init). `tollgate api` without the Worker is
//! the `tollgate-api` package's binary: built there, it compiles and links no wasmtime.

pub mod commands;

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
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Inspect and try tool components in the sandbox, without a model.
    Tools(commands::tools::ToolsArgs),
    /// Write a new tool's source: `new tool NAME --lang rust|go|js|python [--agent DIR]`.
    New(commands::scaffold::NewArgs),
    /// Build an agent's tool sources (DIR/src/*) into DIR/tools/, then check them as a Worker would.
    Build(commands::scaffold::BuildArgs),
    /// Serve an agent for development: the mock model when offline, rebuilds and reloads on change.
    Dev(commands::dev::DevArgs),
    /// Install the toolchains that build tools: `toolchain install [--lang rust|go|js|python]`.
    Toolchain(commands::scaffold::ToolchainArgs),
    /// Pin an agent's files: `agent lock DIR` writes DIR/tollgate.lock.
    Agent(commands::agent::AgentArgs),
    /// Run a Worker: claim and run the steps of sessions in a store.
    Worker(commands::worker::WorkerArgs),
    /// Serve the HTTP API with a Worker in the same process (SQLite beside the agent by default).
    Serve(Box<commands::serve::ServeArgs>),
    /// Serve the HTTP API only (Workers run elsewhere, on the same PostgreSQL database).
    Api(tollgate_api::serve::ApiArgs),
    /// Serve an agent's tools to one local MCP client over stdio, with a Worker in the process.
    Mcp(Box<commands::mcp::McpArgs>),
    /// Be an ACP agent over stdio (for editors and ACP runners), with a Worker in the process.
    Acp(Box<commands::acp::AcpArgs>),
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
/// from other processes of its user ([`tollgate_process::setup::hide_process`]); the servers create files only they may
/// read (umask `077`: the store, its WAL, the token file, segment scratch).
///
/// # Errors
/// The demo could not bind its loopback ports.
pub fn prepare(cli: &Cli) -> anyhow::Result<Prepared> {
    tollgate_process::setup::hide_process();
    if matches!(
        cli.command,
        Command::Worker(_)
            | Command::Serve(_)
            | Command::Api(_)
            | Command::Mcp(_)
            | Command::Acp(_)
            | Command::Demo(_)
    ) {
        tollgate_process::setup::private_files();
    }
    Ok(Prepared {
        demo: match &cli.command {
            Command::Demo(_) => Some(commands::demo::prepare()?),
            _ => None,
        },
    })
}

/// Runs a parsed command line.
pub fn run(cli: Cli, prepared: Prepared) -> anyhow::Result<ExitCode> {
    let demo = prepared.demo;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        match cli.command {
            Command::Demo(args) => commands::demo::run(args, demo.expect("prepared above")).await,
            Command::Tools(args) => commands::tools::run(args).await,
            Command::New(args) => commands::scaffold::new(args).await,
            Command::Build(args) => commands::scaffold::build(args).await,
            Command::Dev(args) => commands::dev::run(args).await,
            Command::Toolchain(args) => commands::scaffold::toolchain(args).await,
            Command::Agent(args) => commands::agent::run(args).await,
            Command::Worker(args) => commands::worker::run(args).await,
            Command::Serve(args) => commands::serve::serve(*args).await,
            Command::Api(args) => tollgate_api::serve::api(args).await,
            Command::Mcp(args) => commands::mcp::run(*args).await,
            Command::Acp(args) => commands::acp::run(*args).await,
            Command::Session(args) => commands::session::run(args).await,
            Command::Approvals(args) => commands::approvals::run(args).await,
            Command::Auth(args) => commands::auth::run(args),
        }
    })
}
