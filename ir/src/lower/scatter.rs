//! The first kernel of a scatter stage: its output filled with the
//! operation's identity, before the scatter kernel combines into it.

use super::{lower_stage, GpuKernel};
use crate::diag::Diagnostic;
use crate::kernel::{Axis, Kernel, Stage, StageId};
use crate::schedule::{self, Step};

/// Threads per work-group of the fill.
const THREADS: u32 = 256;

/// Lowers the fill of scatter stage `sid`'s output as a stage of its own,
/// `H[e0, e1, ...] = identity` over the output's shape, flattened and
/// spread over work-groups of [`THREADS`] threads. Named after the scatter's
/// kernel with `_init`.
pub(super) fn init_kernel(k: &Kernel, sid: StageId) -> Result<GpuKernel, Diagnostic> {
    let st = k.stage(sid);
    let sc = st.scatter.as_ref().expect("a scatter stage");
    let t = k.tensor(st.output);
    let axes: Vec<Axis> = t
        .shape
        .iter()
        .enumerate()
        .map(|(i, e)| Axis {
            name: format!("e{i}"),
            extent: e.clone(),
            span: st.span,
        })
        .collect();
    let mut text = Vec::new();
    let mut flat = "e0".to_string();
    for i in 1..axes.len() {
        text.push(format!("f{i} = fuse({flat}, e{i})"));
        flat = format!("f{i}");
    }
    text.push(format!("o, t = split({flat}, {THREADS})"));
    text.push("bind(o, blockIdx.x)".into());
    text.push("bind(t, threadIdx.x)".into());
    let steps: Vec<Step> = text
        .iter()
        .map(|s| crate::syntax::parse_step(s, 0).and_then(|st| Step::from_syntax(&st)))
        .collect::<Result<_, _>>()
        .map_err(|e| internal(st, &e))?;
    let mut init = Stage {
        name: st.name.clone(),
        output: st.output,
        axes,
        reduce: None,
        scatter: None,
        value: sc.op.identity(t.dtype),
        schedule: steps,
        span: st.span,
        nest: None,
    };
    let mut k2 = k.clone();
    init.nest = Some(schedule::apply(&k2, &init).map_err(|e| too_large(st, &e))?);
    k2.stages[sid.0 as usize] = init;
    let mut g = lower_stage(&k2, sid, None).map_err(|e| too_large(st, &e))?;
    g.name = format!("{}_init", g.name);
    Ok(g)
}

fn internal(st: &Stage, e: &Diagnostic) -> Diagnostic {
    Diagnostic::new(
        st.span,
        format!(
            "the fill of scatter `{}` failed: {} (a rocmc bug)",
            st.name, e.message
        ),
    )
}

/// Lowering the fill fails where the output may hold more elements than
/// 32-bit loop counters count: say so on the stage, with the remedy.
fn too_large(st: &Stage, e: &Diagnostic) -> Diagnostic {
    let mut d = Diagnostic::new(
        st.span,
        format!(
            "the output of scatter `{}` cannot be filled before the scatter: {}",
            st.name, e.message
        ),
    );
    d.hints = e.hints.clone();
    d
}
