//! The sampled interpreter (`interp::run_sampled`), which the GPU check
//! uses on kernels too large for a whole run: every element it computes
//! must be the one the whole run (`interp::run`) computes, bit for bit,
//! for every construct — plain and reduction stages, tuples, scans,
//! top-k, attention, scatters, gathers — reached through the stages that
//! read it.

use crate::common::*;
use rocmc::ir::interp::{self, Scalar};
use std::collections::HashMap;

/// Every bundled kernel file: the examples and each tests/ folder of them.
fn all_kernels() -> Vec<(String, String)> {
    let mut all: Vec<(String, String)> = examples()
        .into_iter()
        .map(|n| (n.clone(), std::fs::read_to_string(example(&n)).unwrap()))
        .collect();
    for folder in [
        "regress",
        "attention",
        "scan",
        "scatter",
        "topk",
        "tuple",
        "gather",
        "conv",
        "triangular",
        "bounded",
        "bits",
    ] {
        all.extend(kernel_files(folder));
    }
    all
}

fn same(a: Scalar, b: Scalar) -> bool {
    match (a, b) {
        (Scalar::F(x), Scalar::F(y)) => x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()),
        (x, y) => x == y,
    }
}

/// At awkward sizes, a sample of a few rows and columns of every result
/// equals the whole run there, and a sample as large as the results
/// covers every element of them.
#[test]
fn sampled_elements_are_the_whole_runs_bit_for_bit() {
    let all = all_kernels();
    assert!(all.len() > 100, "only {} kernel files found", all.len());
    let mut compared = 0usize;
    for (name, src) in &all {
        let k = rocmc::ir::parse_kernel(name, src).unwrap_or_else(|e| panic!("{}", e.render()));
        for n in [1, 7, 12] {
            let sizes = k.fit_sizes(&vec![n; k.sizes.len()]);
            let Ok(inputs) =
                rocmc::ir::reference::random_inputs(&k, &sizes, &HashMap::new(), n as u64)
            else {
                continue;
            };
            let Ok(whole) = interp::run(&k, &sizes, &inputs.pvals, &inputs.inputs) else {
                continue;
            };
            let sampled = |rows, cols| {
                interp::run_sampled(&k, &sizes, &inputs.pvals, &inputs.inputs, rows, cols, 7)
                    .unwrap_or_else(|e| panic!("{name} at {n}: {e}"))
            };
            for s in sampled(3, 4) {
                assert!(s.rows_sampled <= 3 && s.offsets.len() <= 12);
                for (o, v) in s.offsets.iter().zip(&s.values) {
                    let w = whole[s.tensor].get(*o);
                    assert!(
                        same(*v, w),
                        "{name} at {n}: element {o} of tensor {}: sampled {v:?}, whole {w:?}",
                        s.tensor
                    );
                    compared += 1;
                }
            }
            for s in sampled(usize::MAX, usize::MAX) {
                assert_eq!(
                    s.offsets,
                    (0..whole[s.tensor].len()).collect::<Vec<_>>(),
                    "{name} at {n}"
                );
                for (o, v) in s.offsets.iter().zip(&s.values) {
                    assert!(
                        same(*v, whole[s.tensor].get(*o)),
                        "{name} at {n}: element {o}"
                    );
                }
            }
        }
    }
    assert!(compared > 2000, "only {compared} sampled elements compared");
}

/// A sample of a result whose whole run is far out of reach (a GEMM of
/// 2^33 multiply-adds) computes only what its sampled elements need: it
/// ends, and each equals the sum written out here (products rounded to
/// f32, added in f64, rounded once: the definition of a float sum).
#[test]
fn a_sample_of_a_huge_gemm_computes_only_its_rows() {
    let src = std::fs::read_to_string(example("matmul")).unwrap();
    let k = rocmc::ir::parse_kernel("matmul", &src).unwrap();
    let sizes: Vec<i64> = k.fit_sizes(&vec![2048; k.sizes.len()]);
    let inputs = rocmc::ir::reference::random_inputs(&k, &sizes, &HashMap::new(), 3).unwrap();
    let out = interp::run_sampled(&k, &sizes, &inputs.pvals, &inputs.inputs, 2, 3, 1).unwrap();
    assert_eq!(out.len(), 1);
    let (a, b) = (&inputs.inputs[0], &inputs.inputs[1]);
    let n = 2048usize;
    for (o, v) in out[0].offsets.iter().zip(&out[0].values) {
        let (i, j) = (o / n, o % n);
        let mut acc = 0f64;
        for kk in 0..n {
            let (x, y) = (a.get(i * n + kk), b.get(kk * n + j));
            let (Scalar::F(x), Scalar::F(y)) = (x, y) else {
                panic!("f32 inputs")
            };
            acc += (x as f32 * y as f32) as f64;
        }
        let want = acc as f32 as f64;
        assert!(
            same(*v, Scalar::F(want)),
            "C[{i}, {j}]: {v:?} against {want}"
        );
    }
    assert_eq!(out[0].rows_sampled, 2);
    assert_eq!(out[0].offsets.len(), 6);
}

/// Inputs read through `Elements` (as the GPU check reads them from the
/// device, a page at a time) give the same sample, and only the elements
/// the sampled rows depend on are read: two rows of a GEMM read those two
/// rows of A, not A.
#[test]
fn a_sample_reads_only_the_inputs_its_rows_depend_on() {
    use rocmc::ir::interp::{Buffer, Elements};
    use std::cell::RefCell;
    use std::collections::BTreeSet;
    struct Watched<'a>(&'a Buffer, RefCell<BTreeSet<usize>>);
    impl Elements for Watched<'_> {
        fn dtype(&self) -> rocmc::ir::DType {
            self.0.dtype
        }
        fn len(&self) -> usize {
            self.0.len()
        }
        fn get(&self, off: usize) -> Result<Scalar, String> {
            self.1.borrow_mut().insert(off);
            Ok(self.0.get(off))
        }
    }
    let src = std::fs::read_to_string(example("matmul")).unwrap();
    let k = rocmc::ir::parse_kernel("matmul", &src).unwrap();
    let sizes: Vec<i64> = k.fit_sizes(&[300, 200, 100]);
    let inputs = rocmc::ir::reference::random_inputs(&k, &sizes, &HashMap::new(), 3).unwrap();
    let watched: Vec<Watched> = inputs
        .inputs
        .iter()
        .map(|b| Watched(b, RefCell::new(BTreeSet::new())))
        .collect();
    let sources: Vec<&dyn Elements> = watched.iter().map(|w| w as &dyn Elements).collect();
    let got = interp::run_sampled_from(&k, &sizes, &inputs.pvals, &sources, 2, 5, 9).unwrap();
    let want = interp::run_sampled(&k, &sizes, &inputs.pvals, &inputs.inputs, 2, 5, 9).unwrap();
    assert_eq!(got, want);
    // A is M x K = 300 x 100: two rows, whole; B is K x N: five columns.
    let a_rows: BTreeSet<usize> = watched[0].1.borrow().iter().map(|o| o / 100).collect();
    assert_eq!(a_rows.len(), 2, "rows of A read: {a_rows:?}");
    assert_eq!(watched[0].1.borrow().len(), 200);
    let b_cols: BTreeSet<usize> = watched[1].1.borrow().iter().map(|o| o % 200).collect();
    assert!(b_cols.len() <= 10, "columns of B read: {b_cols:?}");
}
