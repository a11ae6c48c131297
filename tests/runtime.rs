//! The HIP runtime without an AMD GPU: every path fails cleanly and says
//! why, with Debian's real libamdhip64; launches are checked against real
//! code objects built by rocmc before any GPU would see them.

use crate::common::*;
use rocmc::runtime_hip::check::{check_launch, ArgValue};
use rocmc::runtime_hip::{Error, Hip};

#[test]
fn a_missing_library_names_where_it_looked() {
    let e = Hip::load_from(Some(std::path::Path::new("/nonexistent/hip")))
        .err()
        .expect("no library there");
    let m = e.to_string();
    assert!(matches!(e, Error::NotFound { .. }), "{m}");
    assert!(
        m.contains("HIP runtime not found (looked in /nonexistent/hip; set ROCMC_HIP_LIBRARY"),
        "{m}"
    );
    let d = tempfile::tempdir().unwrap();
    let m = Hip::load_from(Some(d.path())).err().unwrap().to_string();
    for so in ["libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"] {
        assert!(m.contains(so), "a folder is searched for {so}: {m}");
    }
    let bogus = d.path().join("libamdhip64.so.6");
    std::fs::write(&bogus, b"not a library").unwrap();
    assert!(matches!(
        Hip::load_from(Some(&bogus)),
        Err(Error::NotFound { .. })
    ));
}

/// Debian's libamdhip64-5 (installed by scripts/install-deps.sh) is a real
/// HIP runtime; on a machine without an AMD GPU it must say so.
#[test]
fn the_real_library_without_a_gpu_says_no_device() {
    let e = Hip::load().err().expect("this machine has no AMD GPU");
    let m = e.to_string();
    assert!(
        matches!(e, Error::NoDevice { .. }),
        "expected NoDevice (is libamdhip64-5 installed?): {m}"
    );
    assert!(m.starts_with("no AMD GPU visible"), "{m}");
    assert!(
        m.contains("libamdhip64.so.5") && m.contains("hipError"),
        "{m}"
    );
}

#[test]
fn rocmc_run_on_a_gpu_fails_cleanly_without_one() {
    let d = tempfile::tempdir().unwrap();
    let v = example("vadd").to_string_lossy().into_owned();
    let out = rocmc(
        d.path(),
        &[
            "run", &v, "--size", "n=64", "--device", "amdgpu:0", "--check",
        ],
    );
    // A device the machine lacks is the user's to fix (exit 2), as for
    // every kind of device: named, with what the machine has and why.
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).starts_with("error: no device `amdgpu:0`; this machine has: cpu")
            && text(&out.stderr).contains("no AMD GPU visible"),
        "{}",
        text(&out.stderr)
    );
    let out = std::process::Command::new(rocmc_bin())
        .args(["run", &v, "--size", "n=64", "--device", "amdgpu"])
        .env("ROCMC_HIP_LIBRARY", "/nonexistent/libamdhip64.so")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("HIP runtime not found (looked in /nonexistent/libamdhip64.so"),
        "{}",
        text(&out.stderr)
    );
}

fn code_object(name: &str) -> rocmc::linker::codeobject::CodeObject {
    code_object_for(&example(name), "gfx90a")
}

/// The code object of kernel file `path` for `mcpu`, as the linker reads it.
fn code_object_for(path: &std::path::Path, mcpu: &str) -> rocmc::linker::codeobject::CodeObject {
    let src = std::fs::read_to_string(path).unwrap();
    let art = rocmc::compile(
        &path.to_string_lossy(),
        &src,
        &rocmc::Options::new(mcpu),
        rocmc::Emit {
            code_object: true,
            ..Default::default()
        },
    )
    .unwrap();
    rocmc::linker::codeobject::read(&art.code_object.unwrap()).unwrap()
}

#[test]
fn launches_are_checked_against_the_code_objects_metadata() {
    let co = code_object("vadd");
    let k = &co.kernels[0];
    let l = co.launch.as_ref();
    let buf = |len| ArgValue::Buffer { dtype: "f32", len };
    let good = [buf(1000), buf(1000), buf(1000), ArgValue::Size(1000)];
    assert_eq!(check_launch(k, l, &good).unwrap(), ([16, 1, 1], [64, 1, 1]));
    let cases: Vec<(Vec<ArgValue>, &str)> = vec![
        (good[..3].to_vec(), "takes 4 arguments, 3 given"),
        (
            vec![
                buf(1000),
                buf(1000),
                ArgValue::Size(3),
                ArgValue::Size(1000),
            ],
            "argument 2 `C` is a global_buffer of 8 bytes, but the size 3 was given",
        ),
        (
            vec![
                buf(1000),
                ArgValue::Buffer {
                    dtype: "f64",
                    len: 1000,
                },
                buf(1000),
                ArgValue::Size(1000),
            ],
            "buffer `B` holds f32, but a buffer of f64 was given",
        ),
        (
            vec![buf(1000), buf(999), buf(1000), ArgValue::Size(1000)],
            "buffer `B` must hold at least 1000 elements for these sizes, but has 999",
        ),
        (
            vec![buf(1000), buf(1000), buf(1000), ArgValue::Size(-5)],
            "size `n` = -5 is outside",
        ),
    ];
    for (args, msg) in cases {
        let e = check_launch(k, l, &args).unwrap_err().to_string();
        assert!(
            e.contains("launch of `vadd`") && e.contains(msg),
            "{e}\nwanted: {msg}"
        );
    }
}

/// A kernel whose sizes have no `max` (tests/regress/transpose4d_unbounded):
/// the HIP runtime refuses sizes past its fused loop's 32-bit counter and
/// a grid past the 2^32 - 1 work items an AMD dispatch counts per
/// dimension, before the GPU sees either (buffer lengths are only numbers
/// here: nothing is allocated).
#[test]
fn launch_requirements_and_amd_grid_limits_are_checked() {
    let co = code_object_for(
        &root().join("tests/regress/transpose4d_unbounded.toml"),
        "gfx942",
    );
    let (k, l) = (&co.kernels[0], co.launch.as_ref());
    let args = |len: usize, [b, h, s, d]: [i32; 4]| {
        let buf = ArgValue::Buffer { dtype: "f16", len };
        vec![
            buf.clone(),
            buf,
            ArgValue::Size(b),
            ArgValue::Size(h),
            ArgValue::Size(s),
            ArgValue::Size(d),
        ]
    };
    assert_eq!(
        check_launch(k, l, &args(2 * 3 * 5 * 70, [2, 3, 5, 70])).unwrap(),
        ([18, 1, 1], [32, 4, 1])
    );
    let e = check_launch(k, l, &args(1, [1 << 16, 1 << 16, 1, 32]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("loop `b_h_d_o` of stage `O` runs (B * H) * ceil(D / 32) = 4294967296 times"),
        "{e}"
    );
    let e = check_launch(k, l, &args(1 << 33, [1 << 14, 1 << 14, 1, 32]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("268435456 work-groups of 32 along x, more than the 2^32 - 1 work items"),
        "{e}"
    );
}

#[test]
fn scalars_shapes_and_bounds_are_checked() {
    let co = code_object("saxpy");
    let (k, l) = (&co.kernels[0], co.launch.as_ref());
    let b = ArgValue::Buffer {
        dtype: "f32",
        len: 10,
    };
    let f32_alpha = ArgValue::Scalar {
        dtype: "f32",
        bytes: 2f32.to_le_bytes().to_vec(),
    };
    assert!(check_launch(
        k,
        l,
        &[
            b.clone(),
            b.clone(),
            b.clone(),
            ArgValue::Size(10),
            f32_alpha
        ]
    )
    .is_ok());
    let f64_alpha = ArgValue::Scalar {
        dtype: "f64",
        bytes: 2f64.to_le_bytes().to_vec(),
    };
    let e = check_launch(
        k,
        l,
        &[
            b.clone(),
            b.clone(),
            b.clone(),
            ArgValue::Size(10),
            f64_alpha,
        ],
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("argument 4 `alpha` is a by_value of 4 bytes, but a f64 scalar was given"),
        "{e}"
    );

    // 2-D shapes and declared maxima.
    let co = code_object("bias2d");
    let (k, l) = (&co.kernels[0], co.launch.as_ref());
    let s = ArgValue::Scalar {
        dtype: "f32",
        bytes: 1f32.to_le_bytes().to_vec(),
    };
    let args = |rows: i32, cols: i32, x: usize| {
        vec![
            ArgValue::Buffer {
                dtype: "f32",
                len: x,
            },
            ArgValue::Buffer {
                dtype: "f32",
                len: cols as usize,
            },
            ArgValue::Buffer {
                dtype: "f32",
                len: x,
            },
            ArgValue::Size(rows),
            ArgValue::Size(cols),
            s.clone(),
        ]
    };
    assert_eq!(
        check_launch(k, l, &args(33, 70, 33 * 70)).unwrap(),
        ([5, 3, 1], [16, 16, 1])
    );
    let e = check_launch(k, l, &args(33, 70, 33 * 70 - 1))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("buffer `X` must hold at least 2310 elements"),
        "{e}"
    );
    let e = check_launch(k, l, &args(20000, 2, 40000))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("size `rows` = 20000 is outside 0..=16384"),
        "{e}"
    );
}

/// `rocmc run FILE.hipfb` takes sizes from the code object's launch
/// geometry, checks them before loading HIP, and refuses what it cannot do.
#[test]
fn running_a_code_object_checks_before_loading_hip() {
    let d = tempfile::tempdir().unwrap();
    let s = example("saxpy").to_string_lossy().into_owned();
    let out = rocmc(
        d.path(),
        &[
            "build",
            "-q",
            "--mcpu",
            "gfx90a,gfx1100",
            &s,
            "-o",
            "s.hipfb",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    for (args, code, msg) in [
        (
            vec!["run", "s.hipfb", "--device", "amdgpu", "--size", "n=1000"],
            2,
            "no AMD GPU visible",
        ),
        (
            vec!["run", "s.hipfb", "--device", "amdgpu"],
            2,
            "missing --size n=N",
        ),
        (
            vec!["run", "s.hipfb", "--device", "amdgpu", "--size", "n=-3"],
            2,
            "must be between 0 and",
        ),
        (
            vec!["run", "s.hipfb", "--size", "n=10"],
            2,
            "runs on a GPU only",
        ),
        (
            vec![
                "run", "s.hipfb", "--device", "amdgpu", "--size", "n=10", "--check",
            ],
            2,
            "--check needs the kernel file",
        ),
    ] {
        let out = rocmc(d.path(), &args);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains(msg),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    // A code object rocmc did not build has no launch geometry.
    let hip = clang_hip(
        d.path(),
        "extern \"C\" __attribute__((global)) void k(float *a) { a[0] = 1.0f; }\n",
        "gfx90a",
        5,
    );
    let out = rocmc(
        d.path(),
        &["run", hip.to_str().unwrap(), "--device", "amdgpu"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("no rocmc launch geometry"),
        "{}",
        text(&out.stderr)
    );
}

/// Every dtype a kernel file may declare is one a launch can pass: the
/// runtimes once refused 8-bit float buffers, so no fp8 kernel could run.
#[test]
fn every_kernel_dtype_is_a_buffer_dtype() {
    for d in rocmc::ir::DType::ALL {
        let got = rocmc::device::launch::dtype(d.name());
        assert_eq!(got, Some((d.name(), d.size())), "{d:?}");
    }
}
