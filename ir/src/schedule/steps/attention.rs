//! The two schedules of an attention stage (`O[b, i, d], L[b, i] =
//! attention(q, k, v)`), each built whole in lowering as top-k's is:
//!
//! - `rowwise(j, threads=64)`: one thread per query row walks the keys
//!   once with the online softmax (a running maximum and sum, and the
//!   row's `d` outputs rescaled in registers). Any target; the fallback.
//! - `flash(j, rows=64, keys=64, stages=2, wave_rows=R)`: a work-group
//!   per tile of `rows` query rows, `R` per wave (by default one per
//!   lane: the wave's width); the scores of a tile
//!   of `keys` keys and the output accumulate on the target's matrix
//!   instructions, K and V tiles staged through LDS with `stages`
//!   buffers, key tiles past the last row's keys skipped
//!   ([`crate::lower`]'s `attention` module).

use crate::diag::{Diagnostic, Span};
use crate::plan::AttnPlan;
use crate::schedule::*;
use crate::syntax::StepStmt;

const ROWWISE: &str = "rowwise(j, threads=64)";
const FLASH: &str = "flash(j, rows=64, keys=64, stages=2)";

/// The axis, then `name=value` integers among `keys` (defaults given).
fn args(s: &StepStmt, example: &str, keys: &[(&str, i64)]) -> Result<(Name, Vec<i64>), Diagnostic> {
    results(s, 0, example)?;
    let Some(first) = s.args.first() else {
        return Err(
            Diagnostic::new(s.span, format!("`{}` needs the key axis", s.name))
                .hint(format!("write `{example}`")),
        );
    };
    let axis = arg_name(first, "the key axis")?;
    let mut values: Vec<i64> = keys.iter().map(|k| k.1).collect();
    for a in &s.args[1..] {
        let key = a.key.as_ref().map(|k| k.0.as_str());
        match keys.iter().position(|k| Some(k.0) == key) {
            Some(i) => values[i] = arg_int(a, keys[i].0)?,
            None => {
                let names: Vec<String> = keys.iter().map(|k| format!("`{}=`", k.0)).collect();
                return Err(Diagnostic::new(
                    a.value.span,
                    format!("`{}` takes the key axis and {}", s.name, names.join(", ")),
                )
                .hint(format!("write `{example}`")));
            }
        }
    }
    Ok((axis, values))
}

fn power_of_two(s: &StepStmt, what: &str, v: i64, lo: i64, hi: i64) -> Result<u32, Diagnostic> {
    if !(lo..=hi).contains(&v) || v & (v - 1) != 0 {
        return Err(Diagnostic::new(
            s.span,
            format!("{what}={v}: a power of two from {lo} to {hi}"),
        ));
    }
    Ok(v as u32)
}

pub(crate) fn parse_rowwise(s: &StepStmt) -> Result<StepKind, Diagnostic> {
    let (axis, v) = args(s, ROWWISE, &[("threads", 64)])?;
    let threads = power_of_two(s, "threads", v[0], 32, 1024)?;
    Ok(StepKind::Attention {
        axis,
        plan: AttnPlan::Rows {
            threads,
            span: s.span,
        },
    })
}

pub(crate) fn parse_flash(s: &StepStmt) -> Result<StepKind, Diagnostic> {
    let (axis, v) = args(
        s,
        FLASH,
        &[("rows", 64), ("keys", 64), ("stages", 2), ("wave_rows", 0)],
    )?;
    let rows = power_of_two(s, "rows", v[0], 16, 256)?;
    let keys = power_of_two(s, "keys", v[1], 16, 256)?;
    if !(1..=4).contains(&v[2]) {
        return Err(Diagnostic::new(
            s.span,
            format!("stages={}: from 1 to 4 LDS buffers", v[2]),
        ));
    }
    // 0: one row per lane, the wave's width (which the target fixes).
    let wave_rows = match v[3] {
        0 => 0,
        r => power_of_two(s, "wave_rows", r, 16, 128)?,
    };
    Ok(StepKind::Attention {
        axis,
        plan: AttnPlan::Flash {
            rows,
            keys,
            stages: v[2] as u32,
            wave_rows,
            span: s.span,
        },
    })
}

pub(crate) fn apply(st: &mut State, axis: &Name, plan: AttnPlan) -> Result<(), Diagnostic> {
    let span: Span = plan.span();
    let Some(key) = st.attention.clone() else {
        return Err(
            Diagnostic::new(span, "`rowwise` and `flash` are for attention stages").hint(
                "an attention stage computes `O[b, i, d], L[b, i] = attention(Q[b, i, e], K[b, j, e], V[b, j, d])`",
            ),
        );
    };
    if axis.name != key {
        return Err(Diagnostic::new(
            axis.span,
            format!("the stage's key axis is `{key}`, not `{}`", axis.name),
        )
        .hint(format!("write `{}({key}, ...)`", plan.step())));
    }
    if st.nest.attention.is_some() {
        return Err(Diagnostic::new(
            span,
            "an attention stage takes one `rowwise` or `flash` step",
        ));
    }
    st.nest.attention = Some(plan);
    Ok(())
}
