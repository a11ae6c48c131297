//! Attention stages: `flash` where the target's matrix instructions
//! multiply the query, key and value type (f16 or bf16 tensors read
//! directly) into f32, with the largest tiles whose LDS fits the target
//! (a decode shape, whose query rows are a constant of at most one wave,
//! gets one wave of rows and a third K/V buffer); else `rowwise`, a
//! thread per query row.

use crate::kernel::{ExprKind, Kernel, Stage};
use crate::mtype::{mtype, MatrixUnit};
use crate::plan::DefaultSchedule;
use crate::schedule::default::{inlined, Knobs, RuleCx};
use crate::DType;

/// LDS bytes of `flash(rows, keys, stages)` for head dimensions `e` and
/// `d` of 16-bit elements: the Q tile, `stages` K and V tiles, and unless
/// `registers_only` (the softmax in the score registers and P·V reading
/// its weights there) the f32 scores and the 16-bit weights (rows padded
/// as the lowering pads them).
pub fn flash_lds(rows: i64, keys: i64, stages: i64, e: i64, d: i64, registers_only: bool) -> i64 {
    let (ep, dp) = ((e + 31) / 32 * 32 + 8, (d + 31) / 32 * 32 + 8);
    let tiles = 2 * rows * ep + 2 * stages * keys * (ep + dp);
    match registers_only {
        true => tiles,
        false => tiles + 4 * rows * (keys + 1) + 2 * rows * (keys + 8) + 4 * rows,
    }
}

/// LDS bytes of `flash(keys=keys, stages=1)` on AMD's register path
/// (Q, the scores and the weights in registers): the K tile by rows and
/// the V tile by columns, padded as the lowering pads them.
fn amd_flash_lds(keys: i64, e: i64, d: i64) -> i64 {
    let (ep, dp) = ((e + 31) / 32 * 32 + 8, (d + 31) / 32 * 32);
    2 * (keys * ep + dp * (keys + 4))
}

/// The candidates for an attention stage, best first; `None` for other
/// stages (see [`crate::schedule::default::candidates`]).
pub(crate) fn rule(k: &Kernel, st: &Stage, cx: &RuleCx) -> Option<Vec<DefaultSchedule>> {
    st.attention()?;
    Some(candidates(k, st, cx))
}

fn candidates(k: &Kernel, st: &Stage, cx: &RuleCx) -> Vec<DefaultSchedule> {
    let red = st.reduce().expect("an attention is a reduction");
    let a = st.attention().expect("an attention stage");
    let j = &red.axes[0].name;
    let mut out = Vec::new();
    // As `flash` sees them: with inlined producers substituted (an
    // inlined producer makes an operand an expression, which it refuses).
    let loads = [&a.q, &a.k, &a.v].iter().all(|x| {
        let x = inlined(k, x);
        matches!(x.kind, ExprKind::Load { .. }) && x.dtype == a.q.dtype
    });
    let e = red.axes[1].extent.as_const();
    let d = st.axes.last().and_then(|x| x.extent.as_const());
    let unit = cx.target.and_then(MatrixUnit::of);
    let fits_unit = unit.as_ref().is_some_and(|u| {
        u.instructions().iter().any(|i| {
            mtype(a.q.dtype) == Some(i.a)
                && i.a == i.b
                && i.acc == rocmc_target::matrix::MType::F32
                && u.wave().is_multiple_of(i.m)
        })
    });
    if let (true, true, Some(e), Some(d), Some(u)) = (loads, fits_unit, e, d, &unit) {
        if matches!(a.q.dtype, DType::F16 | DType::BF16) {
            let w = i64::from(u.wave());
            let limit = i64::from(cx.shared_bytes());
            // Two waves of rows at least where LDS allows; keys per tile
            // so that the score and output accumulators stay in registers.
            // Decoding (a constant handful of query rows, as `S = 1`): one
            // wave of rows wastes the fewest; where copies are
            // asynchronous, a third buffer keeps more of the cache in
            // flight, with so little matrix work per key tile (H100,
            // bench/gpu/runs/h100-attention-10: 1.09× SDPA's flash
            // backend, 0.89× with the prefill tiles).
            let queries = st.axes[st.axes.len() - 2].extent.as_const();
            let decode = queries.is_some_and(|c| c <= w);
            // On sm_90a, 64 keys make each product whole warpgroup
            // instructions where both head dimensions are whole 128-byte
            // rows (bench/gpu/runs/h100-attention-wgmma-1: 1.47× SDPA's
            // flash backend at D=128, where 128 keys gave 1.26×).
            let group = !decode
                && e % 64 == 0
                && d % 64 == 0
                && u.group_instructions()
                    .iter()
                    .any(|i| Some(i.a) == mtype(a.q.dtype));
            let keys_default = if group {
                64
            } else if d > 64 || decode {
                32
            } else {
                64
            };
            let (row_choices, stage_choices): (&[i64], &[i64]) = match decode {
                true if u.has_async_copy() => (&[w], &[3, 2, 1]),
                true => (&[w], &[2, 1]),
                false => (&[4 * w, 2 * w, w], &[2, 1]),
            };
            // AMD's MFMA keeps the softmax, the weights and Q in registers
            // (the transposed view): LDS holds K and V alone, and waves of
            // 32 rows leave registers for two of them per SIMD. Measured
            // by bench/amd (matrix work per SIMD cycle of the peak, one
            // K/V buffer, 32 rows a wave): 256 rows and 64 keys, one
            // work-group of 8 waves per CU, beat 128 rows on gfx942 at
            // every shape — d = 128: 0.83 against 32 keys' 0.68 (128 rows
            // and 64 keys: 0.32, one 4-wave group per CU by LDS); causal
            // 0.81 against 0.64; d = 64: 0.61 against 0.58 — and on
            // gfx950, whose 16x16x32 halves the matrix instructions a
            // tile so that the per-wave copy and softmax work weighs more
            // (d = 128: 0.50 against 128 rows and 32 keys' 0.40). Fewer
            // keys where a head dimension over 128 would not fit LDS.
            let amd = crate::mtype::rows::amd_registers_only(u, a.q.dtype, 32);
            // (rows, keys, stages, rows per wave where not one per lane).
            let chosen = if amd && !decode {
                // gfx12's wave32 WMMA (not in the Triton comparison)
                // keeps what it had: two waves of rows, 32 keys at d > 64.
                let (rows, most) = match w {
                    64 => (4 * w, 64),
                    _ => (2 * w, if d <= 64 { 64 } else { 32 }),
                };
                [64, 32, 16]
                    .into_iter()
                    .filter(|&keys| keys <= most)
                    .find(|&keys| amd_flash_lds(keys, e, d) <= limit)
                    .map(|keys| (rows, keys, 1, Some(w / 2)))
            } else {
                let mut best = None;
                'search: for &rows in row_choices {
                    for &stages in stage_choices {
                        for keys in [keys_default, 32, 16] {
                            let regs = crate::mtype::rows::amd_registers_only(u, a.q.dtype, keys);
                            if flash_lds(rows, keys, stages, e, d, regs) <= limit {
                                best = Some((rows, keys, stages, None));
                                break 'search;
                            }
                        }
                    }
                }
                best
            };
            if let Some((rows, keys, stages, wave_rows)) = chosen {
                let mut kn = Knobs::new(&st.name, cx.given);
                let rows_doc = match wave_rows {
                    Some(_) => "query rows per work-group",
                    None => "query rows per work-group (a row per lane)",
                };
                let rows = kn.get("ROWS", &[w, 2 * w, 4 * w], rows.min(4 * w), rows_doc);
                let keys = kn.get("KEYS", &[16, 32, 64, 128], keys, "keys per LDS tile");
                let stages = kn.get(
                    "STAGES",
                    &[1, 2, 3],
                    stages,
                    "LDS buffers of the K and V tiles",
                );
                let per_wave = wave_rows.map_or(String::new(), |r| {
                    let r = kn.get("WAVE_ROWS", &[16, 32, 64], r, "query rows per wave");
                    format!(", wave_rows={r}")
                });
                let mut s = kn.done(
                    "flash",
                    vec![format!(
                        "flash({j}, rows={rows}, keys={keys}, stages={stages}{per_wave})"
                    )],
                );
                s.by_target = true;
                out.push(s);
            }
        }
    }
    let mut kn = Knobs::new(&st.name, cx.given);
    let threads = kn.get(
        "THREADS",
        &[32, 64, 128, 256],
        64,
        "query rows (threads) per work-group",
    );
    let mut rows = kn.done("rowwise", vec![format!("rowwise({j}, threads={threads})")]);
    // Without a target, a GPU's matrix unit may still take the stage.
    rows.by_target = cx.target.is_none() && loads && matches!(a.q.dtype, DType::F16 | DType::BF16);
    out.push(rows);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mtype::rows::amd_registers_only;

    /// The LDS the lowering of `flash(...)` declares, in bytes; `None`
    /// where it refuses those tiles.
    fn lowered_lds(unit: &MatrixUnit, e: i64, d: i64, step: &str) -> Option<i64> {
        let src = format!(
            "[kernel]\nname = \"a\"\nsizes = [\"S\", \"T\"]\n\n[inputs]\nQ = {{ dtype = \"f16\", shape = [\"S\", {e}] }}\nK = {{ dtype = \"f16\", shape = [\"T\", {e}] }}\nV = {{ dtype = \"f16\", shape = [\"T\", {d}] }}\n\n[[stage]]\ncompute = \"O[i, c] = attention(Q[i, e], K[j, e], V[j, c])\"\nshape = [\"S\", {d}]\nreduce = {{ e = {e}, j = \"T\" }}\nschedule = [\"{step}\"]\n"
        );
        let k = crate::parse_kernel("a.toml", &src).ok()?;
        let p = crate::lower_for(&k, Some(unit)).ok()?;
        let g = &p.kernels[0];
        Some(
            g.shared
                .iter()
                .map(|s| i64::from(s.len) * s.dtype.size() as i64)
                .sum(),
        )
    }

    /// The rule picks tiles by its own LDS formula, written beside the
    /// lowering's layouts: wherever the rule could pick, the formula must
    /// bound what the lowering then declares, or a chosen schedule would
    /// not fit. (One plan both ask is the aim, issue 62; until then this
    /// checks the two agree in the direction that matters.)
    #[test]
    fn the_rules_lds_formula_bounds_what_flash_declares() {
        let mut checked = 0;
        for p in [
            "gfx942", "gfx950", "gfx1100", "gfx1201", "sm_80", "sm_90", "sm_90a",
        ] {
            let t = rocmc_target::Target::parse(p, None, 5).unwrap();
            let u = MatrixUnit::of(&t).unwrap();
            let w = i64::from(u.wave());
            for (e, d) in [(64, 64), (128, 128), (64, 128), (256, 64)] {
                let amd = amd_registers_only(&u, DType::F16, 32);
                for keys in [16, 32, 64] {
                    let combos: Vec<(i64, i64, i64, String)> = if amd {
                        let rows = if w == 64 { 4 * w } else { 2 * w };
                        vec![(
                            rows,
                            keys,
                            amd_flash_lds(keys, e, d),
                            format!(", stages=1, wave_rows={}", w / 2),
                        )]
                    } else {
                        let regs = amd_registers_only(&u, DType::F16, keys);
                        [4 * w, 2 * w, w]
                            .into_iter()
                            .flat_map(|rows| [1, 2].map(|s| (rows, s)))
                            .map(|(rows, s)| {
                                (rows, s, flash_lds(rows, keys, s, e, d, regs), String::new())
                            })
                            .map(|(rows, s, est, extra)| {
                                (rows, keys, est, format!(", stages={s}{extra}"))
                            })
                            .collect()
                    };
                    for (rows, keys, estimate, extra) in combos {
                        let step = format!("flash(j, rows={rows}, keys={keys}{extra})");
                        let Some(got) = lowered_lds(&u, e, d, &step) else {
                            continue;
                        };
                        checked += 1;
                        assert!(
                            estimate >= got,
                            "{p}, e={e}, d={d}, {step}: the rule reckons {estimate} bytes, the lowering declares {got}"
                        );
                    }
                }
            }
        }
        assert!(checked > 100, "only {checked} tilings lowered");
    }
}
