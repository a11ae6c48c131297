//! Compiles every kernel a GPT-2 forward pass needs, for AMD (gfx90a,
//! gfx942, gfx1100 in one bundle), NVIDIA (sm_80, sm_90) and this CPU,
//! into launchers over any device. The head dimension is a constant of
//! the attention kernels, so those are written once per head dimension
//! the program supports (GPT-2's 64, and 16 for the tiny test model).

use std::path::PathBuf;

/// Head dimensions the program has kernels for.
const HEAD_DIMS: [u32; 2] = [16, 64];

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("run by Cargo"));
    let mut b = rocmc::Build::new();
    b.any_device();
    for k in [
        "embed",
        "layernorm",
        "linear",
        "linear_gelu",
        "linear_residual",
        "lm_head",
        "argmax",
    ] {
        b.kernel(format!("kernels/{k}.toml"));
    }
    for t in ["kv_store", "attention", "merge_heads"] {
        let template = format!("kernels/{t}.toml.in");
        println!("cargo:rerun-if-changed={template}");
        let text = std::fs::read_to_string(&template).expect("the kernel template is readable");
        for d in HEAD_DIMS {
            let file = out.join(format!("{t}_d{d}.toml"));
            std::fs::write(&file, text.replace("{D}", &d.to_string()))
                .expect("OUT_DIR is writable");
            b.kernel(file);
        }
    }
    for t in ["gfx90a", "gfx942", "gfx1100", "sm_80", "sm_90", "x86-64"] {
        b.mcpu(t);
    }
    b.compile();
}
