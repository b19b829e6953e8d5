//! An unlocked agent's `tools/` as it is now, one component at a time: [`LiveTools`].
//!
//! One broken file is one broken component. At each look ([`LiveTools::load`], once per segment
//! attempt and tool step):
//!
//! - **Which files count.** A file whose name ends in `.wasm` and does not start with `.`. Any
//!   other name is a file still being written: a writer writes `.<name>.wasm.tmp` (or any name
//!   starting with `.`) and renames it into place, as `tollgate build` does.
//! - **When a file is read.** Once it is stable ([`readiness`]): its [`Stamp`] (length,
//!   modification time, inode, and those of its `<name>.toml`) is the one seen at the last look,
//!   or it was last modified at least [`SETTLE`] ago. At the first look every file counts. A look
//!   that finds a file changed less than [`SETTLE`] ago waits out the rest of that time once and
//!   looks again, so a build renamed into place a moment ago serves at once, and a file still
//!   changing is left for a later look. A file whose stamp has not changed since it was last read
//!   is not read again.
//! - **What it serves.** Each file loads on its own ([`Sandbox::load_component`]). A file that
//!   does not load is [`Unavailable`] with its reason; if an earlier version of it (same path)
//!   loaded, that last good build keeps serving its tools, else it serves nothing. Every other
//!   component keeps serving. A file removed from `tools/` serves nothing and is forgotten.
//! - **What is logged.** Once per change of a file's reason: a warning when it becomes
//!   unavailable or its reason changes, a line when it loads again or goes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::Sandbox;
use crate::error::LoadError;
use crate::tools::{ComponentSource, LoadedComponent, Manifests, ToolSet, Unavailable};

/// How long after its last modification a file that changed since the last look counts as written.
pub const SETTLE: Duration = Duration::from_secs(1);

/// What a look sees of a component file: its length, modification time and inode, and those of
/// the `<name>.toml` beside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// The `.wasm` file's length, modification time and inode.
    pub file: (u64, Option<SystemTime>, u64),
    /// Its manifest's, if it has one.
    pub manifest: Option<(u64, Option<SystemTime>, u64)>,
}

impl Stamp {
    /// The stamp of the component file at `path` (`None`: it is gone or not a file).
    pub fn of(path: &Path) -> Option<Stamp> {
        fn one(path: &Path) -> Option<(u64, Option<SystemTime>, u64)> {
            use std::os::unix::fs::MetadataExt;
            let meta = std::fs::metadata(path).ok().filter(std::fs::Metadata::is_file)?;
            Some((meta.len(), meta.modified().ok(), meta.ino()))
        }
        Some(Stamp { file: one(path)?, manifest: one(&path.with_extension("toml")) })
    }

    fn modified(&self) -> Option<SystemTime> {
        let times = [self.file.1, self.manifest.and_then(|m| m.1)];
        times.into_iter().flatten().max()
    }
}

/// Whether a file of `tools/` is loaded at this look.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// A temporary name: never loaded (see the module documentation).
    Temporary,
    /// Changed since the last look and modified less than [`SETTLE`] ago: maybe still being
    /// written; not loaded yet (its last good build, if any, keeps serving).
    Settling,
    /// Loaded (or kept, if its stamp is the one it was loaded at).
    Ready,
}

/// Whether the file named `file_name`, seen now (`now`) with `stamp`, is loaded: `last_look` is
/// its stamp at the previous look (`None`: not seen before), `first_look` whether this is the
/// directory's first look.
pub fn readiness(
    file_name: &str,
    stamp: &Stamp,
    last_look: Option<&Stamp>,
    first_look: bool,
    now: SystemTime,
) -> Readiness {
    if file_name.starts_with('.') || !file_name.ends_with(".wasm") {
        return Readiness::Temporary;
    }
    let settled = stamp.modified().is_some_and(|at| now.duration_since(at).is_ok_and(|age| age >= SETTLE));
    if first_look || last_look == Some(stamp) || settled { Readiness::Ready } else { Readiness::Settling }
}

/// What a look knows of one file.
#[derive(Default)]
struct FileState {
    /// Its stamp at the last look.
    seen: Option<Stamp>,
    /// The stamp it was last read at, and why it did not load then (`None`: it loaded).
    tried: Option<(Stamp, Option<String>)>,
    /// Its last good build.
    good: Option<LoadedComponent>,
    /// The reason last logged (`None`: it serves, or nothing was logged).
    logged: Option<String>,
}

#[derive(Default)]
struct State {
    looked: bool,
    files: BTreeMap<PathBuf, FileState>,
}

/// A directory of tool components loaded one by one, remembering each file's last good build.
/// See the module documentation.
pub struct LiveTools {
    dir: PathBuf,
    state: tokio::sync::Mutex<State>,
}

impl std::fmt::Debug for LiveTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveTools").field("dir", &self.dir).finish_non_exhaustive()
    }
}

impl LiveTools {
    /// The components of `dir`, not looked at yet.
    pub fn new(dir: PathBuf) -> Self {
        LiveTools { dir, state: tokio::sync::Mutex::default() }
    }

    /// The `.wasm` files of the directory and their stamps, sorted; temporary names left out.
    fn listing(&self) -> Result<Vec<(PathBuf, String, Stamp)>, LoadError> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(LoadError::Io { path: self.dir.clone(), source }),
        };
        let mut files = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| LoadError::Io { path: self.dir.clone(), source })?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.ends_with(".wasm") {
                continue;
            }
            let path = entry.path();
            if let Some(stamp) = Stamp::of(&path) {
                files.push((path, name, stamp));
            }
        }
        files.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(files)
    }

    /// The tool set of the directory now: every component that loads, the last good build of one
    /// that does not, and the others as [`ToolSet::unavailable`].
    ///
    /// # Errors
    /// Only a directory that cannot be read.
    pub async fn load(&self, sandbox: &Sandbox, manifests: &Manifests) -> Result<ToolSet, LoadError> {
        let mut listing = self.listing()?;
        let mut now = SystemTime::now();
        let mut state = self.state.lock().await;
        // A file that changed since the last look less than SETTLE ago may still be being written.
        // Wait out its settling time once (at most SETTLE) and look again, so that a build just
        // renamed into place (`tollgate build`, `tollgate dev`'s rebuild) serves this very look;
        // a file still changing during the wait is still settling then.
        let settling = listing
            .iter()
            .filter(|(path, name, stamp)| {
                let seen = state.files.get(path).and_then(|file| file.seen.as_ref());
                readiness(name, stamp, seen, !state.looked, now) == Readiness::Settling
            })
            .filter_map(|(.., stamp)| stamp.modified().and_then(|at| now.duration_since(at).ok()))
            .map(|age| SETTLE.saturating_sub(age))
            .max();
        if let Some(wait) = settling {
            tokio::time::sleep(wait.min(SETTLE)).await;
            listing = self.listing()?;
            now = SystemTime::now();
        }
        let first_look = !std::mem::replace(&mut state.looked, true);
        let gone: Vec<PathBuf> =
            state.files.keys().filter(|path| !listing.iter().any(|(p, ..)| p == *path)).cloned().collect();
        for path in gone {
            if let Some(file) = state.files.remove(&path)
                && (file.good.is_some() || file.logged.is_some())
            {
                tracing::info!(path = %path.display(), "a tool component left tools/: it serves nothing now");
            }
        }
        let mut components = Vec::new();
        let mut unavailable = Vec::new();
        for (path, name, stamp) in listing {
            let file = state.files.entry(path.clone()).or_default();
            let ready = readiness(&name, &stamp, file.seen.as_ref(), first_look, now);
            file.seen = Some(stamp);
            if ready == Readiness::Temporary {
                continue;
            }
            if ready == Readiness::Ready && file.tried.as_ref().map(|(at, _)| at) != Some(&stamp) {
                let loaded = match ComponentSource::read(&path) {
                    Ok(source) => sandbox.load_component(source, manifests).await,
                    Err(err) => Err(err),
                };
                match loaded {
                    Ok(component) => {
                        file.good = Some(component);
                        file.tried = Some((stamp, None));
                    }
                    Err(err) => file.tried = Some((stamp, Some(err.to_string()))),
                }
            }
            if let Some(good) = &file.good {
                components.push(good.clone());
            }
            if let Some((_, Some(reason))) = &file.tried {
                let stem = name.trim_end_matches(".wasm").to_owned();
                unavailable.push(Unavailable::new(stem, path, reason.clone(), file.good.is_some()));
            }
        }
        let (tools, unavailable) = sandbox.assemble(components, unavailable);
        for (path, file) in &mut state.files {
            let now = unavailable.iter().find(|u| &u.path == path);
            let reason = now.map(|u| u.reason.clone());
            if reason == file.logged {
                continue;
            }
            match now {
                Some(u) if u.serving_last_good => tracing::warn!(
                    component = %u.component, path = %path.display(),
                    "a tool component did not load; its last good build keeps serving: {}", u.reason
                ),
                Some(u) => tracing::warn!(
                    component = %u.component, path = %path.display(),
                    "a tool component did not load; it is unavailable: {}", u.reason
                ),
                None => tracing::info!(path = %path.display(), "the tool component loads again"),
            }
            file.logged = reason;
        }
        Ok(tools)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SandboxConfig;

    fn stamp(len: u64, age_ms: u64, now: SystemTime) -> Stamp {
        Stamp { file: (len, Some(now - Duration::from_millis(age_ms)), 7), manifest: None }
    }

    #[test]
    fn a_file_loads_once_it_is_stable_and_never_under_a_temporary_name() {
        let now = SystemTime::now();
        let fresh = stamp(10, 10, now);
        let old = stamp(10, 5_000, now);
        assert_eq!(readiness(".orders.wasm", &old, Some(&old), true, now), Readiness::Temporary);
        assert_eq!(readiness("orders.wasm.tmp", &old, Some(&old), true, now), Readiness::Temporary);
        assert_eq!(readiness("orders.wasm", &fresh, None, true, now), Readiness::Ready, "the first look");
        assert_eq!(readiness("orders.wasm", &fresh, None, false, now), Readiness::Settling, "just dropped");
        let grown = stamp(20, 10, now);
        assert_eq!(readiness("orders.wasm", &grown, Some(&fresh), false, now), Readiness::Settling);
        assert_eq!(readiness("orders.wasm", &fresh, Some(&fresh), false, now), Readiness::Ready, "unchanged");
        assert_eq!(readiness("orders.wasm", &old, None, false, now), Readiness::Ready, "written a while ago");
        let fresh_manifest = Stamp { manifest: Some((3, Some(now), 8)), ..old };
        assert_eq!(readiness("orders.wasm", &fresh_manifest, Some(&old), false, now), Readiness::Settling);
    }

    /// Sets the modification time of `path` to a while ago, as if written long before the look.
    fn age(path: &Path) {
        let file = std::fs::File::options().write(true).open(path).unwrap();
        file.set_modified(SystemTime::now() - Duration::from_secs(60)).unwrap();
    }

    fn names(tools: &ToolSet) -> Vec<&str> {
        tools.tools().iter().map(|t| t.name.as_str()).collect()
    }

    #[tokio::test]
    async fn a_broken_file_is_one_unavailable_component_and_a_broken_replacement_keeps_its_last_good_build() {
        let dir = tempfile::tempdir().unwrap();
        let tools_dir = dir.path().join("tools");
        std::fs::create_dir(&tools_dir).unwrap();
        std::fs::copy(tollgate_test_guests::ORDERS, tools_dir.join("orders.wasm")).unwrap();
        std::fs::copy(tollgate_test_guests::PAYMENTS, tools_dir.join("payments.wasm")).unwrap();
        let sandbox = Sandbox::new(SandboxConfig { cache_dir: None, ..SandboxConfig::default() }).unwrap();
        let live = LiveTools::new(tools_dir.clone());
        let manifests = Manifests::default();
        let tools = live.load(&sandbox, &manifests).await.unwrap();
        assert!(tools.unavailable().is_empty());
        let all = names(&tools).len();
        assert!(names(&tools).contains(&"lookup_order"), "{:?}", names(&tools));

        // A truncated new file, and a payments.wasm replaced by a truncated one.
        let bytes = std::fs::read(tollgate_test_guests::ORDERS).unwrap();
        std::fs::write(tools_dir.join("broken.wasm"), &bytes[..bytes.len() / 2]).unwrap();
        std::fs::remove_file(tools_dir.join("payments.wasm")).unwrap();
        std::fs::write(tools_dir.join("payments.wasm"), &bytes[..bytes.len() / 3]).unwrap();
        // Changed a moment ago: the look waits out their settling time, finds them unchanged, loads
        // them, and both fail.
        let started = std::time::Instant::now();
        let tools = live.load(&sandbox, &manifests).await.unwrap();
        assert!(started.elapsed() >= SETTLE / 2, "the look waited for the files to settle");
        let broken: Vec<(&str, bool)> =
            tools.unavailable().iter().map(|u| (u.component.as_str(), u.serving_last_good)).collect();
        assert_eq!(broken, [("broken", false), ("payments", true)]);
        assert!(tools.unavailable()[0].reason.contains("broken.wasm"), "{:?}", tools.unavailable());
        assert_eq!(names(&tools).len(), all, "the last good payments build and orders serve");
        let answer = tools.call("lookup_order", r#"{"order_id":"7"}"#, None).await.unwrap();
        assert!(!answer.is_error);
        let missing = tools.call("no_such_tool", "{}", None).await.unwrap_err().message_for_model();
        assert!(
            missing.starts_with("no_such_tool did not run.")
                && missing.contains("`broken` (")
                && missing.contains("`payments` ("),
            "{missing}"
        );

        // A temporary name is never loaded; a fixed file loads again.
        std::fs::write(tools_dir.join(".broken.wasm.tmp"), b"junk").unwrap();
        std::fs::copy(tollgate_test_guests::PAYMENTS, tools_dir.join("payments.wasm")).unwrap();
        std::fs::remove_file(tools_dir.join("broken.wasm")).unwrap();
        age(&tools_dir.join("payments.wasm"));
        let tools = live.load(&sandbox, &manifests).await.unwrap();
        assert!(tools.unavailable().is_empty(), "{:?}", tools.unavailable());
        assert_eq!(names(&tools).len(), all);
    }

    #[tokio::test]
    async fn a_component_whose_tool_another_lists_is_unavailable_and_the_first_keeps_serving() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(tollgate_test_guests::ORDERS, dir.path().join("a.wasm")).unwrap();
        std::fs::copy(tollgate_test_guests::ORDERS, dir.path().join("b.wasm")).unwrap();
        let sandbox = Sandbox::new(SandboxConfig { cache_dir: None, ..SandboxConfig::default() }).unwrap();
        let tools =
            LiveTools::new(dir.path().to_owned()).load(&sandbox, &Manifests::default()).await.unwrap();
        assert_eq!(names(&tools), ["lookup_order"]);
        assert_eq!(tools.components()[0].name, "a");
        assert_eq!(tools.unavailable().len(), 1);
        assert_eq!(tools.unavailable()[0].component, "b");
        assert!(tools.unavailable()[0].reason.contains("lookup_order"), "{:?}", tools.unavailable());
    }
}
