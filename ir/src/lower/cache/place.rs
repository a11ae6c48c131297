//! Where a staged tile's copy goes when it is not a plain fill before
//! the loop: a cache_write's copy out after each iteration, and
//! `prefetch`'s register round trip.

use super::pipeline::around_loop;
use super::{copy_to, read_tile, transposed, Copy, Cx, Tile};
use crate::diag::Diagnostic;
use crate::index::Index;
use crate::kernel::{Expr, TensorId};
use crate::loops::visit::{map_indices, map_values};
use crate::loops::Mem;
use crate::lower::region::{at_loop, region_offsets};
use crate::lower::Stmt;
use crate::schedule::{self, Guard};

/// `body` with the stores of a cache_write's tensor redirected into the
/// tile, and the tile copied out after each iteration of its loop (once,
/// at a block index).
pub(super) fn place_write(
    c: &schedule::Cache,
    body: Vec<Stmt>,
    at_block: bool,
    tile: &Tile,
    id: u32,
    copy: Vec<Stmt>,
) -> Vec<Stmt> {
    let (tensor, local) = (c.tensor, c.kind.local());
    let offsets =
        |ix: &[Index]| -> Index { tile.flat(&region_offsets(ix, &tile.varying, &tile.lo)) };
    // A register tile is copied out by its own thread: no barriers.
    let finish = |inner: Vec<Stmt>| {
        let mut v = redirect(inner, tensor, id, local, &offsets);
        if !local {
            v.push(Stmt::Barrier);
        }
        v.extend(copy.clone());
        v
    };
    if at_block {
        let (binds, rest): (Vec<Stmt>, Vec<Stmt>) = body
            .into_iter()
            .partition(|s| matches!(s, Stmt::Bind { .. }));
        let mut out = binds;
        out.extend(finish(rest));
        return out;
    }
    let mut wrap = |inner: Vec<Stmt>| {
        let mut v = finish(inner);
        // The next iteration writes the tile only after it has been copied out.
        if !local {
            v.push(Stmt::Barrier);
        }
        v
    };
    at_loop(body, c.at, &mut wrap)
}

/// Stores of `tensor` in `body` as stores into tile `id` at `offsets`.
fn redirect(
    body: Vec<Stmt>,
    tensor: TensorId,
    id: u32,
    local: bool,
    offsets: &dyn Fn(&[Index]) -> Index,
) -> Vec<Stmt> {
    body.into_iter()
        .map(|s| match s {
            Stmt::Store {
                tensor: t,
                indices,
                value,
            } if t == tensor && local => Stmt::LocalStore {
                local: id,
                index: offsets(&indices),
                value,
            },
            Stmt::Store {
                tensor: t,
                indices,
                value,
            } if t == tensor => Stmt::SharedStore {
                shared: id,
                index: offsets(&indices),
                value,
            },
            other => other.map_bodies(&mut |b| redirect(b, tensor, id, local, offsets)),
        })
        .collect()
}

/// `prefetch`: iteration 0's tile is loaded into registers before the
/// loop; each iteration stores the tile it was given into LDS, then loads
/// the next one while it computes.
pub(super) fn place_prefetch(
    cx: &mut Cx,
    c: &schedule::Cache,
    body: Vec<Stmt>,
    tile: &Tile,
    id: u32,
    copy: &Copy,
) -> Result<Vec<Stmt>, Diagnostic> {
    let t = cx.k.tensor(c.tensor);
    let (iters, vec, groups, threads) = (copy.iters, copy.vec, copy.groups, copy.threads);
    let pack = copy.sources.len() as i64;
    let staged = iters * vec * pack;
    if staged > MAX_PREFETCH {
        return Err(Diagnostic::new(c.span, format!("`prefetch` would keep {staged} elements of `{}` per thread in registers; at most {MAX_PREFETCH} are allowed", t.name))
            .hint("use a smaller tile or more threads"));
    }
    let r = cx.registers(c, "_next", t.dtype, staged);
    let in_group = |s: Vec<Stmt>| {
        if groups % threads == 0 {
            s
        } else {
            vec![Stmt::If {
                guards: vec![Guard {
                    value: copy.group.clone(),
                    extent: Index::c(groups),
                }],
                body: s,
            }]
        }
    };
    // Copy pass j: the tile's elements (`pack` rows of a transposed
    // tile) into registers (j*pack + row)*vec.., and from there into LDS.
    let stored = super::tile_dtype(c, t);
    let (mut load, mut put) = (Vec::new(), Vec::new());
    for j in 0..iters {
        let reg = Index::c(j * pack * vec);
        let staged = Expr::local(r, reg.clone(), t.dtype).cast_to(stored);
        let ld: Vec<Stmt> = (0..pack)
            .map(|row| {
                copy_to(
                    cx.k,
                    Mem::Local,
                    r,
                    Index::c((j * pack + row) * vec),
                    copy.sources[row as usize].clone(),
                    (vec, copy.zero),
                )
            })
            .collect();
        let st = match tile.transposed {
            true => transposed::put(tile, id, &copy.offs, vec, &|e, row| {
                let at = Index::c((j * pack + row) * vec + e);
                Expr::local(r, at, t.dtype).cast_to(stored)
            }),
            false => vec![copy_to(
                cx.k,
                Mem::Shared,
                id,
                tile.flat(&copy.offs),
                staged,
                (vec, false),
            )],
        };
        let pass = std::collections::HashMap::from([(copy.it, Index::c(j))]);
        load.extend(map_indices(in_group(ld), &|ix| ix.subst(&pass)));
        put.extend(map_indices(in_group(st), &|ix| ix.subst(&pass)));
    }
    let at = c.at;
    let first = std::collections::HashMap::from([(at, Index::c(0))]);
    let next = std::collections::HashMap::from([(at, Index::Var(at) + Index::c(1))]);
    let prologue = map_indices(load.clone(), &|ix| ix.subst(&first));
    let ahead = Stmt::If {
        guards: vec![Guard {
            value: Index::Var(at) + Index::c(1),
            extent: cx.nest.var(at).extent.clone(),
        }],
        body: map_indices(load, &|ix| ix.subst(&next)),
    };
    let dtype = t.dtype;
    let rewrite = |ex: &Expr| read_tile(c, tile, id, dtype, ex);
    Ok(around_loop(body, at, &mut |s| match s {
        Stmt::Loop {
            var,
            extent,
            unroll,
            body: inner,
        } => {
            let mut b = put.clone();
            b.push(Stmt::Barrier);
            b.push(ahead.clone());
            b.extend(map_values(inner, &rewrite));
            b.push(Stmt::Barrier);
            let mut out = prologue.clone();
            out.push(Stmt::Loop {
                var,
                extent,
                unroll,
                body: b,
            });
            out
        }
        other => vec![other],
    }))
}

/// Elements of a tile one thread may hold in registers for `prefetch`.
const MAX_PREFETCH: i64 = 256;
