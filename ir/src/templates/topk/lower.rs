//! The work-group top-k of a stage scheduled with `topk(c, threads=T,
//! per=P)` (see [`crate::schedule::steps::topk`]), built in place of the
//! `nest` pass: one work-group per row (the stage's other axes but the
//! last fused onto blockIdx.x).
//!
//! Elements are ranked by their i64 keys ([`crate::kernel::TopK`]), so
//! every comparison is one integer `max`/`min` and ties cannot happen.
//! Thread t keeps the K best keys it has seen sorted in registers (K is
//! k rounded up to a power of two, padded with `i64::MIN`): per step it
//! loads P elements `T` apart (a warp's loads are consecutive) and
//! inserts each with K max/min pairs. Then the lists meet in a tree
//! through LDS: at each step thread t takes the list of thread t + s,
//! keeps the elementwise maximum of its list and the other reversed (a
//! bitonic sequence holding the K best of both) and sorts it with K/2 ·
//! log2 K compare-exchanges; no index depends on data, so the lists stay
//! in registers. Work is linear in the row, and the tree has log2 T
//! barriers.

use crate::diag::Diagnostic;
use crate::index::{IOp, Index, VarId};
use crate::kernel::{BinOp, Expr, ExprKind, TopK};
use crate::lower::{inline_producers, Local, Lowering, Stmt};
use crate::schedule::{Dim, GpuAxis, GroupPlan, Guard, LoopKind, LoopVar};
use crate::DType;
use std::collections::HashMap;

/// The registers and LDS arrays, by index.
const LIST: u32 = 0;
const ELEM: u32 = 1;
const CARRY: u32 = 2;
const TMP: u32 = 3;
const MERGED: u32 = 4;

/// Writing the statements, with the work-group's shape.
struct Emit {
    /// Threads, elements per thread and step, list length (k rounded up).
    t_n: i64,
    p_n: i64,
    kk: i64,
    tv: Index,
}

fn key(kind: ExprKind) -> Expr {
    Expr {
        kind,
        dtype: DType::I64,
    }
}

fn reg(a: u32, ix: Index) -> Expr {
    key(ExprKind::Local {
        local: a,
        index: ix,
    })
}

fn set(a: u32, ix: Index, value: Expr) -> Stmt {
    Stmt::LocalStore {
        local: a,
        index: ix,
        value,
    }
}

fn op(o: BinOp, a: Expr, b: Expr) -> Expr {
    key(ExprKind::Binary(o, Box::new(a), Box::new(b)))
}

fn lt(value: Index, extent: Index) -> Guard {
    Guard { value, extent }
}

/// One step of insertion into the sorted list: the carried element takes
/// position `s` if larger, and the smaller of the two moves on.
fn insert(s: VarId) -> Vec<Stmt> {
    let zero = Index::c(0);
    vec![
        set(TMP, zero.clone(), reg(LIST, Index::Var(s))),
        set(
            LIST,
            Index::Var(s),
            op(BinOp::Max, reg(CARRY, zero.clone()), reg(TMP, zero.clone())),
        ),
        set(
            CARRY,
            zero.clone(),
            op(BinOp::Min, reg(CARRY, zero.clone()), reg(TMP, zero.clone())),
        ),
    ]
}

/// The top-k's kernel, where the stage is a top-k scheduled with
/// `topk(...)` (see [`crate::lower::Templates::build`]).
pub(crate) fn lowering(l: &mut Lowering) -> Option<Result<(), Diagnostic>> {
    let plan = l.nest.topk?;
    let t = l.k.stage(l.sid).topk()?.clone();
    Some(build(l, &t, plan))
}

fn build(l: &mut Lowering, t: &TopK, plan: GroupPlan) -> Result<(), Diagnostic> {
    let stage = l.k.stage(l.sid);
    let red = stage.reduce().expect("a top-k is a reduction");
    let n = stage.axes.len();
    let e = Emit {
        t_n: i64::from(plan.threads),
        p_n: i64::from(plan.per),
        kk: i64::from(t.k.next_power_of_two()),
        tv: Index::Var(VarId(0)),
    };
    let mut var = |name: &str, extent: Index, kind: LoopKind| {
        let v = VarId(l.g.vars.len() as u32);
        let lv = LoopVar {
            name: format!("topk.{name}"),
            reduce: false,
            extent,
            kind,
            span: plan.span,
        };
        l.g.vars.push(lv.clone());
        l.nest.vars.push(lv);
        v
    };
    let rows = stage.axes[..n - 1]
        .iter()
        .fold(Index::c(1), |acc, a| acc * a.extent.clone());
    let b = var("row", rows.clone(), LoopKind::Bound(GpuAxis::Block(Dim::X)));
    let tv = var(
        "t",
        Index::c(e.t_n),
        LoopKind::Bound(GpuAxis::Thread(Dim::X)),
    );
    let e = Emit {
        tv: Index::Var(tv),
        ..e
    };
    let len = red.axes[0].extent.clone();
    let chunks = Index::bin(IOp::CeilDiv, len.clone(), Index::c(e.t_n * e.p_n));
    let chunk = var("chunk", chunks, LoopKind::Serial);
    let v = var("v", Index::c(e.p_n), LoopKind::Unrolled);
    let s = var("s", Index::c(e.kk), LoopKind::Unrolled);
    let half = var("half", Index::c(e.kk / 2), LoopKind::Unrolled);
    let jo = var(
        "out",
        Index::c((i64::from(t.k) + e.t_n - 1) / e.t_n),
        LoopKind::Serial,
    );

    // The other axes decoded from the row (row-major).
    let rows_axes: Vec<usize> = (0..n - 1).collect();
    let at = crate::lower::decode_axes(stage, &rows_axes, Index::Var(b));
    let pos = Index::Var(chunk) * Index::c(e.t_n * e.p_n)
        + Index::Var(v) * Index::c(e.t_n)
        + Index::Var(tv);
    let mut elem_at = at.clone();
    elem_at.insert(VarId(n as u32), pos.clone());
    elem_at.insert(VarId(n as u32 - 1), Index::c(0));
    let body = inline_producers(l.k, l.sid, &red.body).map_indices(&|ix| ix.subst(&elem_at));

    let local = |name: &str, len: i64| Local {
        name: format!("{}_{name}", stage.name),
        dtype: DType::I64,
        len: len as u32,
        span: plan.span,
    };
    l.g.locals = vec![
        local("list", e.kk),
        local("elem", e.p_n),
        local("carry", 1),
        local("tmp", 1),
        local("merged", e.kk),
    ];
    l.g.shared = vec![local("lists", e.t_n * e.kk)];
    let min = key(ExprKind::Int(i64::MIN));
    let zero = Index::c(0);

    // Each thread's list of the elements it loads.
    let load = vec![
        set(ELEM, Index::Var(v), min.clone()),
        Stmt::If {
            guards: vec![lt(pos, len)],
            body: vec![set(ELEM, Index::Var(v), body)],
        },
    ];
    let step = vec![
        Stmt::Loop {
            var: v,
            extent: Index::c(e.p_n),
            unroll: true,
            body: load,
        },
        Stmt::Loop {
            var: v,
            extent: Index::c(e.p_n),
            unroll: true,
            body: vec![
                set(CARRY, zero.clone(), reg(ELEM, Index::Var(v))),
                e.each(s, insert(s)),
            ],
        },
    ];
    let mut body = vec![
        Stmt::Bind {
            var: b,
            axis: GpuAxis::Block(Dim::X),
        },
        Stmt::Bind {
            var: tv,
            axis: GpuAxis::Thread(Dim::X),
        },
        e.each(s, vec![set(LIST, Index::Var(s), min)]),
        Stmt::Loop {
            var: chunk,
            extent: Index::bin(
                IOp::CeilDiv,
                red.axes[0].extent.clone(),
                Index::c(e.t_n * e.p_n),
            ),
            unroll: false,
            body: step,
        },
        e.each(
            s,
            vec![Stmt::SharedStore {
                shared: 0,
                index: e.slot(e.tv.clone(), Index::Var(s)),
                value: reg(LIST, Index::Var(s)),
            }],
        ),
        Stmt::Barrier,
    ];
    body.extend(e.tree(s, half));
    body.push(e.results(t, &at, jo, n));
    l.g.block = [plan.threads, 1, 1];
    l.g.grid = [rows, Index::c(1), Index::c(1)];
    l.g.body = body;
    l.tid = e.tv;
    Ok(())
}

impl Emit {
    /// `body` for each of the K list positions `s`, unrolled.
    fn each(&self, s: VarId, body: Vec<Stmt>) -> Stmt {
        Stmt::Loop {
            var: s,
            extent: Index::c(self.kk),
            unroll: true,
            body,
        }
    }

    /// Thread `t`'s list position `s` in LDS.
    fn slot(&self, t: Index, s: Index) -> Index {
        t * Index::c(self.kk) + s
    }

    fn lds(&self, ix: Index) -> Expr {
        key(ExprKind::Shared {
            shared: 0,
            index: ix,
        })
    }

    /// The tree: at each step, threads below `step` merge the list of the
    /// thread `step` above into theirs, and publish it.
    fn tree(&self, s: VarId, half: VarId) -> Vec<Stmt> {
        let mut out = Vec::new();
        let mut step = self.t_n / 2;
        while step >= 1 {
            let partner = self.tv.clone() + Index::c(step);
            let rev = Index::c(self.kk - 1) - Index::Var(s);
            let mut merge = vec![self.each(
                s,
                vec![set(
                    MERGED,
                    Index::Var(s),
                    op(
                        BinOp::Max,
                        reg(LIST, Index::Var(s)),
                        self.lds(self.slot(partner, rev)),
                    ),
                )],
            )];
            merge.extend(self.bitonic(half));
            merge.push(self.each(
                s,
                vec![
                    set(LIST, Index::Var(s), reg(MERGED, Index::Var(s))),
                    Stmt::SharedStore {
                        shared: 0,
                        index: self.slot(self.tv.clone(), Index::Var(s)),
                        value: reg(MERGED, Index::Var(s)),
                    },
                ],
            ));
            out.push(Stmt::If {
                guards: vec![lt(self.tv.clone(), Index::c(step))],
                body: merge,
            });
            out.push(Stmt::Barrier);
            step /= 2;
        }
        out
    }

    /// Sorts the bitonic `merged` list, largest first: for each distance
    /// d = K/2 .. 1, the pairs (i, i + d) with i's bit d clear.
    fn bitonic(&self, half: VarId) -> Vec<Stmt> {
        let zero = Index::c(0);
        let mut out = Vec::new();
        let mut d = self.kk / 2;
        while d >= 1 {
            let h = Index::Var(half);
            let i = Index::bin(IOp::Div, h.clone(), Index::c(d)) * Index::c(2 * d)
                + Index::bin(IOp::Mod, h, Index::c(d));
            let j = i.clone() + Index::c(d);
            out.push(Stmt::Loop {
                var: half,
                extent: Index::c(self.kk / 2),
                unroll: true,
                body: vec![
                    set(TMP, zero.clone(), reg(MERGED, i.clone())),
                    set(
                        MERGED,
                        i,
                        op(BinOp::Max, reg(TMP, zero.clone()), reg(MERGED, j.clone())),
                    ),
                    set(
                        MERGED,
                        j.clone(),
                        op(BinOp::Min, reg(TMP, zero.clone()), reg(MERGED, j)),
                    ),
                ],
            });
            d /= 2;
        }
        out
    }

    /// The k results from thread 0's list (published in LDS), stored by
    /// the threads together: result j by thread j % T.
    fn results(&self, t: &TopK, at: &HashMap<VarId, Index>, jo: VarId, n: usize) -> Stmt {
        let j = Index::Var(jo) * Index::c(self.t_n) + self.tv.clone();
        let mut at = at.clone();
        at.insert(VarId(n as u32 - 1), j.clone());
        let indices: Vec<Index> = (0..n).map(|d| at[&VarId(d as u32)].clone()).collect();
        let got = self.lds(j.clone());
        let stores = t
            .outputs
            .iter()
            .zip(&t.epilogues)
            .map(|(out, ep)| Stmt::Store {
                tensor: *out,
                indices: indices.clone(),
                value: ep.replace_reduced(&got),
            })
            .collect();
        Stmt::Loop {
            var: jo,
            extent: Index::c((i64::from(t.k) + self.t_n - 1) / self.t_n),
            unroll: false,
            body: vec![Stmt::If {
                guards: vec![lt(j, Index::c(i64::from(t.k)))],
                body: stores,
            }],
        }
    }
}
