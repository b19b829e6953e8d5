//! Agents from the store: a version pushed with `tollgate agent push` made into an agent folder a
//! Worker loads, without any shared filesystem.
//!
//! [`pull`] finds `name` (its current version) or `name@k` in the store, and makes the folder
//! `<cache>/<digest hex>/<name>/`: every file fetched by digest and checked against it, and a
//! `tollgate.lock` written from the version's list, so [`crate::agent::Agent::load`] verifies every
//! byte again and loads the agent as locked. A folder already in the cache is reused when its files
//! still match the version; one that does not (a changed, missing or extra file) is removed and
//! fetched again, never trusted. A new folder is written beside and renamed into place, so a
//! Worker killed mid-way leaves no half-written entry.
//!
//! [`push`] is the other way: the files of a loaded, locked agent folder read back, checked against
//! its lock, and stored as the agent's next version.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use tollgate_store::{AgentVersion, NewVersion, Pushed, Store};

use crate::bundle::{Bundle, LOCK_VERSION, Lock, agent_digest, file_digest};

/// A version made into an agent folder.
#[derive(Debug)]
pub struct Pulled {
    /// The agent folder.
    pub dir: PathBuf,
    /// The version.
    pub version: AgentVersion,
    /// `false`: the cache had it.
    pub fetched: bool,
}

/// `name` or `name@k` (k ≥ 1).
///
/// # Errors
/// Anything else, saying what an agent is named by.
pub fn parse_spec(spec: &str) -> anyhow::Result<(&str, Option<i64>)> {
    let (name, version) = match spec.split_once('@') {
        Some((name, k)) => {
            let k: i64 = k
                .parse()
                .ok()
                .filter(|k| *k >= 1)
                .with_context(|| format!("{spec:?}: the version after `@` must be a number from 1"))?;
            (name, Some(k))
        }
        None => (spec, None),
    };
    tollgate_store::check_agent_name(name).map_err(anyhow::Error::msg)?;
    Ok((name, version))
}

/// Makes the version `spec` names into a folder under `cache` (see the module).
///
/// # Errors
/// An unknown agent or version, a file the store lacks or whose bytes do not match their digest, a
/// version whose digest is not its files', the store failing, or the cache not writable.
pub async fn pull(store: &dyn Store, spec: &str, cache: &Path) -> anyhow::Result<Pulled> {
    let (name, wanted) = parse_spec(spec)?;
    let version = store.versions().agent_version(name, wanted).await?.with_context(|| match wanted {
        Some(k) => format!("agent `{name}` has no version {k} in the store (`tollgate agent show {name}`)"),
        None => format!("agent `{name}` has no version in the store: push one (`tollgate agent push DIR`)"),
    })?;
    if agent_digest(&version.files) != version.digest {
        bail!(
            "{name}@{}: the store's file list does not add up to its digest {}",
            version.version,
            version.digest
        );
    }
    let hex = version.digest.trim_start_matches("sha256:");
    let entry = cache.join(hex);
    let dir = entry.join(name);
    if dir.is_dir() {
        match cached_matches(&dir, &version) {
            Ok(()) => return Ok(Pulled { dir, version, fetched: false }),
            Err(why) => {
                tracing::warn!(folder = %dir.display(), why = %why, "a cached agent bundle does not match its version; fetching it again");
                std::fs::remove_dir_all(&entry).with_context(|| format!("removing {}", entry.display()))?;
            }
        }
    }
    std::fs::create_dir_all(cache).with_context(|| format!("making {}", cache.display()))?;
    let staging = cache.join(format!(".{hex}.{}.partial", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    let into = staging.join(name);
    for (path, digest) in &version.files {
        let target = safe_join(&into, path)?;
        let bytes = store.versions().bundle_file(digest).await?.with_context(|| {
            format!("{name}@{}: the store has no file {digest} ({path})", version.version)
        })?;
        let found = file_digest(&bytes);
        if found != *digest {
            bail!("{name}@{}: {path}: the store's bytes have digest {found}, not {digest}", version.version);
        }
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("making {}", parent.display()))?;
        }
        std::fs::write(&target, &bytes).with_context(|| format!("writing {}", target.display()))?;
    }
    let lock =
        Lock { version: LOCK_VERSION, agent_digest: version.digest.clone(), files: version.files.clone() };
    lock.write(&into)?;
    match std::fs::rename(&staging, &entry) {
        Ok(()) => {}
        // Another Worker made it first: theirs is as good (it is checked at load).
        Err(_) if entry.join(name).is_dir() => {
            let _ = std::fs::remove_dir_all(&staging);
        }
        Err(e) => return Err(e).with_context(|| format!("moving {} into place", staging.display())),
    }
    Ok(Pulled { dir, version, fetched: true })
}

/// `dir/path` for a bundle path: relative, `/`-separated, no `.` or `..` (the store refuses
/// others; this refuses them again rather than write outside the cache).
fn safe_join(dir: &Path, path: &str) -> anyhow::Result<PathBuf> {
    let parts: Vec<&str> = path.split('/').collect();
    if parts.iter().any(|p| p.is_empty() || *p == "." || *p == ".." || p.contains('\\')) {
        bail!("{path:?} is not a bundle path");
    }
    Ok(parts.iter().fold(dir.to_path_buf(), |at, part| at.join(part)))
}

/// Whether the cached folder holds exactly the version's files (each hashed) and its lock.
fn cached_matches(dir: &Path, version: &AgentVersion) -> Result<(), String> {
    let bundle = Bundle::read(dir).map_err(|e| e.to_string())?;
    if bundle.files != version.files {
        let lock = Lock {
            version: LOCK_VERSION,
            agent_digest: version.digest.clone(),
            files: version.files.clone(),
        };
        let problems: Vec<String> = lock.problems(&bundle.files).iter().map(ToString::to_string).collect();
        return Err(problems.join("; "));
    }
    match Lock::read(dir).map_err(|e| e.to_string())? {
        Some(lock) if lock.agent_digest == version.digest && lock.files == version.files => Ok(()),
        Some(_) => Err("its lock names another bundle".into()),
        None => Err("it has no lock".into()),
    }
}

/// Stores the locked agent folder `dir` (loaded as `name`, with `digest`) as the agent's next
/// version, by `pushed_by`: each file read again and checked against the lock first.
///
/// # Errors
/// A file that changed since the lock, the store refusing the bundle (naming the file) or failing.
pub async fn push(
    store: &dyn Store,
    dir: &Path,
    name: &str,
    digest: &str,
    pushed_by: &str,
) -> anyhow::Result<Pushed> {
    let lock = Lock::read(dir)?.with_context(|| format!("{} has no lock", dir.display()))?;
    if lock.agent_digest != digest {
        bail!(
            "{}: the lock names {}, the agent loaded {digest}; nothing was pushed",
            dir.display(),
            lock.agent_digest
        );
    }
    let mut files = BTreeMap::new();
    for (path, expected) in &lock.files {
        let file = safe_join(dir, path).with_context(|| format!("{}: cannot be pushed", dir.display()))?;
        let bytes = std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
        let found = file_digest(&bytes);
        if found != *expected {
            bail!("{path} changed: expected {expected}, found {found}; nothing was pushed");
        }
        files.insert(path.clone(), bytes);
    }
    let new = NewVersion {
        name: name.to_owned(),
        digest: digest.to_owned(),
        files,
        pushed_by: pushed_by.to_owned(),
    };
    Ok(store.versions().push_version(new).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_is_named_with_an_optional_version_from_one() {
        assert_eq!(parse_spec("support").unwrap(), ("support", None));
        assert_eq!(parse_spec("support@3").unwrap(), ("support", Some(3)));
        for bad in ["support@0", "support@", "support@x", "@3", "sup port", "support@3@4"] {
            assert!(parse_spec(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_bundle_path_never_leaves_its_folder() {
        let dir = Path::new("/cache/x/support");
        assert_eq!(safe_join(dir, "tools/a.wasm").unwrap(), dir.join("tools").join("a.wasm"));
        for bad in ["../x", "tools/../../x", "/etc/passwd", "a//b", "./a", "a\\b", ""] {
            assert!(safe_join(dir, bad).is_err(), "{bad:?}");
        }
    }
}
