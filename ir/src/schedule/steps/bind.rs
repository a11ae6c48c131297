//! `bind(loop, blockIdx.x)`: a loop becomes a GPU index.

use crate::diag::{Diagnostic, Span};
use crate::schedule::*;
use crate::syntax::StepStmt;

pub(crate) fn parse(s: &StepStmt) -> Result<StepKind, Diagnostic> {
    const EX: &str = "bind(io, blockIdx.x)";
    results(s, 0, EX)?;
    arity(s, 2, EX)?;
    let target = arg_name(&s.args[0], "the loop to bind")?;
    let a = arg_name(&s.args[1], "a GPU index such as `threadIdx.x`")?;
    let axis = GpuAxis::parse(&a.name).ok_or_else(|| {
        Diagnostic::new(a.span, format!("unknown GPU index `{}`", a.name))
            .suggest(&a.name, GpuAxis::ALL)
            .hint("GPU indices are blockIdx.{x,y,z} and threadIdx.{x,y,z}")
    })?;
    Ok(StepKind::Bind { target, axis })
}

pub(crate) fn apply(
    st: &mut State,
    target: &Name,
    axis: GpuAxis,
    span: Span,
) -> Result<(), Diagnostic> {
    let v = st.lookup(target)?;
    if st.nest.var(v).reduce {
        // A reduction loop on a blockIdx splits the reduction over
        // work-groups that combine their parts atomically; whether the
        // stage allows that is checked once all steps are applied
        // (`State::check_grid_reduction`).
        if let GpuAxis::Thread(_) = axis {
            if let Some(other) = st.nest.order.iter().find(|o| {
                st.nest.var(**o).reduce
                    && matches!(st.nest.var(**o).kind, LoopKind::Bound(GpuAxis::Thread(_)))
            }) {
                return Err(Diagnostic::new(span, format!("reduction loop `{}` is already bound to threads; one reduction loop per stage can be", st.nest.var(*other).name)));
            }
        }
    }
    if let LoopKind::Bound(prev) = st.nest.var(v).kind {
        return Err(Diagnostic::new(
            target.span,
            format!("loop `{}` is already bound to {prev}", target.name),
        ));
    }
    if let Some(other) = st.nest.bound(axis) {
        let o = st.nest.var(other);
        return Err(Diagnostic::new(
            span,
            format!("{axis} is already bound to loop `{}`", o.name),
        )
        .label("second binding")
        .hint(format!(
            "each GPU index can be bound once; `{}` was bound at {}",
            o.name,
            st.at(st.bind_span(other))
        )));
    }
    if let GpuAxis::Thread(_) = axis {
        let ext = &st.nest.var(v).extent;
        let Some(e) = ext.as_const() else {
            return Err(Diagnostic::new(span, format!("loop `{}` has the symbolic extent {} and cannot be bound to {axis}", target.name, ext.display(&st.size_names(), &st.nest.var_names())))
                .hint("the block size must be a constant: split the loop by a constant factor and bind the inner loop"));
        };
        let threads: i64 = st.threads() * e;
        if threads > MAX_BLOCK_THREADS {
            return Err(Diagnostic::new(span, format!("this binding makes {threads} threads per block; the limit is {MAX_BLOCK_THREADS}"))
                .hint("use a smaller split factor for the thread loops"));
        }
    }
    st.nest.vars[v.0 as usize].kind = LoopKind::Bound(axis);
    st.bind_spans.insert(v, span);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testing::nest;
    use crate::schedule::{Dim, GpuAxis, LoopKind};

    #[test]
    fn binds_once_with_constant_thread_extents() {
        let n = nest(&[
            "co, ci = split(c, 64)",
            "bind(ci, threadIdx.x)",
            "bind(co, blockIdx.x)",
        ])
        .unwrap();
        let ci = n.order[2];
        assert_eq!(n.var(ci).kind, LoopKind::Bound(GpuAxis::Thread(Dim::X)));
        let e = nest(&["bind(c, threadIdx.x)"]).unwrap_err();
        assert!(e.contains("symbolic extent"), "{e}");
        let e = nest(&["bind(r, blockIdx.x)", "bind(c, blockIdx.x)"]).unwrap_err();
        assert!(e.contains("already bound"), "{e}");
        let e = nest(&["bind(r, blockIdx.w)"]).unwrap_err();
        assert!(e.contains("unknown GPU index"), "{e}");
        let e = nest(&["co, ci = split(c, 2048)", "bind(ci, threadIdx.x)"]).unwrap_err();
        assert!(e.contains("threads per block"), "{e}");
    }
}
