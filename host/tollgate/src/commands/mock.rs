//! The scripted mock model (and the stand-in payments service) as a child process: the
//! `tollgate-mock-model` binary beside this one, for the offline demo and `tollgate dev`. The
//! `tollgate` binary links no mock model; building it with the demo (`scripts/demo.sh`) puts the
//! mock's binary beside it.
//!
//! The child dies with this process, even when this one is SIGKILLed (`PR_SET_PDEATHSIG`), and is
//! killed when its [`MockProcess`] is dropped.

use std::path::PathBuf;
use std::process::Stdio;

use anyhow::{Context, bail};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout};

/// What to start.
#[derive(Clone, Debug, Default)]
pub struct MockOptions {
    /// The model's port (0: a free one).
    pub port: u16,
    /// Prompts and the scripts that answer them.
    pub scenarios: Vec<(String, String)>,
    /// Also the payments service, on this port (0: a free one).
    pub payments: Option<u16>,
}

/// A running `tollgate-mock-model`.
#[derive(Debug)]
pub struct MockProcess {
    /// The model's base URL, for `ANTHROPIC_BASE_URL`.
    pub base_url: String,
    /// The payments service's URL, when it serves one.
    pub payments_url: Option<String>,
    _child: Child,
}

/// The mock's binary: `$TOLLGATE_MOCK_MODEL`, else `tollgate-mock-model` beside this executable.
fn binary() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("TOLLGATE_MOCK_MODEL") {
        return Ok(PathBuf::from(path));
    }
    let me = std::env::current_exe().context("finding this executable")?;
    let beside = me.with_file_name("tollgate-mock-model");
    if !beside.is_file() {
        bail!(
            "the mock model's binary {} is missing: build it with `cargo build -p tollgate-mock-model` \
             (scripts/demo.sh does), or set TOLLGATE_MOCK_MODEL",
            beside.display()
        );
    }
    Ok(beside)
}

impl MockProcess {
    /// Starts the mock and waits for its URLs; `announce` gets each later line it prints (the
    /// payments it receives).
    ///
    /// # Errors
    /// The binary is missing, or exited before it listened (its message is in the error).
    pub async fn start(
        options: &MockOptions,
        announce: impl Fn(&str) + Send + 'static,
    ) -> anyhow::Result<Self> {
        let path = binary()?;
        let mut command = tokio::process::Command::new(&path);
        command.arg("--port").arg(options.port.to_string());
        for (prompt, script) in &options.scenarios {
            command.arg("--scenario").arg(format!("{prompt}={script}"));
        }
        if let Some(port) = options.payments {
            command.arg("--payments").arg(port.to_string());
        }
        command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::inherit()).kill_on_drop(true);
        let mut child = tollgate_claude::transport::spawn_dying_with_this_process(command)
            .with_context(|| format!("starting {}", path.display()))?;
        let stdout = child.stdout.take().context("the mock model's stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let base_url = next_line(&mut lines, &path).await?;
        let payments_url = match options.payments {
            Some(_) => {
                let line = next_line(&mut lines, &path).await?;
                Some(line.strip_prefix("payments ").unwrap_or(&line).to_owned())
            }
            None => None,
        };
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                announce(&line);
            }
        });
        Ok(MockProcess { base_url, payments_url, _child: child })
    }
}

async fn next_line(
    lines: &mut Lines<BufReader<ChildStdout>>,
    path: &std::path::Path,
) -> anyhow::Result<String> {
    match lines.next_line().await.with_context(|| format!("reading {}", path.display()))? {
        Some(line) => Ok(line),
        None => bail!("{} exited before it listened (its stderr is above)", path.display()),
    }
}
