//! Convolutions with no schedule: rule `conv-tiles` (an implicit GEMM over
//! output channels × output pixels × (input channels, window), register
//! tiles, input channels staged in LDS with the window's halo). It fires
//! for NCHW-style convolutions, 1-D and 2-D, strided, grouped, with
//! epilogues; the kernels keep the interpreter's meaning at sizes no tile
//! divides and compile for every target without spilling.

use crate::common::*;
use std::collections::HashMap;

/// tests/conv/ and examples/conv2d.toml without its schedule.
fn kernels() -> Vec<(String, String)> {
    let mut v = kernel_files("conv");
    assert!(v.len() >= 4, "tests/conv/ lost its kernels");
    let src = std::fs::read_to_string(example("conv2d")).unwrap();
    let start = src.find("schedule = [").unwrap();
    let end = start + src[start..].find(']').unwrap() + 1;
    v.push(("conv2d".into(), format!("{}{}", &src[..start], &src[end..])));
    v
}

fn rule_of(name: &str, src: &str) -> Option<&'static str> {
    let f = rocmc::frontend(&format!("{name}.toml"), src).unwrap_or_else(|e| panic!("{e}"));
    f.kernel
        .stages
        .last()
        .unwrap()
        .default
        .as_ref()
        .map(|d| d.rule)
}

#[test]
fn convolutions_take_the_conv_rule_and_nothing_else_does() {
    for (name, src) in kernels() {
        assert_eq!(rule_of(&name, &src), Some("conv-tiles"), "{name}");
    }
    let kernel = |inputs: &str, value: &str, shape: &str, reduce: &str| {
        format!(
            "[kernel]\nname = \"k\"\nsizes = [\"N\", \"C\", \"H\", \"W\"]\n[inputs]\n{inputs}\n\
             [[stage]]\ncompute = \"{value}\"\nshape = [{shape}]\nreduce = {{ {reduce} }}\n"
        )
    };
    let nchw = "I = { dtype = \"f32\", shape = [\"N\", \"C\", \"H\", \"W\"] }";
    for (what, src) in [
        (
            // No output-channel axis: each channel has its own filter.
            "depthwise",
            kernel(
                &format!("{nchw}\nF = {{ dtype = \"f32\", shape = [\"C\", 3, 3] }}"),
                "O[n, c, y, x] = sum(I[n, c, y + r, x + s] * F[c, r, s], r, s)",
                "\"N\", \"C\", \"H - 2\", \"W - 2\"",
                "r = 3, s = 3",
            ),
        ),
        (
            // One tensor: a box filter, not a product with filters.
            "box filter",
            kernel(
                nchw,
                "O[n, c, y, x] = sum(I[n, c, y + r, x + s], r, s)",
                "\"N\", \"C\", \"H - 2\", \"W - 2\"",
                "r = 3, s = 3",
            ),
        ),
        (
            // Channels last: the input's contiguous axis is reduced.
            "NHWC",
            kernel(
                "I = { dtype = \"f32\", shape = [\"N\", \"H\", \"W\", \"C\"] }\n\
                 F = { dtype = \"f32\", shape = [\"C\", 3, 3, \"C\"] }",
                "O[n, y, x, k] = sum(I[n, y + r, x + s, c] * F[k, r, s, c], r, s, c)",
                "\"N\", \"H - 2\", \"W - 2\", \"C\"",
                "r = 3, s = 3, c = \"C\"",
            ),
        ),
    ] {
        assert_ne!(rule_of("k", &src), Some("conv-tiles"), "{what}");
    }
}

/// Sizes no tile divides: channels not a multiple of 64 (outputs) or 4
/// (inputs), rows not a multiple of 4, widths not of 64, one image and two.
#[test]
fn convolution_defaults_agree_with_the_interpreter_on_the_cpu() {
    for (name, src) in kernels() {
        let front = rocmc::frontend(&name, &src).unwrap_or_else(|e| panic!("{e}"));
        for case in [[1, 3, 5, 9, 67], [2, 5, 11, 7, 13]] {
            // Sizes by name: N C (H|P|T) W/Q K, G where there is one.
            let sizes: Vec<i64> = front
                .kernel
                .sizes
                .iter()
                .map(|s| match s.name.as_str() {
                    "N" => case[0],
                    "C" => case[1],
                    "H" | "P" => case[2],
                    "W" | "Q" | "T" => case[3] + 64,
                    "K" => case[4],
                    "G" => 3,
                    other => panic!("{name}: size {other}"),
                })
                .collect();
            let sizes = front.kernel.fit_sizes(&sizes);
            let cmp = rocmc::run::run_cpu(&front, &sizes, &HashMap::new(), 7, false)
                .unwrap_or_else(|e| panic!("{name} {sizes:?}: {e}"));
            for c in &cmp {
                assert!(c.ok(), "{name} {sizes:?}: {c:?}");
            }
        }
    }
}

#[test]
fn convolution_defaults_compile_for_every_target_without_spills() {
    for (name, src) in kernels() {
        for mcpu in ["gfx90a", "gfx942", "gfx1100", "gfx1201"] {
            let emit = rocmc::Emit {
                code_object: true,
                ..Default::default()
            };
            let art = rocmc::compile(&name, &src, &rocmc::Options::new(mcpu), emit)
                .unwrap_or_else(|e| panic!("{name} for {mcpu}: {e}"));
            for k in rocmc::linker::codeobject::read(&art.code_object.unwrap())
                .unwrap()
                .kernels
            {
                assert_eq!(
                    (k.vgpr_spill_count, k.private_segment_fixed_size),
                    (0, 0),
                    "{name} {mcpu}: spills"
                );
            }
        }
        for mcpu in ["sm_80", "sm_90"] {
            let ptx = ptx_of(&name, &src, mcpu);
            // The staged tiles are read from shared memory, many FMAs each
            // (or matrix instructions: f16 operands, rule `conv-mma`).
            let (lds, fma) = (
                ptx.matches("ld.shared.").count(),
                ptx.matches("fma.rn.f32").count(),
            );
            assert!(
                lds > 0 && (fma >= 2 * lds || ptx.contains("mma.sync")),
                "{name} {mcpu}: {lds} LDS reads, {fma} FMAs"
            );
            let reports = assemble_ptx(&ptx, mcpu)
                .unwrap_or_else(|e| panic!("ptxas refused {name} for {mcpu}:\n{e}"));
            assert!(
                reports.iter().all(|r| r.spill_stores == 0),
                "{name} {mcpu}: {reports:?}"
            );
        }
    }
}

/// The rule's numbers are tune parameters: a value given changes the
/// steps, and one that is not a candidate is refused by name.
#[test]
fn the_conv_rule_numbers_are_knobs() {
    let (name, src) = kernels().into_iter().find(|k| k.0 == "conv2d").unwrap();
    let f = rocmc::frontend(&name, &src).unwrap();
    let d = f.kernel.stages[0].default.clone().unwrap();
    let knobs: Vec<&str> = d.knobs.iter().map(|k| k.name.as_str()).collect();
    assert_eq!(knobs, ["O_TK", "O_BK", "O_TX", "O_BX", "O_TY", "O_BC"]);
    assert!(d.steps.contains(&"c_o, c_i = split(c, 4)".to_string()));
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("c.toml"), &src).unwrap();
    let out = rocmc(
        d.path(),
        &[
            "build", "--mcpu", "sm_90", "--emit", "schedule", "--tune", "O_BC=8", "c.toml", "-o",
            "-",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("c_o, c_i = split(c, 8)"));
    let out = rocmc(
        d.path(),
        &[
            "build", "--mcpu", "sm_90", "--tune", "O_BC=3", "c.toml", "-o", "c.ptx",
        ],
    );
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("O_BC"), "{}", text(&out.stderr));
    assert!(!d.path().join("c.ptx").exists());
}

fn conv_f16() -> String {
    std::fs::read_to_string(root().join("bench/gpu/variants/conv2d_f16.toml")).unwrap()
}

/// An f16 convolution on a target whose matrix instructions take f16 gets
/// rule `conv-mma`: one GEMM per window position on `mma.sync`, MFMA or
/// WMMA, with no spills; on the CPU, register tiles.
#[test]
fn f16_convolutions_take_the_targets_matrix_instructions() {
    let src = conv_f16();
    assert_eq!(rule_of("conv2d_f16", &src), Some("conv-tiles"));
    for (mcpu, instr) in [
        ("sm_90", "mma.sync.aligned.m16n8k16"),
        ("sm_80", "mma.sync.aligned.m16n8k16"),
        ("gfx90a", "v_mfma_f32_16x16x16"),
        ("gfx942", "v_mfma_f32_16x16x16"),
        ("gfx1100", "v_wmma_f32_16x16x16_f16"),
        ("gfx1201", "v_wmma_f32_16x16x16_f16"),
    ] {
        let nv = mcpu.starts_with("sm");
        let art = rocmc::compile(
            "conv2d_f16.toml",
            &src,
            &rocmc::Options::new(mcpu),
            rocmc::Emit {
                code_object: !nv,
                asm: true,
                ..Default::default()
            },
        )
        .unwrap_or_else(|e| panic!("{mcpu}: {e}"));
        let d = art.kernel.stages[0].default.as_ref().unwrap();
        assert_eq!(d.rule, "conv-mma", "{mcpu}");
        let asm = art.asm.as_deref().unwrap();
        assert!(asm.contains(instr), "{mcpu}: no {instr}");
        if nv {
            let reports = assemble_ptx(asm, mcpu).unwrap();
            assert!(
                reports.iter().all(|r| r.spill_stores == 0),
                "{mcpu}: {reports:?}"
            );
        } else {
            for k in rocmc::linker::codeobject::read(art.code_object.as_deref().unwrap())
                .unwrap()
                .kernels
            {
                assert_eq!(
                    (k.vgpr_spill_count, k.private_segment_fixed_size),
                    (0, 0),
                    "{mcpu}: spills"
                );
            }
        }
    }
}

/// bf16 convolutions take the bf16 instructions the same way.
#[test]
fn bf16_convolutions_take_the_bf16_matrix_instructions() {
    let src = conv_f16().replace("dtype = \"f16\"", "dtype = \"bf16\"");
    for (mcpu, instr) in [
        (
            "sm_90",
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
        ),
        ("gfx942", "v_mfma_f32_16x16x16_bf16"),
        ("gfx1100", "v_wmma_f32_16x16x16_bf16"),
    ] {
        let art = rocmc::compile(
            "conv2d_bf16.toml",
            &src,
            &rocmc::Options::new(mcpu),
            rocmc::Emit {
                asm: true,
                ..Default::default()
            },
        )
        .unwrap_or_else(|e| panic!("{mcpu}: {e}"));
        assert_eq!(
            art.kernel.stages[0].default.as_ref().unwrap().rule,
            "conv-mma"
        );
        assert!(
            art.asm.as_deref().unwrap().contains(instr),
            "{mcpu}: no {instr}"
        );
    }
}

/// `--emulate` runs the emulated processor's `conv-mma` through its lane
/// layouts on the CPU: channels, rows and pixels no tile divides.
#[test]
fn the_matrix_convolution_means_what_the_interpreter_says_in_every_lane_layout() {
    let src = conv_f16();
    let f = rocmc::frontend("conv2d_f16.toml", &src).unwrap();
    for emulate in ["sm_90", "gfx942", "gfx1100"] {
        let mut opts = rocmc::Options::new("x86-64");
        opts.emulate = Some(emulate.into());
        let cpu = rocmc::targets(&opts).unwrap().remove(0);
        let lowered = f.for_target(&cpu, &opts).unwrap();
        let d = lowered.kernel.stages[0].default.as_ref().unwrap();
        assert_eq!(d.rule, "conv-mma", "{emulate}");
        assert!(!lowered.matrix_instructions().is_empty(), "{emulate}");
        // N C H W K
        let sizes = lowered.kernel.fit_sizes(&[2, 21, 7, 133, 70]);
        let cmp = rocmc::run::run_cpu(&lowered, &sizes, &HashMap::new(), 5, false).unwrap();
        for c in &cmp {
            assert!(c.ok(), "{emulate}: {c:?}");
        }
    }
}
