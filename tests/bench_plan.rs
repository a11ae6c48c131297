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

/// The GPU benchmark's input fills (scripts/gpu-fills.sh writes one kernel
/// per dtype from bench/gpu/fill.toml.in and builds its PTX): each runs on
/// the CPU as the interpreter says, and draws what the host's draws hold
/// (`reference::input_draw`) — floats in [lo, lo + span), integers
/// `lo + h % span` reaching every value of a small span, booleans both
/// values, 8-bit floats finite magnitudes below 1 of both signs — and
/// different values at different indices.
#[test]
fn gpu_fills_draw_in_the_ranges_the_host_draws() {
    use rocmc::ir::interp::{self, Scalar};
    use rocmc::ir::DType;
    use std::collections::HashMap;
    let d = tempfile::tempdir().unwrap();
    let out = std::process::Command::new("bash")
        .arg(root().join("scripts/gpu-fills.sh"))
        .args([crate::common::rocmc_bin().to_str().unwrap(), "sm_90"])
        .arg(d.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", crate::common::text(&out.stderr));
    let n = 4096i64;
    let mut seen = 0;
    for t in DType::ALL {
        let path = d.path().join(format!("fill_{t}.toml"));
        let src = std::fs::read_to_string(&path).unwrap_or_else(|_| panic!("no fill for {t}"));
        assert!(
            d.path().join(format!("fill_{t}.ptx")).is_file(),
            "no PTX for {t}"
        );
        let front = rocmc::frontend(&path.display().to_string(), &src).unwrap();
        let k = &front.kernel;
        let (lo, span) = match t {
            t if t.is_float() && !t.is_f8() => (-1.0, 2.0),
            DType::U8 | DType::U32 => (0.0, 100.0),
            DType::Bool => (0.0, 2.0),
            _ => (-100.0, 201.0),
        };
        let params: HashMap<String, f64> = [
            ("seed".into(), 12345.0),
            ("lo".into(), lo),
            ("span".into(), span),
        ]
        .into();
        for c in rocmc::run::run_cpu(&front, &[n], &params, 0, false).unwrap() {
            assert!(
                c.ok(),
                "fill_{t} on the CPU: {} differs by {}",
                c.tensor,
                c.max_error
            );
        }
        let pv: Vec<Scalar> = k
            .params
            .iter()
            .map(|p| match p.dtype {
                DType::U32 => Scalar::I(params[&p.name] as i64),
                _ => Scalar::F(params[&p.name]),
            })
            .collect();
        let all = interp::run(k, &[n], &pv, &[]).unwrap();
        let o = &all[k.tensors.iter().position(|x| x.name == "O").unwrap()];
        let values: Vec<f64> = (0..o.len())
            .map(|i| match o.get(i) {
                Scalar::F(x) => x,
                Scalar::I(b) if t.is_f8() => t.f8_format().unwrap().decode(b as u8),
                Scalar::I(x) => x as f64,
            })
            .collect();
        let distinct: std::collections::BTreeSet<u64> =
            values.iter().map(|v| v.to_bits()).collect();
        if t.is_f8() {
            assert!(
                values.iter().all(|v| v.is_finite() && v.abs() < 1.0),
                "fill_{t}"
            );
            assert!(
                values.iter().any(|v| *v < 0.0) && values.iter().any(|v| *v > 0.0),
                "fill_{t}"
            );
        } else {
            // A float rounded to its dtype may reach lo + span, as the
            // host's draws do.
            let hi = if t.is_float() {
                lo + span
            } else {
                lo + span - 1.0
            };
            assert!(
                values.iter().all(|v| *v >= lo && *v <= hi),
                "fill_{t} leaves [{lo}, {hi}]"
            );
        }
        let want = match t {
            t if t.is_float() && !t.is_f8() && t.size() >= 2 => n as usize / 4,
            _ => (span as usize).min(50),
        };
        assert!(
            distinct.len() >= want,
            "fill_{t}: {} distinct values of {n}",
            distinct.len()
        );
        seen += 1;
    }
    assert_eq!(seen, DType::ALL.len());
}
