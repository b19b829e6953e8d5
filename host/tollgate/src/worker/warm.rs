//! The Worker's warm CLIs: a CLI started with the launch of a segment that is likely to come
//! next, so that segment skips the CLI's start (~0.5–0.9 s; `tollgate_claude::pool`).
//!
//! Two moments start one, after the segment's commit (never for a call that waits on a human):
//!
//! - a **fresh** segment that completed: one warm fresh CLI for the agent's launch, which the next
//!   new session with the same options takes; started once the Worker has no step in hand, so it
//!   never competes with a running segment of the same Worker ([`prestart_when_idle`]);
//! - a segment that ended **deferred** on a call whose next step runs without approval
//!   (`CallTool`, `CallSingleAttemptTool`): a warm `--resume=<session>` CLI for the resume that
//!   follows the tool step.
//!
//! A warm CLI has its own scratch directories and its own model-proxy token
//! ([`ModelProxy::register_parked`]: refused until a segment takes the CLI and sets its spend
//! limit). A session's workspace is `<root>/<session>`, unknown before the session exists, so a
//! warm fresh CLI starts in a directory of its own, `<root>/.warm-<pid>-<random>` (session folder
//! names never start with `.`), and the segment that takes it renames that directory to the
//! session's workspace and leaves a symlink at the old path for the segment's life: the CLI keeps
//! the path it started in (it checks it exists; its transcript's project key is that path's), and
//! `process.cwd()` and every tool it runs see the session's workspace. Resumes (and agents whose
//! options name a `cwd`) start in the real directory.
//!
//! # Caveats
//!
//! - A fresh session whose workspace already holds files (a retried first segment) does not take
//!   a warm CLI.
//! - An agent whose options set their own `ANTHROPIC_API_KEY` gets no warm CLIs.
//! - A warm CLI taken by no segment dies after the time to live (`--warm-cli-ttl-secs`); one the
//!   pool pushes out past its cap (`--warm-clis`) dies at once.
//! - A `SIGKILL`ed Worker's warm CLIs die with it (the transport's parent-death signal); the next
//!   Worker removes their scratch folders (`remove_stale_scratch`) and their `.warm-*` workspace
//!   entries ([`remove_stale`]).

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tollgate_claude::SegmentSpec;
use tollgate_claude::pool::{Signature, WarmCli, WarmPool};
use tracing::{debug, info, warn};

use super::Worker;
use crate::metrics::Metrics;
use crate::proxy::{SegmentToken, SpendLimit};

/// The variable that differs per process: the model-proxy token.
const PER_PROCESS: &[&str] = &["ANTHROPIC_API_KEY"];
/// How a warm CLI's own workspace directory starts.
const WARM_PREFIX: &str = ".warm-";

/// What a warm CLI keeps beside it, dropped with it: its token (revoked) and its workspace
/// directory (removed).
pub(crate) struct Attached {
    token: SegmentToken,
    workspace: Option<WarmWorkspace>,
}

/// The pool of a Worker.
pub(crate) type Pool = WarmPool<Attached>;

/// A new pool of at most `cap` warm CLIs kept for at most `ttl`, counting into `metrics`.
pub(crate) fn new_pool(cap: usize, ttl: std::time::Duration, metrics: Arc<Metrics>) -> Arc<Pool> {
    WarmPool::new(cap, ttl, Box::new(move |n| metrics.warm_cli("expired", n as u64)))
}

/// Where a segment's CLI works: the session's own workspace (the warm CLIs of all sessions share
/// one stand-in in their signature), or a directory the options name.
pub(super) enum Cwd {
    /// `<root>/<session folder>`.
    Session {
        /// The workspace root.
        root: PathBuf,
    },
    /// The options' `cwd`.
    Named,
}

/// The signature's stand-in for every session's workspace under `root`.
fn stand_in(root: &Path) -> PathBuf {
    root.join(format!("{WARM_PREFIX}*"))
}

fn usable(spec: &SegmentSpec) -> bool {
    spec.env.iter().filter(|(name, _)| name == "ANTHROPIC_API_KEY").count() == 1
}

/// The signature of `spec`: its cwd as is, or the stand-in for a fresh session's workspace.
fn signature(spec: &SegmentSpec, cwd: &Cwd, fresh: bool) -> Signature {
    match cwd {
        Cwd::Session { root } if fresh => Signature::of(spec, &stand_in(root), PER_PROCESS),
        _ => Signature::of(spec, &spec.cwd, PER_PROCESS),
    }
}

/// A warm CLI taken for one segment: the CLI and its token, which the segment's accounting reads;
/// the workspace guard removes the symlink when the segment is over.
pub(super) struct Taken {
    cli: WarmCli,
    token: SegmentToken,
    workspace: Option<WarmWorkspace>,
}

impl Taken {
    /// The CLI, its token, and the guard to drop once the segment is over.
    pub(super) fn into_parts(self) -> (WarmCli, SegmentToken, Option<WarmWorkspace>) {
        (self.cli, self.token, self.workspace)
    }
}

/// Takes a warm CLI for `spec` (whose `cwd` is where the segment will work), or `None` when the
/// pool has none that still waits (the segment starts its own). For a fresh session in its own
/// workspace, the warm CLI's directory becomes the workspace. Counts a hit or a miss.
pub(super) fn take(
    worker: &Worker,
    spec: &SegmentSpec,
    cwd: &Cwd,
    fresh: bool,
    limit: SpendLimit,
) -> Option<Taken> {
    let pool = worker.warm.as_ref()?;
    if !usable(spec) {
        return None;
    }
    let key = signature(spec, cwd, fresh);
    let taken = pool.take(&key);
    if taken.discarded > 0 {
        worker.metrics.warm_cli("discarded", taken.discarded as u64);
    }
    let Some((cli, attached)) = taken.warm else {
        worker.metrics.warm_cli("miss", 1);
        return None;
    };
    let Attached { token, mut workspace } = attached;
    if let (Some(workspace), Cwd::Session { .. }) = (workspace.as_mut(), cwd)
        && fresh
        && let Err(err) = workspace.adopt(&spec.cwd)
    {
        info!(error = %err, pid = cli.pid(), "a warm CLI could not take over the session's workspace; starting a CLI");
        worker.metrics.warm_cli("discarded", 1);
        return None;
    }
    token.open(limit);
    worker.metrics.warm_cli("hit", 1);
    info!(pid = cli.pid(), "segment on a warm CLI");
    Some(Taken { cli, token, workspace })
}

/// How long a fresh warm CLI waits for the Worker to have no step in hand before it is not
/// started at all.
const IDLE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// [`prestart`] of a fresh CLI, in a task of its own, once the Worker has no step in hand: a warm
/// CLI's start (~0.3–0.5 s of CPU) never competes with a running segment of the same Worker. A
/// Worker that stays busy for [`IDLE_WAIT`] starts none (its next new session starts its own CLI).
pub(super) fn prestart_when_idle(worker: &Worker, spec: SegmentSpec, cwd: Cwd) {
    if worker.warm.is_none() {
        return;
    }
    let worker = worker.clone();
    tokio::spawn(async move {
        let start = std::time::Instant::now();
        while worker.in_hand.load(std::sync::atomic::Ordering::SeqCst) > 0 {
            if start.elapsed() > IDLE_WAIT {
                debug!("no warm CLI: the Worker stayed busy");
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        prestart(&worker, spec, &cwd, true).await;
    });
}

/// Starts a warm CLI with the launch of `spec` (a fresh start in a directory of its own for a
/// session's workspace, or `--resume` in `spec.cwd`), unless the pool already holds one of its
/// signature. Failures are logged: the next segment starts its own CLI.
pub(super) async fn prestart(worker: &Worker, mut spec: SegmentSpec, cwd: &Cwd, fresh: bool) {
    let Some(pool) = worker.warm.as_ref() else { return };
    if !usable(&spec) {
        return;
    }
    let key = signature(&spec, cwd, fresh);
    if pool.count(&key) > 0 {
        return;
    }
    let Ok(proxy) = worker.model_proxy().await else { return };
    let token = proxy.register_parked();
    for (name, value) in &mut spec.env {
        if name == "ANTHROPIC_API_KEY" {
            *value = token.token().into();
        }
    }
    let workspace = match cwd {
        Cwd::Session { root } if fresh => match WarmWorkspace::create(root) {
            Ok(workspace) => {
                spec.cwd = workspace.path.clone();
                Some(workspace)
            }
            Err(err) => {
                warn!(error = %err, "no warm CLI: its workspace directory cannot be made");
                return;
            }
        },
        _ => None,
    };
    match WarmCli::spawn(&spec) {
        Ok(cli) => {
            info!(pid = cli.pid(), fresh, "warm CLI started");
            worker.metrics.warm_cli("started", 1);
            pool.put(key, cli, Attached { token, workspace });
        }
        Err(err) => warn!(error = %err, "a warm CLI could not be started"),
    }
}

/// A warm fresh CLI's own directory in the workspace root; see the module docs. Removed on drop
/// (once adopted, only the symlink left at its old path).
pub(crate) struct WarmWorkspace {
    path: PathBuf,
    adopted: bool,
}

impl WarmWorkspace {
    fn create(root: &Path) -> Result<WarmWorkspace, String> {
        // The root's checks (this user's, written by nobody else) are the sessions' own.
        super::workspace::prepare_root(root)?;
        let mut random = [0u8; 6];
        getrandom::fill(&mut random).map_err(|e| e.to_string())?;
        let path = root.join(format!("{WARM_PREFIX}{}-{}", std::process::id(), hex::encode(random)));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(|e| format!("the warm workspace {} cannot be made: {e}", path.display()))?;
        Ok(WarmWorkspace { path, adopted: false })
    }

    /// Makes this directory the session's workspace `target` (which must not exist, or be an
    /// empty directory) and leaves a symlink to it at the old path.
    fn adopt(&mut self, target: &Path) -> Result<(), String> {
        match std::fs::symlink_metadata(target) {
            Ok(meta) if meta.is_dir() => {
                // An empty one (made by an earlier attempt that started no CLI) is replaced.
                std::fs::remove_dir(target)
                    .map_err(|e| format!("the workspace {} is in use: {e}", target.display()))?;
            }
            Ok(_) => return Err(format!("{} is not a directory", target.display())),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(format!("{}: {err}", target.display())),
        }
        std::fs::rename(&self.path, target)
            .map_err(|e| format!("{} cannot become {}: {e}", self.path.display(), target.display()))?;
        self.adopted = true;
        std::os::unix::fs::symlink(target, &self.path)
            .map_err(|e| format!("the link {} cannot be made: {e}", self.path.display()))
    }
}

impl Drop for WarmWorkspace {
    fn drop(&mut self) {
        let removed =
            if self.adopted { std::fs::remove_file(&self.path) } else { std::fs::remove_dir_all(&self.path) };
        if let Err(err) = removed
            && err.kind() != std::io::ErrorKind::NotFound
        {
            debug!(path = %self.path.display(), error = %err, "a warm workspace entry was not removed");
        }
    }
}

/// Removes the `.warm-<pid>-…` entries of dead processes under the workspace `root` (a warm
/// CLI's unused directory, or the link a taken one left), as `remove_stale_scratch` does for
/// segment folders. Returns how many.
pub(crate) fn remove_stale(root: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(root) else { return 0 };
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(WARM_PREFIX)
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<libc::pid_t>().ok())
            .filter(|pid| *pid > 0)
        else {
            continue;
        };
        let Ok(meta) = entry.path().symlink_metadata() else { continue };
        // SAFETY: signal 0 only checks for existence and permission.
        let alive = unsafe { libc::kill(pid, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH);
        if meta.uid() != me || alive {
            continue;
        }
        let gone = if meta.is_dir() {
            std::fs::remove_dir_all(entry.path())
        } else {
            std::fs::remove_file(entry.path())
        };
        if gone.is_ok() {
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_warm_workspace_becomes_the_sessions_and_leaves_a_link_until_dropped() {
        let root = tempfile::tempdir().unwrap();
        let mut warm = WarmWorkspace::create(root.path()).unwrap();
        let old = warm.path.clone();
        assert!(old.file_name().unwrap().to_string_lossy().starts_with(".warm-"));
        std::fs::write(old.join("made-before"), "x").unwrap();
        let target = root.path().join("s-1");
        warm.adopt(&target).unwrap();
        assert!(target.join("made-before").exists());
        assert_eq!(std::fs::read_link(&old).unwrap(), target);
        drop(warm);
        assert!(!old.exists() && old.symlink_metadata().is_err(), "the link is gone");
        assert!(target.join("made-before").exists(), "the session's workspace stays");
    }

    #[test]
    fn a_session_workspace_with_files_is_not_taken_over_and_an_unused_warm_one_is_removed() {
        let root = tempfile::tempdir().unwrap();
        let target = root.path().join("s-1");
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("kept"), "x").unwrap();
        let mut warm = WarmWorkspace::create(root.path()).unwrap();
        let old = warm.path.clone();
        assert!(warm.adopt(&target).is_err());
        assert!(target.join("kept").exists());
        drop(warm);
        assert!(!old.exists());
    }

    #[test]
    fn only_the_warm_entries_of_dead_processes_are_removed() {
        let root = tempfile::tempdir().unwrap();
        let live = WarmWorkspace::create(root.path()).unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let dead_dir = root.path().join(format!(".warm-{dead}-abc"));
        std::fs::create_dir(&dead_dir).unwrap();
        let dead_link = root.path().join(format!(".warm-{dead}-def"));
        std::os::unix::fs::symlink(root.path().join("s-1"), &dead_link).unwrap();
        let session = root.path().join("s-2");
        std::fs::create_dir(&session).unwrap();
        assert_eq!(remove_stale(root.path()), 2);
        assert!(dead_dir.symlink_metadata().is_err() && dead_link.symlink_metadata().is_err());
        assert!(live.path.exists() && session.exists());
    }
}
