//! Regression kernels (tests/regress/): each reproduces a miscompilation,
//! crash or interpreter bug found by a user or by the differential fuzzer
//! (tests/difffuzz.rs). Each runs on the CPU path against the reference
//! interpreter at several sizes (1-element and non-divisible ones among
//! them) and compiles for four AMDGPU generations.

use rocmc_tests::*;
use std::collections::HashMap;

const TARGETS: &[&str] = &["gfx90a", "gfx942", "gfx1100", "gfx1201"];
const SIZES: &[i64] = &[2, 3, 7, 64, 65, 130];

fn kernels() -> Vec<std::path::PathBuf> {
    let dir = root().join("tests/regress");
    files_in(&dir)
        .into_iter()
        .filter(|f| f.ends_with(".toml"))
        .map(|f| dir.join(f))
        .collect()
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
            let sizes = vec![n; front.kernel.sizes.len()];
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
    for path in kernels() {
        let src = std::fs::read_to_string(&path).unwrap();
        let file = path.to_string_lossy();
        for t in TARGETS {
            let emit = rocmc::Emit {
                code_object: true,
                ..Default::default()
            };
            let art = rocmc::compile(&file, &src, &rocmc::Options::new(t), emit)
                .unwrap_or_else(|e| panic!("{file} for {t}: {e}"));
            assert!(art.code_object.is_some_and(|c| c.starts_with(b"\x7fELF")));
        }
    }
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
        rocmc::Emit::default(),
    )
    .unwrap();
    assert!(art.llvm_ir.contains("@llvm.smax.i32"), "{}", art.llvm_ir);
    assert!(!art.llvm_ir.contains("@llvm.umax"), "{}", art.llvm_ir);
}
