//! Helpers shared by the end-to-end tests.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

pub fn example(name: &str) -> PathBuf {
    root().join("examples").join(format!("{name}.toml"))
}

/// Every example kernel file, sorted.
pub fn examples() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(root().join("examples"))
        .expect("examples/")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// The `rocmc` binary of this workspace, built if a lone `cargo test -p` did not.
pub fn rocmc_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let exe = std::env::current_exe().expect("test binary path");
        let dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("target/<profile>");
        let bin = dir.join("rocmc");
        let status = Command::new(env!("CARGO"))
            .args(["build", "-q", "-p", "rocmc", "--bin", "rocmc"])
            .current_dir(root())
            .status()
            .expect("cargo build");
        assert!(status.success());
        assert!(bin.exists(), "{} missing", bin.display());
        bin
    })
}

/// Runs rocmc in `cwd` with `args`.
pub fn rocmc(cwd: &Path, args: &[&str]) -> Output {
    Command::new(rocmc_bin())
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("run rocmc")
}

/// Runs a tool (llvm-readobj-22, ...) and returns its stdout; panics with its stderr on failure.
pub fn tool(name: &str, args: &[&str]) -> String {
    let out = Command::new(name)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{name}: {e} (run scripts/install-deps.sh)"));
    assert!(
        out.status.success(),
        "{name} {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Files in a folder, sorted by name.
pub fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Compiles a HIP source with clang-22 for `mcpu` (device only, no ROCm)
/// and links it with ld.lld-22; returns the code object's path.
pub fn clang_hip(dir: &Path, src: &str, mcpu: &str, cov: u32) -> PathBuf {
    let hip = dir.join("k.hip");
    std::fs::write(&hip, src).unwrap();
    let obj = dir.join(format!("clang-{}-v{cov}.o", mcpu.replace(':', "_")));
    tool(
        "clang-22",
        &[
            "-x",
            "hip",
            &format!("--offload-arch={mcpu}"),
            "--cuda-device-only",
            "-nogpulib",
            "-nogpuinc",
            "-O3",
            &format!("-mcode-object-version={cov}"),
            "-fhip-emit-relocatable",
            "-c",
            hip.to_str().unwrap(),
            "-o",
            obj.to_str().unwrap(),
        ],
    );
    let out = obj.with_extension("hsaco");
    tool(
        "ld.lld-22",
        &[
            "-shared",
            obj.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ],
    );
    out
}

/// NVIDIA's PTX assembler (see [`rocmc::ptxas::find`]). Panics with the way
/// to get it when there is none: the PTX tests need this independent
/// checker and must not pass without it.
pub fn ptxas() -> PathBuf {
    rocmc::ptxas::find().unwrap_or_else(|| {
        panic!("ptxas not found: run scripts/install-ptxas.sh (or set ROCMC_PTXAS)")
    })
}

pub use rocmc::ptxas::Report as PtxasReport;

/// Assembles `ptx` for `arch` with ptxas; its per-kernel report, or its output as the error.
pub fn assemble_ptx(ptx: &str, arch: &str) -> Result<Vec<PtxasReport>, String> {
    rocmc::ptxas::assemble(&ptxas(), ptx, arch)
}
