//! Kernel arguments as a device interface carries them ([`Arg`]), checked
//! against a module's launch document before anything runs, and turned
//! into a runtime's [`KernelArg`]s over its buffers.

use crate::error::{Error, Result};
use crate::launch::{self, ArgValue, DeviceMemory, KernelArg, LaunchInfo};
use crate::BufferId;
use serde::{Deserialize, Serialize};

/// One kernel argument: a device buffer (with the dtype and length the
/// kernel sees), a size, or a by-value scalar. It is also the wire form a
/// worker receives.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub enum Arg {
    /// A buffer of the device, with its dtype and length in elements; or
    /// a view of one, `len` elements from element `offset` on.
    Buffer {
        /// Buffer id.
        id: BufferId,
        /// Element type name.
        dtype: String,
        /// Elements.
        len: u64,
        /// Where the kernel's tensor starts, in elements (0: the buffer's
        /// start). Its byte offset must be a multiple of [`VIEW_ALIGN`].
        #[serde(default)]
        offset: u64,
    },
    /// A size.
    Size(i32),
    /// A scalar: dtype and little-endian bytes.
    Scalar {
        /// Type name.
        dtype: String,
        /// Value.
        #[serde(with = "serde_bytes")]
        bytes: Vec<u8>,
    },
}

/// The alignment, in bytes, of a view's start: compiled kernels assume a
/// tensor starts 16-byte aligned (vector loads, `cp.async`), as every
/// runtime's allocations do.
pub const VIEW_ALIGN: u64 = 16;

/// The `&'static` name of a dtype (as [`KernelArg`] keeps it) and its size.
pub fn known_dtype(d: &str) -> Result<(&'static str, usize)> {
    launch::dtype(d).ok_or_else(|| Error::Limit(format!("unknown dtype `{d}`")))
}

/// Checks a launch of `kernel` with `args` against the module's launch
/// document: the kernel exists, and the arguments' number, kinds, dtypes
/// and sizes are what it was compiled for.
pub fn check_launch(info: &LaunchInfo, kernel: &str, args: &[Arg]) -> Result<()> {
    let refuse = |reason: String| Error::BadLaunch {
        kernel: kernel.into(),
        reason,
    };
    let kl = info
        .kernels
        .iter()
        .find(|k| k.name == kernel)
        .ok_or_else(|| refuse("the module has no such kernel".into()))?;
    let dtype = |d: &str| launch::dtype(d).map_or("unknown", |(n, _)| n);
    let values: Vec<ArgValue> = args
        .iter()
        .map(|a| match a {
            Arg::Buffer { dtype: d, len, .. } => ArgValue::Buffer {
                dtype: dtype(d),
                len: *len as usize,
            },
            Arg::Size(v) => ArgValue::Size(*v),
            Arg::Scalar { dtype: d, bytes } => ArgValue::Scalar {
                dtype: dtype(d),
                bytes: bytes.clone(),
            },
        })
        .collect();
    info.check_args(kl, &values).map(|_| ()).map_err(refuse)
}

/// A runtime's launch arguments for `args`, each buffer looked up with
/// `buffer` (which returns the memory and its size in bytes); a buffer
/// shorter than the length the argument claims is refused.
pub fn kernel_args<'b, B: DeviceMemory + 'b>(
    args: &[Arg],
    buffer: impl Fn(BufferId) -> Option<(&'b B, u64)>,
) -> Result<Vec<KernelArg>> {
    args.iter()
        .map(|a| {
            Ok(match a {
                Arg::Buffer {
                    id,
                    dtype,
                    len,
                    offset,
                } => {
                    let (b, bytes) = buffer(*id).ok_or(Error::NoBuffer(*id))?;
                    let (dtype, size) = known_dtype(dtype)?;
                    let start = offset.checked_mul(size as u64);
                    let end = len
                        .checked_add(*offset)
                        .and_then(|n| n.checked_mul(size as u64))
                        .filter(|&n| n <= bytes);
                    let (Some(start), Some(_)) = (start, end) else {
                        return Err(Error::Limit(if *offset == 0 {
                            format!("buffer #{id} holds {bytes} bytes, not {len} {dtype}")
                        } else {
                            format!(
                                "buffer #{id} holds {bytes} bytes, not {len} {dtype} from element {offset} on"
                            )
                        }));
                    };
                    if start % VIEW_ALIGN != 0 {
                        return Err(Error::Limit(format!(
                            "a view of buffer #{id} starts at byte {start}, not a multiple of {VIEW_ALIGN} (element {offset} of {dtype})"
                        )));
                    }
                    KernelArg::raw_buffer_at(b, dtype, *len as usize, start)
                }
                Arg::Size(v) => KernelArg::size(*v),
                Arg::Scalar { dtype, bytes } => {
                    KernelArg::raw_scalar(known_dtype(dtype)?.0, bytes.clone())
                }
            })
        })
        .collect()
}

/// Seeded random elements of `dtype` filling `n` bytes: floats in [-1, 1),
/// integers small and non-zero-biased, booleans 0/1. What
/// [`Device::fill`](crate::Device::fill) writes on every device, so a fill
/// is the same wherever it runs.
pub fn random_bytes(dtype: &str, n: usize, seed: u64) -> Vec<u8> {
    random_part(&mut random_state(seed), dtype, n)
}

/// The generator state [`random_bytes`] starts from.
pub fn random_state(seed: u64) -> u64 {
    seed ^ 0x9E37_79B9_7F4A_7C15
}

/// The next `n` bytes of the stream `state` is at: parts of a multiple of
/// 8 bytes, made one after the other, are [`random_bytes`] of their total.
pub fn random_part(state: &mut u64, dtype: &str, n: usize) -> Vec<u8> {
    let s = state;
    let mut next = || {
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        *s
    };
    let size = launch::dtype(dtype).map_or(1, |(_, n)| n);
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
