//! Function calls: math, casts, `select`, `inf`/`nan`/`bitcast` and the
//! reductions' entry points; constants rounded to their dtype.

use super::*;
use crate::diag::{Diagnostic, Span};
use crate::dtype::DType;
use crate::index::VarId;
use crate::kernel::*;
use crate::syntax::Arg;

impl<'s> Cx<'s> {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn call(
        &mut self,
        k: &Kernel,
        axes: &[(String, VarId)],
        name: &str,
        name_span: Span,
        args: &[Arg],
        span: Span,
        hint: Option<DType>,
    ) -> Option<Expr> {
        let site = super::hooks::CallSite {
            name,
            name_span,
            args,
            span,
        };
        if let Some(v) = (self.templates.call)(self, k, axes, site) {
            return v;
        }
        if let Some(a) = args.iter().find_map(|a| a.key.as_ref()) {
            self.error(Diagnostic::new(
                a.1,
                format!("`{name}` takes no named arguments"),
            ));
            return None;
        }
        let want = |cx: &mut Self, n: usize| cx.arity(name, args, n, span);
        if let Some(t) = DType::parse(name) {
            return self.cast_call(k, axes, (name, t), args, span);
        }
        if let Some(op) = ReduceOp::ALL.into_iter().find(|r| r.name() == name) {
            return self.reduction(k, axes, op, name_span, args, span, hint);
        }
        if let Some(r) = self.bit_function(k, axes, name, name_span, args, span) {
            return r;
        }
        match name {
            "select" => self.select_call(k, axes, args, span, hint),
            "min" | "max" => {
                if !want(self, 2) {
                    return None;
                }
                let (a, b) = self.operands(k, axes, &args[0].value, &args[1].value, hint)?;
                self.binary(
                    if name == "min" {
                        BinOp::Min
                    } else {
                        BinOp::Max
                    },
                    a,
                    b,
                    span,
                )
            }
            _ => self.math_call(k, axes, name, name_span, args, span, hint),
        }
    }

    /// Whether `name` got `n` arguments; reported when not.
    fn arity(&mut self, name: &str, args: &[Arg], n: usize, span: Span) -> bool {
        if args.len() != n {
            self.error(Diagnostic::new(
                span,
                format!("`{name}` takes {n} argument(s), {} given", args.len()),
            ));
            false
        } else {
            true
        }
    }

    /// `t(x)`: a conversion (none to an 8-bit float from another type).
    fn cast_call(
        &mut self,
        k: &Kernel,
        axes: &[(String, VarId)],
        (name, t): (&str, DType),
        args: &[Arg],
        span: Span,
    ) -> Option<Expr> {
        if !self.arity(name, args, 1, span) {
            return None;
        }
        let a = self.expr(k, axes, &args[0].value, Some(t))?;
        if t.is_f8() && a.dtype != t {
            self.error(
                Diagnostic::new(span, format!("conversion to `{t}` is not supported"))
                    .label("8-bit floats are storage types for matrix-instruction inputs")
                    .hint(format!(
                        "give the kernel `{t}` inputs and convert them to a wider type"
                    )),
            );
            return None;
        }
        Some(if a.dtype == t {
            a
        } else {
            Expr {
                kind: ExprKind::Cast(Box::new(a)),
                dtype: t,
            }
        })
    }

    /// `select(c, a, b)`: `c` bool, `a` and `b` of one dtype.
    fn select_call(
        &mut self,
        k: &Kernel,
        axes: &[(String, VarId)],
        args: &[Arg],
        span: Span,
        hint: Option<DType>,
    ) -> Option<Expr> {
        if !self.arity("select", args, 3, span) {
            return None;
        }
        let c = self.expr(k, axes, &args[0].value, None)?;
        if c.dtype != DType::Bool {
            self.error(
                Diagnostic::new(
                    args[0].value.span,
                    format!("the condition of `select` must be bool, not `{}`", c.dtype),
                )
                .hint("compare, e.g. `x > 0`"),
            );
            return None;
        }
        let (a, b) = self.operands(k, axes, &args[1].value, &args[2].value, hint)?;
        if a.dtype != b.dtype {
            self.error(Diagnostic::new(
                span,
                format!("`select` branches differ: `{}` and `{}`", a.dtype, b.dtype),
            ));
            return None;
        }
        let t = a.dtype;
        Some(Expr {
            kind: ExprKind::Select(Box::new(c), Box::new(a), Box::new(b)),
            dtype: t,
        })
    }

    /// A math function of float arguments of one dtype (some take integers).
    #[allow(clippy::too_many_arguments)]
    fn math_call(
        &mut self,
        k: &Kernel,
        axes: &[(String, VarId)],
        name: &str,
        name_span: Span,
        args: &[Arg],
        span: Span,
        hint: Option<DType>,
    ) -> Option<Expr> {
        let Some(f) = MathFn::ALL.into_iter().find(|f| f.name() == name) else {
            let cands: Vec<&str> = MathFn::ALL
                .iter()
                .map(|f| f.name())
                .chain([
                    "select", "min", "max", "isnan", "isinf", "bitcast", "argmax", "argmin",
                    "reduce",
                ])
                .chain((self.templates.names)())
                .chain(ReduceOp::ALL.iter().map(|r| r.name()))
                .chain(DType::ALL.iter().map(|d| d.name()))
                .collect();
            self.error(
                Diagnostic::new(name_span, format!("unknown function `{name}`"))
                    .suggest(name, cands),
            );
            return None;
        };
        if !self.arity(name, args, f.arity(), span) {
            return None;
        }
        let mut xs = Vec::new();
        let mut t = hint.filter(|t| t.is_float());
        for a in args {
            let x = self.expr(k, axes, &a.value, t)?;
            t = Some(x.dtype);
            xs.push(x);
        }
        let t = xs[0].dtype;
        if t.is_f8() {
            return self.f8_refused(&xs[0], span, &format!("`{name}`"));
        }
        if xs.iter().any(|x| x.dtype != t) {
            self.error(Diagnostic::new(
                span,
                format!("arguments of `{name}` must have one dtype"),
            ));
            return None;
        }
        if !(t.is_float() || (f.accepts_int() && t.is_int())) {
            self.error(
                Diagnostic::new(span, format!("`{name}` needs a float argument, not `{t}`"))
                    .hint(format!("convert it, e.g. `{name}(f32(...))`")),
            );
            return None;
        }
        Some(Expr {
            kind: ExprKind::Call(f, xs),
            dtype: t,
        })
    }
}
