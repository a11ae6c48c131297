//! Scatters: `H[X[i]] += v` (also `max=`, `min=`) over the axes of
//! `over`. The interpreter defines them (the output starts at the
//! operation's identity; updates outside the tensor are dropped); the
//! lowered loop IR, the CPU path and every GPU back end must agree.

use crate::common::*;
use rocmc::ir::interp::{self, Buffer, Data};
use rocmc::ir::DType;

/// index_add, max=/min= of every kind of element, sub-word atomics and a
/// scatter read by a later stage: the files of tests/scatter/ (also
/// checked on the GPU by scripts/gpu-focus.sh), and the histogram example.
fn kernels() -> Vec<(String, String)> {
    let mut v = kernel_files("scatter");
    assert!(v.len() >= 3, "tests/scatter/ lost its kernels");
    let hist = std::fs::read_to_string(example("histogram")).unwrap();
    v.push(("histogram".into(), hist));
    v
}

const SIZES: &[i64] = &[1, 2, 7, 33, 100, 1000];
const AMD: &[&str] = &["gfx90a", "gfx942", "gfx1100", "gfx1201"];
const NVIDIA: &[&str] = &["sm_52", "sm_70", "sm_80", "sm_90"];

#[test]
fn scatters_agree_with_the_interpreter_on_the_cpu() {
    check_on_the_cpu(&kernels(), SIZES);
}

#[test]
fn scatters_lower_to_their_meaning() {
    // A scatter's fill comes first, as its own kernel.
    for (name, src) in kernels() {
        let k = rocmc::ir::parse_kernel(&name, &src).unwrap();
        let prog = rocmc::ir::lower(&k).unwrap();
        assert!(
            prog.kernels[0].name.ends_with("_init"),
            "{name}: {}",
            prog.kernels[0].name
        );
    }
    check_lowered(&kernels(), SIZES);
}

#[test]
fn scatters_compile_for_every_target() {
    compile_everywhere(&kernels(), AMD, NVIDIA);
}

/// The definition on chosen data: repeated places accumulate, the
/// output starts at zero, out-of-range updates are dropped and reported.
#[test]
fn updates_accumulate_and_out_of_range_ones_are_dropped() {
    let src = r#"
[kernel]
name = "k"
sizes = ["n", "B"]
[inputs]
X = { dtype = "i32", shape = ["n"] }
w = { dtype = "f32", shape = ["n"] }
[[stage]]
compute = "H[X[i]] += w[i]"
over = { i = "n" }
shape = ["B"]
"#;
    let k = rocmc::ir::parse_kernel("k.toml", src).unwrap();
    let x = Buffer {
        dtype: DType::I32,
        data: Data::I(vec![1, 3, 1, -1, 4, 0]),
    };
    let w = Buffer {
        dtype: DType::F32,
        data: Data::F(vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0]),
    };
    let (out, dropped) = interp::run_reporting(&k, &[6, 4], &[], &[x, w]).unwrap();
    assert_eq!(out[2].data, Data::F(vec![32.0, 5.0, 0.0, 2.0]));
    let d = dropped.expect("reported");
    assert!(d.scatter && d.index == [-1], "{d}");
    assert!(d.to_string().contains("the update was dropped"), "{d}");
    // The CPU path, through LLVM's atomics, on the same data.
    let front = rocmc::frontend("k.toml", src).unwrap();
    let mut bufs = vec![
        [1i32, 3, 1, -1, 4, 0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<u8>>(),
        [1f32, 2.0, 4.0, 8.0, 16.0, 32.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        vec![0xffu8; 16],
    ];
    rocmc::codegen::host::run_on_host(
        &front.kernel,
        &front.program,
        &[6, 4],
        &[],
        &mut bufs,
        false,
    )
    .unwrap();
    let h: Vec<f32> = bufs[2]
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(h, [32.0, 5.0, 0.0, 2.0]);
}

/// Native atomics where the target has them: AMD's float add (with the
/// metadata clang's -munsafe-fp-atomics gives), NVIDIA's red/atom.add at
/// the GPU's scope.
#[test]
fn scatters_use_the_targets_atomics() {
    let src = std::fs::read_to_string(root().join("tests/scatter/index_add.toml")).unwrap();
    let (asm, _) = amd_code("index_add.toml", &src, "gfx942");
    assert!(asm.contains("global_atomic_add_f32"), "{asm}");
    // privatize: the bins' updates are LDS atomics, memory sees one per bin.
    let hist = std::fs::read_to_string(example("histogram")).unwrap();
    let (asm, _) = amd_code("histogram.toml", &hist, "gfx90a");
    assert!(
        asm.contains("ds_add_u32") && asm.contains("global_atomic_add"),
        "{asm}"
    );
    let ptx = ptx_of("histogram.toml", &hist, "sm_90");
    assert!(ptx.contains("atom.shared.add.u32"), "{ptx}");
    let ptx = ptx_of("index_add.toml", &src, "sm_90");
    assert!(ptx.contains(".add.f32") && !ptx.contains(".sys"), "{ptx}");
    // Bit masks: native or/and, in LDS and in memory.
    let bits = std::fs::read_to_string(root().join("tests/scatter/bitmask.toml")).unwrap();
    let (asm, _) = amd_code("bitmask.toml", &bits, "gfx942");
    for op in ["ds_or_b32", "global_atomic_or", "global_atomic_and"] {
        assert!(asm.contains(op), "{op}:\n{asm}");
    }
    let ptx = ptx_of("bitmask.toml", &bits, "sm_90");
    for op in [
        "atom.shared.or.b32",
        "atom.global.or.b32",
        "atom.global.and.b32",
    ] {
        assert!(ptx.contains(op), "{op}:\n{ptx}");
    }
}
