//! Where a matrix instruction's accumulator rows lie across a wave's
//! lanes, for computations that reduce along them in registers
//! (attention's online softmax): which lanes share a row, whether a
//! product's A fragments are another's accumulators in place, and which
//! instruction `flash` takes on a unit. Facts of the lane layouts alone,
//! asked by lowering and by the default rules.

use crate::mtype::mtype;
use crate::DType;
use rocmc_target::matrix::{Family, LaneCoord, MType, MatrixInstr, MatrixUnit};

/// The most lanes a row's accumulators may span for the softmax to stay
/// in registers: mma.sync's four. MFMA's 32 and WMMA's 16 would cost five
/// or four exchanges per row and tile, and one lane holds up to 16 rows.
pub const ROW_LANES: u32 = 4;

/// Lane bits across which a row's accumulator elements are spread, and
/// each element's row slot (elements of one lane on one row share one).
#[derive(Clone, Debug)]
pub struct RowLanes {
    /// The masks to exchange over: each a lane bit that never changes an
    /// element's row.
    pub masks: Vec<u32>,
    /// Row slot of accumulator element `e` within its row fragment.
    pub slot_of: Vec<u32>,
    /// Slots per row fragment.
    pub slots: u32,
}

/// The lanes layout of `instr`'s accumulators, when a row's elements span
/// at most `most` lanes (else the softmax goes through LDS, one lane per
/// row, as before).
pub fn row_lanes(instr: &MatrixInstr, most: u32) -> Option<RowLanes> {
    let wave = instr.wave;
    let rows: Vec<LaneCoord> = (0..instr.acc_per_lane())
        .map(|e| instr.acc_coord(e).0)
        .collect();
    let masks: Vec<u32> = (0..wave.trailing_zeros())
        .map(|b| 1u32 << b)
        .filter(|bit| {
            rows.iter()
                .all(|r| (0..wave).all(|l| r.at(l) == r.at(l ^ bit)))
        })
        .collect();
    if 1u32 << masks.len() > most {
        return None;
    }
    // The other bits must tell rows apart, or lanes outside the masks
    // would share a row without exchanging.
    let rows_per_elem = wave >> masks.len();
    let mut slot_of = Vec::new();
    let mut distinct: Vec<&LaneCoord> = Vec::new();
    for r in &rows {
        let seen: std::collections::BTreeSet<u32> = (0..wave).map(|l| r.at(l)).collect();
        if seen.len() as u32 != rows_per_elem {
            return None;
        }
        let slot = match distinct.iter().position(|d| *d == r) {
            Some(s) => s,
            None => {
                distinct.push(r);
                distinct.len() - 1
            }
        };
        slot_of.push(slot as u32);
    }
    Some(RowLanes {
        masks,
        slot_of,
        slots: distinct.len() as u32,
    })
}

/// Where each element of P's A fragments (of `a_instr`, P·V's) sits in the
/// score accumulators (of `instr`), when the accumulator layout of two
/// adjacent column fragments is the A layout of one k step (mma.sync's:
/// FlashAttention-2 feeds its weights to P·V this way; wgmma's with A in
/// registers): for k step `ks` and A element `e`, entry `ks * a_per_lane +
/// e` is the score register within a row fragment. None where some
/// element lives in another lane (MFMA, WMMA); the weights then go through
/// LDS.
pub fn weights_in_place(a_instr: &MatrixInstr, instr: &MatrixInstr, keys: i64) -> Option<Vec<i64>> {
    let (n, k, pc) = (
        i64::from(instr.n),
        i64::from(instr.k),
        i64::from(instr.acc_per_lane()),
    );
    let same = |a: &LaneCoord, a0: i64, b: &LaneCoord, b0: i64| {
        (0..instr.wave).all(|l| a0 + i64::from(a.at(l)) == b0 + i64::from(b.at(l)))
    };
    let mut out = Vec::new();
    for ks in 0..keys / k {
        for e in 0..a_instr.a_per_lane() {
            let (ar, ak) = a_instr.a_coord(e);
            let found = (0..keys / n).find_map(|fc| {
                (0..instr.acc_per_lane()).find_map(|c| {
                    let (cr, cc) = instr.acc_coord(c);
                    (same(&ar, 0, &cr, 0) && same(&ak, ks * k, &cc, fc * n))
                        .then_some(fc * pc + i64::from(c))
                })
            })?;
            out.push(found);
        }
    }
    Some(out)
}

/// The instruction `flash` takes on `unit` for `t` (f16 or bf16) operands
/// and f32 accumulators. AMD's (MFMA, WMMA) as its transposed view (the
/// keys as the hardware's rows, the queries as its columns): a query
/// row's scores then lie in 4 lanes (MFMA 16x16) or 2 (MFMA 32x32, WMMA)
/// instead of 16 or 32, so the softmax stays in the score registers,
/// which P·V then reads as its A fragments where the layouts agree (MFMA,
/// gfx12; gfx11's A wants a row's 16 keys in one lane). Of those, first one whose weights stay in place for `keys`
/// keys, then the longest k (fewest instructions per head column), then
/// the smallest m·n.
pub fn flash_instr(unit: &MatrixUnit, t: DType, keys: i64) -> Option<&'static MatrixInstr> {
    let want = mtype(t);
    unit.instructions()
        .into_iter()
        .filter(|i| Some(i.a) == want && Some(i.b) == want && i.acc == MType::F32)
        .filter(|i| unit.wave().is_multiple_of(i.m))
        .map(|i| match i.family {
            Family::Mfma | Family::WmmaGfx11 | Family::WmmaGfx12 => {
                i.transposed_view().unwrap_or(i)
            }
            _ => i,
        })
        .max_by_key(|i| (weights_stay(i, keys), i.k, std::cmp::Reverse(i.m * i.n)))
}

/// Whether `instr`'s tile of `keys` keys keeps the softmax in its score
/// registers and P·V reads its weights there (no LDS for either).
pub fn weights_stay(instr: &MatrixInstr, keys: i64) -> bool {
    let (n, k) = (i64::from(instr.n), i64::from(instr.k));
    keys > 0
        && keys % n == 0
        && keys % k == 0
        && row_lanes(instr, ROW_LANES).is_some()
        && weights_in_place(instr, instr, keys).is_some()
}

/// Whether `flash` on `unit` takes the transposed MFMA view and keeps
/// scores and weights out of LDS for tiles of `keys` keys: its LDS is
/// then only the K and V tiles (and Q too moves to registers). (mma.sync
/// keeps them in registers too, but the default rule's NVIDIA tiles were
/// measured with the larger bound.)
pub fn amd_registers_only(unit: &MatrixUnit, t: DType, keys: i64) -> bool {
    flash_instr(unit, t, keys).is_some_and(|i| i.transposed && weights_stay(i, keys))
}
