//! `cache_read(..., tma=1)`: the warpgroup GEMM's tiles filled by Hopper's
//! tensor memory accelerator. Its fills still mean what the interpreter
//! says (through sm_90a's emulated lanes, with rows, columns and k past
//! the tensors); the PTX issues `cp.async.bulk.tensor` from one thread and
//! waits on mbarriers instead of `cp.async` groups; the launch document
//! names the maps the runtime encodes; and what the accelerator cannot
//! copy is refused, naming why.

use crate::common::*;

fn emulated_sm_90a(src: &str, sizes: &[(&str, i64)]) -> Vec<rocmc::run::Comparison> {
    emulated(src, "sm_90a", sizes).unwrap()
}

/// `src` for sm_90a, its wgmma neither serialized nor fenced by ptxas.
fn sm_90a(src: &str) -> rocmc::Artifact {
    let (art, reports) = sm_90a_with_reports(src);
    assert!(reports.iter().all(|r| !r.wgmma_fences_added), "{reports:?}");
    art
}

#[test]
fn tiles_copied_by_the_accelerator_match_the_interpreter() {
    // Rows and columns past the 128 x 256 tile, two whole tiles of k and
    // a partial one (the warp instruction's, after the loop).
    let cmp = emulated_sm_90a(
        &variant("gemm_f16_wgmma__tma"),
        &[("M", 70), ("N", 260), ("K", 136)],
    );
    assert!(cmp.iter().all(|c| c.ok()), "{cmp:?}");
    // B stored [K, N]: four boxes of 64 columns a tile, one per block.
    let cmp = emulated_sm_90a(
        &variant("gemm_f16_wgmma_nn__tma"),
        &[("M", 66), ("N", 264), ("K", 80)],
    );
    assert!(cmp.iter().all(|c| c.ok()), "{cmp:?}");
}

#[test]
fn one_thread_issues_the_copies_and_every_thread_waits_on_the_buffers_mbarrier() {
    let art = sm_90a(&variant("gemm_f16_wgmma__tma"));
    for want in [
        "lds AS: f16[32768], ko_bars: i64[4], BS: f16[65536]",
        "mbarrier ko_bars[0]: init",
        // A's 128 x 64 and B's 256 x 64 halves: 49,152 bytes a stage.
        "mbarrier ko_bars[(ko + 2) % 4]: arrive expecting 49152 bytes",
        "AS[((ko + 2) % 4) * 8192..] = TMA 1 box(es) [128 x 64] of A from [io * 128, (ko + 2) * 64], completing ko_bars[(ko + 2) % 4]:",
        "BS[((ko + 2) % 4) * 16384..] = TMA 1 box(es) [256 x 64] of B from [jo * 256, (ko + 2) * 64], completing ko_bars[(ko + 2) % 4]:",
        "mbarrier ko_bars[ko % 4]: wait for phase parity (ko / 4) % 2",
        "mbarrier ko_bars[3]: invalidate",
    ] {
        assert!(art.loops.contains(want), "no `{want}` in:\n{}", art.loops);
    }
    let ptx = art.asm.as_deref().unwrap();
    // Two tiles ahead before the loop, one a trip: three issues of two.
    let copies = ptx
        .matches("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes")
        .count();
    assert_eq!(copies, 6, "{ptx}");
    for want in [
        "mbarrier.init.shared::cta.b64",
        "fence.mbarrier_init.release.cluster;",
        "mbarrier.arrive.expect_tx.shared::cta.b64 _,",
        "mbarrier.try_wait.parity.shared::cta.b64",
        "mbarrier.inval.shared::cta.b64",
        // The maps' address: the hidden argument after M, N and K.
        ".param .u64 .ptr .global .align 64 gemm_f16_wgmma__tma_param_6",
    ] {
        assert!(ptx.contains(want), "no `{want}`");
    }
    assert!(!ptx.contains("cp.async.cg"), "a thread's own copy is left");
    let maps: Vec<(usize, Vec<u32>)> = art.launch.kernels[0]
        .tensor_maps
        .iter()
        .map(|m| (m.arg, m.boxed.clone()))
        .collect();
    assert_eq!(maps, [(0, vec![128, 64]), (1, vec![256, 64])]);
    // B stored [K, N]: its 64 x 256 tile is four boxes of 64 x 64.
    let nn = sm_90a(&variant("gemm_f16_wgmma_nn__tma"));
    assert!(
        nn.loops
            .contains("= TMA 4 box(es) [64 x 64] of B from [(ko + 2) * 64, jo * 256]"),
        "{}",
        nn.loops
    );
    assert_eq!(nn.launch.kernels[0].tensor_maps[1].boxed, [64, 64]);
}

#[test]
fn what_the_accelerator_cannot_copy_is_refused_naming_why() {
    let src = variant("gemm_f16_wgmma__tma");
    // Rows of K f16 are a multiple of 16 bytes only if K is of 8.
    let open = src.replace("divisible = { K = 8 }\n", "");
    let e = refusal(&open, "sm_90a");
    assert!(
        e.contains("the rows of `A` to be a multiple of 16 bytes long")
            && e.contains("`divisible = { NAME = 8 }`"),
        "{e}"
    );
    // The accelerator fills swizzled, multi-buffered tiles.
    let unswizzled = src.replace("stages=4, swizzle=128, tma=1", "stages=4, tma=1");
    let e = refusal(&unswizzled, "sm_90a");
    assert!(
        e.contains("it needs `swizzle=128` (or 64, 32) and `stages=N`"),
        "{e}"
    );
    // One pipeline per loop: all of its tiles or none.
    let mixed = src.replacen("swizzle=128, tma=1", "swizzle=128", 1);
    let e = refusal(&mixed, "sm_90a");
    assert!(
        e.contains("`BS` is copied with `tma=1` but `AS`, staged at the same loop, is not"),
        "{e}"
    );
    // Only operand tiles of a matrix product: elsewhere the accelerator's
    // zeros past the tensor would differ from the clamped copy.
    let plain = "[kernel]\nname = \"t\"\nsizes = [\"M\", \"K\"]\ndivisible = { K = 8 }\n\n[inputs]\nA = { dtype = \"f16\", shape = [\"M\", \"K\"] }\n\n[[stage]]\ncompute = \"S[i] = sum(f32(A[i, k]), k)\"\nshape = [\"M\"]\nreduce = { k = \"K\" }\nschedule = [\"io, ii = split(i, 64)\", \"bind(io, blockIdx.x)\", \"bind(ii, threadIdx.x)\", \"ko, kk = split(k, 64)\", \"AS = cache_read(A, shared, ko, stages=2, swizzle=128, tma=1)\"]\n";
    let e = refusal(plain, "sm_90a");
    assert!(
        e.contains("stages operand tiles of a matrix product"),
        "{e}"
    );
    // Targets without the accelerator, or whose PTX cannot reach it.
    let e = refusal(&mma_sync_tma(), "sm_80");
    assert!(
        e.contains("with the tensor memory accelerator, which sm_80 does not have"),
        "{e}"
    );
    let e = refusal(&mma_sync_tma(), "sm_90");
    assert!(
        e.contains("which rocmc's sm_90 code (PTX 7.8) cannot use: it needs PTX 8.0"),
        "{e}"
    );
    let e = refusal("[kernel]\nname = \"t\"\nsizes = [\"N\"]\n\n[inputs]\nA = { dtype = \"f16\", shape = [\"N\"] }\n\n[[stage]]\ncompute = \"B[i] = A[i]\"\nshape = [\"N\"]\nschedule = [\"io, ii = split(i, 64)\", \"AS = cache_read(A, shared, io, stages=2, swizzle=128, tma=2)\"]\n", "sm_90a");
    assert!(e.contains("tma must be 0 or 1"), "{e}");
}

/// examples/gemm_f16_mma.toml (`mma.sync`) with its tiles swizzled and
/// copied by the accelerator.
fn mma_sync_tma() -> String {
    std::fs::read_to_string(example("gemm_f16_mma"))
        .unwrap()
        .replace(
            "pad=8, vec=8, stages=4)",
            "vec=8, stages=4, swizzle=128, tma=1)",
        )
        .replace(
            "max = { M = 16384, N = 16384, K = 16384 }",
            "max = { M = 16384, N = 16384, K = 16384 }\ndivisible = { K = 8, N = 8 }",
        )
}

/// With no schedule, rule `matmul-wgmma` takes the accelerator for B
/// stored [K, N] where both operands' rows are declared multiples of 16
/// bytes, and keeps `cp.async` otherwise.
#[test]
fn the_rule_copies_k_by_n_operands_with_the_accelerator_where_rows_allow() {
    let src = variant("gemm_f16_wgmma_nn__tma");
    let at = src.find("schedule = [").unwrap();
    let bare = format!("{}\n", &src[..at]);
    let steps = |src: &str| {
        let art = rocmc::compile(
            "k.toml",
            src,
            &rocmc::Options::new("sm_90a"),
            rocmc::Emit::default(),
        )
        .unwrap();
        let d = art.kernel.stages[0].default.clone().unwrap();
        assert_eq!(d.rule, "matmul-wgmma");
        d.steps.join("\n")
    };
    assert!(
        steps(&bare).contains("swizzle=128, tma=1)"),
        "{}",
        steps(&bare)
    );
    let open = bare.replace("divisible = { K = 8, N = 8 }\n", "");
    assert!(!steps(&open).contains("tma=1"), "{}", steps(&open));
    // k-contiguous B keeps cp.async, which measured faster there.
    let nt = variant("gemm_f16_wgmma__tma");
    let at = nt.find("schedule = [").unwrap();
    assert!(!steps(&nt[..at]).contains("tma=1"));
    let cmp = emulated_sm_90a(&bare, &[("M", 65), ("N", 72), ("K", 80)]);
    assert!(cmp.iter().all(|c| c.ok()), "{cmp:?}");
}

/// A tile whose first column is not a multiple of 16 bytes: the
/// accelerator faulted on one (h100-tma-2), so it is refused.
#[test]
fn a_tile_starting_off_sixteen_bytes_is_refused() {
    let src = variant("gemm_f16_wgmma__tma")
        .replace(
            "C[i, j] = sum(f32(A[i, k])",
            "C[i, j] = sum(f32(A[i, k + 3])",
        )
        .replace("shape = [\"M\", \"K\"] }", "shape = [\"M\", \"K + 8\"] }");
    let e = refusal(&src, "sm_90a");
    assert!(
        e.contains("the tiles of `A` start at columns not known to be multiples of 8 element(s)"),
        "{e}"
    );
}

/// The accelerator's tiles hold zeros past K, so a partial tile of k runs
/// on the warpgroup instruction with the others: no warp-instruction tail
/// (and its registers) for 16-bit types, and 8-bit floats, which have no
/// such instruction, take any K whose rows are 16 bytes.
#[test]
fn partial_tiles_of_k_run_on_the_warpgroup_instruction() {
    let f16 = sm_90a(&variant("gemm_f16_wgmma__tma"));
    let ptx = f16.asm.as_deref().unwrap();
    assert!(!ptx.contains("mma.sync"), "a tail instruction is left");
    assert!(!f16.loops.contains("C_tail"), "{}", f16.loops);
    let reports = assemble_ptx(ptx, "sm_90a").unwrap();
    assert!(reports.iter().all(|r| r.spill_stores == 0), "{reports:?}");
    let fp8 = variant("gemm_fp8_wgmma__tma");
    assert!(fp8.contains("divisible = { K = 16 }"));
    // 144 = one 128-deep tile and 16 of the next.
    let cmp = emulated_sm_90a(&fp8, &[("M", 65), ("N", 70), ("K", 144)]);
    assert!(cmp.iter().all(|c| c.ok()), "{cmp:?}");
    assert!(!sm_90a(&fp8).asm.unwrap().contains("mma.sync"));
}
