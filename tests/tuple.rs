//! Tuple reductions (`M[r], S[r] = reduce(X[r, c], 1.0)` with `init` and
//! `combine`): several tensors from one pass. Defined by the interpreter
//! (init, then each element combined in row-major order); the lowered loop
//! IR (serial, cooperative trees of any width, register tiles, compute_at
//! in registers and in LDS, triangular extents), the CPU path under every
//! emulated lane layout, and every target agree.

use crate::common::*;
use std::collections::HashMap;

const SIZES: &[i64] = &[1, 2, 7, 33, 100, 300];

fn kernels() -> Vec<(String, String)> {
    let mut v = kernel_files("tuple");
    assert!(v.len() >= 5, "tests/tuple/ lost its kernels");
    for e in ["log_softmax", "cross_entropy"] {
        v.push((e.into(), std::fs::read_to_string(example(e)).unwrap()));
    }
    v
}

#[test]
fn tuple_reductions_agree_with_the_interpreter_on_the_cpu() {
    check_on_the_cpu(&kernels(), SIZES);
}

#[test]
fn tuple_reductions_lower_to_their_meaning() {
    check_lowered(&kernels(), SIZES);
}

#[test]
fn tuple_reductions_compile_for_every_target() {
    compile_everywhere(
        &kernels(),
        &["gfx90a", "gfx942", "gfx1100", "gfx1201"],
        &["sm_52", "sm_80", "sm_90"],
    );
}

/// The examples' default schedules (a row reduction fused into its
/// consumer by the row-chain rule) under each emulated processor.
#[test]
fn the_examples_agree_under_every_lane_layout() {
    for name in ["log_softmax", "welford_layernorm", "cross_entropy"] {
        let params = match name {
            "welford_layernorm" => HashMap::from([("eps".to_string(), 1e-5)]),
            _ => HashMap::new(),
        };
        let src = std::fs::read_to_string(example(name)).unwrap();
        let front = rocmc::frontend(name, &src).unwrap_or_else(|e| panic!("{e}"));
        for emulate in ["gfx942", "gfx1100", "sm_90"] {
            let mut opts = rocmc::Options::new("x86-64");
            opts.emulate = Some(emulate.into());
            let cpu = rocmc::targets(&opts).unwrap().remove(0);
            let lowered = front.for_target(&cpu, &opts).unwrap();
            for sizes in [[3, 1], [5, 300], [2, 1000]] {
                let cmp = rocmc::run::run_cpu(&lowered, &sizes, &params, 4, false)
                    .unwrap_or_else(|e| panic!("{name} {emulate} {sizes:?}: {e}"));
                for c in &cmp {
                    assert!(c.ok(), "{name} {emulate} {sizes:?}: {c:?}");
                }
            }
        }
    }
}

/// The row-chain rule computes the statistics inside the output's kernel:
/// one kernel, and the pair lives in LDS, not in memory.
#[test]
fn log_softmax_is_one_kernel_by_default() {
    let src = std::fs::read_to_string(example("log_softmax")).unwrap();
    let front = rocmc::frontend("log_softmax", &src).unwrap();
    assert_eq!(front.program.kernels.len(), 1);
    let stats = &front.kernel.stages[0];
    assert_eq!(stats.default.as_ref().unwrap().rule, "row-chain");
    let g = &front.program.kernels[0];
    let names: Vec<&str> = g.shared.iter().map(|s| s.name.as_str()).collect();
    assert!(
        names.contains(&"M_part") && names.contains(&"S_part"),
        "{names:?}"
    );
}

/// Hand-computed: the first index of the largest value wins, whatever the
/// schedule's tree does with ties.
#[test]
fn a_tuple_argmax_takes_the_first_of_equal_values() {
    let src = std::fs::read_to_string(root().join("tests/tuple/argmax_pair.toml")).unwrap();
    let front = rocmc::frontend("argmax_pair", &src).unwrap();
    // One row of 70: 3.0 at 9, 40 and 69; -1 elsewhere.
    let x: Vec<u8> = (0..70)
        .map(|i| {
            if [9, 40, 69].contains(&i) {
                3.0f32
            } else {
                -1.0
            }
        })
        .flat_map(|v| half::f16::from_f32(v).to_le_bytes())
        .collect();
    let mut bufs = vec![x, vec![0; 2], vec![0; 4]];
    rocmc::codegen::host::run_on_host(
        &front.kernel,
        &front.program,
        &[1, 70],
        &[],
        &mut bufs,
        false,
    )
    .unwrap();
    assert_eq!(i32::from_le_bytes(bufs[2][..4].try_into().unwrap()), 9);
}

/// A combiner that is not commutative (a linear recurrence's pair) still
/// spreads a long row over a work-group by default: each thread folds a
/// contiguous share, and the shares meet left with right — in LDS on
/// NVIDIA (tuples take no lane exchanges there), by exchanges within each
/// wave of 64 or 32 lanes and then across waves on AMD. Each lane layout
/// and the loop IR under the race check compute what the interpreter
/// does, at rows shorter than the work-group and rows of several
/// elements a thread (the interleaved tree this replaced was 0.7 off).
#[test]
fn a_linear_recurrence_spreads_over_threads_in_order() {
    let file = root().join("tests/regress/linear_recurrence_order.toml");
    let src = std::fs::read_to_string(file).unwrap();
    let front = rocmc::frontend("linear_recurrence_order", &src).unwrap();
    let rule = &front.kernel.stages[0].default.as_ref().unwrap().rule;
    assert_eq!(*rule, "row-reduction");
    for emulate in ["gfx942", "gfx1100", "sm_90"] {
        let mut opts = rocmc::Options::new("x86-64");
        opts.emulate = Some(emulate.into());
        let cpu = rocmc::targets(&opts).unwrap().remove(0);
        let lowered = front.for_target(&cpu, &opts).unwrap();
        for sizes in [[3, 5], [2, 3001], [1, 513]] {
            let cmp = rocmc::run::run_cpu(&lowered, &sizes, &HashMap::new(), 4, false)
                .unwrap_or_else(|e| panic!("{emulate} {sizes:?}: {e}"));
            for c in &cmp {
                assert!(c.ok(), "{emulate} {sizes:?}: {c:?}");
            }
        }
        let opts = rocmc::Options::new(emulate);
        let target = rocmc::targets(&opts).unwrap().remove(0);
        let lowered = front.for_target(&target, &opts).unwrap();
        for sizes in [[2, 3001], [1, 700]] {
            let spec = rocmc::run::RunSpec::new(&sizes, &Default::default(), 5);
            let cmp = rocmc::run::run_loops(&lowered, &spec)
                .unwrap_or_else(|e| panic!("loops on {emulate} {sizes:?}: {e}"));
            for c in &cmp {
                assert!(c.ok(), "loops on {emulate} {sizes:?}: {c:?}");
            }
        }
    }
}
