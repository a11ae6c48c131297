//! Scans (`cumsum`, `cumprod`, `cummax`, `cummin`, inclusive and
//! exclusive): defined as the triangular reductions they stand for (the
//! interpreter folds each row once, in the same order); the work-group
//! scan of `scan(c, threads=T, per=P)` and the triangular lowering of any
//! other schedule agree with it, in the loop IR and on the CPU, along any
//! axis, and compile for every target.

use rocmc_tests::*;

const SIZES: &[i64] = &[1, 2, 7, 33, 100, 1100];

fn kernels() -> Vec<(String, String)> {
    let mut v = kernel_files("scan");
    assert!(v.len() >= 4, "tests/scan/ lost its kernels");
    v.push((
        "cumsum".into(),
        std::fs::read_to_string(example("cumsum")).unwrap(),
    ));
    v
}

#[test]
fn scans_agree_with_the_interpreter_on_the_cpu() {
    check_on_the_cpu(&kernels(), SIZES);
}

#[test]
fn scans_lower_to_their_meaning() {
    // The lowered interpreter runs every thread: smaller sizes.
    check_lowered(&kernels(), &SIZES[..5]);
}

#[test]
fn scans_compile_for_every_target() {
    compile_everywhere(
        &kernels(),
        &["gfx90a", "gfx942", "gfx1100", "gfx1201"],
        &["sm_52", "sm_80", "sm_90"],
    );
}

/// Hand-computed: 1, 2, 3, ... gives the triangular numbers, and the
/// exclusive form starts at 0; across chunks of 32 · 3 elements.
#[test]
fn a_cumsum_gives_the_triangular_numbers_across_chunks() {
    for (exclusive, first) in [(false, 1), (true, 0)] {
        let src = format!(
            r#"
[kernel]
name = "k"
sizes = ["n"]
[inputs]
X = {{ dtype = "i32", shape = ["n"] }}
[[stage]]
compute = "S[i] = cumsum(X[i], i, exclusive={exclusive})"
shape = ["n"]
schedule = ["scan(i, threads=32, per=3)"]
"#
        );
        let front = rocmc::frontend("k", &src).unwrap();
        let n = 250i32;
        let mut bufs = vec![
            (1..=n).flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>(),
            vec![0; 4 * n as usize],
        ];
        rocmc::codegen::host::run_on_host(
            &front.kernel,
            &front.program,
            &[n],
            &[],
            &mut bufs,
            false,
        )
        .unwrap();
        let s: Vec<i32> = bufs[1]
            .chunks(4)
            .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let want: Vec<i32> = (1..=n)
            .map(|i| {
                if exclusive {
                    (i - 1) * i / 2
                } else {
                    i * (i + 1) / 2
                }
            })
            .collect();
        assert_eq!(s[0], first);
        assert_eq!(s, want, "exclusive={exclusive}");
    }
}

/// The default is the work-group scan: linear, one kernel per scan.
#[test]
fn an_unscheduled_scan_gets_the_scan_rule() {
    let src = std::fs::read_to_string(example("cumsum")).unwrap();
    let front = rocmc::frontend("cumsum", &src).unwrap();
    let d = front.kernel.stages[0].default.as_ref().unwrap();
    assert_eq!(d.rule, "scan");
    assert_eq!(d.steps, ["scan(c, threads=256, per=4)"]);
    assert_eq!(front.program.kernels[0].block, [256, 1, 1]);
}
