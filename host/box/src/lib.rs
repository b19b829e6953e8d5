//! The box an agent's processes run in: every Claude Code CLI a Worker starts (a segment's, a
//! warm one, a parked spare) and everything that CLI starts (`Bash` commands, MCP servers it
//! launches, subagents, background tasks) runs inside a [bubblewrap] sandbox of its own.
//!
//! The gate decides what the agent *asks for*; the box bounds what the agent's processes *can
//! reach*, whatever the model makes them do. Inside a box:
//!
//! | what | inside the box |
//! | --- | --- |
//! | processes | a PID namespace of its own: no process of the Worker, another box or the host is visible or signalable; the box's init is PID 1 and when the CLI exits every process left is killed |
//! | files | a mount namespace: read-only `/usr` (and the `/bin`, `/lib` links), a minimal `/etc` (certificates, resolver, a made-up `passwd`), the pinned CLI install; read-write only size-capped `tmpfs` mounts: `HOME` (with the CLI's config), `/tmp` and the session's workspace at `/workspace` |
//! | user | an unprivileged user in a user namespace of its own (uid 1000 `agent` inside); outside it is the Worker's uid, or the configured one when the Worker is root; no capabilities, `no_new_privs` |
//! | network | a network namespace with only its own loopback: `127.0.0.1:<port>` reaches the Worker's model proxy and, when set, its egress proxy, relayed by the init over Unix sockets; nothing else (not the API, not PostgreSQL, not the host's loopback services, not the internet) |
//! | limits | memory, tasks, CPU time and the `tmpfs` sizes ([`Limits`]); a limit hit ends the segment with that reason |
//!
//! Read [`BoxConfig`] (what a Worker sets once), then [`BoxPlan`] (one box: its host directory and
//! its CLI) and [`bwrap::command_line`] (the `bwrap` argv, pure). The host side makes a box's
//! directory with [`layout::BoxDir`]; [`init`] is the program that runs as PID 1 inside; it writes
//! a [`report::BoxReport`] that the host reads back. [`probe::check`] tells a Worker at start
//! whether boxes can be made here, and how to fix it when not.
//!
//! The session's workspace is not mounted from the host: the init copies it into the box's
//! `/workspace` before the CLI starts and back out into the box's host directory when the CLI has
//! exited (the host then swaps it in, [`layout::BoxDir::adopt_workspace`]), so what the agent
//! writes is bounded by the workspace's size cap and never lands on the host's disk unbounded.
//! Symbolic links that point out of the workspace stay behind ([`copy`]).
//!
//! [bubblewrap]: https://github.com/containers/bubblewrap
//!
//! # Caveats
//!
//! - Boxes need unprivileged user namespaces (`kernel.unprivileged_userns_clone`,
//!   `user.max_user_namespaces`) and `bwrap` 0.8 or later; [`probe::check`] says which is
//!   missing.
//! - The memory limit is enforced per process (`RLIMIT_AS`) and for the whole box by the init's
//!   watchdog, which adds up its processes' resident memory every 100 ms: a burst can overshoot
//!   it for that long. The `tmpfs` mounts have their own caps and are not counted in it.
//! - A workspace is copied in and out on every segment: a large workspace costs that copy.

pub mod bwrap;
pub mod config;
pub mod copy;
pub mod init;
pub mod layout;
pub mod probe;
pub mod report;

pub use config::{BoxConfig, BoxUser, Limits, SocketServer, SocketServerGuard};
pub use layout::{BoxDir, BoxPlan, BoxWorkspace};
pub use report::{BoxReport, BoxTimings, CliUsage, LimitHit, monotonic_ns};

/// Where things are inside every box.
pub mod paths {
    /// The init program (bound read-only from the host).
    pub const INIT: &str = "/run/tollgate/init";
    /// The CLI's folder (its install, bound read-only from the host).
    pub const CLI_FOLDER: &str = "/opt/claude";
    /// The model proxy's Unix socket, relayed to `127.0.0.1:<model port>`.
    pub const MODEL_SOCKET: &str = "/run/tollgate/model.sock";
    /// The egress proxy's Unix socket, relayed to `127.0.0.1:<egress port>`.
    pub const EGRESS_SOCKET: &str = "/run/tollgate/egress.sock";
    /// `HOME` (a `tmpfs`).
    pub const HOME: &str = "/home/agent";
    /// `CLAUDE_CONFIG_DIR`, inside `HOME`.
    pub const CONFIG: &str = "/home/agent/.claude";
    /// `TMPDIR` (a `tmpfs`).
    pub const TMP: &str = "/tmp";
    /// The session's workspace (a `tmpfs`): the CLI's working directory.
    pub const WORKSPACE: &str = "/workspace";
    /// The user inside.
    pub const USER: &str = "agent";
    /// Its uid and gid inside.
    pub const UID: u32 = 1000;
    /// `PATH` inside.
    pub const PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin";
    /// The file descriptor the init gets its host directory on.
    pub const HOST_DIR_FD: i32 = 3;
    /// The file descriptor the init reads the session's workspace from, when it has one.
    pub const WORKSPACE_FD: i32 = 4;
    /// The FIFO in the box's host directory the init writes one byte to once its report is
    /// final ([`crate::layout::BoxDir::ended_signal`]).
    pub const ENDED_FIFO: &str = "ended";
}
