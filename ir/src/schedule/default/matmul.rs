//! Matrix products `C[i, j] = sum(A[i, k] * B[k, j], k)` (casts and an
//! epilogue allowed), with any number of leading batch axes
//! (`C[b, i, j] = sum(A[b, i, k] * B[b, k, j], k)`, either operand
//! possibly shared by every batch): on a target whose matrix instructions
//! take the operands' types, the `mma` path (gemm_f16_mma.toml,
//! gemm_f16.toml); elsewhere register tiles (matmul_sgemm.toml). The batch
//! axes, fused, go on the grid's slowest axis (z), so one batch's tiles run
//! together and an operand shared across batches is read from the cache.

use super::{DefaultSchedule, Knobs, RuleCx};
use crate::index::{Index, VarId};
use crate::kernel::{Kernel, ReduceOp, Stage, TensorId};
use crate::mtype::instr_id;
use rocmc_target::matrix::Family;

/// A stage found to be a matrix product, and its names.
pub(super) struct Matmul<'k> {
    /// The leading batch axes, outermost first (none for a plain product).
    batch: Vec<&'k str>,
    i: &'k str,
    j: &'k str,
    k: &'k str,
    /// The operand varying with `i` (A) and the one varying with `j` (B).
    a: TensorId,
    b: TensorId,
    /// Whether A is read with `k` as its last index alone (A[i, k]) or
    /// first (A[k, i]: a transposed operand, as in a weight gradient), and
    /// B so (B[j, k]: nn.Linear's weight) or with `k` first (B[k, j]):
    /// the layouts `wgmma` reads from LDS (those with `k` first
    /// transposed).
    a_k_last: bool,
    a_k_first: bool,
    b_k_last: bool,
    b_k_first: bool,
}

impl<'k> Matmul<'k> {
    pub(super) fn find(k: &Kernel, st: &'k Stage) -> Option<Matmul<'k>> {
        let r = st.reduce()?;
        let nb = st.axes.len().checked_sub(2)?;
        let (batch, [i, j], [axis]) = (&st.axes[..nb], &st.axes[nb..], r.axes.as_slice()) else {
            return None;
        };
        if r.plain() != Some(ReduceOp::Sum) {
            return None;
        }
        let v = |n: usize| VarId(n as u32);
        let (vi, vj, vk) = (v(nb), v(nb + 1), v(nb + 2));
        let mut loads: Vec<(TensorId, Vec<Index>)> = Vec::new();
        r.body
            .visit_loads(&mut |t, ix| loads.push((t, ix.to_vec())));
        let uses = |ix: &[Index], v: VarId| ix.iter().any(|x| x.uses_var(v));
        let [(ta, a), (tb, b)] = loads.as_slice() else {
            return None;
        };
        // A subscript with a batch axis names that batch's matrix: it may
        // not also move along i, j or k, or the staged tiles would not be
        // one matrix's.
        let plain = |ix: &[Index]| {
            ix.iter().all(|x| {
                !(0..nb).any(|b| x.uses_var(v(b))) || ![vi, vj, vk].iter().any(|&m| x.uses_var(m))
            })
        };
        if !plain(a) || !plain(b) {
            return None;
        }
        // The layouts below are the matrix's own: its batch subscripts left out.
        let matrix = |ix: &[Index]| -> Vec<Index> {
            ix.iter()
                .filter(|x| !(0..nb).any(|b| x.uses_var(v(b))))
                .cloned()
                .collect()
        };
        let (a, b) = (&matrix(a), &matrix(b));
        let k_last = |ix: &[Index]| {
            ix.split_last().is_some_and(|(last, rest)| {
                *last == Index::Var(vk) && !rest.iter().any(|x| x.uses_var(vk))
            })
        };
        let k_first = |ix: &[Index]| {
            ix.split_first().is_some_and(|(first, rest)| {
                *first == Index::Var(vk) && !rest.iter().any(|x| x.uses_var(vk))
            })
        };
        let (ta, tb, ia, ib) = match (
            uses(a, vi) && uses(a, vk) && !uses(a, vj),
            uses(b, vk) && uses(b, vj) && !uses(b, vi),
        ) {
            (true, true) => (*ta, *tb, a, b),
            _ if uses(b, vi) && uses(b, vk) && !uses(b, vj) && uses(a, vk) && uses(a, vj) => {
                (*tb, *ta, b, a)
            }
            _ => return None,
        };
        if ta == tb || k.tensors.get(ta.0 as usize).is_none() {
            return None;
        }
        Some(Matmul {
            batch: batch.iter().map(|a| a.name.as_str()).collect(),
            i: &i.name,
            j: &j.name,
            k: &axis.name,
            a: ta,
            b: tb,
            a_k_last: k_last(ia),
            a_k_first: k_first(ia),
            b_k_last: k_last(ib),
            b_k_first: k_first(ib),
        })
    }

    /// The batch axes fused and bound to blockIdx.z (after the rule's own
    /// steps, whose `tile` and `reorder` name only i, j and k). Where their
    /// product may pass the target's grid (NVIDIA's 65,535 along z; any
    /// target's where the rule writes for none), only the innermost goes
    /// on the grid and each work-group loops over the others.
    fn batch_steps(&self, k: &Kernel, st: &Stage, cx: &RuleCx, steps: &mut Vec<String>) {
        let range = super::fused_range(k, &st.axes[..self.batch.len()]);
        let on_grid = if range <= u128::from(super::grid_z(cx)) {
            &self.batch[..]
        } else {
            &self.batch[self.batch.len().saturating_sub(1)..]
        };
        if let (fuse, Some(b)) = super::fuse_any(on_grid) {
            steps.extend(fuse);
            steps.push(format!("bind({b}, blockIdx.z)"));
        }
    }

    /// The `mma` schedule where `cx`'s target takes the types, then
    /// register tiles.
    pub(super) fn schedules(&self, k: &Kernel, st: &Stage, cx: &RuleCx) -> Vec<DefaultSchedule> {
        let mut out: Vec<DefaultSchedule> = self.wgmma(k, st, cx).into_iter().collect();
        out.extend(self.mma(k, st, cx));
        let mut tiles = self.tiles(k, st, cx);
        let widens = super::factor_types(k, st, self.a, self.b).and_then(crate::mtype::widened);
        tiles.by_target =
            cx.target.is_none() && (self.instr_types(k, st).is_some() || widens.is_some());
        out.push(tiles);
        out
    }

    /// The operand and accumulator types when the stage sums a plain
    /// product (casts allowed), as `mma` needs.
    fn instr_types(&self, k: &Kernel, st: &Stage) -> Option<[crate::DType; 3]> {
        super::product_types(k, st, self.a, self.b)
    }

    /// 128 x 128 tiles of C per work-group of 16 x 16 threads, 8 x 8
    /// outputs per thread in registers, 16-wide k tiles of A and B staged
    /// in LDS (matmul_sgemm.toml, 65 % of cuBLAS SGEMM on the H100).
    fn tiles(&self, k: &Kernel, st: &Stage, cx: &RuleCx) -> DefaultSchedule {
        let (i, j, kk) = (self.i, self.j, self.k);
        let (an, bn) = (&k.tensor(self.a).name, &k.tensor(self.b).name);
        let mut kn = Knobs::new(&st.name, cx.given);
        let bm = kn.get("BM", &[32, 64, 128], 128, "rows of C per work-group");
        let bn_ = kn.get("BN", &[32, 64, 128], 128, "columns of C per work-group");
        let tm = kn.get("TM", &[2, 4, 8], 8, "rows of C per thread");
        let tn = kn.get("TN", &[2, 4, 8], 8, "columns of C per thread");
        let bk = kn.get("BK", &[8, 16, 32], 16, "k step staged in LDS");
        kn.require("({BM} / {TM}) * ({BN} / {TN}) <= 1024");
        kn.require("({BM} / {TM}) * ({BN} / {TN}) >= 64");
        let mut steps = vec![
            format!("{i}_o, {j}_o, {i}_i, {j}_i = tile({i}, {j}, {bm}, {bn_})"),
            format!("{i}_t, {j}_t, {i}_r, {j}_r = tile({i}_i, {j}_i, {tm}, {tn})"),
            format!("{kk}_o, {kk}_i = split({kk}, {bk})"),
            format!("reorder({kk}_o, {kk}_i, {i}_r, {j}_r)"),
            format!("bind({i}_o, blockIdx.y)"),
            format!("bind({j}_o, blockIdx.x)"),
            format!("bind({i}_t, threadIdx.y)"),
            format!("bind({j}_t, threadIdx.x)"),
            format!("unroll({kk}_i)"),
            format!("unroll({i}_r)"),
            format!("unroll({j}_r)"),
            format!("{an}_tile = cache_read({an}, shared, {kk}_o, pad=1)"),
            format!("{bn}_tile = cache_read({bn}, shared, {kk}_o)"),
        ];
        self.batch_steps(k, st, cx, &mut steps);
        kn.done("matmul-tiles", steps)
    }

    /// Hopper's warpgroup path (gemm_f16_wgmma.toml's schedule, 0.99x
    /// cuBLAS on the H100, bench/gpu/runs/h100-wgmma-2), where the target
    /// has `wgmma` for the types, A and B keep k contiguous (A[i, k],
    /// B[j, k]) or, of 16-bit types, are stored [K, M] / [K, N] (read
    /// transposed): WG
    /// warpgroups of 64 rows each by BN columns, one instruction per 16 of
    /// k, 64-wide k tiles staged 128-byte swizzled by `cp.async`, or by the
    /// tensor memory accelerator (knob `TMA`).
    fn wgmma(&self, k: &Kernel, st: &Stage, cx: &RuleCx) -> Option<DefaultSchedule> {
        let target = cx.target?;
        let held = super::factor_types(k, st, self.a, self.b)?;
        let [da, db, acc] = crate::mtype::widened(held).unwrap_or(held);
        let unit = crate::mtype::MatrixUnit::of(target)?;
        let types = (
            crate::mtype::mtype(da),
            crate::mtype::mtype(db),
            crate::mtype::mtype(acc),
        );
        let group: Vec<_> = unit
            .group_instructions()
            .into_iter()
            .filter(|i| types == (Some(i.a), Some(i.b), Some(i.acc)) && i.a.bits() == 16)
            .collect();
        // 16-bit operands may be read transposed (A stored [K, M], B
        // [K, N]); 8-bit only as they are.
        let a_ok = self.a_k_last || (self.a_k_first && da.size() == 2);
        let b_ok = self.b_k_last || (self.b_k_first && da.size() == 2);
        if !a_ok || !b_ok || group.is_empty() {
            return None;
        }
        let shared = i64::from(cx.shared_bytes());
        let mut kn = Knobs::new(&st.name, cx.given);
        let widths: Vec<i64> = group.iter().map(|i| i64::from(i.n)).collect();
        let d_bn = widths.iter().copied().max()?;
        let bn = kn.get(
            "BN",
            &widths,
            d_bn,
            "columns of C per work-group (one wgmma's n)",
        );
        let wg = kn.get("WG", &[1, 2], 2, "warpgroups, 64 rows of C each");
        let stage_bytes = |wg: i64, bn: i64| (64 * wg + bn) * 128;
        let d_stages = (2..=4)
            .rev()
            .find(|s| s * stage_bytes(wg, bn) <= shared)
            .unwrap_or(2);
        let stages = kn.get(
            "STAGES",
            &[2, 3, 4],
            d_stages,
            "LDS buffers per operand (3 or more: one group of wgmma stays in flight)",
        );
        kn.require(&format!(
            "{{STAGES}} * (64 * {{WG}} + {{BN}}) * 128 <= {shared}"
        ));
        if !kn.bad() && stages * stage_bytes(wg, bn) > shared {
            return None;
        }
        let instr = group.iter().find(|i| i64::from(i.n) == bn)?;
        let (i, j, kk) = (self.i, self.j, self.k);
        let [by_i, by_j] = raster(&mut kn, i, j);
        // The tensor memory accelerator, where both operands' rows are
        // provably multiples of 16 bytes (what it needs). Measured on the
        // H100 (bench/gpu/runs/h100-tma-1): B stored [K, N] 1.11x faster
        // than with cp.async (0.97x cuBLAS), k-contiguous B 5 % slower;
        // so it is the default for the first only.
        let divs = k.size_divisors();
        let rows16 = |t: crate::TensorId| {
            k.tensor(t).shape.last().is_some_and(|e| {
                (e.known_divisor_in(&divs) as usize * da.size()).is_multiple_of(16)
            })
        };
        let converts = held != [da, db, acc];
        let tma = if unit.has_tensor_copies() && rows16(self.a) && rows16(self.b) && !converts {
            kn.get(
                "TMA",
                &[0, 1],
                i64::from(!self.b_k_last),
                "1: tiles copied by the tensor memory accelerator, 0: by cp.async",
            )
        } else {
            0
        };
        let tma = if tma == 1 { ", tma=1" } else { "" };
        let (an, bn_) = (&k.tensor(self.a).name, &k.tensor(self.b).name);
        let mut steps = vec![
            format!(
                "{i}_o, {j}_o, {i}_i, {j}_i = tile({i}, {j}, {}, {bn})",
                64 * wg
            ),
            format!("{i}_w, {i}_r = split({i}_i, 64)"),
            format!("{kk}_o, {kk}_i = split({kk}, 64)"),
            format!("{kk}_m, {kk}_r = split({kk}_i, 16)"),
            format!("reorder({kk}_o, {kk}_m, {i}_r, {j}_i, {kk}_r)"),
            by_i,
            by_j,
            format!("bind({i}_w, threadIdx.y)"),
            format!("unroll({kk}_m)"),
            format!(
                "{an}_tile = cache_read({an}, shared, {kk}_o, {})",
                wgmma_copy(held[0], da, stages, tma)
            ),
            format!(
                "{bn_}_tile = cache_read({bn_}, shared, {kk}_o, {})",
                wgmma_copy(held[1], db, stages, tma)
            ),
            format!("mma({i}_r, {j}_i, {kk}_r, instr={})", instr_id(instr)),
        ];
        self.batch_steps(k, st, cx, &mut steps);
        let mut s = kn.done("matmul-wgmma", steps);
        s.by_target = true;
        Some(s)
    }

    /// The matrix-instruction path (gemm_f16_mma.toml's schedule, 55 % of
    /// cuBLAS HGEMM on the H100): a work-group of WM x WN waves computes a
    /// BM x BN tile of C, each wave its share as fragments of the
    /// instruction; k tiles of A and B staged in LDS, padded by 16 bytes
    /// and filled 16 bytes per access. On NVIDIA, `cp.async` keeps as many
    /// tiles in flight as shared memory holds (4 on sm_90, 3 on sm_80); on
    /// AMD, where the fills are ordinary loads, the next tile waits in
    /// registers (`prefetch=1`).
    fn mma(&self, k: &Kernel, st: &Stage, cx: &RuleCx) -> Option<DefaultSchedule> {
        let target = cx.target?;
        let held = super::factor_types(k, st, self.a, self.b)?;
        let ([da, db, acc], (unit, instr)) = match super::matrix_instr(target, held) {
            Some(found) => (held, found),
            None => {
                let types = crate::mtype::widened(held)?;
                (types, super::matrix_instr(target, types)?)
            }
        };
        let instr = &instr;
        let nvidia = instr.family == Family::MmaSync;
        let esize = da.size().max(db.size()) as i64;
        // 16 bytes: one vector access, and the padding that keeps rows of
        // the tiles on distinct banks.
        let (vec, pad) = (16 / esize, 16 / esize);
        let shared = i64::from(cx.shared_bytes());
        let bytes = |bm: i64, bn: i64, bk: i64, bufs: i64| {
            bufs * (bm * (bk + pad) + bk * (bn + pad)) * esize
        };
        let kstep = i64::from(instr.k);
        // 128-byte k tiles on NVIDIA (gemm_f16_mma's 64 halves); 64 bytes
        // on AMD, where the next tile waits in registers and LDS bounds the
        // work-groups per CU.
        let kbytes = if nvidia { 128 } else { 64 };
        let ksteps_d = (kbytes / (kstep * esize)).max(1);
        let shapes = preferred_shapes(instr, &unit);
        // On NVIDIA at least three buffers, halving the k tile if that is
        // what it takes, before two: with two buffers of 128 x 128 x 64
        // (sm_86 and sm_89's 99 KiB) ptxas spilled 48 to 56 bytes of a
        // GEMM with a bias and ReLU at 255 registers; 32-deep tiles in
        // three buffers use 234 to 238 and spill nothing.
        let half = (ksteps_d / 2).max(1);
        let tries: &[(i64, i64)] = if nvidia {
            &[
                (ksteps_d, 4),
                (ksteps_d, 3),
                (half, 4),
                (half, 3),
                (ksteps_d, 2),
            ]
        } else {
            &[(ksteps_d, 1)]
        };
        let budget = match wide_addresses(k, [self.a, self.b, st.output]) {
            true => 144,
            false => 192,
        };
        let kept = within_registers(shapes, instr, [da, db, acc], unit.wave(), budget);
        let shapes = if nvidia { shapes } else { &kept[..] };
        let (mut d_shape, mut d_stages, mut d_ks) = (shapes[shapes.len() - 1], 1, ksteps_d);
        'pick: for &s in shapes {
            for &(ks, bufs) in tries {
                if bytes(s.0, s.1, ks * kstep, bufs) <= shared {
                    (d_shape, d_stages, d_ks) = (s, bufs, ks);
                    break 'pick;
                }
            }
        }
        let mut kn = Knobs::new(&st.name, cx.given);
        let bm = kn.get("BM", &[64, 128, 256], d_shape.0, "rows of C per work-group");
        let bn = kn.get(
            "BN",
            &[64, 128, 256],
            d_shape.1,
            "columns of C per work-group",
        );
        let wm = kn.get("WM", &[1, 2, 4], d_shape.2, "waves along the rows");
        let wn = kn.get("WN", &[1, 2, 4, 8], d_shape.3, "waves along the columns");
        let ks = kn.get(
            "KSTEPS",
            &[1, 2, 4, 8],
            d_ks,
            "instructions along k per staged tile",
        );
        let stages = kn.get(
            "STAGES",
            &[1, 2, 3, 4, 5],
            d_stages,
            "LDS buffers per operand (1: one, the next tile prefetched into registers)",
        );
        let (m, n) = (i64::from(instr.m), i64::from(instr.n));
        let (fm, fn_) = (bm / wm, bn / wn);
        kn.require("{BM} % {WM} == 0 && {BN} % {WN} == 0");
        kn.require(&format!(
            "({{BM}} / {{WM}}) % {m} == 0 && ({{BN}} / {{WN}}) % {n} == 0"
        ));
        kn.require(&format!(
            "{{WM}} * {{WN}} * {} <= {}",
            unit.wave(),
            target.max_threads_per_block()
        ));
        // The staged tiles within shared memory (`bytes` above).
        kn.require(&format!(
            "{{STAGES}} * ({{BM}} * ({{KSTEPS}} * {kstep} + {pad}) + {{KSTEPS}} * {kstep} * ({{BN}} + {pad})) * {esize} <= {shared}"
        ));
        let fits = bm % wm == 0 && bn % wn == 0 && fm % m == 0 && fn_ % n == 0;
        let threads = wm * wn * i64::from(unit.wave());
        if !kn.bad() && (!fits || threads > i64::from(target.max_threads_per_block())) {
            return None;
        }
        let (i, j, kk) = (self.i, self.j, self.k);
        let (an, bn_) = (&k.tensor(self.a).name, &k.tensor(self.b).name);
        let pipe = if stages > 1 {
            format!("stages={stages}")
        } else {
            "prefetch=1".to_string()
        };
        let a_copy = match held[0] == da {
            true => format!("pad={pad}, vec={vec}, {pipe}"),
            false => converted_copy(nvidia, held[0], da, &pipe),
        };
        let b_copy = match held[1] == db {
            true => self.b_copy(instr, db, (pad, vec), &pipe),
            false => converted_copy(nvidia, held[1], db, &pipe),
        };
        let mut steps = vec![
            format!("{i}_o, {j}_o, {i}_i, {j}_i = tile({i}, {j}, {bm}, {bn})"),
            format!("{i}_w, {j}_w, {i}_f, {j}_f = tile({i}_i, {j}_i, {fm}, {fn_})"),
            format!("{i}_m, {j}_m, {i}_r, {j}_r = tile({i}_f, {j}_f, {m}, {n})"),
            format!("{kk}_o, {kk}_i = split({kk}, {})", ks * kstep),
            format!("{kk}_m, {kk}_r = split({kk}_i, {kstep})"),
            format!("reorder({kk}_o, {kk}_m, {i}_m, {j}_m, {i}_r, {j}_r, {kk}_r)"),
            format!("bind({i}_o, blockIdx.y)"),
            format!("bind({j}_o, blockIdx.x)"),
            format!("bind({i}_w, threadIdx.z)"),
            format!("bind({j}_w, threadIdx.y)"),
            format!("unroll({kk}_m)"),
            format!("unroll({i}_m)"),
            format!("unroll({j}_m)"),
            format!("{an}_tile = cache_read({an}, shared, {kk}_o, {a_copy})"),
            format!("{bn_}_tile = cache_read({bn_}, shared, {kk}_o, {b_copy})"),
            format!("mma({i}_r, {j}_r, {kk}_r, instr={})", instr_id(instr)),
        ];
        self.batch_steps(k, st, cx, &mut steps);
        let mut s = kn.done("matmul-mma", steps);
        s.by_target = true;
        Some(s)
    }

    /// The copy options of B's tile in `mma`: as A's, or transposed.
    ///
    /// A k-major B of 8-bit elements (B[k, j]) on MFMA is kept
    /// transposed in LDS: each thread packs 4 rows of 8 columns into
    /// 4-byte words as it stores the tile (lower/cache/transposed.rs,
    /// the words made by `v_perm_b32`: codegen's function/pack.rs),
    /// where otherwise every fragment byte is read from LDS and packed
    /// on its own. Modelled (bench/amd), fp8 at 4096³: gfx950 92 % of
    /// the peak against 52 % untransposed, gfx942 100 % against 90 %
    /// (the loop 183 instructions against 285, no `ds_read_u8`). On
    /// gfx90a the untransposed i8 default spilled 235 VGPRs (the bytes
    /// of B's fragments each held on their own); transposed it spills
    /// none. gfx950's f16 fragments gain nothing (85 % against 86 %).
    fn b_copy(
        &self,
        instr: &rocmc_target::matrix::MatrixInstr,
        db: crate::DType,
        (pad, vec): (i64, i64),
        pipe: &str,
    ) -> String {
        let transposed =
            instr.family == Family::Mfma && db.size() == 1 && self.b_k_first && !self.b_k_last;
        match transposed {
            true => format!("pad=0, vec={}, {pipe}, transpose=1", vec / 2),
            false => format!("pad={pad}, vec={vec}, {pipe}"),
        }
    }
}

/// The work-group shapes `(BM, BN, WM, WN)` the `mma` path prefers for
/// `instr`'s family, largest first: the first that fits with at least two
/// buffers (NVIDIA) or one (AMD) is the default.
fn preferred_shapes(
    instr: &rocmc_target::matrix::MatrixInstr,
    unit: &crate::mtype::MatrixUnit,
) -> &'static [(i64, i64, i64, i64)] {
    match instr.family {
        Family::MmaSync | Family::Wgmma | Family::WgmmaRegA => {
            &[(128, 256, 2, 4), (128, 128, 2, 2), (64, 64, 2, 2)]
        }
        // Larger waves' tiles on CDNA: each fragment read from LDS feeds
        // more matrix instructions. Modelled on gfx942 (bench/amd), the
        // f16 loop's matrix unit goes from 65 % busy at 128 x 128 to 98 %
        // at 256 x 256 (225 VGPRs, 2 waves per SIMD, no spills). The
        // tuner's BM/BN still reach the smaller tiles, which fill more
        // CUs where M x N is small.
        // gfx908, whose accumulators live in a separate AGPR file, spills
        // 171 VGPRs there: it keeps 128 x 128.
        Family::Mfma
            if rocmc_target::hardware::hardware(unit.gpu().processor()).unified_vgpr_file =>
        {
            &[
                (256, 256, 2, 4),
                (256, 128, 2, 4),
                (128, 128, 2, 2),
                (64, 64, 2, 2),
            ]
        }
        Family::Mfma => &[(128, 128, 2, 2), (64, 64, 2, 2)],
        Family::WmmaGfx11 | Family::WmmaGfx12 => &[(128, 128, 4, 2), (64, 64, 2, 2)],
    }
}

/// The copy options of an operand's tile on the warpgroup path: `stages`
/// buffers by `cp.async` (or the accelerator), 128-byte swizzled; an
/// 8-bit operand the instruction takes as `to` is converted as it is
/// staged, from registers loaded an iteration ahead (`prefetch=1`), into
/// two buffers (`stages=2`, so one group of instructions stays in flight,
/// `group_lag`): on the H200 at 4096³, i8 weights ran 0.384 ms so, 0.430
/// with one buffer (no group in flight), 0.479 on `mma.sync` with the
/// fragments converted in registers, 1.01 with the converted tile inside
/// the four-stage pipeline, whose copy waits for its own loads
/// (bench/gpu/runs/h200-wq-1).
fn wgmma_copy(held: crate::DType, to: crate::DType, stages: i64, tma: &str) -> String {
    match held == to {
        true => format!("vec=8, stages={stages}, swizzle=128{tma}"),
        false => format!("vec=8, prefetch=1, stages=2, swizzle=128, dtype={to}"),
    }
}

/// The copy options of an 8-bit operand (`held`) that the matrix
/// instruction takes as `to` ([`crate::mtype::widened`]). On NVIDIA its
/// tile stays 8-bit, copied by `cp.async` (16 bytes, padded by 16, as
/// many stages as the other's), and the lowering converts its fragments
/// in registers: on the H200, i8 weights at 4096³ ran 0.48 ms against
/// 1.19 ms converted as staged (`dtype=f16`, whose copy goes through
/// registers and waits for its loads inside the pipeline) and 0.56 ms
/// with both tiles prefetched (bench/gpu/runs/h200-wq-1). On AMD, whose
/// copies go through registers anyway, the tile is staged converted
/// (`dtype=`), so fragments are read as the 16-bit operand's are.
fn converted_copy(nvidia: bool, held: crate::DType, to: crate::DType, pipe: &str) -> String {
    let per16 = 16 / held.size() as i64;
    let esize = to.size() as i64;
    match nvidia {
        true => format!("pad={per16}, vec={per16}, {pipe}"),
        false => format!("pad={}, vec={}, {pipe}, dtype={to}", 16 / esize, 16 / esize),
    }
}

/// Whether a tensor of the product may hold 2^31 elements or more (sizes
/// without `max`): its addresses are then 64-bit (lower/addressing.rs),
/// whose arithmetic costs the largest AMD tiles their last registers.
fn wide_addresses(k: &Kernel, tensors: [TensorId; 3]) -> bool {
    let size_max: Vec<u64> = k.sizes.iter().map(|s| s.max).collect();
    tensors.iter().any(|&t| {
        let shape = &k.tensor(t).shape;
        let elems = shape
            .iter()
            .fold(1u128, |n, e| n.saturating_mul(e.max_value(&size_max, &[])));
        elems >= 1 << 31
    })
}

/// The work-group shapes `(BM, BN, WM, WN)` whose wave's fragments for
/// one k step and accumulators fit `budget` of a lane's 256 registers
/// (4-byte words), as AMD needs. 192 where addresses are 32-bit: gfx950's
/// fp8 instruction (32 bytes of A and of B a lane) at 256 x 256 needs 224
/// and spilled 388 VGPRs; 256 x 128 needs 144 and spills none; the 16-bit
/// tiles need at most 176. 144 where they are 64-bit: there 256 x 256 f16
/// (152) spilled 4 VGPRs on gfx942, and 12 with i8 weights converted to
/// f16 as they are staged. The smallest shape where none fits.
fn within_registers(
    shapes: &[(i64, i64, i64, i64)],
    instr: &rocmc_target::matrix::MatrixInstr,
    [da, db, acc]: [crate::DType; 3],
    wave: u32,
    budget: i64,
) -> Vec<(i64, i64, i64, i64)> {
    let (m, n) = (i64::from(instr.m), i64::from(instr.n));
    let regs = |count: u32, size: usize| i64::from(count) * size as i64 / 4;
    let kept: Vec<_> = shapes
        .iter()
        .copied()
        .filter(|&(bm, bn, wm, wn)| {
            let (fm, fn_) = (bm / wm, bn / wn);
            let words = fm / m * regs(instr.a_per_lane(), da.size())
                + fn_ / n * regs(instr.b_per_lane(), db.size())
                + fm * fn_ / i64::from(wave) * acc.size() as i64 / 4;
            words <= budget
        })
        .collect();
    match kept.is_empty() {
        true => vec![(64, 64, 2, 2)],
        false => kept,
    }
}

/// Which tile axis runs fastest on the grid (blockIdx.x), knob `RASTER`:
/// 0, the columns of C (each wave of work-groups shares a few row tiles of
/// A and sweeps B); 1, the rows (it sweeps A and shares B's tiles). The
/// swept operand should fit the L2 cache: where B is far larger than A
/// (an LM head's vocabulary × model width against a batch of rows), 1
/// reads B from memory once instead of once per row tile. Sizes are known
/// at launch only, so the default stays 0 and the kernel's author says it.
fn raster(kn: &mut Knobs, i: &str, j: &str) -> [String; 2] {
    let rows_fastest = kn.get(
        "RASTER",
        &[0, 1],
        0,
        "1: row tiles fastest on the grid (B much larger than A), 0: column tiles",
    ) == 1;
    let (x, y) = if rows_fastest { (i, j) } else { (j, i) };
    [
        format!("bind({y}_o, blockIdx.y)"),
        format!("bind({x}_o, blockIdx.x)"),
    ]
}
