//! `rocmc build --emit schedule`: each stage's schedule as text, the rule
//! that wrote it where the file gives none, ready to paste into the file.

use rocmc_ir::{Kernel, TensorKind};
use std::fmt::Write;

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
                let own = matches!(k.tensor(st.output).kind, TensorKind::Stage(_));
                let _ = writeln!(
                    s,
                    "\n# stage `{}`: {}",
                    st.name,
                    if st.schedule.is_empty() && own {
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
