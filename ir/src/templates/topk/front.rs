//! Top-k: `V[r, j], I[r, j] = topk(X[r, c], c)` with `reduce = { c =
//! "cols" }` and `shape = ["rows", 8]`: the 8 largest elements of each row
//! and their indices, best first (`largest=false`: the smallest). With
//! one tensor on the left, the indices alone. The front end writes each
//! element's i64 ranking key (the one `argmax` folds) as the reduction's
//! body, and each output as an epilogue of the key at its position
//! ([`crate::kernel::TopK`]).

use crate::diag::{Diagnostic, Span};
use crate::dtype::DType;
use crate::front::bits::{bin, cast, e, int, key, order, select};
use crate::front::hooks::CallSite;
use crate::front::tuple::{self, Axes};
use crate::front::{output_axes, span_of, Cx, RedCx, StageDecl};
use crate::index::{Index, VarId};
use crate::kernel::*;
use crate::syntax::{AstKind, ComputeStmt};
use toml::Spanned;

/// The most positions a top-k may ask for: each thread keeps that many
/// keys in registers.
pub const MAX_K: i64 = 64;

/// `topk` inside an expression, where it may not be: an error (see
/// [`crate::front::hooks::Call`]).
pub(crate) fn in_expression(
    cx: &mut Cx,
    _k: &Kernel,
    _axes: &[(String, VarId)],
    site: CallSite,
) -> Option<Option<Expr>> {
    if site.name != "topk" {
        return None;
    }
    cx.error(
        Diagnostic::new(site.name_span, "`topk` is a stage's whole value").hint(
            "write `V[r, j], I[r, j] = topk(X[r, c], c)` and compute the rest in another stage",
        ),
    );
    Some(None)
}

/// The parsed call: the element, the ranked axis's name and the order.
struct Call<'a> {
    value: &'a crate::syntax::Ast,
    axis: (String, Span),
    largest: bool,
}

/// Checks a top-k stage and adds it (and its tensors) to `k`.
pub(crate) fn stage(
    cx: &mut Cx<'_>,
    k: &mut Kernel,
    names: &mut Vec<(String, Span)>,
    decl: &Spanned<StageDecl>,
    stmt: &ComputeStmt,
    ax: Axes,
) {
    let d = decl.get_ref();
    let Some(outs) = tuple::outputs(cx, names, stmt, false) else {
        return;
    };
    if outs.len() > 2 {
        return cx.error(
            Diagnostic::new(outs[2].1, "`topk` gives two tensors: the values and the indices")
                .hint("write `V[r, j], I[r, j] = topk(X[r, c], c)`, or `I[r, j] = ...` for the indices alone"),
        );
    }
    if !tuple::no_dtype_or_combiner(
        cx,
        d,
        "a top-k",
        "the values have the element's dtype and the indices are i32",
    ) {
        return;
    }
    let Some(call) = call(cx, stmt) else {
        return;
    };
    let Some(kk) = positions(cx, d, stmt, &ax) else {
        return;
    };
    let Some(red) = ranked_axis(cx, stmt, &ax, &call) else {
        return;
    };
    let n = ax.vars.len();
    let mut all = ax.vars.clone();
    all.push((red.name.clone(), VarId(n as u32)));
    cx.red = Some(RedCx {
        vars: Vec::new(),
        result: None,
        inside: true,
        axes: None,
    });
    let x = cx.expr(k, &all, call.value, None);
    cx.red = None;
    let Some(x) = x else {
        return;
    };
    let pos_var = VarId(n as u32 - 1);
    let mut uses_pos = false;
    x.visit_loads(&mut |_, ix| uses_pos |= ix.iter().any(|i| i.uses_var(pos_var)));
    x.each(&mut |e| {
        if let ExprKind::Index(i) = &e.kind {
            uses_pos |= i.uses_var(pos_var);
        }
    });
    if uses_pos {
        return cx.error(
            Diagnostic::new(
                call.value.span,
                format!(
                    "the ranked element depends on `{}`, the position in the result",
                    ax.vars[n - 1].0
                ),
            )
            .hint("rank elements of the row alone: the last axis only numbers the k results"),
        );
    }
    let idx = e(ExprKind::Index(Index::Var(VarId(n as u32))), DType::I32);
    let dt = x.dtype;
    // The smallest values rank by the bitwise complement of `order · 2^32
    // + index` (NaN high, as torch.sort: last): larger is better for both
    // orders, with no overflow.
    let ranked = match call.largest {
        true => key(x, idx, true),
        false => order(x, true).map(|h| {
            let k = bin(
                BinOp::Add,
                bin(BinOp::Mul, h, int(1 << 32, DType::I64)),
                cast(idx, DType::I64),
            );
            bin(BinOp::Sub, int(-1, DType::I64), k)
        }),
    };
    let ranking = match ranked {
        Ok(k) => k,
        Err(t) => {
            return cx.error(
                Diagnostic::new(
                    call.value.span,
                    format!("`topk` ranks f16, bf16, f32, i8, u8 and i32 values, not {t}"),
                )
                .hint("convert the element, e.g. `f32(...)`"),
            )
        }
    };
    let mut epilogues = vec![index_of(call.largest)];
    if outs.len() == 2 {
        epilogues.insert(0, value_of(call.largest, dt));
    }
    let steps = cx.steps(d);
    let first = TensorId(k.tensors.len() as u32);
    let topk = TopK {
        k: kk as u32,
        largest: call.largest,
        outputs: (0..outs.len() as u32)
            .map(|s| TensorId(first.0 + s))
            .collect(),
        epilogues: epilogues.clone(),
    };
    let axes = output_axes(stmt, &ax.shape);
    let stage = Stage {
        name: stmt.target.clone(),
        output: first,
        axes,
        kind: StageKind::Reduce(Reduction {
            axes: vec![red],
            body: ranking,
            kind: ReduceKind::TopK(topk),
        }),
        value: epilogues[0].clone(),
        schedule: steps,
        span: span_of(decl),
        nest: None,
        default: None,
        absorbed: false,
    };
    let t0 = epilogues[0].dtype;
    cx.push_stage(k, names, stmt, t0, ax.shape, stage);
}

/// `topk(x, c)` or `topk(x, c, largest=false)`.
fn call<'a>(cx: &mut Cx<'_>, stmt: &'a ComputeStmt) -> Option<Call<'a>> {
    const EX: &str = "topk(X[r, c], c)";
    let AstKind::Call { args, .. } = &stmt.value.kind else {
        unreachable!("the stage form of a `topk` call")
    };
    let (mut value, mut axis, mut largest) = (None, None, true);
    for (i, a) in args.iter().enumerate() {
        match (i, a.key.as_ref().map(|k| k.0.as_str())) {
            (0, None) => value = Some(&a.value),
            (1, None) => match &a.value.kind {
                AstKind::Name(n) => axis = Some((n.clone(), a.value.span)),
                _ => {
                    cx.error(
                        Diagnostic::new(a.value.span, "expected the ranked axis's name")
                            .hint(format!("`{EX}`, with `reduce = {{ c = \"cols\" }}`")),
                    );
                    return None;
                }
            },
            (_, Some("largest")) => match &a.value.kind {
                AstKind::Name(v) if v == "true" || v == "false" => largest = v == "true",
                _ => {
                    cx.error(
                        Diagnostic::new(a.value.span, "expected `true` or `false`")
                            .hint("`topk(X[r, c], c, largest=false)` ranks the smallest first"),
                    );
                    return None;
                }
            },
            _ => {
                cx.error(
                    Diagnostic::new(
                        a.value.span,
                        "`topk` takes a value, the ranked axis and `largest=`",
                    )
                    .hint(format!("`{EX}`")),
                );
                return None;
            }
        }
    }
    let (Some(value), Some(axis)) = (value, axis) else {
        cx.error(
            Diagnostic::new(
                stmt.value.span,
                "`topk` needs a value and the axis it ranks along",
            )
            .hint(format!("`{EX}`")),
        );
        return None;
    };
    Some(Call {
        value,
        axis,
        largest,
    })
}

/// The number of results: the last axis's extent, a constant from 1 to
/// [`MAX_K`].
fn positions(cx: &mut Cx<'_>, d: &StageDecl, stmt: &ComputeStmt, ax: &Axes) -> Option<i64> {
    let at = d.shape.as_ref().map_or(stmt.target_span, span_of);
    let Some(last) = ax.shape.last() else {
        cx.error(
            Diagnostic::new(at, "a top-k has an axis for the k results")
                .hint("write `V[r, j], I[r, j] = topk(X[r, c], c)` with `shape = [\"rows\", 8]`"),
        );
        return None;
    };
    match last.as_const() {
        Some(kk) if (1..=MAX_K).contains(&kk) => Some(kk),
        _ => {
            cx.error(
                Diagnostic::new(
                    at,
                    format!(
                        "the last axis, `{}`, numbers the results: its extent is k, a constant from 1 to {MAX_K}",
                        stmt.axes.last().map_or("", |a| a.0.as_str())
                    ),
                )
                .hint("e.g. `shape = [\"rows\", 8]` for the 8 best of each row"),
            );
            None
        }
    }
}

/// The one reduction axis, named in the call, whose extent does not
/// depend on the output axes.
fn ranked_axis(cx: &mut Cx<'_>, stmt: &ComputeStmt, ax: &Axes, call: &Call) -> Option<Axis> {
    let [red] = ax.reduce.as_slice() else {
        cx.error(
            Diagnostic::new(
                stmt.value.span,
                format!(
                    "`topk` ranks along exactly one axis; the stage declares {}",
                    ax.reduce.len()
                ),
            )
            .hint(format!(
                "declare it: `reduce = {{ {} = \"cols\" }}`",
                call.axis.0
            )),
        );
        return None;
    };
    if red.name != call.axis.0 {
        cx.error(
            Diagnostic::new(
                call.axis.1,
                format!("`{}` is not the stage's reduction axis", call.axis.0),
            )
            .hint(format!(
                "rank along `{}`: `topk(..., {})`",
                red.name, red.name
            )),
        );
        return None;
    }
    if (0..ax.vars.len() as u32).any(|v| red.extent.uses_var(VarId(v))) {
        cx.error(
            Diagnostic::new(
                red.span,
                "a top-k's row length may not depend on the output's axes",
            )
            .hint("give it an extent of sizes and constants"),
        );
        return None;
    }
    Some(red.clone())
}

/// `((x % 2^32) + 2^32) % 2^32`: the low 32 bits, whatever the sign.
fn low32(x: Expr) -> Expr {
    let two32 = int(1 << 32, DType::I64);
    bin(
        BinOp::Rem,
        bin(BinOp::Add, bin(BinOp::Rem, x, two32.clone()), two32.clone()),
        two32,
    )
}

/// The `argmax` (`argmin`) key back from the ranking key.
fn arg_key(largest: bool) -> Expr {
    let r = e(ExprKind::Reduced, DType::I64);
    match largest {
        true => r,
        false => bin(BinOp::Sub, int(-1, DType::I64), r),
    }
}

/// Past the row's end (the key `i64::MIN`): `then`, else `x`.
fn unless_past_end(x: Expr, then: Expr) -> Expr {
    let past = bin(
        BinOp::Eq,
        e(ExprKind::Reduced, DType::I64),
        int(i64::MIN, DType::I64),
    );
    select(past, then, x)
}

/// The index an element's key holds (-1 past the row's end).
fn index_of(largest: bool) -> Expr {
    let low = low32(arg_key(largest));
    let idx = match largest {
        true => bin(BinOp::Sub, int((1 << 32) - 1, DType::I64), low),
        false => low,
    };
    unless_past_end(cast(idx, DType::I32), int(-1, DType::I32))
}

/// The value an element's key holds, as `dt` (0 past the row's end): the
/// key's high half orders the values as i32, floats through their bits
/// (see `argmax`), so -0 comes back as +0 and NaN as the canonical NaN.
fn value_of(largest: bool, dt: DType) -> Expr {
    let k = arg_key(largest);
    let h = bin(
        BinOp::Div,
        bin(BinOp::Sub, k.clone(), low32(k)),
        int(1 << 32, DType::I64),
    );
    let v = if dt.is_float() {
        let bits = select(
            bin(BinOp::Lt, h.clone(), int(0, DType::I64)),
            bin(BinOp::Sub, int(-(1 << 31) - 1, DType::I64), h.clone()),
            h,
        );
        let f = e(
            ExprKind::Bitcast(Box::new(cast(bits, DType::I32))),
            DType::F32,
        );
        cast(f, dt)
    } else {
        cast(h, dt)
    };
    let zero = match dt.is_float() {
        true => e(ExprKind::Float(0.0), dt),
        false => int(0, dt),
    };
    unless_past_end(v, zero)
}
