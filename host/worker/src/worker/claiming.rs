//! The Worker's claim loop as a machine without I/O: told what each claim answered (a step,
//! nothing, a store failure), [`Claiming`] says what to do before the next one — run the step,
//! back off from a failing store, or idle (say once that the agent's configuration changed on
//! disk, adopt sessions created without an agent's name when due, wait for work).
//! [`super::Worker::run_until`] drives it: it claims, spawns, sleeps and logs, and holds no
//! decision.

use std::time::{Duration, Instant};

/// How long a Worker waits before it tries again to adopt sessions that no rule placed.
pub(crate) const ADOPTION_RETRY: Duration = Duration::from_secs(30);

/// What a claim answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// A step is claimed.
    Claimed,
    /// There is nothing to claim.
    Empty,
    /// The store failed.
    Failed,
}

/// What to do before the next claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// Run the claimed step, and claim again at once (when a slot is free).
    Run,
    /// Nothing to do: see [`Idle`], then wait for work.
    Idle(Idle),
    /// The store failed this many claims in a row: back off, then claim again.
    Backoff {
        /// Failures in a row.
        failures: u32,
    },
}

/// What an idle Worker does before it waits for work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Idle {
    /// Look whether `tollgate.toml` changed on disk (it is said once,
    /// [`Claiming::config_changed`]).
    pub check_config: bool,
    /// Adopt the sessions created without an agent's name ([`Claiming::adopted`]).
    pub adopt: bool,
}

/// The claim loop's state. See the module docs.
#[derive(Debug)]
pub(crate) struct Claiming {
    /// Claims failed in a row.
    failures: u32,
    /// Whether the change of the configuration on disk was said.
    config_change_told: bool,
    /// When to adopt next.
    next_adoption: Instant,
}

impl Claiming {
    /// A loop that adopts at its first idle moment.
    pub(crate) fn new(now: Instant) -> Self {
        Claiming { failures: 0, config_change_told: false, next_adoption: now }
    }

    /// A claim answered `answer` at `now`. Returns what to do, and the failures in a row that
    /// ended when a claim works again (for the log).
    pub(crate) fn answered(&mut self, answer: Answer, now: Instant) -> (Next, Option<u32>) {
        let recovered = match answer {
            Answer::Failed => None,
            Answer::Claimed | Answer::Empty => Some(std::mem::take(&mut self.failures)).filter(|f| *f > 0),
        };
        let next = match answer {
            Answer::Claimed => Next::Run,
            Answer::Empty => {
                Next::Idle(Idle { check_config: !self.config_change_told, adopt: now >= self.next_adoption })
            }
            Answer::Failed => {
                self.failures += 1;
                Next::Backoff { failures: self.failures }
            }
        };
        (next, recovered)
    }

    /// The configuration changed on disk and it was said: not again.
    pub(crate) fn config_changed(&mut self) {
        self.config_change_told = true;
    }

    /// An adoption at `now` placed `adopted` sessions; `None` when every session names an agent
    /// (a cheap probe, done at every idle moment). One that found unnamed sessions but placed none
    /// (no rule places them: several agents, a digest nobody registered) is tried again only after
    /// [`ADOPTION_RETRY`], not at every idle moment.
    pub(crate) fn adopted(&mut self, adopted: Option<u64>, now: Instant) {
        if adopted == Some(0) {
            self.next_adoption = now + ADOPTION_RETRY;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_store_backs_off_more_each_time_and_its_recovery_is_said_once() {
        let now = Instant::now();
        let mut claims = Claiming::new(now);
        assert_eq!(claims.answered(Answer::Failed, now), (Next::Backoff { failures: 1 }, None));
        assert_eq!(claims.answered(Answer::Failed, now), (Next::Backoff { failures: 2 }, None));
        assert_eq!(claims.answered(Answer::Claimed, now), (Next::Run, Some(2)), "claims work again");
        assert_eq!(claims.answered(Answer::Claimed, now), (Next::Run, None), "said once");
        assert_eq!(
            claims.answered(Answer::Failed, now),
            (Next::Backoff { failures: 1 }, None),
            "counted anew"
        );
        let (next, recovered) = claims.answered(Answer::Empty, now);
        assert!(matches!(next, Next::Idle(_)));
        assert_eq!(recovered, Some(1), "an empty answer is a working store too");
    }

    #[test]
    fn an_idle_worker_says_a_configuration_change_once() {
        let now = Instant::now();
        let mut claims = Claiming::new(now);
        let idle = |claims: &mut Claiming| match claims.answered(Answer::Empty, now).0 {
            Next::Idle(idle) => idle,
            other => panic!("{other:?}"),
        };
        assert!(idle(&mut claims).check_config);
        assert!(idle(&mut claims).check_config, "unchanged so far: look again");
        claims.config_changed();
        assert!(!idle(&mut claims).check_config, "said once");
    }

    #[test]
    fn an_adoption_that_placed_nothing_waits_before_the_next_and_others_do_not() {
        let start = Instant::now();
        let mut claims = Claiming::new(start);
        let adopts = |claims: &mut Claiming, at: Instant| match claims.answered(Answer::Empty, at).0 {
            Next::Idle(idle) => idle.adopt,
            other => panic!("{other:?}"),
        };
        assert!(adopts(&mut claims, start), "at the first idle moment");
        claims.adopted(None, start);
        assert!(adopts(&mut claims, start), "every session names an agent: the probe is cheap");
        claims.adopted(Some(3), start);
        assert!(adopts(&mut claims, start), "it placed some: there may be more");
        claims.adopted(Some(0), start);
        assert!(!adopts(&mut claims, start + Duration::from_secs(1)));
        assert!(adopts(&mut claims, start + ADOPTION_RETRY));
    }
}
