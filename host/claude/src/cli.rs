//! Finding the `claude` binary and refusing versions this host was not verified against.
//!
//! Read [`CliBinary::locate`] first. The search order is:
//!
//! 1. the path the configuration names ([`CliLocator::configured`]);
//! 2. the `TOLLGATE_CLAUDE_CLI` environment variable ([`CLI_PATH_ENV`]);
//! 3. the pinned install, `tools/claude-cli/node_modules/.bin/claude`, under the workspace root
//!    ([`CliLocator::workspace_root`], else every ancestor of the current directory, else the
//!    workspace this crate was built in);
//! 4. `claude` on `PATH`.
//!
//! The first existing file wins; it is then asked `claude --version`, and a version outside
//! [`SUPPORTED_VERSIONS`] is refused with [`CliError::UnsupportedVersion`]. The answer is cached
//! per (path, size, modification time) for the life of the process, so a Worker pays the ~0.1 s
//! check once.
//!
//! This module does not start segments ([`crate::segment`] does) and does not install anything
//! (`scripts/install-claude-cli.sh` does).
//!
//! ```no_run
//! use tollgate_claude::cli::{CliBinary, CliLocator};
//!
//! # async fn demo() -> Result<(), tollgate_claude::CliError> {
//! let cli = CliBinary::locate(&CliLocator::default()).await?;
//! assert_eq!(cli.version(), "2.1.328");
//! # Ok(()) }
//! ```
//!
//! # Caveats
//!
//! - A candidate that exists but is not executable is still chosen; starting it then fails with
//!   [`crate::SegmentError::Spawn`].
//! - The cache never forgets a failed check for the same file; replace the file (its size or
//!   modification time changes) to check again.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use crate::error::CliError;

/// The versions of Claude Code this host's protocol handling was verified against.
pub const SUPPORTED_VERSIONS: &[&str] = &["2.1.328"];

/// The environment variable naming the CLI binary (step 2 of the search).
pub const CLI_PATH_ENV: &str = "TOLLGATE_CLAUDE_CLI";

/// Where the pinned install puts the binary, relative to the workspace root.
pub const PINNED_INSTALL: &str = "tools/claude-cli/node_modules/.bin/claude";

/// How long `claude --version` may take.
const VERSION_TIMEOUT: Duration = Duration::from_secs(30);

/// Where to look for the CLI. Defaults: nothing configured, the workspace root found from the
/// current directory, the supported versions of [`SUPPORTED_VERSIONS`].
#[derive(Debug, Clone, Default)]
pub struct CliLocator {
    /// The configured path (step 1).
    pub configured: Option<PathBuf>,
    /// The workspace root holding `tools/claude-cli` (step 3).
    pub workspace_root: Option<PathBuf>,
    /// Accept any version (for a fake CLI in tests). Default `false`.
    pub skip_version_check: bool,
}

impl CliLocator {
    /// A locator that uses exactly this binary.
    pub fn at(path: impl Into<PathBuf>) -> Self {
        CliLocator { configured: Some(path.into()), ..CliLocator::default() }
    }

    /// Every candidate path, in search order.
    pub fn candidates(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        out.extend(self.configured.clone());
        if let Some(path) = std::env::var_os(CLI_PATH_ENV).filter(|v| !v.is_empty()) {
            out.push(PathBuf::from(path));
        }
        match &self.workspace_root {
            Some(root) => out.push(root.join(PINNED_INSTALL)),
            None => {
                if let Ok(cwd) = std::env::current_dir() {
                    out.extend(cwd.ancestors().map(|dir| dir.join(PINNED_INSTALL)));
                }
                let built_in = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(PINNED_INSTALL);
                out.push(built_in);
            }
        }
        if let Some(path) = std::env::var_os("PATH") {
            out.extend(std::env::split_paths(&path).map(|dir| dir.join("claude")));
        }
        out
    }
}

/// A `claude` binary whose version was checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliBinary {
    path: PathBuf,
    version: String,
}

impl CliBinary {
    /// Finds the binary (see the module docs for the order) and checks its version.
    ///
    /// # Errors
    ///
    /// [`CliError::NotFound`] when no candidate exists; [`CliError::VersionCheck`] or
    /// [`CliError::UnsupportedVersion`] for the first one found.
    pub async fn locate(locator: &CliLocator) -> Result<CliBinary, CliError> {
        let tried = locator.candidates();
        let Some(path) = tried.iter().find(|p| p.is_file()).cloned() else {
            return Err(CliError::NotFound { tried });
        };
        let path = std::fs::canonicalize(&path).unwrap_or(path);
        if locator.skip_version_check {
            return Ok(CliBinary { path, version: "unchecked".into() });
        }
        let version = checked_version(&path).await?;
        Ok(CliBinary { path, version })
    }

    /// A binary used as is, without a version check (a fake CLI in tests).
    pub fn unchecked(path: impl Into<PathBuf>) -> CliBinary {
        CliBinary { path: path.into(), version: "unchecked".into() }
    }

    /// The binary's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The version it reported (`"2.1.328"`), or `"unchecked"`.
    pub fn version(&self) -> &str {
        &self.version
    }
}

type CacheKey = (PathBuf, u64, Option<SystemTime>);

fn cache() -> &'static Mutex<HashMap<CacheKey, Result<String, CliError>>> {
    static CACHE: OnceLock<Mutex<HashMap<CacheKey, Result<String, CliError>>>> = OnceLock::new();
    CACHE.get_or_init(Mutex::default)
}

async fn checked_version(path: &Path) -> Result<String, CliError> {
    let meta = std::fs::metadata(path)
        .map_err(|e| CliError::VersionCheck { path: path.to_owned(), message: e.to_string() })?;
    let key = (path.to_owned(), meta.len(), meta.modified().ok());
    if let Some(hit) = cache().lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return hit.clone();
    }
    let answer = ask_version(path).await;
    cache().lock().unwrap_or_else(|p| p.into_inner()).insert(key, answer.clone());
    answer
}

async fn ask_version(path: &Path) -> Result<String, CliError> {
    let fail = |message: String| CliError::VersionCheck { path: path.to_owned(), message };
    let mut command = tokio::process::Command::new(path);
    command.arg("--version").stdin(std::process::Stdio::null()).kill_on_drop(true);
    let output = tokio::time::timeout(VERSION_TIMEOUT, command.output())
        .await
        .map_err(|_| fail(format!("no answer within {VERSION_TIMEOUT:?}")))?
        .map_err(|e| fail(e.to_string()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(fail(format!(
            "{}; stderr: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    let found =
        parse_version(&stdout).ok_or_else(|| fail(format!("unreadable answer {:?}", stdout.trim())))?;
    if SUPPORTED_VERSIONS.contains(&found.as_str()) {
        Ok(found)
    } else {
        Err(CliError::UnsupportedVersion {
            path: path.to_owned(),
            found,
            supported: SUPPORTED_VERSIONS.iter().map(|v| (*v).to_owned()).collect(),
        })
    }
}

/// The version in `claude --version` output: `2.1.328 (Claude Code)` → `2.1.328`.
pub fn parse_version(output: &str) -> Option<String> {
    let first = output.split_whitespace().next()?;
    let looks_like_version = first.split('.').count() >= 2
        && first.split('.').all(|part| !part.is_empty() && part.chars().all(|c| c.is_ascii_digit()));
    looks_like_version.then(|| first.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_is_the_first_word_of_the_answer() {
        assert_eq!(parse_version("2.1.328 (Claude Code)\n").as_deref(), Some("2.1.328"));
        assert_eq!(parse_version("claude 2.1.328"), None);
        assert_eq!(parse_version(""), None);
        assert_eq!(parse_version("2..1"), None);
    }

    #[test]
    fn the_configured_path_comes_first_and_path_last() {
        let locator = CliLocator { configured: Some("/opt/claude".into()), ..CliLocator::default() };
        let candidates = locator.candidates();
        assert_eq!(candidates[0], PathBuf::from("/opt/claude"));
        assert!(candidates.iter().any(|p| p.ends_with(PINNED_INSTALL)));
        let root = CliLocator { workspace_root: Some("/ws".into()), ..CliLocator::default() };
        assert!(root.candidates().contains(&PathBuf::from("/ws").join(PINNED_INSTALL)));
    }
}
