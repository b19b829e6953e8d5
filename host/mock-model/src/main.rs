//! `tollgate-mock-model [--port N] [--scenario PROMPT=SCRIPT]… [--payments PORT]`: runs the
//! scripted Messages API (and, with `--payments`, the stand-in payments service) until
//! interrupted. The offline demo and `tollgate dev` start it as a child process, so the
//! `tollgate` binary links no mock model.
//!
//! Prints its base URL (`http://127.0.0.1:<port>`) as the first line on stdout, for
//! `ANTHROPIC_BASE_URL`; with `--payments`, the payments service's as the second
//! (`payments http://127.0.0.1:<port>`), then one line per payment it receives
//! (`[payments] POST Idempotency-Key=<key> <body>`). Gates and the request log are reachable over
//! HTTP under `/__mock/` (see the library's `server` module docs). Stops on Ctrl-C or SIGTERM.

#![forbid(unsafe_code)]

use std::io::Write;

use anyhow::Context;
use clap::Parser;
use tollgate_mock_model::MockModel;
use tollgate_mock_model::payments::{Payments, Received};

/// A scripted Anthropic Messages API on 127.0.0.1, for tests and the offline demo.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Port to listen on; 0 picks a free one.
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// A scenario: a prompt and the script that answers it (`PROMPT=SCRIPT`; see the library's
    /// `script` module), as if the prompt had carried it. Repeatable.
    #[arg(long = "scenario", value_parser = scenario)]
    scenarios: Vec<(String, String)>,
    /// Also serve the stand-in payments service on this port (0 picks a free one).
    #[arg(long)]
    payments: Option<u16>,
}

/// `PROMPT=SCRIPT`, split at the first `=`.
fn scenario(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((prompt, script)) if !prompt.is_empty() => Ok((prompt.to_owned(), script.to_owned())),
        _ => Err(format!("{text:?} is not PROMPT=SCRIPT")),
    }
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
    for (prompt, script) in args.scenarios {
        mock.add_scenario(prompt, script);
    }
    let say = |line: String| {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{line}").and_then(|()| stdout.flush())
    };
    say(mock.base_url()).context("writing the URL to stdout")?;
    let _payments = match args.payments {
        Some(port) => {
            let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
                .await
                .with_context(|| format!("binding the payments service to 127.0.0.1:{port}"))?;
            let announce = move |r: &Received| {
                let _ = say(format!("[payments] POST Idempotency-Key={} {}", r.idempotency_key, r.body));
            };
            let payments = Payments::serve(listener, Some(Box::new(announce)))?;
            say(format!("payments {}", payments.url)).context("writing the URL to stdout")?;
            Some(payments)
        }
        None => None,
    };
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("listening for SIGTERM")?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result.context("listening for Ctrl-C")?,
        _ = terminate.recv() => {}
    }
    mock.shutdown().await;
    Ok(())
}
