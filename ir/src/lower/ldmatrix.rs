//! Pass `matrix_loads`: on NVIDIA processors with `ldmatrix` (sm_75 and
//! later), the per-element LDS reads that fill a 16-bit A or B fragment
//! become one [`Stmt::MatrixLoad`]: the wave loads 8x8 matrices, each lane
//! supplying one row's address, instead of each lane reading its elements
//! one or two at a time.
//!
//! A group is rewritten only where the pass proves that the instruction
//! delivers exactly the elements the reads name, to every lane: each read's
//! LDS index, with the lane fixed to 0..32, is put in affine form; the
//! parts that do not depend on the lane must agree, and the constant parts
//! must follow the instruction's layout (lane `l`'s register `j` holds
//! row `l / 4`, columns `2 (l % 4)` and `+1` of matrix `j`; transposed, rows
//! `2 (l % 4)` and `+1` of column `l / 4`). Every row must start on 16
//! bytes. The address each lane supplies is built from the reads and
//! checked against the same rows. Groups that fail (the k tail's zeroing
//! selects, layouts the instruction cannot produce) stay as they are.
//! The reads stay inside the statement as its meaning: the CPU, the
//! interpreter and other targets execute them.

use super::{Lowering, Stmt};
use crate::diag::Diagnostic;
use crate::index::{IOp, Index, VarId};
use crate::kernel::ExprKind;
use crate::loops::visit::walk;
use std::collections::HashMap;

/// Lanes of an NVIDIA warp.
const WARP: i64 = 32;

pub(super) fn run(l: &mut Lowering) -> Result<(), Diagnostic> {
    let Some(unit) = l.unit else { return Ok(()) };
    if !unit.has_ldmatrix() || l.g.block[0] != WARP as u32 {
        return Ok(());
    }
    // The fragment arrays of 16-bit operands and their elements per lane.
    let mut frags: HashMap<u32, u32> = HashMap::new();
    let mut lane = None;
    walk(&l.g.body, &mut |s| {
        if let Stmt::Matrix {
            instr,
            a,
            b,
            lane: ln,
            ..
        } = s
        {
            if let Index::Var(v) = ln {
                lane = Some(*v);
            }
            for ((id, _), n) in [(a, instr.a_per_lane()), (b, instr.b_per_lane())] {
                if l.g.locals[*id as usize].dtype.size() == 2 && matches!(n, 2 | 4 | 8) {
                    frags.insert(*id, n);
                }
            }
        }
    });
    let Some(lane) = lane else { return Ok(()) };
    let body = std::mem::take(&mut l.g.body);
    l.g.body = rewrite(body, &frags, lane, &mut HashMap::new());
    Ok(())
}

/// Lane offsets of swizzled loads already built, by their values at lanes
/// 0..32: loads whose offsets agree share one expression, which code
/// generation then computes once.
type Offsets = HashMap<Vec<i64>, Index>;

/// `sm_75` and later.
fn rewrite(
    body: Vec<Stmt>,
    frags: &HashMap<u32, u32>,
    lane: VarId,
    offsets: &mut Offsets,
) -> Vec<Stmt> {
    let mut out = Vec::with_capacity(body.len());
    let mut i = 0;
    while i < body.len() {
        if let Some((n, s)) = group(&body[i..], frags, lane, offsets) {
            out.push(s);
            i += n;
        } else {
            out.push(
                body[i]
                    .clone()
                    .map_bodies(&mut |b| rewrite(b, frags, lane, offsets)),
            );
            i += 1;
        }
    }
    out
}

/// The fragment fill starting `stmts`, if it is one ldmatrix can do: how
/// many statements it spans and the statement replacing them. Two
/// fragments filled back to back (a B fragment of four elements per lane
/// and the next) are tried first as one load of four matrices.
fn group(
    stmts: &[Stmt],
    frags: &HashMap<u32, u32>,
    lane: VarId,
    offsets: &mut Offsets,
) -> Option<(usize, Stmt)> {
    let Stmt::LocalStore { local, .. } = stmts.first()? else {
        return None;
    };
    let n = *frags.get(local)? as usize;
    if 2 * n <= 8 {
        if let Some(g) = group_of(stmts, 2 * n, lane, offsets) {
            return Some(g);
        }
    }
    group_of(stmts, n, lane, offsets)
}

/// [`group`] for the first `n` statements.
fn group_of(stmts: &[Stmt], n: usize, lane: VarId, offsets: &mut Offsets) -> Option<(usize, Stmt)> {
    let Stmt::LocalStore { local, index, .. } = stmts.first()? else {
        return None;
    };
    let run = stmts.get(..n)?;
    let (base, c0) = index.affine();
    let mut shared = None;
    let mut reads = Vec::with_capacity(n);
    for (e, s) in run.iter().enumerate() {
        let Stmt::LocalStore {
            local: l2,
            index,
            value,
        } = s
        else {
            return None;
        };
        let (terms, c) = index.affine();
        let ExprKind::Shared {
            shared: sh,
            index: ix,
        } = &value.kind
        else {
            return None;
        };
        if l2 != local || terms != base || c != c0 + e as i64 || value.dtype.size() != 2 {
            return None;
        }
        if *shared.get_or_insert(*sh) != *sh {
            return None;
        }
        reads.push(ix.clone());
    }
    let count = (n / 2) as u32;
    [false, true].into_iter().find_map(|trans| {
        prove(&reads, count as usize, trans, lane, offsets).map(|row| {
            (
                n,
                Stmt::MatrixLoad {
                    shared: shared.expect("n > 0"),
                    row,
                    count,
                    trans,
                    stores: run.to_vec(),
                },
            )
        })
    })
}

/// The row address lane `lane` must supply so that `ldmatrix` (`count`
/// matrices, transposed or not) delivers element `reads[e]` to each lane as
/// its element `e`; `None` if no address does.
fn prove(
    reads: &[Index],
    count: usize,
    trans: bool,
    lane: VarId,
    offsets: &mut Offsets,
) -> Option<Index> {
    let at = |ix: &Index, l: i64| ix.subst(&HashMap::from([(lane, Index::c(l))])).affine();
    let mut uniform = None;
    let mut c = vec![vec![0i64; reads.len()]; WARP as usize];
    for (l, row) in c.iter_mut().enumerate() {
        for (e, ix) in reads.iter().enumerate() {
            let (terms, k) = at(ix, l as i64);
            if *uniform.get_or_insert_with(|| terms.clone()) != terms {
                return None;
            }
            row[e] = k;
        }
    }
    let uniform = uniform?;
    // Where row r of matrix j starts, as the reads say.
    let start = |j: usize, r: usize| {
        if trans {
            c[r / 2][2 * j + r % 2]
        } else {
            c[4 * r][2 * j]
        }
    };
    for (l, row) in c.iter().enumerate() {
        for j in 0..count {
            for h in 0..2 {
                let want = if trans {
                    start(j, 2 * (l % 4) + h) + (l / 4) as i64
                } else {
                    start(j, l / 4) + (2 * (l % 4) + h) as i64
                };
                if row[2 * j + h] != want {
                    return None;
                }
            }
        }
    }
    // 16-byte rows: every term's coefficient and every start a multiple of 8 elements.
    let rows_aligned = (0..count).all(|j| (0..8).all(|r| start(j, r) % 8 == 0));
    if !rows_aligned || uniform.values().any(|k| k % 8 != 0) {
        return None;
    }
    // The row each lane must supply, past the uniform part.
    let table: Vec<i64> = (0..WARP as usize)
        .map(|l| start((l / 8) % count, l % 8))
        .collect();
    let supplies = |row: &Index| {
        (0..WARP as usize).all(|l| {
            let (terms, k) = at(row, l as i64);
            terms == uniform && k == table[l]
        })
    };
    // Rows a constant apart (padded layouts) take one read's address plus
    // constant steps; swizzled rows (`chunk ^ row % 8`) are a lane-chosen
    // combination of each matrix's own read, rewritten where it can be as a
    // shared lane offset with the load's chunk bits flipped.
    let row = shifted(reads, count, trans, lane, &start);
    if supplies(&row) {
        return Some(row);
    }
    let row = chosen(reads, count, trans, lane, &uniform);
    if !supplies(&row) {
        return None;
    }
    Some(flipped(&row, &table, &uniform, lane, offsets).unwrap_or(row))
}

/// The bits of an element offset a swizzle of 16-bit rows permutes: the
/// low three bits of the 8-element chunk.
const CHUNK_BITS: i64 = 0b111_000;

/// `row` (lane `l` supplies `base + table[l]`, `base` the part no lane
/// changes) as `((base + b) ^ k) + a`, with `b` a lane offset shared with
/// every other load whose offsets agree: `k` is the chunk bits of lane 0's
/// row and `a` the rest. Exact where `base` is a multiple of 64 (an
/// exclusive or below bit 6 does not reach it) and `b` is never negative;
/// the loads of one swizzled tile then differ only in `k` and `a`, one
/// exclusive or each, and the adds fold into the load's address.
fn flipped(
    row: &Index,
    table: &[i64],
    uniform: &HashMap<Index, i64>,
    lane: VarId,
    offsets: &mut Offsets,
) -> Option<Index> {
    let base = combine(&[], uniform);
    if !base.known_divisor().is_multiple_of(64) {
        return None;
    }
    let k = table[0] & CHUNK_BITS;
    let a = table[0] - k;
    let b: Vec<i64> = table.iter().map(|t| (t - a) ^ k).collect();
    if b.iter().any(|x| *x < 0) {
        return None;
    }
    let shared = offsets
        .entry(b.clone())
        .or_insert_with(|| {
            let lane_part = combine(
                &[(1, row)],
                &uniform.iter().map(|(t, c)| (t.clone(), -c)).collect(),
            );
            Index::bin(IOp::Xor, lane_part - Index::c(a), Index::c(k))
        })
        .clone();
    let agrees = (0..WARP).all(|l| {
        shared
            .subst(&HashMap::from([(lane, Index::c(l))]))
            .as_const()
            == Some(b[l as usize])
    });
    agrees.then(|| Index::bin(IOp::Xor, base + shared, Index::c(k)) + Index::c(a))
}

/// The lane whose reads name the row lane `lane` supplies (matrix 0's
/// row `lane % 8`): `4 (lane % 8)`, transposed `lane % 8 / 2`.
fn first_reader(lane: VarId, trans: bool) -> HashMap<VarId, Index> {
    let r = Index::Var(lane) % Index::c(8);
    let l = if trans {
        r / Index::c(2)
    } else {
        r * Index::c(4)
    };
    HashMap::from([(lane, l)])
}

/// The row address as `reads[0]`'s, moved by the constant distance
/// between matrices and (transposed) between a lane's two rows.
fn shifted(
    reads: &[Index],
    count: usize,
    trans: bool,
    lane: VarId,
    start: &dyn Fn(usize, usize) -> i64,
) -> Index {
    let ln = Index::Var(lane);
    let r = ln.clone() % Index::c(8);
    let mut row = reads[0].subst(&first_reader(lane, trans));
    if trans {
        row = row + (r % Index::c(2)) * Index::c(start(0, 1) - start(0, 0));
    }
    let matrix = |bit: i64| (ln.clone() / Index::c(8 * bit)) % Index::c(2);
    if count >= 2 {
        row = row + matrix(1) * Index::c(start(1, 0) - start(0, 0));
    }
    if count == 4 {
        row = row + matrix(2) * Index::c(start(2, 0) - start(0, 0));
    }
    row
}

/// The row address as the read that names it: lane `l` supplies row `l % 8`
/// of matrix `l / 8 % count`, which is element `2 j` of lane `4 (l % 8)`
/// (transposed: element `2 j + l % 2` of lane `l % 8 / 2`). The choice is
/// made with the lane's bits as 0/1 factors, so it stays an index. The part
/// no lane changes (`uniform`, the stage's base) is added once outside the
/// choice: what remains is non-negative and depends on the lane alone, so
/// code generation computes it before the loop and adds the base per load.
fn chosen(
    reads: &[Index],
    count: usize,
    trans: bool,
    lane: VarId,
    uniform: &HashMap<Index, i64>,
) -> Index {
    let ln = Index::Var(lane);
    let bit = |div: i64| (ln.clone() / Index::c(div)) % Index::c(2);
    let is = |on: bool, b: Index| if on { b } else { Index::c(1) - b };
    let from = first_reader(lane, trans);
    let base = combine(&[], uniform);
    let mut row = base.clone();
    let halves = if trans { 2 } else { 1 };
    for j in 0..count {
        for h in 0..halves {
            let mut pick = Index::c(1);
            if count >= 2 {
                pick = pick * is(j % 2 == 1, bit(8));
            }
            if count == 4 {
                pick = pick * is(j / 2 == 1, bit(16));
            }
            if trans {
                pick = pick * is(h == 1, bit(1));
            }
            let own = reads[2 * j + h].subst(&from);
            row = row + pick * combine(&[(1, &own), (-1, &base)], &HashMap::new());
        }
    }
    row
}

/// `Σ k · x + Σ k · term` rebuilt from the affine forms, so that parts
/// every `x` shares (the stage's base) cancel; terms in a fixed order for
/// stable output.
fn combine(parts: &[(i64, &Index)], more: &HashMap<Index, i64>) -> Index {
    let mut terms: HashMap<Index, i64> = more.clone();
    let mut c = 0i64;
    for (k, x) in parts {
        let (t, kx) = x.affine();
        c = c.wrapping_add(k.wrapping_mul(kx));
        for (term, coef) in t {
            let e = terms.entry(term).or_insert(0);
            *e = e.wrapping_add(k.wrapping_mul(coef));
        }
    }
    let mut terms: Vec<(String, Index, i64)> = terms
        .into_iter()
        .filter(|(_, k)| *k != 0)
        .map(|(t, k)| (format!("{t:?}"), t, k))
        .collect();
    terms.sort_by(|a, b| a.0.cmp(&b.0));
    terms
        .into_iter()
        .fold(Index::c(c), |acc, (_, t, k)| acc + t * Index::c(k))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::IOp;

    fn v(i: u32) -> Index {
        Index::Var(VarId(i))
    }

    /// [`prove`] for lane variable 0, with no loads proved before.
    fn proves(reads: &[Index], count: usize, trans: bool) -> Option<Index> {
        prove(reads, count, trans, VarId(0), &mut HashMap::new())
    }

    /// `g = lane / 4 % 8` and `t = lane % 4` of lane variable 0.
    fn lane_g_t() -> (Index, Index) {
        let l = v(0);
        let g = Index::bin(IOp::Mod, l.clone() / Index::c(4), Index::c(8));
        (g, l % Index::c(4))
    }

    /// The A fragment of m16n8k16 from a row-major LDS tile with rows of
    /// `stride` elements: element e of lane l is (row g + 8 (e / 2 % 2),
    /// col 2 t + e % 2 + 8 (e / 4)), g = l / 4, t = l % 4.
    fn a_reads(stride: i64, base: Index) -> Vec<Index> {
        let (g, t) = lane_g_t();
        (0..8)
            .map(|e| {
                let row = g.clone() + Index::c(8 * (e / 2 % 2));
                let col = t.clone() * Index::c(2) + Index::c(e % 2 + 8 * (e / 4));
                base.clone() + row * Index::c(stride) + col
            })
            .collect()
    }

    #[test]
    fn a_fragments_from_padded_rows_are_one_x4_load() {
        let row = proves(&a_reads(40, v(1) * Index::c(640)), 4, false).unwrap();
        // Lane 8j + r supplies row r (+8 for odd j) at column 8 (j / 2).
        for l in 0..32i64 {
            let want = (l % 8 + 8 * (l / 8 % 2)) * 40 + 8 * (l / 16) + 640 * 3;
            assert_eq!(row.eval(&[], &[l, 3]), Some(want), "lane {l}");
        }
        assert!(proves(&a_reads(40, Index::c(0)), 4, true).is_none());
    }

    #[test]
    fn rows_off_16_bytes_and_foreign_layouts_are_refused() {
        // Rows of 36 halves are 72 bytes: not every row starts on 16.
        assert!(proves(&a_reads(36, Index::c(0)), 4, false).is_none());
        // A uniform offset of 4 elements (8 bytes) as well.
        assert!(proves(&a_reads(40, v(1) * Index::c(4)), 4, false).is_none());
        // Two elements swapped.
        let mut r = a_reads(40, Index::c(0));
        r.swap(0, 1);
        assert!(proves(&r, 4, false).is_none());
    }

    #[test]
    fn b_fragments_from_k_major_rows_are_one_transposed_x2_load() {
        // B[k][n] with rows of 136: element e of lane l is (k 2t + e % 2 + 8 (e / 2), n g).
        let (g, t) = lane_g_t();
        let reads: Vec<Index> = (0..4)
            .map(|e| {
                (t.clone() * Index::c(2) + Index::c(e % 2 + 8 * (e / 2))) * Index::c(136)
                    + g.clone()
                    + Index::c(16)
            })
            .collect();
        assert!(proves(&reads, 2, false).is_none());
        let row = proves(&reads, 2, true).unwrap();
        for l in 0..16i64 {
            assert_eq!(row.eval(&[], &[l]), Some((l % 8 + 8 * (l / 8)) * 136 + 16));
        }
    }

    #[test]
    fn two_b_fragments_back_to_back_are_one_transposed_x4_load() {
        // V[key][d], rows of 136: fragments of columns n0 and n0 + 8, one
        // after the other (flash's P·V), as the lowering fills them.
        let (g, t) = lane_g_t();
        let reads: Vec<Index> = (0..8)
            .map(|e| {
                let k = t.clone() * Index::c(2) + Index::c(e % 2 + 8 * (e / 2 % 2));
                k * Index::c(136) + g.clone() + Index::c(8 * (e / 4)) + Index::c(32)
            })
            .collect();
        let row = proves(&reads, 4, true).unwrap();
        for l in 0..32i64 {
            let want = (l % 8 + 8 * (l / 8 % 2)) * 136 + 8 * (l / 16) + 32;
            assert_eq!(row.eval(&[], &[l]), Some(want), "lane {l}");
        }
        // Any columns for the second fragment: each lane supplies its row.
        let mut off = reads.clone();
        for r in &mut off[4..] {
            *r = r.clone() + Index::c(8);
        }
        assert!(proves(&off, 4, true).is_some());
        // Its two rows swapped: lanes supply the rows in that order.
        off.swap(4, 5);
        assert!(proves(&off, 4, true).is_some());
        // An element whose column is not the lane's (2 g instead of g): no load delivers that.
        off[5] = off[5].clone() + g.clone();
        assert!(proves(&off, 4, true).is_none());
    }

    /// `row * 128 + (chunk ^ row % 8) * 8 + column % 8`: unpadded 256-byte
    /// rows whose 16-byte chunks are permuted by the row.
    fn swizzled(row: Index, col: Index, base: Index) -> Index {
        let chunk = Index::bin(
            IOp::Xor,
            col.clone() / Index::c(8),
            row.clone() % Index::c(8),
        );
        base + row * Index::c(128) + chunk * Index::c(8) + col % Index::c(8)
    }

    /// K[key][d] swizzled: the two B fragments of keys `key0..key0 + 16`
    /// at k step `ks`, the stage's base a variable.
    fn key_reads(ks: i64, key0: i64) -> Vec<Index> {
        let (g, t) = lane_g_t();
        let base = v(1) * Index::c(4096);
        (0..8)
            .map(|e| {
                let key = g.clone() + Index::c(key0 + 8 * (e / 4));
                let d =
                    Index::c(16 * ks) + t.clone() * Index::c(2) + Index::c(e % 2 + 8 * (e / 2 % 2));
                swizzled(key, d, base.clone())
            })
            .collect()
    }

    #[test]
    fn swizzled_key_fragments_are_one_x4_load() {
        let mut offsets = HashMap::new();
        for (ks, key0) in [(3, 16), (0, 0), (6, 16), (7, 0)] {
            let reads = key_reads(ks, key0);
            let row = prove(&reads, 4, false, VarId(0), &mut offsets).expect("provable");
            for l in 0..32i64 {
                let (j, r) = (l / 8, l % 8);
                let key = key0 + 8 * (j / 2) + r;
                let chunk = (2 * ks + j % 2) ^ (key % 8);
                let want = 2 * 4096 + key * 128 + chunk * 8;
                assert_eq!(row.eval(&[], &[l, 2]), Some(want), "ks {ks}, lane {l}");
            }
            // The same reads with two elements swapped: no load delivers them.
            let mut bad = reads.clone();
            bad.swap(2, 3);
            assert!(proves(&bad, 4, false).is_none());
        }
        // Every load of the tile flips the chunk bits of one lane offset.
        assert_eq!(offsets.len(), 1);
    }

    #[test]
    fn swizzled_value_fragments_are_one_transposed_x4_load() {
        // V[key][d]: the B fragments of columns 40..47 and 48..55 at k step 1.
        let (g, t) = lane_g_t();
        let reads: Vec<Index> = (0..8)
            .map(|e| {
                let key =
                    Index::c(16) + t.clone() * Index::c(2) + Index::c(e % 2 + 8 * (e / 2 % 2));
                let d = g.clone() + Index::c(40 + 8 * (e / 4));
                swizzled(key, d, Index::c(0))
            })
            .collect();
        assert!(proves(&reads, 4, false).is_none());
        let row = proves(&reads, 4, true).expect("provable");
        for l in 0..32i64 {
            let (j, r) = (l / 8, l % 8);
            let key = 16 + r + 8 * (j % 2);
            let chunk = (5 + j / 2) ^ (key % 8);
            assert_eq!(row.eval(&[], &[l]), Some(key * 128 + chunk * 8), "lane {l}");
        }
    }
}
