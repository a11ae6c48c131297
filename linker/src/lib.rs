//! rocmc's linker crate.
//!
//! - [`link_code_object`] (feature `lld`, on by default): lld's ELF driver,
//!   embedded in the process, turns an AMDGPU object into a code object.
//! - [`codeobject`], [`launch`], [`bundle`]: the readers of what a device
//!   loads, re-exported from `rocmc-device` (which the runtimes use without
//!   this crate).
//! - [`hw`]: per-processor hardware limits, for occupancy estimates.
//! - [`ptxas`]: NVIDIA's PTX assembler as an independent checker of PTX.

pub mod hw;
pub use rocmc_device::{bundle, codeobject, launch};
#[cfg(feature = "lld")]
mod lld;
pub mod ptxas;

#[cfg(feature = "lld")]
pub use lld::{link_code_object, link_shared_object, run_lld, LinkError};
