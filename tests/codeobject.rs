//! Code objects checked by tools that share no code with rocmc:
//! llvm-readobj-22, llvm-readelf-22, llvm-objdump-22, and clang-22 as the
//! reference for what a target's ELF header must say.

use crate::common::*;
use rocmc::{compile, Emit, Options};
use std::path::Path;

const TARGETS: [&str; 6] = [
    "gfx900", "gfx90a", "gfx942", "gfx1030", "gfx1100", "gfx1201",
];

fn build(dir: &Path, mcpu: &str, cov: u32, wave64: bool) -> std::path::PathBuf {
    let src = std::fs::read_to_string(example("vadd")).unwrap();
    let opts = Options {
        mcpu: mcpu.into(),
        code_object_version: cov,
        wave_size: wave64.then_some(64),
        ..Options::new(mcpu)
    };
    let art = compile(
        "vadd.toml",
        &src,
        &opts,
        Emit {
            code_object: true,
            ..Emit::default()
        },
    )
    .unwrap();
    let path = dir.join(format!(
        "vadd-{}-v{cov}-{wave64}.hsaco",
        mcpu.replace(':', "_")
    ));
    std::fs::write(&path, art.code_object.unwrap()).unwrap();
    path
}

/// The value after `key` on its line in llvm-readobj's YAML metadata dump.
fn meta<'a>(dump: &'a str, key: &str) -> Vec<&'a str> {
    dump.lines()
        .filter_map(|l| {
            let l = l.trim();
            l.strip_prefix("- ").unwrap_or(l).strip_prefix(key)
        })
        .map(str::trim)
        .collect()
}

#[test]
fn readobj_sees_the_target_abi_and_kernel_metadata() {
    let d = tempfile::tempdir().unwrap();
    for mcpu in TARGETS {
        for (cov, abi) in [(4, 2), (5, 3), (6, 4)] {
            let p = build(d.path(), mcpu, cov, false);
            let f = p.to_str().unwrap();
            let dump = tool("llvm-readobj-22", &["--file-headers", "--notes", f]);
            let ctx = format!("{mcpu} v{cov}");
            assert!(dump.contains("Machine: EM_AMDGPU (0xE0)"), "{ctx}\n{dump}");
            assert!(dump.contains("OS/ABI: AMDGPU_HSA (0x40)"), "{ctx}\n{dump}");
            assert!(
                dump.contains(&format!("ABIVersion: {abi}\n")),
                "{ctx}\n{dump}"
            );
            assert!(
                dump.contains(&format!("EF_AMDGPU_MACH_AMDGCN_{}", mcpu.to_uppercase())),
                "{ctx}\n{dump}"
            );
            assert_eq!(
                meta(&dump, "amdhsa.target:"),
                [format!("amdgcn-amd-amdhsa--{mcpu}").as_str()],
                "{ctx}"
            );
            assert_eq!(
                meta(&dump, ".name:")
                    .iter()
                    .filter(|n| **n == "vadd")
                    .count(),
                1,
                "{ctx}\n{dump}"
            );
            let kinds = meta(&dump, ".value_kind:");
            assert_eq!(
                kinds.iter().filter(|k| **k == "global_buffer").count(),
                3,
                "{ctx}: {kinds:?}"
            );
            assert_eq!(
                kinds.iter().filter(|k| **k == "by_value").count(),
                1,
                "{ctx}: {kinds:?}"
            );
            assert_eq!(meta(&dump, ".kernarg_segment_size:"), ["28"], "{ctx}");
            assert_eq!(meta(&dump, ".max_flat_workgroup_size:"), ["64"], "{ctx}");
            let wave = if mcpu.starts_with("gfx9") { "64" } else { "32" };
            assert_eq!(meta(&dump, ".wavefront_size:"), [wave], "{ctx}");

            let syms = tool("llvm-readelf-22", &["--dyn-syms", f]);
            assert!(
                syms.lines().any(|l| l.trim_end().ends_with(" vadd.kd")),
                "{ctx}\n{syms}"
            );
            let dis = tool("llvm-objdump-22", &["-d", &format!("--mcpu={mcpu}"), f]);
            // The assembler pads code after the last kernel with s_nop / s_code_end.
            let last = dis
                .lines()
                .rfind(|l| {
                    let i = l.trim_start();
                    l.starts_with('\t') && !i.starts_with("s_nop") && !i.starts_with("s_code_end")
                })
                .unwrap_or_default();
            assert!(
                last.trim_start().starts_with("s_endpgm"),
                "{ctx}: last instruction {last:?}"
            );
            assert!(dis.contains("<vadd>:"), "{ctx}");
        }
    }
}

#[test]
fn wave64_on_gfx10_and_later() {
    let d = tempfile::tempdir().unwrap();
    for mcpu in ["gfx1030", "gfx1100"] {
        let p = build(d.path(), mcpu, 5, true);
        let dump = tool("llvm-readobj-22", &["--notes", p.to_str().unwrap()]);
        assert_eq!(meta(&dump, ".wavefront_size:"), ["64"], "{mcpu}");
    }
}

#[test]
fn launch_geometry_is_stored_in_the_code_object() {
    let d = tempfile::tempdir().unwrap();
    let p = build(d.path(), "gfx90a", 5, false);
    let raw = tool(
        "llvm-readelf-22",
        &["--string-dump=.rocmc.launch", p.to_str().unwrap()],
    );
    assert!(raw.contains("ceil(n / 64)"), "{raw}");
    let sh = tool("llvm-readelf-22", &["-S", p.to_str().unwrap()]);
    let line = sh
        .lines()
        .find(|l| l.contains(".rocmc.launch"))
        .expect("section present");
    // Not allocated: the loader never copies it to the GPU.
    assert!(
        !line
            .split_whitespace()
            .any(|w| w.contains('A') && w.len() <= 3 && w.chars().all(|c| c.is_ascii_uppercase())),
        "{line}"
    );
    let co = rocmc::linker::codeobject::read(&std::fs::read(&p).unwrap()).unwrap();
    let l = co.launch.expect("launch info");
    assert_eq!(l.kernels[0].block, [64, 1, 1]);
    let n = std::collections::HashMap::from([("n".to_string(), 1000)]);
    assert_eq!(l.kernels[0].grid[0].eval(&n), Some(16));
}

#[test]
fn lld_errors_are_values_and_lld_stays_usable() {
    let e = rocmc::linker::link_code_object(b"not an object")
        .unwrap_err()
        .to_string();
    assert!(e.contains("lld failed"), "{e}");
    // A later link still works.
    let d = tempfile::tempdir().unwrap();
    let p = build(d.path(), "gfx90a", 5, false);
    assert!(p.exists());
}

#[test]
fn the_lds_rocmc_counts_is_what_the_code_object_declares() {
    // The per-target LDS check relies on this sum matching what LLVM allocates.
    for name in examples() {
        let path = example(&name);
        let src = std::fs::read_to_string(&path).unwrap();
        let front = rocmc::frontend(path.to_str().unwrap(), &src).unwrap();
        let opts = Options::new("gfx90a");
        let target = rocmc::targets(&opts).unwrap().remove(0);
        let emit = Emit {
            code_object: true,
            ..Default::default()
        };
        let art = match rocmc::backend(&front, &target, &opts, emit) {
            Ok(a) => a,
            // Matrix-core examples are shaped for one family's instructions
            // (tests/mma.rs compiles each for every target that has them).
            Err(_) if rocmc::ir::lower::needs_target(&front.kernel) => continue,
            Err(e) => panic!("{name}: {e}"),
        };
        let co = rocmc::linker::codeobject::read(&art.code_object.clone().unwrap()).unwrap();
        for g in &art.program.kernels {
            let ours: u64 = g.shared.iter().map(|s| s.bytes()).sum();
            let k = co.kernels.iter().find(|k| k.name == g.name).unwrap();
            assert_eq!(
                ours, k.group_segment_fixed_size,
                "{name}: kernel {}",
                g.name
            );
        }
    }
}
