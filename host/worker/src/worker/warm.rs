//! The Worker's warm CLIs: a CLI started with the launch of a segment that is likely to come
//! next, so that segment skips the CLI's start (~0.5–0.9 s; `tollgate_claude::pool`).
//!
//! Two moments start one, after the segment's commit (never for a call that waits on a human):
//!
//! - a **fresh** segment that completed: one **parked spare** for the agent's launch
//!   (`WarmCli::park`: booted with `--await-claim` in a directory of its own, its `initialize`
//!   already answered), which the next new session with the same options claims; started once
//!   the Worker has no step in hand, so it never competes with a running segment of the same
//!   Worker ([`prestart_when_idle`]);
//! - a segment that ended **deferred** on a call whose next step runs without approval
//!   (`CallTool`, `CallSingleAttemptTool`): a warm `--resume=<session>` CLI, waiting for its
//!   `initialize`, for the resume that follows the tool step (the CLI parks no resume).
//!
//! A warm CLI has its own scratch directories and its own model-proxy token
//! ([`crate::proxy::ModelProxy::register_parked`]: refused until a segment takes the CLI and sets
//! its spend limit). A session's workspace is `<root>/<session>`, unknown before the session
//! exists: the spare's claim names it (the CLI then runs as if started there), and a resume starts
//! in it.
//!
//! # Caveats
//!
//! - An agent whose options set their own `ANTHROPIC_API_KEY` gets no warm CLIs.
//! - A claim the CLI refuses (a workspace whose own settings a claim cannot apply, such as a
//!   project `settings.json` that sets `env` when the agent reads project settings) costs the
//!   segment ~0.1 s before it starts its own CLI; it counts as `refused`. When the reason will
//!   hold next time too, the launch gets no more spares ([`claim_refused`]): an agent whose
//!   options name a `cwd` gets a warm CLI waiting for `initialize` there instead.
//! - A warm CLI taken by no segment dies after the time to live (`--warm-cli-ttl-secs`); one the
//!   pool pushes out past its cap (`--warm-clis`) dies at once.
//! - A `SIGKILL`ed Worker's warm CLIs die with it (the transport's parent-death signal); the next
//!   Worker removes their scratch folders (`remove_stale_scratch`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tollgate_claude::SegmentSpec;
use tollgate_claude::pool::{Signature, WarmCli, WarmPool};
use tracing::{debug, info, warn};

use super::Worker;
use crate::proxy::{SegmentToken, SpendLimit};
use tollgate_process::metrics::Metrics;

/// The variable that differs per process: the model-proxy token.
const PER_PROCESS: &[&str] = &["ANTHROPIC_API_KEY"];

/// The pool of a Worker: each warm CLI kept with its model-proxy token (revoked when dropped).
pub(crate) type Pool = WarmPool<SegmentToken>;

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

/// The signature's stand-in for every session's workspace under `root` (session folder names
/// never start with `.`).
fn stand_in(root: &Path) -> PathBuf {
    root.join(".claimed-*")
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

/// A warm CLI taken for one segment: the CLI, its token (which the segment's accounting reads)
/// and the launch it was kept under ([`claim_refused`]).
pub(super) struct Taken {
    cli: WarmCli,
    token: SegmentToken,
    key: Signature,
}

impl Taken {
    /// The CLI, its token and its launch's signature.
    pub(super) fn into_parts(self) -> (WarmCli, SegmentToken, Signature) {
        (self.cli, self.token, self.key)
    }
}

/// Counts a claim the CLI refused (the segment then ran on a CLI of its own); when the reason
/// will hold for the next claim too (`tollgate_claude::pool::lasting_refusal`), the launch `key`
/// gets no more parked spares: a CLI waiting for `initialize` in its own `cwd` when the options
/// name one, none for sessions' workspaces.
pub(super) fn claim_refused(worker: &Worker, session_id: &str, key: Signature, reason: &str) {
    worker.metrics.warm_cli("refused", 1);
    let lasting = tollgate_claude::pool::lasting_refusal(reason);
    info!(session = %session_id, reason, lasting,
        "the parked CLI refused its claim; the segment started its own (lasting: no more spares are parked for this launch)");
    if lasting && let Some(pool) = worker.warm.as_ref() {
        pool.refuse_parking(key);
    }
}

/// Takes a warm CLI for `spec` (whose `cwd`, the session's workspace, exists), or `None` when
/// the pool has none that still waits (the segment starts its own). Counts a hit or a miss.
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
    let Some((cli, token)) = taken.warm else {
        worker.metrics.warm_cli("miss", 1);
        return None;
    };
    token.open(limit);
    worker.metrics.warm_cli("hit", 1);
    info!(pid = cli.pid(), parked = cli.is_parked(), "segment on a warm CLI");
    Some(Taken { cli, token, key })
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

/// Starts a warm CLI with the launch of `spec` (a parked spare for a fresh start, or
/// `--resume` in `spec.cwd`), unless the pool already holds one of its signature. Failures are
/// logged: the next segment starts its own CLI.
pub(super) async fn prestart(worker: &Worker, mut spec: SegmentSpec, cwd: &Cwd, fresh: bool) {
    let Some(pool) = worker.warm.as_ref() else { return };
    if !usable(&spec) {
        return;
    }
    let key = signature(&spec, cwd, fresh);
    if pool.count(&key) > 0 {
        return;
    }
    let park = fresh && pool.parkable(&key);
    if fresh && !park && !matches!(cwd, Cwd::Named) {
        // A session's workspace does not exist before the session: only a claim could use it.
        return;
    }
    let Ok(proxy) = worker.model_proxy().await else { return };
    let token = proxy.register_parked();
    for (name, value) in &mut spec.env {
        if name == "ANTHROPIC_API_KEY" {
            *value = token.token().into();
        }
    }
    let started = if park { WarmCli::park(&spec) } else { WarmCli::spawn(&spec) };
    match started {
        Ok(cli) => {
            info!(pid = cli.pid(), fresh, "warm CLI started");
            worker.metrics.warm_cli("started", 1);
            pool.put(key, cli, token);
        }
        Err(err) => warn!(error = %err, "a warm CLI could not be started"),
    }
}
