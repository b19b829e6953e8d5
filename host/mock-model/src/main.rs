//! `tollgate-mock-model [--port N]`: runs the scripted Messages API until interrupted.
//!
//! Prints its base URL (`http://127.0.0.1:<port>`) as the first line on stdout, for
//! `ANTHROPIC_BASE_URL`. Gates and the request log are reachable over HTTP under `/__mock/` (see the
//! library's `server` module docs). Stops on Ctrl-C or SIGTERM.

use std::io::Write;

use anyhow::Context;
use clap::Parser;
use tollgate_mock_model::MockModel;

/// A scripted Anthropic Messages API on 127.0.0.1, for tests and the offline demo.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Port to listen on; 0 picks a free one.
    #[arg(long, default_value_t = 0)]
    port: u16,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    match run(Args::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("tollgate-mock-model: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    let mock = MockModel::start_on_port(args.port).await?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{}", mock.base_url()).context("writing the URL to stdout")?;
    stdout.flush().context("writing the URL to stdout")?;
    drop(stdout);
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("listening for SIGTERM")?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result.context("listening for Ctrl-C")?,
        _ = terminate.recv() => {}
    }
    mock.shutdown().await;
    Ok(())
}
