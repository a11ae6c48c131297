//! `flash(j, rows=BM, keys=BN, stages=S)`: the fused attention forward on
//! the target's matrix instructions, for f16 or bf16 q, k and v read
//! straight from tensors (the head axis their last subscript).
//!
//! A work-group takes `BM` query rows of one batch point (blockIdx.x the
//! batch point, blockIdx.y the row tile), as `BM / W` waves of `W` lanes.
//! Its Q tile is staged in LDS once; K and V tiles of `BN` keys pass
//! through `S` LDS buffers, copied asynchronously where the target can
//! (`cp.async`). Per key tile:
//!
//! 1. the scores: each wave multiplies its rows of Q by the K tile on the
//!    matrix instruction (f32 accumulators), scales them into base 2,
//!    masks keys past each row's count to −∞ (only on tiles that reach
//!    past the first row's count);
//! 2. the online softmax: the row's new maximum, the factor
//!    `exp2(old − new)` for what was accumulated, each key's weight
//!    (rounded to the operand type for P·V) and the running sum;
//! 3. each lane rescales its output accumulators by its rows' factors and
//!    the wave adds weights × V on the matrix instruction.
//!
//! Step 2 runs in the score accumulators' registers where a row's
//! elements span few lanes (`lanes.rs`: mma.sync's quads, exchanging the
//! row maximum by butterfly shuffles). Where they span many (MFMA's 32,
//! WMMA's 16 lanes), the scores go to an LDS tile and one lane per row
//! runs its softmax there, its factor going to LDS for the other lanes:
//! that works for every lane layout alike.
//!
//! Key tiles past the block's last row's count are never visited (its
//! count must not shrink as the row grows, as `min(i + 1, T)` does). At
//! the end each accumulator is divided by its row's sum.

use super::*;
use crate::kernel::{Kernel, TensorId};
use crate::loops::{Mem, Stmt};
use crate::lower::matrix::{coord, mtype, MatrixUnit};
use crate::schedule::{Dim, GpuAxis, Guard};
use rocmc_target::matrix::{LaneCoord, MatrixInstr};

/// What `flash` asked for.
#[derive(Clone, Copy, Debug)]
pub(super) struct Tiles {
    pub rows: u32,
    pub keys: u32,
    pub stages: u32,
    /// Query rows per wave; 0 for the default (one per lane).
    pub wave_rows: u32,
}

mod emit;
mod group;
mod lanes;
mod layout;

use emit::Emit;

use layout::{Layout, PAD};

/// LDS arrays, by index (weights only where P·V cannot read them from the
/// score registers; scores and factors only where the softmax goes
/// through LDS).
const QS: u32 = 0;
const KS: u32 = 1;
const VS: u32 = 2;
const PS: u32 = 3;
const SS: u32 = 4;
const AL: u32 = 5;

/// A tensor operand read straight from memory: the tensor, its
/// subscripts, and which one is the row axis (query or key).
struct Operand {
    tensor: TensorId,
    indices: Vec<Index>,
    row: usize,
}

fn operand(
    x: &Expr,
    row: VarId,
    last: VarId,
    what: &str,
    span: Span,
) -> Result<Operand, Diagnostic> {
    let ExprKind::Load { tensor, indices } = &x.kind else {
        return Err(Diagnostic::new(
            span,
            format!("`flash` stages the {what} tensor in LDS: the {what} must be an element of an f16 or bf16 tensor, not an expression"),
        )
        .hint("compute it in a stage of its own (not inlined by `compute_inline()`), or schedule with `rowwise`"));
    };
    let row_at = indices.iter().position(|i| *i == Index::Var(row));
    let ok_last = indices.last() == Some(&Index::Var(last));
    let others_plain = indices.iter().enumerate().all(|(p, i)| {
        Some(p) == row_at || p + 1 == indices.len() || !(i.uses_var(row) || i.uses_var(last))
    });
    match (row_at, ok_last && others_plain) {
        (Some(r), true) if r + 1 < indices.len() => Ok(Operand {
            tensor: *tensor,
            indices: indices.clone(),
            row: r,
        }),
        _ => Err(Diagnostic::new(
            span,
            format!("`flash` copies rows of the {what} tensor: its subscripts must be the row axis itself and, last, the head axis"),
        )
        .hint("as in `K[b, j, e]`; or schedule with `rowwise`")),
    }
}

/// The instruction ([`crate::mtype::rows::flash_instr`]), or why there is none.
fn pick(
    unit: &MatrixUnit,
    t: DType,
    keys: i64,
    span: Span,
) -> Result<&'static MatrixInstr, Diagnostic> {
    crate::mtype::rows::flash_instr(unit, t, keys).ok_or_else(|| {
        Diagnostic::new(
            span,
            format!(
                "{} has no matrix instruction multiplying {t} into f32",
                unit.gpu()
            ),
        )
        .hint("schedule with `rowwise`")
    })
}

/// Whether `ix` never decreases as `v` grows (sums, min/max, positive
/// multiples of it): the key count of the block's last row bounds all.
fn nondecreasing(ix: &Index, v: VarId) -> bool {
    match ix {
        Index::Const(_) | Index::Size(_) => true,
        Index::Var(_) => true,
        Index::Bin(op, a, b) => match op {
            IOp::Add | IOp::Min | IOp::Max => nondecreasing(a, v) && nondecreasing(b, v),
            IOp::Sub => nondecreasing(a, v) && !b.uses_var(v),
            IOp::Mul | IOp::Div | IOp::CeilDiv => {
                nondecreasing(a, v) && b.as_const().is_some_and(|c| c > 0)
            }
            IOp::Mod | IOp::Xor => !ix.uses_var(v),
        },
    }
}

fn typed(kind: ExprKind, t: DType) -> Expr {
    Expr { kind, dtype: t }
}

fn idx_expr(ix: Index) -> Expr {
    Expr {
        kind: ExprKind::Index(ix),
        dtype: DType::I32,
    }
}

pub(super) fn build(
    l: &mut Lowering,
    a: &Attention,
    t: Tiles,
    span: Span,
) -> Result<(), Diagnostic> {
    let Some(unit) = l.unit else {
        return Err(Diagnostic::new(
            span,
            "`flash` runs on a target's matrix instructions, and no target with them was given",
        )
        .hint("compile it for a GPU with matrix instructions (gfx908 and later CDNA, gfx11, gfx12, sm_80 and later); on the CPU, `--emulate PROCESSOR`; elsewhere schedule with `rowwise`"));
    };
    let st = l.k.stage(l.sid);
    let red = st.reduce().expect("an attention is a reduction");
    let n = st.axes.len();
    let (iv, dv) = (VarId(n as u32 - 2), VarId(n as u32 - 1));
    // What the operands read once inlined producers are substituted: a
    // producer inlined into them is an expression, which `flash` cannot
    // copy into LDS (it would read the producer's buffer, never written).
    let a = &Attention {
        q: crate::lower::inline_producers(l.k, l.sid, &a.q),
        k: crate::lower::inline_producers(l.k, l.sid, &a.k),
        v: crate::lower::inline_producers(l.k, l.sid, &a.v),
        ..a.clone()
    };
    let ([q, kx, vx], shape) = check(l, unit, a, t, span)?;
    let Shape {
        ty,
        lanes_n,
        rm,
        bm,
        bn,
        ep,
        dp,
        threads,
        stages,
        ..
    } = shape;

    // Loops and hardware indices.
    let batch = super::counted(l, n - 2, "batches", span);
    let s_ext = st.axes[n - 2].extent.clone();
    let tiles_y = Index::bin(IOp::CeilDiv, s_ext.clone(), Index::c(bm));
    let [bx, by, lane, wave] = [
        ("batch", batch.clone(), GpuAxis::Block(Dim::X)),
        ("rows", tiles_y.clone(), GpuAxis::Block(Dim::Y)),
        ("lane", Index::c(lanes_n), GpuAxis::Thread(Dim::X)),
        ("wave", Index::c(bm / rm), GpuAxis::Thread(Dim::Y)),
    ]
    .map(|(name, extent, axis)| var(l, name, extent, LoopKind::Bound(axis), span));
    let at = decode(l, 2, Index::Var(bx));
    let row0 = Index::Var(by) * Index::c(bm);
    // The key count of global row `i`.
    let keys_of = |i: Index| -> Index {
        let mut m = at.clone();
        m.insert(iv, i);
        red.axes[0].extent.subst(&m)
    };
    let last_row = Index::bin(
        IOp::Min,
        row0.clone() + Index::c(bm - 1),
        s_ext.clone() - Index::c(1),
    );
    let ntiles = Index::bin(IOp::CeilDiv, keys_of(last_row), Index::c(bn));
    let kt = var(l, "key_tile", ntiles.clone(), LoopKind::Serial, span);
    let copies = |rows: i64, width: i64| Index::c((rows * width / 8 + threads - 1) / threads);
    let q_v = var(l, "copy_q", copies(bm, ep), LoopKind::Unrolled, span);
    let k_v = var(l, "copy_k", copies(bn, ep), LoopKind::Unrolled, span);
    let v_v = var(l, "copy_v", copies(bn, dp), LoopKind::Unrolled, span);
    let col = var(l, "col", Index::c(bn), LoopKind::Unrolled, span);
    let tid = Index::Var(lane) + Index::Var(wave) * Index::c(lanes_n);
    let em = emitter(
        l,
        unit,
        shape,
        [lane, wave],
        tid.clone(),
        row0.clone(),
        span,
    )?;

    let load = |op_: &Operand, row: Index, c: Index| operand_load(l.k, op_, &at, row, c, ty);
    // Q into registers straight from memory, or its LDS tile's copy.
    let q_load = |r: Index, c| load(&q, row0.clone() + r, c);
    let q_stmts = match em.q_regs {
        Some(qr) => em.q_to_registers(qr, &q_load),
        None => vec![em.copy(q_v, QS, Index::c(0), em.q_tile, bm, ep, &q_load, false)],
    };
    let tile_copy = |tile: Index, buf: Index| -> Vec<Stmt> {
        let key0 = tile * Index::c(bn);
        vec![
            em.copy(
                k_v,
                KS,
                em.k_tile.stage(buf.clone(), bn),
                em.k_tile,
                bn,
                ep,
                &|r, c| load(&kx, key0.clone() + r, c),
                true,
            ),
            em.copy(
                v_v,
                VS,
                em.v_tile.stage(buf, bn),
                em.v_tile,
                bn,
                dp,
                &|r, c| load(&vx, key0.clone() + r, c),
                true,
            ),
        ]
    };

    let scale = super::at(l, &a.scale, &at);
    let step = key_tile(&em, kt, &ntiles, stages, &scale, &keys_of, &tile_copy, col);

    let mut body = prologue(&em, [bx, by, lane, wave]);
    body.extend(q_stmts);
    // The first `stages - 1` key tiles in flight before the loop.
    for s in 0..stages - 1 {
        body.push(Stmt::If {
            guards: vec![Guard {
                value: Index::c(s),
                extent: ntiles.clone(),
            }],
            body: tile_copy(Index::c(s), Index::c(s)),
        });
        body.push(Stmt::AsyncCommit);
    }
    body.push(Stmt::Loop {
        var: kt,
        extent: ntiles,
        unroll: false,
        body: step,
    });
    body.extend(finish_rows(l, a, &em, &at, iv, dv, &s_ext));
    l.g.body = body;
    l.g.block = [lanes_n as u32, (bm / rm) as u32, 1];
    l.g.grid = [batch, tiles_y, Index::c(1)];
    l.tid = tid;
    Ok(())
}

/// One element of an operand's tile copy: its row clamped into the tensor
/// (the results of rows past it are masked or never stored), the last
/// index clamped by the fill itself.
fn operand_load(
    k: &Kernel,
    op_: &Operand,
    at: &HashMap<VarId, Index>,
    row: Index,
    c: Index,
    ty: DType,
) -> Expr {
    let dim = k.tensor(op_.tensor).shape[op_.row].clone();
    let mut indices: Vec<Index> = op_.indices.iter().map(|i| i.subst(at)).collect();
    indices[op_.row] = Index::bin(IOp::Min, row, dim - Index::c(1));
    *indices.last_mut().expect("has a head axis") = c;
    Expr {
        kind: ExprKind::Load {
            tensor: op_.tensor,
            indices,
        },
        dtype: ty,
    }
}

/// A `flash` kernel's first statements: the bindings of its loops to the
/// hardware indices, and the running maxima, sums and output accumulators
/// at their starting values.
fn prologue(em: &Emit, [bx, by, lane, wave]: [VarId; 4]) -> Vec<Stmt> {
    let set = |local: u32, value: Expr| Stmt::LocalStore {
        local,
        index: Index::c(0),
        value,
    };
    let mut body: Vec<Stmt> = [
        (bx, GpuAxis::Block(Dim::X)),
        (by, GpuAxis::Block(Dim::Y)),
        (lane, GpuAxis::Thread(Dim::X)),
        (wave, GpuAxis::Thread(Dim::Y)),
    ]
    .into_iter()
    .map(|(var, axis)| Stmt::Bind { var, axis })
    .collect();
    body.push(set(em.m, float(f64::NEG_INFINITY)));
    body.push(set(em.sum, float(0.0)));
    if let Some((_, g)) = &em.lanes {
        for s in em.slots() {
            body.push(Stmt::LocalStore {
                local: g.max,
                index: s.clone(),
                value: float(f64::NEG_INFINITY),
            });
            body.push(Stmt::LocalStore {
                local: g.sum,
                index: s,
                value: float(0.0),
            });
        }
    }
    // Each lane's output accumulators: its rows' fragments of every
    // instruction-wide column block of the head.
    let (instr, rm, dp) = (em.instr, em.rm, em.dp);
    let outputs =
        rm / i64::from(instr.m) * (dp / i64::from(instr.n)) * i64::from(instr.acc_per_lane());
    body.extend((0..outputs).map(|x| Stmt::LocalStore {
        local: em.oacc,
        index: Index::c(x),
        value: float(0.0),
    }));
    body
}

/// The LDS tiles and registers of a `flash` kernel for `shape`, and the
/// [`Emit`] that writes its statements: `lanes` are the lane and wave
/// loops, `tid` the thread's index in the work-group, `row0` the block's
/// first row.
fn emitter(
    l: &mut Lowering,
    unit: &MatrixUnit,
    shape: Shape,
    [lane, wave]: [VarId; 2],
    tid: Index,
    row0: Index,
    span: Span,
) -> Result<Emit, Diagnostic> {
    let st = l.k.stage(l.sid);
    let Shape {
        ty,
        instr,
        group,
        lanes_n,
        rm,
        bm,
        bn,
        e,
        ep,
        d,
        dp,
        threads,
        stages,
    } = shape;
    let (m, nn) = (i64::from(instr.m), i64::from(instr.n));
    let shared = |name: &str, dtype: DType, len: i64| Local {
        name: format!("{}_{name}", st.name),
        dtype,
        len: len as u32,
        span,
    };
    // Where ldmatrix reads the fragments: K and V swizzled, B fragments
    // two at a time (one ldmatrix.x4 loads both).
    let ldmatrix = unit.has_ldmatrix() && group.is_none();
    let (q_tile, k_tile, mut v_tile) = match group {
        Some(_) => (
            Layout::for_descriptors(ep, bm),
            Layout::for_descriptors(ep, bn),
            Layout::for_descriptors(dp, bn),
        ),
        None => (
            Layout::of(ep, false),
            Layout::of(ep, ldmatrix),
            Layout::of(dp, ldmatrix),
        ),
    };
    let (s_stride, p_stride) = (bn + 1, bn + PAD);
    let row_lanes = crate::mtype::rows::row_lanes(instr, crate::mtype::rows::ROW_LANES);
    let a_of_values = group.map_or(instr, |(_, v, _)| v);
    let p_in_place = row_lanes
        .as_ref()
        .and_then(|_| crate::mtype::rows::weights_in_place(a_of_values, instr, bn));
    // The warpgroup path has no LDS tile for the weights: P·V must read
    // them in place (the table's layouts make it so; checked, not assumed).
    if group.is_some() && p_in_place.is_none() {
        return Err(Diagnostic::new(
            span,
            "`flash` on warpgroups: the score accumulators are not the A layout of P·V's instruction (a rocmc bug)",
        ));
    }
    // AMD's register path (the transposed view, the softmax in
    // registers) also keeps Q there and V by columns: its LDS is then K
    // and V alone, and the weights where P·V cannot read them in place
    // (gfx11) (gfx942, d = 128: 52 KiB to 17 KiB at 128 rows and 32 keys).
    let q_in_registers = instr.transposed && row_lanes.is_some();
    let q_len = if q_in_registers {
        0
    } else {
        bm * q_tile.stride
    };
    if q_in_registers {
        v_tile = Layout::by_columns(dp, d, bn);
    }
    l.g.shared = vec![
        shared("q", ty, q_len),
        shared("k", ty, stages * bn * k_tile.stride),
        shared("v", ty, stages * v_tile.len(bn)),
    ];
    if p_in_place.is_none() {
        l.g.shared.push(shared("weights", ty, bm * p_stride));
    }
    if row_lanes.is_none() {
        l.g.shared.push(shared("scores", DType::F32, bm * s_stride));
        l.g.shared.push(shared("factor", DType::F32, bm));
    }
    let pc = i64::from(instr.acc_per_lane());
    let fm_n = rm / m;
    let sacc = local(l, "scores", fm_n * (bn / nn) * pc, span);
    let oacc = local(l, "out", fm_n * (dp / nn) * pc, span);
    let (af, bf, group) = fragments(l, shape, ldmatrix, span);
    let pair_b = ldmatrix;
    let [mreg, sum, mnew, rs, p, alpha] =
        ["max", "sum", "new_max", "tile_sum", "p", "alpha"].map(|name| local(l, name, 1, span));
    let q_regs = q_in_registers.then(|| {
        let len = fm_n * (ep / i64::from(instr.k)) * i64::from(instr.a_per_lane());
        local_typed(l, "q", ty, len, span)
    });
    let lanes = row_lanes.map(|rl| {
        let regs = row_regs(l, fm_n * i64::from(rl.slots), span);
        (rl, regs)
    });
    Ok(Emit {
        instr,
        t: ty,
        rm,
        threads,
        wave_lanes: lanes_n,
        group,
        bn,
        e,
        ep,
        d,
        dp,
        lane: Index::Var(lane),
        wave: Index::Var(wave),
        tid,
        row0,
        sacc,
        oacc,
        af,
        bf,
        m: mreg,
        sum,
        mnew,
        rs,
        p,
        alpha,
        lanes,
        p_in_place,
        q_regs,
        pair_b,
        q_tile,
        k_tile,
        v_tile,
        s_stride,
        p_stride,
    })
}

/// The matrix fragments' registers: A and B of the scores' instruction,
/// or, on warpgroups, Q and K's and the weights' and V's fragments.
fn fragments(
    l: &mut Lowering,
    shape: Shape,
    ldmatrix: bool,
    span: Span,
) -> (u32, u32, Option<group::Group>) {
    let name = l.k.stage(l.sid).name.clone();
    let Shape {
        ty,
        instr,
        rm,
        bn,
        ep,
        dp,
        ..
    } = shape;
    let fm_n = rm / i64::from(instr.m);
    let (pa, pb) = (i64::from(instr.a_per_lane()), i64::from(instr.b_per_lane()));
    let frag = |l: &mut Lowering, fname: &str, len: i64| {
        l.g.locals.push(Local {
            name: format!("{}_{fname}", name),
            dtype: ty,
            len: len as u32,
            span,
        });
        l.g.locals.len() as u32 - 1
    };
    match shape.group {
        None => (
            frag(l, "a", fm_n * pa),
            frag(l, "b", if ldmatrix { 2 * pb } else { pb }),
            None,
        ),
        Some((scores, values, _)) => {
            let per =
                |i: &MatrixInstr, cols: i64| cols / i64::from(i.n) * i64::from(i.b_per_lane());
            let (qk_steps, pv_steps) = (ep / 16, bn / 16);
            let af = frag(l, "q_frag", qk_steps * i64::from(scores.a_per_lane()));
            let bf = frag(l, "k_frag", qk_steps * per(scores, bn));
            let pf = frag(l, "p_frag", pv_steps * i64::from(values.a_per_lane()));
            let vf = frag(l, "v_frag", pv_steps * per(values, dp));
            (
                af,
                bf,
                Some(group::Group {
                    scores,
                    values,
                    pf,
                    vf,
                }),
            )
        }
    }
}

/// The per-row registers of a softmax whose rows are spread over lanes,
/// `slots` of each.
fn row_regs(l: &mut Lowering, slots: i64, span: Span) -> lanes::RowRegs {
    let [max, sum, new_max, alpha] =
        ["row_max", "row_sum", "row_new_max", "row_alpha"].map(|n| local(l, n, slots, span));
    let xchg = local(l, "exchange", 1, span);
    lanes::RowRegs {
        max,
        sum,
        new_max,
        alpha,
        xchg,
    }
}

/// The loop body of key tile `kt`: the wait for its copies and the copy
/// `stages - 1` tiles ahead (`tile_copy(tile, buffer)`), the scores, the
/// online softmax (in registers or through LDS; masked by `keys_of`, each
/// row's key count, only on tiles past the first row's), and weights
/// times values.
#[allow(clippy::too_many_arguments)]
fn key_tile(
    em: &Emit,
    kt: VarId,
    ntiles: &Index,
    stages: i64,
    scale: &Expr,
    keys_of: &dyn Fn(Index) -> Index,
    tile_copy: &dyn Fn(Index, Index) -> Vec<Stmt>,
    col: VarId,
) -> Vec<Stmt> {
    let buf = Index::bin(IOp::Mod, Index::Var(kt), Index::c(stages));
    let mut step = Vec::new();
    if stages == 1 {
        step.push(Stmt::Barrier);
        step.extend(tile_copy(Index::Var(kt), Index::c(0)));
        step.push(Stmt::AsyncCommit);
        step.push(Stmt::AsyncWait { pending: 0 });
        step.push(Stmt::Barrier);
    } else {
        step.push(Stmt::AsyncWait {
            pending: (stages - 2) as u32,
        });
        step.push(Stmt::Barrier);
        let ahead = Index::Var(kt) + Index::c(stages - 1);
        step.push(Stmt::If {
            guards: vec![Guard {
                value: ahead.clone(),
                extent: ntiles.clone(),
            }],
            body: tile_copy(ahead.clone(), Index::bin(IOp::Mod, ahead, Index::c(stages))),
        });
        step.push(Stmt::AsyncCommit);
    }
    step.extend(em.scores(buf.clone()));
    // Tiles wholly inside the first row's keys need no mask.
    let key0 = Index::Var(kt) * Index::c(em.bn);
    let count = |local_row: Index| keys_of(em.row0.clone() + local_row);
    let no_mask = vec![Guard {
        value: key0.clone() + Index::c(em.bn - 1),
        extent: keys_of(em.row0.clone()),
    }];
    if em.lanes.is_some() {
        // A positive constant scale goes into each weight's `exp2` (one
        // multiply-add) and the maximum of the raw scores.
        let fold = positive_constant(scale).is_some();
        let pre = (!fold).then_some(scale);
        step.push(Stmt::Unswitch {
            guards: no_mask,
            fast: em.scale_in_place(pre, &key0, None),
            slow: em.scale_in_place(pre, &key0, Some(&count)),
        });
        step.extend(em.softmax_in_registers(fold.then(|| base2(scale.clone()))));
        // The weights of a wave's rows, written by its lanes in the
        // accumulator layout, read in the A layout.
        if em.p_in_place.is_none() {
            step.push(Stmt::Barrier);
        }
    } else {
        step.push(Stmt::Unswitch {
            guards: no_mask,
            fast: em.publish(scale, &key0, None),
            slow: em.publish(scale, &key0, Some(&count)),
        });
        step.push(Stmt::Barrier);
        step.extend(em.row_owners(em.softmax(col)));
        step.push(Stmt::Barrier);
        step.extend(em.rescale());
    }
    step.extend(em.values(buf));
    step
}

/// What [`build`] checked and chose before emitting anything (beside the
/// three operands): the instruction (a warpgroup's on sm_90a, with [`group`]'s
/// pair), the rows a wave takes, and the tile sizes with the head
/// dimensions padded to the instruction.
#[derive(Clone, Copy)]
struct Shape {
    ty: DType,
    instr: &'static MatrixInstr,
    group: Option<(
        &'static MatrixInstr,
        &'static MatrixInstr,
        &'static MatrixInstr,
    )>,
    lanes_n: i64,
    rm: i64,
    bm: i64,
    bn: i64,
    e: i64,
    ep: i64,
    d: i64,
    dp: i64,
    threads: i64,
    stages: i64,
}

/// The checks of `flash` on attention `a` (its producers inlined): its
/// query, key and value operands and the shape they leave.
fn check(
    l: &Lowering,
    unit: &MatrixUnit,
    a: &Attention,
    t: Tiles,
    span: Span,
) -> Result<([Operand; 3], Shape), Diagnostic> {
    let st = l.k.stage(l.sid);
    let red = st.reduce().expect("an attention is a reduction");
    let n = st.axes.len();
    let (iv, dv, jv, ev) = (
        VarId(n as u32 - 2),
        VarId(n as u32 - 1),
        VarId(n as u32),
        VarId(n as u32 + 1),
    );
    let q = operand(&a.q, iv, ev, "query", span)?;
    let kx = operand(&a.k, jv, ev, "key", span)?;
    let vx = operand(&a.v, jv, dv, "value", span)?;
    let ty = a.q.dtype;
    if a.k.dtype != ty || a.v.dtype != ty || !matches!(ty, DType::F16 | DType::BF16) {
        return Err(Diagnostic::new(
            span,
            format!(
                "`flash` multiplies f16 or bf16 tensors of one type; here q is {}, k {}, v {}",
                a.q.dtype, a.k.dtype, a.v.dtype
            ),
        )
        .hint("schedule with `rowwise`"));
    }
    let w = i64::from(unit.wave());
    let (bm, bn) = (i64::from(t.rows), i64::from(t.keys));
    let instr = pick(unit, ty, bn, span)?;
    let (nn, kk) = (i64::from(instr.n), i64::from(instr.k));
    let wave_rows = i64::from(t.wave_rows);
    let per_wave = if wave_rows == 0 { w } else { wave_rows };
    if bm % per_wave != 0 || bm / per_wave > 16 {
        return Err(Diagnostic::new(
            span,
            format!("rows={bm}: each of a work-group's waves takes {per_wave} rows ({}), so rows is a multiple of {per_wave}, at most {}",
                if wave_rows == 0 { "a row per lane" } else { "wave_rows" },
                16 * per_wave),
        ));
    }
    if bn % nn != 0 || bn % kk != 0 {
        return Err(Diagnostic::new(
            span,
            format!(
                "keys={bn}: a multiple of {} ({}: {}x{}x{})",
                nn.max(kk),
                crate::lower::matrix::instr_id(instr),
                instr.m,
                instr.n,
                instr.k
            ),
        ));
    }
    let Some(e) = red.axes[1].extent.as_const() else {
        return Err(Diagnostic::new(
            red.axes[1].span,
            "`flash` keeps a row of Q per lane's fragments: the head axis's extent must be a constant",
        ));
    };
    let d = st.axes[n - 1]
        .extent
        .as_const()
        .expect("checked: a constant");
    if !nondecreasing(&red.axes[0].extent, iv) {
        return Err(Diagnostic::new(
            red.axes[0].span,
            "`flash` skips the key tiles past the block's last row: the key count must not shrink as the query row grows",
        )
        .hint("as `T` or `min(i + 1, T)`; or schedule with `rowwise`"));
    }
    // On sm_90a, warpgroups of 128 lanes, 64 rows each, where the tiles
    // are whole warpgroup instructions.
    let group = group::pick(unit, ty, bm, bn, e, d);
    // gfx11's WMMA keeps a wave's 32 rows of a head dimension over 64 in
    // more than its 256 registers (128 of them the outputs), and on its
    // transposed view Q's fragments join them (d = 64: 255 VGPRs and 36
    // bytes of scratch): a wave takes one instruction's 16 rows instead.
    let wmma_rows =
        instr.family == rocmc_target::matrix::Family::WmmaGfx11 && (d > 64 || instr.transposed);
    let (instr, lanes_n, rm) = match group {
        Some(_) if wave_rows != 0 && wave_rows != group::ROWS => {
            return Err(Diagnostic::new(
                span,
                format!(
                    "wave_rows={wave_rows}: on {}'s warpgroups each takes {} rows",
                    unit.gpu(),
                    group::ROWS
                ),
            ))
        }
        Some((_, _, base)) => (base, 128, group::ROWS),
        // Fewer rows than lanes: the LDS softmax's lanes past them idle.
        None if wave_rows != 0 => {
            let m = i64::from(instr.m);
            if wave_rows % m != 0 || wave_rows > w {
                return Err(Diagnostic::new(
                    span,
                    format!(
                        "wave_rows={wave_rows}: whole {m}-row fragments of {} and at most the wave's {w} lanes",
                        crate::lower::matrix::instr_id(instr)
                    ),
                ));
            }
            (instr, w, wave_rows)
        }
        None if wmma_rows => (instr, w, i64::from(instr.m)),
        None => (instr, w, w),
    };
    let (nn, kk) = (i64::from(instr.n), i64::from(instr.k));
    let ep = (e + kk - 1) / kk * kk;
    let ep = (ep + 7) / 8 * 8;
    let dp = (d + nn - 1) / nn * nn;
    let dp = (dp + 7) / 8 * 8;
    let threads = bm / rm * lanes_n;
    let stages = i64::from(t.stages);
    let shape = Shape {
        ty,
        instr,
        group,
        lanes_n,
        rm,
        bm,
        bn,
        e,
        ep,
        d,
        dp,
        threads,
        stages,
    };
    Ok(([q, kx, vx], shape))
}

/// After the last tile: each row's `1 / sum` to LDS (and its log-sum-exp
/// stored by its lane), then every output element divided and stored.
fn finish_rows(
    l: &Lowering,
    a: &Attention,
    em: &Emit,
    at: &HashMap<VarId, Index>,
    iv: VarId,
    dv: VarId,
    s_ext: &Index,
) -> Vec<Stmt> {
    let st = l.k.stage(l.sid);
    let n = st.axes.len();
    let r = |local: u32| reg(local, Index::c(0));
    let me = em.own_row();
    let live = op(BinOp::Gt, r(em.sum), float(0.0));
    let mut out = match &em.lanes {
        Some(_) => em.finish_in_registers(),
        // The last tile's rescale may still read the factors.
        None => [
            vec![Stmt::Barrier],
            em.row_owners(vec![Stmt::SharedStore {
                shared: AL,
                index: me.clone(),
                value: select(live, op(BinOp::Div, float(1.0), r(em.sum)), float(0.0)),
            }]),
        ]
        .concat(),
    };
    let index_at = |i: Index, d: Option<Index>| -> Vec<Index> {
        let mut m = at.clone();
        m.insert(iv, i);
        if let Some(d) = d {
            m.insert(dv, d);
        }
        let upto = if m.contains_key(&dv) { n } else { n - 1 };
        (0..upto).map(|x| m[&VarId(x as u32)].clone()).collect()
    };
    if let (Some(lt), Some(_)) = (a.outputs.get(1), &em.lanes) {
        for (row, slot) in em.row_slots() {
            let i = em.row0.clone() + row;
            out.push(Stmt::If {
                guards: vec![
                    Guard {
                        value: i.clone(),
                        extent: s_ext.clone(),
                    },
                    em.first_of_row(),
                ],
                body: vec![Stmt::Store {
                    tensor: *lt,
                    indices: index_at(i, None),
                    value: em.row_lse(slot),
                }],
            });
        }
    } else if let Some(lt) = a.outputs.get(1) {
        let i = em.row0.clone() + me.clone();
        out.extend(em.row_owners(vec![Stmt::If {
            guards: vec![Guard {
                value: i.clone(),
                extent: s_ext.clone(),
            }],
            body: vec![Stmt::Store {
                tensor: *lt,
                indices: index_at(i, None),
                value: lse(r(em.m), r(em.sum)),
            }],
        }]));
    }
    if em.lanes.is_none() {
        out.push(Stmt::Barrier);
    }
    let (ins, lane) = (em.instr, &em.lane);
    let (m, nn, pc) = (
        i64::from(ins.m),
        i64::from(ins.n),
        i64::from(ins.acc_per_lane()),
    );
    let (fm_n, fd_n) = (em.rm / m, em.dp / nn);
    for fm in 0..fm_n {
        for fd in 0..fd_n {
            for e in 0..ins.acc_per_lane() {
                let (rc, cc) = ins.acc_coord(e);
                let row = em.row(fm, &rc);
                let d = Index::c(fd * nn) + coord(&cc, lane);
                let i = em.row0.clone() + row.clone();
                let factor = match &em.lanes {
                    Some((_, g)) => reg(g.alpha, em.slot(fm, e)),
                    None => em.lds(AL, row, DType::F32),
                };
                let v = op(
                    BinOp::Mul,
                    reg(em.oacc, Index::c((fm * fd_n + fd) * pc + i64::from(e))),
                    factor,
                );
                let mut guards = vec![Guard {
                    value: i.clone(),
                    extent: s_ext.clone(),
                }];
                if em.dp != em.d {
                    guards.push(Guard {
                        value: d.clone(),
                        extent: Index::c(em.d),
                    });
                }
                out.push(Stmt::If {
                    guards,
                    body: vec![Stmt::Store {
                        tensor: a.outputs[0],
                        indices: index_at(i, Some(d)),
                        value: cast(v, st.value.dtype),
                    }],
                });
            }
        }
    }
    out
}
