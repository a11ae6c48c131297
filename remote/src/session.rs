//! The session process: one per client connection, started fresh by the
//! worker (never forked from a process that initialised a GPU runtime),
//! speaking plain frames with the worker over its stdin and stdout. It is
//! the only process that touches a device, so a kernel that crashes it
//! takes down this session alone.

use crate::link::Link;
use crate::proto::{self, FrameError, Reply, Request, WireArg};
use crate::window::Window;
use rocmc_device::{BufferId, Device, ModuleId};
use std::collections::HashMap;
use std::io::{BufReader, BufWriter, Write};
use std::path::PathBuf;

/// What a missing possession key is checked as: 64 characters no key has
/// (keys are lower-case hex).
const NO_KEY: &str = "----------------------------------------------------------------";

/// How a session is limited and where it keeps modules.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// The worker's module cache (content-addressed).
    pub cache: PathBuf,
    /// Bytes the cache may hold; the least recently used modules go first.
    pub cache_limit: u64,
    /// Device memory the session may allocate, bytes.
    pub memory_limit: u64,
    /// Largest frame.
    pub max_frame: usize,
    /// Obey [`Request::Crash`] (tests only).
    pub allow_crash: bool,
}

/// One client's session: its device, its buffers (by the ids the client
/// chose) and modules (by content hash), its memory limit, and the first
/// error of its asynchronous requests. The worker runs one per process;
/// tests drive one in-process.
pub struct Session {
    cfg: SessionConfig,
    dev: Option<Box<dyn Device>>,
    /// Client id → the device's id, the size in bytes, and what the buffer
    /// counts against the memory limit ([`Device::footprint`]).
    bufs: HashMap<u32, (BufferId, u64, u64)>,
    /// Content hash → the device's module id.
    modules: HashMap<String, ModuleId>,
    used: u64,
    deferred: Option<SessionError>,
    /// This session's challenge for module possession proofs.
    challenge: String,
}

impl Session {
    /// A session with no device yet (the client's `Open` chooses it).
    pub fn new(cfg: SessionConfig) -> Session {
        Session {
            cfg,
            dev: None,
            challenge: challenge(),
            bufs: HashMap::new(),
            modules: HashMap::new(),
            used: 0,
            deferred: None,
        }
    }

    /// A session that has opened `device` of this machine (how tests drive
    /// the protocol in-process, as a worker's session process would).
    pub fn open(cfg: SessionConfig, device: &str) -> Result<Session, String> {
        let mut s = Session::new(cfg);
        match s.answer(Request::Open {
            device: device.into(),
        }) {
            Some(Reply::Error(e)) => Err(e),
            _ => Ok(s),
        }
    }

    /// Handles one request: `None` for an asynchronous one (its error is
    /// kept for the next synchronous request), else the reply.
    pub fn answer(&mut self, req: Request) -> Option<Reply> {
        let is_async = req.is_async();
        let result = self.handle(req);
        if is_async {
            if let Err(e) = result {
                self.deferred.get_or_insert(e);
            }
            return None;
        }
        Some(match (self.deferred.take(), result) {
            (Some(e), _) => Reply::Error(format!("an earlier asynchronous request failed: {e}")),
            (None, Ok(r)) => r,
            (None, Err(e)) => Reply::Error(e.to_string()),
        })
    }

    /// Writes `data` into the client's buffer `id` at byte `offset`, as an
    /// asynchronous request: a failure is kept for the next synchronous one.
    pub fn write(&mut self, id: u32, offset: u64, data: &[u8]) {
        let r = self.buffer(id).and_then(|(d, size)| {
            rocmc_device::in_range("writing", id, offset, data.len() as u64, size)?;
            Ok(self.dev()?.write(d, offset, data)?)
        });
        if let Err(e) = r {
            self.deferred.get_or_insert(e);
        }
    }

    /// Fills `out` from the client's buffer `id` at byte `offset`, part of a
    /// read that ends at byte `end` (checked whole); a synchronous request:
    /// an earlier asynchronous failure is reported first.
    pub fn read(&mut self, id: u32, offset: u64, end: u64, out: &mut [u8]) -> Reply {
        if let Some(e) = self.deferred.take() {
            return Reply::Error(format!("an earlier asynchronous request failed: {e}"));
        }
        let r = self.buffer(id).and_then(|(d, size)| {
            let whole = end.checked_sub(offset).ok_or_else(|| {
                SessionError::Request(format!("a read ending at byte {end} starts at {offset}"))
            })?;
            rocmc_device::in_range("reading", id, offset, whole, size)?;
            Ok(self.dev()?.read_into(d, offset, out)?)
        });
        match r {
            Ok(()) => Reply::Ok,
            Err(e) => Reply::Error(e.to_string()),
        }
    }

    fn dev(&mut self) -> Result<&mut dyn Device, SessionError> {
        match &mut self.dev {
            Some(d) => Ok(d.as_mut()),
            None => Err(SessionError::Request(
                "no device is open (send Open first)".into(),
            )),
        }
    }

    /// The device's id and size of the client's buffer `id`.
    fn buffer(&self, id: u32) -> Result<(BufferId, u64), SessionError> {
        self.bufs
            .get(&id)
            .map(|&(d, size, _)| (d, size))
            .ok_or_else(|| SessionError::Request(format!("buffer #{id} does not exist")))
    }

    fn module_path(&self, hash: &str) -> Result<PathBuf, SessionError> {
        if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(SessionError::Request(format!(
                "`{hash}` is not a SHA-256 in hex"
            )));
        }
        Ok(self.cfg.cache.join(format!("{hash}.module")))
    }

    fn handle(&mut self, r: Request) -> Result<Reply, SessionError> {
        match r {
            Request::Open { device } => {
                if self.dev.is_some() {
                    return Err(SessionError::Request(
                        "the session already has a device".into(),
                    ));
                }
                self.dev = Some(crate::device::open_local(&device)?);
                Ok(Reply::Opened {
                    challenge: self.challenge.clone(),
                })
            }
            Request::HasModule { hash, proof } => {
                Ok(Reply::Has(self.proven_module(&hash, &proof)?.is_some()))
            }
            Request::LoadModule { hash, proof, bytes } => {
                let (bytes, written) = match bytes {
                    Some(b) => {
                        let written = self.cache_module(&hash, &b)?;
                        (b, written)
                    }
                    None => (
                        self.proven_module(&hash, &proof)?.ok_or_else(|| {
                            SessionError::Request(format!(
                                "module {hash} is not in the worker's cache (send its bytes)"
                            ))
                        })?,
                        None,
                    ),
                };
                match self.dev()?.load_module(&bytes) {
                    Ok(id) => {
                        self.modules.insert(hash, id);
                        Ok(Reply::Ok)
                    }
                    Err(e) => {
                        // A module the device refuses is not kept for anyone.
                        if let Some(path) = written {
                            let _ = std::fs::remove_file(path.with_extension("key"));
                            let _ = std::fs::remove_file(path);
                        }
                        Err(e.into())
                    }
                }
            }
            Request::Alloc { id, bytes } => {
                if self.bufs.contains_key(&id) {
                    return Err(SessionError::Request(format!(
                        "buffer #{id} already exists"
                    )));
                }
                // What the device takes, not what was asked: the CPU's guard
                // bands made 4,000 empty buffers 518 MB under a 64 MiB limit.
                let takes = self.dev()?.footprint(bytes);
                if self.used.saturating_add(takes) > self.cfg.memory_limit {
                    let with = if takes == bytes {
                        String::new()
                    } else {
                        format!(" ({takes} with what the device adds around a buffer)")
                    };
                    return Err(SessionError::Request(format!(
                        "allocating {bytes} bytes{with} would exceed the session's memory limit of {} bytes ({} in use)",
                        self.cfg.memory_limit, self.used
                    )));
                }
                let d = self.dev()?.alloc(bytes)?;
                self.bufs.insert(id, (d, bytes, takes));
                self.used += takes;
                Ok(Reply::Ok)
            }
            Request::Write { .. } | Request::Read { .. } => Err(SessionError::Request(
                "a Write's or Read's bytes travel beside its frame: the worker hands them to the session through its transfer window".into(),
            )),
            Request::Fill { id, dtype, seed } => {
                let (d, _) = self.buffer(id)?;
                rocmc_device::known_dtype(&dtype)?;
                self.dev()?.fill(d, &dtype, seed)?;
                Ok(Reply::Ok)
            }
            Request::Free { id } => {
                let (d, _) = self.buffer(id)?;
                self.dev()?.free(d)?;
                if let Some((_, _, takes)) = self.bufs.remove(&id) {
                    self.used -= takes;
                }
                Ok(Reply::Ok)
            }
            Request::Launch {
                module,
                kernel,
                args,
            } => {
                let (m, a) = self.launch_of(&module, args)?;
                self.dev()?.launch(&m, &kernel, &a)?;
                Ok(Reply::Ok)
            }
            Request::Time {
                module,
                kernel,
                args,
                warmup,
                reps,
            } => {
                rocmc_device::launch_count(warmup, reps)?;
                let (m, a) = self.launch_of(&module, args)?;
                let t = self.dev()?.time(&m, &kernel, &a, warmup, reps);
                Ok(Reply::Times(t?))
            }
            Request::Sync => {
                self.dev()?.synchronize()?;
                Ok(Reply::Ok)
            }
            Request::Crash => {
                if self.cfg.allow_crash {
                    std::process::abort();
                }
                Err(SessionError::Request(
                    "this worker does not obey crash requests".into(),
                ))
            }
        }
    }

    /// The cached module `hash`, if the client proved it holds its bytes
    /// (`proof`, [`proto::possession`] under this session's challenge);
    /// `None` alike for a module not cached and a wrong proof.
    fn proven_module(&self, hash: &str, proof: &str) -> Result<Option<Vec<u8>>, SessionError> {
        let path = self.module_path(hash)?;
        // The proof is checked against the module's key, never its bytes:
        // the same work whether or not the module is cached (a missing key
        // checks against one no proof matches), so timing tells nothing.
        let key = std::fs::read_to_string(path.with_extension("key"))
            .ok()
            .filter(|k| k.len() == 64);
        let proven = crate::tls::secrets_match(
            &proto::possession_by_key(&self.challenge, key.as_deref().unwrap_or(NO_KEY)),
            proof,
        ) && key.is_some();
        // Only a proven module is read, and its bytes still checked: one
        // that fails is dropped, to be sent again.
        let found = proven
            .then(|| std::fs::read(&path).ok())
            .flatten()
            .filter(|b| proto::content_hash(b) == hash);
        if proven && found.is_none() {
            let _ = std::fs::remove_file(path.with_extension("key"));
            let _ = std::fs::remove_file(&path);
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

    /// Removes the least recently used modules until the cache holds at
    /// most its limit, keeping `keep` (the module just written).
    fn evict(&self, keep: &std::path::Path) {
        let Ok(dir) = std::fs::read_dir(&self.cfg.cache) else {
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
            if total <= self.cfg.cache_limit {
                break;
            }
            if path != keep && std::fs::remove_file(&path).is_ok() {
                let _ = std::fs::remove_file(path.with_extension("key"));
                total -= len;
            }
        }
    }

    /// Checks `bytes` against `hash` and keeps them in the worker's cache,
    /// readable by the worker's user only; the path, when this call wrote
    /// it (`None`: already cached).
    fn cache_module(&self, hash: &str, bytes: &[u8]) -> Result<Option<PathBuf>, SessionError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        if proto::content_hash(bytes) != hash {
            return Err(SessionError::Request(
                "the module's bytes do not match its hash".into(),
            ));
        }
        let path = self.module_path(hash)?;
        // Kept with its key: done. (A module an older worker cached has
        // none, and is written again with one.)
        if path.exists() && path.with_extension("key").exists() {
            return Ok(None);
        }
        // A module larger than the whole cache is loaded, not kept.
        if bytes.len() as u64 > self.cfg.cache_limit {
            return Ok(None);
        }
        // Written under a temporary name, then renamed: another session
        // never sees half a module. Its possession key first: a module
        // without one is never served.
        let write = |to: &std::path::Path, data: &[u8]| {
            let tmp = to.with_extension(format!("tmp{}", std::process::id()));
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)
                .and_then(|mut f| f.write_all(data))
                .and_then(|_| std::fs::rename(&tmp, to))
                .map_err(|source| SessionError::Cache {
                    path: to.to_path_buf(),
                    source,
                })
        };
        write(
            &path.with_extension("key"),
            proto::possession_key(bytes).as_bytes(),
        )?;
        write(&path, bytes)?;
        self.evict(&path);
        Ok(Some(path))
    }

    /// The device's module id for `hash`, and `args` with the device's
    /// buffer ids (each buffer checked to hold what the argument claims).
    fn launch_of(
        &self,
        hash: &str,
        args: Vec<WireArg>,
    ) -> Result<(ModuleId, Vec<WireArg>), SessionError> {
        let m = self.modules.get(hash).cloned().ok_or_else(|| {
            SessionError::Request(format!("module {hash} is not loaded in this session"))
        })?;
        let args = args
            .into_iter()
            .map(|a| match a {
                WireArg::Buffer {
                    id,
                    dtype,
                    len,
                    offset,
                } => {
                    let (d, size) = self.buffer(id)?;
                    let (_, elem) = rocmc_device::known_dtype(&dtype)?;
                    let end = len.checked_add(offset);
                    if end
                        .and_then(|n| n.checked_mul(elem as u64))
                        .is_none_or(|n| n > size)
                    {
                        return Err(SessionError::Request(format!(
                            "buffer #{id} holds {size} bytes, not {len} {dtype} from element {offset} on"
                        )));
                    }
                    Ok(WireArg::Buffer {
                        id: d,
                        dtype,
                        len,
                        offset,
                    })
                }
                other => Ok(other),
            })
            .collect::<Result<_, SessionError>>()?;
        Ok((m, args))
    }
}

/// 32 random bytes from the system, in hex.
fn challenge() -> String {
    use std::io::Read;
    let mut b = [0u8; 32];
    // Without /dev/urandom: the time and the process id, guessable; the
    // worker runs on Linux, where it is always there.
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_err()
    {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        b[..16].copy_from_slice(&t.to_le_bytes());
        b[16..20].copy_from_slice(&std::process::id().to_le_bytes());
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Why a request failed. The client gets its message; the kinds keep
/// apart the device's own errors, requests the session's state refuses,
/// and the worker's module cache.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The device refused or failed the operation.
    #[error(transparent)]
    Device(#[from] rocmc_device::Error),
    /// The request does not fit the session: no device open, an unknown
    /// buffer or module, a limit reached.
    #[error("{0}")]
    Request(String),
    /// The module could not be written to the worker's cache.
    #[error("caching the module at {}: {source}", path.display())]
    Cache {
        /// Where the module was being written.
        path: PathBuf,
        /// What the file system said.
        source: std::io::Error,
    },
}

/// Serves one session over stdin/stdout until the worker closes stdin,
/// moving buffer bytes through the transfer window the worker handed over.
pub fn run(cfg: SessionConfig) -> Result<(), FrameError> {
    // Confined before anything of the client's runs (see `confine`), and
    // while this process has one thread, so every later thread is too.
    let scratch = tempfile::Builder::new().prefix("rocmc-session").tempdir()?;
    std::env::set_var("TMPDIR", scratch.path());
    let state = cfg.cache.parent().unwrap_or(&cfg.cache);
    crate::confine::confine(state, scratch.path()).map_err(|e| {
        eprintln!("rocmc-worker: session: {e}");
        FrameError::Io(std::io::Error::other(e))
    })?;
    let mut input = BufReader::new(std::io::stdin().lock());
    let mut output = BufWriter::new(std::io::stdout().lock());
    let mut window = Window::inherited(crate::window::SLOT)?;
    let mut s = Session::new(cfg.clone());
    loop {
        let msg: Link = match proto::recv(&mut input, cfg.max_frame) {
            Ok(r) => r,
            Err(FrameError::Closed) => return Ok(()),
            Err(e) => {
                // A frame the session cannot read ends it, with the reason.
                proto::send(&mut output, &Reply::Error(e.to_string()))?;
                output.flush()?;
                return Err(e);
            }
        };
        let reply = match msg {
            Link::Request(r) => match s.answer(r) {
                Some(reply) => reply,
                None => continue,
            },
            Link::WriteSlot {
                id,
                offset,
                len,
                slot,
            } => {
                let data = slot_part(&mut window, slot, len)?;
                s.write(id, offset, data);
                Reply::Ok
            }
            Link::ReadSlot {
                id,
                offset,
                len,
                end,
                slot,
            } => {
                let out = slot_part(&mut window, slot, len)?;
                s.read(id, offset, end, out)
            }
        };
        proto::send(&mut output, &reply)?;
        output.flush()?;
    }
}

/// The first `len` bytes of window slot `slot` (the worker never names
/// more than a slot; a message that does is malformed).
fn slot_part(w: &mut Window, slot: u32, len: u64) -> Result<&mut [u8], FrameError> {
    let n = usize::try_from(len).unwrap_or(usize::MAX);
    if n > w.slot_len() {
        return Err(FrameError::Malformed(format!(
            "a part of {len} bytes is over the window's slot of {}",
            w.slot_len()
        )));
    }
    Ok(&mut w.slot(slot as usize)[..n])
}
