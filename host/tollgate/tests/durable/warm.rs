//! Warm CLIs with the real CLI and Workers as child processes: the second new
//! session of an agent runs on the parked spare the first one's Worker pre-started, claimed into
//! its own workspace; a resume after an
//! approval-free deferred step runs on a pre-started `--resume` CLI; a warm CLI killed before the
//! take leaves the segment to start its own; after the time to live the warm CLI and its folders
//! are gone; a SIGKILLed Worker leaves no warm CLI alive.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::world::{Refund, WorkerProcess, World, plain};
use tollgate_testing::alive;

const WAIT: Duration = Duration::from_secs(60);

/// The `pid=` of every log line of `worker` that contains `what`, in order.
fn pids(worker: &WorkerProcess, what: &str) -> Vec<u32> {
    plain(&worker.log_text())
        .lines()
        .filter(|line| line.contains(what))
        .filter_map(|line| {
            let rest = &line[line.find("pid=")? + 4..];
            rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
        })
        .collect()
}

/// Waits until `worker` logged `what` `n` times; returns the pids of those lines.
async fn logged(worker: &WorkerProcess, what: &str, n: usize) -> Vec<u32> {
    let start = Instant::now();
    loop {
        let found = pids(worker, what);
        if found.len() >= n {
            return found;
        }
        assert!(start.elapsed() < WAIT, "{n} × {what:?} never logged:\n{}", worker.log_text());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn until(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < WAIT, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The names under `dir` that start with `prefix`.
fn entries(dir: &Path, prefix: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(prefix))
        .collect()
}

fn last_answer(snapshot: &tollgate_api::api::types::Snapshot) -> String {
    snapshot.messages.iter().rev().find(|m| m.role == "assistant").map(|m| m.text.clone()).unwrap_or_default()
}

/// A Worker with one slot, its workspaces under `<world>/ws` and its segment folders under
/// `<world>/tmp` (returned), and more arguments.
fn worker(world: &World, name: &str, more: &[&str]) -> (WorkerProcess, PathBuf, PathBuf) {
    let (ws, tmp) = (world.dir.path().join("ws"), world.dir.path().join("tmp"));
    std::fs::create_dir_all(&tmp).unwrap();
    let mut args = vec!["--lease-secs", "3", "--heartbeat-secs", "1", "--concurrency", "1"];
    args.extend(["--workspace-root", ws.to_str().unwrap()]);
    args.extend(more);
    let worker = world.worker_with_args_env(name, &args, &[("TMPDIR", tmp.to_str().unwrap())]);
    (worker, ws, tmp)
}

/// Runs session `s1` to its end on `worker` and returns the warm fresh CLI it left.
async fn first_session(world: &World, worker: &WorkerProcess) -> u32 {
    world.send("s1", "say one").await;
    let done = world.wait_idle_after("s1", 1).await;
    assert_eq!(last_answer(&done), "said: one", "{}", world.diagnostics());
    let warm = logged(worker, "warm CLI started", 1).await[0];
    assert!(alive(warm), "the warm CLI waits\n{}", worker.log_text());
    // The segment's own CLI is gone: the warm one is the Worker's only child.
    until("only the warm CLI is left", || worker.children() == [warm]).await;
    warm
}

#[tokio::test(flavor = "multi_thread")]
async fn the_second_new_session_runs_on_the_spare_the_first_parked_claimed_into_its_own_workspace() {
    let Some(world) = World::new("second session on a warm CLI", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    let (a, ws, tmp) = worker(&world, "a", &[]);
    let warm = first_session(&world, &a).await;
    // Parked in a box of its own (its host folder in the scratch directory), not in the workspace
    // root.
    assert_eq!(entries(&ws, ".").len(), 0, "{:?}", entries(&ws, ""));
    assert_eq!(entries(&tmp, "tollgate-warm-").len(), 1, "{:?}", entries(&tmp, ""));
    let exe = std::fs::read_link(format!("/proc/{warm}/exe")).expect("the warm CLI's program");
    assert!(exe.ends_with("bwrap"), "the warm CLI is boxed: {}", exe.display());

    world.send("s2", r#"pause w2 ;; call Bash {"command":"pwd"}"#).await;
    world.mock.wait_for_gate("w2", WAIT).await.expect("s2's segment reached the model");
    // At the take: the segment runs on the warm CLI and started no process of its own.
    assert_eq!(a.children(), [warm], "s2's segment spawned a CLI\n{}", a.log_text());
    assert_eq!(pids(&a, "segment on a warm CLI"), [warm], "{}", a.log_text());
    world.mock.open_gate("w2");
    let done = world.wait_idle_after("s2", 1).await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());
    let answer = last_answer(&done);
    // The claim gave the spare s2's workspace, the box's `/workspace`, copied back to s2's folder.
    assert!(answer.starts_with("called Bash: /workspace"), "{answer}\n{}", world.diagnostics());
    assert!(ws.join("s2").is_dir(), "{:?}", entries(&ws, ""));
    let log = plain(&a.log_text());
    assert!(log.contains(&format!("segment on a warm CLI pid={warm} parked=true")), "{log}");
    assert!(
        log.contains(&format!("segment ran pid={warm} warm=true")) && log.contains("to_claimed_ms=Some("),
        "{log}"
    );

    // The system prompt naming the session went in `initialize`: s2's request carries s2's.
    let requests = world.mock.message_requests();
    let system = |i: usize| requests[i].body.as_ref().map(|b| b["system"].to_string()).unwrap_or_default();
    assert!(system(0).contains("(session s1)"), "{}", system(0));
    let s2 = system(1);
    assert!(s2.contains("(session s2)") && !s2.contains("(session s1)"), "{s2}");
    // The next warm CLI (after s2's completed fresh segment) is another process.
    let next = logged(&a, "warm CLI started", 2).await[1];
    assert_ne!(next, warm, "a warm CLI is used once");
    assert_eq!(entries(&ws, ".").len(), 0, "nothing but the sessions' workspaces in the root");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_warm_cli_killed_before_the_take_leaves_the_segment_to_start_its_own() {
    let Some(world) = World::new("killed warm CLI", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let (a, _ws, _tmp) = worker(&world, "a", &[]);
    let warm = first_session(&world, &a).await;
    // SAFETY: kill(2) has no memory effects.
    unsafe { libc::kill(warm as i32, libc::SIGKILL) };
    until("the warm CLI is dead", || !alive(warm)).await;

    world.send("s2", "say two").await;
    let done = world.wait_idle_after("s2", 1).await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());
    assert_eq!(last_answer(&done), "said: two");
    assert!(pids(&a, "segment on a warm CLI").is_empty(), "{}", a.log_text());
    let log = plain(&a.log_text());
    assert!(
        log.contains("discarded") && log.contains("segment ran pid=") && log.contains("warm=false"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn after_the_time_to_live_the_warm_cli_is_gone_with_its_folders() {
    let Some(world) = World::new("warm CLI time to live", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let (a, _ws, tmp) = worker(&world, "a", &["--warm-cli-ttl-secs", "3"]);
    let warm = first_session(&world, &a).await;
    let scratch = format!("tollgate-warm-{}-", a.id());
    assert_eq!(entries(&tmp, &scratch).len(), 1, "the warm CLI's scratch folder");
    let segments = format!("tollgate-segment-{}-", a.id());
    assert!(entries(&tmp, &segments).is_empty(), "s1's segment folder went with its segment");
    until("the warm CLI is killed after its time to live", || !alive(warm)).await;
    until("its scratch folder is removed", || entries(&tmp, &scratch).is_empty()).await;
    assert!(a.children().is_empty());
    assert!(plain(&a.log_text()).contains("warm CLIs expired unused"), "{}", a.log_text());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sigkilled_worker_leaves_no_warm_cli_alive_and_the_next_removes_its_folders() {
    let Some(world) = World::new("warm CLI dies with its Worker", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    let (a, _ws, tmp) = worker(&world, "a", &[]);
    let warm = first_session(&world, &a).await;
    let scratch = format!("tollgate-warm-{}-", a.id());
    a.kill().await;
    let killed = Instant::now();
    while alive(warm) {
        assert!(killed.elapsed() < Duration::from_secs(10), "the warm CLI outlived its Worker");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(entries(&tmp, &scratch).len(), 1, "a SIGKILLed Worker cannot clean up");
    let (b, _, _) = worker(&world, "b", &[]);
    until("B removes A's warm folders", || entries(&tmp, &scratch).is_empty()).await;
    drop(b);
}

/// The example agent plus `record_credit`, an approval-free idempotent write kept deferred
/// (`inline = false`): its segment ends on it and a `CallTool` step runs it.
async fn deferred_write_world(test: &str) -> Option<World> {
    let world = World::new(test, Refund::SingleAttemptWithApproval).await?;
    std::fs::copy(tollgate_test_guests::LEDGER, world.agent.join("tools/ledger.wasm")).expect("ledger");
    let config = std::fs::read_to_string(world.agent.join("tollgate.toml")).expect("config");
    let config = config.replace(
        "create_refund = {",
        "record_credit = { effect = \"idempotent_write\", inline = false }\ncreate_refund = {",
    ) + "\n[tools.ledger]\nallowed_outbound_hosts = [\"http://127.0.0.1:*\"]\n\
         config = { PAYMENTS_URL = { env = \"PAYMENTS_URL\" } }\ntimeout_ms = 5000\n";
    std::fs::write(world.agent.join("tollgate.toml"), config).expect("write config");
    Some(world)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_resume_after_an_approval_free_deferred_step_runs_on_a_warm_resume_cli_and_sees_the_result() {
    let Some(world) = deferred_write_world("warm resume").await else { return };
    let (a, _ws, _tmp) = worker(&world, "a", &[]);
    world
        .send(
            "s",
            r#"call lookup_order {"order_id":"7"} && call record_credit {"order_id":"7","amount_cents":300}"#,
        )
        .await;
    let done = world.wait_idle_after("s", 1).await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());
    let log = plain(&a.log_text());
    let resume = log
        .lines()
        .find(|line| line.contains("warm CLI started") && line.contains("fresh=false"))
        .unwrap_or_else(|| panic!("no warm --resume CLI:\n{log}"));
    let warm: u32 = resume[resume.find("pid=").unwrap() + 4..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(pids(&a, "segment on a warm CLI"), [warm], "{log}");
    assert_eq!(log.matches("segment starting").count(), 2, "defer, then resume: {log}");
    assert_eq!(world.payments.count(), 1, "the write ran once");
    // The model saw the recorded result of the step.
    assert_eq!(done.tool_calls.len(), 1, "{done:#?}");
    let call = &done.tool_calls[0];
    assert_eq!(call.runs_in, tollgate_engine::policy::DeferredRun::CallTool, "the write was deferred");
    let (seen, is_error) = world.tool_result_seen(&call.tool_call_id).expect("the model read the result");
    let recorded = call.state.text().expect("the record's output");
    assert!(
        !is_error && seen.starts_with(recorded),
        "the model read what was recorded: {seen:?} vs {recorded:?}"
    );
    let answer = last_answer(&done);
    assert!(answer.contains("4200") && answer.contains("r_1"), "the answer quotes both calls: {answer}");
}
