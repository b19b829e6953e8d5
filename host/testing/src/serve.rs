//! A `tollgate` process started the way the benches that drive a real server start it: the
//! pinned CLI against the scripted mock model, no network, stderr piped so the caller can wait
//! for the line that names the address.

use std::path::Path;
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStderr, Command};

/// `tollgate <args>` with the pinned CLI at `cli`, the mock model at `mock_url`, its compiled
/// guests cached under `cache`, `RUST_LOG=warn` and no payments service (set `PAYMENTS_URL`
/// again for one); killed on drop.
pub fn command(args: &[&str], cli: &Path, mock_url: &str, cache: &Path) -> Command {
    let mut command = Command::new(crate::tollgate_binary());
    command
        .args(args)
        .env_remove("TOLLGATE_TOKEN")
        .env_remove("TOLLGATE_TOKEN_FILE")
        .env("TOLLGATE_CLAUDE_CLI", cli)
        .env("ANTHROPIC_BASE_URL", mock_url)
        .env("ANTHROPIC_API_KEY", "dummy")
        .env("HTTPS_PROXY", "http://127.0.0.1:1")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("CLAUDE_CODE_MAX_RETRIES", "0")
        .env("PAYMENTS_URL", "http://127.0.0.1:1")
        .env("TOLLGATE_CACHE_DIR", cache)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Reads `child`'s stderr until a line holds `marker` (e.g. `"tollgate serving on "`) and
/// returns the word after it (the URL) and the rest of stderr.
pub async fn listening(child: &mut Child, marker: &str) -> (String, Lines<BufReader<ChildStderr>>) {
    let mut lines = BufReader::new(child.stderr.take().expect("stderr is piped")).lines();
    loop {
        let line = lines.next_line().await.unwrap().expect("tollgate exited before listening");
        if let Some(at) = line.find(marker) {
            let url = line[at + marker.len()..].split_whitespace().next().unwrap_or_default().to_owned();
            return (url, lines);
        }
    }
}
