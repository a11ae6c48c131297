//! `mma(ri, rj, rk)`: a tile of a matrix product becomes one matrix
//! instruction (MFMA, WMMA, `mma.sync`) executed by a whole wave.
//!
//! What is checked here does not depend on the target: three distinct,
//! innermost, unbound loops of constant extent (two output loops, one
//! reduction loop), threadIdx.x still free. Which instruction runs them,
//! and whether the target has one of that shape and those types, is
//! decided when the stage is lowered for a target
//! ([`crate::mtype::MatrixUnit`]).

use crate::diag::{Diagnostic, Span};
use crate::schedule::*;
use crate::syntax::StepStmt;

const EX: &str = "mma(ri, rj, rk)` or `mma(ri, rj, rk, instr=v_mfma_f32_16x16x16_f16)";

pub(crate) fn parse(s: &StepStmt) -> Result<StepKind, Diagnostic> {
    results(s, 0, EX)?;
    let mut loops = Vec::new();
    let mut instr = None;
    for a in &s.args {
        match &a.key {
            None if instr.is_none() => loops.push(arg_name(a, "a loop")?),
            None => {
                return Err(Diagnostic::new(
                    a.value.span,
                    "the loops come before `instr=`",
                ))
            }
            Some((k, _)) if k == "instr" => {
                instr = Some(arg_name(
                    a,
                    "an instruction name such as `v_mfma_f32_16x16x16_f16`",
                )?)
            }
            Some((k, sp)) => {
                return Err(Diagnostic::new(*sp, format!("`mma` has no argument `{k}`"))
                    .hint(format!("write `{EX}`")))
            }
        }
    }
    let [rows, cols, k] = <[Name; 3]>::try_from(loops).map_err(|l| {
        Diagnostic::new(
            s.span,
            format!(
                "`mma` takes three loops (rows, columns, reduction), {} given",
                l.len()
            ),
        )
        .hint(format!("write `{EX}`"))
    })?;
    Ok(StepKind::Mma {
        rows,
        cols,
        k,
        instr,
    })
}

pub(crate) fn apply(
    st: &mut State,
    rows: &Name,
    cols: &Name,
    k: &Name,
    instr: Option<&Name>,
    span: Span,
) -> Result<(), Diagnostic> {
    if let Some(m) = &st.nest.matrix {
        return Err(Diagnostic::new(span, "a stage can have one `mma` step")
            .hint(format!("the first is at {}", st.at(m.span))));
    }
    let mut vars = [VarId(0); 3];
    for (i, (n, want_reduce)) in [(rows, false), (cols, false), (k, true)]
        .into_iter()
        .enumerate()
    {
        let v = st.lookup(n)?;
        st.not_bound(v, n)?;
        if vars[..i].contains(&v) {
            return Err(Diagnostic::new(
                n.span,
                format!("loop `{}` is named twice", n.name),
            ));
        }
        let lv = st.nest.var(v);
        if lv.reduce != want_reduce {
            let role = ["rows", "columns", "reduction"][i];
            return Err(Diagnostic::new(
                n.span,
                format!(
                    "loop `{}` is {} loop; `mma`'s {role} loop must be {}",
                    n.name,
                    if lv.reduce {
                        "a reduction"
                    } else {
                        "an output"
                    },
                    if want_reduce {
                        "a reduction loop (a split of the summed axis)"
                    } else {
                        "an output loop"
                    }
                ),
            )
            .hint(format!(
                "write `{EX}` with the rows, columns and reduction loops in that order"
            )));
        }
        if lv.extent.as_const().is_none() {
            return Err(Diagnostic::new(
                n.span,
                format!("loop `{}` has a symbolic extent", n.name),
            )
            .hint("split it by the instruction's shape (16, 32 …) and give `mma` the inner loop"));
        }
        if lv.kind == LoopKind::Vectorized {
            return Err(Diagnostic::new(
                n.span,
                format!(
                    "loop `{}` is vectorized; a matrix instruction's loops cannot be",
                    n.name
                ),
            ));
        }
        vars[i] = v;
    }
    let unbound: Vec<VarId> = st
        .nest
        .order
        .iter()
        .copied()
        .filter(|v| !matches!(st.nest.var(*v).kind, LoopKind::Bound(_)))
        .collect();
    let tail = &unbound[unbound.len().saturating_sub(3)..];
    if vars.iter().any(|v| !tail.contains(v)) {
        let names: Vec<&str> = unbound
            .iter()
            .map(|v| st.nest.var(*v).name.as_str())
            .collect();
        return Err(
            Diagnostic::new(span, "`mma`'s loops must be the three innermost loops").hint(format!(
                "the loops are now {}; reorder them so that `{}`, `{}` and `{}` come last",
                names.join(", "),
                rows.name,
                cols.name,
                k.name
            )),
        );
    }
    if let Some(other) = st.nest.bound(GpuAxis::Thread(Dim::X)) {
        return Err(Diagnostic::new(
            span,
            format!(
                "threadIdx.x is bound to loop `{}`; with `mma` threadIdx.x is the lane within the wave",
                st.nest.var(other).name
            ),
        )
        .hint("bind the loops over waves to threadIdx.y and threadIdx.z"));
    }
    let mut name = "lane".to_string();
    let mut n = 1;
    while st.nest.vars.iter().any(|v| v.name == name) || st.taken.contains(&name) {
        name = format!("lane{n}");
        n += 1;
    }
    // Its extent, the wave size, is the target's; set when lowering.
    st.nest.vars.push(LoopVar {
        name,
        reduce: false,
        extent: Index::c(1),
        kind: LoopKind::Bound(GpuAxis::Thread(Dim::X)),
        span,
    });
    let lane = VarId(st.nest.vars.len() as u32 - 1);
    st.nest.order.insert(0, lane);
    st.bind_spans.insert(lane, span);
    st.nest.matrix = Some(MatrixRequest {
        rows: vars[0],
        cols: vars[1],
        k: vars[2],
        lane,
        instr: instr.cloned(),
        span,
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testing::nest;

    /// The test kernel has no reduction, so only the checks that come
    /// before the reduction loop's are reachable here; the rest are
    /// covered by the GEMM tests (`tests/matrix.rs`).
    #[test]
    fn refuses_malformed_requests() {
        let e = nest(&["mma(r, c)"]).unwrap_err();
        assert!(e.contains("takes three loops"), "{e}");
        let e = nest(&["mma(r, c, c)"]).unwrap_err();
        assert!(e.contains("symbolic extent"), "{e}");
        let e = nest(&[
            "ro, ri = split(r, 16)",
            "co, ci = split(c, 16)",
            "mma(ri, ci, ci)",
        ])
        .unwrap_err();
        assert!(e.contains("named twice"), "{e}");
        let e = nest(&["mma(r, c, x, shape=4)"]).unwrap_err();
        assert!(e.contains("no argument `shape`"), "{e}");
        let e = nest(&["ro, ri = split(r, 16)", "mma(ri, c, ro)"]).unwrap_err();
        assert!(
            e.contains("symbolic extent") || e.contains("reduction"),
            "{e}"
        );
    }
}
