//! Regression kernels (tests/regress/): each reproduces a miscompilation,
//! crash or interpreter bug found by a user or by the differential fuzzer
//! (tests/difffuzz.rs). Each runs on the CPU path against the reference
//! interpreter at several sizes (1-element and non-divisible ones among
//! them) and compiles for four AMDGPU generations.

use crate::common::*;
use std::collections::HashMap;

const TARGETS: &[&str] = &["gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201"];
/// NVIDIA processors across PTX versions: sm_52 to sm_72 get PTX older
/// than 6.2, which lacks instructions newer processors use (fz804).
const NVIDIA: &[&str] = &["sm_52", "sm_70", "sm_72", "sm_75", "sm_80", "sm_90"];
const SIZES: &[i64] = &[2, 3, 7, 64, 65, 130];
/// The interpreter's most work ([`rocmc::ir::Kernel::work`]) for one run:
/// every size of a 1- to 3-axis kernel at 130, a 4-axis kernel shrunk (at
/// 130⁴ elements transpose4d_unbounded took 190 of the suite's seconds).
const RUN_WORK: u128 = 1 << 22;

/// Matrix-instruction targets for the regressions whose schedule needs one
/// (`flash`, `mma`): wave64 and wave32 AMD generations and NVIDIA's.
const MATRIX_TARGETS: &[&str] = &["gfx942", "gfx950", "gfx1100", "gfx1201"];
const MATRIX_NVIDIA: &[&str] = &["sm_80", "sm_90"];

fn kernels() -> Vec<std::path::PathBuf> {
    let dir = root().join("tests/regress");
    files_in(&dir)
        .into_iter()
        .filter(|f| f.ends_with(".toml"))
        .map(|f| dir.join(f))
        .filter(|p| !needs_matrix(&std::fs::read_to_string(p).unwrap()))
        .collect()
}

/// A kernel whose loops depend on a target's matrix instructions.
fn needs_matrix(src: &str) -> bool {
    let k = rocmc::ir::parse_kernel("k.toml", src).unwrap();
    rocmc::ir::lower::needs_target(&k)
}

fn matrix_kernels() -> Vec<(String, String)> {
    kernel_files("regress")
        .into_iter()
        .filter(|(_, src)| needs_matrix(src))
        .collect()
}

/// The matrix regressions on the CPU through each matrix target's lane
/// layouts, at sizes past one tile; the race check (tests/races.rs) runs
/// their loop IR as the GPU does.
#[test]
fn matrix_regressions_match_the_interpreter_through_each_targets_lanes() {
    let all = matrix_kernels();
    assert!(!all.is_empty(), "tests/regress/ lost its matrix kernels");
    for (name, src) in &all {
        let k = rocmc::ir::parse_kernel(name, src).unwrap();
        for p in MATRIX_TARGETS.iter().chain(MATRIX_NVIDIA) {
            for n in [2, 70, 130] {
                let sizes: Vec<(&str, i64)> =
                    k.sizes.iter().map(|s| (s.name.as_str(), n)).collect();
                let cmp = emulated(src, p, &sizes).unwrap_or_else(|e| panic!("{name} on {p}: {e}"));
                for c in &cmp {
                    assert!(
                        c.ok(),
                        "{name} on {p} at {n}: {} differs by {}",
                        c.tensor,
                        c.max_error
                    );
                }
            }
        }
    }
}

#[test]
fn matrix_regressions_compile_for_their_targets() {
    compile_everywhere(&matrix_kernels(), MATRIX_TARGETS, MATRIX_NVIDIA);
}

#[test]
fn regression_kernels_match_the_interpreter_on_the_cpu() {
    let all = kernels();
    assert!(all.len() >= 6, "tests/regress/ lost its kernels");
    for path in all {
        let src = std::fs::read_to_string(&path).unwrap();
        let file = path.to_string_lossy();
        let front = rocmc::frontend(&file, &src).unwrap_or_else(|e| panic!("{e}"));
        for &n in SIZES {
            // Within the kernel's bounds, as every run requires.
            let sizes = front
                .kernel
                .fit_work(&vec![n; front.kernel.sizes.len()], RUN_WORK);
            for contract in [false, true] {
                let cmp = rocmc::run::run_cpu(&front, &sizes, &HashMap::new(), n as u64, contract)
                    .unwrap_or_else(|e| panic!("{file} at size {n}: {e}"));
                for c in &cmp {
                    assert!(
                        c.ok(),
                        "{file} at size {n} (contraction {contract}): {} differs by {} (tolerance {})",
                        c.tensor,
                        c.max_error,
                        c.tolerance
                    );
                }
            }
        }
    }
}

#[test]
fn regression_kernels_compile_for_every_generation() {
    let all: Vec<_> = kernel_files("regress")
        .into_iter()
        .filter(|(_, src)| !needs_matrix(src))
        .collect();
    compile_everywhere(&all, TARGETS, NVIDIA);
}

/// The clamped stencils must keep their clamp: before the fix LLVM folded
/// `umax(i - 1, 0)` away, leaving an out-of-bounds read at `i = 0`.
#[test]
fn clamps_survive_optimisation() {
    let path = root().join("tests/regress/clamp_max_negative.toml");
    let src = std::fs::read_to_string(&path).unwrap();
    let art = rocmc::compile(
        "clamp_max_negative.toml",
        &src,
        &rocmc::Options::new("gfx90a"),
        rocmc::Emit {
            llvm: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(art.llvm_ir.contains("@llvm.smax.i32"), "{}", art.llvm_ir);
    assert!(!art.llvm_ir.contains("@llvm.umax"), "{}", art.llvm_ir);
}

/// A kernel calling every math function on every float dtype.
fn all_math_kernel() -> String {
    let mut src = String::from("[kernel]\nname = \"all_math\"\nsizes = [\"n\"]\n\n[inputs]\n");
    let dtypes = ["f64", "f32", "f16", "bf16"];
    for d in dtypes {
        src += &format!("x_{d} = {{ dtype = \"{d}\", shape = [\"n\"] }}\n");
    }
    for d in dtypes {
        let x = format!("x_{d}[i]");
        let calls = [
            format!("abs({x})"),
            format!("sqrt(abs({x}))"),
            format!("rsqrt(abs({x}) + 1.0)"),
            format!("exp({x})"),
            format!("exp2({x})"),
            format!("log(abs({x}) + 0.5)"),
            format!("log2(abs({x}) + 0.5)"),
            format!("floor({x})"),
            format!("ceil({x})"),
            format!("tanh({x})"),
            format!("sigmoid({x})"),
            format!("gelu({x})"),
            format!("erf({x})"),
            format!("pow(abs({x}) + 0.5, {x})"),
            format!("fma({x}, {x}, {x})"),
        ];
        src += &format!(
            "\n[[stage]]\ncompute = \"Y_{d}[i] = {}\"\nshape = [\"n\"]\nschedule = [\"bx, tx = split(i, 64)\", \"bind(bx, blockIdx.x)\", \"bind(tx, threadIdx.x)\"]\n",
            calls.join(" + ")
        );
    }
    src
}

/// Every documented math function on every float dtype compiles for every
/// processor LLVM 22 knows (no raw LLVM error, no libcall) and agrees with
/// the interpreter on the host.
#[test]
fn every_math_function_compiles_for_every_target_and_the_host() {
    let src = all_math_kernel();
    let front = rocmc::frontend("all_math.toml", &src).unwrap_or_else(|e| panic!("{e}"));
    for n in [1, 70] {
        let cmp = rocmc::run::run_cpu(&front, &[n], &HashMap::new(), 7, false).unwrap();
        assert_eq!(cmp.len(), 4);
        for c in cmp {
            assert!(c.ok(), "{} differs by {}", c.tensor, c.max_error);
        }
    }
    let procs = rocmc::codegen::target::canonical_processors();
    assert!(procs.len() > 40, "{procs:?}");
    for p in procs {
        let mut opts = rocmc::Options::new(&p);
        if p.contains("generic") {
            opts.code_object_version = 6;
        }
        let target = rocmc::targets(&opts).unwrap().remove(0);
        let emit = rocmc::Emit {
            object: true,
            ..Default::default()
        };
        rocmc::backend(&front, &target, &opts, emit).unwrap_or_else(|e| panic!("{p}: {e}"));
    }
    // NVIDIA: every processor LLVM knows writes PTX (rocmc expands exp/log
    // itself; there is no libdevice), and ptxas accepts it where its
    // release (CUDA 12.9: sm_50 and later, PTX up to 8.8) can check it.
    for p in rocmc::codegen::target::nvptx::PROCESSORS {
        let opts = rocmc::Options::new(p.name);
        let target = rocmc::targets(&opts).unwrap().remove(0);
        let emit = rocmc::Emit {
            asm: true,
            ..Default::default()
        };
        let art = rocmc::backend(&front, &target, &opts, emit)
            .unwrap_or_else(|e| panic!("{}: {e}", p.name));
        let cc = target.nvidia().unwrap().compute_capability();
        if cc >= (5, 0) && p.ptx <= 88 {
            assemble_ptx(art.asm.as_deref().unwrap(), p.name)
                .unwrap_or_else(|e| panic!("ptxas refused {}:\n{e}", p.name));
        }
    }
}
