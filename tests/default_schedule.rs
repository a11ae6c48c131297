//! Default schedules: every example with its schedules removed still
//! means what the interpreter says, on the CPU, and compiles for AMD and
//! NVIDIA targets; the rule that fires follows the stage's shape; a
//! written schedule always wins; `--emit schedule` prints steps that,
//! pasted into the file, give the same kernel.

use crate::common::*;
use std::collections::HashMap;

/// The kernel file without its schedules: every `schedule = [...]` and the
/// `[tune]` section those used.
fn unscheduled(src: &str) -> String {
    let mut out = String::new();
    let (mut in_schedule, mut in_tune) = (false, false);
    for line in src.lines() {
        let t = line.trim_start();
        if t.starts_with('[') && !t.starts_with("[[stage") {
            in_tune = t.starts_with("[tune");
        } else if t.starts_with("[[stage") {
            in_tune = false;
        }
        if in_tune {
            continue;
        }
        if t.starts_with("schedule") && t.contains('[') {
            in_schedule = !t.contains(']');
            continue;
        }
        if in_schedule {
            in_schedule = !t.contains(']');
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

fn front(name: &str, src: &str) -> rocmc::Frontend {
    rocmc::frontend(&format!("{name}.toml"), src).unwrap_or_else(|e| panic!("{name}:\n{e}"))
}

/// `f` lowered for the CPU, running its matrix steps as `processor` does.
fn emulated<'f>(f: &'f rocmc::Frontend, processor: &str) -> std::borrow::Cow<'f, rocmc::Frontend> {
    let mut opts = rocmc::Options::new("x86-64");
    opts.emulate = Some(processor.into());
    let cpu = rocmc::targets(&opts).unwrap().remove(0);
    f.for_target(&cpu, &opts).unwrap()
}

/// `f` lowered for GPU `processor` (for the race-checked loop IR).
fn lowered_for<'f>(
    f: &'f rocmc::Frontend,
    processor: &str,
) -> std::borrow::Cow<'f, rocmc::Frontend> {
    let opts = rocmc::Options::new(processor);
    let gpu = rocmc::targets(&opts).unwrap().remove(0);
    f.for_target(&gpu, &opts).unwrap()
}

/// The assembly (PTX on NVIDIA) `src` compiles to for `mcpu`.
fn asm_for(name: &str, src: &str, mcpu: &str) -> String {
    let emit = rocmc::Emit {
        asm: true,
        ..rocmc::Emit::default()
    };
    rocmc::compile(
        &format!("{name}.toml"),
        src,
        &rocmc::Options::new(mcpu),
        emit,
    )
    .unwrap_or_else(|e| panic!("{name} {mcpu}: {e}"))
    .asm
    .unwrap()
}

#[test]
fn every_example_without_its_schedule_keeps_its_meaning_and_compiles() {
    for name in examples() {
        let src = unscheduled(&std::fs::read_to_string(example(&name)).unwrap());
        assert!(!src.contains("schedule ="), "{name}");
        let f = front(&name, &src);
        let k = &f.kernel;
        for st in &k.stages {
            assert!(
                st.default.is_some(),
                "{name}: stage `{}` got no default schedule",
                st.name
            );
        }
        for seed in [1u64] {
            let picked: Vec<i64> = (0..k.sizes.len())
                .map(|i| 3 + ((seed * 7919 + i as u64 * 104_729) % 70) as i64)
                .collect();
            let sizes = k.fit_work(&picked, WORK_BUDGET);
            let cmp = rocmc::run::run_cpu(&f, &sizes, &HashMap::new(), seed, false)
                .unwrap_or_else(|e| panic!("{name} {sizes:?}: {e}"));
            for c in &cmp {
                assert!(c.ok(), "{name} {sizes:?}: {c:?}");
            }
        }
        for mcpu in ["gfx90a", "gfx942", "gfx1100", "gfx1201", "sm_90"] {
            rocmc::compile(
                &format!("{name}.toml"),
                &src,
                &rocmc::Options::new(mcpu),
                rocmc::Emit {
                    code_object: !mcpu.starts_with("sm"),
                    asm: mcpu.starts_with("sm"),
                    ..Default::default()
                },
            )
            .unwrap_or_else(|e| panic!("{name} for {mcpu}: {e}"));
        }
    }
}

#[test]
fn the_rule_follows_the_shape_of_the_stage() {
    for (name, stage, rule) in [
        ("vadd", "C", "elementwise-1d"),
        ("bias2d", "Y", "elementwise-2d"),
        ("argmax", "I", "row-reduction"),
        ("softmax", "M", "row-chain"),
        ("softmax", "Y", "row-chain"),
        ("layernorm", "rstd", "row-chain"),
        ("histogram", "H", "scatter-privatized"),
        ("matmul", "C", "matmul-tiles"),
        ("conv2d", "O", "conv-tiles"),
        ("embedding", "E", "elementwise-2d"),
        ("transpose", "B", "transpose-tiles"),
        ("bias_grad", "db", "column-reduction"),
        ("gelu_mask", "H", "inline"),
        ("gelu_mask", "G", "inline"),
        ("gelu_mask", "Y", "elementwise-2d"),
    ] {
        let src = unscheduled(&std::fs::read_to_string(example(name)).unwrap());
        let f = front(name, &src);
        let st = f.kernel.stages.iter().find(|s| s.name == stage).unwrap();
        assert_eq!(
            st.default.as_ref().map(|d| d.rule),
            Some(rule),
            "{name} {stage}"
        );
    }
    // A written schedule is kept as it is.
    let f = front("vadd", &std::fs::read_to_string(example("vadd")).unwrap());
    assert!(f.kernel.stages[0].default.is_none());
}

#[test]
fn printed_default_steps_pasted_into_the_file_give_the_same_kernel() {
    let d = tempfile::tempdir().unwrap();
    // `STEM.toml` built into STEM.schedule and STEM.loops.
    let build = |stem: &str| {
        let file = format!("{stem}.toml");
        let args = ["build", "--mcpu", "gfx942", "--emit", "schedule,loops"];
        rocmc(d.path(), &[&args[..], &[&file, "-o", stem]].concat())
    };
    for name in ["bias2d", "softmax", "histogram", "gemm_f16"] {
        let src = unscheduled(&std::fs::read_to_string(example(name)).unwrap());
        std::fs::write(d.path().join("k.toml"), &src).unwrap();
        let out = build("k");
        assert!(out.status.success(), "{}", text(&out.stderr));
        let printed = std::fs::read_to_string(d.path().join("k.schedule")).unwrap();
        assert!(printed.contains("rule `"), "{printed}");
        // Paste: each stage's printed block after its `compute` line.
        let blocks: Vec<&str> = printed
            .split("\nschedule = [")
            .skip(1)
            .map(|b| b.split("\n]").next().unwrap())
            .collect();
        let mut pasted = String::new();
        let mut next = blocks.iter();
        for line in src.lines() {
            pasted.push_str(line);
            pasted.push('\n');
            if line.starts_with("compute") {
                let b = next.next().expect("a block per stage");
                pasted.push_str(&format!("schedule = [{b}\n]\n"));
            }
        }
        std::fs::write(d.path().join("p.toml"), &pasted).unwrap();
        let out = build("p");
        assert!(
            out.status.success(),
            "{name}:\n{pasted}\n{}",
            text(&out.stderr)
        );
        let strip = |s: String| s.replace("k.toml", "").replace("p.toml", "");
        let k_loops = strip(std::fs::read_to_string(d.path().join("k.loops")).unwrap());
        let p_loops = strip(std::fs::read_to_string(d.path().join("p.loops")).unwrap());
        // A version for short rows (AMD row chains, said in the printed
        // schedule) is the rule's under another bound: what the pasted
        // steps give is the general version, the kernel's other side.
        if printed.contains("the kernel runs a version") {
            assert_eq!(
                general_version(&k_loops),
                general_version(&p_loops),
                "{name}"
            );
        } else {
            assert_eq!(k_loops, p_loops, "{name}");
        }
        let again = std::fs::read_to_string(d.path().join("p.schedule")).unwrap();
        assert!(again.contains("as written in the file"), "{again}");
    }
}

/// The loops of a kernel's general version: the body after a versioned
/// kernel's top-level `else:` (one level out), or the whole body; without
/// the array declarations, which list both versions'.
fn general_version(loops: &str) -> String {
    let body: Vec<&str> = loops
        .lines()
        .filter(|l| !l.starts_with("  lds ") && !l.starts_with("  registers "))
        .collect();
    match body.iter().position(|l| *l == "  else:") {
        Some(at) => {
            let head = body.iter().take_while(|l| !l.starts_with("  if "));
            let general = body[at + 1..]
                .iter()
                .map(|l| l.strip_prefix("  ").unwrap_or(l));
            head.copied().chain(general).collect::<Vec<_>>().join("\n")
        }
        None => body.join("\n"),
    }
}

/// The rule of stage `C` of an unscheduled matrix example as compiled for
/// `mcpu`, and the text of what it compiled to.
fn compiled_gemm(name: &str, mcpu: &str) -> (String, rocmc::Artifact) {
    let src = unscheduled(&std::fs::read_to_string(example(name)).unwrap());
    let nv = mcpu.starts_with("sm");
    let art = rocmc::compile(
        &format!("{name}.toml"),
        &src,
        &rocmc::Options::new(mcpu),
        rocmc::Emit {
            code_object: !nv,
            asm: true,
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("{name} for {mcpu}: {e}"));
    let st = art.kernel.stages.last().unwrap();
    (st.default.as_ref().map_or("", |d| d.rule).to_string(), art)
}

#[test]
fn matrix_products_take_the_targets_matrix_instructions() {
    for (name, mcpu, instr) in [
        ("gemm_f16_mma", "sm_90", "mma.sync.aligned.m16n8k16"),
        ("gemm_f16_mma", "sm_80", "mma.sync.aligned.m16n8k16"),
        ("gemm_f16", "gfx90a", "v_mfma_f32_16x16x16"),
        ("gemm_f16", "gfx942", "v_mfma_f32_16x16x16"),
        ("gemm_f16", "gfx950", "v_mfma_f32_16x16x32"),
        ("gemm_f16", "gfx1100", "v_wmma_f32_16x16x16_f16"),
        ("gemm_f16", "gfx1201", "v_wmma_f32_16x16x16_f16"),
        ("gemm_bf16_gelu", "gfx942", "v_mfma_f32_16x16x16"),
        ("gemm_i8", "gfx942", "v_mfma_i32_16x16x32"),
        ("gemm_i8", "sm_90", "mma.sync.aligned.m16n8k32"),
    ] {
        let (rule, art) = compiled_gemm(name, mcpu);
        assert_eq!(rule, "matmul-mma", "{name} {mcpu}");
        let asm = art.asm.as_deref().unwrap();
        assert!(asm.contains(instr), "{name} {mcpu}: no {instr}");
        if let Some(co) = &art.code_object {
            for k in rocmc::linker::codeobject::read(co).unwrap().kernels {
                assert_eq!(
                    (
                        k.vgpr_spill_count,
                        k.sgpr_spill_count,
                        k.private_segment_fixed_size
                    ),
                    (0, 0, 0),
                    "{name} {mcpu}: spills"
                );
            }
        }
    }
    // The pipeline is as deep as the processor's shared memory allows:
    // gemm_f16_mma's four cp.async stages on sm_90, three on sm_80's 163 KiB.
    for (mcpu, stages) in [("sm_90", "stages=4"), ("sm_80", "stages=3")] {
        let (_, art) = compiled_gemm("gemm_f16_mma", mcpu);
        let d = art.kernel.stages[0].default.as_ref().unwrap();
        assert!(
            d.steps.iter().any(|s| s.contains(stages)),
            "{mcpu}: {:?}",
            d.steps
        );
    }
    // No matrix instruction for the types: register tiles.
    let (rule, _) = compiled_gemm("matmul_sgemm", "sm_90");
    assert_eq!(rule, "matmul-tiles");
    let (rule, _) = compiled_gemm("gemm_fp8", "gfx90a");
    assert_eq!(rule, "matmul-tiles");
}

/// On AMD the row rule reads each thread's elements adjacent, one vector
/// access of 4 (16 bytes of f32), 4 steps unrolled as one straight run
/// where all 4 are whole (pass `unswitch_unrolled`), a row staged in LDS
/// copied 4 vectors at a time (`unroll=4`), and still means what
/// the interpreter says at sizes no vector or work-group divides, on the
/// CPU emulating each AMD processor and in the race-checked loop IR;
/// NVIDIA keeps its strided elements, one at a time.
#[test]
fn the_row_default_reads_adjacent_vectors_on_amd() {
    for name in ["softmax", "layernorm"] {
        let src = unscheduled(&std::fs::read_to_string(example(name)).unwrap());
        let f = front(name, &src);
        for emulate in ["gfx942", "gfx950", "gfx1100", "sm_90"] {
            let lowered = emulated(&f, emulate);
            let k = &lowered.kernel;
            let last = k.stages.last().unwrap().default.as_ref().unwrap();
            assert_eq!(last.rule, "row-chain", "{name} {emulate}");
            // gfx950's 160 KiB of LDS per work-group (and sm_90's) take
            // the row (16384 columns bound); on AMD copied four vectors at
            // a time.
            let staged = last.steps.iter().any(|s| s.contains("cache_read("));
            assert_eq!(
                staged,
                matches!(emulate, "gfx950" | "sm_90"),
                "{name} {emulate}: {:?}",
                last.steps
            );
            if staged && emulate.starts_with("gfx") {
                assert!(
                    last.steps.iter().any(|s| s.contains(", unroll=4)")),
                    "{name} {emulate}: {:?}",
                    last.steps
                );
            }
            let vector = last.steps.iter().any(|s| s.starts_with("vectorize("));
            assert_eq!(
                vector,
                !emulate.starts_with("sm"),
                "{name} {emulate}: {:?}",
                last.steps
            );
            let unrolled = last.steps.iter().any(|s| s.starts_with("unroll("));
            assert_eq!(unrolled, vector, "{name} {emulate}: {:?}", last.steps);
            // rows, cols: no multiple of 4 or of a work-group's 1024; four
            // whole steps (the straight run); four and one more.
            for given in [[5, 1037], [3, 4096], [2, 5120]] {
                let sizes = k.fit_sizes(&given);
                let cmp = rocmc::run::run_cpu(&lowered, &sizes, &HashMap::new(), 5, false)
                    .unwrap_or_else(|e| panic!("{name} {emulate}: {e}"));
                for c in &cmp {
                    assert!(c.ok(), "{name} {emulate} {sizes:?}: {c:?}");
                }
                if vector {
                    let gpu = lowered_for(&f, emulate);
                    let spec = rocmc::run::RunSpec::new(&sizes, &Default::default(), 5);
                    let cmp = rocmc::run::run_loops(&gpu, &spec)
                        .unwrap_or_else(|e| panic!("{name} {emulate} loops: {e}"));
                    for c in &cmp {
                        assert!(c.ok(), "{name} {emulate} loops {sizes:?}: {c:?}");
                    }
                }
            }
        }
    }
}

/// On NVIDIA a row bounded by 4096 columns whose passes evaluate a math
/// function per element (softmax's `exp`) stays in each thread's
/// registers, four vectors of four; layernorm's stays in LDS; and a
/// row's strided steps, four at a time, are one straight block where the
/// last is in the row (pass `unswitch_unrolled`). Each checked against
/// the interpreter under sm_90's lanes and in the race-checked loop IR
/// at sizes no step divides.
#[test]
fn nvidia_rows_keep_exp_rows_in_registers_and_issue_their_steps_together() {
    for (name, registers) in [
        ("softmax", true),
        ("layernorm", false),
        ("log_softmax", false),
    ] {
        let src = unscheduled(&std::fs::read_to_string(example(name)).unwrap());
        // log_softmax's example has no `max`: the row is in neither.
        let src = match name {
            "log_softmax" => src,
            _ => src.replace("cols = 16384", "cols = 4096"),
        };
        let f = front(name, &src);
        let gpu = lowered_for(&f, "sm_90");
        let last = gpu.kernel.stages.last().unwrap().default.as_ref().unwrap();
        assert_eq!(last.rule, "row-chain", "{name}");
        let local = last.steps.iter().any(|s| s.contains(", local, "));
        let vector = last.steps.iter().any(|s| s.starts_with("vectorize("));
        assert_eq!(
            (local, vector),
            (registers, registers),
            "{name}: {:?}",
            last.steps
        );
        let shared = last.steps.iter().any(|s| s.contains(", shared, "));
        assert_eq!(shared, name == "layernorm", "{name}: {:?}", last.steps);
        if !registers {
            // The reductions' four strided steps, unswitched as one.
            let member = gpu.kernel.stages[0].default.as_ref().unwrap();
            assert!(
                member.steps.iter().any(|s| s.starts_with("unroll(")),
                "{name}: {:?}",
                member.steps
            );
            assert!(
                gpu.loops.contains("(every lane, vectorized):"),
                "{name}:\n{}",
                gpu.loops
            );
        }
        let lanes = emulated(&f, "sm_90");
        for given in [[5, 1037], [3, 4096], [2, 333]] {
            let sizes = lanes.kernel.fit_sizes(&given);
            let cmp = rocmc::run::run_cpu(&lanes, &sizes, &HashMap::new(), 5, false)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let spec = rocmc::run::RunSpec::new(&sizes, &Default::default(), 5);
            let loops =
                rocmc::run::run_loops(&gpu, &spec).unwrap_or_else(|e| panic!("{name} loops: {e}"));
            for c in cmp.iter().chain(&loops) {
                assert!(c.ok(), "{name} {sizes:?}: {c:?}");
            }
        }
    }
}

/// AMD combines a row reduction's threads by lane exchanges within each
/// wave first (`ds_bpermute`), then the waves' totals through LDS behind
/// one barrier: unscheduled softmax went from 21 work-group barriers to 5
/// on gfx942. NVIDIA does so for plain combiners (`shfl.sync.bfly`) and
/// keeps its LDS tree for tuple ones, as measured on an H200
/// (bench/gpu/runs/h200-lanes-1).
#[test]
fn row_reductions_combine_threads_by_lane_exchanges() {
    for (name, reductions, tuple) in [
        ("softmax", 2, false),
        ("layernorm", 2, false),
        ("cross_entropy", 1, true),
    ] {
        let src = unscheduled(&std::fs::read_to_string(example(name)).unwrap());
        let f = front(name, &src);
        // sm_52's PTX (before 6.0) has no `shfl.sync`: it keeps the tree.
        assert!(
            !asm_for(name, &src, "sm_52").contains("shfl"),
            "{name} sm_52"
        );
        for (mcpu, wave) in [("gfx942", 64), ("gfx1100", 32), ("sm_90", 32)] {
            let asm = asm_for(name, &src, mcpu);
            let loops = &lowered_for(&f, mcpu).loops;
            let nvidia = mcpu.starts_with("sm");
            if nvidia && tuple {
                assert!(!loops.contains("lane_xor("), "{name} {mcpu}");
                assert!(!asm.contains("shfl"), "{name} {mcpu}");
                continue;
            }
            assert!(
                loops.contains(&format!("], {})", wave / 2)),
                "{name} {mcpu}:\n{loops}"
            );
            let (exchange, barrier) = match nvidia {
                true => ("shfl.sync.bfly", "bar.sync"),
                false => ("ds_bpermute_b32", "s_barrier"),
            };
            assert!(asm.contains(exchange), "{name} {mcpu}");
            let barriers = asm.matches(barrier).count();
            // A kernel with a version for short rows has each version's.
            let versions = if loops.contains("\n  else:\n") { 2 } else { 1 };
            assert!(
                barriers <= 3 * reductions * versions,
                "{name} {mcpu}: {barriers} barriers"
            );
            // The exchanges as the CPU runs them (through LDS), against the interpreter.
            let cpu = emulated(&f, mcpu);
            for given in [[5, 1037], [3, 64]] {
                let sizes = cpu.kernel.fit_sizes(&given);
                for c in rocmc::run::run_cpu(&cpu, &sizes, &HashMap::new(), 7, false)
                    .unwrap_or_else(|e| panic!("{name} {mcpu}: {e}"))
                {
                    assert!(c.ok(), "{name} {mcpu} {sizes:?}: {c:?}");
                }
            }
        }
    }
}

/// On AMD a row bounded by one run of a thread's steps (4096 floats: 256
/// threads, four vectors of four each) stays in each thread's registers
/// between the passes, laid out by the strided reads' digits (16 floats a
/// thread): one pass over memory, no LDS for the row and no scratch; its
/// four vector loads issued together. Wider bounds and NVIDIA keep LDS.
/// A row chain whose bound is past one run of a thread's steps (softmax
/// and layernorm at 16384 columns) gets, on AMD, a version for rows of at
/// most 4096 columns that keeps the row in registers (read from memory
/// once, the column vectors beside it), chosen at run time by `cols`; the
/// general version reads the row at each pass. Both mean what the
/// interpreter says, on both sides of the bound and through every AMD
/// lane layout, race-checked; NVIDIA and the CPU's own rules have no
/// version.
#[test]
fn a_long_row_bound_gets_a_register_version_for_short_rows_on_amd() {
    // Every AMD generation's lane layout for one file, wave64 and wave32
    // for the other.
    let cases: [(&str, &[&str]); 2] = [
        (
            "softmax",
            &["gfx942", "gfx950", "gfx1100", "gfx1201", "sm_90"],
        ),
        ("layernorm", &["gfx942", "gfx1100", "sm_90"]),
    ];
    for (file, targets) in cases {
        let src =
            &std::fs::read_to_string(root().join(format!("bench/amd/rocmc/{file}.toml"))).unwrap();
        assert!(
            src.contains("cols = 16384"),
            "{file}: the bound this test is about"
        );
        let f = front(file, src);
        for &mcpu in targets {
            let gpu = lowered_for(&f, mcpu);
            let amd = mcpu.starts_with("gfx");
            assert_eq!(
                gpu.loops.contains("if cols < 4097"),
                amd,
                "{file} {mcpu}:\n{}",
                gpu.loops
            );
            assert_eq!(gpu.loops.contains("X_row: f32[16]"), amd, "{file} {mcpu}");
            if !amd {
                continue;
            }
            let asm = asm_for(file, src, mcpu);
            assert!(asm.contains("ScratchSize: 0"), "{file} {mcpu}");
            let cpu = emulated(&f, mcpu);
            assert!(
                cpu.loops.contains("if cols < 4097"),
                "{file} emulating {mcpu}"
            );
            // Within the version's bound, at it, past it.
            for cols in [7, 4096, 4097] {
                let sizes = [2, cols];
                for c in rocmc::run::run_cpu(&cpu, &sizes, &HashMap::new(), 5, false)
                    .unwrap_or_else(|e| panic!("{file} {mcpu}: {e}"))
                {
                    assert!(c.ok(), "{file} {mcpu} {sizes:?}: {c:?}");
                }
                let spec = rocmc::run::RunSpec::new(&sizes, &Default::default(), 5);
                for c in rocmc::run::run_loops(&gpu, &spec)
                    .unwrap_or_else(|e| panic!("{file} {mcpu} loops: {e}"))
                {
                    assert!(c.ok(), "{file} {mcpu} loops {sizes:?}: {c:?}");
                }
            }
        }
        let cpu = lowered_for(&f, "x86-64");
        assert!(
            !cpu.loops.contains("if cols < 4097"),
            "{file} on the CPU's own rules"
        );
    }
}

#[test]
fn a_row_that_fits_a_threads_steps_stays_in_its_registers_on_amd() {
    // layernorm bounded by 4096 columns, as bench/amd compares it.
    let src = &std::fs::read_to_string(root().join("bench/amd/rocmc/layernorm_4096.toml")).unwrap();
    let f = front("ln", src);
    for mcpu in ["gfx942", "gfx950", "gfx1100", "gfx1201", "sm_90"] {
        let gpu = lowered_for(&f, mcpu);
        let steps = &gpu
            .kernel
            .stages
            .last()
            .unwrap()
            .default
            .as_ref()
            .unwrap()
            .steps;
        let amd = mcpu.starts_with("gfx");
        assert_eq!(
            steps
                .iter()
                .any(|s| s == "X_row = cache_read(X, local, r, vec=4, unroll=4)"),
            amd,
            "{mcpu}: {steps:?}"
        );
        if !amd {
            continue;
        }
        assert!(
            gpu.loops.contains("X_row: f32[16]"),
            "{mcpu}:\n{}",
            gpu.loops
        );
        // gamma and beta, one element a column, come along with the row.
        for t in ["gamma", "beta"] {
            let step = format!("{t}_row = cache_read({t}, local, r, vec=4, unroll=4)");
            assert!(steps.contains(&step), "{mcpu}: {steps:?}");
        }
        let asm = asm_for("ln", src, mcpu);
        assert!(asm.contains("ScratchSize: 0"), "{mcpu}");
        // Every load is issued before the reductions' first barrier: none
        // is waited on after it (Triton's row kernels load so).
        let after_barrier = asm
            .lines()
            .map(str::trim)
            .skip_while(|l| !l.starts_with("s_barrier"))
            .filter(|l| l.starts_with("global_load"))
            .count();
        assert_eq!(after_barrier, 0, "{mcpu}: loads after the first barrier");
        // The row's four vector loads a thread issue together, one check
        // for the group (`unroll=4`), not a wait and a branch each.
        let mut run = 0;
        let mut longest = 0;
        for l in asm.lines().map(str::trim) {
            if l.starts_with("global_load_dwordx4") || l.starts_with("global_load_b128") {
                run += 1;
                longest = longest.max(run);
            } else if l.starts_with("s_waitcnt")
                || l.starts_with("s_cbranch")
                || l.starts_with("s_branch")
            {
                run = 0;
            }
        }
        assert!(
            longest >= 4,
            "{mcpu}: at most {longest} vector loads in a row"
        );
        let cpu = emulated(&f, mcpu);
        // Partial vectors, a partial run, the whole bound.
        for given in [[5, 1037], [3, 4096], [2, 7]] {
            let sizes = cpu.kernel.fit_sizes(&given);
            for c in rocmc::run::run_cpu(&cpu, &sizes, &HashMap::new(), 3, false)
                .unwrap_or_else(|e| panic!("{mcpu}: {e}"))
            {
                assert!(c.ok(), "{mcpu} {sizes:?}: {c:?}");
            }
            let spec = rocmc::run::RunSpec::new(&sizes, &Default::default(), 3);
            for c in
                rocmc::run::run_loops(&gpu, &spec).unwrap_or_else(|e| panic!("{mcpu} loops: {e}"))
            {
                assert!(c.ok(), "{mcpu} loops {sizes:?}: {c:?}");
            }
        }
    }
    // Twice the bound: two runs a thread, which registers cannot index;
    // gfx950's LDS takes the row, gfx942's 16 KiB budget for it does not.
    let wide = src.replace("cols = 4096", "cols = 8192");
    let wide = front("ln", &wide);
    for (mcpu, lds) in [("gfx950", true), ("gfx942", false)] {
        let gpu = lowered_for(&wide, mcpu);
        let last = gpu.kernel.stages.last().unwrap();
        let steps = &last.default.as_ref().unwrap().steps;
        assert!(
            !steps.iter().any(|s| s.contains(", local,")),
            "{mcpu}: {steps:?}"
        );
        let shared = steps.iter().any(|s| s.contains("cache_read(X, shared"));
        assert_eq!(shared, lds, "{mcpu}: {steps:?}");
    }
}

/// Transposes past blockIdx.z, as a new user writes them. Where the
/// tile's rows come just before the last axis, rule `transpose-tiles`
/// fuses the other axes with the row tiles' index on blockIdx.x (once it
/// fused every leading axis first, its LDS tile was then refused, and the
/// stage fell to element-wise tiles at a third of the speed); where they
/// do not, that form is refused and the stage takes the next rule that
/// fits instead of one thread. Without bounds on its sizes the transpose
/// once ran on one thread (no fused range was provable); now its fused
/// loop counts in 32 bits under a launch requirement, and the build says
/// so. A stage no rule takes still gets the one-thread warning and
/// `--emit schedule` says so (rules left out here, as `frontend_rules`
/// leaves out those that do not lower).
#[test]
fn a_rule_that_does_not_lower_gives_way_to_the_next_and_one_thread_is_said() {
    // B x H past blockIdx.z.
    let bounded = r#"
[kernel]
name = "tr4"
sizes = ["B", "H", "S", "D"]
max = { B = 1024, H = 128, S = 4096, D = 128 }

[inputs]
X = { dtype = "f16", shape = ["B", "H", "S", "D"] }

[[stage]]
compute = "O[b, h, d, s] = X[b, h, s, d] * f16(0.5)"
shape = ["B", "H", "D", "S"]
"#;
    let f = front("tr4", bounded);
    let d = f.kernel.stages[0].default.as_ref().expect("a rule");
    assert_eq!(d.rule, "transpose-tiles");
    assert!(
        d.steps.iter().any(|s| s == "b_h_d_o = fuse(b_h, d_o)")
            && d.steps.iter().any(|s| s == "bind(b_h_d_o, blockIdx.x)"),
        "{:?}",
        d.steps
    );
    // The rows (d) apart from the last axis (s), b between them: the
    // leading axes fused first, the tile refused, element-wise tiles.
    let apart = bounded.replace("O[b, h, d, s]", "O[d, b, h, s]").replace(
        "shape = [\"B\", \"H\", \"D\", \"S\"]",
        "shape = [\"D\", \"B\", \"H\", \"S\"]",
    );
    assert_ne!(apart, bounded);
    let g = front("tr4", &apart);
    assert_eq!(
        g.kernel.stages[0].default.as_ref().unwrap().rule,
        "elementwise-tiles"
    );
    for f in [&f, &g] {
        assert!(f.launch.kernels[0].block != [1, 1, 1], "{:?}", f.launch);
        let sizes = f.kernel.fit_sizes(&[2, 3, 17, 9]);
        for c in rocmc::run::run_cpu(f, &sizes, &HashMap::new(), 1, false).unwrap() {
            assert!(c.ok(), "{c:?}");
        }
    }
    let unbounded = bounded.replace("max = { B = 1024, H = 128, S = 4096, D = 128 }\n", "");
    assert_ne!(unbounded, bounded);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tr4.toml"), &unbounded).unwrap();
    let out = rocmc(dir.path(), &["build", "--mcpu", "gfx942", "tr4.toml"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!text.contains("one thread"), "{text}");
    assert!(
        text.contains("block (32, 4, 1)")
            && text.contains(
                "requires (B * H) * ceil(D / 32) <= 4294967295 at launch (loop `b_h_d_o` of stage `O`)"
            ),
        "{text}"
    );
    let f = front("tr4", &unbounded);
    let sizes = f.kernel.fit_sizes(&[2, 3, 17, 9]);
    for c in rocmc::run::run_cpu(&f, &sizes, &HashMap::new(), 1, false).unwrap() {
        assert!(c.ok(), "{c:?}");
    }
    // Every rule left out: the one-thread nest, said.
    let all = [
        "elementwise-tiles",
        "transpose-tiles",
        "elementwise-1d",
        "elementwise-2d",
        "flat",
    ];
    let rules = rocmc::ir::front::RulesFor {
        skip: &all,
        ..Default::default()
    };
    let (k, _) = rocmc::ir::parse_kernel_for("tr4.toml", bounded, &[], 2, rules).unwrap();
    let w = rocmc::explain::one_thread_warnings(&k);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].starts_with("stage `O` runs on one thread"), "{w:?}");
    let text = rocmc::explain::schedules(&k, bounded);
    assert!(text.contains("one thread computes it"), "{text}");
}

/// On NVIDIA, transposes of 2-byte elements keep each thread's 8 x 8 block
/// in registers (rule `transpose-registers`): eight 16-byte loads along the
/// read's rows, eight 16-byte stores along the output's, no LDS. Through
/// LDS every element cost a 2-byte access on both sides (69 % and 46 % of
/// copy on the H200). Elsewhere, and without a target, the LDS tile stays.
/// Each NVIDIA lowering means what the interpreter says at sizes no tile
/// divides, race-checked, and assembles with no spills.
#[test]
fn nvidia_transposes_of_halves_move_8x8_blocks_through_registers() {
    for name in ["transpose4d_fallback", "permute4d_heads"] {
        let src =
            std::fs::read_to_string(root().join(format!("tests/regress/{name}.toml"))).unwrap();
        let f = front(name, &src);
        let d = f.kernel.stages[0].default.as_ref().expect("a rule");
        assert_eq!(d.rule, "transpose-tiles", "{name}");
        assert!(
            d.by_target,
            "{name}: the rule must be asked again per target"
        );
        for (gpu, rule) in [
            ("gfx942", "transpose-tiles"),
            ("sm_90", "transpose-registers"),
        ] {
            let g = lowered_for(&f, gpu);
            let d = g.kernel.stages[0].default.as_ref().expect("a rule");
            assert_eq!(d.rule, rule, "{name} {gpu}");
            for sizes in [[3, 37, 5, 41], [2, 3, 130, 72]] {
                let sizes = f.kernel.fit_sizes(&sizes);
                let spec = rocmc::run::RunSpec::new(&sizes, &HashMap::new(), 5);
                let cmp = rocmc::run::run_loops(&g, &spec).unwrap();
                assert!(
                    cmp.iter().all(|c| c.ok()),
                    "{name} {gpu} {sizes:?}: {cmp:?}"
                );
            }
        }
        let ptx = asm_for(name, &src, "sm_90");
        assert!(!ptx.contains(".shared"), "{name}: an LDS tile");
        let count = |s: &str| ptx.matches(s).count();
        // The fast path's: one group of eight loads, eight stores.
        assert!(count("ld.global.nc.v4.b32") >= 8, "{name}:\n{ptx}");
        assert!(count("st.global.v4.b32") >= 8, "{name}:\n{ptx}");
        for r in assemble_ptx(&ptx, "sm_90").unwrap() {
            assert_eq!(r.spill_stores, 0, "{name}: {r:?}");
        }
    }
}

/// Transposes of rank 3 and 4 tile the two axes they swap through LDS and
/// put the other axes on blockIdx.z unfused with them (fusing every
/// leading axis once made the tile's reads not affine, and the stage gave
/// way to a rule without LDS, at 21 % of copy on the H200). Each matches
/// the interpreter on the CPU; tests/regress holds them for the GPU and
/// the race check.
#[test]
fn transposes_of_rank_three_and_four_tile_the_swapped_axes_through_lds() {
    for (name, rows, z) in [
        ("transpose3d_batched", "c", "bind(b, blockIdx.z)"),
        ("transpose4d_fallback", "d", "bind(b_h, blockIdx.z)"),
        ("permute4d_heads", "d", "bind(b_h, blockIdx.z)"),
    ] {
        let src = std::fs::read_to_string(
            crate::common::root().join(format!("tests/regress/{name}.toml")),
        )
        .unwrap();
        let f = front(name, &src);
        let d = f.kernel.stages[0].default.as_ref().expect("a rule");
        assert_eq!(d.rule, "transpose-tiles", "{name}");
        assert!(d.steps.iter().any(|s| s == z), "{name}: {:?}", d.steps);
        assert!(
            d.steps
                .iter()
                .any(|s| s.starts_with(&format!("{rows}_o, ")) && s.contains("tile(")),
            "{name}: {:?}",
            d.steps
        );
        assert!(
            d.steps.iter().any(|s| s.contains("cache_read(X, shared")),
            "{name}: {:?}",
            d.steps
        );
        let sizes = f.kernel.fit_sizes(&[3, 37, 5, 41]);
        for c in rocmc::run::run_cpu(&f, &sizes, &HashMap::new(), 1, false).unwrap() {
            assert!(c.ok(), "{name}: {c:?}");
        }
    }
}

/// Batched products take the matrix rules: one batch axis (a weight per
/// batch), two (fused onto z), a weight shared by every batch, and batch
/// axes without bounds (only the innermost on the grid, the others looped
/// by each work-group). Each through the lane layouts of an NVIDIA and two
/// AMD processors, the loop IR race-checked, at sizes no multiple of a
/// tile. A batch subscript that also moves with the rows is no batch: the
/// stage is then no matrix product, and still means what it says.
#[test]
fn batched_matrix_products_take_the_matrix_rules() {
    let cases = [
        (
            "bmm",
            r#"sizes = ["B", "M", "N", "K"]
max = { B = 64, M = 4096, N = 4096, K = 4096 }
[inputs]
A = { dtype = "f16", shape = ["B", "M", "K"] }
W = { dtype = "f16", shape = ["B", "K", "N"] }
[[stage]]
compute = "O[b, i, j] = f16(sum(f32(A[b, i, k]) * f32(W[b, k, j]), k))"
shape = ["B", "M", "N"]
reduce = { k = "K" }"#,
            "blockIdx.z",
            vec![3, 70, 45, 83],
        ),
        (
            "heads",
            r#"sizes = ["B", "H", "S", "D"]
max = { B = 64, H = 64, S = 8192, D = 256 }
[inputs]
Q = { dtype = "f16", shape = ["B", "H", "S", "D"] }
K = { dtype = "f16", shape = ["B", "H", "S", "D"] }
[[stage]]
compute = "P[b, h, i, j] = f16(sum(f32(Q[b, h, i, d]) * f32(K[b, h, j, d]), d))"
shape = ["B", "H", "S", "S"]
reduce = { d = "D" }"#,
            "b_h = fuse(b, h)",
            vec![2, 3, 37, 24],
        ),
        (
            "shared_weight_unbounded",
            r#"sizes = ["B", "T", "M", "N", "K"]
[inputs]
X = { dtype = "f16", shape = ["B", "T", "M", "K"] }
W = { dtype = "f16", shape = ["N", "K"] }
[[stage]]
compute = "Y[b, t, i, j] = f16(sum(f32(X[b, t, i, k]) * f32(W[j, k]), k))"
shape = ["B", "T", "M", "N"]
reduce = { k = "K" }"#,
            "bind(t, blockIdx.z)",
            vec![2, 3, 19, 33, 40],
        ),
    ];
    for (name, body, step, sizes) in cases {
        let src = format!("[kernel]\nname = \"{name}\"\n{body}\n");
        let f = front(name, &src);
        for emulate in ["sm_90a", "gfx942", "gfx1100"] {
            let lowered = emulated(&f, emulate);
            let d = lowered.kernel.stages[0].default.as_ref().unwrap();
            assert!(
                d.rule.starts_with("matmul-"),
                "{name} {emulate}: {}",
                d.rule
            );
            assert!(
                d.steps.iter().any(|s| s.contains(step)),
                "{name} {emulate}: {:?}",
                d.steps
            );
            assert!(
                !lowered.matrix_instructions().is_empty(),
                "{name} {emulate}"
            );
            let sizes = lowered.kernel.fit_sizes(&sizes);
            for c in rocmc::run::run_cpu(&lowered, &sizes, &HashMap::new(), 3, false).unwrap() {
                assert!(c.ok(), "{name} {emulate} {sizes:?}: {c:?}");
            }
            let spec = rocmc::run::RunSpec::new(&sizes, &HashMap::new(), 4);
            for c in rocmc::run::run_loops(&lowered_for(&f, emulate), &spec).unwrap() {
                assert!(c.ok(), "{name} loops:{emulate} {sizes:?}: {c:?}");
            }
        }
    }
    let shifted = r#"[kernel]
name = "shifted"
sizes = ["B", "M", "N", "K"]
max = { B = 8, M = 64, N = 64, K = 64 }
[inputs]
A = { dtype = "f32", shape = ["B", "M", "K"] }
W = { dtype = "f32", shape = ["B", "K", "N"] }
[[stage]]
compute = "O[b, i, j] = sum(A[(b + i) % B, i, k] * W[b, k, j], k)"
shape = ["B", "M", "N"]
reduce = { k = "K" }
"#;
    let f = front("shifted", shifted);
    let d = f.kernel.stages[0].default.as_ref().unwrap();
    assert!(!d.rule.starts_with("matmul-"), "{}", d.rule);
    for c in rocmc::run::run_cpu(&f, &[3, 9, 10, 11], &HashMap::new(), 1, false).unwrap() {
        assert!(c.ok(), "{c:?}");
    }
}

/// A weight-only quantised product as written (f16 activations by 8-bit
/// weights and a per-column scale, the plain sum of their f32 casts)
/// takes the matrix rule on every matrix target and its f16 instruction:
/// the weights' tile is staged converted to f16 (`dtype=f16`) on AMD and
/// Hopper's warpgroups (`matmul-wgmma` on sm_90a), kept 8-bit under
/// `mma.sync` with its fragments converted in registers.
/// It means what the interpreter says in every lane layout and in the
/// race-checked loop IR at sizes no tile divides, and compiles without
/// spills to the f16 instruction.
#[test]
fn weight_only_quantised_products_take_the_matrix_rules() {
    for (w, layout) in [
        ("i8", "K\", \"N"),
        ("u8", "N\", \"K"),
        ("f8e4m3fn", "K\", \"N"),
    ] {
        let wq = if layout.starts_with('K') {
            "W[k, j]"
        } else {
            "W[j, k]"
        };
        let src = format!(
            "[kernel]\nname = \"wq\"\nsizes = [\"M\", \"N\", \"K\"]\n[inputs]\nX = {{ dtype = \"f16\", shape = [\"M\", \"K\"] }}\nW = {{ dtype = \"{w}\", shape = [\"{layout}\"] }}\nscale = {{ dtype = \"f16\", shape = [\"N\"] }}\n[[stage]]\ncompute = \"Y[i, j] = f16(sum(f32(X[i, k]) * f32({wq}), k) * f32(scale[j]))\"\nshape = [\"M\", \"N\"]\nreduce = {{ k = \"K\" }}\n"
        );
        let f = front("wq", &src);
        for emulate in ["sm_80", "sm_90a", "gfx942", "gfx950", "gfx1100", "gfx1201"] {
            let lowered = emulated(&f, emulate);
            let d = lowered.kernel.stages[0].default.as_ref().unwrap();
            let rule = match emulate {
                "sm_90a" => "matmul-wgmma",
                _ => "matmul-mma",
            };
            assert_eq!(d.rule, rule, "{w} {emulate}");
            // AMD and Hopper's warpgroups stage the weights converted;
            // mma.sync keeps them 8-bit in LDS (cp.async) and converts the
            // fragments it reads.
            let converted = d
                .steps
                .iter()
                .any(|s| s.starts_with("W_tile") && s.contains("dtype=f16"));
            assert_eq!(
                converted,
                emulate != "sm_80",
                "{w} {emulate}: {:?}",
                d.steps
            );
            let instrs = lowered.matrix_instructions();
            assert!(
                !instrs.is_empty() && instrs.iter().all(|i| i.a == i.b && i.a.bits() == 16),
                "{w} {emulate}"
            );
            for sizes in [[37, 45, 83], [1, 1, 1]] {
                for c in rocmc::run::run_cpu(&lowered, &sizes, &HashMap::new(), 2, false).unwrap() {
                    assert!(c.ok(), "{w} {emulate} {sizes:?}: {c:?}");
                }
            }
            let spec = rocmc::run::RunSpec::new(&[19, 70, 45], &HashMap::new(), 4);
            for c in rocmc::run::run_loops(&lowered_for(&f, emulate), &spec).unwrap() {
                assert!(c.ok(), "{w} loops:{emulate}: {c:?}");
            }
        }
        for (mcpu, instr) in [
            ("gfx942", "v_mfma_f32_16x16x16_f16"),
            ("gfx1100", "v_wmma_f32_16x16x16_f16"),
            ("sm_90", "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"),
            (
                "sm_90a",
                "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16",
            ),
        ] {
            let art = rocmc::compile(
                "wq.toml",
                &src,
                &rocmc::Options::new(mcpu),
                rocmc::Emit {
                    code_object: !mcpu.starts_with("sm"),
                    asm: true,
                    ..Default::default()
                },
            )
            .unwrap_or_else(|e| panic!("{w} {mcpu}: {e}"));
            assert!(art.asm.unwrap().contains(instr), "{w} {mcpu}: no {instr}");
            for k in art
                .code_object
                .iter()
                .flat_map(|co| rocmc::linker::codeobject::read(co).unwrap().kernels)
            {
                let spilled = (k.vgpr_spill_count, k.private_segment_fixed_size);
                assert_eq!(spilled, (0, 0), "{w} {mcpu}: spills");
            }
        }
    }
}

/// A stage declared `output = true` is stored and compared though later
/// stages read it (the residual stream of a fused residual add + RMSNorm);
/// without the declaration it is fused into its readers and never stored.
/// Where its row fits the row chain's LDS (4096 floats), the chain
/// computes it at its row and stores it from there: one kernel writes H
/// and Y, on the CPU and in the race-checked loop IR for gfx942 alike;
/// where it does not (8192 on the CPU's budget) it keeps a kernel of its
/// own. A schedule may compute it at a reader's loop; one that would
/// inline it is refused.
#[test]
fn a_declared_output_is_stored_though_later_stages_read_it() {
    let kept = std::fs::read_to_string(root().join("tests/regress/residual_rmsnorm_keeps_h.toml"))
        .unwrap();
    let narrow = kept.replace("max = { cols = 8192 }", "max = { cols = 4096 }");
    let fused = kept.replace("output = true\n", "");
    assert!(kept != fused && kept != narrow);
    // (file, H stored, H in a kernel of its own)
    for (src, stored, own) in [
        (&kept, true, true),
        (&narrow, true, false),
        (&fused, false, false),
    ] {
        let f = front("residual_rmsnorm", src);
        let h = &f.kernel.stages[0];
        assert_eq!(!h.is_internal(), own, "{:?}", h.default);
        assert_eq!(f.kernel.stored(rocmc::ir::kernel::StageId(0)), stored);
        let y = f.kernel.stages[2].default.as_ref().unwrap();
        assert_eq!(y.rule, "row-chain");
        let sizes = f.kernel.fit_sizes(&[5, 1037]);
        let cmp = rocmc::run::run_cpu(&f, &sizes, &HashMap::new(), 2, false).unwrap();
        let names: Vec<&str> = cmp.iter().map(|c| c.tensor.as_str()).collect();
        assert_eq!(names, if stored { vec!["H", "Y"] } else { vec!["Y"] });
        assert!(cmp.iter().all(|c| c.ok()), "{cmp:?}");
        let gpu = lowered_for(&f, "gfx942");
        let spec = rocmc::run::RunSpec::new(&sizes, &HashMap::new(), 3);
        let cmp = rocmc::run::run_loops(&gpu, &spec).unwrap();
        assert_eq!(cmp.len(), names.len());
        assert!(cmp.iter().all(|c| c.ok()), "{cmp:?}");
        let kernels = gpu
            .kernel
            .stages
            .iter()
            .filter(|s| !s.is_internal())
            .count();
        assert_eq!(kernels, if own { 2 } else { 1 }, "gfx942");
    }
    // The same, written out: H and S computed at Y's row by its threads.
    let member = "schedule = [\"compute_at(Y, r)\", \"c_o, c_t = split(c, 64)\", \"bind(c_t, threadIdx.x)\"]\n";
    let at = format!(
        "{}schedule = [\"bind(r, blockIdx.x)\", \"c_o, c_t = split(c, 64)\", \"bind(c_t, threadIdx.x)\"]\n",
        kept.replace("output = true\n", &format!("output = true\n{member}"))
            .replace("reduce = { c = \"cols\" }\n", &format!("reduce = {{ c = \"cols\" }}\n{member}"))
    );
    let f = front("residual_rmsnorm", &at);
    assert!(f.kernel.stages[0].compute_at().is_some());
    let sizes = f.kernel.fit_sizes(&[3, 70]);
    let cmp = rocmc::run::run_cpu(&f, &sizes, &HashMap::new(), 2, false).unwrap();
    assert_eq!(cmp.len(), 2);
    assert!(cmp.iter().all(|c| c.ok()), "{cmp:?}");
    let inlined = kept.replace(
        "output = true\n",
        "output = true\nschedule = [\"compute_inline()\"]\n",
    );
    let e = rocmc::frontend("residual_rmsnorm.toml", &inlined)
        .unwrap_err()
        .to_string();
    assert!(e.contains("`H` is declared an output"), "{e}");
}

#[test]
fn the_matrix_default_means_what_the_interpreter_says_in_every_lane_layout() {
    // On the CPU, `--emulate` runs the emulated processor's rule (its
    // matrix instructions through their lane layouts) at sizes that are no
    // multiple of any tile.
    let src = unscheduled(&std::fs::read_to_string(example("gemm_bf16_gelu")).unwrap());
    let f = front("gemm_bf16_gelu", &src);
    for emulate in ["sm_90", "gfx942", "gfx1100", "gfx1201"] {
        let lowered = emulated(&f, emulate);
        let d = lowered.kernel.stages[0].default.as_ref().unwrap();
        assert_eq!(d.rule, "matmul-mma", "{emulate}");
        assert!(!lowered.matrix_instructions().is_empty(), "{emulate}");
        let sizes = lowered.kernel.fit_sizes(&[70, 45, 83]);
        let cmp = rocmc::run::run_cpu(&lowered, &sizes, &HashMap::new(), 3, false).unwrap();
        for c in &cmp {
            assert!(c.ok(), "{emulate}: {c:?}");
        }
    }
}

#[test]
fn the_numbers_of_a_default_are_tune_parameters() {
    let src = unscheduled(&std::fs::read_to_string(example("gemm_f16_mma")).unwrap());
    let sm90 = rocmc::Options::new("sm_90");
    let t = rocmc::targets(&sm90).unwrap().remove(0);
    let k = rocmc::kernel_for("g.toml", &src, &[], &t, &sm90).unwrap();
    let tuning = k.tuning.expect("knobs as a tune space");
    let names: Vec<&str> = tuning
        .space
        .params
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(
        names,
        ["C_BM", "C_BN", "C_WM", "C_WN", "C_KSTEPS", "C_STAGES"]
    );
    // The rule's constraints keep the search within shared memory and
    // whole fragments.
    let too_big = tuning.space.resolve(&[
        ("C_BM".into(), 256),
        ("C_BN".into(), 256),
        ("C_STAGES".into(), 5),
    ]);
    assert!(
        too_big.unwrap_err().contains("<= 232448"),
        "sm_90's 227 KiB"
    );
    // gfx942's 16x16 fragments: 64 columns over 8 waves is 8 each.
    let mi300 = rocmc::Options::new("gfx942");
    let t942 = rocmc::targets(&mi300).unwrap().remove(0);
    let k942 = rocmc::kernel_for("g.toml", &src, &[], &t942, &mi300).unwrap();
    let ragged = k942
        .tuning
        .unwrap()
        .space
        .resolve(&[("C_BN".into(), 64), ("C_WN".into(), 8)]);
    assert!(ragged.unwrap_err().contains("% 16 == 0"));
    // A value given changes the steps.
    let tune = [("C_BN".to_string(), 128), ("C_STAGES".to_string(), 2)];
    let k = rocmc::kernel_for("g.toml", &src, &tune, &t, &sm90).unwrap();
    let steps = &k.stages[0].default.as_ref().unwrap().steps;
    assert!(steps[0].ends_with("tile(i, j, 128, 128)"), "{steps:?}");
    assert!(steps.iter().any(|s| s.contains("stages=2")), "{steps:?}");
    // A refused value names this rule's candidates and the stage.
    let e = rocmc::kernel_for("g.toml", &src, &[("C_BN".into(), 100)], &t, &sm90)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("100 is not a candidate of tune parameter `C_BN` (64, 128, 256)"),
        "{e}"
    );
    let e = rocmc::kernel_for("g.toml", &src, &[("C_XY".into(), 1)], &t, &sm90)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no tune parameter `C_XY`; the kernel has: C_BM"),
        "{e}"
    );
    // On the CPU the rule and its knobs are register tiles'.
    let cpu = rocmc::Options::new("x86-64");
    let c = rocmc::targets(&cpu).unwrap().remove(0);
    let k = rocmc::kernel_for("g.toml", &src, &[], &c, &cpu).unwrap();
    let names: Vec<String> = k
        .tuning
        .unwrap()
        .space
        .params
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(names, ["C_BM", "C_BN", "C_TM", "C_TN", "C_BK"]);
}

#[test]
fn rows_shorter_than_the_default_columns_fill_the_work_group_with_rows() {
    let src = |d: &str| {
        format!(
            r#"
[kernel]
name = "heads"
sizes = ["B", "S", "H"]
max = {{ B = 64, S = 4096, H = 32 }}
[inputs]
O = {{ dtype = "f16", shape = ["B", "H", "S", {d}] }}
[[stage]]
compute = "Y[b, s, h, d] = O[b, h, s, d]"
shape = ["B", "S", "H", {d}]
"#
        )
    };
    let steps = |d: &str, tune: &[(String, i64)]| {
        let sm90 = rocmc::Options::new("sm_90");
        let t = rocmc::targets(&sm90).unwrap().remove(0);
        let k = rocmc::kernel_for("h.toml", &src(d), tune, &t, &sm90).map_err(|e| e.to_string())?;
        let st = &k.stages[0];
        Ok::<_, String>(st.default.as_ref().unwrap().steps.clone())
    };
    // A head of 64: 16 rows of 64 columns, 16 x 16 threads of 4 elements, none idle.
    let s64 = steps("64", &[]).unwrap();
    assert!(
        s64.iter().any(|s| s.ends_with("tile(b_s_h, d, 16, 64)")),
        "{s64:?}"
    );
    // 100 columns round up to 128 (8 rows); 256 and longer keep 4 rows of 256.
    let s100 = steps("100", &[]).unwrap();
    assert!(
        s100.iter().any(|s| s.ends_with("tile(b_s_h, d, 8, 128)")),
        "{s100:?}"
    );
    let s256 = steps("256", &[]).unwrap();
    assert!(
        s256.iter().any(|s| s.ends_with("tile(b_s_h, d, 4, 256)")),
        "{s256:?}"
    );
    // The tuner's space leaves out knobs whose work-group would exceed
    // 1,024 threads.
    let sm90 = rocmc::Options::new("sm_90");
    let t = rocmc::targets(&sm90).unwrap().remove(0);
    let k = rocmc::kernel_for("h.toml", &src("64"), &[], &t, &sm90).unwrap();
    let space = k.tuning.expect("knobs as a tune space").space;
    let wide = space.resolve(&[
        ("Y_ROWS".into(), 16),
        ("Y_COLS".into(), 512),
        ("Y_VEC".into(), 1),
    ]);
    assert!(wide.unwrap_err().contains("<= 1024"));
    assert!(space
        .resolve(&[("Y_ROWS".into(), 8), ("Y_COLS".into(), 128)])
        .is_ok());
    // The copy means what the interpreter says, on the CPU.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("heads.toml");
    std::fs::write(&f, src("64")).unwrap();
    let out = rocmc(
        dir.path(),
        &[
            "run",
            "--device",
            "cpu",
            "--size",
            "B=2",
            "--size",
            "S=5",
            "--size",
            "H=3",
            "heads.toml",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn rocmc_tune_searches_an_unscheduled_kernel_and_builds_take_the_result() {
    let d = tempfile::tempdir().unwrap();
    let src = unscheduled(&std::fs::read_to_string(example("saxpy")).unwrap());
    std::fs::write(d.path().join("k.toml"), &src).unwrap();
    let out = rocmc(
        d.path(),
        &[
            "tune", "k.toml", "--size", "n=100003", "--budget", "6", "--reps", "2",
        ],
    );
    let log = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{log}");
    let db = std::fs::read_to_string(d.path().join("rocmc-tuning.toml")).unwrap();
    assert!(db.contains("out_THREADS") && db.contains("out_VEC"), "{db}");
    let out = rocmc(
        d.path(),
        &["build", "--mcpu", "x86-64", "k.toml", "-o", "k.so"],
    );
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("rocmc-tuning.toml"),
        "the build names the database: {err}"
    );
}

#[test]
fn element_wise_producers_read_once_per_element_are_fused_into_their_readers() {
    // gelu_mask: H and G computed where Y reads them: one kernel, one
    // buffer out, Y's rows vectorized.
    let f = front(
        "gelu_mask",
        &std::fs::read_to_string(example("gelu_mask")).unwrap(),
    );
    assert_eq!(f.program.kernels.len(), 1);
    let outs: Vec<&str> = f.launch.kernels[0]
        .args
        .iter()
        .filter(|a| a.written)
        .map(|a| a.name.as_str())
        .collect();
    assert_eq!(outs, ["Y"]);
    let cmp = rocmc::run::run_cpu(&f, &[37, 300], &HashMap::new(), 5, false).unwrap();
    assert!(cmp.iter().all(|c| c.ok()), "{cmp:?}");
    // Not fused: a producer read along a broadcast (each element read by
    // every row), one a matrix product reads (k times per element), one
    // gathered from, and one whose reader has a schedule of its own.
    let rule = |src: &str, stage: &str| {
        let f = front("k", src);
        let st = f.kernel.stages.iter().find(|s| s.name == stage).unwrap();
        st.default.as_ref().map(|d| d.rule)
    };
    let head = "[kernel]\nname = \"k\"\nsizes = [\"n\", \"m\"]\n[inputs]\nX = { dtype = \"f32\", shape = [\"n\", \"m\"] }\nI = { dtype = \"i32\", shape = [\"n\"] }\n";
    let broadcast = format!("{head}[[stage]]\ncompute = \"P[j] = X[0, j] * 2.0\"\nshape = [\"m\"]\n[[stage]]\ncompute = \"Y[i, j] = X[i, j] + P[j]\"\nshape = [\"n\", \"m\"]\n");
    assert_ne!(rule(&broadcast, "P"), Some("inline"));
    let once = broadcast
        .replace("P[j] = X[0, j] * 2.0", "P[i, j] = X[i, j] * 2.0")
        .replace("shape = [\"m\"]", "shape = [\"n\", \"m\"]")
        .replace("X[i, j] + P[j]", "X[i, j] + P[i, j]");
    assert_eq!(rule(&once, "P"), Some("inline"));
    let matmul = format!("{head}[[stage]]\ncompute = \"P[i, j] = X[i, j] * 2.0\"\nshape = [\"n\", \"m\"]\n[[stage]]\ncompute = \"Y[i, j] = sum(P[i, k] * X[k, j], k)\"\nshape = [\"n\", \"m\"]\nreduce = {{ k = \"m\" }}\n");
    assert_ne!(rule(&matmul, "P"), Some("inline"));
    let gathered = format!("{head}[[stage]]\ncompute = \"P[i, j] = X[i, j] * 2.0\"\nshape = [\"n\", \"m\"]\n[[stage]]\ncompute = \"Y[i, j] = P[I[i], j]\"\nshape = [\"n\", \"m\"]\n");
    assert_ne!(rule(&gathered, "P"), Some("inline"));
    let scheduled = once.replace(
        "X[i, j] + P[i, j]\"\nshape = [\"n\", \"m\"]",
        "X[i, j] + P[i, j]\"\nshape = [\"n\", \"m\"]\nschedule = [\"bind(i, blockIdx.x)\", \"jo, ji = split(j, 64)\", \"bind(ji, threadIdx.x)\"]",
    );
    assert_ne!(scheduled, once);
    assert_ne!(rule(&scheduled, "P"), Some("inline"));
}

/// Unlike every example: f16, i8 and bf16 inputs, clamped subscripts, a
/// gather, a producer chain, a column sum and a transposed write, with no
/// schedule at all. Every stage keeps a rule (a rule whose schedule does
/// not lower sends the whole kernel back to one thread per stage).
const ODD: &str = r#"
[kernel]
name = "odd"
sizes = ["n", "m", "v"]

[inputs]
A = { dtype = "f16", shape = ["n", "m"] }
W = { dtype = "i8", shape = ["m", "m"] }
ids = { dtype = "i32", shape = ["n"] }
T = { dtype = "bf16", shape = ["v", "m"] }

[[stage]]
compute = "P[i, j] = f32(A[max(i - 1, 0), min(j + 1, m - 1)]) * 0.5 + f32(T[ids[i], j])"
shape = ["n", "m"]

[[stage]]
compute = "Q[i, j] = tanh(P[i, j]) + f32(W[j, i % m])"
shape = ["n", "m"]

[[stage]]
compute = "S[j] = sum(Q[i, j] * Q[i, j], i)"
shape = ["m"]
reduce = { i = "n" }

[[stage]]
compute = "R[j, i] = f16(Q[i, j] / (1.0 + S[j]))"
shape = ["m", "n"]
"#;

#[test]
fn an_unusual_unscheduled_kernel_keeps_a_rule_for_every_stage_and_its_meaning() {
    let f = front("odd", ODD);
    let rules: Vec<(&str, &str)> = f
        .kernel
        .stages
        .iter()
        .map(|s| {
            (
                s.name.as_str(),
                s.default.as_ref().map_or("none", |d| d.rule),
            )
        })
        .collect();
    // R's read of Q crosses its rows, but through a clamp of A that
    // `cache_read` cannot stage: 16 x 16 tiles instead of transpose-tiles.
    assert_eq!(
        rules,
        [
            ("P", "inline"),
            ("Q", "inline"),
            ("S", "column-reduction"),
            ("R", "elementwise-tiles")
        ]
    );
    for sizes in [[1, 1, 1], [67, 45, 13], [300, 129, 7]] {
        let sizes = f.kernel.fit_sizes(&sizes);
        let cmp = rocmc::run::run_cpu(&f, &sizes, &HashMap::new(), 2, false).unwrap();
        assert!(cmp.iter().all(|c| c.ok()), "{sizes:?}: {cmp:?}");
    }
}

/// A 1-D map on AMD's wave32 processors takes two vectors per thread and
/// loads all four (two per input) before it waits for any, as Triton's
/// 1024-wide programs do (bench/amd: vadd on gfx1100 0.50x -> 1.00x of
/// Triton's bytes in flight); wave64 AMD and NVIDIA keep one vector. On
/// the CPU through each lane layout the map means what the interpreter
/// says at sizes around the two-vector step.
#[test]
fn a_map_on_wave32_amd_keeps_two_vectors_per_thread_in_flight() {
    let src = std::fs::read_to_string(root().join("bench/amd/rocmc/vadd.toml")).unwrap();
    let f = front("vadd", &src);
    for (processor, vecs) in [("gfx1100", 2), ("gfx1201", 2), ("gfx942", 1), ("sm_90", 1)] {
        let lowered = emulated(&f, processor);
        let d = lowered.kernel.stages[0].default.as_ref().unwrap();
        assert_eq!(d.rule, "elementwise-1d", "{processor}");
        let knob = d.knobs.iter().find(|k| k.name == "C_VECS").unwrap();
        assert_eq!(knob.value, vecs, "{processor}: {:?}", d.steps);
        for n in [1, 1023, 2048, 2051, 6147] {
            let cmp = rocmc::run::run_cpu(&lowered, &[n], &HashMap::new(), 3, false)
                .unwrap_or_else(|e| panic!("{processor} n={n}: {e}"));
            assert!(cmp.iter().all(|c| c.ok()), "{processor} n={n}: {cmp:?}");
        }
    }
    // Between two waits, four 16-byte loads (one vector per thread: two).
    for (processor, loads) in [("gfx1100", 4), ("gfx942", 2)] {
        let asm = asm_for("vadd", &src, processor);
        let most = asm
            .split("s_waitcnt vmcnt")
            .map(|run| {
                run.matches("global_load_dwordx4").count() + run.matches("global_load_b128").count()
            })
            .max();
        assert_eq!(most, Some(loads), "{processor}:\n{asm}");
    }
}

/// GroupNorm's statistics reduce two axes (a group's channels and
/// pixels): the row-reduction rule splits the pixels over a work-group's
/// threads and walks the channels serially around them (it ran each
/// output's group on one thread); a short last axis (a 3 x 3 window) is
/// fused with the others instead, as is the sequence of a combiner that
/// keeps the order. Each means what the interpreter says, on the CPU and
/// race-checked for gfx942 and sm_90.
#[test]
fn several_reduced_axes_spread_over_a_work_group() {
    let src = std::fs::read_to_string(root().join("tests/regress/groupnorm_stats.toml")).unwrap();
    let window = src.replace("p = \"HW\"", "p = 9").replace(
        "X[n, g * (C / 32) + c, p]",
        "X[n, g * (C / 32) + c, p + HW - 9]",
    );
    for (text, fused) in [(&src, false), (&window, true)] {
        let f = front("groupnorm_stats", text);
        let d = f.kernel.stages[0].default.as_ref().unwrap();
        assert_eq!(d.rule, "row-reduction", "{:?}", d.steps);
        let steps = d.steps.join("; ");
        assert_eq!(steps.contains("fuse(c, p)"), fused, "{steps}");
        assert_eq!(steps.contains("bind(p_t, threadIdx.x)"), !fused, "{steps}");
        let sizes = f.kernel.fit_sizes(&[3, 96, 300]);
        let cmp = rocmc::run::run_cpu(&f, &sizes, &HashMap::new(), 2, false).unwrap();
        assert!(cmp.iter().all(|c| c.ok()), "{cmp:?}");
        for gpu in ["gfx942", "sm_90"] {
            let spec = rocmc::run::RunSpec::new(&sizes, &HashMap::new(), 3);
            let cmp = rocmc::run::run_loops(&lowered_for(&f, gpu), &spec).unwrap();
            assert!(cmp.iter().all(|c| c.ok()), "{gpu}: {cmp:?}");
        }
    }
}
