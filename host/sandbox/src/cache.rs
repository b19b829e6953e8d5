//! The on-disk cache of compiled components.
//!
//! Compiling a component takes 0.1 s (Rust) to 12 s (JavaScript, Python) here; loading a
//! precompiled artifact takes milliseconds. An artifact is keyed by the SHA-256 of the `.wasm`
//! bytes, the engine's compatibility hash (its settings and the host's CPU features) and the
//! wasmtime version, so a changed component, a changed engine setting or a wasmtime upgrade each
//! miss. Read [`ComponentCache::load`] first.
//!
//! # Caveats
//! - Artifacts are native code loaded without validation: the cache directory must be writable
//!   only by the host's user. A file that fails to load (truncated, corrupted) is compiled again
//!   and replaced.
//! - Writes go to a temporary file renamed into place, so concurrent loaders never see half a file.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use crate::function_cache::FunctionCache;

/// The SHA-256 of `bytes`.
pub(crate) fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// The wasmtime version the artifacts were compiled by (pinned in the workspace manifest; a test
/// checks it against `Cargo.lock`).
pub const WASMTIME_VERSION: &str = "48.0.10";

/// How a component was obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Loaded from a cached artifact.
    Hit,
    /// Compiled and stored.
    Miss,
    /// Compiled; a cached artifact existed but could not be loaded and was replaced.
    Replaced,
    /// Compiled without a cache.
    Uncached,
}

/// A directory of compiled artifacts.
#[derive(Clone, Debug)]
pub(crate) struct ComponentCache {
    dir: Option<PathBuf>,
    /// The engine's cache of compiled functions, flushed after each compile.
    functions: Option<Arc<FunctionCache>>,
}

/// Feeds a `Hash` value into SHA-256.
struct ShaHasher<'a>(&'a mut Sha256);

impl Hasher for ShaHasher<'_> {
    fn finish(&self) -> u64 {
        0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

impl ComponentCache {
    pub(crate) fn new(dir: Option<PathBuf>, functions: Option<Arc<FunctionCache>>) -> Self {
        Self { dir, functions }
    }

    /// The artifact file for the component whose bytes hash to `sha256` on this engine.
    pub(crate) fn key(engine: &Engine, sha256: &[u8; 32]) -> String {
        let mut sha = Sha256::new();
        sha.update(sha256);
        engine.precompile_compatibility_hash().hash(&mut ShaHasher(&mut sha));
        sha.update(WASMTIME_VERSION.as_bytes());
        hex::encode(sha.finalize())
    }

    /// Loads `wasm` as a component through the cache; `sha256` is the SHA-256 of `wasm`, computed
    /// once by whoever read the bytes (an agent lock checks the same digest).
    pub(crate) fn load(
        &self,
        engine: &Engine,
        wasm: &[u8],
        sha256: &[u8; 32],
    ) -> Result<(Component, CacheOutcome), wasmtime::Error> {
        let Some(dir) = &self.dir else {
            return Ok((Component::new(engine, wasm)?, CacheOutcome::Uncached));
        };
        let path = dir.join(format!("{}.cwasm", Self::key(engine, sha256)));
        let mut outcome = CacheOutcome::Miss;
        if path.exists() {
            // Read, not mapped: a mapped file truncated later by anyone would crash the process
            // (SIGBUS) while the component is in use.
            let loaded = std::fs::read(&path).map_err(wasmtime::Error::from).and_then(|bytes| {
                // SAFETY: the cache directory holds only artifacts this host wrote (see Caveats).
                unsafe { Component::deserialize(engine, &bytes) }
            });
            match loaded {
                Ok(component) => return Ok((component, CacheOutcome::Hit)),
                Err(error) => {
                    tracing::warn!(path = %path.display(), "cached component unusable, compiling again: {error:#}");
                    outcome = CacheOutcome::Replaced;
                }
            }
        }
        let artifact = engine.precompile_component(wasm);
        if let Some(functions) = &self.functions {
            functions.flush();
        }
        let artifact = artifact?;
        if let Err(error) = write_atomically(dir, &path, &artifact) {
            tracing::warn!(path = %path.display(), "cannot store the compiled component: {error}");
        }
        // SAFETY: `artifact` was produced by this engine a moment ago.
        let component = unsafe { Component::deserialize(engine, &artifact)? };
        Ok((component, outcome))
    }
}

pub(crate) fn write_atomically(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    // Unique per write: two loads of one component side by side in one process must not write
    // into the same temporary file.
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("artifact"),
        std::process::id(),
        WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wasmtime_version_is_the_one_locked() {
        let lock = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.lock")).unwrap();
        let locked = lock.split("[[package]]\nname = \"wasmtime\"\nversion = \"").nth(1).unwrap();
        assert_eq!(locked.split('"').next(), Some(WASMTIME_VERSION));
    }
}
