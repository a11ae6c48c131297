//! One kernel from two lowerings of the same stages: a version for small
//! sizes beside the general one, chosen at run time by a size (AMD's row
//! chains keep a row of up to 4096 floats in registers, read from memory
//! once, where the general version reads it at every pass;
//! [`crate::plan::DefaultSchedule::version_at`]).

use super::visit::{fold_body, Fold};
use super::{GpuKernel, Stmt};
use crate::index::{Index, SizeId, VarId};
use crate::kernel::{Expr, ExprKind};
use crate::schedule::Guard;
use std::collections::HashMap;

/// `fast` where size `size` is at most `bound`, else `general`, as one
/// kernel: the two bodies on either side of an unswitch on the size,
/// `fast`'s loop variables and arrays numbered after `general`'s. None
/// where the two do not launch alike (name, arguments, work-group, grid)
/// or `fast` relies on what a launch of `general` need not satisfy.
pub fn versioned(
    fast: &GpuKernel,
    general: &GpuKernel,
    size: SizeId,
    bound: u64,
) -> Option<GpuKernel> {
    let alike = fast.name == general.name
        && fast.stage == general.stage
        && fast.args == general.args
        && fast.block == general.block
        && fast.grid == general.grid
        && fast.min_blocks == general.min_blocks
        && fast.tensor_maps.is_empty()
        && general.tensor_maps.is_empty()
        && fast.requires.is_empty();
    if !alike {
        return None;
    }
    let mut k = general.clone();
    // The versions never run together: an LDS array of the fast one takes
    // the place of an equal one of the general version (the reductions'
    // trees), the rest come after. Arrays sized at launch keep their own.
    let mut taken = vec![false; general.shared.len()];
    let sized_at_launch =
        |g: &GpuKernel, a: usize| g.dynamic_shared.iter().any(|(d, _)| *d as usize == a);
    let mut shared = Vec::new();
    for (a, arr) in fast.shared.iter().enumerate() {
        let same = (0..general.shared.len()).find(|&b| {
            !taken[b]
                && general.shared[b] == *arr
                && !sized_at_launch(general, b)
                && !sized_at_launch(fast, a)
        });
        shared.push(match same {
            Some(b) => {
                taken[b] = true;
                b as u32
            }
            None => {
                k.shared.push(arr.clone());
                (k.shared.len() - 1) as u32
            }
        });
    }
    let after = general.vars.len() as u32;
    let mut shift = Shift {
        vars: (0..fast.vars.len() as u32)
            .map(|v| (VarId(v), Index::Var(VarId(v + after))))
            .collect(),
        after,
        locals: general.locals.len() as u32,
        shared,
    };
    let fast_body = fold_body(&mut shift, fast.body.clone());
    let within = i64::try_from(bound).ok()?.checked_add(1)?;
    // Formed for the general version's sizes, addresses are exact for the
    // small ones too.
    k.addressing = k.addressing.max(fast.addressing);
    k.vars.extend(fast.vars.iter().cloned());
    k.locals.extend(fast.locals.iter().cloned());
    k.dynamic_shared.extend(
        fast.dynamic_shared
            .iter()
            .map(|(a, n)| (shift.shared[*a as usize], n.clone())),
    );
    // One branch on the size, uniform over the work-group: barriers on
    // either side stay legal.
    k.body = vec![Stmt::Unswitch {
        guards: vec![Guard {
            value: Index::Size(size),
            extent: Index::c(within),
        }],
        fast: fast_body,
        slow: general.body.clone(),
    }];
    Some(k)
}

/// Renumbers a body's loop variables (each `v` to `v + after`) and
/// register arrays by offsets, its LDS arrays by a table.
struct Shift {
    vars: HashMap<VarId, Index>,
    after: u32,
    locals: u32,
    shared: Vec<u32>,
}

impl Fold for Shift {
    fn index(&mut self, i: Index) -> Index {
        i.subst(&self.vars)
    }
    fn expr(&mut self, e: Expr) -> Expr {
        let (vars, locals, shared) = (&self.vars, self.locals, &self.shared);
        e.map_indices(&|i: &Index| i.subst(vars))
            .rewrite(&|x: &Expr| {
                let kind = match &x.kind {
                    ExprKind::Local { local, index } => ExprKind::Local {
                        local: local + locals,
                        index: index.clone(),
                    },
                    ExprKind::Shared { shared: s, index } => ExprKind::Shared {
                        shared: shared[*s as usize],
                        index: index.clone(),
                    },
                    _ => return None,
                };
                Some(Expr {
                    kind,
                    dtype: x.dtype,
                })
            })
    }
    fn var(&mut self, v: VarId) -> VarId {
        VarId(v.0 + self.after)
    }
    fn local(&mut self, l: u32) -> u32 {
        l + self.locals
    }
    fn shared(&mut self, s: u32) -> u32 {
        self.shared[s as usize]
    }
}
