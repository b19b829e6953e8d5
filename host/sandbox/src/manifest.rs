//! What a component may reach and how much it may use: its manifest.
//!
//! A component `tools/payments.wasm` gets its grants from `tools/payments.toml` beside it, or from
//! the `[tools.payments]` table of the agent's `tollgate.toml` (never both). Everything not
//! granted is denied. Read [`ManifestFile`] (as written) and [`Manifest`] (resolved) first.
//!
//! ```toml
//! allowed_outbound_hosts = ["https://payments.example.com"]   # Spin's syntax, see `allow`
//! memory_mb = 64            # total across all of the component's memories (default 128)
//! timeout_ms = 5000         # wall clock per call, instantiation included (default 30000)
//! max_output_kb = 256       # bytes of output a call may return (default 1024)
//!
//! [config]                  # keys the tool may read through `tollgate:tool/config`
//! PAYMENTS_URL = { env = "PAYMENTS_URL" }   # from the host's environment, read at load
//! REGION = "eu-west-1"                       # a literal value
//!
//! [[dirs]]                  # preopened directories; read-only unless `writable = true`
//! path = "data"             # on the host, relative to the manifest's directory
//! guest = "/data"           # where the tool sees it
//! ```
//!
//! Resolving a manifest reads the environment variables it names and checks that its
//! directories exist; nothing else here does I/O.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::allow::{AllowListError, AllowedHosts};

/// Default cap on a component's memory, all memories together.
pub const DEFAULT_MEMORY_MB: u32 = 128;
/// Default wall-clock deadline of one call.
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
/// Default bound on a call's output.
pub const DEFAULT_MAX_OUTPUT_KB: u32 = 1024;
/// The longest deadline a manifest may ask for (a deferred write's step).
pub const MAX_TIMEOUT_MS: u64 = 15 * 60 * 1000;

/// A manifest as written in TOML.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ManifestFile {
    /// Outbound destinations, in Spin's syntax.
    #[serde(default)]
    pub allowed_outbound_hosts: Vec<String>,
    /// Config keys the tool may read, with where their values come from.
    #[serde(default)]
    pub config: BTreeMap<String, ConfigSource>,
    /// Preopened directories.
    #[serde(default)]
    pub dirs: Vec<DirGrant>,
    /// Memory cap in MiB.
    pub memory_mb: Option<u32>,
    /// Per-call deadline in milliseconds.
    pub timeout_ms: Option<u64>,
    /// Output bound in KiB.
    pub max_output_kb: Option<u32>,
}

/// Where a config value comes from.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum ConfigSource {
    /// The value itself.
    Literal(String),
    /// An environment variable of the host, read when the component is loaded.
    Env {
        /// The variable's name.
        env: String,
    },
}

/// A directory a tool may see.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DirGrant {
    /// The directory on the host, relative to the manifest's directory.
    pub path: PathBuf,
    /// The absolute path the tool sees it at.
    pub guest: String,
    /// Whether the tool may create, change and delete files there.
    #[serde(default)]
    pub writable: bool,
}

/// A bad manifest.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestError {
    /// Not valid TOML, or an unknown or mistyped key.
    #[error("{origin}: {message}")]
    Syntax {
        /// The file or table.
        origin: String,
        /// The parser's message, naming the key.
        message: String,
    },
    /// A bad `allowed_outbound_hosts` entry.
    #[error("{origin}: {source}")]
    AllowList {
        /// The file or table.
        origin: String,
        /// The entry and what is wrong with it.
        source: AllowListError,
    },
    /// A limit out of range.
    #[error("{origin}: `{key}` = {value} is out of range ({range})")]
    Limit {
        /// The file or table.
        origin: String,
        /// The key.
        key: &'static str,
        /// The value given.
        value: u64,
        /// What is accepted.
        range: String,
    },
    /// A directory grant that cannot be honoured.
    #[error("{origin}: directory `{path}` granted as `{guest}`: {reason}")]
    Dir {
        /// The file or table.
        origin: String,
        /// The host path.
        path: PathBuf,
        /// The guest path.
        guest: String,
        /// What is wrong.
        reason: String,
    },
    /// A config key that is not a plain name.
    #[error("{origin}: config key `{key}` must be letters, digits and `_`")]
    ConfigKey {
        /// The file or table.
        origin: String,
        /// The key.
        key: String,
    },
}

/// A directory grant, resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedDir {
    /// The directory on the host (absolute).
    pub host: PathBuf,
    /// Where the tool sees it.
    pub guest: String,
    /// Whether writes are allowed.
    pub writable: bool,
}

/// Resource limits of every call of one component.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of linear memory, all memories together.
    pub memory_bytes: usize,
    /// Wall clock per call.
    pub timeout: Duration,
    /// Bytes of output per call.
    pub max_output_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_bytes: (DEFAULT_MEMORY_MB as usize) << 20,
            timeout: Duration::from_millis(DEFAULT_TIMEOUT_MS),
            max_output_bytes: (DEFAULT_MAX_OUTPUT_KB as usize) << 10,
        }
    }
}

/// A config key's value, resolved. Its `Debug` form hides the value, so a manifest printed with
/// `{:?}` (in a log line, a panic message) never shows a secret.
#[derive(Clone, PartialEq, Eq)]
pub struct ConfigValue {
    /// The value; `None` when it comes from an unset environment variable.
    pub value: Option<String>,
    /// Where it came from, for `tollgate tools check` (never the value itself).
    pub source: String,
}

impl std::fmt::Debug for ConfigValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigValue")
            .field("value", &self.value.as_ref().map(|_| "<hidden>"))
            .field("source", &self.source)
            .finish()
    }
}

/// A component's grants and limits, resolved and checked.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Manifest {
    /// Where the manifest came from (`tools/payments.toml`, `tollgate.toml [tools.payments]`),
    /// or `None` when the component has none and everything is denied.
    pub origin: Option<String>,
    /// Outbound destinations.
    pub allowed_hosts: AllowedHosts,
    /// Readable config keys.
    pub config: BTreeMap<String, ConfigValue>,
    /// Preopened directories.
    pub dirs: Vec<ResolvedDir>,
    /// Limits per call.
    pub limits: Limits,
}

impl ManifestFile {
    /// Parses a manifest's TOML text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self, ManifestError> {
        toml::from_str(text).map_err(|e| ManifestError::Syntax {
            origin: origin.to_string(),
            message: e.message().to_string(),
        })
    }

    /// Reads a manifest file.
    pub fn read(path: &Path) -> Result<Self, ManifestError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ManifestError::Syntax { origin: origin.clone(), message: e.to_string() })?;
        Self::parse(&text, &origin)
    }

    /// Resolves the manifest: relative directories against `base`, environment variables
    /// through `env`, limits against `max_memory_mb` (the host's own ceiling).
    pub fn resolve(
        &self,
        origin: &str,
        base: &Path,
        max_memory_mb: u32,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Manifest, ManifestError> {
        let allowed_hosts = AllowedHosts::parse(&self.allowed_outbound_hosts)
            .map_err(|source| ManifestError::AllowList { origin: origin.to_string(), source })?;
        let limit = |key: &'static str, value: u64, min: u64, max: u64| {
            if (min..=max).contains(&value) {
                Ok(value)
            } else {
                Err(ManifestError::Limit {
                    origin: origin.to_string(),
                    key,
                    value,
                    range: format!("{min} to {max}"),
                })
            }
        };
        let memory_mb =
            limit("memory_mb", self.memory_mb.unwrap_or(DEFAULT_MEMORY_MB).into(), 1, max_memory_mb.into())?;
        let timeout_ms =
            limit("timeout_ms", self.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS), 1, MAX_TIMEOUT_MS)?;
        let max_output_kb =
            limit("max_output_kb", self.max_output_kb.unwrap_or(DEFAULT_MAX_OUTPUT_KB).into(), 1, 64 * 1024)?;

        let mut config = BTreeMap::new();
        for (key, source) in &self.config {
            if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(ManifestError::ConfigKey { origin: origin.to_string(), key: key.clone() });
            }
            let value = match source {
                ConfigSource::Literal(v) => ConfigValue { value: Some(v.clone()), source: "literal".into() },
                ConfigSource::Env { env: var } => {
                    ConfigValue { value: env(var), source: format!("env {var}") }
                }
            };
            config.insert(key.clone(), value);
        }

        let mut dirs = Vec::new();
        for grant in &self.dirs {
            let fail = |reason: &str| ManifestError::Dir {
                origin: origin.to_string(),
                path: grant.path.clone(),
                guest: grant.guest.clone(),
                reason: reason.to_string(),
            };
            if !grant.guest.starts_with('/') || grant.guest.split('/').any(|part| part == "..") {
                return Err(fail("the guest path must be absolute, without `..`"));
            }
            let host = base.join(&grant.path);
            let host = host.canonicalize().map_err(|e| fail(&format!("cannot open it: {e}")))?;
            if !host.is_dir() {
                return Err(fail("it is not a directory"));
            }
            dirs.push(ResolvedDir { host, guest: grant.guest.clone(), writable: grant.writable });
        }

        Ok(Manifest {
            origin: Some(origin.to_string()),
            allowed_hosts,
            config,
            dirs,
            limits: Limits {
                memory_bytes: (memory_mb as usize) << 20,
                timeout: Duration::from_millis(timeout_ms),
                max_output_bytes: (max_output_kb as usize) << 10,
            },
        })
    }
}

impl Manifest {
    /// One line per grant, for `tollgate tools check`.
    pub fn describe(&self) -> Vec<String> {
        let mut lines =
            vec![format!("manifest: {}", self.origin.as_deref().unwrap_or("none (everything denied)"))];
        lines.push(format!("outbound: {}", self.allowed_hosts));
        if self.config.is_empty() {
            lines.push("config: none".into());
        } else {
            let keys: Vec<String> = self
                .config
                .iter()
                .map(|(k, v)| {
                    let state = if v.value.is_some() { "set" } else { "unset" };
                    format!("{k} ({}, {state})", v.source)
                })
                .collect();
            lines.push(format!("config: {}", keys.join(", ")));
        }
        if self.dirs.is_empty() {
            lines.push("dirs: none".into());
        } else {
            for d in &self.dirs {
                let mode = if d.writable { "read-write" } else { "read-only" };
                lines.push(format!("dir: {} -> {} ({mode})", d.host.display(), d.guest));
            }
        }
        lines.push(format!(
            "limits: memory {} MiB, timeout {} ms, output {} KiB",
            self.limits.memory_bytes >> 20,
            self.limits.timeout.as_millis(),
            self.limits.max_output_bytes >> 10
        ));
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn an_empty_manifest_grants_nothing_and_keeps_the_default_limits() {
        let m = ManifestFile::parse("", "t.toml")
            .unwrap()
            .resolve("t.toml", Path::new("."), 1024, &no_env)
            .unwrap();
        assert!(m.allowed_hosts.is_empty());
        assert!(m.config.is_empty() && m.dirs.is_empty());
        assert_eq!(m.limits, Limits::default());
    }

    #[test]
    fn config_values_come_from_literals_or_the_environment() {
        let text = "[config]\nA = \"one\"\nB = { env = \"VAR_B\" }\nC = { env = \"UNSET\" }\n";
        let env = |k: &str| (k == "VAR_B").then(|| "two".to_string());
        let m = ManifestFile::parse(text, "t").unwrap().resolve("t", Path::new("."), 1024, &env).unwrap();
        assert_eq!(m.config["A"].value.as_deref(), Some("one"));
        assert_eq!(m.config["B"].value.as_deref(), Some("two"));
        assert_eq!(m.config["C"].value, None);
        let described = m.describe().join("\n");
        assert!(described.contains("B (env VAR_B, set)"), "{described}");
        assert!(!described.contains("two"), "a value must never be printed: {described}");
        let debugged = format!("{m:?}");
        assert!(
            !debugged.contains("\"two\"") && !debugged.contains("\"one\""),
            "nor debug-printed: {debugged}"
        );
        assert!(debugged.contains("<hidden>"), "{debugged}");
    }

    #[test]
    fn an_unknown_key_is_refused_by_name() {
        let error = ManifestFile::parse("allowed_hosts = []", "tools/x.toml").unwrap_err();
        let text = error.to_string();
        assert!(text.contains("tools/x.toml") && text.contains("allowed_hosts"), "{text}");
    }

    #[test]
    fn limits_out_of_range_are_refused() {
        for (text, key) in [
            ("memory_mb = 0", "memory_mb"),
            ("memory_mb = 5000", "memory_mb"),
            ("timeout_ms = 0", "timeout_ms"),
        ] {
            let error = ManifestFile::parse(text, "t")
                .unwrap()
                .resolve("t", Path::new("."), 1024, &no_env)
                .unwrap_err();
            assert!(matches!(error, ManifestError::Limit { key: k, .. } if k == key), "{text}: {error}");
        }
    }

    #[test]
    fn a_bad_outbound_entry_names_the_manifest_and_the_entry() {
        let error = ManifestFile::parse("allowed_outbound_hosts = [\"example.com\"]", "tools/p.toml")
            .unwrap()
            .resolve("tools/p.toml", Path::new("."), 1024, &no_env)
            .unwrap_err();
        let text = error.to_string();
        assert!(text.contains("tools/p.toml") && text.contains("`example.com`"), "{text}");
    }

    #[test]
    fn directories_must_exist_and_guest_paths_must_be_absolute() {
        let dir = std::env::temp_dir();
        let ok = ManifestFile::parse("[[dirs]]\npath = \".\"\nguest = \"/data\"\n", "t").unwrap();
        let m = ok.resolve("t", &dir, 1024, &no_env).unwrap();
        assert!(!m.dirs[0].writable);
        let missing =
            ManifestFile::parse("[[dirs]]\npath = \"no-such-dir-xyz\"\nguest = \"/data\"\n", "t").unwrap();
        assert!(matches!(missing.resolve("t", &dir, 1024, &no_env), Err(ManifestError::Dir { .. })));
        let relative = ManifestFile::parse("[[dirs]]\npath = \".\"\nguest = \"data\"\n", "t").unwrap();
        assert!(matches!(relative.resolve("t", &dir, 1024, &no_env), Err(ManifestError::Dir { .. })));
    }

    #[test]
    fn config_keys_must_be_plain_names() {
        let m = ManifestFile::parse("[config]\n\"A-B\" = \"x\"\n", "t").unwrap();
        assert!(matches!(
            m.resolve("t", Path::new("."), 1024, &no_env),
            Err(ManifestError::ConfigKey { .. })
        ));
    }
}
