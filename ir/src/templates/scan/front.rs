//! The scan's spelling in the kernel language: `Y[r, c] = cumsum(X[r, c],
//! c)` (also `cumprod`, `cummax`, `cummin`, and `exclusive=true`). The call
//! writes the scan's definition out — `sum(X[r, k], k)` over `k < c + 1`
//! (`k < c` exclusive) — and the recogniser ([`super::recognise`]) marks
//! it, as it marks the same reduction written by hand.

use crate::diag::{Diagnostic, Span};
use crate::dtype::DType;
use crate::front::hooks::CallSite;
use crate::front::Cx;
use crate::index::{Index, VarId};
use crate::kernel::*;
use crate::syntax::{Arg, AstKind};

/// The reduction a scan function names.
fn scan_op(name: &str) -> Option<ReduceOp> {
    Some(match name {
        "cumsum" => ReduceOp::Sum,
        "cumprod" => ReduceOp::Prod,
        "cummax" => ReduceOp::Max,
        "cummin" => ReduceOp::Min,
        _ => return None,
    })
}

/// `cumsum(x, c)` and its kind: the running fold of `x` along output axis
/// `c`. `None` for other names (see [`crate::front::hooks::Call`]).
pub(crate) fn call(
    cx: &mut Cx,
    k: &Kernel,
    axes: &[(String, VarId)],
    site: CallSite,
) -> Option<Option<Expr>> {
    let op = scan_op(site.name)?;
    Some(scan_call(cx, k, axes, op, site.name, site.args, site.span))
}

/// [`call`] for the scan function `name`.
fn scan_call(
    cx: &mut Cx,
    k: &Kernel,
    axes: &[(String, VarId)],
    op: ReduceOp,
    name: &str,
    args: &[Arg],
    span: Span,
) -> Option<Expr> {
    let example = format!("{name}(X[r, c], c)");
    if cx.reducing() {
        cx.report(
            Diagnostic::new(span, format!("`{name}` is a stage's only reduction"))
                .hint("a scan stage declares no `reduce` and computes one scan; compute the rest in another stage"),
        );
        return None;
    }
    let (mut body, mut axis, mut exclusive) = (None, None, false);
    for (i, a) in args.iter().enumerate() {
        match (i, a.key.as_ref().map(|k| k.0.as_str())) {
            (0, None) => body = Some(a),
            (1, None) => axis = Some(a),
            (_, Some("exclusive")) => match &a.value.kind {
                AstKind::Name(v) if v == "true" || v == "false" => exclusive = v == "true",
                _ => {
                    cx.report(
                        Diagnostic::new(a.value.span, "expected `true` or `false`")
                            .hint(format!("`{name}(X[r, c], c, exclusive=true)`")),
                    );
                    return None;
                }
            },
            _ => {
                cx.report(
                    Diagnostic::new(
                        a.value.span,
                        format!("`{name}` takes a value, an axis and `exclusive=`"),
                    )
                    .hint(format!("`{example}`")),
                );
                return None;
            }
        }
    }
    let (Some(body), Some(axis)) = (body, axis) else {
        cx.report(
            Diagnostic::new(
                span,
                format!("`{name}` needs a value and the axis it runs along"),
            )
            .hint(format!("`{example}`")),
        );
        return None;
    };
    let AstKind::Name(an) = &axis.value.kind else {
        cx.report(Diagnostic::new(
            axis.value.span,
            "expected one of the stage's axes",
        ));
        return None;
    };
    let Some(pos) = axes.iter().position(|(n, _)| n == an) else {
        cx.report(
            Diagnostic::new(
                axis.value.span,
                format!("`{an}` is not an axis of the stage"),
            )
            .hint(format!(
                "a scan runs along one of the output's axes: {}",
                axes.iter()
                    .map(|a| a.0.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        );
        return None;
    };
    // In the value, the axis stands for the running position.
    let var = VarId(axes.len() as u32);
    let inner: Vec<(String, VarId)> = axes
        .iter()
        .map(|(n, v)| (n.clone(), if n == an { var } else { *v }))
        .collect();
    let v = cx.plain_value(k, &inner, &body.value)?;
    if v.dtype == DType::Bool || v.dtype.is_f8() {
        cx.report(
            Diagnostic::new(
                body.value.span,
                format!("`{name}` of `{}` values is not supported", v.dtype),
            )
            .hint("convert them, e.g. `i32(...)` or `f32(...)`"),
        );
        return None;
    }
    // The running position runs to the axis's element, or stops short of it.
    let c = Index::Var(axes[pos].1);
    let running = Axis {
        name: format!("{an}_scan"),
        extent: if exclusive { c } else { c + Index::c(1) },
        span,
    };
    Some(cx.reduce_over(op, v, vec![running]))
}
