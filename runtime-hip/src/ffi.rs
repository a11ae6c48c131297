//! The HIP runtime's C API, resolved from libamdhip64 at run time.

use crate::error::{Error, Result};
use libloading::Library;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::path::{Path, PathBuf};

pub type HipError = c_int;
pub const HIP_SUCCESS: HipError = 0;
pub const HIP_ERROR_NO_DEVICE: HipError = 100;
pub const HIP_ERROR_INVALID_DEVICE: HipError = 101;
pub const MEMCPY_HOST_TO_DEVICE: c_int = 1;
pub const MEMCPY_DEVICE_TO_HOST: c_int = 2;

/// Sonames tried in order when nothing is configured.
pub const SONAMES: [&str; 4] = [
    "libamdhip64.so.7",
    "libamdhip64.so.6",
    "libamdhip64.so.5",
    "libamdhip64.so",
];

/// Function pointers into the loaded library, which `_lib` keeps loaded.
pub struct Api {
    _lib: Library,
    pub path: PathBuf,
    pub init: unsafe extern "C" fn(c_uint) -> HipError,
    pub get_error_name: unsafe extern "C" fn(HipError) -> *const c_char,
    pub runtime_get_version: unsafe extern "C" fn(*mut c_int) -> HipError,
    pub get_device_count: unsafe extern "C" fn(*mut c_int) -> HipError,
    pub set_device: unsafe extern "C" fn(c_int) -> HipError,
    pub device_get_name: unsafe extern "C" fn(*mut c_char, c_int, c_int) -> HipError,
    pub device_total_mem: unsafe extern "C" fn(*mut usize, c_int) -> HipError,
    /// `hipGetDevicePropertiesR0600` (ROCm 6+) or `hipGetDeviceProperties`; only scanned, see `device::arch_name`.
    pub get_device_properties: unsafe extern "C" fn(*mut c_void, c_int) -> HipError,
    pub device_get_uuid: Option<unsafe extern "C" fn(*mut [u8; 16], c_int) -> HipError>,
    pub malloc: unsafe extern "C" fn(*mut *mut c_void, usize) -> HipError,
    pub free: unsafe extern "C" fn(*mut c_void) -> HipError,
    pub memcpy: unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int) -> HipError,
    pub stream_create: unsafe extern "C" fn(*mut *mut c_void) -> HipError,
    pub stream_destroy: unsafe extern "C" fn(*mut c_void) -> HipError,
    pub stream_synchronize: unsafe extern "C" fn(*mut c_void) -> HipError,
    pub event_create: unsafe extern "C" fn(*mut *mut c_void) -> HipError,
    pub event_destroy: unsafe extern "C" fn(*mut c_void) -> HipError,
    pub event_record: unsafe extern "C" fn(*mut c_void, *mut c_void) -> HipError,
    pub event_synchronize: unsafe extern "C" fn(*mut c_void) -> HipError,
    pub event_elapsed_time: unsafe extern "C" fn(*mut f32, *mut c_void, *mut c_void) -> HipError,
    pub module_load_data: unsafe extern "C" fn(*mut *mut c_void, *const c_void) -> HipError,
    pub module_unload: unsafe extern "C" fn(*mut c_void) -> HipError,
    pub module_get_function:
        unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *const c_char) -> HipError,
    #[allow(clippy::type_complexity)]
    pub module_launch_kernel: unsafe extern "C" fn(
        *mut c_void,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        *mut c_void,
        *mut *mut c_void,
        *mut *mut c_void,
    ) -> HipError,
}

/// Where to look: `explicit` (a file or a folder), else `ROCMC_HIP_LIBRARY`,
/// else the sonames through the dynamic loader's search path.
pub fn candidates(explicit: Option<&Path>) -> Vec<PathBuf> {
    let chosen = explicit
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("ROCMC_HIP_LIBRARY").map(PathBuf::from));
    match chosen {
        Some(p) if p.is_dir() => SONAMES.iter().map(|s| p.join(s)).collect(),
        Some(p) => vec![p],
        None => SONAMES.iter().map(PathBuf::from).collect(),
    }
}

impl Api {
    pub fn load(explicit: Option<&Path>) -> Result<Api> {
        let looked_in = candidates(explicit);
        for path in &looked_in {
            // A path with a folder must exist; bare sonames go through the loader's search.
            if path.components().count() > 1 && !path.exists() {
                continue;
            }
            // SAFETY: loading libamdhip64 runs its initialisers, which is how HIP is meant to be used.
            let Ok(lib) = (unsafe { Library::new(path) }) else {
                continue;
            };
            return Api::from_library(lib, path.clone());
        }
        Err(Error::NotFound { looked_in })
    }

    fn from_library(lib: Library, path: PathBuf) -> Result<Api> {
        macro_rules! sym {
            ($name:literal) => {{
                // SAFETY: the symbol is a HIP API function with the signature of the field it fills.
                let s = unsafe { lib.get($name) }.map_err(|e| Error::BadLibrary { path: path.clone(), reason: e.to_string() })?;
                *s
            }};
        }
        macro_rules! opt_sym {
            ($name:literal) => {{
                // SAFETY: as above; the symbol is optional in older runtimes.
                unsafe { lib.get($name) }.ok().map(|s| *s)
            }};
        }
        // ROCm 6 renamed the properties entry point when the struct layout changed.
        let get_device_properties = match opt_sym!(b"hipGetDevicePropertiesR0600\0") {
            Some(f) => f,
            None => sym!(b"hipGetDeviceProperties\0"),
        };
        Ok(Api {
            init: sym!(b"hipInit\0"),
            get_error_name: sym!(b"hipGetErrorName\0"),
            runtime_get_version: sym!(b"hipRuntimeGetVersion\0"),
            get_device_count: sym!(b"hipGetDeviceCount\0"),
            set_device: sym!(b"hipSetDevice\0"),
            device_get_name: sym!(b"hipDeviceGetName\0"),
            device_total_mem: sym!(b"hipDeviceTotalMem\0"),
            get_device_properties,
            device_get_uuid: opt_sym!(b"hipDeviceGetUuid\0"),
            malloc: sym!(b"hipMalloc\0"),
            free: sym!(b"hipFree\0"),
            memcpy: sym!(b"hipMemcpy\0"),
            stream_create: sym!(b"hipStreamCreate\0"),
            stream_destroy: sym!(b"hipStreamDestroy\0"),
            stream_synchronize: sym!(b"hipStreamSynchronize\0"),
            event_create: sym!(b"hipEventCreate\0"),
            event_destroy: sym!(b"hipEventDestroy\0"),
            event_record: sym!(b"hipEventRecord\0"),
            event_synchronize: sym!(b"hipEventSynchronize\0"),
            event_elapsed_time: sym!(b"hipEventElapsedTime\0"),
            module_load_data: sym!(b"hipModuleLoadData\0"),
            module_unload: sym!(b"hipModuleUnload\0"),
            module_get_function: sym!(b"hipModuleGetFunction\0"),
            module_launch_kernel: sym!(b"hipModuleLaunchKernel\0"),
            _lib: lib,
            path,
        })
    }

    pub fn error_name(&self, e: HipError) -> String {
        // SAFETY: hipGetErrorName returns a static string for any code.
        let p = unsafe { (self.get_error_name)(e) };
        if p.is_null() {
            return format!("hipError{e}");
        }
        // SAFETY: non-null, NUL-terminated, static.
        unsafe { std::ffi::CStr::from_ptr(p) }
            .to_string_lossy()
            .into_owned()
    }

    /// Turns a HIP status into a result naming what was being done.
    pub fn check(&self, e: HipError, doing: impl FnOnce() -> String) -> Result<()> {
        if e == HIP_SUCCESS {
            Ok(())
        } else {
            Err(Error::Hip {
                code: e,
                name: self.error_name(e),
                doing: doing(),
            })
        }
    }
}
