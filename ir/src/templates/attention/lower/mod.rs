//! An attention stage ([`crate::kernel::Attention`]), built whole in
//! place of the `nest` pass as the schedule asks: `rowwise` ([`rows`]), a
//! thread per query row on any target, or `flash` ([`flash`]), a
//! work-group per tile of query rows on the matrix instructions.

mod flash;
mod rows;

use crate::diag::Diagnostic;
use crate::index::{IOp, Index, VarId};
use crate::kernel::{Attention, BinOp, Expr, ExprKind, MathFn};
use crate::lower::{inline_producers, Local, Lowering};
use crate::plan::AttnPlan;
use crate::schedule::{LoopKind, LoopVar};
use crate::{DType, Span};
use std::collections::HashMap;

/// The attention's kernel, where the stage is an attention scheduled with
/// `rowwise` or `flash` (see [`crate::lower::Templates::build`]).
pub(crate) fn lowering(l: &mut Lowering) -> Option<Result<(), Diagnostic>> {
    let plan = l.nest.attention?;
    let a = l.k.stage(l.sid).attention()?.clone();
    Some(build(l, &a, plan))
}

fn build(l: &mut Lowering, a: &Attention, plan: AttnPlan) -> Result<(), Diagnostic> {
    match plan {
        AttnPlan::Rows { threads, span } => rows::build(l, a, threads, span),
        AttnPlan::Flash {
            rows,
            keys,
            stages,
            wave_rows,
            span,
        } => {
            let t = flash::Tiles {
                rows,
                keys,
                stages,
                wave_rows,
            };
            flash::build(l, a, t, span)
        }
    }
}

/// A new loop variable of the kernel.
fn var(l: &mut Lowering, name: &str, extent: Index, kind: LoopKind, span: Span) -> VarId {
    let v = VarId(l.g.vars.len() as u32);
    let lv = LoopVar {
        name: format!("attn.{name}"),
        reduce: false,
        extent,
        kind,
        span,
    };
    l.g.vars.push(lv.clone());
    l.nest.vars.push(lv);
    v
}

/// A new per-thread array of f32.
fn local(l: &mut Lowering, name: &str, len: i64, span: Span) -> u32 {
    local_typed(l, name, DType::F32, len, span)
}

/// A new register array of `dtype`.
fn local_typed(l: &mut Lowering, name: &str, dtype: DType, len: i64, span: Span) -> u32 {
    let stage = &l.k.stage(l.sid).name;
    l.g.locals.push(Local {
        name: format!("{stage}_{name}"),
        dtype,
        len: len as u32,
        span,
    });
    l.g.locals.len() as u32 - 1
}

/// The stage's query rows: the output's axes but the last, as one count.
/// The query rows, all but the last output axis fused.
fn row_count(l: &mut Lowering, span: Span) -> Index {
    let n = l.k.stage(l.sid).axes.len();
    counted(l, n - 1, "query rows", span)
}

/// The product of the output's first `axes` axes, counted in 32 bits:
/// where sizes without `max` could pass that, the count is clamped and the
/// launch must keep within it (as a `fuse` does, [`crate::plan::Requirement`]).
fn counted(l: &mut Lowering, axes: usize, what: &str, span: Span) -> Index {
    let st = l.k.stage(l.sid);
    let count = st.axes[..axes]
        .iter()
        .fold(Index::c(1), |acc, a| acc * a.extent.clone());
    let size_max: Vec<u64> = l.k.sizes.iter().map(|s| s.max).collect();
    let what = || format!("the {what} of stage `{}`", st.name);
    crate::plan::Requirement::counted(count, &size_max, &mut l.g.requires, what, span)
}

/// The output's axes but the last `skip` decoded from a row number
/// (row-major).
fn decode(l: &Lowering, skip: usize, row: Index) -> HashMap<VarId, Index> {
    let st = l.k.stage(l.sid);
    let axes: Vec<usize> = (0..st.axes.len() - skip).collect();
    crate::lower::decode_axes(st, &axes, row)
}

/// `x` of the stage, its producers substituted, at the loop-IR point `at`.
fn at(l: &Lowering, x: &Expr, at: &HashMap<VarId, Index>) -> Expr {
    inline_producers(l.k, l.sid, x).map_indices(&|ix| ix.subst(at))
}

fn f32e(kind: ExprKind) -> Expr {
    Expr {
        kind,
        dtype: DType::F32,
    }
}

fn reg(local: u32, index: Index) -> Expr {
    f32e(ExprKind::Local { local, index })
}

fn op(o: BinOp, a: Expr, b: Expr) -> Expr {
    let dtype = if o.is_comparison() {
        DType::Bool
    } else {
        a.dtype
    };
    Expr {
        kind: ExprKind::Binary(o, Box::new(a), Box::new(b)),
        dtype,
    }
}

fn call(f: MathFn, x: Expr) -> Expr {
    f32e(ExprKind::Call(f, vec![x]))
}

fn float(v: f64) -> Expr {
    f32e(ExprKind::Float(v))
}

fn cast(x: Expr, t: DType) -> Expr {
    if x.dtype == t {
        return x;
    }
    Expr {
        kind: ExprKind::Cast(Box::new(x)),
        dtype: t,
    }
}

fn select(c: Expr, a: Expr, b: Expr) -> Expr {
    let dtype = a.dtype;
    Expr {
        kind: ExprKind::Select(Box::new(c), Box::new(a), Box::new(b)),
        dtype,
    }
}

/// The stored results of a row from its running sum `sum` (0 for a row
/// with no keys): `acc / sum` as the output's dtype, and `max + log(sum)`.
fn finish(out: Expr, sum: Expr, dtype: DType) -> Expr {
    let live = op(BinOp::Gt, sum.clone(), float(0.0));
    cast(select(live, op(BinOp::Div, out, sum), float(0.0)), dtype)
}

/// Both lowerings keep scores in base 2 (scaled by log2 e once, with the
/// user's scale), so that each weight is one hardware `exp2`: `exp`'s
/// accurate expansion was most of the softmax's instructions on NVIDIA.
/// The rounding this adds is far below the f16/bf16 weights' own.
fn base2(scale: Expr) -> Expr {
    op(BinOp::Mul, scale, float(std::f64::consts::LOG2_E))
}

/// The value of `x` where it is a constant whose f32 is normal and
/// positive, far from overflow even times log2 e (a literal, the default
/// `rsqrt(head dimension)`, products and quotients of those): then
/// `max(c · s) = c · max(s)` and each weight `exp2(c · s − m)` is one
/// fused multiply-add, with no separate scaling of every score. (A scale
/// of 0 would turn a masked −∞ into NaN.)
fn positive_constant(x: &Expr) -> Option<f64> {
    let v = match &x.kind {
        ExprKind::Float(v) => *v,
        ExprKind::Int(v) => *v as f64,
        ExprKind::Index(ix) => ix.as_const()? as f64,
        ExprKind::Cast(a) => constant(a)?,
        ExprKind::Call(MathFn::Rsqrt, a) if a.len() == 1 => 1.0 / constant(&a[0])?.sqrt(),
        ExprKind::Binary(BinOp::Mul, a, b) => positive_constant(a)? * positive_constant(b)?,
        ExprKind::Binary(BinOp::Div, a, b) => positive_constant(a)? / positive_constant(b)?,
        _ => return None,
    };
    let f = v as f32;
    (f32::MIN_POSITIVE..f32::MAX / 4.0)
        .contains(&f)
        .then_some(v)
}

/// A constant operand of [`positive_constant`]'s casts and square roots,
/// of any sign: the whole is checked.
fn constant(x: &Expr) -> Option<f64> {
    match &x.kind {
        ExprKind::Float(v) => Some(*v),
        ExprKind::Int(v) => Some(*v as f64),
        ExprKind::Index(ix) => ix.as_const().map(|v| v as f64),
        _ => positive_constant(x),
    }
}

/// 2^x on the hardware's approximate instruction.
fn exp2(x: Expr) -> Expr {
    call(MathFn::Exp2Approx, x)
}

/// The log-sum-exp of a row (natural base) from its base-2 maximum.
fn lse(max2: Expr, sum: Expr) -> Expr {
    let live = op(BinOp::Gt, sum.clone(), float(0.0));
    let max = op(BinOp::Mul, max2, float(std::f64::consts::LN_2));
    select(
        live,
        op(BinOp::Add, max, call(MathFn::Log, sum)),
        float(f64::NEG_INFINITY),
    )
}
