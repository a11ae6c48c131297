//! `cache_read(..., unroll=U)`: a serial copy loop (a row of run-time
//! length staged in LDS), or a register tile's unrolled one, runs U of a
//! thread's copies at a time. Where the
//! last of the U is inside what the loops reach, so are the others
//! (every guard grows with the copy's position), and the U copies run as
//! one group with no check between them: their loads are in flight
//! together, where one copy at a time waited for each load before the
//! next was issued.

use super::Cx;
use crate::index::{Index, VarId};
use crate::loops::visit::map_indices;
use crate::lower::Stmt;
use crate::schedule::{Guard, LoopKind, LoopVar};
use std::collections::HashMap;

/// The copy loop over `it` (`guards` on each copy, `stores` the copy
/// itself) in runs of `u`: `for it in 0..ceil(n / u)` (unrolled with
/// `unroll`, as a register tile's copy must be), then the `u` copies
/// unguarded where the last one's guards hold, else each under its own.
pub(super) fn runs(
    cx: &mut Cx,
    it: VarId,
    u: i64,
    guards: Vec<Guard>,
    stores: Vec<Stmt>,
    (unroll, span): (bool, crate::diag::Span),
) -> Vec<Stmt> {
    let n = cx.vars[it.0 as usize].extent.clone();
    let name = format!("{}_u", cx.vars[it.0 as usize].name);
    cx.vars[it.0 as usize].extent = n.clone().ceil_div(Index::c(u));
    cx.vars.push(LoopVar {
        name,
        reduce: false,
        extent: Index::c(u),
        kind: LoopKind::Serial,
        span,
    });
    let iu = VarId(cx.vars.len() as u32 - 1);
    let position = Index::Var(it) * Index::c(u) + Index::Var(iu);
    let mut all = guards;
    all.push(Guard {
        value: Index::Var(it),
        extent: n,
    });
    let at = HashMap::from([(it, position)]);
    let all: Vec<Guard> = all
        .into_iter()
        .map(|g| Guard {
            value: g.value.subst(&at),
            extent: g.extent,
        })
        .collect();
    let stores = map_indices(stores, &|ix| ix.subst(&at));
    let last = HashMap::from([(iu, Index::c(u - 1))]);
    let whole: Vec<Guard> = all
        .iter()
        .map(|g| Guard {
            value: g.value.subst(&last),
            extent: g.extent.clone(),
        })
        .collect();
    let run = |body: Vec<Stmt>| Stmt::Loop {
        var: iu,
        extent: Index::c(u),
        unroll: true,
        body,
    };
    vec![Stmt::Loop {
        var: it,
        extent: cx.vars[it.0 as usize].extent.clone(),
        unroll,
        body: vec![Stmt::Unswitch {
            guards: whole.clone(),
            // The group's own check again: code generation copies a
            // guarded group of fills as straight-line vectors.
            fast: vec![Stmt::If {
                guards: whole,
                body: vec![run(stores.clone())],
            }],
            slow: vec![run(vec![Stmt::If {
                guards: all,
                body: stores,
            }])],
        }],
    }]
}
