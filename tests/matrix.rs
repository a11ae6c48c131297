//! The matrix-instruction tables (rocmc_target::matrix) against LLVM 22,
//! the authority on which processor has which instruction: every
//! instruction compiles with `llc-22` for every processor the table lists,
//! and is refused on every other processor of the families around it.

use rocmc::codegen::target::matrix::{Family, MatrixInstr, INSTRUCTIONS};
use std::io::Write;
use std::process::{Command, Stdio};

/// A function calling `i`'s intrinsic (`n` keeps names apart in one module).
fn call(i: &MatrixInstr, n: usize) -> String {
    let operands = |(ty, count): (&str, u32), name: &str| -> Vec<(String, String)> {
        (0..count)
            .map(|j| (ty.to_string(), format!("%{name}{j}")))
            .collect()
    };
    let (a, b, c) = (
        operands(i.llvm_a, "a"),
        operands(i.llvm_b, "b"),
        operands(i.llvm_c, "c"),
    );
    let params: Vec<String> = a
        .iter()
        .chain(&b)
        .chain(&c)
        .map(|(t, v)| format!("{t} {v}"))
        .collect();
    let join = |v: &[(String, String)]| {
        v.iter()
            .map(|(t, v)| format!("{t} {v}"))
            .collect::<Vec<_>>()
    };
    let ret = if i.family == Family::MmaSync {
        let (t, k) = i.llvm_c;
        format!("{{{}}}", vec![t; k as usize].join(", "))
    } else {
        i.llvm_c.0.to_string()
    };
    let is_iu8 = i.intrinsic.contains(".iu8");
    let args: Vec<String> = match i.family {
        Family::Mfma => {
            let imm = i.mfma_immediates().into_iter().map(|v| format!("i32 {v}"));
            [join(&a), join(&b), join(&c), imm.collect()].concat()
        }
        Family::WmmaGfx11 | Family::WmmaGfx12 if is_iu8 => [
            vec!["i1 false".into()],
            join(&a),
            vec!["i1 false".into()],
            join(&b),
            join(&c),
            vec!["i1 false".into()],
        ]
        .concat(),
        _ => [join(&a), join(&b), join(&c)].concat(),
    };
    format!(
        "define {ret} @f{n}({}) {{\n  %d = call {ret} @{}({})\n  ret {ret} %d\n}}\n",
        params.join(", "),
        i.intrinsic,
        args.join(", ")
    )
}

/// Whether llc-22 compiles `ir` for `processor`.
fn llc_accepts(ir: &str, processor: &str, wave64: bool) -> bool {
    let nvidia = processor.starts_with("sm_");
    let mut cmd = Command::new("llc-22");
    // Most of these calls are meant to fail, and a failing llc prints a
    // stack trace; symbolising it took longer than the compilation.
    cmd.env("LLVM_DISABLE_SYMBOLIZATION", "1");
    if nvidia {
        cmd.args([
            "-mtriple=nvptx64-nvidia-cuda",
            &format!("-mcpu={processor}"),
            "-mattr=+ptx78",
        ]);
    } else {
        cmd.args(["-mtriple=amdgcn-amd-amdhsa", &format!("-mcpu={processor}")]);
        if wave64 && processor.starts_with("gfx1") {
            cmd.arg("-mattr=+wavefrontsize64");
        }
    }
    let mut child = cmd
        .args(["-filetype=null", "-o", "-", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("llc-22 (scripts/install-deps.sh installs it)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(ir.as_bytes())
        .unwrap();
    child.wait().unwrap().success()
}

/// Processors near the matrix families, where a wrong table entry would hide.
const AROUND: &[&str] = &[
    "gfx906",
    "gfx908",
    "gfx90a",
    "gfx942",
    "gfx950",
    "gfx9-generic",
    "gfx9-4-generic",
    "gfx1030",
    "gfx1100",
    "gfx1151",
    "gfx11-generic",
    "gfx1200",
    "gfx1201",
    "gfx12-generic",
    "gfx1250",
];

#[test]
fn every_listed_processor_compiles_its_matrix_instructions() {
    let processors: Vec<String> = rocmc::codegen::target::processors();
    std::thread::scope(|s| {
        let chunks: Vec<Vec<String>> = processors
            .chunks(processors.len().div_ceil(4))
            .map(|c| c.to_vec())
            .collect();
        for chunk in chunks {
            s.spawn(move || {
                for p in chunk {
                    for wave in [32, 64] {
                        let listed: Vec<&MatrixInstr> = INSTRUCTIONS
                            .iter()
                            .filter(|i| i.wave == wave && i.available_on(&p) && i.is_amd())
                            .collect();
                        if listed.is_empty() {
                            continue;
                        }
                        let ir: String =
                            listed.iter().enumerate().map(|(n, i)| call(i, n)).collect();
                        assert!(
                            llc_accepts(&ir, &p, wave == 64),
                            "llc-22 refuses {p} (wave{wave}):\n{ir}"
                        );
                    }
                }
            });
        }
    });
    for sm in ["sm_80", "sm_90"] {
        for i in INSTRUCTIONS.iter().filter(|i| i.family == Family::MmaSync) {
            // LLVM writes the instruction the table names (its PTX is what the driver runs).
            let out = Command::new("llc-22")
                .args([
                    "-mtriple=nvptx64-nvidia-cuda",
                    &format!("-mcpu={sm}"),
                    "-mattr=+ptx78",
                    "-o",
                    "-",
                ])
                .arg("-")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .and_then(|mut c| {
                    c.stdin.take().unwrap().write_all(call(i, 0).as_bytes())?;
                    c.wait_with_output()
                })
                .unwrap();
            let ptx = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && ptx.contains(i.name),
                "{sm}: {}\n{}",
                i.name,
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

#[test]
fn no_other_processor_has_them() {
    let cases: Vec<(&MatrixInstr, &str)> = INSTRUCTIONS
        .iter()
        .filter(|i| i.is_amd())
        .flat_map(|i| {
            AROUND
                .iter()
                // gfx1250 runs wave32 only; LLVM does not check intrinsics against a wave64 forced on it.
                .filter(move |p| !(i.available_on(p) || (i.wave == 64 && **p == "gfx1250")))
                .map(move |p| (i, *p))
        })
        .collect();
    let wrong: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = cases
            .chunks(cases.len().div_ceil(4))
            .map(|chunk| {
                s.spawn(move || {
                    chunk
                        .iter()
                        .filter(|(i, p)| llc_accepts(&call(i, 0), p, i.wave == 64))
                        .map(|(i, p)| format!("{} (wave{}) on {p}", i.name, i.wave))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    assert!(
        wrong.is_empty(),
        "LLVM accepts instructions the table says are missing: {wrong:#?}"
    );
    // mma.sync needs sm_80.
    let ir = call(
        INSTRUCTIONS
            .iter()
            .find(|i| i.family == Family::MmaSync)
            .unwrap(),
        0,
    );
    assert!(!llc_accepts(&ir, "sm_75", false));
}

/// `cargo test -p rocmc-tests --test e2e -- matrix:: --ignored --nocapture`: what LLVM accepts, as a grid.
#[test]
#[ignore]
fn print_acceptance() {
    for i in INSTRUCTIONS.iter().filter(|i| i.is_amd()) {
        let yes: Vec<&str> = AROUND
            .iter()
            .filter(|p| llc_accepts(&call(i, 0), p, i.wave == 64))
            .copied()
            .collect();
        println!("{} wave{}: {}", i.name, i.wave, yes.join(" "));
    }
}
