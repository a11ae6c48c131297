//! The session process: one per client connection, started fresh by the
//! worker (never forked from a process that initialised a GPU runtime),
//! speaking plain frames with the worker over a channel of its own
//! ([`crate::link::REQUEST_FD`], [`crate::link::REPLY_FD`]; its standard
//! output is only logged). It is the only process that touches a device,
//! so a kernel that crashes it takes down this session alone. It keeps no
//! files: the worker hands it each module's bytes.

use crate::link::Link;
use crate::proto::{self, FrameError, Reply, Request, WireArg};
use crate::window::Window;
use rocmc_device::{BufferId, Device, ModuleId};
use std::collections::HashMap;
use std::io::{BufReader, BufWriter, Write};
use std::path::PathBuf;

/// How a session is limited and what its sandbox hides.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// The worker's state folder (identity and module cache), out of the
    /// session's reach.
    pub state: PathBuf,
    /// Device memory the session may allocate, bytes.
    pub memory_limit: u64,
    /// Largest frame.
    pub max_frame: usize,
    /// Obey [`Request::Crash`] (tests only).
    pub allow_crash: bool,
    /// Opens a device of this machine by name (`rocmc_runtime::open_local`
    /// in the worker): the devices a worker serves are the runtimes it
    /// was built with.
    pub open: fn(&str) -> rocmc_device::Result<Box<dyn Device>>,
}

/// One client's session: its device, its buffers (by the ids the client
/// chose) and modules (by the content hash the worker checked), its memory
/// limit, and the first error of its asynchronous requests. The worker
/// runs one per process; tests drive one in-process.
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
}

impl Session {
    /// A session with no device yet (the client's `Open` chooses it).
    pub fn new(cfg: SessionConfig) -> Session {
        Session {
            cfg,
            dev: None,
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

    fn handle(&mut self, r: Request) -> Result<Reply, SessionError> {
        match r {
            Request::Open { device } => {
                if self.dev.is_some() {
                    return Err(SessionError::Request(
                        "the session already has a device".into(),
                    ));
                }
                self.dev = Some((self.cfg.open)(&device)?);
                // The challenge is the worker's, which keeps the cache.
                Ok(Reply::Opened {
                    challenge: String::new(),
                })
            }
            // The worker answers these from its cache: a session has none.
            Request::HasModule { .. } => Ok(Reply::Has(false)),
            Request::LoadModule { hash, bytes, .. } => {
                let bytes = bytes.ok_or_else(|| {
                    SessionError::Request(
                        "a session loads a module from its bytes (the worker keeps the cache)"
                            .into(),
                    )
                })?;
                // Checked here too (the worker checked what it cached): a
                // module is known by its hash in this session as well.
                if proto::content_hash(&bytes) != hash {
                    return Err(SessionError::Request(
                        "the module's bytes do not match its hash".into(),
                    ));
                }
                let id = self.dev()?.load_module(&bytes)?;
                self.modules.insert(hash, id);
                Ok(Reply::Ok)
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

/// Why a request failed. The client gets its message; the kinds keep
/// apart the device's own errors and requests the session's state refuses.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The device refused or failed the operation.
    #[error(transparent)]
    Device(#[from] rocmc_device::Error),
    /// The request does not fit the session: no device open, an unknown
    /// buffer or module, a limit reached.
    #[error("{0}")]
    Request(String),
}

/// Serves one session over its channel until the worker closes it, moving
/// buffer bytes through the transfer window the worker handed over.
pub fn run(cfg: SessionConfig) -> Result<(), FrameError> {
    let (input, output) = crate::link::inherited()?;
    // Confined before anything of the client's runs (see `confine`), and
    // while this process has one thread, so every later thread is too.
    let scratch = tempfile::Builder::new().prefix("rocmc-session").tempdir()?;
    std::env::set_var("TMPDIR", scratch.path());
    // CUDA's JIT cache, in the session's scratch: a cache shared between
    // sessions would let one plant machine code for another's PTX.
    std::env::set_var("CUDA_CACHE_PATH", scratch.path().join("cuda-cache"));
    crate::confine::confine(&cfg.state, scratch.path()).map_err(|e| {
        eprintln!("rocmc-worker: session: {e}");
        FrameError::Io(std::io::Error::other(e))
    })?;
    let mut input = BufReader::new(input);
    let mut output = BufWriter::new(output);
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
