//! `scan(c, threads=256, per=4)`: a scan stage (`Y[r, c] = cumsum(X[r, c], c)`)
//! computed by one work-group per row of `c`: the row is walked in chunks
//! of `threads * per` elements; each thread folds its `per` consecutive
//! elements in registers, the work-group scans the threads' totals in LDS
//! (one barrier pair per step of the tree), and a carry takes each chunk's
//! total to the next. The stage's other axes go to blockIdx.x. Without
//! this step a scan is the triangular reduction that defines it, which
//! any schedule may lower (quadratic work).

use crate::diag::{Diagnostic, Span};
use crate::schedule::*;
use crate::syntax::StepStmt;

pub(crate) fn parse(s: &StepStmt) -> Result<StepKind, Diagnostic> {
    const EX: &str = "scan(c, threads=256, per=4)";
    results(s, 0, EX)?;
    let Some(first) = s.args.first() else {
        return Err(
            Diagnostic::new(s.span, "`scan` needs the scanned axis").hint(format!("write `{EX}`"))
        );
    };
    let axis = arg_name(first, "the scanned axis")?;
    let (mut threads, mut per) = (256, 4);
    for a in &s.args[1..] {
        match a.key.as_ref().map(|k| k.0.as_str()) {
            Some("threads") => threads = arg_int(a, "threads per work-group")?,
            Some("per") => per = arg_int(a, "consecutive elements per thread")?,
            _ => {
                return Err(
                    Diagnostic::new(a.value.span, "expected `threads=N` or `per=N`")
                        .hint(format!("write `{EX}`")),
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
    if !(1..=16).contains(&per) {
        return Err(Diagnostic::new(
            s.span,
            format!("per={per}: from 1 to 16 elements per thread"),
        ));
    }
    Ok(StepKind::Scan {
        axis,
        threads: threads as u32,
        per: per as u32,
    })
}

pub(crate) fn apply(
    st: &mut State,
    axis: &Name,
    threads: u32,
    per: u32,
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
    st.nest.scan = Some(ScanPlan { threads, per, span });
    Ok(())
}
