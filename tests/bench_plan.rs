//! The GPU benchmark's plan (bench/gpu/plan.json): every entry has a kernel
//! file that scripts/gpu-bundle.sh bundles, or an alias in
//! bench/gpu/aliases.txt naming one, so no entry goes without a rocmc row
//! (13 once had none).

use crate::common::root;
use std::collections::HashSet;

/// The folders scripts/gpu-bundle.sh bundles every kernel file of.
const BUNDLED: [&str; 6] = [
    "examples",
    "bench/gpu/variants",
    "bench/matrix/variants",
    "tests/regress",
    "tests/conv",
    "tests/gather",
];

#[test]
fn every_plan_entry_has_a_kernel_file_in_the_bundle() {
    let mut names = HashSet::new();
    for dir in BUNDLED {
        for e in std::fs::read_dir(root().join(dir)).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(stem) = name.strip_suffix(".toml") {
                names.insert(stem.to_string());
            }
        }
    }
    let aliases = std::fs::read_to_string(root().join("bench/gpu/aliases.txt")).unwrap();
    for line in aliases
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let (name, base) = line.split_once(' ').unwrap_or_else(|| panic!("`{line}`"));
        assert!(
            root().join(base.trim()).is_file(),
            "alias {name}: no {base}"
        );
        names.insert(name.to_string());
    }
    let plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("bench/gpu/plan.json")).unwrap())
            .unwrap();
    let missing: Vec<&String> = plan
        .as_object()
        .unwrap()
        .keys()
        // NAME_default: NAME without its schedule (scripts/strip-schedules.py).
        .filter(|k| !names.contains(k.strip_suffix("_default").unwrap_or(k)))
        .collect();
    assert!(
        missing.is_empty(),
        "plan entries with no kernel file: {missing:?}"
    );
}
