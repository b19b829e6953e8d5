//! The `bwrap` command line of one box. Pure: [`command_line`] turns a [`BoxPlan`] and what the
//! host's root looks like ([`HostRoot`]) into the arguments after `bwrap`.
//!
//! ```
//! use std::path::Path;
//! use tollgate_box::bwrap::{HostRoot, command_line};
//! use tollgate_box::{BoxConfig, BoxDir, BoxPlan, BoxUser, BoxWorkspace};
//!
//! let root = tempfile::tempdir().unwrap();
//! let config = BoxConfig::new("/usr/bin/bwrap", "/opt/tollgate/tollgate-box", BoxUser::Namespace);
//! let dir = BoxDir::create(root.path(), &config, "b-1", true).unwrap();
//! let workspace = BoxWorkspace::Copied(None);
//! let plan = BoxPlan {
//!     config: &config,
//!     dir: &dir,
//!     program: Path::new("/opt/claude/claude"),
//!     args: &[],
//!     workspace: &workspace,
//!     late_config: false,
//! };
//! let args = command_line(&plan, &HostRoot::debian());
//! assert!(args.iter().any(|a| a == "--unshare-all"));
//! ```

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::init::{InitConfig, RelayPlan};
use crate::layout::{BoxPlan, BoxWorkspace};
use crate::paths;

/// The top-level folders of the host's root a box mirrors: each either a link (Debian's merged
/// `/usr`: `/bin -> usr/bin`) or a folder bound read-only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRoot {
    entries: Vec<(String, RootEntry)>,
}

/// One top-level folder of the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootEntry {
    /// A link to this target.
    Link(PathBuf),
    /// A folder, bound read-only.
    Folder,
}

/// The top-level folders a CLI and the commands it runs need, besides `/usr`.
const ROOT_FOLDERS: &[&str] = &["bin", "sbin", "lib", "lib64", "lib32", "libx32"];

impl HostRoot {
    /// Reads the host's `/`.
    pub fn read() -> HostRoot {
        let entries = ROOT_FOLDERS
            .iter()
            .filter_map(|name| {
                let path = Path::new("/").join(name);
                let meta = std::fs::symlink_metadata(&path).ok()?;
                let entry = if meta.file_type().is_symlink() {
                    RootEntry::Link(std::fs::read_link(&path).ok()?)
                } else if meta.is_dir() {
                    RootEntry::Folder
                } else {
                    return None;
                };
                Some(((*name).to_owned(), entry))
            })
            .collect();
        HostRoot { entries }
    }

    /// Debian's merged `/usr` (for examples and tests).
    pub fn debian() -> HostRoot {
        let link = |name: &str| (name.to_owned(), RootEntry::Link(PathBuf::from(format!("usr/{name}"))));
        HostRoot { entries: vec![link("bin"), link("sbin"), link("lib"), link("lib64")] }
    }
}

/// The arguments after `bwrap` that run `plan`'s CLI in its box, under its init.
pub fn command_line(plan: &BoxPlan<'_>, host: &HostRoot) -> Vec<OsString> {
    let config = plan.config;
    let limits = config.limits;
    let mut args = Args::default();
    args.flags(&["--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--as-pid-1"]);
    args.flags(&["--disable-userns", "--hostname", "tollgate-box"]);
    args.flags(&["--uid", &paths::UID.to_string(), "--gid", &paths::UID.to_string()]);

    args.bind("--ro-bind", "/usr", "/usr");
    for (name, entry) in &host.entries {
        let at = format!("/{name}");
        match entry {
            RootEntry::Link(target) => args.pair("--symlink", target.as_os_str(), &at),
            RootEntry::Folder => args.bind("--ro-bind-try", &at, &at),
        }
    }
    // The box's own `/etc`, made with its folder (made-up users, copies of the host's small
    // files, the managed settings), in one bind; then the host's folders of it over their mount
    // points there. One bind instead of one per file: a third of `bwrap`'s own time.
    args.bind("--ro-bind", plan.dir.etc_root(), "/etc");
    for name in plan.dir.etc_folders() {
        let at = format!("/etc/{name}");
        args.bind("--ro-bind-try", &at, &at);
    }

    args.flags(&["--proc", "/proc", "--dev", "/dev"]);
    args.tmpfs("/dev/shm", limits.scratch_mb);
    args.tmpfs(paths::HOME, limits.scratch_mb);
    args.tmpfs(paths::TMP, limits.scratch_mb);
    match plan.workspace {
        BoxWorkspace::Copied(_) => args.tmpfs(paths::WORKSPACE, limits.workspace_mb),
        BoxWorkspace::Bound(path) => args.bind("--bind", path, path),
    }
    args.0.extend(["--chdir".into(), plan.workspace.cli_cwd().into_os_string()]);

    // The CLI's own folder (its install) at a fixed place (the host's layout stays out), the
    // init, the extra paths: read-only.
    let cli_folder = plan.program.parent().unwrap_or(Path::new("/"));
    args.bind("--ro-bind", cli_folder, paths::CLI_FOLDER);
    args.bind("--ro-bind", &config.init, paths::INIT);
    for path in &config.read_only_paths {
        args.bind("--ro-bind", path, path);
    }
    let mut relays = Vec::new();
    if let Some(model) = &config.model {
        args.bind("--bind", &model.socket, paths::MODEL_SOCKET);
        relays.push(RelayPlan { port: model.port, socket: paths::MODEL_SOCKET.into() });
    }
    if let Some((port, _)) = &config.egress {
        args.bind("--bind", plan.dir.egress_socket(), paths::EGRESS_SOCKET);
        relays.push(RelayPlan { port: *port, socket: paths::EGRESS_SOCKET.into() });
    }

    let init = InitConfig {
        limits,
        relays,
        config_dir: paths::CONFIG.into(),
        workspace: matches!(plan.workspace, BoxWorkspace::Copied(_)).then(|| paths::WORKSPACE.into()),
        workspace_from_fd: matches!(plan.workspace, BoxWorkspace::Copied(Some(_))),
        late_config: plan.late_config,
    };
    args.0.push("--".into());
    args.0.push(paths::INIT.into());
    args.0.push(serde_json::to_string(&init).expect("the init's configuration serializes").into());
    args.0.push("--".into());
    let program = Path::new(paths::CLI_FOLDER).join(plan.program.file_name().unwrap_or_default());
    args.0.push(program.into_os_string());
    args.0.extend(plan.args.iter().cloned());
    args.0
}

#[derive(Default)]
struct Args(Vec<OsString>);

impl Args {
    fn flags(&mut self, flags: &[&str]) {
        self.0.extend(flags.iter().map(OsString::from));
    }

    fn pair(&mut self, flag: &str, a: impl Into<OsString>, b: impl Into<OsString>) {
        self.0.extend([flag.into(), a.into(), b.into()]);
    }

    fn bind(&mut self, flag: &str, from: impl AsRef<Path>, to: impl AsRef<Path>) {
        self.pair(flag, from.as_ref().as_os_str(), to.as_ref().as_os_str());
    }

    fn tmpfs(&mut self, at: &str, size_mb: u64) {
        self.flags(&["--size", &(size_mb * 1024 * 1024).to_string(), "--tmpfs", at]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{BoxConfig, BoxUser, Relay};
    use crate::layout::BoxDir;

    fn strings(args: &[OsString]) -> Vec<String> {
        args.iter().map(|a| a.to_string_lossy().into_owned()).collect()
    }

    fn window<'a>(args: &'a [String], flag: &str, first: &str) -> Option<&'a [String]> {
        args.windows(3).find(|w| w[0] == flag && w[1] == first)
    }

    #[test]
    fn a_box_unshares_everything_and_mounts_only_what_a_cli_needs() {
        let root = tempfile::tempdir().unwrap();
        let mut config = BoxConfig::new("/usr/bin/bwrap", "/opt/t/tollgate-box", BoxUser::Namespace);
        config.model = Some(Relay { port: 4100, socket: "/run/t/model.sock".into() });
        config.read_only_paths = vec!["/opt/tools".into()];
        let dir = BoxDir::create(root.path(), &config, "b-1", true).unwrap();
        let workspace = BoxWorkspace::Copied(Some("/var/ws/s-1".into()));
        let cli_args = [OsString::from("--resume=s-1")];
        let plan = BoxPlan {
            config: &config,
            dir: &dir,
            program: Path::new("/opt/claude/bin/claude"),
            args: &cli_args,
            workspace: &workspace,
            late_config: true,
        };
        let args = strings(&command_line(&plan, &HostRoot::debian()));
        for flag in ["--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--as-pid-1"] {
            assert!(args.contains(&flag.to_owned()), "{flag} missing: {args:?}");
        }
        assert!(window(&args, "--ro-bind", "/usr").is_some());
        assert!(window(&args, "--symlink", "usr/lib").is_some_and(|w| w[2] == "/lib"));
        assert!(
            window(&args, "--ro-bind", "/opt/claude/bin").is_some_and(|w| w[2] == paths::CLI_FOLDER),
            "the CLI's folder: {args:?}"
        );
        assert!(window(&args, "--ro-bind", "/opt/t/tollgate-box").is_some_and(|w| w[2] == paths::INIT));
        assert!(window(&args, "--bind", "/run/t/model.sock").is_some_and(|w| w[2] == paths::MODEL_SOCKET));
        assert!(window(&args, "--ro-bind", "/opt/tools").is_some());
        // Nothing of the host is bound writable but the model socket.
        let writable: Vec<&String> = args.windows(2).filter(|w| w[0] == "--bind").map(|w| &w[1]).collect();
        assert_eq!(writable, ["/run/t/model.sock"]);
        // The workspace is a capped tmpfs, not the host folder.
        assert!(!args.iter().any(|a| a.contains("/var/ws")), "{args:?}");
        let at = args.iter().position(|a| a == paths::WORKSPACE).unwrap();
        assert_eq!(args[at - 3..at], ["--size", &(1024u64 * 1024 * 1024).to_string(), "--tmpfs"]);
        // The box's own `/etc` (its content: the layout's tests), and the host's folders of it
        // that exist here over it, read-only.
        assert!(
            window(&args, "--ro-bind", &dir.etc_root().to_string_lossy()).is_some_and(|w| w[2] == "/etc")
        );
        let etc_binds: Vec<&String> = args
            .windows(2)
            .filter(|w| w[0].starts_with("--") && w[1].starts_with("/etc/"))
            .map(|w| &w[1])
            .collect();
        assert_eq!(etc_binds.len(), dir.etc_folders().len(), "{args:?}");
        for folder in dir.etc_folders() {
            assert!(
                window(&args, "--ro-bind-try", &format!("/etc/{folder}")).is_some(),
                "{folder}: {args:?}"
            );
        }
        // The init, its configuration, then the CLI and its arguments.
        let dashes: Vec<usize> =
            args.iter().enumerate().filter(|(_, a)| *a == "--").map(|(i, _)| i).collect();
        assert_eq!(args[dashes[0] + 1], paths::INIT);
        let init: InitConfig = serde_json::from_str(&args[dashes[0] + 2]).unwrap();
        assert!(init.workspace_from_fd && init.late_config);
        assert_eq!(init.relays, [RelayPlan { port: 4100, socket: paths::MODEL_SOCKET.into() }]);
        assert_eq!(args[dashes[1] + 1..], [&format!("{}/claude", paths::CLI_FOLDER), "--resume=s-1"]);
    }

    #[test]
    fn a_named_working_folder_is_bound_writable_at_its_own_path() {
        let root = tempfile::tempdir().unwrap();
        let config = BoxConfig::new("/usr/bin/bwrap", "/init", BoxUser::Namespace);
        let dir = BoxDir::create(root.path(), &config, "b-1", true).unwrap();
        let workspace = BoxWorkspace::Bound("/srv/repo".into());
        let plan = BoxPlan {
            config: &config,
            dir: &dir,
            program: Path::new("/c/claude"),
            args: &[],
            workspace: &workspace,
            late_config: false,
        };
        let args = strings(&command_line(&plan, &HostRoot::debian()));
        assert!(window(&args, "--bind", "/srv/repo").is_some_and(|w| w[2] == "/srv/repo"));
        assert!(args.windows(2).any(|w| w[0] == "--chdir" && w[1] == "/srv/repo"));
        assert!(!args.iter().any(|a| a == paths::WORKSPACE));
    }
}
