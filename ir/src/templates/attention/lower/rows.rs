//! `rowwise(j, threads=T)`: thread t of work-group b owns query row
//! `b·T + t` and walks its keys once with the online softmax: per key,
//! the score (a loop over the head axis), the new maximum, the factor
//! `exp(old − new)` that rescales the running sum and the `d` outputs it
//! keeps in registers, and the key's weight. The head dimension is a
//! constant, so the output row is unrolled into registers.

use super::*;
use crate::loops::Stmt;
use crate::schedule::{Dim, GpuAxis, Guard};

pub(super) fn build(
    l: &mut Lowering,
    a: &Attention,
    threads: u32,
    span: Span,
) -> Result<(), Diagnostic> {
    let st = l.k.stage(l.sid);
    let red = st.reduce().expect("an attention is a reduction");
    let n = st.axes.len();
    let head = st.axes[n - 1]
        .extent
        .as_const()
        .expect("checked: a constant");
    let rows = row_count(l, span);
    let t_n = i64::from(threads);
    let blocks = Index::bin(IOp::CeilDiv, rows.clone(), Index::c(t_n));
    let b = var(
        l,
        "block",
        blocks.clone(),
        LoopKind::Bound(GpuAxis::Block(Dim::X)),
        span,
    );
    let t = var(
        l,
        "t",
        Index::c(t_n),
        LoopKind::Bound(GpuAxis::Thread(Dim::X)),
        span,
    );
    let row = Index::Var(b) * Index::c(t_n) + Index::Var(t);
    let mut map = decode(l, 1, row.clone());
    let keys = red.axes[0].extent.subst(&map);
    let jv = var(l, "j", keys.clone(), LoopKind::Serial, span);
    let ev = var(l, "e", red.axes[1].extent.clone(), LoopKind::Serial, span);
    let dv = var(l, "d", Index::c(head), LoopKind::Unrolled, span);
    map.insert(VarId(n as u32 - 1), Index::Var(dv));
    map.insert(VarId(n as u32), Index::Var(jv));
    map.insert(VarId(n as u32 + 1), Index::Var(ev));
    let term = at(l, &red.body, &map);
    let value = cast(at(l, &a.v, &map), DType::F32);
    let scale = at(l, &a.scale, &map);

    let acc = local(l, "acc", head, span);
    let [m, sum, s, mnew, alpha, p] =
        ["max", "sum", "score", "new_max", "alpha", "p"].map(|name| local(l, name, 1, span));
    let set = |local: u32, value: Expr| Stmt::LocalStore {
        local,
        index: Index::c(0),
        value,
    };
    let r = |local: u32| reg(local, Index::c(0));
    let each_d = |body: Vec<Stmt>| Stmt::Loop {
        var: dv,
        extent: Index::c(head),
        unroll: true,
        body,
    };
    let key = vec![
        set(s, float(0.0)),
        Stmt::Loop {
            var: ev,
            extent: red.axes[1].extent.clone(),
            unroll: false,
            body: vec![set(s, op(BinOp::Add, r(s), term))],
        },
        set(s, op(BinOp::Mul, r(s), base2(scale))),
        set(mnew, op(BinOp::Max, r(m), r(s))),
        set(alpha, exp2(op(BinOp::Sub, r(m), r(mnew)))),
        set(p, exp2(op(BinOp::Sub, r(s), r(mnew)))),
        set(sum, op(BinOp::Add, op(BinOp::Mul, r(sum), r(alpha)), r(p))),
        each_d(vec![Stmt::LocalStore {
            local: acc,
            index: Index::Var(dv),
            value: op(
                BinOp::Add,
                op(BinOp::Mul, reg(acc, Index::Var(dv)), r(alpha)),
                op(BinOp::Mul, r(p), value),
            ),
        }]),
        set(m, r(mnew)),
    ];
    let idx =
        |upto: usize| -> Vec<Index> { (0..upto).map(|d| map[&VarId(d as u32)].clone()).collect() };
    let mut store = vec![each_d(vec![Stmt::Store {
        tensor: a.outputs[0],
        indices: idx(n),
        value: finish(reg(acc, Index::Var(dv)), r(sum), st.value.dtype),
    }])];
    if let Some(lt) = a.outputs.get(1) {
        store.push(Stmt::Store {
            tensor: *lt,
            indices: idx(n - 1),
            value: lse(r(m), r(sum)),
        });
    }
    let mut inside = vec![
        set(m, float(f64::NEG_INFINITY)),
        set(sum, float(0.0)),
        each_d(vec![Stmt::LocalStore {
            local: acc,
            index: Index::Var(dv),
            value: float(0.0),
        }]),
        Stmt::Loop {
            var: jv,
            extent: keys,
            unroll: false,
            body: key,
        },
    ];
    inside.extend(store);
    l.g.body = vec![
        Stmt::Bind {
            var: b,
            axis: GpuAxis::Block(Dim::X),
        },
        Stmt::Bind {
            var: t,
            axis: GpuAxis::Thread(Dim::X),
        },
        Stmt::If {
            guards: vec![Guard {
                value: row,
                extent: rows,
            }],
            body: inside,
        },
    ];
    l.g.block = [threads, 1, 1];
    l.g.grid = [blocks, Index::c(1), Index::c(1)];
    l.tid = Index::Var(t);
    Ok(())
}
