//! `rocmc-gpu-check mma`: the `mma.sync` lane layouts of rocmc's matrix
//! table (rocmc_target::matrix) against a real NVIDIA GPU.
//!
//! For each instruction, the host packs random A and B into each lane's
//! registers exactly as the table says lane l holds element e, a tiny PTX
//! kernel loads those registers verbatim, issues the instruction once and
//! stores each lane's D registers verbatim, and the host reads D back
//! through the table's accumulator layout and compares with A·B computed
//! here. A layout entry that is wrong anywhere makes the comparison fail.

use crate::Res;
use rocmc_device::{Arg, Device};
use rocmc_target::matrix::{execute, Family, MType, MatrixInstr, INSTRUCTIONS};

fn ptx(i: &MatrixInstr) -> String {
    let int = i.acc == MType::I32;
    let dreg = if int { ".s32" } else { ".f32" };
    let zero = if int { "0" } else { "0f00000000" };
    let launch = format!(
        r#"// rocmc.launch {{"version":1,"sizes":[],"kernels":[{{"name":"mma","block":[32,1,1],"grid":[{{"const":1}},{{"const":1}},{{"const":1}}],"grid_text":["1","1","1"],"args":[{{"name":"A","role":"buffer","dtype":"u32","shape":[{{"const":128}}]}},{{"name":"B","role":"buffer","dtype":"u32","shape":[{{"const":64}}]}},{{"name":"D","role":"buffer","dtype":"{}","shape":[{{"const":128}}],"written":true}}]}}]}}"#,
        if int { "i32" } else { "f32" }
    );
    format!(
        r#"{launch}
.version 7.8
.target sm_80
.address_size 64
.visible .entry mma(.param .u64 pa, .param .u64 pb, .param .u64 pd)
{{
  .reg .b32 a<4>, b<2>;
  .reg {dreg} d<4>, c<4>;
  .reg .b64 ra, rb, rd, off;
  .reg .b32 lane;
  ld.param.u64 ra, [pa];
  ld.param.u64 rb, [pb];
  ld.param.u64 rd, [pd];
  cvta.to.global.u64 ra, ra;
  cvta.to.global.u64 rb, rb;
  cvta.to.global.u64 rd, rd;
  mov.u32 lane, %tid.x;
  mul.wide.u32 off, lane, 16;
  add.s64 ra, ra, off;
  add.s64 rd, rd, off;
  ld.global.v4.b32 {{a0, a1, a2, a3}}, [ra];
  mul.wide.u32 off, lane, 8;
  add.s64 rb, rb, off;
  ld.global.v2.b32 {{b0, b1}}, [rb];
  mov{dreg} c0, {zero};
  mov{dreg} c1, {zero};
  mov{dreg} c2, {zero};
  mov{dreg} c3, {zero};
  {name} {{d0, d1, d2, d3}}, {{a0, a1, a2, a3}}, {{b0, b1}}, {{c0, c1, c2, c3}};
  st.global.v4{dreg} [rd], {{d0, d1, d2, d3}};
  ret;
}}
"#,
        name = i.name
    )
}

/// Encodes a small integer value (|v| <= 8) exactly in the element type.
fn encode(t: MType, v: f64) -> u32 {
    match t {
        MType::F16 => u32::from(half::f16::from_f64(v).to_bits()),
        MType::Bf16 => u32::from(half::bf16::from_f64(v).to_bits()),
        MType::I8 => u32::from(v as i8 as u8),
        other => panic!("no mma.sync input of type {other}"),
    }
}

/// Packs each lane's elements into 32-bit registers, low bits first.
fn pack(t: MType, lanes: &[Vec<f64>]) -> Vec<u32> {
    let per_reg = (32 / t.bits()) as usize;
    lanes
        .iter()
        .flat_map(|regs| regs.chunks(per_reg))
        .map(|chunk| {
            chunk
                .iter()
                .enumerate()
                .fold(0u32, |w, (j, &v)| w | encode(t, v) << (j as u32 * t.bits()))
        })
        .collect()
}

/// Launches the one-warp kernel of `module` on packed A and B; D as numbers.
fn run(dev: &mut dyn Device, module: &str, int: bool, pa: &[u32], pb: &[u32]) -> Res<Vec<f64>> {
    let e = |e: rocmc_device::Error| e.to_string();
    let bytes = |v: &[u32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let da = dev.upload(&bytes(pa)).map_err(e)?;
    let db = dev.upload(&bytes(pb)).map_err(e)?;
    let dd = dev.alloc(128 * 4).map_err(e)?;
    let buffer = |id, dtype: &str, len| Arg::Buffer {
        id,
        dtype: dtype.into(),
        len,
        offset: 0,
    };
    let dtype = if int { "i32" } else { "f32" };
    dev.launch(
        module,
        "mma",
        &[
            buffer(da, "u32", 128),
            buffer(db, "u32", 64),
            buffer(dd, dtype, 128),
        ],
    )
    .map_err(e)?;
    let d = dev.read_all(dd).map_err(e)?;
    for id in [da, db, dd] {
        dev.free(id).map_err(e)?;
    }
    Ok(d.chunks_exact(4)
        .map(|c| {
            let w = [c[0], c[1], c[2], c[3]];
            if int {
                f64::from(i32::from_le_bytes(w))
            } else {
                f64::from(f32::from_le_bytes(w))
            }
        })
        .collect())
}

/// Checks every `mma.sync` instruction of the table on device 0.
pub fn check(args: &[String]) -> Res<bool> {
    let seed = crate::flag(args, "--seed", 1)?;
    // Self-test: pack lane 0's first two A elements swapped, as a layout
    // mistake would; every instruction must then come out WRONG.
    let perturb = args.iter().any(|a| a == "--perturb");
    let mut dev = rocmc_runtime::open_local("cuda:0").map_err(|e| e.to_string())?;
    let mut rng = rocmc_ir::reference::Rng(seed);
    let mut all = true;
    println!("| instruction | shape | layout cells checked | max error | result |");
    println!("|---|---|---|---|---|");
    for i in INSTRUCTIONS.iter().filter(|i| i.family == Family::MmaSync) {
        let (m, n, k) = (i.m as usize, i.n as usize, i.k as usize);
        // Small integers: exact in every input type and in the f32 sums.
        let mut a: Vec<Vec<f64>> = (0..m)
            .map(|_| (0..k).map(|_| rng.below(17) as f64 - 8.0).collect())
            .collect();
        // The swapped pair must differ, or the self-test could not fail.
        let ((r0, k0), (r1, k1)) = (i.a_at(0, 0), i.a_at(0, 1));
        if a[r0 as usize][k0 as usize] == a[r1 as usize][k1 as usize] {
            a[r1 as usize][k1 as usize] += 1.0;
        }
        let b: Vec<Vec<f64>> = (0..k)
            .map(|_| (0..n).map(|_| rng.below(17) as f64 - 8.0).collect())
            .collect();
        // Each lane's registers as the table lays them out.
        let lanes = |per: u32, at: &dyn Fn(u32, u32) -> f64| -> Vec<Vec<f64>> {
            (0..32)
                .map(|l| (0..per).map(|e| at(l, e)).collect())
                .collect()
        };
        let ra = lanes(i.a_per_lane(), &|l, e| {
            let (r, kk) = i.a_at(l, e);
            a[r as usize][kk as usize]
        });
        let rb = lanes(i.b_per_lane(), &|l, e| {
            let (kk, c) = i.b_at(l, e);
            b[kk as usize][c as usize]
        });
        let mut sent = ra.clone();
        if perturb {
            sent[0].swap(0, 1);
        }
        let pa = pack(i.a, &sent);
        let pb = pack(i.b, &rb);
        let module = dev
            .load_module(ptx(i).as_bytes())
            .map_err(|e| format!("{}: {e}", i.name))?;
        let got = run(dev.as_mut(), &module, i.acc == MType::I32, &pa, &pb)?;
        // What the table says D holds: through `execute`, the CPU's model of the instruction.
        let rc = lanes(i.acc_per_lane(), &|_, _| 0.0);
        let want = execute(i, &ra, &rb, &rc);
        let mut max_err: f64 = 0.0;
        for lane in 0..32usize {
            for e in 0..4usize {
                max_err = max_err.max((got[lane * 4 + e] - want[lane][e]).abs());
            }
        }
        // And directly: D[r][c] = sum_k A[r][k] B[k][c], read through the accumulator layout.
        for lane in 0..32u32 {
            for e in 0..4u32 {
                let (r, c) = i.acc_at(lane, e);
                let direct: f64 = (0..k).map(|kk| a[r as usize][kk] * b[kk][c as usize]).sum();
                max_err = max_err.max((got[(lane * 4 + e) as usize] - direct).abs());
            }
        }
        let ok = max_err == 0.0;
        all &= ok;
        println!(
            "| {} | m{}n{}k{} {}x{}->{} | A {}x{}, B {}x{}, D {}x{} | {max_err} | {} |",
            i.name,
            m,
            n,
            k,
            i.a,
            i.b,
            i.acc,
            m,
            k,
            k,
            n,
            m,
            n,
            if ok { "exact" } else { "WRONG" }
        );
    }
    Ok(all)
}
