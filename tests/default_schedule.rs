//! Default schedules: every example with its schedules removed still
//! means what the interpreter says, on the CPU, and compiles for AMD and
//! NVIDIA targets; the rule that fires follows the stage's shape; a
//! written schedule always wins; `--emit schedule` prints steps that,
//! pasted into the file, give the same kernel.

use rocmc_tests::*;
use std::collections::HashMap;

/// The kernel file without its schedules: every `schedule = [...]` and the
/// `[tune]` section those used.
fn unscheduled(src: &str) -> String {
    let mut out = String::new();
    let (mut in_schedule, mut in_tune) = (false, false);
    for line in src.lines() {
        let t = line.trim_start();
        if t.starts_with('[') && !t.starts_with("[[stage") {
            in_tune = t.starts_with("[tune");
        } else if t.starts_with("[[stage") {
            in_tune = false;
        }
        if in_tune {
            continue;
        }
        if t.starts_with("schedule") && t.contains('[') {
            in_schedule = !t.contains(']');
            continue;
        }
        if in_schedule {
            in_schedule = !t.contains(']');
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

fn front(name: &str, src: &str) -> rocmc::Frontend {
    rocmc::frontend(&format!("{name}.toml"), src).unwrap_or_else(|e| panic!("{name}:\n{e}"))
}

#[test]
fn every_example_without_its_schedule_keeps_its_meaning_and_compiles() {
    for name in examples() {
        let src = unscheduled(&std::fs::read_to_string(example(&name)).unwrap());
        assert!(!src.contains("schedule ="), "{name}");
        let f = front(&name, &src);
        let k = &f.kernel;
        for st in &k.stages {
            assert!(
                st.default.is_some(),
                "{name}: stage `{}` got no default schedule",
                st.name
            );
        }
        for seed in [1u64] {
            let picked: Vec<i64> = (0..k.sizes.len())
                .map(|i| 3 + ((seed * 7919 + i as u64 * 104_729) % 70) as i64)
                .collect();
            let sizes = k.fit_sizes(&picked);
            let cmp = rocmc::run::run_cpu(&f, &sizes, &HashMap::new(), seed, false)
                .unwrap_or_else(|e| panic!("{name} {sizes:?}: {e}"));
            for c in &cmp {
                assert!(c.ok(), "{name} {sizes:?}: {c:?}");
            }
        }
        for mcpu in ["gfx90a", "gfx942", "gfx1100", "gfx1201", "sm_90"] {
            rocmc::compile(
                &format!("{name}.toml"),
                &src,
                &rocmc::Options::new(mcpu),
                rocmc::Emit {
                    code_object: !mcpu.starts_with("sm"),
                    asm: mcpu.starts_with("sm"),
                    ..Default::default()
                },
            )
            .unwrap_or_else(|e| panic!("{name} for {mcpu}: {e}"));
        }
    }
}

#[test]
fn the_rule_follows_the_shape_of_the_stage() {
    for (name, stage, rule) in [
        ("vadd", "C", "elementwise-1d"),
        ("bias2d", "Y", "elementwise-2d"),
        ("argmax", "I", "row-reduction"),
        ("softmax", "M", "row-chain"),
        ("softmax", "Y", "row-chain"),
        ("layernorm", "rstd", "row-chain"),
        ("histogram", "H", "scatter-privatized"),
        ("matmul", "C", "matmul-tiles"),
        ("conv2d", "O", "tiles-16x16"),
        ("embedding", "E", "elementwise-2d"),
        ("transpose", "B", "elementwise-tiles"),
    ] {
        let src = unscheduled(&std::fs::read_to_string(example(name)).unwrap());
        let f = front(name, &src);
        let st = f.kernel.stages.iter().find(|s| s.name == stage).unwrap();
        assert_eq!(
            st.default.as_ref().map(|d| d.rule),
            Some(rule),
            "{name} {stage}"
        );
    }
    // A written schedule is kept as it is.
    let f = front("vadd", &std::fs::read_to_string(example("vadd")).unwrap());
    assert!(f.kernel.stages[0].default.is_none());
}

#[test]
fn printed_default_steps_pasted_into_the_file_give_the_same_kernel() {
    let d = tempfile::tempdir().unwrap();
    for name in ["bias2d", "softmax", "histogram"] {
        let src = unscheduled(&std::fs::read_to_string(example(name)).unwrap());
        std::fs::write(d.path().join("k.toml"), &src).unwrap();
        let out = rocmc(
            d.path(),
            &[
                "build",
                "--mcpu",
                "gfx942",
                "--emit",
                "schedule,loops",
                "k.toml",
                "-o",
                "k",
            ],
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        let printed = std::fs::read_to_string(d.path().join("k.schedule")).unwrap();
        assert!(printed.contains("rule `"), "{printed}");
        // Paste: each stage's printed block after its `compute` line.
        let blocks: Vec<&str> = printed
            .split("\nschedule = [")
            .skip(1)
            .map(|b| b.split("\n]").next().unwrap())
            .collect();
        let mut pasted = String::new();
        let mut next = blocks.iter();
        for line in src.lines() {
            pasted.push_str(line);
            pasted.push('\n');
            if line.starts_with("compute") {
                let b = next.next().expect("a block per stage");
                pasted.push_str(&format!("schedule = [{b}\n]\n"));
            }
        }
        std::fs::write(d.path().join("p.toml"), &pasted).unwrap();
        let out = rocmc(
            d.path(),
            &[
                "build",
                "--mcpu",
                "gfx942",
                "--emit",
                "schedule,loops",
                "p.toml",
                "-o",
                "p",
            ],
        );
        assert!(
            out.status.success(),
            "{name}:\n{pasted}\n{}",
            text(&out.stderr)
        );
        let strip = |s: String| s.replace("k.toml", "").replace("p.toml", "");
        assert_eq!(
            strip(std::fs::read_to_string(d.path().join("k.loops")).unwrap()),
            strip(std::fs::read_to_string(d.path().join("p.loops")).unwrap()),
            "{name}"
        );
        let again = std::fs::read_to_string(d.path().join("p.schedule")).unwrap();
        assert!(again.contains("as written in the file"), "{again}");
    }
}
