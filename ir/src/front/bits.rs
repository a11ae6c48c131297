//! Float literals and the bit-level functions: `inf`, `nan`, `isnan`,
//! `isinf`, `bitcast`; and `argmax`/`argmin`, which the front end writes as
//! a `reduce_max`/`reduce_min` over 64-bit keys built from those pieces.

use super::Cx;
use crate::diag::{Diagnostic, Span};
use crate::dtype::DType;
use crate::index::{Index, VarId};
use crate::kernel::*;
use crate::syntax::{Arg, AstKind};

pub(crate) fn e(kind: ExprKind, dtype: DType) -> Expr {
    Expr { kind, dtype }
}

pub(crate) fn bx(x: Expr) -> Box<Expr> {
    Box::new(x)
}

pub(crate) fn bin(op: BinOp, a: Expr, b: Expr) -> Expr {
    let t = if op.is_comparison() {
        DType::Bool
    } else {
        a.dtype
    };
    e(ExprKind::Binary(op, bx(a), bx(b)), t)
}

pub(crate) fn int(v: i64, t: DType) -> Expr {
    e(ExprKind::Int(v), t)
}

pub(crate) fn cast(x: Expr, t: DType) -> Expr {
    x.cast_to(t)
}

pub(crate) fn select(c: Expr, a: Expr, b: Expr) -> Expr {
    let t = a.dtype;
    e(ExprKind::Select(bx(c), bx(a), bx(b)), t)
}

/// `x != x`: true exactly for NaN (an unordered comparison on every path).
pub(crate) fn is_nan(x: Expr) -> Expr {
    bin(BinOp::Ne, x.clone(), x)
}

impl Cx<'_> {
    /// `inf` and `nan` as constants of the context's float type (f32
    /// alone); `None` when `n` is neither.
    pub(super) fn float_literal(
        &mut self,
        n: &str,
        span: Span,
        hint: Option<DType>,
    ) -> Option<Option<Expr>> {
        let v = match n {
            "inf" => f64::INFINITY,
            "nan" => f64::NAN,
            _ => return None,
        };
        let t = hint.unwrap_or(DType::F32);
        if !t.is_float() || t.is_f8() {
            self.error(
                Diagnostic::new(
                    span,
                    format!("`{n}` is a float, but `{t}` is expected here"),
                )
                .hint("compare or combine it with a float (f16, bf16, f32, f64)"),
            );
            return Some(None);
        }
        Some(Some(e(ExprKind::Float(v), t)))
    }

    /// `isnan(x)`, `isinf(x)`, `bitcast(x, dtype)`, `argmax(x, k)`,
    /// `argmin(x, k)`; `None` when `name` is none of them.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn bit_function(
        &mut self,
        k: &Kernel,
        axes: &[(String, VarId)],
        name: &str,
        name_span: Span,
        args: &[Arg],
        span: Span,
    ) -> Option<Option<Expr>> {
        let arity = |cx: &mut Self, n: usize| {
            let ok = args.len() == n;
            if !ok {
                cx.error(Diagnostic::new(
                    span,
                    format!("`{name}` takes {n} argument(s), {} given", args.len()),
                ));
            }
            ok
        };
        Some(match name {
            "isnan" | "isinf" => {
                if !arity(self, 1) {
                    return Some(None);
                }
                let Some(x) = self.expr(k, axes, &args[0].value, None) else {
                    return Some(None);
                };
                if !x.dtype.is_float() || x.dtype.is_f8() {
                    self.error(
                        Diagnostic::new(
                            args[0].value.span,
                            format!("`{name}` needs a float, not `{}`", x.dtype),
                        )
                        .hint("integers are never NaN or infinite"),
                    );
                    return Some(None);
                }
                Some(if name == "isnan" {
                    is_nan(x)
                } else {
                    let t = x.dtype;
                    bin(
                        BinOp::Eq,
                        e(ExprKind::Call(MathFn::Abs, vec![x]), t),
                        e(ExprKind::Float(f64::INFINITY), t),
                    )
                })
            }
            "bitcast" => {
                if !arity(self, 2) {
                    return Some(None);
                }
                let to = match &args[1].value.kind {
                    AstKind::Name(n) => DType::parse(n),
                    _ => None,
                };
                let Some(x) = self.expr(k, axes, &args[0].value, None) else {
                    return Some(None);
                };
                let ok = matches!(
                    (x.dtype, to),
                    (DType::F32, Some(DType::I32 | DType::U32))
                        | (DType::I32 | DType::U32, Some(DType::F32))
                        | (DType::F64, Some(DType::I64))
                        | (DType::I64, Some(DType::F64))
                );
                let Some(to) = to.filter(|_| ok) else {
                    self.error(
                        Diagnostic::new(span, format!("`bitcast` from `{}` to this type is not supported", x.dtype))
                            .hint("bitcast f32 to i32 or u32 (and back), f64 to i64 (and back): `bitcast(x, i32)`"),
                    );
                    return Some(None);
                };
                Some(e(ExprKind::Bitcast(bx(x)), to))
            }
            "argmax" | "argmin" => {
                self.arg_reduction(k, axes, name == "argmax", name_span, args, span)
            }
            _ => return None,
        })
    }

    /// `argmax(x, k)` / `argmin(x, k)`: the index along the one reduction
    /// axis `k` of the largest (smallest) value, the first on ties; NaN
    /// counts as larger (smaller) than everything, as in PyTorch; -1 when
    /// the axis is empty. Written as a `reduce_max` (`reduce_min`) of the
    /// i64 key `h * 2^32 + l`, where `h` orders the values as i32 (floats
    /// through their bits) and `l` is `2^32 - 1 - k` (`k`), so that the
    /// largest key is the largest value at the smallest index; the
    /// epilogue takes the index back from `l`.
    fn arg_reduction(
        &mut self,
        k: &Kernel,
        axes: &[(String, VarId)],
        max: bool,
        name_span: Span,
        args: &[Arg],
        span: Span,
    ) -> Option<Expr> {
        let (op, name) = match max {
            true => (ReduceOp::Max, "argmax"),
            false => (ReduceOp::Min, "argmin"),
        };
        let vars = self
            .red
            .as_ref()
            .map(|r| r.vars.clone())
            .unwrap_or_default();
        if vars.len() != 1 {
            self.error(
                Diagnostic::new(
                    name_span,
                    format!(
                        "`{name}` reduces over exactly one axis; the stage declares {}",
                        vars.len()
                    ),
                )
                .hint("declare one: `reduce = { c = \"cols\" }`"),
            );
            return None;
        }
        let idx = e(ExprKind::Index(Index::Var(vars[0].1)), DType::I32);
        let reduced =
            self.reduction_with(k, axes, op, name, name_span, args, span, None, &|x| {
                key(x, idx.clone(), max)
            })?;
        // The index back from the key's low 32 bits (a non-negative
        // remainder whatever the key's sign).
        let two32 = int(1 << 32, DType::I64);
        let low = bin(
            BinOp::Rem,
            bin(
                BinOp::Add,
                bin(BinOp::Rem, reduced, two32.clone()),
                two32.clone(),
            ),
            two32,
        );
        let idx = match max {
            true => bin(BinOp::Sub, int((1 << 32) - 1, DType::I64), low),
            false => low,
        };
        Some(cast(idx, DType::I32))
    }
}

/// The i64 key of `x` at index `idx` (see [`Cx::arg_reduction`]); `None`
/// for types whose order does not fit 32 bits.
pub(crate) fn key(x: Expr, idx: Expr, max: bool) -> Result<Expr, String> {
    let l = match max {
        true => bin(
            BinOp::Sub,
            int((1 << 32) - 1, DType::I64),
            cast(idx, DType::I64),
        ),
        false => cast(idx, DType::I64),
    };
    Ok(bin(
        BinOp::Add,
        bin(BinOp::Mul, order(x, max)?, int(1 << 32, DType::I64)),
        l,
    ))
}

/// `x`'s order as an i64 within i32's range (floats through their bits),
/// NaN above every number (`nan_high`) or below.
pub(crate) fn order(x: Expr, nan_high: bool) -> Result<Expr, String> {
    Ok(match x.dtype {
        DType::F16 | DType::BF16 | DType::F32 => {
            let f = cast(x, DType::F32);
            // NaN above or below everything; -0 as +0.
            let nan = e(
                ExprKind::Float(if nan_high { f64::NAN } else { -f64::NAN }),
                DType::F32,
            );
            let zero = e(ExprKind::Float(0.0), DType::F32);
            let f = select(is_nan(f.clone()), nan, bin(BinOp::Add, f, zero));
            // Negative floats order backwards in their bits: flip the
            // other 31, i.e. -2^31 - 1 - b.
            let b = cast(e(ExprKind::Bitcast(bx(f)), DType::I32), DType::I64);
            select(
                bin(BinOp::Lt, b.clone(), int(0, DType::I64)),
                bin(BinOp::Sub, int(-(1 << 31) - 1, DType::I64), b.clone()),
                b,
            )
        }
        DType::I8 | DType::U8 | DType::I32 => cast(x, DType::I64),
        t => return Err(format!("`{t}`")),
    })
}
