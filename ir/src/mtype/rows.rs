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

/// Where P's A fragments lie in the score registers ([`weights_in_place`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InPlace {
    /// For k step `ks` and A element `e`, entry `ks * a_per_lane + e`:
    /// the score register within a row fragment.
    pub regs: Vec<i64>,
    /// Which key of a k step each position holds, as where each bit of
    /// the position goes: bit `b` of position `k` is bit `key_bits[b]` of
    /// its key. P·V sums over the keys, so any order does if V is read in
    /// it. The identity where the layouts agree outright (mma.sync, MFMA
    /// 16x16x16); gfx950's 16x16x32 holds keys `4g..4g+4` and `16+4g..`
    /// at positions `8g..8g+8`.
    pub key_bits: Vec<u32>,
}

impl InPlace {
    /// Whether each position holds its own key.
    pub fn identity(&self) -> bool {
        self.key_bits
            .iter()
            .enumerate()
            .all(|(b, &t)| t == b as u32)
    }

    /// The key at position `k` of a k step.
    pub fn key(&self, k: i64) -> i64 {
        self.key_bits
            .iter()
            .enumerate()
            .map(|(b, &t)| ((k >> b) & 1) << t)
            .sum()
    }
}

/// Where each element of P's A fragments (of `a_instr`, P·V's) sits in the
/// score accumulators (of `instr`), when every A element of a lane is one
/// of its own score registers on the same row (mma.sync's: FlashAttention-2
/// feeds its weights to P·V this way; wgmma's with A in registers; the
/// transposed MFMA views'), the keys of each k step in one order that is a
/// permutation of the position's bits. None where some element lives in
/// another lane (gfx11's WMMA); the weights then go through LDS.
pub fn weights_in_place(a_instr: &MatrixInstr, instr: &MatrixInstr, keys: i64) -> Option<InPlace> {
    let (n, k, pc) = (
        i64::from(instr.n),
        i64::from(instr.k),
        i64::from(instr.acc_per_lane()),
    );
    if k <= 0 || keys % k != 0 || !(k as u64).is_power_of_two() {
        return None;
    }
    let lanes = 0..instr.wave;
    let same = |a: &LaneCoord, a0: i64, b: &LaneCoord, b0: i64| {
        lanes
            .clone()
            .all(|l| a0 + i64::from(a.at(l)) == b0 + i64::from(b.at(l)))
    };
    let mut regs = Vec::new();
    let mut order: Option<Vec<i64>> = None;
    for ks in 0..keys / k {
        let mut step: Vec<Option<i64>> = vec![None; k as usize];
        let mut used = std::collections::BTreeSet::new();
        for e in 0..a_instr.a_per_lane() {
            let (ar, ak) = a_instr.a_coord(e);
            // Score registers on the element's row whose keys lie in this
            // step for every lane: the one at the element's own key, else
            // the first not yet taken.
            let on_row: Vec<(i64, LaneCoord, i64)> = (0..keys / n)
                .flat_map(|fc| (0..instr.acc_per_lane()).map(move |c| (fc, c)))
                .filter_map(|(fc, c)| {
                    let (cr, cc) = instr.acc_coord(c);
                    let inside = lanes.clone().all(|l| {
                        let key = fc * n + i64::from(cc.at(l));
                        (ks * k..(ks + 1) * k).contains(&key)
                    });
                    (same(&ar, 0, &cr, 0) && inside).then_some((fc * pc + i64::from(c), cc, fc))
                })
                .collect();
            let (reg, cc, fc) = on_row
                .iter()
                .find(|(_, cc, fc)| same(&ak, ks * k, cc, fc * n))
                .or_else(|| on_row.iter().find(|(r, _, _)| !used.contains(r)))?
                .clone();
            used.insert(reg);
            for l in lanes.clone() {
                let (pos, key) = (ak.at(l) as usize, fc * n + i64::from(cc.at(l)) - ks * k);
                match step[pos] {
                    None => step[pos] = Some(key),
                    Some(x) if x == key => {}
                    Some(_) => return None,
                }
            }
            regs.push(reg);
        }
        let step: Vec<i64> = step.into_iter().collect::<Option<_>>()?;
        let mut keys_held = step.clone();
        keys_held.sort_unstable();
        if keys_held != (0..k).collect::<Vec<_>>() || order.as_ref().is_some_and(|o| *o != step) {
            return None;
        }
        order = Some(step);
    }
    let order = order?;
    let key_bits: Vec<u32> = (0..k.trailing_zeros())
        .map(|b| {
            let t = order[1 << b];
            (t.count_ones() == 1).then(|| t.trailing_zeros())
        })
        .collect::<Option<_>>()?;
    let found = InPlace { regs, key_bits };
    (0..k)
        .all(|x| order[x as usize] == found.key(x))
        .then_some(found)
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

#[cfg(test)]
mod tests {
    use super::*;
    use rocmc_target::matrix::INSTRUCTIONS;

    fn named(name: &str, wave: u32) -> &'static MatrixInstr {
        INSTRUCTIONS
            .iter()
            .find(|i| i.name == name && i.wave == wave && i.a == MType::F16)
            .expect("in the table")
    }

    /// Where the weights stay, and in which key order: the identity for
    /// mma.sync and MFMA 16x16x16's transposed view, the bit permutation
    /// of gfx950's 16x16x32 view (positions 8g..8g+8 hold keys 4g..4g+4
    /// and 16+4g..16+4g+4), none for gfx11's WMMA (a row's 16 keys in one
    /// lane) nor MFMA in its own layout (a row over 16 lanes).
    #[test]
    fn weights_stay_in_the_score_registers_in_some_key_order() {
        let mma = named("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", 32);
        let p = weights_in_place(mma, mma, 32).expect("mma.sync's A is its C");
        assert!(p.identity());
        let t16 = named("v_mfma_f32_16x16x16_f16", 64)
            .transposed_view()
            .unwrap();
        assert!(weights_in_place(t16, t16, 64).expect("16x16x16").identity());
        let t32 = named("v_mfma_f32_16x16x32_f16", 64)
            .transposed_view()
            .unwrap();
        let p = weights_in_place(t32, t32, 64).expect("16x16x32 by a permutation");
        assert_eq!(p.key_bits, [0, 1, 4, 2, 3]);
        let keys: Vec<i64> = (0..16).map(|k| p.key(k)).collect();
        assert_eq!(
            keys,
            [0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23]
        );
        assert_eq!(p.regs.len(), 2 * 8);
        let wmma = named("v_wmma_f32_16x16x16_f16", 32)
            .transposed_view()
            .unwrap();
        assert!(weights_in_place(wmma, wmma, 32).is_none());
        let own = named("v_mfma_f32_16x16x16_f16", 64);
        assert!(weights_in_place(own, own, 64).is_none());
    }
}
