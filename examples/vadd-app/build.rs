fn main() {
    // One Build per vendor, each into its own folder: AMD code objects for
    // rocmc-runtime-hip, NVIDIA PTX for rocmc-runtime-cuda. rocmc-build runs
    // the `rocmc` executable when one is installed (ROCMC or PATH); without
    // one it uses the kernels committed under rocmc-offline/, which
    // `ROCMC_OFFLINE=write cargo build` refreshes. No LLVM in this build.
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("run by Cargo"));
    for (vendor, targets) in [
        ("amd", ["gfx90a", "gfx1100"]),
        ("nvidia", ["sm_80", "sm_90"]),
    ] {
        let dir = out.join(vendor);
        std::fs::create_dir_all(&dir).expect("OUT_DIR is writable");
        let mut b = rocmc_build::Build::new();
        b.kernel("../vadd.toml")
            .kernel("../saxpy.toml")
            .out_dir(&dir)
            .offline(format!("rocmc-offline/{vendor}"));
        for t in targets {
            b.mcpu(t);
        }
        b.compile();
    }
}
