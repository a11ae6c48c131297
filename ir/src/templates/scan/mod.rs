//! The scan template: `Y[r, c] = cumsum(X[r, c], c)` (also `cumprod`,
//! `cummax`, `cummin`, `exclusive=true`) is defined as the triangular
//! reduction `sum(X[r, k], k)` over `k < c + 1` (`k < c` exclusive): a
//! stage whose reduction has [`ReduceKind::Scan`] is exactly that
//! reduction, and the `scan` step lowers it in linear work.

use crate::dtype::DType;
use crate::index::{IOp, Index, VarId};
use crate::kernel::{Axis, Kernel, ReduceKind, ReduceOp, Scan, Stage};

pub(crate) mod front;
pub(crate) mod lower;
pub(crate) mod rule;

/// Finds a scan written out as its definition: one reduction axis whose
/// extent is an output axis `c` (exclusive) or `c + 1` (inclusive), a
/// built-in combiner a scan has (sum, product, max, min), and a body that
/// does not use `c` itself (only the running position). So
/// `R[i, j] = sum(P[i, k], k)` with `reduce = { k = "j + 1" }` is
/// `cumsum(P[i, j], j)`.
pub fn recognise(_k: &Kernel, st: &mut Stage) -> bool {
    let Some(scan) = scan_of(st) else {
        return false;
    };
    if let Some(r) = st.reduce_mut() {
        r.kind = ReduceKind::Scan(scan);
    }
    true
}

/// The scan a stage's reduction writes out, if it is one.
fn scan_of(st: &Stage) -> Option<Scan> {
    let r = st.reduce()?;
    let ReduceKind::Op(op) = r.kind else {
        return None;
    };
    let scannable = matches!(
        op,
        ReduceOp::Sum | ReduceOp::Prod | ReduceOp::Max | ReduceOp::Min
    );
    if !scannable || r.body.dtype == DType::Bool || r.body.dtype.is_f8() {
        return None;
    }
    let [red] = r.axes.as_slice() else {
        return None;
    };
    let (axis, exclusive) = along(&red.extent, &st.axes)?;
    (!r.body.uses_var(VarId(axis as u32))).then_some(Scan {
        op,
        axis,
        exclusive,
    })
}

/// The output axis an extent runs to, and whether it stops short of it:
/// `c` is `(c, true)`, `c + 1` is `(c, false)`. A bound by the axis's own
/// extent changes nothing (`c < C`, so `min(c + 1, C)` is `c + 1`).
fn along(extent: &Index, axes: &[Axis]) -> Option<(usize, bool)> {
    if let Index::Bin(IOp::Min, a, b) = extent {
        for (x, bound) in [(a, b), (b, a)] {
            if let Some((axis, exclusive)) = along(x, axes) {
                if **bound == axes[axis].extent {
                    return Some((axis, exclusive));
                }
            }
        }
        return None;
    }
    let (terms, c) = extent.affine();
    let [(Index::Var(v), 1)] = terms.into_iter().collect::<Vec<_>>()[..] else {
        return None;
    };
    let axis = v.0 as usize;
    if axis >= axes.len() {
        return None;
    }
    match c {
        0 => Some((axis, true)),
        1 => Some((axis, false)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage_of(compute: &str, reduce: &str) -> Stage {
        let src = format!(
            "[kernel]\nname = \"k\"\nsizes = [\"N\", \"C\"]\n\n[inputs]\nP = {{ dtype = \"f32\", shape = [\"N\", \"C\"] }}\n\n[[stage]]\ncompute = \"{compute}\"\nshape = [\"N\", \"C\"]\nreduce = {{ {reduce} }}\n"
        );
        let k = crate::parse_kernel("k.toml", &src).unwrap_or_else(|e| panic!("{}", e.render()));
        k.stages[0].clone()
    }

    #[test]
    fn a_triangular_sum_is_an_inclusive_scan_along_its_axis() {
        let st = stage_of("Y[i, j] = sum(P[i, k], k)", "k = \"j + 1\"");
        let scan = st.reduce().and_then(|r| r.scan());
        assert_eq!(
            scan,
            Some(Scan {
                op: ReduceOp::Sum,
                axis: 1,
                exclusive: false
            })
        );
    }

    #[test]
    fn an_extent_of_the_axis_itself_is_exclusive_and_any_axis_scans() {
        let st = stage_of("Y[i, j] = reduce_max(P[k, j], k)", "k = \"i\"");
        let scan = st.reduce().and_then(|r| r.scan());
        assert_eq!(
            scan,
            Some(Scan {
                op: ReduceOp::Max,
                axis: 0,
                exclusive: true
            })
        );
    }

    #[test]
    fn a_bound_by_the_axis_extent_changes_nothing() {
        for reduce in ["k = \"min(j + 1, C)\"", "k = \"min(C, j + 1)\""] {
            let st = stage_of("Y[i, j] = sum(P[i, k], k)", reduce);
            let scan = st.reduce().and_then(|r| r.scan());
            assert_eq!(
                scan.map(|s| (s.axis, s.exclusive)),
                Some((1, false)),
                "{reduce}"
            );
        }
    }

    #[test]
    fn a_body_that_uses_the_axis_or_another_extent_is_no_scan() {
        for (compute, reduce) in [
            ("Y[i, j] = sum(P[i, k] * f32(j), k)", "k = \"j + 1\""),
            ("Y[i, j] = sum(P[i, k], k)", "k = \"j + 2\""),
            ("Y[i, j] = sum(P[i, k], k)", "k = \"C\""),
            ("Y[i, j] = sum(P[i, k], k)", "k = \"2 * j\""),
            // Bounded by another extent: not the running position.
            ("Y[i, j] = sum(P[i, k], k)", "k = \"min(j + 1, N)\""),
        ] {
            let st = stage_of(compute, reduce);
            let r = st.reduce().expect("a reduction");
            assert_eq!(r.plain(), Some(ReduceOp::Sum), "{compute} over {reduce}");
        }
    }
}
