//! `rocmc-gpu-check wgmma`: Hopper's warpgroup MMA as rocmc's matrix table
//! and lowering describe it, against a real sm_90a GPU.
//!
//! For each `wgmma` instruction of the table the host lays random A
//! (64 rows) and B (N rows) of one 128-byte k tile out in shared-memory
//! order itself — row `r` at `r * 128` bytes, its 16-byte chunk `c` at
//! chunk `c ^ r % 8` — a hand-written PTX kernel copies those bytes
//! verbatim into 1024-byte-aligned shared memory, builds the descriptors
//! as rocmc's back end does (address bits 4-17, 1024 bytes between groups
//! of 8 rows, 128-byte swizzle mode), issues one instruction per k step of
//! the tile (start address 32 bytes further each), and stores each lane's
//! accumulators verbatim. The host reads them back through the table's
//! accumulator layout and compares with A·Bᵀ over the whole tile. So the
//! descriptor encoding, the swizzle, the k stepping and the accumulator
//! layout are each checked, element by element; `--perturb` swaps two
//! chunks of A and must make every instruction fail.
//!
//! The instructions with A in registers (`Family::WgmmaRegA`, attention's
//! P·V) take A from a buffer the host filled lane by lane through the
//! table's A layout, four 32-bit registers per lane and k step, loaded by
//! each thread before its instruction; B goes through shared memory as
//! above. `--perturb` swaps two lanes' registers there.
//!
//! 16-bit instructions run a second time with B transposed (MN-major, as
//! rocmc stages a B stored `[K, N]`): the host lays B out as 64 rows of k
//! in 128-byte blocks of 64 n, 8,192 bytes apart; the descriptor carries
//! that distance, the instruction `imm-trans-b` = 1, and each k step moves
//! the start 16 rows (2,048 bytes).

use crate::Res;
use rocmc_device::Arg;
use rocmc_target::matrix::{MType, MatrixInstr, INSTRUCTIONS};

/// Bytes of a tile row (the swizzle's span).
const ROW: usize = 128;

fn ptx(i: &MatrixInstr, trans_b: bool) -> String {
    let n = i.n as usize;
    let regs = n / 2;
    let int = i.acc == MType::I32;
    let (dreg, zero, dt) = if int {
        (".s32", "0", "i32")
    } else {
        (".f32", "0f00000000", "f32")
    };
    let steps = ROW * 8 / i.a.bits() as usize / i.k as usize;
    let reg_a = !i.a_in_shared();
    let rest = match i.a {
        MType::I8 => String::new(),
        MType::Fp8 | MType::Bf8 => ", 1, 1".to_string(),
        _ if reg_a => format!(", 1, 1, {}", u8::from(trans_b)),
        _ => format!(", 1, 1, 0, {}", u8::from(trans_b)),
    };
    // A's buffer: the swizzled tile, or each lane's registers per k step.
    let a_words = if reg_a { steps * 128 * 4 } else { 64 * ROW / 4 };
    let block = (ROW * 8 / i.a.bits() as usize * ROW) as u64;
    let d: Vec<String> = (0..regs).map(|r| format!("d{r}")).collect();
    let launch = format!(
        r#"// rocmc.launch {{"version":1,"sizes":[],"kernels":[{{"name":"wgmma","block":[128,1,1],"grid":[{{"const":1}},{{"const":1}},{{"const":1}}],"grid_text":["1","1","1"],"args":[{{"name":"A","role":"buffer","dtype":"u32","shape":[{{"const":{}}}]}},{{"name":"B","role":"buffer","dtype":"u32","shape":[{{"const":{}}}]}},{{"name":"D","role":"buffer","dtype":"{dt}","shape":[{{"const":{}}}]}}]}}]}}"#,
        a_words,
        n * ROW / 4,
        128 * regs
    );
    let mut s = format!(
        "{launch}\n.version 8.0\n.target sm_90a\n.address_size 64\n.shared .align 1024 .b8 sa[{}];\n.shared .align 1024 .b8 sb[{}];\n",
        64 * ROW,
        n * ROW
    );
    s += ".visible .entry wgmma(.param .u64 pa, .param .u64 pb, .param .u64 pd)\n{\n";
    s += &format!("  .reg {dreg} d<{regs}>;\n  .reg .b32 t, sh, one;\n  .reg .b64 ga, gb, gd, off, da, db, x;\n  .reg .v4 .b32 v;\n  .reg .b32 v0, v1, v2, v3, ra0, ra1, ra2, ra3;\n  .reg .pred p;\n");
    s += "  ld.param.u64 ga, [pa];\n  ld.param.u64 gb, [pb];\n  ld.param.u64 gd, [pd];\n";
    s += "  cvta.to.global.u64 ga, ga;\n  cvta.to.global.u64 gb, gb;\n  cvta.to.global.u64 gd, gd;\n  mov.u32 t, %tid.x;\n";
    // Each thread copies 16-byte chunks t, t + 128, ... of A and of B.
    let tiles: &[(&str, &str, usize)] = if reg_a {
        &[("sb", "gb", n * ROW)]
    } else {
        &[("sa", "ga", 64 * ROW), ("sb", "gb", n * ROW)]
    };
    for &(name, g, bytes) in tiles {
        for c in 0..bytes / 16 / 128 {
            s += &format!(
                "  mul.wide.u32 off, t, 16;\n  add.s64 off, off, {};\n  add.s64 x, {g}, off;\n  ld.global.v4.b32 {{v0, v1, v2, v3}}, [x];\n  cvt.u32.u64 sh, off;\n  mov.u32 one, {name};\n  add.u32 sh, sh, one;\n  st.shared.v4.b32 [sh], {{v0, v1, v2, v3}};\n",
                c * 128 * 16
            );
        }
    }
    s += "  fence.proxy.async.shared::cta;\n  bar.sync 0;\n";
    for r in &d {
        s += &format!("  mov{dreg} {r}, {zero};\n");
    }
    s += "  wgmma.fence.sync.aligned;\n  mov.u32 one, 1;\n  setp.ne.b32 p, one, 0;\n";
    for step in 0..steps {
        if reg_a {
            s += &format!(
                "  mul.wide.u32 off, t, 16;\n  add.s64 off, off, {};\n  add.s64 x, ga, off;\n  ld.global.v4.b32 {{ra0, ra1, ra2, ra3}}, [x];\n",
                step * 128 * 16
            );
        }
        let descs: &[(&str, &str)] = if reg_a {
            &[("db", "sb")]
        } else {
            &[("da", "sa"), ("db", "sb")]
        };
        for &(desc, arr) in descs {
            // A transposed B steps k by rows (16 of 128 bytes) and has
            // its column blocks `block` bytes apart.
            let (advance, leading) = if trans_b && arr == "sb" {
                (step * 16 * ROW, block >> 4)
            } else {
                (step * 32, 1)
            };
            s += &format!(
                "  mov.u32 sh, {arr};\n  add.u32 sh, sh, {advance};\n  cvt.u64.u32 {desc}, sh;\n  shr.u64 {desc}, {desc}, 4;\n  and.b64 {desc}, {desc}, 16383;\n  or.b64 {desc}, {desc}, {};\n",
                (leading << 16) | ((1024u64 >> 4) << 32) | (1u64 << 62)
            );
        }
        let a = if reg_a { "{ra0, ra1, ra2, ra3}" } else { "da" };
        s += &format!("  {} {{{}}}, {a}, db, p{rest};\n", i.name, d.join(", "));
    }
    s += "  wgmma.commit_group.sync.aligned;\n  wgmma.wait_group.sync.aligned 0;\n";
    s += &format!(
        "  mul.wide.u32 off, t, {};\n  add.s64 gd, gd, off;\n",
        regs * 4
    );
    for (r, reg) in d.iter().enumerate() {
        s += &format!("  st.global{dreg} [gd+{}], {reg};\n", r * 4);
    }
    s += "  ret;\n}\n";
    s
}

/// Encodes a small integer exactly in the element type, as bytes.
fn encode(t: MType, v: i32) -> Vec<u8> {
    match t {
        MType::F16 => half::f16::from_f64(f64::from(v)).to_le_bytes().to_vec(),
        MType::Bf16 => half::bf16::from_f64(f64::from(v)).to_le_bytes().to_vec(),
        MType::I8 => vec![v as i8 as u8],
        // The small integers the check draws (|v| <= 4), exact in both
        // 8-bit float formats: e4m3 (bias 7) and e5m2 (bias 15).
        MType::Fp8 | MType::Bf8 => {
            let m = v.unsigned_abs();
            let bits: u8 = match (t, m) {
                (_, 0) => 0,
                (MType::Fp8, 1) => 0x38,
                (MType::Fp8, 2) => 0x40,
                (MType::Fp8, 3) => 0x44,
                (MType::Fp8, 4) => 0x48,
                (MType::Bf8, 1) => 0x3c,
                (MType::Bf8, 2) => 0x40,
                (MType::Bf8, 3) => 0x42,
                (MType::Bf8, 4) => 0x44,
                _ => panic!("{v} is not drawn"),
            };
            vec![bits | if v < 0 { 0x80 } else { 0 }]
        }
        other => panic!("no wgmma input of type {other}"),
    }
}

/// `rows` rows of `m` laid out as shared memory holds them: 128-byte rows,
/// 16-byte chunk `c` of row `r` at chunk `c ^ r % 8`.
fn swizzle(t: MType, m: &[Vec<i32>]) -> Vec<u8> {
    let es = t.bits() as usize / 8;
    let mut out = vec![0u8; m.len() * ROW];
    for (r, row) in m.iter().enumerate() {
        for (c, v) in row.iter().enumerate() {
            let byte = c * es;
            let at = r * ROW + ((byte / 16) ^ (r % 8)) * 16 + byte % 16;
            out[at..at + es].copy_from_slice(&encode(t, *v));
        }
    }
    out
}

/// A (64 rows of a k tile) as each lane's registers for an instruction
/// taking A from them: per k step, lane by lane, the lane's elements in
/// the table's order (two 16-bit elements a 32-bit register).
fn registers(i: &MatrixInstr, a: &[Vec<i32>]) -> Vec<u8> {
    let steps = a[0].len() / i.k as usize;
    let mut out = Vec::new();
    for step in 0..steps {
        for lane in 0..i.wave {
            for e in 0..i.a_per_lane() {
                let (r, k) = i.a_at(lane, e);
                out.extend(encode(i.a, a[r as usize][step * i.k as usize + k as usize]));
            }
        }
    }
    out
}

/// B (`n` rows of a k tile) as a transposed operand lies: 64 rows of k,
/// each in `n / 64` blocks of 128 bytes (64 elements of n), the blocks one
/// after the other, swizzled within each as [`swizzle`] does.
fn transposed(t: MType, b: &[Vec<i32>]) -> Vec<u8> {
    let (n, width) = (b.len(), b[0].len());
    let per = ROW * 8 / t.bits() as usize;
    let mut out = Vec::new();
    for blk in 0..n / per {
        let rows: Vec<Vec<i32>> = (0..width)
            .map(|k| (0..per).map(|c| b[blk * per + c][k]).collect())
            .collect();
        out.extend(swizzle(t, &rows));
    }
    out
}

/// Checks every `wgmma` instruction of the table on device 0 (an sm_90 GPU).
pub fn check(args: &[String]) -> Res<bool> {
    let seed = crate::flag(args, "--seed", 1)?;
    let perturb = args.iter().any(|a| a == "--perturb");
    let mut dev = rocmc_runtime::open_local("cuda:0").map_err(|e| e.to_string())?;
    let mut rng = rocmc_ir::reference::Rng(seed);
    let mut all = true;
    println!("| instruction | k steps in the tile | D cells checked | max error | result |");
    println!("|---|---|---|---|---|");
    let cases = INSTRUCTIONS
        .iter()
        .filter(|i| i.warpgroup())
        .flat_map(|i| [(i, false), (i, true)])
        .filter(|(i, t)| !t || i.a.bits() == 16);
    for (i, trans_b) in cases {
        let (n, width) = (i.n as usize, ROW * 8 / i.a.bits() as usize);
        let mut draw = |rows: usize| -> Vec<Vec<i32>> {
            (0..rows)
                .map(|_| (0..width).map(|_| rng.below(9) as i32 - 4).collect())
                .collect()
        };
        let a = draw(64);
        let b = draw(n);
        let mut sa = if i.a_in_shared() {
            swizzle(i.a, &a)
        } else {
            registers(i, &a)
        };
        if perturb {
            // Two chunks of row 1 swapped (or lanes 0 and 1's registers):
            // a layout mistake's symptom.
            let (x, y) = (ROW, ROW + 16);
            for j in 0..16 {
                sa.swap(x + j, y + j);
            }
        }
        let sb = if trans_b {
            transposed(i.b, &b)
        } else {
            swizzle(i.b, &b)
        };
        let module = dev
            .load_module(ptx(i, trans_b).as_bytes())
            .map_err(|e| format!("{}: {e}", i.name))?;
        let e = |e: rocmc_device::Error| e.to_string();
        let da = dev.upload(&sa).map_err(e)?;
        let db = dev.upload(&sb).map_err(e)?;
        let regs = n / 2;
        let dd = dev.alloc((128 * regs * 4) as u64).map_err(e)?;
        let buf = |id, dtype: &str, len| Arg::Buffer {
            id,
            dtype: dtype.into(),
            len,
            offset: 0,
        };
        let int = i.acc == MType::I32;
        let dt = if int { "i32" } else { "f32" };
        dev.launch(
            &module,
            "wgmma",
            &[
                buf(da, "u32", (sa.len() / 4) as u64),
                buf(db, "u32", (sb.len() / 4) as u64),
                buf(dd, dt, (128 * regs) as u64),
            ],
        )
        .map_err(e)?;
        let got = dev.read_all(dd).map_err(e)?;
        for id in [da, db, dd] {
            dev.free(id).map_err(e)?;
        }
        let value = |lane: usize, r: usize| {
            let w: [u8; 4] = got[(lane * regs + r) * 4..][..4].try_into().unwrap();
            if int {
                f64::from(i32::from_le_bytes(w))
            } else {
                f64::from(f32::from_le_bytes(w))
            }
        };
        let mut max_err: f64 = 0.0;
        for lane in 0..128u32 {
            for r in 0..regs as u32 {
                let (row, col) = i.acc_at(lane, r);
                let want: i64 = (0..width)
                    .map(|k| i64::from(a[row as usize][k]) * i64::from(b[col as usize][k]))
                    .sum();
                max_err = max_err.max((value(lane as usize, r as usize) - want as f64).abs());
            }
        }
        let ok = max_err == 0.0;
        all &= ok;
        println!(
            "| {}{}{} | {} | 64x{n} | {max_err} | {} |",
            i.name,
            if i.a_in_shared() {
                ""
            } else {
                ", A in registers"
            },
            if trans_b { ", B transposed" } else { "" },
            width / i.k as usize,
            if ok { "exact" } else { "WRONG" }
        );
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernels ptxas assembles, wherever it is installed (the
    /// workspace's tests/wgmma.rs runs the lowering's own PTX through it).
    #[test]
    fn every_kernel_assembles_for_sm_90a() {
        let Some(ptxas) = crate::test_ptxas() else {
            return;
        };
        let dir = std::env::temp_dir().join("rocmc-gpu-check-wgmma");
        std::fs::create_dir_all(&dir).unwrap();
        for i in INSTRUCTIONS.iter().filter(|i| i.warpgroup()) {
            let f = dir.join("k.ptx");
            std::fs::write(&f, ptx(i, i.a.bits() == 16)).unwrap();
            let out = std::process::Command::new(&ptxas)
                .args(["-arch", "sm_90a", "-o"])
                .arg(dir.join("k.cubin"))
                .arg(&f)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}: {}",
                i.name,
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    /// The host's layout puts every element of a row in that row, once.
    #[test]
    fn the_host_layout_is_a_permutation_within_each_row() {
        let m: Vec<Vec<i32>> = (0..16)
            .map(|r| (0..64).map(|c| r * 64 + c).collect())
            .collect();
        let bytes = swizzle(MType::F16, &m);
        for r in 0..16usize {
            let mut seen: Vec<i32> = bytes[r * ROW..(r + 1) * ROW]
                .chunks_exact(2)
                .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f64() as i32)
                .collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..64).map(|c| r as i32 * 64 + c).collect::<Vec<_>>());
        }
        // Row 3's chunk 2 (elements 16..24) sits at chunk 2 ^ 3 = 1.
        let at = 3 * ROW + 16;
        assert_eq!(
            half::f16::from_le_bytes([bytes[at], bytes[at + 1]]).to_f64(),
            (3 * 64 + 16) as f64
        );
    }
}
