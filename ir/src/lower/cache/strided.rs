//! Register tiles of strided reads: what a thread's loops read of a row
//! of 4096 floats as 256 threads do — four vectors of four, 1024 apart —
//! spans a box of 3076 elements but is 16 of them. Such a tile is laid out
//! by the loops instead: each coefficient of the reads' indices is a digit
//! of the register index, of the extent its loops have, so the thread
//! keeps exactly the elements it reads and each read finds its register
//! from its own loop variables (another pass over the row, with other
//! loops of the same coefficients, finds the same registers).

use super::super::region::{split_varying, tidy};
use crate::index::{Index, VarId};
use crate::schedule::LoopVar;

/// Per dimension, the digits of a strided tile: (coefficient, extent),
/// the smallest coefficient first; the register index is mixed-radix in
/// them. Each dimension's offsets are distinct sums of coefficient × digit.
#[derive(Clone, Debug)]
pub(super) struct Strides(pub Vec<Vec<(i64, i64)>>, Vec<VarId>);

impl Strides {
    /// The tile's extent per dimension: its registers along it.
    pub fn size(&self) -> Vec<i64> {
        self.0
            .iter()
            .map(|d| d.iter().map(|(_, n)| n).product())
            .collect()
    }

    /// The tensor offset (from the tile's base) of register coordinate `o`
    /// along dimension `d`.
    pub fn offset(&self, d: usize, o: &Index) -> Index {
        let mut m = 1;
        let mut off = Index::c(0);
        for &(coef, n) in &self.0[d] {
            let digit = match m {
                1 => o.clone() % Index::c(n),
                _ => (o.clone() / Index::c(m)) % Index::c(n),
            };
            off = off + digit * Index::c(coef);
            m *= n;
        }
        off
    }

    /// The register coordinates of a read at `ix` (which [`strided`] saw).
    pub fn coords(&self, ix: &[Index], varying: &[VarId]) -> Vec<Index> {
        ix.iter()
            .zip(&self.0)
            .map(|(x, digits)| {
                let (terms, _) = split_varying(x, varying).expect("checked by `strided`");
                let mut at = Index::c(0);
                for (t, k) in terms {
                    // Loops of one iteration (at most) add nothing.
                    if matches!(t, Index::Var(v) if self.1.contains(&v)) {
                        continue;
                    }
                    let mut m = 1;
                    for &(coef, n) in digits {
                        if coef == k {
                            at = at + t.clone() * Index::c(m);
                            break;
                        }
                        m *= n;
                    }
                }
                at
            })
            .collect()
    }
}

/// The strided layout of a register tile read at `loads`: every index an
/// affine combination of distinct `varying` loops with positive
/// coefficients over one base, loops of symbolic extent bounded by the
/// sizes' `max` to at most one iteration (a loop of several would index
/// registers at run time), no two coefficients whose digits could meet
/// (each above the reach of the smaller ones), and with `vec` > 1 the
/// innermost digit of the last dimension contiguous in whole vectors.
/// Returns the base per dimension and the digits; `None` where the reads
/// are not of that form.
pub(super) fn strided(
    loads: &[Vec<Index>],
    varying: &[VarId],
    vars: &[LoopVar],
    size_max: &[u64],
    vec: i64,
) -> Option<(Vec<Index>, Strides)> {
    let dims = loads.first()?.len();
    let var_max: Vec<u64> = vars
        .iter()
        .map(|v| u64::try_from(v.extent.max_value(size_max, &[])).unwrap_or(u64::MAX))
        .collect();
    let mut base: Vec<Option<Index>> = vec![None; dims];
    let mut digits: Vec<Vec<(i64, i64)>> = vec![Vec::new(); dims];
    let mut single = Vec::new();
    for l in loads {
        for (d, x) in l.iter().enumerate() {
            let (terms, rest) = split_varying(x, varying)?;
            let rest = tidy(&rest);
            match &base[d] {
                Some(b) if *b != rest => return None,
                Some(_) => {}
                None => base[d] = Some(rest),
            }
            let mut seen = Vec::new();
            for (t, k) in terms {
                let Index::Var(v) = t else { return None };
                let lv = vars.get(v.0 as usize)?;
                let n = match lv.extent.as_const() {
                    Some(n) => n,
                    None if var_max[v.0 as usize] <= 1 => 1,
                    None => return None,
                };
                // A loop of one iteration (at most) is 0 where it runs.
                if n <= 1 {
                    if !single.contains(&v) {
                        single.push(v);
                    }
                    continue;
                }
                if k <= 0 || seen.contains(&k) {
                    return None;
                }
                seen.push(k);
                match digits[d].iter_mut().find(|(c, _)| *c == k) {
                    Some((_, m)) => *m = (*m).max(n),
                    None => digits[d].push((k, n)),
                }
            }
        }
    }
    for ds in &mut digits {
        ds.sort();
        let mut reach = 0i64;
        for &(c, n) in ds.iter() {
            if c <= reach {
                return None;
            }
            reach = reach.checked_add(c.checked_mul(n - 1)?)?;
        }
    }
    if vec > 1 {
        let last = digits.last()?.iter().find(|(_, n)| *n > 1);
        if !last.is_some_and(|&(c, n)| c == 1 && n % vec == 0) {
            return None;
        }
    }
    let base = base.into_iter().collect::<Option<Vec<_>>>()?;
    Some((base, Strides(digits, single)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::SizeId;
    use crate::schedule::LoopKind;

    fn var(name: &str, extent: Index) -> LoopVar {
        LoopVar {
            name: name.into(),
            reduce: false,
            extent,
            kind: LoopKind::Serial,
            span: Default::default(),
        }
    }

    /// `c_s * 4096 + c_u * 1024 + t * 4 + c_v` over a row bounded by
    /// `max`: the vars c_s (symbolic), c_u, c_v (4 each) vary, t does not.
    fn row(max: u64) -> Option<(Vec<Index>, Strides)> {
        let vars = vec![
            var("c_s", Index::Size(SizeId(0)).ceil_div(Index::c(4096))),
            var("c_u", Index::c(4)),
            var("c_v", Index::c(4)),
            var("t", Index::c(256)),
        ];
        let v = |i| Index::Var(VarId(i));
        let ix = v(0) * Index::c(4096) + v(1) * Index::c(1024) + v(3) * Index::c(4) + v(2);
        strided(
            &[vec![ix]],
            &[VarId(0), VarId(1), VarId(2)],
            &vars,
            &[max],
            4,
        )
    }

    #[test]
    fn a_threads_strided_row_is_its_sixteen_elements() {
        let (base, s) = row(4096).expect("strided");
        assert_eq!(base, vec![tidy(&(Index::Var(VarId(3)) * Index::c(4)))]);
        assert_eq!(s.size(), vec![16]);
        // Register 5: the second vector's second element.
        assert_eq!(s.offset(0, &Index::c(5)).eval(&[], &[]), Some(1024 + 1));
        let read = Index::Var(VarId(1)) * Index::c(1024) + Index::Var(VarId(2));
        let at = s.coords(&[read], &[VarId(0), VarId(1), VarId(2)]);
        // The symbolic loop (one iteration at most) does not index registers.
        assert!(!at[0].uses_var(VarId(0)));
        assert_eq!(at[0].eval(&[], &[0, 3, 2, 0]), Some(14));
    }

    #[test]
    fn rows_registers_cannot_hold_are_not_strided() {
        // Two runs a thread: the symbolic loop would index registers.
        assert!(row(8192).is_none());
        // Digits that meet: 2 * c_u + c_v reaches 2 twice.
        let vars = vec![var("c_u", Index::c(4)), var("c_v", Index::c(4))];
        let ix = Index::Var(VarId(0)) * Index::c(2) + Index::Var(VarId(1));
        assert!(strided(&[vec![ix]], &[VarId(0), VarId(1)], &vars, &[], 1).is_none());
    }
}
