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

fn main() {
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
