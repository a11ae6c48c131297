//! The first kernel of a scatter stage: its output filled with the
//! operation's identity, before the scatter kernel combines into it.

use super::{lower_stage, GpuKernel, Local, Stmt};
use crate::diag::Diagnostic;
use crate::dtype::DType;
use crate::index::{IOp, Index, VarId};
use crate::kernel::{Axis, Expr, ExprKind, Kernel, ReduceOp, Stage, StageId, TensorId};
use crate::schedule::{self, Guard, LoopKind, LoopVar, Step};

/// Threads per work-group of the fill.
const THREADS: u32 = 256;

/// The operation a stage combines into its output with atomic updates
/// that must first be filled with its identity: a scatter's, or a
/// reduction's whose loop is bound to a blockIdx (work-groups combine
/// their parts).
pub(super) fn combined_op(st: &Stage) -> Option<ReduceOp> {
    match st.scatter() {
        Some(sc) => Some(sc.op),
        None => grid_op(st),
    }
}

/// The atomic update of a grid reduction (a reduction loop bound to a
/// blockIdx); `None` for any other stage.
pub(super) fn grid_op(st: &Stage) -> Option<ReduceOp> {
    let grid = st
        .nest
        .as_ref()?
        .vars
        .iter()
        .any(|v| v.reduce && matches!(v.kind, LoopKind::Bound(schedule::GpuAxis::Block(_))));
    grid.then(|| st.grid_combine().ok()).flatten()
}

/// A grid reduction's stores of its result become atomic updates of the
/// output: each work-group holds one part of every output element it
/// stores (`nest` stores the bare reduction; the epilogue comes after).
pub(super) fn combine_stores(body: Vec<Stmt>, output: TensorId, op: ReduceOp) -> Vec<Stmt> {
    body.into_iter()
        .map(|s| match s {
            Stmt::Store {
                tensor,
                indices,
                value,
            } if tensor == output => Stmt::Scatter {
                tensor,
                indices: indices
                    .into_iter()
                    .map(|ix| Expr {
                        kind: ExprKind::Index(ix),
                        dtype: DType::I32,
                    })
                    .collect(),
                op,
                value,
                shared: None,
            },
            s => s.map_bodies(&mut |b| combine_stores(b, output, op)),
        })
        .collect()
}

/// Lowers the fill of stage `sid`'s output (a scatter's, or a grid
/// reduction's) as a stage of its own, `H[e0, e1, ...] = identity`.
/// Named after the stage's kernel with `_init`.
pub(super) fn init_kernel(k: &Kernel, sid: StageId, op: ReduceOp) -> Result<GpuKernel, Diagnostic> {
    let t = k.tensor(k.stage(sid).output);
    over_output(k, sid, op.identity(t.dtype), "init")
}

/// Lowers a grid reduction's epilogue, run once its parts have met in the
/// output: `S[e0, ...] = epilogue(S[e0, ...])` in place. `None` where the
/// stage's value is the bare reduction. Named with `_epilogue`.
pub(super) fn epilogue_kernel(k: &Kernel, sid: StageId) -> Result<Option<GpuKernel>, Diagnostic> {
    let st = k.stage(sid);
    if matches!(st.value.kind, ExprKind::Reduced) {
        return Ok(None);
    }
    // The stage's axes are the output's dimensions in order, so the value's
    // axis variables are the fill's `e0, e1, ...`.
    let own = Expr {
        kind: ExprKind::Load {
            tensor: st.output,
            indices: (0..st.axes.len() as u32)
                .map(|v| Index::Var(VarId(v)))
                .collect(),
        },
        dtype: st.value.dtype,
    };
    over_output(k, sid, st.value.replace_reduced(&own), "epilogue").map(Some)
}

/// Lowers `H[e0, e1, ...] = value` over the output of stage `sid` as a
/// kernel of its own, flattened and spread over work-groups of
/// [`THREADS`] threads, named after the stage's kernel with `_{suffix}`.
fn over_output(
    k: &Kernel,
    sid: StageId,
    value: Expr,
    suffix: &str,
) -> Result<GpuKernel, Diagnostic> {
    let st = k.stage(sid);
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
        kind: crate::kernel::StageKind::Map,
        value,
        schedule: steps,
        span: st.span,
        nest: None,
        default: None,
        absorbed: false,
    };
    let mut k2 = k.clone();
    // Stages computed at the scatter's loops belong to the scatter's
    // kernel, not to its fill.
    for p in &mut k2.stages {
        if p.compute_at().is_some_and(|(c, _, _)| c.name == st.name) {
            p.schedule
                .retain(|s| !matches!(s.kind, schedule::StepKind::ComputeAt { .. }));
        }
    }
    init.nest = Some(schedule::apply(&k2, &init).map_err(|e| too_large(st, &e))?);
    k2.stages[sid.0 as usize] = init;
    // A map over the output, which no template claims.
    let given = super::Given {
        unit: None,
        templates: &super::NO_TEMPLATES,
    };
    let mut g = lower_stage(&k2, sid, given).map_err(|e| too_large(st, &e))?;
    g.name = format!("{}_{suffix}", g.name);
    Ok(g)
}

fn internal(st: &Stage, e: &Diagnostic) -> Diagnostic {
    Diagnostic::new(
        st.span,
        format!(
            "the fill of stage `{}`'s output failed: {} (a rocmc bug)",
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
            "the output of stage `{}` cannot be filled before its atomic updates: {}",
            st.name, e.message
        ),
    );
    d.hints = e.hints.clone();
    d
}

/// The statements of a privatized scatter (`privatize(H)`): the
/// work-group fills its LDS copy of the output with the identity, runs
/// `main` (whose updates go to that copy), then combines each element of
/// the copy into memory with one atomic update. `id` is the LDS array.
#[allow(clippy::too_many_arguments)]
pub(super) fn privatized(
    k: &Kernel,
    stage: &Stage,
    id: u32,
    main: Vec<Stmt>,
    tid: &Index,
    threads: i64,
    vars: &mut Vec<LoopVar>,
    shared: &mut Vec<Local>,
) -> Vec<Stmt> {
    let sc = stage.scatter().expect("a scatter stage");
    let t = k.tensor(stage.output);
    let dims: Vec<i64> = t.shape.iter().map(|e| e.as_const().unwrap_or(0)).collect();
    let len: i64 = dims.iter().product();
    shared.push(Local {
        name: format!("{}_private", stage.name),
        dtype: t.dtype,
        len: len as u32,
        span: stage.span,
    });
    // Each thread takes the elements tid, tid + threads, ...
    let mut strided = |name: &str, leaf: &dyn Fn(&Index) -> Stmt| -> Stmt {
        vars.push(LoopVar {
            name: format!("{}_{name}", stage.name),
            reduce: false,
            extent: Index::c((len + threads - 1) / threads),
            kind: LoopKind::Serial,
            span: stage.span,
        });
        let v = VarId(vars.len() as u32 - 1);
        let e = Index::Var(v) * Index::c(threads) + tid.clone();
        Stmt::Loop {
            var: v,
            extent: Index::c((len + threads - 1) / threads),
            unroll: false,
            body: vec![Stmt::If {
                guards: vec![Guard {
                    value: e.clone(),
                    extent: Index::c(len),
                }],
                body: vec![leaf(&e)],
            }],
        }
    };
    let fill = strided("fill", &|e| Stmt::SharedStore {
        shared: id,
        index: e.clone(),
        value: sc.op.identity(t.dtype),
    });
    let merge = strided("merge", &|e| {
        // Row-major position of element `e` of the copy.
        let mut stride = len;
        let indices = dims
            .iter()
            .map(|d| {
                stride /= d.max(&1);
                let ix = Index::bin(
                    IOp::Mod,
                    Index::bin(IOp::Div, e.clone(), Index::c(stride)),
                    Index::c(*d),
                );
                Expr {
                    kind: ExprKind::Index(ix),
                    dtype: DType::I32,
                }
            })
            .collect();
        Stmt::Scatter {
            tensor: stage.output,
            indices,
            op: sc.op,
            value: Expr {
                kind: ExprKind::Shared {
                    shared: id,
                    index: e.clone(),
                },
                dtype: t.dtype,
            },
            shared: None,
        }
    });
    let mut out = vec![fill, Stmt::Barrier];
    out.extend(main);
    out.push(Stmt::Barrier);
    out.push(merge);
    out
}
