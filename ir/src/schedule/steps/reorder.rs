//! `reorder(a, b, ...)`: the named loops take the positions they occupy, in the order given.

use crate::diag::Diagnostic;
use crate::schedule::*;
use crate::syntax::StepStmt;

pub(crate) fn parse(s: &StepStmt) -> Result<StepKind, Diagnostic> {
    results(s, 0, "reorder(j, i)")?;
    if s.args.len() < 2 {
        return Err(Diagnostic::new(
            s.span,
            "`reorder` needs at least two loops",
        ));
    }
    Ok(StepKind::Reorder(
        s.args
            .iter()
            .map(|a| arg_name(a, "a loop"))
            .collect::<Result<_, _>>()?,
    ))
}

pub(crate) fn apply(st: &mut State, names: &[Name]) -> Result<(), Diagnostic> {
    let mut vs = Vec::new();
    for n in names {
        let v = st.lookup(n)?;
        if vs.contains(&v) {
            return Err(Diagnostic::new(
                n.span,
                format!("loop `{}` appears twice in reorder", n.name),
            ));
        }
        vs.push(v);
    }
    let mut slots: Vec<usize> = vs
        .iter()
        .map(|v| st.nest.order.iter().position(|x| x == v).expect("live"))
        .collect();
    slots.sort_unstable();
    for (slot, v) in slots.into_iter().zip(vs) {
        st.nest.order[slot] = v;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testing::{nest, order};

    #[test]
    fn reorders_in_place() {
        let n = nest(&["co, ci = split(c, 4)", "reorder(ci, r)"]).unwrap();
        assert_eq!(order(&n), ["ci", "co", "r"]);
        let e = nest(&["reorder(r, r)"]).unwrap_err();
        assert!(e.contains("appears twice"), "{e}");
        let e = nest(&["reorder(r)"]).unwrap_err();
        assert!(e.contains("at least two loops"), "{e}");
    }
}
