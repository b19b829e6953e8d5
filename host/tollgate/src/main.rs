//! The `tollgate` binary: parses the command line, runs it, and turns an error into a message on
//! stderr and an exit code. Everything else lives in the library (`tollgate::run`).

#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = tollgate::Cli::parse();
    // Before any reqwest client (the OTLP exporter's, the API client's) is built.
    tollgate_api_types::tls::install_crypto_provider();
    let prepared = match tollgate::prepare(&cli) {
        Ok(prepared) => prepared,
        Err(error) => {
            eprintln!("error: {error:#}");
            return ExitCode::from(2);
        }
    };
    // Lives until `main` returns, after the runtime is gone: dropping it flushes the spans.
    let _telemetry = tollgate_worker::telemetry::init(cli.verbose);
    match tollgate::run(cli, prepared) {
        Ok(code) => code,
        Err(error) => tollgate_process::setup::report(&error),
    }
}
