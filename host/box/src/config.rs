//! What a Worker decides once for all its boxes: the `bwrap` and init programs, the user boxes run
//! as, the limits, the extra read-only paths and the sockets relayed into every box.
//!
//! Read [`BoxConfig`]. [`Limits::default`] lists the defaults; an agent's `[sandbox]` table
//! overrides them per agent.

use std::fmt;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// A box's limits. Each hit ends the segment with a [`crate::LimitHit`] naming it.
///
/// | limit | default | enforced by |
/// | --- | --- | --- |
/// | `memory_mb` | 4096 | `RLIMIT_AS` of every process, and the init's watchdog on the sum of their resident memory |
/// | `tasks` | 512 | `RLIMIT_NPROC` in the box's own user namespace (threads count); the watchdog stops a box that stays at the limit for a second |
/// | `cpu_secs` | 1800 | the watchdog, on the CPU time of all the box's processes together |
/// | `workspace_mb` | 1024 | the size of the `/workspace` `tmpfs` |
/// | `scratch_mb` | 512 | the size of the `HOME` `tmpfs` and of the `/tmp` one, each |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Memory of the box's processes, in MiB.
    pub memory_mb: u64,
    /// Processes and threads at once.
    pub tasks: u64,
    /// CPU time of all the box's processes, in seconds.
    pub cpu_secs: u64,
    /// The workspace's size cap, in MiB.
    pub workspace_mb: u64,
    /// The size cap of `HOME` and of `/tmp`, each, in MiB.
    pub scratch_mb: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { memory_mb: 4096, tasks: 512, cpu_secs: 1800, workspace_mb: 1024, scratch_mb: 512 }
    }
}

impl Limits {
    /// The smallest values a box can work with (the CLI alone needs ~300 MB and ~40 threads).
    pub const MINIMUM: Limits =
        Limits { memory_mb: 512, tasks: 64, cpu_secs: 10, workspace_mb: 1, scratch_mb: 16 };

    /// Checks every limit against [`Limits::MINIMUM`].
    ///
    /// # Errors
    ///
    /// The first limit below its minimum, named as `[sandbox]` names it.
    pub fn check(&self) -> Result<(), String> {
        let min = Limits::MINIMUM;
        for (name, value, least) in [
            ("memory_mb", self.memory_mb, min.memory_mb),
            ("tasks", self.tasks, min.tasks),
            ("cpu_secs", self.cpu_secs, min.cpu_secs),
            ("workspace_mb", self.workspace_mb, min.workspace_mb),
            ("scratch_mb", self.scratch_mb, min.scratch_mb),
        ] {
            if value < least {
                return Err(format!("{name} = {value} is below the least a box can work with ({least})"));
            }
        }
        Ok(())
    }
}

/// Who the box's processes are, seen from the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoxUser {
    /// The Worker's own uid, mapped to `agent` in a user namespace of the box's own (a Worker that
    /// is not root).
    Namespace,
    /// `bwrap` runs as this uid and gid, which a root Worker sets before it starts it; the box's
    /// processes are that user on the host, in a user namespace of their own.
    Uid {
        /// The uid.
        uid: u32,
        /// The gid.
        gid: u32,
    },
}

impl BoxUser {
    /// The user a Worker with effective uid `euid` gives its boxes: [`BoxUser::Namespace`] for a
    /// Worker that is not root, [`BoxUser::Uid`] with `as_root` (default 65534:65534, `nobody`)
    /// for one that is.
    pub fn for_worker(euid: u32, as_root: Option<(u32, u32)>) -> BoxUser {
        if euid != 0 {
            return BoxUser::Namespace;
        }
        let (uid, gid) = as_root.unwrap_or((65534, 65534));
        BoxUser::Uid { uid, gid }
    }

    /// The uid and gid files the box must read or write are given to (`None`: the Worker's own).
    pub fn owner(&self) -> Option<(u32, u32)> {
        match *self {
            BoxUser::Namespace => None,
            BoxUser::Uid { uid, gid } => Some((uid, gid)),
        }
    }
}

/// Something that serves connections on a Unix socket the box reaches: the Worker's egress proxy
/// gets a socket of its own for each box, so it knows which box every connection comes from.
pub trait SocketServer: Send + Sync {
    /// Serves `listener` (bound at a fresh path in the box's host directory) for the box named
    /// `box_name`, until the guard is dropped.
    ///
    /// # Errors
    ///
    /// The listener cannot be served.
    fn serve(&self, listener: UnixListener, box_name: &str) -> std::io::Result<SocketServerGuard>;
}

/// Stops what [`SocketServer::serve`] started when dropped.
pub struct SocketServerGuard(#[allow(dead_code, reason = "held for its Drop")] Box<dyn Send + Sync>);

impl SocketServerGuard {
    /// A guard that drops `inner` (which stops the serving) when it is dropped.
    pub fn new(inner: impl Send + Sync + 'static) -> SocketServerGuard {
        SocketServerGuard(Box::new(inner))
    }
}

impl fmt::Debug for SocketServerGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SocketServerGuard")
    }
}

/// A socket of the host relayed into every box as `127.0.0.1:<port>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relay {
    /// The port inside the box.
    pub port: u16,
    /// The host's Unix socket.
    pub socket: PathBuf,
}

/// What a Worker decides once for all its boxes. See the module docs.
#[derive(Clone)]
pub struct BoxConfig {
    /// The `bwrap` program.
    pub bwrap: PathBuf,
    /// The init program ([`crate::init::main`]), bound read-only into every box.
    pub init: PathBuf,
    /// Who the box's processes are.
    pub user: BoxUser,
    /// The limits.
    pub limits: Limits,
    /// Host paths bound read-only at the same place in every box (tools an agent's commands
    /// need outside `/usr`).
    pub read_only_paths: Vec<PathBuf>,
    /// The model proxy, relayed into every box.
    pub model: Option<Relay>,
    /// The egress proxy: it serves a socket of each box's own, relayed to this port.
    pub egress: Option<(u16, Arc<dyn SocketServer>)>,
    /// Whether the `/etc` of a box whose CLI reads settings files holds the CLI's managed
    /// settings ([`crate::layout::managed_settings`]), which lock what the agent could change in
    /// its next CLI (default). A CLI told to read no settings file (`--setting-sources=`, the
    /// default) and nothing from a folder the agent writes gets none: the flag already keeps
    /// the workspace's `.claude/settings.json`, hooks, plugins and `.mcp.json` out, and the lock
    /// would cost its start ~17 ms of CPU ([`crate::BoxDir::create`]'s `cli_reads_settings`).
    /// Off only to measure what the lock costs the CLI (the segment benchmark): a Worker always
    /// keeps it on.
    pub cli_settings_locked: bool,
    /// The `/etc` its boxes share, made by the first one.
    pub(crate) etc: crate::layout::EtcCache,
}

impl fmt::Debug for BoxConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BoxConfig")
            .field("bwrap", &self.bwrap)
            .field("init", &self.init)
            .field("user", &self.user)
            .field("limits", &self.limits)
            .field("read_only_paths", &self.read_only_paths)
            .field("model", &self.model)
            .field("egress_port", &self.egress.as_ref().map(|(port, _)| port))
            .field("cli_settings_locked", &self.cli_settings_locked)
            .finish()
    }
}

impl BoxConfig {
    /// A configuration with the default limits, no relays, no extra paths and the CLI's settings
    /// locked.
    pub fn new(bwrap: impl Into<PathBuf>, init: impl Into<PathBuf>, user: BoxUser) -> BoxConfig {
        BoxConfig {
            bwrap: bwrap.into(),
            init: init.into(),
            user,
            limits: Limits::default(),
            read_only_paths: Vec::new(),
            model: None,
            egress: None,
            cli_settings_locked: true,
            etc: crate::layout::EtcCache::default(),
        }
    }

    /// The in-box environment variables that point the CLI at the relays: `ANTHROPIC_BASE_URL`
    /// (the model proxy), the proxy variables (the egress proxy, in both cases; loopback left out
    /// with `NO_PROXY`).
    pub fn relay_env(&self) -> Vec<(String, String)> {
        let mut env = Vec::new();
        if let Some(model) = &self.model {
            env.push(("ANTHROPIC_BASE_URL".to_owned(), format!("http://127.0.0.1:{}", model.port)));
        }
        if let Some((port, _)) = &self.egress {
            let proxy = format!("http://127.0.0.1:{port}");
            for name in ["HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "all_proxy"] {
                env.push((name.to_owned(), proxy.clone()));
            }
        }
        for name in ["NO_PROXY", "no_proxy"] {
            env.push((name.to_owned(), "127.0.0.1,localhost,::1".to_owned()));
        }
        env
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_worker_boxes_as_nobody_unless_told_otherwise_and_others_use_a_namespace() {
        assert_eq!(BoxUser::for_worker(1000, Some((5, 5))), BoxUser::Namespace);
        assert_eq!(BoxUser::for_worker(0, None), BoxUser::Uid { uid: 65534, gid: 65534 });
        assert_eq!(BoxUser::for_worker(0, Some((2000, 3000))), BoxUser::Uid { uid: 2000, gid: 3000 });
        assert_eq!(BoxUser::Namespace.owner(), None);
    }

    #[test]
    fn limits_below_what_a_box_needs_are_refused_by_name() {
        assert!(Limits::default().check().is_ok());
        let low = Limits { tasks: 3, ..Limits::default() };
        assert_eq!(low.check().unwrap_err(), "tasks = 3 is below the least a box can work with (64)");
    }

    #[test]
    fn the_relay_environment_points_at_loopback_and_keeps_loopback_off_the_proxy() {
        let mut config = BoxConfig::new("/usr/bin/bwrap", "/init", BoxUser::Namespace);
        config.model = Some(Relay { port: 4100, socket: "/run/m.sock".into() });
        let env = config.relay_env();
        assert!(env.contains(&("ANTHROPIC_BASE_URL".into(), "http://127.0.0.1:4100".into())));
        assert!(env.contains(&("NO_PROXY".into(), "127.0.0.1,localhost,::1".into())));
        assert!(!env.iter().any(|(name, _)| name == "HTTPS_PROXY"), "no egress, no proxy: {env:?}");
    }
}
