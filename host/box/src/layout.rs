//! A box's directory on the host, beside the segment's other scratch files, the `/etc` its
//! Worker's boxes share, and the plan of one box.
//!
//! ```text
//! <temp>/tollgate-box-etc-<pid>-<n>/   0755, the Worker's; every box's /etc, bound read-only
//!   passwd, group             made-up: root, agent (1000), nobody
//!   claude-code/managed-settings.json   the CLI's managed settings (see managed_settings)
//!   resolv.conf, hosts, …     copies of the host's small files (ETC_FILES)
//!   localtime                 the host's link (or a copy of its file)
//!   ssl/, alternatives/, …    empty: the host's folders (ETC_FOLDERS) are bound over them
//! <root>/                     0700, the Worker's (a root Worker's: its boxes' user's)
//!   egress.sock               this box's own egress socket, when the Worker has an egress proxy
//!   box/                      the box user's; the init's file descriptor 3
//!     config-in/              copied into CLAUDE_CONFIG_DIR before the CLI reads its first line
//!     out/                    the workspace, copied out by the init after the CLI exited
//!     report.json             the init's BoxReport
//!     ended                   a FIFO: the init writes one byte to it once report.json is final
//! ```
//!
//! Nothing of it is mounted writable into the box: the init reaches `box/` through a file
//! descriptor it keeps from the agent's processes (close-on-exec, the init not dumpable).
//! Read [`BoxDir`] and [`BoxPlan`].
//!
//! The `/etc` folder is made once per [`BoxConfig`], when its first box is made, and removed when
//! the last box and the configuration are gone ([`SharedEtc`]); it holds nothing of a box's own,
//! and making and removing its two dozen entries with every box cost each segment a few
//! milliseconds (more on a busy disk). The host's small files are copied then: a change to the
//! host's resolver or `hosts` file reaches boxes made after the Worker restarts.

use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::config::{BoxConfig, SocketServerGuard};
use crate::report::BoxReport;

/// Where a box's CLI works.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BoxWorkspace {
    /// A `tmpfs` at `/workspace`, filled from this host folder before the CLI starts (`None`: it
    /// starts empty, as a parked spare's does) and copied back out after it exits.
    Copied(Option<PathBuf>),
    /// A host folder the agent's options name, bound read-write at its own path (no size cap).
    Bound(PathBuf),
}

impl BoxWorkspace {
    /// The CLI's working directory inside the box.
    pub fn cli_cwd(&self) -> PathBuf {
        match self {
            BoxWorkspace::Copied(_) => PathBuf::from(crate::paths::WORKSPACE),
            BoxWorkspace::Bound(path) => path.clone(),
        }
    }
}

/// One box: everything [`crate::bwrap::command_line`] needs.
#[derive(Debug)]
pub struct BoxPlan<'a> {
    /// The Worker's settings.
    pub config: &'a BoxConfig,
    /// The box's host directory.
    pub dir: &'a BoxDir,
    /// The CLI (its folder is bound read-only).
    pub program: &'a Path,
    /// Its arguments.
    pub args: &'a [OsString],
    /// Where it works.
    pub workspace: &'a BoxWorkspace,
    /// Files for the CLI's config folder are written after the box starts (a CLI started ahead of
    /// its segment): the init copies them in before the CLI reads its first input, passing stdin
    /// through itself; otherwise it copies them at once and the CLI reads stdin directly.
    pub late_config: bool,
}

/// A box's host directory (see the module docs). The caller owns `root` and removes it.
#[derive(Debug)]
pub struct BoxDir {
    root: PathBuf,
    owner: Option<(u32, u32)>,
    egress: Option<SocketServerGuard>,
    /// The box's `/etc`, shared with the other boxes of its configuration.
    etc: Arc<SharedEtc>,
    /// `box/ended`, open for reading and writing from the start (so the init's write always has a
    /// reader, and the host's read never sees an end of file).
    ended: fs::File,
}

impl BoxDir {
    /// Makes the layout under `root` (which exists and is the Worker's) for boxes of `config`,
    /// naming the box `name` to its egress proxy. `cli_reads_settings`: whether the CLI in it
    /// is told to read any settings file or load anything from a folder the agent can write
    /// (see [`BoxConfig::cli_settings_locked`]); its `/etc` then holds the managed settings.
    ///
    /// # Errors
    ///
    /// A folder, file or socket cannot be made, or given to the box's user.
    pub fn create(
        root: &Path,
        config: &BoxConfig,
        name: &str,
        cli_reads_settings: bool,
    ) -> io::Result<BoxDir> {
        let owner = config.user.owner();
        // Private (0700): the Worker's, or for a root Worker its boxes' user's, as `bwrap` runs as
        // that user and opens what it binds from here by path.
        fs::set_permissions(root, fs::Permissions::from_mode(0o700))?;
        give(root, owner)?;
        let etc = config.etc.get(config.cli_settings_locked && cli_reads_settings)?;
        let inner = root.join("box");
        fs::DirBuilder::new().mode(0o700).create(&inner)?;
        fs::DirBuilder::new().mode(0o700).create(inner.join("config-in"))?;
        give(&inner, owner)?;
        give(&inner.join("config-in"), owner)?;
        let ended = make_fifo(&inner.join(crate::paths::ENDED_FIFO))?;
        give(&inner.join(crate::paths::ENDED_FIFO), owner)?;
        let mut dir = BoxDir { root: root.to_path_buf(), owner, egress: None, etc, ended };
        if let Some((_, server)) = &config.egress {
            let socket = dir.egress_socket();
            let listener = UnixListener::bind(&socket)?;
            fs::set_permissions(&socket, fs::Permissions::from_mode(0o600))?;
            give(&socket, owner)?;
            dir.egress = Some(server.serve(listener, name)?);
        }
        Ok(dir)
    }

    /// The host directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `box/`: the init's file descriptor 3.
    pub fn inner(&self) -> PathBuf {
        self.root.join("box")
    }

    /// `box/config-in/`: files for `CLAUDE_CONFIG_DIR` (a resume's transcript), copied in before
    /// the CLI reads its first line.
    pub fn config_in(&self) -> PathBuf {
        self.inner().join("config-in")
    }

    /// The box's `/etc` ([`SharedEtc`]).
    pub fn etc_root(&self) -> PathBuf {
        self.etc.dir.clone()
    }

    /// `etc/<file>`.
    pub fn etc(&self, file: &str) -> PathBuf {
        self.etc_root().join(file)
    }

    /// The host's folders of `/etc` (of [`ETC_FOLDERS`]) the box binds over their mount points in
    /// its own `/etc`: those the host had when the folder was made.
    pub fn etc_folders(&self) -> &[&'static str] {
        &self.etc.folders
    }

    /// This box's egress socket (bound when the Worker has an egress proxy).
    pub fn egress_socket(&self) -> PathBuf {
        self.root.join("egress.sock")
    }

    /// Gives what the host wrote under `box/config-in` to the box's user (a root Worker's files
    /// are root's).
    ///
    /// # Errors
    ///
    /// An entry cannot be given.
    pub fn give_config_in(&self) -> io::Result<()> {
        give_tree(&self.config_in(), self.owner)
    }

    /// A new handle on `box/ended`, readable (one byte) once the init has written its final report:
    /// from then on nothing of the box runs but its own teardown, which the host need not wait
    /// for. Open for writing too, so a read waits rather than ends while nothing has been written.
    ///
    /// # Errors
    ///
    /// The handle cannot be duplicated.
    pub fn ended_signal(&self) -> io::Result<fs::File> {
        self.ended.try_clone()
    }

    /// The init's report, once the box has ended (`None` when it wrote none: it never ran, or
    /// was killed).
    pub fn report(&self) -> Option<BoxReport> {
        let text = fs::read_to_string(self.inner().join("report.json")).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Makes what the init copied out of the box (`box/out`) the content of `workspace`, in place
    /// of what was there. Does nothing (and returns `false`) when the init copied nothing out.
    ///
    /// # Errors
    ///
    /// The swap failed; `workspace` then keeps its old content, or the new one when only the
    /// removal of the old one failed.
    pub fn adopt_workspace(&self, workspace: &Path, report: &BoxReport) -> io::Result<bool> {
        let out = self.inner().join("out");
        if !report.copied_out || !out.is_dir() {
            return Ok(false);
        }
        let parent = workspace.parent().unwrap_or(Path::new("/"));
        let name = workspace.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let (staged, old) = (
            parent.join(format!(".{name}.new-{}", std::process::id())),
            parent.join(format!(".{name}.old-{}", std::process::id())),
        );
        for leftover in [&staged, &old] {
            let _ = fs::remove_dir_all(leftover);
        }
        let mode = fs::metadata(workspace).map(|m| m.permissions().mode() & 0o7777).unwrap_or(0o700);
        fs::set_permissions(&out, fs::Permissions::from_mode(mode))?;
        // Beside the workspace first, so the swap below is two renames on one file system.
        match fs::rename(&out, &staged) {
            Ok(()) => {}
            Err(err) if err.raw_os_error() == Some(libc::EXDEV) => {
                // What the init copied out is already filtered: copied over as it is.
                crate::copy::copy_tree(&out, &staged, crate::copy::Direction::IntoBox)
                    .map_err(io::Error::other)?;
            }
            Err(err) => return Err(err),
        }
        if workspace.exists() {
            fs::rename(workspace, &old)?;
        }
        if let Err(err) = fs::rename(&staged, workspace) {
            let _ = fs::rename(&old, workspace);
            return Err(err);
        }
        match fs::remove_dir_all(&old) {
            Err(err) if err.kind() != io::ErrorKind::NotFound => return Err(err),
            _ => {}
        }
        Ok(true)
    }
}

/// How the name of a [`SharedEtc`] folder starts (in the system temp folder); the Worker's pid
/// and a number follow. A folder a killed Worker left is removed by the next one's sweep of its
/// stale scratch folders.
pub const SHARED_ETC_PREFIX: &str = "tollgate-box-etc-";

/// The `/etc` every box of one [`BoxConfig`] binds read-only: made by the first box, removed
/// when dropped (the configuration and every box that uses it hold it). World-readable (`0755`,
/// files `0644`): `bwrap` opens it as the box's user, and it holds only made-up users, the
/// managed settings and copies of files every local user can read.
#[derive(Debug)]
pub struct SharedEtc {
    dir: PathBuf,
    /// The host's folders of `/etc` bound over their mount points in it.
    folders: Vec<&'static str>,
}

impl SharedEtc {
    /// Makes one in a fresh folder of the system temp folder.
    fn create(cli_settings_locked: bool) -> io::Result<SharedEtc> {
        let temp = std::env::temp_dir();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        for attempt in 0..16u32 {
            let dir = temp.join(format!("{SHARED_ETC_PREFIX}{}-{:x}", std::process::id(), nanos ^ attempt));
            // Made new (never an existing folder or a link someone put there), or another name.
            match new_dir(&dir) {
                Ok(()) => {}
                Err(err) if err.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(err) => return Err(err),
            }
            return match fill_etc(Path::new("/etc"), &dir, cli_settings_locked) {
                Ok(folders) => Ok(SharedEtc { dir, folders }),
                Err(err) => {
                    let _ = fs::remove_dir_all(&dir);
                    Err(err)
                }
            };
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("no free {SHARED_ETC_PREFIX}* name in {}", temp.display()),
        ))
    }
}

impl Drop for SharedEtc {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A [`BoxConfig`]'s [`SharedEtc`]s, one without the managed settings and one with them, each
/// made on first use. A clone of the configuration starts without any (it may be changed, and
/// so need others).
#[derive(Debug, Default)]
pub(crate) struct EtcCache(Mutex<[Option<Arc<SharedEtc>>; 2]>);

impl Clone for EtcCache {
    fn clone(&self) -> Self {
        EtcCache::default()
    }
}

impl EtcCache {
    /// The shared `/etc`, with the managed settings or without, made now if there is none yet.
    fn get(&self, cli_settings_locked: bool) -> io::Result<Arc<SharedEtc>> {
        let mut made = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let slot = &mut made[usize::from(cli_settings_locked)];
        match slot {
            Some(etc) => Ok(etc.clone()),
            None => {
                let etc = Arc::new(SharedEtc::create(cli_settings_locked)?);
                *slot = Some(etc.clone());
                Ok(etc)
            }
        }
    }
}

/// The host's `/etc` files a box gets a copy of (where the host has them): the resolver's
/// files, the dynamic linker's cache, the time zone's name, shells' defaults. Not `passwd`,
/// `group` or `shadow`: a box gets made-up ones.
pub const ETC_FILES: &[&str] = &[
    "resolv.conf",
    "hosts",
    "host.conf",
    "nsswitch.conf",
    "gai.conf",
    "services",
    "protocols",
    "timezone",
    "ld.so.cache",
    "ld.so.conf",
    "mime.types",
    "bash.bashrc",
    "profile",
    "inputrc",
    "gitconfig",
    "ca-certificates.conf",
];

/// The host's `/etc` folders a box sees, bound read-only: certificates, the linker's
/// configuration, `alternatives` (Debian's links of `awk`, `editor`, …).
pub const ETC_FOLDERS: &[&str] =
    &["ssl", "ca-certificates", "pki", "crypto-policies", "ld.so.conf.d", "alternatives"];

/// A new folder at `path` (an existing one is an error of kind `AlreadyExists`), `0755` whatever
/// the umask.
fn new_dir(path: &Path) -> io::Result<()> {
    fs::DirBuilder::new().mode(0o755).create(path)?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o755))
}

/// Fills `to`, a new folder, with a box's `/etc` made from the host's `from` (see the module
/// docs), with the CLI's managed settings when `cli_settings_locked`, and returns the folders of
/// [`ETC_FOLDERS`] `from` has, for which it made empty mount points. Everything in it is
/// world-readable, whatever the umask.
///
/// `localtime` stays a link where the host's is one: a copied file's zone has no name, and the
/// CLI's runtime then reads every file of `/usr/share/zoneinfo` to find it (~5,000 files, 50–70
/// ms of each segment's start).
fn fill_etc(from: &Path, to: &Path, cli_settings_locked: bool) -> io::Result<Vec<&'static str>> {
    let file = |name: &str, text: &[u8]| -> io::Result<()> {
        fs::write(to.join(name), text)?;
        fs::set_permissions(to.join(name), fs::Permissions::from_mode(0o644))
    };
    file("passwd", PASSWD.as_bytes())?;
    file("group", GROUP.as_bytes())?;
    if cli_settings_locked {
        new_dir(&to.join("claude-code"))?;
        file("claude-code/managed-settings.json", managed_settings().as_bytes())?;
    }
    for name in ETC_FILES {
        // A link (resolv.conf often is) is followed: the box gets what it points at.
        match fs::read(from.join(name)) {
            Ok(text) => file(name, &text)?,
            Err(err) if matches!(err.kind(), io::ErrorKind::NotFound | io::ErrorKind::IsADirectory) => {}
            Err(err) => {
                return Err(io::Error::new(err.kind(), format!("{}: {err}", from.join(name).display())));
            }
        }
    }
    match fs::read_link(from.join("localtime")) {
        Ok(zone) => std::os::unix::fs::symlink(zone, to.join("localtime"))?,
        Err(_) => {
            if let Ok(text) = fs::read(from.join("localtime")) {
                file("localtime", &text)?;
            }
        }
    }
    let mut folders = Vec::new();
    for name in ETC_FOLDERS {
        if from.join(name).is_dir() {
            new_dir(&to.join(name))?;
            folders.push(*name);
        }
    }
    Ok(folders)
}

/// Makes a FIFO at `path` (0600) and opens it for reading and writing, non-blocking and
/// close-on-exec.
fn make_fifo(path: &Path) -> io::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let name = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).map_err(io::Error::other)?;
    // SAFETY: a NUL-terminated path; mkfifo has no memory effects.
    if unsafe { libc::mkfifo(name.as_ptr(), 0o600) } != 0 {
        return Err(io::Error::last_os_error());
    }
    fs::OpenOptions::new().read(true).write(true).custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC).open(path)
}

/// Gives `path` to `owner` (nothing to do without one).
fn give(path: &Path, owner: Option<(u32, u32)>) -> io::Result<()> {
    match owner {
        Some((uid, gid)) => std::os::unix::fs::lchown(path, Some(uid), Some(gid)),
        None => Ok(()),
    }
}

/// Gives `dir` and everything under it to `owner`.
pub fn give_tree(dir: &Path, owner: Option<(u32, u32)>) -> io::Result<()> {
    if owner.is_none() {
        return Ok(());
    }
    give(dir, owner)?;
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if fs::symlink_metadata(&path)?.is_dir() {
            give_tree(&path, owner)?;
        } else {
            give(&path, owner)?;
        }
    }
    Ok(())
}

/// `/etc/passwd` inside: root, the agent, nobody. Nothing of the host's users.
const PASSWD: &str = "root:x:0:0:root:/root:/usr/sbin/nologin\n\
agent:x:1000:1000:agent:/home/agent:/bin/bash\n\
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";

/// `/etc/group` inside.
const GROUP: &str = "root:x:0:\nagent:x:1000:\nnogroup:x:65534:\n";

/// The CLI's managed settings inside every box (`/etc/claude-code/managed-settings.json`, which
/// outranks every settings file): only the host's hooks (which come in `initialize`), permission
/// rules and MCP servers count, whatever a settings file in the workspace or `HOME` says; no
/// plugins or marketplaces are loaded, and bypass mode is off.
///
/// `prependPlugins` is empty on purpose. On a machine with managed settings the CLI seats a
/// built-in plugin of its own (`cc-plugin-sec-default`) outermost, unless this list is set: it
/// keeps the organization's hooks, settings and tool policy out of reach of the plugins a person
/// installs. In a box no plugin can be installed or enabled (no marketplace is known, only
/// managed hooks run, the CLI reads no settings file the agent can write, and `HOME` starts
/// empty in every box), so it would guard nothing, and loading it costs each CLI's start about
/// 800 page faults and 20–35 ms of CPU time (the segment bench's box rows).
pub fn managed_settings() -> String {
    serde_json::json!({
        "allowManagedHooksOnly": true,
        "allowManagedPermissionRulesOnly": true,
        "enableAllProjectMcpServers": false,
        "enabledMcpjsonServers": [],
        "strictKnownMarketplaces": [],
        "prependPlugins": [],
        "permissions": { "disableBypassPermissionsMode": "disable" },
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BoxUser;

    fn config() -> BoxConfig {
        BoxConfig::new("/usr/bin/bwrap", "/init", BoxUser::Namespace)
    }

    #[test]
    fn a_box_directory_has_its_files_and_a_private_inner_folder() {
        let root = tempfile::tempdir().unwrap();
        let dir = BoxDir::create(root.path(), &config(), "b-1", true).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(root.path()), 0o700);
        assert_eq!(mode(&dir.inner()), 0o700);
        assert!(fs::read_to_string(dir.etc("passwd")).unwrap().contains("agent:x:1000:1000"));
        assert!(!fs::read_to_string(dir.etc("passwd")).unwrap().contains(":0:0:root:/root:/bin/bash"));
        let settings: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(dir.etc("claude-code/managed-settings.json")).unwrap())
                .unwrap();
        assert_eq!(settings["allowManagedHooksOnly"], true);
        assert_eq!(settings["prependPlugins"], serde_json::json!([]), "no built-in guard seated: {settings}");
        assert!(dir.config_in().is_dir());
        assert!(!dir.egress_socket().exists(), "no egress proxy, no socket");
        assert_eq!(dir.report(), None);

        // Unlocked (only to measure the lock's cost): no managed settings, the rest the same.
        let unlocked = BoxConfig { cli_settings_locked: false, ..config() };
        let root = tempfile::tempdir().unwrap();
        let dir = BoxDir::create(root.path(), &unlocked, "b-2", true).unwrap();
        assert!(!dir.etc("claude-code").exists());
        assert!(fs::read_to_string(dir.etc("passwd")).unwrap().contains("agent:x:1000:1000"));
    }

    #[test]
    fn only_a_cli_that_reads_settings_files_gets_the_managed_settings_each_kind_sharing_its_etc() {
        let config = config();
        let roots = [(); 4].map(|()| tempfile::tempdir().unwrap());
        let locked = BoxDir::create(roots[0].path(), &config, "a", true).unwrap();
        let plain = BoxDir::create(roots[1].path(), &config, "b", false).unwrap();
        assert!(locked.etc("claude-code/managed-settings.json").is_file());
        assert!(!plain.etc("claude-code").exists(), "no settings file read, no lock needed");
        assert_ne!(locked.etc_root(), plain.etc_root());
        let (locked_2, plain_2) = (
            BoxDir::create(roots[2].path(), &config, "c", true).unwrap(),
            BoxDir::create(roots[3].path(), &config, "d", false).unwrap(),
        );
        assert_eq!(locked_2.etc_root(), locked.etc_root(), "boxes of a kind share one");
        assert_eq!(plain_2.etc_root(), plain.etc_root(), "boxes of a kind share one");
    }

    #[test]
    fn the_boxes_of_a_configuration_share_one_etc_outside_their_folders_until_all_are_gone() {
        let config = config();
        let (root_a, root_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let a = BoxDir::create(root_a.path(), &config, "a", true).unwrap();
        let b = BoxDir::create(root_b.path(), &config, "b", true).unwrap();
        let etc = a.etc_root();
        assert_eq!(b.etc_root(), etc, "one /etc for both");
        assert!(!etc.starts_with(root_a.path()) && !etc.starts_with(root_b.path()), "{}", etc.display());
        let name = etc.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with(&format!("{SHARED_ETC_PREFIX}{}-", std::process::id())), "{name}");
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        for folder in [etc.clone(), etc.join("claude-code")] {
            assert_eq!(mode(&folder), 0o755, "{}: the box's user reads it", folder.display());
        }
        for folder in a.etc_folders() {
            assert_eq!(mode(&etc.join(folder)), 0o755, "{folder}");
        }
        // A clone (it may be changed) makes its own.
        let mut unlocked = config.clone();
        unlocked.cli_settings_locked = false;
        let root_c = tempfile::tempdir().unwrap();
        let c = BoxDir::create(root_c.path(), &unlocked, "c", true).unwrap();
        assert_ne!(c.etc_root(), etc);
        drop(c);
        drop(unlocked);
        drop(a);
        drop(config);
        assert!(etc.is_dir(), "a box still uses it");
        drop(b);
        assert!(!etc.exists(), "removed with the last of them");
    }

    #[test]
    fn a_box_etc_has_copies_of_the_hosts_small_files_a_linked_zone_and_mount_points_only() {
        let host = tempfile::tempdir().unwrap();
        let h = host.path();
        fs::write(h.join("hosts"), "127.0.0.1 localhost\n").unwrap();
        fs::write(h.join("real-resolv.conf"), "nameserver 10.0.0.1\n").unwrap();
        std::os::unix::fs::symlink(h.join("real-resolv.conf"), h.join("resolv.conf")).unwrap();
        std::os::unix::fs::symlink("/usr/share/zoneinfo/Europe/Paris", h.join("localtime")).unwrap();
        fs::write(h.join("shadow"), "root:secret").unwrap();
        fs::write(
            h.join("passwd"),
            "root:x:0:0:root:/root:/bin/bash\nalice:x:1001:1001::/home/alice:/bin/sh\n",
        )
        .unwrap();
        fs::create_dir_all(h.join("ssl/certs")).unwrap();
        fs::write(h.join("ssl/certs/ca.pem"), "cert").unwrap();
        fs::create_dir(h.join("secrets")).unwrap();
        let out = tempfile::tempdir().unwrap();
        let etc = out.path().join("etc");
        new_dir(&etc).unwrap();
        let folders = fill_etc(h, &etc, true).unwrap();

        assert_eq!(folders, ["ssl"]);
        assert_eq!(fs::read_to_string(etc.join("hosts")).unwrap(), "127.0.0.1 localhost\n");
        assert!(
            fs::symlink_metadata(etc.join("resolv.conf")).unwrap().is_file(),
            "the link's target, copied"
        );
        assert_eq!(fs::read_to_string(etc.join("resolv.conf")).unwrap(), "nameserver 10.0.0.1\n");
        assert_eq!(
            fs::read_link(etc.join("localtime")).unwrap(),
            Path::new("/usr/share/zoneinfo/Europe/Paris")
        );
        assert!(
            etc.join("ssl").is_dir() && fs::read_dir(etc.join("ssl")).unwrap().next().is_none(),
            "a mount point"
        );
        for absent in ["shadow", "secrets", "real-resolv.conf", "pki"] {
            assert!(!etc.join(absent).exists(), "{absent}");
        }
        assert!(!fs::read_to_string(etc.join("passwd")).unwrap().contains("alice"), "the users are made up");
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&etc), 0o755);
        assert_eq!(mode(&etc.join("hosts")), 0o644);
    }

    #[test]
    fn the_ended_fifo_is_readable_only_once_the_init_has_written_to_it() {
        use std::io::{Read, Write};
        let root = tempfile::tempdir().unwrap();
        let dir = BoxDir::create(root.path(), &config(), "b-1", true).unwrap();
        let mut signal = dir.ended_signal().unwrap();
        let mut byte = [0u8; 1];
        let nothing = signal.read(&mut byte).unwrap_err();
        assert_eq!(nothing.kind(), io::ErrorKind::WouldBlock, "nothing written: no byte, and no end of file");
        // What the init does, through its own path to the folder.
        let fifo = dir.inner().join(crate::paths::ENDED_FIFO);
        fs::OpenOptions::new().write(true).open(&fifo).unwrap().write_all(b"1").unwrap();
        assert_eq!(signal.read(&mut byte).unwrap(), 1);
        assert_eq!(fs::metadata(&fifo).unwrap().permissions().mode() & 0o777, 0o600);
    }

    #[test]
    fn the_copied_out_workspace_replaces_the_old_one_and_nothing_happens_without_one() {
        let root = tempfile::tempdir().unwrap();
        let dir = BoxDir::create(root.path(), &config(), "b-1", true).unwrap();
        let ws_parent = tempfile::tempdir().unwrap();
        let workspace = ws_parent.path().join("s-1");
        fs::create_dir(&workspace).unwrap();
        fs::write(workspace.join("old.txt"), "old").unwrap();
        let report = BoxReport { copied_out: true, ..BoxReport::default() };
        assert!(!dir.adopt_workspace(&workspace, &report).unwrap(), "no out folder");
        fs::create_dir(dir.inner().join("out")).unwrap();
        fs::write(dir.inner().join("out/new.txt"), "new").unwrap();
        assert!(!dir.adopt_workspace(&workspace, &BoxReport::default()).unwrap(), "not copied out");
        assert!(workspace.join("old.txt").exists());
        assert!(dir.adopt_workspace(&workspace, &report).unwrap());
        assert_eq!(fs::read_to_string(workspace.join("new.txt")).unwrap(), "new");
        assert!(!workspace.join("old.txt").exists());
        let leftovers: Vec<_> =
            fs::read_dir(ws_parent.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(leftovers, [std::ffi::OsString::from("s-1")]);
    }
}
