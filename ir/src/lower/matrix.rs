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

use super::body::{build, clamp_loads, Frame};
use super::{inline_producers, region, Lowering, Stmt};
use crate::diag::Diagnostic;
use crate::index::{IOp, Index, VarId};
use crate::kernel::{BinOp, Expr, ExprKind, ReduceOp, TensorId};
use crate::loops::{GpuKernel, Local};
use crate::schedule::{Guard, LoopNest};
use crate::DType;
use rocmc_target::matrix::{LaneCoord, MatrixInstr};
use std::collections::HashMap;

pub use crate::mtype::{f8_types, instr_id, mtype, MatrixUnit};

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

fn expr_uses(e: &Expr, v: VarId) -> bool {
    let found = std::cell::Cell::new(false);
    e.map_indices(&|ix| {
        if ix.uses_var(v) {
            found.set(true);
        }
        ix.clone()
    });
    found.get()
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
pub(super) fn group_lag(nest: &LoopNest, unit: &MatrixUnit, at: VarId, stages: u32) -> u32 {
    let outer_k = nest.order.iter().copied().find(|v| nest.var(*v).reduce);
    u32::from(lanes(nest, unit) > unit.wave() && stages >= 3 && outer_k == Some(at))
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
    pub op: ReduceOp,
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
            op: red.op,
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
    let Some(red) = &stage.reduce else {
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
    let kg: Vec<&Guard> = st
        .guards
        .iter()
        .filter(|g| {
            (0..nest.vars.len() as u32)
                .any(|v| nest.vars[v as usize].reduce && g.value.uses_var(VarId(v)))
        })
        .collect();
    let tail = tail_instr(l, unit, instr, &kg, &f.kloops, req.span)?;
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
    let kguards: Vec<&Guard> = st
        .guards
        .iter()
        .filter(|g| {
            (0..nest.vars.len() as u32)
                .any(|v| nest.vars[v as usize].reduce && g.value.uses_var(VarId(v)))
        })
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

/// The two factors of a sum of products, A's (varying with the rows)
/// first, without their casts to the accumulator type; and that type.
fn operands(l: &Lowering, st: &Stage) -> Result<(Expr, Expr, DType), Diagnostic> {
    let nest = &l.nest;
    let req = nest.matrix.as_ref().expect("a stage with mma");
    let stage = l.k.stage(l.sid);
    let name = |v: VarId| nest.var(v).name.clone();
    let (ri, rj) = (req.rows, req.cols);
    if st.op != ReduceOp::Sum {
        return Err(Diagnostic::new(
            req.span,
            format!(
                "`mma` needs a sum of products; stage `{}` is a {} reduction",
                stage.name,
                st.op.name()
            ),
        ));
    }
    let acc_t = st.rbody.dtype;
    let ExprKind::Binary(BinOp::Mul, x, y) = &st.rbody.kind else {
        return Err(Diagnostic::new(
            req.span,
            format!("`mma` needs the reduction's body to be a product `A[i, k] * B[k, j]`; stage `{}` sums something else", stage.name),
        )
        .hint("casts around each factor are allowed: `sum(f32(A[i, k]) * f32(B[k, j]), k)`"));
    };
    // A varies with the rows, B with the columns.
    let (fa, fb) = if !expr_uses(x, rj) && !expr_uses(y, ri) {
        (operand(x, acc_t), operand(y, acc_t))
    } else if !expr_uses(y, rj) && !expr_uses(x, ri) {
        (operand(y, acc_t), operand(x, acc_t))
    } else {
        return Err(Diagnostic::new(
            req.span,
            format!(
                "one factor of the product must not depend on loop `{}` and the other not on loop `{}`",
                name(rj),
                name(ri)
            ),
        ));
    };
    Ok((fa, fb, acc_t))
}

/// The matrix instruction for `fa x fb -> acc_t`: the one the step names,
/// else the one of the loops' shape, checked against the loops' shape.
fn choose(
    l: &Lowering,
    unit: &MatrixUnit,
    fa: &Expr,
    fb: &Expr,
    acc_t: DType,
) -> Result<&'static MatrixInstr, Diagnostic> {
    let nest = &l.nest;
    let req = nest.matrix.as_ref().expect("a stage with mma");
    let name = |v: VarId| nest.var(v).name.clone();
    let (ri, rj, rk) = (req.rows, req.cols, req.k);
    let types = (mtype(fa.dtype), mtype(fb.dtype), mtype(acc_t));
    let all = unit.instructions();
    if all.is_empty() {
        return Err(Diagnostic::new(
            req.span,
            format!("{} has no matrix instructions (for a wave of {})", unit, unit.wave()),
        )
        .hint("targets with them: gfx908, gfx90a, gfx942, gfx950 (MFMA), gfx11 and gfx12 (WMMA), sm_80 and later (mma.sync); remove the `mma` step for the others"));
    }
    let all: Vec<&MatrixInstr> = all.into_iter().chain(unit.group_instructions()).collect();
    let typed: Vec<&MatrixInstr> = all
        .iter()
        .copied()
        .filter(|i| types == (Some(i.a), Some(i.b), Some(i.acc)))
        .collect();
    let want = format!("{} x {} -> {}", fa.dtype, fb.dtype, acc_t);
    if typed.is_empty() {
        return Err(Diagnostic::new(
            req.span,
            format!("{} has no matrix instruction for {want}", unit),
        )
        .hint(format!("it has: {}", describe(&all))));
    }
    let f8 = f8_types(unit);
    if let Some(t) = [fa.dtype, fb.dtype]
        .into_iter()
        .find(|t| t.is_f8() && !f8.contains(t))
    {
        return Err(Diagnostic::new(
            req.span,
            format!(
                "{}'s 8-bit float matrix instructions read `{}` and `{}`; this stage's operand is `{t}`",
                unit, f8[0], f8[1]
            ),
        )
        .hint("the same bits mean other values in the other encoding: declare the inputs in the one the target reads"));
    }
    let ext = |v: VarId| nest.var(v).extent.as_const().unwrap_or(0) as u32;
    let shape = (ext(ri), ext(rj), ext(rk));
    let instr = match &req.instr {
        Some(n) => {
            let Some(i) = all.iter().copied().find(|i| instr_id(i) == n.name) else {
                return Err(Diagnostic::new(
                    n.span,
                    format!(
                        "{} has no matrix instruction `{}` (wave{})",
                        unit,
                        n.name,
                        unit.wave()
                    ),
                )
                .hint(format!("it has: {}", describe(&all))));
            };
            if !typed.contains(&i) {
                return Err(Diagnostic::new(
                    n.span,
                    format!(
                        "`{}` computes {} x {} -> {}; this stage is {want}",
                        n.name, i.a, i.b, i.acc
                    ),
                )
                .hint(format!("for {want} {} has: {}", unit, describe(&typed))));
            }
            i
        }
        None => match typed.iter().copied().find(|i| (i.m, i.n, i.k) == shape) {
            Some(i) => i,
            None => typed[0],
        },
    };
    if (instr.m, instr.n, instr.k) != shape {
        return Err(Diagnostic::new(
            req.span,
            format!(
                "loops `{}`, `{}`, `{}` are {}x{}x{}; {}'s {} is {}x{}x{}",
                name(ri),
                name(rj),
                name(rk),
                shape.0,
                shape.1,
                shape.2,
                unit,
                instr_id(instr),
                instr.m,
                instr.n,
                instr.k
            ),
        )
        .hint(format!(
            "split the loops by the instruction's shape; for {want} {} has: {}",
            unit,
            describe(&typed)
        )));
    }
    Ok(instr)
}

/// The loops around `mma`'s three and the fragments they index.
struct Frags<'s> {
    /// Loops outside the reduction.
    outer: &'s [VarId],
    /// Reduction loops around the instruction.
    kloops: Vec<VarId>,
    /// Output loops over fragments, and those of them A and B vary with.
    frags: Vec<VarId>,
    a_frags: Vec<VarId>,
    b_frags: Vec<VarId>,
    /// Fragments of the accumulator, A and B, and each one's index.
    n: [i64; 3],
    ix: [Index; 3],
    /// Elements each lane holds of one fragment of the accumulator, A and B.
    per_lane: [i64; 3],
}

/// Checks the loop order around `mma`'s loops and counts the fragments.
fn fragments<'s>(
    l: &Lowering,
    st: &Stage<'s>,
    fa: &Expr,
    fb: &Expr,
    instr: &MatrixInstr,
) -> Result<Frags<'s>, Diagnostic> {
    let nest = &l.nest;
    let req = nest.matrix.as_ref().expect("a stage with mma");
    let name = |v: VarId| nest.var(v).name.clone();
    let (ri, rj, rk) = (req.rows, req.cols, req.k);
    // The loops: k loops, then fragment loops, then the instruction's three.
    let r0 = st
        .loops
        .iter()
        .position(|v| nest.var(*v).reduce)
        .unwrap_or(st.loops.len());
    let (outer, inner) = st.loops.split_at(r0);
    let tail = &inner[inner.len().saturating_sub(3)..];
    if inner.len() < 3 || [ri, rj, rk].iter().any(|v| !tail.contains(v)) {
        return Err(Diagnostic::new(
            req.span,
            "`mma`'s loops must stay the three innermost loops",
        )
        .hint("a later reorder moved them; put `mma` after the last reorder"));
    }
    let rest = &inner[..inner.len() - 3];
    let kloops: Vec<VarId> = rest
        .iter()
        .copied()
        .filter(|v| nest.var(*v).reduce)
        .collect();
    let frags: Vec<VarId> = rest
        .iter()
        .copied()
        .filter(|v| !nest.var(*v).reduce)
        .collect();
    if let (Some(f), Some(kv)) = (
        rest.iter().position(|v| !nest.var(*v).reduce),
        rest.iter().rposition(|v| nest.var(*v).reduce),
    ) {
        if f < kv {
            return Err(Diagnostic::new(
                nest.var(rest[f]).span,
                format!(
                    "loop `{}` runs outside reduction loop `{}`, inside the reduction: each wave's fragments would be reloaded",
                    name(rest[f]),
                    name(rest[kv])
                ),
            )
            .hint("order the loops: the reduction loops, then the output loops over fragments, then `mma`'s three"));
        }
    }
    let count = |vs: &[VarId]| -> Result<(i64, Index), Diagnostic> {
        let mut len = 1i64;
        let mut ix = Index::c(0);
        for v in vs {
            let Some(e) = nest.var(*v).extent.as_const() else {
                return Err(Diagnostic::new(
                    nest.var(*v).span,
                    format!(
                        "loop `{}` runs inside a reduction loop but has a symbolic extent",
                        name(*v)
                    ),
                )
                .hint(
                    "its iterations each keep accumulator fragments: split it by a constant factor",
                ));
            };
            len *= e;
            ix = ix * Index::c(e) + Index::Var(*v);
        }
        Ok((len, ix))
    };
    let a_frags: Vec<VarId> = frags
        .iter()
        .copied()
        .filter(|v| expr_uses(fa, *v))
        .collect();
    let b_frags: Vec<VarId> = frags
        .iter()
        .copied()
        .filter(|v| expr_uses(fb, *v))
        .collect();
    let (n_acc, acc_ix) = count(&frags)?;
    let (n_a, a_ix) = count(&a_frags)?;
    let (n_b, b_ix) = count(&b_frags)?;
    let (pa, pb, pc) = (
        i64::from(instr.a_per_lane()),
        i64::from(instr.b_per_lane()),
        i64::from(instr.acc_per_lane()),
    );
    if n_acc * pc > super::MAX_ACCUMULATORS {
        return Err(Diagnostic::new(
            req.span,
            format!(
                "each lane would keep {} accumulators ({n_acc} fragments of {pc}); at most {} fit",
                n_acc * pc,
                super::MAX_ACCUMULATORS
            ),
        )
        .hint("use fewer fragments per wave"));
    }
    Ok(Frags {
        outer,
        kloops,
        frags,
        a_frags,
        b_frags,
        n: [n_acc, n_a, n_b],
        ix: [acc_ix, a_ix, b_ix],
        per_lane: [pc, pa, pb],
    })
}

/// Emitting one `mma` stage's body: its checked instruction, its operands
/// (loads clamped into range) and its fragment loops.
struct Emit<'a> {
    l: &'a Lowering<'a>,
    st: &'a Stage<'a>,
    unit: &'a MatrixUnit,
    instr: &'static MatrixInstr,
    acc_t: DType,
    fa: Expr,
    fb: Expr,
    f: Frags<'a>,
    /// The guards on reduction loops: out-of-range k reads as zero.
    kguards: Vec<&'a Guard>,
    lane: Index,
    /// Where `instr` reads A and B from LDS: the warp instruction of its k
    /// tail ([`tail_instr`]), whose fragments are locals 3 and 4.
    tail: Option<&'static MatrixInstr>,
    /// The operands clamped as if no tile staged them, for a k tail run
    /// after the loop.
    whole: (Expr, Expr),
}

impl Emit<'_> {
    /// Operand `f` at the lane coordinates `map`, zero where k is out of
    /// range when `zero_tail`.
    fn element(&self, f: &Expr, map: HashMap<VarId, Index>, zero_tail: bool) -> Expr {
        let kguards = &self.kguards;
        let v = f.map_indices(&|ix| ix.subst(&map));
        let mut cond: Option<Expr> = None;
        for g in kguards.iter().filter(|_| zero_tail) {
            let c = bin(
                BinOp::Lt,
                Expr {
                    kind: ExprKind::Index(g.value.subst(&map)),
                    dtype: DType::I32,
                },
                Expr {
                    kind: ExprKind::Index(g.extent.subst(&map)),
                    dtype: DType::I32,
                },
                DType::Bool,
            );
            cond = Some(match cond {
                None => c,
                Some(p) => bin(BinOp::And, p, c, DType::Bool),
            });
        }
        match cond {
            None => v,
            Some(c) => Expr {
                dtype: v.dtype,
                kind: ExprKind::Select(Box::new(c), Box::new(v), Box::new(zero(f.dtype))),
            },
        }
    }

    /// Each lane's loads of its A and B elements.
    fn fills(&self, zero_tail: bool) -> (Vec<Stmt>, Vec<Stmt>) {
        let req = self.l.nest.matrix.as_ref().expect("a stage with mma");
        let (ri, rj, rk) = (req.rows, req.cols, req.k);
        let (instr, lane_ix) = (self.instr, &self.lane);
        let (a_ix, b_ix) = (&self.f.ix[1], &self.f.ix[2]);
        let (pa, pb) = (self.f.per_lane[1], self.f.per_lane[2]);
        let mut a_fill = Vec::new();
        for e in 0..instr.a_per_lane() {
            let (r, kk) = instr.a_coord(e);
            let map = HashMap::from([(ri, coord(&r, lane_ix)), (rk, coord(&kk, lane_ix))]);
            a_fill.push(Stmt::LocalStore {
                local: 1,
                index: a_ix.clone() * Index::c(pa) + Index::c(i64::from(e)),
                value: self.element(&self.fa, map, zero_tail),
            });
        }
        let mut b_fill = Vec::new();
        for e in 0..instr.b_per_lane() {
            let (kk, c) = instr.b_coord(e);
            let map = HashMap::from([(rk, coord(&kk, lane_ix)), (rj, coord(&c, lane_ix))]);
            b_fill.push(Stmt::LocalStore {
                local: 2,
                index: b_ix.clone() * Index::c(pb) + Index::c(i64::from(e)),
                value: self.element(&self.fb, map, zero_tail),
            });
        }
        (a_fill, b_fill)
    }

    /// Where a whole tile of k is in range, its operands need no zeroing:
    /// inside the outermost k loop, an unswitch on the tile's last k runs
    /// the loads without their selects (the k guards grow with the inner k
    /// loops and the instruction's k, so the last k bounds them all). On
    /// NVIDIA only: it is what lets ldmatrix and the straight-line bodies
    /// apply there, while on AMD it only duplicated the step (gfx942's
    /// gemm_f16: 92 -> 105 VGPRs, one occupancy step lost).
    fn full_tile(&self) -> Option<Vec<Guard>> {
        let (nest, unit, kloops, kguards) =
            (&self.l.nest, self.unit, &self.f.kloops, &self.kguards);
        let rk = nest.matrix.as_ref().expect("a stage with mma").k;
        kloops
            .first()
            .filter(|_| unit.unswitches_full_k_tiles())
            .and_then(|_| {
                let inner: Vec<VarId> = kloops[1..].iter().copied().chain([rk]).collect();
                let mut last = HashMap::new();
                for v in &inner {
                    let ext = nest.var(*v).extent.as_const()?;
                    last.insert(*v, Index::c(ext - 1));
                }
                let gs = kguards
                    .iter()
                    .map(|g| {
                        let (terms, _) = region::split_varying(&g.value, &inner)?;
                        terms
                            .iter()
                            .all(|(t, c)| matches!(t, Index::Var(_)) && *c > 0)
                            .then(|| Guard {
                                value: g.value.subst(&last),
                                extent: g.extent.clone(),
                            })
                    })
                    .collect::<Option<Vec<Guard>>>()?;
                (!gs.is_empty()).then_some(gs)
            })
    }

    /// The wave (for `wgmma`, the warpgroup) within the work-group.
    fn wave(&self) -> Index {
        let st = self.st;
        st.waves[0].1.map_or(Index::c(0), Index::Var)
            + st.waves[1].1.map_or(Index::c(0), Index::Var) * Index::c(i64::from(st.waves[0].0))
    }

    /// One step of k for a warpgroup instruction's k tail ([`tail_instr`]):
    /// each warp loads its 16 rows of A, then per 8 columns a B fragment
    /// and one warp instruction into those columns' accumulators.
    fn tail_step(&self, t: &'static MatrixInstr, after_loop: bool) -> Vec<Stmt> {
        let (fa, fb) = if after_loop {
            (&self.whole.0, &self.whole.1)
        } else {
            (&self.fa, &self.fb)
        };
        let nest = &self.l.nest;
        let req = nest.matrix.as_ref().expect("a stage with mma");
        let (ri, rj, rk) = (req.rows, req.cols, req.k);
        let warp_lanes = i64::from(t.wave);
        let lane = Index::bin(IOp::Mod, self.lane.clone(), Index::c(warp_lanes));
        let warp = Index::bin(IOp::Div, self.lane.clone(), Index::c(warp_lanes));
        let warps = i64::from(self.instr.wave / t.wave);
        let row0 = warp.clone() * Index::c(i64::from(t.m));
        let [acc_ix, a_ix, _] = &self.f.ix;
        let pc = self.f.per_lane[0];
        let (ta, tb) = (3u32, 4u32);
        let pa = i64::from(t.a_per_lane());
        let a_fill: Vec<Stmt> = (0..t.a_per_lane())
            .map(|e| {
                let (r, kk) = t.a_coord(e);
                let map = HashMap::from([
                    (ri, row0.clone() + coord(&r, &lane)),
                    (rk, coord(&kk, &lane)),
                ]);
                Stmt::LocalStore {
                    local: ta,
                    index: a_ix.clone() * Index::c(pa) + Index::c(i64::from(e)),
                    value: self.element(fa, map, true),
                }
            })
            .collect();
        let mut per_frag = Vec::new();
        for j in 0..self.instr.n / t.n {
            for e in 0..t.b_per_lane() {
                let (kk, c) = t.b_coord(e);
                let map = HashMap::from([
                    (rk, coord(&kk, &lane)),
                    (rj, Index::c(i64::from(j * t.n)) + coord(&c, &lane)),
                ]);
                per_frag.push(Stmt::LocalStore {
                    local: tb,
                    index: Index::c(i64::from(e)),
                    value: self.element(fb, map, true),
                });
            }
            per_frag.push(Stmt::Matrix {
                instr: t,
                a: (ta, a_ix.clone() * Index::c(pa)),
                b: (tb, Index::c(0)),
                acc: (
                    0,
                    acc_ix.clone() * Index::c(pc) + Index::c(i64::from(j * t.acc_per_lane())),
                ),
                lane: lane.clone(),
                wave: self.wave() * Index::c(warps) + warp.clone(),
                desc: None,
            });
        }
        let mut step = build(nest, &self.f.a_frags, &[], a_fill);
        step.extend(build(nest, &self.f.frags, &[], per_frag));
        step
    }

    /// The matrix instruction on this lane's fragments.
    fn instruction(&self) -> Stmt {
        let (instr, lane_ix) = (self.instr, &self.lane);
        let [acc_ix, a_ix, b_ix] = &self.f.ix;
        let [pc, pa, pb] = self.f.per_lane;
        let wave = self.wave();
        Stmt::Matrix {
            instr,
            a: (1, a_ix.clone() * Index::c(pa)),
            b: (2, b_ix.clone() * Index::c(pb)),
            acc: (0, acc_ix.clone() * Index::c(pc)),
            lane: lane_ix.clone(),
            wave,
            desc: None,
        }
    }

    /// The stores of the accumulator's elements, each under the output's guards.
    fn stores(&self) -> Vec<Stmt> {
        let req = self.l.nest.matrix.as_ref().expect("a stage with mma");
        let (ri, rj) = (req.rows, req.cols);
        let (st, instr, lane_ix, acc_t, kguards) =
            (self.st, self.instr, &self.lane, self.acc_t, &self.kguards);
        let (acc_ix, pc) = (&self.f.ix[0], self.f.per_lane[0]);
        let mut store = Vec::new();
        for e in 0..instr.acc_per_lane() {
            let (r, c) = instr.acc_coord(e);
            let map = HashMap::from([(ri, coord(&r, lane_ix)), (rj, coord(&c, lane_ix))]);
            let acc = local(
                0,
                acc_ix.clone() * Index::c(pc) + Index::c(i64::from(e)),
                acc_t,
            );
            let s = Stmt::Store {
                tensor: st.output,
                indices: st.indices.iter().map(|i| i.subst(&map)).collect(),
                value: st
                    .value
                    .map_indices(&|ix| ix.subst(&map))
                    .replace_reduced(&acc),
            };
            let guards: Vec<Guard> = st
                .guards
                .iter()
                .filter(|g| !kguards.contains(g))
                .map(|g| Guard {
                    value: g.value.subst(&map),
                    extent: g.extent.subst(&map),
                })
                .collect();
            store.push(if guards.is_empty() {
                s
            } else {
                Stmt::If {
                    guards,
                    body: vec![s],
                }
            });
        }
        store
    }

    /// One step of k: the A and B fills, then the instructions.
    fn step(&self, zero_tail: bool) -> Vec<Stmt> {
        let nest = &self.l.nest;
        let Frags {
            frags,
            a_frags,
            b_frags,
            ..
        } = &self.f;
        let (a_fill, b_fill) = self.fills(zero_tail);
        let mut step = build(nest, a_frags, &[], a_fill);
        step.extend(build(nest, b_frags, &[], b_fill));
        step.extend(build(nest, frags, &[], vec![self.instruction()]));
        step
    }

    /// The whole body: accumulators zeroed, the k loops, the stores.
    fn body(&self) -> Vec<Stmt> {
        let nest = &self.l.nest;
        let Frags {
            outer,
            kloops,
            frags,
            ..
        } = &self.f;
        let (acc_ix, pc, acc_t) = (&self.f.ix[0], self.f.per_lane[0], self.acc_t);
        let init: Vec<Stmt> = (0..pc)
            .map(|e| Stmt::LocalStore {
                local: 0,
                index: acc_ix.clone() * Index::c(pc) + Index::c(e),
                value: zero(acc_t),
            })
            .collect();
        let full_tile = self.full_tile();
        let mut leaf = build(nest, frags, &[], init);
        if self.instr.warpgroup() {
            let empty: Vec<Stmt> = leaf
                .iter()
                .cloned()
                .chain(build(nest, frags, &[], self.stores()))
                .collect();
            leaf.extend(self.group_body(self.tail, full_tile));
            leaf.extend(build(nest, frags, &[], self.stores()));
            // No k at all is its own branch: where the loop's zero-trip
            // path joins its exit, LLVM copies the zeros into the
            // accumulators there, and ptxas, seeing other instructions
            // write them while a group may be in flight, serializes every
            // wgmma of the kernel.
            let body = match kloops.first() {
                Some(k0) => vec![Stmt::Unswitch {
                    guards: vec![Guard {
                        value: Index::c(0),
                        extent: nest.var(*k0).extent.clone(),
                    }],
                    fast: leaf,
                    slow: empty,
                }],
                None => leaf,
            };
            return build(nest, outer, &[], body);
        }
        match full_tile {
            Some(guards) => {
                let inner = &kloops[1..];
                let split = vec![Stmt::Unswitch {
                    guards,
                    fast: build(nest, inner, &[], self.step(false)),
                    slow: build(nest, inner, &[], self.step(true)),
                }];
                leaf.extend(build(nest, &kloops[..1], &[], split));
            }
            None => leaf.extend(build(nest, kloops, &[], self.step(true))),
        }
        leaf.extend(build(nest, frags, &[], self.stores()));
        build(nest, outer, &[], leaf)
    }
}

impl Emit<'_> {
    /// The k loops of a warpgroup instruction (`wgmma`): each tile of k
    /// fenced, its instructions committed as one group and waited for
    /// before the next tile's barrier lets the copies overwrite its LDS
    /// operands. Tiles of k partly out of range run the warp instruction
    /// `t` on zeroed registers instead.
    fn group_body(
        &self,
        tail: Option<&'static MatrixInstr>,
        full_tile: Option<Vec<Guard>>,
    ) -> Vec<Stmt> {
        use crate::loops::MatrixAsync;
        let nest = &self.l.nest;
        let kloops = &self.f.kloops;
        let stages = kloops.first().and_then(|k| {
            nest.caches
                .iter()
                .filter(|c| c.at == *k && c.stages > 1)
                .map(|c| c.stages)
                .min()
        });
        let lag = match (kloops.first(), stages) {
            (Some(k), Some(s)) => group_lag(nest, self.unit, *k, s),
            _ => 0,
        };
        // The last tile drains the pipeline inside the loop: with a group
        // still in flight at the loop's exit, the accumulators' values
        // merging there (the zero-trip path's zeros) count for ptxas as
        // other instructions writing them mid-flight, and it serializes.
        let ko_next = kloops.first().map(|k| Index::Var(*k) + Index::c(1));
        let ko_extent = kloops.first().map(|k| nest.var(*k).extent.clone());
        let around = |mut body: Vec<Stmt>| {
            body.insert(0, Stmt::MatrixAsync(MatrixAsync::Fence));
            body.push(Stmt::MatrixAsync(MatrixAsync::Commit));
            match (&ko_next, &ko_extent) {
                (Some(next), Some(extent)) if lag > 0 => body.push(Stmt::Unswitch {
                    guards: vec![Guard {
                        value: next.clone(),
                        extent: extent.clone(),
                    }],
                    fast: vec![Stmt::MatrixAsync(MatrixAsync::Wait(lag))],
                    slow: vec![Stmt::MatrixAsync(MatrixAsync::Wait(0))],
                }),
                _ => body.push(Stmt::MatrixAsync(MatrixAsync::Wait(lag))),
            }
            body
        };
        let drain = Stmt::MatrixAsync(MatrixAsync::Wait(0));
        // No warp instruction for a tail: the sizes make every tile whole
        // (checked by `tail_instr`), so the guards always hold.
        let (full_tile, whole) = match tail {
            Some(_) => (full_tile, false),
            None => (None, true),
        };
        match (full_tile, tail) {
            (Some(guards), Some(t)) => {
                let inner = &kloops[1..];
                // Full tiles in the loop, the partial last one after it: a
                // join of the two inside the loop makes LLVM copy the
                // accumulators while a group is in flight, which ptxas
                // answers by serializing every wgmma.
                let ko = kloops[0];
                let full = vec![Stmt::If {
                    guards: guards.clone(),
                    body: around(build(nest, inner, &[], self.step(false))),
                }];
                let mut out = build(nest, &kloops[..1], &[], full);
                out.push(drain);
                let extent = nest.var(ko).extent.clone();
                let last = HashMap::from([(ko, extent.clone() - Index::c(1))]);
                let tail = crate::loops::visit::map_indices(
                    build(nest, inner, &[], self.tail_step(t, true)),
                    &|ix| ix.subst(&last),
                );
                let partial: Vec<Guard> = guards
                    .iter()
                    .map(|g| Guard {
                        value: g.value.subst(&last),
                        extent: g.extent.clone(),
                    })
                    .collect();
                out.push(Stmt::Unswitch {
                    guards: partial,
                    fast: Vec::new(),
                    slow: vec![Stmt::If {
                        guards: vec![Guard {
                            value: Index::c(0),
                            extent,
                        }],
                        body: tail,
                    }],
                });
                out
            }
            _ if whole || self.kguards.is_empty() => {
                let mut out = match kloops.split_first() {
                    Some((first, inner)) => build(
                        nest,
                        &[*first],
                        &[],
                        around(build(nest, inner, &[], self.step(false))),
                    ),
                    None => around(self.step(false)),
                };
                out.push(drain);
                out
            }
            (_, Some(t)) => build(nest, kloops, &[], self.tail_step(t, false)),
            (_, None) => unreachable!("no tail instruction only with whole tiles"),
        }
    }
}

/// `g` with every matrix instruction executed as statements the CPU runs:
/// each lane puts its A and B elements where the instruction's layout says
/// they belong in a per-wave LDS scratch copy of the matrices, and after a
/// barrier computes its own elements of D from them. A fragment loaded into
/// the wrong lane or element lands in the wrong place of the matrix, as on
/// the GPU. gfx11's replicated halves each get their own copy, read by the
/// lanes of that half, so both must be filled right. Lane exchanges
/// ([`Stmt::Shuffle`]) go through an LDS slot per thread between two
/// barriers the same way.
pub fn expand(mut g: GpuKernel) -> GpuKernel {
    let mut scratch: HashMap<&'static str, (u32, u32)> = HashMap::new();
    let threads = g.threads();
    let body = std::mem::take(&mut g.body);
    g.body = expand_body(&mut g, body, &mut scratch, threads);
    g
}

fn expand_body(
    g: &mut GpuKernel,
    body: Vec<Stmt>,
    scratch: &mut HashMap<&'static str, (u32, u32)>,
    threads: u32,
) -> Vec<Stmt> {
    let mut out = Vec::new();
    for s in body {
        match s {
            Stmt::Matrix {
                instr,
                a,
                b,
                acc,
                lane,
                wave,
                desc: _,
            } => {
                let copies = match instr.family {
                    rocmc_target::matrix::Family::WmmaGfx11 => instr.wave / 16,
                    _ => 1,
                };
                let (m, n, k) = (instr.m, instr.n, instr.k);
                let waves = threads.div_ceil(instr.wave);
                let at = g.locals[a.0 as usize].dtype;
                let bt = g.locals[b.0 as usize].dtype;
                let ct = g.locals[acc.0 as usize].dtype;
                let (sa, sb) = *scratch.entry(instr.name).or_insert_with(|| {
                    let span = g.locals[a.0 as usize].span;
                    g.shared.push(Local {
                        name: "mma_a".into(),
                        dtype: at,
                        len: waves * copies * m * k,
                        span,
                    });
                    g.shared.push(Local {
                        name: "mma_b".into(),
                        dtype: bt,
                        len: waves * copies * k * n,
                        span,
                    });
                    (g.shared.len() as u32 - 2, g.shared.len() as u32 - 1)
                });
                let copy = if copies > 1 {
                    Index::bin(IOp::Div, lane.clone(), Index::c(16))
                } else {
                    Index::c(0)
                };
                let a_base = (wave.clone() * Index::c(i64::from(copies)) + copy.clone())
                    * Index::c(i64::from(m * k));
                let b_base =
                    (wave * Index::c(i64::from(copies)) + copy) * Index::c(i64::from(k * n));
                for e in 0..instr.a_per_lane() {
                    let (r, kk) = instr.a_coord(e);
                    out.push(Stmt::SharedStore {
                        shared: sa,
                        index: a_base.clone()
                            + coord(&r, &lane) * Index::c(i64::from(k))
                            + coord(&kk, &lane),
                        value: local(a.0, a.1.clone() + Index::c(i64::from(e)), at),
                    });
                }
                for e in 0..instr.b_per_lane() {
                    let (kk, c) = instr.b_coord(e);
                    out.push(Stmt::SharedStore {
                        shared: sb,
                        index: b_base.clone()
                            + coord(&kk, &lane) * Index::c(i64::from(n))
                            + coord(&c, &lane),
                        value: local(b.0, b.1.clone() + Index::c(i64::from(e)), bt),
                    });
                }
                out.push(Stmt::Barrier);
                let cast = |e: Expr| Expr {
                    kind: ExprKind::Cast(Box::new(e)),
                    dtype: ct,
                };
                for e in 0..instr.acc_per_lane() {
                    let (r, c) = instr.acc_coord(e);
                    let (r, c) = (coord(&r, &lane), coord(&c, &lane));
                    let ix = acc.1.clone() + Index::c(i64::from(e));
                    let mut sum = local(acc.0, ix.clone(), ct);
                    for kk in 0..k {
                        let x = Expr {
                            kind: ExprKind::Shared {
                                shared: sa,
                                index: a_base.clone()
                                    + r.clone() * Index::c(i64::from(k))
                                    + Index::c(i64::from(kk)),
                            },
                            dtype: at,
                        };
                        let y = Expr {
                            kind: ExprKind::Shared {
                                shared: sb,
                                index: b_base.clone() + Index::c(i64::from(kk * n)) + c.clone(),
                            },
                            dtype: bt,
                        };
                        sum = bin(BinOp::Add, sum, bin(BinOp::Mul, cast(x), cast(y), ct), ct);
                    }
                    out.push(Stmt::LocalStore {
                        local: acc.0,
                        index: ix,
                        value: sum,
                    });
                }
                out.push(Stmt::Barrier);
            }
            Stmt::Shuffle {
                local: dst,
                index,
                value,
                mask,
                lane,
                wave,
                width,
            } => {
                let (slots, _) = *scratch.entry("lane_xor").or_insert_with(|| {
                    g.shared.push(Local {
                        name: "lane_xor".into(),
                        dtype: DType::F32,
                        len: threads.div_ceil(width) * width,
                        span: g.locals[dst as usize].span,
                    });
                    (g.shared.len() as u32 - 1, 0)
                });
                let base = wave * Index::c(i64::from(width));
                out.push(Stmt::SharedStore {
                    shared: slots,
                    index: base.clone() + lane.clone(),
                    value,
                });
                out.push(Stmt::Barrier);
                out.push(Stmt::LocalStore {
                    local: dst,
                    index,
                    value: Expr {
                        kind: ExprKind::Shared {
                            shared: slots,
                            index: base + lane_xor(&lane, mask),
                        },
                        dtype: DType::F32,
                    },
                });
                out.push(Stmt::Barrier);
            }
            other => {
                let mut f = |b: Vec<Stmt>| expand_body(g, b, scratch, threads);
                out.push(other.map_bodies(&mut f));
            }
        }
    }
    out
}

/// `lane ^ mask` as an index: each set bit of the mask adds its value
/// where the lane's bit is clear and subtracts it where set.
pub fn lane_xor(lane: &Index, mask: u32) -> Index {
    let mut at = lane.clone();
    for b in 0..32 {
        let bit = 1i64 << b;
        if mask & (1 << b) != 0 {
            let set = Index::bin(
                IOp::Mod,
                Index::bin(IOp::Div, lane.clone(), Index::c(bit)),
                Index::c(2),
            );
            at = at + Index::c(bit) - set * Index::c(2 * bit);
        }
    }
    at
}

/// The matrix instructions the kernels of `p` execute, each once.
pub fn uses_matrix(p: &crate::loops::Program) -> Vec<&'static MatrixInstr> {
    let mut found = Vec::new();
    for g in &p.kernels {
        crate::loops::visit::walk(&g.body, &mut |s| {
            if let Stmt::Matrix { instr, .. } = s {
                if !found.contains(instr) {
                    found.push(*instr);
                }
            }
        });
    }
    found
}
