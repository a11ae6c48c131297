//! `rocmc build --emit schedule`: each stage's schedule as text, the rule
//! that wrote it where the file gives none, ready to paste into the file.

use rocmc_ir::{Kernel, TensorKind};
use std::fmt::Write;

/// Whether stage `st` of `k` runs on one thread: it writes a tensor of its
/// own, and neither the file nor a rule gave it a schedule.
fn one_thread(k: &Kernel, st: &rocmc_ir::kernel::Stage) -> bool {
    st.schedule.is_empty()
        && st.default.is_none()
        && matches!(k.tensor(st.output).kind, TensorKind::Stage(_))
}

/// The warnings a build of `k` prints: each stage that runs on one thread
/// because no rule's schedule applies to it.
pub fn one_thread_warnings(k: &Kernel) -> Vec<String> {
    k.stages
        .iter()
        .filter(|st| one_thread(k, st))
        .map(|st| {
            format!(
                "stage `{}` runs on one thread: no default rule's schedule lowers for it; write a schedule for it, see `--emit schedule` and docs/kernel-format.md",
                st.name
            )
        })
        .collect()
}

/// The schedules of `k`'s stages, `source` being the file's text.
pub fn schedules(k: &Kernel, source: &str) -> String {
    let mut s = String::new();
    // Writing into a String cannot fail.
    let _ = writeln!(s, "# {}: the schedule of each stage", k.name);
    for st in &k.stages {
        let steps: Vec<String> = match &st.default {
            Some(d) => {
                let _ = writeln!(
                    s,
                    "\n# stage `{}`: rule `{}` (the file gives no schedule; paste this into the stage to edit it)",
                    st.name, d.rule
                );
                if !d.knobs.is_empty() {
                    let _ = writeln!(
                        s,
                        "# its numbers are tune parameters (`rocmc tune` searches them, `--tune NAME=V` sets one):"
                    );
                }
                if let Some((size, bound)) = &d.version_at {
                    let _ = writeln!(
                        s,
                        "# where `{size}` <= {bound}, the kernel runs a version written by the same rule under `max = {{ {size} = {bound} }}` (on a GPU target; `--emit loops` shows both)"
                    );
                }
                for kb in &d.knobs {
                    let vals: Vec<String> = kb.values.iter().map(i64::to_string).collect();
                    let _ = writeln!(
                        s,
                        "#   {}={} ({}; default {}; candidates {})",
                        kb.name,
                        kb.value,
                        kb.doc,
                        kb.default,
                        vals.join(", ")
                    );
                }
                d.steps.clone()
            }
            None => {
                let _ = writeln!(
                    s,
                    "\n# stage `{}`: {}",
                    st.name,
                    if one_thread(k, st) {
                        "none (no rule applies: one thread computes it)"
                    } else {
                        "as written in the file"
                    }
                );
                st.schedule
                    .iter()
                    .map(|step| {
                        source
                            .get(step.span.start..step.span.end)
                            .unwrap_or("?")
                            .to_string()
                    })
                    .collect()
            }
        };
        let _ = writeln!(s, "schedule = [");
        for t in steps {
            let _ = writeln!(s, "  \"{t}\",");
        }
        let _ = writeln!(s, "]");
    }
    s
}
