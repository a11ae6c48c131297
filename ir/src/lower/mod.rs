//! Lowering: scheduled stages → loop IR ([`crate::loops`]), one GPU kernel
//! per stage (a stage with `compute_inline()` is substituted into its
//! readers; one with `compute_at` is lowered inside its consumer's kernel).
//!
//! A kernel is built by the passes of [`PASSES`], in order, each in its own
//! module; in debug builds and tests the loop-IR verifier runs after each
//! and names the pass that broke an invariant. Barrier placement
//! ([`barriers`]) runs last, on whole kernels only (a compute_at part is
//! verified and cleaned as part of its consumer).

use crate::diag::Diagnostic;
use crate::index::Index;
use crate::kernel::{Expr, Kernel, StageId, TensorId, TensorKind};
use crate::loops::verify;
use crate::loops::visit::walk;
use crate::schedule::{self, Guard, LoopNest};

pub use crate::loops::{
    Access, Addressing, ArgKind, GpuKernel, KernelArg, Local, Pretty, Program, Stmt,
};

mod addressing;
pub mod barriers;
mod body;
pub(crate) mod cache;
mod compute_at;
mod descriptors;
mod hoist;
mod ldmatrix;
pub mod matrix;
mod nest;
mod region;
mod scatter;
mod slots;
mod threads;
mod vectorize;

/// A lowering pass: extends or rewrites the kernel being built.
type PassFn = fn(&mut Lowering) -> Result<(), Diagnostic>;

/// The passes that build a kernel from its stage, in order.
pub(crate) const PASSES: [(&str, PassFn); 10] = [
    // Bindings, launch geometry, loops, guards, the store or the reduction.
    ("nest", nest::run),
    // A stage with `mma`: fragment loads, matrix instructions, accumulator stores.
    ("matrix", matrix::run),
    // Tiles of producers computed here (compute_at), staged from their parts.
    ("part_caches", cache::run_parts),
    // Producers placed at one of this kernel's loops.
    ("compute_at", compute_at::run),
    // Tiles of tensors in memory staged in LDS or registers by cache_read /
    // cache_write; after compute_at, so that a tile also serves the reads
    // of the producers computed inside its loop (a row read by three stages).
    ("caches", cache::run),
    // Vectorized loops become unswitched guard-free lanes.
    ("vectorize", vectorize::run),
    // Unrolled loops of vectorized steps: one unswitch for all their steps.
    ("unswitch_unrolled", hoist::run),
    // Fragment reads of warpgroup instructions (wgmma) become descriptors.
    ("matrix_descs", descriptors::run),
    // Fragment reads from LDS become ldmatrix where the target has it.
    ("matrix_loads", ldmatrix::run),
    // Argument list and address arithmetic width.
    ("addressing", addressing::run),
];

/// What the passes share: the kernel being built and what the schedule
/// decided for its stage.
pub(crate) struct Lowering<'k> {
    pub(crate) k: &'k Kernel,
    pub(crate) sid: StageId,
    pub(crate) nest: LoopNest,
    pub(crate) g: GpuKernel,
    /// Linear thread index within the work-group (x fastest); set by `nest`.
    pub(crate) tid: Index,
    /// The target's matrix instructions, for stages with `mma`.
    pub(crate) unit: Option<&'k matrix::MatrixUnit>,
    /// What `nest` left the `matrix` pass: the frame of a stage with `mma`.
    region: Option<body::Frame>,
    templates: &'k Templates,
}

/// What templates ([`crate::templates`]) add to lowering, given from above
/// as the front end's are ([`crate::front::Templates`]), so that lowering
/// names no template.
pub(crate) struct Templates {
    /// Builds the kernel of a stage a template lowers itself, in place of
    /// the `nest` pass; `None` where no template claims the stage.
    pub build: fn(&mut Lowering) -> Option<Result<(), Diagnostic>>,
    /// The kernels a stage launches before its own where its template
    /// needs them (a split scan's parts' totals and carries).
    pub before: fn(&Kernel, StageId, Given) -> Result<Vec<GpuKernel>, Diagnostic>,
}

/// Lowering with no template: what lowers a stage that no template could
/// claim (a map over a scatter's output).
pub(crate) const NO_TEMPLATES: Templates = Templates {
    build: |_| None,
    before: |_, _, _| Ok(Vec::new()),
};

/// What lowering a stage is given from above: the target's matrix
/// instructions and the templates' hooks.
#[derive(Clone, Copy)]
pub(crate) struct Given<'a> {
    pub unit: Option<&'a matrix::MatrixUnit>,
    pub templates: &'a Templates,
}

/// Whether a stage of `k` has an `mma` step, so that lowering depends on the target.
pub fn needs_target(k: &Kernel) -> bool {
    k.stages.iter().any(|s| {
        s.nest.as_ref().is_some_and(|n| {
            n.matrix.is_some() || matches!(n.attention, Some(crate::plan::AttnPlan::Flash { .. }))
        })
    })
}

/// Whether a stage of `k` combines partial results across threads, which
/// a target may do by lane exchanges ([`matrix::MatrixUnit::lane_reduction`]):
/// lowered for such a target, its loops differ from [`lower`]'s.
pub fn reduces_across_threads(k: &Kernel) -> bool {
    use crate::schedule::{GpuAxis, LoopKind, StepKind};
    k.stages
        .iter()
        .filter(|s| s.reduce().is_some())
        .any(|s| match &s.nest {
            Some(n) => n
                .vars
                .iter()
                .any(|v| v.reduce && matches!(v.kind, LoopKind::Bound(GpuAxis::Thread(_)))),
            // Computed at another stage's loop: its nest is built there.
            None => s.schedule.iter().any(|st| {
                matches!(
                    st.kind,
                    StepKind::Bind {
                        axis: GpuAxis::Thread(_),
                        ..
                    }
                )
            }),
        })
}

/// Lowers every stage of a checked kernel, for a target with matrix
/// instructions where `given` has them (stages with `mma` are refused
/// without), with the templates' lowerings: [`crate::lower_for`] gives it
/// every template. Inlined stages produce no kernel; stages computed at
/// another stage's loop are lowered inside that stage's kernel.
pub(crate) fn lower_with(k: &Kernel, given: Given) -> Result<Program, Diagnostic> {
    compute_at::check(k)?;
    let mut kernels: Vec<GpuKernel> = Vec::new();
    for s in (0..k.stages.len()).filter(|s| !k.stages[*s].is_internal()) {
        let sid = StageId(s as u32);
        if let Some(op) = scatter::combined_op(k.stage(sid)) {
            kernels.push(scatter::init_kernel(k, sid, op)?);
        }
        kernels.extend((given.templates.before)(k, sid, given)?);
        kernels.push(lower_stage(k, sid, given)?);
        if scatter::grid_op(k.stage(sid)).is_some() {
            kernels.extend(scatter::epilogue_kernel(k, sid)?);
        }
    }
    // What compute_at computes lives only where it was placed.
    for g in &kernels {
        let mut stray = None;
        walk(&g.body, &mut |s| {
            for e in s.exprs() {
                e.visit_tensors(&mut |t| {
                    if let TensorKind::Stage(p) = k.tensor(t).kind {
                        if k.stage(p).compute_at().is_some() {
                            stray.get_or_insert(p);
                        }
                    }
                });
            }
        });
        if let Some(p) = stray {
            let ps = k.stage(p);
            let (consumer, at, span) = ps.compute_at().expect("checked");
            let readers: Vec<&str> = k
                .stages
                .iter()
                .enumerate()
                .filter(|(i, s)| {
                    let mut reads = false;
                    let sid = StageId(*i as u32);
                    let outs = ps.outputs();
                    let mut f = |t: TensorId| reads |= outs.contains(&t);
                    for e in s.exprs() {
                        inline_producers(k, sid, e).visit_tensors(&mut f);
                    }
                    reads && !s.is_inlined()
                })
                .map(|(_, s)| s.name.as_str())
                .collect();
            return Err(Diagnostic::new(
                span,
                format!(
                    "`{}` is computed only inside loop `{}` of `{}`, but is also read outside it",
                    ps.name, at.name, consumer.name
                ),
            )
            .hint(format!(
                "compute it at a loop that encloses every stage reading it ({}), or compute those stages at `{}` too",
                readers.join(", "),
                consumer.name
            )));
        }
    }
    Ok(Program { kernels })
}

/// The values of the stage's output axes `axes` (outermost first) decoded
/// from `flat`, their row-major number (the last fastest): what a kernel
/// that gives each row to one work-group binds them to.
pub(crate) fn decode_axes(
    st: &crate::kernel::Stage,
    axes: &[usize],
    flat: Index,
) -> std::collections::HashMap<crate::index::VarId, Index> {
    use crate::index::IOp;
    let mut at = std::collections::HashMap::new();
    let mut rest = flat;
    for &d in axes.iter().rev() {
        let x = st.axes[d].extent.clone();
        at.insert(
            crate::index::VarId(d as u32),
            Index::bin(IOp::Mod, rest.clone(), x.clone()),
        );
        rest = Index::bin(IOp::Div, rest, x);
    }
    at
}

/// `e`, an expression of stage `sid`, with every inlined producer
/// substituted, latest first so that producers of producers are substituted too.
pub fn inline_producers(k: &Kernel, sid: StageId, e: &Expr) -> Expr {
    let mut e = e.clone();
    for st in k.stages[..sid.0 as usize]
        .iter()
        .rev()
        .filter(|s| s.is_inlined())
    {
        e = st.inline_into(&e);
    }
    e
}

/// Whether release builds verify the loop IR too (`rocmc --verify`).
static VERIFY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Turns the loop-IR verifier on (or back off) for release builds of this
/// process: after every pass of [`PASSES`], [`verify::verify`] checks the
/// IR and names the pass that broke it. Debug builds, and so every test,
/// verify always.
pub fn set_verify(on: bool) {
    VERIFY.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Whether lowering verifies after each pass: in debug builds, after
/// [`set_verify`], or with `ROCMC_VERIFY=1` in the environment (how a
/// `build.rs` using `rocmc::Build` turns it on).
pub fn verifying() -> bool {
    static ENV: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    cfg!(debug_assertions)
        || VERIFY.load(std::sync::atomic::Ordering::Relaxed)
        || *ENV.get_or_init(|| std::env::var_os("ROCMC_VERIFY").is_some_and(|v| v == "1"))
}

/// Lowers one kernel-producing stage through [`PASSES`] and the barrier
/// pass, verifying after each where [`verifying`].
pub(crate) fn lower_stage(k: &Kernel, sid: StageId, given: Given) -> Result<GpuKernel, Diagnostic> {
    let check = |g: &GpuKernel, pass| -> Result<(), Diagnostic> {
        if verifying() {
            verify::verify(k, g, pass)
                .map_err(|e| Diagnostic::new(k.stage(sid).span, e.to_string()))?;
        }
        Ok(())
    };
    let mut g = lower_stage_in(k, sid, &[], &check, given)?;
    g.body = barriers::remove_redundant(std::mem::take(&mut g.body));
    check(&g, "barriers")?;
    Ok(g)
}

/// A bound on one output axis of a compute_at part: the axis value plus
/// the part's origin must stay below the extent.
pub(crate) struct PartBound {
    pub axis: usize,
    pub origin: Index,
    pub extent: Index,
}

/// Runs [`PASSES`] over stage `sid`, calling `check` after each.
fn lower_stage_in(
    k: &Kernel,
    sid: StageId,
    bounds: &[PartBound],
    check: &dyn Fn(&GpuKernel, &'static str) -> Result<(), Diagnostic>,
    given: Given,
) -> Result<GpuKernel, Diagnostic> {
    let unit = given.unit;
    let stage = k.stage(sid);
    // Applied once, when the kernel was checked; compute_at producers
    // (whose part extents depend on the consumer) are applied here.
    let mut nest = match &stage.nest {
        Some(n) => n.clone(),
        None => schedule::apply(k, stage)?,
    };
    if let (Some(m), Some(u)) = (&nest.matrix, unit) {
        nest.vars[m.lane.0 as usize].extent = Index::c(i64::from(matrix::lanes(&nest, u)));
    }
    for b in bounds {
        nest.guards.push(Guard {
            value: nest.axis_values[b.axis].clone() + b.origin.clone(),
            extent: b.extent.clone(),
        });
    }
    let kernels = k.stages.iter().filter(|s| !s.is_internal()).count();
    let name = if kernels == 1 {
        k.name.clone()
    } else {
        format!("{}_{}", k.name, stage.name)
    };
    let g = GpuKernel {
        name,
        stage: sid,
        args: Vec::new(),
        block: [1; 3],
        grid: [Index::c(1), Index::c(1), Index::c(1)],
        vars: nest.vars.clone(),
        body: Vec::new(),
        addressing: Addressing::Offset32,
        locals: Vec::new(),
        shared: Vec::new(),
        min_blocks: nest.min_blocks.map(|(n, _)| n),
        dynamic_shared: Vec::new(),
        tensor_maps: Vec::new(),
        requires: nest.requires.clone(),
    };
    let mut l = Lowering {
        k,
        sid,
        nest,
        g,
        tid: Index::c(0),
        unit,
        region: None,
        templates: given.templates,
    };
    for (name, pass) in PASSES {
        pass(&mut l)?;
        check(&l.g, name)?;
    }
    Ok(l.g)
}

/// Accumulators a thread may keep; more would not fit in registers.
const MAX_ACCUMULATORS: i64 = 1024;

/// LDS a work-group may use on the AMDGPU with the most (gfx1250). Each
/// target's own limit (32 KiB on gfx6, 64 KiB on most, 160 KiB on gfx950)
/// is checked when compiling for it.
const MAX_LDS: i64 = rocmc_target::hardware::MAX_LDS_PER_WORKGROUP as i64;
