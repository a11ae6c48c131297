//! The cooperative copy of a staged tile between memory and its array:
//! which elements each thread moves, the loads (or gathers) of them, and
//! the stores into LDS or registers (or back to memory).

use super::bounded::live_groups;
use super::{tma, transposed, unrolled, Cx, Tile};
use crate::diag::Diagnostic;
use crate::index::{Index, VarId};
use crate::kernel::{Expr, ExprKind, Kernel, TensorKind};
use crate::loops::visit::map_indices;
use crate::loops::Mem;
use crate::lower::body::clamp_into;
use crate::lower::Stmt;
use crate::schedule::{self, Guard, LoopKind, LoopVar};

/// The cooperative copy of a tile: element e goes to thread e % threads
/// (a register tile is copied by its own thread), `vec` at a time.
pub(super) struct Copy {
    /// The copy loop's variable, its trip count and its statements.
    pub(super) it: VarId,
    pub(super) iters: i64,
    pub(super) stmts: Vec<Stmt>,
    /// This thread's group of `vec` elements, and the number of groups.
    pub(super) group: Index,
    pub(super) groups: i64,
    pub(super) threads: i64,
    pub(super) vec: i64,
    /// Offsets in the tile of this thread's group, and the loads of it:
    /// one, or for a packed transposed tile one per row of the pack.
    pub(super) offs: Vec<Index>,
    pub(super) sources: Vec<Expr>,
    /// Whether the copy reads zero past the tensor ([`matrix::zero_filled`]).
    pub(super) zero: bool,
}

/// With `vec=W` a thread copies W consecutive elements of the last
/// dimension at once: refused where they would straddle rows or exceed
/// one access.
fn check_vec(cx: &Cx, c: &schedule::Cache, tile: &Tile, vec: i64) -> Result<(), Diagnostic> {
    let t = cx.k.tensor(c.tensor);
    let (size, padded, n) = (&tile.size, &tile.padded, tile.size.len());
    let bad = if size[n - 1] % vec != 0 {
        Some(format!(
            "the tile's last dimension ({}) is not a multiple of vec={vec}",
            size[n - 1]
        ))
    } else if !tile.transposed && padded[n - 1] % vec != 0 {
        Some(format!("the padded row ({} elements with pad={}) is not a multiple of vec={vec}, so vectors would straddle rows of the LDS tile", padded[n - 1], c.pad))
    } else {
        [t.dtype, super::tile_dtype(c, t)]
            .into_iter()
            .find(|d| vec * d.size() as i64 > 16)
            .map(|d| {
                format!(
                    "vec={vec} of {d} is {} bytes; one access moves at most 16",
                    vec * d.size() as i64
                )
            })
    };
    if let Some(b) = bad {
        return Err(Diagnostic::new(
            c.span,
            format!("cannot copy `{}` {vec} elements at a time: {b}", t.name),
        )
        .hint("choose vec to divide the tile's last dimension and its padded width"));
    }
    if let TensorKind::Stage(p) = t.kind {
        if cx.k.stage(p).compute_at().is_some() {
            return Err(Diagnostic::new(c.span, format!("`{}` is computed at a loop of this stage, so its tile is not copied from memory; `vec` does not apply", t.name)));
        }
    }
    Ok(())
}

/// The cooperative copy of the tile between memory and its array `id`.
pub(super) fn copy(
    cx: &mut Cx,
    c: &schedule::Cache,
    tile: &Tile,
    id: u32,
) -> Result<Copy, Diagnostic> {
    let k = cx.k;
    let t = k.tensor(c.tensor);
    let (size, base, elems, n) = (&tile.size, &tile.base, tile.elems, tile.size.len());
    // A register tile is copied by its own thread.
    let threads: i64 = if c.kind.local() {
        1
    } else {
        cx.block.iter().map(|b| *b as i64).product()
    };
    let tid = if c.kind.local() {
        Index::c(0)
    } else {
        cx.tid.clone()
    };
    let vec = c.vec.max(1);
    if vec > 1 {
        check_vec(cx, c, tile, vec)?;
    }
    // A packed transposed copy's groups are `pack` rows of `vec`.
    let pack = tile.pack;
    let groups = elems / vec / pack;
    let iters = (groups + threads - 1) / threads;
    let live = live_groups(cx, c, tile, vec)?;
    let zero = crate::lower::matrix::zero_filled(cx.stage, cx.nest, cx.unit, c)
        && tile.data.iter().all(Option::is_none);
    cx.vars.push(LoopVar {
        name: format!("{}_copy", c.name),
        reduce: false,
        extent: live
            .as_ref()
            .map_or(Index::c(iters), |g| g.clone().ceil_div(Index::c(threads))),
        kind: LoopKind::Serial,
        span: c.span,
    });
    let it = VarId(cx.vars.len() as u32 - 1);
    let group = Index::Var(it) * Index::c(threads) + tid;
    let e = if vec > 1 {
        group.clone() * Index::c(vec)
    } else {
        group.clone()
    };
    // Offsets of the group's first element, in a tile whose rows are
    // taken `pack` at a time.
    let mut sizes = size.clone();
    if pack > 1 {
        sizes[n - 2] /= pack;
    }
    let mut stride = elems / pack;
    let mut offs = Vec::new();
    for (d, &extent) in sizes.iter().enumerate() {
        stride /= extent;
        let o = (e.clone() / Index::c(stride)) % Index::c(extent);
        offs.push(if pack > 1 && d + 2 == n {
            o * Index::c(pack)
        } else {
            o
        });
    }
    // Row `r` of the group, where the tensor holds it.
    let global_at = |r: i64| -> Vec<Index> {
        (0..n)
            .map(|d| {
                let o = match d + 2 == n {
                    true => offs[d].clone() + Index::c(r),
                    false => offs[d].clone(),
                };
                let off = match &tile.strides {
                    Some(s) => s.offset(d, &o),
                    None => o,
                };
                // Reads are clamped: parts of the tile beyond the tensor feed only
                // results that are never stored. Writes are guarded instead.
                // A vector fill clamps each of its lanes itself; a zero-filling
                // copy reads zero past the tensor instead.
                if c.kind.write() || (vec > 1 && d == n - 1) || zero {
                    base[d].clone() + off
                } else {
                    clamp_into(k, base[d].clone() + off, &t.shape[d])
                }
            })
            .collect()
    };
    let sources: Vec<Expr> = (0..pack)
        .map(|r| source_of(c, t, tile, global_at(r)))
        .collect();
    let stores = if c.tma && !c.kind.write() {
        // The accelerator's copy: zero past the tensor, element by element.
        tma::zero_filled(k, c, tile, id, &offs, vec)
    } else if c.kind.write() {
        write_back(c, t, tile, id, &offs, global_at(0))
    } else {
        copy_in(cx, c, (tile, id), &offs, &sources, (vec, zero))
    };
    // No loop for a single pass.
    let guards = copy_guards(live.as_ref(), &group, groups, threads, &offs, &tile.live);
    let serial = !(live.is_none() && (iters <= 8 || c.kind.local()));
    let stmts = if c.unroll > 1 && (serial || c.kind.local()) {
        // A register tile's copy stays unrolled (constant indices): its
        // runs are groups of fills that take one check.
        unrolled::runs(
            cx,
            it,
            i64::from(c.unroll),
            guards,
            stores,
            (!serial, c.span),
        )
    } else if iters == 1 && live.is_none() {
        let zero = std::collections::HashMap::from([(it, Index::c(0))]);
        map_indices(guarded_by(guards, stores), &|ix| ix.subst(&zero))
    } else {
        vec![Stmt::Loop {
            var: it,
            extent: cx.vars[it.0 as usize].extent.clone(),
            // A register tile needs constant indices: unrolled.
            unroll: !serial,
            body: guarded_by(guards, stores),
        }]
    };
    Ok(Copy {
        it,
        iters,
        stmts,
        group,
        groups,
        threads,
        vec,
        offs,
        sources,
        zero,
    })
}

/// The load (or gather) of tensor `t` at `global`: what a copy stages.
fn source_of(
    c: &schedule::Cache,
    t: &crate::kernel::Tensor,
    tile: &Tile,
    global: Vec<Index>,
) -> Expr {
    let kind = if tile.data.iter().any(Option::is_some) {
        // The gathered subscript as written: the gather clamps it itself.
        ExprKind::Gather {
            tensor: c.tensor,
            indices: global
                .iter()
                .zip(&tile.data)
                .map(|(g, d)| {
                    d.clone().unwrap_or(Expr {
                        kind: ExprKind::Index(g.clone()),
                        dtype: crate::DType::I32,
                    })
                })
                .collect(),
        }
    } else {
        ExprKind::Load {
            tensor: c.tensor,
            indices: global,
        }
    };
    Expr {
        kind,
        dtype: t.dtype,
    }
}

/// A thread's copy of `vec` elements (`sources[0]`, at tile offsets
/// `offs`) into tile `id`: one fill, asynchronous where the tile has
/// `stages`; for a transposed tile through registers (each source's
/// `vec`), since its elements go to places a row of the tile apart.
fn copy_in(
    cx: &mut Cx,
    c: &schedule::Cache,
    (tile, id): (&Tile, u32),
    offs: &[Index],
    sources: &[Expr],
    (vec, zero): (i64, bool),
) -> Vec<Stmt> {
    let k = cx.k;
    let source = &sources[0];
    let stored = super::tile_dtype(c, k.tensor(c.tensor));
    let mem = if c.kind.local() {
        Mem::Local
    } else {
        Mem::Shared
    };
    if (tile.transposed && vec > 1) || stored != source.dtype {
        let r = cx.registers(c, "_t", source.dtype, vec * sources.len() as i64);
        let mut v: Vec<Stmt> = sources
            .iter()
            .enumerate()
            .map(|(row, s)| {
                copy_to(
                    k,
                    Mem::Local,
                    r,
                    Index::c(row as i64 * vec),
                    s.clone(),
                    (vec, zero),
                )
            })
            .collect();
        let staged = |at: i64| Expr::local(r, Index::c(at), source.dtype).cast_to(stored);
        if tile.transposed && vec > 1 {
            v.extend(transposed::put(tile, id, offs, vec, &|e, row| {
                staged(row * vec + e)
            }));
        } else {
            v.push(copy_to(
                k,
                mem,
                id,
                tile.flat(offs),
                staged(0),
                (vec, false),
            ));
        }
        return v;
    }
    let mut st = copy_to(k, mem, id, tile.flat(offs), source.clone(), (vec, zero));
    if let Stmt::Fill { asynchronous, .. } = &mut st {
        *asynchronous = c.stages > 1;
    }
    vec![st]
}

/// `stores` under `guards`, or as they are where there are none.
fn guarded_by(guards: Vec<Guard>, stores: Vec<Stmt>) -> Vec<Stmt> {
    if guards.is_empty() {
        stores
    } else {
        vec![Stmt::If {
            guards,
            body: stores,
        }]
    }
}

/// `value`'s `vec` lanes into `mem` array `array` at `index`: one
/// [`Stmt::Fill`], or a plain store for a single element.
/// A written tile back to memory, skipping what lies beyond the tensor
/// (never written).
fn write_back(
    c: &schedule::Cache,
    t: &crate::kernel::Tensor,
    tile: &Tile,
    id: u32,
    offs: &[Index],
    global: Vec<Index>,
) -> Vec<Stmt> {
    let index = tile.flat(offs);
    let kind = if c.kind.local() {
        ExprKind::Local { local: id, index }
    } else {
        ExprKind::Shared { shared: id, index }
    };
    let in_bounds: Vec<Guard> = global
        .iter()
        .zip(&t.shape)
        .map(|(g, ext)| Guard {
            value: g.clone(),
            extent: ext.clone(),
        })
        .collect();
    vec![Stmt::If {
        guards: in_bounds,
        body: vec![Stmt::Store {
            tensor: c.tensor,
            indices: global,
            value: Expr {
                kind,
                dtype: t.dtype,
            },
        }],
    }]
}

/// The guards of one thread's copy: none when the threads divide the tile.
/// Where loops of symbolic extent span the tile, the copy covers what they
/// reach: the leading `live` groups where that is one dimension with unit
/// ones before it, else every group inside the reached extents.
fn copy_guards(
    live: Option<&Index>,
    group: &Index,
    groups: i64,
    threads: i64,
    offs: &[Index],
    tile_live: &[Option<Index>],
) -> Vec<Guard> {
    let mut guards = Vec::new();
    match live {
        Some(g) => guards.push(Guard {
            value: group.clone(),
            extent: g.clone(),
        }),
        None => {
            if groups % threads != 0 {
                guards.push(Guard {
                    value: group.clone(),
                    extent: Index::c(groups),
                });
            }
            for (o, l) in offs.iter().zip(tile_live) {
                if let Some(l) = l {
                    guards.push(Guard {
                        value: o.clone(),
                        extent: l.clone(),
                    });
                }
            }
        }
    }
    guards
}

/// With `zero`, a load's elements past the tensor are zero, not clamped.
pub(super) fn copy_to(
    k: &Kernel,
    mem: Mem,
    array: u32,
    index: Index,
    value: Expr,
    (vec, zero): (i64, bool),
) -> Stmt {
    let zero = zero && matches!(value.kind, ExprKind::Load { .. });
    let value = if zero && vec < 2 {
        crate::loops::fill_lane(k, &value, 0, true)
    } else {
        value
    };
    match (mem, vec) {
        (_, 2..) => Stmt::Fill {
            mem,
            array,
            index,
            value,
            width: vec as u32,
            asynchronous: false,
            zero,
        },
        (Mem::Local, _) => Stmt::LocalStore {
            local: array,
            index,
            value,
        },
        (Mem::Shared, _) => Stmt::SharedStore {
            shared: array,
            index,
            value,
        },
    }
}
