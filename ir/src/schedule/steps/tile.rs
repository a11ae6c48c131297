//! `xo, yo, xi, yi = tile(x, y, fx, fy)`: two splits and a reorder.

use crate::diag::{Diagnostic, Span};
use crate::schedule::*;
use crate::syntax::StepStmt;

pub(crate) fn parse(s: &StepStmt) -> Result<StepKind, Diagnostic> {
    const EX: &str = "yo, xo, yi, xi = tile(y, x, 16, 16)";
    let r = results(s, 4, EX)?;
    arity(s, 4, EX)?;
    Ok(StepKind::Tile {
        x: arg_name(&s.args[0], "a loop")?,
        y: arg_name(&s.args[1], "a loop")?,
        fx: arg_int(&s.args[2], "the tile factor")?,
        fy: arg_int(&s.args[3], "the tile factor")?,
        results: r
            .try_into()
            .map_err(|_| Diagnostic::new(s.span, "internal: result count"))?,
    })
}

pub(crate) fn apply(
    st: &mut State,
    x: &Name,
    y: &Name,
    fx: i64,
    fy: i64,
    results: &[Name; 4],
    span: Span,
) -> Result<(), Diagnostic> {
    let [xo, yo, xi, yi] = results;
    super::split::apply(st, x, SplitBy::Factor(fx), xo, xi, span)?;
    super::split::apply(st, y, SplitBy::Factor(fy), yo, yi, span)?;
    super::reorder::apply(st, &[xo.clone(), yo.clone(), xi.clone(), yi.clone()])
}

#[cfg(test)]
mod tests {
    use super::super::testing::{nest, order};

    #[test]
    fn tiles_are_two_splits_and_a_reorder() {
        let n = nest(&["ro, co, ri, ci = tile(r, c, 8, 32)"]).unwrap();
        assert_eq!(order(&n), ["ro", "co", "ri", "ci"]);
        let e = nest(&["a, b = tile(r, c, 8, 32)"]).unwrap_err();
        assert!(e.contains("needs 4 name(s)"), "{e}");
    }
}
