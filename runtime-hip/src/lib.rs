//! rocmc's thin HIP runtime.
//!
//! It loads `libamdhip64` when asked (never at build time: nothing from ROCm
//! is needed to build it, and it depends on no LLVM), wraps the few HIP calls
//! a kernel launch needs in a safe API, and checks everything it can before
//! the GPU sees it: the code object's target ID against the device, its
//! version against the runtime, and every launch against the kernel's
//! metadata and rocmc's launch geometry.
//!
//! ```no_run
//! use rocmc_runtime_hip::{Hip, KernelArg};
//! let hip = Hip::load()?;
//! let dev = hip.device("amdgpu:0")?;
//! let module = dev.load_module(&std::fs::read("vadd.hipfb").unwrap())?;
//! let vadd = module.kernel("vadd")?;
//! let a = dev.upload(&[1.0f32; 1000])?;
//! let b = dev.upload(&[2.0f32; 1000])?;
//! let c = dev.alloc::<f32>(1000)?;
//! vadd.launch(&[KernelArg::buffer(&a), KernelArg::buffer(&b), KernelArg::buffer(&c), KernelArg::size(1000)], None)?;
//! assert_eq!(c.to_vec()?[0], 3.0);
//! # Ok::<(), rocmc_runtime_hip::Error>(())
//! ```

#![deny(missing_docs)]

pub mod check;
pub mod compat;
pub mod device;
mod error;
mod ffi;

pub use check::ArgValue;
pub use compat::DeviceSelector;
pub use device::HipDevice;
pub use error::{Error, Result};

use ffi::Api;
use rocmc_device::codeobject::{self, CodeObject, KernelInfo};
use rocmc_device::{bundle, launch::LaunchInfo};
use std::ffi::{c_void, CString};
use std::marker::PhantomData;
use std::path::Path;
use std::sync::Arc;

/// A loaded HIP runtime.
#[derive(Clone)]
pub struct Hip {
    api: Arc<Api>,
    runtime_version: i32,
}

/// What HIP reports about one device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Ordinal among the visible devices.
    pub index: usize,
    /// Marketing name, e.g. `AMD Instinct MI250X`.
    pub name: String,
    /// `gcnArchName` with its features, e.g. `gfx90a:sramecc+:xnack-`.
    pub arch: String,
    /// Device memory in bytes.
    pub total_memory: usize,
    /// UUID as lowercase hex, when the runtime reports one.
    pub uuid: Option<String>,
}

impl Hip {
    /// Loads the HIP runtime from `ROCMC_HIP_LIBRARY` (a file or a folder)
    /// or, if unset, `libamdhip64.so.7`, `.6`, `.5` through the loader's path.
    pub fn load() -> Result<Hip> {
        Hip::load_from(None)
    }

    /// Loads the HIP runtime from a file or a folder, or as [`Hip::load`].
    pub fn load_from(path: Option<&Path>) -> Result<Hip> {
        let api = Api::load(path)?;
        // SAFETY: hipInit takes flags by value.
        let e = unsafe { (api.init)(0) };
        if e == ffi::HIP_ERROR_NO_DEVICE || e == ffi::HIP_ERROR_INVALID_DEVICE {
            return Err(Error::NoDevice {
                detail: format!(
                    "hipInit in {} returned {}",
                    api.path.display(),
                    api.error_name(e)
                ),
            });
        }
        api.check(e, || "initialising HIP (hipInit)".into())?;
        let mut v = 0;
        // SAFETY: v is a valid out-pointer.
        api.check(unsafe { (api.runtime_get_version)(&mut v) }, || {
            "reading the HIP runtime version".into()
        })?;
        Ok(Hip {
            api: Arc::new(api),
            runtime_version: v,
        })
    }

    /// `hipRuntimeGetVersion`: major·10⁷ + minor·10⁵ + patch.
    pub fn runtime_version(&self) -> i32 {
        self.runtime_version
    }

    /// The file the runtime was loaded from.
    pub fn library_path(&self) -> &Path {
        &self.api.path
    }

    /// Number of visible devices; an error says why there are none.
    pub fn device_count(&self) -> Result<usize> {
        let mut n = 0;
        // SAFETY: n is a valid out-pointer.
        let e = unsafe { (self.api.get_device_count)(&mut n) };
        if e == ffi::HIP_ERROR_NO_DEVICE || (e == ffi::HIP_SUCCESS && n == 0) {
            return Err(Error::NoDevice {
                detail: format!(
                    "hipGetDeviceCount found none through {}",
                    self.api.path.display()
                ),
            });
        }
        self.api
            .check(e, || "counting devices (hipGetDeviceCount)".into())?;
        Ok(n as usize)
    }

    /// Name, architecture, memory and UUID of device `index`.
    pub fn device_info(&self, index: usize) -> Result<DeviceInfo> {
        let api = &self.api;
        let i = index as i32;
        let mut name = [0 as std::ffi::c_char; 256];
        // SAFETY: the buffer holds 256 bytes, as passed.
        api.check(
            unsafe { (api.device_get_name)(name.as_mut_ptr(), 256, i) },
            || format!("reading the name of device {index}"),
        )?;
        // SAFETY: HIP NUL-terminates within the length given.
        let name = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let mut mem = 0usize;
        // SAFETY: valid out-pointer.
        api.check(unsafe { (api.device_total_mem)(&mut mem, i) }, || {
            format!("reading the memory of device {index}")
        })?;
        // hipDeviceProp_t changed layout between ROCm 5 and 6; rather than
        // depend on either, hand HIP a generous buffer and find gcnArchName,
        // the one field holding a `gfx...` target ID.
        let mut props = vec![0u8; 16384];
        // SAFETY: the buffer is larger than any hipDeviceProp_t.
        api.check(
            unsafe { (api.get_device_properties)(props.as_mut_ptr().cast(), i) },
            || format!("reading the properties of device {index}"),
        )?;
        let arch = arch_name(&props).ok_or_else(|| Error::BadLibrary {
            path: api.path.clone(),
            reason: format!("no gcnArchName in the properties of device {index}"),
        })?;
        let uuid = api.device_get_uuid.and_then(|f| {
            let mut u = [0u8; 16];
            // SAFETY: 16-byte out-buffer, as hipUUID.
            (unsafe { f(&mut u, i) } == ffi::HIP_SUCCESS)
                .then(|| u.iter().map(|b| format!("{b:02x}")).collect())
        });
        Ok(DeviceInfo {
            index,
            name,
            arch,
            total_memory: mem,
            uuid,
        })
    }

    /// Chooses a device: `amdgpu`, `amdgpu:N`, `amdgpu://GPU-<uuid>`.
    /// HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES apply first, inside HIP.
    pub fn device(&self, selector: &str) -> Result<Device> {
        let sel = DeviceSelector::parse(selector)?;
        let n = self.device_count()?;
        let index = match &sel {
            DeviceSelector::Default => 0,
            DeviceSelector::Index(i) if *i < n => *i,
            DeviceSelector::Index(i) => {
                return Err(Error::DeviceSelection(
                    selector.into(),
                    format!(
                        "there are {n} visible devices (0..{}), not {}",
                        n - 1,
                        i + 1
                    ),
                ))
            }
            DeviceSelector::Uuid(u) => (0..n)
                .find(|i| {
                    self.device_info(*i)
                        .ok()
                        .and_then(|d| d.uuid)
                        .is_some_and(|d| d.starts_with(u.as_str()) || d.contains(u.as_str()))
                })
                .ok_or_else(|| {
                    Error::DeviceSelection(
                        selector.into(),
                        "no visible device has this UUID".into(),
                    )
                })?,
        };
        let info = self.device_info(index)?;
        // SAFETY: index is a valid device ordinal.
        self.api
            .check(unsafe { (self.api.set_device)(index as i32) }, || {
                format!("selecting device {index}")
            })?;
        Ok(Device {
            hip: self.clone(),
            info,
        })
    }
}

/// The `gfx...` string in a properties blob: NUL-terminated, alphanumeric
/// with `:`, `+`, `-`.
fn arch_name(props: &[u8]) -> Option<String> {
    props
        .windows(3)
        .enumerate()
        .filter(|(_, w)| *w == b"gfx")
        .find_map(|(at, _)| {
            if at > 0 && props[at - 1] != 0 {
                return None;
            }
            let end = props[at..].iter().position(|b| *b == 0)? + at;
            let s = std::str::from_utf8(&props[at..end]).ok()?;
            (s.len() > 3
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, ':' | '+' | '-')))
            .then(|| s.to_string())
        })
}

pub use rocmc_device::launch::{Bool8, DeviceMemory, DeviceScalar, KernelArg};

/// The 16-bit float types of `f16` and `bf16` buffers (from the `half` crate).
pub use half::{bf16, f16};

/// A selected device.
pub struct Device {
    hip: Hip,
    /// What HIP reports about this device.
    pub info: DeviceInfo,
}

impl Device {
    /// Allocates `len` elements (uninitialised).
    pub fn alloc<T: DeviceScalar>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        let api = &self.hip.api;
        let mut p: *mut c_void = std::ptr::null_mut();
        let bytes = len * std::mem::size_of::<T>();
        // SAFETY: p is a valid out-pointer; HIP allocates `bytes`.
        api.check(unsafe { (api.malloc)(&mut p, bytes.max(1)) }, || {
            format!("allocating {bytes} bytes on device {}", self.info.index)
        })?;
        Ok(DeviceBuffer {
            api: self.hip.api.clone(),
            ptr: p,
            len,
            _t: PhantomData,
        })
    }

    /// Allocates a buffer holding a copy of `data`.
    pub fn upload<T: DeviceScalar>(&self, data: &[T]) -> Result<DeviceBuffer<T>> {
        let b = self.alloc(data.len())?;
        b.copy_from_host(data)?;
        Ok(b)
    }

    /// Loads a code object or offload bundle after checking it fits this
    /// device and the runtime.
    pub fn load_module(&self, bytes: &[u8]) -> Result<Module> {
        let co = if bundle::is_bundle(bytes) {
            let entries = bundle::read(bytes)?;
            let fits: Vec<_> = entries
                .iter()
                .filter(|e| {
                    e.target_id()
                        .is_some_and(|t| compat::compatible(t, &self.info.arch))
                })
                .collect();
            let Some(e) = fits.first() else {
                let have: Vec<&str> = entries.iter().filter_map(|e| e.target_id()).collect();
                return Err(Error::Incompatible(format!(
                    "the bundle has code for {} but device {} is {}; add `--mcpu {}`",
                    have.join(", "),
                    self.info.index,
                    self.info.arch,
                    compat::TargetId::parse_lenient(&self.info.arch).processor
                )));
            };
            codeobject::read(&bytes[e.range.clone()])?
        } else {
            let co = codeobject::read(bytes)?;
            compat::check_target(co.target_id(), &self.info.arch, self.info.index)?;
            co
        };
        compat::check_code_object_version(co.code_object_version, self.hip.runtime_version)?;
        let api = &self.hip.api;
        let mut m: *mut c_void = std::ptr::null_mut();
        // SAFETY: bytes is a complete code object or bundle that outlives the call.
        api.check(
            unsafe { (api.module_load_data)(&mut m, bytes.as_ptr().cast()) },
            || {
                format!(
                    "loading a module for {} (hipModuleLoadData)",
                    self.info.arch
                )
            },
        )?;
        Ok(Module {
            api: self.hip.api.clone(),
            ptr: m,
            launch: co.launch.clone(),
            code_object: co,
        })
    }

    /// Creates a stream for ordered, asynchronous work.
    pub fn stream(&self) -> Result<Stream> {
        let api = &self.hip.api;
        let mut s = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        api.check(unsafe { (api.stream_create)(&mut s) }, || {
            "creating a stream".into()
        })?;
        Ok(Stream {
            api: api.clone(),
            ptr: s,
        })
    }

    /// Creates an event, for timing with [`Event::elapsed_since`].
    pub fn event(&self) -> Result<Event> {
        let api = &self.hip.api;
        let mut e = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        api.check(unsafe { (api.event_create)(&mut e) }, || {
            "creating an event".into()
        })?;
        Ok(Event {
            api: api.clone(),
            ptr: e,
        })
    }
}

/// A typed buffer in device memory, freed on drop.
pub struct DeviceBuffer<T: DeviceScalar> {
    api: Arc<Api>,
    ptr: *mut c_void,
    len: usize,
    _t: PhantomData<T>,
}

impl<T: DeviceScalar> DeviceBuffer<T> {
    /// Length in elements.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the buffer holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Copies `data` (exactly `len` elements) to the device.
    pub fn copy_from_host(&self, data: &[T]) -> Result<()> {
        if data.len() != self.len {
            return Err(Error::BadLaunch {
                kernel: "-".into(),
                reason: format!(
                    "copying {} elements into a buffer of {}",
                    data.len(),
                    self.len
                ),
            });
        }
        // SAFETY: both regions hold len elements of T.
        let e = unsafe {
            (self.api.memcpy)(
                self.ptr,
                data.as_ptr().cast(),
                std::mem::size_of_val(data),
                ffi::MEMCPY_HOST_TO_DEVICE,
            )
        };
        self.api.check(e, || {
            format!(
                "copying {} bytes to the device",
                std::mem::size_of_val(data)
            )
        })
    }
    /// Copies the buffer into `out` (exactly `len` elements).
    pub fn copy_to_host(&self, out: &mut [T]) -> Result<()> {
        if out.len() != self.len {
            return Err(Error::BadLaunch {
                kernel: "-".into(),
                reason: format!(
                    "copying a buffer of {} into {} elements",
                    self.len,
                    out.len()
                ),
            });
        }
        // SAFETY: both regions hold len elements of T.
        let e = unsafe {
            (self.api.memcpy)(
                out.as_mut_ptr().cast(),
                self.ptr,
                std::mem::size_of_val(out),
                ffi::MEMCPY_DEVICE_TO_HOST,
            )
        };
        self.api.check(e, || {
            format!(
                "copying {} bytes from the device",
                std::mem::size_of_val(out)
            )
        })
    }
    /// Copies `data` into the elements from `offset` on.
    pub fn copy_from_host_at(&self, offset: usize, data: &[T]) -> Result<()> {
        self.range(offset, data.len())?;
        let bytes = std::mem::size_of_val(data);
        let at = self.at(offset);
        // SAFETY: `range` checked that the allocation holds `bytes` bytes from `at`.
        let e = unsafe {
            (self.api.memcpy)(at, data.as_ptr().cast(), bytes, ffi::MEMCPY_HOST_TO_DEVICE)
        };
        self.api.check(e, || {
            format!("copying {bytes} bytes to the device at element {offset}")
        })
    }

    /// Copies the elements from `offset` on into `out`.
    pub fn copy_to_host_at(&self, offset: usize, out: &mut [T]) -> Result<()> {
        self.range(offset, out.len())?;
        let bytes = std::mem::size_of_val(out);
        let at = self.at(offset);
        // SAFETY: `range` checked the device side; `out` holds `bytes` bytes; T is a plain scalar.
        let e = unsafe {
            (self.api.memcpy)(
                out.as_mut_ptr().cast(),
                at,
                bytes,
                ffi::MEMCPY_DEVICE_TO_HOST,
            )
        };
        self.api.check(e, || {
            format!("copying {bytes} bytes from the device at element {offset}")
        })
    }

    /// The device address of element `offset` (checked by `range` first).
    fn at(&self, offset: usize) -> *mut c_void {
        self.ptr
            .cast::<u8>()
            .wrapping_add(offset * std::mem::size_of::<T>())
            .cast::<c_void>()
    }

    fn range(&self, offset: usize, n: usize) -> Result<()> {
        if offset.checked_add(n).is_none_or(|end| end > self.len) {
            return Err(Error::BadLaunch {
                kernel: "-".into(),
                reason: format!(
                    "elements {offset}..{offset}+{n} of a buffer of {}",
                    self.len
                ),
            });
        }
        Ok(())
    }

    /// Copies the buffer into a new vector.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let mut v = vec![T::default(); self.len];
        self.copy_to_host(&mut v)?;
        Ok(v)
    }
}

impl<T: DeviceScalar> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        // SAFETY: ptr came from hipMalloc and is freed once; errors at teardown are not actionable.
        let _ = unsafe { (self.api.free)(self.ptr) };
    }
}

/// A HIP stream; destroyed on drop.
pub struct Stream {
    api: Arc<Api>,
    ptr: *mut c_void,
}

impl Stream {
    /// Waits until all work queued on the stream has finished.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: a live stream.
        self.api
            .check(unsafe { (self.api.stream_synchronize)(self.ptr) }, || {
                "waiting for a stream".into()
            })
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: a live stream, destroyed once.
        let _ = unsafe { (self.api.stream_destroy)(self.ptr) };
    }
}

/// A HIP event; destroyed on drop.
pub struct Event {
    api: Arc<Api>,
    ptr: *mut c_void,
}

impl Event {
    /// Records the event on `stream` (the null stream for `None`).
    pub fn record(&self, stream: Option<&Stream>) -> Result<()> {
        let s = stream.map_or(std::ptr::null_mut(), |s| s.ptr);
        // SAFETY: live event and stream (or the null stream).
        self.api
            .check(unsafe { (self.api.event_record)(self.ptr, s) }, || {
                "recording an event".into()
            })
    }
    /// Milliseconds from `start` to this event, after waiting for it.
    pub fn elapsed_since(&self, start: &Event) -> Result<f32> {
        // SAFETY: a live event.
        self.api
            .check(unsafe { (self.api.event_synchronize)(self.ptr) }, || {
                "waiting for an event".into()
            })?;
        let mut ms = 0f32;
        // SAFETY: valid out-pointer and live events.
        self.api.check(
            unsafe { (self.api.event_elapsed_time)(&mut ms, start.ptr, self.ptr) },
            || "timing events".into(),
        )?;
        Ok(ms)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: a live event, destroyed once.
        let _ = unsafe { (self.api.event_destroy)(self.ptr) };
    }
}

/// A loaded code object, with its metadata.
pub struct Module {
    api: Arc<Api>,
    ptr: *mut c_void,
    /// The code object that was loaded (the matching entry of a bundle).
    pub code_object: CodeObject,
    /// rocmc's launch geometry, when rocmc compiled the module.
    pub launch: Option<LaunchInfo>,
}

impl Module {
    /// Looks up a kernel by name.
    pub fn kernel(&self, name: &str) -> Result<Kernel<'_>> {
        let meta = self
            .code_object
            .kernels
            .iter()
            .find(|k| k.name == name)
            .cloned()
            .ok_or_else(|| Error::BadLaunch {
                kernel: name.into(),
                reason: format!(
                    "no such kernel; the module has {}",
                    self.code_object
                        .kernels
                        .iter()
                        .map(|k| k.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            })?;
        let c = CString::new(name).map_err(|_| Error::BadLaunch {
            kernel: name.into(),
            reason: "name contains NUL".into(),
        })?;
        let mut f = std::ptr::null_mut();
        // SAFETY: live module, NUL-terminated name, valid out-pointer.
        self.api.check(
            unsafe { (self.api.module_get_function)(&mut f, self.ptr, c.as_ptr()) },
            || format!("looking up kernel `{name}`"),
        )?;
        Ok(Kernel {
            module: self,
            func: f,
            meta,
        })
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        // SAFETY: a live module, unloaded once.
        let _ = unsafe { (self.api.module_unload)(self.ptr) };
    }
}

impl<T: DeviceScalar> DeviceMemory for DeviceBuffer<T> {
    type Elem = T;
    fn device_address(&self) -> u64 {
        self.ptr as usize as u64
    }
    fn elements(&self) -> usize {
        self.len
    }
}

/// A kernel of a loaded module, ready to launch.
pub struct Kernel<'m> {
    module: &'m Module,
    func: *mut c_void,
    /// The kernel's metadata: arguments, resources, limits.
    pub meta: KernelInfo,
}

impl Kernel<'_> {
    /// Checks the arguments against the metadata and launch geometry, then
    /// launches with the grid and block rocmc computed. Hidden arguments
    /// (code object v5) are filled in by HIP.
    pub fn launch(&self, args: &[KernelArg], stream: Option<&Stream>) -> Result<()> {
        let values: Vec<ArgValue> = args.iter().map(|a| a.value().clone()).collect();
        let (grid, block) = check::check_launch(&self.meta, self.module.launch.as_ref(), &values)?;
        if grid.contains(&0) {
            return Ok(());
        }
        // LDS sized at launch (tiles over loops of symbolic extent).
        let shared = match &self.module.launch {
            Some(l) => l
                .kernel(&self.meta.name)
                .map_or(Ok(0), |kl| l.shared_bytes(kl, &values))
                .map_err(|reason| Error::BadLaunch {
                    kernel: self.meta.name.clone(),
                    reason,
                })?,
            None => 0,
        };
        let mut storage: Vec<Vec<u8>> = args.iter().map(|a| a.bytes().to_vec()).collect();
        let mut params: Vec<*mut c_void> =
            storage.iter_mut().map(|b| b.as_mut_ptr().cast()).collect();
        let api = &self.module.api;
        let s = stream.map_or(std::ptr::null_mut(), |s| s.ptr);
        // SAFETY: params point at one correctly sized value per explicit argument (checked above).
        let e = unsafe {
            (api.module_launch_kernel)(
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
                self.meta.name
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arch_name_is_found_in_a_properties_blob() {
        let mut p = vec![0u8; 1024];
        p[..20].copy_from_slice(b"AMD Instinct MI250X\0");
        let arch = b"gfx90a:sramecc+:xnack-\0";
        p[600..600 + arch.len()].copy_from_slice(arch);
        assert_eq!(arch_name(&p).as_deref(), Some("gfx90a:sramecc+:xnack-"));
        assert_eq!(arch_name(&[0u8; 64]), None);
    }
}
