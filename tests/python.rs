//! The Python package (python/rocmc over the `_rocmc` extension this
//! workspace builds) run by Debian's Python 3 with its NumPy
//! (scripts/install-deps.sh installs python3-numpy): python/tests/test_api.py
//! compiles, loads and calls kernels on NumPy arrays on the CPU device,
//! checks every refusal, and runs the command line as `python -m rocmc`.

use crate::common::*;
use std::process::Command;

/// The package as pip would install it: the Python files and the
/// extension (`lib_rocmc.so` as `rocmc/_rocmc.abi3.so`).
fn package() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let pkg = d.path().join("rocmc");
    std::fs::create_dir(&pkg).unwrap();
    for f in std::fs::read_dir(root().join("python/rocmc")).unwrap() {
        let f = f.unwrap().path();
        if f.extension().is_some_and(|e| e == "py") {
            std::fs::copy(&f, pkg.join(f.file_name().unwrap())).unwrap();
        }
    }
    let so = workspace_bin("lib_rocmc.so");
    // A link, not a copy: the extension is 300 MB in a debug build.
    std::os::unix::fs::symlink(so, pkg.join("_rocmc.abi3.so")).unwrap();
    d
}

#[test]
fn the_python_api_runs_kernels_on_numpy_arrays() {
    let d = package();
    let out = Command::new("/usr/bin/python3")
        .arg(root().join("python/tests/test_api.py"))
        .env("PYTHONPATH", d.path())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .current_dir(root())
        .output()
        .expect("/usr/bin/python3 (scripts/install-deps.sh installs it with python3-numpy)");
    assert!(
        out.status.success(),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let said = text(&out.stdout);
    let n: u32 = said
        .trim()
        .strip_prefix("python api: ")
        .and_then(|s| s.strip_suffix(" checks passed"))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{said}"));
    // Every check ran (a script cut short by an early exit would report fewer).
    assert!(n >= 27, "{said}");
}
