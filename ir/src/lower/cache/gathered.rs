//! Tiles of gathered reads (`table[ids[t], c]`): the data subscripts
//! that pick one row for the whole tile, and the division arithmetic that
//! shows a paged cache's page to be one.

use super::Cx;
use crate::diag::Diagnostic;
use crate::index::{IOp, Index, VarId};
use crate::kernel::{Expr, ExprKind, TensorId};
use crate::loops::visit::walk;
use crate::loops::Stmt;
use crate::schedule::{self, LoopVar};

/// The subscripts of every gather of `tensor` in `body`.
pub(super) fn gathers_of(body: &[Stmt], tensor: TensorId) -> Vec<Vec<Expr>> {
    let mut out = Vec::new();
    walk(body, &mut |s| {
        for e in s.exprs() {
            e.each(&mut |x| {
                if let ExprKind::Gather { tensor: t, indices } = &x.kind {
                    if *t == tensor {
                        out.push(indices.clone());
                    }
                }
            });
        }
    });
    out
}

/// For a tile of gathered reads: per dimension, the data subscript, which
/// must be the same expression in every access and the same for every
/// thread and iteration the tile serves (uniform: it reads no loop inside
/// the tile's loop, no thread index of a shared tile, no staged array).
pub(super) fn gathered_dims(
    cx: &Cx,
    c: &schedule::Cache,
    loads: &[Vec<Index>],
    gathers: &[Vec<Expr>],
    varying: &[VarId],
) -> Result<Vec<Option<Expr>>, Diagnostic> {
    if gathers.is_empty() {
        return Ok(vec![None; cx.k.tensor(c.tensor).shape.len()]);
    }
    let t = &cx.k.tensor(c.tensor).name;
    let names: Vec<String> = cx.vars.iter().map(|v| v.name.clone()).collect();
    let err = |m: String| {
        Diagnostic::new(c.span, m).hint(
            "a gathered tile holds one gathered index per tile: cache at a loop inside \
             which the gathered subscript does not change (e.g. the token's loop of an embedding)",
        )
    };
    // A loop of one iteration is 0 (a compute_at part's row, `P.r + r`):
    // subscripts equal but for such loops gather the same row.
    let once: std::collections::HashMap<VarId, Index> = cx
        .vars
        .iter()
        .enumerate()
        .filter(|(_, v)| v.extent.as_const() == Some(1))
        .map(|(i, _)| (VarId(i as u32), Index::c(0)))
        .collect();
    let plain = |e: &Expr| e.map_indices(&|ix| ix.subst(&once));
    let gathers: Vec<Vec<Expr>> = gathers
        .iter()
        .map(|g| g.iter().map(plain).collect())
        .collect();
    let first = &gathers[0];
    let mut data = Vec::new();
    for (d, sub) in first.iter().enumerate() {
        if !sub.gather_subscript_is_clamped() {
            if gathers.iter().any(|g| g[d].gather_subscript_is_clamped()) {
                return Err(err(format!(
                    "`{t}`'s subscript {d} is gathered in some reads inside `{}` and affine in others",
                    cx.nest.var(c.at).name
                )));
            }
            data.push(None);
            continue;
        }
        if !loads.is_empty() || gathers.iter().any(|g| g[d] != *sub) {
            return Err(err(format!(
                "the reads of `{t}` inside `{}` gather different rows along dimension {d}",
                cx.nest.var(c.at).name
            )));
        }
        let mut uniform = true;
        sub.each(&mut |x| match &x.kind {
            ExprKind::Load { indices, .. } => {
                uniform &= !indices
                    .iter()
                    .any(|i| varying.iter().any(|v| i.uses_var(*v)))
            }
            ExprKind::Index(i) => uniform &= !varying.iter().any(|v| i.uses_var(*v)),
            ExprKind::Shared { .. } | ExprKind::Local { .. } => uniform = false,
            _ => {}
        });
        if !uniform {
            let shown = first_index_text(sub, &cx.k.size_names(), &names);
            return Err(err(format!(
                "`{t}`'s gathered subscript {d} ({shown}) changes inside `{}` (with a loop or thread \
                 index inside it, or through a staged array), so the tile has no single gathered row",
                cx.nest.var(c.at).name
            )));
        }
        data.push(Some(sub.clone()));
    }
    if c.vec > 1 {
        return Err(Diagnostic::new(
            c.span,
            format!("`{}` stages gathered reads of `{t}`, copied one element at a time; `vec` does not apply", c.name),
        )
        .hint("remove `vec`"));
    }
    Ok(data)
}

/// A short text for a data subscript in errors: its tensor reads.
pub(super) fn first_index_text(e: &Expr, sizes: &[String], vars: &[String]) -> String {
    let mut out = Vec::new();
    e.each(&mut |x| {
        if let ExprKind::Load { indices, .. } = &x.kind {
            let ix: Vec<String> = indices
                .iter()
                .map(|i| i.display(sizes, vars).to_string())
                .collect();
            out.push(format!("a read at [{}]", ix.join(", ")));
        }
    });
    if out.is_empty() {
        "a data subscript".into()
    } else {
        out.join(", ")
    }
}

/// The `varying` loops of constant extent, with their extents.
pub(super) fn var_ranges(vars: &[LoopVar], varying: &[VarId]) -> Vec<(VarId, i64)> {
    varying
        .iter()
        .filter_map(|v| Some((*v, vars.get(v.0 as usize)?.extent.as_const()?)))
        .collect()
}

/// `e` with each division or remainder by a constant `c` of `r + v`, where
/// `v` is a non-negative combination of the `ranges` loops that stays below
/// what divides both `r` and `c`, made `r / c` or `r % c + v`: equal for
/// every value the loops take (`r + v` never crosses a multiple of `c`),
/// and free of them where they only pick a row of one block.
pub(super) fn fold_divmod(e: &Index, ranges: &[(VarId, i64)]) -> Index {
    let Index::Bin(op, a, b) = e else {
        return e.clone();
    };
    let (a, b) = (fold_divmod(a, ranges), fold_divmod(b, ranges));
    let c = match (op, b.as_const()) {
        (IOp::Div | IOp::Mod, Some(c)) if c > 0 => c,
        _ => return Index::bin(*op, a, b),
    };
    let (terms, k) = a.affine();
    let (mut low, mut top, mut rest) = (Index::c(0), 0i64, Index::c(k));
    for (t, coef) in terms {
        match (&t, ranges.iter().find(|(v, _)| t == Index::Var(*v))) {
            (Index::Var(_), Some((_, n))) if coef > 0 => {
                top = top.saturating_add(coef.saturating_mul(n - 1));
                low = low + t.clone() * Index::c(coef);
            }
            _ => rest = rest + t * Index::c(coef),
        }
    }
    // `r` lies `g` or more below the next multiple of `c` (g: what divides
    // both), so `r + v` stays in `r`'s block while `v < g`.
    let gcd = |mut x: u64, mut y: u64| {
        while y != 0 {
            (x, y) = (y, x % y);
        }
        x
    };
    let g = gcd(rest.known_divisor(), c as u64);
    if top < 0 || top as u64 >= g {
        return Index::bin(*op, a, b);
    }
    match op {
        IOp::Div => Index::bin(IOp::Div, rest, b),
        _ if g == c as u64 => low,
        _ => Index::bin(IOp::Mod, rest, b) + low,
    }
}

#[cfg(test)]
mod fold_tests {
    use super::*;

    /// Every fold keeps the value at every point of the loops' ranges.
    #[test]
    fn folded_divisions_and_remainders_keep_their_values() {
        let (po, pi) = (VarId(0), VarId(1));
        let mut folded = 0;
        for a in [1, 4, 8, 16, 32] {
            for k in [0, 3, 8, 16] {
                for c in [4, 8, 16] {
                    for n in [2, 4, 8, 16] {
                        let x = Index::Var(po) * Index::c(a) + Index::Var(pi) + Index::c(k);
                        for op in [IOp::Div, IOp::Mod] {
                            let e = Index::bin(op, x.clone(), Index::c(c));
                            let f = fold_divmod(&e, &[(pi, n)]);
                            folded += usize::from(!f.uses_var(pi) || f != e);
                            for vo in 0..6 {
                                for vi in 0..n {
                                    assert_eq!(
                                        e.eval(&[], &[vo, vi]),
                                        f.eval(&[], &[vo, vi]),
                                        "{e:?} -> {f:?} at po={vo}, pi={vi}"
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
        // Not a test that cannot fail: most of these do fold.
        assert!(folded > 100, "{folded}");
        // The page of a 16-row split: free of the row.
        let x = Index::Var(po) * Index::c(16) + Index::Var(pi);
        let page = fold_divmod(&Index::bin(IOp::Div, x, Index::c(16)), &[(pi, 16)]);
        assert!(!page.uses_var(pi));
    }
}
