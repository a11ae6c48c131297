//! `outer, inner = split(loop, factor)` or `split(loop, nparts=N)`: one loop becomes two; a factor that does not divide the extent adds a guard.

use crate::diag::{Diagnostic, Span};
use crate::schedule::*;
use crate::syntax::StepStmt;

pub(crate) fn parse(s: &StepStmt) -> Result<StepKind, Diagnostic> {
    const EX: &str = "outer, inner = split(i, 64)";
    let r = results(s, 2, EX)?;
    arity(s, 2, EX)?;
    let target = arg_name(&s.args[0], "the loop to split")?;
    let by = match s.args[1].key.as_ref().map(|k| k.0.as_str()) {
        None | Some("factor") => SplitBy::Factor(arg_int(&s.args[1], "the split factor")?),
        Some("nparts") => SplitBy::Parts(arg_int(&s.args[1], "nparts")?),
        Some(other) => {
            return Err(Diagnostic::new(
                s.args[1].key.as_ref().map_or(s.span, |k| k.1),
                format!("unknown argument `{other}`"),
            )
            .hint("use `factor=` or `nparts=`"))
        }
    };
    let [outer, inner]: [Name; 2] = r
        .try_into()
        .map_err(|_| Diagnostic::new(s.span, "internal: result count"))?;
    Ok(StepKind::Split {
        target,
        by,
        outer,
        inner,
    })
}

/// Applies a split (also the two splits of `tile`).
pub(crate) fn apply(
    st: &mut State,
    target: &Name,
    by: SplitBy,
    outer: &Name,
    inner: &Name,
    span: Span,
) -> Result<(), Diagnostic> {
    let v = st.lookup(target)?;
    st.not_bound(v, target)?;
    st.fresh(outer)?;
    st.fresh(inner)?;
    if outer.name == inner.name {
        return Err(Diagnostic::new(
            inner.span,
            "the two loops of a split need different names",
        ));
    }
    let ext = st.nest.var(v).extent.clone();
    let (oe, ie) = match by {
        SplitBy::Factor(f) => (ext.clone().ceil_div(Index::c(f)), Index::c(f)),
        SplitBy::Parts(p) => (Index::c(p), ext.clone().ceil_div(Index::c(p))),
    };
    let exact = match (&ext, &oe, &ie) {
        (Index::Const(e), Index::Const(o), Index::Const(i)) => o * i == *e,
        _ => false,
    };
    let reduce = st.nest.var(v).reduce;
    let o = st.new_var(outer, oe, span, reduce);
    let i = st.new_var(inner, ie.clone(), span, reduce);
    let pos = st
        .nest
        .order
        .iter()
        .position(|x| *x == v)
        .expect("live loop is in order");
    st.nest.order.splice(pos..=pos, [o, i]);
    let value = Index::Var(o) * ie + Index::Var(i);
    st.replace(v, value.clone(), span);
    if !exact {
        st.nest.guards.push(Guard { value, extent: ext });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testing::{nest, order};

    #[test]
    fn splits_and_guards_what_does_not_divide() {
        let n = nest(&["co, ci = split(c, 64)", "ro, ri = split(r, nparts=4)"]).unwrap();
        assert_eq!(order(&n), ["ro", "ri", "co", "ci"]);
        assert_eq!(n.guards.len(), 2, "symbolic extents need guards");
        let e = nest(&["a, a = split(c, 64)"]).unwrap_err();
        assert!(
            e.contains("already used") || e.contains("different names"),
            "{e}"
        );
        let e = nest(&["a, b = split(c, 0)"]).unwrap_err();
        assert!(e.contains("must be positive"), "{e}");
        let e = nest(&["a, b = split(c, size=4)"]).unwrap_err();
        assert!(e.contains("unknown argument `size`"), "{e}");
    }
}
