//! Pass `unswitch_unrolled`: an unrolled loop whose every iteration is one
//! unswitch (a vectorized step: `for u in 0..4 (unrolled): if whole(u)
//! fast else slow`) becomes one unswitch around the unrolled loop, taken
//! when the last iteration's guards hold. The fast side is then
//! straight-line code whose loads all issue before any is waited on: the
//! point of unrolling a row's steps (AMD's row rules), which per-step
//! branches defeated.

use super::region::split_varying;
use super::{Lowering, Stmt};
use crate::diag::Diagnostic;
use crate::index::{Index, VarId};
use crate::schedule::Guard;
use std::collections::HashMap;

pub(super) fn run(l: &mut Lowering) -> Result<(), Diagnostic> {
    l.g.body = hoist(std::mem::take(&mut l.g.body));
    Ok(())
}

fn hoist(body: Vec<Stmt>) -> Vec<Stmt> {
    body.into_iter()
        .map(|s| if done(&s) { s } else { one(s) })
        .collect()
}

/// Whether `s` is already this pass's unswitch (a producer lowered with
/// its own kernel and placed again): its slow side must stay as it is.
fn done(s: &Stmt) -> bool {
    matches!(s, Stmt::Unswitch { fast, slow, .. }
        if matches!((fast.as_slice(), slow.as_slice()),
            ([Stmt::Loop { var: a, unroll: true, .. }], [Stmt::Loop { var: b, unroll: true, .. }]) if a == b))
}

fn one(s: Stmt) -> Stmt {
    match s.map_bodies(&mut hoist) {
        Stmt::Loop {
            var,
            extent,
            unroll: true,
            body,
        } => {
            let n = extent.as_const().unwrap_or(0);
            match (n > 1).then(|| hoisted(var, n, &body)).flatten() {
                Some((guards, fast)) => Stmt::Unswitch {
                    guards,
                    fast: vec![Stmt::Loop {
                        var,
                        extent: extent.clone(),
                        unroll: true,
                        body: fast,
                    }],
                    slow: vec![Stmt::Loop {
                        var,
                        extent,
                        unroll: true,
                        body,
                    }],
                },
                None => Stmt::Loop {
                    var,
                    extent,
                    unroll: true,
                    body,
                },
            }
        }
        other => other,
    }
}

/// Where `body` (of unrolled loop `u`, `n` iterations) is one unswitch,
/// alone or under guards: the guards at `u = n - 1` and the fast side.
/// Every guard must grow with `u` (an affine value with a non-negative
/// coefficient, an extent free of `u`), so that holding at the last
/// iteration it holds at every one.
fn hoisted(u: VarId, n: i64, body: &[Stmt]) -> Option<(Vec<Guard>, Vec<Stmt>)> {
    let (mut guards, inner) = match body {
        [Stmt::If { guards, body }] => (guards.clone(), body.as_slice()),
        _ => (Vec::new(), body),
    };
    // A step of a thread's strided elements (NVIDIA's row rules) is the
    // guarded body itself: straight-line where the last step's guards
    // hold, so its loads too issue before any is waited on.
    let fast = match inner {
        [Stmt::Unswitch {
            guards: lanes,
            fast,
            ..
        }] => {
            guards.extend(lanes.iter().cloned());
            fast
        }
        _ if !guards.is_empty() && accumulates(inner) => inner,
        _ => return None,
    };
    let grows = |g: &Guard| {
        !g.extent.uses_var(u)
            && split_varying(&g.value, &[u])
                .is_some_and(|(terms, _)| terms.iter().all(|(t, k)| *t == Index::Var(u) && *k >= 0))
    };
    if !guards.iter().all(grows) {
        return None;
    }
    let last = HashMap::from([(u, Index::c(n - 1))]);
    let guards = guards
        .iter()
        .map(|g| Guard {
            value: g.value.subst(&last),
            extent: g.extent.clone(),
        })
        .collect();
    Some((guards, fast.to_vec()))
}

/// Whether `body` is a step of a reduction in registers: stores to the
/// thread's own accumulators alone. Copies into LDS and stores to memory
/// stay guarded step by step: their loops carry other work (a matrix
/// product's fills), and their fast copies cost registers there (spills
/// in matmul_lds on sm_90 and a convolution on sm_80 when they too were
/// unswitched).
fn accumulates(body: &[Stmt]) -> bool {
    body.iter().all(|s| matches!(s, Stmt::LocalStore { .. }))
}
