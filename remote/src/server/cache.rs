//! The module cache, kept by the worker alone. Sessions never see it (their
//! sandbox hides the whole state folder): the worker checks a client's
//! possession proof, reads the module and hands its bytes to the session,
//! so one client's host code cannot list, read, plant or delete another
//! client's modules.

use crate::proto;
use std::path::{Path, PathBuf};

/// What a missing possession key is checked as: 64 characters no key has
/// (keys are lower-case hex).
const NO_KEY: &str = "----------------------------------------------------------------";

/// A content-addressed folder of modules (`HASH.module`, with its
/// possession key in `HASH.key`), bounded in bytes.
pub(super) struct ModuleCache {
    dir: PathBuf,
    limit: u64,
}

impl ModuleCache {
    pub(super) fn new(dir: PathBuf, limit: u64) -> ModuleCache {
        ModuleCache { dir, limit }
    }

    fn path(&self, hash: &str) -> Result<PathBuf, String> {
        if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("`{hash}` is not a SHA-256 in hex"));
        }
        Ok(self.dir.join(format!("{hash}.module")))
    }

    /// The cached module `hash`, if the client proved it holds its bytes
    /// (`proof`, [`proto::possession`] under the connection's
    /// `challenge`); `None` alike for a module not cached and a wrong proof.
    pub(super) fn proven(
        &self,
        hash: &str,
        proof: &str,
        challenge: &str,
    ) -> Result<Option<Vec<u8>>, String> {
        let path = self.path(hash)?;
        // The proof is checked against the module's key, never its bytes:
        // the same work whether or not the module is cached (a missing key
        // checks against one no proof matches), so timing tells nothing.
        let key = std::fs::read_to_string(path.with_extension("key"))
            .ok()
            .filter(|k| k.len() == 64);
        let proven = crate::tls::secrets_match(
            &proto::possession_by_key(challenge, key.as_deref().unwrap_or(NO_KEY)),
            proof,
        ) && key.is_some();
        // Only a proven module is read, and its bytes still checked: one
        // that fails is dropped, to be sent again.
        let found = proven
            .then(|| std::fs::read(&path).ok())
            .flatten()
            .filter(|b| proto::content_hash(b) == hash);
        if proven && found.is_none() {
            self.forget(&path);
        }
        if found.is_some() {
            // Used now: the last to be evicted.
            let _ = std::fs::File::options()
                .write(true)
                .open(&path)
                .and_then(|f| f.set_modified(std::time::SystemTime::now()));
        }
        Ok(found)
    }

    /// Checks `bytes` against `hash` and keeps them, readable by the
    /// worker's user only; the path, when this call wrote it (`None`:
    /// already cached, or larger than the whole cache).
    pub(super) fn keep(&self, hash: &str, bytes: &[u8]) -> Result<Option<PathBuf>, String> {
        if proto::content_hash(bytes) != hash {
            return Err("the module's bytes do not match its hash".into());
        }
        let path = self.path(hash)?;
        // Kept with its key: done. (A module an older worker cached has
        // none, and is written again with one.)
        if path.exists() && path.with_extension("key").exists() {
            return Ok(None);
        }
        if bytes.len() as u64 > self.limit {
            return Ok(None);
        }
        // Written under a temporary name, then renamed: a concurrent
        // connection never reads half a module. Its possession key first:
        // a module without one is never served.
        let write = |to: &Path, data: &[u8]| {
            use std::io::Write;
            tempfile::NamedTempFile::new_in(&self.dir)
                .and_then(|mut f| f.write_all(data).map(|_| f))
                .and_then(|f| f.persist(to).map_err(|e| e.error))
                .map_err(|e| format!("caching the module at {}: {e}", to.display()))
        };
        write(
            &path.with_extension("key"),
            proto::possession_key(bytes).as_bytes(),
        )?;
        write(&path, bytes)?;
        self.evict(&path);
        Ok(Some(path))
    }

    /// Removes a module and its key (one the device refused, or whose
    /// bytes no longer match).
    pub(super) fn forget(&self, path: &Path) {
        let _ = std::fs::remove_file(path.with_extension("key"));
        let _ = std::fs::remove_file(path);
    }

    /// Removes the least recently used modules until the cache holds at
    /// most its limit, keeping `keep` (the module just written).
    fn evict(&self, keep: &Path) {
        let Ok(dir) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut files: Vec<(std::time::SystemTime, u64, PathBuf)> = dir
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "module"))
            .filter_map(|e| {
                let m = e.metadata().ok()?;
                Some((m.modified().ok()?, m.len(), e.path()))
            })
            .collect();
        let mut total: u64 = files.iter().map(|f| f.1).sum();
        files.sort();
        for (_, len, path) in files {
            if total <= self.limit {
                break;
            }
            if path != keep && std::fs::remove_file(&path).is_ok() {
                let _ = std::fs::remove_file(path.with_extension("key"));
                total -= len;
            }
        }
    }
}
