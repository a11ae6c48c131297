//! One device interface over every runtime: a worker's device through
//! [`RemoteDevice`](crate::RemoteDevice), or this machine's `cpu`, `cuda:N`
//! or `amdgpu:N` through [`LocalDevice`], which runs the worker's session
//! code in this process. Both speak the same [`Request`]s, so a caller (the
//! tuner, `rocmc run`) handles every device the same way, with the same
//! launch checks before anything runs.

use crate::client::{RemoteError, Result};
use crate::proto::{self, DeviceInfo, Reply, Request, WireArg};
use crate::session::{Session, SessionConfig};
use rocmc_linker::launch::{ArgRole, ArgValue, KernelLaunch, LaunchInfo};

/// A device that loads modules, holds buffers and runs kernels.
///
/// Asynchronous calls (alloc, write, fill, free, launch) may be queued;
/// their errors are reported by the next synchronous call.
pub trait Device {
    /// What the device is and which target to compile for.
    fn info(&self) -> &DeviceInfo;
    /// Sends `r` (after anything queued) and waits for its reply.
    fn request(&mut self, r: Request) -> Result<Reply>;
    /// Queues an asynchronous request.
    fn post(&mut self, r: Request) -> Result<()>;
    /// A fresh buffer id.
    fn new_id(&mut self) -> u32;

    /// Loads a module (code object, PTX or shared object), sending its
    /// bytes only if the device does not have them cached. Returns its hash.
    fn load_module(&mut self, bytes: &[u8]) -> Result<String> {
        let hash = proto::content_hash(bytes);
        let cached = matches!(
            self.request(Request::HasModule { hash: hash.clone() })?,
            Reply::Has(true)
        );
        self.request(Request::LoadModule {
            hash: hash.clone(),
            bytes: (!cached).then(|| bytes.to_vec()),
        })?;
        Ok(hash)
    }

    /// Allocates a zeroed buffer of `bytes` bytes (asynchronous).
    fn alloc(&mut self, bytes: u64) -> Result<u32> {
        let id = self.new_id();
        self.post(Request::Alloc { id, bytes })?;
        Ok(id)
    }

    /// The most bytes one `Write` or `Read` carries: a frame of the
    /// worker's limit, less its framing.
    fn chunk(&self) -> usize {
        usize::MAX
    }

    /// Writes `data` at the start of buffer `id` (asynchronous), in parts
    /// of at most [`Device::chunk`] bytes.
    fn write(&mut self, id: u32, data: &[u8]) -> Result<()> {
        let c = self.chunk().max(1);
        if data.is_empty() {
            return self.post(Request::Write {
                id,
                offset: 0,
                data: Vec::new(),
            });
        }
        for (i, part) in data.chunks(c).enumerate() {
            self.post(Request::Write {
                id,
                offset: (i * c) as u64,
                data: part.to_vec(),
            })?;
        }
        Ok(())
    }

    /// Fills buffer `id` with seeded random `dtype` values on the device's
    /// host (asynchronous).
    fn fill(&mut self, id: u32, dtype: &str, seed: u64) -> Result<()> {
        self.post(Request::Fill {
            id,
            dtype: dtype.into(),
            seed,
        })
    }

    /// Frees buffer `id` (asynchronous).
    fn free(&mut self, id: u32) -> Result<()> {
        self.post(Request::Free { id })
    }

    /// Reads buffer `id`.
    fn read(&mut self, id: u32) -> Result<Vec<u8>> {
        let c = self.chunk().max(1) as u64;
        let mut out = Vec::new();
        loop {
            let r = self.request(Request::Read {
                id,
                offset: out.len() as u64,
                len: c,
            })?;
            match r {
                Reply::Data(d) => {
                    // The last part is short (empty, if the size is a multiple).
                    let last = (d.len() as u64) < c;
                    out.extend_from_slice(&d);
                    if last {
                        return Ok(out);
                    }
                }
                other => return Err(unexpected(self.info(), other)),
            }
        }
    }

    /// Waits for everything sent; reports an earlier asynchronous failure.
    fn sync(&mut self) -> Result<()> {
        self.request(Request::Sync).map(|_| ())
    }

    /// Launches `kernel` of module `hash` (asynchronous), after checking the
    /// arguments against `info` here.
    fn launch(
        &mut self,
        hash: &str,
        info: &LaunchInfo,
        kernel: &str,
        args: Vec<WireArg>,
    ) -> Result<()> {
        check_launch(info, kernel, &args)?;
        self.post(Request::Launch {
            module: hash.into(),
            kernel: kernel.into(),
            args,
        })
    }

    /// Times `reps` launches (after `warmup`) with the device's clock; ms each.
    fn time(
        &mut self,
        hash: &str,
        info: &LaunchInfo,
        kernel: &str,
        args: Vec<WireArg>,
        warmup: u32,
        reps: u32,
    ) -> Result<Vec<f64>> {
        check_launch(info, kernel, &args)?;
        match self.request(Request::Time {
            module: hash.into(),
            kernel: kernel.into(),
            args,
            warmup,
            reps,
        })? {
            Reply::Times(t) => Ok(t),
            other => Err(unexpected(self.info(), other)),
        }
    }
}

fn unexpected(d: &DeviceInfo, r: Reply) -> RemoteError {
    RemoteError::Worker {
        addr: d.name.clone(),
        message: format!("unexpected reply {r:?}"),
    }
}

/// A kernel's arguments on the wire: each argument of the launch document
/// matched by name to the kernel's tensors (buffer `ids[i]`, `host[i]`'s
/// length), sizes and parameters (8-byte slots of `pbytes`).
pub fn wire_args(
    k: &rocmc_ir::Kernel,
    kl: &KernelLaunch,
    ids: &[u32],
    host: &[Vec<u8>],
    sizes: &[i64],
    pbytes: &[u8],
) -> std::result::Result<Vec<WireArg>, String> {
    let find = |what: &str, i: Option<usize>, name: &str| {
        i.ok_or_else(|| format!("the launch document names {what} `{name}` the kernel lacks"))
    };
    kl.args
        .iter()
        .map(|a| {
            Ok(match a.role {
                ArgRole::Buffer => {
                    let i = find(
                        "tensor",
                        k.tensors.iter().position(|t| t.name == a.name),
                        &a.name,
                    )?;
                    let t = &k.tensors[i];
                    WireArg::Buffer {
                        id: ids[i],
                        dtype: t.dtype.name().into(),
                        len: (host[i].len() / t.dtype.size()) as u64,
                    }
                }
                ArgRole::Size => {
                    let i = find(
                        "size",
                        k.sizes.iter().position(|s| s.name == a.name),
                        &a.name,
                    )?;
                    WireArg::Size(sizes[i] as i32)
                }
                ArgRole::Scalar => {
                    let i = find(
                        "parameter",
                        k.params.iter().position(|p| p.name == a.name),
                        &a.name,
                    )?;
                    let t = k.params[i].dtype;
                    WireArg::Scalar {
                        dtype: t.name().into(),
                        bytes: pbytes[i * 8..i * 8 + t.size()].to_vec(),
                    }
                }
            })
        })
        .collect()
}

/// The launch checks every runtime does, done before anything is sent.
pub fn check_launch(info: &LaunchInfo, kernel: &str, args: &[WireArg]) -> Result<()> {
    let refuse = |reason: String| RemoteError::BadLaunch {
        kernel: kernel.into(),
        reason,
    };
    let kl = info
        .kernels
        .iter()
        .find(|k| k.name == kernel)
        .ok_or_else(|| refuse("the module has no such kernel".into()))?;
    let dtype = |d: &str| rocmc_linker::launch::dtype(d).map_or("unknown", |(n, _)| n);
    let values: Vec<ArgValue> = args
        .iter()
        .map(|a| match a {
            WireArg::Buffer { dtype: d, len, .. } => ArgValue::Buffer {
                dtype: dtype(d),
                len: *len as usize,
            },
            WireArg::Size(v) => ArgValue::Size(*v),
            WireArg::Scalar { dtype: d, bytes } => ArgValue::Scalar {
                dtype: dtype(d),
                bytes: bytes.clone(),
            },
        })
        .collect();
    info.check_args(kl, &values).map(|_| ()).map_err(refuse)
}

/// This machine's `cpu`, `cuda:N` or `amdgpu:N`, driven in this process by
/// the same session code a worker runs.
pub struct LocalDevice {
    session: Session,
    info: DeviceInfo,
    next_id: u32,
    _cache: tempfile::TempDir,
}

impl LocalDevice {
    /// Opens a device of this machine by name (`cpu`, `cuda:0`, `amdgpu:1`).
    pub fn open(name: &str) -> Result<LocalDevice> {
        LocalDevice::open_with_limit(name, u64::MAX)
    }

    /// Like [`LocalDevice::open`], refusing allocations beyond `memory_limit`
    /// bytes in all (as a worker's `--session-memory` does).
    pub fn open_with_limit(name: &str, memory_limit: u64) -> Result<LocalDevice> {
        let local = RemoteError::Local;
        let devices = crate::session::list_devices();
        let info = devices
            .iter()
            .find(|d| d.name == name)
            .cloned()
            .ok_or_else(|| {
                RemoteError::Address(format!(
                    "no device `{name}`; this machine has: {}",
                    devices
                        .iter()
                        .map(|d| format!("{} ({})", d.name, d.target))
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?;
        let cache = tempfile::tempdir().map_err(|e| local(format!("a module cache: {e}")))?;
        let mut session = Session::new(SessionConfig {
            cache: cache.path().to_path_buf(),
            memory_limit,
            max_frame: usize::MAX,
            allow_crash: false,
        });
        if let Some(Reply::Error(e)) = session.answer(Request::Open {
            device: name.into(),
        }) {
            return Err(local(e));
        }
        Ok(LocalDevice {
            session,
            info,
            next_id: 0,
            _cache: cache,
        })
    }
}

impl Device for LocalDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
    fn request(&mut self, r: Request) -> Result<Reply> {
        match self.session.answer(r) {
            Some(Reply::Error(message)) => Err(RemoteError::Worker {
                addr: "this machine".into(),
                message,
            }),
            Some(r) => Ok(r),
            None => Ok(Reply::Ok),
        }
    }
    fn post(&mut self, r: Request) -> Result<()> {
        self.session.answer(r);
        Ok(())
    }
    fn new_id(&mut self) -> u32 {
        self.next_id += 1;
        self.next_id - 1
    }
}

/// Opens `remote://HOST:PORT/DEVICE` (with the options from the
/// environment) or a device of this machine.
pub fn open(name: &str) -> Result<Box<dyn Device>> {
    if name.starts_with("remote://") {
        Ok(Box::new(crate::RemoteDevice::connect(
            name,
            &Default::default(),
        )?))
    } else {
        Ok(Box::new(LocalDevice::open(name)?))
    }
}
