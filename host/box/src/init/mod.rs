//! The program that runs as PID 1 inside every box (`tollgate-box`, bound at
//! [`crate::paths::INIT`]): it sets the limits, fills the workspace, relays the model and egress
//! proxies onto the box's loopback, starts the CLI, watches the box, and when the CLI exits kills
//! what is left, copies the workspace out and writes its [`BoxReport`].
//!
//! Its command line is `INIT <InitConfig as JSON> -- <program> <args>…`, made by
//! [`crate::bwrap::command_line`]. It gets the box's host directory (`box/`) on file descriptor 3
//! and, when the workspace is filled from the host, the workspace on 4; both are close-on-exec
//! here and the init is not dumpable, so the agent's processes (the same user, no capabilities)
//! can reach neither.
//!
//! 1. `prctl(PR_SET_DUMPABLE, 0)`; `RLIMIT_NPROC` (tasks: counted in the box's own user
//!    namespace), `RLIMIT_AS` (memory, per process), `RLIMIT_CORE` 0, for itself and so for
//!    everything it starts.
//! 2. Copies the workspace in (fd 4 → `/workspace`); one that does not fit stops the box before
//!    the CLI starts.
//! 3. Listens on `127.0.0.1:<port>` for each relay and pipes every connection to its Unix socket
//!    (`relay`).
//! 4. Copies `box/config-in/` (a resume's transcript) into `CLAUDE_CONFIG_DIR` and starts the
//!    CLI on its own stdin, stdout and stderr. For a CLI started ahead of its segment, whose
//!    transcript the host writes later, it pipes stdin through itself instead and copies the
//!    folder in just before the first bytes reach the CLI.
//! 5. A watchdog (`watchdog`) adds up the box's memory, tasks and CPU time every 100 ms and
//!    stops the box at a limit.
//! 6. Reaps every process (it is PID 1); when the CLI has exited it kills the rest (background
//!    tasks die with their segment), copies `/workspace` out to `box/out` (links out of it left
//!    behind, [`crate::copy`]), notes full `tmpfs` mounts, writes `box/report.json` (with what
//!    the CLI used, from `wait4`) and exits with the CLI's status (128 + the signal when it was
//!    killed).

mod relay;
mod watchdog;

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::config::Limits;
use crate::copy::{CopyError, Direction, copy_tree};
use crate::paths;
use crate::report::{BoxReport, CliUsage, LimitHit};

/// The init's configuration, its first argument.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InitConfig {
    /// The limits.
    pub limits: Limits,
    /// The relays onto the box's loopback.
    pub relays: Vec<RelayPlan>,
    /// `CLAUDE_CONFIG_DIR` inside.
    pub config_dir: PathBuf,
    /// The workspace `tmpfs`, when the workspace is copied (not bound).
    pub workspace: Option<PathBuf>,
    /// Whether file descriptor 4 is the workspace to copy in.
    pub workspace_from_fd: bool,
    /// Whether `box/config-in` is written after the box starts: then it is copied in before the
    /// CLI reads its first input, through a pipe of the init's; else at once, and the CLI reads
    /// the init's stdin itself.
    #[serde(default)]
    pub late_config: bool,
}

/// One relay: `127.0.0.1:<port>` inside to a Unix socket (bound into the box).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelayPlan {
    /// The loopback port inside the box.
    pub port: u16,
    /// The socket, at its path inside the box.
    pub socket: PathBuf,
}

/// How the init exits when it could not run the CLI.
const SETUP_FAILED: i32 = 125;

/// The init's `main`: never returns.
pub fn main() -> ! {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let code = match run(&args) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("tollgate-box: {message}");
            SETUP_FAILED
        }
    };
    std::process::exit(code)
}

/// The box's host directory, through the init's file descriptor.
fn host_dir() -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", paths::HOST_DIR_FD))
}

fn run(args: &[OsString]) -> Result<i32, String> {
    let init_started_ns = crate::report::monotonic_ns();
    let (config, program, program_args) = parse_args(args)?;
    // SAFETY: prctl with these arguments only changes this process's flags.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    for fd in [paths::HOST_DIR_FD, paths::WORKSPACE_FD] {
        // SAFETY: fcntl on a descriptor number; a closed one only returns an error.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    // Whatever else reached it open (bwrap closes what it bound; nothing else may pass).
    // SAFETY: close_range on numbers this process owns; nothing here uses them.
    unsafe { libc::syscall(libc::SYS_close_range, paths::WORKSPACE_FD + 1, u32::MAX, 0) };
    let host = host_dir();
    if !host.is_dir() {
        return Err(format!("file descriptor {} is not the box's host directory", paths::HOST_DIR_FD));
    }
    let report = Arc::new(Mutex::new(BoxReport::default()));
    lock(&report).timings.init_started_ns = init_started_ns;
    set_limits(&config.limits)?;

    if let (Some(workspace), true) = (&config.workspace, config.workspace_from_fd) {
        let from = PathBuf::from(format!("/proc/self/fd/{}", paths::WORKSPACE_FD));
        match copy_tree(&from, workspace, Direction::IntoBox) {
            Ok(_) => {}
            Err(CopyError::Full { bytes, .. }) => {
                let mut report = lock(&report);
                report.hit(LimitHit {
                    limit: "workspace".into(),
                    detail: format!(
                        "the session's workspace does not fit the box's {} MiB workspace cap (copied {} MiB \
                         before it ran out)",
                        config.limits.workspace_mb,
                        bytes >> 20
                    ),
                    stopped: true,
                });
                report.setup_error = Some("the workspace did not fit".into());
                write_report(&host, &report);
                return Ok(SETUP_FAILED);
            }
            Err(err) => return Err(format!("copying the workspace in: {err}")),
        }
    }
    // SAFETY: closing a descriptor this process owns and no longer uses.
    unsafe { libc::close(paths::WORKSPACE_FD) };

    for plan in &config.relays {
        relay::start(plan).map_err(|err| format!("relay 127.0.0.1:{}: {err}", plan.port))?;
    }

    let config_in = host.join("config-in");
    if !config.late_config {
        copy_tree(&config_in, &config.config_dir, Direction::IntoBox)
            .map_err(|err| format!("copying the CLI's configuration in: {err}"))?;
    }
    let mut child = Command::new(&program)
        .args(&program_args)
        .stdin(if config.late_config { Stdio::piped() } else { Stdio::inherit() })
        .spawn()
        .map_err(|err| format!("starting {}: {err}", program.display()))?;
    let cli_pid = child.id() as libc::pid_t;
    lock(&report).timings.cli_spawned_ns = crate::report::monotonic_ns();
    if let Some(stdin) = child.stdin.take() {
        let config_dir = config.config_dir.clone();
        std::thread::Builder::new()
            .name("stdin".into())
            .spawn(move || forward_stdin(stdin, &config_in, &config_dir))
            .map_err(|err| format!("starting the stdin thread: {err}"))?;
    }
    // A workspace already full (an earlier segment filled it) is not this segment's hit.
    let full_before = config.workspace.as_deref().is_some_and(is_full);
    watchdog::start(config.limits, report.clone());

    let (status, cli_usage) = reap(cli_pid);
    {
        let mut report = lock(&report);
        report.cli_exit = Some(status.to_string());
        report.cli_usage = cli_usage;
        report.timings.cli_exited_ns = crate::report::monotonic_ns();
        if let Some(workspace) = &config.workspace {
            if !full_before {
                note_full(&mut report, workspace, "workspace", config.limits.workspace_mb);
            }
            let out = host.join("out");
            match copy_tree(workspace, &out, Direction::OutOfBox) {
                Ok(summary) => {
                    report.copied_out = true;
                    report.left_behind = summary.left_behind;
                }
                Err(err) => report.left_behind.push(format!("the copy out stopped: {err}")),
            }
        }
        for scratch in [paths::HOME, paths::TMP] {
            note_full(&mut report, Path::new(scratch), "scratch", config.limits.scratch_mb);
        }
        report.timings.reported_ns = crate::report::monotonic_ns();
        write_report(&host, &report);
    }
    Ok(status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

fn parse_args(args: &[OsString]) -> Result<(InitConfig, PathBuf, Vec<OsString>), String> {
    let usage = "usage: tollgate-box <configuration as JSON> -- <program> [args…]";
    let [config, dashes, program, rest @ ..] = args else { return Err(usage.into()) };
    if dashes != "--" {
        return Err(usage.into());
    }
    let config: InitConfig = serde_json::from_str(&config.to_string_lossy())
        .map_err(|err| format!("the configuration is not valid: {err}"))?;
    Ok((config, PathBuf::from(program), rest.to_vec()))
}

fn set_limits(limits: &Limits) -> Result<(), String> {
    let mib = 1024 * 1024;
    for (resource, value, name) in [
        (libc::RLIMIT_NPROC, limits.tasks, "RLIMIT_NPROC"),
        (libc::RLIMIT_AS, limits.memory_mb.saturating_mul(mib), "RLIMIT_AS"),
        (libc::RLIMIT_CORE, 0, "RLIMIT_CORE"),
    ] {
        let limit = libc::rlimit { rlim_cur: value as libc::rlim_t, rlim_max: value as libc::rlim_t };
        // SAFETY: a valid rlimit for a known resource.
        if unsafe { libc::setrlimit(resource, &limit) } != 0 {
            return Err(format!("setting {name}: {}", std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

/// Copies the host's `config-in` into the CLI's config folder, then pipes stdin to the CLI.
fn forward_stdin(mut to: std::process::ChildStdin, config_in: &Path, config_dir: &Path) {
    let mut input = std::io::stdin().lock();
    let mut buf = vec![0u8; 64 * 1024];
    let mut first = true;
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if first {
            first = false;
            if let Err(err) = copy_tree(config_in, config_dir, Direction::IntoBox) {
                eprintln!("tollgate-box: copying the CLI's configuration in: {err}");
            }
        }
        if to.write_all(&buf[..n]).and_then(|()| to.flush()).is_err() {
            return;
        }
    }
}

/// Reaps every child until `cli` has exited and every other process is gone; returns `cli`'s
/// status and what it used.
fn reap(cli: libc::pid_t) -> (ExitStatus, Option<CliUsage>) {
    let mut cli_status = None;
    let mut cli_usage = None;
    loop {
        let mut status = 0;
        // SAFETY: a zeroed rusage is a valid out value.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: wait4 with valid out pointers.
        let pid = unsafe { libc::wait4(-1, &mut status, 0, &mut usage) };
        if pid == cli {
            cli_status = Some(ExitStatus::from_raw(status));
            cli_usage = Some(CliUsage::from_rusage(&usage));
            // The segment is over: nothing the agent started outlives it.
            // SAFETY: kill(2) has no memory effects; -1 is every process this one may signal
            // in the box, itself excepted.
            unsafe { libc::kill(-1, libc::SIGKILL) };
        }
        if pid < 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return (cli_status.unwrap_or_else(|| ExitStatus::from_raw(libc::SIGKILL)), cli_usage);
        }
    }
}

/// Whether the file system at `at` has no room left (under 64 KiB free).
fn is_full(at: &Path) -> bool {
    let Ok(path) = std::ffi::CString::new(at.as_os_str().as_encoded_bytes()) else { return false };
    // SAFETY: a zeroed statvfs is a valid out value; the path is NUL-terminated.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
        return false;
    }
    (stat.f_bavail as u64 * stat.f_frsize as u64) < 64 * 1024
}

/// Records a `limit` hit when the `tmpfs` at `at` has no room left.
fn note_full(report: &mut BoxReport, at: &Path, limit: &str, cap_mb: u64) {
    if is_full(at) {
        report.hit(LimitHit {
            limit: limit.into(),
            detail: format!(
                "{} reached its {cap_mb} MiB cap: writes failed with \"No space left on device\"",
                at.display()
            ),
            stopped: false,
        });
    }
}

/// Writes the report, final: nothing of the box runs any more but this init, which exits next.
/// Then tells the host so through `ended`, so it need not wait for the box's namespaces to be torn
/// down (tens of milliseconds after the last process exits).
fn write_report(host: &Path, report: &BoxReport) {
    let text = serde_json::to_string(report).unwrap_or_default();
    if let Err(err) = std::fs::write(host.join("report.json"), text) {
        eprintln!("tollgate-box: writing the report: {err}");
        return;
    }
    signal_ended(host);
}

/// One byte into the host's `ended` FIFO (the host holds it open, so this never blocks or fails
/// for want of a reader; a box without one is an older host's: nothing to tell).
fn signal_ended(host: &Path) {
    use std::os::unix::fs::OpenOptionsExt;
    let fifo = host.join(crate::paths::ENDED_FIFO);
    match std::fs::OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK).open(&fifo) {
        Ok(mut file) => {
            let _ = file.write_all(b"1");
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => eprintln!("tollgate-box: telling the host the box has ended: {err}"),
    }
}

fn lock(report: &Mutex<BoxReport>) -> std::sync::MutexGuard<'_, BoxReport> {
    report.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_a_configuration_a_separator_and_a_program() {
        let config = InitConfig {
            limits: Limits::default(),
            relays: vec![RelayPlan { port: 1, socket: "/s".into() }],
            config_dir: "/c".into(),
            workspace: None,
            workspace_from_fd: false,
            late_config: false,
        };
        let json = serde_json::to_string(&config).unwrap();
        let args: Vec<OsString> = [json.as_str(), "--", "/bin/claude", "-p"].map(OsString::from).to_vec();
        let (parsed, program, rest) = parse_args(&args).unwrap();
        assert_eq!(
            (parsed, program, rest),
            (config, PathBuf::from("/bin/claude"), vec![OsString::from("-p")])
        );
        let bad: Vec<OsString> = ["{}", "--", "/bin/x"].map(OsString::from).to_vec();
        assert!(parse_args(&bad).unwrap_err().starts_with("the configuration is not valid"));
        assert!(parse_args(&[OsString::from("x")]).unwrap_err().starts_with("usage"));
    }
}
