//! Compiles every kernel a GPT-2 forward pass needs, for AMD (gfx90a,
//! gfx942, gfx1100 in one bundle), NVIDIA (sm_80, sm_90, sm_90a) and this CPU,
//! into launchers over any device. The head dimension is a constant of
//! the attention kernels, so those are written once per head dimension
//! the program supports (GPT-2's 64, and 16 for the tiny test model).

use std::path::PathBuf;

/// Head dimensions the program has kernels for.
const HEAD_DIMS: [u32; 2] = [16, 64];

/// Knobs of the default schedules given by hand, per kernel file
/// (`rocmc build --tune` values), on the one GPU they were measured on
/// (the other targets keep the rules' choices). The `matmul-mma` rule's
/// 128 × 256 tiles are its choice for 4096³; at GPT-2's widths (N = 768
/// to 3,072, M = the tokens of a step) smaller tiles give more
/// work-groups. The layer norm's rows (768) are short for the row rule's
/// 256 threads of one element. Each is the fastest of twelve tables per
/// GEMM (six for the layer norm) timed on the H100 at 1,024 and 8,192
/// rows (bench/gpu/runs/h100-gpt2-gemms-1).
///
/// `GPT2_TUNE="linear@sm_90:Y_BN=128;…"` replaces the table, to try others
/// (without `@target`: for every target; an empty value: the defaults).
const TUNED: &[(&str, &str, &str)] = &[
    ("linear", "sm_90", "Y_BN=128,Y_STAGES=3"),
    ("linear_gelu", "sm_90", "Y_BM=64,Y_BN=128"),
    ("linear_residual", "sm_90", "Y_BM=64,Y_BN=128"),
    ("lm_head", "sm_90", "L_BN=128"),
    ("layernorm", "sm_90", "Y_ROW_THREADS=128,Y_ROW_PER=4"),
    // Hopper's warpgroup MMA (rule matmul-wgmma): 128 x 128 tiles for the
    // QKV and fc GEMMs (N = 2,304 and 3,072), one warpgroup of 64 x 128 for
    // the 768-wide residual ones, which gives them enough work-groups.
    // Three tables timed on the H100 (bench/gpu/runs/h100-wgmma-4).
    ("linear", "sm_90a", "Y_BN=128,Y_WG=2"),
    ("linear_gelu", "sm_90a", "Y_BN=128,Y_WG=2"),
    ("linear_residual", "sm_90a", "Y_BN=128,Y_WG=1"),
    // The LM head (8,192 x 50,257 f32 logits at batch 8): row tiles
    // fastest on the grid (the vocabulary's 77 MB of embeddings do not
    // fit the L2 cache; so each of B's tiles is read once), one warpgroup
    // of 64 x 256 and two buffers (two work-groups per SM). Four tables
    // timed on the H100 (bench/gpu/runs/h100-gpt2-7): 3.59 ms against
    // 3.84-4.19 for the others. ptxas spills 28 bytes of it (the default
    // 128 x 256 spills 76).
    ("lm_head", "sm_90a", "L_RASTER=1,L_WG=1,L_STAGES=2"),
    ("layernorm", "sm_90a", "Y_ROW_THREADS=128,Y_ROW_PER=4"),
];

/// One entry of the knob table: kernel file, target (`None`: every
/// target), values.
type Tuned = (String, Option<String>, String);

fn table() -> Vec<Tuned> {
    println!("cargo:rerun-if-env-changed=GPT2_TUNE");
    match std::env::var("GPT2_TUNE") {
        Ok(v) => v
            .split(';')
            .filter_map(|p| p.split_once(':'))
            .map(|(k, v)| {
                let (file, target) = match k.trim().split_once('@') {
                    Some((f, t)) => (f.to_string(), Some(t.to_string())),
                    None => (k.trim().to_string(), None),
                };
                (file, target, v.trim().to_string())
            })
            .collect(),
        Err(_) => TUNED
            .iter()
            .map(|(k, t, v)| (k.to_string(), Some(t.to_string()), v.to_string()))
            .collect(),
    }
}

/// Adds a kernel file with its entries of the knob table.
fn add(b: &mut rocmc::Build, tuned: &[Tuned], name: &str, file: PathBuf) {
    b.kernel(&file);
    for (_, target, values) in tuned.iter().filter(|(n, _, _)| n == name) {
        match target {
            Some(t) => b.kernel_tuned_on(&file, t, values),
            None => b.kernel_tuned(&file, values),
        };
    }
}

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("run by Cargo"));
    let mut b = rocmc::Build::new();
    b.any_device();
    let tuned = table();
    for k in [
        "embed",
        "layernorm",
        "linear",
        "linear_gelu",
        "linear_residual",
        "lm_head",
        "argmax",
    ] {
        add(
            &mut b,
            &tuned,
            k,
            PathBuf::from(format!("kernels/{k}.toml")),
        );
    }
    for t in ["kv_store", "attention", "merge_heads"] {
        let template = format!("kernels/{t}.toml.in");
        println!("cargo:rerun-if-changed={template}");
        let text = std::fs::read_to_string(&template).expect("the kernel template is readable");
        for d in HEAD_DIMS {
            let file = out.join(format!("{t}_d{d}.toml"));
            std::fs::write(&file, text.replace("{D}", &d.to_string()))
                .expect("OUT_DIR is writable");
            add(&mut b, &tuned, t, file);
        }
    }
    for t in [
        "gfx90a", "gfx942", "gfx1100", "sm_80", "sm_90", "sm_90a", "x86-64",
    ] {
        b.mcpu(t);
    }
    b.compile();
}
