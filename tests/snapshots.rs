//! Snapshots of every example: its loop IR (without a target, one per
//! example), and its optimised LLVM IR and GCN assembly for a CDNA (wave64)
//! and an RDNA (wave32) target. Review changes with `cargo insta review`;
//! CI refuses mismatches.

use crate::common::*;
use rocmc::{compile, Emit, Options};

#[test]
fn every_example_through_every_form() {
    let examples = examples();
    assert!(examples.len() >= 3, "{examples:?}");
    let mut settings = insta::Settings::clone_current();
    settings.set_prepend_module_to_snapshot(false);
    settings.set_snapshot_path(root().join("tests/snapshots"));
    settings.bind(|| {
        for name in &examples {
            let src = std::fs::read_to_string(example(name)).unwrap();
            let front = rocmc::frontend(&format!("{name}.toml"), &src)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            insta::assert_snapshot!(format!("{name}.loops"), front.loops);
            for mcpu in ["gfx90a", "gfx1100"] {
                let art = compile(
                    &format!("{name}.toml"),
                    &src,
                    &Options::new(mcpu),
                    Emit {
                        llvm: true,
                        asm: true,
                        ..Emit::default()
                    },
                )
                .unwrap_or_else(|e| panic!("{name} for {mcpu}: {e}"));
                // Only a default the rules choose per target (an unscheduled
                // attention: `flash` on a matrix unit) may differ, and
                // threads' partial results, which AMD combines by lane
                // exchanges within each wave first.
                let per_target = front
                    .kernel
                    .stages
                    .iter()
                    .any(|s| s.default.as_ref().is_some_and(|d| d.by_target));
                let by_lanes = rocmc::ir::lower::reduces_across_threads(&front.kernel);
                if by_lanes && !per_target && art.loops != front.loops {
                    assert!(
                        art.loops.contains("lane_xor(") && !front.loops.contains("lane_xor("),
                        "{name}: {mcpu}'s loop IR differs by more than lane exchanges"
                    );
                } else if !per_target {
                    assert_eq!(
                        art.loops, front.loops,
                        "{name}: the loop IR depends on the target"
                    );
                }
                insta::assert_snapshot!(format!("{name}.{mcpu}.ll"), art.llvm_ir);
                insta::assert_snapshot!(format!("{name}.{mcpu}.s"), art.asm.unwrap());
            }
        }
    });
}

/// The LLVM module is printed only when asked for (printing it costs as
/// much as a small kernel's code generation).
#[test]
fn llvm_ir_only_when_asked() {
    let src = std::fs::read_to_string(example("vadd")).unwrap();
    let opts = Options::new("gfx90a");
    let obj = Emit {
        object: true,
        ..Emit::default()
    };
    let art = compile("vadd.toml", &src, &opts, obj).unwrap();
    assert!(art.llvm_ir.is_empty() && art.object.is_some());
    let art = compile("vadd.toml", &src, &opts, Emit { llvm: true, ..obj }).unwrap();
    assert!(art.llvm_ir.contains("define amdgpu_kernel void @vadd"));
}
