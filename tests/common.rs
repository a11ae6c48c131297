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

/// NVIDIA's PTX assembler: `ROCMC_PTXAS`, else the copy
/// scripts/install-ptxas.sh puts in ~/.cache/rocmc, else `ptxas` on PATH.
/// Panics with the way to get it when there is none: the PTX tests need
/// this independent checker and must not pass without it.
pub fn ptxas() -> PathBuf {
    if let Some(p) = std::env::var_os("ROCMC_PTXAS") {
        return PathBuf::from(p);
    }
    let cache = std::env::var_os("ROCMC_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/rocmc")));
    if let Some(c) = cache {
        if let Ok(dir) = std::fs::read_dir(&c) {
            let mut found: Vec<PathBuf> = dir
                .filter_map(|e| e.ok())
                .map(|e| e.path().join("ptxas"))
                .filter(|p| p.exists())
                .collect();
            found.sort();
            if let Some(p) = found.pop() {
                return p;
            }
        }
    }
    if Command::new("ptxas").arg("--version").output().is_ok() {
        return PathBuf::from("ptxas");
    }
    panic!("ptxas not found: run scripts/install-ptxas.sh (or set ROCMC_PTXAS)")
}

/// What ptxas reports for one kernel: registers, shared memory, spills.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PtxasReport {
    pub kernel: String,
    pub registers: u32,
    pub shared_bytes: u32,
    pub spill_stores: u32,
    pub spill_loads: u32,
    pub stack_bytes: u32,
}

/// Assembles `ptx` for `arch` with ptxas (`-v`, warnings as errors) and
/// returns its per-kernel report, or ptxas's output as the error.
pub fn assemble_ptx(ptx: &str, arch: &str) -> Result<Vec<PtxasReport>, String> {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("k.ptx");
    std::fs::write(&src, ptx).unwrap();
    let out = Command::new(ptxas())
        .args(["-v", "--warning-as-error", "-arch", arch, "-o"])
        .arg(dir.path().join("k.cubin"))
        .arg(&src)
        .output()
        .expect("run ptxas");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        return Err(text);
    }
    Ok(parse_ptxas(&text))
}

/// Parses `ptxas -v` output.
pub fn parse_ptxas(text: &str) -> Vec<PtxasReport> {
    let num = |line: &str, before: &str| -> u32 {
        line.split(before)
            .next()
            .and_then(|s| s.split_whitespace().last())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let mut out: Vec<PtxasReport> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            out.push(PtxasReport {
                kernel: rest.split('\'').next().unwrap_or_default().to_string(),
                ..Default::default()
            });
        } else if let Some(r) = out.last_mut() {
            if line.contains("bytes stack frame") {
                r.stack_bytes = num(line, " bytes stack frame");
                r.spill_stores = num(line, " bytes spill stores");
                r.spill_loads = num(line, " bytes spill loads");
            } else if line.contains("Used ") && line.contains(" registers") {
                r.registers = num(line, " registers");
                if line.contains(" bytes smem") {
                    r.shared_bytes = num(line, " bytes smem");
                }
            }
        }
    }
    out
}
