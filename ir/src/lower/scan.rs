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

use super::{inline_producers, Local, Lowering, Stmt};
use crate::diag::Diagnostic;
use crate::index::{IOp, Index, VarId};
use crate::kernel::{Expr, ExprKind, Scan};
use crate::schedule::{Dim, GpuAxis, Guard, LoopKind, LoopVar, ScanPlan};
use std::collections::HashMap;

pub(super) fn build(l: &mut Lowering, scan: Scan, plan: ScanPlan) -> Result<(), Diagnostic> {
    let (k, sid) = (l.k, l.sid);
    let stage = k.stage(sid);
    let red = stage.reduce.as_ref().expect("a scan is a reduction");
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
    let b = var(
        "scan.row".into(),
        rows.clone(),
        LoopKind::Bound(GpuAxis::Block(Dim::X)),
    );
    let t = var(
        "scan.t".into(),
        Index::c(t_n),
        LoopKind::Bound(GpuAxis::Thread(Dim::X)),
    );
    let len = stage.axes[scan.axis].extent.clone();
    let chunks = Index::bin(IOp::CeilDiv, len.clone(), Index::c(t_n * p_n));
    let chunk = var("scan.chunk".into(), chunks.clone(), LoopKind::Serial);
    let v = var("scan.v".into(), Index::c(p_n), LoopKind::Unrolled);

    // Axis values: the other axes decoded from the row (row-major), the
    // scanned one the element's position.
    let pos =
        Index::Var(chunk) * Index::c(t_n * p_n) + Index::Var(t) * Index::c(p_n) + Index::Var(v);
    let mut at: HashMap<VarId, Index> = HashMap::new();
    let mut rest = Index::Var(b);
    for d in others.iter().rev() {
        let e = stage.axes[*d].extent.clone();
        at.insert(
            VarId(*d as u32),
            Index::bin(IOp::Mod, rest.clone(), e.clone()),
        );
        rest = Index::bin(IOp::Div, rest, e);
    }
    at.insert(VarId(scan.axis as u32), pos.clone());
    let mut elem_at = at.clone();
    elem_at.insert(VarId(n as u32), pos.clone());
    let body = inline_producers(k, sid, &red.body).map_indices(&|ix| ix.subst(&elem_at));
    let value = inline_producers(k, sid, &stage.value).map_indices(&|ix| ix.subst(&at));
    let indices: Vec<Index> = (0..n).map(|d| at[&VarId(d as u32)].clone()).collect();

    let dt = body.dtype;
    let local = |name: &str, len: i64| Local {
        name: format!("{}_{name}", stage.name),
        dtype: dt,
        len: len as u32,
        span: plan.span,
    };
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
    let reg = |a: u32, ix: Index| Expr {
        kind: ExprKind::Local {
            local: a,
            index: ix,
        },
        dtype: dt,
    };
    let lds = |ix: Index| Expr {
        kind: ExprKind::Shared {
            shared: 0,
            index: ix,
        },
        dtype: dt,
    };
    let set = |a: u32, ix: Index, value: Expr| Stmt::LocalStore {
        local: a,
        index: ix,
        value,
    };
    let op = |a: Expr, b: Expr| Expr {
        kind: ExprKind::Binary(red.op.combine(), Box::new(a), Box::new(b)),
        dtype: dt,
    };
    let (x, pre, run, tmp, off, carry) = (0, 1, 2, 3, 4, 5);
    let zero = Index::c(0);
    let vi = Index::Var(v);
    let tv = Index::Var(t);
    let in_row = Guard {
        value: pos.clone(),
        extent: len.clone(),
    };
    // t >= s, as a guard: T - 1 - t < T - s.
    let from = |s: i64| Guard {
        value: Index::c(t_n - 1) - tv.clone(),
        extent: Index::c(t_n - s),
    };
    let identity = red.op.identity(dt);

    let mut fold = vec![
        set(x, vi.clone(), identity.clone()),
        Stmt::If {
            guards: vec![in_row.clone()],
            body: vec![set(x, vi.clone(), body)],
        },
    ];
    let step = set(
        run,
        zero.clone(),
        op(reg(run, zero.clone()), reg(x, vi.clone())),
    );
    let keep = set(pre, vi.clone(), reg(run, zero.clone()));
    if scan.exclusive {
        fold.extend([keep, step]);
    } else {
        fold.extend([step, keep]);
    }
    let mut per_chunk = vec![
        set(run, zero.clone(), identity.clone()),
        Stmt::Loop {
            var: v,
            extent: Index::c(p_n),
            unroll: true,
            body: fold,
        },
        Stmt::SharedStore {
            shared: 0,
            index: tv.clone(),
            value: reg(run, zero.clone()),
        },
        Stmt::Barrier,
    ];
    let mut s = 1;
    while s < t_n {
        per_chunk.extend([
            set(tmp, zero.clone(), lds(tv.clone())),
            Stmt::If {
                guards: vec![from(s)],
                body: vec![set(
                    tmp,
                    zero.clone(),
                    op(lds(tv.clone() - Index::c(s)), reg(tmp, zero.clone())),
                )],
            },
            Stmt::Barrier,
            Stmt::SharedStore {
                shared: 0,
                index: tv.clone(),
                value: reg(tmp, zero.clone()),
            },
            Stmt::Barrier,
        ]);
        s *= 2;
    }
    let result = op(reg(off, zero.clone()), reg(pre, vi.clone()));
    per_chunk.extend([
        set(off, zero.clone(), reg(carry, zero.clone())),
        Stmt::If {
            guards: vec![from(1)],
            body: vec![set(
                off,
                zero.clone(),
                op(reg(carry, zero.clone()), lds(tv.clone() - Index::c(1))),
            )],
        },
        Stmt::Loop {
            var: v,
            extent: Index::c(p_n),
            unroll: true,
            body: vec![Stmt::If {
                guards: vec![in_row],
                body: vec![Stmt::Store {
                    tensor: stage.output,
                    indices,
                    value: value.replace_reduced(&result),
                }],
            }],
        },
        set(
            carry,
            zero.clone(),
            op(reg(carry, zero.clone()), lds(Index::c(t_n - 1))),
        ),
        // The next chunk's totals overwrite these.
        Stmt::Barrier,
    ]);
    l.g.block = [plan.threads, 1, 1];
    l.g.grid = [rows, Index::c(1), Index::c(1)];
    l.g.body = vec![
        Stmt::Bind {
            var: b,
            axis: GpuAxis::Block(Dim::X),
        },
        Stmt::Bind {
            var: t,
            axis: GpuAxis::Thread(Dim::X),
        },
        set(carry, zero, identity),
        Stmt::Loop {
            var: chunk,
            extent: chunks,
            unroll: false,
            body: per_chunk,
        },
    ];
    l.tid = tv;
    Ok(())
}
