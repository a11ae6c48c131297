//! Hopper's warpgroup MMA (`wgmma`, sm_90a): the GEMM whose operands are
//! read from LDS through descriptors means what the interpreter says
//! through the emulated layouts, with whole and partial tiles of k; the
//! rule takes it for an unscheduled product of k-contiguous operands; and
//! what cannot run on it is refused, naming why.

use crate::common::*;

fn wgmma_src() -> String {
    std::fs::read_to_string(example("gemm_f16_wgmma")).unwrap()
}

/// `src` compiled for sm_90a with its PTX, which ptxas assembles with no
/// wgmma serialized.
fn sm_90a(src: &str) -> rocmc::Artifact {
    sm_90a_with_reports(src).0
}

#[test]
fn whole_and_partial_tiles_of_k_match_the_interpreter() {
    // 200 = three whole 64-wide tiles (wgmma through descriptors) and a
    // partial one (mma.sync on zeroed fragments); 70 x 260 leaves rows and
    // columns of the 128 x 256 tile outside the tensors.
    for sizes in [
        [("M", 70), ("N", 260), ("K", 200)],
        [("M", 64), ("N", 256), ("K", 128)],
    ] {
        let cmp = emulated(&wgmma_src(), "sm_90a", &sizes).unwrap();
        assert!(cmp.iter().all(|c| c.ok()), "{sizes:?}: {cmp:?}");
    }
}

/// B stored [K, N] (torch.matmul's layout): staged in 128-byte column
/// blocks and read transposed.
#[test]
fn a_b_stored_k_by_n_is_read_transposed() {
    let src = variant("gemm_f16_wgmma_nn");
    let cmp = emulated(&src, "sm_90a", &[("M", 66), ("N", 257), ("K", 80)]).unwrap();
    assert!(cmp.iter().all(|c| c.ok()), "{cmp:?}");
    let art = sm_90a(&src);
    assert!(
        art.loops.contains("C_b_desc[0] = descriptor of BS at [((ko % 4) * 16384) + ((km * 16) * 64)] (128-byte swizzle, transposed, blocks 8192 bytes apart):"),
        "{}",
        art.loops
    );
    let ptx = art.asm.unwrap();
    // imm-trans-a 0, imm-trans-b 1; the leading offset 8192 >> 4 = 512.
    assert!(ptx.contains("p, 1, 1, 0, 1;"), "{ptx}");
    let desc = (512u64 << 16) | (64u64 << 32) | (1u64 << 62);
    assert!(
        ptx.contains(&desc.to_string()),
        "no transposed descriptor constant"
    );
}

#[test]
fn the_loops_show_descriptors_fences_and_the_one_group_in_flight() {
    let art = sm_90a(&wgmma_src());
    let loops = &art.loops;
    for want in [
        "C_a_desc[0] = descriptor of AS at [(((ko % 4) * 8192) + ((wi * 64) * 64)) + (km * 16)] (128-byte swizzle):",
        "C_b_desc[0] = descriptor of BS at [((ko % 4) * 16384) + (km * 16)] (128-byte swizzle):",
        "fence before matrix instructions",
        "wait for matrix instructions (1 groups may stay pending)",
        // Four buffers, copies two tiles ahead: the one being overwritten
        // was read two iterations before, and waited for.
        "if ko + 2 < ceil(K / 64):",
        "xor(",
    ] {
        assert!(loops.contains(want), "no `{want}` in:\n{loops}");
    }
    let ptx = art.asm.as_deref().unwrap();
    assert!(ptx.contains(".target sm_90a"), "{ptx}");
    // Each buffer of the swizzled tiles starts on 1024 bytes.
    assert!(ptx.contains(".extern .shared .align 1024"), "{ptx}");
}

#[test]
fn an_unscheduled_product_of_k_contiguous_operands_takes_wgmma_on_sm_90a() {
    let src = wgmma_src();
    let bare: String = src
        .lines()
        .scan(false, |inside, l| {
            let t = l.trim_start();
            let skip = *inside || t.starts_with("schedule");
            *inside = (*inside || t.starts_with("schedule")) && !t.starts_with(']');
            Some(if skip {
                String::new()
            } else {
                format!("{l}\n")
            })
        })
        .collect();
    assert!(!bare.contains("mma("), "{bare}");
    let rule = |src: &str, mcpu: &str| {
        let art = rocmc::compile(
            "k.toml",
            src,
            &rocmc::Options::new(mcpu),
            rocmc::Emit::default(),
        )
        .unwrap_or_else(|e| panic!("{mcpu}: {e}"));
        let d = art.kernel.stages[0].default.clone().unwrap();
        (d.rule.to_string(), d.steps.join("\n"))
    };
    let (r, steps) = rule(&bare, "sm_90a");
    assert_eq!(r, "matmul-wgmma", "{steps}");
    assert!(
        steps.contains("swizzle=128") && steps.contains("wgmma_m64n256k16_f16"),
        "{steps}"
    );
    // sm_90 (no `a`) has no wgmma. B stored [K, N] is read transposed
    // (16-bit types only): int8 keeps mma.sync there.
    assert_eq!(rule(&bare, "sm_90").0, "matmul-mma");
    let kn = bare
        .replace("shape = [\"N\", \"K\"]", "shape = [\"K\", \"N\"]")
        .replace("B[j, k]", "B[k, j]");
    assert_eq!(rule(&kn, "sm_90a").0, "matmul-wgmma");
    let kn_i8 = kn
        .replace("dtype = \"f16\"", "dtype = \"i8\"")
        .replace("f32(A[i, k]) * f32(B[k, j])", "i32(A[i, k]) * i32(B[k, j])");
    assert_eq!(rule(&kn_i8, "sm_90a").0, "matmul-mma");
    // The rule's kernel means what the interpreter says.
    let cmp = emulated(&bare, "sm_90a", &[("M", 65), ("N", 33), ("K", 130)]).unwrap();
    assert!(cmp.iter().all(|c| c.ok()), "{cmp:?}");
}

/// 8-bit floats: no warp instruction runs a partial tile of k in the PTX
/// rocmc writes for sm_90a, so whole tiles are required by a `divisible`
/// fact; with one, the kernel means what the interpreter says.
#[test]
fn eight_bit_float_products_need_whole_tiles_of_k() {
    let src = variant("gemm_fp8_wgmma");
    let cmp = emulated(&src, "sm_90a", &[("M", 65), ("N", 70), ("K", 256)]).unwrap();
    assert!(cmp.iter().all(|c| c.ok()), "{cmp:?}");
    let ptx = sm_90a(&src).asm.unwrap();
    assert!(
        ptx.contains("wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3"),
        "{ptx}"
    );
    assert!(!ptx.contains("mma.sync"), "a whole-tile kernel has no tail");
    let open = src.replace("divisible = { K = 128 }\n", "");
    let e = refusal(&open, "sm_90a");
    assert!(
        e.contains("partial tiles of k") && e.contains("divisible = { K = 128 }"),
        "{e}"
    );
}

/// int8 takes 128-wide tiles (128 bytes) and its k tail runs
/// mma.sync m16n8k32.
#[test]
fn int8_products_match_the_interpreter_with_a_k_tail() {
    let src = variant("gemm_i8_wgmma");
    let cmp = emulated(&src, "sm_90a", &[("M", 3), ("N", 70), ("K", 300)]).unwrap();
    assert!(cmp.iter().all(|c| c.ok()), "{cmp:?}");
}

#[test]
fn what_wgmma_cannot_read_is_refused_naming_why() {
    let src = wgmma_src();
    // sm_90 lacks the instruction (architecture-specific, sm_90a only).
    let e = refusal(&src, "sm_90");
    assert!(
        e.contains("has no matrix instruction `wgmma_m64n256k16_f16`"),
        "{e}"
    );
    // An operand staged without the swizzled layout has no descriptor.
    let plain = src.replace(
        "BS = cache_read(B, shared, ko, vec=8, stages=4, swizzle=128)",
        "BS = cache_read(B, shared, ko, vec=8, stages=4)",
    );
    let e = refusal(&plain, "sm_90a");
    assert!(e.contains("`BS` is not laid out with `swizzle=128`"), "{e}");
    // Not staged at all: the fragment reads memory, not LDS.
    let unstaged = src.replace(
        "  \"BS = cache_read(B, shared, ko, vec=8, stages=4, swizzle=128)\",\n",
        "",
    );
    let e = refusal(&unstaged, "sm_90a");
    assert!(e.contains("is not read from LDS as it is"), "{e}");
    // int8 B stored [K, N]: wgmma transposes 16-bit operands only.
    let kn = variant("gemm_i8_wgmma")
        .replace("shape = [\"N\", \"K\"]", "shape = [\"K\", \"N\"]")
        .replace("B[j, k]", "B[k, j]");
    let e = refusal(&kn, "sm_90a");
    assert!(
        e.contains("is not the element the instruction reads there"),
        "{e}"
    );
    // The swizzled rows are 128 bytes: a 32-wide f16 tile is refused.
    let narrow = src.replace("split(k, 64)", "split(k, 32)");
    let e = refusal(&narrow, "sm_90a");
    assert!(
        e.contains("its rows are 32 elements of f16 (64 bytes), not a multiple of 128 bytes"),
        "{e}"
    );
    // No padding with a swizzle.
    let padded = src.replace(
        "vec=8, stages=4, swizzle=128)\",\n  \"BS",
        "pad=8, vec=8, stages=4, swizzle=128)\",\n  \"BS",
    );
    let e = refusal(&padded, "sm_90a");
    assert!(e.contains("without `pad`"), "{e}");
}

/// A stored [K, M] (a weight gradient's Xᵀ): staged in 128-byte column
/// blocks and read transposed (`imm-trans-a`), with or without a schedule.
#[test]
fn a_stored_k_by_m_is_read_transposed() {
    let src = variant("gemm_f16_wgmma_tn");
    let cmp = emulated(&src, "sm_90a", &[("M", 70), ("N", 100), ("K", 80)]).unwrap();
    assert!(cmp.iter().all(|c| c.ok()), "{cmp:?}");
    let art = sm_90a(&src);
    assert!(
        art.loops
            .contains("(128-byte swizzle, transposed, blocks 8192 bytes apart):"),
        "{}",
        art.loops
    );
    // imm-trans-a 1, imm-trans-b 0.
    let ptx = art.asm.unwrap();
    assert!(ptx.contains("p, 1, 1, 1, 0;"), "{ptx}");
    let at = src.find("schedule = [").unwrap();
    let bare = &src[..at];
    let art = rocmc::compile(
        "k.toml",
        bare,
        &rocmc::Options::new("sm_90a"),
        rocmc::Emit::default(),
    )
    .unwrap();
    assert_eq!(
        art.kernel.stages[0].default.as_ref().unwrap().rule,
        "matmul-wgmma"
    );
}

/// `swizzle=64` and `swizzle=32`: 32- and 16-deep k tiles in the narrower
/// swizzles, their descriptors of layout type 2 and 3 (512 and 256 bytes
/// between groups of 8 rows), filled by `cp.async` or the accelerator
/// (whose maps carry the swizzle); transposed operands stay at 128.
#[test]
fn narrower_swizzles_are_read_through_their_own_descriptors() {
    let sw64 = variant("gemm_f16_wgmma__sw64");
    let cmp = emulated(&sw64, "sm_90a", &[("M", 70), ("N", 260), ("K", 72)]).unwrap();
    assert!(cmp.iter().all(|c| c.ok()), "{cmp:?}");
    let art = sm_90a(&sw64);
    assert!(art.loops.contains("(64-byte swizzle):"), "{}", art.loops);
    // PTX writes the 64-bit constant signed (bit 63 is the layout's).
    let desc =
        |stride: u64, layout: u64| ((1u64 << 16) | ((stride >> 4) << 32) | (layout << 62)) as i64;
    let ptx = art.asm.unwrap();
    assert!(
        ptx.contains(&desc(512, 2).to_string()),
        "no 64-byte descriptor"
    );
    let sw32 = variant("gemm_f16_wgmma__sw32tma");
    let cmp = emulated(&sw32, "sm_90a", &[("M", 3), ("N", 70), ("K", 40)]).unwrap();
    assert!(cmp.iter().all(|c| c.ok()), "{cmp:?}");
    let art = sm_90a(&sw32);
    assert!(
        art.asm.unwrap().contains(&desc(256, 3).to_string()),
        "no 32-byte descriptor"
    );
    let maps = &art.launch.kernels[0].tensor_maps;
    assert_eq!(
        (maps[0].boxed.as_slice(), maps[0].swizzle),
        (&[128, 16][..], 32)
    );
    // B stored [K, N] is read transposed in 128-byte rows only.
    let nn = variant("gemm_f16_wgmma_nn")
        .replace("split(k, 64)", "split(k, 32)")
        .replace("stages=4, swizzle=128)", "stages=4, swizzle=64)");
    let e = refusal(&nn, "sm_90a");
    assert!(
        e.contains("a transposed operand is read in 128-byte swizzled rows only"),
        "{e}"
    );
    let e = refusal(&wgmma_src().replace("swizzle=128", "swizzle=96"), "sm_90a");
    assert!(e.contains("swizzle must be 128, 64 or 32"), "{e}");
}
