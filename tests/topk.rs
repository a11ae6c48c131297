//! Top-k (`V[r, j], I[r, j] = topk(X[r, c], c)`): the k best elements of
//! each row, best first, the first index on ties, NaN larger than every
//! number (first, and last with `largest=false`), index -1 and value 0 past a short row's
//! end. The work-group lowering (per-thread sorted lists, a bitonic merge
//! tree through LDS) agrees with the interpreter in the loop IR and on
//! the CPU, with ties (f16, i8), short rows and k up to 64, and compiles
//! for every target with no spills.

use crate::common::*;

const SIZES: &[i64] = &[1, 2, 7, 33, 100];

fn kernels() -> Vec<(String, String)> {
    let mut v = kernel_files("topk");
    assert!(v.len() >= 3, "tests/topk/ lost its kernels");
    v.push((
        "topk".into(),
        std::fs::read_to_string(example("topk")).unwrap(),
    ));
    v
}

#[test]
fn topk_agrees_with_the_interpreter_on_the_cpu() {
    check_on_the_cpu(&kernels(), SIZES);
}

/// Rows longer than a work-group's step (several steps per thread), few
/// of them: every size but the last is 3.
#[test]
fn topk_agrees_with_the_interpreter_on_long_rows() {
    for (name, src) in kernels() {
        let front = rocmc::frontend(&name, &src).unwrap_or_else(|e| panic!("{e}"));
        let n = front.kernel.sizes.len();
        for len in [1025, 2500] {
            let mut sizes = vec![3; n];
            sizes[n - 1] = len;
            let cmp = rocmc::run::run_cpu(&front, &sizes, &Default::default(), 7, false)
                .unwrap_or_else(|e| panic!("{name} at {sizes:?}: {e}"));
            for c in &cmp {
                assert!(
                    c.ok(),
                    "{name} at {sizes:?}: {} differs by {}",
                    c.tensor,
                    c.max_error
                );
            }
        }
    }
}

#[test]
fn topk_lowers_to_its_meaning() {
    // The lowered interpreter runs every thread: smaller sizes.
    check_lowered(&kernels(), &SIZES[..4]);
}

#[test]
fn topk_compiles_for_every_target() {
    compile_everywhere(
        &kernels(),
        &["gfx90a", "gfx942", "gfx1100", "gfx1201"],
        &["sm_52", "sm_80", "sm_90"],
    );
}

/// The top 4 of one row on the CPU path: (values, indices).
fn top4(row: &[f32], largest: bool) -> (Vec<f32>, Vec<i32>) {
    let src = format!(
        r#"
[kernel]
name = "k"
sizes = ["rows", "cols"]
[inputs]
X = {{ dtype = "f32", shape = ["rows", "cols"] }}
[[stage]]
compute = "V[r, j], I[r, j] = topk(X[r, c], c, largest={largest})"
shape = ["rows", 4]
reduce = {{ c = "cols" }}
schedule = ["topk(c, threads=32, per=2)"]
"#
    );
    let front = rocmc::frontend("k", &src).unwrap();
    let mut bufs = vec![
        row.iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<u8>>(),
        vec![0; 16],
        vec![0; 16],
    ];
    rocmc::codegen::host::run_on_host(
        &front.kernel,
        &front.program,
        &[1, row.len() as i32],
        &[],
        &mut bufs,
        false,
    )
    .unwrap();
    let f = |b: &[u8]| f32::from_le_bytes(b.try_into().unwrap());
    let i = |b: &[u8]| i32::from_le_bytes(b.try_into().unwrap());
    (
        bufs[1].chunks(4).map(f).collect(),
        bufs[2].chunks(4).map(i).collect(),
    )
}

/// Hand-checked: NaN first (PyTorch's order), ties by the first index,
/// -0 and +0 equal; the smallest first with `largest=false`, NaN last
/// (it is larger than every number, as in torch.sort);
/// index -1 and value 0 past the end of a short row.
#[test]
fn topk_orders_nan_ties_and_short_rows_as_documented() {
    let row = [1.0, 3.0, f32::NAN, 3.0, -0.0, 0.0, f32::NEG_INFINITY];
    let (v, i) = top4(&row, true);
    assert_eq!(i, [2, 1, 3, 0]);
    assert!(v[0].is_nan());
    assert_eq!(&v[1..], [3.0, 3.0, 1.0]);
    let (v, i) = top4(&row, false);
    assert_eq!(i, [6, 4, 5, 0]);
    assert_eq!(v, [f32::NEG_INFINITY, 0.0, 0.0, 1.0]);
    // -0 comes back as +0 (the key orders them equal).
    assert!(v[1].is_sign_positive());
    let (v, i) = top4(&[1.0, 3.0], true);
    assert_eq!(i, [1, 0, -1, -1]);
    assert_eq!(v, [3.0, 1.0, 0.0, 0.0]);
}

/// The default is the `topk` rule; long lists get fewer threads, so that
/// the lists fit in 32 KiB of LDS.
#[test]
fn an_unscheduled_topk_gets_the_topk_rule() {
    let src = std::fs::read_to_string(example("topk")).unwrap();
    let front = rocmc::frontend("topk", &src).unwrap();
    let d = front.kernel.stages[0].default.as_ref().unwrap();
    assert_eq!(d.rule, "topk");
    assert_eq!(d.steps, ["topk(c, threads=256, per=4)"]);
    assert_eq!(front.program.kernels[0].block, [256, 1, 1]);
    let long = src.replace("[\"rows\", 8]", "[\"rows\", 64]");
    let front = rocmc::frontend("topk", &long).unwrap();
    assert_eq!(front.program.kernels[0].block, [64, 1, 1]);
    assert_eq!(front.program.kernels[0].shared_layout().1, 64 * 64 * 8);
}
