//! The `mma` schedule primitive end to end: every matrix-core example runs
//! on the CPU through each target's own lane layouts and matches the
//! reference interpreter on sizes the tiles do not divide; it compiles for
//! every GPU target with the instruction (checked by llvm-objdump-22 or
//! ptxas); impossible requests are refused naming the step, the target and
//! what it has; and a seeded sweep over shapes, tiles and sizes.

use crate::common::{amd_code, assemble_ptx, example, matrix_examples, tool};
use rocmc::Options;
use std::collections::HashMap;

/// Targets with matrix units, with the wave size to use (None: the default).
const TARGETS: &[(&str, Option<u32>)] = &[
    ("gfx908", None),
    ("gfx90a", None),
    ("gfx942", None),
    ("gfx950", None),
    ("gfx1100", None),
    ("gfx1100", Some(64)),
    ("gfx1201", None),
    ("sm_80", None),
    ("sm_90", None),
    ("sm_90a", None),
];

fn opts(mcpu: &str, emulate: Option<&str>, wave: Option<u32>) -> Options {
    let mut o = Options::new(mcpu);
    o.emulate = emulate.map(str::to_string);
    o.wave_size = wave;
    o.fp_contract = false;
    o
}

/// Runs `src` on the CPU with `processor`'s matrix instructions: `Ok` with
/// the worst relative error, or the lowering's refusal.
fn run_emulated(
    src: &str,
    processor: &str,
    wave: Option<u32>,
    sizes: &[(&str, i64)],
    seed: u64,
) -> Result<f64, String> {
    let front = rocmc::frontend("k.toml", src).map_err(|e| e.to_string())?;
    let o = opts("x86-64", Some(processor), wave);
    let cpu = rocmc::targets(&Options::new("x86-64")).unwrap().remove(0);
    let front = front.for_target(&cpu, &o).map_err(|e| e.to_string())?;
    assert!(
        !front.matrix_instructions().is_empty(),
        "{processor}: no matrix instruction in the loop IR"
    );
    let given: HashMap<String, i64> = sizes.iter().map(|(n, v)| (n.to_string(), *v)).collect();
    let sizes = rocmc::run::size_values(&front.kernel, &given).unwrap();
    let report = rocmc::run::run_cpu(&front, &sizes, &HashMap::new(), seed, false)
        .unwrap_or_else(|e| panic!("{processor}: {e}"));
    for c in &report {
        assert!(
            c.ok(),
            "{processor} {sizes:?}: {} differs from the interpreter: max error {} (tolerance {})",
            c.tensor,
            c.max_error,
            c.tolerance
        );
    }
    Ok(report.iter().map(|c| c.max_error).fold(0.0, f64::max))
}

const EXAMPLES: &[&str] = &[
    "gemm_f16",
    "gemm_f16_mma",
    "gemm_f16_wgmma",
    "gemm_bf16_gelu",
    "gemm_i8",
    "gemm_fp8",
    "gemm_bf8_ocp",
];

#[test]
fn the_list_covers_every_matrix_example() {
    let mut ours: Vec<String> = EXAMPLES.iter().map(|s| s.to_string()).collect();
    ours.sort();
    assert_eq!(ours, matrix_examples());
}

#[test]
fn every_matrix_example_matches_the_interpreter_through_each_targets_layout() {
    // Which (example, target) pairs have the instruction, as LLVM's tables
    // and the ISA documents say (tests/matrix.rs checks those against llc).
    let expect_ok: &[(&str, &[&str])] = &[
        (
            "gemm_f16",
            &["gfx908", "gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201"],
        ),
        ("gemm_f16_mma", &["sm_80", "sm_90", "sm_90a"]),
        // Hopper's warpgroup instruction exists on sm_90a only.
        ("gemm_f16_wgmma", &["sm_90a"]),
        (
            "gemm_bf16_gelu",
            &["gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201"],
        ),
        ("gemm_i8", &["gfx942", "gfx950"]),
        // 8-bit floats in the encoding each target reads: FNUZ on gfx942,
        // OCP on gfx950 (gfx12 has them at 16x16x16 only).
        ("gemm_fp8", &["gfx942"]),
        ("gemm_bf8_ocp", &["gfx950"]),
    ];
    for name in EXAMPLES {
        let src = std::fs::read_to_string(example(name)).unwrap();
        let want: &[&str] = expect_ok.iter().find(|(n, _)| n == name).unwrap().1;
        for (p, wave) in TARGETS {
            // 77x45 outputs over k = 50: no tile, fragment or k step divides them.
            let r = run_emulated(&src, p, *wave, &[("M", 77), ("N", 45), ("K", 50)], 3);
            match r {
                Ok(_) => assert!(
                    want.contains(p),
                    "{name} ran on {p}, which lacks its instruction"
                ),
                Err(e) => {
                    assert!(!want.contains(p), "{name} on {p} (wave {wave:?}): {e}");
                    assert!(
                        e.contains("mma("),
                        "{name} on {p}: the refusal names the step: {e}"
                    );
                }
            }
        }
    }
}

#[test]
fn matrix_examples_compile_for_every_gpu_target_with_the_instruction() {
    let dir = tempfile::tempdir().unwrap();
    for name in EXAMPLES {
        let src = std::fs::read_to_string(example(name)).unwrap();
        for (p, wave) in TARGETS {
            let o = opts(p, None, *wave);
            let nvidia = p.starts_with("sm_");
            let emit = rocmc::Emit {
                asm: true,
                code_object: !nvidia,
                ..Default::default()
            };
            let Ok(art) = rocmc::compile(&format!("{name}.toml"), &src, &o, emit) else {
                continue;
            };
            let asm = art.asm.clone().unwrap();
            let instr = rocmc::ir::lower::matrix::uses_matrix(&art.program);
            // A warpgroup instruction's k tail runs the warp's (mma.sync).
            let group = instr.iter().any(|i| i.warpgroup());
            assert_eq!(instr.len(), 1 + usize::from(group), "{name} {p}");
            if nvidia {
                assert!(asm.contains("mma.sync.aligned.m16n8k16"), "{name} {p}");
                let reports = assemble_ptx(&asm, p).unwrap_or_else(|e| panic!("{name} {p}: {e}"));
                if group {
                    assert!(
                        asm.contains("wgmma.mma_async.sync.aligned.m64n256k16"),
                        "{name} {p}"
                    );
                    assert!(asm.contains("fence.proxy.async.shared::cta"), "{name} {p}");
                    assert!(
                        reports.iter().all(|r| !r.wgmma_serialized),
                        "{name} {p}: ptxas serialized the wgmma: {reports:?}"
                    );
                }
                // A register budget (`occupancy`) may cost a few spills,
                // which the H100 measurement found worth it; none otherwise
                // but the warpgroup GEMM's (255 registers with 128
                // accumulators: 4 to 24 bytes, measured at 0.94-0.99x cuBLAS).
                let budget = if src.contains("\"occupancy(") {
                    64
                } else if group {
                    32
                } else {
                    0
                };
                assert!(
                    reports.iter().all(|r| r.spill_stores <= budget),
                    "{name} {p}: spills {reports:?}"
                );
            } else {
                // The code object, disassembled by LLVM's own tool, issues the instruction.
                let co = dir.path().join(format!("{name}-{p}-{wave:?}.hsaco"));
                std::fs::write(&co, art.code_object.unwrap()).unwrap();
                let dis = tool("llvm-objdump-22", &["-d", co.to_str().unwrap()]);
                // gfx908/gfx90a spell the older MFMAs without the last underscore.
                let mnemonic = instr[0].name;
                let squashed = |s: &str| s.replace('_', "");
                assert!(
                    dis.lines()
                        .any(|l| squashed(l).contains(&squashed(mnemonic))),
                    "{name} {p}: no {mnemonic} in the code object"
                );
                assert!(asm.contains("; ScratchSize: 0"), "{name} {p}: uses scratch");
            }
        }
    }
}

fn refusal(src: &str, mcpu: &str) -> String {
    let e = rocmc::compile(
        "k.toml",
        src,
        &opts(mcpu, None, None),
        rocmc::Emit::default(),
    )
    .expect_err("refused");
    e.to_string()
}

#[test]
fn impossible_requests_are_refused_naming_the_step_the_target_and_what_it_has() {
    let f16 = std::fs::read_to_string(example("gemm_f16")).unwrap();
    // No matrix unit at all.
    let e = refusal(&f16, "gfx906");
    assert!(e.contains("gfx906 has no matrix instructions"), "{e}");
    assert!(e.contains("mma(ri, rj, rk)"), "{e}");
    // A shape the target lacks: NVIDIA has 16x8x16, not 16x16x16.
    let e = refusal(&f16, "sm_90");
    assert!(e.contains("are 16x16x16"), "{e}");
    assert!(e.contains("mma_m16n8k16_f16 (16x8x16"), "{e}");
    // Types the target lacks: f32 inputs.
    let f32src = f16
        .replace("dtype = \"f16\"", "dtype = \"f32\"")
        .replace("f32(A[i, k]) * f32(B[k, j])", "A[i, k] * B[k, j]");
    let e = refusal(&f32src, "gfx942");
    assert!(
        e.contains("no matrix instruction for f32 x f32 -> f32"),
        "{e}"
    );
    assert!(
        e.contains("v_mfma_f32_16x16x16_f16"),
        "it lists what it has: {e}"
    );
    // A named instruction of another family.
    let named = f16.replace(
        "mma(ri, rj, rk)",
        "mma(ri, rj, rk, instr=v_wmma_f32_16x16x16_f16)",
    );
    let e = refusal(&named, "gfx942");
    assert!(
        e.contains("no matrix instruction `v_wmma_f32_16x16x16_f16`"),
        "{e}"
    );
    // Tiles the instruction's shape does not divide are loops of the wrong extent.
    let odd = f16.replace("tile(fi, fj, 16, 16)", "tile(fi, fj, 16, 8)");
    let e = refusal(&odd, "gfx942");
    assert!(e.contains("are 16x8x16"), "{e}");
    // threadIdx.x belongs to the lanes.
    let tx = f16.replace("bind(wj, threadIdx.y)", "bind(wj, threadIdx.x)");
    let e = refusal(&tx, "gfx942");
    assert!(
        e.contains("threadIdx.x is the lane within the wave")
            || e.contains("threadIdx.x is already bound"),
        "{e}"
    );
    // Not a sum of products.
    let max = f16.replace(
        "sum(f32(A[i, k]) * f32(B[k, j]), k)",
        "reduce_max(f32(A[i, k]) * f32(B[k, j]), k)",
    );
    let e = refusal(&max, "gfx942");
    assert!(e.contains("needs a sum of products"), "{e}");
    // The CPU without --emulate.
    let e = refusal(&f16, "x86-64");
    assert!(e.contains("--emulate"), "{e}");
    // Too many waves.
    let big = f16
        .replace("tile(ii, ji, 32, 32)", "tile(ii, ji, 16, 16)")
        .replace("tile(i, j, 64, 64)", "tile(i, j, 128, 128)");
    let e = refusal(&big, "gfx942");
    assert!(e.contains("threads per block"), "{e}");
}

/// A small deterministic generator, so failures name a reproducible case.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

#[test]
fn sweep_over_instructions_tiles_and_sizes() {
    // Each case: a target's instruction for f16/bf16/i8/f8, waves per block,
    // fragments per wave, k steps per LDS tile, and sizes not multiples of any tile.
    // (processor, wave, input type, m, n, k)
    type Case = (&'static str, Option<u32>, &'static str, u32, u32, u32);
    let cases: &[Case] = &[
        ("gfx942", None, "f16", 16, 16, 16),
        ("gfx942", None, "f16", 32, 32, 8),
        ("gfx90a", None, "bf16", 32, 32, 8),
        ("gfx942", None, "i8", 32, 32, 16),
        ("gfx908", None, "i8", 16, 16, 16),
        ("gfx950", None, "f16", 16, 16, 32),
        ("gfx950", None, "i8", 16, 16, 64),
        ("gfx1100", None, "bf16", 16, 16, 16),
        ("gfx1100", Some(64), "i8", 16, 16, 16),
        ("gfx1201", None, "i8", 16, 16, 16),
        ("gfx1201", Some(64), "f16", 16, 16, 16),
        ("sm_90", None, "bf16", 16, 8, 16),
        ("sm_80", None, "i8", 16, 8, 32),
        // 8-bit floats, in the encoding each reads: FNUZ MFMA on gfx942, OCP
        // MFMA on gfx950 and OCP WMMA on gfx12.
        ("gfx942", None, "f8e4m3fnuz", 32, 32, 16),
        ("gfx942", None, "f8e5m2fnuz", 16, 16, 32),
        ("gfx950", None, "f8e4m3fn", 16, 16, 32),
        ("gfx950", None, "f8e5m2", 32, 32, 16),
        ("gfx1201", None, "f8e4m3fn", 16, 16, 16),
        ("gfx1201", None, "f8e5m2", 16, 16, 16),
    ];
    let mut rng = Lcg(20261123);
    for (p, wave, t, m, n, k) in cases {
        let (wm, wn) = (1 + rng.next(2), 1 + rng.next(2));
        let (fm, fn_) = (1 + rng.next(2), 1 + rng.next(2));
        let ks = 1 + rng.next(2);
        let (bm, bn) = (wm * fm * u64::from(*m), wn * fn_ * u64::from(*n));
        let (wtm, wtn) = (fm * u64::from(*m), fn_ * u64::from(*n));
        let kt = ks * u64::from(*k);
        let acc = if *t == "i8" { "i32" } else { "f32" };
        let src = format!(
            r#"[kernel]
name = "sweep"
sizes = ["M", "N", "K"]
max = {{ M = 4096, N = 4096, K = 4096 }}
[inputs]
A = {{ dtype = "{t}", shape = ["M", "K"] }}
B = {{ dtype = "{t}", shape = ["K", "N"] }}
[[stage]]
compute = "C[i, j] = sum({acc}(A[i, k]) * {acc}(B[k, j]), k)"
shape = ["M", "N"]
reduce = {{ k = "K" }}
schedule = [
  "io, jo, ii, ji = tile(i, j, {bm}, {bn})",
  "wi, wj, fi, fj = tile(ii, ji, {wtm}, {wtn})",
  "mi, mj, ri, rj = tile(fi, fj, {m}, {n})",
  "ko, kk = split(k, {kt})",
  "km, rk = split(kk, {k})",
  "reorder(ko, km, mi, mj, ri, rj, rk)",
  "bind(io, blockIdx.y)", "bind(jo, blockIdx.x)",
  "bind(wi, threadIdx.z)", "bind(wj, threadIdx.y)",
  "unroll(km)", "unroll(mi)", "unroll(mj)",
  "AS = cache_read(A, shared, ko, pad={pad})",
  "mma(ri, rj, rk)",
]
"#,
            pad = 1 + rng.next(8),
        );
        let sizes = [
            ("M", 1 + rng.next(2 * bm) as i64 + bm as i64 / 2),
            ("N", 1 + rng.next(2 * bn) as i64),
            ("K", 1 + rng.next(3 * kt) as i64),
        ];
        run_emulated(&src, p, *wave, &sizes, rng.next(1000))
            .unwrap_or_else(|e| panic!("{p} {t} {m}x{n}x{k}: {e}\n{src}"));
    }
}

/// `occupancy(blocks=N)` reaches the register allocators: `.minnctapersm`
/// in the PTX (ptxas then uses at most 65536 / (N x threads) registers) and
/// `amdgpu-waves-per-eu` on AMD (the blocks' waves over a CU's 4 SIMDs on
/// CDNA). Malformed requests are refused with their location.
#[test]
fn occupancy_budgets_registers_for_several_blocks() {
    let with = |name: &str, blocks: &str| {
        let src = std::fs::read_to_string(example(name)).unwrap();
        let mma = src
            .lines()
            .find(|l| l.trim_start().starts_with("\"mma("))
            .unwrap()
            .to_string();
        src.replace(&mma, &format!("{mma}\n  \"occupancy({blocks})\","))
    };
    let emit = rocmc::Emit {
        asm: true,
        llvm: true,
        ..Default::default()
    };
    // Two blocks of 2x4 warps of 64x32 (256 threads) leave 128 registers.
    let src = with("gemm_f16_mma", "blocks=2")
        .replace("tile(i, j, 128, 256)", "tile(i, j, 128, 128)")
        .replace("tile(ii, ji, 64, 64)", "tile(ii, ji, 64, 32)");
    let art = rocmc::compile("k.toml", &src, &Options::new("sm_90"), emit).unwrap();
    let ptx = art.asm.unwrap();
    assert!(ptx.contains(".minnctapersm 2"), "{ptx}");
    let reports = assemble_ptx(&ptx, "sm_90").unwrap();
    assert!(reports.iter().all(|r| r.registers <= 128), "{reports:?}");

    let src = with("gemm_f16", "blocks=2");
    let art = rocmc::compile("k.toml", &src, &Options::new("gfx942"), emit).unwrap();
    // 4 waves of 64 per block, two blocks, 4 SIMDs: 2 waves per SIMD.
    assert!(art.llvm_ir.contains("\"amdgpu-waves-per-eu\"=\"2\""));

    for (arg, want) in [
        ("blocks=0", "must be positive"),
        ("blocks=33", "at most 32 work-groups"),
        ("2", "expected `blocks=N`"),
    ] {
        let e = refusal(&with("gemm_f16", arg), "gfx942");
        assert!(e.contains(want) && e.contains("k.toml:"), "{arg}: {e}");
    }
    let twice = with("gemm_f16", "blocks=2").replace(
        "\"occupancy(blocks=2)\",",
        "\"occupancy(blocks=2)\",\n  \"occupancy(blocks=3)\",",
    );
    assert!(refusal(&twice, "gfx942").contains("`occupancy` given twice"));
}

/// On NVPTX each lane of an mma.sync accumulator holds column pairs: the
/// epilogue stores each pair as one 8-byte vector store (4 bytes for f16
/// C) where both elements are inside C and the row is aligned, and as two
/// guarded scalar stores elsewhere (odd N, the ragged edge; the GPU check
/// covers both). 64x64 warp tiles: 64 pairs per thread. ptxas accepts it
/// without spills. AMD keeps its scalar epilogue.
#[test]
fn matrix_epilogue_stores_column_pairs_as_vectors() {
    let emit = rocmc::Emit {
        asm: true,
        ..Default::default()
    };
    let src = std::fs::read_to_string(example("gemm_f16_mma")).unwrap();
    let half = src.replace(
        "C[i, j] = sum(f32(A[i, k]) * f32(B[k, j]), k)",
        "C[i, j] = f16(sum(f32(A[i, k]) * f32(B[k, j]), k))",
    );
    assert_ne!(half, src);
    for (src, vector, scalar) in [
        (&src, "st.global.v2.b32", "st.global.b32"),
        (&half, "st.global.v2.b16", "st.global.b16"),
    ] {
        let ptx = rocmc::compile("k.toml", src, &Options::new("sm_90"), emit)
            .unwrap()
            .asm
            .unwrap();
        let count = |s: &str| ptx.lines().filter(|l| l.contains(&format!("{s} "))).count();
        assert_eq!(count(vector), 64, "{vector}");
        assert_eq!(count(scalar), 128, "{scalar}: the checked path");
        let reports = assemble_ptx(&ptx, "sm_90").unwrap();
        assert!(reports.iter().all(|r| r.spill_stores == 0), "spills");
    }
    let src = std::fs::read_to_string(example("gemm_f16")).unwrap();
    let art = rocmc::compile("k.toml", &src, &Options::new("gfx942"), emit).unwrap();
    let asm = art.asm.unwrap();
    assert!(asm.contains("global_store_dword "), "{asm}");
    assert!(!asm.contains("global_store_dwordx2"), "{asm}");
}

/// The whole-k-tile unswitch (operands loaded without zeroing selects) is
/// NVIDIA's only: on AMD it duplicated the k step and cost gfx942's
/// gemm_f16 13 VGPRs and an occupancy step (92 -> 105, 5 -> 4 waves per
/// SIMD; bench/results.md), with no AMD GPU to show it paid. So an AMD
/// matrix example issues one copy of its step: 8 MFMAs for gemm_f16's
/// 2x2 fragments over two 16-deep sub-steps. Its tiles hold zeros past K
/// instead (no select per operand element): 72 VGPRs, 6 waves per SIMD.
#[test]
fn amd_keeps_one_copy_of_the_matrix_step() {
    let src = std::fs::read_to_string(example("gemm_f16")).unwrap();
    let (dis, asm) = amd_code("gemm_f16.toml", &src, "gfx942");
    assert_eq!(dis.matches("v_mfma_f32_16x16x16_f16").count(), 8, "{dis}");
    assert!(asm.contains("; Occupancy: 6"), "{asm}");
    let art = rocmc::compile(
        "gemm_f16.toml",
        &src,
        &Options::new("gfx942"),
        rocmc::Emit::default(),
    )
    .unwrap();
    let loops = &art.loops;
    // The copies zero what lies past the tensor ...
    let copies: Vec<&str> = loops
        .lines()
        .filter(|l| l.trim_start().starts_with("AS[") || l.trim_start().starts_with("BS["))
        .collect();
    assert_eq!(copies.len(), 2, "{loops}");
    assert!(copies.iter().all(|l| l.contains("select(")), "{loops}");
    // ... so the operands are read from the tiles as they are.
    let frags: Vec<&str> = loops
        .lines()
        .filter(|l| l.contains(" = AS[") || l.contains(" = BS["))
        .collect();
    assert_eq!(frags.len(), 8, "{loops}");
    assert!(frags.iter().all(|l| !l.contains("select(")), "{loops}");
}
