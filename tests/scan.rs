//! Scans (`cumsum`, `cumprod`, `cummax`, `cummin`, inclusive and
//! exclusive): defined as the triangular reductions they stand for (the
//! interpreter folds each row once, in the same order); the work-group
//! scan of `scan(c, threads=T, per=P)` and the triangular lowering of any
//! other schedule agree with it, in the loop IR and on the CPU, along any
//! axis, with rows whole or split over work-groups (`chunks`), and compile
//! for every target.

use crate::common::*;

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
        let src = cumsum_of_one_row(exclusive, "threads=32, per=3");
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
        let want = triangular_numbers(n as usize, exclusive);
        assert_eq!(s[0], first);
        assert_eq!(s, want, "exclusive={exclusive}");
    }
}

/// `S[i] = cumsum(X[i], i)` over one i32 row, scheduled `scan(i, {args})`.
fn cumsum_of_one_row(exclusive: bool, args: &str) -> String {
    format!(
        r#"
[kernel]
name = "k"
sizes = ["n"]
[inputs]
X = {{ dtype = "i32", shape = ["n"] }}
[[stage]]
compute = "S[i] = cumsum(X[i], i, exclusive={exclusive})"
shape = ["n"]
schedule = ["scan(i, {args})"]
"#
    )
}

/// The prefix sums of 1, 2, ..., n: the triangular numbers.
fn triangular_numbers(n: usize, exclusive: bool) -> Vec<i32> {
    (1..=n as i32)
        .map(|i| {
            if exclusive {
                (i - 1) * i / 2
            } else {
                i * (i + 1) / 2
            }
        })
        .collect()
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

/// A scan written out as its triangular sum is the scan template: the
/// same rule, steps and kernels as `cumsum` — linear work, not a
/// quadratic reduction on one thread per row.
#[test]
fn a_written_out_scan_gets_the_scan_rule() {
    let cumsum = rocmc::frontend(
        "cumsum",
        &std::fs::read_to_string(example("cumsum")).unwrap(),
    )
    .unwrap();
    let src = std::fs::read_to_string(root().join("tests/scan/written_out_sum.toml")).unwrap();
    let front = rocmc::frontend("written_out_sum", &src).unwrap();
    let st = &front.kernel.stages[0];
    let scan = st.reduce().and_then(|r| r.scan()).expect("recognised");
    assert_eq!((scan.axis, scan.exclusive), (1, false));
    let d = st.default.as_ref().unwrap();
    assert_eq!(d.rule, "scan");
    assert_eq!(
        d.steps,
        cumsum.kernel.stages[0].default.as_ref().unwrap().steps
    );
    assert_eq!(front.program.kernels.len(), cumsum.program.kernels.len());
    assert_eq!(
        front.program.kernels[0].block,
        cumsum.program.kernels[0].block
    );
}

/// A row split over work-groups (`chunks=S`): the parts' totals, their
/// scan and the main scan are three kernels in that order; each part's
/// carry is read from the output before the part writes it. Hand-computed
/// across parts of 32 elements, both forms.
#[test]
fn a_split_row_is_three_kernels_and_gives_the_triangular_numbers() {
    for (exclusive, first) in [(false, 1), (true, 0)] {
        let src = cumsum_of_one_row(exclusive, "threads=32, per=1, chunks=1");
        let front = rocmc::frontend("k.toml", &src).unwrap();
        let names: Vec<&str> = front
            .program
            .kernels
            .iter()
            .map(|g| g.name.as_str())
            .collect();
        assert_eq!(names, ["k_totals", "k_carries", "k"]);
        // Parts on blockIdx.x (rows on y); the carries' scan is one
        // work-group per row.
        let one = rocmc::ir::index::Index::c(1);
        assert_ne!(front.program.kernels[0].grid[0], one);
        assert_ne!(front.program.kernels[2].grid[0], one);
        assert_eq!(front.program.kernels[1].grid[0], one);
        let n = 100usize;
        let x: Vec<i32> = (1..=n as i32).collect();
        let want = triangular_numbers(n, exclusive);
        assert_eq!(want[0], first);
        let input = rocmc::ir::interp::Buffer {
            dtype: rocmc::ir::DType::I32,
            data: rocmc::ir::interp::Data::I(x.iter().map(|v| *v as i64).collect()),
        };
        let got = rocmc::ir::interp::run_lowered(
            &front.kernel,
            &front.program,
            &[n as i64],
            &[],
            &[input],
        )
        .unwrap();
        assert_eq!(
            got[1].data,
            rocmc::ir::interp::Data::I(want.iter().map(|v| *v as i64).collect()),
            "exclusive={exclusive}"
        );
    }
}

/// `chunks` needs the output to hold the scan's type (the totals wait
/// there); the rule splits few long rows and keeps many rows whole.
#[test]
fn the_scan_rule_splits_few_long_rows() {
    let kernel = |shape: &str, value: &str, schedule: &str| {
        format!(
            "[kernel]\nname = \"k\"\nsizes = [\"n\", \"m\"]\n[inputs]\nX = {{ dtype = \"f16\", shape = [{shape}] }}\n\
             [[stage]]\ncompute = \"Y[r, c] = {value}\"\nshape = [{shape}]\n{schedule}"
        )
    };
    let steps = |src: &str| {
        let f = rocmc::frontend("k.toml", src).unwrap_or_else(|e| panic!("{e}"));
        f.kernel.stages[0].default.as_ref().unwrap().steps.clone()
    };
    assert_eq!(
        steps(&kernel("4, \"n\"", "cumsum(X[r, c], c)", "")),
        ["scan(c, threads=128, per=4, chunks=32)"]
    );
    assert_eq!(
        steps(&kernel("\"m\", \"n\"", "cumsum(X[r, c], c)", "")),
        ["scan(c, threads=256, per=4)"]
    );
    assert_eq!(
        steps(&kernel("4, 4096", "cumsum(X[r, c], c)", "")),
        ["scan(c, threads=256, per=4)"]
    );
    // An f32 output of an f16 scan cannot hold the totals.
    assert_eq!(
        steps(&kernel("4, \"n\"", "f32(cumsum(X[r, c], c))", "")),
        ["scan(c, threads=256, per=4)"]
    );
    let src = kernel(
        "4, \"n\"",
        "f32(cumsum(X[r, c], c))",
        "schedule = [\"scan(c, chunks=4)\"]\n",
    );
    let Err(e) = rocmc::frontend("k.toml", &src) else {
        panic!("chunks into another type was accepted");
    };
    let e = e.to_string();
    assert!(
        e.contains("which is `f32` where the scan is `f16`") && e.contains("k.toml:"),
        "{e}"
    );
}
