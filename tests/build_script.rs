//! rocmc-build: the build-script API that runs the `rocmc` executable
//! instead of linking the compiler, and the offline kernels a crate commits
//! so it builds where no `rocmc` is installed. examples/vadd-app builds
//! through it, from its committed folder where no `rocmc` is on PATH (CI).

use crate::common::*;
use rocmc_build::{Error, Offline, Source};
use std::path::Path;

/// rocmc-build over this workspace's `rocmc`, one kernel file for gfx942
/// into `out`, no `cargo:` lines.
fn thin_gfx942(kernel: &Path, out: &Path) -> Result<rocmc_build::Outputs, Error> {
    rocmc_build::Build::new()
        .rocmc(rocmc_bin())
        .kernel(kernel)
        .mcpu("gfx942")
        .out_dir(out)
        .cargo_metadata(false)
        .try_compile()
}

/// Every file of `dir`, by name, with its bytes.
fn contents(dir: &Path) -> Vec<(String, Vec<u8>)> {
    files_in(dir)
        .into_iter()
        .map(|n| {
            let b = std::fs::read(dir.join(&n)).unwrap();
            (n, b)
        })
        .collect()
}

/// rocmc-build through the real executable writes byte for byte what the
/// in-process rocmc::Build writes, for a vendor build and for an
/// any-device build with tune values given per target.
#[test]
fn the_executable_writes_what_the_library_writes() {
    let linear = example("gpt2/kernels/linear");
    for any in [false, true] {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut thin = rocmc_build::Build::new();
        let mut lib = rocmc::Build::new();
        thin.rocmc(rocmc_bin())
            .out_dir(a.path())
            .cargo_metadata(false);
        lib.out_dir(b.path()).cargo_metadata(false);
        if any {
            thin.kernel(example("vadd"))
                .kernel_tuned_on(&linear, "sm_90", "Y_BM=64")
                .mcpu("sm_90")
                .mcpu("x86-64")
                .any_device();
            lib.kernel(example("vadd"))
                .kernel_tuned_on(&linear, "sm_90", "Y_BM=64")
                .mcpu("sm_90")
                .mcpu("x86-64")
                .any_device();
        } else {
            thin.kernel(example("vadd"))
                .kernel(example("saxpy"))
                .mcpu("gfx90a")
                .mcpu("gfx1100");
            lib.kernel(example("vadd"))
                .kernel(example("saxpy"))
                .mcpu("gfx90a")
                .mcpu("gfx1100");
        }
        let out = thin.try_compile().unwrap();
        lib.try_compile().unwrap();
        assert_eq!(
            out.source,
            Source::Compiled(rocmc_bin().to_path_buf(), "rocmc 0.1.0".into())
        );
        assert_eq!(out.launchers, a.path().join("rocmc_kernels.rs"));
        assert_eq!(
            out.modules.len() + 1,
            files_in(a.path()).len(),
            "{:?}",
            out.modules
        );
        let (ta, tb) = (contents(a.path()), contents(b.path()));
        assert_eq!(
            ta.iter().map(|f| &f.0).collect::<Vec<_>>(),
            tb.iter().map(|f| &f.0).collect::<Vec<_>>()
        );
        for ((n, x), (_, y)) in ta.iter().zip(&tb) {
            assert!(x == y, "{n} differs between rocmc-build and rocmc::Build");
        }
    }
}

/// A kernel mistake comes back once, with its file, line and column, from
/// the executable; the library's build prints it once too.
#[test]
fn a_kernel_error_is_reported_once_with_its_place() {
    let d = tempfile::tempdir().unwrap();
    let bad = d.path().join("bad.toml");
    std::fs::write(
        &bad,
        std::fs::read_to_string(example("vadd"))
            .unwrap()
            .replace("A[i] + B[i]", "A[i] + Q[i]"),
    )
    .unwrap();
    let e = thin_gfx942(&bad, d.path()).unwrap_err();
    let Error::Failed { message, .. } = &e else {
        panic!("{e:?}")
    };
    assert!(message.contains("bad.toml:"), "{message}");
    assert!(message.contains("`Q`"), "{message}");
    assert_eq!(
        message.matches("error").count(),
        1,
        "one error, printed once:\n{message}"
    );
    assert!(!d.path().join("rocmc_kernels.rs").exists());
    // No executable where ROCMC points: said, not taken for an absent one.
    let e = rocmc_build::Build::new()
        .rocmc(d.path().join("no-rocmc"))
        .kernel(example("vadd"))
        .mcpu("gfx942")
        .out_dir(d.path())
        .cargo_metadata(false)
        .try_compile()
        .unwrap_err();
    assert!(
        e.to_string().contains("no-rocmc is not an executable file"),
        "{e}"
    );
}

/// Written with rocmc, the offline folder serves a build without it,
/// byte for byte; a changed kernel file, other targets, an edited module
/// or a missing folder are refused, naming what differs.
#[test]
fn offline_kernels_serve_a_build_without_rocmc_and_refuse_stale_inputs() {
    let pkg = tempfile::tempdir().unwrap();
    let kernel = pkg.path().join("vadd.toml");
    let source = std::fs::read_to_string(example("vadd")).unwrap();
    std::fs::write(&kernel, &source).unwrap();
    let offline = pkg.path().join("rocmc-kernels");
    let build = |mode: Offline, mcpu: &str, out: &Path| {
        rocmc_build::Build::new()
            .rocmc(rocmc_bin())
            .kernel(&kernel)
            .mcpu(mcpu)
            .out_dir(out)
            .cargo_metadata(false)
            .offline(&offline)
            .offline_mode(mode)
            .try_compile()
    };
    // A mode without a folder is the script's mistake, said as such.
    let e = rocmc_build::Build::new()
        .kernel(&kernel)
        .mcpu("gfx942")
        .out_dir(pkg.path())
        .cargo_metadata(false)
        .offline_mode(Offline::Only)
        .try_compile()
        .unwrap_err();
    assert!(e.to_string().contains("offline_mode needs a folder"), "{e}");
    let missing = build(Offline::Only, "gfx942", pkg.path()).unwrap_err();
    assert!(
        missing.to_string().contains("there are none")
            && missing.to_string().contains("ROCMC_OFFLINE=write"),
        "{missing}"
    );
    let written = tempfile::tempdir().unwrap();
    build(Offline::Write, "gfx942", written.path()).unwrap();
    let manifest = std::fs::read_to_string(offline.join("MANIFEST")).unwrap();
    assert!(manifest.contains("compiler rocmc 0.1.0"), "{manifest}");
    assert!(
        manifest.contains("arguments --mcpu gfx942 --kernel"),
        "{manifest}"
    );
    let used = tempfile::tempdir().unwrap();
    let out = build(Offline::Only, "gfx942", used.path()).unwrap();
    assert_eq!(out.source, Source::Offline(offline.clone()));
    assert_eq!(contents(used.path()), contents(written.path()));
    assert_eq!(out.modules, vec![used.path().join("vadd.hipfb")]);

    let refused = |e: Error, what: &str| {
        let t = e.to_string();
        assert!(matches!(e, Error::Offline { .. }), "{t}");
        assert!(t.contains(what), "expected {what:?} in:\n{t}");
    };
    std::fs::write(&kernel, source.replace("A[i] + B[i]", "A[i] - B[i]")).unwrap();
    // Where rocmc is installed it compiles, and a stale folder is a warning.
    let fresh = build(Offline::Auto, "gfx942", used.path()).unwrap();
    assert!(matches!(fresh.source, Source::Compiled(..)));
    assert!(
        fresh
            .warnings
            .iter()
            .any(|w| w.contains("are out of date (kernel ") && w.contains("vadd.toml changed")),
        "{:?}",
        fresh.warnings
    );
    refused(
        build(Offline::Only, "gfx942", used.path()).unwrap_err(),
        "vadd.toml changed since they were written",
    );
    std::fs::write(&kernel, &source).unwrap();
    refused(
        build(Offline::Only, "gfx1100", used.path()).unwrap_err(),
        "arguments --mcpu gfx1100",
    );
    let mut bundle = std::fs::read(offline.join("vadd.hipfb")).unwrap();
    let last = bundle.len() - 1;
    bundle[last] ^= 1;
    std::fs::write(offline.join("vadd.hipfb"), &bundle).unwrap();
    refused(
        build(Offline::Only, "gfx942", used.path()).unwrap_err(),
        "vadd.hipfb was changed after it was written",
    );
    // Writing again replaces the folder's contents whole.
    build(Offline::Write, "gfx1100", written.path()).unwrap();
    build(Offline::Only, "gfx1100", used.path()).unwrap();
    assert_eq!(
        files_in(&offline),
        ["MANIFEST", "rocmc_kernels.rs", "vadd.hipfb"]
    );
}

/// The committed folder of examples/vadd-app is the one its build uses
/// without rocmc: built from the example's kernel files as they are, for
/// its targets, each output as written.
#[test]
fn the_example_app_commits_its_offline_kernels() {
    for (vendor, mcpus) in [("amd", "gfx90a,gfx1100"), ("nvidia", "sm_80,sm_90")] {
        let dir = root().join("examples/vadd-app/rocmc-offline").join(vendor);
        let m = std::fs::read_to_string(dir.join("MANIFEST")).unwrap();
        assert!(
            m.contains(&format!(
                "arguments --mcpu {mcpus} --kernel ../vadd.toml --kernel ../saxpy.toml\n"
            )),
            "{m}"
        );
        // The kernel files as they are now: a change to them needs the
        // folder written anew (README, "How correctness is checked"), here as
        // for CI's build.
        for k in ["vadd", "saxpy"] {
            let d = rocmc_build::offline::digest(&std::fs::read(example(k)).unwrap());
            assert!(
                m.contains(&format!("input {d} kernel ../{k}.toml\n")),
                "{vendor}: examples/{k}.toml changed since rocmc-offline/ was written; \
                 ROCMC=target/debug/rocmc ROCMC_OFFLINE=write cargo build -p vadd-app"
            );
        }
        for line in m.lines().filter(|l| l.starts_with("output ")) {
            let mut w = line.split(' ');
            let (d, name) = (w.nth(1).unwrap(), w.next().unwrap());
            let bytes = std::fs::read(dir.join(name)).unwrap();
            assert_eq!(rocmc_build::offline::digest(&bytes), d, "{vendor}: {name}");
        }
    }
}

/// Neither build API warns of one thread for a kernel whose sizes have no
/// `max` (its fused loop counts in 32 bits under a launch requirement;
/// the one-thread warning itself: tests/default_schedule.rs), and both
/// give the same warnings.
#[test]
fn unbounded_sizes_build_parallel_and_both_apis_agree() {
    let d = tempfile::tempdir().unwrap();
    let k = d.path().join("tr4.toml");
    std::fs::write(
        &k,
        "[kernel]\nname = \"tr4\"\nsizes = [\"B\", \"H\", \"S\", \"D\"]\n[inputs]\nX = { dtype = \"f16\", shape = [\"B\", \"H\", \"S\", \"D\"] }\n[[stage]]\ncompute = \"O[b, h, d, s] = X[b, h, s, d] * f16(0.5)\"\nshape = [\"B\", \"H\", \"D\", \"S\"]\n",
    )
    .unwrap();
    let lib = rocmc::Build::new()
        .kernel(&k)
        .mcpu("gfx942")
        .out_dir(d.path())
        .cargo_metadata(false)
        .try_compile()
        .unwrap();
    let thin = thin_gfx942(&k, d.path()).unwrap();
    assert_eq!(lib.warnings, thin.warnings);
    assert!(lib.warnings.is_empty(), "{:?}", lib.warnings);
}

/// The wheel (`scripts/build-wheel.sh`, python/pyproject.toml) carries the
/// workspace's compiler as the extension tests/python.rs tests, and the
/// `rocmc` command; its version is the crates' version.
#[test]
fn the_wheel_has_the_workspace_version() {
    let py = std::fs::read_to_string(root().join("python/pyproject.toml")).unwrap();
    let cargo = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let version = |text: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix("version = \""))
            .map(|v| v.trim_end_matches('"').to_string())
            .unwrap()
    };
    assert_eq!(version(&py), version(&cargo));
    // The extension the wheel imports is the one tests/python.rs tests.
    let ext = std::fs::read_to_string(root().join("python/Cargo.toml")).unwrap();
    assert!(py.contains("module-name = \"rocmc._rocmc\""), "{py}");
    assert!(ext.contains("name = \"_rocmc\""), "{ext}");
    assert!(py.contains("rocmc = \"rocmc._cli:main\""), "{py}");
}
