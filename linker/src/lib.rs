//! rocmc's linker crate.
//!
//! - [`link_code_object`] (feature `lld`, on by default): lld's ELF driver,
//!   embedded in the process, turns an AMDGPU object into a code object.
//! - [`codeobject::read`]: a reader for code objects (ours and clang's).
//! - [`launch`]: rocmc's launch-geometry document stored in code objects.
//! - [`bundle`]: clang offload bundles (several code objects in one file).
//! - [`hw`]: per-processor hardware limits, for occupancy estimates.
//! - [`ptxas`]: NVIDIA's PTX assembler as an independent checker of PTX.

pub mod bundle;
pub mod codeobject;
pub mod hw;
pub mod launch;
#[cfg(feature = "lld")]
mod lld;
pub mod ptxas;

#[cfg(feature = "lld")]
pub use lld::{link_code_object, link_shared_object, run_lld, LinkError};
