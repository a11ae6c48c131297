//! rocmc's tensor IR.
//!
//! The pipeline inside this crate:
//!
//! ```text
//! kernel.toml ─parse_kernel───────▶ Kernel (tensor IR, checked)
//!             ─schedule::apply─────▶ LoopNest per stage
//!             ─lower───────────────▶ loops::Program (loop IR: one GPU kernel per stage,
//!                                    except stages inlined or computed at another;
//!                                    lower::PASSES, loops::verify after each)
//! interp::run: the reference interpreter, the definition of what a Kernel means
//! interp::run_lowered: loop IR executed block by block, with an LDS race check
//! ```

pub mod diag;
pub mod dtype;
pub mod front;
pub mod index;
pub mod interp;
pub mod kernel;
pub mod loops;
pub mod lower;
pub mod mtype;
mod pipeline;
pub mod plan;
pub mod reference;
pub mod rng;
pub mod schedule;
pub mod syntax;
pub mod templates;
pub mod tune;

pub use diag::{Diagnostic, KernelError, Span};
pub use dtype::DType;
pub use index::{IOp, Index, SizeId, VarId};
pub use kernel::*;
pub use loops::Program;
pub use pipeline::{
    lower, lower_file, lower_for, parse_kernel, parse_kernel_defaults, parse_kernel_for,
    parse_kernel_timed, parse_kernel_with,
};
