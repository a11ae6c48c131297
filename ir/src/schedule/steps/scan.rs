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
    let (axis, threads, per) = group_args(s, "scan(c, threads=256, per=4)", 16)?;
    Ok(StepKind::Scan { axis, threads, per })
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
    st.nest.scan = Some(GroupPlan { threads, per, span });
    Ok(())
}
