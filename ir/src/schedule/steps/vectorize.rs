//! `vectorize(v)`: the loop becomes vector loads and stores.

use crate::diag::{Diagnostic, Span};
use crate::schedule::*;
use crate::syntax::StepStmt;

pub(crate) fn parse(s: &StepStmt) -> Result<StepKind, Diagnostic> {
    results(s, 0, "vectorize(v)")?;
    arity(s, 1, "vectorize(v)")?;
    Ok(StepKind::Vectorize(arg_name(
        &s.args[0],
        "the loop to vectorize",
    )?))
}

pub(crate) fn apply(st: &mut State, n: &Name, span: Span) -> Result<(), Diagnostic> {
    let v = st.lookup(n)?;
    st.not_bound(v, n)?;
    match st.nest.var(v).extent.as_const() {
        Some(2 | 4 | 8 | 16) => {}
        other => {
            return Err(Diagnostic::new(
                span,
                format!(
                    "loop `{}` has {} iterations; vectorize needs 2, 4, 8 or 16",
                    n.name,
                    other.map_or("a symbolic number of".to_string(), |e| e.to_string())
                ),
            )
            .hint("split the loop by the vector width and vectorize the inner loop"));
        }
    }
    st.nest.vars[v.0 as usize].kind = LoopKind::Vectorized;
    st.nest.vectorized.push((v, span));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testing::nest;
    use crate::schedule::LoopKind;

    #[test]
    fn vectorizes_power_of_two_widths() {
        let n = nest(&["co, ci = split(c, 4)", "vectorize(ci)"]).unwrap();
        assert_eq!(n.var(n.order[2]).kind, LoopKind::Vectorized);
        assert_eq!(n.vectorized.len(), 1);
        let e = nest(&["co, ci = split(c, 3)", "vectorize(ci)"]).unwrap_err();
        assert!(e.contains("vectorize needs 2, 4, 8 or 16"), "{e}");
    }
}
