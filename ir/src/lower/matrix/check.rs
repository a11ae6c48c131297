//! The checks of a stage with `mma`: its product's two factors, the
//! instruction they and the loops' shape select, and the loop order
//! around the instruction with the fragments it leaves each lane.

use super::{describe, f8_types, instr_id, mtype, operand, MatrixUnit, Stage};
use crate::diag::Diagnostic;
use crate::index::{Index, VarId};
use crate::kernel::{BinOp, Expr, ExprKind, ReduceOp};
use crate::lower::Lowering;
use crate::DType;
use rocmc_target::matrix::MatrixInstr;

/// The two factors of a sum of products, A's (varying with the rows)
/// first, without their casts to the accumulator type; and that type.
pub(super) fn operands(l: &Lowering, st: &Stage) -> Result<(Expr, Expr, DType), Diagnostic> {
    let nest = &l.nest;
    let req = nest.matrix.as_ref().expect("a stage with mma");
    let stage = l.k.stage(l.sid);
    let name = |v: VarId| nest.var(v).name.clone();
    let (ri, rj) = (req.rows, req.cols);
    if st.op != Some(ReduceOp::Sum) {
        let what = match (st.op, stage.reduce().and_then(|r| r.construct())) {
            (Some(op), _) => format!("a {} reduction", op.name()),
            (None, kind) => kind.unwrap_or("no reduction").to_string(),
        };
        return Err(Diagnostic::new(
            req.span,
            format!(
                "`mma` needs a sum of products; stage `{}` is {what}",
                stage.name
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
    let (fa, fb) = if !x.uses_var(rj) && !y.uses_var(ri) {
        (operand(x, acc_t), operand(y, acc_t))
    } else if !y.uses_var(rj) && !x.uses_var(ri) {
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
    let (fa, fb) = (staged_as(l, fa), staged_as(l, fb));
    // Mixed operands no instruction takes (f16 by i8): the 8-bit one
    // converted exactly, in registers as its fragments are read.
    let (fa, fb) = match crate::mtype::widened([fa.dtype, fb.dtype, acc_t]) {
        Some([ta, tb, _]) => (fa.cast_to(ta), fb.cast_to(tb)),
        None => (fa, fb),
    };
    Ok((fa, fb, acc_t))
}

/// A factor read from a tensor whose tile converts it on the way
/// (`cache_read(..., dtype=f16)`) as the instruction will see it: the
/// conversion, exact by the step's check, written out, so the types are
/// the tile's and the cache pass finds the tile's element under it.
fn staged_as(l: &Lowering, f: Expr) -> Expr {
    let ExprKind::Load { tensor, .. } = &f.kind else {
        return f;
    };
    let to = l
        .nest
        .caches
        .iter()
        .find(|c| c.tensor == *tensor && !c.kind.write())
        .and_then(|c| c.dtype);
    match to {
        Some(to) => f.cast_to(to),
        None => f,
    }
}

/// The matrix instruction for `fa x fb -> acc_t`: the one the step names,
/// else the one of the loops' shape, checked against the loops' shape.
pub(super) fn choose(
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
            // One name may cover several operand types (gfx950's f8f6f4
            // reads fp8 and bf8): the stage's types first.
            let named = |i: &&MatrixInstr| instr_id(i) == n.name;
            let Some(i) = typed
                .iter()
                .copied()
                .find(named)
                .or_else(|| all.iter().copied().find(named))
            else {
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
pub(super) struct Frags<'s> {
    /// Loops outside the reduction.
    pub(super) outer: &'s [VarId],
    /// Reduction loops around the instruction.
    pub(super) kloops: Vec<VarId>,
    /// Output loops over fragments, and those of them A and B vary with.
    pub(super) frags: Vec<VarId>,
    pub(super) a_frags: Vec<VarId>,
    pub(super) b_frags: Vec<VarId>,
    /// Fragments of the accumulator, A and B, and each one's index.
    pub(super) n: [i64; 3],
    pub(super) ix: [Index; 3],
    /// Elements each lane holds of one fragment of the accumulator, A and B.
    pub(super) per_lane: [i64; 3],
}

/// Checks the loop order around `mma`'s loops and counts the fragments.
pub(super) fn fragments<'s>(
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
    let a_frags: Vec<VarId> = frags.iter().copied().filter(|v| fa.uses_var(*v)).collect();
    let b_frags: Vec<VarId> = frags.iter().copied().filter(|v| fb.uses_var(*v)).collect();
    let (n_acc, acc_ix) = count(&frags)?;
    let (n_a, a_ix) = count(&a_frags)?;
    let (n_b, b_ix) = count(&b_frags)?;
    let (pa, pb, pc) = (
        i64::from(instr.a_per_lane()),
        i64::from(instr.b_per_lane()),
        i64::from(instr.acc_per_lane()),
    );
    if n_acc * pc > crate::lower::MAX_ACCUMULATORS {
        return Err(Diagnostic::new(
            req.span,
            format!(
                "each lane would keep {} accumulators ({n_acc} fragments of {pc}); at most {} fit",
                n_acc * pc,
                crate::lower::MAX_ACCUMULATORS
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
