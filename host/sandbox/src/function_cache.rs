//! The on-disk cache of compiled functions, beneath the component cache.
//!
//! Tools in one language share most of their code: every Python tool embeds the same CPython,
//! every StarlingMonkey tool the same JavaScript engine. A new component of a language seen
//! before misses the component cache (its bytes differ), yet most of its functions were compiled
//! already. Cranelift's incremental cache keys each function by its code and the compiler's
//! settings, so those functions are read back instead of compiled again: the second Python tool
//! compiles its own functions, not the interpreter. (Go tools share little: the Go linker lays
//! out each program anew.)
//!
//! The functions one compile adds are written after it as one **pack** file (a file per function
//! cost about as much to create as a small function costs to compile): a header, a table of
//! `(key digest, offset, length)` and then the entries, each the SHA-256 of its value followed by
//! the value. A compile reads the tables of every pack (about 50 bytes per function) when it
//! first looks a function up, and each entry it uses when it uses it. An entry whose digest does
//! not match (torn, flipped) is a miss: the function is compiled and goes into the next pack,
//! which, being newer, wins over the damaged one. A pack whose table does not read is skipped.
//!
//! # Caveats
//! - As for the component cache, entries are native code used without validation: the directory
//!   must be writable only by the host's user.
//! - Nothing is ever removed: a directory that grows too large can be deleted at any time, at the
//!   cost of compiling again.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use wasmtime::CacheStore;

use crate::cache::{sha256, write_atomically};

/// The first bytes of a pack.
const MAGIC: &[u8; 16] = b"tollgate-fns-v1\n";

/// A table row: the key's digest, the entry's offset and its length.
const ROW: usize = 32 + 8 + 4;

/// Compiled functions stored as packs in one directory.
#[derive(Debug)]
pub(crate) struct FunctionCache {
    dir: PathBuf,
    /// The packs' tables, read at the first lookup after a flush (other processes may have
    /// written packs since).
    index: Mutex<Option<Arc<Index>>>,
    /// Compiled since the last flush: key digest and entry (digest of the value, then the value).
    pending: Mutex<Vec<([u8; 32], Vec<u8>)>>,
}

/// Where each function is: which pack, at what offset, how long.
#[derive(Debug, Default)]
struct Index {
    packs: Vec<File>,
    entries: HashMap<[u8; 32], (usize, u64, u32)>,
}

impl FunctionCache {
    pub(crate) fn new(dir: PathBuf) -> Self {
        Self { dir, index: Mutex::default(), pending: Mutex::default() }
    }

    /// Writes the functions compiled since the last flush as one pack. A pack that cannot be
    /// written is logged: its functions are compiled again next time.
    pub(crate) fn flush(&self) {
        let pending = std::mem::take(&mut *lock(&self.pending));
        *lock(&self.index) = None;
        if pending.is_empty() {
            return;
        }
        let bytes = pack(&pending);
        let name = format!("{}.pack", hex::encode(sha256(&bytes)));
        if let Err(error) = write_atomically(&self.dir, &self.dir.join(name), &bytes) {
            tracing::warn!(dir = %self.dir.display(), "cannot store compiled functions: {error}");
        }
    }

    fn index(&self) -> Arc<Index> {
        lock(&self.index).get_or_insert_with(|| Arc::new(Index::read(&self.dir))).clone()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The bytes of a pack of `entries`.
fn pack(entries: &[([u8; 32], Vec<u8>)]) -> Vec<u8> {
    let table = MAGIC.len() + 4 + entries.len() * ROW;
    let mut bytes = Vec::with_capacity(table + entries.iter().map(|(_, e)| e.len()).sum::<usize>());
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    let mut offset = table as u64;
    for (key, entry) in entries {
        bytes.extend_from_slice(key);
        bytes.extend_from_slice(&offset.to_le_bytes());
        bytes.extend_from_slice(&(entry.len() as u32).to_le_bytes());
        offset += entry.len() as u64;
    }
    for (_, entry) in entries {
        bytes.extend_from_slice(entry);
    }
    bytes
}

impl Index {
    /// The tables of every pack in `dir`, oldest first, so that a newer entry wins.
    fn read(dir: &Path) -> Self {
        let mut packs: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|e| e == "pack"))
            .filter_map(|path| Some((path.metadata().ok()?.modified().ok()?, path)))
            .collect();
        packs.sort();
        let mut index = Index::default();
        for (_, path) in packs {
            if let Err(error) = index.add(&path) {
                tracing::warn!(pack = %path.display(), "unreadable pack of compiled functions, skipped: {error}");
            }
        }
        index
    }

    fn add(&mut self, path: &Path) -> std::io::Result<()> {
        let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
        let mut file = File::open(path)?;
        let size = file.metadata()?.len();
        let mut head = [0u8; MAGIC.len() + 4];
        file.read_exact(&mut head)?;
        if head[..MAGIC.len()] != MAGIC[..] {
            return Err(bad("not a pack"));
        }
        let count = u32::from_le_bytes(head[MAGIC.len()..].try_into().unwrap()) as usize;
        if (head.len() + count * ROW) as u64 > size {
            return Err(bad("its table is longer than the file"));
        }
        let mut table = vec![0u8; count * ROW];
        file.read_exact(&mut table)?;
        let pack = self.packs.len();
        let mut rows = Vec::with_capacity(count);
        for row in table.chunks_exact(ROW) {
            let offset = u64::from_le_bytes(row[32..40].try_into().unwrap());
            let len = u32::from_le_bytes(row[40..].try_into().unwrap());
            if offset.checked_add(u64::from(len)).is_none_or(|end| end > size) {
                return Err(bad("an entry ends past the end of the file"));
            }
            rows.push((row[..32].try_into().unwrap(), (pack, offset, len)));
        }
        // All or nothing: no entry of a pack refused.
        self.entries.extend(rows);
        self.packs.push(file);
        Ok(())
    }

    /// The value stored for `key`, if its entry reads whole.
    fn get(&self, key: &[u8; 32]) -> Option<Vec<u8>> {
        let (pack, offset, len) = *self.entries.get(key)?;
        let mut entry = vec![0u8; len as usize];
        self.packs[pack].read_exact_at(&mut entry, offset).ok()?;
        if entry.len() < 32 || entry[..32] != sha256(&entry[32..]) {
            tracing::debug!(key = hex::encode(key), "cached function damaged, compiling again");
            return None;
        }
        entry.drain(..32);
        Some(entry)
    }
}

impl CacheStore for FunctionCache {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        self.index().get(&sha256(key)).map(Cow::Owned)
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        let mut entry = Vec::with_capacity(32 + value.len());
        entry.extend_from_slice(&sha256(&value));
        entry.extend_from_slice(&value);
        lock(&self.pending).push((sha256(key), entry));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packs(dir: &Path) -> Vec<PathBuf> {
        let mut packs: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        packs.sort();
        packs
    }

    #[test]
    fn functions_read_back_after_a_flush_from_one_pack_and_the_newest_entry_wins() {
        let dir = tempfile::tempdir().unwrap();
        let cache = FunctionCache::new(dir.path().join("functions"));
        assert!(cache.get(b"a").is_none(), "nothing stored yet");
        assert!(cache.insert(b"a", b"code of a".to_vec()) && cache.insert(b"b", b"code of b".to_vec()));
        assert!(cache.get(b"a").is_none(), "written when flushed");
        cache.flush();
        assert_eq!(packs(&dir.path().join("functions")).len(), 1, "one file for the compile");
        assert_eq!(cache.get(b"a").as_deref(), Some(&b"code of a"[..]));
        assert_eq!(cache.get(b"b").as_deref(), Some(&b"code of b"[..]));
        assert!(cache.get(b"c").is_none());

        // Another process's cache, on the same directory, sees the pack and adds its own.
        let other = FunctionCache::new(dir.path().join("functions"));
        assert_eq!(other.get(b"b").as_deref(), Some(&b"code of b"[..]));
        std::thread::sleep(std::time::Duration::from_millis(20));
        other.insert(b"b", b"code of b, again".to_vec());
        other.flush();
        cache.flush();
        assert_eq!(cache.get(b"b").as_deref(), Some(&b"code of b, again"[..]), "the newer pack wins");
        assert_eq!(cache.get(b"a").as_deref(), Some(&b"code of a"[..]));
    }

    #[test]
    fn a_damaged_entry_is_a_miss_and_a_damaged_pack_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let functions = dir.path().join("functions");
        let cache = FunctionCache::new(functions.clone());
        cache.insert(b"a", b"code of a".to_vec());
        cache.insert(b"b", b"code of b".to_vec());
        cache.flush();
        let pack = packs(&functions).remove(0);
        let mut bytes = std::fs::read(&pack).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1; // in b's value
        std::fs::write(&pack, &bytes).unwrap();
        cache.flush();
        assert_eq!(cache.get(b"a").as_deref(), Some(&b"code of a"[..]));
        assert!(cache.get(b"b").is_none(), "a flipped byte");

        for damaged in [&bytes[..bytes.len() - 3], &bytes[..20], &b"not a pack at all"[..], &[][..]] {
            std::fs::write(&pack, damaged).unwrap();
            cache.flush();
            assert!(cache.get(b"a").is_none() && cache.get(b"b").is_none(), "{} bytes", damaged.len());
        }
        cache.insert(b"b", b"compiled again".to_vec());
        cache.flush();
        assert_eq!(cache.get(b"b").as_deref(), Some(&b"compiled again"[..]));
    }
}
