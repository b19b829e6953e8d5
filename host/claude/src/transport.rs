//! The CLI process and its pipes: spawn in a process group of its own, a line reader with a
//! length limit on stdout, a writer task on stdin, a stderr drain, and a guard that kills the
//! whole group.
//!
//! Read [`CliProcess`] first. It knows nothing of the protocol: it hands out raw stdout lines and
//! writes the lines it is given. [`crate::segment`] parses and answers them.
//!
//! # Caveats
//!
//! - The child runs in a new process group (`setpgid(0, 0)`), so tools the CLI starts (`Bash`)
//!   die with it: [`CliProcess::shutdown`] and `Drop` send `SIGKILL` to the group.
//! - Dropping a [`CliProcess`] kills the group but cannot wait for it (no `await` in `Drop`);
//!   tokio reaps the leader in the background (`kill_on_drop`).
//! - stdin is written by its own task, so a CLI that stops reading stdin cannot block the reader
//!   of stdout. Closing stdin ([`CliProcess::close_stdin`]) happens after the queued lines are
//!   written.
//! - On Linux the CLI dies with the process that started it, even when that process is
//!   SIGKILLed (a parent-death signal; see `spawn_dying_with_this_process`). Only the CLI itself
//!   gets the signal: a tool process it started (its own group) outlives it, until the next
//!   Worker on this host starts and kills it (`launch::remove_stale_scratch`).
//! - The child's environment is exactly [`Launch::env`]: nothing is inherited (`env_clear`), so
//!   the host's own secrets (its API tokens, database URLs, the model API key) never reach the
//!   CLI or the tools it runs. [`inherited_allowed_variables`] is the allow-list a caller starts
//!   from.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStderr, ChildStdout};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// How much of stderr an error message carries.
const STDERR_TAIL_BYTES: usize = 8 * 1024;

/// One event of the stdout reader.
#[derive(Debug)]
pub enum LineEvent {
    /// A complete line, without its `\n` (invalid UTF-8 replaced).
    Line(String),
    /// A line grew past the limit; the reader stopped.
    TooLong,
    /// stdout closed.
    Eof,
    /// Reading failed; the reader stopped.
    Error(std::io::Error),
}

/// What to start.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The binary.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Its working directory.
    pub cwd: PathBuf,
    /// Variables to remove from `env` (kept for callers of the inherited-environment era; the
    /// child inherits nothing).
    pub env_remove: Vec<OsString>,
    /// The child's whole environment, in order (later ones win).
    pub env: Vec<(OsString, OsString)>,
    /// The longest stdout line accepted, in bytes.
    pub max_line_bytes: usize,
    /// The uid and gid to run as (a root Worker starting a box as its user), else the caller's.
    pub user: Option<(u32, u32)>,
    /// Host paths the child gets open (`O_PATH`, so folders, files and sockets alike) on these
    /// file descriptor numbers: what `bwrap` binds by descriptor and a box's init reaches.
    pub inherit_paths: Vec<(PathBuf, i32)>,
}

/// A running CLI process. See the module docs.
#[derive(Debug)]
pub struct CliProcess {
    child: Child,
    pid: u32,
    stdin: Option<mpsc::UnboundedSender<String>>,
    lines: mpsc::Receiver<LineEvent>,
    stderr_tail: Arc<Mutex<VecDeque<u8>>>,
    stderr_task: Option<JoinHandle<()>>,
    reader_task: JoinHandle<()>,
    killed: bool,
}

impl CliProcess {
    /// Starts the process with all three pipes.
    pub fn spawn(launch: &Launch) -> std::io::Result<CliProcess> {
        let mut command = tokio::process::Command::new(&launch.program);
        command
            .args(&launch.args)
            .current_dir(&launch.cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0)
            .env_clear();
        for (name, value) in &launch.env {
            if !launch.env_remove.contains(name) {
                command.env(name, value);
            }
        }
        if let Some((uid, gid)) = launch.user {
            command.uid(uid).gid(gid);
        }
        // Open until the child has them: dropped after the spawn.
        let inherited = inherit_paths(&mut command, &launch.inherit_paths)?;
        let mut child = spawn_dying_with_this_process(command)?;
        drop(inherited);
        let pid = child.id().unwrap_or_default();
        let stdin = child.stdin.take().ok_or_else(|| missing("stdin"))?;
        let stdout = child.stdout.take().ok_or_else(|| missing("stdout"))?;
        let stderr = child.stderr.take().ok_or_else(|| missing("stderr"))?;

        let (stdin_tx, mut stdin_rx) = mpsc::unbounded_channel::<String>();
        tokio::spawn(async move {
            let mut stdin = stdin;
            while let Some(line) = stdin_rx.recv().await {
                if let Err(err) = stdin.write_all(line.as_bytes()).await {
                    tracing::debug!(%err, "writing to the CLI's stdin failed");
                    return;
                }
                let _ = stdin.flush().await;
            }
            // The sender is gone: dropping `stdin` here closes the pipe.
        });

        let (lines_tx, lines) = mpsc::channel(256);
        let reader_task = tokio::spawn(read_lines(stdout, launch.max_line_bytes, lines_tx));
        let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
        let stderr_task = Some(tokio::spawn(drain_stderr(stderr, stderr_tail.clone(), pid)));
        Ok(CliProcess {
            child,
            pid,
            stdin: Some(stdin_tx),
            lines,
            stderr_tail,
            stderr_task,
            reader_task,
            killed: false,
        })
    }

    /// The process id (also the process group id).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether the process still runs and has written nothing to stdout yet: a CLI started with
    /// `--await-initialize` that still waits for its `initialize` (a pre-started one, see
    /// [`crate::pool`]).
    pub fn is_waiting(&mut self) -> bool {
        self.is_running() && self.lines.is_empty()
    }

    /// Whether the process still runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Queues one line (it must end in `\n`). Ignored after [`CliProcess::close_stdin`].
    pub fn send(&self, line: String) {
        if let Some(stdin) = &self.stdin {
            let _ = stdin.send(line);
        }
    }

    /// Closes stdin once the queued lines are written.
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// The next stdout event. After [`LineEvent::Eof`], `TooLong` or `Error`, waits forever.
    pub async fn next_line(&mut self) -> LineEvent {
        match self.lines.recv().await {
            Some(event) => event,
            None => std::future::pending().await,
        }
    }

    /// Waits up to `grace` for the process to exit by itself, then kills the group, reaps the
    /// process, and returns its exit status as text with the tail of its stderr.
    pub async fn shutdown(&mut self, grace: Duration) -> (String, String) {
        self.shutdown_unless(grace, None).await
    }

    /// As [`CliProcess::shutdown`], but stops waiting as soon as `ended` (a boxed CLI's
    /// [`tollgate_box::BoxDir::ended_signal`]) is readable: the box's init has written its final
    /// report, so only the kernel's teardown of the box's namespaces is left, tens of milliseconds
    /// that nothing waits for. The group is killed and the process reaped in the background; the
    /// status returned is then [`BOX_REPORTED`] (the CLI's own is in the box's report).
    pub async fn shutdown_unless(
        &mut self,
        grace: Duration,
        ended: Option<std::fs::File>,
    ) -> (String, String) {
        self.stdin = None;
        let ended = async move {
            match ended.map(tokio::net::unix::pipe::Receiver::from_file) {
                Some(Ok(receiver)) => {
                    let _ = receiver.readable().await;
                }
                Some(Err(err)) => {
                    tracing::debug!(%err, "the box's ended signal cannot be read: waiting for the exit");
                    std::future::pending::<()>().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        let exited = tokio::select! {
            exited = tokio::time::timeout(grace, self.child.wait()) => Some(exited),
            () = ended => None,
        };
        let status = match exited {
            None => {
                self.kill_group();
                BOX_REPORTED.to_owned()
            }
            Some(Ok(Ok(status))) => {
                self.kill_group();
                status.to_string()
            }
            Some(_) => {
                self.kill_group();
                match tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await {
                    Ok(Ok(status)) => status.to_string(),
                    Ok(Err(err)) => format!("wait failed: {err}"),
                    Err(_) => "still running after SIGKILL".to_owned(),
                }
            }
        };
        self.reader_task.abort();
        if let Some(task) = self.stderr_task.take() {
            // A grandchild may still hold stderr open; do not wait for it long.
            let _ = tokio::time::timeout(Duration::from_millis(500), task).await;
        }
        (status, self.stderr_tail())
    }

    /// The last few KB of stderr so far.
    pub fn stderr_tail(&self) -> String {
        let tail = self.stderr_tail.lock().unwrap_or_else(|p| p.into_inner());
        String::from_utf8_lossy(&tail.iter().copied().collect::<Vec<u8>>()).into_owned()
    }

    fn kill_group(&mut self) {
        if self.killed || self.pid == 0 {
            return;
        }
        self.killed = true;
        kill_process_group(self.pid);
    }
}

impl Drop for CliProcess {
    fn drop(&mut self) {
        self.kill_group();
        self.reader_task.abort();
        if let Some(task) = self.stderr_task.take() {
            task.abort();
        }
    }
}

/// The status [`CliProcess::shutdown_unless`] gives a boxed CLI whose box reported before it
/// exited: the CLI's own is in the box's report.
pub const BOX_REPORTED: &str = "ended (box reported)";

/// The most paths [`inherit_paths`] passes (the pre-exec code copies them into a fixed array).
const MAX_INHERITED: usize = 16;

/// Opens each path of `dirs` (`O_PATH`, close-on-exec) and arranges for the child to find it on
/// its number; returns the open files, which must live until the child is spawned.
fn inherit_paths(
    command: &mut tokio::process::Command,
    dirs: &[(PathBuf, i32)],
) -> std::io::Result<Vec<std::fs::File>> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    if dirs.is_empty() {
        return Ok(Vec::new());
    }
    let files = dirs
        .iter()
        .map(|(path, _)| {
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_PATH)
                .open(path)
                .map_err(|err| std::io::Error::new(err.kind(), format!("{}: {err}", path.display())))
        })
        .collect::<std::io::Result<Vec<_>>>()?;
    if dirs.len() > MAX_INHERITED {
        return Err(std::io::Error::other(format!(
            "at most {MAX_INHERITED} inherited paths, not {}",
            dirs.len()
        )));
    }
    let pairs: Vec<(i32, i32)> =
        files.iter().zip(dirs).map(|(file, (_, to))| (file.as_raw_fd(), *to)).collect();
    // SAFETY: the closure runs in the child between fork and exec and only calls fcntl and dup2,
    // which are async-signal-safe; it allocates nothing (`pairs` is moved in, read only).
    unsafe {
        command.pre_exec(move || {
            // First out of the way of every target number, then onto the targets (dup2 clears
            // close-on-exec on the new number).
            let mut moved = [(-1, -1); MAX_INHERITED];
            for (slot, (from, to)) in moved.iter_mut().zip(&pairs) {
                let high = libc::fcntl(*from, libc::F_DUPFD_CLOEXEC, 100);
                if high < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                *slot = (high, *to);
            }
            for (high, to) in moved.iter().take(pairs.len()) {
                if libc::dup2(*high, *to) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    Ok(files)
}

/// Spawns `command` so that the child gets `SIGKILL` when this process dies, even by `SIGKILL`
/// (Linux: `PR_SET_PDEATHSIG`; elsewhere a plain spawn).
///
/// Linux sends the parent-death signal when the *thread* that forked the child exits, not the
/// process, and tokio's threads come and go (a worker thread that ran `block_in_place` ends up in
/// the blocking pool, whose idle threads exit). So every child is forked by one spawner thread
/// that lives as long as the process. The child also checks, after setting the signal, that its
/// parent is still this process: a Worker that died in between leaves no orphan.
#[cfg(target_os = "linux")]
pub fn spawn_dying_with_this_process(mut command: tokio::process::Command) -> std::io::Result<Child> {
    use std::sync::OnceLock;
    use std::sync::mpsc as std_mpsc;

    type Reply = std_mpsc::SyncSender<std::io::Result<Child>>;
    type Job = (tokio::process::Command, tokio::runtime::Handle, Reply);
    static SPAWNER: OnceLock<std_mpsc::Sender<Job>> = OnceLock::new();

    let parent = libc::pid_t::try_from(std::process::id()).unwrap_or(0);
    // SAFETY: the closure runs in the child between fork and exec and only makes
    // async-signal-safe calls (prctl, getppid, _exit); it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                libc::_exit(111);
            }
            Ok(())
        });
    }
    let runtime = tokio::runtime::Handle::try_current().map_err(std::io::Error::other)?;
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = std_mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("tollgate-cli-spawner".into())
            .spawn(move || {
                // Never returns while the process lives: `SPAWNER` keeps the sender.
                for (mut command, runtime, reply) in rx {
                    let _entered = runtime.enter();
                    let _ = reply.send(command.spawn());
                }
            })
            .expect("the CLI spawner thread starts");
        tx
    });
    let (reply, answer) = std_mpsc::sync_channel(1);
    spawner
        .send((command, runtime, reply))
        .map_err(|_| std::io::Error::other("the CLI spawner thread is gone"))?;
    answer.recv().map_err(|_| std::io::Error::other("the CLI spawner thread is gone"))?
}

/// Spawns `command` (elsewhere than Linux there is no parent-death signal: a plain spawn).
#[cfg(not(target_os = "linux"))]
pub fn spawn_dying_with_this_process(mut command: tokio::process::Command) -> std::io::Result<Child> {
    command.spawn()
}

/// Sends `SIGKILL` to process group `pgid`. A group that is already gone is not an error.
pub fn kill_process_group(pgid: u32) {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else { return };
    if pgid <= 1 {
        return;
    }
    // SAFETY: kill(2) has no memory effects; a negative pid addresses the process group.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
}

fn missing(pipe: &str) -> std::io::Error {
    std::io::Error::other(format!("the child's {pipe} was not piped"))
}

async fn read_lines(stdout: ChildStdout, max: usize, tx: mpsc::Sender<LineEvent>) {
    let mut reader = BufReader::with_capacity(64 * 1024, stdout);
    let mut line: Vec<u8> = Vec::new();
    loop {
        let buf = match reader.fill_buf().await {
            Ok(buf) => buf,
            Err(err) => {
                let _ = tx.send(LineEvent::Error(err)).await;
                return;
            }
        };
        if buf.is_empty() {
            if !line.is_empty() {
                let _ = tx.send(LineEvent::Line(String::from_utf8_lossy(&line).into_owned())).await;
            }
            let _ = tx.send(LineEvent::Eof).await;
            return;
        }
        let (take, complete) = match buf.iter().position(|&b| b == b'\n') {
            Some(at) => (at, true),
            None => (buf.len(), false),
        };
        if line.len() + take > max {
            let _ = tx.send(LineEvent::TooLong).await;
            return;
        }
        line.extend_from_slice(&buf[..take]);
        reader.consume(if complete { take + 1 } else { take });
        if complete {
            let text = String::from_utf8_lossy(&line).into_owned();
            line.clear();
            if tx.send(LineEvent::Line(text)).await.is_err() {
                return;
            }
        }
    }
}

async fn drain_stderr(mut stderr: ChildStderr, tail: Arc<Mutex<VecDeque<u8>>>, pid: u32) {
    let mut buf = vec![0u8; 8 * 1024];
    loop {
        match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                tracing::debug!(pid, stderr = %String::from_utf8_lossy(&buf[..n]).trim_end(), "claude stderr");
                let mut tail = tail.lock().unwrap_or_else(|p| p.into_inner());
                tail.extend(&buf[..n]);
                let excess = tail.len().saturating_sub(STDERR_TAIL_BYTES);
                tail.drain(..excess);
            }
        }
    }
}

/// The host's variables a CLI may inherit: where programs are (`PATH`), the locale (`LANG`,
/// `LANGUAGE`, `LC_*`), `TZ`, `TERM`, and the outbound proxy settings (`HTTPS_PROXY`, `HTTP_PROXY`,
/// `ALL_PROXY`, `NO_PROXY`, either case; docs/PROTOCOL.md, "Launch"). Nothing else: no credentials, no
/// `TOLLGATE_*`, no `ANTHROPIC_*` or `CLAUDE*` settings (the segment sets its own).
pub fn inherited_allowed_variables() -> Vec<(OsString, OsString)> {
    std::env::vars_os().filter(|(name, _)| name.to_str().is_some_and(allowed_variable)).collect()
}

/// The part of [`inherited_allowed_variables`] that holds inside a box: the locale, `TZ` and
/// `TERM`, not `PATH` or the proxy variables (a box has its own).
pub fn inherited_locale_variables() -> Vec<(OsString, OsString)> {
    inherited_allowed_variables()
        .into_iter()
        .filter(|(name, _)| name.to_str().is_some_and(|n| LOCALE.contains(&n) || n.starts_with("LC_")))
        .collect()
}

/// The locale, time zone and terminal variables a CLI may inherit.
const LOCALE: &[&str] = &["LANG", "LANGUAGE", "TZ", "TERM"];

/// Whether `name` is on the allow-list of [`inherited_allowed_variables`].
pub fn allowed_variable(name: &str) -> bool {
    const PROXIES: &[&str] = &["HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY"];
    name == "PATH"
        || LOCALE.contains(&name)
        || name.starts_with("LC_")
        || PROXIES.iter().any(|proxy| name == *proxy || name == proxy.to_ascii_lowercase())
}

/// Names of inherited variables a segment must not see: the developer's or Worker's Claude and
/// Anthropic settings (docs/PROTOCOL.md, "Launch"), which the segment sets itself.
pub fn inherited_claude_variables() -> Vec<OsString> {
    std::env::vars_os()
        .map(|(name, _)| name)
        .filter(|name| {
            let upper = name.to_string_lossy().to_ascii_uppercase();
            upper.starts_with("CLAUDE") || upper.starts_with("ANTHROPIC")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sleeper(seconds: &str) -> Launch {
        Launch {
            program: PathBuf::from("/bin/sleep"),
            args: vec![seconds.into()],
            cwd: PathBuf::from("/"),
            env_remove: Vec::new(),
            env: Vec::new(),
            max_line_bytes: 1024,
            user: None,
            inherit_paths: Vec::new(),
        }
    }

    /// A pipe's ends: what `BoxDir::ended_signal` gives (a FIFO there; the same to a reader).
    fn signal() -> (std::fs::File, std::fs::File) {
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills two valid descriptors on success.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) }, 0);
        use std::os::fd::FromRawFd;
        // SAFETY: both descriptors are new and owned by nothing else.
        unsafe { (std::fs::File::from_raw_fd(fds[0]), std::fs::File::from_raw_fd(fds[1])) }
    }

    #[tokio::test]
    async fn a_box_that_has_reported_is_not_waited_for() {
        use std::io::Write;
        let mut process = CliProcess::spawn(&sleeper("30")).unwrap();
        let (read, mut write) = signal();
        write.write_all(b"1").unwrap();
        let waited = tokio::time::timeout(
            Duration::from_secs(20),
            process.shutdown_unless(Duration::from_secs(60), Some(read)),
        )
        .await;
        let (status, _) = waited.expect("the signal ends the wait, not the process's exit or the grace");
        assert_eq!(status, BOX_REPORTED);
    }

    #[tokio::test]
    async fn without_the_signal_the_exit_is_waited_for_and_its_status_kept() {
        let mut process = CliProcess::spawn(&sleeper("0.2")).unwrap();
        let (read, _write) = signal();
        let (status, _) = process.shutdown_unless(Duration::from_secs(60), Some(read)).await;
        assert_eq!(status, "exit status: 0");
        let mut process = CliProcess::spawn(&sleeper("0.2")).unwrap();
        let (status, _) = process.shutdown_unless(Duration::from_secs(60), None).await;
        assert_eq!(status, "exit status: 0");
    }

    #[test]
    fn only_the_allow_list_of_variables_is_inherited() {
        for name in
            ["PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM", "HTTPS_PROXY", "no_proxy", "http_proxy"]
        {
            assert!(allowed_variable(name), "{name}");
        }
        for name in [
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_AUTH_TOKEN",
            "CLAUDE_CODE_OAUTH_TOKEN",
            "TOLLGATE_TOKEN",
            "DATABASE_URL",
            "AWS_SECRET_ACCESS_KEY",
            "HOME",
            "Https_Proxy",
            "PATHX",
        ] {
            assert!(!allowed_variable(name), "{name}");
        }
    }
}
