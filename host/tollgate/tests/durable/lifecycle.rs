//! A Worker's life and death: SIGTERM drains (finishes the step in hand, or releases it to another
//! Worker at once; a second SIGTERM at once), the CLI dies with a SIGKILLed Worker and the next
//! Worker kills the `Bash` command it left running, segment folders are private and the next
//! Worker removes a dead one's, poison steps end instead of looping, a session whose row cannot be
//! read ends its turn with an error event, and a queued turn shows `running`. A segment whose
//! Worker is SIGKILLed three times in a row still completes; one that loses more Workers than
//! `max_lost_workers` fails its turn as `worker_stopped`. A box a SIGKILLed Worker left half-started
//! is killed by the next Worker, which removes the dead one's model socket folder too.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tollgate_store::StepState;
use tollgate_testing::alive;

use crate::served::Served;
use crate::world::{Refund, WorkerProcess, World};

const REFUND: &str = r#"call create_refund {"order_id":"7","amount_cents":500}"#;
const GATE_WAIT: Duration = Duration::from_secs(60);

/// Waits until `worker`'s log contains `text` (60 s at most).
async fn wait_log(worker: &WorkerProcess, text: &str) {
    let start = Instant::now();
    while !worker.log_text().contains(text) {
        assert!(start.elapsed() < Duration::from_secs(60), "no {text:?} in the log:\n{}", worker.log_text());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls the step until a claim newer than `fence` holds it; returns the time since `since`.
async fn wait_for_reclaim(world: &World, step_id: i64, fence: i64, since: Instant) -> Duration {
    loop {
        let step = world.store.step(step_id).await.expect("read the step").expect("the step exists");
        if step.fence > fence && step.state == StepState::Claimed {
            return since.elapsed();
        }
        assert!(
            since.elapsed() < Duration::from_secs(60),
            "never reclaimed: {step:?}\n{}",
            world.diagnostics()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn last_answer(snapshot: &tollgate_api::api::types::Snapshot) -> String {
    snapshot.messages.iter().rev().find(|m| m.role == "assistant").map(|m| m.text.clone()).unwrap_or_default()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).expect("stat").permissions().mode() & 0o777
}

/// The segment folders of process `pid` under `dir`.
fn segment_folders(dir: &Path, pid: u32) -> Vec<PathBuf> {
    folders_of(dir, tollgate_claude::launch::SCRATCH_PREFIX, pid)
}

/// The folders in `dir` named `<prefix><pid>-…`.
fn folders_of(dir: &Path, prefix: &str, pid: u32) -> Vec<PathBuf> {
    let prefix = format!("{prefix}{pid}-");
    std::fs::read_dir(dir)
        .expect("read the temp dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect()
}

/// An operator who does not want to wait for the drain sends SIGTERM again: the step in hand is
/// stopped and released at once, and the Worker exits.
#[tokio::test(flavor = "multi_thread")]
async fn a_second_sigterm_cuts_the_drain_short_and_releases_the_step() {
    let Some(world) = World::new("second sigterm", Refund::SingleAttemptWithApproval).await else { return };
    let mut a = world.worker_with("a", &world.db, &["--drain-secs", "120", "--concurrency", "1"]);
    wait_log(&a, "worker started").await;
    world.send("s", "pause h2 ;; say hello").await;
    world.mock.wait_for_gate("h2", GATE_WAIT).await.expect("A's segment reached the model");
    let held = world.store.step_in_flight("s").await.unwrap().expect("A holds the step");

    a.signal(libc::SIGTERM);
    wait_log(&a, "finishing the steps in hand").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(a.is_running(), "one SIGTERM drains: A waits for its step\n{}", a.log_text());
    let second = Instant::now();
    a.signal(libc::SIGTERM);
    let status = a.exited().await;
    let took = second.elapsed();
    eprintln!("second SIGTERM to exit: {} ms (drain time 120 s)", took.as_millis());
    let log = std::fs::read_to_string(world.dir.path().join("a.log")).expect("A's log");
    assert!(status.success(), "A exits cleanly: {status}\n{log}");
    assert!(took < Duration::from_secs(20), "{took:?}\n{log}");
    assert!(log.contains("cutting the drain short") && log.contains("released the step"), "{log}");
    let step = world.store.step(held.step_id).await.unwrap().unwrap();
    assert_eq!(
        (step.state, step.attempt),
        (StepState::Queued, held.attempt - 1),
        "handed back; the released attempt is not counted (the next claim is attempt {} again)",
        held.attempt
    );
    world.mock.open_gate("h2");
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_with_drain_zero_hands_a_running_segment_to_another_worker_at_once() {
    let Some(db) = crate::pg_database().await else { return };
    let Some(world) = World::on_db("drain handover", Refund::SingleAttemptWithApproval, &db).await else {
        return;
    };
    const LEASE_SECS: u64 = 10;
    let lease = LEASE_SECS.to_string();
    let args = |drain: &'static str| {
        vec!["--lease-secs", &lease, "--heartbeat-secs", "2", "--concurrency", "1", "--drain-secs", drain]
    };
    let a = world.worker_with("a", &world.db, &args("0"));
    world.send("s", "pause h1 ;; say hello").await;
    world.mock.wait_for_gate("h1", GATE_WAIT).await.expect("A's segment reached the model");
    let held = world.store.step_in_flight("s").await.unwrap().expect("A holds the step");
    let cli = a.children();
    assert_eq!(cli.len(), 1, "A runs one CLI: {cli:?}");
    let b = world.worker_with("b", &world.db, &args("30"));
    wait_log(&b, "worker started").await;

    let sigterm = Instant::now();
    a.signal(libc::SIGTERM);
    let handover = wait_for_reclaim(&world, held.step_id, held.fence, sigterm).await;
    let a_log = a.log_text();
    let status = a.exited().await;
    let exited = sigterm.elapsed();
    assert!(status.success(), "A exits cleanly: {status}\n{a_log}");
    // Killed before A exited; a loaded machine may take a moment to tear the process down.
    let stopped = Instant::now();
    while alive(cli[0]) {
        assert!(stopped.elapsed() < Duration::from_secs(5), "A's CLI {} outlived A's drain", cli[0]);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let a_log = std::fs::read_to_string(world.dir.path().join("a.log")).unwrap_or(a_log);
    assert!(a_log.contains("released the step"), "{a_log}");
    let reclaimed = world.store.step(held.step_id).await.unwrap().unwrap();
    assert_eq!(reclaimed.attempt, held.attempt, "the released attempt is not counted");

    world.mock.wait_for_gate_arrivals("h1", 2, GATE_WAIT).await.expect("B's segment reached the model");
    world.mock.open_gate("h1");
    let done = world.wait_idle_after("s", 1).await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());
    assert_eq!(last_answer(&done), "said: hello");
    let events = world.events("s").await;
    assert_eq!(events.iter().filter(|e| e.kind == "turn_completed").count(), 1, "{events:?}");
    let claims: std::collections::BTreeSet<_> = events.iter().filter_map(|e| e.step).collect();
    assert!(claims.len() >= 2, "A's and B's claims wrote events, each under its fence: {claims:?}");

    eprintln!(
        "handover to another Worker (PostgreSQL, lease {LEASE_SECS} s, heartbeat 2 s): after SIGTERM with \
         --drain-secs 0 {} ms (the Worker exited after {} ms)",
        handover.as_millis(),
        exited.as_millis()
    );
    assert!(
        handover < Duration::from_secs(LEASE_SECS) / 2,
        "a released step is taken well before the lease: {handover:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_lets_the_step_in_hand_finish_within_the_drain_time_and_claims_nothing_new() {
    let Some(world) = World::new("drain finishes the step", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let a = world.worker_with(
        "a",
        &world.db,
        &["--lease-secs", "3", "--heartbeat-secs", "1", "--concurrency", "2", "--drain-secs", "60"],
    );
    world.send("s", "pause d1 ;; say drained").await;
    world.mock.wait_for_gate("d1", GATE_WAIT).await.expect("the segment reached the model");
    a.signal(libc::SIGTERM);
    wait_log(&a, "worker stopping").await;
    world.send("later", "say never by A").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    world.mock.open_gate("d1");
    let log_path = a.log.clone();
    let status = a.exited().await;
    let log = std::fs::read_to_string(log_path).unwrap_or_default();
    assert!(status.success(), "{status}\n{log}");
    assert!(!log.contains("released the step"), "the step finished in time: {log}");
    let done = world.snapshot("s").await;
    assert_eq!((done.status.as_str(), last_answer(&done).as_str()), ("idle", "said: drained"), "{log}");
    let queued = world.store.step_in_flight("later").await.unwrap().expect("still queued");
    assert_eq!(
        (queued.state, queued.attempt),
        (StepState::Queued, 0),
        "a stopping Worker claims nothing new"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_single_attempt_write_released_mid_call_is_outcome_unknown_and_never_runs_twice() {
    let Some(world) = World::new("release mid-call", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    world.payments.hold();
    let a = world.worker_with(
        "a",
        &world.db,
        &["--lease-secs", "3", "--heartbeat-secs", "1", "--concurrency", "2", "--drain-secs", "0"],
    );
    world.send("s", REFUND).await;
    let waiting = world.wait_for("s", "the approval", |s| s.status == "awaiting_approval").await;
    let id = waiting.pending_interrupts[0].interrupt_id.clone();
    world.decide("s", &id, true, None, "k").await;
    world.payments.wait_for(1).await;
    a.signal(libc::SIGTERM);
    let log_path = a.log.clone();
    assert!(a.exited().await.success());
    let log = std::fs::read_to_string(log_path).unwrap_or_default();
    assert!(log.contains("released the step"), "{log}");
    let step = world.store.step_in_flight("s").await.unwrap().expect("the released step");
    assert_eq!((step.kind.as_str(), step.state), ("CallSingleAttemptTool", StepState::Queued));
    world.payments.release();

    let _b = world.worker("b");
    let done = world.wait_idle_after("s", 1).await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());
    assert_eq!(done.tool_calls[0].state.name(), "outcome_unknown", "{done:#?}");
    assert_eq!(world.payments.count(), 1, "never run twice");
    let (seen, is_error) = world.tool_result_seen(&id).expect("the model was told");
    assert!(seen.contains("unknown") && is_error, "{seen}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sigkilled_workers_cli_dies_with_it_and_the_next_worker_removes_its_private_segment_folder() {
    let Some(world) = World::new("CLI dies with its Worker", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let tmp = world.dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let env = [("TMPDIR", tmp.to_str().unwrap())];
    let a = world.worker_with_env("a", &env);
    world.send("s", "pause k1 ;; say after").await;
    world.mock.wait_for_gate("k1", GATE_WAIT).await.expect("the segment reached the model");
    let cli = a.children();
    assert_eq!(cli.len(), 1, "{cli:?}");
    let folders = segment_folders(&tmp, a.id());
    assert_eq!(folders.len(), 1, "one segment folder named by A's pid: {folders:?}");
    let folder = folders[0].clone();
    // A box's host folder and its init's folder, open to no one else; the `/etc` every box of A
    // shares (made-up users, certificates, the CLI's managed settings: nothing secret) is apart.
    for dir in [folder.clone(), folder.join("box")] {
        assert_eq!(mode(&dir), 0o700, "{} is private", dir.display());
    }
    assert!(!folder.join("etc").exists(), "no /etc of its own");
    let shared_etc = |pid: u32| -> Vec<PathBuf> {
        let prefix = format!("{}{pid}-", tollgate_box::layout::SHARED_ETC_PREFIX);
        std::fs::read_dir(&tmp)
            .expect("read the temp dir")
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .map(|e| e.path())
            .collect()
    };
    let a_pid = a.id();
    let etc = shared_etc(a_pid);
    assert_eq!(etc.len(), 1, "A's boxes share one /etc: {etc:?}");
    assert_eq!(mode(&etc[0]), 0o755, "{}", etc[0].display());

    let killed = Instant::now();
    a.kill().await;
    while alive(cli[0]) {
        assert!(killed.elapsed() < Duration::from_secs(10), "the CLI {} outlived its Worker", cli[0]);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let died = killed.elapsed();
    eprintln!("the CLI died {} ms after its Worker was SIGKILLed", died.as_millis());
    assert!(died < Duration::from_secs(2), "{died:?}");
    assert!(folder.exists(), "a SIGKILLed Worker cannot clean up");

    let b = world.worker_with_env("b", &env);
    wait_log(&b, "removed segment directories").await;
    assert!(!folder.exists(), "B removed A's folder");
    assert!(shared_etc(a_pid).is_empty(), "and A's /etc");
    world.mock.open_gate("k1");
    let done = world.wait_idle_after("s", 1).await;
    assert_eq!(last_answer(&done), "said: after", "{}", world.diagnostics());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(segment_folders(&tmp, b.id()).is_empty(), "B removes its own folder after each segment");
}

/// SIGKILLs process `.0` when dropped.
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.0) {
            // SAFETY: kill(2) has no memory effects.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// A Worker SIGKILLed while `bwrap` starts a box leaves `bwrap`'s child behind: it waits on an
/// eventfd for its parent (dead with the Worker) to write its user namespace's maps, forever, and
/// has no parent-death signal of its own yet. Made here with the real `bwrap`, whose parent is held
/// at that point by `--userns-block-fd`, then SIGKILLed. With the Worker, its model proxy's socket
/// folder stays too. The next Worker kills the one and removes the other.
#[tokio::test(flavor = "multi_thread")]
async fn the_next_worker_kills_a_box_a_sigkilled_worker_left_half_started_and_removes_its_socket_folder() {
    use std::os::unix::process::CommandExt;
    let Some(world) = World::new("half-started box", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let tmp = world.dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let env = [("TMPDIR", tmp.to_str().unwrap())];
    let a = world.worker_with_env("a", &env);
    let a_pid = a.id();
    // The model proxy starts with A's first segment.
    world.send("s", "say hi").await;
    world.wait_idle_after("s", 1).await;
    let start = Instant::now();
    let run = loop {
        if let [run] = &folders_of(&tmp, tollgate_claude::launch::RUN_PREFIX, a_pid)[..] {
            break run.clone();
        }
        assert!(start.elapsed() < GATE_WAIT, "A made no model socket folder\n{}", a.log_text());
        tokio::time::sleep(Duration::from_millis(20)).await;
    };

    // As the Worker starts a box: as the boxes' user when root, binding A's model socket.
    let mut outer = std::process::Command::new("bwrap");
    outer
        .args([
            "--unshare-all",
            "--unshare-user",
            "--die-with-parent",
            "--info-fd",
            "1",
            "--userns-block-fd",
            "0",
        ])
        .args(["--ro-bind", "/usr", "/usr", "--bind"])
        .arg(run.join("model.sock"))
        .args(["/run/tollgate/model.sock", "--", "/usr/bin/true"])
        .env_clear()
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        outer.uid(65534).gid(65534);
    }
    let mut outer = outer.spawn().expect("start bwrap");
    let children = format!("/proc/{0}/task/{0}/children", outer.id());
    let child: u32 = loop {
        let listed = std::fs::read_to_string(&children).unwrap_or_default();
        if let Some(pid) = listed.split_whitespace().next() {
            break pid.parse().unwrap();
        }
        assert!(start.elapsed() < GATE_WAIT, "bwrap made no child");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    // Should the test fail, the child must not outlive it.
    let _child = KillOnDrop(child);
    outer.kill().unwrap();
    outer.wait().unwrap();
    a.kill().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(alive(child), "bwrap's child {child} waits for the parent that died");
    assert!(run.exists(), "a SIGKILLed Worker cannot remove its socket folder");

    let b = world.worker_with_env("b", &env);
    wait_log(&b, "removed segment directories").await;
    let killed = Instant::now();
    while alive(child) {
        assert!(killed.elapsed() < Duration::from_secs(5), "B left A's half-started box {child} running");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!run.exists(), "B removed A's model socket folder");
    assert!(b.log_text().contains("killed the processes a dead Worker left running"), "{}", b.log_text());
}

/// SIGKILLs a Worker each time the session's segment reaches the mock (parked at `gate`),
/// `kills` times in a row, each time starting the next Worker after; returns the last one.
async fn kill_each_worker_it_lands_on(world: &World, gate: &str, kills: u64) -> WorkerProcess {
    for kill in 1..=kills {
        let worker = world.worker(&format!("w{kill}"));
        world
            .mock
            .wait_for_gate_arrivals(gate, kill, GATE_WAIT)
            .await
            .expect("the segment reached the model");
        worker.kill().await;
    }
    world.worker(&format!("w{}", kills + 1))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_segment_whose_worker_is_sigkilled_three_times_in_a_row_still_completes() {
    let Some(world) = World::new("three lost Workers", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    world.send("s", "pause lost ;; say survived").await;
    let _last = kill_each_worker_it_lands_on(&world, "lost", 3).await;
    world.mock.wait_for_gate_arrivals("lost", 4, GATE_WAIT).await.expect("a fourth claim runs the segment");
    world.mock.open_gate("lost");
    let done = world.wait_idle_after("s", 1).await;
    assert_eq!(
        done.last_turn_error,
        None,
        "a Worker's death is not the turn's fault\n{}",
        world.diagnostics()
    );
    assert_eq!(last_answer(&done), "said: survived");
    let attempts: Vec<String> = world
        .events("s")
        .await
        .iter()
        .filter(|e| e.kind == "turn_started")
        .map(|e| e.payload.get().to_owned())
        .collect();
    assert_eq!(attempts.len(), 4, "four claims of the segment: {attempts:?}");
    assert!(attempts[3].contains(r#""attempt":4"#), "each claim names itself: {attempts:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_segment_that_loses_more_workers_than_allowed_fails_its_turn_as_worker_stopped() {
    let Some(world) = World::new("too many lost Workers", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let config = std::fs::read_to_string(world.agent.join("tollgate.toml")).expect("config");
    let config = config.replace("[agent]\n", "[agent]\nmax_lost_workers = 1\n");
    assert!(config.contains("max_lost_workers = 1"), "the example has no [agent] table");
    std::fs::write(world.agent.join("tollgate.toml"), config).expect("write config");
    world.send("s", "pause doomed ;; say never").await;
    let _last = kill_each_worker_it_lands_on(&world, "doomed", 2).await;
    let failed = world.wait_idle_after("s", 1).await;
    let error = failed.last_turn_error.clone().unwrap_or_default();
    assert!(error.contains("lost its Worker 2 times") && error.contains("the 1 allowed"), "{error}");
    let events = world.events("s").await;
    let turn_failed = events.iter().find(|e| e.kind == "turn_failed").expect("a turn_failed event");
    assert!(
        turn_failed.payload.get().contains(r#""reason":"worker_stopped""#),
        "{}",
        turn_failed.payload.get()
    );
    assert_eq!(world.mock.gate("doomed").arrivals, 2, "the third claim ran no segment");
}

/// The processes of `sleep <seconds>`, from `/proc`.
fn sleeps(seconds: &str) -> Vec<u32> {
    tollgate_testing::processes(|args| {
        args.len() == 2 && args[0].ends_with(b"sleep") && args[1] == seconds.as_bytes()
    })
    .into_iter()
    .filter_map(|pid| u32::try_from(pid).ok())
    .filter(|pid| alive(*pid))
    .collect()
}

/// A `Bash` command the CLI started is in its own process group and outlives the CLI, which dies
/// with its SIGKILLed Worker; the next Worker on the host kills it when it removes the dead
/// Worker's segment folder (the command's environment points into it).
#[tokio::test(flavor = "multi_thread")]
async fn a_bash_command_a_sigkilled_workers_cli_left_running_is_killed_by_the_next_worker() {
    let Some(world) = World::new("orphaned bash command", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    crate::secrets::bash_agent(&world.agent, "");
    let tmp = world.dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let env = [("TMPDIR", tmp.to_str().unwrap())];
    let seconds = format!("299.{}", std::process::id());
    // Unboxed: in a box, the command dies with its CLI (the next test).
    let unboxed = ["--lease-secs", "3", "--heartbeat-secs", "1", "--concurrency", "2", "--sandbox", "none"];
    let a = world.worker_with_args_env("a", &unboxed, &env);
    world
        .send(
            "s",
            &format!(
                "call Bash {}",
                serde_json::json!({ "command": format!("echo waiting && sleep {seconds} && echo done") })
            ),
        )
        .await;
    let start = Instant::now();
    while sleeps(&seconds).is_empty() {
        assert!(start.elapsed() < GATE_WAIT, "the Bash command never started\n{}", world.diagnostics());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cli = a.children();
    a.kill().await;
    let killed = Instant::now();
    while cli.iter().any(|pid| alive(*pid)) {
        assert!(killed.elapsed() < Duration::from_secs(10), "the CLI outlived its Worker");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let orphans = sleeps(&seconds);
    assert!(!orphans.is_empty(), "the command outlives the CLI (its own process group): nothing to test");

    let b = world.worker_with_args_env("b", &unboxed, &env);
    wait_log(&b, "removed segment directories").await;
    let start = Instant::now();
    while orphans.iter().any(|pid| alive(*pid)) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "B left A's command {orphans:?} running\n{}",
            b.log_text()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(b.log_text().contains("killed the processes a dead Worker left running"), "{}", b.log_text());
    eprintln!("B killed {} process(es) A's CLI left running", orphans.len());
}

#[tokio::test(flavor = "multi_thread")]
async fn in_a_box_a_bash_command_dies_with_its_sigkilled_workers_cli() {
    let Some(world) = World::new("boxed bash command", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    crate::secrets::bash_agent(&world.agent, "");
    let seconds = format!("298.{}", std::process::id());
    let a = world.worker("a");
    let command = format!("echo waiting && sleep {seconds} && echo done");
    world.send("s", &format!("call Bash {}", serde_json::json!({ "command": command }))).await;
    let start = Instant::now();
    while sleeps(&seconds).is_empty() {
        assert!(start.elapsed() < GATE_WAIT, "the Bash command never started\n{}", world.diagnostics());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let running = sleeps(&seconds);
    a.kill().await;
    let killed = Instant::now();
    while running.iter().any(|pid| alive(*pid)) {
        assert!(
            killed.elapsed() < Duration::from_secs(5),
            "the boxed command {running:?} outlived its Worker"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    eprintln!("the boxed command died {} ms after its Worker", killed.elapsed().as_millis());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_is_running_from_the_moment_its_turn_is_queued_until_the_last_queued_turn_ends() {
    let Some(world) = World::new("running status", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let running = || async {
        let list = world.store.list_sessions(Some("running"), "", 10).await.unwrap();
        list.into_iter().map(|s| s.session_id).collect::<Vec<_>>()
    };
    world.send("s", "pause r1 ;; say first").await;
    assert_eq!(world.snapshot("s").await.status, "running", "queued, no Worker yet");
    assert_eq!(running().await, ["s"]);
    // A long lease: nothing is killed here, and a lease lost to a stalled machine would rerun the
    // first segment with both prompts as one turn (right, but not the two turns this test follows).
    let _a = world.worker_with(
        "a",
        &world.db,
        &["--lease-secs", "30", "--heartbeat-secs", "1", "--concurrency", "2"],
    );
    world.mock.wait_for_gate("r1", GATE_WAIT).await.expect("the segment reached the model");
    assert_eq!(world.snapshot("s").await.status, "running", "its first segment runs");
    tollgate_sessions::writes::send(world.store.as_ref(), "s", "pause r2 ;; say second", None).await.unwrap();
    world.mock.open_gate("r1");
    world.mock.wait_for_gate("r2", GATE_WAIT).await.expect("the queued turn started");
    let between = world.snapshot("s").await;
    assert_eq!(between.status, "running", "the queued turn runs: {between:#?}");
    world.mock.open_gate("r2");
    let done = world.wait_idle_after("s", 2).await;
    assert_eq!((done.status.as_str(), last_answer(&done).as_str()), ("idle", "said: second"));
    assert!(running().await.is_empty());
}

/// Opens the world's SQLite file for raw SQL (so the test may rewrite items the conversation's
/// projection was made from).
async fn raw_sqlite(world: &World) -> sqlx::SqliteConnection {
    use sqlx::ConnectOptions;
    world.items_rewritten.store(true, std::sync::atomic::Ordering::Relaxed);
    let path = world.db.strip_prefix("sqlite://").expect("a SQLite world");
    sqlx::sqlite::SqliteConnectOptions::new().filename(path).connect().await.expect("open the file")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_whose_run_state_cannot_be_read_ends_each_turn_with_an_error_event() {
    let Some(world) = World::new("unreadable run state", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    for session in ["not-json", "wrong-shape", "good"] {
        tollgate_sessions::writes::start(world.store.as_ref(), session).await.unwrap();
    }
    let mut conn = raw_sqlite(&world).await;
    sqlx::query("UPDATE sessions SET run_state = '{broken' WHERE session_id = 'not-json'")
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query(
        "UPDATE sessions SET run_state = '{\"version\":1,\"turn_entries\":7}' WHERE session_id = 'wrong-shape'",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let run_state = |id: &'static str| {
        let path = world.db.clone();
        async move {
            use sqlx::ConnectOptions;
            let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
                .filename(path.strip_prefix("sqlite://").unwrap())
                .connect()
                .await
                .unwrap();
            sqlx::query_scalar::<_, String>("SELECT run_state FROM sessions WHERE session_id = ?")
                .bind(id)
                .fetch_one(&mut conn)
                .await
                .unwrap()
        }
    };
    let _a = world.worker("a");
    for session in ["not-json", "wrong-shape", "good"] {
        tollgate_sessions::writes::send(world.store.as_ref(), session, "say hi", Some("k1"))
            .await
            .expect("accepted");
    }
    let good = world.wait_idle_after("good", 1).await;
    assert_eq!(last_answer(&good), "said: hi", "{}", world.diagnostics());
    for (session, named) in
        [("not-json", "corrupt row in `sessions`"), ("wrong-shape", "run state is corrupt")]
    {
        let start = Instant::now();
        let failed = loop {
            let events = world.events(session).await;
            if let Some(e) = events.iter().find(|e| e.kind == "turn_failed") {
                break e.payload.get().to_owned();
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{session}: no turn_failed\n{}",
                world.diagnostics()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert!(failed.contains(named) && failed.contains("unusable_rows"), "{session}: {failed}");
        assert!(world.store.step_in_flight(session).await.unwrap().is_none(), "{session}: not retried");
    }
    assert_eq!(run_state("not-json").await, "{broken", "an unreadable run state is never overwritten");
    let statuses = world.store.list_sessions(None, "", 10).await.unwrap();
    assert!(statuses.iter().all(|s| s.status == "idle"), "{statuses:?}");
    let readable = world.store.session("wrong-shape").await.unwrap().unwrap();
    assert_eq!(readable.run_state.get(), r#"{"version":1,"turn_entries":7}"#);

    // Each later message fails its own turn once; nothing loops.
    tollgate_sessions::writes::send(world.store.as_ref(), "not-json", "say again", Some("k2"))
        .await
        .expect("accepted");
    let start = Instant::now();
    while world.events("not-json").await.iter().filter(|e| e.kind == "turn_failed").count() < 2 {
        assert!(start.elapsed() < Duration::from_secs(30), "{}", world.diagnostics());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Nothing can run again: the commit that failed the turn finished its step (a step left
    // claimed would be claimed again when its 3 s lease ran out, and fail the turn again).
    assert!(world.store.step_in_flight("not-json").await.unwrap().is_none(), "not retried");
    let failures = world.events("not-json").await.iter().filter(|e| e.kind == "turn_failed").count();
    assert_eq!(failures, 2, "one failed turn per message");
    assert_eq!(world.mock.message_requests().len(), 1, "only the good session reached the model");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_that_traps_on_every_attempt_gives_up_without_blocking_others_and_is_counted() {
    let Some(world) = World::new("poison tool", Refund::SingleAttemptWithApproval).await else { return };
    std::fs::copy(tollgate_test_guests::HOSTILE, world.agent.join("tools/hostile.wasm")).expect("hostile");
    let config = std::fs::read_to_string(world.agent.join("tollgate.toml")).unwrap();
    let config = config.replace(
        "Grep = { effect = \"read\" }",
        // The deferred CallTool step (its poison metric), not a recorded inline write.
        "Grep = { effect = \"read\" }\npanic = { effect = \"idempotent_write\", inline = false }",
    );
    // A writable directory, whose writes the sandbox does not watch: each trap may have taken
    // effect, so the call is attempted again (a trap that provably did nothing is failed at once).
    std::fs::create_dir(world.agent.join("scratch")).unwrap();
    let config = format!(
        "{config}\n[[tools.hostile.dirs]]\npath = \"scratch\"\nguest = \"/scratch\"\nwritable = true\n"
    );
    std::fs::write(world.agent.join("tollgate.toml"), config).unwrap();
    let served = Served::start(&world, "api", None).await;
    world.send("poison", "call panic").await;
    world.send("other", "say fine").await;
    let other = world.wait_idle_after("other", 1).await;
    assert_eq!(last_answer(&other), "said: fine", "{}", world.diagnostics());

    let done = world.wait_idle_after("poison", 1).await;
    assert_eq!(done.tool_calls.len(), 1, "{done:#?}");
    assert_eq!(done.tool_calls[0].state.name(), "outcome_unknown", "{done:#?}");
    let events = world.events("poison").await;
    let retries = events.iter().filter(|e| e.kind == "attempt_failed").count();
    assert_eq!(retries, 2, "three attempts, then it gave up: {events:?}");
    let id = done.tool_calls[0].tool_call_id.as_str();
    let (seen, is_error) = world.tool_result_seen(id).expect("the model was told");
    assert!(is_error && seen.contains("unknown"), "{seen}");

    let metrics = crate::world::api(reqwest::Client::new().get(format!("{}/metrics", served.url))).await.text;
    for (name, rest) in
        [("tollgate_poison_steps_total", ",kind=\"CallTool\"} 1"), ("tollgate_sandbox_traps_total", "} 3")]
    {
        assert!(has_series(&metrics, name, rest), "{name}…{rest} is not in /metrics:\n{metrics}");
    }
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_stored_before_the_transcript_chunks_resumes_from_its_items() {
    let Some(world) = World::new("unchunked session", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let served = Served::start(&world, "api", None).await;
    world.send("old", "say one").await;
    let first = world.wait_idle_after("old", 1).await;
    assert_eq!(last_answer(&first), "said: one", "{}", world.diagnostics());
    // As a session stored before schema 9: no chunk, marked `unchunked`.
    let mut conn = raw_sqlite(&world).await;
    sqlx::query("DELETE FROM transcript_chunks WHERE session_id = 'old'").execute(&mut conn).await.unwrap();
    sqlx::query("UPDATE sessions SET unchunked = 1 WHERE session_id = 'old'")
        .execute(&mut conn)
        .await
        .unwrap();

    world.send("old", "say two").await;
    let second = world.wait_idle_after("old", 2).await;
    assert_eq!(last_answer(&second), "said: two", "{}", world.diagnostics());
    // The CLI resumed the whole conversation: the model's last request carries the first turn.
    let last = world.mock.message_requests().last().cloned().expect("a model request");
    let body = last.body.map(|b| b.to_string()).unwrap_or_default();
    assert!(body.contains("say one") && body.contains("said: one"), "the first turn was not resumed: {body}");
    assert!(!world.store.read_transcript("old").await.unwrap().chunked, "it keeps reading its items");
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_transcript_the_cli_refuses_fails_each_turn_after_its_attempts_and_is_counted() {
    let Some(world) = World::new("refused transcript", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let served = Served::start(&world, "api", None).await;
    world.send("t", "say one").await;
    let first = world.wait_idle_after("t", 1).await;
    assert_eq!(last_answer(&first), "said: one", "{}", world.diagnostics());
    // Keep the stored transcript's session but replace its entries with ones the CLI cannot load.
    let mut conn = raw_sqlite(&world).await;
    sqlx::query(
        "UPDATE items SET body = '{\"kind\":\"claude_transcript\",\"session_id\":'
             || json_quote(json_extract(body, '$.session_id'))
             || ',\"entries\":[{\"type\":\"x-unknown\",\"uuid\":\"bad-' || seq || '\"}]}'
         WHERE session_id = 't' AND kind = 'claude_transcript'",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    // And the same entries in the resume form a Worker writes the file from.
    sqlx::query(
        "UPDATE transcript_chunks SET lines = '{\"type\":\"x-unknown\",\"uuid\":\"bad-chunk-' || item_seq || '\"}' || char(10)
         WHERE session_id = 't'",
    )
    .execute(&mut conn)
    .await
    .unwrap();

    world.send("t", "say two").await;
    world.send("other", "say fine").await;
    let other = world.wait_idle_after("other", 1).await;
    assert_eq!(last_answer(&other), "said: fine", "another session is not blocked");
    let failed = world.wait_idle_after("t", 2).await;
    let error = failed.last_turn_error.clone().expect("the turn failed with an error");
    assert!(!error.is_empty(), "{failed:#?}");
    world.send("t", "say three").await;
    let again = world.wait_idle_after("t", 3).await;
    assert!(again.last_turn_error.is_some(), "the next turn fails the same way: {again:#?}");
    // The commit that failed the turn finished its step: nothing is left to run again.
    assert!(world.store.step_in_flight("t").await.unwrap().is_none(), "nothing loops");
    let events = world.events("t").await;
    let count = |kind: &str| events.iter().filter(|e| e.kind == kind).count();
    assert_eq!(
        (count("turn_failed"), count("attempt_failed")),
        (2, 4),
        "three attempts per turn: {events:?}"
    );
    assert!(
        events.iter().filter(|e| e.kind == "turn_failed").all(|e| e.payload.get().contains("segment_failed"))
    );
    eprintln!("the refused transcript's turn error: {error}");

    let metrics = crate::world::api(reqwest::Client::new().get(format!("{}/metrics", served.url))).await.text;
    for (name, rest) in [
        ("tollgate_turn_failures_total", ",reason=\"segment_failed\"} 2"),
        ("tollgate_poison_steps_total", ",kind=\"RunModel\"} 2"),
    ] {
        assert!(has_series(&metrics, name, rest), "{name}…{rest} is not in /metrics:\n{metrics}");
    }
    served.stop().await;
}

/// Whether `/metrics` text has a sample of `name` labelled with the world's agent (`agent`) and a
/// version, its other labels and value `rest` (`,kind="RunModel"} 2`, or `} 3` for none).
fn has_series(metrics: &str, name: &str, rest: &str) -> bool {
    let start = format!("{name}{{agent=\"agent\",agent_version=\"sha256:");
    metrics.lines().any(|line| {
        line.strip_prefix(&start).is_some_and(|tail| {
            tail.get(12..).is_some_and(|after| after.strip_prefix('"').is_some_and(|after| after == rest))
        })
    })
}
