//! The CUDA driver API, resolved from libcuda at run time: nothing from
//! CUDA is needed to build rocmc.

use crate::error::{Error, Result};
use libloading::Library;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::path::{Path, PathBuf};

pub type CuResult = c_int;
pub type CuDevice = c_int;
pub type CuDevicePtr = u64;
pub type Handle = *mut c_void;

pub const CUDA_SUCCESS: CuResult = 0;
pub const CUDA_ERROR_NO_DEVICE: CuResult = 100;
pub const CUDA_ERROR_INVALID_DEVICE: CuResult = 101;
pub const ATTR_CC_MAJOR: c_int = 75;
pub const ATTR_CC_MINOR: c_int = 76;
pub const ATTR_SM_COUNT: c_int = 16;
// CUjit_option values.
pub const JIT_ERROR_LOG_BUFFER: c_int = 5;
/// `CUfunction_attribute`: the most dynamic shared memory a launch of the
/// function may ask for.
pub const CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: c_int = 8;
pub const JIT_ERROR_LOG_BUFFER_SIZE_BYTES: c_int = 6;
pub const JIT_LOG_VERBOSE: c_int = 12;

/// Sonames tried in order when nothing is configured.
pub const SONAMES: [&str; 2] = ["libcuda.so.1", "libcuda.so"];

/// Function pointers into the loaded driver, which `_lib` keeps loaded.
pub struct Api {
    _lib: Library,
    pub path: PathBuf,
    pub init: unsafe extern "C" fn(c_uint) -> CuResult,
    pub driver_get_version: unsafe extern "C" fn(*mut c_int) -> CuResult,
    pub get_error_name: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
    pub device_get_count: unsafe extern "C" fn(*mut c_int) -> CuResult,
    pub device_get: unsafe extern "C" fn(*mut CuDevice, c_int) -> CuResult,
    pub device_get_name: unsafe extern "C" fn(*mut c_char, c_int, CuDevice) -> CuResult,
    pub device_total_mem: unsafe extern "C" fn(*mut usize, CuDevice) -> CuResult,
    pub device_get_attribute: unsafe extern "C" fn(*mut c_int, c_int, CuDevice) -> CuResult,
    pub device_get_uuid: unsafe extern "C" fn(*mut [u8; 16], CuDevice) -> CuResult,
    pub primary_ctx_retain: unsafe extern "C" fn(*mut Handle, CuDevice) -> CuResult,
    pub primary_ctx_release: unsafe extern "C" fn(CuDevice) -> CuResult,
    pub ctx_set_current: unsafe extern "C" fn(Handle) -> CuResult,
    pub ctx_synchronize: unsafe extern "C" fn() -> CuResult,
    pub mem_alloc: unsafe extern "C" fn(*mut CuDevicePtr, usize) -> CuResult,
    pub mem_free: unsafe extern "C" fn(CuDevicePtr) -> CuResult,
    pub memcpy_htod: unsafe extern "C" fn(CuDevicePtr, *const c_void, usize) -> CuResult,
    pub memcpy_dtoh: unsafe extern "C" fn(*mut c_void, CuDevicePtr, usize) -> CuResult,
    pub memcpy_dtod: unsafe extern "C" fn(CuDevicePtr, CuDevicePtr, usize) -> CuResult,
    pub stream_create: unsafe extern "C" fn(*mut Handle, c_uint) -> CuResult,
    pub stream_destroy: unsafe extern "C" fn(Handle) -> CuResult,
    pub stream_synchronize: unsafe extern "C" fn(Handle) -> CuResult,
    pub event_create: unsafe extern "C" fn(*mut Handle, c_uint) -> CuResult,
    pub event_destroy: unsafe extern "C" fn(Handle) -> CuResult,
    pub event_record: unsafe extern "C" fn(Handle, Handle) -> CuResult,
    pub event_synchronize: unsafe extern "C" fn(Handle) -> CuResult,
    pub event_elapsed_time: unsafe extern "C" fn(*mut f32, Handle, Handle) -> CuResult,
    #[allow(clippy::type_complexity)]
    pub module_load_data_ex: unsafe extern "C" fn(
        *mut Handle,
        *const c_void,
        c_uint,
        *mut c_int,
        *mut *mut c_void,
    ) -> CuResult,
    pub module_unload: unsafe extern "C" fn(Handle) -> CuResult,
    pub module_get_function: unsafe extern "C" fn(*mut Handle, Handle, *const c_char) -> CuResult,
    pub func_set_attribute: unsafe extern "C" fn(Handle, c_int, c_int) -> CuResult,
    #[allow(clippy::type_complexity)]
    pub launch_kernel: unsafe extern "C" fn(
        Handle,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        Handle,
        *mut *mut c_void,
        *mut *mut c_void,
    ) -> CuResult,
    /// `cuTensorMapEncodeTiled` (CUDA 12.0 and later drivers); `None` on
    /// older ones, where kernels with tensor maps cannot be launched.
    pub tensor_map_encode_tiled: Option<TensorMapEncodeTiled>,
}

/// `cuTensorMapEncodeTiled(map, data type, rank, address, dims, strides,
/// box, element strides, interleave, swizzle, L2 promotion, OOB fill)`.
pub type TensorMapEncodeTiled = unsafe extern "C" fn(
    *mut TensorMap,
    c_int,
    c_uint,
    *mut c_void,
    *const u64,
    *const u64,
    *const c_uint,
    *const c_uint,
    c_int,
    c_int,
    c_int,
    c_int,
) -> CuResult;

/// CUDA's `CUtensorMap`: 128 opaque bytes, 64-byte aligned.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub struct TensorMap(pub [u8; 128]);

// CUtensorMapDataType: unsigned integers by size (the copy moves bits).
pub const TENSOR_MAP_UINT8: c_int = 0;
pub const TENSOR_MAP_UINT16: c_int = 1;
pub const TENSOR_MAP_UINT32: c_int = 2;
pub const TENSOR_MAP_UINT64: c_int = 4;
/// CU_TENSOR_MAP_SWIZZLE_32B, _64B, _128B.
pub const TENSOR_MAP_SWIZZLE_32B: c_int = 1;
pub const TENSOR_MAP_SWIZZLE_64B: c_int = 2;
pub const TENSOR_MAP_SWIZZLE_128B: c_int = 3;
/// CU_TENSOR_MAP_L2_PROMOTION_L2_128B.
pub const TENSOR_MAP_L2_128B: c_int = 2;

// SAFETY: the driver API is thread-safe; the pointers are plain functions.
unsafe impl Send for Api {}
// SAFETY: as above.
unsafe impl Sync for Api {}

impl Api {
    /// Loads the driver from `path` (a file or a folder holding
    /// libcuda.so.1), else `ROCMC_CUDA_LIBRARY`, else the loader's path.
    pub fn load(path: Option<&Path>) -> Result<Api> {
        let configured = path
            .map(Path::to_path_buf)
            .or_else(|| std::env::var_os("ROCMC_CUDA_LIBRARY").map(PathBuf::from));
        let candidates: Vec<PathBuf> = match configured {
            Some(p) if p.is_dir() => SONAMES.iter().map(|s| p.join(s)).collect(),
            Some(p) => vec![p],
            None => SONAMES.iter().map(PathBuf::from).collect(),
        };
        for c in &candidates {
            // SAFETY: loading libcuda runs its initialisers, which have no preconditions.
            if let Ok(lib) = unsafe { Library::new(c) } {
                return Api::resolve(lib, c.clone());
            }
        }
        Err(Error::NotFound {
            looked_in: candidates,
        })
    }

    fn resolve(lib: Library, path: PathBuf) -> Result<Api> {
        macro_rules! sym {
            ($name:literal) => {{
                // SAFETY: the symbol is the driver API function of this name, whose C
                // signature the field's type spells out.
                let s = unsafe { lib.get(concat!($name, "\0").as_bytes()) }.map_err(|e| {
                    Error::BadLibrary {
                        path: path.clone(),
                        reason: format!("no {}: {e}", $name),
                    }
                })?;
                *s
            }};
        }
        Ok(Api {
            path: path.clone(),
            init: sym!("cuInit"),
            driver_get_version: sym!("cuDriverGetVersion"),
            get_error_name: sym!("cuGetErrorName"),
            device_get_count: sym!("cuDeviceGetCount"),
            device_get: sym!("cuDeviceGet"),
            device_get_name: sym!("cuDeviceGetName"),
            device_total_mem: sym!("cuDeviceTotalMem_v2"),
            device_get_attribute: sym!("cuDeviceGetAttribute"),
            device_get_uuid: sym!("cuDeviceGetUuid"),
            primary_ctx_retain: sym!("cuDevicePrimaryCtxRetain"),
            primary_ctx_release: sym!("cuDevicePrimaryCtxRelease_v2"),
            ctx_set_current: sym!("cuCtxSetCurrent"),
            ctx_synchronize: sym!("cuCtxSynchronize"),
            mem_alloc: sym!("cuMemAlloc_v2"),
            mem_free: sym!("cuMemFree_v2"),
            memcpy_htod: sym!("cuMemcpyHtoD_v2"),
            memcpy_dtoh: sym!("cuMemcpyDtoH_v2"),
            memcpy_dtod: sym!("cuMemcpyDtoD_v2"),
            stream_create: sym!("cuStreamCreate"),
            stream_destroy: sym!("cuStreamDestroy_v2"),
            stream_synchronize: sym!("cuStreamSynchronize"),
            event_create: sym!("cuEventCreate"),
            event_destroy: sym!("cuEventDestroy_v2"),
            event_record: sym!("cuEventRecord"),
            event_synchronize: sym!("cuEventSynchronize"),
            event_elapsed_time: sym!("cuEventElapsedTime"),
            module_load_data_ex: sym!("cuModuleLoadDataEx"),
            module_unload: sym!("cuModuleUnload"),
            module_get_function: sym!("cuModuleGetFunction"),
            func_set_attribute: sym!("cuFuncSetAttribute"),
            launch_kernel: sym!("cuLaunchKernel"),
            // SAFETY: as for `sym!`; absent from drivers before CUDA 12.0.
            tensor_map_encode_tiled: unsafe { lib.get(b"cuTensorMapEncodeTiled\0") }
                .ok()
                .map(|s: libloading::Symbol<TensorMapEncodeTiled>| *s),
            _lib: lib,
        })
    }

    /// The driver's name for an error code, e.g. `CUDA_ERROR_OUT_OF_MEMORY`.
    pub fn error_name(&self, code: CuResult) -> String {
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: cuGetErrorName writes a pointer to a static string, or fails.
        let r = unsafe { (self.get_error_name)(code, &mut p) };
        if r != CUDA_SUCCESS || p.is_null() {
            return format!("CUDA error {code}");
        }
        // SAFETY: the driver returned a NUL-terminated static string.
        unsafe { std::ffi::CStr::from_ptr(p) }
            .to_string_lossy()
            .into_owned()
    }

    /// `Ok` for CUDA_SUCCESS, else the error with what rocmc was doing.
    pub fn check(&self, code: CuResult, doing: impl FnOnce() -> String) -> Result<()> {
        if code == CUDA_SUCCESS {
            Ok(())
        } else {
            Err(Error::Cuda {
                code,
                name: self.error_name(code),
                doing: doing(),
            })
        }
    }
}
