//! Attention (`O[.., i, d], L[.., i] = attention(q, k, v)`): the softmax
//! of each query row's scaled scores applied to the values, and the row's
//! log-sum-exp. Both lowerings agree with the interpreter: `rowwise` on
//! the CPU and in the loop IR; `flash` on the CPU through the lane layouts
//! of gfx942 (MFMA, wave64), gfx1100 (WMMA, wave32) and sm_90
//! (mma.sync), at sizes no tile divides, causal and not, head dimensions
//! that are no multiple of the instruction. Both compile for every target
//! with matrix instructions.

use crate::common::*;
use rocmc::Options;
use std::collections::HashMap;

fn kernels() -> Vec<(String, String)> {
    let v = kernel_files("attention");
    assert!(v.len() >= 2, "tests/attention/ lost its kernels");
    v
}

fn sizes_of(front: &rocmc::Frontend, s: i64, t: i64) -> Vec<i64> {
    // Batch sizes 2, rows `s`, keys `t`, by name.
    front
        .kernel
        .sizes
        .iter()
        .map(|z| match z.name.as_str() {
            "S" => s,
            "T" => t,
            _ => 2,
        })
        .collect()
}

fn assert_ok(what: &str, report: &[rocmc::ir::reference::Comparison]) {
    assert!(!report.is_empty(), "{what}: nothing compared");
    for c in report {
        assert!(
            c.ok(),
            "{what}: {} differs by {} (tolerance {})",
            c.tensor,
            c.max_error,
            c.tolerance
        );
    }
}

#[test]
fn rowwise_agrees_with_the_interpreter_on_the_cpu() {
    for (name, src) in kernels() {
        let front = rocmc::frontend(&name, &src).unwrap_or_else(|e| panic!("{e}"));
        for (s, t) in [(1, 1), (7, 3), (37, 41), (50, 20)] {
            let sizes = sizes_of(&front, s, t);
            let r = rocmc::run::run_cpu(&front, &sizes, &HashMap::new(), 5, false)
                .unwrap_or_else(|e| panic!("{name} at {sizes:?}: {e}"));
            assert_ok(&format!("{name} at {sizes:?}"), &r);
        }
    }
}

#[test]
fn rowwise_lowers_to_its_meaning() {
    // (check_lowered passes no parameters: the kernels without.)
    let no_params: Vec<(String, String)> = kernels()
        .into_iter()
        .filter(|(_, src)| !src.contains("[params]"))
        .collect();
    assert!(!no_params.is_empty());
    check_lowered(&no_params, &[1, 5, 19]);
}

/// `src` with its schedule replaced by `flash(...)`.
fn with_flash(src: &str, flash: &str) -> String {
    let mut out = String::new();
    for line in src.lines() {
        if !line.starts_with("schedule") {
            out.push_str(line);
            out.push('\n');
        }
    }
    out.push_str(&format!("schedule = [\"{flash}\"]\n"));
    out
}

fn run_flash(name: &str, src: &str, processor: &str, s: i64, t: i64) {
    let front = rocmc::frontend(name, src).unwrap_or_else(|e| panic!("{e}"));
    let mut o = Options::new("x86-64");
    o.emulate = Some(processor.to_string());
    let cpu = rocmc::targets(&Options::new("x86-64")).unwrap().remove(0);
    let front = front
        .for_target(&cpu, &o)
        .unwrap_or_else(|e| panic!("{name} on {processor}: {e}"));
    assert!(
        !front.matrix_instructions().is_empty(),
        "{name} on {processor}: no matrix instruction in the loop IR"
    );
    let sizes = sizes_of(&front, s, t);
    let r = rocmc::run::run_cpu(&front, &sizes, &HashMap::new(), 3, false)
        .unwrap_or_else(|e| panic!("{name} on {processor} at {sizes:?}: {e}"));
    assert_ok(&format!("{name} on {processor} at {sizes:?}"), &r);
}

#[test]
fn flash_agrees_with_the_interpreter_through_every_lane_layout() {
    let causal = std::fs::read_to_string(root().join("tests/attention/causal_odd.toml")).unwrap();
    let written = std::fs::read_to_string(root().join("tests/attention/written_out.toml")).unwrap();
    for processor in ["gfx942", "gfx1100", "sm_90"] {
        // Head dimension 24: padded to the instruction's k and n.
        let src = with_flash(&causal, "flash(j, rows=64, keys=32, stages=2)");
        for (s, t) in [(37, 41), (1, 5)] {
            run_flash("causal_odd", &src, processor, s, t);
        }
        // One LDS buffer; several key tiles with a partly masked one.
        let src = with_flash(&causal, "flash(j, rows=64, keys=16, stages=1)");
        run_flash("causal_odd", &src, processor, 70, 45);
        // The five written-out stages, made the template: the target's
        // rule gives them `flash`.
        run_flash("written_out", &written, processor, 37, 41);
    }
}

/// Scores far apart (scale ±64 on random inputs): a row's maximum grows
/// by far after its first tile, so the register softmax's factors are
/// far from 1 mid-row. 64 folds into the weights' exp2 (the maximum of
/// the raw scores); −64 (not positive) scales every score first.
#[test]
fn flash_moves_its_reference_when_the_maximum_grows_far() {
    let causal = std::fs::read_to_string(root().join("tests/attention/causal_odd.toml")).unwrap();
    for scale in ["64.0", "-64.0"] {
        let src = causal.replace("V[b, j, d])", &format!("V[b, j, d], scale={scale})"));
        assert!(src.contains("scale="));
        let src = with_flash(&src, "flash(j, rows=32, keys=16, stages=2)");
        run_flash("causal_odd", &src, "sm_90", 40, 70);
    }
}

/// A decode shape (one query row fixed in the file) gets one wave of
/// rows, and three K/V buffers where copies are asynchronous; a prefill
/// shape (rows a size) keeps 128 rows. The default runs correctly through
/// the sm_90 and gfx942 lane layouts.
#[test]
fn a_decode_shape_gets_one_wave_of_rows() {
    let dec = std::fs::read_to_string(root().join("tests/attention/decode_one_row.toml")).unwrap();
    let dec128 =
        std::fs::read_to_string(root().join("bench/gpu/variants/attention_decode_s1.toml"))
            .unwrap();
    let pre = std::fs::read_to_string(example("attention")).unwrap();
    for (src, t, want) in [
        (&dec, "sm_90", "flash(j, rows=32, keys=32, stages=3)"),
        (&dec128, "sm_90", "flash(j, rows=32, keys=32, stages=3)"),
        (&dec128, "gfx942", "flash(j, rows=64, keys=32, stages=2)"),
        (
            &pre,
            "gfx942",
            "flash(j, rows=256, keys=64, stages=1, wave_rows=32)",
        ),
        (&pre, "sm_90", "flash(j, rows=128, keys=32, stages=2)"),
    ] {
        let art = rocmc::compile("k", src, &Options::new(t), Default::default())
            .unwrap_or_else(|e| panic!("{t}: {e}"));
        let d = art.kernel.stages[0].default.as_ref().expect("a default");
        assert_eq!(d.steps, vec![want.to_string()], "{t}");
    }
    for processor in ["sm_90", "gfx942"] {
        run_flash("decode_one_row", &dec, processor, 1, 70);
    }
}

/// On AMD's MFMA (gfx942, gfx950) and gfx12's WMMA the default `flash`
/// computes the scores on the transposed view of the instruction (a query
/// row in 4 or 2 lanes; half a wave of rows, 16 on gfx12's wave32):
/// the softmax, the weights and Q stay in registers and LDS holds only
/// the K and V tiles (V by columns), which is all the code object asks for. Its meaning
/// is the interpreter's through both processors' lanes at sizes no tile
/// divides (32 rows a wave, bf16 and f16, causal and not).
#[test]
fn amd_flash_keeps_scores_weights_and_q_in_registers() {
    for ex in ["attention", "attention_causal"] {
        let src = std::fs::read_to_string(example(ex)).unwrap();
        for t in ["gfx942", "gfx950", "gfx1201"] {
            let emit = rocmc::Emit {
                code_object: true,
                asm: true,
                ..Default::default()
            };
            let art = rocmc::compile(ex, &src, &Options::new(t), emit)
                .unwrap_or_else(|e| panic!("{ex} {t}: {e}"));
            assert!(
                art.loops.contains("transposed: A and B swapped"),
                "{ex} {t}"
            );
            let d = art.kernel.stages[0].default.as_ref().expect("the rule's");
            assert!(
                d.steps[0].contains(&format!(
                    "wave_rows={}",
                    if t == "gfx1201" { 16 } else { 32 }
                )),
                "{ex} {t}: {:?}",
                d.steps
            );
            let g = &art.program.kernels[0];
            let used: Vec<&str> = g
                .shared
                .iter()
                .filter(|s| s.len > 0)
                .map(|s| s.name.as_str())
                .collect();
            assert_eq!(used, ["O_k", "O_v"], "{ex} {t}");
            let co = rocmc::linker::codeobject::read(&art.code_object.clone().unwrap()).unwrap();
            let ours: u64 = g.shared.iter().map(|s| s.bytes()).sum();
            assert_eq!(
                co.kernels[0].group_segment_fixed_size, ours,
                "{ex} {t}: LDS beyond K and V"
            );
            // V lies by columns: P·V's B fragments (4 keys of a head
            // column) are whole reads, never 16-bit ones.
            let asm = art.asm.clone().unwrap_or_default();
            assert!(
                (asm.contains("v_mfma") || asm.contains("v_wmma")) && !asm.contains("ds_read_u16"),
                "{ex} {t}: V read by elements"
            );
            run_flash(ex, &src, t, 37, 75);
        }
    }
}

#[test]
fn flash_bf16_three_stages_on_sm_90() {
    let src = std::fs::read_to_string(example("attention_causal")).unwrap();
    let src = with_flash(&src, "flash(j, rows=32, keys=16, stages=3)");
    run_flash("attention_causal", &src, "sm_90", 45, 45);
}

/// On NVIDIA, K and V tiles whose rows are whole 128-byte lines are
/// unpadded with their 16-byte chunks permuted by the row; every fragment
/// still loads through `ldmatrix` (none falls back to 16-bit LDS reads),
/// and the kernel means what the interpreter says at odd sizes. AMD keeps
/// the padded rows.
#[test]
fn flash_swizzles_whole_line_tiles_on_nvidia() {
    for ex in ["attention_causal", "attention"] {
        let src = std::fs::read_to_string(example(ex)).unwrap();
        let emit = rocmc::Emit {
            asm: true,
            ..Default::default()
        };
        let art = rocmc::compile(ex, &src, &Options::new("sm_90"), emit).unwrap();
        assert!(art.loops.contains("xor("), "{ex}: no swizzled tile");
        let ptx = art.asm.unwrap_or_default();
        assert!(ptx.contains("ldmatrix.sync.aligned.m8n8.x4.trans"), "{ex}");
        assert!(
            !ptx.contains("ld.shared.b16") && !ptx.contains("ld.shared.u16"),
            "{ex}: a fragment read element by element"
        );
        let amd = rocmc::compile(ex, &src, &Options::new("gfx942"), Default::default()).unwrap();
        // (A lane exchange prints as `lane_xor(`; a swizzled index as `xor(`.)
        let indices = amd.loops.replace("lane_xor(", "");
        assert!(!indices.contains("xor("), "{ex}: gfx942 swizzled");
    }
    // Head dimension 128 (16 chunks a row), two stages, ragged tiles.
    let d128 = std::fs::read_to_string(root().join("bench/gpu/variants/attention_causal128.toml"))
        .unwrap();
    let src = with_flash(&d128, "flash(j, rows=32, keys=16, stages=2)");
    run_flash("attention_causal128", &src, "sm_90", 21, 21);
}

#[test]
fn flash_is_refused_where_it_cannot_run() {
    let plain = std::fs::read_to_string(root().join("tests/attention/plain_d32.toml")).unwrap();
    // f32 values are not a matrix operand.
    let src = with_flash(&plain, "flash(j)");
    let e = rocmc::compile("k", &src, &Options::new("sm_90"), Default::default())
        .map(|_| ())
        .expect_err("refused")
        .to_string();
    assert!(e.contains("f16 or bf16"), "{e}");
    // No target with matrix instructions.
    let causal = std::fs::read_to_string(root().join("tests/attention/causal_odd.toml")).unwrap();
    let src = with_flash(&causal, "flash(j)");
    let e = rocmc::compile("k", &src, &Options::new("gfx900"), Default::default())
        .map(|_| ())
        .expect_err("refused")
        .to_string();
    assert!(e.contains("matrix"), "{e}");
}

#[test]
fn attention_compiles_for_every_target() {
    // Defaults: flash where the target has the instructions, else rowwise.
    let mut all = kernels();
    for ex in ["attention", "attention_causal"] {
        all.push((ex.into(), std::fs::read_to_string(example(ex)).unwrap()));
    }
    compile_everywhere(
        &all,
        &["gfx900", "gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201"],
        &["sm_52", "sm_80", "sm_90"],
    );
}

#[test]
fn the_default_is_flash_on_matrix_targets() {
    let src = std::fs::read_to_string(example("attention")).unwrap();
    for (t, want) in [
        ("sm_90a", "wgmma.mma_async"),
        ("sm_90", "mma.sync"),
        ("gfx942", "v_mfma"),
        ("gfx900", ""),
    ] {
        let emit = rocmc::Emit {
            asm: true,
            ..Default::default()
        };
        let art = rocmc::compile("attention", &src, &Options::new(t), emit).unwrap();
        let asm = art.asm.unwrap_or_default();
        if want.is_empty() {
            assert!(
                !asm.contains("mfma"),
                "{t}: matrix instructions without a matrix unit"
            );
        } else {
            assert!(
                asm.contains(want),
                "{t}: no {want} in the default schedule's code"
            );
        }
    }
}

/// A key computed by an inlined stage (what the differential fuzzer found
/// read wrongly): `flash` refuses the expression by name, the default rule
/// takes `rowwise` and matches the interpreter, and with the stage
/// materialized `flash` runs and matches through a lane layout.
#[test]
fn an_inlined_operand_stage_is_never_read_unwritten() {
    let src = std::fs::read_to_string(root().join("tests/attention/inlined_key.toml")).unwrap();
    // The attention is the last stage and has no schedule line: one added.
    let flash = |s: &str| format!("{s}schedule = [\"flash(j, rows=32, keys=16, stages=2)\"]\n");
    let e = rocmc::compile(
        "k",
        &flash(&src),
        &Options::new("sm_90"),
        Default::default(),
    )
    .map(|_| ())
    .expect_err("refused")
    .to_string();
    assert!(
        e.contains("not an expression") && e.contains("compute_inline"),
        "{e}"
    );
    // No schedule: compiles for sm_90 and gfx942, runs right on the CPU.
    for t in ["sm_90", "gfx942"] {
        rocmc::compile("k", &src, &Options::new(t), Default::default())
            .unwrap_or_else(|e| panic!("{t}: {e}"));
    }
    let front = rocmc::frontend("k", &src).unwrap();
    let r = rocmc::run::run_cpu(&front, &[7, 9], &HashMap::new(), 1, false).unwrap();
    assert_ok("inlined_key, default", &r);
    // Materialized, `flash` reads the stage's buffer, written first.
    let kept = src.replace("schedule = [\"compute_inline()\"]", "schedule = []");
    run_flash("inlined_key", &flash(&kept), "sm_90", 7, 9);
}

/// The butterfly exchange (`Stmt::Shuffle`) the register softmax uses, on
/// its own in a kernel `Y[i] = f32(i ^ 1)` made by swapping each lane's
/// `f32(i)` with its neighbour's: NVIDIA gets `shfl.sync.bfly`, AMD
/// `ds_bpermute` (wave32 and wave64; no AMD lowering uses the exchange
/// yet), and on the CPU it swaps what it says. The reference interpreter
/// sees `Y[i] = f32(i)`, so the CPU's largest error is exactly 1, at i = 0
/// (an exchange with no lane, or the wrong one, gives 0 or 2).
#[test]
fn a_lane_exchange_compiles_for_every_backend_and_swaps_lanes_on_the_cpu() {
    use rocmc::ir::index::VarId;
    use rocmc::ir::loops::{Local, Stmt};
    use rocmc::ir::schedule::GpuAxis;
    use rocmc::ir::{DType, Expr, ExprKind, Index};
    let src = "[kernel]\nname = \"swap\"\nsizes = [\"n\"]\n\
               [[stage]]\ncompute = \"Y[i] = f32(i)\"\nshape = [\"n\"]\n\
               schedule = [\"bx, tx = split(i, 64)\", \"bind(bx, blockIdx.x)\", \"bind(tx, threadIdx.x)\"]\n";
    let swapped = |width: u32| {
        let mut front = rocmc::frontend("swap.toml", src).unwrap();
        let g = &mut front.program.kernels[0];
        let bound = |axis: fn(&GpuAxis) -> bool| -> VarId {
            g.body
                .iter()
                .find_map(|s| match s {
                    Stmt::Bind { var, axis: a } if axis(a) => Some(*var),
                    _ => None,
                })
                .expect("bound")
        };
        let tx = bound(|a| matches!(a, GpuAxis::Thread(_)));
        let bx = bound(|a| matches!(a, GpuAxis::Block(_)));
        g.locals.push(Local {
            name: "swapped".into(),
            dtype: DType::F32,
            len: 1,
            span: g.locals.first().map_or(Default::default(), |l| l.span),
        });
        let x = g.locals.len() as u32 - 1;
        let i = Index::Var(bx) * Index::c(64) + Index::Var(tx);
        let value = Expr {
            kind: ExprKind::Cast(Box::new(Expr {
                kind: ExprKind::Index(i),
                dtype: DType::I32,
            })),
            dtype: DType::F32,
        };
        let at = g
            .body
            .iter()
            .position(|s| matches!(s, Stmt::If { .. }))
            .expect("the guarded store");
        let Stmt::If { body, .. } = &mut g.body[at] else {
            unreachable!()
        };
        let Stmt::Store { value: stored, .. } = &mut body[0] else {
            panic!("{body:?}")
        };
        *stored = Expr {
            kind: ExprKind::Local {
                local: x,
                index: Index::c(0),
            },
            dtype: DType::F32,
        };
        let w = i64::from(width);
        g.body.insert(
            at,
            Stmt::Shuffle {
                local: x,
                index: Index::c(0),
                value,
                mask: 1,
                lane: Index::bin(rocmc::ir::index::IOp::Mod, Index::Var(tx), Index::c(w)),
                wave: Index::bin(rocmc::ir::index::IOp::Div, Index::Var(tx), Index::c(w)),
                width,
            },
        );
        front
    };
    for (mcpu, width, instr) in [
        ("sm_90", 32, "shfl.sync.bfly.b32"),
        ("gfx942", 64, "ds_bpermute_b32"),
        ("gfx1100", 32, "ds_bpermute_b32"),
    ] {
        let front = swapped(width);
        let opts = rocmc::Options::new(mcpu);
        let target = &rocmc::targets(&opts).unwrap()[0];
        let art = rocmc::backend(
            &front,
            target,
            &opts,
            rocmc::Emit {
                asm: true,
                ..rocmc::Emit::default()
            },
        )
        .unwrap_or_else(|e| panic!("{mcpu}: {e}"));
        let asm = art.asm.unwrap();
        assert!(asm.contains(instr), "{mcpu}:\n{asm}");
    }
    for width in [32, 64] {
        let cmp =
            rocmc::run::run_cpu(&swapped(width), &[130], &Default::default(), 1, false).unwrap();
        assert_eq!(cmp[0].max_error, 1.0, "wave{width}: {:?}", cmp[0]);
    }
}

/// sm_90a: `flash` on warpgroups (wgmma, Q and K through descriptors, P
/// from the score registers), its meaning the interpreter's through the
/// warpgroup lane layouts, causal and not, head dimension 64 and 128, at
/// sizes no tile divides; the PTX issues both products as wgmma (A from
/// registers for P·V) and ptxas serializes none of them.
#[test]
fn flash_runs_on_warpgroups_on_sm_90a() {
    let causal = std::fs::read_to_string(example("attention_causal")).unwrap();
    let d128 = std::fs::read_to_string(example("attention")).unwrap();
    for (name, src, s, t) in [
        ("attention_causal", &causal, 70, 70),
        ("attention", &d128, 37, 75),
    ] {
        let src = with_flash(src, "flash(j, rows=128, keys=64, stages=2)");
        let mut o = Options::new("x86-64");
        o.emulate = Some("sm_90a".into());
        let loops = rocmc::compile(name, &src, &o, Default::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .loops;
        assert!(
            loops.contains("A in registers"),
            "{name}: P·V is not wgmma with A in registers\n{loops}"
        );
        run_flash(name, &src, "sm_90a", s, t);
        let emit = rocmc::Emit {
            asm: true,
            ..Default::default()
        };
        let ptx = rocmc::compile(name, &src, &Options::new("sm_90a"), emit)
            .unwrap()
            .asm
            .unwrap();
        let reg_a = ptx
            .lines()
            .any(|l| l.contains("wgmma.mma_async") && l.contains("}, {%r"));
        assert!(reg_a, "{name}: no wgmma with A in registers in the PTX");
        let reports = assemble_ptx(&ptx, "sm_90a").unwrap();
        for r in &reports {
            assert!(
                !r.wgmma_serialized && !r.wgmma_fences_added && r.spill_stores == 0,
                "{name}: {r:?}"
            );
        }
    }
}

/// gfx11's WMMA at head dimension 128: a wave takes 16 rows (one
/// instruction's), not 32, so that its outputs fit its registers. Still the interpreter's meaning,
/// with and without the log-sum-exp, and no scratch on gfx1100.
#[test]
fn gfx11_takes_sixteen_rows_a_wave_at_head_dimension_128() {
    let d128 = std::fs::read_to_string(example("attention")).unwrap();
    let src = with_flash(&d128, "flash(j, rows=32, keys=16, stages=2)");
    run_flash("attention", &src, "gfx1100", 37, 41);
    let art = rocmc::compile(
        "attention",
        &d128,
        &Options::new("gfx1100"),
        rocmc::Emit {
            code_object: true,
            ..Default::default()
        },
    )
    .unwrap();
    let co = rocmc::linker::codeobject::read(&art.code_object.unwrap()).unwrap();
    for k in &co.kernels {
        assert_eq!(k.private_segment_fixed_size, 0, "{}: scratch", k.name);
        assert_eq!(k.vgpr_spill_count, 0, "{}: spills", k.name);
    }
    // 128 rows, 16 a wave: 8 waves of 32 lanes. On the transposed view
    // (a row's scores in 2 lanes) the softmax stays in registers; the
    // weights go through LDS (gfx11's A wants a row's 16 keys in a lane).
    assert!(art.loops.contains("block (32, 8, 1)"), "{}", art.loops);
    assert!(art.loops.contains("transposed: A and B swapped"));
    let g = &art.program.kernels[0];
    let lds: Vec<&str> = g.shared.iter().map(|s| s.name.as_str()).collect();
    assert!(
        lds.contains(&"O_weights") && !lds.contains(&"O_scores"),
        "{lds:?}"
    );
}
