//! One claimed step's life as a machine without I/O: the cadence of its heartbeat ([`Lease`]) and
//! what the Worker does once the step ended ([`settle`]): commit nothing more, end the turn of a
//! step whose rows cannot be used, park a step this build cannot read, hand a step back at the end
//! of a drain, or drop a step whose lease another Worker took. [`super::Worker::run_claimed`]
//! drives it: it sleeps, heartbeats, runs the step, and carries out what these answer, so every
//! case here is a unit test and the driver holds no decision.

use std::time::Duration;

use tollgate_engine::session::EngineError;
use tollgate_store::StoreError;

use super::StepError;

/// The heartbeat of one claim: how long to wait before the next one, given how the last ones went.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Lease {
    /// Heartbeats failed in a row (the store is unavailable).
    failures: u32,
}

/// How long the driver waits before the next heartbeat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    /// One heartbeat period.
    Period,
    /// Retry soon, backing off with jitter after this many failures in a row, so the lease is
    /// extended as soon as the store is back, not one whole period later.
    Backoff {
        /// Failures in a row so far.
        failures: u32,
    },
}

/// What a heartbeat answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Beat {
    /// The lease was extended.
    Renewed,
    /// The claim is stale: another Worker holds the step.
    Lost,
    /// The store failed; the lease may still hold.
    Failed,
}

impl Lease {
    /// The wait before the next heartbeat.
    pub(crate) fn next(&self) -> Wait {
        match self.failures {
            0 => Wait::Period,
            failures => Wait::Backoff { failures },
        }
    }

    /// Takes a heartbeat's answer; `false` when the lease is lost and the step must stop.
    pub(crate) fn answered(&mut self, beat: Beat) -> bool {
        match beat {
            Beat::Renewed => self.failures = 0,
            Beat::Failed => self.failures += 1,
            Beat::Lost => return false,
        }
        true
    }

    /// Failures in a row so far.
    pub(crate) fn failures(&self) -> u32 {
        self.failures
    }
}

/// What the Worker does with a step that ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Settle {
    /// Its result is committed: nothing more.
    Committed,
    /// Its rows cannot be used (and are not of a newer build): end its turn with this error for
    /// the client, then settle that result.
    EndTurn(String),
    /// Its rows are of a newer build, or its turn could not be ended: park it (retried later),
    /// changing nothing else.
    Park,
    /// The drain ran out: hand it back so another Worker claims it at once.
    Release,
    /// Another Worker holds it: its result was dropped.
    LeaseLost,
    /// The store failed: it runs again when its lease expires.
    StoreFailed,
}

impl Settle {
    /// The step's outcome, as the metrics label it.
    pub(crate) fn outcome(&self) -> &'static str {
        match self {
            Settle::Committed => "committed",
            Settle::EndTurn(_) | Settle::Park => "parked",
            Settle::Release => "released",
            Settle::LeaseLost => "lease_lost",
            Settle::StoreFailed => "store_error",
        }
    }
}

/// What to do with a step that ended with `result`; `turn_ended` when `result` is the answer of
/// ending its turn already (a second unusable row parks it instead of ending the turn again).
pub(crate) fn settle(result: &Result<(), StepError>, turn_ended: bool) -> Settle {
    match result {
        Ok(()) => Settle::Committed,
        Err(StepError::Engine(error)) if !turn_ended && !is_newer(error) => {
            Settle::EndTurn(error.to_string())
        }
        Err(StepError::Store(error @ StoreError::Corrupt { .. })) if !turn_ended => {
            Settle::EndTurn(error.to_string())
        }
        Err(StepError::Engine(_)) => Settle::Park,
        Err(StepError::Store(_)) => Settle::StoreFailed,
        Err(StepError::LeaseLost) => Settle::LeaseLost,
        Err(StepError::Released) => Settle::Release,
    }
}

/// A row or step kind of a newer Tollgate: left for a newer Worker, not failed.
fn is_newer(error: &EngineError) -> bool {
    matches!(error, EngineError::FutureVersion { .. } | EngineError::UnknownStep { .. })
}

/// The heartbeat's wait as a duration: `every`, or [`super::backoff`] up to `every` (and the
/// backoff's cap) after failures.
pub(crate) fn wait_for(wait: Wait, every: Duration, cap: Duration) -> Duration {
    match wait {
        Wait::Period => every,
        Wait::Backoff { failures } => super::backoff(failures, every.min(cap)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corrupt() -> StoreError {
        StoreError::Corrupt { table: "steps", key: "7".into(), detail: "not JSON".into() }
    }

    #[test]
    fn a_lost_lease_mid_step_stops_it_and_drops_its_result() {
        let mut lease = Lease::default();
        assert_eq!(lease.next(), Wait::Period);
        assert!(lease.answered(Beat::Renewed));
        assert!(!lease.answered(Beat::Lost), "the step must stop");
        let settled = settle(&Err(StepError::LeaseLost), false);
        assert_eq!((settled.clone(), settled.outcome()), (Settle::LeaseLost, "lease_lost"));
    }

    #[test]
    fn failed_heartbeats_retry_sooner_and_backing_off_until_one_renews_the_lease() {
        let mut lease = Lease::default();
        for failures in 1..=3 {
            assert!(lease.answered(Beat::Failed), "a failure is no loss: the lease may still hold");
            assert_eq!(lease.next(), Wait::Backoff { failures });
        }
        assert!(lease.answered(Beat::Renewed));
        assert_eq!((lease.next(), lease.failures()), (Wait::Period, 0));
        let every = Duration::from_secs(10);
        assert_eq!(wait_for(Wait::Period, every, Duration::from_secs(2)), every);
        let soon = wait_for(Wait::Backoff { failures: 1 }, every, Duration::from_secs(2));
        assert!(soon <= Duration::from_millis(100), "the first retry comes within 100 ms: {soon:?}");
        let capped =
            wait_for(Wait::Backoff { failures: 30 }, Duration::from_millis(500), Duration::from_secs(2));
        assert!(capped <= Duration::from_millis(500), "never later than one period: {capped:?}");
    }

    #[test]
    fn a_drain_that_runs_out_hands_the_step_back() {
        let settled = settle(&Err(StepError::Released), false);
        assert_eq!((settled.clone(), settled.outcome()), (Settle::Release, "released"));
    }

    #[test]
    fn unusable_rows_end_the_turn_once_and_a_second_failure_parks_the_step() {
        let bad = EngineError::BadInput { field: "run_state", reason: "not a run state".into() };
        let Settle::EndTurn(text) = settle(&Err(StepError::Engine(bad.clone())), false) else {
            panic!("unusable rows end the turn")
        };
        assert!(text.contains("not a run state"), "{text}");
        assert_eq!(settle(&Ok(()), true), Settle::Committed, "the turn ended: committed");
        assert_eq!(settle(&Err(StepError::Engine(bad)), true), Settle::Park, "ending it failed too: parked");
        assert!(matches!(settle(&Err(StepError::Store(corrupt())), false), Settle::EndTurn(_)));
        assert_eq!(settle(&Err(StepError::Store(corrupt())), true), Settle::StoreFailed);
    }

    #[test]
    fn rows_of_a_newer_build_are_parked_untouched_and_a_store_failure_waits_for_the_lease() {
        let newer = EngineError::FutureVersion { what: "run state".into(), found: 9 };
        assert_eq!(settle(&Err(StepError::Engine(newer)), false), Settle::Park);
        let down = StoreError::Invalid { what: "the store refused the commit".into() };
        let settled = settle(&Err(StepError::Store(down)), false);
        assert_eq!((settled.clone(), settled.outcome()), (Settle::StoreFailed, "store_error"));
    }
}
