//! Reductions spread over work-groups: a reduction loop bound to a
//! blockIdx. Each work-group reduces its part of the row, then combines it
//! into the output with one atomic update per output element, after a fill
//! of the output with the operation's identity (its own kernel, as a
//! scatter's). The interpreter's meaning is the reduction's; the CPU path
//! and every GPU back end must agree with it. With no schedule, rule
//! `grid-reduction` does this for few outputs over long rows.

use crate::common::*;
use rocmc::ir::loops::Stmt;

/// tests/grid/ and the benchmark's grid reductions (timed on the GPU).
fn kernels() -> Vec<(String, String)> {
    let mut v = kernel_files("grid");
    assert!(v.len() >= 2, "tests/grid/ lost its kernels");
    for name in [
        "reduce_all",
        "reduce_rows8",
        "norm_all",
        "mean_rows4_f16",
        "bias_grad_narrow",
    ] {
        let path = root().join(format!("bench/gpu/variants/{name}.toml"));
        v.push((name.into(), std::fs::read_to_string(path).unwrap()));
    }
    v
}

/// Sizes from one element to several work-groups' chunks of every stage
/// (the smallest chunk is 8 elements, the default one 4,096).
const SIZES: &[i64] = &[1, 2, 7, 33, 100, 1000, 5000, 40000];
const AMD: &[&str] = &["gfx90a", "gfx942", "gfx1100", "gfx1201"];
const NVIDIA: &[&str] = &["sm_52", "sm_70", "sm_80", "sm_90"];

#[test]
fn grid_reductions_agree_with_the_interpreter_on_the_cpu() {
    check_on_the_cpu(&kernels(), SIZES);
}

/// Every grid-reduced stage gets a fill kernel before it, and its result
/// reaches memory only through atomic updates, never a plain store.
#[test]
fn grid_reductions_lower_to_a_fill_and_atomic_updates() {
    for (name, src) in kernels() {
        let k = rocmc::ir::parse_kernel(&name, &src).unwrap();
        let prog = rocmc::ir::lower(&k).unwrap();
        let names: Vec<&str> = prog.kernels.iter().map(|g| g.name.as_str()).collect();
        for st in &k.stages {
            let main = prog
                .kernels
                .iter()
                .position(|g| g.name.ends_with(&format!("_{}", st.name)) || g.name == k.name)
                .unwrap_or_else(|| panic!("{name}: no kernel for `{}` in {names:?}", st.name));
            assert!(
                main > 0 && prog.kernels[main - 1].name.ends_with("_init"),
                "{name}: `{}` has no fill before it: {names:?}",
                st.name
            );
            let (mut stores, mut atomics) = (0, 0);
            rocmc::ir::loops::visit::walk(&prog.kernels[main].body, &mut |s| match s {
                Stmt::Store { tensor, .. } if *tensor == st.output => stores += 1,
                Stmt::Scatter { tensor, .. } if *tensor == st.output => atomics += 1,
                _ => {}
            });
            assert_eq!(
                (stores, atomics),
                (0, 1),
                "{name}: `{}` stores its result",
                st.name
            );
        }
    }
    check_lowered(&kernels(), SIZES);
}

#[test]
fn grid_reductions_compile_for_every_target() {
    compile_everywhere(&kernels(), AMD, NVIDIA);
}

fn rule_of(src: &str, stage: &str) -> Option<&'static str> {
    let f = rocmc::frontend("k.toml", src).unwrap_or_else(|e| panic!("{e}"));
    let st = f.kernel.stages.iter().find(|s| s.name == stage).unwrap();
    st.default.as_ref().map(|d| d.rule)
}

/// The rule fires for few outputs over long rows, and only there.
#[test]
fn the_grid_rule_takes_few_outputs_over_long_rows() {
    let kernel = |shape: &str, rows: &str, cols: &str, value: &str| {
        format!(
            "[kernel]\nname = \"k\"\nsizes = [\"n\", \"m\"]\n[inputs]\nX = {{ dtype = \"f32\", shape = [{rows}, {cols}] }}\n\
             [[stage]]\ncompute = \"S[r] = {value}\"\nshape = [{shape}]\nreduce = {{ c = {cols} }}\n"
        )
    };
    let sum = "sum(X[r, c], c)";
    let n = "\"n\"";
    let cases = [
        (kernel("4", "4", n, sum), "grid-reduction"),
        (kernel("64", "64", "1048576", sum), "grid-reduction"),
        // Many rows, or rows of unknown count: a work-group per row.
        (kernel("65", "65", n, sum), "row-reduction"),
        (kernel("\"m\"", "\"m\"", n, sum), "row-reduction"),
        // A short constant row fits one work-group.
        (kernel("4", "4", "4096", sum), "row-reduction"),
        // An epilogue runs after the parts have met.
        (
            kernel("4", "4", n, "sum(X[r, c], c) / f32(n)"),
            "grid-reduction",
        ),
        // Parts cannot meet in an f16 output of an f32 sum; `prod` has
        // no atomic update.
        (kernel("4", "4", n, "f16(sum(X[r, c], c))"), "row-reduction"),
        (kernel("4", "4", n, "prod(X[r, c], c)"), "row-reduction"),
    ];
    for (src, rule) in cases {
        assert_eq!(rule_of(&src, "S"), Some(rule), "{src}");
    }
}

/// Down columns: few columns (a constant count making fewer than 64
/// work-groups of 32) split the rows over the grid too.
#[test]
fn few_columns_split_their_rows_over_the_grid() {
    let kernel = |cols: &str, rows: &str, value: &str| {
        format!(
            "[kernel]\nname = \"k\"\nsizes = [\"n\", \"m\"]\n[inputs]\nD = {{ dtype = \"f32\", shape = [{rows}, {cols}] }}\n\
             [[stage]]\ncompute = \"S[j] = {value}\"\nshape = [{cols}]\nreduce = {{ i = {rows} }}\n"
        )
    };
    let sum = "sum(D[i, j], i)";
    let cases = [
        (kernel("64", "\"n\"", sum), "column-reduction-grid"),
        (kernel("2016", "\"n\"", sum), "column-reduction-grid"),
        (kernel("2048", "\"n\"", sum), "column-reduction"),
        (kernel("\"m\"", "\"n\"", sum), "column-reduction"),
        (kernel("64", "4096", sum), "column-reduction"),
        (
            kernel("64", "\"n\"", "f16(sum(D[i, j], i))"),
            "column-reduction",
        ),
    ];
    for (src, rule) in cases {
        assert_eq!(rule_of(&src, "S"), Some(rule), "{src}");
    }
}

/// What cannot be combined atomically is refused at the binding, with the
/// reason and the line and column of the step.
#[test]
fn stages_that_cannot_combine_parts_are_refused_at_the_binding() {
    let kernel = |value: &str, extra: &str| {
        format!(
            "[kernel]\nname = \"k\"\nsizes = [\"n\"]\n[inputs]\nX = {{ dtype = \"f32\", shape = [\"n\"] }}\n\
             [[stage]]\ncompute = \"{value}\"\nshape = [1]\nreduce = {{ i = \"n\" }}\n\
             schedule = [\"io, ii = split(i, 64)\", \"bind(io, blockIdx.x)\"{extra}]\n"
        )
    };
    for (value, extra, why) in [
        ("S[z] = f16(sum(X[i], i))", "", "the reduction is `f32`"),
        (
            "S[z] = i32(sum(X[i], i) * 2.0)",
            "",
            "the reduction is `f32`",
        ),
        ("S[z] = prod(X[i], i)", "", "`prod` has no atomic update"),
        (
            "S[z] = sum(X[i], i)",
            ", \"SL = cache_write(S, local, ii)\"",
            "`cache_write` of `S`",
        ),
    ] {
        let src = kernel(value, extra);
        let e = rocmc::frontend("k.toml", &src)
            .err()
            .unwrap_or_else(|| panic!("{value}{extra} was accepted"));
        let text = e.to_string();
        assert!(
            text.contains("cannot be bound to a blockIdx") && text.contains(why),
            "{value}{extra}: {text}"
        );
        assert!(text.contains("k.toml:"), "no position: {text}");
    }
    // An argmax reduces 64-bit keys (value and index) into an i32 index.
    let src = "[kernel]\nname = \"k\"\nsizes = [\"n\"]\n[inputs]\nX = { dtype = \"f32\", shape = [\"n\"] }\n\
               [[stage]]\ncompute = \"I[z] = argmax(X[i], i)\"\nshape = [1]\nreduce = { i = \"n\" }\n\
               schedule = [\"io, ii = split(i, 64)\", \"bind(io, blockIdx.x)\"]\n";
    let Err(e) = rocmc::frontend("k.toml", src) else {
        panic!("an argmax over the grid was accepted");
    };
    let text = e.to_string();
    assert!(
        text.contains("argmax and argmin reduce 64-bit keys"),
        "{text}"
    );
    // An epilogue in the reduction's type is accepted.
    let src = kernel("S[z] = sqrt(sum(X[i], i) * 2.0)", "");
    assert!(rocmc::frontend("k.toml", &src).is_ok());
}

/// `rocmc run` on the default schedule of a full sum, through the
/// command line, at a size of several work-groups.
#[test]
fn an_unscheduled_full_sum_runs_on_the_cpu_through_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("norm.toml");
    std::fs::write(
        &file,
        "[kernel]\nname = \"norm\"\nsizes = [\"n\"]\n[inputs]\nX = { dtype = \"f32\", shape = [\"n\"] }\n\
         [[stage]]\ncompute = \"S[z] = sum(X[i] * X[i], i)\"\nshape = [1]\nreduce = { i = \"n\" }\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let out = rocmc(dir.path(), &["run", f, "--size", "n=100000"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = rocmc(
        dir.path(),
        &[
            "build", "--mcpu", "gfx942", "--emit", "schedule", f, "-o", "-",
        ],
    );
    let s = text(&out.stdout);
    assert!(
        s.contains("grid-reduction") && s.contains("bind(i_g, blockIdx.x)"),
        "{s}"
    );
}

/// The output a kernel combines into atomically, or rewrites in place, is
/// read as well as written: LLVM must see neither `readonly` nor
/// `writeonly` on it (either would make the atomics or the epilogue's
/// loads undefined), while the fill writes only. (The AMD back end
/// states them; NVPTX and the CPU take the arguments otherwise.)
#[test]
fn grid_outputs_are_read_and_written_in_the_llvm_ir() {
    let src = std::fs::read_to_string(root().join("bench/gpu/variants/norm_all.toml")).unwrap();
    for t in ["gfx942", "gfx1100"] {
        let emit = rocmc::Emit {
            llvm: true,
            ..Default::default()
        };
        let art = rocmc::compile("norm_all.toml", &src, &rocmc::Options::new(t), emit)
            .unwrap_or_else(|e| panic!("{t}: {e}"));
        let defines: Vec<&str> = art
            .llvm_ir
            .lines()
            .filter(|l| l.starts_with("define"))
            .collect();
        let param = |kernel: &str| {
            let d = defines
                .iter()
                .find(|d| d.contains(&format!("@{kernel}(")))
                .unwrap_or_else(|| panic!("{t}: no {kernel} in {defines:?}"));
            let n = d.find("%N").unwrap_or_else(|| panic!("{t}: {d}"));
            let start = d[..n].rfind("ptr").unwrap();
            d[start..n].to_string()
        };
        for kernel in ["norm_all", "norm_all_epilogue"] {
            let p = param(kernel);
            assert!(
                !p.contains("writeonly") && !p.contains("readonly"),
                "{t}: {kernel}: {p}"
            );
        }
        assert!(param("norm_all_init").contains("writeonly"), "{t}");
    }
}
