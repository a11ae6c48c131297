//! Reductions: `sum`, `max`, `argmax` and the rest, over the stage's
//! reduce axes (rectangular or triangular).

use super::*;
use crate::diag::{Diagnostic, Span};
use crate::dtype::DType;
use crate::index::VarId;
use crate::kernel::*;
use crate::syntax::{Arg, AstKind};

impl<'s> Cx<'s> {
    #[allow(clippy::too_many_arguments)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn reduction(
        &mut self,
        k: &Kernel,
        axes: &[(String, VarId)],
        op: ReduceOp,
        name_span: Span,
        args: &[Arg],
        span: Span,
        hint: Option<DType>,
    ) -> Option<Expr> {
        let name = op.name();
        self.reduction_with(k, axes, op, name, name_span, args, span, hint, &|v| Ok(v))
    }

    /// A reduction `name(body, axes...)` combining `wrap(body)` with `op`
    /// (`wrap` is how `argmax` makes its keys; an `Err` names the type it
    /// cannot take).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn reduction_with(
        &mut self,
        k: &Kernel,
        axes: &[(String, VarId)],
        op: ReduceOp,
        name: &str,
        name_span: Span,
        args: &[Arg],
        span: Span,
        hint: Option<DType>,
        wrap: &dyn Fn(Expr) -> Result<Expr, String>,
    ) -> Option<Expr> {
        let Some(red) = &self.red else {
            self.error(
                Diagnostic::new(
                    name_span,
                    format!(
                        "`{}` needs reduction axes, and the stage declares none",
                        name
                    ),
                )
                .hint("declare them in the stage: `reduce = { k = \"K\" }`"),
            );
            return None;
        };
        if red.inside {
            self.error(
                Diagnostic::new(span, "reductions do not nest")
                    .hint("compute the inner reduction in a stage of its own"),
            );
            return None;
        }
        if red.result.is_some() {
            self.error(
                Diagnostic::new(span, "a stage computes one reduction")
                    .hint("compute the other reduction in a stage of its own"),
            );
            return None;
        }
        let declared: Vec<(String, VarId)> = red.vars.clone();
        let Some((body, over)) = args.split_first() else {
            self.error(
                Diagnostic::new(
                    span,
                    format!("`{}` needs an expression and its reduction axes", name),
                )
                .hint(format!("`{}(A[i, k], k)`", name)),
            );
            return None;
        };
        let mut listed: Vec<&str> = Vec::new();
        for a in over {
            match &a.value.kind {
                AstKind::Name(n)
                    if declared.iter().any(|(r, _)| r == n) && !listed.contains(&n.as_str()) =>
                {
                    listed.push(n)
                }
                _ => {
                    self.error(
                        Diagnostic::new(a.value.span, "expected one of the stage's reduction axes")
                            .hint(format!(
                                "the stage reduces over: {}",
                                declared
                                    .iter()
                                    .map(|a| a.0.as_str())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            )),
                    );
                    return None;
                }
            }
        }
        if listed.len() != declared.len() {
            let missing: Vec<&str> = declared
                .iter()
                .map(|a| a.0.as_str())
                .filter(|n| !listed.contains(n))
                .collect();
            self.error(
                Diagnostic::new(
                    span,
                    format!(
                        "the reduction does not name the axes {}",
                        missing.join(", ")
                    ),
                )
                .hint("list every reduction axis the stage declares"),
            );
            return None;
        }
        let mut all = axes.to_vec();
        all.extend(declared);
        if let Some(r) = &mut self.red {
            r.inside = true;
        }
        let v = self.expr(k, &all, &body.value, hint);
        if let Some(r) = &mut self.red {
            r.inside = false;
        }
        let v = v?;
        if v.dtype.is_f8() {
            return self.f8_refused(&v, body.value.span, &format!("`{}`", name));
        }
        if v.dtype == DType::Bool {
            self.error(
                Diagnostic::new(
                    body.value.span,
                    format!("`{}` does not apply to bool values", name),
                )
                .hint("convert to an integer first, e.g. `i32(...)`"),
            );
            return None;
        }
        if matches!(op, ReduceOp::Or | ReduceOp::And) && !v.dtype.is_int() {
            self.error(
                Diagnostic::new(
                    body.value.span,
                    format!("`{name}` combines integer bits, not `{}` values", v.dtype),
                )
                .hint("convert to an integer first, e.g. `i32(...)`, or use `bitcast`"),
            );
            return None;
        }
        let v = match wrap(v) {
            Ok(v) => v,
            Err(what) => {
                self.error(
                    Diagnostic::new(
                        body.value.span,
                        format!("`{name}` of {what} values is not supported"),
                    )
                    .hint("convert them: f16, bf16 and f32 values, and i8, u8 and i32, are"),
                );
                return None;
            }
        };
        let t = v.dtype;
        if let Some(r) = &mut self.red {
            r.result = Some((op, v));
        }
        Some(Expr {
            kind: ExprKind::Reduced,
            dtype: t,
        })
    }
}
