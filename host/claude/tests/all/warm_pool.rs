//! The pool of pre-started CLIs with a stand-in process (a script that reads stdin and writes
//! nothing, like a CLI waiting for its `initialize`): keys, the time to live, a process that died
//! before the take, and the scratch directories of each. The real CLI on a warm process is in
//! `real_cli`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tollgate_claude::pool::{Signature, WarmCli, WarmPool};
use tollgate_claude::{CliBinary, SegmentSpec};
use tollgate_testing::alive;

use crate::util::dir;

/// A program that takes any arguments, reads stdin to its end and writes nothing.
fn waiter() -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    static DIR: std::sync::LazyLock<tempfile::TempDir> = std::sync::LazyLock::new(dir);
    let path = DIR.path().join("waiter");
    if !path.exists() {
        let staged = DIR.path().join(format!("waiter.{:?}", std::thread::current().id()));
        std::fs::write(&staged, "#!/bin/sh\nexec cat >/dev/null\n").expect("write the waiter");
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::rename(&staged, &path).expect("place the waiter");
    }
    path
}

fn stand_in(scratch: &std::path::Path, model: &str) -> SegmentSpec {
    let mut spec = SegmentSpec::fresh(CliBinary::unchecked(waiter()), "/", "unused")
        .env("ANTHROPIC_API_KEY", format!("token-{model}"));
    spec.extra_args.push(format!("--model={model}"));
    spec.scratch_parent = Some(scratch.to_path_buf());
    spec
}

fn key(spec: &SegmentSpec) -> Signature {
    Signature::of(spec, &spec.cwd, &["ANTHROPIC_API_KEY"])
}

fn scratch_dirs(parent: &std::path::Path) -> usize {
    std::fs::read_dir(parent).map(|entries| entries.count()).unwrap_or(0)
}

async fn until(what: &str, done: impl Fn() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(10), "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_warm_cli_of_other_options_is_not_taken_and_one_of_the_same_launch_is_taken_once() {
    let scratch = dir();
    let pool = WarmPool::<&str>::new(4, Duration::from_secs(60), Box::new(|_| {}));
    let sonnet = stand_in(scratch.path(), "sonnet");
    let warm = WarmCli::spawn(&sonnet).expect("spawn");
    let pid = warm.pid();
    pool.put(key(&sonnet), warm, "kept beside it");
    let opus = stand_in(scratch.path(), "opus");
    let other = pool.take(&key(&opus));
    assert!(other.warm.is_none(), "another --model is another launch");
    // Another token only: the same launch.
    let mut same = stand_in(scratch.path(), "sonnet");
    same.env = vec![("ANTHROPIC_API_KEY".into(), "another-token".into())];
    let taken = pool.take(&key(&same));
    let (warm, attached) = taken.warm.expect("the same launch takes it");
    assert_eq!((warm.pid(), attached), (pid, "kept beside it"));
    assert!(pool.take(&key(&same)).warm.is_none(), "a warm CLI is used once");
    assert!(pool.is_empty());
    warm.shutdown().await;
    assert!(!alive(pid));
    until("the scratch directory is removed", || scratch_dirs(scratch.path()) == 0).await;
}

#[tokio::test]
async fn a_warm_cli_killed_before_the_take_is_discarded() {
    let scratch = dir();
    let pool = WarmPool::<()>::new(4, Duration::from_secs(60), Box::new(|_| {}));
    let spec = stand_in(scratch.path(), "sonnet");
    let warm = WarmCli::spawn(&spec).expect("spawn");
    let pid = warm.pid();
    pool.put(key(&spec), warm, ());
    // SAFETY: kill(2) has no memory effects.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let taken = pool.take(&key(&spec));
    assert!(taken.warm.is_none());
    assert_eq!(taken.discarded, 1);
    until("the dead warm CLI's scratch directory is removed", || scratch_dirs(scratch.path()) == 0).await;
}

#[tokio::test]
async fn after_the_time_to_live_a_warm_cli_is_killed_and_its_scratch_directory_removed() {
    let scratch = dir();
    let expired = Arc::new(AtomicUsize::new(0));
    let counter = expired.clone();
    let pool = WarmPool::<()>::new(
        4,
        Duration::from_millis(500),
        Box::new(move |n| {
            counter.fetch_add(n, Ordering::Relaxed);
        }),
    );
    let spec = stand_in(scratch.path(), "sonnet");
    let warm = WarmCli::spawn(&spec).expect("spawn");
    let pid = warm.pid();
    pool.put(key(&spec), warm, ());
    assert_eq!(scratch_dirs(scratch.path()), 1);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(alive(pid), "it waits");
    until("the warm CLI is killed after its time to live", || !alive(pid)).await;
    until("its scratch directory is removed", || scratch_dirs(scratch.path()) == 0).await;
    assert!(pool.is_empty());
    assert_eq!(expired.load(Ordering::Relaxed), 1);
}

#[tokio::test]
async fn past_the_cap_the_oldest_warm_cli_is_killed() {
    let scratch = dir();
    let pool = WarmPool::<()>::new(1, Duration::from_secs(60), Box::new(|_| {}));
    let spec = stand_in(scratch.path(), "sonnet");
    let first = WarmCli::spawn(&spec).expect("spawn");
    let first_pid = first.pid();
    pool.put(key(&spec), first, ());
    let second = WarmCli::spawn(&spec).expect("spawn");
    let second_pid = second.pid();
    pool.put(key(&spec), second, ());
    until("the oldest is killed", || !alive(first_pid)).await;
    assert!(alive(second_pid));
    assert_eq!(pool.pids(), [second_pid]);
    pool.clear();
    until("clear kills the rest", || !alive(second_pid)).await;
    until("and removes their directories", || scratch_dirs(scratch.path()) == 0).await;
}
