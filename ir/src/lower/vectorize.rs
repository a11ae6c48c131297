//! Pass `vectorize`: each loop the schedule vectorized becomes an unswitch
//! whose fast side runs the lanes without guards.

use super::region::split_varying;
use super::{Lowering, Stmt};
use crate::diag::Diagnostic;
use crate::index::{Index, VarId};
use crate::kernel::{Kernel, TensorId};
use crate::loops::visit::walk;
use crate::schedule::{self, Guard};

pub(super) fn run(l: &mut Lowering) -> Result<(), Diagnostic> {
    for (v, span) in &l.nest.vectorized {
        l.g.body = vectorize(l.k, &l.nest, *v, *span, std::mem::take(&mut l.g.body))?;
    }
    Ok(())
}

/// Vectorizes the loop over `v`: checks every access is contiguous along
/// `v` (only in the last dimension, with stride 1), then replaces the loop
/// by an unswitch: when the guards hold for the last lane they hold for all
/// (guard values grow with `v`), and the lanes run without guards, so LLVM
/// forms vector loads and stores; otherwise the guarded scalar loop runs.
fn vectorize(
    k: &Kernel,
    nest: &schedule::LoopNest,
    v: VarId,
    span: crate::diag::Span,
    body: Vec<Stmt>,
) -> Result<Vec<Stmt>, Diagnostic> {
    let name = &nest.var(v).name;
    let width = nest.var(v).extent.as_const().unwrap_or(1);
    let mut accesses: Vec<(TensorId, Vec<Index>)> = Vec::new();
    let mut inner: Vec<VarId> = Vec::new();
    let mut found = false;
    walk(&body, &mut |s| {
        if let Stmt::Loop { var, body, .. } = s {
            if *var == v {
                found = true;
                walk(body, &mut |s| {
                    if let Stmt::Store {
                        tensor, indices, ..
                    } = s
                    {
                        accesses.push((*tensor, indices.clone()));
                    }
                    if let Some(e) = s.value() {
                        e.visit_loads(&mut |t, ix| accesses.push((t, ix.to_vec())));
                    }
                    if let Stmt::Loop { var, .. } = s {
                        inner.push(*var);
                    }
                });
            }
        }
    });
    let mut problem = inner.first().map(|w| {
        format!(
            "loop `{}` runs inside `{name}`; only an innermost loop can be vectorized",
            nest.var(*w).name
        )
    });
    for (tensor, ix) in &accesses {
        for (d, x) in ix.iter().enumerate() {
            if !x.uses_var(v) {
                continue;
            }
            let contiguous = d + 1 == ix.len()
                && split_varying(x, &[v]).is_some_and(|(c, _)| {
                    c.iter().all(|(t, _)| matches!(t, Index::Var(_)))
                        && c.iter().map(|(_, k)| k).sum::<i64>() == 1
                });
            if !contiguous && problem.is_none() {
                problem = Some(format!("`{}` is accessed along dimension {d} with a stride other than 1 as `{name}` advances", k.tensor(*tensor).name));
            }
        }
    }
    if let Some(p) = problem {
        return Err(
            Diagnostic::new(span, format!("cannot vectorize `{name}`: {p}")).hint(
                "vectorize the loop that walks the last dimension of every tensor it touches",
            ),
        );
    }
    if !found {
        return Ok(body);
    }
    fn strip(body: Vec<Stmt>, guards: &mut Vec<Guard>) -> Vec<Stmt> {
        let mut out = Vec::new();
        for s in body {
            match s {
                Stmt::If { guards: g, body } => {
                    guards.extend(g);
                    out.extend(strip(body, guards));
                }
                other => out.push(other),
            }
        }
        out
    }
    fn rewrite(body: Vec<Stmt>, v: VarId, width: i64) -> Vec<Stmt> {
        body.into_iter()
            .map(|s| match s {
                Stmt::Loop {
                    var,
                    extent,
                    unroll,
                    body,
                } if var == v => {
                    let mut guards = Vec::new();
                    let fast = strip(body.clone(), &mut guards);
                    let last = std::collections::HashMap::from([(v, Index::c(width - 1))]);
                    let lane_guards: Vec<Guard> = guards
                        .iter()
                        .map(|g| Guard {
                            value: g.value.subst(&last),
                            extent: g.extent.clone(),
                        })
                        .collect();
                    let slow = vec![Stmt::Loop {
                        var,
                        extent: extent.clone(),
                        unroll,
                        body,
                    }];
                    if lane_guards.is_empty() {
                        return Stmt::Loop {
                            var,
                            extent,
                            unroll,
                            body: fast,
                        };
                    }
                    Stmt::Unswitch {
                        guards: lane_guards,
                        fast: vec![Stmt::Loop {
                            var,
                            extent,
                            unroll,
                            body: fast,
                        }],
                        slow,
                    }
                }
                other => other.map_bodies(&mut |b| rewrite(b, v, width)),
            })
            .collect()
    }
    Ok(rewrite(body, v, width))
}
