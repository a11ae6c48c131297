//! `cache_read(..., swizzle=128, stages=N, tma=1)`: the tile's buffers are
//! filled by Hopper's tensor memory accelerator rather than by every
//! thread's share of `cp.async`.
//!
//! One thread issues a `cp.async.bulk.tensor` per column block of the
//! tile (the accelerator's 128-, 64- and 32-byte swizzles are the layouts
//! `swizzle=128`, `64` and `32` give each block), the runtime describes the
//! tensor in a tensor map, and each buffer has an mbarrier the copies
//! complete: the readers wait on it instead of on their own copy groups.
//! The pipeline ([`pipeline_loop`]) keeps the shape of the `cp.async` one.

use super::{Cx, Tile};
use crate::diag::Diagnostic;
use crate::index::{Index, VarId};
use crate::kernel::{BinOp, Expr, ExprKind, Kernel, ReduceOp};
use crate::loops::{Local, Stmt};
use crate::loops::{Mbarrier, TensorMap};
use crate::schedule::{self, Guard};
use crate::DType;

/// A tile's copy by the accelerator, before [`pipeline_loop`] places it.
pub(super) struct TmaCopy {
    /// The copy statement (its coordinates and buffer in terms of the
    /// cache's loop variable, substituted per iteration).
    pub copy: Stmt,
    /// Bytes one copy of the tile moves (what the mbarrier expects).
    pub bytes: u32,
    /// The LDS array of the loop's mbarriers, one per buffer.
    pub bars: u32,
}

/// Checks that the accelerator can copy the tile of `c` and builds its
/// copy: `fills`, every thread's share of it, is its meaning elsewhere.
pub(super) fn copy(
    cx: &mut Cx,
    c: &schedule::Cache,
    tile: &Tile,
    id: u32,
    fills: Vec<Stmt>,
) -> Result<TmaCopy, Diagnostic> {
    let k = cx.k;
    let t = k.tensor(c.tensor);
    let err = |m: String| Diagnostic::new(c.span, m);
    let target = cx
        .unit
        .map_or_else(|| "the target".to_string(), |u| u.gpu().to_string());
    if cx.nest.matrix.is_none() {
        return Err(err(format!(
            "`tma=1` stages operand tiles of a matrix product (`mma`), whose lowering knows the target, and this stage has none (`{}`)",
            t.name
        ))
        .hint("drop `tma=1`"));
    }
    if !cx.unit.is_some_and(|u| u.has_tensor_copies()) {
        let why = match cx.unit.and_then(|u| u.gpu().nvidia().cloned()) {
            Some(n) if n.compute_capability() >= (9, 0) => format!(
                "which rocmc's {target} code (PTX {}) cannot use: it needs PTX 8.0",
                n.ptx_text()
            ),
            _ => format!("which {target} does not have"),
        };
        return Err(err(format!(
            "`tma=1` fills the tile of `{}` with the tensor memory accelerator, {why}",
            t.name
        ))
        .hint("the accelerator is Hopper's (`--mcpu sm_90a`); drop `tma=1` to copy with `cp.async` (sm_80 and later) or loads"));
    }
    let n = tile.size.len();
    let esize = t.dtype.size() as i64;
    let span = c.swizzle.unwrap_or(super::swizzle::ROW_BYTES);
    let inner = span / esize;
    let outer = &tile.size[..n - 1];
    // Checked by the swizzle: 128-byte multiples of the last dimension, a
    // multiple of 8 rows, no gathers, nothing sized at launch.
    if n > 5 || outer.iter().any(|s| *s > 256) {
        return Err(err(format!(
            "the tensor memory accelerator copies boxes of up to 5 dimensions of at most 256 elements each; the tile of `{}` is {:?}",
            t.name, tile.size
        ))
        .hint("stage a smaller tile"));
    }
    let divs = k.size_divisors();
    // Every dimension's stride in memory must be a multiple of 16 bytes:
    // the rows' length, the others being multiples of it.
    if n > 1 {
        let row = t.shape[n - 1].known_divisor_in(&divs) as i64 * esize;
        if row % 16 != 0 {
            return Err(err(format!(
                "the tensor memory accelerator needs the rows of `{}` to be a multiple of 16 bytes long, and its last extent is only known to be a multiple of {} element(s) of {}",
                t.name,
                row / esize,
                t.dtype
            ))
            .hint(format!(
                "declare it in [kernel]: `divisible = {{ NAME = {} }}` for the size of its last dimension",
                16 / esize.min(16)
            )));
        }
    }
    // Each box's first element is 16-byte aligned along the rows: an
    // unaligned start faulted on the H100 (illegal instruction,
    // bench/gpu/runs/h100-tma-2).
    if (tile.base[n - 1].known_divisor_in(&divs) as i64 * esize) % 16 != 0 {
        return Err(err(format!(
            "the tensor memory accelerator copies boxes whose first element is 16-byte aligned along the rows, and the tiles of `{}` start at columns not known to be multiples of {} element(s)",
            t.name,
            16 / esize.min(16)
        ))
        .hint("stage the tile at a loop whose tiles start on multiples of 16 bytes of the last dimension (a split of it, say)"));
    }
    let mut boxed: Vec<u32> = outer.iter().map(|s| *s as u32).collect();
    boxed.push(inner as u32);
    let map = cx
        .tensor_maps
        .iter()
        .position(|m| m.tensor == c.tensor && m.boxed == boxed && i64::from(m.swizzle) == span)
        .unwrap_or_else(|| {
            cx.tensor_maps.push(TensorMap {
                tensor: c.tensor,
                boxed,
                swizzle: span as u32,
            });
            cx.tensor_maps.len() - 1
        }) as u32;
    let bars = bars_at(cx, c);
    let stages = i64::from(c.stages);
    let buffer = Index::Var(c.at) % Index::c(stages);
    let start = tile.flat(&vec![Index::c(0); n]);
    let bytes = tile.elems * esize;
    Ok(TmaCopy {
        copy: Stmt::TensorCopy {
            tensor: c.tensor,
            map,
            coords: tile.base.clone(),
            boxes: (tile.size[n - 1] / inner) as u32,
            shared: id,
            start,
            bar: (bars, buffer),
            fills,
        },
        bytes: bytes as u32,
        bars,
    })
}

/// The LDS array of the mbarriers of the caches at `c`'s loop (one per
/// buffer), made by the first of them.
fn bars_at(cx: &mut Cx, c: &schedule::Cache) -> u32 {
    if let Some((_, id)) = cx.bars.iter().find(|(at, _)| *at == c.at) {
        return *id;
    }
    cx.shared.push(Local {
        name: format!("{}_bars", cx.nest.var(c.at).name),
        dtype: crate::DType::I64,
        len: c.stages,
        span: c.span,
    });
    let id = cx.shared.len() as u32 - 1;
    cx.bars.push((c.at, id));
    id
}

/// The loop `var` with its tiles filled by the accelerator, `n_ahead`
/// tiles ahead, `stages` buffers:
///
/// ```text
/// init each buffer's mbarrier; barrier
/// for s in 0..n_ahead: if s < n { expect(bar[s], bytes); copy tile s }
/// for ko in 0..n:
///     wait(bar[ko % N], parity ko / N % 2); barrier
///     if ko + n_ahead < n { expect(bar[(ko + n_ahead) % N]); copy tile ko + n_ahead }
///     compute on buffer ko % N
/// barrier; invalidate the mbarriers
/// ```
///
/// The barrier after the wait orders every thread's reads of the buffer
/// the next copy overwrites (read an iteration, or with matrix
/// instructions in flight two, before) ahead of that copy, as in the
/// `cp.async` pipeline; the mbarrier makes the accelerator's writes
/// visible, which `cp.async`'s wait and the barrier did there.
#[allow(clippy::too_many_arguments)]
pub(super) fn pipeline_loop(
    var: VarId,
    extent: Index,
    unroll: bool,
    inner: Vec<Stmt>,
    stages: u32,
    n_ahead: i64,
    bars: u32,
    bytes: u32,
    copies_for: &dyn Fn(Index) -> Vec<Stmt>,
) -> Vec<Stmt> {
    let bar = |i: Index| (bars, i);
    let n = i64::from(stages);
    let mut out: Vec<Stmt> = (0..n)
        .map(|s| {
            Stmt::Mbarrier(Mbarrier::Init {
                bar: bar(Index::c(s)),
            })
        })
        .collect();
    out.push(Stmt::Barrier);
    let issue = |iter: Index| {
        let mut b = vec![Stmt::Mbarrier(Mbarrier::Expect {
            bar: bar(iter.clone() % Index::c(n)),
            bytes,
        })];
        b.extend(copies_for(iter.clone()));
        Stmt::If {
            guards: vec![Guard {
                value: iter,
                extent: extent.clone(),
            }],
            body: b,
        }
    };
    for s in 0..n_ahead {
        out.push(issue(Index::c(s)));
    }
    let ko = Index::Var(var);
    let mut b = vec![
        Stmt::Mbarrier(Mbarrier::Wait {
            bar: bar(ko.clone() % Index::c(n)),
            parity: (ko.clone() / Index::c(n)) % Index::c(2),
        }),
        Stmt::Barrier,
        issue(ko + Index::c(n_ahead)),
    ];
    b.extend(inner);
    out.push(Stmt::Loop {
        var,
        extent,
        unroll,
        body: b,
    });
    out.push(Stmt::Barrier);
    out.extend((0..n).map(|s| {
        Stmt::Mbarrier(Mbarrier::Inval {
            bar: bar(Index::c(s)),
        })
    }));
    out
}

/// A thread's share of a `tma=1` tile as the accelerator writes it: the
/// `vec` elements from tile offsets `offs` on, each the tensor's element
/// where it lies inside the tensor and zero past it (the loads clamped,
/// so that none leaves the tensor). This is the copy's meaning where it
/// runs as fills, exact beyond the tensor's edges too.
pub(super) fn zero_filled(
    k: &Kernel,
    c: &schedule::Cache,
    tile: &Tile,
    id: u32,
    offs: &[Index],
    vec: i64,
) -> Vec<Stmt> {
    let t = k.tensor(c.tensor);
    let n = offs.len();
    let int = |ix: Index| Expr {
        kind: ExprKind::Index(ix),
        dtype: DType::I32,
    };
    (0..vec)
        .map(|l| {
            let mut at = offs.to_vec();
            at[n - 1] = at[n - 1].clone() + Index::c(l);
            let global: Vec<Index> = (0..n)
                .map(|d| tile.base[d].clone() + at[d].clone())
                .collect();
            let inside = global
                .iter()
                .zip(&t.shape)
                .map(|(g, ext)| Expr {
                    kind: ExprKind::Binary(
                        BinOp::Lt,
                        Box::new(int(g.clone())),
                        Box::new(int(ext.clone())),
                    ),
                    dtype: DType::Bool,
                })
                .reduce(|a, b| Expr {
                    kind: ExprKind::Binary(BinOp::And, Box::new(a), Box::new(b)),
                    dtype: DType::Bool,
                })
                .expect("a tensor has dimensions");
            let load = Expr {
                kind: ExprKind::Load {
                    tensor: c.tensor,
                    indices: global
                        .iter()
                        .zip(&t.shape)
                        .map(|(g, ext)| super::clamp_into(k, g.clone(), ext))
                        .collect(),
                },
                dtype: t.dtype,
            };
            Stmt::SharedStore {
                shared: id,
                index: tile.flat(&at),
                value: Expr {
                    kind: ExprKind::Select(
                        Box::new(inside),
                        Box::new(load),
                        Box::new(ReduceOp::Sum.identity(t.dtype)),
                    ),
                    dtype: t.dtype,
                },
            }
        })
        .collect()
}
