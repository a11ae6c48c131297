//! `topk(c, threads=256, per=4)`: a top-k stage (`V[r, j], I[r, j] =
//! topk(X[r, c], c)`) computed by one work-group per row: each thread
//! keeps the k best keys of its elements (`per` of them loaded per step,
//! `threads` apart) sorted in registers; the threads' lists are merged
//! in a tree through LDS (a bitonic merge per step). A top-k has no other
//! lowering: this step is its schedule (the default rule writes it).

use crate::diag::{Diagnostic, Span};
use crate::schedule::*;
use crate::syntax::StepStmt;

/// LDS for the threads' lists: 8-byte keys, `threads · k` of them
/// (k rounded up to a power of two).
pub const LDS_BYTES: u32 = 32 * 1024;

pub(crate) fn parse(s: &StepStmt) -> Result<StepKind, Diagnostic> {
    let (axis, threads, per) = super::scan::group_args(s, "topk(c, threads=256, per=4)", 16)?;
    Ok(StepKind::TopK { axis, threads, per })
}

pub(crate) fn apply(
    st: &mut State,
    axis: &Name,
    threads: u32,
    per: u32,
    span: Span,
) -> Result<(), Diagnostic> {
    let Some((ranked, k)) = st.topk.clone() else {
        return Err(Diagnostic::new(span, "`topk` is for top-k stages")
            .hint("a top-k stage computes `V[r, j], I[r, j] = topk(X[r, c], c)`"));
    };
    if axis.name != ranked {
        return Err(Diagnostic::new(
            axis.span,
            format!("the stage ranks along `{ranked}`, not `{}`", axis.name),
        )
        .hint(format!("write `topk({ranked}, ...)`")));
    }
    if st.nest.topk.is_some() {
        return Err(Diagnostic::new(span, "`topk` given twice"));
    }
    let bytes = threads * k.next_power_of_two() * 8;
    if bytes > LDS_BYTES {
        let most = LDS_BYTES / (k.next_power_of_two() * 8);
        return Err(Diagnostic::new(
            span,
            format!("threads={threads} with k={k}: the lists take {bytes} bytes of LDS, more than {LDS_BYTES}"),
        )
        .hint(format!("use threads={} or fewer", most.min(1024))));
    }
    st.nest.topk = Some(GroupPlan {
        threads,
        per,
        span,
        chunks: None,
        part: ScanPart::Main,
    });
    Ok(())
}
