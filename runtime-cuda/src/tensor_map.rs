//! Tensor maps for kernels whose tiles the tensor memory accelerator
//! copies (`cache_read(..., tma=1)`): encoded at launch from the buffers'
//! addresses and the launch's sizes, uploaded once per distinct set of
//! maps, and passed as the kernel's hidden last argument.

use crate::ffi::{self, Api, CuDevicePtr, TensorMap};
use crate::{Error, Result};
use rocmc_device::launch::TensorMapShape;
use std::collections::HashMap;
use std::ffi::{c_uint, c_void};
use std::sync::Mutex;

/// The maps a module's kernels were launched with, in device memory, by
/// their bytes: a repeated launch (a timing loop) reuses its upload.
#[derive(Default)]
pub(crate) struct Uploaded {
    by_bytes: Mutex<HashMap<Vec<u8>, CuDevicePtr>>,
}

impl Uploaded {
    /// The device address of `maps` (128 bytes each), uploaded on first use.
    /// The caller has made the module's context current.
    pub(crate) fn address(&self, api: &Api, maps: &[TensorMap]) -> Result<CuDevicePtr> {
        let bytes: Vec<u8> = maps.iter().flat_map(|m| m.0).collect();
        let mut by = self.by_bytes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = by.get(&bytes) {
            return Ok(*p);
        }
        let mut p: CuDevicePtr = 0;
        // SAFETY: a valid out-pointer; the context is current.
        api.check(unsafe { (api.mem_alloc)(&mut p, bytes.len()) }, || {
            format!("allocating {} bytes of tensor maps", bytes.len())
        })?;
        // SAFETY: `p` holds `bytes.len()` bytes (cuMemAlloc aligns to 256).
        let e = unsafe { (api.memcpy_htod)(p, bytes.as_ptr().cast(), bytes.len()) };
        if let Err(err) = api.check(e, || "uploading tensor maps".into()) {
            // SAFETY: allocated above and not yet shared.
            let _ = unsafe { (api.mem_free)(p) };
            return Err(err);
        }
        by.insert(bytes, p);
        Ok(p)
    }

    /// Frees every upload; the module's context is current.
    pub(crate) fn free(&self, api: &Api) {
        let by = self.by_bytes.lock().unwrap_or_else(|e| e.into_inner());
        for p in by.values() {
            // SAFETY: each was allocated by `address` and is freed once, here.
            let _ = unsafe { (api.mem_free)(*p) };
        }
    }
}

/// The tensor map of `shape` for the tensor at device address `addr`:
/// dense row-major, swizzled boxes, zeros outside the tensor. An
/// empty tensor gets zero bytes (never read: no tile of it is copied).
pub(crate) fn encode(
    api: &Api,
    kernel: &str,
    shape: &TensorMapShape,
    addr: u64,
) -> Result<TensorMap> {
    let mut map = TensorMap([0; 128]);
    if shape.dims.contains(&0) {
        return Ok(map);
    }
    let bad = |reason: String| Error::BadLaunch {
        kernel: kernel.into(),
        reason,
    };
    let encode = api.tensor_map_encode_tiled.ok_or_else(|| {
        bad("this kernel's tiles are copied by the tensor memory accelerator, and the driver has no cuTensorMapEncodeTiled (CUDA 12.0 or later)".into())
    })?;
    let swizzle = match shape.swizzle {
        128 => ffi::TENSOR_MAP_SWIZZLE_128B,
        64 => ffi::TENSOR_MAP_SWIZZLE_64B,
        32 => ffi::TENSOR_MAP_SWIZZLE_32B,
        s => return Err(bad(format!("no {s}-byte swizzle for a tensor map"))),
    };
    let data_type = match shape.elem_bytes {
        1 => ffi::TENSOR_MAP_UINT8,
        2 => ffi::TENSOR_MAP_UINT16,
        4 => ffi::TENSOR_MAP_UINT32,
        8 => ffi::TENSOR_MAP_UINT64,
        n => return Err(bad(format!("no tensor map for elements of {n} bytes"))),
    };
    if !addr.is_multiple_of(16) {
        return Err(bad(format!(
            "buffer argument #{} starts at {addr:#x}; the tensor memory accelerator needs 16-byte alignment",
            shape.arg
        )));
    }
    // The driver takes dimensions innermost first, and the strides of all
    // but the innermost, in bytes.
    let dims: Vec<u64> = shape.dims.iter().rev().copied().collect();
    let mut strides = Vec::new();
    let mut stride = shape.elem_bytes as u64;
    for d in &dims[..dims.len() - 1] {
        stride *= d;
        strides.push(stride);
    }
    let boxed: Vec<c_uint> = shape.boxed.iter().rev().copied().collect();
    let unit: Vec<c_uint> = vec![1; dims.len()];
    // SAFETY: every array holds `rank` entries (strides `rank - 1`), the
    // map is a writable, 64-byte aligned 128-byte value, and the address
    // is the buffer's, which the launch keeps alive.
    let e = unsafe {
        encode(
            &mut map,
            data_type,
            dims.len() as c_uint,
            addr as *mut c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxed.as_ptr(),
            unit.as_ptr(),
            0,
            swizzle,
            ffi::TENSOR_MAP_L2_128B,
            0,
        )
    };
    api.check(e, || {
        format!(
            "encoding the tensor map of argument #{} (extents {:?}, box {:?}) for `{kernel}`",
            shape.arg, shape.dims, shape.boxed
        )
    })?;
    Ok(map)
}
