//! Builds the C++ shim over LLVM's processor tables (AMDGPU target parser,
//! NVPTX subtarget info) against LLVM 22.
//! LLVM itself is linked by llvm-sys (through inkwell), statically: a
//! process that loads libLLVM-22.so spends ~15 ms in the loader and in
//! LLVM's static constructors before compiling anything (measured: 16 ms
//! for `rocmc --version` against 8.7 ms static).

use std::process::Command;

fn llvm_config(arg: &str) -> String {
    let exe = std::env::var("LLVM_CONFIG").unwrap_or_else(|_| "llvm-config-22".into());
    let out = Command::new(&exe).arg(arg).output().unwrap_or_else(|e| {
        panic!("cannot run {exe} ({e}); install LLVM 22 with scripts/install-deps.sh or set LLVM_CONFIG")
    });
    assert!(out.status.success(), "{exe} {arg} failed");
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .trim()
        .to_string()
}

/// A digest of every file at or under `paths`, in path order: the compilation
/// cache's word for "this code generator" (src/cache.rs).
fn source_digest(paths: &[&str]) -> String {
    use sha2::{Digest, Sha256};
    fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        let entries = std::fs::read_dir(dir).expect("the crate's own folders are readable");
        for e in entries.map(|e| e.expect("a readable entry").path()) {
            if e.is_dir() {
                walk(&e, out);
            } else {
                out.push(e);
            }
        }
    }
    let mut files = Vec::new();
    for d in paths {
        println!("cargo:rerun-if-changed={d}");
        let p = std::path::Path::new(d);
        match p.is_dir() {
            true => walk(p, &mut files),
            false => files.push(p.to_path_buf()),
        }
    }
    files.sort();
    let mut h = Sha256::new();
    for f in files {
        h.update(f.to_string_lossy().as_bytes());
        h.update(std::fs::read(&f).expect("a readable source file"));
    }
    format!("{:x}", h.finalize())
}

fn main() {
    println!(
        "cargo:rustc-env=ROCMC_CODEGEN_SOURCE={}",
        source_digest(&["src", "shim", "build.rs", "Cargo.toml"])
    );
    println!(
        "cargo:rustc-env=ROCMC_LLVM_VERSION={}",
        llvm_config("--version")
    );
    println!("cargo:rerun-if-changed=shim/target.cpp");
    println!("cargo:rerun-if-env-changed=LLVM_CONFIG");
    let include = llvm_config("--includedir");
    cc::Build::new()
        .cpp(true)
        .file("shim/target.cpp")
        .include(&include)
        .flag("-std=c++17")
        .flag("-fno-rtti")
        .flag("-fno-exceptions")
        .warnings(false)
        .compile("rocmc_llvm_target");
    println!("cargo:rustc-link-search=native={}", llvm_config("--libdir"));
    println!("cargo:rustc-link-lib=dylib=LLVM-22");
}
