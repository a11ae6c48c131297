//! One scalar operation as a kernel means it: casts (with the saturation
//! and rounding rules), operators, math functions, bit casts.

use super::*;
use crate::dtype::DType;
use crate::kernel::*;

/// Converts a value of dtype `from` to `to` by the documented rules (before
/// the result is rounded or wrapped to `to` by the caller): float → float
/// and int → float round to nearest (once: an `i64` goes to `f32`
/// directly, not through `f64`); float → int truncates toward zero and
/// saturates to `to`'s range, NaN giving 0 (LLVM's `fpto[su]i.sat`);
/// anything → bool is `x != 0` (NaN is true); int → int wraps.
pub fn cast(from: DType, to: DType, x: Scalar) -> Scalar {
    match (from.is_float(), to.is_float()) {
        (false, true) if to == DType::F32 => Scalar::F(x.i() as f32 as f64),
        (_, true) => Scalar::F(x.f()),
        (true, false) if to == DType::Bool => Scalar::I((x.f() != 0.0) as i64),
        (true, false) => {
            let v = x.f();
            let (lo, hi) = to.int_range().expect("an integer dtype");
            Scalar::I(if v.is_nan() {
                0
            } else if v <= lo as f64 {
                lo
            } else if v >= hi as f64 {
                hi
            } else {
                v as i64
            })
        }
        (false, false) => Scalar::I(x.i()),
    }
}

pub(super) fn binary(op: BinOp, t: DType, x: Scalar, y: Scalar) -> Option<Scalar> {
    use BinOp::*;
    if op.is_comparison() {
        let r = if t.is_float() {
            let (a, b) = (x.f(), y.f());
            match op {
                Eq => a == b,
                Ne => a != b,
                Lt => a < b,
                Le => a <= b,
                Gt => a > b,
                _ => a >= b,
            }
        } else {
            let (a, b) = (x.i(), y.i());
            match op {
                Eq => a == b,
                Ne => a != b,
                Lt => a < b,
                Le => a <= b,
                Gt => a > b,
                _ => a >= b,
            }
        };
        return Some(Scalar::I(r as i64));
    }
    if t.is_float() {
        let (a, b) = (x.f(), y.f());
        return Some(Scalar::F(match op {
            Add => a + b,
            Sub => a - b,
            Mul => a * b,
            Div => a / b,
            Min => a.min(b),
            Max => a.max(b),
            _ => unreachable!("validated: no {op:?} on floats"),
        }));
    }
    let (a, b) = (x.i(), y.i());
    Some(Scalar::I(match op {
        Add => a.wrapping_add(b),
        Sub => a.wrapping_sub(b),
        Mul => a.wrapping_mul(b),
        Div if b == 0 => return None,
        Rem if b == 0 => return None,
        Div => normalize_int(t, a).wrapping_div(normalize_int(t, b)),
        Rem => normalize_int(t, a).wrapping_rem(normalize_int(t, b)),
        Min => a.min(b),
        Max => a.max(b),
        And => ((a != 0) && (b != 0)) as i64,
        Or => ((a != 0) || (b != 0)) as i64,
        BitAnd => normalize_int(t, a & b),
        BitOr => normalize_int(t, a | b),
        BitXor => normalize_int(t, a ^ b),
        Shl => normalize_int(t, a.wrapping_shl((b & (t.size() as i64 * 8 - 1)) as u32)),
        // Values are kept sign-extended (signed) or zero-extended
        // (unsigned): an i64 shift right is the type's own.
        Shr => normalize_int(t, a >> (b & (t.size() as i64 * 8 - 1))),
        _ => unreachable!("comparisons handled above"),
    }))
}

/// 1/(1 + e^{−x}), in a form whose exponential cannot overflow.
pub(super) fn sigmoid(x: f64) -> f64 {
    let e = (-x.abs()).exp();
    if x >= 0.0 {
        1.0 / (1.0 + e)
    } else {
        e / (1.0 + e)
    }
}

pub(super) fn math(f: MathFn, t: DType, xs: &[Scalar]) -> Scalar {
    if !t.is_float() {
        // Only abs accepts integers.
        return Scalar::I(xs[0].i().wrapping_abs());
    }
    let x = xs[0].f();
    Scalar::F(match f {
        MathFn::Abs => x.abs(),
        MathFn::Sqrt => x.sqrt(),
        MathFn::Rsqrt => 1.0 / x.sqrt(),
        MathFn::Exp => x.exp(),
        MathFn::Exp2 | MathFn::Exp2Approx => x.exp2(),
        MathFn::Log => x.ln(),
        MathFn::Log2 => x.log2(),
        MathFn::Floor => x.floor(),
        MathFn::Ceil => x.ceil(),
        MathFn::Tanh => x.tanh(),
        MathFn::Sigmoid => sigmoid(x),
        // 0.5·x·(1 + tanh(z)) written as x·sigmoid(2z), which does not
        // cancel for negative x.
        MathFn::Gelu if x.is_infinite() => x.max(-0.0),
        MathFn::Gelu => x * sigmoid(2.0 * GELU_C * (x + 0.044715 * x * x * x)),
        MathFn::Erf => libm::erf(x),
        MathFn::Pow => x.powf(xs[1].f()),
        MathFn::Fma => x.mul_add(xs[1].f(), xs[2].f()),
    })
}

/// `s` as a constant expression of type `t`.
pub(super) fn constant(s: Scalar, t: DType) -> Expr {
    let kind = match s {
        Scalar::F(x) => ExprKind::Float(x),
        Scalar::I(x) => ExprKind::Int(x),
    };
    Expr { kind, dtype: t }
}

/// The value whose bits in dtype `to` are those of `x` in `from` (the
/// pairs the front end allows: f32 with i32 or u32, f64 with i64).
pub(super) fn bitcast(from: DType, to: DType, x: Scalar) -> Scalar {
    match (from, to) {
        (DType::F32, DType::I32) => Scalar::I((x.f() as f32).to_bits() as i32 as i64),
        (DType::F32, _) => Scalar::I((x.f() as f32).to_bits() as i64),
        (DType::F64, _) => Scalar::I(x.f().to_bits() as i64),
        (DType::I64, _) => Scalar::F(f64::from_bits(x.i() as u64)),
        (_, _) => Scalar::F(f32::from_bits(x.i() as u32) as f64),
    }
}

/// The zero of a dtype.
pub(super) fn zero(t: DType) -> Scalar {
    if t.is_float() {
        Scalar::F(0.0)
    } else {
        Scalar::I(0)
    }
}

#[cfg(test)]
mod cast_tests {
    use super::*;

    /// What `to(x)` must give, from Rust's own conversions: `as` between
    /// numeric types truncates toward zero and saturates (NaN → 0) for float →
    /// int, wraps for int → int, and rounds to nearest for → float; `half`
    /// rounds to nearest for f16 and bf16.
    fn expected(from: DType, to: DType, x: f64) -> Scalar {
        // The value as its source type holds it.
        let i = x as i64;
        let f = match from {
            DType::F32 => x as f32 as f64,
            DType::F16 => half::f16::from_f64(x).to_f64(),
            DType::BF16 => half::bf16::from_f64(x).to_f64(),
            _ => x,
        };
        let as_float = |v: f64| -> f64 {
            match to {
                DType::F32 => v as f32 as f64,
                DType::F16 => half::f16::from_f64(v).to_f64(),
                DType::BF16 => half::bf16::from_f64(v).to_f64(),
                _ => v,
            }
        };
        if from.is_float() {
            match to {
                DType::Bool => Scalar::I((f != 0.0) as i64),
                DType::I8 => Scalar::I(f as i8 as i64),
                DType::U8 => Scalar::I(f as u8 as i64),
                DType::I32 => Scalar::I(f as i32 as i64),
                DType::U32 => Scalar::I(f as u32 as i64),
                DType::I64 => Scalar::I(f as i64),
                _ => Scalar::F(as_float(f)),
            }
        } else {
            let i = normalize_int(from, i);
            match to {
                DType::Bool => Scalar::I((i != 0) as i64),
                DType::I8 => Scalar::I(i as i8 as i64),
                DType::U8 => Scalar::I(i as u8 as i64),
                DType::I32 => Scalar::I(i as i32 as i64),
                DType::U32 => Scalar::I(i as u32 as i64),
                DType::I64 => Scalar::I(i),
                DType::F32 => Scalar::F(i as f32 as f64),
                _ => Scalar::F(as_float(i as f64)),
            }
        }
    }

    fn same(a: Scalar, b: Scalar) -> bool {
        match (a, b) {
            (Scalar::F(x), Scalar::F(y)) => x == y || (x.is_nan() && y.is_nan()),
            (a, b) => a == b,
        }
    }

    /// Every cast between every pair of dtypes, on the values where the
    /// rules differ: both sides of each type's range, fractions, ±0, ±inf,
    /// NaN, and integers beyond f32's exact range.
    #[test]
    fn every_cast_follows_the_documented_rules() {
        let values = [
            0.0,
            -0.0,
            0.5,
            -0.5,
            0.99,
            -0.99,
            1.0,
            -1.0,
            1.5,
            -1.5,
            2.5,
            127.0,
            127.9,
            128.0,
            -128.0,
            -128.9,
            -129.0,
            255.0,
            255.5,
            256.0,
            300.0,
            -300.0,
            65504.0,
            65520.0,
            2147483647.0,
            2147483648.0,
            -2147483648.0,
            -2147483649.0,
            4294967295.0,
            4294967296.0,
            16777217.0,
            9.3e18,
            -9.3e18,
            1e30,
            -1e30,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
        ];
        // The 8-bit floats have no conversion in Rust to compare with:
        // `dtype`'s own test checks their rounding against every encoding.
        let all = DType::ALL.into_iter().filter(|d| !d.is_f8());
        for from in all.clone() {
            for to in all.clone() {
                for &x in &values {
                    if !from.is_float() && !x.is_finite() {
                        continue;
                    }
                    let src = if from.is_float() {
                        normalize(from, Scalar::F(x))
                    } else {
                        Scalar::I(normalize_int(from, x as i64))
                    };
                    let got = normalize(to, cast(from, to, src));
                    let want = expected(from, to, x);
                    assert!(
                        same(got, want),
                        "{}({}: {x}) = {got:?}, want {want:?}",
                        to.name(),
                        from.name()
                    );
                }
            }
        }
    }
}
