//! rocmc against clang-22 + ld.lld-22, kernel by kernel.
//!
//! For every example with a hand-written HIP equivalent in
//! bench/reference/ and for gfx90a, gfx942 and gfx1100 (or the targets its
//! first line names, `// targets: …`): the wall time of
//! whole cold processes (median of `--runs`, at least 5) — `rocmc build` on
//! one side, `clang-22 … -fhip-emit-relocatable -c` plus `ld.lld-22 -shared`
//! on the other — and the resources of both code objects (VGPRs, SGPRs,
//! spills, LDS) and their instruction counts from llvm-objdump-22. Prints a
//! table, writes bench/results.md and bench/compile_time.svg.
//!
//! Usage: rocmc-bench ROCMC_BINARY [--runs N]

use rocmc_linker::codeobject;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const TARGETS: [&str; 3] = ["gfx90a", "gfx942", "gfx1100"];

struct Row {
    example: String,
    target: String,
    rocmc_ms: f64,
    clang_ms: f64,
    ours: Resources,
    theirs: Resources,
}

#[derive(Default, Clone)]
struct Resources {
    vgpr: u64,
    agpr: u64,
    sgpr: u64,
    spills: u64,
    lds: u64,
    instructions: u64,
    /// MFMA/WMMA instructions issued, and the distinct mnemonics.
    matrix: u64,
    matrix_ops: Vec<String>,
}

fn run(cmd: &mut Command) -> f64 {
    let t = Instant::now();
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let ms = t.elapsed().as_secs_f64() * 1e3;
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    ms
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Instructions of every kernel, not counting the padding after the last
/// one, and the matrix instructions among them.
fn instructions(file: &Path, mcpu: &str) -> (u64, u64, Vec<String>) {
    let out = Command::new("llvm-objdump-22")
        .args(["-d", &format!("--mcpu={mcpu}")])
        .arg(file)
        .output()
        .expect("llvm-objdump-22");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines: Vec<&str> = text.lines().filter(|l| l.starts_with('\t')).collect();
    while lines.last().is_some_and(|l| {
        l.trim_start().starts_with("s_nop") || l.trim_start().starts_with("s_code_end")
    }) {
        lines.pop();
    }
    let mut ops: Vec<String> = Vec::new();
    let mut matrix = 0;
    for l in &lines {
        let op = l.split_whitespace().next().unwrap_or("");
        if op.starts_with("v_mfma") || op.starts_with("v_wmma") || op.starts_with("v_smfmac") {
            matrix += 1;
            if !ops.iter().any(|o| o == op) {
                ops.push(op.to_string());
            }
        }
    }
    (lines.len() as u64, matrix, ops)
}

fn resources(file: &Path, mcpu: &str) -> Resources {
    let co = codeobject::read(&std::fs::read(file).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let (instructions, matrix, matrix_ops) = instructions(file, mcpu);
    let mut r = Resources {
        instructions,
        matrix,
        matrix_ops,
        ..Default::default()
    };
    for k in &co.kernels {
        r.vgpr = r.vgpr.max(k.vgpr_count);
        r.agpr = r.agpr.max(k.agpr_count.unwrap_or(0));
        r.sgpr = r.sgpr.max(k.sgpr_count);
        r.spills += k.vgpr_spill_count + k.sgpr_spill_count;
        r.lds = r.lds.max(k.group_segment_fixed_size);
    }
    r
}

/// The targets a reference is compared on: `// targets: …` on its first
/// line (a matrix-core kernel exists only where its instruction does),
/// otherwise all of TARGETS.
fn targets(hip: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(hip).unwrap_or_else(|e| panic!("{}: {e}", hip.display()));
    match text
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("// targets:"))
    {
        Some(list) => list.split_whitespace().map(String::from).collect(),
        None => TARGETS.iter().map(|t| t.to_string()).collect(),
    }
}

fn ratio(a: f64, b: f64) -> String {
    if b == 0.0 {
        "-".into()
    } else {
        format!("{:.2}", a / b)
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rocmc = PathBuf::from(
        args.get(1)
            .expect("usage: rocmc-bench ROCMC_BINARY [--runs N]"),
    );
    let runs: usize = args
        .iter()
        .position(|a| a == "--runs")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(5)
        .max(5);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    let tmp = tempfile::tempdir().unwrap();
    let mut examples: Vec<String> = std::fs::read_dir(root.join("bench/reference"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "hip"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .filter(|n| root.join("examples").join(format!("{n}.toml")).exists())
        .collect();
    examples.sort();
    let mut rows = Vec::new();
    for ex in &examples {
        let hip = root.join("bench/reference").join(format!("{ex}.hip"));
        for t in targets(&hip) {
            let t = t.as_str();
            let kernel = root.join("examples").join(format!("{ex}.toml"));
            let ours = tmp.path().join(format!("{ex}-{t}.rocmc.hsaco"));
            let obj = tmp.path().join(format!("{ex}-{t}.o"));
            let theirs = tmp.path().join(format!("{ex}-{t}.clang.hsaco"));
            let mut r_times = Vec::new();
            let mut c_times = Vec::new();
            // Interleave the two so machine noise hits both alike.
            for _ in 0..runs {
                r_times.push(run(Command::new(&rocmc)
                    .args(["build", "-q", "--mcpu", t])
                    .arg(&kernel)
                    .arg("-o")
                    .arg(&ours)));
                let c = run(Command::new("clang-22")
                    .args([
                        "-x",
                        "hip",
                        &format!("--offload-arch={t}"),
                        "--cuda-device-only",
                        "-nogpulib",
                        "-nogpuinc",
                        "-O3",
                        "-fhip-emit-relocatable",
                        "-c",
                    ])
                    .arg(&hip)
                    .arg("-o")
                    .arg(&obj));
                let l = run(Command::new("ld.lld-22")
                    .arg("-shared")
                    .arg(&obj)
                    .arg("-o")
                    .arg(&theirs));
                c_times.push(c + l);
            }
            rows.push(Row {
                example: ex.clone(),
                target: t.into(),
                rocmc_ms: median(r_times),
                clang_ms: median(c_times),
                ours: resources(&ours, t),
                theirs: resources(&theirs, t),
            });
            eprint!(".");
        }
    }
    eprintln!();

    let mut md = String::new();
    md.push_str(&format!("# rocmc vs clang-22 + ld.lld-22\n\nCompile time: median of {runs} cold processes each (rocmc: `rocmc build`; clang: `clang-22 -x hip --cuda-device-only -nogpulib -nogpuinc -O3 -fhip-emit-relocatable -c` then `ld.lld-22 -shared`). Resources from the code objects' metadata (max over a file's kernels; spills summed), instructions counted by `llvm-objdump-22 -d` (all kernels of the file). Ratios are rocmc / clang: below 1 is better for rocmc.\n\n"));
    md.push_str("| kernel | target | rocmc ms | clang+lld ms | time ratio | VGPR rocmc/clang | SGPR rocmc/clang | spills rocmc/clang | LDS rocmc/clang | instructions rocmc/clang | instr. ratio |\n");
    md.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for r in &rows {
        md.push_str(&format!(
            "| {} | {} | {:.1} | {:.1} | {} | {}/{} | {}/{} | {}/{} | {}/{} | {}/{} | {} |\n",
            r.example,
            r.target,
            r.rocmc_ms,
            r.clang_ms,
            ratio(r.rocmc_ms, r.clang_ms),
            r.ours.vgpr,
            r.theirs.vgpr,
            r.ours.sgpr,
            r.theirs.sgpr,
            r.ours.spills,
            r.theirs.spills,
            r.ours.lds,
            r.theirs.lds,
            r.ours.instructions,
            r.theirs.instructions,
            ratio(r.ours.instructions as f64, r.theirs.instructions as f64),
        ));
    }
    let n = rows.len() as f64;
    let geo = |f: &dyn Fn(&Row) -> f64| (rows.iter().map(|r| f(r).ln()).sum::<f64>() / n).exp();
    let time_geo = geo(&|r| r.rocmc_ms / r.clang_ms);
    let instr_geo = geo(&|r| r.ours.instructions as f64 / r.theirs.instructions.max(1) as f64);
    let vgpr_worse = rows.iter().filter(|r| r.ours.vgpr > r.theirs.vgpr).count();
    let instr_worse = rows
        .iter()
        .filter(|r| r.ours.instructions > r.theirs.instructions)
        .count();
    let spills: u64 = rows.iter().map(|r| r.ours.spills).sum();
    md.push_str(&format!(
        "\nGeometric means: compile time ratio **{time_geo:.2}** (target ≤ 0.5), instruction ratio **{instr_geo:.2}** (target ≤ 1.0).\nrocmc uses more VGPRs than clang in {vgpr_worse} of {} rows and more instructions in {instr_worse}; rocmc spills: {spills}.\n",
        rows.len()
    ));
    md.push_str(&matrix_section(&rows));
    // Where a rocmc compile spends its time.
    let out = Command::new(&rocmc)
        .args(["build", "-q", "--time-passes", "--mcpu", "gfx90a"])
        .arg(root.join("examples/matmul_regtile.toml"))
        .arg("-o")
        .arg(tmp.path().join("tp.hsaco"))
        .output()
        .unwrap();
    md.push_str(&format!(
        "\n## One rocmc compile by phase (matmul_regtile, gfx90a)\n\n```\n{}```\n",
        String::from_utf8_lossy(&out.stderr)
    ));
    md.push_str(&nvidia_section(&rocmc, &root, tmp.path()));
    md.push_str("\n![compile time](compile_time.svg)\n");
    print!("{md}");
    std::fs::write(root.join("bench/results.md"), &md).unwrap();
    std::fs::write(root.join("bench/compile_time.svg"), svg(&rows)).unwrap();
    eprintln!("wrote bench/results.md and bench/compile_time.svg");
}

/// The rows whose code issues matrix instructions, against clang's
/// `__builtin_amdgcn_mfma_*` / `wmma_*` version of the same tiling.
fn matrix_section(rows: &[Row]) -> String {
    let rows: Vec<&Row> = rows
        .iter()
        .filter(|r| r.theirs.matrix > 0 || r.ours.matrix > 0)
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let mut md = String::from("\n## Matrix cores: rocmc `mma(...)` against clang's MFMA/WMMA builtins\n\nThe hand-written references (bench/reference/mma_hip.h) use the same tiling as the examples: 64x64 block tiles, 2x2 waves of 2x2 16x16 fragments, A and B staged in padded LDS, fragments read from LDS with the k tail zeroed. Matrix instructions counted in the disassembly; AGPRs from the code-object metadata.\n\n| kernel | target | instruction (rocmc / clang) | matrix instr. rocmc/clang | VGPR rocmc/clang | AGPR rocmc/clang | LDS B rocmc/clang | spills rocmc/clang | instructions rocmc/clang | compile ms rocmc/clang |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for r in rows {
        let ours = r.ours.matrix_ops.join(", ");
        let theirs = r.theirs.matrix_ops.join(", ");
        let ops = if ours == theirs {
            ours
        } else {
            format!("{ours} / {theirs}")
        };
        md.push_str(&format!(
            "| {} | {} | {} | {}/{} | {}/{} | {}/{} | {}/{} | {}/{} | {}/{} | {:.1}/{:.1} |\n",
            r.example,
            r.target,
            ops,
            r.ours.matrix,
            r.theirs.matrix,
            r.ours.vgpr,
            r.theirs.vgpr,
            r.ours.agpr,
            r.theirs.agpr,
            r.ours.lds,
            r.theirs.lds,
            r.ours.spills,
            r.theirs.spills,
            r.ours.instructions,
            r.theirs.instructions,
            r.rocmc_ms,
            r.clang_ms,
        ));
    }
    md
}

/// A horizontal bar chart of compile times, two bars per row.
fn svg(rows: &[Row]) -> String {
    let max = rows
        .iter()
        .map(|r| r.rocmc_ms.max(r.clang_ms))
        .fold(1.0, f64::max);
    let (left, width, bar, gap) = (190.0, 520.0, 9.0, 8.0);
    let h = rows.len() as f64 * (2.0 * bar + gap) + 60.0;
    let mut s = format!("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n", left + width + 80.0);
    s.push_str("<text x=\"10\" y=\"18\" font-size=\"14\">Compile time per kernel (ms, median of cold processes)</text>\n");
    s.push_str(&format!("<rect x=\"{left}\" y=\"28\" width=\"12\" height=\"10\" fill=\"#d9480f\"/><text x=\"{}\" y=\"37\">rocmc</text>\n", left + 16.0));
    s.push_str(&format!("<rect x=\"{}\" y=\"28\" width=\"12\" height=\"10\" fill=\"#868e96\"/><text x=\"{}\" y=\"37\">clang-22 + ld.lld-22</text>\n", left + 70.0, left + 86.0));
    for (i, r) in rows.iter().enumerate() {
        let y = 50.0 + i as f64 * (2.0 * bar + gap);
        s.push_str(&format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{} {}</text>\n",
            left - 6.0,
            y + bar + 3.0,
            r.example,
            r.target
        ));
        for (j, (ms, color)) in [(r.rocmc_ms, "#d9480f"), (r.clang_ms, "#868e96")]
            .iter()
            .enumerate()
        {
            let w = width * ms / max;
            let yy = y + j as f64 * bar;
            s.push_str(&format!("<rect x=\"{left}\" y=\"{yy}\" width=\"{w:.1}\" height=\"{}\" fill=\"{color}\"/><text x=\"{:.1}\" y=\"{}\">{ms:.0}</text>\n", bar - 1.0, left + w + 4.0, yy + bar - 1.5));
        }
    }
    s.push_str("</svg>\n");
    s
}

/// Every example for NVIDIA (sm_90): rocmc's compile time to PTX, and what
/// NVIDIA's own assembler reports for that PTX, next to the AMDGPU figures
/// of rocmc's code object for gfx90a.
fn nvidia_section(rocmc: &Path, root: &Path, tmp: &Path) -> String {
    let Some(ptxas) = rocmc_linker::ptxas::find() else {
        return "\n## NVIDIA\n\nptxas not found (scripts/install-ptxas.sh): not measured.\n".into();
    };
    let mut names: Vec<String> = std::fs::read_dir(root.join("examples"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut md = String::from(
        "\n## The same kernels for NVIDIA (sm_90), beside gfx90a\n\nrocmc's compile time to PTX (median of 5 cold processes), and NVIDIA's assembler's report for that PTX (`ptxas -v -arch sm_90`, CUDA 12.9; max over a file's kernels, spills summed), beside rocmc's gfx90a code object. Run time on a real GPU: bench/gpu-results.md.\n\n| kernel | rocmc → PTX ms | registers sm_90 | VGPRs gfx90a | shared B sm_90 | LDS B gfx90a | spill bytes sm_90 | spills gfx90a |\n|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let mut skipped = Vec::new();
    for n in &names {
        let kernel = root.join("examples").join(format!("{n}.toml"));
        let ptx = tmp.join(format!("{n}.ptx"));
        let hsaco = tmp.join(format!("{n}.hsaco"));
        // A matrix-core example is shaped for one family's instruction:
        // compared where both targets compile it, listed where not.
        let refusal = ["sm_90", "gfx90a"].iter().find_map(|t| {
            let out = Command::new(rocmc)
                .args(["build", "-q", "--mcpu", t])
                .arg(&kernel)
                .arg("-o")
                .arg(tmp.join("probe"))
                .output()
                .expect("rocmc");
            let err = String::from_utf8_lossy(&out.stderr);
            (!out.status.success() && err.contains("mma(")).then(|| {
                format!(
                    "{n} on {t}: {}",
                    err.lines()
                        .next()
                        .unwrap_or("")
                        .trim_start_matches("error: ")
                )
            })
        });
        if let Some(r) = refusal {
            skipped.push(r);
            continue;
        }
        let ms = median(
            (0..5)
                .map(|_| {
                    run(Command::new(rocmc)
                        .args(["build", "-q", "--mcpu", "sm_90"])
                        .arg(&kernel)
                        .arg("-o")
                        .arg(&ptx))
                })
                .collect(),
        );
        run(Command::new(rocmc)
            .args(["build", "-q", "--mcpu", "gfx90a"])
            .arg(&kernel)
            .arg("-o")
            .arg(&hsaco));
        let reports =
            rocmc_linker::ptxas::assemble(&ptxas, &std::fs::read_to_string(&ptx).unwrap(), "sm_90")
                .unwrap_or_else(|e| panic!("ptxas refused {n}: {e}"));
        let amd = resources(&hsaco, "gfx90a");
        let regs = reports.iter().map(|r| r.registers).max().unwrap_or(0);
        let smem = reports.iter().map(|r| r.shared_bytes).max().unwrap_or(0);
        let spills: u32 = reports.iter().map(|r| r.spill_stores + r.spill_loads).sum();
        md.push_str(&format!(
            "| {n} | {ms:.1} | {regs} | {} | {smem} | {} | {spills} | {} |\n",
            amd.vgpr, amd.lds, amd.spills
        ));
    }
    if !skipped.is_empty() {
        md.push_str(
            "\nNot in this table (the matrix instruction's shape exists on one family only):\n\n",
        );
        for s in skipped {
            md.push_str(&format!("- {s}\n"));
        }
    }
    md
}
