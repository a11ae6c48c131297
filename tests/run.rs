//! `rocmc run --device cpu`: every example, scheduled and lowered, compiled
//! for the host by LLVM and run, agrees with the reference interpreter.

use crate::common::*;

fn ok(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "rocmc failed:\n{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Sizes for an example: small, different per size and per seed, rarely a
/// multiple of any tile factor; conv2d's spatial sizes at least 3.
fn sizes_for(name: &str, seed: u64) -> Vec<String> {
    let src = std::fs::read_to_string(example(name)).unwrap();
    let k = rocmc::ir::parse_kernel(name, &src).unwrap();
    let span = match k.sizes.len() {
        0..=2 => 150,
        3 => 90,
        _ => 9,
    };
    let picked: Vec<i64> = (0..k.sizes.len())
        .map(|i| 3 + ((seed * 7919 + i as u64 * 104_729) % span) as i64)
        .collect();
    // Sizes the kernel states are multiples (`divisible`) become so, and
    // the interpreter's work stays within the budget.
    k.sizes
        .iter()
        .zip(k.fit_work(&picked, WORK_BUDGET))
        .map(|(s, v)| format!("{}={v}", s.name))
        .collect()
}

#[test]
fn every_example_matches_the_interpreter_on_the_cpu() {
    let d = tempfile::tempdir().unwrap();
    for name in examples() {
        for seed in [1, 2, 3] {
            let mut args = vec![
                "run".to_string(),
                example(&name).to_string_lossy().into_owned(),
                "--device".into(),
                "cpu".into(),
                "--seed".into(),
                seed.to_string(),
            ];
            for s in sizes_for(&name, seed) {
                args.push("--size".into());
                args.push(s);
            }
            let out = rocmc(
                d.path(),
                &args.iter().map(String::as_str).collect::<Vec<_>>(),
            );
            let table = ok(&out);
            assert!(!table.contains("MISMATCH"), "{name}\n{table}");
            assert!(
                table
                    .lines()
                    .filter(|l| l.trim_end().ends_with(" ok"))
                    .count()
                    >= 1,
                "{name}\n{table}"
            );
        }
    }
}

/// Without contraction and without approximated math functions, the
/// compiled kernel is bit-identical to the interpreter wherever no float
/// sum is involved (the interpreter defines a sum in f64, rounded once,
/// which no f32 order reproduces bit for bit); saxpy's and bias2d's
/// multiply-adds would differ if contracted into FMAs.
#[test]
fn without_contraction_results_are_exact() {
    let d = tempfile::tempdir().unwrap();
    for name in ["vadd", "saxpy", "bias2d", "transpose"] {
        let mut args = vec![
            "run".to_string(),
            example(name).to_string_lossy().into_owned(),
            "--fp-contract".into(),
            "off".into(),
        ];
        for s in sizes_for(name, 5) {
            args.push("--size".into());
            args.push(s);
        }
        let table = ok(&rocmc(
            d.path(),
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
        ));
        for line in table.lines().skip(2).filter(|l| !l.starts_with('*')) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(cols[3], "0.000e0", "{name}: not exact\n{table}");
        }
    }
}

#[test]
fn run_checks_its_arguments() {
    let d = tempfile::tempdir().unwrap();
    let v = example("vadd").to_string_lossy().into_owned();
    for (args, msg) in [
        (vec!["run", &v], "missing --size n=N"),
        (
            vec!["run", &v, "--size", "n=10", "--size", "m=3"],
            "the kernel has no size `m`",
        ),
        (
            vec!["run", &v, "--size", "n=-1"],
            "must be between 0 and 2147483647",
        ),
        (
            vec!["run", &v, "--size", "n=10", "--param", "alpha=2"],
            "no parameter `alpha`",
        ),
        (
            vec!["run", &v, "--size", "n=10", "--device", "cuda:9"],
            "no device `cuda:9`; this machine has: cpu",
        ),
    ] {
        let out = rocmc(d.path(), &args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains(msg),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    let bf = example("bias2d").to_string_lossy().into_owned();
    let out = rocmc(
        d.path(),
        &["run", &bf, "--size", "rows=20000", "--size", "cols=3"],
    );
    assert!(
        text(&out.stderr).contains("must be between 0 and 16384"),
        "{}",
        text(&out.stderr)
    );
    // Zero-sized runs are fine.
    ok(&rocmc(d.path(), &["run", &v, "--size", "n=0"]));
}

/// Every example compiles for CDNA2, CDNA3 and RDNA3 with no scratch memory
/// and no spills: accumulators stay in registers.
#[test]
fn examples_compile_for_three_targets_without_spills() {
    let targets = ["gfx90a", "gfx942", "gfx1100"];
    for name in examples() {
        let src = std::fs::read_to_string(example(&name)).unwrap();
        // An unscheduled attention or matrix product gets each target's
        // own tiles and launch shape (wave64 and wave32 differ), which one
        // build for several targets refuses: one target at a time. The
        // rest in one build (a third of the front-end work).
        let per_target = src.contains("attention(") || !src.contains("schedule = [");
        let builds: Vec<String> = match per_target {
            true => targets.iter().map(|t| t.to_string()).collect(),
            false => vec![targets.join(",")],
        };
        for mcpu in builds {
            let arts = rocmc::compile_all(
                &name,
                &src,
                &rocmc::Options::new(&mcpu),
                rocmc::Emit {
                    code_object: true,
                    ..Default::default()
                },
            )
            .unwrap();
            for a in arts {
                let co = rocmc::linker::codeobject::read(&a.code_object.unwrap()).unwrap();
                for k in &co.kernels {
                    let ctx = format!("{name} / {} on {}", k.name, a.target);
                    assert_eq!(k.private_segment_fixed_size, 0, "{ctx}: scratch");
                    assert_eq!(k.vgpr_spill_count + k.sgpr_spill_count, 0, "{ctx}: spills");
                }
            }
        }
    }
}

/// Every math function, lowered through LLVM intrinsics or rocmc's own
/// expansions, agrees with the interpreter's f64 functions.
#[test]
fn every_math_function_matches_the_interpreter() {
    let d = tempfile::tempdir().unwrap();
    let stage = |name: &str, expr: &str| {
        format!("[[stage]]\ncompute = \"{name}[i] = {expr}\"\nshape = [\"n\"]\nschedule = [\"o, t = split(i, 64)\", \"bind(o, blockIdx.x)\", \"bind(t, threadIdx.x)\"]\n")
    };
    let mut src = String::from("[kernel]\nname = \"math\"\nsizes = [\"n\"]\n[inputs]\nX = { dtype = \"f32\", shape = [\"n\"] }\nY = { dtype = \"f32\", shape = [\"n\"] }\n");
    for (name, expr) in [
        ("Exp", "exp(X[i] * 4.0) + exp2(Y[i] * 4.0)"),
        ("Log", "log(abs(X[i]) + 0.01) + log2(abs(Y[i]) + 0.01)"),
        ("Sqrt", "sqrt(abs(X[i])) + rsqrt(abs(Y[i]) + 0.01)"),
        (
            "Tanh",
            "tanh(X[i] * 5.0) + tanh(Y[i] * 0.01) + sigmoid(X[i] * 8.0)",
        ),
        ("Gelu", "gelu(X[i] * 6.0)"),
        ("Erf", "erf(X[i] * 3.0) + erf(Y[i] * 0.001)"),
        (
            "Pow",
            "pow(abs(X[i]) + 0.5, Y[i] * 4.0) + pow(X[i] * 2.0, 3.0) + pow(X[i], 0.0)",
        ),
        (
            "Round",
            "floor(X[i] * 10.0) + ceil(Y[i] * 10.0) + abs(X[i]) + fma(X[i], Y[i], 1.0)",
        ),
    ] {
        src.push_str(&stage(name, expr));
    }
    std::fs::write(d.path().join("math.toml"), src).unwrap();
    for contract in ["fast", "off"] {
        let table = ok(&rocmc(
            d.path(),
            &[
                "run",
                "math.toml",
                "--size",
                "n=4000",
                "--fp-contract",
                contract,
            ],
        ));
        assert_eq!(
            table
                .lines()
                .filter(|l| l.trim_end().ends_with(" ok"))
                .count(),
            8,
            "{table}"
        );
    }
}

/// Outputs staged through LDS (cache_write), alone and with a staged input,
/// through LLVM on the CPU and compiled for a GPU.
#[test]
fn staged_writes_run_through_llvm() {
    let d = tempfile::tempdir().unwrap();
    let src = std::fs::read_to_string(example("transpose")).unwrap();
    for (name, steps) in [
        ("write.toml", r#""BS = cache_write(B, shared, io, pad=1)""#),
        (
            "both.toml",
            r#""AS = cache_read(A, shared, io, pad=1)", "BS = cache_write(B, shared, io, pad=1)""#,
        ),
    ] {
        let k = src.replace(r#""AS = cache_read(A, shared, io, pad=1)""#, steps);
        assert!(k.contains("cache_write"), "{k}");
        std::fs::write(d.path().join(name), k).unwrap();
        for sizes in [
            ["rows=70", "cols=45"],
            ["rows=32", "cols=64"],
            ["rows=1", "cols=3"],
        ] {
            let table = ok(&rocmc(
                d.path(),
                &["run", name, "--size", sizes[0], "--size", sizes[1]],
            ));
            assert!(
                table.contains(" ok") && !table.contains("MISMATCH"),
                "{name} {sizes:?}\n{table}"
            );
        }
        ok(&rocmc(
            d.path(),
            &["build", "-q", "--mcpu", "gfx90a,gfx1100", name],
        ));
    }
}

#[test]
fn compute_at_and_register_writes_run_through_llvm() {
    let d = tempfile::tempdir().unwrap();
    let matmul = |producer: &str| {
        format!(
            r#"
[kernel]
name = "mm"
sizes = ["M", "N", "K"]
max = {{ M = 4096, N = 4096, K = 4096 }}
[inputs]
A = {{ dtype = "f32", shape = ["M", "K"] }}
B = {{ dtype = "f32", shape = ["K", "N"] }}
[[stage]]
compute = "P[i, k] = A[i, k] * 2.0 + 1.0"
shape = ["M", "K"]
schedule = [{producer}]
[[stage]]
compute = "C[i, j] = sum(P[i, k] * B[k, j], k)"
shape = ["M", "N"]
reduce = {{ k = "K" }}
schedule = ["io, jo, ii, ji = tile(i, j, 4, 8)", "ko, ki = split(k, 6)", "reorder(ko, ki)", "bind(io, blockIdx.y)", "bind(jo, blockIdx.x)", "bind(ii, threadIdx.y)", "bind(ji, threadIdx.x)"]
"#
        )
    };
    let kernels = [
        // P per thread, in registers, at each step of the reduction loop.
        ("local.toml", matmul(r#""compute_at(C, ko)""#)),
        // P by the work-group, in LDS, at each step of the reduction loop.
        (
            "shared.toml",
            matmul(
                r#""compute_at(C, ko)", "po, pi = split(k, 8)", "bind(i, threadIdx.y)", "bind(pi, threadIdx.x)""#,
            ),
        ),
        // Row statistics computed in the kernel, each staging its reads of X in LDS.
        (
            "cached.toml",
            std::fs::read_to_string(example("softmax"))
                .unwrap()
                .replace(
                    r#""bind(ci, threadIdx.x)"]"#,
                    r#""bind(ci, threadIdx.x)", "XS = cache_read(X, shared, co)"]"#,
                ),
        ),
        // Outputs through a per-thread register tile.
        (
            "write.toml",
            std::fs::read_to_string(example("transpose"))
                .unwrap()
                .replace(
                    r#""AS = cache_read(A, shared, io, pad=1)""#,
                    r#""BL = cache_write(B, local, io)""#,
                ),
        ),
    ];
    for (name, src) in &kernels {
        assert!(
            src.contains("compute_at") || src.contains("cache_write(B, local"),
            "{name}"
        );
        assert!(!name.starts_with("cached") || src.matches("XS = ").count() == 2);
        std::fs::write(d.path().join(name), src).unwrap();
        let sizes: &[&[&str]] = if name.starts_with("write") || name.starts_with("cached") {
            &[
                &["rows=70", "cols=45"],
                &["rows=1", "cols=3"],
                &["rows=5", "cols=700"],
            ]
        } else {
            &[
                &["M=13", "N=17", "K=23"],
                &["M=1", "N=1", "K=1"],
                &["M=8", "N=16", "K=12"],
            ]
        };
        for s in sizes {
            let mut args = vec!["run", name];
            for kv in *s {
                args.extend(["--size", kv]);
            }
            let table = ok(&rocmc(d.path(), &args));
            assert!(
                table.contains(" ok") && !table.contains("MISMATCH"),
                "{name} {s:?}\n{table}"
            );
            // P lives in registers or LDS: only C is compared, so only C is in memory.
            assert!(!table.contains("\nP "), "{name}\n{table}");
        }
        ok(&rocmc(
            d.path(),
            &["build", "-q", "--mcpu", "gfx90a,gfx942,gfx1100", name],
        ));
    }
}

/// `rocmc run` has one path for every device (`cuda:N`, `amdgpu:N`,
/// `remote://…` and the CPU device as a compiled shared object); here it
/// runs on this machine's CPU device and must match the interpreter, and a
/// device the machine lacks is named in the error.
#[test]
fn run_through_the_local_device_interface() {
    let root = root();
    let src = std::fs::read_to_string(root.join("examples/matmul_lds.toml")).unwrap();
    let front = rocmc::frontend("matmul_lds.toml", &src).unwrap();
    let mut spec = rocmc::run::RunSpec::new(&[67, 45, 33], &Default::default(), 3);
    spec.keep = true;
    let r = rocmc::run::run_device(
        &front,
        "cpu",
        &spec,
        rocmc::run::GpuRun {
            check: true,
            bench: 2,
        },
        &rocmc::Options::new("x86-64"),
    )
    .unwrap();
    assert!(!r.comparisons.is_empty());
    assert!(r.comparisons.iter().all(|c| c.ok()), "{:?}", r.comparisons);
    assert_eq!(r.kernel_ms.len(), 1);
    // What the device computed comes back beside the interpreter's.
    let (got, want) = (&r.kept.outputs[0], &r.kept.reference[0]);
    assert_eq!((got.name.as_str(), &got.shape[..]), ("C", &[67i64, 45][..]));
    assert_eq!(got.shape, want.shape);
    assert_eq!(r.kept.inputs.len(), 2);
    assert!(rocmc::run::errors(&got.values, &want.values).1 < 1e-4);
    let out = rocmc(
        &root,
        &[
            "run",
            "--device",
            "cuda:7",
            "examples/vadd.toml",
            "--size",
            "n=10",
        ],
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("no device `cuda:7`; this machine has: cpu"),
        "{}",
        text(&out.stderr)
    );
}

/// A compiled module runs through the same device path as a kernel file:
/// a CPU shared object on the `cpu` device, with inputs from its launch
/// document; GPU code on the CPU is refused, and so is a device name the
/// machine lacks, before anything runs.
#[test]
fn a_compiled_module_runs_on_the_device_that_loads_it() {
    let d = tempfile::tempdir().unwrap();
    let v = example("vadd").to_string_lossy().into_owned();
    for (mcpu, out) in [("x86-64", "v.so"), ("sm_90", "v.ptx")] {
        let b = rocmc(d.path(), &["build", "-q", "--mcpu", mcpu, &v, "-o", out]);
        assert!(b.status.success(), "{}", text(&b.stderr));
    }
    let out = rocmc(
        d.path(),
        &["run", "v.so", "--size", "n=5000", "--bench", "3"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let so = text(&out.stdout);
    assert!(
        so.contains("v.so ran on host CPU") && so.contains("vadd: median"),
        "{so}"
    );
    for (args, msg) in [
        (vec!["run", "v.ptx", "--size", "n=10"], "runs on a GPU only"),
        (
            vec!["run", "v.so", "--size", "n=10", "--device", "gpu7"],
            "no device `gpu7`",
        ),
        (vec!["run", "v.so", "--device", "cpu"], "missing --size n=N"),
    ] {
        let out = rocmc(d.path(), &args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains(msg),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}

/// The library's runs check sizes as the command line does: past a size's
/// `max` (the bound the code was compiled for, which sizes LDS arrays) a
/// run is refused naming the size, never run off the end of an array (the
/// fuzzer's random sizes once drove the race-checked loop IR past a
/// 128-element LDS array). `fit_sizes` keeps random sizes within bounds.
#[test]
fn library_runs_refuse_sizes_past_their_bound() {
    let src = r#"[kernel]
name = "bounded"
sizes = ["n", "m"]
max = { m = 128 }
[inputs]
A = { dtype = "f32", shape = ["n", "m"] }
[[stage]]
compute = "E[r, c] = A[r, c] * 2.0"
shape = ["n", "m"]
schedule = ["compute_at(Y, r)", "co, ci = split(c, 64)", "bind(ci, threadIdx.x)"]
[[stage]]
compute = "Y[r, j] = A[r, j] - E[r, j]"
shape = ["n", "m"]
schedule = ["bind(r, blockIdx.x)", "jo, ji = split(j, 64)", "bind(ji, threadIdx.x)"]
"#;
    let f = rocmc::frontend("bounded.toml", src).unwrap();
    assert_eq!(f.kernel.fit_sizes(&[3, 130]), vec![3, 128]);
    let opts = rocmc::Options::new("gfx942");
    let gpu = rocmc::targets(&opts).unwrap().remove(0);
    let lowered = f.for_target(&gpu, &opts).unwrap();
    let none = std::collections::HashMap::new();
    for sizes in [[3, 130], [3, -1]] {
        let spec = rocmc::run::RunSpec::new(&sizes, &none, 1);
        let want = format!("size `m` = {}: must be between 0 and 128", sizes[1]);
        let e = rocmc::run::run_loops(&lowered, &spec)
            .unwrap_err()
            .to_string();
        assert!(e.contains(&want), "{e}");
        let e = rocmc::run::run_cpu(&f, &sizes, &none, 1, false)
            .unwrap_err()
            .to_string();
        assert!(e.contains(&want), "{e}");
    }
    let spec = rocmc::run::RunSpec::new(&[3, 128], &none, 1);
    for c in rocmc::run::run_loops(&lowered, &spec).unwrap() {
        assert!(c.ok(), "{c:?}");
    }
}
