//! What the sandbox's benches share: the process's CPU time, percentiles of samples, and running
//! a build step whose failure names the install script.

use std::process::Command;
use std::time::Duration;

/// CPU time used so far by the whole process, every thread included.
pub fn process_cpu() -> Duration {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid timespec for clock_gettime to write.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID)");
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// The `p` percentile (0.5: the median) of `sorted`.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Runs `cmd`, printing its output; panics naming the guest toolchains' install script when it
/// fails.
#[allow(dead_code)] // Not every bench builds guests.
pub fn run(cmd: &mut Command) {
    let output = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    if !output.status.success() {
        panic!(
            "{cmd:?} failed ({}); install the guest toolchains with scripts/install-guest-toolchains.sh\n{}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    eprint!("{}", String::from_utf8_lossy(&output.stdout));
}
