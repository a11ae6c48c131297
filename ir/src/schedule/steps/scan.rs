//! `scan(c, threads=256, per=4)`: a scan stage (`Y[r, c] = cumsum(X[r, c], c)`)
//! computed by one work-group per row of `c`: the row is walked in chunks
//! of `threads * per` elements; each thread folds its `per` consecutive
//! elements in registers, the work-group scans the threads' totals in LDS
//! (one barrier pair per step of the tree), and a carry takes each chunk's
//! total to the next. The stage's other axes go to blockIdx.x. Without
//! this step a scan is the triangular reduction that defines it, which
//! any schedule may lower (quadratic work).
//!
//! `chunks=S` splits each row over work-groups of S chunks (blockIdx.y):
//! three kernels, reduce-then-scan. The first writes each part's total
//! into the output at the next part's first element, the second scans
//! those totals in place (a row per work-group), and the third scans each
//! part from its carry, overwriting them. So the output must hold the
//! scan's own type.

use crate::diag::{Diagnostic, Span};
use crate::dtype::DType;
use crate::kernel::Stage;
use crate::schedule::*;
use crate::syntax::StepStmt;

/// Where a scan's rows cannot be split over work-groups (`chunks`): the
/// parts' totals wait in the output, so it must hold the scan's own type.
/// The scan's type where it does not. The `scan` step refuses `chunks`
/// and the default rule does not split for the same reason.
pub(crate) fn split_refused(st: &Stage) -> Option<DType> {
    let t = st.reduce()?.body.dtype;
    (st.value.dtype != t).then_some(t)
}

pub(crate) fn parse(s: &StepStmt) -> Result<StepKind, Diagnostic> {
    const EX: &str = "scan(c, threads=256, per=4, chunks=16)";
    let mut rest = s.clone();
    let mut chunks = None;
    rest.args.clear();
    for a in &s.args {
        if a.key.as_ref().is_some_and(|k| k.0 == "chunks") {
            let c = arg_int(a, "chunks per work-group")?;
            if c > 65536 {
                return Err(Diagnostic::new(
                    a.value.span,
                    format!("chunks={c}: at most 65536 chunks per work-group"),
                ));
            }
            chunks = Some(c as u32);
        } else {
            rest.args.push(a.clone());
        }
    }
    let (axis, threads, per) = group_args(&rest, EX, 16)?;
    Ok(StepKind::Scan {
        axis,
        threads,
        per,
        chunks,
    })
}

/// The arguments of a step that gives a row to one work-group (`scan`,
/// `topk`): the axis, then `threads=T` (a power of two from 32 to 1024)
/// and `per=P` (elements per thread and step, 1 to `max_per`), each
/// optional (256 and 4).
pub(crate) fn group_args(
    s: &StepStmt,
    example: &str,
    max_per: i64,
) -> Result<(Name, u32, u32), Diagnostic> {
    let name = &s.name;
    results(s, 0, example)?;
    let Some(first) = s.args.first() else {
        return Err(
            Diagnostic::new(s.span, format!("`{name}` needs the axis it runs along"))
                .hint(format!("write `{example}`")),
        );
    };
    let axis = arg_name(first, "the axis")?;
    let (mut threads, mut per) = (256, 4);
    for a in &s.args[1..] {
        match a.key.as_ref().map(|k| k.0.as_str()) {
            Some("threads") => threads = arg_int(a, "threads per work-group")?,
            Some("per") => per = arg_int(a, "elements per thread")?,
            _ => {
                return Err(
                    Diagnostic::new(a.value.span, "expected `threads=N` or `per=N`")
                        .hint(format!("write `{example}`")),
                )
            }
        }
    }
    if !(32..=1024).contains(&threads) || threads & (threads - 1) != 0 {
        return Err(Diagnostic::new(
            s.span,
            format!("threads={threads}: a power of two from 32 to 1024"),
        ));
    }
    if !(1..=max_per).contains(&per) {
        return Err(Diagnostic::new(
            s.span,
            format!("per={per}: from 1 to {max_per} elements per thread"),
        ));
    }
    Ok((axis, threads as u32, per as u32))
}

pub(crate) fn apply(
    st: &mut State,
    axis: &Name,
    threads: u32,
    per: u32,
    chunks: Option<u32>,
    span: Span,
) -> Result<(), Diagnostic> {
    let Some(scanned) = st.scan_axis.clone() else {
        return Err(Diagnostic::new(span, "`scan` is for scan stages").hint(
            "a scan stage computes `cumsum`, `cumprod`, `cummax` or `cummin` along one of its axes",
        ));
    };
    if axis.name != scanned {
        return Err(Diagnostic::new(
            axis.span,
            format!("the stage scans along `{scanned}`, not `{}`", axis.name),
        )
        .hint(format!("write `scan({scanned}, ...)`")));
    }
    if st.nest.scan.is_some() {
        return Err(Diagnostic::new(span, "`scan` given twice"));
    }
    st.nest.scan = Some(GroupPlan {
        threads,
        per,
        span,
        chunks,
        part: ScanPart::Main,
    });
    Ok(())
}
