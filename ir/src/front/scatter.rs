//! The front end of scatter stages: `H[X[i]] += 1` with `over = { i = "n" }`
//! and `shape = [256]` (the output's shape). See [`crate::kernel::Scatter`].

use super::{span_of, Cx, StageDecl};
use crate::diag::{Diagnostic, Span};
use crate::dtype::DType;
use crate::index::VarId;
use crate::kernel::*;
use crate::schedule::StepKind;
use crate::syntax::{ComputeStmt, ScatterLhs};
use toml::Spanned;

/// Checks a scatter stage and adds it (and its tensor) to `k`.
pub(super) fn stage(
    cx: &mut Cx<'_>,
    k: &mut Kernel,
    names: &mut Vec<(String, Span)>,
    decl: &Spanned<StageDecl>,
    stmt: &ComputeStmt,
    lhs: &ScatterLhs,
) {
    let d = decl.get_ref();
    let op = match lhs.op {
        "+" => ReduceOp::Sum,
        "max" => ReduceOp::Max,
        "|" => ReduceOp::Or,
        "&" => ReduceOp::And,
        _ => ReduceOp::Min,
    };
    if let Some((name, _)) = d.reduce.first() {
        return cx.error(
            Diagnostic::new(span_of(name), "a scatter stage has no reduction axes")
                .hint("its `over` axes are combined already: move them there"),
        );
    }
    if d.over.is_empty() {
        return cx.error(
            Diagnostic::new(lhs.op_span, "a scatter needs the axes it runs over")
                .hint("declare them with their extents: `over = { i = \"n\" }`"),
        );
    }
    let Some(axes) = cx.declared_axes(k, &d.over, "axis", names, &[], &[]) else {
        return;
    };
    let Some(shape_decl) = &d.shape else {
        return cx.error(
            Diagnostic::new(
                stmt.target_span,
                format!("scatter stage `{}` has no `shape`", stmt.target),
            )
            .hint("give the shape of the tensor it fills, e.g. shape = [256]"),
        );
    };
    let Some(shape) = cx.shape(k, shape_decl) else {
        return;
    };
    if shape.len() != lhs.indices.len() {
        return cx.error(
            Diagnostic::new(
                span_of(shape_decl),
                format!(
                    "shape has {} extent(s) but `{}` is indexed with {} subscript(s)",
                    shape.len(),
                    stmt.target,
                    lhs.indices.len()
                ),
            )
            .hint("`shape` is the shape of the scattered-into tensor"),
        );
    }
    let vars: Vec<(String, VarId)> = axes
        .iter()
        .enumerate()
        .map(|(i, a)| (a.name.clone(), VarId(i as u32)))
        .collect();
    let declared = match &d.dtype {
        Some(s) => match cx.dtype(s) {
            Some(t) => Some(t),
            None => return,
        },
        None => None,
    };
    let indices = cx.data_subscripts(k, &vars, &lhs.indices);
    let value = cx.expr(k, &vars, &stmt.value, declared);
    let (Some(indices), Some(value)) = (indices, value) else {
        return;
    };
    let dtype = declared.unwrap_or(value.dtype);
    if value.dtype != dtype {
        return cx.error(
            Diagnostic::new(
                stmt.value.span,
                format!(
                    "the value has dtype `{}` but the stage declares `{dtype}`",
                    value.dtype
                ),
            )
            .hint(format!("convert it with `{dtype}(...)`")),
        );
    }
    if matches!(op, ReduceOp::Or | ReduceOp::And) && !dtype.is_int() {
        return cx.error(
            Diagnostic::new(lhs.op_span, format!("`{}=` needs integers, not `{dtype}`", lhs.op))
                .hint("scatter integer bit masks, e.g. `M[g[i]] |= 1 << (i % 32)` into an i32 or u32 tensor"),
        );
    }
    if dtype == DType::Bool || dtype.is_f8() {
        return cx.error(
            Diagnostic::new(
                lhs.op_span,
                format!("a scatter cannot combine `{dtype}` values"),
            )
            .hint("scatter integers or f16/bf16/f32/f64 floats"),
        );
    }
    let steps = cx.steps(d);
    cx.refuse_steps(
        &steps,
        "a scatter stage",
        "its schedule may split, fuse, reorder, tile, bind and unroll its `over` axes",
        |kind| match kind {
            StepKind::Vectorize(_) => Some("vectorize"),
            StepKind::Mma { .. } => Some("mma"),
            StepKind::ComputeInline => Some("compute_inline"),
            StepKind::ComputeAt { .. } => Some("compute_at"),
            StepKind::Cache { .. } => Some("cache_read/cache_write"),
            _ => None,
        },
    );
    let stage = Stage {
        name: stmt.target.clone(),
        output: TensorId(k.tensors.len() as u32),
        axes,
        kind: StageKind::Scatter(Scatter { op, indices }),
        value,
        schedule: steps,
        span: span_of(decl),
        nest: None,
        default: None,
        absorbed: false,
    };
    cx.push_stage(k, names, stmt, dtype, shape, stage);
}
