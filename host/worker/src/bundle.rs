//! Agent bundles: the files that make an agent, their SHA-256 digests, the agent digest, and the
//! lock file `tollgate.lock` that pins them.
//!
//! A **bundle** is what decides an agent's behaviour: `tollgate.toml`, the options factory named by
//! `[agent] options_factory` and the manifest beside it, every `tools/*.wasm` and every
//! `tools/*.toml`. [`Bundle::read`] reads each file once and hashes it once (a component's
//! SHA-256 is also the sandbox's compile-cache key: it is passed through, never computed again).
//! The **agent digest** is the SHA-256 of the sorted list of `(path, digest)` pairs
//! ([`agent_digest`]): `sha256:<64 hex digits>`.
//!
//! `tollgate agent lock DIR` writes `DIR/tollgate.lock` ([`Lock`], TOML, `version = 1`):
//!
//! ```toml
//! version = 1
//! agent_digest = "sha256:…"
//!
//! [files]
//! "agent.wasm" = "sha256:…"
//! "tollgate.toml" = "sha256:…"
//! "tools/orders.wasm" = "sha256:…"
//! ```
//!
//! While a lock exists, [`Lock::verify`] refuses a changed, missing or unlisted file, naming the
//! file and both digests, before anything is compiled. The pure parts (digests, the lock's text,
//! verification) have no I/O; [`Bundle::read`], [`Lock::read`] and [`Lock::write`] are the edges.
//!
//! # Caveats
//! - Data directories a manifest grants (`[[dirs]]`) are not part of the bundle: they are data,
//!   not code.
//! - Paths in the lock are relative to the agent directory with `/` separators; an options
//!   factory outside the directory is named by the path written in `tollgate.toml`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tollgate_sandbox::ComponentSource;

use crate::config::{AgentConfig, CONFIG_FILE, ConfigError};

/// The lock file's name in an agent directory.
pub const LOCK_FILE: &str = "tollgate.lock";

/// The lock format this build reads and writes.
pub const LOCK_VERSION: u32 = 1;

/// What is wrong with a bundle or its lock.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The lock file does not parse, or a value in it is wrong.
    #[error("{path}: {message}")]
    BadLock {
        /// The lock file.
        path: PathBuf,
        /// What is wrong (with the line for a syntax error).
        message: String,
    },
    /// The bundle differs from its lock; every difference is listed.
    #[error("the agent {dir} does not match {lock}:\n  {}", .problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n  "))]
    Mismatch {
        /// The agent directory.
        dir: PathBuf,
        /// The lock file.
        lock: PathBuf,
        /// Each difference.
        problems: Vec<Problem>,
    },
}

/// One difference between a bundle and its lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// The file's digest is not the one locked.
    Changed {
        /// The file, relative to the agent directory.
        path: String,
        /// The locked digest.
        expected: String,
        /// The file's digest now.
        found: String,
    },
    /// A locked file is gone.
    Missing {
        /// The file.
        path: String,
        /// The locked digest.
        expected: String,
    },
    /// A file of the bundle that the lock does not list (e.g. a `.wasm` dropped into `tools/`).
    Unlisted {
        /// The file.
        path: String,
        /// Its digest.
        found: String,
    },
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::Changed { path, expected, found } => {
                write!(f, "{path} changed: expected {expected}, found {found}")
            }
            Problem::Missing { path, expected } => {
                write!(f, "{path} is missing: expected {expected}, found none")
            }
            Problem::Unlisted { path, found } => {
                write!(f, "{path} is not in the lock: expected no such file, found {found}")
            }
        }
    }
}

/// `sha256:<hex>` of `bytes`.
pub fn file_digest(bytes: &[u8]) -> String {
    format_sha256(&Sha256::digest(bytes).into())
}

/// `sha256:<hex>` of a SHA-256 already computed.
pub fn format_sha256(sha: &[u8; 32]) -> String {
    let mut out = String::with_capacity(71);
    out.push_str("sha256:");
    for byte in sha {
        let _ = write!(out, "{byte:02x}");
    }
    out
}

/// The agent digest of `files` (path → digest): the SHA-256 of `path NUL digest LF` for each
/// file in path order.
pub fn agent_digest(files: &BTreeMap<String, String>) -> String {
    let mut sha = Sha256::new();
    for (path, digest) in files {
        sha.update(path.as_bytes());
        sha.update([0]);
        sha.update(digest.as_bytes());
        sha.update([b'\n']);
    }
    format_sha256(&sha.finalize().into())
}

/// Whether `digest` is `sha256:` and 64 lowercase hex digits.
pub fn is_digest(digest: &str) -> bool {
    digest.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// The files of an agent directory, each read and hashed once.
#[derive(Debug)]
pub struct Bundle {
    /// The agent directory (canonical).
    pub dir: PathBuf,
    /// `tollgate.toml` parsed from the bytes hashed in `files`, when there is one. A parse error
    /// is kept, not returned, so a lock's mismatch is reported first.
    pub config: Option<Result<AgentConfig, ConfigError>>,
    /// The options factory named in `tollgate.toml` (with the manifest beside it), when it exists.
    pub factory: Option<ComponentSource>,
    /// `tools/*.wasm` by file name, with the manifests beside them.
    pub tools: Vec<ComponentSource>,
    /// Every file of the bundle (relative path → `sha256:…`).
    pub files: BTreeMap<String, String>,
    /// The agent digest of `files`.
    pub digest: String,
}

impl Bundle {
    /// Reads the bundle of `dir` (canonical), parsing `tollgate.toml` once to find the options
    /// factory. An options factory that is named but missing, or named in a configuration that
    /// does not parse, is left out (the lock or the agent's loader reports it).
    ///
    /// # Errors
    /// A file that exists but cannot be read.
    pub fn read(dir: &Path) -> Result<Bundle, BundleError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| BundleError::Io { path, source }
        };
        let mut files = BTreeMap::new();
        let config_path = dir.join(CONFIG_FILE);
        let config = if config_path.is_file() {
            let text = std::fs::read_to_string(&config_path).map_err(io(&config_path))?;
            files.insert(CONFIG_FILE.to_owned(), file_digest(text.as_bytes()));
            Some(AgentConfig::parse(&config_path, &text))
        } else {
            None
        };
        let named = config.as_ref().and_then(|parsed| parsed.as_ref().ok()?.options_factory.clone());
        let factory = match named {
            Some(relative) => {
                let path = dir.join(&relative);
                if path.is_file() {
                    let source = ComponentSource::read(&path).map_err(|e| BundleError::Io {
                        path: path.clone(),
                        source: std::io::Error::other(e.to_string()),
                    })?;
                    add_source(&mut files, dir, &source);
                    Some(source)
                } else {
                    None
                }
            }
            None => None,
        };
        let tools_dir = dir.join("tools");
        let mut tools = Vec::new();
        if tools_dir.is_dir() {
            let mut paths = Vec::new();
            for entry in std::fs::read_dir(&tools_dir).map_err(io(&tools_dir))? {
                let path = entry.map_err(io(&tools_dir))?.path();
                if path.is_file() && path.extension().is_some_and(|e| e == "wasm" || e == "toml") {
                    paths.push(path);
                }
            }
            paths.sort();
            for path in &paths {
                if path.extension().is_some_and(|e| e == "wasm") {
                    let source = ComponentSource::read(path).map_err(|e| BundleError::Io {
                        path: path.clone(),
                        source: std::io::Error::other(e.to_string()),
                    })?;
                    add_source(&mut files, dir, &source);
                    tools.push(source);
                } else if !path.with_extension("wasm").is_file() {
                    // A manifest without its component: still part of what the lock pins.
                    let bytes = std::fs::read(path).map_err(io(path))?;
                    files.insert(relative(dir, path), file_digest(&bytes));
                }
            }
        }
        let digest = agent_digest(&files);
        Ok(Bundle { dir: dir.to_path_buf(), config, factory, tools, files, digest })
    }
}

/// Adds a component and the manifest beside it to `files`, reusing the component's SHA-256.
fn add_source(files: &mut BTreeMap<String, String>, dir: &Path, source: &ComponentSource) {
    files.insert(relative(dir, &source.path), format_sha256(&source.sha256));
    if let Some((path, text)) = &source.manifest {
        files.insert(relative(dir, path), file_digest(text.as_bytes()));
    }
}

/// `path` relative to `dir` with `/` separators (as written when outside `dir`).
fn relative(dir: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(dir).unwrap_or(path);
    rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect::<Vec<_>>().join("/")
}

/// A parsed `tollgate.lock`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lock {
    /// The format version ([`LOCK_VERSION`]).
    pub version: u32,
    /// The agent digest of `files`.
    pub agent_digest: String,
    /// Every file of the bundle: relative path → `sha256:…`.
    pub files: BTreeMap<String, String>,
}

impl Lock {
    /// The lock of a bundle as it is.
    pub fn of(bundle: &Bundle) -> Lock {
        Lock { version: LOCK_VERSION, agent_digest: bundle.digest.clone(), files: bundle.files.clone() }
    }

    /// Parses a lock's text; `path` names it in errors (a syntax error gives the line).
    ///
    /// # Errors
    /// Bad TOML, an unknown key, another version, a malformed digest, or an `agent_digest` that
    /// is not the digest of `files`.
    pub fn parse(text: &str, path: &Path) -> Result<Lock, BundleError> {
        let bad = |message: String| BundleError::BadLock { path: path.to_path_buf(), message };
        let lock: Lock = toml::from_str(text).map_err(|e| bad(e.to_string().trim_end().to_owned()))?;
        if lock.version != LOCK_VERSION {
            return Err(bad(format!(
                "version {} is not supported (this build reads version {LOCK_VERSION})",
                lock.version
            )));
        }
        for (file, digest) in &lock.files {
            if !is_digest(digest) {
                return Err(bad(format!(
                    "files.\"{file}\": {digest:?} is not a sha256:<64 hex digits> digest"
                )));
            }
        }
        if !is_digest(&lock.agent_digest) {
            return Err(bad(format!(
                "agent_digest: {:?} is not a sha256:<64 hex digits> digest",
                lock.agent_digest
            )));
        }
        let computed = agent_digest(&lock.files);
        if computed != lock.agent_digest {
            return Err(bad(format!(
                "agent_digest is {} but the files listed give {computed}; the lock was edited by hand: \
                 run `tollgate agent lock` again",
                lock.agent_digest
            )));
        }
        Ok(lock)
    }

    /// The lock's text.
    pub fn render(&self) -> String {
        let mut out = String::from(
            "# Written by `tollgate agent lock`. While this file exists the agent loads only when every\n\
             # file below has exactly this SHA-256 and the bundle has no other file. Do not edit.\n",
        );
        let _ = writeln!(out, "version = {}", self.version);
        let _ = writeln!(out, "agent_digest = \"{}\"\n\n[files]", self.agent_digest);
        for (path, digest) in &self.files {
            let key = toml::Value::String(path.clone()).to_string();
            let _ = writeln!(out, "{key} = \"{digest}\"");
        }
        out
    }

    /// The lock of `dir`, or `None` when it has none.
    ///
    /// # Errors
    /// An unreadable or invalid lock file.
    pub fn read(dir: &Path) -> Result<Option<Lock>, BundleError> {
        let path = dir.join(LOCK_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => Lock::parse(&text, &path).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(BundleError::Io { path, source }),
        }
    }

    /// Writes the lock into `dir` atomically (a temporary file renamed into place).
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn write(&self, dir: &Path) -> Result<PathBuf, BundleError> {
        let path = dir.join(LOCK_FILE);
        let tmp = dir.join(format!(".{LOCK_FILE}.{}.tmp", std::process::id()));
        let io = |source| BundleError::Io { path: path.clone(), source };
        std::fs::write(&tmp, self.render()).map_err(io)?;
        std::fs::rename(&tmp, &path).map_err(io)?;
        Ok(path)
    }

    /// Every difference between `found` (a bundle's files) and the lock.
    pub fn problems(&self, found: &BTreeMap<String, String>) -> Vec<Problem> {
        let mut problems = Vec::new();
        for (path, expected) in &self.files {
            match found.get(path) {
                None => problems.push(Problem::Missing { path: path.clone(), expected: expected.clone() }),
                Some(digest) if digest != expected => problems.push(Problem::Changed {
                    path: path.clone(),
                    expected: expected.clone(),
                    found: digest.clone(),
                }),
                Some(_) => {}
            }
        }
        for (path, digest) in found {
            if !self.files.contains_key(path) {
                problems.push(Problem::Unlisted { path: path.clone(), found: digest.clone() });
            }
        }
        problems
    }

    /// Checks `bundle` against the lock.
    ///
    /// # Errors
    /// [`BundleError::Mismatch`] listing every changed, missing and unlisted file.
    pub fn verify(&self, bundle: &Bundle) -> Result<(), BundleError> {
        let problems = self.problems(&bundle.files);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(BundleError::Mismatch { dir: bundle.dir.clone(), lock: bundle.dir.join(LOCK_FILE), problems })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(p, d)| ((*p).to_owned(), file_digest(d.as_bytes()))).collect()
    }

    #[test]
    fn the_agent_digest_depends_on_every_path_and_digest_but_not_on_order() {
        let a = files(&[("tollgate.toml", "x"), ("tools/a.wasm", "y")]);
        let renamed = files(&[("tollgate.toml", "x"), ("tools/b.wasm", "y")]);
        let changed = files(&[("tollgate.toml", "x"), ("tools/a.wasm", "z")]);
        assert!(is_digest(&agent_digest(&a)));
        assert_ne!(agent_digest(&a), agent_digest(&renamed));
        assert_ne!(agent_digest(&a), agent_digest(&changed));
        assert_eq!(agent_digest(&a), agent_digest(&a.clone().into_iter().rev().collect()));
    }

    #[test]
    fn a_lock_renders_and_parses_back_to_itself() {
        let files = files(&[("tollgate.toml", "x"), ("tools/a b.wasm", "y")]);
        let lock = Lock { version: 1, agent_digest: agent_digest(&files), files };
        let path = Path::new("/a/tollgate.lock");
        assert_eq!(Lock::parse(&lock.render(), path).unwrap(), lock);
    }

    #[test]
    fn a_bad_lock_is_refused_naming_the_file_and_the_line_or_key() {
        let path = Path::new("/a/tollgate.lock");
        let error = |text: &str| Lock::parse(text, path).unwrap_err().to_string();
        let syntax = error("version = 1\nagent_digest = \"sha256:\n");
        assert!(syntax.starts_with("/a/tollgate.lock: ") && syntax.contains("line 2"), "{syntax}");
        assert!(error("version = 2\nagent_digest = \"x\"\n[files]\n").contains("version 2 is not supported"));
        let unknown = error("version = 1\nagent_digest = \"x\"\nextra = 1\n[files]\n");
        assert!(unknown.contains("extra"), "{unknown}");
        let digest = error("version = 1\nagent_digest = \"x\"\n[files]\n\"tools/a.wasm\" = \"md5:1\"\n");
        assert!(digest.contains("files.\"tools/a.wasm\"") && digest.contains("md5:1"), "{digest}");
        let files = files(&[("tollgate.toml", "x")]);
        let mut lock = Lock { version: 1, agent_digest: agent_digest(&files), files };
        lock.files.insert("tools/a.wasm".into(), file_digest(b"y"));
        let edited = error(&lock.render());
        assert!(edited.contains("edited by hand"), "{edited}");
    }

    #[test]
    fn every_changed_missing_and_unlisted_file_is_a_problem_with_both_digests() {
        let locked = files(&[("tollgate.toml", "x"), ("tools/a.wasm", "a"), ("tools/gone.wasm", "g")]);
        let lock = Lock { version: 1, agent_digest: agent_digest(&locked), files: locked };
        let found = files(&[("tollgate.toml", "x"), ("tools/a.wasm", "A"), ("tools/new.wasm", "n")]);
        let problems = lock.problems(&found);
        assert_eq!(
            problems,
            [
                Problem::Changed {
                    path: "tools/a.wasm".into(),
                    expected: file_digest(b"a"),
                    found: file_digest(b"A")
                },
                Problem::Missing { path: "tools/gone.wasm".into(), expected: file_digest(b"g") },
                Problem::Unlisted { path: "tools/new.wasm".into(), found: file_digest(b"n") },
            ]
        );
        let text = problems[0].to_string();
        assert!(text.contains(&file_digest(b"a")) && text.contains(&file_digest(b"A")), "{text}");
        assert!(lock.problems(&lock.files).is_empty());
    }
}
