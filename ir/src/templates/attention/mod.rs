//! The attention template: `O[i, d] = attention(Q[i, e], K[j, e], V[j, d],
//! scale=s)` (and the log-sum-exp `L[i]` beside it), softmax(Q·Kᵀ·s)·V
//! per query row ([`crate::kernel::Attention`]). Its spelling is a stage
//! form (`front.rs`); its rule (`rule.rs`) picks `flash` on the matrix
//! instructions, else `rowwise`, and `lower/` builds both.
//!
//! The five ordinary stages a user writes for it (the scores, their
//! maximum, the exponentials, their sum and the weighted sum of the
//! values) are found and made the template (`written.rs`). Not yet a
//! template in full: its meaning is the interpreter's own
//! (`interp::stages::attention_row`), not those stages, so there is no
//! fallback where the fast path refuses.

use crate::kernel::{Kernel, Stage};

pub(crate) mod front;
pub(crate) mod lower;
pub(crate) mod rule;
pub(crate) mod written;

/// No one stage is an attention: its written-out form is five
/// (`written::rewrite`).
pub fn recognise(_k: &Kernel, _st: &mut Stage) -> bool {
    false
}
