//! Matrix instructions: the part of pass `nest` that turns a stage whose
//! schedule has an `mma` step into fragment loads, [`Stmt::Matrix`] and the
//! stores of the accumulator fragments; and, for the CPU, [`expand`], which
//! executes each matrix instruction as a wave does, through the
//! instruction's own lane layout.
//!
//! Lowering for a wave of `W` lanes: the lane is `threadIdx.x`; element `e`
//! of lane `l`'s A fragment is the operand at (row, k) = `a_at(l, e)`, as
//! index expressions of the lane (divisions and remainders by powers of
//! two). Out-of-range rows and columns load clamped values (their results
//! are never stored); out-of-range k contributes zero.

use super::body::{clamp_loads, Frame};
use super::{inline_producers, Lowering, Stmt};
use crate::diag::Diagnostic;
use crate::index::{IOp, Index, VarId};
use crate::kernel::{BinOp, Expr, ExprKind, ReduceOp, TensorId};
use crate::loops::Local;
use crate::schedule::{Guard, LoopNest};
use crate::DType;
use rocmc_target::matrix::{LaneCoord, MatrixInstr};

pub use crate::mtype::{f8_types, instr_id, mtype, MatrixUnit};

mod check;
mod emit;
mod expand;

use check::{choose, fragments, operands};
use emit::Emit;
pub use expand::{expand, lane_xor, uses_matrix, Exchange};

fn describe(list: &[&MatrixInstr]) -> String {
    let mut v: Vec<String> = list
        .iter()
        .map(|i| {
            format!(
                "{} ({}x{}x{}, {} x {} -> {})",
                instr_id(i),
                i.m,
                i.n,
                i.k,
                i.a,
                i.b,
                i.acc
            )
        })
        .collect();
    v.dedup();
    v.join(", ")
}

/// Whether the copy of cache `c` fills its tile with zeros past the tensor
/// ([`Stmt::Fill`]'s `zero`), so that a matrix operand read from it needs no
/// select for k's tail: a read tile staged at a k loop of a stage with
/// `mma`, on a target that zero-fills ([`MatrixUnit::zero_fills_k_tiles`]).
/// The one rule, for pass `caches` (which fills) and pass `matrix` (which
/// leaves out the selects).
pub(crate) fn zero_filled(
    st: &crate::kernel::Stage,
    nest: &LoopNest,
    unit: Option<&MatrixUnit>,
    c: &crate::plan::Cache,
) -> bool {
    nest.matrix.is_some()
        && unit.is_some_and(MatrixUnit::zero_fills_k_tiles)
        // Matrices only (a batched one's batch subscripts are fixed in the
        // tile): a convolution's 4-D tiles, zeroed, compared every index of
        // every element in the copy and spilled on gfx1100 (conv2d_f16: 256
        // VGPRs, 3 spilled).
        && moving_dims(st, nest, c) <= 2
        && !c.kind.write()
        && !c.tma
        && nest.var(c.at).reduce
        // Every loop inside it of constant extent: the tile is copied
        // whole, never only its reached part (which would leave stale
        // elements where zeros are meant).
        && nest
            .order
            .iter()
            .skip_while(|v| **v != c.at)
            .all(|v| *v == c.at || nest.var(*v).extent.as_const().is_some())
}

/// The most subscripts of `c`'s tensor that any of the stage's reads moves
/// inside the loop the tile is staged at: the tile's dimensions longer
/// than one.
fn moving_dims(st: &crate::kernel::Stage, nest: &LoopNest, c: &crate::plan::Cache) -> usize {
    let inner: Vec<VarId> = nest
        .order
        .iter()
        .skip_while(|v| **v != c.at)
        .copied()
        .collect();
    // The stage's axes (reduction axes after its own) that move there.
    let moving: Vec<VarId> = (0..nest.axis_values.len())
        .map(|a| VarId(a as u32))
        .filter(|a| {
            let value = &nest.axis_values[a.0 as usize];
            inner.iter().any(|v| value.uses_var(*v))
        })
        .collect();
    let mut most = 0;
    let mut count = |t: crate::kernel::TensorId, ix: &[Index]| {
        if t == c.tensor {
            let n = ix
                .iter()
                .filter(|x| moving.iter().any(|a| x.uses_var(*a)))
                .count();
            most = most.max(n);
        }
    };
    st.value.visit_loads(&mut count);
    if let Some(r) = st.reduce() {
        r.body.visit_loads(&mut count);
    }
    most
}

/// Whether matrix operand `f` reads zero wherever k is out of range without
/// a select of its own: a load (or a cast of one) of a tensor whose tile at
/// one of the k loops `kloops` is [`zero_filled`].
fn reads_zero_filled(l: &Lowering, f: &Expr, kloops: &[VarId]) -> bool {
    match &f.kind {
        ExprKind::Cast(inner) => reads_zero_filled(l, inner, kloops),
        ExprKind::Load { tensor, .. } => l.nest.caches.iter().any(|c| {
            c.tensor == *tensor
                && kloops.contains(&c.at)
                && zero_filled(l.k.stage(l.sid), &l.nest, l.unit, c)
        }),
        _ => false,
    }
}

/// `c` as an index expression of `lane`.
pub(crate) fn coord(c: &LaneCoord, lane: &Index) -> Index {
    let mut ix = Index::c(i64::from(c.base));
    for t in &c.terms {
        let mut part = lane.clone();
        if t.div > 1 {
            part = Index::bin(IOp::Div, part, Index::c(i64::from(t.div)));
        }
        part = Index::bin(IOp::Mod, part, Index::c(i64::from(t.modulo)));
        ix = ix + part * Index::c(i64::from(t.scale));
    }
    ix
}

fn zero(t: DType) -> Expr {
    ReduceOp::Sum.identity(t)
}

fn bin(op: BinOp, a: Expr, b: Expr, dtype: DType) -> Expr {
    Expr {
        kind: ExprKind::Binary(op, Box::new(a), Box::new(b)),
        dtype,
    }
}

fn local(id: u32, index: Index, dtype: DType) -> Expr {
    Expr {
        kind: ExprKind::Local { local: id, index },
        dtype,
    }
}

/// A factor of the product with the cast to the accumulator type removed.
fn operand(f: &Expr, acc: DType) -> Expr {
    match &f.kind {
        ExprKind::Cast(inner) if f.dtype == acc => (**inner).clone(),
        _ => f.clone(),
    }
}

/// The lanes executing the stage's matrix instruction together: a
/// warpgroup's 128 where the step names a warpgroup instruction (`wgmma`)
/// or its loops have one's shape, else the target's wave.
pub(super) fn lanes(nest: &LoopNest, unit: &MatrixUnit) -> u32 {
    let Some(req) = &nest.matrix else {
        return unit.wave();
    };
    let ext = |v: VarId| nest.var(v).extent.as_const().unwrap_or(0) as u32;
    let shape = (ext(req.rows), ext(req.cols), ext(req.k));
    unit.group_instructions()
        .into_iter()
        .find(|i| match &req.instr {
            Some(n) => instr_id(i) == n.name,
            None => (i.m, i.n, i.k) == shape,
        })
        .map_or(unit.wave(), |i| i.wave)
}

/// Groups of warpgroup instructions (`wgmma`) left in flight at the end of
/// each iteration of `at`, the loop over tiles of k whose copies have
/// `stages` buffers: 1 where there are three or more (the copies then run
/// `stages - 2` tiles ahead, [`super::cache`]'s pipeline), so the tensor
/// cores work through the barrier and the next copies; else 0.
///
/// Every tile staged at `at` must have the buffers: a pipelined one three,
/// a prefetched one two (it is stored at the top of the next iteration,
/// after the barrier that follows every thread's wait, into the buffer
/// the retired group read). With fewer (`prefetch=1`'s single buffer) the
/// store would land under the group still in flight, which the race check
/// reports (`Races::matrix_async`).
pub(super) fn group_lag(nest: &LoopNest, unit: &MatrixUnit, at: VarId, stages: u32) -> u32 {
    let outer_k = nest.order.iter().copied().find(|v| nest.var(*v).reduce);
    let buffered = nest
        .caches
        .iter()
        .filter(|c| c.at == at && !c.kind.write() && !c.kind.local())
        .all(|c| c.stages >= if c.prefetch { 2 } else { 3 });
    u32::from(lanes(nest, unit) > unit.wave() && stages >= 3 && outer_k == Some(at) && buffered)
}

/// What pass `nest` hands over for a stage with `mma`.
pub(super) struct Stage<'a> {
    pub loops: &'a [VarId],
    pub guards: &'a [Guard],
    pub cached: &'a [TensorId],
    pub rbody: Expr,
    pub value: Expr,
    pub indices: Vec<Index>,
    pub output: TensorId,
    /// The combiner of a plain reduction (`None` for the other kinds).
    pub op: Option<ReduceOp>,
    /// Threads per block in y and z (the waves), and their loops.
    pub waves: [(u32, Option<VarId>); 2],
}

impl<'r> Stage<'r> {
    /// What the `matrix` pass needs of a stage with `mma`, in the frame
    /// pass `nest` left.
    fn new(
        l: &Lowering,
        f: &'r Frame,
        red: &crate::kernel::Reduction,
        guards: &'r [Guard],
    ) -> Stage<'r> {
        let stage = l.k.stage(l.sid);
        Stage {
            loops: &f.loops,
            guards,
            cached: &f.cached,
            rbody: inline_producers(l.k, l.sid, &red.body).map_indices(&|ix| ix.subst(&f.subst)),
            value: f.value.clone(),
            indices: f.indices.clone(),
            output: stage.output,
            op: red.plain(),
            waves: [1, 2].map(|d| (f.block[d], f.thread_vars[d])),
        }
    }
}

/// Pass `matrix`: the body of a stage with `mma`, in the region pass
/// `nest` left; a no-op for other stages.
pub(super) fn run(l: &mut Lowering) -> Result<(), Diagnostic> {
    let Some(r) = l.region.take() else {
        return Ok(());
    };
    let stage = l.k.stage(l.sid);
    let Some(red) = stage.reduce() else {
        return Err(Diagnostic::new(
            l.nest.matrix.as_ref().map(|m| m.span).unwrap_or_default(),
            format!(
                "`mma` needs a matrix product; stage `{}` has no reduction",
                stage.name
            ),
        )
        .hint("write the stage as `C[i, j] = sum(A[i, k] * B[k, j], k)`"));
    };
    let guards = l.nest.guards.clone();
    let (stmts, locals) = lower(l, Stage::new(l, &r, red, &guards))?;
    let mut body = r.binds().to_vec();
    body.extend(stmts);
    l.g.body = body;
    l.g.locals = locals;
    Ok(())
}

/// The body of a stage with `mma`, and its register arrays: the checks
/// ([`operands`], [`choose`], [`fragments`]), then [`Emit`].
fn lower(l: &Lowering, st: Stage) -> Result<(Vec<Stmt>, Vec<Local>), Diagnostic> {
    let nest: &LoopNest = &l.nest;
    let req = nest.matrix.as_ref().expect("a stage with mma");
    let stage = l.k.stage(l.sid);
    let Some(unit) = l.unit else {
        return Err(Diagnostic::new(
            req.span,
            "`mma` maps this stage onto a target's matrix instructions, and no target with them was given",
        )
        .hint("compile it for a GPU with matrix instructions (gfx908, gfx90a, gfx942, gfx950, gfx11, gfx12, sm_80 and later); on the CPU, `--emulate PROCESSOR` runs that processor's matrix instructions"));
    };
    let (fa, fb, acc_t) = operands(l, &st)?;
    let instr = choose(l, unit, &fa, &fb, acc_t)?;
    let threads = instr.wave * st.waves[0].0 * st.waves[1].0;
    if threads > rocmc_target::MAX_THREADS_PER_BLOCK {
        return Err(Diagnostic::new(
            req.span,
            format!(
                "{} waves of {} lanes make {threads} threads per block; the limit is {}",
                st.waves[0].0 * st.waves[1].0,
                instr.wave,
                rocmc_target::MAX_THREADS_PER_BLOCK
            ),
        )
        .hint("bind fewer waves to threadIdx.y and threadIdx.z"));
    }

    let f = fragments(l, &st, &fa, &fb, instr)?;
    let (n_acc, n_a, n_b) = (f.n[0], f.n[1], f.n[2]);
    let (pc, pa, pb) = (f.per_lane[0], f.per_lane[1], f.per_lane[2]);
    // The guards on reduction loops: out-of-range k reads as zero.
    let kguards: Vec<&Guard> = st
        .guards
        .iter()
        .filter(|g| {
            (0..nest.vars.len() as u32)
                .any(|v| nest.vars[v as usize].reduce && g.value.uses_var(VarId(v)))
        })
        .collect();
    let tail = tail_instr(l, unit, instr, &kguards, &f.kloops, req.span)?;
    let mut locals = vec![
        Local {
            name: format!("{}_acc", stage.name),
            dtype: acc_t,
            len: (n_acc * pc) as u32,
            span: stage.span,
        },
        Local {
            name: format!("{}_a", stage.name),
            dtype: fa.dtype,
            len: (n_a * pa) as u32,
            span: req.span,
        },
        Local {
            name: format!("{}_b", stage.name),
            dtype: fb.dtype,
            len: (n_b * pb) as u32,
            span: req.span,
        },
    ];
    if let Some(t) = tail {
        locals.push(Local {
            name: format!("{}_tail_a", stage.name),
            dtype: fa.dtype,
            len: n_a as u32 * t.a_per_lane(),
            span: req.span,
        });
        locals.push(Local {
            name: format!("{}_tail_b", stage.name),
            dtype: fb.dtype,
            len: t.b_per_lane(),
            span: req.span,
        });
    }

    // Operands: loads clamped into range, out-of-range k as zero.
    let guarded: Vec<VarId> = (0..nest.vars.len() as u32)
        .map(VarId)
        .filter(|v| st.guards.iter().any(|g| g.value.uses_var(*v)))
        .collect();
    let clamp_in = |e: &Expr, cached: &[TensorId]| -> Expr {
        match clamp_loads(
            l.k,
            Stmt::LocalStore {
                local: 0,
                index: Index::c(0),
                value: e.clone(),
            },
            &guarded,
            cached,
        ) {
            Stmt::LocalStore { value, .. } => value,
            _ => unreachable!("clamp_loads keeps the statement"),
        }
    };
    let clamp = |e: &Expr| clamp_in(e, st.cached);
    // The partial tile of a warpgroup instruction runs after the k loop,
    // outside the tiles' scope: it reads the tensors themselves, clamped.
    let whole = (clamp_in(&fa, &[]), clamp_in(&fb, &[]));
    let filled = (
        reads_zero_filled(l, &fa, &f.kloops),
        reads_zero_filled(l, &fb, &f.kloops),
    );
    let (fa, fb) = (clamp(&fa), clamp(&fb));
    let e = Emit {
        l,
        st: &st,
        unit,
        instr,
        acc_t,
        fa,
        fb,
        f,
        kguards,
        lane: Index::Var(req.lane),
        tail,
        whole,
        filled,
    };
    Ok((e.body(), locals))
}

/// For an instruction reading A and B from LDS (`wgmma`), the warp's
/// instruction that runs a k tail instead: a tile of k partly out of range
/// needs its operands zeroed there, which registers allow and a shared
/// tile does not — unless the accelerator filled it (`tma=1`), with zeros
/// past the tensor, when there is no tail. `mma.sync.m16n8k16`'s accumulator is exactly a warp's
/// 16 rows of `wgmma`'s, 8 columns at a time, so it accumulates in place.
///
/// 8-bit floats have none in the PTX version rocmc writes for sm_90a
/// (8.0; `mma.sync` on e4m3/e5m2 needs 8.4): there the sizes must make
/// every tile of k whole, by a `divisible` fact, and `None` is returned.
fn tail_instr(
    l: &Lowering,
    unit: &MatrixUnit,
    instr: &MatrixInstr,
    kguards: &[&Guard],
    kloops: &[VarId],
    span: crate::diag::Span,
) -> Result<Option<&'static MatrixInstr>, Diagnostic> {
    if !instr.warpgroup() {
        return Ok(None);
    }
    let nest = &l.nest;
    // Tiles the tensor memory accelerator fills hold zeros past K: a
    // partial tile of k runs on the warpgroup instruction like the others.
    if kloops
        .first()
        .is_some_and(|k0| nest.caches.iter().any(|c| c.at == *k0 && c.tma))
    {
        return Ok(None);
    }
    let warp = unit.instructions().into_iter().find(|i| {
        i.family == rocmc_target::matrix::Family::MmaSync
            && (i.a, i.b, i.acc, i.k, i.m, i.n) == (instr.a, instr.b, instr.acc, instr.k, 16, 8)
    });
    if warp.is_some() {
        return Ok(warp);
    }
    let req = nest.matrix.as_ref().expect("a stage with mma");
    let tile: i64 = kloops
        .iter()
        .skip(1)
        .chain([&req.k])
        .map(|v| nest.var(*v).extent.as_const().unwrap_or(0))
        .product();
    let divs = l.k.size_divisors();
    let whole = kguards
        .iter()
        .all(|g| tile > 0 && g.extent.known_divisor_in(&divs) % tile as u64 == 0);
    if whole {
        return Ok(None);
    }
    Err(Diagnostic::new(
        span,
        format!(
            "{unit} has no warp instruction to run {}'s partial tiles of k, and the sizes do not rule them out",
            instr.name
        ),
    )
    .hint(format!(
        "declare the summed size a multiple of the k tile in [kernel]: `divisible = {{ K = {tile} }}`"
    )))
}
