//! What every Tollgate process sets up the same way, whichever of the workspace's crates it runs
//! (the `tollgate` binary with its Worker, the API alone): logging on stderr, the stop signals
//! ([`StopSignals`]), a process hidden from its neighbours ([`hide_process`]) that creates
//! private files ([`private_files`]), and how a failure is reported ([`report`]).

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

/// Counts SIGINT and SIGTERM from the moment it listens: the first stops a process gracefully
/// (the Worker drains), the second cuts the drain short.
#[derive(Clone)]
pub struct StopSignals(tokio::sync::watch::Receiver<u32>);

impl StopSignals {
    /// Installs the handlers (once, so no signal falls between two waits) and starts counting.
    pub fn listen() -> StopSignals {
        use tokio::signal::unix::{SignalKind, signal};
        let (tx, rx) = tokio::sync::watch::channel(0u32);
        let mut term = signal(SignalKind::terminate()).ok();
        let mut int = signal(SignalKind::interrupt()).ok();
        tokio::spawn(async move {
            async fn next(stream: &mut Option<tokio::signal::unix::Signal>) {
                match stream {
                    Some(stream) => {
                        if stream.recv().await.is_none() {
                            std::future::pending::<()>().await;
                        }
                    }
                    None => std::future::pending().await,
                }
            }
            loop {
                tokio::select! {
                    () = next(&mut term) => {}
                    () = next(&mut int) => {}
                }
                tx.send_modify(|n| *n += 1);
            }
        });
        StopSignals(rx)
    }

    /// Resolves once `n` signals arrived.
    pub fn nth(&self, n: u32) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.0.clone();
        async move {
            let _ = rx.wait_for(|count| *count >= n).await;
        }
    }
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

/// Makes the files this process creates from now on its own alone (umask `077`): the servers'
/// store, its WAL, the token file, segment scratch.
pub fn private_files() {
    // SAFETY: umask(2) cannot fail and has no memory effects.
    unsafe { libc::umask(0o077) };
}

/// Prints a failed command's error and its causes on stderr (`error: …`, then `  caused by: …`
/// per cause) and returns exit code 2, as every Tollgate binary ends on an error.
pub fn report(error: &anyhow::Error) -> std::process::ExitCode {
    eprintln!("error: {error}");
    for cause in error.chain().skip(1) {
        eprintln!("  caused by: {cause}");
    }
    std::process::ExitCode::from(2)
}
