//! `cache_read(..., vec=W, prefetch=1)`: LDS tiles filled W elements at a
//! time (one aligned vector access where the lanes lie inside the tensor,
//! clamped lanes elsewhere) and software-pipelined through registers. The
//! compiled kernels match the reference interpreter on the CPU at sizes
//! that take the vector path (rows a multiple of W) and sizes that take the
//! clamped one; the GPU code issues vector accesses (llvm-objdump-22,
//! ptxas); impossible options are refused naming the step and the value.
//! `transpose=1` tiles (the last two dimensions swapped in LDS) mean the
//! same as the plain ones.

use crate::common::{amd_code, assemble_ptx, example};
use rocmc::Options;
use std::collections::HashMap;

fn with_options(name: &str, options: &str) -> String {
    let src = std::fs::read_to_string(example(name)).unwrap();
    // Without the example's register budget: these tests check for no spills.
    let out = src
        .replace("\n  \"occupancy(blocks=2)\",", "")
        .replace(
            ", pad=8, vec=8, stages=4)\"",
            &format!(", pad=8{options})\""),
        )
        .replace(", pad=8, prefetch=1)\"", &format!(", pad=8{options})\""))
        .replace(", pad=8)\"", &format!(", pad=8{options})\""))
        .replace(", pad=1)\"", &format!(", pad=4{options})\""))
        .replace(
            "\"BS = cache_read(B, shared, ko)\"",
            &format!("\"BS = cache_read(B, shared, ko, pad=4{options})\""),
        );
    assert_ne!(out, src, "{name}: no cache_read to change");
    out
}

/// Runs `src` compiled for this CPU (with `processor`'s matrix instructions
/// where it has `mma`) and returns the worst error against the interpreter.
fn run(src: &str, processor: Option<&str>, sizes: &[(&str, i64)]) -> f64 {
    let front = rocmc::frontend("k.toml", src).unwrap_or_else(|e| panic!("{e}"));
    let mut o = Options::new("x86-64");
    o.emulate = processor.map(str::to_string);
    o.fp_contract = false;
    let cpu = rocmc::targets(&Options::new("x86-64")).unwrap().remove(0);
    let front = front.for_target(&cpu, &o).unwrap_or_else(|e| panic!("{e}"));
    let given: HashMap<String, i64> = sizes.iter().map(|(n, v)| (n.to_string(), *v)).collect();
    let sizes = rocmc::run::size_values(&front.kernel, &given).unwrap();
    let report = rocmc::run::run_cpu(&front, &sizes, &HashMap::new(), 7, false)
        .unwrap_or_else(|e| panic!("{e}"));
    for c in &report {
        assert!(
            c.ok(),
            "{sizes:?}: {} differs from the interpreter: max error {}",
            c.tensor,
            c.max_error
        );
    }
    report.iter().map(|c| c.max_error).fold(0.0, f64::max)
}

// Sizes whose rows are multiples of every vector width (the vector path),
// odd ones (the clamped path, and tiles cut by the edges), and a single
// element.
const SIZES: &[[i64; 3]] = &[[128, 136, 64], [77, 45, 50], [129, 131, 37], [1, 1, 1]];

#[test]
fn vector_and_prefetched_fills_match_the_interpreter() {
    let cases: &[(&str, &str, Option<&str>)] = &[
        ("matmul_lds", ", vec=4", None),
        ("matmul_lds", ", vec=2, prefetch=1", None),
        ("matmul_lds", ", prefetch=1", None),
        ("gemm_f16_mma", ", vec=8", Some("sm_90")),
        ("gemm_f16_mma", ", vec=8, prefetch=1", Some("sm_90")),
        ("gemm_f16", ", vec=8, prefetch=1", Some("gfx942")),
        ("gemm_f16", ", vec=4, prefetch=1", Some("gfx1100")),
        ("matmul_lds", ", vec=4, stages=3", None),
        ("gemm_f16_mma", ", vec=8, stages=2", Some("sm_90")),
        ("gemm_f16_mma", ", vec=4, stages=4", Some("sm_90")),
        ("gemm_f16", ", vec=8, stages=2", Some("gfx942")),
        // Tiles kept transposed in LDS: written element by element (from
        // the vector load's registers), read along the other dimension.
        ("matmul_lds", ", transpose=1", None),
        ("matmul_lds", ", vec=4, transpose=1", None),
        ("matmul_lds", ", vec=2, prefetch=1, transpose=1", None),
        ("gemm_f16_mma", ", vec=8, transpose=1", Some("sm_90")),
        (
            "gemm_f16",
            ", vec=8, prefetch=1, transpose=1",
            Some("gfx942"),
        ),
        (
            "gemm_f16",
            ", vec=4, prefetch=1, transpose=1",
            Some("gfx1100"),
        ),
    ];
    for (name, options, processor) in cases {
        let src = with_options(name, options);
        for [m, n, k] in SIZES {
            let err = run(&src, *processor, &[("M", *m), ("N", *n), ("K", *k)]);
            assert!(err.is_finite(), "{name}{options}");
        }
    }
}

/// gemm_f16 with `options` for gfx942: the code object as llvm-objdump-22
/// disassembles it, and the assembly rocmc wrote.
fn gfx942_gemm_f16(options: &str) -> (String, String) {
    amd_code(
        "gemm_f16.toml",
        &with_options("gemm_f16", options),
        "gfx942",
    )
}

#[test]
fn gpu_code_issues_vector_fills() {
    let (dis, asm) = gfx942_gemm_f16(", vec=8, prefetch=1");
    // A and B: one 16-byte load each before the k loop and one ahead of
    // each step; LDS filled with 16-byte stores only.
    assert_eq!(dis.matches("global_load_dwordx4").count(), 4, "{dis}");
    assert!(dis.contains("ds_write_b128"), "no 16-byte LDS stores");
    assert!(!dis.contains("ds_write_b16"), "2-byte LDS stores left");
    assert!(asm.contains("; ScratchSize: 0"));

    // The example's 64x64 warp tiles leave no registers for a prefetched
    // 64-deep tile: 64x32 warps and 32-deep tiles, as before stages.
    let src = with_options("gemm_f16_mma", ", vec=8, prefetch=1")
        .replace("tile(i, j, 128, 256)", "tile(i, j, 128, 128)")
        .replace("tile(ii, ji, 64, 64)", "tile(ii, ji, 64, 32)")
        .replace("split(k, 64)", "split(k, 32)");
    let emit = rocmc::Emit {
        asm: true,
        ..Default::default()
    };
    let ptx = rocmc::compile("gemm_f16_mma.toml", &src, &Options::new("sm_90"), emit)
        .unwrap()
        .asm
        .unwrap();
    assert!(
        ptx.contains("ld.global.nc.v4.b32"),
        "no 16-byte global loads"
    );
    assert!(ptx.contains("st.shared.v4.b32"), "no 16-byte shared stores");
    let reports = assemble_ptx(&ptx, "sm_90").unwrap();
    assert!(reports.iter().all(|r| r.spill_stores == 0), "spills");
}

/// `stages=2` on sm_90, the example's 128x256 blocks of 2x4 warps: A and B
/// tiles copied by `cp.async` (16 bytes, one commit per k step and one per
/// prologue stage, one wait; a thread's 12 copies of a step (4 of A, 8 of
/// B) run as one straight-line
/// group when all are inside and aligned, each checking its own lanes
/// otherwise), fragments read by `ldmatrix` (A: 4 k steps x 4 row
/// fragments, x4; B: 4 x 8 column fragments, x2 transposed) on the
/// whole-tile path, per element on the k tail; ptxas accepts it without
/// spills. Where the whole warp's copies of a step are inside and aligned
/// and the tile is whole (one vote), the loop body runs as one
/// straight-line block with the copies spread among the matrix
/// instructions. The tiles (102 KiB) are dynamic shared memory. On sm_75
/// (no cp.async) the same kernel copies synchronously and still uses
/// ldmatrix; on gfx942 neither exists and the fills are vector loads and
/// LDS stores.
#[test]
fn staged_copies_are_asynchronous_and_fragments_use_ldmatrix() {
    let src = with_options("gemm_f16_mma", ", vec=8, stages=2");
    let ptx = |cpu: &str| {
        let emit = rocmc::Emit {
            asm: true,
            ..Default::default()
        };
        rocmc::compile("gemm_f16_mma.toml", &src, &Options::new(cpu), emit)
            .unwrap()
            .asm
            .unwrap()
    };
    let p = ptx("sm_90");
    let count = |p: &str, s: &str| p.matches(s).count();
    // 12 copies per step: in the prologue on the straight-line path and on
    // the checked one; in the loop on the straight-line body and on both
    // paths of the general one.
    assert_eq!(count(&p, "cp.async.cg.shared.global"), 60, "{p}");
    // Branch-free runs: (cp.async, mma.sync, whether an mma.sync comes
    // before the run's last cp.async).
    let mut runs = vec![(0, 0, false)];
    for l in p.lines() {
        let r = runs.last_mut().unwrap();
        if l.contains("cp.async.cg.shared.global") {
            r.2 |= r.1 > 0;
            r.0 += 1;
        } else if l.contains("mma.sync.aligned") {
            r.1 += 1;
        } else if l.contains("bra") || l.starts_with('$') {
            runs.push((0, 0, false));
        }
    }
    assert_eq!(
        runs.iter().map(|r| r.0).max(),
        Some(12),
        "a step's copies are not one branch-free group"
    );
    assert!(
        runs.contains(&(12, 128, true)),
        "no straight-line step with its copies among its 128 mma.sync: {runs:?}"
    );
    assert_eq!(count(&p, "vote.sync.all.pred"), 1, "{p}");
    assert!(p.contains(".extern .shared .align 16 .b8 gemm_f16_mma_dynamic_shared[]"));
    assert!(p.contains("\"dynamic_shared\":104448"), "launch document");
    // One commit after the prologue's copy, one per step (LLVM may duplicate it into branches).
    assert!(count(&p, "cp.async.commit_group") >= 2, "{p}");
    let waits: Vec<&str> = p
        .lines()
        .filter(|l| l.contains("cp.async.wait_group"))
        .collect();
    assert_eq!(waits.len(), 1, "{waits:?}");
    assert!(waits[0].trim_end().ends_with("0;"), "{waits:?}");
    // The whole-tile compute twice: in the straight-line body and in the
    // general one.
    assert_eq!(count(&p, "ldmatrix.sync.aligned.m8n8.x4.shared.b16"), 32);
    assert_eq!(
        count(&p, "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16"),
        64
    );
    assert!(
        !p.contains("ld.global.nc.v4"),
        "tiles copied through registers"
    );
    let reports = assemble_ptx(&p, "sm_90").unwrap();
    assert!(reports.iter().all(|r| r.spill_stores == 0), "spills");

    let (dis, asm) = gfx942_gemm_f16(", vec=8, stages=2");
    assert!(dis.contains("global_load_dwordx4"), "{dis}");
    assert!(dis.contains("ds_write_b128"), "no 16-byte LDS stores");
    assert!(asm.contains("; ScratchSize: 0"));
}

fn refusal(src: &str) -> String {
    match rocmc::compile(
        "k.toml",
        src,
        &Options::new("gfx942"),
        rocmc::Emit::default(),
    ) {
        Ok(_) => panic!("accepted:\n{src}"),
        Err(e) => e.to_string(),
    }
}

/// A register tile copies `vec` elements at once too: one 16-byte load
/// where the four lie in the tensor, clamped lanes where K ends mid-vector.
#[test]
fn a_register_tile_copies_whole_vectors() {
    let lds = std::fs::read_to_string(example("matmul_lds")).unwrap();
    let src = lds.replace(
        "\"AS = cache_read(A, shared, ko, pad=1)\"",
        "\"AS = cache_read(A, local, ko, vec=4)\"",
    );
    let emit = rocmc::Emit {
        asm: true,
        ..rocmc::Emit::default()
    };
    let art = rocmc::compile("k.toml", &src, &Options::new("gfx942"), emit).unwrap();
    assert!(art.loops.contains("AS: f32[64]"), "{}", art.loops);
    assert!(art.asm.unwrap().contains("global_load_dwordx4"));
    let front = rocmc::frontend("k.toml", &src).unwrap();
    for k in [37, 64] {
        let sizes = front.kernel.fit_sizes(&[70, 66, k]);
        let cmp = rocmc::run::run_cpu(&front, &sizes, &Default::default(), 3, false).unwrap();
        assert!(cmp.iter().all(|c| c.ok()), "K={k}: {cmp:?}");
    }
}

#[test]
fn impossible_fills_are_refused_naming_the_value() {
    let lds = std::fs::read_to_string(example("matmul_lds")).unwrap();
    let step = "\"AS = cache_read(A, shared, ko, pad=1)\"";
    let with = |s: &str| lds.replace(step, &format!("\"{s}\""));
    let cases = [
        (
            "AS = cache_read(A, shared, ko, vec=3)",
            "vec must be 1, 2, 4, 8 or 16",
        ),
        (
            "AS = cache_read(A, shared, ko, vec=8)",
            "vec=8 of f32 is 32 bytes",
        ),
        (
            "AS = cache_read(A, shared, ko, pad=1, vec=4)",
            "not a multiple of vec=4",
        ),
        ("AS = cache_read(A, shared, ko, vec=32)", "vec must be"),
        (
            "AS = cache_read(A, shared, ko, transpose=2)",
            "transpose must be 0 or 1",
        ),
        (
            "AS = cache_read(A, shared, ko, transpose=1, stages=2)",
            "`transpose=1` applies to plain or `prefetch=1`",
        ),
        (
            "AS = cache_read(A, local, ko, transpose=1)",
            "`transpose=1` applies to plain or `prefetch=1`",
        ),
        (
            "AS = cache_read(A, local, ko, prefetch=1)",
            "apply to `cache_read(..., shared, ...)`",
        ),
        (
            "AS = cache_read(A, shared, io, prefetch=1)",
            "bound to a block index",
        ),
        (
            "AS = cache_read(A, shared, ko, prefetch=2)",
            "prefetch must be 0 or 1",
        ),
        (
            "AS = cache_read(A, shared, ko, vec=4, vec=4)",
            "`vec` given twice",
        ),
        (
            "AS = cache_read(A, shared, ko, bogus=1)",
            "expected `pad=N`, `vec=N`, `prefetch=1`, `stages=N`, `swizzle=128`, `tma=1`, `unroll=N`, `transpose=1` or `dtype=f16`",
        ),
        (
            "AS = cache_read(A, shared, ko, dtype=i8)",
            "`dtype=i8` would change values of `A`",
        ),
        (
            "AS = cache_read(A, shared, ko, dtype=float16)",
            "did you mean `f16`?",
        ),
        (
            "AS = cache_read(A, shared, ko, stages=9)",
            "stages must be an integer from 1 to 8",
        ),
        (
            "AS = cache_read(A, shared, ko, stages=2, prefetch=1)",
            "choose one",
        ),
        (
            "AS = cache_read(A, shared, io, stages=2)",
            "bound to a block index",
        ),
        (
            "AS = cache_read(A, local, ko, stages=2)",
            "apply to `cache_read(..., shared, ...)`",
        ),
    ];
    for (step, want) in cases {
        let e = refusal(&with(step));
        assert!(e.contains(want), "{step}: {e}");
        assert!(e.contains("k.toml:"), "{step}: no location in {e}");
    }
    // The tiles staged at one loop share one pipeline.
    let mixed = with("AS = cache_read(A, shared, ko, stages=3)").replace(
        "\"BS = cache_read(B, shared, ko)\"",
        "\"BS = cache_read(B, shared, ko, stages=2)\"",
    );
    let e = refusal(&mixed);
    assert!(
        e.contains("`BS` has stages=2 but `AS`, staged at the same loop, has stages=3"),
        "{e}"
    );
    assert!(e.contains("k.toml:32:"), "{e}");
}

/// The f16 GEMM with no schedule: on AMD its operand tiles are staged with
/// zeros past the tensor.
const DEFAULT_GEMM: &str = r#"
[kernel]
name = "gemm_f16"
sizes = ["M", "N", "K"]
max = { M = 16384, N = 16384, K = 16384 }

[inputs]
A = { dtype = "f16", shape = ["M", "K"] }
B = { dtype = "f16", shape = ["K", "N"] }

[[stage]]
compute = "C[i, j] = f16(sum(f32(A[i, k]) * f32(B[k, j]), k))"
shape = ["M", "N"]
reduce = { k = "K" }
"#;

/// On AMD a zero-filled tile copy reads whole 16-byte vectors with buffer
/// loads, whose range check gives the zeros past the tensor: the k loop
/// has one version for launches whose rows (K for A, N for B) are
/// multiples of 8 elements, with no per-lane path, and the general one.
/// The CPU runs the same versions (its range check a branch), so both
/// are checked against the interpreter through AMD lane layouts.
#[test]
fn amd_zero_filled_tiles_are_buffer_loads_in_a_whole_row_loop_version() {
    for mcpu in ["gfx942", "gfx1100"] {
        let (dis, _) = amd_code("gemm_f16.toml", DEFAULT_GEMM, mcpu);
        // Two 16-byte copies of A and two of B per k step (gfx11 names
        // the widths in bits).
        let whole =
            dis.matches("buffer_load_dwordx4").count() + dis.matches("buffer_load_b128").count();
        assert!(whole >= 4, "{mcpu}: {whole} buffer loads");
        // The general version keeps the per-lane copies.
        assert!(
            dis.contains("global_load_ushort") || dis.contains("global_load_d16_b16"),
            "{mcpu}: no lane path"
        );
    }
    // A target without a known buffer resource word keeps the old copies.
    let (dis, _) = amd_code("gemm_f16.toml", DEFAULT_GEMM, "gfx1201");
    assert!(!dis.contains("buffer_load"), "gfx1201 buffer loads");
    for p in ["gfx942", "gfx1100", "gfx1201"] {
        // Whole rows (the buffer-load version), rows of no whole vector,
        // and empty ones.
        for [m, n, k] in [[130, 72, 40], [130, 70, 37], [3, 8, 0], [0, 8, 8]] {
            run(DEFAULT_GEMM, Some(p), &[("M", m), ("N", n), ("K", k)]);
        }
    }
}

/// On AMD a group of register fills (a layernorm row's X, gamma and beta,
/// 16 bytes a lane each) and an unswitch choose their fast version once for
/// the wave (a ballot), and the branch names the general version first, so
/// that AMDGPU's structurizer lays the fast one out first. Each tensor's
/// fast loads then issue with no wait before them: the twelve 16-byte loads
/// of a lane's row are in flight together. Before, the general version
/// came first and its loads into the same registers made each fast group
/// wait for every load before it (three groups of four on gfx1100).
#[test]
fn amd_fast_versions_are_chosen_per_wave_and_issue_their_loads_together() {
    let src =
        std::fs::read_to_string(crate::common::root().join("bench/amd/rocmc/layernorm_4096.toml"))
            .unwrap();
    for mcpu in ["gfx1100", "gfx942"] {
        let (dis, asm) = amd_code("layernorm", &src, mcpu);
        let wide = if mcpu == "gfx1100" {
            "global_load_b128"
        } else {
            "global_load_dwordx4"
        };
        // Blocks (from a branch to the next) holding four of a tensor's
        // 16-byte loads: the fast versions. Whether a wait on vmcnt came
        // before the loads in the block.
        let (mut loads, mut waited, mut fast) = (0, false, Vec::new());
        for l in dis.lines() {
            if l.contains("s_cbranch") || l.contains("s_branch") {
                (loads, waited) = (0, false);
            } else if l.contains(wide) {
                loads += 1;
                if loads == 4 {
                    fast.push(waited);
                }
            } else if l.contains("s_waitcnt") && l.contains("vmcnt") && loads == 0 {
                waited = true;
            }
        }
        assert_eq!(fast.len(), 3, "{mcpu}: fast versions of X, gamma and beta");
        assert!(
            fast.iter().all(|w| !w),
            "{mcpu}: a fast version waits for earlier loads: {fast:?}"
        );
        assert!(asm.contains("ScratchSize: 0"), "{mcpu}: scratch in use");
    }
}
