//! The chaos soak's checker: what was observed after the run in, the invariants' violations out.
//! Pure (no I/O): [`super`] reads the store, the payments log, the Workers' logs and `/proc` into
//! an [`Observed`]; [`check`] judges it. Read [`check`] first; every invariant has a unit test
//! below that feeds it hand-made bad data and sees it fail.
//!
//! | invariant (name) | rule |
//! | --- | --- |
//! | `stuck` | every session of the run exists, is `idle`, has no step in flight and no open interrupt, and its turn completed (`turn_completed`, no `last_turn_error`) or failed (`turn_failed` with `last_turn_error`) |
//! | `single-attempt` | a `CallSingleAttemptTool` call made at most one payment under its key; with none it is recorded `outcome_unknown` (or `failed` saying its request never left the machine); with one it is `outcome_unknown` or `succeeded` quoting that payment's `refund_id`; no call is left unfinished; no payment lacks a call |
//! | `idempotency-key` | every request of a `CallTool` call (the body names the session and tool call) carries one key, the call's own `<session>/<turn>/<tool call>`; a `succeeded` one sent at least one request |
//! | `event-seq` | a session's event seqs are exactly `1..next_event_seq` |
//! | `fence-overlap` | per step, events' fences never go down in seq order, a call's requests' attempts never go down in arrival order, and nothing is done under fence `f` after fence `f' > f` was claimed (claims from the Workers' logs, or the first sign of the fence) |
//! | `cli-left` | no CLI process of the run is alive once the Workers stopped |
//! | `process-exit` | no Worker or API process exited unless the driver killed it |
//!
//! # Caveats
//!
//! - A claim's attempt is taken as its fence (the store raises both by one per claim); events of
//!   `tool_call_started` carry both, and a mismatch is reported (`harness`).
//! - Times from different clocks are compared with [`CLOCK_SLACK_US`] of slack (the database's
//!   milliseconds against the logs' microseconds), so an overlap shorter than that is not seen.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::Value;

/// Slack when comparing times of different sources (database ms, log µs, local clock).
pub const CLOCK_SLACK_US: i64 = 2_000;

/// A session row.
#[allow(missing_docs)] // Each field is the column of the same name.
#[derive(Clone, Debug, Default)]
pub struct SessionRow {
    pub session_id: String,
    pub status: String,
    pub last_turn_error: Option<String>,
    pub next_event_seq: i64,
}

/// A step row; `tool_call_id` from the payload of a tool step.
#[allow(missing_docs)] // Each field is the column of the same name.
#[derive(Clone, Debug, Default)]
pub struct StepRow {
    pub step_id: i64,
    pub session_id: String,
    pub kind: String,
    pub tool_call_id: Option<String>,
    pub state: String,
    pub fence: i64,
}

/// An event row; `attempt` from a `tool_call_started` payload, `step` its step and fence, `at_us` its time.
#[allow(missing_docs)] // Each field is the column of the same name.
#[derive(Clone, Debug, Default)]
pub struct EventRow {
    pub session_id: String,
    pub seq: i64,
    pub kind: String,
    pub step: Option<(i64, i64)>,
    pub at_us: i64,
    pub attempt: Option<i64>,
}

/// A deferred tool call's record.
#[allow(missing_docs)] // Each field is the column of the same name.
#[derive(Clone, Debug, Default)]
pub struct CallRow {
    pub session_id: String,
    pub tool_call_id: String,
    pub tool_name: String,
    pub turn_id: String,
    /// `call_tool`, `call_single_attempt_tool` or `resumed_segment`.
    pub runs_in: String,
    pub status: String,
    pub output: Option<String>,
    /// A `failed` record's text.
    pub error: Option<String>,
}

impl CallRow {
    /// The idempotency key the host derives for it.
    pub fn key(&self) -> String {
        format!("{}/{}/{}", self.session_id, self.turn_id, self.tool_call_id)
    }
}

/// An interrupt row.
#[allow(missing_docs)] // Each field is the column of the same name.
#[derive(Clone, Debug, Default)]
pub struct InterruptRow {
    pub session_id: String,
    pub interrupt_id: String,
    pub state: String,
}

/// One request the payments service received; `n` is its 1-based place in the log (the
/// service answers `refund_id` `r_<n>`).
#[derive(Clone, Debug, Default)]
pub struct Payment {
    /// Its 1-based place in the log.
    pub n: usize,
    /// The request's path.
    pub path: String,
    /// Its `Idempotency-Key`.
    pub key: String,
    /// Its JSON body.
    pub body: Value,
    /// When it arrived, in µs since the epoch.
    pub at_us: i64,
}

/// A claim a Worker logged (`claimed step=… attempt=…`).
#[derive(Clone, Debug, Default)]
pub struct Claim {
    /// The claimed step.
    pub step_id: i64,
    /// The fence the claim took.
    pub fence: i64,
    /// When it was logged, in µs since the epoch.
    pub at_us: i64,
    /// Which Worker logged it.
    pub worker: String,
}

/// A process the run left behind, or one that exited on its own.
#[derive(Clone, Debug, Default)]
pub struct ProcessNote {
    /// The process and what it did.
    pub what: String,
}

/// Everything the checker reads.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// The sessions the client started.
    pub expected_sessions: Vec<String>,
    /// Every session row.
    pub sessions: Vec<SessionRow>,
    /// Every step row.
    pub steps: Vec<StepRow>,
    /// Every event row.
    pub events: Vec<EventRow>,
    /// Every deferred call's record.
    pub calls: Vec<CallRow>,
    /// Every interrupt row.
    pub interrupts: Vec<InterruptRow>,
    /// The payments service's log.
    pub payments: Vec<Payment>,
    /// The claims the Workers logged.
    pub claims: Vec<Claim>,
    /// CLI processes alive after the Workers stopped.
    pub cli_left: Vec<ProcessNote>,
    /// Worker or API exits the driver did not cause.
    pub unexpected_exits: Vec<ProcessNote>,
}

/// One broken invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The invariant's name (see the module docs).
    pub invariant: &'static str,
    /// What was seen, with the session, call or step.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.invariant, self.detail)
    }
}

/// The checker's verdict.
#[derive(Clone, Debug, Default)]
pub struct Verdict {
    /// Sessions whose turn completed.
    pub completed: usize,
    /// Sessions whose turn failed with `last_turn_error`.
    pub failed: usize,
    /// `outcome_unknown` records, by tool.
    pub outcome_unknown: BTreeMap<String, usize>,
    /// Why failed turns failed (`last_turn_error`, first 120 characters), with counts.
    pub failures: BTreeMap<String, usize>,
    /// How much evidence the checks read: events, claims, payments, call records.
    pub evidence: (usize, usize, usize, usize),
    /// Every broken invariant (none in a good run).
    pub violations: Vec<Violation>,
}

/// Checks every invariant of the module docs.
pub fn check(o: &Observed) -> Verdict {
    let mut verdict = Verdict::default();
    let mut out = Vec::new();
    sessions_ended(o, &mut verdict, &mut out);
    single_attempt_calls(o, &mut out);
    idempotent_calls(o, &mut out);
    event_seqs(o, &mut out);
    fences(o, &mut out);
    for left in &o.cli_left {
        out.push(v("cli-left", format!("a CLI outlived the run: {}", left.what)));
    }
    for exit in &o.unexpected_exits {
        out.push(v("process-exit", exit.what.clone()));
    }
    for call in &o.calls {
        if call.status == "outcome_unknown" {
            *verdict.outcome_unknown.entry(call.tool_name.clone()).or_default() += 1;
        }
    }
    // A check over nothing passes vacuously: sessions that completed leave all four kinds.
    verdict.evidence = (o.events.len(), o.claims.len(), o.payments.len(), o.calls.len());
    if verdict.completed > 0 && [o.events.len(), o.claims.len(), o.payments.len(), o.calls.len()].contains(&0)
    {
        out.push(v(
            "harness",
            format!(
                "{} sessions completed, yet the checker read {} events, {} claims, {} payments, {} call records",
                verdict.completed,
                o.events.len(),
                o.claims.len(),
                o.payments.len(),
                o.calls.len()
            ),
        ));
    }
    verdict.violations = out;
    verdict
}

fn v(invariant: &'static str, detail: String) -> Violation {
    Violation { invariant, detail }
}

fn sessions_ended(o: &Observed, verdict: &mut Verdict, out: &mut Vec<Violation>) {
    let rows: BTreeMap<&str, &SessionRow> = o.sessions.iter().map(|s| (s.session_id.as_str(), s)).collect();
    let mut ends: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for e in &o.events {
        let entry = ends.entry(e.session_id.as_str()).or_default();
        match e.kind.as_str() {
            "turn_completed" => entry.0 += 1,
            "turn_failed" => entry.1 += 1,
            _ => {}
        }
    }
    for id in &o.expected_sessions {
        let Some(row) = rows.get(id.as_str()) else {
            out.push(v("stuck", format!("{id}: the session was never created")));
            continue;
        };
        let in_flight: Vec<String> = o
            .steps
            .iter()
            .filter(|s| s.session_id == *id && s.state != "done")
            .map(|s| format!("{} #{} {} (fence {})", s.kind, s.step_id, s.state, s.fence))
            .collect();
        let open: Vec<&str> = o
            .interrupts
            .iter()
            .filter(|i| i.session_id == *id && i.state == "open")
            .map(|i| i.interrupt_id.as_str())
            .collect();
        let (completed, failed) = ends.get(id.as_str()).copied().unwrap_or_default();
        let problem = if row.status != "idle" || !in_flight.is_empty() || !open.is_empty() {
            Some(format!("status {:?}, steps in flight {in_flight:?}, open interrupts {open:?}", row.status))
        } else if completed + failed == 0 {
            Some("idle, but its turn neither completed nor failed".to_owned())
        } else if completed + failed > 1 {
            Some(format!(
                "one message ended {} turns ({completed} completed, {failed} failed)",
                completed + failed
            ))
        } else if failed == 1 && row.last_turn_error.is_none() {
            Some("its turn failed without a last_turn_error".to_owned())
        } else if completed == 1 && row.last_turn_error.is_some() {
            Some(format!("its turn completed but last_turn_error is {:?}", row.last_turn_error))
        } else {
            None
        };
        match problem {
            Some(p) => out.push(v("stuck", format!("{id}: {p}"))),
            None if completed == 1 => verdict.completed += 1,
            None => {
                verdict.failed += 1;
                let why: String =
                    row.last_turn_error.as_deref().unwrap_or_default().chars().take(120).collect();
                *verdict.failures.entry(why).or_default() += 1;
            }
        }
    }
}

fn refund_id_of(n: usize) -> String {
    format!("\"r_{n}\"")
}

fn single_attempt_calls(o: &Observed, out: &mut Vec<Violation>) {
    let mut by_key: BTreeMap<&str, Vec<&Payment>> = BTreeMap::new();
    for p in &o.payments {
        by_key.entry(p.key.as_str()).or_default().push(p);
    }
    let single: Vec<&CallRow> = o.calls.iter().filter(|c| c.runs_in == "call_single_attempt_tool").collect();
    let single_paths: BTreeSet<&str> = single
        .iter()
        .flat_map(|c| by_key.get(c.key().as_str()).into_iter().flatten().map(|p| p.path.as_str()))
        .collect();
    for call in &single {
        let key = call.key();
        let paid: &[&Payment] = by_key.get(key.as_str()).map_or(&[], Vec::as_slice);
        let what = format!("{} {} ({})", call.tool_name, call.tool_call_id, call.session_id);
        let problem = match (paid, call.status.as_str()) {
            (many, _) if many.len() > 1 => Some(format!(
                "made {} payments under key {key} (requests {:?})",
                many.len(),
                many.iter().map(|p| p.n).collect::<Vec<_>>()
            )),
            (_, "outcome_unknown") => None,
            // Held back in a batch and never called again before its turn ended (closed ahead_unused): it
            // never ran, and says so.
            ([], "unused") => None,
            // Its request never left the machine (the service refused the connection), and it says so.
            ([], "failed")
                if call.error.as_deref().is_some_and(|e| e.contains("never left this machine")) =>
            {
                None
            }
            ([], status) => {
                Some(format!("made no payment but is recorded {status:?}, not outcome_unknown or unused"))
            }
            ([one], "succeeded") => {
                let quoted = call.output.as_deref().unwrap_or_default();
                (!quoted.contains(&refund_id_of(one.n))).then(|| {
                    format!(
                        "is recorded succeeded with {quoted:?}, not the answer r_{} to its payment",
                        one.n
                    )
                })
            }
            ([one], status) => Some(format!("made payment r_{} but is recorded {status:?}", one.n)),
            _ => unreachable!("slices of length 0, 1 and more are covered"),
        };
        if let Some(problem) = problem {
            out.push(v("single-attempt", format!("{what}: {problem}")));
        }
    }
    // Payments on the single-attempt calls' paths that no call accounts for.
    let keys: BTreeSet<String> = single.iter().map(|c| c.key()).collect();
    for p in &o.payments {
        if single_paths.contains(p.path.as_str()) && !keys.contains(&p.key) {
            out.push(v(
                "single-attempt",
                format!("payment r_{} on {} under key {:?} belongs to no recorded call", p.n, p.path, p.key),
            ));
        }
    }
}

/// The `(session_id, tool_call_id)` a request's body names, if it names one.
fn named_call(p: &Payment) -> Option<(&str, &str)> {
    Some((p.body.get("session_id")?.as_str()?, p.body.get("tool_call_id")?.as_str()?))
}

fn idempotent_calls(o: &Observed, out: &mut Vec<Violation>) {
    let mut by_call: BTreeMap<(&str, &str), Vec<&Payment>> = BTreeMap::new();
    for p in &o.payments {
        if let Some(call) = named_call(p) {
            by_call.entry(call).or_default().push(p);
        }
    }
    for call in o.calls.iter().filter(|c| c.runs_in == "call_tool") {
        let what = format!("{} {} ({})", call.tool_name, call.tool_call_id, call.session_id);
        let sent =
            by_call.remove(&(call.session_id.as_str(), call.tool_call_id.as_str())).unwrap_or_default();
        let keys: BTreeSet<&str> = sent.iter().map(|p| p.key.as_str()).collect();
        let expected = call.key();
        if keys.len() > 1 {
            out.push(v(
                "idempotency-key",
                format!("{what}: its requests carry {} keys: {keys:?}", keys.len()),
            ));
        } else if let Some(key) = keys.first()
            && *key != expected
        {
            out.push(v(
                "idempotency-key",
                format!("{what}: its requests carry key {key:?}, not {expected:?}"),
            ));
        }
        if sent.is_empty() && call.status == "succeeded" {
            out.push(v("idempotency-key", format!("{what}: recorded succeeded but sent no request")));
        }
    }
    for ((session, tool_call), sent) in by_call {
        out.push(v(
            "idempotency-key",
            format!(
                "{} request(s) name call {tool_call} of {session}, which has no CallTool record",
                sent.len()
            ),
        ));
    }
}

fn event_seqs(o: &Observed, out: &mut Vec<Violation>) {
    let mut seqs: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for e in &o.events {
        seqs.entry(e.session_id.as_str()).or_default().push(e.seq);
    }
    for s in &o.sessions {
        let mut got = seqs.remove(s.session_id.as_str()).unwrap_or_default();
        got.sort_unstable();
        let expected: Vec<i64> = (1..s.next_event_seq).collect();
        if got != expected {
            let have: BTreeSet<i64> = got.iter().copied().collect();
            let missing: Vec<i64> = expected.iter().copied().filter(|n| !have.contains(n)).collect();
            let repeated: Vec<i64> = got.windows(2).filter(|w| w[0] == w[1]).map(|w| w[0]).collect();
            let beyond: Vec<i64> = got.iter().copied().filter(|n| *n < 1 || *n >= s.next_event_seq).collect();
            out.push(v(
                "event-seq",
                format!(
                    "{}: seqs missing {missing:?}, repeated {repeated:?}, outside 1..{} {beyond:?}",
                    s.session_id, s.next_event_seq
                ),
            ));
        }
    }
    for (session, got) in seqs {
        out.push(v("event-seq", format!("{session}: {} events of a session that has no row", got.len())));
    }
}

/// Something done under a fence of a step: (time, fence, what).
type Sign = (i64, i64, String);

fn fences(o: &Observed, out: &mut Vec<Violation>) {
    let mut signs: BTreeMap<i64, Vec<Sign>> = BTreeMap::new();
    let mut claims: BTreeMap<(i64, i64), i64> = BTreeMap::new();
    for c in &o.claims {
        let at = claims.entry((c.step_id, c.fence)).or_insert(c.at_us);
        *at = (*at).min(c.at_us);
    }
    // Events, in seq order per session: the fence of one step never goes down.
    let mut last_fence: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    let mut events: Vec<&EventRow> = o.events.iter().collect();
    events.sort_by(|a, b| (&a.session_id, a.seq).cmp(&(&b.session_id, b.seq)));
    for e in events {
        let Some((step, fence)) = e.step else { continue };
        if let Some(&(seen, at_seq)) = last_fence.get(&step)
            && fence < seen
        {
            out.push(v(
                "fence-overlap",
                format!(
                    "{}: event {} ({}) of step {step} has fence {fence} after event {at_seq} had fence {seen}",
                    e.session_id, e.seq, e.kind
                ),
            ));
        }
        let newest = last_fence.entry(step).or_insert((fence, e.seq));
        if fence >= newest.0 {
            *newest = (fence, e.seq);
        }
        if let Some(attempt) = e.attempt
            && attempt != fence
        {
            out.push(v(
                "harness",
                format!(
                    "{}: event {} of step {step} says attempt {attempt} under fence {fence}; the claim log's attempt is not the fence",
                    e.session_id, e.seq
                ),
            ));
        }
        signs.entry(step).or_default().push((
            e.at_us,
            fence,
            format!("event {} {} of {}", e.seq, e.kind, e.session_id),
        ));
    }
    // Requests of idempotent calls, in arrival order: attempts never go down.
    let step_of: BTreeMap<(&str, &str), i64> = o
        .steps
        .iter()
        .filter(|s| s.kind == "CallTool")
        .filter_map(|s| Some(((s.session_id.as_str(), s.tool_call_id.as_deref()?), s.step_id)))
        .collect();
    let mut last_attempt: BTreeMap<i64, (i64, usize)> = BTreeMap::new();
    for p in &o.payments {
        let Some(call) = named_call(p) else { continue };
        let Some(attempt) = p.body.get("attempt").and_then(Value::as_i64) else { continue };
        let Some(&step) = step_of.get(&call) else { continue };
        if let Some(&(seen, n)) = last_attempt.get(&step)
            && attempt < seen
        {
            out.push(v(
                "fence-overlap",
                format!(
                    "step {step} ({} of {}): request r_{} of attempt {attempt} arrived after request r_{n} of attempt {seen}",
                    call.1, call.0, p.n
                ),
            ));
        }
        let newest = last_attempt.entry(step).or_insert((attempt, p.n));
        if attempt >= newest.0 {
            *newest = (attempt, p.n);
        }
        signs.entry(step).or_default().push((p.at_us, attempt, format!("request r_{} on {}", p.n, p.path)));
    }
    // Nothing under fence f after fence f' > f was claimed.
    for (step, signs) in signs {
        let mut claimed: BTreeMap<i64, i64> = BTreeMap::new();
        for (at, fence, _) in &signs {
            let first = claimed.entry(*fence).or_insert(*at);
            *first = (*first).min(*at);
        }
        for ((s, fence), at) in &claims {
            if *s == step {
                let first = claimed.entry(*fence).or_insert(*at);
                *first = (*first).min(*at);
            }
        }
        for (at, fence, what) in &signs {
            if let Some((newer, claimed_at)) =
                claimed.range(fence + 1..).find(|(_, claimed_at)| *at > **claimed_at + CLOCK_SLACK_US)
            {
                out.push(v(
                    "fence-overlap",
                    format!(
                        "step {step}: {what} under fence {fence} came {:.1} ms after fence {newer} was claimed",
                        (at - claimed_at) as f64 / 1000.0
                    ),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A run of one session that did everything right: a credit (one request, attempt 1), an
    /// approved refund that succeeded with payment r_2.
    fn good() -> Observed {
        let s = "chaos-0";
        let key = |id: &str| format!("{s}/turn-1/{id}");
        let ev = |seq: i64, kind: &str, step: Option<(i64, i64)>, at_ms: i64| EventRow {
            session_id: s.into(),
            seq,
            kind: kind.into(),
            step,
            at_us: at_ms * 1000,
            attempt: (kind == "tool_call_started").then(|| step.map_or(0, |(_, f)| f)),
        };
        Observed {
            expected_sessions: vec![s.into()],
            sessions: vec![SessionRow {
                session_id: s.into(),
                status: "idle".into(),
                last_turn_error: None,
                next_event_seq: 7,
            }],
            steps: vec![
                StepRow {
                    step_id: 1,
                    session_id: s.into(),
                    kind: "RunModel".into(),
                    state: "done".into(),
                    fence: 2,
                    ..Default::default()
                },
                StepRow {
                    step_id: 2,
                    session_id: s.into(),
                    kind: "CallTool".into(),
                    tool_call_id: Some("c1".into()),
                    state: "done".into(),
                    fence: 1,
                },
                StepRow {
                    step_id: 3,
                    session_id: s.into(),
                    kind: "CallSingleAttemptTool".into(),
                    tool_call_id: Some("c2".into()),
                    state: "done".into(),
                    fence: 1,
                },
            ],
            events: vec![
                ev(1, "user_message", None, 1000),
                ev(2, "turn_started", Some((1, 2)), 1100),
                ev(3, "tool_call_started", Some((2, 1)), 1200),
                ev(4, "tool_call_finished", Some((2, 1)), 1300),
                ev(5, "tool_call_started", Some((3, 1)), 1400),
                ev(6, "turn_completed", Some((3, 1)), 1500),
            ],
            calls: vec![
                CallRow {
                    session_id: s.into(),
                    tool_call_id: "c1".into(),
                    tool_name: "record_credit".into(),
                    turn_id: "turn-1".into(),
                    runs_in: "call_tool".into(),
                    status: "succeeded".into(),
                    output: Some(r#"{"refund_id":"r_1"}"#.into()),
                    error: None,
                },
                CallRow {
                    session_id: s.into(),
                    tool_call_id: "c2".into(),
                    tool_name: "create_refund".into(),
                    turn_id: "turn-1".into(),
                    runs_in: "call_single_attempt_tool".into(),
                    status: "succeeded".into(),
                    output: Some(r#"{"refund_id":"r_2","status":"refunded"}"#.into()),
                    error: None,
                },
            ],
            interrupts: vec![InterruptRow {
                session_id: s.into(),
                interrupt_id: "c2".into(),
                state: "resolved".into(),
            }],
            payments: vec![
                Payment {
                    n: 1,
                    path: "/credits".into(),
                    key: key("c1"),
                    body: json!({"session_id": s, "tool_call_id": "c1", "attempt": 1}),
                    at_us: 1_250_000,
                },
                Payment {
                    n: 2,
                    path: "/refunds".into(),
                    key: key("c2"),
                    body: json!({"order_id": "1"}),
                    at_us: 1_450_000,
                },
            ],
            claims: vec![
                Claim { step_id: 1, fence: 1, at_us: 1_000_000, worker: "w1".into() },
                Claim { step_id: 1, fence: 2, at_us: 1_050_000, worker: "w2".into() },
            ],
            cli_left: vec![],
            unexpected_exits: vec![],
        }
    }

    fn invariants(o: &Observed) -> Vec<&'static str> {
        check(o).violations.iter().map(|v| v.invariant).collect()
    }

    #[test]
    fn a_clean_run_has_no_violation_and_counts_the_completed_session() {
        let verdict = check(&good());
        assert_eq!(verdict.violations, vec![]);
        assert_eq!((verdict.completed, verdict.failed), (1, 0));
    }

    #[test]
    fn a_session_left_running_or_never_created_is_stuck() {
        let mut o = good();
        o.sessions[0].status = "running".into();
        assert_eq!(invariants(&o), ["stuck"]);
        let mut o = good();
        o.steps[2].state = "claimed".into();
        assert_eq!(invariants(&o), ["stuck"]);
        let mut o = good();
        o.interrupts[0].state = "open".into();
        assert_eq!(invariants(&o), ["stuck"]);
        let mut o = good();
        o.expected_sessions.push("chaos-1".into());
        assert_eq!(invariants(&o), ["stuck"]);
    }

    #[test]
    fn an_idle_session_whose_turn_never_ended_or_failed_silently_is_stuck() {
        let mut o = good();
        o.events[5].kind = "text_delta".into();
        assert_eq!(invariants(&o), ["stuck"]);
        let mut o = good();
        o.events[5].kind = "turn_failed".into();
        assert_eq!(invariants(&o), ["stuck"], "failed without last_turn_error");
        o.sessions[0].last_turn_error = Some("the segment failed 3 times".into());
        let verdict = check(&o);
        assert_eq!(verdict.violations, vec![]);
        assert_eq!((verdict.completed, verdict.failed), (0, 1));
    }

    #[test]
    fn two_payments_for_one_single_attempt_call_are_a_violation() {
        let mut o = good();
        let mut again = o.payments[1].clone();
        again.n = 3;
        o.payments.push(again);
        assert_eq!(invariants(&o), ["single-attempt"]);
        // Even when the call says outcome_unknown.
        o.calls[1].status = "outcome_unknown".into();
        assert_eq!(invariants(&o), ["single-attempt"]);
    }

    #[test]
    fn a_single_attempt_call_without_payment_must_be_outcome_unknown() {
        let mut o = good();
        o.payments.pop();
        assert_eq!(invariants(&o), ["single-attempt"], "succeeded without paying");
        o.calls[1].status = "failed".into();
        assert_eq!(invariants(&o), ["single-attempt"]);
        o.calls[1].error =
            Some("The request of create_refund never left this machine, so it did not take effect".into());
        assert_eq!(invariants(&o), Vec::<&str>::new(), "a failure that says nothing left");
        o.calls[1].error = None;
        o.calls[1].status = "started".into();
        assert_eq!(invariants(&o), ["single-attempt"]);
        o.calls[1].status = "outcome_unknown".into();
        assert_eq!(invariants(&o), Vec::<&str>::new());
        // A call held back in a batch whose turn ended first never ran: "unused" without a
        // payment is right, "unused" with one is not.
        o.calls[1].status = "unused".into();
        assert_eq!(invariants(&o), Vec::<&str>::new());
        let o = {
            let mut o = good();
            o.calls[1].status = "unused".into();
            o
        };
        assert_eq!(invariants(&o), ["single-attempt"], "paid but recorded unused");
    }

    #[test]
    fn a_paid_call_recorded_failed_or_quoting_another_payment_is_a_violation() {
        let mut o = good();
        o.calls[1].status = "failed".into();
        assert_eq!(invariants(&o), ["single-attempt"]);
        let mut o = good();
        o.calls[1].output = Some(r#"{"refund_id":"r_1"}"#.into());
        assert_eq!(invariants(&o), ["single-attempt"]);
        let mut o = good();
        o.calls[1].status = "outcome_unknown".into();
        assert_eq!(invariants(&o), Vec::<&str>::new(), "a payment with an unknown result is fine");
    }

    #[test]
    fn a_payment_no_call_accounts_for_is_a_violation() {
        let mut o = good();
        o.payments.push(Payment {
            n: 3,
            path: "/refunds".into(),
            key: "chaos-9/turn-1/zz".into(),
            ..Default::default()
        });
        assert_eq!(invariants(&o), ["single-attempt"]);
    }

    #[test]
    fn an_idempotent_call_whose_requests_carry_two_keys_or_a_foreign_key_is_a_violation() {
        let mut o = good();
        let mut retry = o.payments[0].clone();
        retry.n = 3;
        retry.key = "chaos-0/turn-1/other".into();
        retry.body["attempt"] = json!(2);
        retry.at_us = 1_600_000;
        o.payments.push(retry);
        assert_eq!(invariants(&o), ["idempotency-key"]);
        let mut o = good();
        o.payments[0].key = String::new();
        assert_eq!(invariants(&o), ["idempotency-key"]);
        let mut o = good();
        o.payments.remove(0);
        for p in &mut o.payments {
            p.n -= 1;
        }
        o.calls[1].output = Some(r#"{"refund_id":"r_1"}"#.into());
        assert_eq!(invariants(&o), ["idempotency-key"], "succeeded without a request");
    }

    #[test]
    fn retries_of_an_idempotent_call_under_one_key_are_fine() {
        let mut o = good();
        let mut retry = o.payments[0].clone();
        retry.n = 3;
        retry.body["attempt"] = json!(2);
        retry.at_us = 1_600_000;
        o.payments.push(retry);
        o.steps[1].fence = 2;
        assert_eq!(invariants(&o), Vec::<&str>::new());
    }

    #[test]
    fn a_gap_or_a_repeat_in_event_seqs_is_a_violation() {
        let mut o = good();
        o.events.remove(2);
        assert_eq!(invariants(&o), ["event-seq"]);
        let mut o = good();
        let repeat = o.events[3].clone();
        o.events.push(repeat);
        assert!(invariants(&o).contains(&"event-seq"));
        let mut o = good();
        o.sessions[0].next_event_seq = 8;
        assert_eq!(invariants(&o), ["event-seq"], "a trailing event is missing");
    }

    #[test]
    fn an_event_of_an_older_fence_after_a_newer_one_is_an_overlap() {
        let mut o = good();
        // Step 1 committed under fence 2 at seq 2; an event under fence 1 follows.
        o.events[2] =
            EventRow { step: Some((1, 1)), kind: "text_delta".into(), attempt: None, ..o.events[2].clone() };
        assert!(invariants(&o).contains(&"fence-overlap"), "{:?}", check(&o).violations);
    }

    #[test]
    fn work_under_an_old_fence_after_a_newer_claim_is_an_overlap() {
        // A stale request of attempt 1 arrives after attempt 2 was claimed (and sent its own).
        let mut o = good();
        o.claims.push(Claim { step_id: 2, fence: 2, at_us: 1_260_000, worker: "w3".into() });
        let mut newer = o.payments[0].clone();
        newer.n = 3;
        newer.body["attempt"] = json!(2);
        newer.at_us = 1_270_000;
        let mut stale = o.payments[0].clone();
        stale.n = 4;
        stale.at_us = 1_280_000;
        o.payments.extend([newer, stale]);
        o.calls[1].output = Some(r#"{"refund_id":"r_2"}"#.into());
        let found = check(&o).violations;
        assert!(found.iter().filter(|v| v.invariant == "fence-overlap").count() >= 2, "{found:?}");
        // The claim alone (no newer request) dates fence 2, so one stale request is caught too.
        let mut o = good();
        o.claims.push(Claim { step_id: 2, fence: 2, at_us: 1_240_000, worker: "w3".into() });
        // The request at 1.25 s and the event at 1.3 s, both under fence 1.
        assert_eq!(invariants(&o), ["fence-overlap", "fence-overlap"], "{:?}", check(&o).violations);
    }

    #[test]
    fn an_attempt_that_is_not_the_fence_breaks_the_harness_assumption() {
        let mut o = good();
        o.events[2].attempt = Some(5);
        assert_eq!(invariants(&o), ["harness"]);
    }

    #[test]
    fn a_run_whose_claim_log_is_empty_fails_instead_of_passing_vacuously() {
        let mut o = good();
        o.claims.clear();
        assert_eq!(invariants(&o), ["harness"]);
    }

    #[test]
    fn a_cli_left_behind_and_an_unexpected_exit_are_violations() {
        let mut o = good();
        o.cli_left.push(ProcessNote { what: "pid 42".into() });
        o.unexpected_exits.push(ProcessNote { what: "worker 1 exited with 2".into() });
        assert_eq!(invariants(&o), ["cli-left", "process-exit"]);
    }
}
