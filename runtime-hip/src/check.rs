//! Launch checks against the code object's own metadata and rocmc's launch
//! geometry, before the GPU sees anything.

use crate::error::{Error, Result};
use rocmc_linker::codeobject::KernelInfo;
use rocmc_linker::launch::{ArgRole, KernelLaunch, LaunchInfo};
use std::collections::HashMap;

/// One argument as the caller passes it.
#[derive(Clone, Debug, PartialEq)]
pub enum ArgValue {
    /// A device buffer: its element type name (`f32`) and length in elements.
    /// A device buffer of `len` elements of dtype `dtype`.
    Buffer {
        /// Element type name (`f32`).
        dtype: &'static str,
        /// Length in elements.
        len: usize,
    },
    /// A 32-bit size argument.
    Size(i32),
    /// A by-value scalar: its type name and little-endian bytes.
    /// A by-value scalar of dtype `dtype` and its bytes.
    Scalar {
        /// Type name (`f32`).
        dtype: &'static str,
        /// Little-endian value.
        bytes: Vec<u8>,
    },
}

impl ArgValue {
    fn describe(&self) -> String {
        match self {
            ArgValue::Buffer { dtype, len } => format!("a buffer of {len} {dtype}"),
            ArgValue::Size(v) => format!("the size {v}"),
            ArgValue::Scalar { dtype, .. } => format!("a {dtype} scalar"),
        }
    }
}

/// Checks `args` against the kernel's metadata (count, size and kind of each
/// explicit argument) and, when rocmc's launch geometry is present, against
/// dtypes, buffer lengths implied by the sizes, and size bounds. Returns the
/// grid and block to launch with.
pub fn check_launch(
    meta: &KernelInfo,
    launch: Option<&LaunchInfo>,
    args: &[ArgValue],
) -> Result<([u32; 3], [u32; 3])> {
    let bad = |reason: String| Error::BadLaunch {
        kernel: meta.name.clone(),
        reason,
    };
    let explicit: Vec<_> = meta
        .args
        .iter()
        .filter(|a| !a.value_kind.starts_with("hidden_"))
        .collect();
    if explicit.len() != args.len() {
        return Err(bad(format!(
            "the kernel takes {} arguments, {} given",
            explicit.len(),
            args.len()
        )));
    }
    for (i, (m, a)) in explicit.iter().zip(args).enumerate() {
        let name = m.name.clone().unwrap_or_else(|| format!("#{i}"));
        let ok = match (m.value_kind.as_str(), a) {
            ("global_buffer", ArgValue::Buffer { .. }) => m.size == 8,
            ("by_value", ArgValue::Size(_)) => m.size == 4,
            ("by_value", ArgValue::Scalar { bytes, .. }) => m.size == bytes.len() as u64,
            _ => false,
        };
        if !ok {
            return Err(bad(format!(
                "argument {i} `{name}` is a {} of {} bytes, but {} was given",
                m.value_kind,
                m.size,
                a.describe()
            )));
        }
    }
    let Some(kl) = launch.and_then(|l| l.kernel(&meta.name)) else {
        return Err(bad("the code object has no rocmc launch geometry; launch it with an explicit grid and block".into()));
    };
    check_against_geometry(meta, launch.expect("checked above"), kl, args)
}

fn check_against_geometry(
    meta: &KernelInfo,
    launch: &LaunchInfo,
    kl: &KernelLaunch,
    args: &[ArgValue],
) -> Result<([u32; 3], [u32; 3])> {
    let bad = |reason: String| Error::BadLaunch {
        kernel: meta.name.clone(),
        reason,
    };
    let mut sizes: HashMap<String, i64> = HashMap::new();
    for (la, a) in kl.args.iter().zip(args) {
        if let (ArgRole::Size, ArgValue::Size(v)) = (&la.role, a) {
            let max = launch
                .sizes
                .iter()
                .find(|s| s.name == la.name)
                .map_or(i32::MAX as u64, |s| s.max);
            if *v < 0 || *v as u64 > max {
                return Err(bad(format!(
                    "size `{}` = {v} is outside 0..={max}, the range the kernel was compiled for",
                    la.name
                )));
            }
            sizes.insert(la.name.clone(), *v as i64);
        }
    }
    for (la, a) in kl.args.iter().zip(args) {
        match (&la.role, a) {
            (ArgRole::Buffer, ArgValue::Buffer { dtype, len }) => {
                if *dtype != la.dtype {
                    return Err(bad(format!(
                        "buffer `{}` holds {}, but a buffer of {dtype} was given",
                        la.name, la.dtype
                    )));
                }
                let mut need: i64 = 1;
                for e in &la.shape {
                    need = need.saturating_mul(e.eval(&sizes).ok_or_else(|| {
                        bad(format!("cannot evaluate the shape of `{}`", la.name))
                    })?);
                }
                if (*len as i64) < need {
                    return Err(bad(format!("buffer `{}` must hold at least {need} elements for these sizes, but has {len}", la.name)));
                }
            }
            (ArgRole::Scalar, ArgValue::Scalar { dtype, .. }) if *dtype != la.dtype => {
                return Err(bad(format!(
                    "scalar `{}` is {}, but a {dtype} was given",
                    la.name, la.dtype
                )));
            }
            _ => {}
        }
    }
    let mut grid = [1u32; 3];
    for (d, e) in kl.grid.iter().enumerate() {
        let v = e
            .eval(&sizes)
            .ok_or_else(|| bad("cannot evaluate the grid".into()))?;
        grid[d] = u32::try_from(v).map_err(|_| bad(format!("grid dimension {d} would be {v}")))?;
    }
    let threads: u64 = kl.block.iter().map(|b| *b as u64).product();
    if threads > meta.max_flat_workgroup_size {
        return Err(bad(format!(
            "block of {threads} threads exceeds the kernel's maximum work-group size {}",
            meta.max_flat_workgroup_size
        )));
    }
    Ok((grid, kl.block))
}
