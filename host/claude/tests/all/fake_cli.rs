//! The scripted `fake-claude`: the frame loop on a happy turn, and every way the CLI can
//! misbehave. Each failure must end the segment with `Failed`, a clear error, and no process left.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::{Notify, mpsc};
use tollgate_claude::{
    CliDecider, DeciderFuture, SegmentError, SegmentEvent, SegmentOutcome, SegmentSpec, run_segment,
};
use tollgate_engine::gate::CliToolDecision;

use crate::util::{Echo, describe, fake_cli, gate, run};

fn spec(mode: &str) -> (SegmentSpec, tempfile::TempDir) {
    let project = crate::util::dir();
    let mut spec = SegmentSpec::fresh(fake_cli(), project.path(), "hi").env("FAKE_CLAUDE_MODE", mode);
    spec.timeout = Duration::from_secs(20);
    (spec, project)
}

/// Runs `mode` to its failure; checks the process group is gone.
async fn failure(spec: SegmentSpec) -> (SegmentError, String) {
    let (report, _) = run(spec, gate(&Echo), Arc::new(Echo)).await;
    let text = describe(&report);
    let pid = report.stats.pid.unwrap_or_else(|| panic!("the CLI never started\n{text}"));
    wait_group_gone(pid, &text).await;
    match report.outcome {
        SegmentOutcome::Failed { error } => (error, text),
        _ => panic!("expected a failure\n{text}"),
    }
}

#[tokio::test]
async fn a_happy_turn_streams_deltas_serves_mcp_through_the_gate_and_collects_every_mirror_entry() {
    let (spec, _project) = spec("happy");
    let (report, events) = run(spec, gate(&Echo), Arc::new(Echo)).await;
    let text = describe(&report);
    let SegmentOutcome::Completed { session_id, result, entries, usage, .. } = &report.outcome else {
        panic!("{text}")
    };
    assert_eq!(session_id, "fake-session-1");
    assert_eq!(result, "listed \"echo\"; tool said echo: ping", "{text}");
    assert_eq!(usage.input_tokens, 10);
    // Four entries before the result, and `cost-state` after it: stdout is read to EOF.
    let types: Vec<_> = entries.iter().map(|e| e.entry_type().unwrap_or_default()).collect();
    assert_eq!(types, ["user", "assistant", "last-prompt", "cost-state"], "{text}");
    assert_eq!(
        events,
        [
            SegmentEvent::TextDelta { text: "Calling ".into() },
            SegmentEvent::TextDelta { text: "echo.".into() },
            SegmentEvent::ToolCallStarted {
                tool_use_id: "toolu_fake_1".into(),
                name: "echo".into(),
                kind: tollgate_engine::catalog::ToolKind::Custom,
                input: serde_json::json!({"text": "ping"}),
            },
            SegmentEvent::ToolCallFinished {
                tool_use_id: "toolu_fake_1".into(),
                name: "echo".into(),
                kind: tollgate_engine::catalog::ToolKind::Custom,
                is_error: false
            },
        ]
    );
    assert_eq!(report.stats.exit_status.as_deref(), Some("exit status: 0"), "{text}");
    assert_eq!(report.stats.model_calls, 1);
}

#[tokio::test]
async fn a_call_that_reaches_can_use_tool_instead_of_the_hook_is_decided_by_the_gate() {
    let (spec, _project) = spec("ask");
    let (report, events) = run(spec, gate(&Echo), Arc::new(Echo)).await;
    let text = describe(&report);
    let SegmentOutcome::Completed { result, .. } = &report.outcome else { panic!("{text}") };
    assert_eq!(result, "listed \"echo\"; tool said echo: ping", "{text}");
    assert!(events.iter().any(|e| matches!(e, SegmentEvent::ToolCallFinished { .. })), "{events:?}");
}

/// A decider that takes up to 2 s: it answers once the segment has passed on the text delta the
/// fake CLI streams while waiting for the hook's answer, or after 2 s if that never comes.
struct SlowDecider {
    streamed: Arc<Notify>,
    released_by_the_delta: Arc<AtomicBool>,
    asked: Arc<AtomicUsize>,
}

impl CliDecider for SlowDecider {
    fn decide(&self, tool_name: String, _input: Value) -> DeciderFuture {
        assert_eq!(tool_name, "Bash");
        self.asked.fetch_add(1, Ordering::SeqCst);
        let (streamed, released) = (self.streamed.clone(), self.released_by_the_delta.clone());
        Box::pin(async move {
            let by_delta = tokio::time::timeout(Duration::from_secs(2), streamed.notified()).await.is_ok();
            released.store(by_delta, Ordering::SeqCst);
            Ok(Some(CliToolDecision::Allow))
        })
    }
}

/// On a current-thread runtime (the tokio test default), so nothing may block the thread.
#[tokio::test(flavor = "current_thread")]
async fn a_slow_cli_decider_does_not_stall_the_segment_s_other_frames() {
    let (mut spec, _project) = spec("slow-decider");
    let decider = SlowDecider {
        streamed: Arc::new(Notify::new()),
        released_by_the_delta: Arc::new(AtomicBool::new(false)),
        asked: Arc::new(AtomicUsize::new(0)),
    };
    let (streamed, released, asked) =
        (decider.streamed.clone(), decider.released_by_the_delta.clone(), decider.asked.clone());
    spec.cli_decider = Some(Arc::new(decider));
    let (tx, mut rx) = mpsc::unbounded_channel();
    let watcher = tokio::spawn(async move {
        let mut events = Vec::new();
        while let Some(event) = rx.recv().await {
            if event == (SegmentEvent::TextDelta { text: "while deciding".into() }) {
                streamed.notify_one();
            }
            events.push(event);
        }
        events
    });
    let report = run_segment(spec, gate(&Echo).with_cli_decider(), Arc::new(Echo), Some(tx)).await;
    let events = watcher.await.unwrap();
    let text = describe(&report);
    let SegmentOutcome::Completed { result, .. } = &report.outcome else { panic!("{text}") };
    assert_eq!(result, "Bash: allow", "{text}");
    assert_eq!(asked.load(Ordering::SeqCst), 1, "{text}");
    assert!(
        released.load(Ordering::SeqCst),
        "the delta streamed while the decider decided did not reach the caller before its 2 s ran out: {events:?}"
    );
}

#[tokio::test]
async fn a_stdout_line_that_is_not_json_fails_the_segment() {
    let (error, text) = failure(spec("garbage").0).await;
    assert!(matches!(error, SegmentError::MalformedOutput { .. }), "{text}");
    assert!(error.to_string().contains("this is not a JSON frame"), "{text}");
    assert!(error.is_retryable());
}

#[tokio::test]
async fn a_5_mb_line_fails_the_segment_without_reading_it_all() {
    let (error, text) = failure(spec("huge-line").0).await;
    assert!(matches!(error, SegmentError::LineTooLong { limit: 4194304, .. }), "{text}");
    assert!(error.to_string().contains("longer than 4194304 bytes"), "{text}");
}

#[tokio::test]
async fn an_exit_mid_turn_fails_with_the_exit_status_and_the_stderr() {
    let (error, text) = failure(spec("exit-mid-turn").0).await;
    let SegmentError::ExitedEarly { status, .. } = &error else { panic!("{text}") };
    assert_eq!(status, "exit status: 3", "{text}");
    assert!(error.to_string().contains("fake-claude: crashed mid-turn"), "{text}");
}

#[tokio::test]
async fn a_cli_that_stalls_after_a_hook_is_killed_with_its_whole_group_at_the_timeout() {
    let (mut spec, _project) = spec("stall");
    spec.timeout = Duration::from_secs(3);
    let started = Instant::now();
    let (error, text) = failure(spec).await;
    assert!(matches!(error, SegmentError::Timeout { .. }), "{text}");
    assert!(started.elapsed() < Duration::from_secs(15), "{text}");
    // The fake started `sleep 600` in its group; the stderr names it, and it must be dead.
    let sleep_pid: i32 = error
        .stderr()
        .split("started sleep ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no sleep pid in stderr\n{text}"));
    assert!(is_gone(sleep_pid), "the CLI's child {sleep_pid} survived\n{text}");
}

#[tokio::test]
async fn a_cli_that_never_answers_initialize_fails_after_the_initialize_timeout() {
    let (mut spec, _project) = spec("no-init");
    spec.initialize_timeout = Duration::from_secs(2);
    let (error, text) = failure(spec).await;
    assert!(matches!(error, SegmentError::InitializeTimeout { .. }), "{text}");
    assert!(error.to_string().contains("did not answer initialize within 2s"), "{text}");
}

/// Parks `spec`'s spare and runs the segment on it.
async fn on_parked(spec: SegmentSpec) -> (tollgate_claude::SegmentReport, u32) {
    let warm = tollgate_claude::pool::WarmCli::park(&spec).expect("the fake parks");
    let parked = warm.pid();
    let report = tollgate_claude::run_segment_on(spec, Some(warm), gate(&Echo), Arc::new(Echo), None).await;
    (report, parked)
}

#[tokio::test]
async fn a_parked_spare_is_claimed_then_prompted_and_its_mcp_handshake_is_answered_during_the_claim() {
    let (spec, _project) = spec("happy");
    let (report, parked) = on_parked(spec).await;
    let text = describe(&report);
    let SegmentOutcome::Completed { result, .. } = &report.outcome else { panic!("{text}") };
    assert_eq!(result, "listed \"echo\"; tool said echo: ping", "{text}");
    assert_eq!((report.stats.warm, report.stats.pid), (true, Some(parked)), "{text}");
    assert!(report.stats.to_claimed.is_some() && report.stats.claim_refused.is_none(), "{text}");
}

#[tokio::test]
async fn a_claim_left_unanswered_past_the_initialize_timeout_counts_as_refused_and_a_cli_of_its_own_runs() {
    let (mut spec, _project) = spec("no-claim");
    spec.initialize_timeout = Duration::from_secs(2);
    let (report, parked) = on_parked(spec).await;
    let text = describe(&report);
    let SegmentOutcome::Completed { result, .. } = &report.outcome else { panic!("{text}") };
    assert_eq!(result, "listed \"echo\"; tool said echo: ping", "{text}");
    assert_eq!(report.stats.claim_refused.as_deref(), Some("no answer to claim_session within 2s"), "{text}");
    assert!(!report.stats.warm && report.stats.pid != Some(parked), "{text}");
    wait_group_gone(parked, &text).await;
}

#[tokio::test]
async fn a_parked_spare_that_never_answers_its_initialize_falls_back_to_a_cli_of_its_own() {
    let (mut spec, _project) = spec("no-init");
    spec.initialize_timeout = Duration::from_secs(2);
    let (report, parked) = on_parked(spec).await;
    let text = describe(&report);
    // The fake answers no initialize when started for the segment either: the fallback ran and
    // failed on its own initialize.
    let SegmentOutcome::Failed { error } = &report.outcome else { panic!("{text}") };
    assert!(matches!(error, SegmentError::InitializeTimeout { .. }), "{text}");
    let refused = report.stats.claim_refused.clone().unwrap_or_default();
    assert!(refused.starts_with("no answer to the parked CLI's initialize"), "{refused:?}\n{text}");
    assert!(report.stats.pid != Some(parked), "{text}");
    wait_group_gone(parked, &text).await;
}

#[tokio::test]
async fn only_a_fresh_start_can_be_parked() {
    let project = crate::util::dir();
    let spec = SegmentSpec::resume(fake_cli(), project.path(), "s-1", Vec::new());
    let error = tollgate_claude::pool::WarmCli::park(&spec).expect_err("a resume is refused");
    assert!(error.to_string().contains("only a fresh start can be parked"), "{error}");
}

#[tokio::test]
async fn dropping_a_running_segment_kills_its_process_group() {
    let (spec, _project) = spec("no-init");
    let scratch = crate::util::dir();
    let mut spec = spec;
    spec.scratch_parent = Some(scratch.path().to_path_buf());
    let running = tokio::spawn(tollgate_claude::run_segment(spec, gate(&Echo), Arc::new(Echo), None));
    // The pid is not reported until the segment ends, so find the process by its scratch dir.
    let deadline = Instant::now() + Duration::from_secs(10);
    let pid = loop {
        if let Some(pid) = pid_using(scratch.path()) {
            break pid;
        }
        assert!(Instant::now() < deadline, "the fake CLI did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    running.abort();
    let _ = running.await;
    wait_group_gone(pid, "after the drop").await;
}

#[tokio::test]
async fn a_resume_without_a_prompt_needs_a_pending_call() {
    let project = crate::util::dir();
    let spec = SegmentSpec::resume(fake_cli(), project.path(), "s-1", Vec::new());
    let (report, _) = run(spec, gate(&Echo), Arc::new(Echo)).await;
    let SegmentOutcome::Failed { error } = &report.outcome else { panic!("{}", describe(&report)) };
    assert!(matches!(error, SegmentError::InvalidSpec { .. }), "{error}");
    assert!(!error.is_retryable());
    assert_eq!(report.stats.pid, None, "nothing may start");
}

/// The process whose environment names `dir` (its `CLAUDE_CONFIG_DIR` lives there).
fn pid_using(dir: &std::path::Path) -> Option<u32> {
    let needle = dir.to_string_lossy().into_owned();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else { continue };
        if String::from_utf8_lossy(&environ).contains(&needle) {
            return Some(pid);
        }
    }
    None
}

/// `(state, process group)` of a process, from `/proc/<pid>/stat`.
fn stat(pid: i32) -> Option<(char, i64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut fields = text.rsplit_once(')')?.1.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    Some((state, fields.next()?.parse().ok()?))
}

/// Gone or a zombie (killed, waiting for a reaper that may never come in a container).
fn is_gone(pid: i32) -> bool {
    stat(pid).is_none_or(|(state, _)| state == 'Z' || state == 'X')
}

/// Living (non-zombie) members of process group `pgid`.
fn live_members(pgid: u32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
        .filter(|&pid| {
            stat(pid).is_some_and(|(state, group)| group == i64::from(pgid) && state != 'Z' && state != 'X')
        })
        .collect()
}

/// Polls until no living process of group `pgid` is left.
async fn wait_group_gone(pgid: u32, context: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let live = live_members(pgid);
        if live.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "process group {pgid} still has {live:?}\n{context}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_cancelled_cli_that_ignores_its_interrupt_is_killed_with_its_group_after_the_grace() {
    let (mut spec, _project) = spec("stall");
    spec.cancel_grace = Duration::from_millis(500);
    let (cancel, cancelled) = tokio::sync::watch::channel(false);
    spec.cancel = Some(cancelled);
    let started = Instant::now();
    let segment = tokio::spawn(run(spec, gate(&Echo), Arc::new(Echo)));
    // The fake has asked its hook and hangs; the segment's timeout (20 s) is far away.
    tokio::time::sleep(Duration::from_secs(1)).await;
    cancel.send(true).unwrap();
    let (report, _) = segment.await.unwrap();
    let text = describe(&report);
    assert!(matches!(report.outcome, SegmentOutcome::Cancelled { killed: true }), "{text}");
    assert!(started.elapsed() < Duration::from_secs(8), "killed after the grace, not the timeout\n{text}");
    wait_group_gone(report.stats.pid.expect("started"), &text).await;
}
