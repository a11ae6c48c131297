//! Lowering: scheduled stages → loop IR, one GPU kernel per stage (a stage
//! with `compute_inline()` is substituted into its readers; one with
//! `compute_at` is lowered inside its consumer's kernel, see `lower/compute_at.rs`).
//!
//! Loop IR is explicit about everything a back end must not guess: which
//! variables come from `blockIdx`/`threadIdx`, which loops remain (and
//! whether they are unrolled), where guards sit, the launch geometry, and
//! the kernel's argument list in order: the buffers the stage touches (in
//! tensor order), then every size (`i32`), then every parameter.

use crate::diag::{Diagnostic, KernelError};
use crate::index::{IOp, Index, SizeId, VarId};
use crate::kernel::{Expr, ExprKind, Kernel, ParamId, StageId, TensorId, TensorKind};
use crate::schedule::{self, GpuAxis, Guard, LoopKind, LoopVar};
use std::fmt;

pub mod barriers;
mod compute_at;
pub mod verify;

#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    pub kernels: Vec<GpuKernel>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ArgKind {
    Buffer { tensor: TensorId, access: Access },
    Size(SizeId),
    Param(ParamId),
}

#[derive(Clone, Debug, PartialEq)]
pub struct KernelArg {
    pub name: String,
    pub kind: ArgKind,
}

/// How a kernel forms addresses. Chosen from the sizes' upper bounds
/// (`[kernel] max`, else `i32::MAX`) so that no index arithmetic overflows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Addressing {
    /// Every tensor is under 4 GiB: byte offsets are formed in 32 bits and
    /// zero-extended (the scalar base + 32-bit vector offset mode).
    Offset32,
    /// Element indices stay below 2^31 but byte offsets may not: the index is
    /// formed in 32 bits, the byte offset in 64.
    Index32,
    /// Element indices may reach 2^31 or more: flattening is done in 64 bits.
    Index64,
}

/// One GPU kernel: a stage with its launch geometry and loop body.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuKernel {
    /// Symbol name: the kernel's name, or `kernel_stage` when there are several stages.
    pub name: String,
    pub stage: StageId,
    pub args: Vec<KernelArg>,
    /// Work-group size (threads in x, y, z); a constant.
    pub block: [u32; 3],
    /// Work-groups in x, y, z; expressions of sizes.
    pub grid: [Index; 3],
    pub vars: Vec<LoopVar>,
    pub body: Vec<Stmt>,
    pub addressing: Addressing,
    /// Per-thread arrays (reduction accumulators), indexed by [`ExprKind::Local`].
    pub locals: Vec<Local>,
    /// LDS arrays shared by the work-group, indexed by [`ExprKind::Shared`].
    pub shared: Vec<Local>,
}

/// A per-thread array. With constant indices (unrolled loops) LLVM keeps it
/// in registers.
#[derive(Clone, Debug, PartialEq)]
pub struct Local {
    pub name: String,
    pub dtype: crate::DType,
    pub len: u32,
    /// The step that asked for it (a cache, a compute_at, a thread-bound
    /// reduction loop), for messages about its size.
    pub span: crate::Span,
}

impl Local {
    /// Bytes it occupies, rounded up to 4 as LLVM aligns LDS arrays.
    pub fn bytes(&self) -> u64 {
        (self.len as u64 * self.dtype.size() as u64).next_multiple_of(4)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    /// `var` is the value of a hardware index.
    Bind { var: VarId, axis: GpuAxis },
    Loop {
        var: VarId,
        extent: Index,
        unroll: bool,
        body: Vec<Stmt>,
    },
    /// Runs `body` when every guard holds.
    If { guards: Vec<Guard>, body: Vec<Stmt> },
    Store {
        tensor: TensorId,
        indices: Vec<Index>,
        value: Expr,
    },
    /// Runs `fast` when every guard holds, else `slow` (a vectorized loop:
    /// the fast path has no per-lane guards).
    Unswitch {
        guards: Vec<Guard>,
        fast: Vec<Stmt>,
        slow: Vec<Stmt>,
    },
    /// `shared[shared][index] = value`, in the work-group's LDS.
    SharedStore {
        shared: u32,
        index: Index,
        value: Expr,
    },
    /// Every thread of the work-group waits here, and LDS writes before it
    /// are visible to reads after it.
    Barrier,
    /// `locals[local][index] = value`
    LocalStore {
        local: u32,
        index: Index,
        value: Expr,
    },
}

impl Stmt {
    /// Rebuilds the statement with `f` applied to each statement list it
    /// holds (a loop's or an `If`'s body, both sides of an unswitch).
    pub fn map_bodies(self, f: &mut dyn FnMut(Vec<Stmt>) -> Vec<Stmt>) -> Stmt {
        match self {
            Stmt::Loop {
                var,
                extent,
                unroll,
                body,
            } => Stmt::Loop {
                var,
                extent,
                unroll,
                body: f(body),
            },
            Stmt::If { guards, body } => Stmt::If {
                guards,
                body: f(body),
            },
            Stmt::Unswitch { guards, fast, slow } => Stmt::Unswitch {
                guards,
                fast: f(fast),
                slow: f(slow),
            },
            // Listed, not `_`: a new statement kind with a body must be handled.
            s @ (Stmt::Bind { .. }
            | Stmt::Store { .. }
            | Stmt::SharedStore { .. }
            | Stmt::Barrier
            | Stmt::LocalStore { .. }) => s,
        }
    }
}

impl GpuKernel {
    pub fn threads(&self) -> u32 {
        self.block.iter().product()
    }
}

/// Lowers every stage of a checked kernel. Inlined stages produce no kernel.
/// Stages computed at another stage's loop are lowered inside that stage's kernel.
pub fn lower(k: &Kernel) -> Result<Program, Diagnostic> {
    compute_at::check(k)?;
    let kernels: Vec<GpuKernel> = (0..k.stages.len())
        .filter(|s| !k.stages[*s].is_internal())
        .map(|s| lower_stage(k, StageId(s as u32)))
        .collect::<Result<_, _>>()?;
    // What compute_at computes lives only where it was placed.
    for g in &kernels {
        let mut stray = None;
        visit_stmts(&g.body, &mut |s| {
            if let Some(e) = stmt_exprs(s) {
                e.visit_loads(&mut |t, _| {
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
                    let mut f = |t: TensorId, _: &[Index]| reads |= t == ps.output;
                    inline_producers(k, sid, &s.value).visit_loads(&mut f);
                    if let Some(r) = &s.reduce {
                        inline_producers(k, sid, &r.body).visit_loads(&mut f);
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

/// [`lower`] with errors rendered against the kernel file.
pub fn lower_file(k: &Kernel, file: &str, source: &str) -> Result<Program, KernelError> {
    lower(k).map_err(|d| KernelError {
        file: file.into(),
        source: source.into(),
        diagnostics: vec![d],
    })
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

/// Wraps `leaf` in `loops` (outermost first); each guard goes just inside
/// the innermost of these loops it depends on.
fn build(
    nest: &schedule::LoopNest,
    loops: &[VarId],
    guards: &[&Guard],
    leaf: Vec<Stmt>,
) -> Vec<Stmt> {
    let depth_of = |g: &Guard| {
        loops
            .iter()
            .rposition(|l| g.value.uses_var(*l))
            .map_or(0, |p| p + 1)
    };
    let mut at_depth: Vec<Vec<Guard>> = vec![Vec::new(); loops.len() + 1];
    for g in guards {
        at_depth[depth_of(g)].push((*g).clone());
    }
    let mut body = leaf;
    for d in (0..=loops.len()).rev() {
        let gs = std::mem::take(&mut at_depth[d]);
        if !gs.is_empty() {
            body = vec![Stmt::If { guards: gs, body }];
        }
        if d > 0 {
            let v = loops[d - 1];
            let lv = nest.var(v);
            body = vec![Stmt::Loop {
                var: v,
                extent: lv.extent.clone(),
                unroll: matches!(lv.kind, LoopKind::Unrolled | LoopKind::Vectorized),
                body,
            }];
        }
    }
    body
}

/// `ix` clamped into `0..=extent-1`: `min(ix, extent - 1)`, and `max(…, 0)`
/// around it when `ix` can be negative (`n - 1 - i` or `i - 1` for the
/// padding threads of a partial tile, which run but whose results are never
/// stored). Loop variables count as unbounded, so only sizes' bounds decide.
fn clamp_into(k: &Kernel, ix: Index, extent: &Index) -> Index {
    let size_max: Vec<u64> = k.sizes.iter().map(|s| s.max).collect();
    let negative = ix.range(&size_max, &[]).0 < 0;
    let upper = Index::bin(IOp::Min, ix, extent.clone() - Index::c(1));
    if negative {
        Index::bin(IOp::Max, upper, Index::c(0))
    } else {
        upper
    }
}

/// Clamps every load index that depends on one of the `guarded` loop
/// variables into `0..=extent-1` of its dimension.
fn clamp_loads(k: &Kernel, st: Stmt, guarded: &[VarId], skip: &[TensorId]) -> Stmt {
    let clamp = |e: &Expr| {
        e.rewrite(&|x: &Expr| match &x.kind {
            ExprKind::Load { tensor, indices } if !skip.contains(tensor) => {
                let shape = &k.tensor(*tensor).shape;
                let indices = indices
                    .iter()
                    .zip(shape)
                    .map(|(ix, ext)| {
                        if guarded.iter().any(|v| ix.uses_var(*v)) {
                            clamp_into(k, ix.clone(), ext)
                        } else {
                            ix.clone()
                        }
                    })
                    .collect();
                Some(Expr {
                    kind: ExprKind::Load {
                        tensor: *tensor,
                        indices,
                    },
                    dtype: x.dtype,
                })
            }
            _ => None,
        })
    };
    match st {
        Stmt::LocalStore {
            local,
            index,
            value,
        } => Stmt::LocalStore {
            local,
            index,
            value: clamp(&value),
        },
        other => other,
    }
}

/// Accumulators a thread may keep; more would not fit in registers.
const MAX_ACCUMULATORS: i64 = 1024;

/// Lowers one kernel-producing stage, then runs the loop-IR passes, each
/// followed by the verifier in debug builds (tests included).
fn lower_stage(k: &Kernel, sid: StageId) -> Result<GpuKernel, Diagnostic> {
    let mut g = lower_stage_in(k, sid, &[])?;
    let check = |g: &GpuKernel, pass| -> Result<(), Diagnostic> {
        if cfg!(debug_assertions) {
            verify::verify(k, g, pass)
                .map_err(|e| Diagnostic::new(k.stage(sid).span, e.to_string()))?;
        }
        Ok(())
    };
    check(&g, "lower")?;
    g.body = barriers::remove_redundant(std::mem::take(&mut g.body));
    check(&g, "barriers")?;
    Ok(g)
}

/// Lowers one stage; `bounds` (for a stage computed at another) lists
/// output axes whose value plus the part's origin must stay below an extent.
fn lower_stage_in(
    k: &Kernel,
    sid: StageId,
    bounds: &[(usize, Index)],
) -> Result<GpuKernel, Diagnostic> {
    let stage = k.stage(sid);
    // Applied once, when the kernel was checked; compute_at producers
    // (whose part extents depend on the consumer) are applied here.
    let mut nest = match &stage.nest {
        Some(n) => n.clone(),
        None => schedule::apply(k, stage)?,
    };
    for (d, extent) in bounds {
        nest.guards.push(Guard {
            value: nest.axis_values[*d].clone() + Index::Var(compute_at::origin_var(*d)),
            extent: extent.clone(),
        });
    }
    let nest = nest;
    let kernels = k.stages.iter().filter(|s| !s.is_internal()).count();
    let name = if kernels == 1 {
        k.name.clone()
    } else {
        format!("{}_{}", k.name, stage.name)
    };
    let value = inline_producers(k, sid, &stage.value);
    let reduce_body = stage
        .reduce
        .as_ref()
        .map(|r| inline_producers(k, sid, &r.body));

    let mut block = [1u32; 3];
    let mut grid = [Index::c(1), Index::c(1), Index::c(1)];
    let mut body = Vec::new();
    let mut loops = Vec::new();
    for v in &nest.order {
        let lv = nest.var(*v);
        match lv.kind {
            LoopKind::Bound(axis @ GpuAxis::Thread(d)) => {
                // Thread extents were checked constant and within limits by the schedule.
                block[d.index()] = lv.extent.as_const().unwrap_or(1) as u32;
                body.push(Stmt::Bind { var: *v, axis });
            }
            LoopKind::Bound(axis @ GpuAxis::Block(d)) => {
                grid[d.index()] = lv.extent.clone();
                body.push(Stmt::Bind { var: *v, axis });
            }
            LoopKind::Serial | LoopKind::Unrolled | LoopKind::Vectorized => loops.push(*v),
        }
    }

    let subst: std::collections::HashMap<VarId, Index> = nest
        .axis_values
        .iter()
        .enumerate()
        .map(|(i, e)| (VarId(i as u32), e.clone()))
        .collect();
    let indices: Vec<Index> = (0..stage.axes.len())
        .map(|i| subst[&VarId(i as u32)].clone())
        .collect();
    let value = value.map_indices(&|ix| ix.subst(&subst));
    let all_guards: Vec<&Guard> = nest.guards.iter().collect();
    let rbody = reduce_body
        .as_ref()
        .map(|b| b.map_indices(&|ix| ix.subst(&subst)));
    // Linear thread index within the work-group (x fastest).
    let thread_var = |d: usize| {
        nest.order.iter().copied().find(|v| {
            nest.var(*v).kind
                == LoopKind::Bound(GpuAxis::Thread(
                    [schedule::Dim::X, schedule::Dim::Y, schedule::Dim::Z][d],
                ))
        })
    };
    let mut tid = Index::c(0);
    for d in (0..3).rev() {
        tid = tid * Index::c(block[d] as i64) + thread_var(d).map_or(Index::c(0), Index::Var);
    }
    // Tensors read from LDS or registers: staged by cache_read, or computed
    // by compute_at (here or in an enclosing kernel, whose part covers every
    // point read). Their reads are rewritten, not clamped.
    let mut cached: Vec<TensorId> = nest.caches.iter().map(|c| c.tensor).collect();
    cached.extend(
        k.stages
            .iter()
            .filter(|s| s.compute_at().is_some())
            .map(|s| s.output),
    );
    let mut locals = Vec::new();
    let mut shared = Vec::new();
    match &stage.reduce {
        None => body.extend(build(
            &nest,
            &loops,
            &all_guards,
            vec![Stmt::Store {
                tensor: stage.output,
                indices,
                value,
            }],
        )),
        Some(red)
            if nest.order.iter().any(|v| {
                nest.var(*v).reduce
                    && matches!(nest.var(*v).kind, LoopKind::Bound(GpuAxis::Thread(_)))
            }) =>
        {
            // A cooperative reduction: each thread reduces its share serially,
            // then the threads bound to the reduction loop combine their
            // partial results through LDS in a tree, with barriers between
            // steps. Barriers are never under a guard: every thread reaches them.
            let tr = *nest
                .order
                .iter()
                .find(|v| {
                    nest.var(**v).reduce
                        && matches!(nest.var(**v).kind, LoopKind::Bound(GpuAxis::Thread(_)))
                })
                .expect("found above");
            let LoopKind::Bound(GpuAxis::Thread(dim)) = nest.var(tr).kind else {
                unreachable!("a thread-bound loop")
            };
            let t_count = nest.var(tr).extent.as_const().unwrap_or(1);
            let r0 = loops
                .iter()
                .position(|v| nest.var(*v).reduce)
                .unwrap_or(loops.len());
            let (outer, inner) = loops.split_at(r0);
            if let Some(v) = inner.iter().find(|v| !nest.var(**v).reduce) {
                return Err(Diagnostic::new(
                    nest.var(*v).span,
                    format!(
                        "loop `{}` runs inside the reduction loops of a cooperative reduction",
                        nest.var(*v).name
                    ),
                )
                .hint("move output loops outside the reduction loops with reorder"));
            }
            // The stride of the reduction's dimension in the linear thread index.
            let stride: i64 = block[..dim.index()].iter().map(|b| *b as i64).product();
            let rbody = rbody.clone().expect("a reduction has a body");
            let t = rbody.dtype;
            locals.push(Local {
                name: format!("{}_acc", stage.name),
                dtype: t,
                len: 1,
                span: stage.span,
            });
            shared.push(Local {
                name: format!("{}_lds", stage.name),
                dtype: t,
                len: block.iter().product(),
                span: nest.var(tr).span,
            });
            let acc = Expr {
                kind: ExprKind::Local {
                    local: 0,
                    index: Index::c(0),
                },
                dtype: t,
            };
            let lds = |ix: Index| Expr {
                kind: ExprKind::Shared {
                    shared: 0,
                    index: ix,
                },
                dtype: t,
            };
            let combine = |a: Expr, b: Expr| Expr {
                kind: ExprKind::Binary(red.op.combine(), Box::new(a), Box::new(b)),
                dtype: t,
            };
            let spatial: Vec<Guard> = nest
                .guards
                .iter()
                .filter(|g| {
                    !nest
                        .vars
                        .iter()
                        .enumerate()
                        .any(|(i, lv)| lv.reduce && g.value.uses_var(VarId(i as u32)))
                })
                .cloned()
                .collect();
            let mut leaf = vec![Stmt::LocalStore {
                local: 0,
                index: Index::c(0),
                value: red.op.identity(t),
            }];
            let update = Stmt::LocalStore {
                local: 0,
                index: Index::c(0),
                value: combine(acc.clone(), rbody),
            };
            // With tiles staged inside the reduction, the barriers there must
            // be reached by every thread: out-of-range outputs accumulate from
            // clamped loads (never stored) instead of skipping the loops.
            if cached.is_empty() || spatial.is_empty() {
                leaf.extend(build(&nest, inner, &all_guards, vec![update]));
            } else {
                let guarded: Vec<VarId> = (0..nest.vars.len() as u32)
                    .map(VarId)
                    .filter(|v| spatial.iter().any(|g| g.value.uses_var(*v)))
                    .collect();
                let reduction_guards: Vec<&Guard> = nest
                    .guards
                    .iter()
                    .filter(|g| !spatial.contains(g))
                    .collect();
                leaf.extend(build(
                    &nest,
                    inner,
                    &reduction_guards,
                    vec![clamp_loads(k, update, &guarded, &cached)],
                ));
            }
            leaf.push(Stmt::SharedStore {
                shared: 0,
                index: tid.clone(),
                value: acc,
            });
            leaf.push(Stmt::Barrier);
            let mut step = (t_count as u64).next_power_of_two() as i64 / 2;
            while step >= 1 {
                let guards = vec![
                    Guard {
                        value: Index::Var(tr),
                        extent: Index::c(step),
                    },
                    Guard {
                        value: Index::Var(tr) + Index::c(step),
                        extent: Index::c(t_count),
                    },
                ];
                let partner = tid.clone() + Index::c(step * stride);
                leaf.push(Stmt::If {
                    guards,
                    body: vec![Stmt::SharedStore {
                        shared: 0,
                        index: tid.clone(),
                        value: combine(lds(tid.clone()), lds(partner)),
                    }],
                });
                leaf.push(Stmt::Barrier);
                step /= 2;
            }
            let mut guards = vec![Guard {
                value: Index::Var(tr),
                extent: Index::c(1),
            }];
            guards.extend(spatial);
            leaf.push(Stmt::If {
                guards,
                body: vec![Stmt::Store {
                    tensor: stage.output,
                    indices,
                    value: value.replace_reduced(&lds(tid.clone())),
                }],
            });
            body.extend(build(&nest, outer, &[], leaf));
        }
        Some(red) => {
            // Loops from the first reduction loop inward accumulate; the
            // output loops among them index a per-thread accumulator array.
            let r0 = loops
                .iter()
                .position(|v| nest.var(*v).reduce)
                .unwrap_or(loops.len());
            let (outer, inner) = loops.split_at(r0);
            let acc_loops: Vec<VarId> = inner
                .iter()
                .copied()
                .filter(|v| !nest.var(*v).reduce)
                .collect();
            let mut len: i64 = 1;
            let mut acc_index = Index::c(0);
            for v in &acc_loops {
                let lv = nest.var(*v);
                let Some(e) = lv.extent.as_const() else {
                    return Err(Diagnostic::new(lv.span, format!("loop `{}` runs inside a reduction loop but has a symbolic extent", lv.name))
                        .hint("its iterations each keep an accumulator: split it by a constant factor, or move it outside the reduction loops with reorder"));
                };
                len *= e;
                acc_index = acc_index * Index::c(e) + Index::Var(*v);
            }
            if len > MAX_ACCUMULATORS {
                return Err(Diagnostic::new(stage.span, format!("stage `{}` needs {len} accumulators per thread; at most {MAX_ACCUMULATORS} are allowed", stage.name))
                    .hint("use smaller factors for the output loops inside the reduction loops"));
            }
            let rbody = rbody.clone().expect("a reduction has a body");
            let t = rbody.dtype;
            locals.push(Local {
                name: format!("{}_acc", stage.name),
                dtype: t,
                len: len as u32,
                span: stage.span,
            });
            let acc = Expr {
                kind: ExprKind::Local {
                    local: 0,
                    index: acc_index.clone(),
                },
                dtype: t,
            };
            let spatial: Vec<&Guard> = nest
                .guards
                .iter()
                .filter(|g| {
                    !nest
                        .vars
                        .iter()
                        .enumerate()
                        .any(|(i, lv)| lv.reduce && g.value.uses_var(VarId(i as u32)))
                })
                .collect();
            let init = Stmt::LocalStore {
                local: 0,
                index: acc_index.clone(),
                value: red.op.identity(t),
            };
            let combined = Expr {
                kind: ExprKind::Binary(red.op.combine(), Box::new(acc.clone()), Box::new(rbody)),
                dtype: t,
            };
            let update = Stmt::LocalStore {
                local: 0,
                index: acc_index,
                value: combined,
            };
            let store = Stmt::Store {
                tensor: stage.output,
                indices,
                value: value.replace_reduced(&acc),
            };
            // With several accumulators per thread, the accumulation keeps only
            // the reduction's guards: out-of-range outputs accumulate values
            // that are never stored, and loads indexed by guarded loops are
            // clamped into bounds instead of branched around, so loads shared
            // by several accumulators (A[i, k] for every j) are loaded once.
            // With one accumulator, one branch around the reduction is cheaper.
            let (update, update_guards): (Stmt, Vec<&Guard>) =
                if (acc_loops.is_empty() && cached.is_empty()) || spatial.is_empty() {
                    (update, all_guards.clone())
                } else {
                    let guarded: Vec<VarId> = (0..nest.vars.len() as u32)
                        .map(VarId)
                        .filter(|v| spatial.iter().any(|g| g.value.uses_var(*v)))
                        .collect();
                    (
                        clamp_loads(k, update, &guarded, &cached),
                        nest.guards
                            .iter()
                            .filter(|g| !spatial.contains(g))
                            .collect(),
                    )
                };
            let mut leaf = build(&nest, &acc_loops, &[], vec![init]);
            leaf.extend(build(&nest, inner, &update_guards, vec![update]));
            leaf.extend(build(&nest, &acc_loops, &spatial, vec![store]));
            body.extend(build(&nest, outer, &[], leaf));
        }
    }
    let mut vars = nest.vars.clone();
    for c in &nest.caches {
        body = stage_cache(
            k,
            &nest,
            c,
            body,
            block,
            &tid,
            &mut vars,
            &mut shared,
            &mut locals,
        )?;
    }
    let mut merged = Addressing::Offset32;
    for p in compute_at::attached(k, sid) {
        let mut host = compute_at::Host {
            nest: &nest,
            block,
            vars: &mut vars,
            locals: &mut locals,
            shared: &mut shared,
            addressing: &mut merged,
        };
        body = compute_at::attach(k, p, body, &mut host)?;
    }
    for (v, span) in &nest.vectorized {
        body = vectorize(k, &nest, *v, *span, body)?;
    }
    // The buffers are the tensors the body reads or writes, in tensor order.
    let mut touched: Vec<TensorId> = Vec::new();
    visit_stmts(&body, &mut |s| {
        if let Stmt::Store { tensor, .. } = s {
            touched.push(*tensor);
        }
        if let Some(e) = stmt_exprs(s) {
            e.visit_loads(&mut |t, _| touched.push(t));
        }
    });
    touched.sort();
    touched.dedup();
    let mut args: Vec<KernelArg> = touched
        .iter()
        .map(|t| KernelArg {
            name: k.tensor(*t).name.clone(),
            kind: ArgKind::Buffer {
                tensor: *t,
                access: if *t == stage.output {
                    Access::Write
                } else {
                    Access::Read
                },
            },
        })
        .collect();
    args.extend(k.sizes.iter().enumerate().map(|(i, s)| KernelArg {
        name: s.name.clone(),
        kind: ArgKind::Size(SizeId(i as u32)),
    }));
    args.extend(k.params.iter().enumerate().map(|(i, p)| KernelArg {
        name: p.name.clone(),
        kind: ArgKind::Param(ParamId(i as u32)),
    }));
    let addressing = addressing(k, stage, &nest, &touched)?.max(merged);
    Ok(GpuKernel {
        name,
        stage: sid,
        args,
        block,
        grid,
        vars,
        body,
        addressing,
        locals,
        shared,
    })
}

const U32_LIMIT: u128 = 1 << 32;

fn power_of_two(v: u128) -> String {
    if v >= 1 << 20 && v.is_power_of_two() {
        format!("2^{}", v.trailing_zeros())
    } else if v >= 1 << 40 {
        format!("~2^{}", 128 - v.leading_zeros())
    } else {
        v.to_string()
    }
}

/// Checks that loop counters and index values fit in 32 bits and picks the
/// addressing mode from the tensors' largest sizes.
fn addressing(
    k: &Kernel,
    stage: &crate::kernel::Stage,
    nest: &schedule::LoopNest,
    touched: &[TensorId],
) -> Result<Addressing, Diagnostic> {
    let size_max: Vec<u64> = k.sizes.iter().map(|s| s.max).collect();
    let hint = || {
        let names: Vec<String> = k
            .sizes
            .iter()
            .map(|s| format!("{} = ...", s.name))
            .collect();
        format!(
            "declare upper bounds of the sizes, e.g. `[kernel] max = {{ {} }}`",
            names.join(", ")
        )
    };
    let mut var_max = vec![0u64; nest.vars.len()];
    for (i, v) in nest.vars.iter().enumerate() {
        let e = v.extent.max_value(&size_max, &[]);
        if e >= U32_LIMIT {
            return Err(Diagnostic::new(v.span, format!("loop `{}` of stage `{}` can run up to {} iterations, more than a 32-bit loop counter holds", v.name, stage.name, power_of_two(e)))
                .hint(hint()));
        }
        var_max[i] = e.saturating_sub(1) as u64;
    }
    for (a, value) in stage.axes.iter().zip(&nest.axis_values) {
        let m = value.max_value(&size_max, &var_max);
        if m >= U32_LIMIT {
            return Err(Diagnostic::new(
                a.span,
                format!(
                    "axis `{}` of stage `{}` can reach {}, beyond 32-bit index arithmetic",
                    a.name,
                    stage.name,
                    power_of_two(m)
                ),
            )
            .hint(hint()));
        }
    }
    let mut mode = Addressing::Offset32;
    for t in touched {
        let t = k.tensor(*t);
        let elems = t.shape.iter().fold(1u128, |acc, e| {
            acc.saturating_mul(e.max_value(&size_max, &[]))
        });
        let bytes = elems.saturating_mul(t.dtype.size() as u128);
        let m = if elems >= 1 << 31 {
            Addressing::Index64
        } else if bytes >= U32_LIMIT {
            Addressing::Index32
        } else {
            Addressing::Offset32
        };
        mode = mode.max(m);
    }
    Ok(mode)
}

/// Pretty-prints a lowered kernel as pseudo-code, for `--emit loops` and tests.
pub struct Pretty<'a> {
    pub kernel: &'a Kernel,
    pub gpu: &'a GpuKernel,
}

/// An expression of the loop IR as text: loads, LDS and register reads by
/// name, indices with the loops' names, operators infix (parenthesised).
fn expr_text(p: &Pretty<'_>, e: &Expr, sizes: &[String], vars: &[String]) -> String {
    let go = |x: &Expr| expr_text(p, x, sizes, vars);
    match &e.kind {
        ExprKind::Int(v) => v.to_string(),
        ExprKind::Float(v) => format!("{v:?}"),
        ExprKind::Param(id) => p.kernel.params[id.0 as usize].name.clone(),
        ExprKind::Index(i) => i.display(sizes, vars).to_string(),
        ExprKind::Load { tensor, indices } => {
            let ix: Vec<String> = indices
                .iter()
                .map(|i| i.display(sizes, vars).to_string())
                .collect();
            format!("{}[{}]", p.kernel.tensor(*tensor).name, ix.join(", "))
        }
        ExprKind::Local { local, index } => format!(
            "{}[{}]",
            p.gpu.locals[*local as usize].name,
            index.display(sizes, vars)
        ),
        ExprKind::Shared { shared, index } => format!(
            "{}[{}]",
            p.gpu.shared[*shared as usize].name,
            index.display(sizes, vars)
        ),
        ExprKind::Reduced => "<reduced>".into(),
        ExprKind::Unary(crate::kernel::UnaryOp::Neg, a) => format!("-{}", go(a)),
        ExprKind::Unary(crate::kernel::UnaryOp::Not, a) => format!("!{}", go(a)),
        ExprKind::Cast(a) => format!("{}({})", e.dtype.name(), go(a)),
        ExprKind::Select(c, a, b) => format!("select({}, {}, {})", go(c), go(a), go(b)),
        ExprKind::Call(m, args) => {
            let a: Vec<String> = args.iter().map(go).collect();
            format!("{}({})", m.name(), a.join(", "))
        }
        ExprKind::Binary(op, a, b) => {
            use crate::kernel::BinOp::*;
            let sym = match op {
                Min => return format!("min({}, {})", go(a), go(b)),
                Max => return format!("max({}, {})", go(a), go(b)),
                Add => "+",
                Sub => "-",
                Mul => "*",
                Div => "/",
                Rem => "%",
                Eq => "==",
                Ne => "!=",
                Lt => "<",
                Le => "<=",
                Gt => ">",
                Ge => ">=",
                And => "&&",
                Or => "||",
            };
            format!("({} {sym} {})", go(a), go(b))
        }
    }
}

impl fmt::Display for Pretty<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sizes = self.kernel.size_names();
        let vars: Vec<String> = self.gpu.vars.iter().map(|v| v.name.clone()).collect();
        let g = &self.gpu;
        let args: Vec<&str> = g.args.iter().map(|a| a.name.as_str()).collect();
        writeln!(f, "kernel {}({})", g.name, args.join(", "))?;
        writeln!(
            f,
            "  block ({}, {}, {})  grid ({}, {}, {})",
            g.block[0],
            g.block[1],
            g.block[2],
            g.grid[0].display(&sizes, &vars),
            g.grid[1].display(&sizes, &vars),
            g.grid[2].display(&sizes, &vars)
        )?;
        fn go(
            f: &mut fmt::Formatter<'_>,
            p: &Pretty<'_>,
            s: &[Stmt],
            ind: usize,
            sizes: &[String],
            vars: &[String],
        ) -> fmt::Result {
            let pad = "  ".repeat(ind);
            for st in s {
                match st {
                    Stmt::SharedStore {
                        shared,
                        index,
                        value,
                    } => {
                        writeln!(
                            f,
                            "{pad}{}[{}] = {} (LDS)",
                            p.gpu.shared[*shared as usize].name,
                            index.display(sizes, vars),
                            expr_text(p, value, sizes, vars)
                        )?;
                    }
                    Stmt::Barrier => writeln!(f, "{pad}barrier")?,
                    Stmt::Unswitch { guards, fast, slow } => {
                        let c: Vec<String> = guards
                            .iter()
                            .map(|g| {
                                format!(
                                    "{} < {}",
                                    g.value.display(sizes, vars),
                                    g.extent.display(sizes, vars)
                                )
                            })
                            .collect();
                        writeln!(f, "{pad}if {} (every lane, vectorized):", c.join(" && "))?;
                        go(f, p, fast, ind + 1, sizes, vars)?;
                        writeln!(f, "{pad}else:")?;
                        go(f, p, slow, ind + 1, sizes, vars)?;
                    }
                    Stmt::Bind { var, axis } => {
                        writeln!(f, "{pad}{} = {axis}", vars[var.0 as usize])?
                    }
                    Stmt::Loop {
                        var,
                        extent,
                        unroll,
                        body,
                    } => {
                        writeln!(
                            f,
                            "{pad}for {} in 0..{}{}:",
                            vars[var.0 as usize],
                            extent.display(sizes, vars),
                            if *unroll { " (unrolled)" } else { "" }
                        )?;
                        go(f, p, body, ind + 1, sizes, vars)?;
                    }
                    Stmt::If { guards, body } => {
                        let c: Vec<String> = guards
                            .iter()
                            .map(|g| {
                                format!(
                                    "{} < {}",
                                    g.value.display(sizes, vars),
                                    g.extent.display(sizes, vars)
                                )
                            })
                            .collect();
                        writeln!(f, "{pad}if {}:", c.join(" && "))?;
                        go(f, p, body, ind + 1, sizes, vars)?;
                    }
                    Stmt::LocalStore {
                        local,
                        index,
                        value,
                    } => {
                        writeln!(
                            f,
                            "{pad}{}[{}] = {}",
                            p.gpu.locals[*local as usize].name,
                            index.display(sizes, vars),
                            expr_text(p, value, sizes, vars)
                        )?;
                    }
                    Stmt::Store {
                        tensor,
                        indices,
                        value,
                    } => {
                        let ix: Vec<String> = indices
                            .iter()
                            .map(|i| i.display(sizes, vars).to_string())
                            .collect();
                        writeln!(
                            f,
                            "{pad}{}[{}] = {}",
                            p.kernel.tensor(*tensor).name,
                            ix.join(", "),
                            expr_text(p, value, sizes, vars)
                        )?;
                    }
                }
            }
            Ok(())
        }
        writeln!(f, "  addressing {:?}", g.addressing)?;
        for (what, arrays) in [("lds", &g.shared), ("registers", &g.locals)] {
            if !arrays.is_empty() {
                let list: Vec<String> = arrays
                    .iter()
                    .map(|a| format!("{}: {}[{}]", a.name, a.dtype.name(), a.len))
                    .collect();
                writeln!(f, "  {what} {}", list.join(", "))?;
            }
        }
        go(f, self, &g.body, 1, &sizes, &vars)
    }
}

/// `e` as Σ coefᵥ·v over the `varying` variables plus a rest free of them;
/// `None` if a varying variable appears other than with a constant
/// coefficient (under a division, a minimum, a product of variables...).
fn split_varying(e: &Index, varying: &[VarId]) -> Option<(Vec<(VarId, i64)>, Index)> {
    let uses = |x: &Index| varying.iter().any(|v| x.uses_var(*v));
    if !uses(e) {
        return Some((Vec::new(), e.clone()));
    }
    match e {
        Index::Var(v) => Some((vec![(*v, 1)], Index::c(0))),
        Index::Bin(IOp::Add, a, b) => {
            let (mut ca, ra) = split_varying(a, varying)?;
            let (cb, rb) = split_varying(b, varying)?;
            ca.extend(cb);
            Some((ca, ra + rb))
        }
        Index::Bin(IOp::Mul, a, b) => {
            let (x, c) = match (a.as_const(), b.as_const()) {
                (_, Some(c)) => (a, c),
                (Some(c), _) => (b, c),
                _ => return None,
            };
            let (cx, rx) = split_varying(x, varying)?;
            let scaled = cx
                .into_iter()
                .map(|(v, k)| k.checked_mul(c).map(|kc| (v, kc)))
                .collect::<Option<Vec<_>>>()?;
            Some((scaled, rx * Index::c(c)))
        }
        _ => None,
    }
}

/// The box of a tensor that a set of accesses touches while the `varying`
/// loops run: per dimension a base (free of the varying loops; the lowest
/// constant offset included), that lowest offset, and the extent.
struct Region {
    base: Vec<Index>,
    lo: Vec<i64>,
    size: Vec<i64>,
}

/// Infers the [`Region`] of `accesses`: each dimension must be affine in the
/// `varying` loops with non-negative coefficients, the loops must have
/// constant extents, and every access must share one symbolic base.
fn infer_region(
    tensor: &str,
    dims: usize,
    accesses: &[Vec<Index>],
    varying: &[VarId],
    vars: &[LoopVar],
    at: &str,
    err: &dyn Fn(String) -> Diagnostic,
) -> Result<Region, Diagnostic> {
    let too_large = || {
        err(format!(
            "the part of `{tensor}` accessed inside `{at}` is too large"
        ))
    };
    let (mut base, mut lo, mut size) = (Vec::new(), Vec::new(), Vec::new());
    for d in 0..dims {
        let (mut sym, mut min, mut max) = (None::<Index>, i64::MAX, i64::MIN);
        for l in accesses {
            let (coefs, rest) = split_varying(&l[d], varying).ok_or_else(|| {
                err(format!(
                    "the accesses of `{tensor}` are not affine in the loops inside `{at}` (dimension {d})"
                ))
            })?;
            let (s, off) = peel_const(&rest);
            match &sym {
                None => sym = Some(s),
                Some(x) if *x == s => {}
                Some(_) => {
                    return Err(err(format!(
                        "the accesses of `{tensor}` do not share one tile (dimension {d})"
                    )))
                }
            }
            let mut hi = off;
            for (v, coef) in &coefs {
                let lv = &vars[v.0 as usize];
                let e = lv.extent.as_const().ok_or_else(|| {
                    err(format!(
                        "loop `{}` inside `{at}` has a symbolic extent, so the part of `{tensor}` it touches has no fixed size",
                        lv.name
                    ))
                })?;
                if *coef < 0 {
                    return Err(err(format!(
                        "`{tensor}` is accessed backwards along dimension {d}"
                    )));
                }
                hi = coef
                    .checked_mul(e - 1)
                    .and_then(|x| hi.checked_add(x))
                    .ok_or_else(&too_large)?;
            }
            min = min.min(off);
            max = max.max(hi);
        }
        base.push(sym.expect("at least one access") + Index::c(min));
        lo.push(min);
        size.push(
            max.checked_sub(min)
                .and_then(|x| x.checked_add(1))
                .ok_or_else(&too_large)?,
        );
    }
    Ok(Region { base, lo, size })
}

/// Per dimension, the offset of an access inside its [`Region`].
fn region_offsets(ix: &[Index], varying: &[VarId], lo: &[i64]) -> Vec<Index> {
    ix.iter()
        .enumerate()
        .map(|(d, x)| {
            let (coefs, rest) = split_varying(x, varying).expect("checked by infer_region");
            coefs
                .iter()
                .fold(Index::c(peel_const(&rest).1 - lo[d]), |acc, (v, k)| {
                    acc + Index::Var(*v) * Index::c(*k)
                })
        })
        .collect()
}

/// A symbolic part and a constant offset: `s + 3` → (`s`, 3).
fn peel_const(e: &Index) -> (Index, i64) {
    match e {
        Index::Const(c) => (Index::c(0), *c),
        Index::Bin(IOp::Add, a, b) => match (a.as_const(), b.as_const()) {
            (_, Some(c)) => match peel_const(a) {
                (s, k) if k.checked_add(c).is_some() => (s, k + c),
                _ => (e.clone(), 0),
            },
            (Some(c), _) => match peel_const(b) {
                (s, k) if k.checked_add(c).is_some() => (s, k + c),
                _ => (e.clone(), 0),
            },
            _ => (e.clone(), 0),
        },
        _ => (e.clone(), 0),
    }
}

fn visit_stmts(body: &[Stmt], f: &mut impl FnMut(&Stmt)) {
    for s in body {
        f(s);
        match s {
            Stmt::Loop { body, .. } | Stmt::If { body, .. } => visit_stmts(body, f),
            Stmt::Unswitch { fast, slow, .. } => {
                visit_stmts(fast, f);
                visit_stmts(slow, f);
            }
            _ => {}
        }
    }
}

/// The indices of every load of `tensor` in `body`.
fn loads_of(body: &[Stmt], tensor: TensorId) -> Vec<Vec<Index>> {
    let mut out = Vec::new();
    visit_stmts(body, &mut |s| {
        if let Some(e) = stmt_exprs(s) {
            e.visit_loads(&mut |t, ix| {
                if t == tensor {
                    out.push(ix.to_vec());
                }
            });
        }
    });
    out
}

fn stmt_exprs(s: &Stmt) -> Option<&Expr> {
    match s {
        Stmt::Store { value, .. }
        | Stmt::LocalStore { value, .. }
        | Stmt::SharedStore { value, .. } => Some(value),
        _ => None,
    }
}

fn map_stmt_exprs(body: Vec<Stmt>, f: &impl Fn(&Expr) -> Expr) -> Vec<Stmt> {
    map_stmts(body, &|i: &Index| i.clone(), f)
}

/// Replaces loads of `tensor` by `with(indices)`.
fn replace_loads(e: &Expr, tensor: TensorId, with: &impl Fn(&[Index]) -> Expr) -> Expr {
    e.rewrite(&|x: &Expr| match &x.kind {
        ExprKind::Load { tensor: t, indices } if *t == tensor => Some(with(indices)),
        _ => None,
    })
}

/// LDS a work-group may use on the AMDGPU with the most (gfx1250). Each
/// target's own limit (32 KiB on gfx6, 64 KiB on most, 160 KiB on gfx950)
/// is checked when compiling for it.
const MAX_LDS: i64 = rocmc_target::hardware::MAX_LDS_PER_WORKGROUP as i64;

/// Applies one cache_read to a lowered body: finds the staging point,
/// infers the tile every thread and inner iteration reads, copies it into
/// LDS cooperatively and rewrites the reads.
#[allow(clippy::too_many_arguments)]
fn stage_cache(
    k: &Kernel,
    nest: &schedule::LoopNest,
    c: &schedule::Cache,
    body: Vec<Stmt>,
    block: [u32; 3],
    tid: &Index,
    vars: &mut Vec<LoopVar>,
    shared: &mut Vec<Local>,
    locals: &mut Vec<Local>,
) -> Result<Vec<Stmt>, Diagnostic> {
    let t = k.tensor(c.tensor);
    let err = |m: String| Diagnostic::new(c.span, m);
    let at_block = matches!(nest.var(c.at).kind, LoopKind::Bound(GpuAxis::Block(_)));
    if matches!(nest.var(c.at).kind, LoopKind::Bound(GpuAxis::Thread(_))) {
        return Err(err(format!(
            "`{}` is bound to threads; stage the tile at a serial loop or at a blockIdx loop",
            nest.var(c.at).name
        )));
    }
    let scope = scope_of(&body, c.at, at_block).ok_or_else(|| {
        err(format!(
            "loop `{}` is not in the kernel's body",
            nest.var(c.at).name
        ))
    })?;
    if !c.kind.local() && !at_block {
        divergence_check(&body, c.at, vars, &err)?;
    }
    // A shared tile serves every thread of the work-group; a local one only its own.
    let mut varying: Vec<VarId> = if c.kind.local() {
        Vec::new()
    } else {
        nest.order
            .iter()
            .copied()
            .filter(|v| matches!(nest.var(*v).kind, LoopKind::Bound(GpuAxis::Thread(_))))
            .collect()
    };
    visit_stmts(&scope, &mut |s| {
        if let Stmt::Loop { var, .. } = s {
            varying.push(*var);
        }
    });
    let loads = if c.kind.write() {
        let mut stores = Vec::new();
        visit_stmts(&scope, &mut |s| match s {
            Stmt::Store {
                tensor, indices, ..
            } if *tensor == c.tensor => stores.push(indices.clone()),
            _ => {}
        });
        stores
    } else {
        loads_of(&scope, c.tensor)
    };
    if loads.is_empty() {
        return Err(err(format!(
            "nothing inside `{}` {} `{}`",
            nest.var(c.at).name,
            if c.kind.write() { "writes" } else { "reads" },
            t.name
        )));
    }
    let Region { base, lo, size } = infer_region(
        &t.name,
        t.shape.len(),
        &loads,
        &varying,
        vars,
        &nest.var(c.at).name,
        &err,
    )?;
    let n = size.len();
    let mut padded = size.clone();
    padded[n - 1] = padded[n - 1].saturating_add(c.pad);
    // Saturating: a product beyond i64 is refused by the size limits below.
    let elems: i64 = size.iter().fold(1i64, |a, b| a.saturating_mul(*b));
    let lds_len: i64 = padded.iter().fold(1i64, |a, b| a.saturating_mul(*b));
    let id = if c.kind.local() {
        if lds_len > MAX_ACCUMULATORS {
            return Err(err(format!("the register tile of `{}` needs {lds_len} elements per thread; at most {MAX_ACCUMULATORS} are allowed", t.name)).hint("stage it at an inner loop"));
        }
        locals.push(Local {
            name: c.name.clone(),
            dtype: t.dtype,
            len: lds_len as u32,
            span: c.span,
        });
        locals.len() as u32 - 1
    } else {
        let used: i64 = shared.iter().map(|s| s.bytes() as i64).sum();
        if used.saturating_add(lds_len.saturating_mul(t.dtype.size() as i64)) > MAX_LDS {
            return Err(err(format!("the tile of `{}` needs {} bytes of LDS; with the rest of the kernel that exceeds the {MAX_LDS} bytes of any AMDGPU", t.name, lds_len.saturating_mul(t.dtype.size() as i64))).hint("use smaller tiles"));
        }
        shared.push(Local {
            name: c.name.clone(),
            dtype: t.dtype,
            len: lds_len as u32,
            span: c.span,
        });
        shared.len() as u32 - 1
    };
    let flat = |o: &[Index]| {
        o.iter()
            .zip(&padded)
            .fold(Index::c(0), |acc, (x, p)| acc * Index::c(*p) + x.clone())
    };

    // The cooperative copy: element e of the tile goes to thread e % threads;
    // a register tile is copied by its own thread.
    let threads: i64 = if c.kind.local() {
        1
    } else {
        block.iter().map(|b| *b as i64).product()
    };
    let tid = if c.kind.local() {
        Index::c(0)
    } else {
        tid.clone()
    };
    let iters = (elems + threads - 1) / threads;
    vars.push(LoopVar {
        name: format!("{}_copy", c.name),
        reduce: false,
        extent: Index::c(iters),
        kind: LoopKind::Serial,
        span: c.span,
    });
    let it = VarId(vars.len() as u32 - 1);
    let e = Index::Var(it) * Index::c(threads) + tid;
    let mut stride = elems;
    let mut offs = Vec::new();
    let mut global = Vec::new();
    for d in 0..n {
        stride /= size[d];
        let o = (e.clone() / Index::c(stride)) % Index::c(size[d]);
        // Reads are clamped: parts of the tile beyond the tensor feed only
        // results that are never stored. Writes are guarded instead.
        global.push(if c.kind.write() {
            base[d].clone() + o.clone()
        } else {
            clamp_into(k, base[d].clone() + o.clone(), &t.shape[d])
        });
        offs.push(o);
    }
    let in_bounds: Vec<Guard> = global
        .iter()
        .zip(&t.shape)
        .map(|(g, ext)| Guard {
            value: g.clone(),
            extent: ext.clone(),
        })
        .collect();
    let store = if c.kind.write() {
        // The tile back to memory, skipping what lies beyond the tensor (never written).
        let kind = if c.kind.local() {
            ExprKind::Local {
                local: id,
                index: flat(&offs),
            }
        } else {
            ExprKind::Shared {
                shared: id,
                index: flat(&offs),
            }
        };
        let tile = Expr {
            kind,
            dtype: t.dtype,
        };
        Stmt::If {
            guards: in_bounds,
            body: vec![Stmt::Store {
                tensor: c.tensor,
                indices: global,
                value: tile,
            }],
        }
    } else {
        let loaded = Expr {
            kind: ExprKind::Load {
                tensor: c.tensor,
                indices: global,
            },
            dtype: t.dtype,
        };
        if c.kind.local() {
            Stmt::LocalStore {
                local: id,
                index: flat(&offs),
                value: loaded,
            }
        } else {
            Stmt::SharedStore {
                shared: id,
                index: flat(&offs),
                value: loaded,
            }
        }
    };
    // No guard when the threads divide the tile; no loop for a single pass.
    let guarded = if elems % threads == 0 {
        vec![store]
    } else {
        vec![Stmt::If {
            guards: vec![Guard {
                value: e,
                extent: Index::c(elems),
            }],
            body: vec![store],
        }]
    };
    let copy = if iters == 1 {
        let zero = std::collections::HashMap::from([(it, Index::c(0))]);
        map_indices_stmts(guarded, &|ix| ix.subst(&zero))
    } else {
        vec![Stmt::Loop {
            var: it,
            extent: Index::c(iters),
            // A register tile needs constant indices: unrolled.
            unroll: iters <= 8 || c.kind.local(),
            body: guarded,
        }]
    };
    let (tensor, dtype, local) = (c.tensor, t.dtype, c.kind.local());
    // Offset in the tile of an access of the tensor (read or written).
    let offsets = |ix: &[Index]| -> Index { flat(&region_offsets(ix, &varying, &lo)) };
    let rewrite = |ex: &Expr| {
        replace_loads(ex, tensor, &|ix: &[Index]| {
            let kind = if local {
                ExprKind::Local {
                    local: id,
                    index: offsets(ix),
                }
            } else {
                ExprKind::Shared {
                    shared: id,
                    index: offsets(ix),
                }
            };
            Expr { kind, dtype }
        })
    };
    fn redirect(
        body: Vec<Stmt>,
        tensor: TensorId,
        id: u32,
        local: bool,
        offsets: &dyn Fn(&[Index]) -> Index,
    ) -> Vec<Stmt> {
        body.into_iter()
            .map(|s| match s {
                Stmt::Store {
                    tensor: t,
                    indices,
                    value,
                } if t == tensor && local => Stmt::LocalStore {
                    local: id,
                    index: offsets(&indices),
                    value,
                },
                Stmt::Store {
                    tensor: t,
                    indices,
                    value,
                } if t == tensor => Stmt::SharedStore {
                    shared: id,
                    index: offsets(&indices),
                    value,
                },
                other => other.map_bodies(&mut |b| redirect(b, tensor, id, local, offsets)),
            })
            .collect()
    }
    if c.kind.write() {
        // A register tile is copied out by its own thread: no barriers.
        let finish = |inner: Vec<Stmt>| {
            let mut v = redirect(inner, tensor, id, local, &offsets);
            if !local {
                v.push(Stmt::Barrier);
            }
            v.extend(copy.clone());
            v
        };
        if at_block {
            let (binds, rest): (Vec<Stmt>, Vec<Stmt>) = body
                .into_iter()
                .partition(|s| matches!(s, Stmt::Bind { .. }));
            let mut out = binds;
            out.extend(finish(rest));
            return Ok(out);
        }
        let mut wrap = |inner: Vec<Stmt>| {
            let mut v = finish(inner);
            // The next iteration writes the tile only after it has been copied out.
            if !local {
                v.push(Stmt::Barrier);
            }
            v
        };
        return Ok(at_loop(body, c.at, &mut wrap));
    }
    Ok(insert_fill(
        body,
        c.at,
        at_block,
        copy,
        &|inner| map_stmt_exprs(inner, &rewrite),
        !local,
    ))
}

/// The statements a tile or part placed at loop `at` serves: that loop's
/// body, or with `top` (a bound loop) everything after the binds.
fn scope_of(body: &[Stmt], at: VarId, top: bool) -> Option<Vec<Stmt>> {
    if top {
        return Some(
            body.iter()
                .filter(|s| !matches!(s, Stmt::Bind { .. }))
                .cloned()
                .collect(),
        );
    }
    let mut found = None;
    visit_stmts(body, &mut |s| {
        if let Stmt::Loop { var, body, .. } = s {
            if *var == at {
                found = Some(body.clone());
            }
        }
    });
    found
}

/// Puts `fill` first in the body of loop `at` (or, with `top`, first after
/// the binds), applies `rewrite` to what follows it there, and with `sync`
/// separates the two by a barrier, and one iteration of `at` from the next
/// by another, so nothing is overwritten while another thread still reads it.
fn insert_fill(
    body: Vec<Stmt>,
    at: VarId,
    top: bool,
    fill: Vec<Stmt>,
    rewrite: &dyn Fn(Vec<Stmt>) -> Vec<Stmt>,
    sync: bool,
) -> Vec<Stmt> {
    if top {
        let (binds, rest): (Vec<Stmt>, Vec<Stmt>) = body
            .into_iter()
            .partition(|s| matches!(s, Stmt::Bind { .. }));
        let mut out = binds;
        out.extend(fill);
        if sync {
            out.push(Stmt::Barrier);
        }
        out.extend(rewrite(rest));
        return out;
    }
    let mut wrap = |inner: Vec<Stmt>| {
        let mut v = fill.clone();
        if sync {
            v.push(Stmt::Barrier);
        }
        v.extend(rewrite(inner));
        if sync {
            v.push(Stmt::Barrier);
        }
        v
    };
    at_loop(body, at, &mut wrap)
}

/// Applies `f` to the body of loop `at`.
fn at_loop(body: Vec<Stmt>, at: VarId, f: &mut dyn FnMut(Vec<Stmt>) -> Vec<Stmt>) -> Vec<Stmt> {
    body.into_iter()
        .map(|s| match s {
            Stmt::Loop { var, .. } if var == at => s.map_bodies(f),
            other => other.map_bodies(&mut |b| at_loop(b, at, f)),
        })
        .collect()
}

/// Refuses to put barriers inside loop `at` when it runs under a guard that
/// depends on the thread: threads that skip it would never reach them.
fn divergence_check(
    body: &[Stmt],
    at: VarId,
    vars: &[LoopVar],
    err: &dyn Fn(String) -> Diagnostic,
) -> Result<(), Diagnostic> {
    let thread_dependent = |g: &Guard| {
        vars.iter().enumerate().any(|(i, lv)| {
            matches!(lv.kind, LoopKind::Bound(GpuAxis::Thread(_)))
                && g.value.uses_var(VarId(i as u32))
        })
    };
    if guards_around(body, at)
        .unwrap_or_default()
        .iter()
        .any(thread_dependent)
    {
        return Err(err(format!(
            "loop `{}` runs only in some threads (under a guard on a thread index), so the work-group cannot synchronise inside it",
            vars[at.0 as usize].name
        ))
        .hint("choose a loop outside the guarded part, or split so that the thread loops divide their extents"));
    }
    Ok(())
}

/// The guards of the `If`s around loop `at`, outermost first.
fn guards_around(body: &[Stmt], at: VarId) -> Option<Vec<Guard>> {
    for s in body {
        match s {
            Stmt::Loop { var, .. } if *var == at => return Some(Vec::new()),
            Stmt::Loop { body, .. } => {
                if let Some(g) = guards_around(body, at) {
                    return Some(g);
                }
            }
            Stmt::If { guards, body } => {
                if let Some(mut g) = guards_around(body, at) {
                    g.splice(0..0, guards.iter().cloned());
                    return Some(g);
                }
            }
            _ => {}
        }
    }
    None
}

/// Rewrites every index expression in statements (guards, indices, values).
fn map_indices_stmts(body: Vec<Stmt>, f: &impl Fn(&Index) -> Index) -> Vec<Stmt> {
    map_stmts(body, f, &|e: &Expr| e.map_indices(f))
}

/// Rewrites statements: index expressions with `fi`, stored values with `fe`.
fn map_stmts(
    body: Vec<Stmt>,
    fi: &impl Fn(&Index) -> Index,
    fe: &impl Fn(&Expr) -> Expr,
) -> Vec<Stmt> {
    let map_guards = |gs: Vec<Guard>| -> Vec<Guard> {
        gs.into_iter()
            .map(|g| Guard {
                value: fi(&g.value),
                extent: fi(&g.extent),
            })
            .collect()
    };
    body.into_iter()
        .map(|s| match s {
            Stmt::Store {
                tensor,
                indices,
                value,
            } => Stmt::Store {
                tensor,
                indices: indices.iter().map(fi).collect(),
                value: fe(&value),
            },
            Stmt::LocalStore {
                local,
                index,
                value,
            } => Stmt::LocalStore {
                local,
                index: fi(&index),
                value: fe(&value),
            },
            Stmt::SharedStore {
                shared,
                index,
                value,
            } => Stmt::SharedStore {
                shared,
                index: fi(&index),
                value: fe(&value),
            },
            Stmt::Loop {
                var,
                extent,
                unroll,
                body,
            } => Stmt::Loop {
                var,
                extent: fi(&extent),
                unroll,
                body: map_stmts(body, fi, fe),
            },
            Stmt::If { guards, body } => Stmt::If {
                guards: map_guards(guards),
                body: map_stmts(body, fi, fe),
            },
            Stmt::Unswitch { guards, fast, slow } => Stmt::Unswitch {
                guards: map_guards(guards),
                fast: map_stmts(fast, fi, fe),
                slow: map_stmts(slow, fi, fe),
            },
            // Listed, not `_`: a new statement kind must say what it maps.
            s @ (Stmt::Bind { .. } | Stmt::Barrier) => s,
        })
        .collect()
}

/// Vectorizes the loop over `v`: checks every access is contiguous along
/// `v` (only in the last dimension, with stride 1), then replaces the loop
/// by an unswitch: when the guards hold for the last lane they hold for all
/// (guard values grow with `v`), and the lanes run without guards, so LLVM
/// forms vector loads and stores; otherwise the guarded scalar loop runs.
fn vectorize(
    k: &Kernel,
    nest: &schedule::LoopNest,
    v: VarId,
    span: crate::diag::Span,
    body: Vec<Stmt>,
) -> Result<Vec<Stmt>, Diagnostic> {
    let name = &nest.var(v).name;
    let width = nest.var(v).extent.as_const().unwrap_or(1);
    let mut accesses: Vec<(TensorId, Vec<Index>)> = Vec::new();
    let mut inner: Vec<VarId> = Vec::new();
    let mut found = false;
    visit_stmts(&body, &mut |s| {
        if let Stmt::Loop { var, body, .. } = s {
            if *var == v {
                found = true;
                visit_stmts(body, &mut |s| {
                    if let Stmt::Store {
                        tensor, indices, ..
                    } = s
                    {
                        accesses.push((*tensor, indices.clone()));
                    }
                    if let Some(e) = stmt_exprs(s) {
                        e.visit_loads(&mut |t, ix| accesses.push((t, ix.to_vec())));
                    }
                    if let Stmt::Loop { var, .. } = s {
                        inner.push(*var);
                    }
                });
            }
        }
    });
    let mut problem = inner.first().map(|w| {
        format!(
            "loop `{}` runs inside `{name}`; only an innermost loop can be vectorized",
            nest.var(*w).name
        )
    });
    for (tensor, ix) in &accesses {
        for (d, x) in ix.iter().enumerate() {
            if !x.uses_var(v) {
                continue;
            }
            let contiguous = d + 1 == ix.len()
                && split_varying(x, &[v])
                    .is_some_and(|(c, _)| c.iter().map(|(_, k)| k).sum::<i64>() == 1);
            if !contiguous && problem.is_none() {
                problem = Some(format!("`{}` is accessed along dimension {d} with a stride other than 1 as `{name}` advances", k.tensor(*tensor).name));
            }
        }
    }
    if let Some(p) = problem {
        return Err(
            Diagnostic::new(span, format!("cannot vectorize `{name}`: {p}")).hint(
                "vectorize the loop that walks the last dimension of every tensor it touches",
            ),
        );
    }
    if !found {
        return Ok(body);
    }
    fn strip(body: Vec<Stmt>, guards: &mut Vec<Guard>) -> Vec<Stmt> {
        let mut out = Vec::new();
        for s in body {
            match s {
                Stmt::If { guards: g, body } => {
                    guards.extend(g);
                    out.extend(strip(body, guards));
                }
                other => out.push(other),
            }
        }
        out
    }
    fn rewrite(body: Vec<Stmt>, v: VarId, width: i64) -> Vec<Stmt> {
        body.into_iter()
            .map(|s| match s {
                Stmt::Loop {
                    var,
                    extent,
                    unroll,
                    body,
                } if var == v => {
                    let mut guards = Vec::new();
                    let fast = strip(body.clone(), &mut guards);
                    let last = std::collections::HashMap::from([(v, Index::c(width - 1))]);
                    let lane_guards: Vec<Guard> = guards
                        .iter()
                        .map(|g| Guard {
                            value: g.value.subst(&last),
                            extent: g.extent.clone(),
                        })
                        .collect();
                    let slow = vec![Stmt::Loop {
                        var,
                        extent: extent.clone(),
                        unroll,
                        body,
                    }];
                    if lane_guards.is_empty() {
                        return Stmt::Loop {
                            var,
                            extent,
                            unroll,
                            body: fast,
                        };
                    }
                    Stmt::Unswitch {
                        guards: lane_guards,
                        fast: vec![Stmt::Loop {
                            var,
                            extent,
                            unroll,
                            body: fast,
                        }],
                        slow,
                    }
                }
                other => other.map_bodies(&mut |b| rewrite(b, v, width)),
            })
            .collect()
    }
    Ok(rewrite(body, v, width))
}
