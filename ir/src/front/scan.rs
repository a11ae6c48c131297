//! Scans: `Y[r, c] = cumsum(X[r, c], c)` (also `cumprod`, `cummax`,
//! `cummin`, and `exclusive=true`). The front end writes a scan as the
//! triangular reduction that defines it — `sum(X[r, c'], c')` over
//! `c' < c + 1` (`c' < c` exclusive) — marked with [`Scan`], so the
//! interpreter, every schedule and every back end already give it its
//! meaning; the `scan` schedule step (the default) lowers it in linear work.

use super::{Cx, RedCx};
use crate::diag::{Diagnostic, Span};
use crate::dtype::DType;
use crate::index::{Index, VarId};
use crate::kernel::*;
use crate::syntax::{Arg, AstKind};

/// A scan being parsed: its axis, its reduction variable's name and
/// whether it is exclusive.
pub(super) struct ScanCx {
    pub axis: usize,
    pub var: String,
    pub exclusive: bool,
    pub span: Span,
}

/// The reduction a scan function names.
pub(super) fn scan_op(name: &str) -> Option<ReduceOp> {
    Some(match name {
        "cumsum" => ReduceOp::Sum,
        "cumprod" => ReduceOp::Prod,
        "cummax" => ReduceOp::Max,
        "cummin" => ReduceOp::Min,
        _ => return None,
    })
}

impl Cx<'_> {
    /// `cumsum(x, c)` and its kind: the running fold of `x` along output
    /// axis `c`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn scan_call(
        &mut self,
        k: &Kernel,
        axes: &[(String, VarId)],
        op: ReduceOp,
        name: &str,
        args: &[Arg],
        span: Span,
    ) -> Option<Expr> {
        let example = format!("{name}(X[r, c], c)");
        if self.red.is_some() || self.scan.is_some() {
            self.error(
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
                        self.error(
                            Diagnostic::new(a.value.span, "expected `true` or `false`")
                                .hint(format!("`{name}(X[r, c], c, exclusive=true)`")),
                        );
                        return None;
                    }
                },
                _ => {
                    self.error(
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
            self.error(
                Diagnostic::new(
                    span,
                    format!("`{name}` needs a value and the axis it runs along"),
                )
                .hint(format!("`{example}`")),
            );
            return None;
        };
        let AstKind::Name(an) = &axis.value.kind else {
            self.error(Diagnostic::new(
                axis.value.span,
                "expected one of the stage's axes",
            ));
            return None;
        };
        let Some(pos) = axes.iter().position(|(n, _)| n == an) else {
            self.error(
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
        self.red = Some(RedCx {
            vars: Vec::new(),
            result: None,
            inside: true,
        });
        let v = self.expr(k, &inner, &body.value, None);
        self.red = None;
        let v = v?;
        if v.dtype == DType::Bool || v.dtype.is_f8() {
            self.error(
                Diagnostic::new(
                    body.value.span,
                    format!("`{name}` of `{}` values is not supported", v.dtype),
                )
                .hint("convert them, e.g. `i32(...)` or `f32(...)`"),
            );
            return None;
        }
        let t = v.dtype;
        self.red = Some(RedCx {
            vars: Vec::new(),
            result: Some((op, v)),
            inside: false,
        });
        self.scan = Some(ScanCx {
            axis: pos,
            var: format!("{an}_scan"),
            exclusive,
            span,
        });
        Some(Expr {
            kind: ExprKind::Reduced,
            dtype: t,
        })
    }

    /// The reduction axis of the scan just parsed.
    pub(super) fn scan_axis(&self, scan: &ScanCx) -> Axis {
        let c = Index::Var(VarId(scan.axis as u32));
        Axis {
            name: scan.var.clone(),
            extent: if scan.exclusive { c } else { c + Index::c(1) },
            span: scan.span,
        }
    }
}
