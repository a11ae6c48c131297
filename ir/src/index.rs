//! Integer index expressions: extents, subscripts, loop bounds, guards.
//!
//! An [`Index`] is an integer expression over constants, symbolic sizes
//! (kernel arguments) and loop variables. All values are non-negative in a
//! well-formed kernel, so division is floor division. Constructors fold
//! constants and identities, so a schedule that splits by a constant yields
//! `ceil(n / 64)` rather than a tree of `+ 0` and `* 1`.

use std::collections::HashMap;
use std::fmt;

/// Index of a symbolic size in [`crate::Kernel::sizes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SizeId(pub u32);

/// A loop variable of one stage (see [`crate::schedule::LoopVar`]); the first
/// variables of a stage are its axes, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VarId(pub u32);

/// A tensor of a kernel, by its position in [`crate::Kernel::tensors`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(pub u32);
/// A scalar parameter of a kernel, by position.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ParamId(pub u32);
/// A stage of a kernel, by position.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StageId(pub u32);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IOp {
    Add,
    Sub,
    Mul,
    /// Floor division.
    Div,
    /// Division rounding up; used for the trip count of split loops.
    CeilDiv,
    Mod,
    Min,
    Max,
    /// Bitwise exclusive or of the two's-complement values. Never written
    /// by users: lowering builds it for swizzled LDS layouts, where each
    /// row's 16-byte chunks are permuted by the row (`chunk ^ row % 8`).
    Xor,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Index {
    Const(i64),
    Size(SizeId),
    Var(VarId),
    Bin(IOp, Box<Index>, Box<Index>),
}

impl Index {
    pub fn c(v: i64) -> Index {
        Index::Const(v)
    }

    pub fn as_const(&self) -> Option<i64> {
        match self {
            Index::Const(v) => Some(*v),
            _ => None,
        }
    }

    /// Builds `a op b`, folding constants and identities.
    pub fn bin(op: IOp, a: Index, b: Index) -> Index {
        use Index::Const as K;
        match (op, &a, &b) {
            (_, K(x), K(y)) => {
                if let Some(v) = fold(op, *x, *y) {
                    return K(v);
                }
            }
            (IOp::Add, K(0), _) => return b,
            (IOp::Add | IOp::Sub, _, K(0)) => return a,
            (IOp::Mul, K(1), _) => return b,
            (IOp::Mul | IOp::Div | IOp::CeilDiv, _, K(1)) => return a,
            (IOp::Mul, K(0), _) | (IOp::Mul, _, K(0)) => return K(0),
            (IOp::Mod, _, K(1)) => return K(0),
            (IOp::Xor, _, K(0)) => return a,
            (IOp::Xor, K(0), _) => return b,
            _ => {}
        }
        Index::Bin(op, Box::new(a), Box::new(b))
    }

    /// The expression as `constant + sum of coefficient * term`, where the
    /// terms are its largest subexpressions that are not sums, differences
    /// or products by constants (`lane / 4 % 8`, `ko % 2`, a variable).
    /// Two expressions with equal forms are equal for every value of their
    /// variables; the converse need not hold.
    pub fn affine(&self) -> (HashMap<Index, i64>, i64) {
        fn go(ix: &Index, scale: i64, terms: &mut HashMap<Index, i64>, c: &mut i64) {
            match ix {
                Index::Const(v) => *c = c.wrapping_add(scale.wrapping_mul(*v)),
                Index::Bin(IOp::Add, a, b) => {
                    go(a, scale, terms, c);
                    go(b, scale, terms, c);
                }
                Index::Bin(IOp::Sub, a, b) => {
                    go(a, scale, terms, c);
                    go(b, scale.wrapping_neg(), terms, c);
                }
                Index::Bin(IOp::Mul, a, b) if a.as_const().is_some() || b.as_const().is_some() => {
                    let (k, x) = match a.as_const() {
                        Some(k) => (k, b),
                        None => (b.as_const().unwrap_or(1), a),
                    };
                    go(x, scale.wrapping_mul(k), terms, c);
                }
                other => *terms.entry(other.clone()).or_insert(0) += scale,
            }
        }
        let (mut terms, mut c) = (HashMap::new(), 0);
        go(self, 1, &mut terms, &mut c);
        terms.retain(|_, k| *k != 0);
        (terms, c)
    }

    /// The expression as `aligned + off`, `off` a constant below `g` that
    /// cannot carry `aligned` into the next multiple of `g`: where the
    /// rest of the expression is known to be a multiple of `d` (dividing
    /// `g`), `off` is the constant term modulo `d`. `(self, 0)` where
    /// nothing is known. Lets a swizzle that permutes groups of `g`
    /// apply to `aligned` alone and add `off` after it.
    pub fn split_aligned(&self, g: i64) -> (Index, i64) {
        fn gcd(a: u64, b: u64) -> u64 {
            if b == 0 {
                a
            } else {
                gcd(b, a % b)
            }
        }
        let (terms, c) = self.affine();
        let d = terms.iter().fold(g.unsigned_abs(), |d, (t, k)| {
            gcd(d, t.known_divisor().wrapping_mul(k.unsigned_abs()))
        });
        let off = match i64::try_from(d) {
            Ok(d) if d > 1 => c.rem_euclid(d),
            _ => 0,
        };
        // The constant taken out where it stands, so that the aligned
        // parts of `x + 1`, `x + 2`, ... are one expression, not `x + 1 - 1`.
        fn less(ix: &Index, off: i64) -> Option<Index> {
            match ix {
                Index::Const(v) => Some(Index::c(v.wrapping_sub(off))),
                Index::Bin(IOp::Add, a, b) => less(a, off)
                    .map(|a| Index::bin(IOp::Add, a, (**b).clone()))
                    .or_else(|| less(b, off).map(|b| Index::bin(IOp::Add, (**a).clone(), b))),
                _ => None,
            }
        }
        if off == 0 {
            return (self.clone(), 0);
        }
        let aligned =
            less(self, off).unwrap_or_else(|| Index::bin(IOp::Sub, self.clone(), Index::c(off)));
        (aligned, off)
    }

    pub fn ceil_div(self, o: Index) -> Index {
        Index::bin(IOp::CeilDiv, self, o)
    }

    /// Replaces variables by expressions.
    pub fn subst(&self, map: &HashMap<VarId, Index>) -> Index {
        match self {
            Index::Var(v) => map.get(v).cloned().unwrap_or(Index::Var(*v)),
            Index::Bin(op, a, b) => Index::bin(*op, a.subst(map), b.subst(map)),
            other => other.clone(),
        }
    }

    /// Replaces sizes by expressions.
    pub fn subst_sizes(&self, map: &HashMap<SizeId, Index>) -> Index {
        match self {
            Index::Size(s) => map.get(s).cloned().unwrap_or(Index::Size(*s)),
            Index::Bin(op, a, b) => Index::bin(*op, a.subst_sizes(map), b.subst_sizes(map)),
            other => other.clone(),
        }
    }

    pub fn uses_var(&self, v: VarId) -> bool {
        match self {
            Index::Var(x) => *x == v,
            Index::Bin(_, a, b) => a.uses_var(v) || b.uses_var(v),
            _ => false,
        }
    }

    pub fn has_vars(&self) -> bool {
        match self {
            Index::Var(_) => true,
            Index::Bin(_, a, b) => a.has_vars() || b.has_vars(),
            _ => false,
        }
    }

    /// A number that divides every value the expression takes, whatever
    /// the sizes and variables are (0: the value is always 0). Sizes and
    /// variables count as 1; sums keep the gcd, products multiply, and a
    /// remainder or minimum keeps what divides both sides. Lets code
    /// generation prove an access aligned without looking at the address.
    pub fn known_divisor(&self) -> u64 {
        self.known_divisor_in(&[])
    }

    /// [`Index::known_divisor`], knowing that size `s` is a multiple of
    /// `size_divisors[s]` (the kernel's `divisible` facts; missing ones are 1).
    pub fn known_divisor_in(&self, size_divisors: &[u64]) -> u64 {
        fn gcd(a: u64, b: u64) -> u64 {
            if b == 0 {
                a
            } else {
                gcd(b, a % b)
            }
        }
        match self {
            Index::Const(v) => v.unsigned_abs(),
            Index::Size(s) => size_divisors.get(s.0 as usize).copied().unwrap_or(1).max(1),
            Index::Var(_) => 1,
            Index::Bin(op, a, b) => {
                let (x, y) = (
                    a.known_divisor_in(size_divisors),
                    b.known_divisor_in(size_divisors),
                );
                match op {
                    IOp::Add | IOp::Sub | IOp::Min | IOp::Max | IOp::Mod => gcd(x, y),
                    // The low bits both sides have clear stay clear.
                    IOp::Xor => match gcd(x, y) {
                        0 => 0,
                        g => g & g.wrapping_neg(),
                    },
                    IOp::Mul => x.checked_mul(y).unwrap_or_else(|| x.max(y)),
                    // Exact only when the divisor is a constant dividing x.
                    IOp::Div | IOp::CeilDiv => match b.as_const() {
                        _ if x == 0 => 0,
                        Some(c) if c != 0 && x % c.unsigned_abs() == 0 => x / c.unsigned_abs(),
                        _ => 1,
                    },
                }
            }
        }
    }

    /// Evaluates with sizes and variables given; `None` on division by zero
    /// or overflow.
    pub fn eval(&self, sizes: &[i64], vars: &[i64]) -> Option<i64> {
        match self {
            Index::Const(v) => Some(*v),
            Index::Size(s) => sizes.get(s.0 as usize).copied(),
            Index::Var(v) => vars.get(v.0 as usize).copied(),
            Index::Bin(op, a, b) => fold(*op, a.eval(sizes, vars)?, b.eval(sizes, vars)?),
        }
    }

    /// An upper bound of the value, given upper bounds of sizes and
    /// variables; every value is taken as non-negative. Saturates at `u128::MAX`.
    pub fn max_value(&self, size_max: &[u64], var_max: &[u64]) -> u128 {
        match self {
            Index::Const(v) => (*v).max(0) as u128,
            Index::Size(s) => size_max.get(s.0 as usize).copied().unwrap_or(u64::MAX) as u128,
            Index::Var(v) => var_max.get(v.0 as usize).copied().unwrap_or(u64::MAX) as u128,
            Index::Bin(op, a, b) => {
                let (x, y) = (
                    a.max_value(size_max, var_max),
                    b.max_value(size_max, var_max),
                );
                // A divisor's lower bound is its value if constant, else 1.
                let d = b.as_const().filter(|c| *c > 0).unwrap_or(1) as u128;
                match op {
                    IOp::Add => x.saturating_add(y),
                    IOp::Sub => x,
                    IOp::Mul => x.saturating_mul(y),
                    IOp::Div => x / d,
                    IOp::CeilDiv => x.div_ceil(d),
                    IOp::Mod => x.min(y.saturating_sub(1)),
                    IOp::Min => x.min(y),
                    IOp::Max => x.max(y),
                    IOp::Xor => ones_up_to(x.max(y)),
                }
            }
        }
    }

    /// The interval `[lo, hi]` the value lies in, given upper bounds of sizes
    /// and variables (both are never negative). Unlike [`Index::max_value`]
    /// it tracks negative intermediates (`i - 1` at `i = 0`), so code
    /// generation can tell where unsigned arithmetic is exact and where
    /// it must be signed or wider. Saturates at ±2^126.
    pub fn range(&self, size_max: &[u64], var_max: &[u64]) -> (i128, i128) {
        const LIM: i128 = 1 << 126;
        let sat = |v: i128| v.clamp(-LIM, LIM);
        match self {
            Index::Const(v) => (*v as i128, *v as i128),
            Index::Size(s) => (
                0,
                size_max.get(s.0 as usize).copied().unwrap_or(u64::MAX) as i128,
            ),
            Index::Var(v) => (
                0,
                var_max.get(v.0 as usize).copied().unwrap_or(u64::MAX) as i128,
            ),
            Index::Bin(op, a, b) => {
                let (al, ah) = a.range(size_max, var_max);
                let (bl, bh) = b.range(size_max, var_max);
                let span = |vs: [i128; 4]| {
                    let lo = vs.iter().copied().min().unwrap_or(0);
                    let hi = vs.iter().copied().max().unwrap_or(0);
                    (sat(lo), sat(hi))
                };
                // Bound of |value| over both operands, for divisors that may be ≤ 0.
                let mag = al.abs().max(ah.abs());
                match op {
                    IOp::Add => (sat(al + bl), sat(ah + bh)),
                    IOp::Sub => (sat(al - bh), sat(ah - bl)),
                    IOp::Mul => span([
                        al.saturating_mul(bl),
                        al.saturating_mul(bh),
                        ah.saturating_mul(bl),
                        ah.saturating_mul(bh),
                    ]),
                    IOp::Div | IOp::CeilDiv if bl > 0 => {
                        let d = |x: i128, y: i128| match op {
                            IOp::Div => x.div_euclid(y),
                            _ => -((-x).div_euclid(y)),
                        };
                        span([d(al, bl), d(al, bh), d(ah, bl), d(ah, bh)])
                    }
                    IOp::Div | IOp::CeilDiv => (-mag, mag),
                    IOp::Mod if bl > 0 && al >= 0 => (0, ah.min(bh - 1)),
                    IOp::Mod if bl > 0 => (0, bh - 1),
                    IOp::Mod => (0, sat(bl.abs().max(bh.abs()) - 1).max(0)),
                    IOp::Min => (al.min(bl), ah.min(bh)),
                    IOp::Max => (al.max(bl), ah.max(bh)),
                    // Non-negative sides keep the bits below the larger's top bit.
                    IOp::Xor if al >= 0 && bl >= 0 => {
                        (0, sat(ones_up_to(ah.max(bh) as u128) as i128))
                    }
                    IOp::Xor => {
                        let top =
                            ones_up_to(al.abs().max(ah.abs()).max(bl.abs()).max(bh.abs()) as u128);
                        (sat(-(top as i128) - 1), sat(top as i128))
                    }
                }
            }
        }
    }

    /// Renders with the given names for sizes and variables.
    pub fn display<'a>(
        &'a self,
        sizes: &'a [String],
        vars: &'a [String],
    ) -> impl fmt::Display + 'a {
        IndexDisplay {
            e: self,
            sizes,
            vars,
            top: true,
        }
    }
}

macro_rules! index_op {
    ($tr:ident, $f:ident, $op:expr) => {
        impl std::ops::$tr for Index {
            type Output = Index;
            fn $f(self, o: Index) -> Index {
                Index::bin($op, self, o)
            }
        }
    };
}
index_op!(Add, add, IOp::Add);
index_op!(Sub, sub, IOp::Sub);
index_op!(Mul, mul, IOp::Mul);
// `/` and `%` are floor division and modulo, as everywhere in index arithmetic.
index_op!(Div, div, IOp::Div);
index_op!(Rem, rem, IOp::Mod);

/// Applies `op` to two integers with floor semantics; `None` on division by
/// zero or overflow.
pub fn fold(op: IOp, x: i64, y: i64) -> Option<i64> {
    match op {
        IOp::Add => x.checked_add(y),
        IOp::Sub => x.checked_sub(y),
        IOp::Mul => x.checked_mul(y),
        IOp::Div => (y != 0).then(|| x.div_euclid(y)),
        IOp::CeilDiv => (y != 0).then(|| -((-x).div_euclid(y))),
        IOp::Mod => (y != 0).then(|| x.rem_euclid(y)),
        IOp::Min => Some(x.min(y)),
        IOp::Max => Some(x.max(y)),
        IOp::Xor => Some(x ^ y),
    }
}

/// The smallest `2^k - 1` at or above `x`: every bit pattern below `x`'s
/// top bit, the bound of an exclusive or of values up to `x`.
fn ones_up_to(x: u128) -> u128 {
    match x {
        0 => 0,
        _ => u128::MAX >> x.leading_zeros(),
    }
}

struct IndexDisplay<'a> {
    e: &'a Index,
    sizes: &'a [String],
    vars: &'a [String],
    top: bool,
}

impl<'a> fmt::Display for IndexDisplay<'a> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sub = |e: &'a Index| IndexDisplay {
            e,
            sizes: self.sizes,
            vars: self.vars,
            top: false,
        };
        match self.e {
            Index::Const(v) => write!(f, "{v}"),
            Index::Size(s) => f.write_str(self.sizes.get(s.0 as usize).map_or("?", |s| s.as_str())),
            Index::Var(v) => f.write_str(self.vars.get(v.0 as usize).map_or("?", |s| s.as_str())),
            Index::Bin(op, a, b) => {
                let (a, b) = (sub(a), sub(b));
                match op {
                    IOp::CeilDiv => write!(f, "ceil({a} / {b})"),
                    IOp::Min => write!(
                        f,
                        "min({}, {})",
                        IndexDisplay { top: true, ..a },
                        IndexDisplay { top: true, ..b }
                    ),
                    IOp::Max => write!(
                        f,
                        "max({}, {})",
                        IndexDisplay { top: true, ..a },
                        IndexDisplay { top: true, ..b }
                    ),
                    IOp::Xor => write!(
                        f,
                        "xor({}, {})",
                        IndexDisplay { top: true, ..a },
                        IndexDisplay { top: true, ..b }
                    ),
                    _ => {
                        let sym = match op {
                            IOp::Add => "+",
                            IOp::Sub => "-",
                            IOp::Mul => "*",
                            IOp::Div => "/",
                            _ => "%",
                        };
                        if self.top {
                            write!(f, "{a} {sym} {b}")
                        } else {
                            write!(f, "({a} {sym} {b})")
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    /// `split_aligned` takes out only the constant that cannot carry the
    /// rest past a multiple of the group, where it stands.
    #[test]
    fn split_aligned_keeps_what_the_rest_is_known_to_divide() {
        let x = Index::Var(VarId(0)) * Index::c(4);
        // 4x + 3 in groups of 8: 4x is a multiple of 4, so 3 goes.
        let (a, off) = (Index::c(3) + x.clone()).split_aligned(8);
        assert_eq!((a.clone(), off), (x.clone(), 3));
        // 4x + 6 in groups of 8: only 6 mod 4 = 2 may go.
        let (a, off) = (x.clone() + Index::c(6)).split_aligned(8);
        assert_eq!(off, 2);
        assert_eq!(a.eval(&[], &[5]), Some(24));
        // Nothing known of x: nothing goes.
        let (a, off) = (Index::Var(VarId(0)) + Index::c(3)).split_aligned(8);
        assert_eq!((a, off), (Index::Var(VarId(0)) + Index::c(3), 0));
    }

    #[test]
    fn known_divisors() {
        let n = Index::Size(SizeId(0));
        let v = Index::Var(VarId(0));
        let col =
            Index::c(64) * (v.clone() + Index::c(2)) + (v.clone() * Index::c(8)) % Index::c(64);
        assert_eq!(col.known_divisor(), 8);
        assert_eq!(
            Index::bin(IOp::Min, v.clone() * Index::c(8), n.clone() - Index::c(1)).known_divisor(),
            1
        );
        assert_eq!((v.clone() * Index::c(12) / Index::c(4)).known_divisor(), 3);
        assert_eq!((v.clone() * Index::c(12) / Index::c(8)).known_divisor(), 1);
        assert_eq!((n * Index::c(4)).known_divisor(), 4);
        assert_eq!(Index::c(0).known_divisor(), 0);
    }

    proptest::proptest! {
        /// Whatever the sizes and variables, the value is a multiple of
        /// the known divisor.
        #[test]
        fn known_divisor_divides_every_value(
            e in arb_index(),
            sizes in proptest::collection::vec(-40i64..40, 2),
            vars in proptest::collection::vec(-40i64..40, 2),
        ) {
            if let Some(x) = e.eval(&sizes, &vars) {
                let d = e.known_divisor();
                if d == 0 {
                    proptest::prop_assert_eq!(x, 0);
                } else {
                    proptest::prop_assert_eq!(x.rem_euclid(d as i64), 0, "{:?} = {} by {}", e, x, d);
                }
            }
        }
    }

    fn arb_index() -> impl proptest::strategy::Strategy<Value = Index> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            (-16i64..17).prop_map(Index::Const),
            (0u32..2).prop_map(|s| Index::Size(SizeId(s))),
            (0u32..2).prop_map(|v| Index::Var(VarId(v))),
        ];
        leaf.prop_recursive(4, 24, 2, |inner| {
            let op = prop_oneof![
                Just(IOp::Add),
                Just(IOp::Sub),
                Just(IOp::Mul),
                Just(IOp::Div),
                Just(IOp::CeilDiv),
                Just(IOp::Mod),
                Just(IOp::Min),
                Just(IOp::Max),
                Just(IOp::Xor),
            ];
            (op, inner.clone(), inner).prop_map(|(op, a, b)| Index::bin(op, a, b))
        })
    }

    #[test]
    fn folding_and_identities() {
        let n = Index::Size(SizeId(0));
        assert_eq!(Index::c(3) * Index::c(4), Index::c(12));
        assert_eq!(n.clone() + Index::c(0), n);
        assert_eq!(n.clone() * Index::c(1), n);
        assert_eq!(Index::c(10).ceil_div(Index::c(4)), Index::c(3));
        assert_eq!(Index::c(-7) / Index::c(2), Index::c(-4));
    }

    #[test]
    fn display_uses_names() {
        let e = Index::Size(SizeId(0)).ceil_div(Index::c(64));
        let names = vec!["n".to_string()];
        assert_eq!(e.display(&names, &[]).to_string(), "ceil(n / 64)");
        let v = Index::Var(VarId(0)) * Index::c(64) + Index::Var(VarId(1));
        let vars = vec!["io".to_string(), "ii".to_string()];
        assert_eq!(v.display(&names, &vars).to_string(), "(io * 64) + ii");
    }

    #[test]
    fn upper_bounds() {
        let n = Index::Size(SizeId(0));
        let e = n.clone().ceil_div(Index::c(64)) * Index::c(64);
        assert_eq!(e.max_value(&[1000], &[]), 1024);
        assert_eq!((n.clone() * n.clone()).max_value(&[1 << 31], &[]), 1 << 62);
        assert_eq!(
            (Index::Var(VarId(0)) % Index::c(16)).max_value(&[], &[100]),
            15
        );
    }

    #[test]
    fn eval_and_subst() {
        let e = Index::Var(VarId(0)) * Index::c(4) + Index::Var(VarId(1));
        assert_eq!(e.eval(&[], &[2, 3]), Some(11));
        let m = HashMap::from([(VarId(1), Index::c(0))]);
        assert_eq!(e.subst(&m).eval(&[], &[5, 99]), Some(20));
        assert_eq!((Index::c(1) / Index::Var(VarId(0))).eval(&[], &[0]), None);
    }

    #[test]
    fn ranges_track_negative_intermediates() {
        let i = Index::Var(VarId(0));
        let sub = i.clone() - Index::c(1);
        assert_eq!(sub.range(&[], &[99]), (-1, 98));
        let clamp = Index::bin(IOp::Max, sub.clone(), Index::c(0));
        assert_eq!(clamp.range(&[], &[99]), (0, 98));
        assert_eq!((sub.clone() / Index::c(2)).range(&[], &[99]), (-1, 49));
        assert_eq!((sub % Index::c(3)).range(&[], &[99]), (0, 2));
        let n = Index::Size(SizeId(0));
        assert_eq!((n - Index::c(1)).range(&[100], &[]), (-1, 99));
        // Every value the interval claims to cover is inside it.
        let e = Index::bin(
            IOp::Min,
            i.clone() * Index::c(-3) + Index::c(7),
            Index::c(4),
        ) / Index::c(5);
        let (lo, hi) = e.range(&[], &[20]);
        for v in 0..=20 {
            let x = e.eval(&[], &[v]).unwrap() as i128;
            assert!(lo <= x && x <= hi, "{x} outside [{lo}, {hi}]");
        }
    }

    proptest::proptest! {
        /// The interval holds every value the expression takes with sizes
        /// and variables inside their bounds, and `max_value` bounds the
        /// non-negative ones.
        #[test]
        fn ranges_hold_every_value(
            e in arb_index(),
            sizes in proptest::collection::vec(0i64..40, 2),
            vars in proptest::collection::vec(0i64..40, 2),
        ) {
            if let Some(x) = e.eval(&sizes, &vars) {
                let (lo, hi) = e.range(&[39, 39], &[39, 39]);
                proptest::prop_assert!(lo <= x as i128 && x as i128 <= hi, "{:?} = {} outside [{}, {}]", e, x, lo, hi);
            }
        }
    }

    #[test]
    fn exclusive_or_of_chunks_and_rows() {
        let (c, r) = (Index::Var(VarId(0)), Index::Var(VarId(1)));
        let swz = Index::bin(IOp::Xor, c.clone(), r.clone() % Index::c(8)) * Index::c(8);
        // Chunks 0..15 of a 256-byte row stay in 0..15 and 16-byte aligned.
        assert_eq!(swz.range(&[], &[15, 100]), (0, 120));
        assert_eq!(swz.max_value(&[], &[15, 100]), 120);
        assert_eq!(swz.known_divisor(), 8);
        assert_eq!(Index::bin(IOp::Xor, Index::c(6), Index::c(3)), Index::c(5));
        assert_eq!(swz.eval(&[], &[9, 11]), Some((9 ^ 3) * 8));
        // Negative sides: the two's-complement value.
        assert_eq!(fold(IOp::Xor, -1, 5), Some(-6));
        let vars = vec!["c".to_string(), "r".to_string()];
        assert_eq!(swz.display(&[], &vars).to_string(), "xor(c, r % 8) * 8");
    }
}
