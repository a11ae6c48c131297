//! Schedules: how a stage's iteration space maps onto the GPU.
//!
//! A schedule is a list of [`Step`]s applied in order to the stage's axes.
//! The state is a list of *leaf loops* (outermost first); every original
//! axis is an [`Index`] expression of leaf loop variables, and every split
//! that does not divide its extent adds a [`Guard`]. Applying the steps
//! yields a [`LoopNest`], which [`crate::lower()`] turns into loop IR.

use crate::diag::{line_col, Diagnostic, Span};
use crate::index::{Index, VarId};
use crate::kernel::{Kernel, Stage};
use crate::syntax::{AstKind, StepStmt};
use std::collections::HashMap;

pub mod default;
mod order;
pub mod steps;

pub use crate::plan::*;

/// The most threads a work-group may have on any AMDGPU target.
pub const MAX_BLOCK_THREADS: i64 = rocmc_target::MAX_THREADS_PER_BLOCK as i64;

pub(crate) fn arg_name(a: &crate::syntax::Arg, what: &str) -> Result<Name, Diagnostic> {
    match &a.value.kind {
        AstKind::Name(n) => Ok(Name {
            name: n.clone(),
            span: a.value.span,
        }),
        _ => Err(Diagnostic::new(a.value.span, format!("expected {what}"))),
    }
}

pub(crate) fn arg_int(a: &crate::syntax::Arg, what: &str) -> Result<i64, Diagnostic> {
    match &a.value.kind {
        AstKind::Int(v) if *v > 0 => Ok(*v),
        AstKind::Int(v) => Err(Diagnostic::new(
            a.value.span,
            format!("{what} must be positive, not {v}"),
        )),
        _ => Err(Diagnostic::new(
            a.value.span,
            format!("{what} must be an integer constant"),
        )),
    }
}

pub(crate) fn results(s: &StepStmt, n: usize, example: &str) -> Result<Vec<Name>, Diagnostic> {
    if s.results.len() != n {
        return Err(Diagnostic::new(
            s.span,
            format!(
                "`{}` makes {n} loop(s) and needs {n} name(s) for them",
                s.name
            ),
        )
        .hint(format!("write `{example}`")));
    }
    Ok(s.results
        .iter()
        .map(|(n, sp)| Name {
            name: n.clone(),
            span: *sp,
        })
        .collect())
}

pub(crate) fn arity(s: &StepStmt, n: usize, example: &str) -> Result<(), Diagnostic> {
    if s.args.len() != n {
        return Err(Diagnostic::new(
            s.span,
            format!("`{}` takes {n} argument(s), {} given", s.name, s.args.len()),
        )
        .hint(format!("write `{example}`")));
    }
    Ok(())
}

/// Every step's name, from the registry of primitives ([`steps::PRIMITIVES`]).
pub const STEP_NAMES: [&str; steps::PRIMITIVES.len()] = {
    let mut names = [""; steps::PRIMITIVES.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = steps::PRIMITIVES[i].name;
        i += 1;
    }
    names
};

impl Step {
    /// Checks a parsed step's shape (names, argument kinds and counts).
    pub fn from_syntax(s: &StepStmt) -> Result<Step, Diagnostic> {
        let Some(p) = steps::PRIMITIVES.iter().find(|p| p.name == s.name) else {
            return Err(Diagnostic::new(
                s.name_span,
                format!("unknown schedule step `{}`", s.name),
            )
            .suggest(&s.name, STEP_NAMES)
            .hint(format!("steps: {}", STEP_NAMES.join(", "))));
        };
        Ok(Step {
            kind: (p.parse)(s)?,
            span: s.span,
        })
    }
}

pub(crate) struct State<'a> {
    k: &'a Kernel,
    /// The kernel file, so messages can cite the line of an earlier step.
    src: &'a str,
    /// Names of sizes, parameters and tensors, which loops may not reuse.
    taken: Vec<String>,
    nest: LoopNest,
    /// The tensor the stage computes.
    stage_output: Option<crate::TensorId>,
    /// Whether the stage is a scatter.
    scatter: bool,
    /// The axis a scan stage scans along.
    scan_axis: Option<String>,
    /// The axis a top-k stage ranks along, and its k.
    topk: Option<(String, u32)>,
    /// The key axis of an attention stage.
    attention: Option<String>,
    /// Which step consumed a variable, for "already split" messages.
    consumed: HashMap<VarId, Span>,
    bind_spans: HashMap<VarId, Span>,
}

impl State<'_> {
    pub(crate) fn lookup(&self, n: &Name) -> Result<VarId, Diagnostic> {
        if let Some(v) = self
            .nest
            .order
            .iter()
            .copied()
            .find(|v| self.nest.var(*v).name == n.name)
        {
            return Ok(v);
        }
        if let Some((v, _)) = self
            .nest
            .vars
            .iter()
            .enumerate()
            .find(|(_, x)| x.name == n.name)
        {
            if let Some(sp) = self.consumed.get(&VarId(v as u32)) {
                return Err(
                    Diagnostic::new(n.span, format!("loop `{}` no longer exists", n.name))
                        .label("already consumed")
                        .hint(format!(
                            "it was replaced by the step at {}; use the loops that step made",
                            self.at(*sp)
                        )),
                );
            }
        }
        let live: Vec<&str> = self
            .nest
            .order
            .iter()
            .map(|v| self.nest.var(*v).name.as_str())
            .collect();
        Err(
            Diagnostic::new(n.span, format!("unknown loop `{}`", n.name))
                .suggest(&n.name, live.iter().copied())
                .hint(format!("the loops at this point are: {}", live.join(", "))),
        )
    }

    pub(crate) fn at(&self, sp: Span) -> String {
        format!("line {}", line_col(self.src, sp.start).0)
    }

    pub(crate) fn fresh(&self, n: &Name) -> Result<(), Diagnostic> {
        if self.nest.vars.iter().any(|v| v.name == n.name) || self.taken.contains(&n.name) {
            return Err(
                Diagnostic::new(n.span, format!("the name `{}` is already used", n.name))
                    .hint("give each new loop a fresh name"),
            );
        }
        Ok(())
    }

    pub(crate) fn new_var(&mut self, n: &Name, extent: Index, span: Span, reduce: bool) -> VarId {
        self.nest.vars.push(LoopVar {
            name: n.name.clone(),
            reduce,
            extent,
            kind: LoopKind::Serial,
            span,
        });
        VarId(self.nest.vars.len() as u32 - 1)
    }

    pub(crate) fn replace(&mut self, old: VarId, with: Index, span: Span) {
        let m = HashMap::from([(old, with)]);
        for a in &mut self.nest.axis_values {
            *a = a.subst(&m);
        }
        for g in &mut self.nest.guards {
            g.value = g.value.subst(&m);
            // Triangular extents (`j < i + 1`) follow their axes.
            if g.extent.uses_var(old) {
                g.extent = g.extent.subst(&m);
            }
        }
        for v in &mut self.nest.vars {
            if v.extent.uses_var(old) {
                v.extent = v.extent.subst(&m);
            }
        }
        self.consumed.insert(old, span);
    }

    /// A reduction loop bound to a blockIdx spreads the reduction over
    /// work-groups, each combining its part into the output with one
    /// atomic update per output element (after a fill with the
    /// operation's identity). Only a stage whose value is the bare
    /// reduction can, and only where its stores go straight to memory.
    fn check_grid_reduction(&self, stage: &Stage) -> Result<(), Diagnostic> {
        let Some(v) = self.nest.order.iter().copied().find(|v| {
            self.nest.var(*v).reduce
                && matches!(self.nest.var(*v).kind, LoopKind::Bound(GpuAxis::Block(_)))
        }) else {
            return Ok(());
        };
        let lv = self.nest.var(v);
        let span = self.bind_spans.get(&v).copied().unwrap_or(lv.span);
        let refuse = |why: String| {
            Diagnostic::new(
                span,
                format!(
                    "reduction loop `{}` of stage `{}` cannot be bound to a blockIdx: {why}",
                    lv.name, stage.name
                ),
            )
            .hint("bind it to a threadIdx for a cooperative reduction within one work-group, or keep it serial")
        };
        stage.grid_combine().map_err(refuse)?;
        if self.nest.matrix.is_some() {
            return Err(refuse(
                "its products run on matrix instructions (`mma`)".into(),
            ));
        }
        if let Some(c) = self.nest.caches.iter().find(|c| c.kind.write()) {
            return Err(refuse(format!(
                "`cache_write` of `{}` would store each work-group's part",
                self.k.tensor(c.tensor).name
            )));
        }
        if stage.compute_at().is_some() {
            return Err(refuse(
                "the stage is computed inside another stage's kernel (`compute_at`)".into(),
            ));
        }
        Ok(())
    }

    /// A loop whose extent depends on other loops (a triangular reduction,
    /// `reduce = { j = "i + 1" }`) must sit inside them, and cannot be a
    /// work-group index (the grid is fixed at launch).
    fn check_dependent_extents(&self, stage: &Stage) -> Result<(), Diagnostic> {
        for (pos, v) in self.nest.order.iter().enumerate() {
            let lv = self.nest.var(*v);
            let Some(u) = (0..self.nest.vars.len() as u32)
                .map(VarId)
                .find(|u| lv.extent.uses_var(*u))
            else {
                continue;
            };
            // Bound loops are in scope everywhere (their bindings come first).
            let outer = self.nest.order[..pos].contains(&u)
                || matches!(self.nest.var(u).kind, LoopKind::Bound(_));
            let name = &self.nest.var(u).name;
            if matches!(lv.kind, LoopKind::Bound(_)) || !outer {
                return Err(Diagnostic::new(
                    lv.span,
                    format!(
                        "loop `{}` of stage `{}` runs a number of times that depends on loop `{name}`, so it must be a loop inside `{name}`",
                        lv.name, stage.name
                    ),
                )
                .hint(format!("keep `{name}` outside it (reorder), and bind neither to a GPU index but `{name}`")));
            }
        }
        // A loop whose trip count depends on a thread index runs a
        // different number of times in each thread: no work-group copy
        // (with barriers every thread must reach) at it or inside it.
        let threads: Vec<VarId> = (0..self.nest.vars.len() as u32)
            .map(VarId)
            .filter(|v| matches!(self.nest.var(*v).kind, LoopKind::Bound(GpuAxis::Thread(_))))
            .collect();
        let divergent = self.nest.order.iter().position(|v| {
            threads
                .iter()
                .any(|t| self.nest.var(*v).extent.uses_var(*t))
        });
        if let Some(first) = divergent {
            let lv = self.nest.var(self.nest.order[first]);
            let shared = self.nest.caches.iter().find(|c| {
                matches!(c.kind, CacheKind::ReadShared | CacheKind::WriteShared)
                    && self.nest.order[first..].contains(&c.at)
            });
            if let Some(c) = shared {
                return Err(Diagnostic::new(
                    c.span,
                    format!(
                        "`{}` copies a tile with the whole work-group at loop `{}`, but loop `{}` (at or around it) runs a different number of times in each thread",
                        c.name,
                        self.nest.var(c.at).name,
                        lv.name
                    ),
                )
                .hint("stage it in registers (`local`), or bind the loop the trip count depends on to a blockIdx"));
            }
        }
        Ok(())
    }

    pub(crate) fn not_bound(&self, v: VarId, n: &Name) -> Result<(), Diagnostic> {
        if let LoopKind::Bound(a) = self.nest.var(v).kind {
            return Err(Diagnostic::new(
                n.span,
                format!(
                    "loop `{}` is bound to {a} and cannot be transformed further",
                    n.name
                ),
            )
            .hint("split, fuse or reorder a loop before binding it"));
        }
        Ok(())
    }

    /// Applies one step: the one place that lists every primitive's `apply`
    /// (a new `StepKind` variant does not compile until it is added here).
    fn apply(&mut self, step: &Step) -> Result<(), Diagnostic> {
        let span = step.span;
        match &step.kind {
            StepKind::Split {
                target,
                by,
                outer,
                inner,
            } => steps::split::apply(self, target, *by, outer, inner, span),
            StepKind::Tile {
                x,
                y,
                fx,
                fy,
                results,
            } => steps::tile::apply(self, x, y, *fx, *fy, results, span),
            StepKind::Fuse {
                outer,
                inner,
                fused,
            } => steps::fuse::apply(self, outer, inner, fused, span),
            StepKind::Reorder(names) => steps::reorder::apply(self, names),
            StepKind::ComputeInline => unreachable!("handled before the steps are applied"),
            // Placement among stages, handled by lowering; the loops stay as they are.
            StepKind::ComputeAt { .. } => Ok(()),
            StepKind::Vectorize(n) => steps::vectorize::apply(self, n, span),
            StepKind::Cache {
                tensor,
                at,
                opts,
                kind,
                result,
            } => steps::cache::apply(self, tensor, at, *opts, *kind, result, span),
            StepKind::Bind { target, axis } => steps::bind::apply(self, target, *axis, span),
            StepKind::Unroll(n) => steps::unroll::apply(self, n, span),
            StepKind::Occupancy(n) => steps::occupancy::apply(self, *n, span),
            StepKind::Privatize(t) => steps::privatize::apply(self, t, span),
            StepKind::Scan {
                axis,
                threads,
                per,
                chunks,
            } => steps::scan::apply(self, axis, *threads, *per, *chunks, span),
            StepKind::TopK { axis, threads, per } => {
                steps::topk::apply(self, axis, *threads, *per, span)
            }
            StepKind::Attention { axis, plan } => steps::attention::apply(self, axis, *plan),
            StepKind::Mma {
                rows,
                cols,
                k,
                instr,
            } => steps::mma::apply(self, rows, cols, k, instr.as_ref(), span),
        }
    }

    pub(crate) fn threads(&self) -> i64 {
        self.nest
            .order
            .iter()
            .filter(|v| matches!(self.nest.var(**v).kind, LoopKind::Bound(GpuAxis::Thread(_))))
            .map(|v| self.nest.var(*v).extent.as_const().unwrap_or(1))
            .product()
    }

    pub(crate) fn size_names(&self) -> Vec<String> {
        self.k.size_names()
    }

    pub(crate) fn bind_span(&self, v: VarId) -> Span {
        self.bind_spans.get(&v).copied().unwrap_or_default()
    }
}

impl<'a> State<'a> {
    /// The stage's axes as serial loops in their written order, before
    /// any step.
    fn new(k: &'a Kernel, stage: &Stage, src: &'a str) -> Self {
        let size_max: Vec<u64> = k.sizes.iter().map(|s| s.max).collect();
        let mut requires = Vec::new();
        let vars: Vec<LoopVar> = stage
            .all_axes()
            .enumerate()
            .map(|(i, a)| LoopVar {
                name: a.name.clone(),
                reduce: i >= stage.axes.len(),
                // An extent such as `N * M` of sizes without `max`.
                extent: Requirement::counted(
                    a.extent.clone(),
                    &size_max,
                    &mut requires,
                    || format!("axis `{}` of stage `{}`", a.name, stage.name),
                    a.span,
                ),
                kind: LoopKind::Serial,
                span: a.span,
            })
            .collect();
        let n = vars.len();
        let mut names: Vec<String> = Vec::new();
        names.extend(k.sizes.iter().map(|s| s.name.clone()));
        names.extend(k.params.iter().map(|s| s.name.clone()));
        names.extend(k.tensors.iter().map(|s| s.name.clone()));
        State {
            k,
            src,
            taken: names,
            nest: LoopNest {
                requires,
                caches: Vec::new(),
                vectorized: Vec::new(),
                vars,
                order: (0..n as u32).map(VarId).collect(),
                axis_values: (0..n as u32).map(|v| Index::Var(VarId(v))).collect(),
                guards: Vec::new(),
                matrix: None,
                min_blocks: None,
                privatized: None,
                scan: None,
                topk: None,
                attention: None,
            },
            consumed: HashMap::new(),
            bind_spans: HashMap::new(),
            stage_output: Some(stage.output),
            scatter: stage.scatter().is_some(),
            scan_axis: stage
                .reduce()
                .and_then(|r| r.scan())
                .map(|s| stage.axes[s.axis].name.clone()),
            topk: stage
                .reduce()
                .and_then(|r| r.topk().map(|t| (r.axes[0].name.clone(), t.k))),
            attention: stage.attention().map(|_| {
                stage.reduce().expect("an attention is a reduction").axes[0]
                    .name
                    .clone()
            }),
        }
    }
}

/// Applies a stage's schedule. Errors name the step that cannot apply.
pub fn apply(k: &Kernel, stage: &Stage) -> Result<LoopNest, Diagnostic> {
    apply_with_source(k, stage, "")
}

/// Like [`apply`], with the kernel's source text so messages can cite lines.
pub fn apply_with_source<'a>(
    k: &'a Kernel,
    stage: &Stage,
    src: &'a str,
) -> Result<LoopNest, Diagnostic> {
    let mut st = State::new(k, stage, src);
    if stage.is_inlined() {
        let step = stage
            .schedule
            .iter()
            .find(|s| s.kind == StepKind::ComputeInline)
            .expect("inlined");
        if stage.schedule.len() > 1 {
            return Err(Diagnostic::new(
                step.span,
                "compute_inline() must be the stage's only schedule step",
            )
            .hint("an inlined stage has no loops of its own: its consumers' schedules apply"));
        }
        if stage.reduce().is_some() {
            return Err(Diagnostic::new(
                step.span,
                format!(
                    "stage `{}` is a reduction and cannot be inlined",
                    stage.name
                ),
            )
            .hint("a reduction must be computed once into its own tensor"));
        }
        return Ok(st.nest);
    }
    if let Some((c, _)) = &st.topk {
        // A top-k has no loops to shape: its work-group is built whole.
        if let Some(other) = stage
            .schedule
            .iter()
            .find(|s| !matches!(s.kind, StepKind::TopK { .. } | StepKind::Occupancy(_)))
        {
            return Err(Diagnostic::new(
                other.span,
                "a top-k stage takes no step but `topk` (and `occupancy`)",
            )
            .hint(format!(
                "schedule it with `topk({c}, threads=256, per=4)` alone, or give no schedule (the default)"
            )));
        }
    }
    if let Some(j) = &st.attention {
        // An attention has no loops to shape: its kernel is built whole.
        if let Some(other) = stage
            .schedule
            .iter()
            .find(|s| !matches!(s.kind, StepKind::Attention { .. } | StepKind::Occupancy(_)))
        {
            return Err(Diagnostic::new(
                other.span,
                "an attention stage takes no step but `rowwise` or `flash` (and `occupancy`)",
            )
            .hint(format!(
                "schedule it with `flash({j}, rows=64, keys=64, stages=2)` or `rowwise({j}, threads=64)` alone, or give no schedule (the default)"
            )));
        }
    }
    for step in &stage.schedule {
        st.apply(step)?;
    }
    if let Some(j) = &st.attention {
        if st.nest.attention.is_none() {
            return Err(Diagnostic::new(
                stage.span,
                format!(
                    "attention stage `{}` needs a `rowwise` or `flash` step",
                    stage.name
                ),
            )
            .hint(format!(
                "schedule it with `flash({j})` or `rowwise({j})`, or give no schedule (the default)"
            )));
        }
        return Ok(st.nest);
    }
    if st.topk.is_some() {
        // A top-k has no other lowering than its work-group's.
        if st.nest.topk.is_none() {
            return Err(Diagnostic::new(
                stage.span,
                format!("top-k stage `{}` needs the `topk` step", stage.name),
            )
            .hint(format!(
                "schedule it with `topk({}, threads=256, per=4)`, or give no schedule (the default)",
                st.topk.as_ref().map_or("c", |t| t.0.as_str())
            )));
        }
        return Ok(st.nest);
    }
    if let Some(plan) = st.nest.scan {
        // The work-group scan is built whole; it takes no other loop steps.
        if let Some(other) = stage
            .schedule
            .iter()
            .find(|s| !matches!(s.kind, StepKind::Scan { .. } | StepKind::Occupancy(_)))
        {
            return Err(Diagnostic::new(
                other.span,
                "a stage scheduled with `scan` takes no other step (but `occupancy`)",
            )
            .hint(format!(
                "keep `scan(...)` alone (line {}), or drop it to schedule the triangular reduction it stands for",
                line_col(src, plan.span.start).0
            )));
        }
        if plan.chunks.is_some() {
            if let Some(t) = crate::schedule::steps::scan::split_refused(stage) {
                return Err(Diagnostic::new(
                    plan.span,
                    format!(
                        "`chunks` splits a row of `{}` over work-groups whose totals wait in its output, which is `{}` where the scan is `{t}`",
                        stage.name, stage.value.dtype
                    ),
                )
                .hint(format!("scan into a `{t}` stage and convert it in a later one, or drop `chunks` (a work-group per row)")));
            }
        }
        return Ok(st.nest);
    }
    st.check_dependent_extents(stage)?;
    st.check_order(stage)?;
    st.check_grid_reduction(stage)?;
    Ok(st.nest)
}
