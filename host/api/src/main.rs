//! `tollgate-api`: the HTTP API alone, exactly as `tollgate api` serves it (the same options,
//! environment variables, output and exit codes), in a binary that links no Worker: neither the
//! sandbox (wasmtime) nor the CLI runner. For the hosts that only serve the API in front of
//! Workers elsewhere on the same PostgreSQL database.
//!
//! It lives in this package, not beside `tollgate` in `host/tollgate`, so cargo itself keeps the
//! Worker out: this package cannot depend on `tollgate-worker` (which depends on it), and building
//! this binary compiles no wasmtime at all.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;

/// Serve the HTTP API only (Workers run elsewhere, on the same PostgreSQL database).
#[derive(Debug, Parser)]
#[command(name = "tollgate-api", version, about)]
struct Cli {
    /// More logging on stderr (`-v` info, `-vv` debug); `RUST_LOG` overrides.
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(flatten)]
    api: tollgate_api::serve::ApiArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Before any reqwest client (the webhooks') is built; then as `tollgate api` starts.
    tollgate_api_types::tls::install_crypto_provider();
    tollgate_process::setup::hide_process();
    tollgate_process::setup::private_files();
    tollgate_process::setup::init_logging(cli.verbose);
    let served = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(anyhow::Error::from)
        .and_then(|runtime| runtime.block_on(tollgate_api::serve::api(cli.api)));
    served.unwrap_or_else(|error| tollgate_process::setup::report(&error))
}
