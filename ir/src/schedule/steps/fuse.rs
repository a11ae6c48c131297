//! `f = fuse(outer, inner)`: two adjacent loops become one.

use crate::diag::{Diagnostic, Span};
use crate::schedule::*;
use crate::syntax::StepStmt;

pub(crate) fn parse(s: &StepStmt) -> Result<StepKind, Diagnostic> {
    const EX: &str = "f = fuse(i, j)";
    let mut r = results(s, 1, EX)?;
    arity(s, 2, EX)?;
    Ok(StepKind::Fuse {
        outer: arg_name(&s.args[0], "a loop")?,
        inner: arg_name(&s.args[1], "a loop")?,
        fused: r.remove(0),
    })
}

pub(crate) fn apply(
    st: &mut State,
    outer: &Name,
    inner: &Name,
    fused: &Name,
    span: Span,
) -> Result<(), Diagnostic> {
    let a = st.lookup(outer)?;
    let b = st.lookup(inner)?;
    st.not_bound(a, outer)?;
    st.not_bound(b, inner)?;
    st.fresh(fused)?;
    if st.nest.var(a).reduce != st.nest.var(b).reduce {
        return Err(Diagnostic::new(
            span,
            format!(
                "`{}` and `{}` cannot be fused: one is a reduction loop, the other is not",
                outer.name, inner.name
            ),
        ));
    }
    let pa = st.nest.order.iter().position(|x| *x == a).expect("live");
    if st.nest.order.get(pa + 1) != Some(&b) {
        return Err(Diagnostic::new(
            span,
            format!("`{}` is not directly inside `{}`", inner.name, outer.name),
        )
        .hint("only adjacent loops can be fused; `reorder` them first"));
    }
    let eb = st.nest.var(b).extent.clone();
    let ext = counted(st, a, b, fused, span);
    let reduce = st.nest.var(a).reduce;
    let f = st.new_var(fused, ext, span, reduce);
    st.nest.order.splice(pa..=pa + 1, [f]);
    st.replace(a, Index::Var(f) / eb.clone(), span);
    st.replace(b, Index::Var(f) % eb, span);
    Ok(())
}

/// The fused loop's trip count. Where sizes without `max` could make it
/// pass [`COUNTER_MAX`], the loop runs `min(count, COUNTER_MAX)` times and
/// the launch must keep the count within it ([`Requirement`]), rather than
/// the stage refusing every unbounded fuse.
fn counted(st: &mut State, a: VarId, b: VarId, fused: &Name, span: Span) -> Index {
    // A clamp made by an earlier fuse: the new count covers it (a product
    // within the counter has factors within it, or is empty), so its
    // requirement gives way to the new one.
    let mut raw = |v: VarId| match st.nest.var(v).extent.clone() {
        Index::Bin(crate::index::IOp::Min, x, c) if c.as_const() == Some(COUNTER_MAX as i64) => {
            st.nest.requires.retain(|r| r.extent != *x);
            *x
        }
        e => e,
    };
    let ext = raw(a) * raw(b);
    let size_max: Vec<u64> = st.k.sizes.iter().map(|s| s.max).collect();
    let what = match st.stage_output {
        Some(t) => format!("loop `{}` of stage `{}`", fused.name, st.k.tensor(t).name),
        None => format!("loop `{}`", fused.name),
    };
    Requirement::counted(ext, &size_max, &mut st.nest.requires, || what, span)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{nest, order};

    #[test]
    fn fuses_adjacent_loops_only() {
        let n = nest(&["f = fuse(r, c)"]).unwrap();
        assert_eq!(order(&n), ["f"]);
        let e = nest(&["reorder(c, r)", "f = fuse(r, c)"]).unwrap_err();
        assert!(e.contains("is not directly inside"), "{e}");
    }
}
