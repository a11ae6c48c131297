//! The 8-bit float storage types (`f8e4m3fn`, `f8e5m2`, `f8e4m3fnuz`,
//! `f8e5m2fnuz`): compiled code converts every one of the 256 encodings of
//! each to exactly the value the format defines (the reference
//! interpreter's `F8Format::decode`), copies them bit for bit and encodes
//! constants as the interpreter rounds them; the conversion compiles for
//! AMD (llvm-objdump-22) and NVIDIA (ptxas); arithmetic on them, conversion
//! to them and parameters of them are refused with their location, and a
//! matrix step refuses operands in the other encoding than the target's.

use crate::common::{amd_code, assemble_ptx, example};
use rocmc::codegen::host::{run_on_host_with, HostMath};
use rocmc::ir::DType;
use rocmc::Options;

const F8: [DType; 4] = [
    DType::F8E4M3FN,
    DType::F8E5M2,
    DType::F8E4M3FNUZ,
    DType::F8E5M2FNUZ,
];

fn kernel(d: DType, compute: &str) -> String {
    format!(
        "[kernel]\nname = \"k\"\nsizes = [\"n\"]\n\n[inputs]\nx = {{ dtype = \"{d}\", shape = [\"n\"] }}\n\n\
         [[stage]]\ncompute = \"{compute}\"\nshape = [\"n\"]\n\
         schedule = [\"bx, tx = split(i, 64)\", \"bind(bx, blockIdx.x)\", \"bind(tx, threadIdx.x)\"]\n"
    )
}

/// Runs a one-output kernel over all 256 encodings on the CPU and returns
/// the output's bytes.
fn run_all_bytes(src: &str) -> Vec<u8> {
    let front = rocmc::frontend("k.toml", src).unwrap_or_else(|e| panic!("{e}\n{src}"));
    let k = &front.kernel;
    let out = k.tensors.iter().position(|t| t.name == "Y").unwrap();
    let mut bufs = vec![(0..=255u8).collect::<Vec<u8>>(), Vec::new()];
    bufs[out] = vec![0u8; 256 * k.tensors[out].dtype.size()];
    run_on_host_with(
        k,
        &front.program,
        &[256],
        &[],
        &mut bufs,
        false,
        HostMath::Native,
    )
    .unwrap_or_else(|e| panic!("{e}\n{src}"));
    bufs.swap_remove(out)
}

#[test]
fn compiled_code_decodes_every_encoding_exactly() {
    for d in F8 {
        let f = d.f8_format().unwrap();
        let y = run_all_bytes(&kernel(d, "Y[i] = f32(x[i])"));
        for (b, got) in y.chunks_exact(4).enumerate() {
            let got = f32::from_le_bytes(got.try_into().unwrap());
            let want = f.decode(b as u8);
            assert!(
                f64::from(got) == want || (got.is_nan() && want.is_nan()),
                "{d} {b:#04x}: {got} want {want}"
            );
        }
        // Through f64 and f16 as well: exact in both.
        let y = run_all_bytes(&kernel(d, "Y[i] = f64(x[i])"));
        for (b, got) in y.chunks_exact(8).enumerate() {
            let got = f64::from_le_bytes(got.try_into().unwrap());
            let want = f.decode(b as u8);
            assert!(
                got == want || (got.is_nan() && want.is_nan()),
                "{d} {b:#04x}"
            );
        }
        // A copy moves the bits; a constant is encoded as the interpreter
        // rounds it (-0.3 is not exact in any of the four).
        let copy = run_all_bytes(&kernel(d, "Y[i] = x[i]"));
        assert_eq!(copy, (0..=255u8).collect::<Vec<u8>>(), "{d}");
        let sel = run_all_bytes(&kernel(d, "Y[i] = select(i < 100, x[i], -0.3)"));
        assert_eq!(sel[..100], (0..100u8).collect::<Vec<u8>>()[..], "{d}");
        assert!(sel[100..].iter().all(|&b| b == f.encode(-0.3)), "{d}");
        assert_ne!(f.decode(f.encode(-0.3)), -0.3);
    }
}

#[test]
fn the_conversion_compiles_for_amd_and_nvidia() {
    for d in F8 {
        let src = kernel(d, "Y[i] = f32(x[i]) * 2.0");
        let (dis, _) = amd_code("k.toml", &src, "gfx942");
        // One byte per element, decoded in registers.
        assert!(
            dis.contains("global_load_ubyte") || dis.contains("global_load_sbyte"),
            "{d}: {dis}"
        );
        let emit = rocmc::Emit {
            asm: true,
            ..Default::default()
        };
        let ptx = rocmc::compile("k.toml", &src, &Options::new("sm_90"), emit)
            .unwrap()
            .asm
            .unwrap();
        assert!(
            ptx.lines()
                .any(|l| l.contains("ld.global.nc.") && l.contains('8')),
            "{d}: {ptx}"
        );
        assemble_ptx(&ptx, "sm_90").unwrap_or_else(|e| panic!("{d}: {e}"));
    }
}

fn refusal(src: &str, mcpu: &str) -> String {
    match rocmc::compile("k.toml", src, &Options::new(mcpu), rocmc::Emit::default()) {
        Ok(_) => panic!("accepted:\n{src}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn arithmetic_on_conversion_to_and_parameters_of_them_are_refused() {
    let d = DType::F8E4M3FN;
    let cases = [
        (
            "Y[i] = x[i] * x[i]",
            "arithmetic or comparison does not apply to `f8e4m3fn` values",
        ),
        (
            "Y[i] = f32(x[i] < x[i])",
            "arithmetic or comparison does not apply",
        ),
        ("Y[i] = -x[i]", "this operator does not apply to `f8e4m3fn`"),
        ("Y[i] = exp(x[i])", "`exp` does not apply to `f8e4m3fn`"),
        (
            "Y[i] = f8e4m3fn(f32(x[i]) * 2.0)",
            "conversion to `f8e4m3fn` is not supported",
        ),
        (
            "Y[i] = f8e5m2(x[i])",
            "conversion to `f8e5m2` is not supported",
        ),
    ];
    for (compute, want) in cases {
        let e = refusal(&kernel(d, compute), "gfx942");
        assert!(e.contains(want) && e.contains("k.toml:"), "{compute}: {e}");
    }
    let sum = kernel(d, "Y[i] = sum(x[k], k)").replace(
        "shape = [\"n\"]\nschedule",
        "shape = [\"n\"]\nreduce = { k = \"n\" }\nschedule",
    );
    let e = refusal(&sum, "gfx942");
    assert!(e.contains("`sum` does not apply to `f8e4m3fn`"), "{e}");
    let param =
        kernel(d, "Y[i] = f32(x[i])").replace("[inputs]", "[params]\ns = \"f8e5m2\"\n\n[inputs]");
    let e = refusal(&param, "gfx942");
    assert!(
        e.contains("a parameter cannot be `f8e5m2`") && e.contains("k.toml:"),
        "{e}"
    );
}

#[test]
fn a_matrix_step_refuses_the_other_encoding() {
    let fnuz = std::fs::read_to_string(example("gemm_fp8")).unwrap();
    let ocp = std::fs::read_to_string(example("gemm_bf8_ocp")).unwrap();
    let e = refusal(&ocp, "gfx942");
    assert!(
        e.contains("gfx942's 8-bit float matrix instructions read `f8e4m3fnuz` and `f8e5m2fnuz`; this stage's operand is `f8e5m2`"),
        "{e}"
    );
    let e = refusal(&fnuz, "gfx950");
    assert!(e.contains("read `f8e4m3fn` and `f8e5m2`"), "{e}");
    assert!(e.contains("mma("), "names the step: {e}");
    // A target without 8-bit float matrix instructions says what it has.
    let e = refusal(&fnuz, "gfx90a");
    assert!(
        e.contains("gfx90a has no matrix instruction for f8e4m3fnuz x f8e4m3fnuz -> f32")
            && e.contains("it has:"),
        "{e}"
    );
}

/// An unscheduled 8-bit float GEMM on gfx950 takes CDNA 4's instruction of
/// twice gfx942's rate, `v_mfma_f32_16x16x128_f8f6f4` (reached through
/// the block-scaled intrinsic; scales 0 select the unscaled form, the
/// operand formats its immediates: bf8 shows as `cbsz:1 blgp:1`), with a
/// tile that keeps its 32-byte fragments in registers (no scratch), and
/// means what the interpreter says through the instruction's lane layout
/// (CPU emulation and the loop IR under the race check), partial tiles of
/// every axis included. B, stored k-major, is kept transposed in LDS: its
/// copy packs 4 rows into each 4-byte store and the fragments are read
/// 16 bytes at a time, never byte by byte. gfx942 keeps its own fp8
/// instruction.
#[test]
fn gfx950_takes_its_double_rate_8_bit_float_instruction_by_default() {
    use crate::common::root;
    for (dt, fmt) in [("f8e4m3fn", ""), ("f8e5m2", "cbsz:1 blgp:1")] {
        let src = std::fs::read_to_string(root().join("bench/amd/rocmc/gemm_fp8_ocp.toml"))
            .unwrap()
            .replace("f8e4m3fn", dt);
        let (dis, _) = amd_code("gemm_fp8_ocp", &src, "gfx950");
        let mfma: Vec<&str> = dis.lines().filter(|l| l.contains("v_mfma")).collect();
        assert!(!mfma.is_empty(), "{dt}: no matrix instruction");
        for l in &mfma {
            assert!(
                l.contains("v_mfma_f32_16x16x128_f8f6f4") && l.contains(fmt),
                "{dt}: {l}"
            );
        }
        assert!(
            !dis.contains("ds_read_u8") && dis.contains("ds_write_b32"),
            "{dt}: B's fragments read byte by byte, or its tile not packed"
        );
        let front = rocmc::frontend("gemm_fp8_ocp", &src).unwrap();
        let art = rocmc::compile(
            "gemm_fp8_ocp",
            &src,
            &Options::new("gfx950"),
            rocmc::Emit {
                code_object: true,
                ..Default::default()
            },
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let co = dir.path().join("k.hsaco");
        std::fs::write(&co, art.code_object.unwrap()).unwrap();
        let notes = crate::common::tool("llvm-readobj-22", &["--notes", co.to_str().unwrap()]);
        assert!(
            notes.contains(".private_segment_fixed_size: 0"),
            "{dt}: scratch in use"
        );
        let sizes = [17, 33, 130];
        let mut opts = Options::new("x86-64");
        opts.emulate = Some("gfx950".into());
        let cpu = rocmc::targets(&opts).unwrap().remove(0);
        let lowered = front.for_target(&cpu, &opts).unwrap();
        let cmp = rocmc::run::run_cpu(&lowered, &sizes, &Default::default(), 2, false).unwrap();
        assert!(cmp.iter().all(|c| c.ok()), "{dt} emulated: {cmp:?}");
        let opts = Options::new("gfx950");
        let gpu = rocmc::targets(&opts).unwrap().remove(0);
        let lowered = front.for_target(&gpu, &opts).unwrap();
        let spec = rocmc::run::RunSpec::new(&sizes, &Default::default(), 3);
        let cmp = rocmc::run::run_loops(&lowered, &spec).unwrap();
        assert!(cmp.iter().all(|c| c.ok()), "{dt} loop IR: {cmp:?}");
    }
    let fnuz = std::fs::read_to_string(root().join("bench/amd/rocmc/gemm_fp8_fnuz.toml")).unwrap();
    let (dis, _) = amd_code("gemm_fp8_fnuz", &fnuz, "gfx942");
    assert!(dis.contains("v_mfma_f32_16x16x32_fp8_fp8"), "gfx942");
}

/// Every unscheduled 8-bit GEMM on MFMA with B stored k-major (`B[k, j]`)
/// keeps B transposed in LDS, each 4-byte store packed from the four rows'
/// registers by `v_perm_b32` (two a word), its fragments never read byte
/// by byte, and no scratch: gfx90a's i8 default spilled 235 VGPRs while
/// it read B a byte at a time. The packing's meaning through the lanes of
/// gfx942 and gfx90a is the interpreter's at sizes no tile divides (the
/// CPU packs the same words with shifts).
#[test]
fn amd_8_bit_b_tiles_are_packed_by_byte_permutes() {
    use crate::common::root;
    let i8 = r#"
[kernel]
name = "gemm_i8"
sizes = ["M", "N", "K"]
[inputs]
A = { dtype = "i8", shape = ["M", "K"] }
B = { dtype = "i8", shape = ["K", "N"] }
[[stage]]
compute = "C[i, j] = sum(i32(A[i, k]) * i32(B[k, j]), k)"
shape = ["M", "N"]
reduce = { k = "K" }
"#;
    let fnuz = std::fs::read_to_string(root().join("bench/amd/rocmc/gemm_fp8_fnuz.toml")).unwrap();
    let cases = [
        ("gemm_i8", i8, "gfx908"),
        ("gemm_i8", i8, "gfx90a"),
        ("gemm_i8", i8, "gfx942"),
        ("gemm_i8", i8, "gfx950"),
        ("gemm_fp8_fnuz", fnuz.as_str(), "gfx942"),
    ];
    for (name, src, mcpu) in cases {
        let (dis, asm) = amd_code(name, src, mcpu);
        assert!(
            dis.contains("v_mfma"),
            "{name} {mcpu}: no matrix instruction"
        );
        let perms = dis.lines().filter(|l| l.contains("v_perm_b32")).count();
        assert!(perms >= 8, "{name} {mcpu}: {perms} v_perm_b32");
        assert!(
            !dis.contains("ds_read_u8"),
            "{name} {mcpu}: B read byte by byte"
        );
        assert!(
            asm.contains("ScratchSize: 0"),
            "{name} {mcpu}: scratch in use"
        );
    }
    for (name, src, mcpu) in [
        ("gemm_fp8_fnuz", fnuz.as_str(), "gfx942"),
        ("gemm_i8", i8, "gfx90a"),
    ] {
        let front = rocmc::frontend(name, src).unwrap();
        let mut opts = Options::new("x86-64");
        opts.emulate = Some(mcpu.into());
        let cpu = rocmc::targets(&opts).unwrap().remove(0);
        let lowered = front.for_target(&cpu, &opts).unwrap();
        let cmp =
            rocmc::run::run_cpu(&lowered, &[37, 70, 129], &Default::default(), 4, false).unwrap();
        assert!(
            cmp.iter().all(|c| c.ok()),
            "{name} emulated on {mcpu}: {cmp:?}"
        );
    }
}
