//! Attention: `O[b, h, i, d], L[b, h, i] = attention(Q[b, h, i, e], K[b,
//! h, j, e], V[b, h, j, d])` with `reduce = { j = "T", e = 64 }` (or `j =
//! "min(i + 1, T)"`, causal) and `shape = ["B", "H", "S", 64]`: the
//! softmax of the scaled scores of each query row against every key,
//! applied to the values, and the row's log-sum-exp (see
//! [`crate::kernel::Attention`]). Which reduction axis is the key axis
//! and which the head axis follows from the arguments: the head axis is
//! the one `q` reads.

use crate::diag::{Diagnostic, Span};
use crate::dtype::DType;
use crate::front::bits::{bin, cast, e};
use crate::front::tuple::{self, Axes};
use crate::front::{output_axes, span_of, Cx, RedCx, StageDecl};
use crate::index::{Index, VarId};
use crate::kernel::*;
use crate::syntax::{Ast, AstKind, ComputeStmt};
use std::collections::HashMap;
use toml::Spanned;

/// The largest head dimension: each thread of `rowwise` keeps a row of
/// that many outputs in registers.
pub const MAX_HEAD: i64 = 256;

const EX: &str = "attention(Q[b, i, e], K[b, j, e], V[b, j, d])";

fn fail<T>(cx: &mut Cx<'_>, d: Diagnostic) -> Option<T> {
    cx.error(d);
    None
}

/// Checks an attention stage and adds it (and its tensors) to `k`.
pub(crate) fn stage(
    cx: &mut Cx<'_>,
    k: &mut Kernel,
    names: &mut Vec<(String, Span)>,
    decl: &Spanned<StageDecl>,
    stmt: &ComputeStmt,
    ax: Axes,
) {
    let _ = build(cx, k, names, decl, stmt, ax);
}

/// The outputs, dtype and axes an attention stage must have.
fn check_shape(
    cx: &mut Cx<'_>,
    d: &StageDecl,
    stmt: &ComputeStmt,
    ax: &Axes,
    outs: &[(String, Span)],
) -> Option<()> {
    if outs.len() > 2 {
        return fail(
            cx,
            Diagnostic::new(
                outs[2].1,
                "`attention` gives two tensors: the output and the row's log-sum-exp",
            )
            .hint("write `O[b, i, d], L[b, i] = attention(...)`, or `O[b, i, d] = ...` alone"),
        );
    }
    if !tuple::no_dtype_or_combiner(
        cx,
        d,
        "an attention",
        "the output has the values' dtype and the log-sum-exp is f32",
    ) {
        return None;
    }
    let n = ax.vars.len();
    let at = d.shape.as_ref().map_or(stmt.target_span, span_of);
    if n < 2 {
        return fail(
            cx,
            Diagnostic::new(
                at,
                "an attention's output has a query axis and a head axis, last",
            )
            .hint("e.g. `O[i, d]` with `shape = [\"S\", 64]`"),
        );
    }
    let head = ax.shape[n - 1].as_const();
    if !head.is_some_and(|h| (1..=MAX_HEAD).contains(&h)) {
        return fail(
            cx,
            Diagnostic::new(
                at,
                format!(
                    "the last axis, `{}`, is the head dimension: a constant from 1 to {MAX_HEAD}",
                    ax.vars[n - 1].0
                ),
            )
            .hint("e.g. `shape = [\"B\", \"S\", 64]`"),
        );
    }
    if ax.reduce.len() != 2 {
        return fail(
            cx,
            Diagnostic::new(
                stmt.value.span,
                format!(
                    "an attention reduces over a key axis and a head axis; the stage declares {}",
                    ax.reduce.len()
                ),
            )
            .hint("declare both: `reduce = { j = \"T\", e = 64 }`"),
        );
    }
    Some(())
}

/// The query, key and value arguments of `attention(...)`, and `scale=`.
fn arguments<'a>(
    cx: &mut Cx<'_>,
    stmt: &'a ComputeStmt,
) -> Option<([&'a Ast; 3], Option<&'a Ast>)> {
    let AstKind::Call { args, .. } = &stmt.value.kind else {
        unreachable!("the stage form of an `attention` call")
    };
    let mut pos = Vec::new();
    let mut scale_ast = None;
    for a in args {
        match a.key.as_ref().map(|k| k.0.as_str()) {
            None if pos.len() < 3 => pos.push(&a.value),
            Some("scale") => scale_ast = Some(&a.value),
            _ => {
                return fail(
                    cx,
                    Diagnostic::new(a.value.span, "`attention` takes q, k, v and `scale=`")
                        .hint(format!("`{EX}`")),
                )
            }
        }
    }
    let [qa, ka, va] = pos[..] else {
        return fail(
            cx,
            Diagnostic::new(
                stmt.value.span,
                "`attention` needs the query, key and value elements",
            )
            .hint(format!("`{EX}`")),
        );
    };
    Some(([qa, ka, va], scale_ast))
}

/// `scale=` as an f32, or 1/sqrt of the head dimension.
fn scale(cx: &mut Cx<'_>, k: &Kernel, scale_ast: Option<&Ast>, eax: &Axis) -> Option<Expr> {
    Some(match scale_ast {
        None => e(
            ExprKind::Call(
                MathFn::Rsqrt,
                vec![cast(
                    e(ExprKind::Index(eax.extent.clone()), DType::I32),
                    DType::F32,
                )],
            ),
            DType::F32,
        ),
        Some(a) => {
            let s = cx.expr(k, &[], a, Some(DType::F32))?;
            if !s.dtype.is_float() || s.dtype == DType::F64 {
                return fail(
                    cx,
                    Diagnostic::new(a.span, format!("`scale` is an f32 number, not {}", s.dtype))
                        .hint("e.g. `scale=0.125` or a parameter"),
                );
            }
            cast(s, DType::F32)
        }
    })
}

/// Which axes each operand may read: the query a row of `i` over `e`,
/// the keys rows of `j` over `e`, the values rows of `j` over `d`.
fn check_roles(
    cx: &mut Cx<'_>,
    operands: [(&Expr, &Ast); 3],
    all: &[(String, VarId)],
    n: usize,
    [jv, ev]: [VarId; 2],
) -> Option<()> {
    let name = |v: VarId| all[v.0 as usize].0.clone();
    let (iv, dv) = (VarId(n as u32 - 2), VarId(n as u32 - 1));
    let [(q, qa), (kx, ka), (v, va)] = operands;
    let rules = [
        (q, qa, "query", [dv, jv]),
        (kx, ka, "key", [iv, dv]),
        (v, va, "value", [iv, ev]),
    ];
    for (x, a, what, banned) in rules {
        if let Some(b) = banned.into_iter().find(|b| x.uses_var(*b)) {
            return fail(
                cx,
                Diagnostic::new(a.span, format!("the {what} depends on `{}`", name(b)))
                    .hint(format!(
                        "`{EX}`: the query is a row of `i` over `e`, the keys rows of `j` over `e`, the values rows of `j` over `d`"
                    )),
            );
        }
    }
    if !kx.uses_var(jv) || !v.uses_var(jv) {
        let a = if kx.uses_var(jv) { va } else { ka };
        return fail(
            cx,
            Diagnostic::new(
                a.span,
                format!("keys and values are rows of the key axis `{}`", name(jv)),
            )
            .hint(format!("`{EX}`")),
        );
    }
    Some(())
}

fn build(
    cx: &mut Cx<'_>,
    k: &mut Kernel,
    names: &mut Vec<(String, Span)>,
    decl: &Spanned<StageDecl>,
    stmt: &ComputeStmt,
    ax: Axes,
) -> Option<()> {
    let d = decl.get_ref();
    let outs = tuple::outputs(cx, names, stmt, true)?;
    check_shape(cx, d, stmt, &ax, &outs)?;
    let n = ax.vars.len();
    let ([qa, ka, va], scale_ast) = arguments(cx, stmt)?;
    let mut all = ax.vars.clone();
    all.extend(
        ax.reduce
            .iter()
            .enumerate()
            .map(|(r, a)| (a.name.clone(), VarId((n + r) as u32))),
    );
    cx.red = Some(RedCx {
        vars: Vec::new(),
        result: None,
        inside: true,
        axes: None,
    });
    let parsed = [qa, ka, va].map(|a| cx.expr(k, &all, a, None));
    cx.red = None;
    let [Some(q), Some(kx), Some(v)] = parsed else {
        return None;
    };
    for (x, a, what) in [(&q, qa, "query"), (&kx, ka, "key"), (&v, va, "value")] {
        if !matches!(x.dtype, DType::F16 | DType::BF16 | DType::F32) {
            return fail(
                cx,
                Diagnostic::new(
                    a.span,
                    format!("an attention's {what} is f16, bf16 or f32, not {}", x.dtype),
                )
                .hint("convert it, e.g. `f32(...)`"),
            );
        }
    }
    // The head axis is the reduction axis the query reads.
    let (r0, r1) = (VarId(n as u32), VarId(n as u32 + 1));
    let (jv, ev) = match (q.uses_var(r0), q.uses_var(r1)) {
        (false, true) => (r0, r1),
        (true, false) => (r1, r0),
        _ => {
            return fail(
                cx,
                Diagnostic::new(
                    qa.span,
                    format!(
                    "the query reads exactly one of the reduction axes (`{}`, `{}`): the head axis",
                    ax.reduce[0].name, ax.reduce[1].name
                ),
                )
                .hint(format!("`{EX}`: `q` reads `e`, `k` reads `j` and `e`")),
            )
        }
    };
    let operands = [(&q, qa), (&kx, ka), (&v, va)];
    check_roles(cx, operands, &all, n, [jv, ev])?;
    let name = |v: VarId| all[v.0 as usize].0.clone();
    let dv = VarId(n as u32 - 1);
    let (mut jax, mut eax) = (ax.reduce[0].clone(), ax.reduce[1].clone());
    if jv != r0 {
        std::mem::swap(&mut jax, &mut eax);
    }
    if jax.extent.uses_var(dv) {
        return fail(
            cx,
            Diagnostic::new(
                jax.span,
                format!(
                    "the number of keys depends on `{}`, the head axis",
                    name(dv)
                ),
            )
            .hint("a row's keys may depend on the query (`min(i + 1, T)`), not on the head column"),
        );
    }
    if (0..n as u32).any(|a| eax.extent.uses_var(VarId(a))) {
        return fail(
            cx,
            Diagnostic::new(
                eax.span,
                "the head axis's extent depends on the output's axes",
            )
            .hint("give it an extent of sizes and constants"),
        );
    }
    // Key axis first, head axis second, whatever the declaration's order.
    let order: HashMap<VarId, Index> = HashMap::from([(jv, Index::Var(r0)), (ev, Index::Var(r1))]);
    let fix = |x: Expr| x.map_indices(&|ix| ix.subst(&order));
    let (q, kx, v) = (fix(q), fix(kx), fix(v));
    let scale = scale(cx, k, scale_ast, &eax)?;
    let body = bin(
        BinOp::Mul,
        cast(q.clone(), DType::F32),
        cast(kx.clone(), DType::F32),
    );
    let steps = cx.steps(d);
    let first = TensorId(k.tensors.len() as u32);
    let attention = Attention {
        q,
        k: kx,
        v: v.clone(),
        scale,
        outputs: (0..outs.len() as u32)
            .map(|s| TensorId(first.0 + s))
            .collect(),
    };
    let axes = output_axes(stmt, &ax.shape);
    let stage = Stage {
        name: stmt.target.clone(),
        output: first,
        axes,
        kind: StageKind::Reduce(Reduction {
            axes: vec![jax, eax],
            body,
            kind: ReduceKind::Attention(attention),
        }),
        value: e(ExprKind::Reduced, v.dtype),
        schedule: steps,
        span: span_of(decl),
        nest: None,
        default: None,
        absorbed: false,
    };
    cx.push_stage(k, names, stmt, v.dtype, ax.shape, stage);
    Some(())
}
