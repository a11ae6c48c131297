//! Triangular reductions: a reduction extent that depends on the output's
//! axes (`reduce = { j = "i + 1" }`), so causal and prefix computations
//! skip what they would mask. Defined by the interpreter per output point;
//! the lowered loop IR (per-thread trip counts), the CPU path (lockstep to
//! the largest count, each thread guarded) and every target agree.

use crate::common::*;

const SIZES: &[i64] = &[1, 2, 7, 33, 100];

fn kernels() -> Vec<(String, String)> {
    let v = kernel_files("triangular");
    assert!(v.len() >= 2, "tests/triangular/ lost its kernels");
    v
}

#[test]
fn triangular_reductions_agree_with_the_interpreter_on_the_cpu() {
    check_on_the_cpu(&kernels(), SIZES);
}

#[test]
fn triangular_reductions_lower_to_their_meaning() {
    check_lowered(&kernels(), SIZES);
}

#[test]
fn triangular_reductions_compile_for_every_target() {
    compile_everywhere(
        &kernels(),
        &["gfx90a", "gfx942", "gfx1100", "gfx1201"],
        &["sm_52", "sm_80", "sm_90"],
    );
}

/// Prefix sums of 1, 2, 3, ...: the loop really stops at i + 1.
#[test]
fn a_prefix_sum_stops_at_its_row() {
    let src = r#"
[kernel]
name = "k"
sizes = ["n"]
[inputs]
X = { dtype = "i32", shape = ["n"] }
[[stage]]
compute = "S[i] = sum(X[j], j)"
shape = ["n"]
reduce = { j = "i + 1" }
schedule = ["io, ii = split(i, 4)", "bind(io, blockIdx.x)", "bind(ii, threadIdx.x)"]
"#;
    let front = rocmc::frontend("k.toml", src).unwrap();
    let mut bufs = vec![
        (1..=10i32)
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<u8>>(),
        vec![0; 40],
    ];
    rocmc::codegen::host::run_on_host(&front.kernel, &front.program, &[10], &[], &mut bufs, false)
        .unwrap();
    let s: Vec<i32> = bufs[1]
        .chunks(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(s, [1, 3, 6, 10, 15, 21, 28, 36, 45, 55]);
}
