//! `rocmc run` on real data: inputs given as .npy files or drawn from a
//! chosen distribution, every tensor written out as .npy, tune values and
//! tolerances from the command line. The .npy files here are written and
//! read by hand from the format's specification (NPY 1.0), independently
//! of the crate rocmc uses.

use crate::common::*;
use rocmc::ir::reference::gelu16;
use std::path::Path;

/// The header text (without spaces) and the data of an .npy file.
fn parse_npy(path: &Path) -> (String, Vec<u8>) {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&b[..6], b"\x93NUMPY", "{}", path.display());
    let (len, start) = match b[6] {
        1 => (u16::from_le_bytes([b[8], b[9]]) as usize, 10),
        _ => (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12),
    };
    // Spaces removed: `(5, )` and `(5,)` are the same tuple.
    let header: String = String::from_utf8(b[start..start + len].to_vec())
        .unwrap()
        .chars()
        .filter(|c| *c != ' ')
        .collect();
    (header, b[start + len..].to_vec())
}

fn f32s(data: &[u8]) -> Vec<f32> {
    data.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn run_ok(dir: &Path, args: &[&str]) -> String {
    let out = rocmc(dir, args);
    assert!(
        out.status.success(),
        "{args:?}:\n{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

#[test]
fn given_inputs_are_used_and_every_tensor_is_written_out() {
    let d = tempfile::tempdir().unwrap();
    let v = example("vadd").to_string_lossy().into_owned();
    let a: Vec<u8> = [1.0f32, 2.0, 3.5, -4.0, 1e30]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    std::fs::write(d.path().join("a.npy"), npy_file("<f4", &[5], &a)).unwrap();
    // n is read off a.npy's shape; B is the constant 10.
    let stdout = run_ok(
        d.path(),
        &[
            "run",
            &v,
            "--input",
            "A=a.npy",
            "--input",
            "B=const:10",
            "--output",
            "out",
        ],
    );
    assert!(stdout.contains("(n=5)"), "{stdout}");
    let (h, c) = parse_npy(&d.path().join("out/outputs/C.npy"));
    assert!(
        h.contains("'descr':'<f4'") && h.contains("'shape':(5,)"),
        "{h}"
    );
    assert_eq!(f32s(&c), [11.0, 12.0, 13.5, 6.0, 1e30]);
    let (_, r) = parse_npy(&d.path().join("out/reference/C.npy"));
    assert_eq!(f32s(&r), f32s(&c));
    let (_, b) = parse_npy(&d.path().join("out/inputs/B.npy"));
    assert_eq!(f32s(&b), [10.0; 5]);
    let (_, a2) = parse_npy(&d.path().join("out/inputs/A.npy"));
    assert_eq!(a2, a, "the given input is written back unchanged");
}

#[test]
fn written_inputs_run_again_to_the_same_results() {
    let d = tempfile::tempdir().unwrap();
    let e = example("embedding").to_string_lossy().into_owned();
    run_ok(
        d.path(),
        &[
            "run",
            &e,
            "--size",
            "T=37",
            "--size",
            "V=1000",
            "--input",
            "ids=uniform:0,V",
            "--input",
            "table=normal:0,3",
            "--output",
            "one",
        ],
    );
    let (h, ids) = parse_npy(&d.path().join("one/inputs/ids.npy"));
    assert!(h.contains("'<i4'") && h.contains("(37,)"), "{h}");
    let ids: Vec<i32> = ids
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert!(ids.iter().all(|i| (0..1000).contains(i)), "{ids:?}");
    assert!(ids.iter().any(|i| *i >= 500), "the whole range is drawn");
    let (h, _) = parse_npy(&d.path().join("one/inputs/table.npy"));
    assert!(h.contains("'<f2'") && h.contains("(1000,768"), "{h}");
    // Both inputs from the files: T comes from ids.npy, V from table.npy.
    let stdout = run_ok(
        d.path(),
        &[
            "run",
            &e,
            "--input",
            "ids=one/inputs/ids.npy",
            "--input",
            "table=one/inputs/table.npy",
            "--output",
            "two",
        ],
    );
    assert!(stdout.contains("(T=37 V=1000)"), "{stdout}");
    assert_eq!(
        std::fs::read(d.path().join("one/outputs/E.npy")).unwrap(),
        std::fs::read(d.path().join("two/outputs/E.npy")).unwrap()
    );
    // Choosing one tensor's values leaves the others' as they were.
    run_ok(
        d.path(),
        &[
            "run", &e, "--size", "T=37", "--size", "V=1000", "--output", "three",
        ],
    );
    run_ok(
        d.path(),
        &[
            "run",
            &e,
            "--size",
            "T=37",
            "--size",
            "V=1000",
            "--input",
            "ids=const:3",
            "--output",
            "four",
        ],
    );
    assert_eq!(
        std::fs::read(d.path().join("three/inputs/table.npy")).unwrap(),
        std::fs::read(d.path().join("four/inputs/table.npy")).unwrap()
    );
}

#[test]
fn a_distribution_over_the_full_byte_range_reaches_every_bin() {
    let d = tempfile::tempdir().unwrap();
    let h = example("histogram").to_string_lossy().into_owned();
    run_ok(
        d.path(),
        &[
            "run",
            &h,
            "--size",
            "n=20000",
            "--input",
            "X=uniform:0,256",
            "--output",
            "o",
        ],
    );
    let (_, counts) = parse_npy(&d.path().join("o/outputs/H.npy"));
    let counts: Vec<u32> = counts
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(counts.len(), 256);
    assert_eq!(counts.iter().sum::<u32>(), 20000);
    assert!(counts.iter().all(|c| *c > 0), "{counts:?}");
}

#[test]
fn tune_values_and_tolerances_come_from_the_command_line() {
    let d = tempfile::tempdir().unwrap();
    let s = example("softmax_tunable").to_string_lossy().into_owned();
    let out = run_ok(
        d.path(),
        &[
            "run",
            &s,
            "--size",
            "rows=5",
            "--size",
            "cols=700",
            "--tune",
            "T=128,U=2",
        ],
    );
    assert!(out.contains("tune values: T=128 U=2"), "{out}");
    let out = rocmc(
        d.path(),
        &[
            "run", &s, "--size", "rows=5", "--size", "cols=700", "--tune", "T=100",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("100 is not a candidate"),
        "{}",
        text(&out.stderr)
    );
    // softmax's sums are reassociated: not bit-exact, so a zero tolerance
    // fails and names itself; a per-tensor one overrides it.
    let sm = example("softmax").to_string_lossy().into_owned();
    let base = ["run", &sm, "--size", "rows=7", "--size", "cols=300"];
    let strict = rocmc(d.path(), &[&base[..], &["--tolerance", "0"]].concat());
    assert_ne!(strict.status.code(), Some(0));
    assert!(
        text(&strict.stdout).contains("0e0  MISMATCH"),
        "{}",
        text(&strict.stdout)
    );
    let out = run_ok(
        d.path(),
        &[&base[..], &["--tolerance", "0", "--tolerance", "Y=1e-3"]].concat(),
    );
    assert!(out.contains("1e-3  ok"), "{out}");
}

/// `f16(gelu(x))` of an f32 `x`: the GELU whose result is rounded to 16 bits.
const GELU16: &str = "[kernel]\nname = \"g\"\nsizes = [\"n\"]\n\n[inputs]\nX = { dtype = \"f32\", shape = [\"n\"] }\n\n\
    [[stage]]\ncompute = \"Y[i] = f16(gelu(X[i]))\"\nshape = [\"n\"]\n";

/// On the GPUs the short GELU divides by the hardware's approximate
/// reciprocal (`rcp.approx.ftz.f32`, `v_rcp_f32`), not the IEEE division's
/// sequence; the CPU divides. Its accuracy there is checked on the GPU by
/// `rocmc-gpu-check gelu16` (bench/gpu/runs/h100-gpt2-5: 65,542 of 65,546
/// points correctly rounded, the rest one f16 ulp away).
#[test]
fn the_gpus_short_gelu_takes_the_approximate_reciprocal() {
    let src = GELU16;
    let emit = rocmc::Emit {
        asm: true,
        ..Default::default()
    };
    let ptx = rocmc::compile("g.toml", src, &rocmc::Options::new("sm_90"), emit)
        .unwrap()
        .asm
        .unwrap();
    assert!(ptx.contains("rcp.approx.ftz.f32") && !ptx.contains("div.rn.f32"));
    let (dis, _) = amd_code("g.toml", src, "gfx942");
    assert!(
        dis.contains("v_rcp_f32") && !dis.contains("v_div_scale"),
        "{dis}"
    );
    // An f32 result keeps the exact division.
    let f32_src = src.replace("f16(gelu(X[i]))", "gelu(X[i]) / X[i]");
    let ptx = rocmc::compile("g.toml", &f32_src, &rocmc::Options::new("sm_90"), emit)
        .unwrap()
        .asm
        .unwrap();
    assert!(ptx.contains("div.rn.f32") && !ptx.contains("rcp.approx"));
}

/// `f16(gelu(x))` of an f32 `x` compiles to the short GELU (plain f32,
/// the target's approximate 2^x): on the CPU device, over 2^16 points of
/// [-12, 12] and the special values, every result is the correctly
/// rounded f16 of the exact GELU or its neighbour.
#[test]
fn a_gelu_rounded_to_f16_is_within_one_ulp_of_the_exact_value() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("g.toml"), GELU16).unwrap();
    let xs = gelu16::points();
    let bytes: Vec<u8> = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
    std::fs::write(d.path().join("x.npy"), npy_file("<f4", &[xs.len()], &bytes)).unwrap();
    run_ok(
        d.path(),
        &[
            "run", "g.toml", "--device", "cpu", "--input", "X=x.npy", "--output", "out",
        ],
    );
    let (h, y) = parse_npy(&d.path().join("out/outputs/Y.npy"));
    assert!(h.contains("'descr':'<f2'"), "{h}");
    let (mut exact, mut far) = (0, Vec::new());
    for (k, (x, b)) in xs.iter().zip(y.chunks_exact(2)).enumerate() {
        let want = gelu16::exact(*x);
        let got = u16::from_le_bytes([b[0], b[1]]);
        match gelu16::ulps(got, want) {
            0 => exact += 1,
            1 => {}
            _ => far.push((k, xs[k], got, want)),
        }
    }
    assert!(
        far.is_empty(),
        "more than one f16 ulp away: {:?}",
        &far[..far.len().min(8)]
    );
    assert!(
        exact * 100 >= xs.len() * 99,
        "{exact} of {} correctly rounded",
        xs.len()
    );
}
