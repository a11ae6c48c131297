//! rocmc's AMDGPU back end.
//!
//! Loop IR ([`rocmc_ir::Program`]) becomes an LLVM module for
//! `amdgcn-amd-amdhsa` (one `amdgpu_kernel` function per GPU kernel), is
//! optimised with `default<O3>`, and is emitted as LLVM IR text, GCN
//! assembly or an ELF relocatable object. Linking into a code object is the
//! linker crate's job.

pub mod host;
mod index;
mod llvm;
mod math;
pub mod target;

pub use llvm::{compile, set_crash_context, Emitted, Request};
pub use target::{FeatureMode, Target, TargetError, TargetId};

/// Errors of the back end. User mistakes (an unknown target) are
/// [`TargetError`]s; the rest mean LLVM refused what we built.
#[derive(Debug, thiserror::Error)]
pub enum CodegenError {
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error("LLVM: {0}")]
    Llvm(String),
    /// LLVM's backend reported an error for a module rocmc built (e.g. an
    /// operation it cannot lower for this target), instead of exiting.
    #[error("LLVM's backend: {0}")]
    Backend(String),
}
