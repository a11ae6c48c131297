//! `unroll(k)`: the loop is unrolled (constant extent, at most 1024).

use crate::diag::{Diagnostic, Span};
use crate::schedule::*;
use crate::syntax::StepStmt;

pub(crate) fn parse(s: &StepStmt) -> Result<StepKind, Diagnostic> {
    results(s, 0, "unroll(k)")?;
    arity(s, 1, "unroll(k)")?;
    Ok(StepKind::Unroll(arg_name(
        &s.args[0],
        "the loop to unroll",
    )?))
}

pub(crate) fn apply(st: &mut State, n: &Name, span: Span) -> Result<(), Diagnostic> {
    let v = st.lookup(n)?;
    st.not_bound(v, n)?;
    let ext = &st.nest.var(v).extent;
    match ext.as_const() {
        Some(e) if e <= 1024 => {}
        Some(e) => {
            return Err(Diagnostic::new(
                span,
                format!(
                    "loop `{}` has {e} iterations; unrolling more than 1024 is refused",
                    n.name
                ),
            )
            .hint("split it and unroll the inner loop"))
        }
        None => {
            return Err(Diagnostic::new(
                span,
                format!(
                    "loop `{}` has a symbolic extent and cannot be unrolled",
                    n.name
                ),
            )
            .hint("split it by a constant factor and unroll the inner loop"))
        }
    }
    st.nest.vars[v.0 as usize].kind = LoopKind::Unrolled;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testing::nest;
    use crate::schedule::LoopKind;

    #[test]
    fn unrolls_constant_loops_only() {
        let n = nest(&["co, ci = split(c, 4)", "unroll(ci)"]).unwrap();
        assert_eq!(n.var(n.order[2]).kind, LoopKind::Unrolled);
        let e = nest(&["unroll(c)"]).unwrap_err();
        assert!(e.contains("symbolic extent"), "{e}");
        let e = nest(&["co, ci = split(c, 4096)", "unroll(ci)"]).unwrap_err();
        assert!(e.contains("more than 1024"), "{e}");
    }
}
