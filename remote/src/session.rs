//! The session process: one per client connection, started fresh by the
//! worker (never forked from a process that initialised a GPU runtime),
//! speaking plain frames with the worker over its stdin and stdout. It is
//! the only process that touches a device, so a kernel that crashes it
//! takes down this session alone.

use crate::proto::{self, DeviceInfo, FrameError, Reply, Request, WireArg};
use rocmc_linker::launch::KernelArg;
use std::collections::HashMap;
use std::io::{BufReader, BufWriter, Write};
use std::path::PathBuf;
use std::time::Instant;

/// How a session is limited and where it keeps modules.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// The worker's module cache (content-addressed).
    pub cache: PathBuf,
    /// Device memory the session may allocate, bytes.
    pub memory_limit: u64,
    /// Largest frame.
    pub max_frame: usize,
    /// Obey [`Request::Crash`] (tests only).
    pub allow_crash: bool,
}

/// Lists the devices this machine has (run in a fresh process: see
/// [`crate::server`]).
pub fn list_devices() -> Vec<DeviceInfo> {
    let mut out = Vec::new();
    if rocmc_target::CpuTarget::parse("x86-64").is_some_and(|t| t.runs_here()) {
        let cpu = rocmc_runtime_cpu::Cpu::new();
        out.push(DeviceInfo {
            name: "cpu".into(),
            target: "x86-64".into(),
            description: format!("host CPU, {} threads", cpu.threads()),
            memory: 0,
            code_object_version: 0,
        });
    }
    if let Ok(cuda) = rocmc_runtime_cuda::Cuda::load() {
        for i in 0..cuda.device_count().unwrap_or(0) {
            if let Ok(d) = cuda.device_info(i) {
                out.push(DeviceInfo {
                    name: format!("cuda:{i}"),
                    target: d.processor(),
                    description: d.name.clone(),
                    memory: d.total_memory as u64,
                    code_object_version: 0,
                });
            }
        }
    }
    if let Ok(hip) = rocmc_runtime_hip::Hip::load() {
        let cov = rocmc_runtime_hip::compat::max_code_object_version(hip.runtime_version());
        for i in 0..hip.device_count().unwrap_or(0) {
            if let Ok(d) = hip.device_info(i) {
                out.push(DeviceInfo {
                    name: format!("amdgpu:{i}"),
                    target: d.arch.clone(),
                    description: d.name.clone(),
                    memory: d.total_memory as u64,
                    code_object_version: cov,
                });
            }
        }
    }
    out
}

/// The `&'static` name of a dtype (as [`KernelArg`] keeps it) and its size.
fn known_dtype(d: &str) -> Result<(&'static str, usize), String> {
    rocmc_linker::launch::dtype(d).ok_or_else(|| format!("unknown dtype `{d}`"))
}

/// Seeded random elements of `dtype` filling `n` bytes: floats in [-1, 1),
/// integers small and non-zero-biased, booleans 0/1.
pub fn random_bytes(dtype: &str, n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed ^ 0x9E37_79B9_7F4A_7C15;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let size = rocmc_linker::launch::dtype(dtype).map_or(1, |(_, n)| n);
    let mut out = Vec::with_capacity(n);
    while out.len() + size <= n {
        let r = next();
        let unit = (r >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
        match dtype {
            "f32" => out.extend((unit as f32).to_le_bytes()),
            "f64" => out.extend(unit.to_le_bytes()),
            "f16" => out.extend(half::f16::from_f64(unit).to_le_bytes()),
            "bf16" => out.extend(half::bf16::from_f64(unit).to_le_bytes()),
            "i32" => out.extend((((r % 17) as i32) - 8).to_le_bytes()),
            "u32" => out.extend(((r % 17) as u32).to_le_bytes()),
            "i64" => out.extend((((r % 17) as i64) - 8).to_le_bytes()),
            "i8" => out.push((((r % 17) as i8) - 8) as u8),
            "bool" => out.push((r & 1) as u8),
            _ => out.push((r % 17) as u8),
        }
    }
    out.resize(n, 0);
    out
}

/// One device's buffers and modules, whatever its runtime.
enum Device {
    Cpu {
        dev: rocmc_runtime_cpu::Cpu,
        bufs: HashMap<u32, rocmc_runtime_cpu::CpuBuffer<u8>>,
        modules: HashMap<String, rocmc_runtime_cpu::Module>,
    },
    Cuda {
        dev: rocmc_runtime_cuda::Device,
        bufs: HashMap<u32, rocmc_runtime_cuda::DeviceBuffer<u8>>,
        modules: HashMap<String, rocmc_runtime_cuda::Module>,
    },
    Hip {
        dev: rocmc_runtime_hip::Device,
        bufs: HashMap<u32, rocmc_runtime_hip::DeviceBuffer<u8>>,
        modules: HashMap<String, rocmc_runtime_hip::Module>,
    },
}

fn open(name: &str) -> Result<Device, String> {
    if name == "cpu" {
        return Ok(Device::Cpu {
            dev: rocmc_runtime_cpu::Cpu::new(),
            bufs: HashMap::new(),
            modules: HashMap::new(),
        });
    }
    if name.starts_with("cuda") {
        let cuda = rocmc_runtime_cuda::Cuda::load().map_err(|e| e.to_string())?;
        return Ok(Device::Cuda {
            dev: cuda.device(name).map_err(|e| e.to_string())?,
            bufs: HashMap::new(),
            modules: HashMap::new(),
        });
    }
    if name.starts_with("amdgpu") {
        let hip = rocmc_runtime_hip::Hip::load().map_err(|e| e.to_string())?;
        return Ok(Device::Hip {
            dev: hip.device(name).map_err(|e| e.to_string())?,
            bufs: HashMap::new(),
            modules: HashMap::new(),
        });
    }
    Err(format!(
        "no device `{name}` (this worker serves cpu, cuda:N and amdgpu:N)"
    ))
}

/// What a session does with a buffer, whichever runtime holds it.
/// Writes zeros over all of `b`, 16 MiB at a time.
fn zero(b: &dyn Bytes) -> Result<(), String> {
    const PART: usize = 16 << 20;
    let zeros = vec![0u8; PART.min(b.size())];
    let mut at = 0;
    while at < b.size() {
        let n = PART.min(b.size() - at);
        b.put(at, &zeros[..n])?;
        at += n;
    }
    Ok(())
}

trait Bytes {
    fn size(&self) -> usize;
    /// Writes `data` from byte `offset` on (checked by the caller).
    fn put(&self, offset: usize, data: &[u8]) -> Result<(), String>;
    /// `n` bytes from `offset` on (checked by the caller).
    fn get(&self, offset: usize, n: usize) -> Result<Vec<u8>, String>;
}

impl Bytes for rocmc_runtime_cpu::CpuBuffer<u8> {
    fn size(&self) -> usize {
        self.len()
    }
    fn put(&self, offset: usize, data: &[u8]) -> Result<(), String> {
        self.copy_from_host_at(offset, data)
            .then_some(())
            .ok_or_else(|| "a write outside the buffer".to_string())
    }
    fn get(&self, offset: usize, n: usize) -> Result<Vec<u8>, String> {
        self.read_at(offset, n)
            .ok_or_else(|| "a read outside the buffer".to_string())
    }
}

macro_rules! gpu_bytes {
    ($t:ty) => {
        impl Bytes for $t {
            fn size(&self) -> usize {
                self.len()
            }
            fn put(&self, offset: usize, data: &[u8]) -> Result<(), String> {
                self.copy_from_host_at(offset, data)
                    .map_err(|e| e.to_string())
            }
            fn get(&self, offset: usize, n: usize) -> Result<Vec<u8>, String> {
                let mut out = vec![0u8; n];
                self.copy_to_host_at(offset, &mut out)
                    .map_err(|e| e.to_string())?;
                Ok(out)
            }
        }
    };
}
gpu_bytes!(rocmc_runtime_cuda::DeviceBuffer<u8>);
gpu_bytes!(rocmc_runtime_hip::DeviceBuffer<u8>);

impl Device {
    fn buffer(&self, id: u32) -> Result<&dyn Bytes, String> {
        let b: Option<&dyn Bytes> = match self {
            Device::Cpu { bufs, .. } => bufs.get(&id).map(|b| b as &dyn Bytes),
            Device::Cuda { bufs, .. } => bufs.get(&id).map(|b| b as &dyn Bytes),
            Device::Hip { bufs, .. } => bufs.get(&id).map(|b| b as &dyn Bytes),
        };
        b.ok_or_else(|| format!("buffer #{id} does not exist"))
    }
}

/// Turns wire arguments into launch arguments over the session's buffers.
macro_rules! kernel_args {
    ($bufs:expr, $args:expr) => {{
        let mut out = Vec::new();
        for a in $args {
            out.push(match a {
                WireArg::Buffer { id, dtype, len } => {
                    let b = $bufs
                        .get(id)
                        .ok_or_else(|| format!("buffer #{id} does not exist"))?;
                    let (dtype, size) = known_dtype(dtype)?;
                    let len = usize::try_from(*len).map_err(|e| e.to_string())?;
                    if len.saturating_mul(size) > b.len() {
                        return Err(format!(
                            "buffer #{id} holds {} bytes, not {len} {dtype}",
                            b.len()
                        ));
                    }
                    KernelArg::raw_buffer(b, dtype, len)
                }
                WireArg::Size(v) => KernelArg::size(*v),
                WireArg::Scalar { dtype, bytes } => {
                    KernelArg::raw_scalar(known_dtype(dtype)?.0, bytes.clone())
                }
            });
        }
        out
    }};
}

pub(crate) struct Session {
    cfg: SessionConfig,
    dev: Option<Device>,
    sizes: HashMap<u32, u64>,
    used: u64,
    deferred: Option<String>,
}

impl Session {
    pub(crate) fn new(cfg: SessionConfig) -> Session {
        Session {
            cfg,
            dev: None,
            sizes: HashMap::new(),
            used: 0,
            deferred: None,
        }
    }

    /// Handles one request: `None` for an asynchronous one (its error is
    /// kept for the next synchronous request), else the reply.
    pub(crate) fn answer(&mut self, req: Request) -> Option<Reply> {
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
            (None, Err(e)) => Reply::Error(e),
        })
    }

    fn dev(&mut self) -> Result<&mut Device, String> {
        self.dev
            .as_mut()
            .ok_or_else(|| "no device is open (send Open first)".to_string())
    }

    fn module_path(&self, hash: &str) -> Result<PathBuf, String> {
        if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("`{hash}` is not a SHA-256 in hex"));
        }
        Ok(self.cfg.cache.join(format!("{hash}.module")))
    }

    fn handle(&mut self, r: Request) -> Result<Reply, String> {
        match r {
            Request::Open { device } => {
                if self.dev.is_some() {
                    return Err("the session already has a device".into());
                }
                self.dev = Some(open(&device)?);
                Ok(Reply::Ok)
            }
            Request::HasModule { hash } => Ok(Reply::Has(self.module_path(&hash)?.exists())),
            Request::LoadModule { hash, bytes } => {
                let path = self.module_path(&hash)?;
                let bytes = match bytes {
                    Some(b) => {
                        if proto::content_hash(&b) != hash {
                            return Err("the module's bytes do not match its hash".into());
                        }
                        // Written under a temporary name, then renamed: another
                        // session never sees half a module.
                        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
                        std::fs::write(&tmp, &b)
                            .and_then(|_| std::fs::rename(&tmp, &path))
                            .map_err(|e| format!("caching the module: {e}"))?;
                        b
                    }
                    None => std::fs::read(&path)
                        .map_err(|_| format!("module {hash} is not in the worker's cache"))?,
                };
                match self.dev()? {
                    Device::Cpu { dev, modules, .. } => {
                        let m = dev.load(&bytes).map_err(|e| e.to_string())?;
                        modules.insert(hash, m);
                    }
                    Device::Cuda { dev, modules, .. } => {
                        let text = std::str::from_utf8(&bytes)
                            .map_err(|_| "a CUDA module must be PTX text".to_string())?;
                        let m = dev.load_ptx(text).map_err(|e| e.to_string())?;
                        modules.insert(hash, m);
                    }
                    Device::Hip { dev, modules, .. } => {
                        let m = dev.load_module(&bytes).map_err(|e| e.to_string())?;
                        modules.insert(hash, m);
                    }
                }
                Ok(Reply::Ok)
            }
            Request::Alloc { id, bytes } => {
                if self.sizes.contains_key(&id) {
                    return Err(format!("buffer #{id} already exists"));
                }
                if self.used.saturating_add(bytes) > self.cfg.memory_limit {
                    return Err(format!(
                        "allocating {bytes} bytes would exceed the session's memory limit of {} bytes ({} in use)",
                        self.cfg.memory_limit, self.used
                    ));
                }
                let n = usize::try_from(bytes).map_err(|e| e.to_string())?;
                match self.dev()? {
                    Device::Cpu { dev, bufs, .. } => {
                        bufs.insert(id, dev.alloc::<u8>(n));
                    }
                    Device::Cuda { dev, bufs, .. } => {
                        bufs.insert(id, dev.alloc::<u8>(n).map_err(|e| e.to_string())?);
                    }
                    Device::Hip { dev, bufs, .. } => {
                        bufs.insert(id, dev.alloc::<u8>(n).map_err(|e| e.to_string())?);
                    }
                }
                self.sizes.insert(id, bytes);
                self.used += bytes;
                // The protocol promises zeroed buffers; GPU runtimes hand out
                // whatever the memory held (another session's data, even).
                if !matches!(self.dev()?, Device::Cpu { .. }) {
                    zero(self.dev()?.buffer(id)?)?;
                }
                Ok(Reply::Ok)
            }
            Request::Write { id, offset, data } => {
                self.write(id, offset, &data)?;
                Ok(Reply::Ok)
            }
            Request::Fill { id, dtype, seed } => {
                let n = *self
                    .sizes
                    .get(&id)
                    .ok_or_else(|| format!("buffer #{id} does not exist"))?;
                let data = random_bytes(&dtype, n as usize, seed);
                self.write(id, 0, &data)?;
                Ok(Reply::Ok)
            }
            Request::Free { id } => {
                let n = self
                    .sizes
                    .remove(&id)
                    .ok_or_else(|| format!("buffer #{id} does not exist"))?;
                self.used -= n;
                match self.dev()? {
                    Device::Cpu { bufs, .. } => drop(bufs.remove(&id)),
                    Device::Cuda { bufs, .. } => drop(bufs.remove(&id)),
                    Device::Hip { bufs, .. } => drop(bufs.remove(&id)),
                }
                Ok(Reply::Ok)
            }
            Request::Launch {
                module,
                kernel,
                args,
            } => {
                self.launch(&module, &kernel, &args, 0, 1, false)?;
                Ok(Reply::Ok)
            }
            Request::Time {
                module,
                kernel,
                args,
                warmup,
                reps,
            } => Ok(Reply::Times(
                self.launch(&module, &kernel, &args, warmup, reps, true)?,
            )),
            Request::Read { id, offset, len } => {
                // A reply stays within a frame of the worker's limit.
                let most = self.cfg.max_frame.saturating_sub(proto::PART_OVERHEAD) as u64;
                let b = self.dev()?.buffer(id)?;
                let size = b.size() as u64;
                if offset > size {
                    return Err(format!(
                        "reading from byte {offset} of buffer #{id} of {size} bytes"
                    ));
                }
                let n = len.min(size - offset).min(most) as usize;
                Ok(Reply::Data(b.get(offset as usize, n)?))
            }
            Request::Sync => {
                match self.dev()? {
                    Device::Cpu { .. } => {}
                    Device::Cuda { dev, .. } => dev.synchronize().map_err(|e| e.to_string())?,
                    Device::Hip { dev, .. } => {
                        // An event after everything queued, waited for.
                        let e = |x: rocmc_runtime_hip::Error| x.to_string();
                        let ev = dev.event().map_err(e)?;
                        ev.record(None).map_err(e)?;
                        ev.elapsed_since(&ev).map_err(e)?;
                    }
                }
                Ok(Reply::Ok)
            }
            Request::Crash => {
                if self.cfg.allow_crash {
                    std::process::abort();
                }
                Err("this worker does not obey crash requests".into())
            }
        }
    }

    fn write(&mut self, id: u32, offset: u64, data: &[u8]) -> Result<(), String> {
        let b = self.dev()?.buffer(id)?;
        let fits = usize::try_from(offset)
            .ok()
            .and_then(|o| o.checked_add(data.len()))
            .is_some_and(|end| end <= b.size());
        if !fits {
            return Err(format!(
                "writing {} bytes at byte {offset} of buffer #{id} of {} bytes",
                data.len(),
                b.size()
            ));
        }
        b.put(offset as usize, data)
    }

    /// Launches `warmup + reps` times; with `timed`, returns each of the
    /// last `reps` launches' device time in ms.
    fn launch(
        &mut self,
        module: &str,
        kernel: &str,
        args: &[WireArg],
        warmup: u32,
        reps: u32,
        timed: bool,
    ) -> Result<Vec<f64>, String> {
        let missing = || format!("module {module} is not loaded in this session");
        // A session serves one client, but a request must still end: cap it (and never overflow).
        const MAX_LAUNCHES: u32 = 1_000_000;
        let total = warmup
            .checked_add(reps)
            .filter(|&n| n <= MAX_LAUNCHES)
            .ok_or_else(|| {
                format!("{warmup} warm-up and {reps} timed launches: at most {MAX_LAUNCHES} in one request")
            })?;
        let mut times = Vec::new();
        macro_rules! gpu_launches {
            ($dev:ident, $bufs:ident, $modules:ident) => {{
                let m = $modules.get(module).ok_or_else(missing)?;
                let k = m.kernel(kernel).map_err(|e| e.to_string())?;
                let a = kernel_args!($bufs, args);
                let e = |x| -> String { format!("{x}") };
                for i in 0..total {
                    if timed && i >= warmup {
                        let (s, f) = ($dev.event().map_err(e)?, $dev.event().map_err(e)?);
                        s.record(None).map_err(e)?;
                        k.launch(&a, None).map_err(e)?;
                        f.record(None).map_err(e)?;
                        times.push(f64::from(f.elapsed_since(&s).map_err(e)?));
                    } else {
                        k.launch(&a, None).map_err(e)?;
                    }
                }
            }};
        }
        match self.dev()? {
            Device::Cpu { bufs, modules, .. } => {
                let m = modules.get(module).ok_or_else(missing)?;
                let k = m.kernel(kernel).map_err(|e| e.to_string())?;
                let a = kernel_args!(bufs, args);
                for i in 0..total {
                    let t = Instant::now();
                    k.launch(&a).map_err(|e| e.to_string())?;
                    if timed && i >= warmup {
                        times.push(t.elapsed().as_secs_f64() * 1e3);
                    }
                }
            }
            // The CUDA and HIP runtimes have the same shape but no common
            // trait: one body for both, timed with the device's events.
            Device::Cuda { dev, bufs, modules } => gpu_launches!(dev, bufs, modules),
            Device::Hip { dev, bufs, modules } => gpu_launches!(dev, bufs, modules),
        }
        Ok(times)
    }
}

/// Serves one session over stdin/stdout until the worker closes stdin.
pub fn run(cfg: SessionConfig) -> Result<(), FrameError> {
    let mut input = BufReader::new(std::io::stdin().lock());
    let mut output = BufWriter::new(std::io::stdout().lock());
    let mut s = Session::new(cfg.clone());
    loop {
        let req: Request = match proto::recv(&mut input, cfg.max_frame) {
            Ok(r) => r,
            Err(FrameError::Closed) => return Ok(()),
            Err(e) => {
                // A frame the session cannot read ends it, with the reason.
                proto::send(&mut output, &Reply::Error(e.to_string()))?;
                output.flush()?;
                return Err(e);
            }
        };
        let Some(reply) = s.answer(req) else {
            continue;
        };
        proto::send(&mut output, &reply)?;
        output.flush()?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_overwrites_every_byte_in_parts() {
        let dev = rocmc_runtime_cpu::Cpu::new();
        // Over one 16 MiB part, and not a multiple of it.
        let n = (16 << 20) + 12_345;
        let b = dev.alloc::<u8>(n);
        b.copy_from_host(&vec![0xa5u8; n]);
        zero(&b).unwrap();
        assert!(b.to_vec().iter().all(|&x| x == 0));
        // Writes and reads at offsets stay inside the buffer.
        assert!(b.put(n - 2, &[1, 2, 3]).is_err());
        b.put(n - 3, &[1, 2, 3]).unwrap();
        assert_eq!(b.get(n - 4, 4).unwrap(), [0, 1, 2, 3]);
        assert!(b.get(n - 1, 2).is_err());
    }
}
