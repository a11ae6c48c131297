//! Multi-buffered copies: the `stages=N` caches at one loop placed as one
//! pipeline of asynchronous copy groups (or, with `tma=1`, of mbarriers).

use super::tma;
use crate::diag::Diagnostic;
use crate::index::{Index, VarId};
use crate::loops::visit::map_indices;
use crate::lower::Stmt;
use crate::schedule::Guard;

/// The copy of one `stages=N` cache, placed by [`pipeline`] once every
/// cache has been staged: the statements copy iteration `at`'s tile into
/// buffer `at % N`.
pub(super) struct Pipelined {
    pub(super) at: VarId,
    pub(super) stages: u32,
    pub(super) copy: Vec<Stmt>,
    /// With `tma=1`: the LDS array of the loop's mbarriers and the bytes
    /// the copy moves.
    pub(super) tma: Option<(u32, u32)>,
    pub(super) name: String,
    pub(super) span: crate::Span,
}

/// Multi-buffered copies: every `stages=N` cache at one loop shares one
/// pipeline, so that each iteration commits one group of asynchronous
/// copies and the wait count is exact:
///
/// ```text
/// for s in 0..N-1: if s < n { copy tile s }; commit
/// for ko in 0..n:
///     wait until N-2 groups are pending; barrier
///     if ko + N-1 < n { copy tile ko + N-1 }; commit
///     compute on buffer ko % N
/// barrier
/// ```
///
/// The barrier at the top makes tile `ko` visible to every thread and
/// orders the previous iteration's reads of buffer `(ko - 1) % N` before
/// this iteration's copy overwrites it.
///
/// Where a warpgroup's matrix instructions read the buffers and stay in
/// flight past the end of an iteration (`lag(at, N)` = 1, see
/// [`crate::lower::matrix::group_lag`]), the copies run one tile less ahead, so
/// that the buffer a copy overwrites was read two iterations before.
pub(super) fn pipeline(
    body: Vec<Stmt>,
    caches: Vec<Pipelined>,
    lag: &dyn Fn(VarId, u32) -> u32,
) -> Result<Vec<Stmt>, Diagnostic> {
    let mut body = body;
    // Each loop once, in schedule order: caches at other loops may come between.
    let mut loops: Vec<VarId> = Vec::new();
    for c in &caches {
        if !loops.contains(&c.at) {
            loops.push(c.at);
        }
    }
    for at in loops {
        let here: Vec<&Pipelined> = caches.iter().filter(|c| c.at == at).collect();
        let stages = here[0].stages;
        if let Some(o) = here.iter().find(|c| c.stages != stages) {
            return Err(Diagnostic::new(
                o.span,
                format!(
                    "`{}` has stages={} but `{}`, staged at the same loop, has stages={stages}",
                    o.name, o.stages, here[0].name
                ),
            )
            .hint("the tiles staged at one loop share one pipeline: give them the same `stages`"));
        }
        if let Some(o) = here
            .iter()
            .find(|c| c.tma.is_some() != here[0].tma.is_some())
        {
            let with = if o.tma.is_some() {
                &o.name
            } else {
                &here[0].name
            };
            let without = if o.tma.is_some() {
                &here[0].name
            } else {
                &o.name
            };
            return Err(Diagnostic::new(
                o.span,
                format!("`{with}` is copied with `tma=1` but `{without}`, staged at the same loop, is not"),
            )
            .hint("the tiles staged at one loop share one pipeline: give all of them `tma=1` or none"));
        }
        let n_ahead = i64::from(stages) - 1 - i64::from(lag(at, stages));
        let copies_for = |iter: Index| -> Vec<Stmt> {
            let m = std::collections::HashMap::from([(at, iter)]);
            here.iter()
                .flat_map(|c| map_indices(c.copy.clone(), &|ix| ix.subst(&m)))
                .collect()
        };
        if let Some((bars, _)) = here[0].tma {
            let bytes: u32 = here.iter().filter_map(|c| c.tma).map(|(_, b)| b).sum();
            body = around_loop(body, at, &mut |s| match s {
                Stmt::Loop {
                    var,
                    extent,
                    unroll,
                    body: inner,
                } => tma::pipeline_loop(
                    var,
                    extent,
                    unroll,
                    inner,
                    stages,
                    n_ahead,
                    bars,
                    bytes,
                    &copies_for,
                ),
                other => vec![other],
            });
            continue;
        }
        body = around_loop(body, at, &mut |s| match s {
            Stmt::Loop {
                var,
                extent,
                unroll,
                body: inner,
            } => {
                let mut out = Vec::new();
                for s in 0..n_ahead {
                    out.push(Stmt::If {
                        guards: vec![Guard {
                            value: Index::c(s),
                            extent: extent.clone(),
                        }],
                        body: copies_for(Index::c(s)),
                    });
                    out.push(Stmt::AsyncCommit);
                }
                let ahead = Index::Var(var) + Index::c(n_ahead);
                let mut b = vec![
                    Stmt::AsyncWait {
                        pending: n_ahead as u32 - 1,
                    },
                    Stmt::Barrier,
                    Stmt::If {
                        guards: vec![Guard {
                            value: ahead.clone(),
                            extent: extent.clone(),
                        }],
                        body: copies_for(ahead),
                    },
                    Stmt::AsyncCommit,
                ];
                b.extend(inner);
                out.push(Stmt::Loop {
                    var,
                    extent,
                    unroll,
                    body: b,
                });
                // What follows the loop may write the buffers others still read.
                out.push(Stmt::Barrier);
                out
            }
            other => vec![other],
        });
    }
    Ok(body)
}

/// `body` with loop `at` replaced by what `f` makes of it (statements
/// before it, the loop rebuilt).
pub(super) fn around_loop(
    body: Vec<Stmt>,
    at: VarId,
    f: &mut dyn FnMut(Stmt) -> Vec<Stmt>,
) -> Vec<Stmt> {
    let mut out = Vec::new();
    for s in body {
        match s {
            Stmt::Loop { var, .. } if var == at => out.extend(f(s)),
            other => out.push(other.map_bodies(&mut |b| around_loop(b, at, f))),
        }
    }
    out
}
