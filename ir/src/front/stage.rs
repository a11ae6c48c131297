//! One `[[stage]]`: its computed tensor, axes, expression, reduction and
//! schedule steps, checked and added to the kernel.

use super::*;
use crate::diag::{Diagnostic, Span};
use crate::dtype::DType;
use crate::index::{Index, VarId};
use crate::kernel::*;
use crate::schedule::{self, Step};
use crate::syntax::{self, AstKind};
use indexmap::IndexMap;
use toml::Spanned;

/// Named axes and the loop variables they are.
type AxisVars = Vec<(String, VarId)>;

impl<'s> Cx<'s> {
    pub(super) fn stage(
        &mut self,
        k: &mut Kernel,
        names: &mut Vec<(String, Span)>,
        decl: &Spanned<StageDecl>,
    ) {
        let d = decl.get_ref();
        let base = self.content_base(&d.compute);
        let stmt = match syntax::parse_compute(d.compute.get_ref(), base) {
            Ok(s) => s,
            Err(e) => return self.error(e),
        };
        let target = Spanned::new(stmt.target_span.range(), stmt.target.clone());
        if !self.name(&target, "tensor", names) {
            return;
        }
        if let Some(lhs) = &stmt.scatter {
            return scatter::stage(self, k, names, decl, &stmt, lhs);
        }
        if let Some((name, _)) = d.over.first() {
            return self.error(
                Diagnostic::new(span_of(name), "`over` is for scatters only").hint(format!(
                    "combine into the output with `{}[...] += ...`, or drop `over`",
                    stmt.target
                )),
            );
        }
        let Some((axes_names, shape)) = self.stage_axes(k, names, d, &stmt) else {
            return;
        };
        // Reduction axes follow the output axes as variables.
        let taken: Vec<(String, Span)> = names.iter().chain(&stmt.axes).cloned().collect();
        // Their extents may depend on the output axes: `j` in 0..i + 1.
        let outer: Vec<(String, VarId)> = stmt
            .axes
            .iter()
            .enumerate()
            .map(|(i, (n, _))| (n.clone(), VarId(i as u32)))
            .collect();
        let Some(red_axes) =
            self.declared_axes(k, &d.reduce, "reduction axis", &taken, &outer, &shape)
        else {
            return;
        };
        let form = match &stmt.value.kind {
            AstKind::Call { name, .. } => (self.templates.stage)(name),
            _ => None,
        };
        if let Some(form) = form {
            let ax = tuple::Axes {
                vars: axes_names,
                shape,
                reduce: red_axes,
            };
            return form(self, k, names, decl, &stmt, ax);
        }
        let tuple = !stmt.more.is_empty()
            || matches!(&stmt.value.kind, AstKind::Call { name, .. } if name == "reduce");
        if tuple {
            let ax = tuple::Axes {
                vars: axes_names,
                shape,
                reduce: red_axes,
            };
            return tuple::stage(self, k, names, decl, &stmt, ax);
        }
        if let Some((key, _)) = d.init.first().or(d.combine.first()) {
            return self.error(
                Diagnostic::new(span_of(key), "`init` and `combine` belong to tuple reductions")
                    .hint(format!(
                        "write the stage as `{}[...] = reduce(...)` with one element per tensor, or drop them",
                        stmt.target
                    )),
            );
        }
        let declared = match &d.dtype {
            Some(s) => match self.dtype(s) {
                Some(t) => Some((t, span_of(s))),
                None => return,
            },
            None => None,
        };
        let Some((value, reduce)) = self.stage_value(k, &stmt, &axes_names, red_axes, declared)
        else {
            return;
        };
        let Some(dtype) = self.stage_dtype(&stmt, &value, declared) else {
            return;
        };
        let output = TensorId(k.tensors.len() as u32);
        let axes = output_axes(&stmt, &shape);
        let steps = self.steps(d);
        let stage = Stage {
            name: stmt.target.clone(),
            output,
            axes,
            kind: StageKind::of(reduce),
            value,
            schedule: steps,
            span: span_of(decl),
            nest: None,
            default: None,
            absorbed: false,
        };
        self.push_stage(k, names, &stmt, dtype, shape, stage);
    }

    /// A stage's output axes (plain, distinct names that shadow nothing
    /// else) and its shape, one extent per axis.
    fn stage_axes(
        &mut self,
        k: &mut Kernel,
        names: &[(String, Span)],
        d: &StageDecl,
        stmt: &syntax::ComputeStmt,
    ) -> Option<(AxisVars, Vec<Index>)> {
        let mut axes_names: Vec<(String, VarId)> = Vec::new();
        for (i, (a, sp)) in stmt.axes.iter().enumerate() {
            let taken: Vec<(String, Span)> = names
                .iter()
                .cloned()
                .chain(stmt.axes[..i].iter().cloned())
                .collect();
            if !self.name(&Spanned::new(sp.range(), a.clone()), "axis", &taken) {
                return None;
            }
            axes_names.push((a.clone(), VarId(i as u32)));
        }
        let Some(shape_decl) = &d.shape else {
            return self.fail(
                Diagnostic::new(
                    stmt.target_span,
                    format!("stage `{}` has no `shape`", stmt.target),
                )
                .hint(format!(
                    "give the extent of each axis, e.g. shape = [{}]",
                    stmt.axes
                        .iter()
                        .map(|_| "\"n\"")
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            );
        };
        let shape = self.shape(k, shape_decl)?;
        if shape.len() != stmt.axes.len() {
            return self.fail(
                Diagnostic::new(
                    span_of(shape_decl),
                    format!(
                        "shape has {} extent(s) but `{}` has {} axis(es)",
                        shape.len(),
                        stmt.target,
                        stmt.axes.len()
                    ),
                )
                .hint("give one extent per axis on the left of `=`"),
            );
        }
        Some((axes_names, shape))
    }

    /// The stage's value and reduction, its reduction axes numbered after
    /// the output axes.
    fn stage_value(
        &mut self,
        k: &mut Kernel,
        stmt: &syntax::ComputeStmt,
        axes_names: &[(String, VarId)],
        red_axes: Vec<Axis>,
        declared: Option<(DType, Span)>,
    ) -> Option<(Expr, Option<Reduction>)> {
        self.red = (!red_axes.is_empty()).then(|| RedCx {
            vars: red_axes
                .iter()
                .enumerate()
                .map(|(j, a)| (a.name.clone(), VarId((stmt.axes.len() + j) as u32)))
                .collect(),
            result: None,
            inside: false,
            axes: None,
        });
        let value = self.expr(k, axes_names, &stmt.value, declared.map(|d| d.0));
        let red = self.red.take();
        let value = value?;
        let reduce = match red {
            Some(RedCx {
                result: Some((op, body)),
                axes,
                ..
            }) => Some(Reduction {
                axes: axes.unwrap_or(red_axes),
                body,
                kind: ReduceKind::Op(op),
            }),
            Some(_) => {
                return self.fail(
                    Diagnostic::new(
                        stmt.value.span,
                        "the stage declares reduction axes but computes no reduction",
                    )
                    .hint(format!(
                        "reduce over them: `{}[...] = sum(..., {})`",
                        stmt.target,
                        red_axes
                            .iter()
                            .map(|a| a.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )),
                )
            }
            None => None,
        };
        Some((value, reduce))
    }

    /// The stage's dtype: the value's, which must be the one declared.
    fn stage_dtype(
        &mut self,
        stmt: &syntax::ComputeStmt,
        value: &Expr,
        declared: Option<(DType, Span)>,
    ) -> Option<DType> {
        Some(match declared {
            Some((t, sp)) if t != value.dtype => {
                return self.fail(
                    Diagnostic::new(
                        stmt.value.span,
                        format!(
                            "the expression has dtype `{}` but the stage declares `{t}`",
                            value.dtype
                        ),
                    )
                    .label(format!("this is `{}`", value.dtype))
                    .hint(format!(
                        "convert it with `{t}(...)`, or change the dtype at line {}",
                        crate::diag::line_col(self.src, sp.start).0
                    )),
                );
            }
            Some((t, _)) => t,
            None => value.dtype,
        })
    }

    /// Reports `d` and gives up on what was being checked.
    fn fail<T>(&mut self, d: Diagnostic) -> Option<T> {
        self.error(d);
        None
    }

    /// Adds a checked stage and its tensor (`stage.output`, the next id)
    /// to `k`. Applying the schedule here reports its errors with the
    /// kernel's other errors, and lowering reuses the result; a stage
    /// computed at another's loop has the extents of the part computed
    /// there, known only when lowering.
    pub(crate) fn push_stage(
        &mut self,
        k: &mut Kernel,
        names: &mut Vec<(String, Span)>,
        stmt: &syntax::ComputeStmt,
        dtype: DType,
        shape: Vec<Index>,
        mut stage: Stage,
    ) {
        // A reduction written as a template's definition is that template,
        // so the template's rule and steps apply to it.
        (self.templates.recognise)(k, &mut stage);
        names.push((stmt.target.clone(), stmt.target_span));
        let kind = TensorKind::Stage(StageId(k.stages.len() as u32));
        k.tensors.push(Tensor {
            name: stmt.target.clone(),
            dtype,
            shape: shape.clone(),
            kind,
            span: stmt.target_span,
        });
        // A tuple reduction's other tensors follow its first.
        let more_types: Vec<DType> = match (stage.tuple(), stage.topk()) {
            (Some(t), _) => t.elems[1..].iter().map(|e| e.dtype).collect(),
            (None, Some(t)) => t.epilogues[1..].iter().map(|e| e.dtype).collect(),
            // An attention's log-sum-exp, one per query row.
            (None, None) if stage.attention().is_some() => vec![DType::F32],
            (None, None) => Vec::new(),
        };
        for (((name, span), dt), rank) in stmt.more.iter().zip(more_types).zip(&stmt.more_rank) {
            names.push((name.clone(), *span));
            k.tensors.push(Tensor {
                name: name.clone(),
                dtype: dt,
                shape: shape[..*rank].to_vec(),
                kind,
                span: *span,
            });
        }
        if stage.compute_at().is_none() {
            // A stage some earlier stage is computed at keeps its axes:
            // that stage's `compute_at` names them.
            let host = k
                .stages
                .iter()
                .any(|s| s.compute_at().is_some_and(|(c, _, _)| c.name == stage.name));
            // A top-k or an attention has no loops to keep: its lowering
            // refuses the host.
            let loops = host && stage.topk().is_none() && stage.attention().is_none();
            if self.defaults > 0 && stage.schedule.is_empty() && !loops {
                self.default_schedule(k, &mut stage);
            }
            if stage.nest.is_none() {
                match schedule::apply_with_source(k, &stage, self.src) {
                    Ok(nest) => stage.nest = Some(nest),
                    Err(e) => self.error(e),
                }
            }
        }
        k.stages.push(stage);
    }

    /// Axes declared with their extents (`reduce = { k = "K" }`, `over`):
    /// distinct names that take none of `taken`.
    /// Their extents may use the axes `outer` (with extents `outer_ext`):
    /// a triangular reduction, never negative.
    pub(super) fn declared_axes(
        &mut self,
        k: &Kernel,
        decl: &IndexMap<Spanned<String>, Spanned<Extent>>,
        what: &str,
        taken: &[(String, Span)],
        outer: &[(String, VarId)],
        outer_ext: &[Index],
    ) -> Option<Vec<Axis>> {
        let mut axes: Vec<Axis> = Vec::new();
        for (name, ext) in decl {
            let taken: Vec<(String, Span)> = taken
                .iter()
                .cloned()
                .chain(axes.iter().map(|a| (a.name.clone(), a.span)))
                .collect();
            if !self.name(name, what, &taken) {
                return None;
            }
            if let Extent::Expr(text) = ext.get_ref() {
                let sibling = text
                    .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .find(|w| axes.iter().any(|a| a.name == *w));
                if let Some(w) = sibling {
                    self.error(
                        Diagnostic::new(
                            span_of(ext),
                            format!(
                                "`{w}` is another {what} of this stage: an extent may use sizes, \
                                 constants and the output's axes, not another {what}"
                            ),
                        )
                        .hint(format!(
                            "bound `{}` by a size and mask the extra points inside the expression \
                             (`select(...)`), or make `{w}` an axis of the output",
                            name.get_ref()
                        )),
                    );
                    return None;
                }
            }
            let extent = match (ext.get_ref(), outer.is_empty()) {
                (Extent::Expr(text), false) => {
                    self.dependent_extent(k, ext, text, outer, outer_ext)?
                }
                _ => self.extent(k, ext)?,
            };
            axes.push(Axis {
                name: name.get_ref().clone(),
                extent,
                span: span_of(name),
            });
        }
        Some(axes)
    }

    /// An extent that may use the axes `outer`: parsed over them, and
    /// refused where some point of theirs could make it negative.
    pub(super) fn dependent_extent(
        &mut self,
        k: &Kernel,
        e: &Spanned<Extent>,
        text: &str,
        outer: &[(String, VarId)],
        outer_ext: &[Index],
    ) -> Option<Index> {
        let base = self.content_base(&Spanned::new(e.span(), text.to_string()));
        let ast = match syntax::parse_expr(text, base) {
            Ok(a) => a,
            Err(d) => {
                self.error(d);
                return None;
            }
        };
        let ix = self.index(
            k,
            outer,
            &ast,
            "an extent is an integer expression of sizes, constants and the output's axes",
        )?;
        if !ix.has_vars() {
            return self.extent(k, e);
        }
        let size_max: Vec<u64> = k.sizes.iter().map(|s| s.max).collect();
        let var_max: Vec<u64> = outer_ext
            .iter()
            .map(|x| {
                x.max_value(&size_max, &[])
                    .saturating_sub(1)
                    .min(u64::MAX as u128) as u64
            })
            .collect();
        if ix.range(&size_max, &var_max).0 < 0 {
            self.error(
                Diagnostic::new(span_of(e), format!("the extent `{text}` may be negative"))
                    .hint(format!("clamp it: `max({text}, 0)`")),
            );
            return None;
        }
        Some(ix)
    }

    /// The stage's schedule steps, parsed with the tune configuration.
    /// Reports each step that a kind of stage (`what`, as "a scatter
    /// stage") cannot take: `refused` names the step, `hint` says what it may.
    pub(super) fn refuse_steps(
        &mut self,
        steps: &[Step],
        what: &str,
        hint: &str,
        refused: impl Fn(&schedule::StepKind) -> Option<&'static str>,
    ) {
        for s in steps {
            if let Some(step) = refused(&s.kind) {
                self.error(
                    Diagnostic::new(s.span, format!("{what} cannot take `{step}`")).hint(hint),
                );
            }
        }
    }

    pub(crate) fn steps(&mut self, d: &StageDecl) -> Vec<Step> {
        let mut steps: Vec<Step> = Vec::new();
        for s in &d.schedule {
            let base = self.content_base(s);
            match syntax::parse_step(s.get_ref(), base)
                .and_then(|mut st| {
                    crate::tune::substitute(&mut st, &self.config)?;
                    Ok(st)
                })
                .and_then(|st| schedule::Step::from_syntax(&st))
            {
                Ok(step) => steps.push(step),
                Err(e) => self.error(e),
            }
        }
        steps
    }
}
