//! The `rocmc` command line: outputs, options, and errors.

use crate::common::*;
use std::path::Path;
use std::process::Command;

fn ok(out: &std::process::Output) {
    assert!(out.status.success(), "rocmc failed:\n{}", text(&out.stderr));
}

#[test]
fn build_names_the_output_after_the_kernel() {
    let d = tempfile::tempdir().unwrap();
    let out = rocmc(
        d.path(),
        &[
            "build",
            "--mcpu",
            "gfx900",
            example("vadd").to_str().unwrap(),
        ],
    );
    ok(&out);
    assert_eq!(files_in(d.path()), ["vadd.hsaco"]);
    let bytes = std::fs::read(d.path().join("vadd.hsaco")).unwrap();
    assert_eq!(&bytes[..4], b"\x7fELF");
    let err = text(&out.stderr);
    assert!(err.contains("grid (ceil(n / 64), 1, 1)"), "{err}");
    assert!(err.contains("block (64, 1, 1)"), "{err}");
}

#[test]
fn dash_o_sets_the_path_and_dash_writes_stdout() {
    let d = tempfile::tempdir().unwrap();
    let ex = example("saxpy");
    ok(&rocmc(
        d.path(),
        &[
            "build",
            "--mcpu",
            "gfx90a",
            ex.to_str().unwrap(),
            "-o",
            "k.bin",
        ],
    ));
    assert_eq!(files_in(d.path()), ["k.bin"]);
    let out = rocmc(
        d.path(),
        &["build", "--mcpu", "gfx90a", ex.to_str().unwrap(), "-o", "-"],
    );
    ok(&out);
    assert_eq!(
        out.stdout,
        std::fs::read(d.path().join("k.bin")).unwrap(),
        "stdout and file differ"
    );
}

#[test]
fn emit_llvm_prints_optimised_ir_with_kernel_attributes() {
    let d = tempfile::tempdir().unwrap();
    let out = rocmc(
        d.path(),
        &[
            "build",
            "--mcpu",
            "gfx90a",
            "--emit",
            "llvm",
            "-o",
            "-",
            example("vadd").to_str().unwrap(),
        ],
    );
    ok(&out);
    let ir = text(&out.stdout);
    assert!(ir.contains("target triple = \"amdgcn-amd-amdhsa\""), "{ir}");
    assert!(
        ir.contains("define amdgpu_kernel void @vadd(ptr addrspace(1) noalias noundef readonly"),
        "{ir}"
    );
    assert!(
        ir.contains("\"amdgpu-flat-work-group-size\"=\"64,64\""),
        "{ir}"
    );
    assert!(ir.contains("\"uniform-work-group-size\"=\"true\""), "{ir}");
    assert!(
        ir.contains("!\"amdhsa_code_object_version\", i32 500"),
        "{ir}"
    );
    assert!(
        ir.contains("; kernel vadd: block (64, 1, 1), grid (ceil(n / 64), 1, 1)"),
        "{ir}"
    );
    assert!(files_in(d.path()).is_empty(), "-o - wrote a file");
}

#[test]
fn emit_asm_prints_gcn_assembly() {
    let d = tempfile::tempdir().unwrap();
    let out = rocmc(
        d.path(),
        &[
            "build",
            "--mcpu",
            "gfx1100",
            "--emit=asm",
            "-o",
            "-",
            example("vadd").to_str().unwrap(),
        ],
    );
    ok(&out);
    let asm = text(&out.stdout);
    assert!(
        asm.contains(".amdgcn_target \"amdgcn-amd-amdhsa--gfx1100\""),
        "{asm}"
    );
    assert!(asm.contains("s_endpgm"), "{asm}");
    assert!(asm.contains(".amdhsa_kernel vadd"), "{asm}");
    assert!(asm.contains("v_add_f32"), "{asm}");
}

#[test]
fn several_emit_kinds_write_one_file_each() {
    let d = tempfile::tempdir().unwrap();
    let ex = example("bias2d");
    ok(&rocmc(
        d.path(),
        &[
            "build",
            "--mcpu",
            "gfx942",
            "--emit",
            "llvm,asm",
            "--emit",
            "obj",
            "--emit",
            "hsaco",
            "--emit",
            "loops",
            ex.to_str().unwrap(),
        ],
    ));
    assert_eq!(
        files_in(d.path()),
        [
            "bias2d.hsaco",
            "bias2d.ll",
            "bias2d.loops",
            "bias2d.o",
            "bias2d.s"
        ]
    );
    ok(&rocmc(
        d.path(),
        &[
            "build",
            "--mcpu",
            "gfx942",
            "--emit",
            "llvm,hsaco",
            "-o",
            "sub.out",
            ex.to_str().unwrap(),
        ],
    ));
    assert!(d.path().join("sub.ll").exists() && d.path().join("sub.hsaco").exists());
    let o = tool(
        "llvm-readobj-22",
        &[
            "--file-headers",
            d.path().join("bias2d.o").to_str().unwrap(),
        ],
    );
    assert!(o.contains("Type: Relocatable"), "{o}");
}

#[test]
fn help_explains_every_option() {
    let d = tempfile::tempdir().unwrap();
    let top = text(&rocmc(d.path(), &["--help"]).stdout);
    for w in ["build", "targets", "inspect"] {
        assert!(top.contains(w), "{top}");
    }
    let b = text(&rocmc(d.path(), &["build", "--help"]).stdout);
    for w in [
        "--mcpu",
        "--emit",
        "--output",
        "--code-object-version",
        "--wave64",
        "--time-passes",
        "llvm",
        "asm",
        "hsaco",
    ] {
        assert!(b.contains(w), "build --help lacks {w}:\n{b}");
    }
}

#[test]
fn mcpu_is_required() {
    let d = tempfile::tempdir().unwrap();
    let out = rocmc(d.path(), &["build", example("vadd").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--mcpu"),
        "{}",
        text(&out.stderr)
    );
    assert!(files_in(d.path()).is_empty());
}

#[test]
fn unknown_targets_are_refused_with_the_nearest_names() {
    let d = tempfile::tempdir().unwrap();
    for (bad, near) in [
        ("gfx9000", "gfx900"),
        ("gfx90A", "gfx90a"),
        ("gfx1101x", "gfx1101"),
    ] {
        let out = rocmc(
            d.path(),
            &["build", "--mcpu", bad, example("vadd").to_str().unwrap()],
        );
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let err = text(&out.stderr);
        assert!(
            err.contains(&format!("unknown AMDGPU processor `{bad}`")),
            "{err}"
        );
        assert!(err.contains(&format!("`{near}`")), "{bad}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    let out = rocmc(
        d.path(),
        &[
            "build",
            "--mcpu",
            "gfx1100:xnack+",
            example("vadd").to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("gfx1100 has no `xnack` setting"),
        "{}",
        text(&out.stderr)
    );
    assert!(files_in(d.path()).is_empty());
}

#[test]
fn bad_kernels_report_file_line_and_column_and_write_nothing() {
    let d = tempfile::tempdir().unwrap();
    let k = d.path().join("bad.toml");
    std::fs::write(
        &k,
        "[kernel]\nname = \"bad\"\nsizes = [\"n\"]\n[inputs]\nA = { dtype = \"f32\", shape = [\"n\"] }\n[[stage]]\ncompute = \"C[i] = A[i] + Bx[i]\"\nshape = [\"n\"]\n",
    )
    .unwrap();
    let out = rocmc(d.path(), &["build", "--mcpu", "gfx90a", "bad.toml"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("bad.toml:7:26"), "{err}");
    assert!(err.contains("unknown tensor `Bx`"), "{err}");
    assert!(err.contains("^^"), "{err}");
    assert_eq!(files_in(d.path()), ["bad.toml"]);
}

#[test]
fn schedule_errors_name_the_step() {
    let d = tempfile::tempdir().unwrap();
    let src = std::fs::read_to_string(example("vadd"))
        .unwrap()
        .replace("bind(tx, threadIdx.x)", "bind(tx, blockIdx.x)");
    std::fs::write(d.path().join("k.toml"), src).unwrap();
    let out = rocmc(d.path(), &["build", "--mcpu", "gfx90a", "k.toml"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("blockIdx.x is already bound to loop `bx`"),
        "{err}"
    );
    assert!(err.contains("k.toml:17:4"), "{err}");
}

#[test]
fn io_errors_exit_with_1() {
    let d = tempfile::tempdir().unwrap();
    let out = rocmc(d.path(), &["build", "--mcpu", "gfx90a", "missing.toml"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("missing.toml"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn code_object_version_is_checked() {
    let d = tempfile::tempdir().unwrap();
    let out = rocmc(
        d.path(),
        &[
            "build",
            "--mcpu",
            "gfx90a",
            "--code-object-version",
            "3",
            example("vadd").to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("code object version 3 is not supported"),
        "{}",
        text(&out.stderr)
    );
    assert!(files_in(d.path()).is_empty());
}

/// `--time-passes` names each phase. With a compilation cache
/// (`ROCMC_CACHE_DIR`, codegen/src/cache.rs) the second build of the same
/// kernel skips LLVM's optimisation and code generation, says so, and
/// writes the same bytes; a cache entry cut short is taken as absent.
#[test]
fn time_passes_prints_each_phase_and_a_cache_hit() {
    let d = tempfile::tempdir().unwrap();
    let cache = d.path().join("cache");
    let build = |out: &str| {
        let o = Command::new(rocmc_bin())
            .args(["build", "--mcpu", "gfx90a", "--time-passes", "-o", out])
            .arg(example("vadd"))
            .env("ROCMC_CACHE_DIR", &cache)
            .current_dir(d.path())
            .output()
            .unwrap();
        ok(&o);
        text(&o.stderr)
    };
    let err = build("first.hsaco");
    for phase in [
        "parse",
        "validate",
        "lower",
        "llvm build",
        "llvm optimise (O3)",
        "llvm codegen",
        "link",
        "write",
        "total",
    ] {
        assert!(err.contains(phase), "{err}");
    }
    assert!(!err.contains("llvm (cached)"), "{err}");
    let entries: Vec<_> = walk(&cache);
    assert_eq!(entries.len(), 1, "{entries:?}");
    let again = build("second.hsaco");
    assert!(again.contains("llvm (cached)"), "{again}");
    assert!(!again.contains("llvm codegen"), "{again}");
    let read = |f: &str| std::fs::read(d.path().join(f)).unwrap();
    assert_eq!(read("first.hsaco"), read("second.hsaco"));
    // Truncated: compiled again, and written whole.
    let whole = std::fs::read(&entries[0]).unwrap();
    std::fs::write(&entries[0], &whole[..whole.len() / 2]).unwrap();
    let third = build("third.hsaco");
    assert!(third.contains("llvm codegen"), "{third}");
    assert_eq!(read("first.hsaco"), read("third.hsaco"));
    assert_eq!(std::fs::read(&entries[0]).unwrap(), whole);
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()) {
        match e.is_dir() {
            true => out.extend(walk(&e)),
            false => out.push(e),
        }
    }
    out
}

#[test]
fn output_is_reproducible() {
    let d = tempfile::tempdir().unwrap();
    let ex = example("saxpy");
    ok(&rocmc(
        d.path(),
        &[
            "build",
            "--mcpu",
            "gfx942",
            ex.to_str().unwrap(),
            "-o",
            "a.hsaco",
        ],
    ));
    ok(&rocmc(
        d.path(),
        &[
            "build",
            "--mcpu",
            "gfx942",
            ex.to_str().unwrap(),
            "-o",
            "b.hsaco",
        ],
    ));
    assert_eq!(
        std::fs::read(d.path().join("a.hsaco")).unwrap(),
        std::fs::read(d.path().join("b.hsaco")).unwrap()
    );
}

/// `--verify` (the loop-IR verifier after every pass, for release builds;
/// debug builds verify anyway) is accepted by every subcommand and changes
/// nothing in what is built.
#[test]
fn verify_is_a_global_flag_that_changes_no_output() {
    let d = tempfile::tempdir().unwrap();
    let s = example("softmax").to_string_lossy().into_owned();
    let plain = rocmc(
        d.path(),
        &[
            "build",
            "--mcpu",
            "gfx942",
            &s,
            "--emit",
            "loops,llvm",
            "-o",
            "-",
        ],
    );
    let verified = rocmc(
        d.path(),
        &[
            "--verify",
            "build",
            "--mcpu",
            "gfx942",
            &s,
            "--emit",
            "loops,llvm",
            "-o",
            "-",
        ],
    );
    assert!(
        plain.status.success() && verified.status.success(),
        "{}",
        text(&verified.stderr)
    );
    assert_eq!(plain.stdout, verified.stdout);
    let run = rocmc(
        d.path(),
        &[
            "run", "--verify", &s, "--size", "rows=3", "--size", "cols=70",
        ],
    );
    assert!(run.status.success(), "{}", text(&run.stderr));
}

/// A compiled module given where a kernel file goes is the user's mistake:
/// exit 2, naming the file and what goes there, and no output written.
#[test]
fn a_binary_file_is_not_taken_for_a_kernel_file() {
    let d = tempfile::tempdir().unwrap();
    let out = rocmc(
        d.path(),
        &[
            "build",
            "--mcpu",
            "gfx942",
            example("vadd").to_str().unwrap(),
            "-o",
            "vadd.o",
        ],
    );
    ok(&out);
    for args in [
        &["build", "--mcpu", "gfx942", "vadd.o"][..],
        &["run", "--device", "cpu", "vadd.o"][..],
    ] {
        let out = rocmc(d.path(), args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = text(&out.stderr);
        assert!(err.contains("vadd.o: not a kernel file"), "{err}");
        assert!(err.contains(".hsaco"), "{err}");
    }
    assert_eq!(files_in(d.path()), ["vadd.o"]);
}

/// The kernel-format reference documents every schedule primitive the
/// registry knows (a commit once emptied docs/kernel-format.md and every
/// test still passed).
#[test]
fn every_schedule_primitive_is_in_the_kernel_format_reference() {
    let doc = std::fs::read_to_string(root().join("docs/kernel-format.md")).unwrap();
    for p in rocmc::ir::schedule::steps::PRIMITIVES.iter() {
        let called = format!("{}(", p.name);
        assert!(
            doc.split('`')
                .skip(1)
                .step_by(2)
                .any(|code| code.contains(&called)),
            "docs/kernel-format.md does not show `{called}...)`"
        );
    }
}
