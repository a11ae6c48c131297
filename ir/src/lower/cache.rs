//! Pass `caches`: each cache_read/cache_write of the schedule stages a
//! tile in LDS (shared by the work-group) or registers (per thread) at the
//! loop it names, and rewrites the accesses it serves.

mod bounded;
mod copy;
mod gathered;
mod pipeline;
mod place;
mod strided;
pub(crate) mod swizzle;
mod tma;
mod transposed;
mod unrolled;

use bounded::{live_groups, used_at_run_time};
use copy::{copy, copy_to, Copy};
use gathered::{fold_divmod, gathered_dims, gathers_of, var_ranges};
use pipeline::{pipeline, Pipelined};
use place::{place_prefetch, place_write};

use super::body::clamp_into;
use super::region::{
    at_loop, divergence_check, infer_region, insert_fill, loads_of, region_offsets, scope_of,
    Place, Region,
};
use super::{Local, Lowering, Stmt, MAX_ACCUMULATORS, MAX_LDS};
use crate::diag::Diagnostic;
use crate::index::{Index, VarId};
use crate::kernel::{Expr, ExprKind, Kernel, TensorId, TensorKind};
use crate::loops::visit::{map_values, walk};
use crate::schedule::{self, GpuAxis, LoopKind, LoopVar};

pub(super) fn run(l: &mut Lowering) -> Result<(), Diagnostic> {
    run_where(l, false)
}

/// The caches of tensors computed at this kernel's loops, staged before
/// the compute_at pass replaces their loads by reads of the parts.
pub(super) fn run_parts(l: &mut Lowering) -> Result<(), Diagnostic> {
    run_where(l, true)
}

fn run_where(l: &mut Lowering, parts: bool) -> Result<(), Diagnostic> {
    let computed_here = |t: TensorId| match l.k.tensor(t).kind {
        TensorKind::Stage(s) => l.k.stage(s).compute_at().is_some(),
        TensorKind::Input => false,
    };
    let mut pipelined = Vec::new();
    let mut cx = Cx {
        k: l.k,
        stage: l.k.stage(l.sid),
        nest: &l.nest,
        block: l.g.block,
        tid: &l.tid,
        vars: &mut l.g.vars,
        shared: &mut l.g.shared,
        dynamic: &mut l.g.dynamic_shared,
        locals: &mut l.g.locals,
        pipelined: &mut pipelined,
        unit: l.unit,
        tensor_maps: &mut l.g.tensor_maps,
        bars: Vec::new(),
    };
    for c in l
        .nest
        .caches
        .iter()
        .filter(|c| computed_here(c.tensor) == parts)
    {
        let body = std::mem::take(&mut l.g.body);
        l.g.body = stage_cache(&mut cx, c, body)?;
    }
    let lag = |at: VarId, stages: u32| {
        l.unit
            .map_or(0, |u| super::matrix::group_lag(&l.nest, u, at, stages))
    };
    l.g.body = pipeline(std::mem::take(&mut l.g.body), pipelined, &lag)?;
    Ok(())
}

/// What staging a cache may change in the kernel being built.
struct Cx<'a> {
    k: &'a Kernel,
    /// The stage whose kernel this is.
    stage: &'a crate::kernel::Stage,
    nest: &'a schedule::LoopNest,
    block: [u32; 3],
    tid: &'a Index,
    vars: &'a mut Vec<LoopVar>,
    shared: &'a mut Vec<Local>,
    /// [`GpuKernel::dynamic_shared`](crate::loops::GpuKernel::dynamic_shared).
    dynamic: &'a mut Vec<(u32, Index)>,
    locals: &'a mut Vec<Local>,
    pipelined: &'a mut Vec<Pipelined>,
    /// The target's matrix unit, which says whether it has the tensor
    /// memory accelerator (`tma=1`).
    unit: Option<&'a rocmc_target::matrix::MatrixUnit>,
    tensor_maps: &'a mut Vec<crate::loops::TensorMap>,
    /// Each `tma=1` loop's LDS array of mbarriers.
    bars: Vec<(VarId, u32)>,
}

impl Cx<'_> {
    /// A new register array of `len` elements for cache `c`, named
    /// `c`'s name and `suffix`: its id.
    fn registers(
        &mut self,
        c: &schedule::Cache,
        suffix: &str,
        dtype: crate::DType,
        len: i64,
    ) -> u32 {
        self.locals.push(Local {
            name: format!("{}{suffix}", c.name),
            dtype,
            len: len as u32,
            span: c.span,
        });
        self.locals.len() as u32 - 1
    }
}

/// The tile one cache stages: the box of the tensor its loop reads (or
/// writes), and its layout in LDS or registers.
struct Tile {
    /// The loops the tile's origin does not depend on: those it serves.
    varying: Vec<VarId>,
    /// Those of constant extent, with it, for [`fold_divmod`].
    ranges: Vec<(VarId, i64)>,
    base: Vec<Index>,
    lo: Vec<i64>,
    size: Vec<i64>,
    /// Per dimension, the extent reached where a loop of symbolic extent
    /// spans it (`size` is then its bound); see [`Region::live`].
    live: Vec<Option<Index>>,
    /// Per dimension, the data subscript every access gathers with there
    /// (`ids[t]` in `table[ids[t], c]`), the same all over the tile: the
    /// tile is one index wide there and its copy gathers too.
    data: Vec<Option<Expr>>,
    /// `size` with the last dimension padded by `pad`.
    padded: Vec<i64>,
    /// With `swizzle=S`: the elements of a 16-byte chunk, and S (the
    /// bytes of a row).
    swizzle: Option<(i64, i64)>,
    elems: i64,
    /// Elements of one buffer.
    len: i64,
    /// Offset of the current buffer: with `stages=N`, iteration `at`'s
    /// tile lives in buffer `at % N`.
    slot: Index,
    /// A register tile laid out by the digits of its strided reads
    /// ([`strided::Strides`]) rather than as their box.
    strides: Option<strided::Strides>,
    /// `transpose=1`: the last two dimensions swapped in LDS, `pad` on
    /// the second-to-last (`padded` stays in the tensor's order).
    transposed: bool,
    /// Rows a thread copies together into a transposed tile, and the
    /// chunk swizzle of its LDS rows ([`transposed`]).
    pack: i64,
    transposed_swizzle: Option<(i64, i64, i64)>,
}

impl Tile {
    /// The tile's element at offsets `o`, as an index of its array.
    fn flat(&self, o: &[Index]) -> Index {
        let linear = |o: &[Index], p: &[i64]| {
            o.iter()
                .zip(p)
                .fold(Index::c(0), |acc, (x, p)| acc * Index::c(*p) + x.clone())
        };
        match self.swizzle {
            None if self.transposed => {
                let n = o.len();
                let (mut o, mut p) = (o.to_vec(), self.padded.clone());
                if let Some(sw) = self.transposed_swizzle {
                    o[n - 2] = transposed::swizzled_row(&o[n - 2], &o[n - 1], sw, p[n - 2]);
                }
                o.swap(n - 2, n - 1);
                p.swap(n - 2, n - 1);
                self.slot.clone() + linear(&o, &p)
            }
            None => self.slot.clone() + linear(o, &self.padded),
            Some((chunk, bytes)) => {
                let n = o.len();
                // S bytes of the last dimension per block.
                let width = chunk * bytes / swizzle::CHUNK_BYTES;
                let rows: i64 = self.padded[..n - 1].iter().product();
                swizzle::swizzled(&swizzle::Swizzled {
                    slot: self.slot.clone(),
                    row: linear(&o[..n - 1], &self.padded[..n - 1]),
                    col: o[n - 1].clone(),
                    width,
                    chunk,
                    block: (self.padded[n - 1] > width).then_some(rows * width),
                })
            }
        }
    }
}

/// Applies one cache_read or cache_write to a lowered body: checks where
/// it stages, infers the tile every thread and inner iteration reads,
/// allocates it, builds the cooperative copy and places it.
fn stage_cache(cx: &mut Cx, c: &schedule::Cache, body: Vec<Stmt>) -> Result<Vec<Stmt>, Diagnostic> {
    let (at_block, scope) = check(cx, c, &body)?;
    let tile = tile(cx, c, &scope)?;
    // A bounded tile's refusals come before the limits its bound would break.
    live_groups(cx, c, &tile, c.vec.max(1))?;
    let id = allocate(cx, c, &tile)?;
    if let Some(n) = used_at_run_time(&tile).filter(|_| !c.kind.local()) {
        cx.dynamic.push((id, n));
    }
    let copy = copy(cx, c, &tile, id)?;
    if c.kind.write() {
        return Ok(place_write(c, body, at_block, &tile, id, copy.stmts));
    }
    if c.prefetch {
        return place_prefetch(cx, c, body, &tile, id, &copy);
    }
    let dtype = cx.k.tensor(c.tensor).dtype;
    let rewrite = |ex: &Expr| read_tile(c, &tile, id, dtype, ex);
    if c.stages > 1 {
        let (stmts, tma) = if c.tma {
            let t = tma::copy(cx, c, &tile, id, copy.stmts)?;
            (vec![t.copy], Some((t.bars, t.bytes)))
        } else {
            (copy.stmts, None)
        };
        cx.pipelined.push(Pipelined {
            at: c.at,
            stages: c.stages,
            copy: stmts,
            tma,
            name: c.name.clone(),
            span: c.span,
        });
        return Ok(at_loop(body, c.at, &mut |inner| {
            map_values(inner, &rewrite)
        }));
    }
    Ok(insert_fill(
        body,
        c.at,
        at_block,
        copy.stmts,
        &|inner| map_values(inner, &rewrite),
        !c.kind.local(),
    ))
}

/// `ex` with its reads of the cached tensor reading the tile instead.
/// A tile converted on the way (`dtype=`) reads as the tensor's type,
/// `held`: a cast of the tile's element, except under a cast that gives
/// the same value from either (every conversion into the tile is exact),
/// which then reads the tile directly: `f32(W[k, j])` of an i8 `W` staged
/// as f16 becomes `f32(tile)`, a product of f16 operands to a matrix
/// instruction.
fn read_tile(c: &schedule::Cache, tile: &Tile, id: u32, held: crate::DType, ex: &Expr) -> Expr {
    let dtype = c.dtype.unwrap_or(held);
    let at = |ix: &[Index]| {
        let ix: Vec<Index> = ix.iter().map(|i| fold_divmod(i, &tile.ranges)).collect();
        let index = tile.flat(&match &tile.strides {
            Some(s) => s.coords(&ix, &tile.varying),
            None => region_offsets(&ix, &tile.varying, &tile.lo),
        });
        let kind = if c.kind.local() {
            ExprKind::Local { local: id, index }
        } else {
            ExprKind::Shared { shared: id, index }
        };
        Expr { kind, dtype }
    };
    // Through a float either cast rounds the same number; to an integer,
    // from a float it saturates and from an integer it wraps.
    let same_through = |to: crate::DType| to.is_float() || held.is_float() == dtype.is_float();
    // (Unconverted, both arms read the tile as it is.)
    let ex = ex.rewrite(&|x: &Expr| match &x.kind {
        ExprKind::Cast(inner) if same_through(x.dtype) => match &inner.kind {
            ExprKind::Load { tensor, indices } if *tensor == c.tensor => {
                Some(at(indices).cast_to(x.dtype))
            }
            _ => None,
        },
        ExprKind::Load { tensor, indices } if *tensor == c.tensor => {
            Some(at(indices).cast_to(held))
        }
        _ => None,
    });
    if tile.data.iter().all(Option::is_none) {
        return ex;
    }
    ex.rewrite(&|x: &Expr| match &x.kind {
        ExprKind::Gather { tensor, indices } if *tensor == c.tensor => {
            let ix: Vec<Index> = indices
                .iter()
                .map(|e| e.map_indices(&|i| fold_divmod(i, &tile.ranges)))
                .map(|e| match &e.kind {
                    ExprKind::Index(ix) => ix.clone(),
                    _ => Index::c(0),
                })
                .collect();
            Some(at(&ix).cast_to(held))
        }
        _ => None,
    })
}

/// Where the cache stages its tile: refuses loops it cannot stage at, and
/// returns whether that is a block index and the statements it covers.
fn check(cx: &Cx, c: &schedule::Cache, body: &[Stmt]) -> Result<(bool, Vec<Stmt>), Diagnostic> {
    let nest = cx.nest;
    let err = |m: String| Diagnostic::new(c.span, m);
    let at_block = matches!(nest.var(c.at).kind, LoopKind::Bound(GpuAxis::Block(_)));
    let stages = c.stages.max(1);
    if stages > 1 && at_block {
        return Err(err(format!("`stages` overlaps the copies of a loop's iterations, but `{}` is bound to a block index: the tile is copied once", nest.var(c.at).name))
            .hint("stage the tile at a loop, e.g. the outer reduction loop"));
    }
    if c.prefetch && at_block {
        return Err(err(format!("`prefetch` loads the next iteration's tile while this one computes, but `{}` is bound to a block index: the tile is copied once", nest.var(c.at).name))
            .hint("stage the tile at a loop, e.g. the outer reduction loop"));
    }
    if matches!(nest.var(c.at).kind, LoopKind::Bound(GpuAxis::Thread(_))) {
        return Err(err(format!(
            "`{}` is bound to threads; stage the tile at a serial loop or at a blockIdx loop",
            nest.var(c.at).name
        )));
    }
    let scope = scope_of(body, c.at, at_block).ok_or_else(|| {
        err(format!(
            "loop `{}` is not in the kernel's body",
            nest.var(c.at).name
        ))
    })?;
    if !c.kind.local() && !at_block {
        divergence_check(body, c.at, cx.vars, &err)?;
    }
    Ok((at_block, scope))
}

/// The box of the tensor the statements in `scope` read (or write) that
/// the cache serves.
fn tile(cx: &Cx, c: &schedule::Cache, scope: &[Stmt]) -> Result<Tile, Diagnostic> {
    let (k, nest) = (cx.k, cx.nest);
    let t = k.tensor(c.tensor);
    let err = |m: String| Diagnostic::new(c.span, m);
    // A shared tile serves every thread of the work-group; a local one only its own.
    let mut varying: Vec<VarId> = if c.kind.local() {
        Vec::new()
    } else {
        nest.order
            .iter()
            .copied()
            .filter(|v| matches!(nest.var(*v).kind, LoopKind::Bound(GpuAxis::Thread(_))))
            .collect()
    };
    walk(scope, &mut |s| {
        if let Stmt::Loop { var, .. } = s {
            varying.push(*var);
        }
    });
    let loads = if c.kind.write() {
        let mut stores = Vec::new();
        walk(scope, &mut |s| match s {
            Stmt::Store {
                tensor, indices, ..
            } if *tensor == c.tensor => stores.push(indices.clone()),
            _ => {}
        });
        stores
    } else {
        loads_of(scope, c.tensor)
    };
    let gathers = if c.kind.write() {
        Vec::new()
    } else {
        gathers_of(scope, c.tensor)
    };
    // `(po * 16 + pi) / 16` is `po` while `pi` stays below 16: a paged
    // cache's page is the same over the page's rows.
    let ranges = var_ranges(cx.vars, &varying);
    let loads: Vec<Vec<Index>> = loads
        .iter()
        .map(|l| l.iter().map(|i| fold_divmod(i, &ranges)).collect())
        .collect();
    let gathers: Vec<Vec<Expr>> = gathers
        .iter()
        .map(|g| {
            g.iter()
                .map(|e| e.map_indices(&|i| fold_divmod(i, &ranges)))
                .collect()
        })
        .collect();
    let data = gathered_dims(cx, c, &loads, &gathers, &varying)?;
    // The gathered dimensions are one index wide: their place in the tile is 0.
    let loads: Vec<Vec<Index>> = loads
        .into_iter()
        .chain(gathers.iter().map(|g| {
            g.iter()
                .map(|e| match &e.kind {
                    ExprKind::Index(ix) => ix.clone(),
                    _ => Index::c(0),
                })
                .collect()
        }))
        .collect();
    refuse_inlined(k, t, &err)?;
    if loads.is_empty() {
        return Err(err(format!(
            "nothing inside `{}` {} `{}`",
            nest.var(c.at).name,
            if c.kind.write() { "writes" } else { "reads" },
            t.name
        )));
    }
    let boxed = infer_region(
        &t.name,
        t.shape.len(),
        &loads,
        &varying,
        &Place {
            vars: cx.vars,
            sizes: &k.size_names(),
            size_max: &k.sizes.iter().map(|s| s.max).collect::<Vec<_>>(),
            at: &nest.var(c.at).name,
        },
        &err,
    );
    let st = strided_tile(
        cx,
        c,
        &loads,
        (&varying, &ranges),
        &data,
        boxed.as_ref().ok(),
    );
    if let Some(t) = st {
        return Ok(t);
    }
    let Region {
        base,
        lo,
        size,
        live,
    } = boxed.map_err(|d| match t.kind {
        // The part a compute_at stage computes is a box too: say so, or
        // the user removes the cache and meets the same refusal again.
        TensorKind::Stage(s) if k.stage(s).compute_at().is_some() => d.hint(format!(
            "`{}` is computed at a loop of this stage (compute_at): its part is such a box as \
             well, so removing this `cache_read` alone does not help",
            t.name
        )),
        _ => d,
    })?;
    let n = size.len();
    check_transpose(c, &t.name, &live, &data)?;
    let mut padded = size.clone();
    // `pad` widens the tile's rows as they lie in LDS.
    let row = if c.transpose { n - 2 } else { n - 1 };
    padded[row] = padded[row].saturating_add(c.pad);
    let swizzle = swizzle_of(c, t, &size, &live, &data, &err)?;
    // Saturating: a product beyond i64 is refused by the size limits below.
    let elems: i64 = size.iter().fold(1i64, |a, b| a.saturating_mul(*b));
    let len: i64 = padded.iter().fold(1i64, |a, b| a.saturating_mul(*b));
    let (pack, transposed_swizzle) = transposed::layout(c, &size, tile_dtype(c, t).size() as i64);
    let stages = c.stages.max(1);
    let slot = if stages > 1 {
        (Index::Var(c.at) % Index::c(i64::from(stages))) * Index::c(len)
    } else {
        Index::c(0)
    };
    Ok(Tile {
        varying,
        ranges,
        base,
        lo,
        size,
        live,
        data,
        padded,
        swizzle,
        elems,
        len,
        slot,
        strides: None,
        transposed: c.transpose,
        pack,
        transposed_swizzle,
    })
}

/// `transpose=1` swaps a tile's last two dimensions: refused for a tile
/// of fewer, or one that a loop of run-time extent or a gather spans.
fn check_transpose(
    c: &schedule::Cache,
    name: &str,
    live: &[Option<Index>],
    data: &[Option<Expr>],
) -> Result<(), Diagnostic> {
    let why = match live.len() {
        _ if !c.transpose => return Ok(()),
        0 | 1 => "fewer than two dimensions",
        _ if live.iter().any(Option::is_some) || data.iter().any(Option::is_some) => {
            "a dimension spanned by a loop of run-time extent, or a gathered one"
        }
        _ => return Ok(()),
    };
    Err(Diagnostic::new(
        c.span,
        format!("`transpose=1` swaps the last two dimensions of a tile of constant extents; the tile of `{name}` has {why}"),
    ))
}

/// A tensor inlined into its readers has no tile to copy: refused, naming
/// what to cache instead.
fn refuse_inlined(
    k: &Kernel,
    t: &crate::kernel::Tensor,
    err: &dyn Fn(String) -> Diagnostic,
) -> Result<(), Diagnostic> {
    match t.kind {
        TensorKind::Stage(s) if k.stage(s).is_inlined() => Err(err(format!(
            "`{}` is inlined into its readers (compute_inline): no loop reads it from memory, \
             so there is no tile of it to copy",
            t.name
        ))
        .hint(format!(
            "remove this `cache_read`, or cache the tensors `{}` reads instead",
            t.name
        ))),
        _ => Ok(()),
    }
}

/// A register tile of strided reads ([`strided::strided`]), where it is
/// smaller than their box or the box spans loops of symbolic extent
/// (which a register tile cannot index): a row's passes over 16 of a
/// thread's elements, 1024 apart, keep those 16 in registers.
fn strided_tile(
    cx: &Cx,
    c: &schedule::Cache,
    loads: &[Vec<Index>],
    (varying, ranges): (&[VarId], &[(VarId, i64)]),
    data: &[Option<Expr>],
    boxed: Option<&Region>,
) -> Option<Tile> {
    let plain = c.kind == schedule::CacheKind::ReadLocal
        && c.pad == 0
        && c.swizzle.is_none()
        && c.stages <= 1
        && !c.prefetch
        && data.iter().all(Option::is_none);
    if !plain {
        return None;
    }
    let size_max: Vec<u64> = cx.k.sizes.iter().map(|s| s.max).collect();
    let (base, strides) = strided::strided(loads, varying, cx.vars, &size_max, c.vec.max(1))?;
    let size = strides.size();
    let elems: i64 = size.iter().product();
    let smaller = boxed.is_none_or(|r| {
        r.live.iter().any(Option::is_some) || r.size.iter().product::<i64>() > elems
    });
    smaller.then(|| Tile {
        varying: varying.to_vec(),
        ranges: ranges.to_vec(),
        lo: vec![0; size.len()],
        live: vec![None; size.len()],
        data: data.to_vec(),
        padded: size.clone(),
        swizzle: None,
        elems,
        len: elems,
        slot: Index::c(0),
        strides: Some(strides),
        transposed: false,
        pack: 1,
        transposed_swizzle: None,
        base,
        size,
    })
}

/// The `swizzle=` layout of a tile of `size` elements: (elements per
/// 16-byte chunk, span in bytes), or a refusal naming what does not fit.
fn swizzle_of(
    c: &schedule::Cache,
    t: &crate::kernel::Tensor,
    size: &[i64],
    live: &[Option<Index>],
    data: &[Option<Expr>],
    err: &dyn Fn(String) -> Diagnostic,
) -> Result<Option<(i64, i64)>, Diagnostic> {
    let Some(span) = c.swizzle else {
        return Ok(None);
    };
    let n = size.len();
    let dtype = tile_dtype(c, t);
    let esize = dtype.size() as i64;
    let rows: i64 = size[..n - 1].iter().product();
    let bad = if (size[n - 1] * esize) % span != 0 {
        Some(format!(
            "its rows are {} elements of {} ({} bytes), not a multiple of {span} bytes",
            size[n - 1],
            dtype,
            size[n - 1] * esize
        ))
    } else if rows % 8 != 0 {
        Some(format!("it has {rows} rows, not a multiple of 8"))
    } else if live.iter().any(Option::is_some) || data.iter().any(Option::is_some) {
        Some("it is sized at launch or gathered".to_string())
    } else {
        None
    };
    if let Some(b) = bad {
        return Err(err(format!("`swizzle={span}` cannot lay out the tile of `{}`: {b}", t.name))
            .hint(format!("stage a multiple of {span} bytes of the last dimension ({} f16, {span} f8) by a multiple of 8 rows", span / 2)));
    }
    Ok(Some((swizzle::CHUNK_BYTES / esize, span)))
}

/// The type of the elements cache `c` of `t` holds: `dtype=`'s, else
/// the tensor's.
fn tile_dtype(c: &schedule::Cache, t: &crate::kernel::Tensor) -> crate::DType {
    c.dtype.unwrap_or(t.dtype)
}

/// The tile's array (its buffers) in registers or LDS, within their limits.
fn allocate(cx: &mut Cx, c: &schedule::Cache, tile: &Tile) -> Result<u32, Diagnostic> {
    let t = cx.k.tensor(c.tensor);
    let err = |m: String| Diagnostic::new(c.span, m);
    let (lds_len, stages) = (tile.len, c.stages.max(1));
    if c.kind.local() {
        if lds_len > MAX_ACCUMULATORS {
            return Err(err(format!("the register tile of `{}` needs {lds_len} elements per thread; at most {MAX_ACCUMULATORS} are allowed", t.name)).hint("stage it at an inner loop"));
        }
        return Ok(cx.registers(c, "", tile_dtype(c, t), lds_len));
    }
    let used: i64 = cx.shared.iter().map(|s| s.bytes() as i64).sum();
    let bytes = lds_len
        .saturating_mul(i64::from(stages))
        .saturating_mul(tile_dtype(c, t).size() as i64);
    if used.saturating_add(bytes) > MAX_LDS {
        let what = if stages > 1 {
            format!("{stages} buffers of the tile of `{}` need", t.name)
        } else {
            format!("the tile of `{}` needs", t.name)
        };
        return Err(err(format!("{what} {bytes} bytes of LDS; with the rest of the kernel that exceeds the {MAX_LDS} bytes of any AMDGPU")).hint(if stages > 1 { "use fewer stages or smaller tiles" } else { "use smaller tiles" }));
    }
    cx.shared.push(Local {
        name: c.name.clone(),
        dtype: tile_dtype(c, t),
        len: (lds_len * i64::from(stages)) as u32,
        span: c.span,
    });
    Ok(cx.shared.len() as u32 - 1)
}
