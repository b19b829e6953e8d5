//! What every Tollgate process sets up the same way, whichever of the workspace's crates it runs
//! (the `tollgate` binary with its Worker, the API alone): logging on stderr.

/// Logs to stderr; `RUST_LOG` wins over `-v`.
pub fn init_logging(verbose: u8) {
    let default = match verbose {
        // The platform verifier logs the failures the client reports itself (`CallError::Tls`).
        0 => "warn,tollgate::guest=warn,rustls_platform_verifier=off",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}
