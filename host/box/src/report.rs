//! What the init tells the host about a box after the CLI exited: the limits hit, what became of
//! the workspace copy. Written by [`crate::init`] as `report.json` in the box's host directory,
//! read by [`crate::layout::BoxDir::report`].

use std::fmt;

use serde::{Deserialize, Serialize};

/// One limit a box hit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitHit {
    /// Which: `memory`, `tasks`, `cpu`, `workspace`, `scratch`.
    pub limit: String,
    /// What happened, for the segment's failure reason.
    pub detail: String,
    /// Whether the init stopped the box for it (a full workspace only makes writes fail).
    pub stopped: bool,
}

impl fmt::Display for LimitHit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.detail)
    }
}

/// When the init reached each point of its run, in `CLOCK_MONOTONIC` nanoseconds (the host's
/// clock too: a box has no time namespace), so the host can split a box's cost into its parts.
/// `0`: not reached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoxTimings {
    /// The init started (after `bwrap` made the box).
    pub init_started_ns: u64,
    /// The CLI was started (after the workspace was copied in and the relays opened).
    pub cli_spawned_ns: u64,
    /// The CLI and every other process of the box were gone.
    pub cli_exited_ns: u64,
    /// The workspace was copied out and the report is about to be written.
    pub reported_ns: u64,
}

/// What the CLI used, as the init reaped it (`wait4`): the CLI and the processes it waited for
/// (its `git` calls, `Bash` commands), so the host can compare a boxed CLI's work with an
/// unboxed one's by counts that a busy machine does not inflate the way it inflates wall times.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CliUsage {
    /// User and system CPU time, in microseconds.
    pub cpu_us: u64,
    /// Page faults served without I/O.
    pub minor_faults: u64,
    /// Page faults that needed I/O.
    pub major_faults: u64,
    /// Peak resident set of the largest of them, in KiB.
    pub max_rss_kb: u64,
}

impl CliUsage {
    /// The usage `wait4` or `getrusage` filled in.
    pub fn from_rusage(usage: &libc::rusage) -> CliUsage {
        let micros = |t: libc::timeval| t.tv_sec.max(0) as u64 * 1_000_000 + t.tv_usec.max(0) as u64;
        CliUsage {
            cpu_us: micros(usage.ru_utime) + micros(usage.ru_stime),
            minor_faults: usage.ru_minflt.max(0) as u64,
            major_faults: usage.ru_majflt.max(0) as u64,
            max_rss_kb: usage.ru_maxrss.max(0) as u64,
        }
    }
}

/// `CLOCK_MONOTONIC` now, in nanoseconds.
pub fn monotonic_ns() -> u64 {
    // SAFETY: a zeroed timespec is a valid out value.
    let mut now: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: as above; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// The init's account of one box.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoxReport {
    /// The limits hit, in the order they were.
    pub limits: Vec<LimitHit>,
    /// Whether the workspace was copied back out (into `out/`) after the CLI exited.
    pub copied_out: bool,
    /// Entries of the workspace left behind by the copy out, each with why (a link pointing
    /// out of the workspace, a device file).
    pub left_behind: Vec<String>,
    /// How the CLI ended, as text (`exit status: 0`, `signal: 9`), when it was started.
    pub cli_exit: Option<String>,
    /// Why the box could not run the CLI at all, when it could not.
    pub setup_error: Option<String>,
    /// When the init reached each point of its run.
    #[serde(default)]
    pub timings: BoxTimings,
    /// What the CLI used, once it was reaped.
    #[serde(default)]
    pub cli_usage: Option<CliUsage>,
}

impl BoxReport {
    /// The hit that stopped the box, else the first one.
    pub fn main_hit(&self) -> Option<&LimitHit> {
        self.limits.iter().find(|hit| hit.stopped).or_else(|| self.limits.first())
    }

    /// Records `hit` unless one of the same limit is there already; a hit that stopped the box
    /// takes the place of one of its limit that did not.
    pub fn hit(&mut self, hit: LimitHit) {
        match self.limits.iter_mut().find(|known| known.limit == hit.limit) {
            Some(known) if hit.stopped && !known.stopped => *known = hit,
            Some(_) => {}
            None => self.limits.push(hit),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(limit: &str, stopped: bool) -> LimitHit {
        LimitHit { limit: limit.into(), detail: format!("{limit} hit"), stopped }
    }

    #[test]
    fn the_hit_that_stopped_the_box_comes_first_and_each_limit_is_recorded_once() {
        let mut report = BoxReport::default();
        assert_eq!(report.main_hit(), None);
        report.hit(hit("workspace", false));
        report.hit(hit("memory", true));
        report.hit(hit("workspace", false));
        assert_eq!(report.limits.len(), 2);
        assert_eq!(report.main_hit().unwrap().limit, "memory");
        report.hit(hit("tasks", false));
        report.hit(hit("tasks", true));
        report.hit(hit("tasks", false));
        assert_eq!(report.limits.len(), 3);
        assert!(report.limits[2].stopped, "the stop replaced the note: {report:?}");
        let text = serde_json::to_string(&report).unwrap();
        assert_eq!(serde_json::from_str::<BoxReport>(&text).unwrap(), report);
    }
}
