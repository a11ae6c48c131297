//! Snapshots of the optimised LLVM IR and the GCN assembly of every example,
//! for a CDNA (wave64) and an RDNA (wave32) target. Review changes with
//! `cargo insta review`; CI refuses mismatches.

use rocmc::{compile, Emit, Options};
use rocmc_tests::*;

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
            for mcpu in ["gfx90a", "gfx1100"] {
                let art = compile(
                    &format!("{name}.toml"),
                    &src,
                    &Options::new(mcpu),
                    Emit {
                        asm: true,
                        ..Emit::default()
                    },
                )
                .unwrap_or_else(|e| panic!("{name} for {mcpu}: {e}"));
                insta::assert_snapshot!(format!("{name}.{mcpu}.loops"), art.loops);
                insta::assert_snapshot!(format!("{name}.{mcpu}.ll"), art.llvm_ir);
                insta::assert_snapshot!(format!("{name}.{mcpu}.s"), art.asm.unwrap());
            }
        }
    });
}
