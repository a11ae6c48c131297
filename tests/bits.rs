//! `inf`, `nan`, `isnan`, `isinf`, `bitcast`, and `argmax`/`argmin` (a
//! reduce_max/reduce_min over 64-bit keys the front end builds from them):
//! defined by the interpreter on chosen data, and the same on the CPU path,
//! through lowering and on every target.

use crate::common::*;
use rocmc::ir::interp::{self, Buffer, Data};
use rocmc::ir::DType;
use std::collections::HashMap;

/// Row-wise argmax/argmin under three schedules (cooperative tree, one
/// thread per row, serial), NaN made on purpose, and the bit functions.
fn kernel() -> String {
    std::fs::read_to_string(root().join("tests/bits/bits.toml")).unwrap()
}

const SIZES: &[(i64, i64)] = &[(1, 1), (3, 7), (17, 100), (5, 1000), (2, 65)];

#[test]
fn bits_agree_with_the_interpreter_on_the_cpu_and_when_lowered() {
    let front = rocmc::frontend("bits.toml", &kernel()).unwrap_or_else(|e| panic!("{e}"));
    let k = &front.kernel;
    for &(r, c) in SIZES {
        let cmp = rocmc::run::run_cpu(&front, &[r, c], &HashMap::new(), c as u64, false)
            .unwrap_or_else(|e| panic!("{r}x{c}: {e}"));
        for x in &cmp {
            assert!(x.ok(), "{r}x{c}: {} differs by {}", x.tensor, x.max_error);
        }
        let inputs = rocmc::ir::reference::random_inputs(k, &[r, c], &HashMap::new(), 3)
            .unwrap()
            .inputs;
        let want = interp::run(k, &[r, c], &[], &inputs).unwrap();
        let got = interp::run_lowered(k, &front.program, &[r, c], &[], &inputs).unwrap();
        assert_eq!(want, got, "{r}x{c}");
    }
}

#[test]
fn bits_compile_for_every_target() {
    for t in ["gfx90a", "gfx942", "gfx1100", "gfx1201"] {
        let emit = rocmc::Emit {
            code_object: true,
            ..Default::default()
        };
        rocmc::compile("bits.toml", &kernel(), &rocmc::Options::new(t), emit)
            .unwrap_or_else(|e| panic!("{t}: {e}"));
    }
    for t in ["sm_52", "sm_80", "sm_90"] {
        let emit = rocmc::Emit {
            asm: true,
            ..Default::default()
        };
        let art = rocmc::compile("bits.toml", &kernel(), &rocmc::Options::new(t), emit)
            .unwrap_or_else(|e| panic!("{t}: {e}"));
        assemble_ptx(&art.asm.unwrap_or_default(), t)
            .unwrap_or_else(|e| panic!("ptxas refused bits for {t}:\n{e}"));
    }
}

/// One row each: ties (first index), NaN (PyTorch's rule: the first NaN
/// is the largest), -0 and +0 equal, negative values; and an empty row.
#[test]
fn argmax_means_what_pytorch_means() {
    let src = r#"
[kernel]
name = "k"
sizes = ["R", "C"]
[inputs]
X = { dtype = "f32", shape = ["R", "C"] }
[[stage]]
compute = "A[r] = argmax(X[r, c], c)"
shape = ["R"]
reduce = { c = "C" }
[[stage]]
compute = "B[r] = argmin(X[r, c], c)"
shape = ["R"]
reduce = { c = "C" }
schedule = ["bind(r, blockIdx.x)"]
"#;
    let nan = f64::NAN;
    let rows: [[f64; 5]; 5] = [
        [1.0, 3.0, 3.0, -2.0, 0.5],
        [1.0, nan, 7.0, nan, -9.0],
        [-0.0, 0.0, -1.0, -1.0, -0.0],
        [-5.0, -3.0, -3.0, -7.0, -7.0],
        [f64::NEG_INFINITY, -1e30, f64::INFINITY, 1e30, f64::INFINITY],
    ];
    let want_max = [1, 1, 0, 1, 2];
    let want_min = [3, 1, 2, 3, 0];
    let x: Vec<f64> = rows.iter().flatten().copied().collect();
    let k = rocmc::ir::parse_kernel("k.toml", src).unwrap();
    let input = Buffer {
        dtype: DType::F32,
        data: Data::F(x.clone()),
    };
    let out = interp::run(&k, &[5, 5], &[], &[input]).unwrap();
    assert_eq!(out[1].data, Data::I(want_max.to_vec()));
    assert_eq!(out[2].data, Data::I(want_min.to_vec()));
    // The CPU path through LLVM, on the same rows.
    let front = rocmc::frontend("k.toml", src).unwrap();
    let mut bufs = vec![
        x.iter()
            .flat_map(|v| (*v as f32).to_le_bytes())
            .collect::<Vec<u8>>(),
        vec![0xff; 20],
        vec![0xff; 20],
    ];
    rocmc::codegen::host::run_on_host(
        &front.kernel,
        &front.program,
        &[5, 5],
        &[],
        &mut bufs,
        false,
    )
    .unwrap();
    let ints = |b: &[u8]| -> Vec<i64> {
        b.chunks(4)
            .map(|c| i64::from(i32::from_le_bytes(c.try_into().unwrap())))
            .collect()
    };
    assert_eq!(ints(&bufs[1]), want_max);
    assert_eq!(ints(&bufs[2]), want_min);
    // An empty row has no index: -1.
    let empty = Buffer {
        dtype: DType::F32,
        data: Data::F(vec![]),
    };
    let out = interp::run(&k, &[2, 0], &[], &[empty]).unwrap();
    assert_eq!(out[1].data, Data::I(vec![-1, -1]));
    assert_eq!(out[2].data, Data::I(vec![-1, -1]));
}

/// The bit functions' values on chosen data, interpreter and CPU alike.
#[test]
fn nan_inf_and_bitcast_values() {
    let src = r#"
[kernel]
name = "k"
sizes = ["n"]
[inputs]
X = { dtype = "f32", shape = ["n"] }
[[stage]]
compute = "F[i] = select(isnan(X[i]), 1, 0) + select(isinf(X[i]), 2, 0) + select(X[i] == -inf, 4, 0)"
shape = ["n"]
[[stage]]
compute = "G[i] = bitcast(X[i], u32)"
shape = ["n"]
[[stage]]
compute = "Z[i] = bitcast(bitcast(X[i], i32), f32) + nan * 0.0"
shape = ["n"]
"#;
    let xs = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1.0, -0.0];
    let k = rocmc::ir::parse_kernel("k.toml", src).unwrap();
    let input = Buffer {
        dtype: DType::F32,
        data: Data::F(xs.to_vec()),
    };
    let out = interp::run(&k, &[5], &[], &[input]).unwrap();
    assert_eq!(out[1].data, Data::I(vec![1, 2, 6, 0, 0]));
    assert_eq!(
        out[2].data,
        Data::I(vec![
            0x7fc0_0000,
            0x7f80_0000,
            0xff80_0000,
            0x3f80_0000,
            0x8000_0000
        ])
    );
    let Data::F(z) = &out[3].data else { panic!() };
    assert!(z.iter().all(|v| v.is_nan()), "{z:?}");
    let front = rocmc::frontend("k.toml", src).unwrap();
    let mut bufs = vec![
        xs.iter()
            .flat_map(|v| (*v as f32).to_le_bytes())
            .collect::<Vec<u8>>(),
        vec![0; 20],
        vec![0; 20],
        vec![0; 20],
    ];
    rocmc::codegen::host::run_on_host(&front.kernel, &front.program, &[5], &[], &mut bufs, false)
        .unwrap();
    let words: Vec<u32> = bufs[2]
        .chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(
        words,
        [
            0x7fc0_0000,
            0x7f80_0000,
            0xff80_0000,
            0x3f80_0000,
            0x8000_0000
        ]
    );
    let flags: Vec<i32> = bufs[1]
        .chunks(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(flags, [1, 2, 6, 0, 0]);
}

/// Bitwise operators on every integer type (tests/bits/bitwise.toml):
/// the interpreter, the CPU path, the lowered loop IR and every target.
#[test]
fn bitwise_operators_agree_everywhere() {
    let src = std::fs::read_to_string(root().join("tests/bits/bitwise.toml")).unwrap();
    let kernels = vec![("bitwise".to_string(), src)];
    check_on_the_cpu(&kernels, &[1, 7, 100, 1000]);
    check_lowered(&kernels, &[1, 7, 100]);
    compile_everywhere(
        &kernels,
        &["gfx90a", "gfx942", "gfx1100", "gfx1201"],
        &["sm_52", "sm_80", "sm_90"],
    );
}

/// Hand-computed: shift amounts modulo the width, `>>` arithmetic on
/// signed and logical on unsigned types, C's precedence of `|`, `^`, `&`.
#[test]
fn shifts_and_masks_mean_what_the_docs_say() {
    let src = r#"
[kernel]
name = "k"
sizes = ["n"]
[inputs]
A = { dtype = "i32", shape = ["n"] }
B = { dtype = "u32", shape = ["n"] }
[[stage]]
compute = "S[i] = (A[i] >> 1) + (A[i] << 33) + (1 | 6 ^ 3 & 5)"
shape = ["n"]
schedule = ["io, ii = split(i, 32)", "bind(io, blockIdx.x)", "bind(ii, threadIdx.x)"]
[[stage]]
compute = "U[i] = B[i] >> 1"
shape = ["n"]
schedule = ["io, ii = split(i, 32)", "bind(io, blockIdx.x)", "bind(ii, threadIdx.x)"]
"#;
    let front = rocmc::frontend("k", src).unwrap();
    let a: Vec<i32> = vec![-8, 5];
    let b: Vec<u32> = vec![0xffff_fff8, 5];
    let mut bufs = vec![
        a.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>(),
        b.iter().flat_map(|v| v.to_le_bytes()).collect(),
        vec![0; 8],
        vec![0; 8],
    ];
    rocmc::codegen::host::run_on_host(&front.kernel, &front.program, &[2], &[], &mut bufs, false)
        .unwrap();
    let s: Vec<i32> = bufs[2]
        .chunks(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let u: Vec<u32> = bufs[3]
        .chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    // 1 | (6 ^ (3 & 5)) = 1 | (6 ^ 1) = 7; << 33 is << 1.
    assert_eq!(s, [-4 + -16 + 7, 2 + 10 + 7]);
    assert_eq!(u, [0x7fff_fffc, 2]);
}
