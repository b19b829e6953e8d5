//! Pre-started CLIs: a segment's fixed start cost (process start, runtime boot, config load,
//! ~0.5–0.9 s) paid before its step is claimed.
//!
//! A CLI started with `--await-initialize` boots and then waits for the host's `initialize` on
//! stdin (docs/PROTOCOL.md, "initialize"); a resume's transcript file may be written after the spawn as
//! long as it is there before `initialize` (`benches/segment.rs`, "pre-started, file after
//! spawn"). So a Worker can start a CLI with exactly the launch a coming segment will use — the
//! program, argv (options, `--resume=<session>`), cwd and environment — and hand it to that
//! segment ([`crate::run_segment_on`]).
//!
//! A fresh segment can do better: the CLI's own *parked spare* (`--await-claim`,
//! [`WarmCli::park`]) boots in a directory of its own and takes its `initialize` (the hooks) at
//! once, the part of a start that comes after `initialize` included; the segment then binds it
//! with a `claim_session` (its cwd, prompts and sdk MCP server). Measured here with the mock
//! model, a one-reply turn answered 140–230 ms after the take on a spare, 320–370 ms on a CLI
//! waiting for `initialize`, 390–560 ms cold. A claim the CLI refuses (a workspace whose own
//! settings a claim cannot apply) sends no prompt, and the segment starts its own CLI.
//!
//! Read [`Signature`] (what must match), [`Shelf`] (the pure bookkeeping: per-signature lists,
//! a size cap, a time to live; unit-tested) and [`WarmPool`] (the processes on the shelf, with a
//! task that kills the expired ones). A [`WarmCli`] owns its own [`ScratchDirs`] and is used once:
//! nothing of one session reaches another.
//!
//! # Caveats
//!
//! - A warm CLI costs what an idle CLI costs (~200+ MB resident, its ~0.5 s of start CPU spent
//!   whether it is used or not); the caller decides when one is worth it, and the time to live
//!   bounds the waste.
//! - A warm CLI that exited (or, unless parked, wrote to stdout) before it was taken is discarded
//!   ([`WarmCli::is_waiting`]); the segment then starts one as before.
//! - It dies with its Worker like any segment's CLI (the transport's parent-death signal), and
//!   `launch::remove_stale_scratch` removes its directories after a `SIGKILL`.

use std::ffi::OsString;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tollgate_protocol::HostFrame;

use crate::error::SegmentError;
use crate::launch::ScratchDirs;
use crate::segment::{INITIALIZE_ID, SegmentSpec, Started, launch, parked_launch, spawn};
use crate::transport::CliProcess;

/// What a segment's launch must share with a warm CLI to run on it: the program, the argv, the
/// working directory (or what stands for it, see [`Signature::of`]), the environment the
/// caller sets, less the variables that differ per process (a per-process token), and the hooks
/// (a parked spare registers them before its segment is known).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Signature(String);

impl Signature {
    /// The signature of `spec`, with `cwd` in place of `spec.cwd` (a caller whose segments each
    /// get a directory of their own passes what stands for all of them) and the variables named
    /// in `per_process` left out of its environment.
    pub fn of(spec: &SegmentSpec, cwd: &Path, per_process: &[&str]) -> Signature {
        let env: Vec<(String, String)> = spec
            .env
            .iter()
            .filter(|(name, _)| !per_process.iter().any(|p| name == &OsString::from(p)))
            .map(|(name, value)| (name.to_string_lossy().into_owned(), value.to_string_lossy().into_owned()))
            .collect();
        let key = serde_json::json!({
            "program": spec.cli.path().to_string_lossy(),
            "args": spec.args(),
            // A parked spare takes it before the segment is known.
            "initialize": HostFrame::initialize(INITIALIZE_ID, spec.parked_initialize()).to_json(),
            "cwd": cwd.to_string_lossy(),
            "env": env,
            "max_line_bytes": spec.max_line_bytes,
            "scratch_parent": spec.scratch_parent.as_ref().map(|p| p.to_string_lossy().into_owned()),
        });
        Signature(key.to_string())
    }
}

/// The bookkeeping of pre-started things: each kept under its [`Signature`] with the time it was
/// put, at most `cap` in all (the oldest goes first), each for at most `ttl`. Pure: the caller
/// passes the time and disposes of what comes back.
#[derive(Debug)]
pub struct Shelf<T> {
    cap: usize,
    ttl: Duration,
    items: Vec<(Signature, Instant, T)>,
}

impl<T> Shelf<T> {
    /// An empty shelf.
    pub fn new(cap: usize, ttl: Duration) -> Shelf<T> {
        Shelf { cap, ttl, items: Vec::new() }
    }

    /// Puts `item` under `key` at `now`; returns what it pushed out (the oldest, past the cap;
    /// `item` itself when the cap is 0).
    pub fn put(&mut self, key: Signature, item: T, now: Instant) -> Vec<T> {
        self.items.push((key, now, item));
        let excess = self.items.len().saturating_sub(self.cap);
        self.items.drain(..excess).map(|(_, _, item)| item).collect()
    }

    /// Takes the oldest item under `key` that has not expired at `now`, and returns it with every
    /// item (of any key) that has.
    pub fn take(&mut self, key: &Signature, now: Instant) -> (Option<T>, Vec<T>) {
        let expired = self.expire(now);
        let found = self.items.iter().position(|(k, _, _)| k == key).map(|at| self.items.remove(at).2);
        (found, expired)
    }

    /// Removes and returns the items that have expired at `now`.
    pub fn expire(&mut self, now: Instant) -> Vec<T> {
        let ttl = self.ttl;
        let (expired, kept): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.items).into_iter().partition(|(_, put, _)| now >= *put + ttl);
        self.items = kept;
        expired.into_iter().map(|(_, _, item)| item).collect()
    }

    /// How many items are under `key`.
    pub fn count(&self, key: &Signature) -> usize {
        self.items.iter().filter(|(k, _, _)| k == key).count()
    }

    /// How many items it holds.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// When the next item expires.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.items.iter().map(|(_, put, _)| *put + self.ttl).min()
    }

    /// Removes and returns everything.
    pub fn drain(&mut self) -> Vec<T> {
        self.items.drain(..).map(|(_, _, item)| item).collect()
    }
}

/// A pre-started CLI with its own scratch directories (`tollgate-warm-<pid>-…`,
/// [`ScratchDirs::create_warm`]): either started with a segment's launch and waiting for its
/// `initialize` ([`WarmCli::spawn`]), or a **parked spare** ([`WarmCli::park`]). Dropping it
/// kills its process group and removes the directories.
#[derive(Debug)]
pub struct WarmCli {
    // Declared first: dropped (the group killed) before the directories go.
    process: CliProcess,
    dirs: ScratchDirs,
    cwd: PathBuf,
    parked: bool,
}

impl WarmCli {
    /// Starts the CLI `spec` would start (its `start` only chooses `--resume`; no prompt is
    /// sent), in fresh scratch directories.
    ///
    /// # Errors
    ///
    /// The directories cannot be made or the process cannot be started.
    pub fn spawn(spec: &SegmentSpec) -> Result<WarmCli, SegmentError> {
        let dirs = ScratchDirs::for_spec(spec, true)?;
        let process = spawn(&launch(spec, &dirs, Started::Ahead))?;
        Ok(WarmCli { process, dirs, cwd: spec.cwd.clone(), parked: false })
    }

    /// Starts a **parked spare** for the fresh segments of `spec`'s launch (CLI 2.1.328's
    /// `--await-claim`): it boots in a directory of its own (`<scratch>/park`) and takes
    /// [`SegmentSpec::parked_initialize`] at once, so everything but the session is done before a
    /// segment takes it. The segment then sends [`SegmentSpec::claim`] — its working directory,
    /// prompts and sdk MCP server — in place of `initialize` (~50–80 ms against ~200 ms for
    /// `initialize`, `benches/segment.rs`). `spec.cwd` plays no part.
    ///
    /// # Errors
    ///
    /// [`SegmentError::InvalidSpec`] for a resume (the CLI refuses `--await-claim` with
    /// `--resume`); the directories cannot be made or the process cannot be started.
    pub fn park(spec: &SegmentSpec) -> Result<WarmCli, SegmentError> {
        if !matches!(spec.start, crate::Start::Fresh { .. }) {
            return Err(SegmentError::InvalidSpec { reason: "only a fresh start can be parked".into() });
        }
        let dirs = ScratchDirs::for_spec(spec, true)?;
        let park = dirs.root().join("park");
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&park)
            .map_err(|source| SegmentError::Setup { path: park.clone(), source })?;
        let process = spawn(&parked_launch(spec, &dirs, park.clone()))?;
        process.send(HostFrame::initialize(INITIALIZE_ID, spec.parked_initialize()).to_line());
        Ok(WarmCli { process, dirs, cwd: park, parked: true })
    }

    /// Whether it is a parked spare ([`WarmCli::park`]).
    pub fn is_parked(&self) -> bool {
        self.parked
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The working directory it was started in.
    pub fn cwd(&self) -> &Path {
        &self.cwd
    }

    /// Its scratch directories (`CLAUDE_CONFIG_DIR` is `dirs().config()`).
    pub fn dirs(&self) -> &ScratchDirs {
        &self.dirs
    }

    /// Whether a segment may still use it: it runs, and (unless parked: a spare answers its
    /// `initialize` while it waits) has written nothing to stdout.
    pub fn is_waiting(&mut self) -> bool {
        if self.parked { self.process.is_running() } else { self.process.is_waiting() }
    }

    /// Kills the process group, reaps the process, then removes the directories.
    pub async fn shutdown(mut self) {
        let _ = self.process.shutdown(Duration::ZERO).await;
    }

    pub(crate) fn into_parts(self) -> (CliProcess, ScratchDirs) {
        (self.process, self.dirs)
    }
}

/// What a take found.
#[derive(Debug)]
pub struct Taken<A> {
    /// A warm CLI of the signature that still waits, with what was kept beside it.
    pub warm: Option<(WarmCli, A)>,
    /// Warm CLIs whose time to live was over (killed).
    pub expired: usize,
    /// Warm CLIs of the signature that had exited or written to stdout (killed).
    pub discarded: usize,
}

/// Counts what the pool's reaper did (for metrics): how many warm CLIs it killed as expired.
pub type OnExpired = Box<dyn Fn(usize) + Send + Sync>;

/// Warm CLIs on a [`Shelf`], each with an `A` the caller keeps beside it (its model-proxy token,
/// its working directory's guard…), dropped with it. A task started with the first
/// [`WarmPool::put`] kills the expired ones; it ends with the pool.
pub struct WarmPool<A: Send + 'static> {
    shelf: Mutex<Shelf<(WarmCli, A)>>,
    wake: Arc<tokio::sync::Notify>,
    reaper: Mutex<Option<tokio::task::JoinHandle<()>>>,
    on_expired: OnExpired,
    /// Set by [`WarmPool::clear`]: a later put kills its CLI at once.
    closed: std::sync::atomic::AtomicBool,
    /// Launches whose parked spares the CLI refuses to bind for a reason that will hold for
    /// the next claim too ([`lasting_refusal`]).
    unparkable: Mutex<std::collections::HashSet<Signature>>,
}

/// Whether a claim refusal `reason` (the CLI's error text) will hold for the next claim of the
/// same launch: the CLI's `…_not_claimable` tokens about the claimed directory's settings or the
/// launch's credentials (`project_settings_not_claimable`, `api_key_helper_not_claimable`, …;
/// its schema says a host "may stop pre-starting spares where that would happen").
/// `env_key_not_claimable` is about the claim's own `env`, which Tollgate never sends.
pub fn lasting_refusal(reason: &str) -> bool {
    let token = reason.split(':').next().unwrap_or_default();
    token.ends_with("_not_claimable") && token != "env_key_not_claimable"
}

impl<A: Send + 'static> std::fmt::Debug for WarmPool<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WarmPool").field("len", &self.lock().len()).finish_non_exhaustive()
    }
}

impl<A: Send + 'static> WarmPool<A> {
    /// A pool of at most `cap` warm CLIs, each kept for at most `ttl`.
    pub fn new(cap: usize, ttl: Duration, on_expired: OnExpired) -> Arc<WarmPool<A>> {
        Arc::new(WarmPool {
            shelf: Mutex::new(Shelf::new(cap, ttl)),
            wake: Arc::new(tokio::sync::Notify::new()),
            reaper: Mutex::new(None),
            on_expired,
            closed: std::sync::atomic::AtomicBool::new(false),
            unparkable: Mutex::new(std::collections::HashSet::new()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shelf<(WarmCli, A)>> {
        self.shelf.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Remembers that spares of `key` are refused for good ([`lasting_refusal`]): see
    /// [`WarmPool::parkable`].
    pub fn refuse_parking(&self, key: Signature) {
        self.unparkable.lock().unwrap_or_else(|p| p.into_inner()).insert(key);
    }

    /// Whether a parked spare of `key` may still be claimed (no lasting refusal was seen).
    pub fn parkable(&self, key: &Signature) -> bool {
        !self.unparkable.lock().unwrap_or_else(|p| p.into_inner()).contains(key)
    }

    /// How many warm CLIs of `key` it holds.
    pub fn count(&self, key: &Signature) -> usize {
        self.lock().count(key)
    }

    /// How many warm CLIs it holds.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// The process ids of the warm CLIs it holds.
    pub fn pids(&self) -> Vec<u32> {
        self.lock().items.iter().map(|(_, _, (warm, _))| warm.pid()).collect()
    }

    /// Keeps `warm` under `key`; one pushed out past the cap is killed, and so is `warm` once the
    /// pool was cleared.
    pub fn put(self: &Arc<Self>, key: Signature, warm: WarmCli, attached: A) {
        if self.closed.load(std::sync::atomic::Ordering::SeqCst) {
            dispose(vec![(warm, attached)]);
            return;
        }
        let evicted = self.lock().put(key, (warm, attached), Instant::now());
        dispose(evicted);
        self.ensure_reaper();
        self.wake.notify_one();
    }

    /// Takes a warm CLI of `key` that still waits. Expired ones and ones of `key` that exited
    /// or wrote to stdout are killed on the way.
    pub fn take(&self, key: &Signature) -> Taken<A> {
        let mut discarded = Vec::new();
        let (warm, expired) = {
            let mut shelf = self.lock();
            let (mut found, mut expired) = shelf.take(key, Instant::now());
            while let Some((mut warm, attached)) = found {
                if warm.is_waiting() {
                    found = Some((warm, attached));
                    break;
                }
                tracing::info!(pid = warm.pid(), "a warm CLI exited or wrote before it was taken; discarded");
                discarded.push((warm, attached));
                let (next, more) = shelf.take(key, Instant::now());
                found = next;
                expired.extend(more);
            }
            (found, expired)
        };
        let taken = Taken { warm, expired: expired.len(), discarded: discarded.len() };
        if taken.expired > 0 {
            (self.on_expired)(taken.expired);
        }
        dispose(expired);
        dispose(discarded);
        taken
    }

    /// Kills every warm CLI it holds, and those put later (a stopping Worker's).
    pub fn clear(&self) {
        self.closed.store(true, std::sync::atomic::Ordering::SeqCst);
        let all = self.lock().drain();
        dispose(all);
    }

    fn ensure_reaper(self: &Arc<Self>) {
        let mut reaper = self.reaper.lock().unwrap_or_else(|p| p.into_inner());
        if reaper.as_ref().is_some_and(|task| !task.is_finished()) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let pool = Arc::downgrade(self);
        *reaper = Some(runtime.spawn(reap(pool, self.wake.clone())));
    }
}

impl<A: Send + 'static> Drop for WarmPool<A> {
    fn drop(&mut self) {
        if let Some(task) = self.reaper.get_mut().unwrap_or_else(|p| p.into_inner()).take() {
            task.abort();
        }
        // The warm CLIs are dropped with the shelf: their groups killed, directories removed.
    }
}

/// Kills what the pool gave up: reaped in the background when a runtime runs, else dropped
/// (the group killed at once, the process reaped by tokio).
fn dispose<A: Send + 'static>(items: Vec<(WarmCli, A)>) {
    if items.is_empty() {
        return;
    }
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn(async move {
                for (warm, attached) in items {
                    warm.shutdown().await;
                    drop(attached);
                }
            });
        }
        Err(_) => drop(items),
    }
}

/// The reaper: sleeps until the next warm CLI expires (or a put), kills the expired ones; ends
/// when the pool is gone.
async fn reap<A: Send + 'static>(pool: Weak<WarmPool<A>>, wake: Arc<tokio::sync::Notify>) {
    loop {
        let Some(strong) = pool.upgrade() else { return };
        let expired = strong.lock().expire(Instant::now());
        if !expired.is_empty() {
            tracing::info!(killed = expired.len(), "warm CLIs expired unused");
            (strong.on_expired)(expired.len());
            dispose(expired);
        }
        let next = strong.lock().next_expiry();
        drop(strong);
        let notified = wake.notified();
        match next {
            Some(at) => {
                tokio::select! {
                    () = tokio::time::sleep_until(tokio::time::Instant::from_std(at)) => {}
                    () = notified => {}
                }
            }
            None => notified.await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CliBinary, Start};

    fn key(name: &str) -> Signature {
        Signature(name.to_owned())
    }

    #[test]
    fn a_take_finds_only_its_own_signature_oldest_first_and_each_item_once() {
        let now = Instant::now();
        let mut shelf = Shelf::new(4, Duration::from_secs(60));
        assert!(shelf.put(key("a"), 1, now).is_empty());
        assert!(shelf.put(key("b"), 2, now).is_empty());
        assert!(shelf.put(key("a"), 3, now).is_empty());
        assert_eq!(shelf.count(&key("a")), 2);
        assert_eq!(shelf.take(&key("c"), now), (None, vec![]));
        assert_eq!(shelf.take(&key("a"), now), (Some(1), vec![]));
        assert_eq!(shelf.take(&key("a"), now), (Some(3), vec![]));
        assert_eq!(shelf.take(&key("a"), now), (None, vec![]));
        assert_eq!(shelf.len(), 1);
    }

    #[test]
    fn only_refusals_about_the_settings_or_credentials_last() {
        for reason in [
            "project_settings_not_claimable: settings.json in the claimed directory sets env, …",
            "api_key_helper_not_claimable: …",
            "provider_credentials_not_claimable: the project names a credential command …",
        ] {
            assert!(lasting_refusal(reason), "{reason}");
        }
        for reason in [
            "cwd_not_found: the claim cwd does not exist or is not accessible",
            "env_key_not_claimable: ANTHROPIC_BASE_URL is read during start-up",
            "no answer to claim_session within 60s",
            "busy: a turn is in progress",
        ] {
            assert!(!lasting_refusal(reason), "{reason}");
        }
    }

    #[test]
    fn past_the_cap_the_oldest_goes_and_a_cap_of_zero_keeps_nothing() {
        let now = Instant::now();
        let mut shelf = Shelf::new(2, Duration::from_secs(60));
        shelf.put(key("a"), 1, now);
        shelf.put(key("b"), 2, now + Duration::from_secs(1));
        assert_eq!(shelf.put(key("a"), 3, now + Duration::from_secs(2)), vec![1]);
        assert_eq!(shelf.len(), 2);
        let mut off = Shelf::new(0, Duration::from_secs(60));
        assert_eq!(off.put(key("a"), 1, now), vec![1]);
        assert!(off.is_empty());
    }

    #[test]
    fn an_item_past_its_time_to_live_is_never_taken_and_comes_back_as_expired() {
        let now = Instant::now();
        let ttl = Duration::from_secs(10);
        let mut shelf = Shelf::new(4, ttl);
        shelf.put(key("a"), 1, now);
        shelf.put(key("b"), 2, now + Duration::from_secs(5));
        assert_eq!(shelf.next_expiry(), Some(now + ttl));
        assert_eq!(shelf.take(&key("a"), now + ttl), (None, vec![1]), "expired at exactly its ttl");
        assert_eq!(shelf.next_expiry(), Some(now + Duration::from_secs(15)));
        assert_eq!(shelf.expire(now + Duration::from_secs(14)), Vec::<i32>::new());
        assert_eq!(shelf.expire(now + Duration::from_secs(15)), vec![2]);
        assert_eq!(shelf.next_expiry(), None);
    }

    fn spec(cwd: &str, start: Start) -> SegmentSpec {
        SegmentSpec::with_start(CliBinary::unchecked("claude"), cwd, start)
    }

    fn fresh() -> Start {
        Start::Fresh { prompt: tollgate_protocol::UserPrompt::text("hi") }
    }

    #[test]
    fn the_signature_leaves_out_the_per_process_values_and_keeps_everything_else() {
        let stand_in = Path::new("/ws/*");
        let a = spec("/ws/s1", fresh()).env("ANTHROPIC_API_KEY", "tgp-1").env("TZ", "UTC");
        let b = spec("/ws/s2", fresh()).env("ANTHROPIC_API_KEY", "tgp-2").env("TZ", "UTC");
        let per_process = ["ANTHROPIC_API_KEY"];
        assert_eq!(Signature::of(&a, stand_in, &per_process), Signature::of(&b, stand_in, &per_process));
        assert_ne!(Signature::of(&a, stand_in, &[]), Signature::of(&b, stand_in, &[]), "the token counts");
        assert_ne!(
            Signature::of(&a, &a.cwd, &per_process),
            Signature::of(&b, &b.cwd, &per_process),
            "the cwd counts when it is passed"
        );
        let mut other_options = b.clone();
        other_options.extra_args.push("--model=claude-opus-4-1".into());
        assert_ne!(
            Signature::of(&a, stand_in, &per_process),
            Signature::of(&other_options, stand_in, &per_process)
        );
        let other_env = b.clone().env("TZ", "Europe/Paris");
        assert_ne!(
            Signature::of(&a, stand_in, &per_process),
            Signature::of(&other_env, stand_in, &per_process)
        );
        let resume = Start::Resume { session_id: "s-1".into(), transcript: Default::default(), prompt: None };
        let resumed = spec("/ws/s1", resume).env("ANTHROPIC_API_KEY", "tgp-3").env("TZ", "UTC");
        assert_ne!(
            Signature::of(&a, stand_in, &per_process),
            Signature::of(&resumed, stand_in, &per_process),
            "--resume=<session> is in the argv"
        );
    }
}
