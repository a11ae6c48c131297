//! Pass `matrix_descs`: for matrix instructions that read A and B from LDS
//! through descriptors (Hopper's `wgmma`), each operand fragment's fill —
//! the per-lane LDS reads lowering wrote, in rocmc's own register layout —
//! becomes a [`Stmt::MatrixDesc`] naming where the operand starts.
//!
//! A fill is replaced only where the pass proves the descriptor names
//! exactly the elements the reads do: every read is of one tile laid out
//! by `cache_read(..., swizzle=128)` ([`super::cache::swizzle`]); with the
//! lane fixed to each of the warpgroup's 128 values, the row and column of
//! each read are one lane-independent start plus the constant the
//! instruction's layout gives that lane and element; the start row is a
//! multiple of 8 and the start column of a 16-byte chunk (so the hardware's
//! swizzle of address bits lines up with the tile's), and every buffer of
//! the tile is a multiple of 1024 bytes. The reads stay inside the
//! statement as its meaning, which the CPU and the interpreter run.
//!
//! A warpgroup instruction cannot run without its descriptors, so a fill
//! that fails the proof is an error naming the reason.

use super::cache::swizzle::{unswizzled, Swizzled};
use super::{Lowering, Stmt};
use crate::diag::Diagnostic;
use crate::index::{IOp, Index, VarId};
use crate::kernel::ExprKind;
use crate::loops::visit::walk;
use crate::loops::{Local, OperandDesc};
use crate::DType;
use rocmc_target::matrix::MatrixInstr;
use std::collections::{BTreeMap, HashMap};

/// Which operand a register array holds.
#[derive(Clone, Copy)]
enum Role {
    A,
    B,
}

struct Operand {
    role: Role,
    instr: &'static MatrixInstr,
    /// The array its descriptors go to.
    desc: u32,
}

pub(super) fn run(l: &mut Lowering) -> Result<(), Diagnostic> {
    let mut found: BTreeMap<u32, (Role, &'static MatrixInstr)> = BTreeMap::new();
    let mut lane = None;
    walk(&l.g.body, &mut |s| {
        if let Stmt::Matrix {
            instr,
            a,
            b,
            lane: Index::Var(v),
            ..
        } = s
        {
            if instr.warpgroup() {
                if instr.a_in_shared() {
                    found.insert(a.0, (Role::A, instr));
                }
                found.insert(b.0, (Role::B, instr));
                lane = Some(*v);
            }
        }
    });
    let Some(lane) = lane else { return Ok(()) };
    let mut ops = HashMap::new();
    for (id, (role, instr)) in found {
        let src = &l.g.locals[id as usize];
        let local = Local {
            name: format!("{}_desc", src.name),
            dtype: DType::I64,
            len: src.len,
            span: src.span,
        };
        l.g.locals.push(local);
        let desc = l.g.locals.len() as u32 - 1;
        ops.insert(id, Operand { role, instr, desc });
    }
    let span = l.nest.matrix.as_ref().map(|m| m.span).unwrap_or_default();
    let cx = Cx {
        ops: &ops,
        lane,
        shared: &l.g.shared,
    };
    let body = std::mem::take(&mut l.g.body);
    let body = cx.rewrite(body).map_err(|why| {
        Diagnostic::new(
            span,
            format!("a warpgroup matrix instruction reads A and B from LDS through descriptors, and {why}"),
        )
        .hint("stage both operands with `cache_read(X, shared, ko, swizzle=128)` at the loop over tiles of k, 64 f16 wide (128 bytes), with the k loops outside the fragment loops")
    })?;
    let mut transposed = Vec::new();
    walk(&body, &mut |s| {
        if let Stmt::MatrixDesc {
            local,
            mn_block: Some(_),
            ..
        } = s
        {
            transposed.push(*local);
        }
    });
    l.g.body = set_descriptors(body, &ops, &transposed);
    Ok(())
}

struct Cx<'a> {
    ops: &'a HashMap<u32, Operand>,
    lane: VarId,
    shared: &'a [Local],
}

impl Cx<'_> {
    fn rewrite(&self, body: Vec<Stmt>) -> Result<Vec<Stmt>, String> {
        let mut out = Vec::with_capacity(body.len());
        let mut i = 0;
        while i < body.len() {
            if let Stmt::LocalStore { local, .. } = &body[i] {
                if let Some(op) = self.ops.get(local) {
                    let n = match op.role {
                        Role::A => op.instr.a_per_lane(),
                        Role::B => op.instr.b_per_lane(),
                    } as usize;
                    let run = body.get(i..i + n).ok_or("an operand's fill is cut short")?;
                    out.push(self.descriptor(op, run)?);
                    i += n;
                    continue;
                }
            }
            let mut err = None;
            let s = body[i].clone().map_bodies(&mut |b| match self.rewrite(b) {
                Ok(b) => b,
                Err(e) => {
                    err = Some(e);
                    Vec::new()
                }
            });
            if let Some(e) = err {
                return Err(e);
            }
            out.push(s);
            i += 1;
        }
        Ok(out)
    }

    /// The descriptor statement of one fragment's fill `run`, if proved.
    fn descriptor(&self, op: &Operand, run: &[Stmt]) -> Result<Stmt, String> {
        let mut reads = Vec::with_capacity(run.len());
        let mut first_index = None;
        for (e, s) in run.iter().enumerate() {
            let Stmt::LocalStore {
                local,
                index,
                value,
            } = s
            else {
                return Err("an operand's fill holds other statements".into());
            };
            let base = first_index.get_or_insert_with(|| index.clone());
            let step = index.clone() - base.clone();
            if self.ops.get(local).map(|o| o.desc) != Some(op.desc)
                || step.affine() != (HashMap::new(), e as i64)
            {
                return Err("an operand's fill is not one fragment's elements in order".into());
            }
            let ExprKind::Shared { shared, index } = &value.kind else {
                return Err(format!(
                    "element {e} of a fragment is not read from LDS as it is (a k tail's zeroing, or no `cache_read`)"
                ));
            };
            let Some(sw) = unswizzled(index) else {
                let name = &self.shared[*shared as usize].name;
                return Err(format!("`{name}` is not laid out with `swizzle=128`"));
            };
            reads.push((*shared, sw));
        }
        let (shared, first) = reads[0].clone();
        for (sh, sw) in &reads {
            if *sh != shared
                || sw.slot != first.slot
                || (sw.width, sw.chunk, sw.block) != (first.width, first.chunk, first.block)
                || sw.slot.uses_var(self.lane)
            {
                return Err("a fragment's reads are of different tiles or buffers".into());
            }
        }
        // K-major: the tile's rows are A's m or B's n, its 128-byte rows k.
        // A 16-bit operand may also be transposed (MN-major, A stored
        // [K, M] or B [K, N]): the tile's rows are k and its columns m or
        // n, in 128-byte blocks.
        let k_major = self.check_lanes(op, &reads, false);
        let bits = match op.role {
            Role::A => op.instr.a.bits(),
            Role::B => op.instr.b.bits(),
        };
        let transposed = bits == 16;
        let mn_major = match &k_major {
            Err(_) if transposed => Some(self.check_lanes(op, &reads, true)),
            _ => None,
        };
        let mn = match (k_major, mn_major) {
            (Ok(()), _) => false,
            (Err(_), Some(Ok(()))) => true,
            (Err(e), None) | (Err(_), Some(Err(e))) => return Err(e),
        };
        let esize = self.shared[shared as usize].dtype.size() as i64;
        // The descriptor's swizzle modes: rows of 128, 64 or 32 bytes,
        // chunks of 16 (what `cache_read(..., swizzle=S)` builds); the
        // narrower ones K-major only.
        let row_bytes = first.width * esize;
        if !super::cache::swizzle::SPANS.contains(&row_bytes) || first.chunk * esize != 16 {
            return Err(
                "the operand's tile is not swizzled in rows of 128, 64 or 32 bytes of 16-byte chunks".into(),
            );
        }
        if mn && row_bytes != 128 {
            return Err(format!(
                "a transposed operand is read in 128-byte swizzled rows only, and its tile's are {row_bytes} bytes"
            ));
        }
        let lane_at = HashMap::from([(self.lane, Index::c(0))]);
        let (start_row, start_col) = (first.row.subst(&lane_at), first.col.subst(&lane_at));
        if start_row.known_divisor() % 8 != 0 {
            return Err("an operand does not start on a multiple of 8 rows of its tile".into());
        }
        if (first.slot.known_divisor() as i64 * esize) % 1024 != 0 && first.slot != Index::c(0) {
            return Err("the tile's buffers are not multiples of 1024 bytes".into());
        }
        let Swizzled {
            slot, width, block, ..
        } = first;
        let (start, mn_block) = if mn {
            // The start's n on a block (64 f16): the descriptor steps
            // blocks by their distance, rows of k by 128 bytes.
            if start_col.known_divisor() % width as u64 != 0 {
                return Err(
                    "a transposed operand does not start on a 128-byte block of its columns".into(),
                );
            }
            let blocks = match block {
                Some(b) => Index::bin(IOp::Div, start_col, Index::c(width)) * Index::c(b),
                None => Index::c(0),
            };
            let bytes = block.map_or(0, |b| (b * esize) as u32);
            (slot + blocks + start_row * Index::c(width), Some(bytes))
        } else {
            if start_col.known_divisor() % first.chunk as u64 != 0 {
                return Err("an operand does not start on a 16-byte chunk of its rows".into());
            }
            match block {
                None => (slot + start_row * Index::c(width) + start_col, None),
                // k longer than a 128-byte row (attention's head axis): the
                // step starts in the block holding its k and, starting on a
                // multiple of its own length, never leaves it.
                Some(b) => {
                    if start_col.known_divisor() % u64::from(op.instr.k) != 0 {
                        return Err(
                            "an operand's k step crosses a 128-byte block of its rows".into()
                        );
                    }
                    let blocks = Index::bin(IOp::Div, start_col.clone(), Index::c(width));
                    let within = Index::bin(IOp::Mod, start_col, Index::c(width));
                    (
                        slot + blocks * Index::c(b) + start_row * Index::c(width) + within,
                        None,
                    )
                }
            }
        };
        let Stmt::LocalStore { index, .. } = &run[0] else {
            unreachable!("checked above")
        };
        Ok(Stmt::MatrixDesc {
            local: op.desc,
            index: index.clone(),
            shared,
            start,
            mn_block,
            row_bytes: row_bytes as u32,
            stores: run.to_vec(),
        })
    }

    /// Whether, for every lane and element, the read's tile row and column
    /// are one lane-independent start plus the instruction's element there:
    /// (m or n, k) as a K-major operand, (k, m or n) `transposed`.
    fn check_lanes(
        &self,
        op: &Operand,
        reads: &[(u32, Swizzled)],
        transposed: bool,
    ) -> Result<(), String> {
        let lane_at = |t: u32| HashMap::from([(self.lane, Index::c(i64::from(t)))]);
        let first = &reads[0].1;
        let (row_terms, row0) = first.row.subst(&lane_at(0)).affine();
        let (col_terms, col0) = first.col.subst(&lane_at(0)).affine();
        for (e, (_, sw)) in reads.iter().enumerate() {
            for t in 0..op.instr.wave {
                let (want_row, want_col) = match (op.role, transposed) {
                    (Role::A, false) => op.instr.a_at(t, e as u32),
                    (Role::A, true) => {
                        let (m, k) = op.instr.a_at(t, e as u32);
                        (k, m)
                    }
                    (Role::B, false) => {
                        let (k, n) = op.instr.b_at(t, e as u32);
                        (n, k)
                    }
                    (Role::B, true) => op.instr.b_at(t, e as u32),
                };
                let (rt, rc) = sw.row.subst(&lane_at(t)).affine();
                let (ct, cc) = sw.col.subst(&lane_at(t)).affine();
                if rt != row_terms
                    || ct != col_terms
                    || rc - row0 != i64::from(want_row)
                    || cc - col0 != i64::from(want_col)
                {
                    return Err(format!(
                        "lane {t}'s element {e} is not the element the instruction reads there"
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Each warpgroup instruction given the arrays of its descriptors.
fn set_descriptors(body: Vec<Stmt>, ops: &HashMap<u32, Operand>, transposed: &[u32]) -> Vec<Stmt> {
    body.into_iter()
        .map(|s| match s {
            Stmt::Matrix {
                instr,
                a,
                b,
                acc,
                lane,
                wave,
                desc: None,
            } if instr.warpgroup() => {
                let d = [&a, &b].map(|x| {
                    ops.get(&x.0).map(|o| OperandDesc {
                        local: o.desc,
                        index: x.1.clone(),
                        transposed: transposed.contains(&o.desc),
                    })
                });
                Stmt::Matrix {
                    instr,
                    a,
                    b,
                    acc,
                    lane,
                    wave,
                    desc: Some(d),
                }
            }
            other => other.map_bodies(&mut |b| set_descriptors(b, ops, transposed)),
        })
        .collect()
}
