//! Expressions: names, loads (affine and gathered), operators, with the
//! dtype rules and the errors that point at the text.

use super::*;
use crate::diag::{Diagnostic, Span};
use crate::dtype::DType;
use crate::index::{Index, SizeId, VarId};
use crate::kernel::*;
use crate::syntax::{Ast, AstKind, BinaryOp, UnaryOp as AUnary};

impl<'s> Cx<'s> {
    /// Typed conversion of a value expression. `hint` gives untyped
    /// literals a dtype from their context.
    pub(crate) fn expr(
        &mut self,
        k: &Kernel,
        axes: &[(String, VarId)],
        ast: &Ast,
        hint: Option<DType>,
    ) -> Option<Expr> {
        let e = |kind, dtype| Some(Expr { kind, dtype });
        match &ast.kind {
            AstKind::Int(v) => match hint {
                Some(t) if t.is_float() => e(ExprKind::Float(*v as f64), t),
                Some(DType::Bool) | None => e(ExprKind::Int(*v), DType::I32),
                Some(t) => e(ExprKind::Int(*v), t),
            },
            AstKind::Float(v) => match hint {
                Some(t) if t.is_float() => e(ExprKind::Float(round_to(*v, t)), t),
                None => e(ExprKind::Float(round_to(*v, DType::F32)), DType::F32),
                Some(t) => {
                    self.error(
                        Diagnostic::new(
                            ast.span,
                            format!("float constant where an integer (`{t}`) is expected"),
                        )
                        .hint("write an integer, or convert the other side to a float type"),
                    );
                    None
                }
            },
            AstKind::Name(n) => self.name_expr(k, axes, n, ast.span, hint),
            AstKind::Access {
                name,
                name_span,
                indices,
            } => self.access(k, axes, name, *name_span, indices, ast.span),
            AstKind::Unary(op, a) => {
                let a = self.expr(k, axes, a, hint)?;
                if a.dtype.is_f8() {
                    return self.f8_refused(&a, ast.span, "this operator");
                }
                match op {
                    AUnary::Neg if a.dtype != DType::Bool => {
                        e(ExprKind::Unary(UnaryOp::Neg, Box::new(a.clone())), a.dtype)
                    }
                    AUnary::Not if a.dtype == DType::Bool => {
                        e(ExprKind::Unary(UnaryOp::Not, Box::new(a)), DType::Bool)
                    }
                    _ => {
                        self.error(Diagnostic::new(
                            ast.span,
                            format!("this operator does not apply to `{}`", a.dtype),
                        ));
                        None
                    }
                }
            }
            AstKind::Binary(op, a, b) => {
                let bop = match op {
                    BinaryOp::Add => BinOp::Add,
                    BinaryOp::Sub => BinOp::Sub,
                    BinaryOp::Mul => BinOp::Mul,
                    BinaryOp::Div => BinOp::Div,
                    BinaryOp::Rem => BinOp::Rem,
                    BinaryOp::Eq => BinOp::Eq,
                    BinaryOp::Ne => BinOp::Ne,
                    BinaryOp::Lt => BinOp::Lt,
                    BinaryOp::Le => BinOp::Le,
                    BinaryOp::Gt => BinOp::Gt,
                    BinaryOp::Ge => BinOp::Ge,
                    BinaryOp::And => BinOp::And,
                    BinaryOp::Or => BinOp::Or,
                    BinaryOp::BitAnd => BinOp::BitAnd,
                    BinaryOp::BitOr => BinOp::BitOr,
                    BinaryOp::BitXor => BinOp::BitXor,
                    BinaryOp::Shl => BinOp::Shl,
                    BinaryOp::Shr => BinOp::Shr,
                };
                let operand_hint =
                    if op.is_comparison() || matches!(op, BinaryOp::And | BinaryOp::Or) {
                        None
                    } else {
                        hint
                    };
                let (a, b) = self.operands(k, axes, a, b, operand_hint)?;
                self.binary(bop, a, b, ast.span)
            }
            AstKind::Call {
                name,
                name_span,
                args,
            } => self.call(k, axes, name, *name_span, args, ast.span, hint),
        }
    }

    /// A name: an axis, size or parameter; a tensor without indices or
    /// an unknown name are refused.
    fn name_expr(
        &mut self,
        k: &Kernel,
        axes: &[(String, VarId)],
        n: &str,
        span: Span,
        hint: Option<DType>,
    ) -> Option<Expr> {
        let e = |kind, dtype| Some(Expr { kind, dtype });
        if let Some((_, v)) = axes.iter().find(|(x, _)| x == n) {
            return e(ExprKind::Index(Index::Var(*v)), DType::I32);
        }
        if let Some(i) = k.sizes.iter().position(|s| s.name == n) {
            return e(ExprKind::Index(Index::Size(SizeId(i as u32))), DType::I32);
        }
        if let Some(i) = k.params.iter().position(|p| p.name == n) {
            return e(ExprKind::Param(ParamId(i as u32)), k.params[i].dtype);
        }
        if let Some(t) = k.tensors.iter().find(|t| t.name == n) {
            let idx = vec!["_"; t.shape.len()].join(", ");
            self.error(
                Diagnostic::new(span, format!("tensor `{n}` is used without indices"))
                    .hint(format!("index it: `{n}[{idx}]`")),
            );
            return None;
        }
        if self.poisoned.iter().any(|p| p == n) {
            return None;
        }
        if let Some(x) = self.operand(n) {
            return Some(x);
        }
        if let Some(lit) = self.float_literal(n, span, hint) {
            return lit;
        }
        let cands = axes
            .iter()
            .map(|(n, _)| n.as_str())
            .chain(k.sizes.iter().map(|s| s.name.as_str()))
            .chain(k.params.iter().map(|p| p.name.as_str()))
            .chain(k.tensors.iter().map(|t| t.name.as_str()));
        let d = Diagnostic::new(span, format!("unknown name `{n}`")).suggest(n, cands);
        let d = self.outside_its_reduction(n, d);
        self.error(d);
        None
    }

    /// `d` with a hint where `n` is a reduction axis of the stage named
    /// outside its reduction (`max(X[r, c], c)` for `reduce_max(X[r, c], c)`);
    /// its other uses are then not reported again.
    pub(super) fn outside_its_reduction(&mut self, n: &str, d: Diagnostic) -> Diagnostic {
        match &self.red {
            Some(r) if !r.inside && r.vars.iter().any(|(v, _)| v == n) => {
                self.poisoned.push(n.to_string());
                d.hint(format!(
                "`{n}` is a reduction axis of this stage: it is known only inside its reduction, \
                 `sum(..., {n})`, `prod`, `reduce_max` or `reduce_min` (`max(a, b)` and `min(a, b)` \
                 take two values)"
                ))
            }
            _ => d,
        }
    }

    /// `T[...]`: a load, or a gather where a subscript reads a tensor.
    fn access(
        &mut self,
        k: &Kernel,
        axes: &[(String, VarId)],
        name: &str,
        name_span: Span,
        indices: &[Ast],
        span: Span,
    ) -> Option<Expr> {
        let e = |kind, dtype| Some(Expr { kind, dtype });
        let Some(ti) = k.tensors.iter().position(|t| t.name == name) else {
            if self.poisoned.iter().any(|p| p == name) {
                return None;
            }
            let scalar =
                k.params.iter().any(|p| p.name == name) || k.sizes.iter().any(|s| s.name == name);
            let d = if scalar {
                Diagnostic::new(
                    span,
                    format!("`{name}` is a scalar, not a tensor, and takes no indices"),
                )
                .hint(format!("write `{name}` without `[...]`"))
            } else {
                let cands: Vec<&str> = k.tensors.iter().map(|t| t.name.as_str()).collect();
                Diagnostic::new(name_span, format!("unknown tensor `{name}`")).suggest(name, cands)
            };
            self.error(d);
            return None;
        };
        let t = &k.tensors[ti];
        if indices.len() != t.shape.len() {
            self.error(
                Diagnostic::new(
                    span,
                    format!(
                        "`{name}` has {} dimension(s) but is indexed with {}",
                        t.shape.len(),
                        indices.len()
                    ),
                )
                .hint(format!(
                    "`{name}` is declared with shape [{}]",
                    t.shape
                        .iter()
                        .map(|s| s.display(&k.size_names(), &[]).to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            );
            return None;
        }
        if indices.iter().any(reads_tensor) {
            return self.gather(k, axes, ti, indices, span);
        }
        let mut ix = Vec::new();
        for i in indices {
            ix.push(self.index(
                k,
                axes,
                i,
                "a subscript is an integer expression of axes, sizes, constants and integer tensor elements",
            ));
        }
        let indices: Option<Vec<Index>> = ix.into_iter().collect();
        e(
            ExprKind::Load {
                tensor: TensorId(ti as u32),
                indices: indices?,
            },
            t.dtype,
        )
    }

    /// `T[..]` whose subscripts read tensors: a gather. Subscripts that are
    /// affine stay index expressions; the others are `i32` values (integer
    /// elements of other types are converted, as by `i32(...)`) clamped
    /// into their dimension.
    pub(super) fn gather(
        &mut self,
        k: &Kernel,
        axes: &[(String, VarId)],
        ti: usize,
        indices: &[Ast],
        span: Span,
    ) -> Option<Expr> {
        let t = &k.tensors[ti];
        if let TensorKind::Stage(p) = t.kind {
            let ps = k.stages.get(p.0 as usize)?;
            if ps.is_internal() {
                self.error(
                    Diagnostic::new(
                        span,
                        format!(
                            "`{}` is read at data-dependent subscripts, so it must be in memory, but its schedule computes it inside another stage",
                            t.name
                        ),
                    )
                    .hint(format!(
                        "remove `compute_inline()`/`compute_at(...)` from the schedule of `{}`",
                        ps.name
                    )),
                );
                return None;
            }
        }
        let indices = self.data_subscripts(k, axes, indices);
        Some(Expr {
            kind: ExprKind::Gather {
                tensor: TensorId(ti as u32),
                indices: indices?,
            },
            dtype: t.dtype,
        })
    }

    /// Subscripts of a gather or scatter: affine ones as index expressions,
    /// those that read tensors as `i32` values (other integer types
    /// converted, as by `i32(...)`).
    pub(crate) fn data_subscripts(
        &mut self,
        k: &Kernel,
        axes: &[(String, VarId)],
        indices: &[Ast],
    ) -> Option<Vec<Expr>> {
        let mut subs = Vec::new();
        for i in indices {
            if !reads_tensor(i) {
                let ix = self.index(
                    k,
                    axes,
                    i,
                    "a subscript is an integer expression of axes, sizes, constants and integer tensor elements",
                );
                subs.push(ix.map(|ix| Expr {
                    kind: ExprKind::Index(ix),
                    dtype: DType::I32,
                }));
                continue;
            }
            let Some(v) = self.expr(k, axes, i, Some(DType::I32)) else {
                subs.push(None);
                continue;
            };
            if v.dtype == DType::I32 {
                subs.push(Some(v));
            } else if v.dtype.is_float() || v.dtype == DType::Bool {
                self.error(
                    Diagnostic::new(
                        i.span,
                        format!("a subscript must be an integer, but this is `{}`", v.dtype),
                    )
                    .hint("convert it: `i32(...)`"),
                );
                subs.push(None);
            } else {
                subs.push(Some(Expr {
                    kind: ExprKind::Cast(Box::new(v)),
                    dtype: DType::I32,
                }));
            }
        }
        subs.into_iter().collect()
    }

    /// Converts two operands so that an untyped literal takes the other side's type.
    pub(super) fn operands(
        &mut self,
        k: &Kernel,
        axes: &[(String, VarId)],
        a: &Ast,
        b: &Ast,
        hint: Option<DType>,
    ) -> Option<(Expr, Expr)> {
        let lit = |x: &Ast| matches!(x.kind, AstKind::Int(_) | AstKind::Float(_));
        if lit(a) && !lit(b) {
            let b = self.expr(k, axes, b, hint)?;
            let a = self.expr(k, axes, a, Some(b.dtype))?;
            Some((a, b))
        } else {
            let a = self.expr(k, axes, a, hint);
            let b = self.expr(k, axes, b, a.as_ref().map(|a| a.dtype).or(hint));
            Some((a?, b?))
        }
    }

    /// Refuses `what` on an 8-bit float value: those are storage types.
    pub(super) fn f8_refused(&mut self, a: &Expr, span: Span, what: &str) -> Option<Expr> {
        self.error(
            Diagnostic::new(
                span,
                format!("{what} does not apply to `{}` values", a.dtype),
            )
            .label("8-bit floats are storage types: load, move, store or convert them")
            .hint("convert to a wider type first, e.g. `f32(A[i, k])`"),
        );
        None
    }

    pub(super) fn binary(&mut self, op: BinOp, a: Expr, b: Expr, span: Span) -> Option<Expr> {
        if a.dtype != b.dtype {
            self.error(
                Diagnostic::new(
                    span,
                    format!("dtype mismatch: `{}` and `{}`", a.dtype, b.dtype),
                )
                .label("operands of one operation must have the same dtype")
                .hint(format!(
                    "convert one side, e.g. `{}(...)`",
                    if a.dtype.is_float() { a.dtype } else { b.dtype }
                )),
            );
            return None;
        }
        let t = a.dtype;
        if t.is_f8() {
            return self.f8_refused(&a, span, "arithmetic or comparison");
        }
        let ok = match op {
            BinOp::And | BinOp::Or => t == DType::Bool,
            BinOp::Eq | BinOp::Ne => true,
            BinOp::Rem => t.is_int(),
            BinOp::BitAnd | BinOp::BitOr | BinOp::BitXor | BinOp::Shl | BinOp::Shr => t.is_int(),
            _ => t != DType::Bool,
        };
        if !ok {
            let what = match op {
                BinOp::Rem => "`%` needs integer operands".to_string(),
                BinOp::And | BinOp::Or => format!("`&&` and `||` need bool operands, not `{t}`"),
                BinOp::BitAnd | BinOp::BitOr | BinOp::BitXor | BinOp::Shl | BinOp::Shr => {
                    format!("`&`, `|`, `^`, `<<` and `>>` need integer operands, not `{t}`")
                }
                _ => format!("arithmetic does not apply to `{t}` values"),
            };
            let mut d = Diagnostic::new(span, what);
            if op == BinOp::Rem && t.is_float() {
                d = d.hint("for a float remainder write `x - floor(x / y) * y`");
            }
            self.error(d);
            return None;
        }
        let dtype = if op.is_comparison() { DType::Bool } else { t };
        Some(Expr {
            kind: ExprKind::Binary(op, Box::new(a), Box::new(b)),
            dtype,
        })
    }
}
