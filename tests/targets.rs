//! Targets, target IDs, wave sizes, code-object versions, offload bundles
//! and `rocmc inspect`, checked against clang-22, clang-offload-bundler-22
//! and llvm-readobj-22.

use crate::common::*;
use rocmc::{compile, Emit, Options};

fn ok(out: &std::process::Output) -> String {
    assert!(out.status.success(), "rocmc failed:\n{}", text(&out.stderr));
    text(&out.stdout)
}

fn vadd() -> String {
    example("vadd").to_str().unwrap().to_string()
}

#[test]
fn targets_lists_every_processor_with_family_waves_lds_and_aliases() {
    let d = tempfile::tempdir().unwrap();
    let list = ok(&rocmc(d.path(), &["targets"]));
    assert!(list.contains("NVIDIA (PTX"), "{list}");
    assert!(
        list.lines().any(|l| l.starts_with("sm_90 ")
            && l.contains("9.0 and later")
            && l.contains("7.8")
            && l.contains("h100")),
        "{list}"
    );
    let row = |p: &str| {
        list.lines()
            .find(|l| l.split_whitespace().next() == Some(p))
            .unwrap_or_else(|| panic!("{p} missing:\n{list}"))
            .to_string()
    };
    for p in [
        "gfx600",
        "gfx803",
        "gfx900",
        "gfx90a",
        "gfx942",
        "gfx950",
        "gfx1030",
        "gfx1100",
        "gfx1201",
        "gfx9-generic",
        "gfx11-generic",
        "sm_52",
        "sm_90",
        "sm_90a",
        "sm_120",
    ] {
        row(p);
    }
    assert!(
        row("gfx942").contains("CDNA3")
            && row("gfx942").contains("xnack, sramecc")
            && row("gfx942").contains("mi300x"),
        "{}",
        row("gfx942")
    );
    assert!(row("gfx90a").contains("mi250x"));
    assert!(row("gfx1100").contains("32 (default), 64") && row("gfx1100").contains("rx7900xtx"));
    assert!(row("gfx900").contains(" 64 ") && !row("gfx900").contains("32 (default)"));
    assert!(row("gfx11-generic").contains("code object v6"));
    assert!(row("gfx950").contains("160 KiB"));
    // Every processor LLVM knows is listed, under its canonical name: the
    // AMD table (header, rows), a blank line, the NVIDIA title, header, rows.
    assert_eq!(
        list.lines().count() - 4,
        rocmc::codegen::target::canonical_processors().len()
            + rocmc::codegen::target::nvptx::PROCESSORS.len()
    );
}

#[test]
fn product_names_are_aliases() {
    let d = tempfile::tempdir().unwrap();
    ok(&rocmc(
        d.path(),
        &["build", "--mcpu", "mi300x", &vadd(), "-o", "a.hsaco"],
    ));
    ok(&rocmc(
        d.path(),
        &["build", "--mcpu", "gfx942", &vadd(), "-o", "b.hsaco"],
    ));
    assert_eq!(
        std::fs::read(d.path().join("a.hsaco")).unwrap(),
        std::fs::read(d.path().join("b.hsaco")).unwrap()
    );
}

#[test]
fn bad_target_ids_are_refused() {
    let d = tempfile::tempdir().unwrap();
    for (mcpu, msg) in [
        ("gfx1100:xnack+", "gfx1100 has no `xnack` setting"),
        (
            "gfx90a:sramecc+:sramecc-",
            "`sramecc` is given more than once",
        ),
        ("gfx90a:xnack+:xnack+", "`xnack` is given more than once"),
        ("gfx90a:xnack", "needs `+` or `-`"),
        ("gfx90a:tgsplit+", "unknown feature `tgsplit`"),
        ("gfx90a,gfx90a", "given twice"),
    ] {
        let out = rocmc(d.path(), &["build", "--mcpu", mcpu, &vadd()]);
        assert_eq!(out.status.code(), Some(2), "{mcpu}");
        assert!(
            text(&out.stderr).contains(msg),
            "{mcpu}: {}",
            text(&out.stderr)
        );
    }
    assert!(files_in(d.path()).is_empty());
}

#[test]
fn wave32_on_gfx9_is_refused_and_wave64_is_chosen_on_gfx10() {
    let d = tempfile::tempdir().unwrap();
    let out = rocmc(
        d.path(),
        &["build", "--mcpu", "gfx90a", "--wave32", &vadd()],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("gfx90a runs only 64-wide waves"),
        "{}",
        text(&out.stderr)
    );
    for (args, wave) in [
        (vec!["--wave64"], "64"),
        (vec!["--wave32"], "32"),
        (vec![], "32"),
    ] {
        let mut a = vec!["build", "--mcpu", "gfx1030", "-o", "k.hsaco"];
        a.extend(args.iter().copied());
        let v = vadd();
        a.push(&v);
        ok(&rocmc(d.path(), &a));
        let dump = tool(
            "llvm-readobj-22",
            &["--notes", d.path().join("k.hsaco").to_str().unwrap()],
        );
        assert!(
            dump.contains(&format!(".wavefront_size: {wave}")),
            "{args:?}\n{dump}"
        );
    }
}

#[test]
fn generic_targets_need_code_object_6() {
    let d = tempfile::tempdir().unwrap();
    let out = rocmc(d.path(), &["build", "--mcpu", "gfx11-generic", &vadd()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("needs code object version 6"),
        "{}",
        text(&out.stderr)
    );
    ok(&rocmc(
        d.path(),
        &[
            "build",
            "--mcpu",
            "gfx11-generic",
            "--code-object-version",
            "6",
            &vadd(),
        ],
    ));
    let h = tool(
        "llvm-readobj-22",
        &[
            "--file-headers",
            d.path().join("vadd.hsaco").to_str().unwrap(),
        ],
    );
    assert!(h.contains("EF_AMDGPU_MACH_AMDGCN_GFX11_GENERIC"), "{h}");
    assert!(h.contains("ABIVersion: 4"), "{h}");
}

/// The value lines after `key` in llvm-readobj's YAML dump.
fn meta(dump: &str, key: &str) -> Vec<String> {
    dump.lines()
        .filter_map(|l| {
            let l = l.trim();
            l.strip_prefix("- ").unwrap_or(l).strip_prefix(key)
        })
        .map(|s| s.trim().to_string())
        .collect()
}

#[test]
fn target_ids_give_clangs_e_flags_and_amdhsa_target() {
    let d = tempfile::tempdir().unwrap();
    let src = "extern \"C\" __attribute__((global)) void k(float *a) { a[0] = 1.0f; }\n";
    for mcpu in [
        "gfx908:xnack+",
        "gfx90a:sramecc-:xnack+",
        "gfx942:sramecc+:xnack-",
        "gfx942:xnack+",
        "gfx1030",
        "gfx1201",
    ] {
        let theirs = clang_hip(d.path(), src, mcpu, 5);
        let ours = d.path().join("ours.hsaco");
        let opts = Options::new(mcpu);
        let art = compile(
            "vadd.toml",
            &std::fs::read_to_string(example("vadd")).unwrap(),
            &opts,
            Emit {
                code_object: true,
                ..Emit::default()
            },
        )
        .unwrap();
        std::fs::write(&ours, art.code_object.unwrap()).unwrap();
        let a = tool(
            "llvm-readobj-22",
            &["--file-headers", "--notes", ours.to_str().unwrap()],
        );
        let b = tool(
            "llvm-readobj-22",
            &["--file-headers", "--notes", theirs.to_str().unwrap()],
        );
        let flags = |s: &str| {
            s.lines()
                .skip_while(|l| !l.contains("Flags ["))
                .take_while(|l| !l.contains(']'))
                .map(str::trim)
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_eq!(flags(&a), flags(&b), "{mcpu}");
        assert_eq!(
            meta(&a, "amdhsa.target:"),
            meta(&b, "amdhsa.target:"),
            "{mcpu}"
        );
    }
}

/// Our reader agrees with llvm-readobj on clang's code objects, whose
/// kernels use implicit arguments: the hidden-argument layout of v4, v5, v6.
#[test]
fn reader_sees_hidden_arguments_of_each_code_object_version() {
    let d = tempfile::tempdir().unwrap();
    let src = "extern \"C\" __attribute__((global)) void k(int *a, int n) { a[n] = *(const int *)__builtin_amdgcn_implicitarg_ptr(); }\n";
    for (cov, first_hidden) in [
        (4, "hidden_global_offset_x"),
        (5, "hidden_block_count_x"),
        (6, "hidden_block_count_x"),
    ] {
        let p = clang_hip(d.path(), src, "gfx90a", cov);
        let co = rocmc::linker::codeobject::read(&std::fs::read(&p).unwrap()).unwrap();
        assert_eq!(co.code_object_version, cov);
        let k = &co.kernels[0];
        let dump = tool("llvm-readobj-22", &["--notes", p.to_str().unwrap()]);
        let kinds: Vec<String> = k.args.iter().map(|a| a.value_kind.clone()).collect();
        assert_eq!(kinds, meta(&dump, ".value_kind:"), "v{cov}");
        let offsets: Vec<String> = k.args.iter().map(|a| a.offset.to_string()).collect();
        assert_eq!(offsets, meta(&dump, ".offset:"), "v{cov}");
        assert_eq!(kinds[2], first_hidden, "v{cov}: {kinds:?}");
        assert_eq!(
            k.args[2].offset, 16,
            "hidden arguments start after the explicit ones, 8-aligned"
        );
        assert_eq!(
            meta(&dump, ".kernarg_segment_size:"),
            [k.kernarg_segment_size.to_string()]
        );
        if cov >= 5 {
            let gs = k
                .args
                .iter()
                .find(|a| a.value_kind == "hidden_group_size_x")
                .expect("group size");
            assert_eq!(
                gs.offset,
                16 + 12,
                "v{cov}: hidden_group_size_x follows the three block counts"
            );
        }
        // And rocmc inspect reads it too.
        let out = ok(&rocmc(d.path(), &["inspect", p.to_str().unwrap()]));
        assert!(out.contains(first_hidden), "{out}");
    }
}

#[test]
fn several_targets_make_one_bundle_that_clang_reads_back() {
    let d = tempfile::tempdir().unwrap();
    let targets = ["gfx90a:xnack-", "gfx942", "gfx1100"];
    ok(&rocmc(
        d.path(),
        &["build", "--mcpu", &targets.join(","), &vadd()],
    ));
    assert_eq!(files_in(d.path()), ["vadd.hipfb"]);
    let b = d.path().join("vadd.hipfb");
    let list = tool(
        "clang-offload-bundler-22",
        &["--list", "--type=o", &format!("--input={}", b.display())],
    );
    let mut want: Vec<String> = targets
        .iter()
        .map(|t| format!("hipv4-amdgcn-amd-amdhsa--{t}"))
        .collect();
    want.push("host-x86_64-unknown-linux-gnu-".into());
    let mut got: Vec<String> = list.lines().map(str::to_string).collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);
    let mut singles = Vec::new();
    for t in targets {
        let single = d
            .path()
            .join(format!("single-{}.hsaco", t.replace(':', "_")));
        ok(&rocmc(
            d.path(),
            &[
                "build",
                "--mcpu",
                t,
                &vadd(),
                "-o",
                single.to_str().unwrap(),
            ],
        ));
        let un = d.path().join("un.hsaco");
        tool(
            "clang-offload-bundler-22",
            &[
                "--unbundle",
                "--type=o",
                &format!("--targets=hipv4-amdgcn-amd-amdhsa--{t}"),
                &format!("--input={}", b.display()),
                &format!("--output={}", un.display()),
            ],
        );
        assert_eq!(
            std::fs::read(&un).unwrap(),
            std::fs::read(&single).unwrap(),
            "{t}: bundle entry differs from a single-target build"
        );
        singles.push(single);
    }
    // Byte for byte what clang's bundler writes for hipcc (-bundle-align=4096).
    let reference = d.path().join("ref.hipfb");
    let mut ids = vec!["host-x86_64-unknown-linux-gnu-".to_string()];
    ids.extend(
        targets
            .iter()
            .map(|t| format!("hipv4-amdgcn-amd-amdhsa--{t}")),
    );
    // hipcc's host entry is empty; an empty file of our own, not /dev/null,
    // which a root process elsewhere on the machine may have replaced.
    let host = d.path().join("host.o");
    std::fs::write(&host, b"").unwrap();
    let mut args = vec![
        "--type=o".to_string(),
        "-bundle-align=4096".to_string(),
        format!("--targets={}", ids.join(",")),
        format!("--input={}", host.display()),
    ];
    args.extend(singles.iter().map(|s| format!("--input={}", s.display())));
    args.push(format!("--output={}", reference.display()));
    tool(
        "clang-offload-bundler-22",
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    assert_eq!(
        std::fs::read(&b).unwrap(),
        std::fs::read(&reference).unwrap()
    );
    // Reproducible.
    ok(&rocmc(
        d.path(),
        &[
            "build",
            "--mcpu",
            &targets.join(","),
            &vadd(),
            "-o",
            "again.hipfb",
        ],
    ));
    assert_eq!(
        std::fs::read(&b).unwrap(),
        std::fs::read(d.path().join("again.hipfb")).unwrap()
    );
    // inspect reads every entry.
    let out = ok(&rocmc(d.path(), &["inspect", b.to_str().unwrap()]));
    for t in targets {
        assert!(out.contains(&format!("target {t} ")), "{t}\n{out}");
    }
}

#[test]
fn several_targets_write_text_forms_per_target() {
    let d = tempfile::tempdir().unwrap();
    ok(&rocmc(
        d.path(),
        &[
            "build",
            "--mcpu",
            "gfx90a,gfx1100",
            "--emit",
            "asm,hsaco",
            &vadd(),
        ],
    ));
    assert_eq!(
        files_in(d.path()),
        ["vadd.gfx1100.s", "vadd.gfx90a.s", "vadd.hipfb"]
    );
    let out = rocmc(
        d.path(),
        &[
            "build",
            "--mcpu",
            "gfx90a,gfx1100",
            "--emit",
            "llvm",
            "-o",
            "-",
            &vadd(),
        ],
    );
    let ir = ok(&out);
    assert!(
        ir.contains("; rocmc 0.1.0 for gfx90a") && ir.contains("; rocmc 0.1.0 for gfx1100"),
        "{ir}"
    );
}

#[test]
fn inspect_reports_resources_occupancy_and_json() {
    let d = tempfile::tempdir().unwrap();
    ok(&rocmc(
        d.path(),
        &[
            "build",
            "--mcpu",
            "gfx90a",
            &example("bias2d").to_string_lossy(),
        ],
    ));
    let out = ok(&rocmc(d.path(), &["inspect", "bias2d.hsaco"]));
    for w in [
        "target gfx90a",
        "code object v5",
        "kernel bias2d",
        "VGPR",
        "SGPR",
        "AGPR",
        "occupancy",
        "max work-group 256",
        "launch: kernel bias2d: block (16, 16, 1)",
    ] {
        assert!(out.contains(w), "{w}\n{out}");
    }
    let j = ok(&rocmc(d.path(), &["inspect", "--json", "bias2d.hsaco"]));
    let v: serde_json::Value = serde_json::from_str(&j).unwrap();
    assert_eq!(v["target_id"], "gfx90a");
    assert_eq!(v["code_object_version"], 5);
    assert_eq!(v["kernels"][0]["args"].as_array().unwrap().len(), 6);
    assert_eq!(
        v["launch"]["kernels"][0]["block"],
        serde_json::json!([16, 16, 1])
    );
    assert!(
        v["kernels"][0]["occupancy_waves_per_simd"]
            .as_f64()
            .unwrap()
            >= 1.0
    );
    // One 2-wave work-group per CU (its LDS: 64 keys of K and V at head
    // dimension 128): half the SIMDs idle, not the 1 wave LLVM's whole
    // count reports. (The default's one 8-wave group, 256 rows, leaves 2.)
    let src = std::fs::read_to_string(example("attention")).unwrap();
    let src = src.replace(
        "reduce = { j = \"T\", e = 128 }",
        "reduce = { j = \"T\", e = 128 }\nschedule = [\"flash(j, rows=128, keys=64, stages=1)\"]",
    );
    assert!(src.contains("keys=64"));
    std::fs::write(d.path().join("attention.toml"), src).unwrap();
    ok(&rocmc(
        d.path(),
        &[
            "build",
            "--mcpu",
            "gfx942",
            "-o",
            "attention.hsaco",
            "attention.toml",
        ],
    ));
    let out = ok(&rocmc(d.path(), &["inspect", "attention.hsaco"]));
    assert!(out.contains("occupancy 0.5 waves/SIMD (LDS)"), "{out}");
    build_for_gfx942(d.path(), "attention", "default.hsaco");
    let out = ok(&rocmc(d.path(), &["inspect", "default.hsaco"]));
    assert!(
        out.contains("LDS 34816 B") && out.contains("occupancy 2 waves/SIMD"),
        "{out}"
    );
}

/// `inspect --size` counts LDS sized at launch at the sizes a run uses:
/// layernorm's row, staged in LDS at its bound of 16384 columns, is 64 KiB
/// at the bound and 16 KiB at 4096 columns, which lifts gfx950's occupancy
/// from what LDS allows to what VGPRs do. A size the kernel lacks, one past
/// its bound, or a code object without rocmc's launch document, is refused
/// naming it.
#[test]
fn inspect_counts_launch_lds_at_given_sizes() {
    let d = tempfile::tempdir().unwrap();
    let src = crate::common::root().join("bench/amd/rocmc/layernorm.toml");
    let src = src.to_string_lossy();
    ok(&rocmc(
        d.path(),
        &["build", "--mcpu", "gfx950", "-o", "ln.hsaco", &src],
    ));
    let bound = ok(&rocmc(d.path(), &["inspect", "ln.hsaco"]));
    assert!(
        bound.contains("+ 65536 B at launch (at the size bounds)")
            && bound.contains("waves/SIMD (LDS)"),
        "{bound}"
    );
    let run = ok(&rocmc(
        d.path(),
        &["inspect", "--size", "cols=4096", "ln.hsaco"],
    ));
    assert!(
        run.contains("+ 16384 B at launch (at cols=4096, other sizes at their bounds)")
            && run.contains("waves/SIMD (VGPRs)"),
        "{run}"
    );
    let j = ok(&rocmc(
        d.path(),
        &["inspect", "--json", "--size", "cols=4096", "ln.hsaco"],
    ));
    let v: serde_json::Value = serde_json::from_str(&j).unwrap();
    assert_eq!(v["kernels"][0]["lds_at_launch_bytes"], 16384);
    for (arg, says) in [
        ("colz=4096", "no size `colz` (they have: rows, cols)"),
        ("cols=16385", "outside 0..=16384"),
    ] {
        let out = rocmc(d.path(), &["inspect", "--size", arg, "ln.hsaco"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{arg}: {err}");
    }
}

/// Builds example `name` for gfx942 into `out` in `dir`.
fn build_for_gfx942(dir: &std::path::Path, name: &str, out: &str) {
    let src = example(name);
    ok(&rocmc(
        dir,
        &[
            "build",
            "--mcpu",
            "gfx942",
            "-o",
            out,
            src.to_str().unwrap(),
        ],
    ));
}

/// `inspect --loops` reads the machine code back: its hot loop of a matrix
/// GEMM holds exactly the matrix instructions llvm-objdump-22 shows between
/// the loop's first and last address.
#[test]
fn inspect_loops_finds_the_hot_loop_objdump_agrees() {
    let d = tempfile::tempdir().unwrap();
    build_for_gfx942(d.path(), "gemm_f16", "g.hsaco");
    let text = ok(&rocmc(d.path(), &["inspect", "--loops", "g.hsaco"]));
    assert!(
        text.contains("[hot]") && text.contains("instructions per matrix instruction"),
        "{text}"
    );
    let j = ok(&rocmc(
        d.path(),
        &["inspect", "--loops", "--json", "g.hsaco"],
    ));
    let v: serde_json::Value = serde_json::from_str(&j).unwrap();
    let loops = v["kernels"][0]["loops"].as_array().unwrap();
    let hot = loops.iter().find(|l| l["hot"] == true).unwrap();
    let (start, end) = (hot["start"].as_u64().unwrap(), hot["end"].as_u64().unwrap());
    let dump = std::process::Command::new("llvm-objdump-22")
        .args(["-d", "--mcpu=gfx942", "g.hsaco"])
        .current_dir(d.path())
        .output()
        .unwrap();
    let dump = String::from_utf8_lossy(&dump.stdout);
    let mfma = dump
        .lines()
        .filter(|l| l.trim_start().starts_with("v_mfma"))
        .filter_map(|l| {
            let addr = l.split("// ").nth(1)?.split(':').next()?;
            u64::from_str_radix(addr.trim(), 16).ok()
        })
        .filter(|a| (start..=end).contains(a))
        .count();
    assert!(mfma > 0, "no matrix instruction in the hot loop\n{text}");
    assert_eq!(hot["matrix"].as_u64().unwrap() as usize, mfma, "{text}");
}

/// Our occupancy estimate is what LLVM itself reports in the assembly.
#[test]
fn occupancy_agrees_with_llvm() {
    for name in examples() {
        let src = std::fs::read_to_string(example(&name)).unwrap();
        for mcpu in [
            "gfx900", "gfx90a", "gfx942", "gfx1030", "gfx1100", "gfx1201",
        ] {
            let art = compile(
                &name,
                &src,
                &Options::new(mcpu),
                Emit {
                    asm: true,
                    code_object: true,
                    ..Emit::default()
                },
            )
            .unwrap();
            let asm = art.asm.unwrap();
            let llvm: Vec<u32> = asm
                .lines()
                .filter_map(|l| l.trim().strip_prefix("; Occupancy:"))
                .map(|v| v.trim().parse().unwrap())
                .collect();
            let co = rocmc::linker::codeobject::read(&art.code_object.unwrap()).unwrap();
            for (k, want) in co.kernels.iter().zip(&llvm) {
                assert_eq!(
                    rocmc::linker::hw::kernel_occupancy(mcpu, k).0,
                    *want,
                    "{name} on {mcpu}"
                );
            }
            assert!(!llvm.is_empty(), "{name} {mcpu}: no occupancy in asm");
        }
    }
}

#[test]
fn inspect_refuses_truncated_and_corrupt_files_cleanly() {
    let d = tempfile::tempdir().unwrap();
    ok(&rocmc(
        d.path(),
        &["build", "--mcpu", "gfx90a,gfx1100", &vadd()],
    ));
    ok(&rocmc(d.path(), &["build", "--mcpu", "gfx90a", &vadd()]));
    for f in ["vadd.hsaco", "vadd.hipfb"] {
        let bytes = std::fs::read(d.path().join(f)).unwrap();
        for cut in [0, 3, 20, 40, 64, 100, 500, bytes.len() / 2, bytes.len() - 1] {
            let p = d.path().join("cut.bin");
            std::fs::write(&p, &bytes[..cut]).unwrap();
            let out = rocmc(d.path(), &["inspect", "cut.bin"]);
            let err = text(&out.stderr);
            assert!(!err.contains("panicked"), "{f} cut at {cut}: {err}");
            if !out.status.success() {
                assert_eq!(out.status.code(), Some(2), "{f} cut at {cut}: {err}");
                assert!(err.starts_with("error: cut.bin:"), "{err}");
            }
        }
    }
    std::fs::write(d.path().join("text.txt"), "hello").unwrap();
    let out = rocmc(d.path(), &["inspect", "text.txt"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("not an ELF file"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn lds_is_checked_against_each_targets_own_limit() {
    let lds_of = |src: &str, mcpu: &str| -> Result<u64, String> {
        let emit = Emit {
            code_object: true,
            ..Default::default()
        };
        match compile("k.toml", src, &Options::new(mcpu), emit) {
            Ok(a) => {
                let co = rocmc::linker::codeobject::read(&a.code_object.unwrap()).unwrap();
                Ok(co
                    .kernels
                    .iter()
                    .map(|k| k.group_segment_fixed_size)
                    .max()
                    .unwrap())
            }
            Err(e) => {
                assert_eq!(e.exit_code(), 2, "{e}");
                Err(e.to_string())
            }
        }
    };
    // A 64×129 f32 tile (33,024 bytes): over gfx600's 32 KiB, within 64 KiB.
    let tile = r#"
[kernel]
name = "k"
sizes = ["m", "n"]
max = { m = 4096, n = 4096 }
[inputs]
A = { dtype = "f32", shape = ["n", "m"] }
[[stage]]
compute = "B[j, i] = A[i, j]"
shape = ["m", "n"]
schedule = ["jo, io, ji, ii = tile(j, i, 128, 64)", "bind(jo, blockIdx.y)", "bind(io, blockIdx.x)", "bind(ii, threadIdx.x)", "AS = cache_read(A, shared, io, pad=1)"]
"#;
    assert_eq!(lds_of(tile, "gfx90a"), Ok(64 * 129 * 4));
    let e = lds_of(tile, "gfx600").unwrap_err();
    assert!(
        e.contains("kernel `k` needs 33024 bytes of LDS; a work-group on gfx600 has 32768")
            && e.contains("AS = cache_read(A, shared, io, pad=1)"),
        "{e}"
    );
    // A 128 KiB compute_at part: only gfx950 (160 KiB) and gfx1250 (320 KiB) take it.
    let part = std::fs::read_to_string(root().join("tests/bad/compute_at_lds_limit.toml")).unwrap();
    assert_eq!(lds_of(&part, "gfx950"), Ok(128 * 1024));
    let e = lds_of(&part, "gfx942").unwrap_err();
    assert!(e.contains("a work-group on gfx942 has 65536"), "{e}");
}
