//! The `tollgate` binary's library: the Worker, client calls on the store, and the command line.
//!
//! | module | owns |
//! | --- | --- |
//! | [`agent`] | an agent directory: `tollgate.toml`, the options factory, `tools/` |
//! | [`worker`] | claiming, running and committing steps |
//! | [`sessions`] | client calls: start, send, resolve, snapshot |
//! | [`convert`] | the state machine's values as the store's |
//! | [`commands`] | one module per subcommand |
//!
//! `main.rs` only parses arguments and reports errors; [`run`] dispatches. Exit codes: 0 success,
//! 1 the tool answered with `is-error` (its output is still printed), 2 anything failed.

pub mod agent;
pub mod commands;
pub mod convert;
pub mod sessions;
pub mod worker;

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
    /// Run a Worker: claim and run the steps of sessions in a store.
    Worker(commands::worker::WorkerArgs),
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        match cli.command {
            Command::Tools(args) => commands::tools::run(args).await,
            Command::Worker(args) => commands::worker::run(args).await,
        }
    })
}

/// Logs to stderr; `RUST_LOG` wins over `-v`.
pub fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn,tollgate::guest=warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}
