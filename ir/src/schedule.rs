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
use std::fmt;

/// The most threads a work-group may have on any AMDGPU target.
pub const MAX_BLOCK_THREADS: i64 = rocmc_target::MAX_THREADS_PER_BLOCK as i64;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dim {
    X,
    Y,
    Z,
}

impl Dim {
    pub fn index(self) -> usize {
        self as usize
    }
}

/// A hardware index a loop can be bound to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GpuAxis {
    Block(Dim),
    Thread(Dim),
}

impl GpuAxis {
    pub const ALL: [&'static str; 6] = [
        "blockIdx.x",
        "blockIdx.y",
        "blockIdx.z",
        "threadIdx.x",
        "threadIdx.y",
        "threadIdx.z",
    ];

    pub fn parse(s: &str) -> Option<GpuAxis> {
        let i = GpuAxis::ALL.iter().position(|a| *a == s)?;
        let d = [Dim::X, Dim::Y, Dim::Z][i % 3];
        Some(if i < 3 {
            GpuAxis::Block(d)
        } else {
            GpuAxis::Thread(d)
        })
    }
}

impl fmt::Display for GpuAxis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kind, d) = match self {
            GpuAxis::Block(d) => ("blockIdx", d),
            GpuAxis::Thread(d) => ("threadIdx", d),
        };
        write!(f, "{kind}.{}", ["x", "y", "z"][d.index()])
    }
}

/// A name in a step, with where it was written.
#[derive(Clone, Debug, PartialEq)]
pub struct Name {
    pub name: String,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum StepKind {
    /// `outer, inner = split(loop, factor)`; or `nparts=` for the outer extent.
    Split {
        target: Name,
        by: SplitBy,
        outer: Name,
        inner: Name,
    },
    /// `fused = fuse(outer, inner)`; the two loops must be adjacent.
    Fuse {
        outer: Name,
        inner: Name,
        fused: Name,
    },
    /// `reorder(a, b, ...)`: these loops take the positions they occupy, in this order.
    Reorder(Vec<Name>),
    /// `xo, yo, xi, yi = tile(x, y, fx, fy)`
    Tile {
        x: Name,
        y: Name,
        fx: i64,
        fy: i64,
        results: [Name; 4],
    },
    Bind {
        target: Name,
        axis: GpuAxis,
    },
    Unroll(Name),
    /// `vectorize(v)`: the innermost loop `v` (2, 4, 8 or 16 iterations)
    /// becomes vector loads and stores where every lane is in range.
    Vectorize(Name),
    /// `compute_inline()`: no kernel for this stage; its expression is
    /// substituted into every stage that reads it.
    ComputeInline,
    /// `compute_at(Y, r)`: no kernel for this stage; it is computed inside
    /// stage `Y`'s kernel at each iteration of `Y`'s loop `r`, only over
    /// the part `Y` reads there, into LDS (when this stage binds threads:
    /// the work-group computes it together) or registers (when it binds
    /// none: each thread computes its own part).
    ComputeAt {
        consumer: Name,
        at: Name,
    },
    /// `AS = cache_read(A, shared, at, pad=1)`: at each iteration of loop
    /// `at` (or once per work-group if `at` is bound to a blockIdx), the
    /// work-group copies the part of `A` that the loops inside read into
    /// LDS, and those reads come from LDS. `pad` widens the last dimension
    /// of the tile to avoid bank conflicts.
    Cache {
        tensor: Name,
        at: Name,
        pad: i64,
        kind: CacheKind,
        result: Name,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub kind: StepKind,
    pub span: Span,
}

fn arg_name(a: &crate::syntax::Arg, what: &str) -> Result<Name, Diagnostic> {
    match &a.value.kind {
        AstKind::Name(n) => Ok(Name {
            name: n.clone(),
            span: a.value.span,
        }),
        _ => Err(Diagnostic::new(a.value.span, format!("expected {what}"))),
    }
}

fn arg_int(a: &crate::syntax::Arg, what: &str) -> Result<i64, Diagnostic> {
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

fn results(s: &StepStmt, n: usize, example: &str) -> Result<Vec<Name>, Diagnostic> {
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

fn arity(s: &StepStmt, n: usize, example: &str) -> Result<(), Diagnostic> {
    if s.args.len() != n {
        return Err(Diagnostic::new(
            s.span,
            format!("`{}` takes {n} argument(s), {} given", s.name, s.args.len()),
        )
        .hint(format!("write `{example}`")));
    }
    Ok(())
}

pub const STEP_NAMES: [&str; 11] = [
    "split",
    "fuse",
    "reorder",
    "tile",
    "bind",
    "unroll",
    "vectorize",
    "compute_inline",
    "compute_at",
    "cache_read",
    "cache_write",
];

impl Step {
    /// Checks a parsed step's shape (names, argument kinds and counts).
    pub fn from_syntax(s: &StepStmt) -> Result<Step, Diagnostic> {
        let kind = match s.name.as_str() {
            "split" => {
                const EX: &str = "outer, inner = split(i, 64)";
                let r = results(s, 2, EX)?;
                arity(s, 2, EX)?;
                let target = arg_name(&s.args[0], "the loop to split")?;
                let by = match s.args[1].key.as_ref().map(|k| k.0.as_str()) {
                    None | Some("factor") => {
                        SplitBy::Factor(arg_int(&s.args[1], "the split factor")?)
                    }
                    Some("nparts") => SplitBy::Parts(arg_int(&s.args[1], "nparts")?),
                    Some(other) => {
                        return Err(Diagnostic::new(
                            s.args[1].key.as_ref().map_or(s.span, |k| k.1),
                            format!("unknown argument `{other}`"),
                        )
                        .hint("use `factor=` or `nparts=`"))
                    }
                };
                let [outer, inner]: [Name; 2] = r
                    .try_into()
                    .map_err(|_| Diagnostic::new(s.span, "internal: result count"))?;
                StepKind::Split {
                    target,
                    by,
                    outer,
                    inner,
                }
            }
            "fuse" => {
                const EX: &str = "f = fuse(i, j)";
                let mut r = results(s, 1, EX)?;
                arity(s, 2, EX)?;
                StepKind::Fuse {
                    outer: arg_name(&s.args[0], "a loop")?,
                    inner: arg_name(&s.args[1], "a loop")?,
                    fused: r.remove(0),
                }
            }
            "reorder" => {
                results(s, 0, "reorder(j, i)")?;
                if s.args.len() < 2 {
                    return Err(Diagnostic::new(
                        s.span,
                        "`reorder` needs at least two loops",
                    ));
                }
                StepKind::Reorder(
                    s.args
                        .iter()
                        .map(|a| arg_name(a, "a loop"))
                        .collect::<Result<_, _>>()?,
                )
            }
            "tile" => {
                const EX: &str = "yo, xo, yi, xi = tile(y, x, 16, 16)";
                let r = results(s, 4, EX)?;
                arity(s, 4, EX)?;
                StepKind::Tile {
                    x: arg_name(&s.args[0], "a loop")?,
                    y: arg_name(&s.args[1], "a loop")?,
                    fx: arg_int(&s.args[2], "the tile factor")?,
                    fy: arg_int(&s.args[3], "the tile factor")?,
                    results: r
                        .try_into()
                        .map_err(|_| Diagnostic::new(s.span, "internal: result count"))?,
                }
            }
            "bind" => {
                const EX: &str = "bind(io, blockIdx.x)";
                results(s, 0, EX)?;
                arity(s, 2, EX)?;
                let target = arg_name(&s.args[0], "the loop to bind")?;
                let a = arg_name(&s.args[1], "a GPU index such as `threadIdx.x`")?;
                let axis = GpuAxis::parse(&a.name).ok_or_else(|| {
                    Diagnostic::new(a.span, format!("unknown GPU index `{}`", a.name))
                        .suggest(&a.name, GpuAxis::ALL)
                        .hint("GPU indices are blockIdx.{x,y,z} and threadIdx.{x,y,z}")
                })?;
                StepKind::Bind { target, axis }
            }
            "cache_read" | "cache_write" => {
                let write = s.name == "cache_write";
                const EX: &str = "AS = cache_read(A, shared, ko)";
                let mut r = results(s, 1, EX)?;
                if s.args.len() < 3 || s.args.len() > 4 {
                    return Err(Diagnostic::new(
                        s.span,
                        format!(
                            "`cache_read` takes 3 or 4 arguments, {} given",
                            s.args.len()
                        ),
                    )
                    .hint(format!("write `{EX}` or add `pad=1`")));
                }
                let tensor = arg_name(&s.args[0], "the tensor to cache")?;
                let scope = arg_name(&s.args[1], "a memory scope such as `shared`")?;
                let local = match scope.name.as_str() {
                    "shared" => false,
                    "local" => true,
                    _ => {
                        return Err(Diagnostic::new(scope.span, format!("unknown scope `{}`", scope.name))
                            .hint("cache_read stages tiles in `shared` memory (LDS, per work-group) or `local` (registers, per thread)"))
                    }
                };
                let at = arg_name(&s.args[2], "the loop at which to stage the tile")?;
                let pad = match s.args.get(3) {
                    None => 0,
                    Some(a) if a.key.as_ref().is_some_and(|k| k.0 == "pad") => {
                        match &a.value.kind {
                            AstKind::Int(v) if (0..=64).contains(v) => *v,
                            _ => {
                                return Err(Diagnostic::new(
                                    a.value.span,
                                    "pad must be an integer from 0 to 64",
                                ))
                            }
                        }
                    }
                    Some(a) => return Err(Diagnostic::new(a.value.span, "expected `pad=N`")),
                };
                StepKind::Cache {
                    tensor,
                    at,
                    pad,
                    kind: CacheKind::of(write, local),
                    result: r.remove(0),
                }
            }
            "vectorize" => {
                results(s, 0, "vectorize(v)")?;
                arity(s, 1, "vectorize(v)")?;
                StepKind::Vectorize(arg_name(&s.args[0], "the loop to vectorize")?)
            }
            "compute_at" => {
                const EX: &str = "compute_at(Y, r)";
                results(s, 0, EX)?;
                arity(s, 2, EX)?;
                StepKind::ComputeAt {
                    consumer: arg_name(&s.args[0], "the stage that reads this one")?,
                    at: arg_name(&s.args[1], "a loop of that stage")?,
                }
            }
            "compute_inline" => {
                results(s, 0, "compute_inline()")?;
                arity(s, 0, "compute_inline()")?;
                StepKind::ComputeInline
            }
            "unroll" => {
                results(s, 0, "unroll(k)")?;
                arity(s, 1, "unroll(k)")?;
                StepKind::Unroll(arg_name(&s.args[0], "the loop to unroll")?)
            }
            other => {
                return Err(Diagnostic::new(
                    s.name_span,
                    format!("unknown schedule step `{other}`"),
                )
                .suggest(other, STEP_NAMES)
                .hint(format!("steps: {}", STEP_NAMES.join(", "))))
            }
        };
        Ok(Step { kind, span: s.span })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoopKind {
    Serial,
    Unrolled,
    /// Unrolled, with the guards hoisted so contiguous accesses become vectors.
    Vectorized,
    Bound(GpuAxis),
}

#[derive(Clone, Debug, PartialEq)]
pub struct LoopVar {
    pub name: String,
    /// Whether the loop iterates a reduction axis (or a split of one).
    pub reduce: bool,
    /// Trip count; an expression of sizes and constants.
    pub extent: Index,
    pub kind: LoopKind,
    /// The step that made it (the axis declaration for original axes).
    pub span: Span,
}

/// `value < extent` must hold for an iteration to run.
#[derive(Clone, Debug, PartialEq)]
pub struct Guard {
    pub value: Index,
    pub extent: Index,
}

/// Which of the four staging steps a cache is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheKind {
    /// `cache_read(A, shared, at)`: the work-group copies A's tile into LDS.
    ReadShared,
    /// `cache_read(A, local, at)`: each thread copies its part into registers.
    ReadLocal,
    /// `cache_write(C, shared, at)`: the stage's stores go to an LDS tile,
    /// which the work-group then copies to memory.
    WriteShared,
    /// `cache_write(C, local, at)`: the stores go to a per-thread register
    /// array, which the thread then copies to memory.
    WriteLocal,
}

impl CacheKind {
    fn of(write: bool, local: bool) -> CacheKind {
        match (write, local) {
            (false, false) => CacheKind::ReadShared,
            (false, true) => CacheKind::ReadLocal,
            (true, false) => CacheKind::WriteShared,
            (true, true) => CacheKind::WriteLocal,
        }
    }
    /// In registers of each thread rather than LDS.
    pub fn local(self) -> bool {
        matches!(self, CacheKind::ReadLocal | CacheKind::WriteLocal)
    }
    /// Stages the stage's own stores rather than reads.
    pub fn write(self) -> bool {
        matches!(self, CacheKind::WriteShared | CacheKind::WriteLocal)
    }
}

/// A tensor staged through LDS or registers (see [`StepKind::Cache`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Cache {
    pub tensor: crate::TensorId,
    pub at: VarId,
    pub pad: i64,
    pub kind: CacheKind,
    pub name: String,
    pub span: Span,
}

/// How a split divides its loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitBy {
    /// `split(i, 64)` or `factor=64`: the inner loop has this many iterations.
    Factor(i64),
    /// `nparts=4`: the outer loop has this many iterations.
    Parts(i64),
}

/// A scheduled stage: loops, how axes map onto them, and the guards.
#[derive(Clone, Debug, PartialEq)]
pub struct LoopNest {
    /// Tensors staged through LDS, in schedule order.
    pub caches: Vec<Cache>,
    /// Vectorized loops and the steps that asked for them.
    pub vectorized: Vec<(VarId, Span)>,
    /// Every variable ever created; the stage's axes come first.
    pub vars: Vec<LoopVar>,
    /// Leaf loops, outermost first.
    pub order: Vec<VarId>,
    /// Value of each original axis in leaf variables.
    pub axis_values: Vec<Index>,
    pub guards: Vec<Guard>,
}

impl LoopNest {
    pub fn var(&self, v: VarId) -> &LoopVar {
        &self.vars[v.0 as usize]
    }
    pub fn var_names(&self) -> Vec<String> {
        self.vars.iter().map(|v| v.name.clone()).collect()
    }
    /// The loop bound to a GPU index, if any.
    pub fn bound(&self, axis: GpuAxis) -> Option<VarId> {
        self.order
            .iter()
            .copied()
            .find(|v| self.var(*v).kind == LoopKind::Bound(axis))
    }
}

struct State<'a> {
    k: &'a Kernel,
    /// The kernel file, so messages can cite the line of an earlier step.
    src: &'a str,
    /// Names of sizes, parameters and tensors, which loops may not reuse.
    taken: Vec<String>,
    nest: LoopNest,
    /// The tensor the stage computes.
    stage_output: Option<crate::TensorId>,
    /// Which step consumed a variable, for "already split" messages.
    consumed: HashMap<VarId, Span>,
    bind_spans: HashMap<VarId, Span>,
}

impl State<'_> {
    fn lookup(&self, n: &Name) -> Result<VarId, Diagnostic> {
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

    fn at(&self, sp: Span) -> String {
        format!("line {}", line_col(self.src, sp.start).0)
    }

    fn fresh(&self, n: &Name) -> Result<(), Diagnostic> {
        if self.nest.vars.iter().any(|v| v.name == n.name) || self.taken.contains(&n.name) {
            return Err(
                Diagnostic::new(n.span, format!("the name `{}` is already used", n.name))
                    .hint("give each new loop a fresh name"),
            );
        }
        Ok(())
    }

    fn new_var(&mut self, n: &Name, extent: Index, span: Span, reduce: bool) -> VarId {
        self.nest.vars.push(LoopVar {
            name: n.name.clone(),
            reduce,
            extent,
            kind: LoopKind::Serial,
            span,
        });
        VarId(self.nest.vars.len() as u32 - 1)
    }

    fn replace(&mut self, old: VarId, with: Index, span: Span) {
        let m = HashMap::from([(old, with)]);
        for a in &mut self.nest.axis_values {
            *a = a.subst(&m);
        }
        for g in &mut self.nest.guards {
            g.value = g.value.subst(&m);
        }
        self.consumed.insert(old, span);
    }

    fn not_bound(&self, v: VarId, n: &Name) -> Result<(), Diagnostic> {
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

    fn split(
        &mut self,
        target: &Name,
        by: SplitBy,
        outer: &Name,
        inner: &Name,
        span: Span,
    ) -> Result<(), Diagnostic> {
        let v = self.lookup(target)?;
        self.not_bound(v, target)?;
        self.fresh(outer)?;
        self.fresh(inner)?;
        if outer.name == inner.name {
            return Err(Diagnostic::new(
                inner.span,
                "the two loops of a split need different names",
            ));
        }
        let ext = self.nest.var(v).extent.clone();
        let (oe, ie) = match by {
            SplitBy::Factor(f) => (ext.clone().ceil_div(Index::c(f)), Index::c(f)),
            SplitBy::Parts(p) => (Index::c(p), ext.clone().ceil_div(Index::c(p))),
        };
        let exact = match (&ext, &oe, &ie) {
            (Index::Const(e), Index::Const(o), Index::Const(i)) => o * i == *e,
            _ => false,
        };
        let reduce = self.nest.var(v).reduce;
        let o = self.new_var(outer, oe, span, reduce);
        let i = self.new_var(inner, ie.clone(), span, reduce);
        let pos = self
            .nest
            .order
            .iter()
            .position(|x| *x == v)
            .expect("live loop is in order");
        self.nest.order.splice(pos..=pos, [o, i]);
        let value = Index::Var(o) * ie + Index::Var(i);
        self.replace(v, value.clone(), span);
        if !exact {
            self.nest.guards.push(Guard { value, extent: ext });
        }
        Ok(())
    }

    fn apply(&mut self, step: &Step) -> Result<(), Diagnostic> {
        match &step.kind {
            StepKind::Split {
                target,
                by,
                outer,
                inner,
            } => self.split(target, *by, outer, inner, step.span),
            StepKind::Tile {
                x,
                y,
                fx,
                fy,
                results,
            } => {
                let [xo, yo, xi, yi] = results;
                self.split(x, SplitBy::Factor(*fx), xo, xi, step.span)?;
                self.split(y, SplitBy::Factor(*fy), yo, yi, step.span)?;
                self.reorder(&[xo.clone(), yo.clone(), xi.clone(), yi.clone()])
            }
            StepKind::Fuse {
                outer,
                inner,
                fused,
            } => {
                let a = self.lookup(outer)?;
                let b = self.lookup(inner)?;
                self.not_bound(a, outer)?;
                self.not_bound(b, inner)?;
                self.fresh(fused)?;
                if self.nest.var(a).reduce != self.nest.var(b).reduce {
                    return Err(Diagnostic::new(step.span, format!("`{}` and `{}` cannot be fused: one is a reduction loop, the other is not", outer.name, inner.name)));
                }
                let pa = self.nest.order.iter().position(|x| *x == a).expect("live");
                if self.nest.order.get(pa + 1) != Some(&b) {
                    return Err(Diagnostic::new(
                        step.span,
                        format!("`{}` is not directly inside `{}`", inner.name, outer.name),
                    )
                    .hint("only adjacent loops can be fused; `reorder` them first"));
                }
                let eb = self.nest.var(b).extent.clone();
                let ext = self.nest.var(a).extent.clone() * eb.clone();
                let reduce = self.nest.var(a).reduce;
                let f = self.new_var(fused, ext, step.span, reduce);
                self.nest.order.splice(pa..=pa + 1, [f]);
                self.replace(a, Index::Var(f) / eb.clone(), step.span);
                self.replace(b, Index::Var(f) % eb, step.span);
                Ok(())
            }
            StepKind::Reorder(names) => self.reorder(names),
            StepKind::ComputeInline => unreachable!("handled before the steps are applied"),
            // Placement among stages, handled by lowering; the loops stay as they are.
            StepKind::ComputeAt { .. } => Ok(()),
            StepKind::Vectorize(n) => {
                let v = self.lookup(n)?;
                self.not_bound(v, n)?;
                match self.nest.var(v).extent.as_const() {
                    Some(2 | 4 | 8 | 16) => {}
                    other => {
                        return Err(Diagnostic::new(
                            step.span,
                            format!(
                                "loop `{}` has {} iterations; vectorize needs 2, 4, 8 or 16",
                                n.name,
                                other.map_or("a symbolic number of".to_string(), |e| e.to_string())
                            ),
                        )
                        .hint("split the loop by the vector width and vectorize the inner loop"));
                    }
                }
                self.nest.vars[v.0 as usize].kind = LoopKind::Vectorized;
                self.nest.vectorized.push((v, step.span));
                Ok(())
            }
            StepKind::Cache {
                tensor,
                at,
                pad,
                kind,
                result,
            } => {
                let Some(t) = self.k.tensors.iter().position(|x| x.name == tensor.name) else {
                    return Err(Diagnostic::new(
                        tensor.span,
                        format!("unknown tensor `{}`", tensor.name),
                    )
                    .suggest(&tensor.name, self.k.tensors.iter().map(|t| t.name.as_str())));
                };
                if kind.write() && self.stage_output != Some(crate::TensorId(t as u32)) {
                    return Err(Diagnostic::new(
                        tensor.span,
                        format!(
                            "cache_write stages the stage's own output, not `{}`",
                            tensor.name
                        ),
                    ));
                }
                let v = self.lookup(at)?;
                self.fresh(result)?;
                self.nest.caches.push(Cache {
                    tensor: crate::TensorId(t as u32),
                    at: v,
                    pad: *pad,
                    kind: *kind,
                    name: result.name.clone(),
                    span: step.span,
                });
                Ok(())
            }
            StepKind::Bind { target, axis } => {
                let v = self.lookup(target)?;
                if self.nest.var(v).reduce {
                    match axis {
                        GpuAxis::Block(_) => {
                            return Err(Diagnostic::new(step.span, format!("reduction loop `{}` cannot be bound to {axis}", target.name))
                                .hint("work-groups cannot combine their results within one kernel; bind it to a threadIdx for a cooperative reduction"));
                        }
                        GpuAxis::Thread(_) => {
                            if let Some(other) = self.nest.order.iter().find(|o| {
                                self.nest.var(**o).reduce
                                    && matches!(self.nest.var(**o).kind, LoopKind::Bound(_))
                            }) {
                                return Err(Diagnostic::new(step.span, format!("reduction loop `{}` is already bound to threads; one reduction loop per stage can be", self.nest.var(*other).name)));
                            }
                        }
                    }
                }
                if let LoopKind::Bound(prev) = self.nest.var(v).kind {
                    return Err(Diagnostic::new(
                        target.span,
                        format!("loop `{}` is already bound to {prev}", target.name),
                    ));
                }
                if let Some(other) = self.nest.bound(*axis) {
                    let o = self.nest.var(other);
                    return Err(Diagnostic::new(
                        step.span,
                        format!("{axis} is already bound to loop `{}`", o.name),
                    )
                    .label("second binding")
                    .hint(format!(
                        "each GPU index can be bound once; `{}` was bound at {}",
                        o.name,
                        self.at(self.bind_span(other))
                    )));
                }
                if let GpuAxis::Thread(_) = axis {
                    let ext = &self.nest.var(v).extent;
                    let Some(e) = ext.as_const() else {
                        return Err(Diagnostic::new(step.span, format!("loop `{}` has the symbolic extent {} and cannot be bound to {axis}", target.name, ext.display(&self.size_names(), &self.nest.var_names())))
                            .hint("the block size must be a constant: split the loop by a constant factor and bind the inner loop"));
                    };
                    let threads: i64 = self.threads() * e;
                    if threads > MAX_BLOCK_THREADS {
                        return Err(Diagnostic::new(step.span, format!("this binding makes {threads} threads per block; the limit is {MAX_BLOCK_THREADS}"))
                            .hint("use a smaller split factor for the thread loops"));
                    }
                }
                self.nest.vars[v.0 as usize].kind = LoopKind::Bound(*axis);
                self.bind_spans.insert(v, step.span);
                Ok(())
            }
            StepKind::Unroll(n) => {
                let v = self.lookup(n)?;
                self.not_bound(v, n)?;
                let ext = &self.nest.var(v).extent;
                match ext.as_const() {
                    Some(e) if e <= 1024 => {}
                    Some(e) => {
                        return Err(Diagnostic::new(
                            step.span,
                            format!(
                                "loop `{}` has {e} iterations; unrolling more than 1024 is refused",
                                n.name
                            ),
                        )
                        .hint("split it and unroll the inner loop"))
                    }
                    None => {
                        return Err(Diagnostic::new(
                            step.span,
                            format!(
                                "loop `{}` has a symbolic extent and cannot be unrolled",
                                n.name
                            ),
                        )
                        .hint("split it by a constant factor and unroll the inner loop"))
                    }
                }
                self.nest.vars[v.0 as usize].kind = LoopKind::Unrolled;
                Ok(())
            }
        }
    }

    fn reorder(&mut self, names: &[Name]) -> Result<(), Diagnostic> {
        let mut vs = Vec::new();
        for n in names {
            let v = self.lookup(n)?;
            if vs.contains(&v) {
                return Err(Diagnostic::new(
                    n.span,
                    format!("loop `{}` appears twice in reorder", n.name),
                ));
            }
            vs.push(v);
        }
        let mut slots: Vec<usize> = vs
            .iter()
            .map(|v| self.nest.order.iter().position(|x| x == v).expect("live"))
            .collect();
        slots.sort_unstable();
        for (slot, v) in slots.into_iter().zip(vs) {
            self.nest.order[slot] = v;
        }
        Ok(())
    }

    fn threads(&self) -> i64 {
        self.nest
            .order
            .iter()
            .filter(|v| matches!(self.nest.var(**v).kind, LoopKind::Bound(GpuAxis::Thread(_))))
            .map(|v| self.nest.var(*v).extent.as_const().unwrap_or(1))
            .product()
    }

    fn size_names(&self) -> Vec<String> {
        self.k.size_names()
    }

    fn bind_span(&self, v: VarId) -> Span {
        self.bind_spans.get(&v).copied().unwrap_or_default()
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
    let vars: Vec<LoopVar> = stage
        .all_axes()
        .enumerate()
        .map(|(i, a)| LoopVar {
            name: a.name.clone(),
            reduce: i >= stage.axes.len(),
            extent: a.extent.clone(),
            kind: LoopKind::Serial,
            span: a.span,
        })
        .collect();
    let n = vars.len();
    let mut names: Vec<String> = Vec::new();
    names.extend(k.sizes.iter().map(|s| s.name.clone()));
    names.extend(k.params.iter().map(|s| s.name.clone()));
    names.extend(k.tensors.iter().map(|s| s.name.clone()));
    let mut st = State {
        k,
        src,
        taken: names,
        nest: LoopNest {
            caches: Vec::new(),
            vectorized: Vec::new(),
            vars,
            order: (0..n as u32).map(VarId).collect(),
            axis_values: (0..n as u32).map(|v| Index::Var(VarId(v))).collect(),
            guards: Vec::new(),
        },
        consumed: HashMap::new(),
        bind_spans: HashMap::new(),
        stage_output: Some(stage.output),
    };
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
        if stage.reduce.is_some() {
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
    for step in &stage.schedule {
        st.apply(step)?;
    }
    Ok(st.nest)
}
