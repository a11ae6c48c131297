//! What every shape of stage body is built in: the frame pass `nest`
//! makes of the stage's loop nest (bindings, launch geometry, the loops
//! left to run, the value in loop variables), and wrapping statements in
//! those loops and their guards. Shared by the passes that write a
//! stage's body (`nest`, `matrix`) and those that stage tiles (`caches`).

use super::{inline_producers, Lowering, Stmt};
use crate::index::{IOp, Index, VarId};
use crate::kernel::{Expr, ExprKind, Kernel, TensorId};
use crate::schedule::{self, GpuAxis, Guard, LoopKind};

/// What every shape of stage body shares: the launch geometry, the loops
/// left to run, and the stage's value and output indices in loop variables.
pub(super) struct Frame {
    pub(super) block: [u32; 3],
    pub(super) grid: [Index; 3],
    /// The bindings of the bound loops, which start the body.
    pub(super) binds: Vec<Stmt>,
    /// The serial, unrolled and vectorized loops, outermost first.
    pub(super) loops: Vec<VarId>,
    /// Each stage axis as an index of the loop variables.
    pub(super) subst: std::collections::HashMap<VarId, Index>,
    pub(super) indices: Vec<Index>,
    pub(super) value: Expr,
    /// Linear thread index within the work-group (x fastest).
    pub(super) tid: Index,
    /// The loops bound to threadIdx.x, .y, .z.
    pub(super) thread_vars: [Option<VarId>; 3],
    /// Tensors read from LDS or registers: staged by cache_read, or
    /// computed by compute_at (here or in an enclosing kernel, whose part
    /// covers every point read). Their reads are rewritten, not clamped.
    pub(super) cached: Vec<TensorId>,
}

/// The bindings, geometry and substitutions of the stage's nest.
pub(super) fn frame(l: &Lowering) -> Frame {
    let (k, sid, nest) = (l.k, l.sid, &l.nest);
    let stage = k.stage(sid);
    let mut block = [1u32; 3];
    let mut grid = [Index::c(1), Index::c(1), Index::c(1)];
    let mut binds = Vec::new();
    let mut loops = Vec::new();
    for v in &nest.order {
        let lv = nest.var(*v);
        match lv.kind {
            LoopKind::Bound(axis @ GpuAxis::Thread(d)) => {
                // Thread extents were checked constant and within limits by the schedule.
                block[d.index()] = lv.extent.as_const().unwrap_or(1) as u32;
                binds.push(Stmt::Bind { var: *v, axis });
            }
            LoopKind::Bound(axis @ GpuAxis::Block(d)) => {
                grid[d.index()] = lv.extent.clone();
                binds.push(Stmt::Bind { var: *v, axis });
            }
            LoopKind::Serial | LoopKind::Unrolled | LoopKind::Vectorized => loops.push(*v),
        }
    }
    let subst: std::collections::HashMap<VarId, Index> = nest
        .axis_values
        .iter()
        .enumerate()
        .map(|(i, e)| (VarId(i as u32), e.clone()))
        .collect();
    let indices: Vec<Index> = (0..stage.axes.len())
        .map(|i| subst[&VarId(i as u32)].clone())
        .collect();
    let value = inline_producers(k, sid, &stage.value).map_indices(&|ix| ix.subst(&subst));
    let thread_vars = [0, 1, 2].map(|d| {
        nest.order.iter().copied().find(|v| {
            nest.var(*v).kind
                == LoopKind::Bound(GpuAxis::Thread(
                    [schedule::Dim::X, schedule::Dim::Y, schedule::Dim::Z][d],
                ))
        })
    });
    let mut tid = Index::c(0);
    for d in (0..3).rev() {
        tid = tid * Index::c(block[d] as i64) + thread_vars[d].map_or(Index::c(0), Index::Var);
    }
    let mut cached: Vec<TensorId> = nest.caches.iter().map(|c| c.tensor).collect();
    cached.extend(
        k.stages
            .iter()
            .filter(|s| s.compute_at().is_some())
            .map(|s| s.output),
    );
    Frame {
        block,
        grid,
        binds,
        loops,
        subst,
        indices,
        value,
        tid,
        thread_vars,
        cached,
    }
}

impl Frame {
    /// The binding statements that start the body.
    pub(super) fn binds(&self) -> &[Stmt] {
        &self.binds
    }
}

/// Wraps `leaf` in `loops` (outermost first); each guard goes just inside
/// the innermost of these loops it depends on.
pub(super) fn build(
    nest: &schedule::LoopNest,
    loops: &[VarId],
    guards: &[&Guard],
    leaf: Vec<Stmt>,
) -> Vec<Stmt> {
    let depth_of = |g: &Guard| {
        loops
            .iter()
            .rposition(|l| g.value.uses_var(*l))
            .map_or(0, |p| p + 1)
    };
    let mut at_depth: Vec<Vec<Guard>> = vec![Vec::new(); loops.len() + 1];
    for g in guards {
        at_depth[depth_of(g)].push((*g).clone());
    }
    let mut body = leaf;
    for d in (0..=loops.len()).rev() {
        let gs = std::mem::take(&mut at_depth[d]);
        if !gs.is_empty() {
            body = vec![Stmt::If { guards: gs, body }];
        }
        if d > 0 {
            let v = loops[d - 1];
            let lv = nest.var(v);
            body = vec![Stmt::Loop {
                var: v,
                extent: lv.extent.clone(),
                unroll: matches!(lv.kind, LoopKind::Unrolled | LoopKind::Vectorized),
                body,
            }];
        }
    }
    body
}

/// `ix` clamped into `0..=extent-1`: `min(ix, extent - 1)`, and `max(…, 0)`
/// around it when `ix` can be negative (`n - 1 - i` or `i - 1` for the
/// padding threads of a partial tile, which run but whose results are never
/// stored). Loop variables count as unbounded, so only sizes' bounds decide.
pub(super) fn clamp_into(k: &Kernel, ix: Index, extent: &Index) -> Index {
    let size_max: Vec<u64> = k.sizes.iter().map(|s| s.max).collect();
    let negative = ix.range(&size_max, &[]).0 < 0;
    let upper = Index::bin(IOp::Min, ix, extent.clone() - Index::c(1));
    if negative {
        Index::bin(IOp::Max, upper, Index::c(0))
    } else {
        upper
    }
}

/// Clamps every load index that depends on one of the `guarded` loop
/// variables into `0..=extent-1` of its dimension.
pub(super) fn clamp_loads(k: &Kernel, st: Stmt, guarded: &[VarId], skip: &[TensorId]) -> Stmt {
    let clamp = |e: &Expr| clamp_expr(k, e, guarded, skip);
    match st {
        Stmt::LocalStore {
            local,
            index,
            value,
        } => Stmt::LocalStore {
            local,
            index,
            value: clamp(&value),
        },
        other => other,
    }
}

fn clamp_expr(k: &Kernel, e: &Expr, guarded: &[VarId], skip: &[TensorId]) -> Expr {
    let clamp = |e: &Expr| clamp_expr(k, e, guarded, skip);
    {
        e.rewrite(&|x: &Expr| match &x.kind {
            ExprKind::Load { tensor, indices } if !skip.contains(tensor) => {
                let shape = &k.tensor(*tensor).shape;
                let indices = indices
                    .iter()
                    .zip(shape)
                    .map(|(ix, ext)| {
                        if guarded.iter().any(|v| ix.uses_var(*v)) {
                            clamp_into(k, ix.clone(), ext)
                        } else {
                            ix.clone()
                        }
                    })
                    .collect();
                Some(Expr {
                    kind: ExprKind::Load {
                        tensor: *tensor,
                        indices,
                    },
                    dtype: x.dtype,
                })
            }
            // A gather's affine subscripts, like a load's; its data
            // subscripts are clamped anyway, the loads inside them here.
            ExprKind::Gather { tensor, indices } => {
                let shape = &k.tensor(*tensor).shape;
                let indices = indices
                    .iter()
                    .zip(shape)
                    .map(|(sub, ext)| match &sub.kind {
                        ExprKind::Index(ix) if guarded.iter().any(|v| ix.uses_var(*v)) => Expr {
                            kind: ExprKind::Index(clamp_into(k, ix.clone(), ext)),
                            dtype: sub.dtype,
                        },
                        _ => clamp(sub),
                    })
                    .collect();
                Some(Expr {
                    kind: ExprKind::Gather {
                        tensor: *tensor,
                        indices,
                    },
                    dtype: x.dtype,
                })
            }
            _ => None,
        })
    }
}
