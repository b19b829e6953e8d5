//! An approved CLI tool's record comes from what it did, with the real CLI: the support agent's
//! options factory sends a `Bash` command with `|` or `&` to a human; once approved, the resumed
//! segment's CLI runs it, and the call is recorded from the CLI's tool result (`succeeded` with
//! its output, `failed` with its error), or `outcome_unknown` when the segment ended without one
//! (its CLI killed while the command ran).

use std::time::Duration;

use crate::world::{Refund, World};

/// Sends `command` as a `Bash` call in `session`, approves it, and returns the finished turn's
/// one record: its status and text.
async fn approve_and_record(world: &World, session: &str, command: &str) -> (String, Option<String>) {
    world.send(session, &format!("call Bash {}", serde_json::json!({"command": command}))).await;
    let waiting = world.wait_for(session, "the approval", |s| s.status == "awaiting_approval").await;
    let id = waiting.pending_interrupts[0].interrupt_id.clone();
    assert_eq!(waiting.tool_calls[0].state.name(), "pending_approval");
    world.decide(session, &id, true, None, "k1").await;
    let done = world.wait_idle_after(session, 1).await;
    assert_eq!(done.last_turn_error, None, "{session}: {}", world.diagnostics());
    assert_eq!(done.tool_calls.len(), 1, "{session}: {done:#?}");
    let call = &done.tool_calls[0];
    assert_eq!(call.tool_call_id, id);
    let finished: Vec<String> = world
        .events(session)
        .await
        .iter()
        .filter(|e| e.kind == "tool_call_finished" && e.payload.get().contains(&id))
        .map(|e| e.payload.get().to_owned())
        .collect();
    assert_eq!(finished.len(), 1, "{session}: one tool_call_finished, from the run: {finished:?}");
    assert!(finished[0].contains(&format!(r#""status":"{}""#, call.state.name())), "{finished:?}");
    (call.state.name().to_owned(), call.state.text().map(str::to_owned))
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approved_bash_call_is_recorded_from_the_clis_result_of_its_run() {
    let Some(world) = World::new("approved CLI tool records", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let _a = world.worker("a");
    let (status, output) = approve_and_record(&world, "ran", "echo tollgate | wc -c").await;
    assert_eq!(status, "succeeded");
    let output = output.unwrap_or_default();
    assert!(output.trim_start().starts_with('9'), "the command's output, not a placeholder: {output:?}");

    let missing = world.dir.path().join("no-such-file");
    let command = format!("cat {} && echo never", missing.display());
    let (status, error) = approve_and_record(&world, "failed", &command).await;
    assert_eq!(status, "failed", "the command failed");
    let error = error.unwrap_or_default();
    assert!(error.contains("No such file") && !error.contains("never"), "the CLI's error: {error:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approved_bash_call_whose_segment_ends_without_its_result_is_outcome_unknown() {
    let Some(world) = World::new("approved CLI tool, no result", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    let a = world.worker("a");
    // A command that outlives its segment: once it runs, its CLI is SIGKILLed, so the segment
    // ends before the CLI reports a result (as one cut at its timeout does: the segment's
    // machine records that the gate let the call run, `CliRun::NoResult`).
    let marker = format!("296.{}", std::process::id());
    let command = format!("sleep {marker} | cat");
    let killer = async {
        let start = std::time::Instant::now();
        let running = loop {
            let running = tollgate_testing::processes(|args| {
                args.len() == 2 && args[0].ends_with(b"sleep") && args[1] == marker.as_bytes()
            });
            if !running.is_empty() {
                break running;
            }
            assert!(
                start.elapsed() < Duration::from_secs(90),
                "the command never ran\n{}",
                world.diagnostics()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        // The Worker's child the command runs under: the segment's CLI (or its box).
        let mut pid = u32::try_from(running[0]).expect("a pid");
        let children = a.children();
        while !children.contains(&pid) {
            pid = parent(pid).unwrap_or_else(|| panic!("the command does not run under A: {children:?}"));
        }
        // SAFETY: kill(2) of the segment's CLI.
        unsafe { libc::kill(i32::try_from(pid).expect("a pid"), libc::SIGKILL) };
        running
    };
    let (recorded, running) = tokio::join!(approve_and_record(&world, "cut", &command), killer);
    let (status, _) = recorded;
    assert_eq!(status, "outcome_unknown", "it ran, and nobody saw how it ended\n{}", world.diagnostics());
    let id = world.bash_call_id(&command);
    let (seen, is_error) = world.tool_result_seen(&id).expect("the next attempt told the model");
    assert!(is_error && seen.contains("is unknown"), "{seen}");
    for pid in running {
        // SAFETY: kill(2) of the command this test started, should its segment have left it.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// The parent of process `pid`, from `/proc/PID/stat` (`pid (comm) S ppid …`).
fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok().filter(|ppid| *ppid > 1)
}
