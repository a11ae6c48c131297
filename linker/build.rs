//! Builds the lld shim and links lld's static archives (ELF driver and
//! common code) against the static LLVM 22 libraries that inkwell's
//! llvm-sys links (one LLVM in the process).

use std::process::Command;

fn llvm_config(arg: &str) -> String {
    let exe = std::env::var("LLVM_CONFIG").unwrap_or_else(|_| "llvm-config-22".into());
    let out = Command::new(&exe).arg(arg).output().unwrap_or_else(|e| {
        panic!("cannot run {exe} ({e}); install LLVM 22 and lld with scripts/install-deps.sh or set LLVM_CONFIG")
    });
    assert!(out.status.success(), "{exe} {arg} failed");
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .trim()
        .to_string()
}

fn main() {
    println!("cargo:rerun-if-changed=shim/lld.cpp");
    println!("cargo:rerun-if-env-changed=LLVM_CONFIG");
    if std::env::var_os("CARGO_FEATURE_LLD").is_none() {
        return;
    }
    let include = llvm_config("--includedir");
    let libdir = llvm_config("--libdir");
    cc::Build::new()
        .cpp(true)
        .file("shim/lld.cpp")
        .include(&include)
        .flag("-std=c++17")
        .flag("-fno-rtti")
        .warnings(false)
        .compile("rocmc_lld");
    for lib in ["lldELF", "lldCommon"] {
        let path = format!("{libdir}/lib{lib}.a");
        assert!(
            std::path::Path::new(&path).exists(),
            "{path} is missing: install liblld-22-dev (scripts/install-deps.sh)"
        );
    }
    println!("cargo:rustc-link-search=native={libdir}");
    println!("cargo:rustc-link-lib=static=lldELF");
    println!("cargo:rustc-link-lib=static=lldCommon");
    println!("cargo:rustc-link-lib=dylib=LLVM-22");
    println!("cargo:rustc-link-lib=dylib=z");
    println!("cargo:rustc-link-lib=dylib=zstd");
    println!("cargo:rustc-link-lib=dylib=stdc++");
}
