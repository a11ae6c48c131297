//! The work-group scan of a stage scheduled with `scan(c, threads=T,
//! per=P)` (see [`crate::schedule::steps::scan`]), built in place of the
//! `nest` pass: one work-group per row of the scanned axis (the other axes
//! fused onto blockIdx.x), the row walked in chunks of T·P elements.
//!
//! Per chunk, thread t takes elements `chunk·T·P + t·P + v` (v < P): it
//! folds them in registers, keeping each element's prefix within the
//! thread; the threads' totals are scanned in LDS (Hillis–Steele: a read,
//! a barrier, a write, a barrier per step, log2 T steps); each thread's
//! offset is the carry of the chunks before, combined with the totals of
//! the threads before it. Work is linear in the row; the tree's barriers
//! are the only ones besides one per chunk.
//!
//! With `chunks=S` a row is split into parts of S chunks, one work-group
//! each (blockIdx.y), in three kernels ([`ScanPart`]): each part's total
//! goes to the output at the next part's first element; one work-group
//! per row scans those totals in place; each part is then scanned from
//! the carry it finds at its first element (read before any thread of the
//! part writes), which its own result overwrites. No work-group reads
//! another's elements while it writes them.

use crate::diag::Diagnostic;
use crate::index::{IOp, Index, VarId};
use crate::kernel::{Expr, ExprKind, Kernel, Scan, StageId};
use crate::lower::{inline_producers, Given, GpuKernel, Local, Lowering, Stmt};
use crate::schedule::{Dim, GpuAxis, GroupPlan, Guard, LoopKind, LoopVar, ScanPart};

/// The scan's loops and what it computes in them.
struct Region {
    /// The row (blockIdx.x), thread, chunk and per-thread element loops.
    b: VarId,
    t: VarId,
    chunk: VarId,
    v: VarId,
    rows: Index,
    /// A split row's part loop (blockIdx.x; the row is then blockIdx.y).
    part_var: Option<VarId>,
    /// That part, the number of parts, and the output's indices of the
    /// next part's first element.
    part: Option<(Index, Index, Vec<Index>)>,
    /// The scanned axis's length, and the chunks it is walked in.
    len: Index,
    chunks: Index,
    /// The element's position in the row.
    pos: Index,
    /// The scanned element, the stage's value and its output indices.
    body: Expr,
    value: Expr,
    indices: Vec<Index>,
}

/// The scan's kernel, where the stage is a scan scheduled with `scan(...)`
/// (see [`crate::lower::Templates::build`]).
pub(crate) fn lowering(l: &mut Lowering) -> Option<Result<(), Diagnostic>> {
    let scan = l.k.stage(l.sid).reduce().and_then(|r| r.scan())?;
    let plan = l.nest.scan?;
    Some(build(l, scan, plan))
}

fn build(l: &mut Lowering, scan: Scan, plan: GroupPlan) -> Result<(), Diagnostic> {
    let stage = l.k.stage(l.sid);
    let r = region(l, &scan, &plan);
    let dt = r.body.dtype;
    let local = |name: &str, len: i64| Local {
        name: format!("{}_{name}", stage.name),
        dtype: dt,
        len: len as u32,
        span: plan.span,
    };
    let (t_n, p_n) = (i64::from(plan.threads), i64::from(plan.per));
    // x: the elements, ex: their prefixes, then run, tmp, off, carry.
    l.g.locals = vec![
        local("x", p_n),
        local("prefix", p_n),
        local("run", 1),
        local("tmp", 1),
        local("off", 1),
        local("carry", 1),
    ];
    l.g.shared = vec![local("totals", t_n)];
    let e = Emit {
        dt,
        op: scan.op,
        t_n,
        p_n,
        tv: Index::Var(r.t),
        vi: Index::Var(r.v),
    };
    let identity = scan.op.identity(dt);
    let zero = Index::c(0);
    l.g.block = [plan.threads, 1, 1];
    l.g.grid = [r.rows.clone(), Index::c(1), Index::c(1)];
    let mut body = vec![Stmt::Bind {
        var: r.b,
        axis: GpuAxis::Block(Dim::X),
    }];
    if let (Some(v), Some((_, parts, _))) = (r.part_var, &r.part) {
        l.g.grid = [parts.clone(), r.rows.clone(), Index::c(1)];
        body = vec![
            Stmt::Bind {
                var: v,
                axis: GpuAxis::Block(Dim::X),
            },
            Stmt::Bind {
                var: r.b,
                axis: GpuAxis::Block(Dim::Y),
            },
        ];
    }
    body.extend([
        Stmt::Bind {
            var: r.t,
            axis: GpuAxis::Thread(Dim::X),
        },
        e.set(CARRY, zero.clone(), identity),
    ]);
    match (plan.part, &r.part) {
        (ScanPart::Totals, Some((p, parts, next))) => {
            body.extend(e.totals(&r, stage.output, p, parts, next));
        }
        (part, _) => {
            if let (ScanPart::Main, Some((p, parts, _))) = (part, &r.part) {
                body.push(e.carry_in(&r, stage.output, p, parts));
            }
            let mut per_chunk = e.fold(&r, scan.exclusive && part == ScanPart::Main);
            per_chunk.extend(e.tree());
            per_chunk.extend(e.finish(&r, stage.output));
            body.push(Stmt::Loop {
                var: r.chunk,
                extent: r.chunks.clone(),
                unroll: false,
                body: per_chunk,
            });
        }
    }
    l.g.body = body;
    l.tid = e.tv;
    Ok(())
}

/// The kernels a scan split over work-groups (`chunks=S`) launches before
/// its main one: the parts' totals, then their scan (the carries).
pub(crate) fn split_parts(
    k: &Kernel,
    sid: StageId,
    given: Given,
) -> Result<Vec<GpuKernel>, Diagnostic> {
    let st = k.stage(sid);
    let split = st.reduce().is_some_and(|r| r.scan().is_some())
        && st
            .nest
            .as_ref()
            .and_then(|n| n.scan)
            .is_some_and(|p| p.chunks.is_some());
    if !split {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for (part, suffix) in [(ScanPart::Totals, "totals"), (ScanPart::Carries, "carries")] {
        let mut k2 = k.clone();
        let plan = k2.stages[sid.0 as usize]
            .nest
            .as_mut()
            .and_then(|n| n.scan.as_mut())
            .expect("checked above");
        plan.part = part;
        let mut g = crate::lower::lower_stage(&k2, sid, given)?;
        g.name = format!("{}_{suffix}", g.name);
        out.push(g);
    }
    Ok(out)
}

/// The scan's loop variables, and the stage's element, value and output
/// indices in them.
fn region(l: &mut Lowering, scan: &Scan, plan: &GroupPlan) -> Region {
    let (k, sid) = (l.k, l.sid);
    let stage = k.stage(sid);
    let red = stage.reduce().expect("a scan is a reduction");
    let (t_n, p_n) = (i64::from(plan.threads), i64::from(plan.per));
    let n = stage.axes.len();
    let mut var = |name: String, extent: Index, kind: LoopKind| {
        let v = VarId(l.g.vars.len() as u32);
        let lv = LoopVar {
            name,
            reduce: false,
            extent,
            kind,
            span: plan.span,
        };
        l.g.vars.push(lv.clone());
        l.nest.vars.push(lv);
        v
    };
    let others: Vec<usize> = (0..n).filter(|d| *d != scan.axis).collect();
    let rows = others
        .iter()
        .fold(Index::c(1), |acc, d| acc * stage.axes[*d].extent.clone());
    let row_len = stage.axes[scan.axis].extent.clone();
    let tp = t_n * p_n;
    // A split row: parts of `span` elements, and how many.
    let span = plan.chunks.map(|s| tp * i64::from(s));
    let parts = span.map(|w| Index::bin(IOp::CeilDiv, row_len.clone(), Index::c(w)));
    let carries = plan.part == ScanPart::Carries;
    let split = parts.clone().filter(|_| !carries);
    // A split row's parts on blockIdx.x (a long row has many), its rows
    // on blockIdx.y (at most 65,535 on NVIDIA: splitting is for few rows).
    let b = var(
        "scan.row".into(),
        rows.clone(),
        LoopKind::Bound(GpuAxis::Block(if split.is_some() {
            Dim::Y
        } else {
            Dim::X
        })),
    );
    let part = split.as_ref().map(|p| {
        let v = var(
            "scan.part".into(),
            p.clone(),
            LoopKind::Bound(GpuAxis::Block(Dim::X)),
        );
        (Index::Var(v), p.clone(), v)
    });
    let row = Index::Var(b);
    let t = var(
        "scan.t".into(),
        Index::c(t_n),
        LoopKind::Bound(GpuAxis::Thread(Dim::X)),
    );
    // What the chunks walk: the row (or a part of it), or the carries.
    let len = match (&parts, carries) {
        (Some(p), true) => Index::bin(IOp::Max, p.clone() - Index::c(1), Index::c(0)),
        _ => row_len.clone(),
    };
    let chunks = match (plan.chunks, carries) {
        (Some(s), false) => Index::c(i64::from(s)),
        _ => Index::bin(IOp::CeilDiv, len.clone(), Index::c(tp)),
    };
    let chunk = var("scan.chunk".into(), chunks.clone(), LoopKind::Serial);
    let v = var("scan.v".into(), Index::c(p_n), LoopKind::Unrolled);

    // Axis values: the other axes decoded from the row (row-major), the
    // scanned one the element's position.
    let mut pos = Index::Var(chunk) * Index::c(tp) + Index::Var(t) * Index::c(p_n) + Index::Var(v);
    if let (Some((p, _, _)), Some(w)) = (&part, span) {
        pos = p.clone() * Index::c(w) + pos;
    }
    let mut at = crate::lower::decode_axes(stage, &others, row);
    let indices_at = |at: &std::collections::HashMap<VarId, Index>| -> Vec<Index> {
        (0..n).map(|d| at[&VarId(d as u32)].clone()).collect()
    };
    let (body, value, indices) = match (span, carries) {
        (Some(w), true) => {
            // The carries: the totals at each part's first element but the
            // first part's, scanned in place.
            at.insert(
                VarId(scan.axis as u32),
                (pos.clone() + Index::c(1)) * Index::c(w),
            );
            let indices = indices_at(&at);
            let t = stage.value.dtype;
            let body = Expr {
                kind: ExprKind::Load {
                    tensor: stage.output,
                    indices: indices.clone(),
                },
                dtype: t,
            };
            let value = Expr {
                kind: ExprKind::Reduced,
                dtype: t,
            };
            (body, value, indices)
        }
        _ => {
            at.insert(VarId(scan.axis as u32), pos.clone());
            let mut elem_at = at.clone();
            elem_at.insert(VarId(n as u32), pos.clone());
            let body = inline_producers(k, sid, &red.body).map_indices(&|ix| ix.subst(&elem_at));
            let value = inline_producers(k, sid, &stage.value).map_indices(&|ix| ix.subst(&at));
            (body, value, indices_at(&at))
        }
    };
    // The output's indices of the next part's first element.
    let part_var = part.as_ref().map(|p| p.2);
    let part = part.map(|(p, count, _)| {
        let w = span.expect("a split row");
        let mut next = at.clone();
        next.insert(
            VarId(scan.axis as u32),
            (p.clone() + Index::c(1)) * Index::c(w),
        );
        (p, count, indices_at(&next))
    });

    Region {
        b,
        t,
        chunk,
        v,
        rows,
        part_var,
        part,
        len,
        chunks,
        pos,
        body,
        value,
        indices,
    }
}

/// The scan's registers (`x` the elements, `prefix` their prefixes).
const X: u32 = 0;
const PRE: u32 = 1;
const RUN: u32 = 2;
const TMP: u32 = 3;
const OFF: u32 = 4;
const CARRY: u32 = 5;

/// Writing the statements of one chunk.
struct Emit {
    dt: crate::DType,
    op: crate::kernel::ReduceOp,
    t_n: i64,
    p_n: i64,
    /// This thread, and its element's index in its registers.
    tv: Index,
    vi: Index,
}

impl Emit {
    fn reg(&self, a: u32, ix: Index) -> Expr {
        Expr {
            kind: ExprKind::Local {
                local: a,
                index: ix,
            },
            dtype: self.dt,
        }
    }

    fn lds(&self, ix: Index) -> Expr {
        Expr {
            kind: ExprKind::Shared {
                shared: 0,
                index: ix,
            },
            dtype: self.dt,
        }
    }

    fn set(&self, a: u32, ix: Index, value: Expr) -> Stmt {
        Stmt::LocalStore {
            local: a,
            index: ix,
            value,
        }
    }

    fn op(&self, a: Expr, b: Expr) -> Expr {
        Expr {
            kind: ExprKind::Binary(self.op.combine(), Box::new(a), Box::new(b)),
            dtype: self.dt,
        }
    }

    /// t >= s, as a guard: T - 1 - t < T - s.
    fn from(&self, s: i64) -> Guard {
        Guard {
            value: Index::c(self.t_n - 1) - self.tv.clone(),
            extent: Index::c(self.t_n - s),
        }
    }

    /// Each thread folds its P elements in registers, keeping each one's
    /// prefix within the thread, and publishes its total in LDS.
    fn fold(&self, r: &Region, exclusive: bool) -> Vec<Stmt> {
        let (zero, vi) = (Index::c(0), &self.vi);
        let identity = self.op.identity(self.dt);
        let in_row = Guard {
            value: r.pos.clone(),
            extent: r.len.clone(),
        };
        let mut fold = vec![
            self.set(X, vi.clone(), identity.clone()),
            Stmt::If {
                guards: vec![in_row],
                body: vec![self.set(X, vi.clone(), r.body.clone())],
            },
        ];
        let step = self.set(
            RUN,
            zero.clone(),
            self.op(self.reg(RUN, zero.clone()), self.reg(X, vi.clone())),
        );
        let keep = self.set(PRE, vi.clone(), self.reg(RUN, zero.clone()));
        if exclusive {
            fold.extend([keep, step]);
        } else {
            fold.extend([step, keep]);
        }
        vec![
            self.set(RUN, zero.clone(), identity),
            Stmt::Loop {
                var: r.v,
                extent: Index::c(self.p_n),
                unroll: true,
                body: fold,
            },
            Stmt::SharedStore {
                shared: 0,
                index: self.tv.clone(),
                value: self.reg(RUN, zero),
            },
            Stmt::Barrier,
        ]
    }

    /// A split scan's first kernel: each thread folds its elements of
    /// every chunk of the part, the work-group combines the threads'
    /// totals, and the first thread stores the part's total at the next
    /// part's first element (`next`), where the carries' scan finds it.
    fn totals(
        &self,
        r: &Region,
        output: crate::TensorId,
        part: &Index,
        parts: &Index,
        next: &[Index],
    ) -> Vec<Stmt> {
        let mut out = vec![
            Stmt::Loop {
                var: r.chunk,
                extent: r.chunks.clone(),
                unroll: false,
                body: self.accumulate(r),
            },
            Stmt::SharedStore {
                shared: 0,
                index: self.tv.clone(),
                value: self.reg(CARRY, Index::c(0)),
            },
            Stmt::Barrier,
        ];
        out.extend(self.tree());
        out.push(Stmt::If {
            guards: vec![
                Guard {
                    value: self.tv.clone(),
                    extent: Index::c(1),
                },
                Guard {
                    value: part.clone() + Index::c(1),
                    extent: parts.clone(),
                },
            ],
            body: vec![Stmt::Store {
                tensor: output,
                indices: next.to_vec(),
                value: self.lds(Index::c(self.t_n - 1)),
            }],
        });
        out
    }

    /// A split scan's main kernel, but its first part: the carry into the
    /// part waits at its first element, read by every thread before the
    /// first chunk's barrier, so before any of them writes there.
    fn carry_in(&self, r: &Region, output: crate::TensorId, part: &Index, parts: &Index) -> Stmt {
        let zero = Index::c(0);
        let at_start: std::collections::HashMap<VarId, Index> = [
            (r.chunk, zero.clone()),
            (r.v, zero.clone()),
            (r.t, zero.clone()),
        ]
        .into_iter()
        .collect();
        let first = r.indices.iter().map(|ix| ix.subst(&at_start)).collect();
        // part > 0, as `parts - 1 - part < parts - 1`.
        Stmt::If {
            guards: vec![Guard {
                value: parts.clone() - Index::c(1) - part.clone(),
                extent: parts.clone() - Index::c(1),
            }],
            body: vec![self.set(
                CARRY,
                zero,
                Expr {
                    kind: ExprKind::Load {
                        tensor: output,
                        indices: first,
                    },
                    dtype: self.dt,
                },
            )],
        }
    }

    /// Each thread folds its P elements of one chunk into its carry
    /// (a split scan's totals: no prefixes are kept).
    fn accumulate(&self, r: &Region) -> Vec<Stmt> {
        let zero = Index::c(0);
        let in_row = Guard {
            value: r.pos.clone(),
            extent: r.len.clone(),
        };
        vec![Stmt::Loop {
            var: r.v,
            extent: Index::c(self.p_n),
            unroll: true,
            body: vec![Stmt::If {
                guards: vec![in_row],
                body: vec![self.set(
                    CARRY,
                    zero.clone(),
                    self.op(self.reg(CARRY, zero), r.body.clone()),
                )],
            }],
        }]
    }

    /// The threads' totals scanned in LDS (Hillis-Steele: a read, a
    /// barrier, a write, a barrier per step).
    fn tree(&self) -> Vec<Stmt> {
        let (zero, tv) = (Index::c(0), &self.tv);
        let mut out = Vec::new();
        let mut s = 1;
        while s < self.t_n {
            out.extend([
                self.set(TMP, zero.clone(), self.lds(tv.clone())),
                Stmt::If {
                    guards: vec![self.from(s)],
                    body: vec![self.set(
                        TMP,
                        zero.clone(),
                        self.op(
                            self.lds(tv.clone() - Index::c(s)),
                            self.reg(TMP, zero.clone()),
                        ),
                    )],
                },
                Stmt::Barrier,
                Stmt::SharedStore {
                    shared: 0,
                    index: tv.clone(),
                    value: self.reg(TMP, zero.clone()),
                },
                Stmt::Barrier,
            ]);
            s *= 2;
        }
        out
    }

    /// Each thread's offset (the carry of the chunks before, combined with
    /// the totals of the threads before it), the stores of its elements'
    /// results, and the next chunk's carry.
    fn finish(&self, r: &Region, output: crate::TensorId) -> Vec<Stmt> {
        let (zero, tv, vi) = (Index::c(0), &self.tv, &self.vi);
        let result = self.op(self.reg(OFF, zero.clone()), self.reg(PRE, vi.clone()));
        let in_row = Guard {
            value: r.pos.clone(),
            extent: r.len.clone(),
        };
        vec![
            self.set(OFF, zero.clone(), self.reg(CARRY, zero.clone())),
            Stmt::If {
                guards: vec![self.from(1)],
                body: vec![self.set(
                    OFF,
                    zero.clone(),
                    self.op(
                        self.reg(CARRY, zero.clone()),
                        self.lds(tv.clone() - Index::c(1)),
                    ),
                )],
            },
            Stmt::Loop {
                var: r.v,
                extent: Index::c(self.p_n),
                unroll: true,
                body: vec![Stmt::If {
                    guards: vec![in_row],
                    body: vec![Stmt::Store {
                        tensor: output,
                        indices: r.indices.clone(),
                        value: r.value.replace_reduced(&result),
                    }],
                }],
            },
            self.set(
                CARRY,
                zero.clone(),
                self.op(self.reg(CARRY, zero), self.lds(Index::c(self.t_n - 1))),
            ),
            // The next chunk's totals overwrite these.
            Stmt::Barrier,
        ]
    }
}
