//! rocmc's thin CUDA driver runtime, the counterpart of rocmc-runtime-hip.
//!
//! It loads `libcuda.so.1` when asked (never at build time: nothing from
//! CUDA is needed to build it, and it depends on no LLVM), wraps the few
//! driver calls a kernel launch needs in a safe API, and checks what it can
//! before the GPU sees it: the PTX's target against the device's compute
//! capability, its PTX ISA version against the driver, and every launch
//! against rocmc's launch document (carried in the PTX).
//!
//! ```no_run
//! use rocmc_runtime_cuda::{Cuda, KernelArg};
//! let cuda = Cuda::load()?;
//! let dev = cuda.device("cuda:0")?;
//! let module = dev.load_ptx(&std::fs::read_to_string("vadd.ptx").unwrap())?;
//! let vadd = module.kernel("vadd")?;
//! let a = dev.upload(&[1.0f32; 1000])?;
//! let b = dev.upload(&[2.0f32; 1000])?;
//! let c = dev.alloc::<f32>(1000)?;
//! vadd.launch(&[KernelArg::buffer(&a), KernelArg::buffer(&b), KernelArg::buffer(&c), KernelArg::size(1000)], None)?;
//! assert_eq!(c.to_vec()?[0], 3.0);
//! # Ok::<(), rocmc_runtime_cuda::Error>(())
//! ```

#![deny(missing_docs)]

pub mod device;
mod error;
mod ffi;
mod stream;
mod tensor_map;

pub use device::CudaDevice;
pub use error::{Error, Result};
pub use rocmc_device::launch::{ArgValue, Bool8, DeviceMemory, DeviceScalar, KernelArg};
pub use rocmc_target::nvptx::ComputeCapability;
pub use stream::{Event, Stream};

/// The 16-bit float types of `f16` and `bf16` buffers (from the `half` crate).
pub use half::{bf16, f16};

use ffi::{Api, CuDevice, CuDevicePtr, Handle};
use rocmc_device::launch::LaunchInfo;
use rocmc_target::NvidiaTarget;
use std::ffi::{c_int, c_void, CString};
use std::marker::PhantomData;
use std::path::Path;
use std::sync::Arc;

/// A loaded CUDA driver.
#[derive(Clone)]
pub struct Cuda {
    api: Arc<Api>,
    driver_version: i32,
}

/// What the driver reports about one device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Ordinal among the visible devices.
    pub index: usize,
    /// Marketing name, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// Compute capability, e.g. (9, 0).
    pub compute_capability: ComputeCapability,
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// Device memory in bytes.
    pub total_memory: usize,
    /// UUID as `GPU-xxxxxxxx-xxxx-...`, as nvidia-smi prints it.
    pub uuid: String,
}

impl DeviceInfo {
    /// The processor name of its compute capability, `sm_90`.
    pub fn processor(&self) -> String {
        let (a, b) = self.compute_capability;
        format!("sm_{a}{b}")
    }
}

impl Cuda {
    /// Loads the driver from `ROCMC_CUDA_LIBRARY` (a file or a folder) or,
    /// if unset, `libcuda.so.1` through the loader's path.
    pub fn load() -> Result<Cuda> {
        Cuda::load_from(None)
    }

    /// Loads the driver from a file or a folder, or as [`Cuda::load`].
    pub fn load_from(path: Option<&Path>) -> Result<Cuda> {
        let api = Api::load(path)?;
        // SAFETY: cuInit takes flags by value.
        let e = unsafe { (api.init)(0) };
        if e == ffi::CUDA_ERROR_NO_DEVICE || e == ffi::CUDA_ERROR_INVALID_DEVICE {
            return Err(Error::NoDevice {
                detail: format!(
                    "cuInit in {} returned {}",
                    api.path.display(),
                    api.error_name(e)
                ),
            });
        }
        api.check(e, || {
            format!("initialising the CUDA driver {}", api.path.display())
        })?;
        let mut v = 0;
        // SAFETY: valid out-pointer.
        api.check(unsafe { (api.driver_get_version)(&mut v) }, || {
            "reading the driver version".into()
        })?;
        Ok(Cuda {
            api: Arc::new(api),
            driver_version: v,
        })
    }

    /// The CUDA version the driver supports, as (major, minor): 12040 is (12, 4).
    pub fn driver_version(&self) -> (u32, u32) {
        let v = self.driver_version.max(0) as u32;
        (v / 1000, v % 1000 / 10)
    }

    /// The library that was loaded.
    pub fn library_path(&self) -> &Path {
        &self.api.path
    }

    /// Number of visible devices.
    pub fn device_count(&self) -> Result<usize> {
        let mut n = 0;
        // SAFETY: valid out-pointer.
        let e = unsafe { (self.api.device_get_count)(&mut n) };
        if e == ffi::CUDA_ERROR_NO_DEVICE {
            return Ok(0);
        }
        self.api.check(e, || "counting devices".into())?;
        Ok(n.max(0) as usize)
    }

    /// What the driver reports about device `index`.
    pub fn device_info(&self, index: usize) -> Result<DeviceInfo> {
        let api = &self.api;
        let dev = self.handle(index)?;
        let mut name = [0u8; 256];
        // SAFETY: the buffer holds `len` bytes; the driver NUL-terminates within them.
        api.check(
            unsafe { (api.device_get_name)(name.as_mut_ptr().cast(), name.len() as i32, dev) },
            || format!("reading the name of device {index}"),
        )?;
        let end = name.iter().position(|b| *b == 0).unwrap_or(name.len());
        let attr = |a: i32| -> Result<i32> {
            let mut v = 0;
            // SAFETY: valid out-pointer, a device handle from cuDeviceGet.
            api.check(
                unsafe { (api.device_get_attribute)(&mut v, a, dev) },
                || format!("reading attribute {a} of device {index}"),
            )?;
            Ok(v)
        };
        let mut mem = 0usize;
        // SAFETY: valid out-pointer and device.
        api.check(unsafe { (api.device_total_mem)(&mut mem, dev) }, || {
            format!("reading the memory size of device {index}")
        })?;
        let mut uuid = [0u8; 16];
        // SAFETY: a 16-byte out-buffer, as CUuuid is.
        api.check(unsafe { (api.device_get_uuid)(&mut uuid, dev) }, || {
            format!("reading the UUID of device {index}")
        })?;
        Ok(DeviceInfo {
            index,
            name: String::from_utf8_lossy(&name[..end]).into_owned(),
            compute_capability: (
                attr(ffi::ATTR_CC_MAJOR)? as u32,
                attr(ffi::ATTR_CC_MINOR)? as u32,
            ),
            sm_count: attr(ffi::ATTR_SM_COUNT)? as u32,
            total_memory: mem,
            uuid: uuid_text(&uuid),
        })
    }

    fn handle(&self, index: usize) -> Result<CuDevice> {
        let mut dev = 0;
        // SAFETY: valid out-pointer; the driver checks the ordinal.
        self.api.check(
            unsafe { (self.api.device_get)(&mut dev, index as i32) },
            || format!("opening device {index}"),
        )?;
        Ok(dev)
    }

    /// Opens a device: `cuda` (the first), `cuda:N`, or `cuda://GPU-<uuid>`
    /// (a prefix of the UUID is enough when it is unique).
    pub fn device(&self, selector: &str) -> Result<Device> {
        let n = self.device_count()?;
        if n == 0 {
            return Err(Error::NoDevice {
                detail: format!("cuDeviceGetCount in {} returned 0", self.api.path.display()),
            });
        }
        let bad = |why: String| Error::DeviceSelection(selector.to_string(), why);
        let index = match selector.strip_prefix("cuda") {
            Some("") => 0,
            Some(rest) if rest.starts_with("://") => {
                let want = rest[3..].to_ascii_lowercase();
                let want = want.strip_prefix("gpu-").unwrap_or(&want).to_string();
                let mut hits = Vec::new();
                for i in 0..n {
                    let u = self.device_info(i)?.uuid.to_ascii_lowercase();
                    if u.trim_start_matches("gpu-").starts_with(&want) {
                        hits.push(i);
                    }
                }
                match hits[..] {
                    [i] => i,
                    [] => return Err(bad(format!("no device has UUID {want}"))),
                    _ => {
                        return Err(bad(format!(
                            "UUID prefix {want} matches {} devices",
                            hits.len()
                        )))
                    }
                }
            }
            Some(rest) if rest.starts_with(':') => rest[1..]
                .parse::<usize>()
                .ok()
                .filter(|i| *i < n)
                .ok_or_else(|| bad(format!("expected cuda:N with N below {n}")))?,
            _ => {
                return Err(bad(
                    "expected `cuda`, `cuda:N` or `cuda://GPU-<uuid>`".into()
                ))
            }
        };
        let info = self.device_info(index)?;
        let dev = self.handle(index)?;
        let mut ctx: Handle = std::ptr::null_mut();
        // SAFETY: valid out-pointer and device; released in Device's Drop.
        self.api.check(
            unsafe { (self.api.primary_ctx_retain)(&mut ctx, dev) },
            || format!("creating a context on device {index}"),
        )?;
        Ok(Device {
            cuda: self.clone(),
            ctx: Arc::new(Context(ctx, dev, self.api.clone())),
            info,
        })
    }
}

fn uuid_text(u: &[u8; 16]) -> String {
    let h: Vec<String> = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        h[0..4].concat(),
        h[4..6].concat(),
        h[6..8].concat(),
        h[8..10].concat(),
        h[10..16].concat()
    )
}

/// A retained primary context, released when the last device, buffer or
/// module using it is dropped; cuCtxSetCurrent is called before each
/// operation, so a device may be used from any thread.
struct Context(Handle, CuDevice, Arc<Api>);

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: the primary context retained in `Cuda::device`, released once, after
        // everything allocated in it (which holds this Arc) is gone.
        let _ = unsafe { (self.2.primary_ctx_release)(self.1) };
    }
}
// SAFETY: a CUDA context handle may be made current on any thread.
unsafe impl Send for Context {}
// SAFETY: as above; the driver serialises what it must.
unsafe impl Sync for Context {}

/// A selected device, with its primary context.
pub struct Device {
    cuda: Cuda,
    ctx: Arc<Context>,
    /// What the driver reports about this device.
    pub info: DeviceInfo,
}

impl Device {
    fn current(&self) -> Result<&Api> {
        let api = &*self.cuda.api;
        // SAFETY: a live context retained by this device.
        api.check(unsafe { (api.ctx_set_current)(self.ctx.0) }, || {
            format!("making device {}'s context current", self.info.index)
        })?;
        Ok(api)
    }

    /// Allocates `len` elements (uninitialised).
    pub fn alloc<T: DeviceScalar>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        let api = self.current()?;
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| Error::Incompatible(format!("{len} elements do not fit in memory")))?;
        let mut p: CuDevicePtr = 0;
        // SAFETY: valid out-pointer; the driver allocates `bytes` (at least 1).
        api.check(unsafe { (api.mem_alloc)(&mut p, bytes.max(1)) }, || {
            format!("allocating {bytes} bytes on device {}", self.info.index)
        })?;
        Ok(DeviceBuffer {
            api: self.cuda.api.clone(),
            ctx: self.ctx.clone(),
            ptr: p,
            len,
            owned: true,
            _t: PhantomData,
        })
    }

    /// `len` elements at `ptr`, memory of this device's primary context
    /// that someone else allocated (a PyTorch tensor): used in place,
    /// never freed here.
    ///
    /// # Safety
    /// `ptr` must hold `len` elements of this context's memory for the
    /// buffer's whole life.
    pub unsafe fn borrow<T: DeviceScalar>(&self, ptr: u64, len: usize) -> DeviceBuffer<T> {
        DeviceBuffer {
            api: self.cuda.api.clone(),
            ctx: self.ctx.clone(),
            ptr,
            len,
            owned: false,
            _t: PhantomData,
        }
    }

    /// A stream someone else created in this device's primary context
    /// (PyTorch's current stream), never destroyed here.
    ///
    /// # Safety
    /// `raw` must be a `CUstream` of this context that outlives the value.
    pub unsafe fn borrow_stream(&self, raw: u64) -> Stream {
        Stream {
            api: self.cuda.api.clone(),
            ptr: raw as Handle,
            owned: false,
        }
    }

    /// Allocates and fills a buffer.
    pub fn upload<T: DeviceScalar>(&self, data: &[T]) -> Result<DeviceBuffer<T>> {
        let b = self.alloc(data.len())?;
        b.copy_from_host(data)?;
        Ok(b)
    }

    /// Loads PTX that rocmc wrote: checks its target against the device and
    /// its PTX ISA version against the driver, then lets the driver compile
    /// it; the driver's error log is the error when that fails.
    pub fn load_ptx(&self, ptx: &str) -> Result<Module> {
        let launch = match LaunchInfo::from_ptx(ptx) {
            Some(Ok(l)) => l,
            Some(Err(e)) => return Err(Error::Ptx(format!("its rocmc launch document is damaged: {e}"))),
            None => {
                return Err(Error::Ptx(
                    "no rocmc launch document (`// rocmc.launch` line): build it with `rocmc build --mcpu sm_NN`".into(),
                ))
            }
        };
        let target = ptx_target(ptx)?;
        let cc = self.info.compute_capability;
        if !target.runs_on(cc) {
            return Err(Error::Incompatible(format!(
                "the PTX is for {} but device {} ({}) is {}; rebuild with --mcpu {}",
                target.processor,
                self.info.index,
                self.info.name,
                self.info.processor(),
                self.info.processor()
            )));
        }
        let need = rocmc_target::nvptx::cuda_for_ptx(target.ptx_version);
        if self.cuda.driver_version() < need {
            let (a, b) = self.cuda.driver_version();
            return Err(Error::Incompatible(format!(
                "the PTX is ISA version {} (for {}), which needs a driver for CUDA {}.{} or later; this driver is for CUDA {a}.{b}",
                target.ptx_text(),
                target.processor,
                need.0,
                need.1
            )));
        }
        let api = self.current()?;
        let text =
            CString::new(ptx).map_err(|_| Error::Ptx("the PTX contains a NUL byte".into()))?;
        let mut err_log = vec![0u8; 16 * 1024];
        let mut opts = [
            ffi::JIT_ERROR_LOG_BUFFER,
            ffi::JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
            ffi::JIT_LOG_VERBOSE,
        ];
        let mut vals: [*mut c_void; 3] = [
            err_log.as_mut_ptr().cast(),
            err_log.len() as *mut c_void,
            std::ptr::null_mut::<c_void>().wrapping_add(1),
        ];
        let mut m: Handle = std::ptr::null_mut();
        // SAFETY: NUL-terminated image; the option arrays have 3 entries each; the log
        // buffer has the size its option says and outlives the call.
        let e = unsafe {
            (api.module_load_data_ex)(
                &mut m,
                text.as_ptr().cast(),
                opts.len() as u32,
                opts.as_mut_ptr(),
                vals.as_mut_ptr(),
            )
        };
        if e != ffi::CUDA_SUCCESS {
            let end = err_log
                .iter()
                .position(|b| *b == 0)
                .unwrap_or(err_log.len());
            return Err(Error::Jit {
                device: format!("{} ({})", self.info.name, self.info.processor()),
                name: api.error_name(e),
                log: String::from_utf8_lossy(&err_log[..end]).trim().to_string(),
            });
        }
        Ok(Module {
            api: self.cuda.api.clone(),
            ctx: self.ctx.clone(),
            ptr: m,
            launch,
            target,
            maps: Default::default(),
        })
    }

    /// Loads the best of several PTX modules of one kernel built for
    /// different processors (what `rocmc::Build` embeds): among those that
    /// run on this device and this driver, the one for the newest
    /// processor (an exact `sm_90a`-style match first).
    pub fn load_best_ptx(&self, candidates: &[&str]) -> Result<Module> {
        let cc = self.info.compute_capability;
        let driver = self.cuda.driver_version();
        match best_ptx(candidates, cc, driver)? {
            Some(i) => self.load_ptx(candidates[i]),
            None => {
                let seen: Vec<String> = candidates
                    .iter()
                    .map(|p| ptx_target(p).map(|t| t.processor))
                    .collect::<Result<_>>()?;
                Err(Error::Incompatible(format!(
                    "no PTX for device {} ({}, {}, driver for CUDA {}.{}): the module has {}; rebuild with .mcpu(\"{}\")",
                    self.info.index,
                    self.info.name,
                    self.info.processor(),
                    driver.0,
                    driver.1,
                    seen.join(", "),
                    self.info.processor()
                )))
            }
        }
    }

    /// A new stream.
    pub fn stream(&self) -> Result<Stream> {
        let api = self.current()?;
        let mut s: Handle = std::ptr::null_mut();
        // SAFETY: valid out-pointer; flags 0 (default).
        api.check(unsafe { (api.stream_create)(&mut s, 0) }, || {
            "creating a stream".into()
        })?;
        Ok(Stream {
            api: self.cuda.api.clone(),
            ptr: s,
            owned: true,
        })
    }

    /// A new event, for timing.
    pub fn event(&self) -> Result<Event> {
        let api = self.current()?;
        let mut e: Handle = std::ptr::null_mut();
        // SAFETY: valid out-pointer; flags 0 (timing enabled).
        api.check(unsafe { (api.event_create)(&mut e, 0) }, || {
            "creating an event".into()
        })?;
        Ok(Event {
            api: self.cuda.api.clone(),
            ptr: e,
        })
    }

    /// Waits for everything queued on the device.
    pub fn synchronize(&self) -> Result<()> {
        let api = self.current()?;
        // SAFETY: no arguments; the current context is this device's.
        api.check(unsafe { (api.ctx_synchronize)() }, || {
            "synchronising the device".into()
        })
    }
}

/// Which of several PTX modules to load on a device of capability `cc`
/// whose driver is for CUDA `driver`: among those that run there, the one
/// for the newest processor, an exact `sm_90a`-style match first. `None`
/// when none runs there.
fn best_ptx(
    candidates: &[&str],
    cc: ComputeCapability,
    driver: (u32, u32),
) -> Result<Option<usize>> {
    let mut best: Option<((bool, ComputeCapability), usize)> = None;
    for (i, ptx) in candidates.iter().enumerate() {
        let t = ptx_target(ptx)?;
        if !t.runs_on(cc) || driver < rocmc_target::nvptx::cuda_for_ptx(t.ptx_version) {
            continue;
        }
        let key = (t.processor.ends_with('a'), t.compute_capability());
        let better = match &best {
            None => true,
            Some((k, _)) => key > *k,
        };
        if better {
            best = Some((key, i));
        }
    }
    Ok(best.map(|(_, i)| i))
}

/// The `.target` and `.version` of a PTX module.
fn ptx_target(ptx: &str) -> Result<NvidiaTarget> {
    let field = |key: &str| {
        ptx.lines()
            .find_map(|l| l.trim().strip_prefix(key).map(|r| r.trim().to_string()))
    };
    let processor = field(".target ")
        .and_then(|t| t.split(',').next().map(|s| s.trim().to_string()))
        .ok_or_else(|| Error::Ptx("no `.target` line".into()))?;
    let version = field(".version ").ok_or_else(|| Error::Ptx("no `.version` line".into()))?;
    let ptx_version = version
        .split_once('.')
        .and_then(|(a, b)| Some(a.parse::<u32>().ok()? * 10 + b.parse::<u32>().ok()?))
        .ok_or_else(|| Error::Ptx(format!("unreadable `.version {version}`")))?;
    let mut t = NvidiaTarget::parse(&processor)
        .ok_or_else(|| Error::Ptx(format!("unknown `.target {processor}`")))?;
    t.ptx_version = ptx_version;
    Ok(t)
}

/// Typed device memory, freed on drop.
pub struct DeviceBuffer<T: DeviceScalar> {
    api: Arc<Api>,
    ctx: Arc<Context>,
    ptr: CuDevicePtr,
    len: usize,
    /// Allocated here, freed on drop; memory a framework owns is not.
    owned: bool,
    _t: PhantomData<T>,
}

impl<T: DeviceScalar> DeviceBuffer<T> {
    /// Length in elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn current(&self) -> Result<()> {
        // SAFETY: a live context, retained by the buffer's device.
        self.api
            .check(unsafe { (self.api.ctx_set_current)(self.ctx.0) }, || {
                "making the buffer's context current".into()
            })
    }

    /// Copies `data` (exactly `len` elements) to the device.
    pub fn copy_from_host(&self, data: &[T]) -> Result<()> {
        if data.len() != self.len {
            return Err(Error::Incompatible(format!(
                "copying {} elements into a buffer of {}",
                data.len(),
                self.len
            )));
        }
        self.current()?;
        let bytes = std::mem::size_of_val(data);
        // SAFETY: the device allocation and `data` both hold `bytes` bytes.
        self.api.check(
            unsafe { (self.api.memcpy_htod)(self.ptr, data.as_ptr().cast(), bytes) },
            || format!("copying {bytes} bytes to the device"),
        )
    }

    /// Copies the buffer into `out` (exactly `len` elements).
    pub fn copy_to_host(&self, out: &mut [T]) -> Result<()> {
        if out.len() != self.len {
            return Err(Error::Incompatible(format!(
                "copying a buffer of {} elements into {}",
                self.len,
                out.len()
            )));
        }
        self.current()?;
        let bytes = std::mem::size_of_val(out);
        // SAFETY: both sides hold `bytes` bytes; T is a plain scalar, any bit pattern is valid.
        self.api.check(
            unsafe { (self.api.memcpy_dtoh)(out.as_mut_ptr().cast(), self.ptr, bytes) },
            || format!("copying {bytes} bytes from the device"),
        )
    }

    /// Copies `data` into the elements from `offset` on.
    pub fn copy_from_host_at(&self, offset: usize, data: &[T]) -> Result<()> {
        self.range(offset, data.len())?;
        self.current()?;
        let bytes = std::mem::size_of_val(data);
        let at = self.ptr + (offset * std::mem::size_of::<T>()) as CuDevicePtr;
        // SAFETY: `range` checked that the allocation holds `bytes` bytes from `at`.
        self.api.check(
            unsafe { (self.api.memcpy_htod)(at, data.as_ptr().cast(), bytes) },
            || format!("copying {bytes} bytes to the device at element {offset}"),
        )
    }

    /// Copies the elements from `offset` on into `out`.
    pub fn copy_to_host_at(&self, offset: usize, out: &mut [T]) -> Result<()> {
        self.range(offset, out.len())?;
        self.current()?;
        let bytes = std::mem::size_of_val(out);
        let at = self.ptr + (offset * std::mem::size_of::<T>()) as CuDevicePtr;
        // SAFETY: `range` checked the device side; `out` holds `bytes` bytes; T is a plain scalar.
        self.api.check(
            unsafe { (self.api.memcpy_dtoh)(out.as_mut_ptr().cast(), at, bytes) },
            || format!("copying {bytes} bytes from the device at element {offset}"),
        )
    }

    fn range(&self, offset: usize, n: usize) -> Result<()> {
        if offset.checked_add(n).is_none_or(|end| end > self.len) {
            return Err(Error::Incompatible(format!(
                "elements {offset}..{offset}+{n} of a buffer of {}",
                self.len
            )));
        }
        Ok(())
    }

    /// The buffer's contents.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let mut v = vec![T::default(); self.len];
        self.copy_to_host(&mut v)?;
        Ok(v)
    }

    /// Copies another buffer of the same length into this one, on the device.
    pub fn copy_from_device(&self, src: &DeviceBuffer<T>) -> Result<()> {
        if src.len != self.len {
            return Err(Error::Incompatible(format!(
                "copying a buffer of {} elements into one of {}",
                src.len, self.len
            )));
        }
        self.current()?;
        let bytes = self.len * std::mem::size_of::<T>();
        // SAFETY: both allocations hold `bytes` bytes.
        self.api.check(
            unsafe { (self.api.memcpy_dtod)(self.ptr, src.ptr, bytes) },
            || format!("copying {bytes} bytes on the device"),
        )
    }
}

impl<T: DeviceScalar> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        // SAFETY: a live allocation of this context, freed once.
        let _ = unsafe { (self.api.ctx_set_current)(self.ctx.0) };
        // SAFETY: as above.
        let _ = unsafe { (self.api.mem_free)(self.ptr) };
    }
}

/// A loaded PTX module, with rocmc's launch document.
pub struct Module {
    api: Arc<Api>,
    ctx: Arc<Context>,
    ptr: Handle,
    /// rocmc's launch document, read from the PTX.
    pub launch: LaunchInfo,
    /// The processor and PTX version the PTX was written for.
    pub target: NvidiaTarget,
    /// The tensor maps its launches uploaded.
    maps: tensor_map::Uploaded,
}

impl Module {
    /// Looks up a kernel by name.
    pub fn kernel(&self, name: &str) -> Result<Kernel<'_>> {
        if self.launch.kernel(name).is_none() {
            return Err(Error::BadLaunch {
                kernel: name.into(),
                reason: format!(
                    "no such kernel; the module has {}",
                    self.launch
                        .kernels
                        .iter()
                        .map(|k| k.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
        let c = CString::new(name).map_err(|_| Error::BadLaunch {
            kernel: name.into(),
            reason: "name contains NUL".into(),
        })?;
        let mut f: Handle = std::ptr::null_mut();
        // SAFETY: a live context and module, NUL-terminated name, valid out-pointer.
        self.api.check(
            unsafe {
                let _ = (self.api.ctx_set_current)(self.ctx.0);
                (self.api.module_get_function)(&mut f, self.ptr, c.as_ptr())
            },
            || format!("looking up kernel `{name}`"),
        )?;
        let dynamic_shared = self.launch.kernel(name).map_or(0, |k| k.dynamic_shared);
        if dynamic_shared > 0 {
            let bytes = c_int::try_from(dynamic_shared).unwrap_or(c_int::MAX);
            // SAFETY: a live function of this context; the attribute takes an int.
            self.api.check(
                unsafe {
                    let _ = (self.api.ctx_set_current)(self.ctx.0);
                    (self.api.func_set_attribute)(
                        f,
                        ffi::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                        bytes,
                    )
                },
                || {
                    format!(
                        "allowing kernel `{name}` {dynamic_shared} bytes of dynamic shared memory"
                    )
                },
            )?;
        }
        Ok(Kernel {
            module: self,
            func: f,
            name: name.to_string(),
        })
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        // SAFETY: a live module of this context, unloaded once.
        let _ = unsafe { (self.api.ctx_set_current)(self.ctx.0) };
        self.maps.free(&self.api);
        // SAFETY: as above.
        let _ = unsafe { (self.api.module_unload)(self.ptr) };
    }
}

impl<T: DeviceScalar> DeviceMemory for DeviceBuffer<T> {
    type Elem = T;
    fn device_address(&self) -> u64 {
        self.ptr
    }
    fn elements(&self) -> usize {
        self.len
    }
}

/// A kernel of a loaded module, ready to launch.
pub struct Kernel<'m> {
    module: &'m Module,
    func: Handle,
    name: String,
}

impl Kernel<'_> {
    /// The device address of the launch's tensor maps, the hidden last
    /// argument of a kernel whose tiles the accelerator copies.
    fn tensor_maps(
        &self,
        kl: &rocmc_device::launch::KernelLaunch,
        values: &[ArgValue],
        args: &[KernelArg],
    ) -> Result<u64> {
        let bad = |reason: String| Error::BadLaunch {
            kernel: self.name.clone(),
            reason,
        };
        let shapes = self
            .module
            .launch
            .tensor_map_shapes(kl, values)
            .map_err(bad)?;
        let api = &self.module.api;
        let mut maps = Vec::new();
        for s in &shapes {
            let b = args[s.arg].bytes();
            let addr = u64::from_le_bytes(
                b.try_into()
                    .map_err(|_| bad(format!("argument #{} is not a buffer address", s.arg)))?,
            );
            maps.push(tensor_map::encode(api, &self.name, s, addr)?);
        }
        // SAFETY: the module's live context.
        let _ = unsafe { (api.ctx_set_current)(self.module.ctx.0) };
        self.module.maps.address(api, &maps)
    }

    /// Checks the arguments against the launch document (count, kinds,
    /// dtypes, size bounds, buffer lengths), then launches with the grid
    /// and block rocmc computed.
    pub fn launch(&self, args: &[KernelArg], stream: Option<&Stream>) -> Result<()> {
        let values: Vec<ArgValue> = args.iter().map(|a| a.value().clone()).collect();
        let kl = self
            .module
            .launch
            .kernel(&self.name)
            .expect("checked in Module::kernel");
        let (grid, block) = self
            .module
            .launch
            .check_args(kl, &values)
            .map_err(|reason| Error::BadLaunch {
                kernel: self.name.clone(),
                reason,
            })?;
        let threads: u64 = block.iter().map(|b| u64::from(*b)).product();
        if threads > u64::from(rocmc_target::nvptx::MAX_THREADS_PER_BLOCK) {
            return Err(Error::BadLaunch {
                kernel: self.name.clone(),
                reason: format!("block of {threads} threads exceeds NVIDIA's 1024"),
            });
        }
        if grid.contains(&0) {
            return Ok(());
        }
        let limit = rocmc_target::nvptx::MAX_GRID;
        if let Some(d) = (0..3).find(|&d| u64::from(grid[d]) > limit[d]) {
            return Err(Error::BadLaunch {
                kernel: self.name.clone(),
                reason: format!(
                    "its grid would have {} blocks along {}, more than NVIDIA's {} (grid {}); \
                     declaring the sizes' `[kernel] max` lets the default rules keep within it",
                    grid[d],
                    ["x", "y", "z"][d],
                    limit[d],
                    kl.grid_text.join(" x ")
                ),
            });
        }
        let shared = self
            .module
            .launch
            .shared_bytes(kl, &values)
            .map_err(|reason| Error::BadLaunch {
                kernel: self.name.clone(),
                reason,
            })?;
        let mut storage: Vec<Vec<u8>> = args.iter().map(|a| a.bytes().to_vec()).collect();
        if !kl.tensor_maps.is_empty() {
            storage.push(self.tensor_maps(kl, &values, args)?.to_le_bytes().to_vec());
        }
        let mut params: Vec<*mut c_void> =
            storage.iter_mut().map(|b| b.as_mut_ptr().cast()).collect();
        let api = &self.module.api;
        let s = stream.map_or(std::ptr::null_mut(), |s| s.ptr);
        // SAFETY: a live context, function and stream; params point at one
        // correctly sized value per kernel parameter (checked above).
        let e = unsafe {
            let _ = (api.ctx_set_current)(self.module.ctx.0);
            (api.launch_kernel)(
                self.func,
                grid[0],
                grid[1],
                grid[2],
                block[0],
                block[1],
                block[2],
                shared,
                s,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        api.check(e, || {
            format!(
                "launching `{}` with grid {grid:?} and block {block:?}",
                self.name
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptx_targets_are_read() {
        let t = ptx_target("//\n.version 8.0\n.target sm_90a\n.address_size 64\n").unwrap();
        assert_eq!((t.processor.as_str(), t.ptx_version), ("sm_90a", 80));
        assert!(ptx_target(".version 7.8\n").is_err());
        assert!(ptx_target(".version 7.8\n.target sm_91\n").is_err());
    }

    #[test]
    fn the_best_ptx_is_the_newest_that_runs() {
        let ptx = |sm: &str, v: &str| format!(".version {v}\n.target {sm}\n");
        let (s80, s90, s90a, s100) = (
            ptx("sm_80", "7.0"),
            ptx("sm_90", "7.8"),
            ptx("sm_90a", "8.0"),
            ptx("sm_100", "8.6"),
        );
        let all = [s80.as_str(), s90.as_str(), s90a.as_str(), s100.as_str()];
        // An H100 with a CUDA 13 driver: the exact sm_90a first.
        assert_eq!(best_ptx(&all, (9, 0), (13, 0)).unwrap(), Some(2));
        // Without sm_90a, sm_90; on an A100, sm_80; on a B200, sm_100.
        assert_eq!(best_ptx(&all[..2], (9, 0), (13, 0)).unwrap(), Some(1));
        assert_eq!(best_ptx(&all, (8, 0), (13, 0)).unwrap(), Some(0));
        assert_eq!(best_ptx(&all, (10, 0), (13, 0)).unwrap(), Some(3));
        // A driver too old for PTX 8.6 falls back to what it can load.
        assert_eq!(best_ptx(&all, (10, 0), (12, 4)).unwrap(), Some(1));
        // Nothing for a Turing GPU.
        assert_eq!(best_ptx(&all, (7, 5), (13, 0)).unwrap(), None);
    }

    #[test]
    fn uuids_print_as_nvidia_smi_does() {
        let u: [u8; 16] = std::array::from_fn(|i| i as u8);
        assert_eq!(uuid_text(&u), "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f");
    }

    /// Without a driver: a clean error naming what was tried, no panic.
    #[test]
    fn a_missing_driver_is_a_clean_error() {
        let dir = std::env::temp_dir().join("rocmc-no-cuda-here");
        let _ = std::fs::create_dir_all(&dir);
        match Cuda::load_from(Some(&dir)) {
            Err(Error::NotFound { looked_in }) => {
                assert!(looked_in.iter().any(|p| p.ends_with("libcuda.so.1")))
            }
            Err(other) => panic!("{other}"),
            Ok(_) => panic!("found a CUDA driver in an empty folder"),
        }
    }
}
