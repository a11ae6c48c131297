//! rocmc's code generators.
//!
//! Loop IR ([`rocmc_ir::Program`]) becomes an LLVM module: the
//! target-neutral lowering (`function/`, split by topic: statements,
//! control, fills, matrix, addresses, expressions, casts, scatters, index
//! arithmetic, math, the CPU's lockstep body) writes each kernel's body,
//! and the [`backend`] that `backend::lookup` picks for the target
//! supplies what the target decides (ABI, address spaces, indices,
//! barriers), through `emit.rs`'s `Emit`. The module is optimised with
//! `default<O3>` and emitted as LLVM IR text, assembly (GCN, or PTX for
//! NVIDIA) or an ELF relocatable object; linking is the linker crate's job.
//! [`jit`] (also named [`host`]) runs the same lowering on this machine
//! through LLVM's JIT.

pub mod backend;
mod cache;
pub mod disasm;
mod emit;
mod function;
pub mod jit;
mod llvm;
mod orc;
pub mod target;

pub use jit as host;
pub use llvm::{compile, set_crash_context, Emitted, Request};
pub use target::{AmdTarget, FeatureMode, NvidiaTarget, Target, TargetError, TargetId, Vendor};

/// Errors of the back end. User mistakes (an unknown target) are
/// [`TargetError`]s; the rest mean LLVM refused what we built.
#[derive(Debug, thiserror::Error)]
pub enum CodegenError {
    #[error(transparent)]
    Target(#[from] TargetError),
    /// LLVM refused an operation on what rocmc built (a rocmc bug).
    #[error("LLVM: {0}")]
    Llvm(String),
    /// rocmc failed on its own: a compiler thread died (a rocmc bug).
    #[error("{0}")]
    Internal(String),
    /// LLVM's backend reported an error for a module rocmc built (e.g. an
    /// operation it cannot lower for this target), instead of exiting.
    #[error("LLVM's backend: {message}")]
    Backend {
        /// LLVM's diagnostics, joined.
        message: String,
        /// The kernel function they are about: the module's only one, or
        /// the one LLVM's message names.
        kernel: Option<String>,
    },
}
