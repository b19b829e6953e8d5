//! The box's watchdog: every 100 ms it adds up, over every process of the box (`/proc` shows only
//! the box's own), resident memory, tasks (threads) and CPU time (with what reaped children
//! used), and stops the box (`kill(-1, SIGKILL)`) when one is over its limit, recording the hit.
//!
//! Tasks are bounded by `RLIMIT_NPROC` already (a fork past it fails): reaching the limit is noted
//! (its failed forks may end the CLI), and a box that stays at it for a second (a fork bomb) is
//! stopped, since nothing in it can start anything more.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::config::Limits;
use crate::report::{BoxReport, LimitHit};

/// How often the watchdog looks.
const PERIOD: Duration = Duration::from_millis(100);
/// How many looks in a row at the task limit stop the box.
const AT_TASK_LIMIT: u32 = 10;

/// What the box's processes use, added up.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Usage {
    /// Resident memory, in bytes.
    pub(super) memory: u64,
    /// Tasks (threads of every process).
    pub(super) tasks: u64,
    /// CPU time, in clock ticks, reaped children included.
    pub(super) cpu_ticks: u64,
}

/// Starts the watchdog's thread.
pub(super) fn start(limits: Limits, report: Arc<Mutex<BoxReport>>) {
    let _ = std::thread::Builder::new().name("watchdog".into()).stack_size(256 * 1024).spawn(move || {
        // SAFETY: sysconf has no preconditions.
        let (page, ticks) = unsafe { (libc::sysconf(libc::_SC_PAGESIZE), libc::sysconf(libc::_SC_CLK_TCK)) };
        let (page, ticks) = (page.max(1) as u64, ticks.max(1) as u64);
        let mut at_task_limit = 0;
        loop {
            std::thread::sleep(PERIOD);
            let usage = measure(page);
            let hit = over(&limits, usage, ticks, &mut at_task_limit);
            if let Some(hit) = hit {
                let stopped = hit.stopped;
                report.lock().unwrap_or_else(|p| p.into_inner()).hit(hit);
                if stopped {
                    // SAFETY: kill(2) has no memory effects; -1 is every process of the box but this.
                    unsafe { libc::kill(-1, libc::SIGKILL) };
                }
            }
        }
    });
}

/// The hit `usage` makes, if any. Pure but for the counter of looks at the task limit.
pub(super) fn over(limits: &Limits, usage: Usage, ticks: u64, at_task_limit: &mut u32) -> Option<LimitHit> {
    let mib = 1024 * 1024;
    if usage.memory > limits.memory_mb.saturating_mul(mib) {
        return Some(LimitHit {
            limit: "memory".into(),
            detail: format!(
                "the box's processes used {} MiB of memory, over its {} MiB limit; the box was stopped",
                usage.memory / mib,
                limits.memory_mb
            ),
            stopped: true,
        });
    }
    let cpu_secs = usage.cpu_ticks / ticks;
    if cpu_secs > limits.cpu_secs {
        return Some(LimitHit {
            limit: "cpu".into(),
            detail: format!(
                "the box's processes used {cpu_secs} s of CPU time, over its {} s limit; the box was stopped",
                limits.cpu_secs
            ),
            stopped: true,
        });
    }
    // A few tasks short of the limit count too: a fork bomb's failed forks keep it just below.
    if usage.tasks + 4 >= limits.tasks {
        *at_task_limit += 1;
        let stopped = *at_task_limit >= AT_TASK_LIMIT;
        // Noted at the first look (forks past the limit fail, and may end the CLI before the
        // box is stopped), stopped at the last.
        return Some(LimitHit {
            limit: "tasks".into(),
            detail: if stopped {
                format!(
                    "the box stayed at its limit of {} processes and threads (a fork bomb?); the box was stopped",
                    limits.tasks
                )
            } else {
                format!(
                    "the box reached its limit of {} processes and threads: forks past it failed",
                    limits.tasks
                )
            },
            stopped,
        });
    } else {
        *at_task_limit = 0;
    }
    None
}

/// Adds up what every process in `/proc` uses (the box's `/proc` shows only its own).
fn measure(page: u64) -> Usage {
    let mut usage = Usage::default();
    let Ok(entries) = std::fs::read_dir("/proc") else { return usage };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        if let Some(process) = parse_stat(&stat) {
            usage.memory += process.rss_pages * page;
            usage.tasks += process.threads;
            usage.cpu_ticks += process.cpu_ticks;
        }
    }
    // What the init's reaped children (and theirs) used.
    // SAFETY: a zeroed rusage is a valid out value.
    let mut children: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut children) } == 0 {
        // SAFETY: sysconf has no preconditions.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
        let micros = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
        usage.cpu_ticks += (micros(children.ru_utime) + micros(children.ru_stime)) * ticks / 1_000_000;
    }
    usage
}

/// The fields of `/proc/<pid>/stat` the watchdog reads.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct ProcessStat {
    pub(super) cpu_ticks: u64,
    pub(super) threads: u64,
    pub(super) rss_pages: u64,
}

/// Parses `/proc/<pid>/stat`: the fields after the command name (which may hold spaces and
/// parentheses, so the last `)` ends it): utime, stime, cutime, cstime (fields 14–17), the thread
/// count (20) and the resident set in pages (24).
pub(super) fn parse_stat(stat: &str) -> Option<ProcessStat> {
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (the state).
    let field = |n: usize| fields.get(n - 3)?.parse::<i64>().ok().map(|v| v.max(0) as u64);
    Some(ProcessStat {
        cpu_ticks: field(14)? + field(15)? + field(16)? + field(17)?,
        threads: field(20)?,
        rss_pages: field(24)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_cpu_threads_and_resident_pages_whatever_the_command_name() {
        let stat = "4242 (bad) name)) S 1 4242 4242 0 -1 4194560 100 0 0 0 7 3 2 1 20 0 12 0 100 123456 789 \
                    18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0";
        assert_eq!(parse_stat(stat), Some(ProcessStat { cpu_ticks: 13, threads: 12, rss_pages: 789 }));
        assert_eq!(parse_stat("garbage"), None);
        let own = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert!(parse_stat(&own).unwrap().threads >= 1);
    }

    #[test]
    fn each_limit_has_its_hit_and_a_fork_bomb_is_stopped_after_a_second_at_the_limit() {
        let limits = Limits { memory_mb: 100, tasks: 64, cpu_secs: 10, ..Limits::default() };
        let mut count = 0;
        let calm = Usage { memory: 50 << 20, tasks: 30, cpu_ticks: 500 };
        assert_eq!(over(&limits, calm, 100, &mut count), None);
        let hit = over(&limits, Usage { memory: 200 << 20, ..calm }, 100, &mut count).unwrap();
        assert_eq!(hit.limit, "memory");
        assert!(hit.detail.contains("200 MiB") && hit.detail.contains("100 MiB limit"), "{}", hit.detail);
        assert_eq!(over(&limits, Usage { cpu_ticks: 1200, ..calm }, 100, &mut count).unwrap().limit, "cpu");
        let bomb = Usage { tasks: 62, ..calm };
        for _ in 0..AT_TASK_LIMIT - 1 {
            let noted = over(&limits, bomb, 100, &mut count).unwrap();
            assert!(noted.limit == "tasks" && !noted.stopped, "{noted:?}");
        }
        let stopped = over(&limits, bomb, 100, &mut count).unwrap();
        assert!(stopped.limit == "tasks" && stopped.stopped, "{stopped:?}");
        count = 0;
        assert!(!over(&limits, bomb, 100, &mut count).unwrap().stopped);
        assert_eq!(over(&limits, calm, 100, &mut count), None);
        assert_eq!(count, 0, "a look below the limit starts the count again");
    }
}
