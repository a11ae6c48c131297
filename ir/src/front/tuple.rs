//! The front end of tuple reductions: `M[r], S[r] = reduce(X[r, c], 1.0)`
//! with `reduce = { c = "cols" }` and `init`/`combine` tables keyed by
//! the computed tensors. See [`crate::kernel::TupleReduce`].

use super::{span_of, Cx, Formula, RedCx, StageDecl};
use crate::diag::{Diagnostic, Span};
use crate::dtype::DType;
use crate::index::{Index, VarId};
use crate::kernel::*;
use crate::schedule::{CacheKind, StepKind};
use crate::syntax::{self, AstKind, ComputeStmt};
use indexmap::IndexMap;
use toml::Spanned;

/// What the caller already parsed: the output axes as variables, the
/// shape, and the reduction axes.
pub(crate) struct Axes {
    pub vars: Vec<(String, VarId)>,
    pub shape: Vec<Index>,
    pub reduce: Vec<Axis>,
}

/// Checks a tuple reduction stage and adds it (and its tensors) to `k`.
pub(super) fn stage(
    cx: &mut Cx<'_>,
    k: &mut Kernel,
    names: &mut Vec<(String, Span)>,
    decl: &Spanned<StageDecl>,
    stmt: &ComputeStmt,
    ax: Axes,
) {
    let d = decl.get_ref();
    let Some((outs, args)) = form(cx, names, d, stmt, &ax) else {
        return;
    };
    let elems = elements(cx, k, &ax, args);
    if elems.len() != outs.len() {
        return;
    }
    let types: Vec<(String, DType)> = outs
        .iter()
        .zip(&elems)
        .map(|(o, e)| (o.0.clone(), e.dtype))
        .collect();
    let Some(init) = formulas(cx, k, &d.init, "init", stmt, &types, false) else {
        return;
    };
    let Some(combine) = formulas(cx, k, &d.combine, "combine", stmt, &types, true) else {
        return;
    };
    let steps = cx.steps(d);
    cx.refuse_steps(
        &steps,
        "a tuple reduction",
        "its schedule may split, fuse, reorder, tile, bind and unroll its loops, \
         stage inputs with cache_read, and compute it at a consumer's loop",
        |kind| match kind {
            StepKind::Vectorize(_) => Some("vectorize"),
            StepKind::Mma { .. } => Some("mma"),
            StepKind::ComputeInline => Some("compute_inline"),
            StepKind::Cache {
                kind: CacheKind::WriteLocal | CacheKind::WriteShared,
                ..
            } => Some("cache_write"),
            _ => None,
        },
    );
    let first = TensorId(k.tensors.len() as u32);
    let mut tuple = TupleReduce {
        outputs: (0..outs.len() as u32)
            .map(|s| TensorId(first.0 + s))
            .collect(),
        elems,
        init,
        combine,
        commutative: true,
    };
    tuple.commutative = crate::interp::tuple_commutes(k, &tuple);
    let t0 = tuple.elems[0].dtype;
    if let Err(e) = identity(k, d, stmt, &tuple, &outs) {
        return cx.error(e);
    }
    let axes = super::output_axes(stmt, &ax.shape);
    let stage = Stage {
        name: stmt.target.clone(),
        output: first,
        axes,
        kind: StageKind::Reduce(Reduction {
            axes: ax.reduce,
            body: tuple.elems[0].clone(),
            kind: ReduceKind::Tuple(tuple),
        }),
        value: Expr {
            kind: ExprKind::Reduced,
            dtype: t0,
        },
        schedule: steps,
        span: span_of(decl),
        nest: None,
        default: None,
        absorbed: false,
    };
    cx.push_stage(k, names, stmt, t0, ax.shape, stage);
}

/// The tensors a tuple reduction computes, with their spans.
type Outputs = Vec<(String, Span)>;

/// The tensors a tuple reduction computes and its `reduce(...)`
/// arguments, one per tensor; refused unless it has that form.
fn form<'a>(
    cx: &mut Cx<'_>,
    names: &[(String, Span)],
    d: &StageDecl,
    stmt: &'a ComputeStmt,
    ax: &Axes,
) -> Option<(Outputs, &'a [crate::syntax::Arg])> {
    let outs = outputs(cx, names, stmt, false)?;
    let listed = outs
        .iter()
        .map(|o| o.0.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let AstKind::Call { name, args, .. } = &stmt.value.kind else {
        return fail(
            cx,
            Diagnostic::new(
                stmt.value.span,
                "a stage that computes several tensors is a tuple reduction",
            )
            .hint(format!(
                "give each tensor's value at one point of the reduction: `{} = reduce(...)`, \
                 one argument per tensor",
                stmt.target
            )),
        );
    };
    if name != "reduce" {
        return fail(
            cx,
            Diagnostic::new(
                stmt.value.span,
                format!("a tuple reduction is written `reduce(...)`, not `{name}(...)`"),
            )
            .hint(format!("one argument per computed tensor ({listed})")),
        );
    }
    if args.len() != outs.len() {
        return fail(
            cx,
            Diagnostic::new(
                stmt.value.span,
                format!(
                    "`reduce` has {} argument(s) for {} tensor(s) ({listed})",
                    args.len(),
                    outs.len()
                ),
            )
            .hint("give one element per computed tensor, in the same order"),
        );
    }
    if ax.reduce.is_empty() {
        return fail(
            cx,
            Diagnostic::new(stmt.value.span, "a tuple reduction needs reduction axes")
                .hint("declare them in the stage: `reduce = { c = \"cols\" }`"),
        );
    }
    if let Some(s) = &d.dtype {
        return fail(
            cx,
            Diagnostic::new(span_of(s), "a tuple reduction takes no `dtype`").hint(
                "each tensor has its element's dtype: convert the element, e.g. `f32(X[r, c])`",
            ),
        );
    }
    Some((outs, args))
}

/// The tensors a stage computes (the first already checked), each a
/// new name; `None` once one is refused.
pub(crate) fn outputs(
    cx: &mut Cx<'_>,
    names: &[(String, Span)],
    stmt: &ComputeStmt,
    rows: bool,
) -> Option<Outputs> {
    let outs: Outputs = std::iter::once((stmt.target.clone(), stmt.target_span))
        .chain(stmt.more.iter().cloned())
        .collect();
    for (i, (n, sp)) in outs.iter().enumerate().skip(1) {
        let taken: Vec<(String, Span)> = names.iter().chain(&outs[..i]).cloned().collect();
        if !cx.name(&Spanned::new(sp.range(), n.clone()), "tensor", &taken) {
            return None;
        }
        // The parser took all the first tensor's axes or all but its last.
        let rank = stmt.more_rank[i - 1];
        let want = stmt.axes.len() - usize::from(rows);
        if rank != want {
            let how = match rows {
                true => "all the axes of the first but its last",
                false => "the same axes in the same order",
            };
            cx.error(
                Diagnostic::new(
                    *sp,
                    format!("`{n}` is indexed differently from `{}`", stmt.target),
                )
                .hint(format!("here every other tensor takes {how}")),
            );
            return None;
        }
    }
    Some(outs)
}

/// Refuses `dtype`, `init` and `combine` on a stage that takes none
/// (`what`: "a top-k"; `dtypes` says where its dtypes come from); false
/// when it reported one.
pub(crate) fn no_dtype_or_combiner(
    cx: &mut Cx<'_>,
    d: &StageDecl,
    what: &str,
    dtypes: &str,
) -> bool {
    if let Some(s) = &d.dtype {
        cx.error(Diagnostic::new(span_of(s), format!("{what} takes no `dtype`")).hint(dtypes));
        return false;
    }
    if let Some((key, _)) = d.init.first().or(d.combine.first()) {
        cx.error(
            Diagnostic::new(
                span_of(key),
                "`init` and `combine` belong to tuple reductions",
            )
            .hint(format!("{what} needs neither: drop them")),
        );
        return false;
    }
    true
}

/// Reports `d` and gives up on the stage.
fn fail<T>(cx: &mut Cx<'_>, d: Diagnostic) -> Option<T> {
    cx.error(d);
    None
}

/// Each tensor's element at one point, over the output and reduction
/// axes; reductions inside are refused. Elements in error are left out.
fn elements(cx: &mut Cx<'_>, k: &mut Kernel, ax: &Axes, args: &[crate::syntax::Arg]) -> Vec<Expr> {
    let mut all = ax.vars.clone();
    all.extend(
        ax.reduce
            .iter()
            .enumerate()
            .map(|(j, a)| (a.name.clone(), VarId((ax.vars.len() + j) as u32))),
    );
    cx.red = Some(RedCx {
        vars: Vec::new(),
        result: None,
        inside: true,
        axes: None,
    });
    let mut elems = Vec::new();
    for a in args {
        if let Some((_, sp)) = &a.key {
            cx.error(Diagnostic::new(*sp, "`reduce` takes no named arguments"));
            continue;
        }
        if let Some(e) = cx.expr(k, &all, &a.value, None) {
            if e.dtype == DType::Bool || e.dtype.is_f8() {
                cx.error(
                    Diagnostic::new(
                        a.value.span,
                        format!("a tuple reduction cannot carry `{}` values", e.dtype),
                    )
                    .hint("convert the element, e.g. `f32(...)` or `i32(...)`"),
                );
                continue;
            }
            elems.push(e);
        }
    }
    cx.red = None;
    elems
}

/// Refuses a `combine` whose `init` is not its identity, pointing at the
/// tensor's formula.
fn identity(
    k: &Kernel,
    d: &StageDecl,
    stmt: &ComputeStmt,
    tuple: &TupleReduce,
    outs: &[(String, Span)],
) -> Result<(), Diagnostic> {
    let slot_names: Vec<String> = outs.iter().map(|o| o.0.clone()).collect();
    if let Some(e) = crate::interp::tuple_identity(k, &stmt.target, tuple, &slot_names) {
        let slot = match &e {
            crate::interp::InterpError::NotIdentity { tensor, .. } => tensor.clone(),
            _ => String::new(),
        };
        let at = d
            .combine
            .iter()
            .find(|(key, _)| *key.get_ref() == slot)
            .map_or(stmt.target_span, |(_, f)| span_of(f));
        return Err(
            Diagnostic::new(at, e.to_string())
                .hint("let an empty side pass the other through, e.g. `select(b.S == 0.0, a.S, ...)` (examples/log_softmax.toml)"),
        );
    }
    Ok(())
}

/// The `init` (constants, sizes and parameters) or `combine` (over
/// `a.X`/`b.X`, the two partial results) formula of each tensor, of its
/// element's dtype.
fn formulas(
    cx: &mut Cx<'_>,
    k: &Kernel,
    table: &IndexMap<Spanned<String>, Spanned<Formula>>,
    field: &str,
    stmt: &ComputeStmt,
    types: &[(String, DType)],
    combine: bool,
) -> Option<Vec<Expr>> {
    for (key, _) in table {
        if !types.iter().any(|(n, _)| n == key.get_ref()) {
            cx.error(
                Diagnostic::new(
                    span_of(key),
                    format!("`{}` is not a tensor of this reduction", key.get_ref()),
                )
                .hint(format!(
                    "`{field}` gives one formula per computed tensor: {}",
                    types
                        .iter()
                        .map(|t| t.0.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            );
            return None;
        }
    }
    if combine {
        cx.operands = types.to_vec();
    }
    let mut out = Vec::new();
    for (name, t) in types {
        let example = match combine {
            true => format!("{name} = \"max(a.{name}, b.{name})\""),
            false => format!("{name} = \"0.0\""),
        };
        let Some((_, f)) = table.iter().find(|(key, _)| key.get_ref() == name) else {
            cx.error(
                Diagnostic::new(
                    stmt.target_span,
                    format!("the tuple reduction has no `{field}` for `{name}`"),
                )
                .hint(format!("add it to the stage: `{field} = {{ {example} }}`")),
            );
            continue;
        };
        let span = span_of(f);
        let (text, base) = match f.get_ref() {
            Formula::Int(v) => (v.to_string(), span.start),
            Formula::Float(v) => (format!("{v:?}"), span.start),
            Formula::Text(s) => (
                s.clone(),
                cx.content_base(&Spanned::new(span.range(), s.clone())),
            ),
        };
        let ast = match syntax::parse_expr(&text, base) {
            Ok(a) => a,
            Err(e) => {
                cx.error(e);
                continue;
            }
        };
        let Some(e) = cx.expr(k, &[], &ast, Some(*t)) else {
            continue;
        };
        if e.dtype != *t {
            cx.error(
                Diagnostic::new(
                    ast.span,
                    format!("this is `{}`, but `{name}` is `{t}`", e.dtype),
                )
                .hint(format!(
                    "`{field}` gives a value of the tensor's dtype: convert it with `{t}(...)`"
                )),
            );
            continue;
        }
        let mut reads = false;
        e.visit_tensors(&mut |_| reads = true);
        if reads {
            cx.error(
                Diagnostic::new(ast.span, format!("`{field}` cannot read tensors")).hint(
                    if combine {
                        "the combiner sees only the two partial results (`a.X`, `b.X`), sizes, parameters and constants"
                    } else {
                        "the start of the reduction is made of constants, sizes and parameters"
                    },
                ),
            );
            continue;
        }
        out.push(e);
    }
    cx.operands.clear();
    (out.len() == types.len()).then_some(out)
}

impl Cx<'_> {
    /// `a.X` / `b.X` inside a combiner: slot X of the left (accumulated)
    /// or right partial result.
    pub(super) fn operand(&self, n: &str) -> Option<Expr> {
        let (side, name) = n.split_once('.')?;
        let right = match side {
            "a" => false,
            "b" => true,
            _ => return None,
        };
        let slot = self.operands.iter().position(|(x, _)| x == name)?;
        Some(Expr {
            kind: ExprKind::Operand {
                right,
                slot: slot as u32,
            },
            dtype: self.operands[slot].1,
        })
    }
}
