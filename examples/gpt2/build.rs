//! Compiles every kernel a GPT-2 forward pass needs, for AMD (gfx90a,
//! gfx942, gfx1100 in one bundle), NVIDIA (sm_80, sm_90) and this CPU,
//! into launchers over any device. The head dimension is a constant of
//! the attention kernels, so those are written once per head dimension
//! the program supports (GPT-2's 64, and 16 for the tiny test model).

use std::path::PathBuf;

/// Head dimensions the program has kernels for.
const HEAD_DIMS: [u32; 2] = [16, 64];

/// Knobs of the default schedules given by hand, per kernel file
/// (`rocmc build --tune` values). The `matmul-mma` rule's 128 × 256 tiles
/// are its choice for 4096³; at GPT-2's widths (N = 768 to 3,072, M =
/// the tokens of a step) smaller tiles give more work-groups. These were
/// the best of four tables timed on the H100
/// (bench/gpu/runs/h100-gpt2-variants-1). `GPT2_TUNE="linear:Y_BN=128;…"`
/// replaces the table, to try others (an empty value: the defaults).
const TUNED: &[(&str, &str)] = &[
    ("linear", "Y_BM=64,Y_BN=128"),
    ("linear_gelu", "Y_BN=128"),
    ("linear_residual", "Y_BM=64,Y_BN=128"),
    ("lm_head", "L_BN=128"),
];

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("run by Cargo"));
    let mut b = rocmc::Build::new();
    b.any_device();
    println!("cargo:rerun-if-env-changed=GPT2_TUNE");
    let tuned: Vec<(String, String)> = match std::env::var("GPT2_TUNE") {
        Ok(v) => v
            .split(';')
            .filter_map(|p| p.split_once(':'))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect(),
        Err(_) => TUNED
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    };
    for k in [
        "embed",
        "layernorm",
        "linear",
        "linear_gelu",
        "linear_residual",
        "lm_head",
        "argmax",
    ] {
        let file = format!("kernels/{k}.toml");
        match tuned.iter().find(|(n, _)| n == k) {
            Some((_, v)) => b.kernel_tuned(file, v),
            None => b.kernel(file),
        };
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
