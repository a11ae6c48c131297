//! `flash` on Hopper's warpgroup MMA (sm_90a), as FlashAttention-3 runs it
//! without its producer warps: a warpgroup (four warps, 128 lanes) takes 64
//! query rows. Q·Kᵀ reads both Q and the K tile from LDS through
//! descriptors (`wgmma` m64nNk16, the tiles laid out as
//! `cache_read(..., swizzle=128)` lays them out); P·V takes the weights
//! from the score registers as A (`wgmma` with A in registers, whose layout
//! is four `mma.m16n8k16` A fragments, so the scores' accumulators become P
//! in place) and the V tile, stored `[keys, D]`, through a transposed
//! (MN-major) descriptor. Each product is one group: `wgmma.fence`, its
//! instructions, `commit_group`, `wait_group 0`. The softmax is
//! `lanes.rs`'s: a row's scores span the four lanes of a quad of one warp,
//! as with `mma.sync`.
//!
//! Used where the GPU has the instructions for the operand type, a tile of
//! rows and keys is whole warpgroup instructions (multiples of 64), and
//! both head dimensions are whole 128-byte rows (multiples of 64);
//! elsewhere `flash` stays on the warp's `mma.sync`.

use super::*;
use crate::loops::MatrixAsync;

/// The two instructions and the arrays only a warpgroup product has.
#[derive(Clone, Copy, Debug)]
pub(super) struct Group {
    /// Q·Kᵀ: A and B through descriptors, N the widest dividing the keys.
    pub scores: &'static MatrixInstr,
    /// P·V: A from registers, N the widest dividing the head dimension.
    pub values: &'static MatrixInstr,
    /// P's A fragments and V's B fragments (apart from Q's and K's: pass
    /// `matrix_descs` proves each array's fills for one role and shape).
    pub pf: u32,
    pub vf: u32,
}

/// Rows per warpgroup instruction.
pub(super) const ROWS: i64 = 64;

/// The warpgroup instructions for `t`, `keys` and head dimension `d`:
/// (Q·Kᵀ's, P·V's, the 64-wide one whose accumulator layout both share).
pub(super) fn pick(
    unit: &MatrixUnit,
    t: DType,
    rows: i64,
    keys: i64,
    e: i64,
    d: i64,
) -> Option<(
    &'static MatrixInstr,
    &'static MatrixInstr,
    &'static MatrixInstr,
)> {
    let want = mtype(t)?;
    if rows % ROWS != 0 || keys % 64 != 0 || e % 64 != 0 || d % 64 != 0 {
        return None;
    }
    let widest = |list: Vec<&'static MatrixInstr>, cols: i64| {
        list.into_iter()
            .filter(|i| i.a == want && i.k == 16 && cols % i64::from(i.n) == 0)
            .max_by_key(|i| i.n)
    };
    let base = unit
        .group_instructions()
        .into_iter()
        .find(|i| i.a == want && i.n == 64)?;
    let scores = widest(unit.group_instructions(), keys)?;
    let values = widest(unit.group_register_a_instructions(), d)?;
    Some((scores, values, base))
}

impl Emit {
    /// One warpgroup product, `ks_n` steps of k into the `f_n` 64-wide
    /// column fragments of `acc`: every A and B fragment filled first (A's
    /// in registers stay so; the rest become descriptors), then one group
    /// of `issue`, each instruction covering `issue.n / 64` fragments.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn group_product(
        &self,
        issue: &'static MatrixInstr,
        (af, bf): (u32, u32),
        ks_n: i64,
        f_n: i64,
        acc: u32,
        read_a: &dyn Fn(i64, i64, u32, Index, Index) -> Expr,
        read_b: &dyn Fn(Index, Index) -> Expr,
    ) -> Vec<Stmt> {
        let lane = &self.lane;
        let (n, k) = (i64::from(issue.n), i64::from(issue.k));
        let (pa, pb, pc) = (
            i64::from(issue.a_per_lane()),
            i64::from(issue.b_per_lane()),
            i64::from(issue.acc_per_lane()),
        );
        let fw_n = f_n * i64::from(self.instr.n) / n;
        let mut fills = Vec::new();
        let mut ops = Vec::new();
        for ks in 0..ks_n {
            for e in 0..issue.a_per_lane() {
                let (r, kk) = issue.a_coord(e);
                fills.push(Stmt::LocalStore {
                    local: af,
                    index: Index::c(ks * pa + i64::from(e)),
                    value: read_a(
                        0,
                        ks,
                        e,
                        self.row(0, &r),
                        Index::c(ks * k) + coord(&kk, lane),
                    ),
                });
            }
            for fw in 0..fw_n {
                let at = (ks * fw_n + fw) * pb;
                for e in 0..issue.b_per_lane() {
                    let (kk, c) = issue.b_coord(e);
                    fills.push(Stmt::LocalStore {
                        local: bf,
                        index: Index::c(at + i64::from(e)),
                        value: read_b(
                            Index::c(ks * k) + coord(&kk, lane),
                            Index::c(fw * n) + coord(&c, lane),
                        ),
                    });
                }
                ops.push(Stmt::Matrix {
                    instr: issue,
                    a: (af, Index::c(ks * pa)),
                    b: (bf, Index::c(at)),
                    acc: (acc, Index::c(fw * pc)),
                    lane: lane.clone(),
                    wave: self.wave.clone(),
                    desc: None,
                });
            }
        }
        fills.push(Stmt::MatrixAsync(MatrixAsync::Fence));
        fills.extend(ops);
        fills.push(Stmt::MatrixAsync(MatrixAsync::Commit));
        fills.push(Stmt::MatrixAsync(MatrixAsync::Wait(0)));
        fills
    }
}
