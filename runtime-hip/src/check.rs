//! Launch checks against the code object's own metadata and rocmc's launch
//! geometry, before the GPU sees anything.

use crate::error::{Error, Result};
use rocmc_device::codeobject::KernelInfo;
use rocmc_device::launch::{KernelLaunch, LaunchInfo};

pub use rocmc_device::launch::ArgValue;

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
    let (grid, block) = launch.check_args(kl, args).map_err(bad)?;
    let threads: u64 = kl.block.iter().map(|b| *b as u64).product();
    if threads > meta.max_flat_workgroup_size {
        return Err(bad(format!(
            "block of {threads} threads exceeds the kernel's maximum work-group size {}",
            meta.max_flat_workgroup_size
        )));
    }
    if let Some(d) =
        (0..3).find(|&d| u64::from(grid[d]) * u64::from(block[d]) > u64::from(u32::MAX))
    {
        // The dispatch packet counts work items in 32 bits per dimension.
        return Err(bad(format!(
            "its grid would have {} work-groups of {} along {}, more than the 2^32 - 1 work \
             items an AMD dispatch counts (grid {})",
            grid[d],
            block[d],
            ["x", "y", "z"][d],
            kl.grid_text.join(" x ")
        )));
    }
    Ok((grid, block))
}
