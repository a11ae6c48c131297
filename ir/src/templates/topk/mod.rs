//! The top-k template: `V[r, j], I[r, j] = topk(X[r, c], c)`, the `k`
//! best elements of each row and their indices, best first
//! ([`crate::kernel::TopK`]). Its spelling is a stage form (`front.rs`),
//! its rule and fast lowering a work-group per row (`rule.rs`,
//! `lower.rs`).
//!
//! Not yet a template in full: its meaning is the interpreter's own
//! (`interp::stages::topk_row`, a sort of each row's keys), not ordinary
//! stages, so there is no written-out form to recognise and no fallback
//! where the fast path refuses.

use crate::kernel::{Kernel, Stage};

pub(crate) mod front;
pub(crate) mod lower;
pub(crate) mod rule;

/// A top-k is found only by its spelling (see the module's note).
pub fn recognise(_k: &Kernel, _st: &mut Stage) -> bool {
    false
}
