//! `occupancy(blocks=2)`: the kernel's code is generated so that at least
//! this many work-groups fit on one SM (CU) at once, as far as registers
//! decide: CUDA's `__launch_bounds__(threads, blocks)`, `.minnctapersm` in
//! PTX; on AMD `amdgpu-waves-per-eu`. The register allocator spills rather
//! than exceed the budget, so it is a trade the author measures.

use crate::diag::{Diagnostic, Span};
use crate::schedule::*;
use crate::syntax::StepStmt;

/// The most work-groups per SM a step may ask for (32 on NVIDIA GPUs).
const MAX_BLOCKS: i64 = 32;

pub(crate) fn parse(s: &StepStmt) -> Result<StepKind, Diagnostic> {
    const EX: &str = "occupancy(blocks=2)";
    results(s, 0, EX)?;
    arity(s, 1, EX)?;
    let a = &s.args[0];
    if a.key.as_ref().map(|k| k.0.as_str()) != Some("blocks") {
        return Err(Diagnostic::new(a.value.span, "expected `blocks=N`")
            .hint(format!("write `{EX}`: at least N work-groups per SM (CU)")));
    }
    let n = arg_int(a, "the number of work-groups per SM")?;
    if n > MAX_BLOCKS {
        return Err(Diagnostic::new(
            a.value.span,
            format!("blocks={n}: at most {MAX_BLOCKS} work-groups share an SM"),
        ));
    }
    Ok(StepKind::Occupancy(n as u32))
}

pub(crate) fn apply(st: &mut State, blocks: u32, span: Span) -> Result<(), Diagnostic> {
    if let Some((_, first)) = st.nest.min_blocks {
        let first = st.src.get(first.start..first.end).unwrap_or("");
        return Err(Diagnostic::new(span, "`occupancy` given twice")
            .hint(format!("keep one; the first is `{first}`")));
    }
    st.nest.min_blocks = Some((blocks, span));
    Ok(())
}
