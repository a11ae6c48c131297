//! The one traversal of loop-IR statements. Every match on [`Stmt`] here
//! lists each variant (no `_` arm), so adding a statement kind fails to
//! compile until the traversal says what it holds; every rewriter in
//! lowering is a [`Fold`] or uses [`walk`], and so inherits that.

use super::Stmt;
use crate::index::{Index, VarId};
use crate::kernel::Expr;
use crate::schedule::Guard;

impl Stmt {
    /// The value the statement stores, if it stores one. (A matrix
    /// instruction reads and writes register arrays only.)
    pub fn value(&self) -> Option<&Expr> {
        match self {
            Stmt::Store { value, .. }
            | Stmt::LocalStore { value, .. }
            | Stmt::SharedStore { value, .. }
            | Stmt::Scatter { value, .. }
            | Stmt::Shuffle { value, .. }
            | Stmt::Fill { value, .. } => Some(value),
            Stmt::Bind { .. }
            | Stmt::Loop { .. }
            | Stmt::If { .. }
            | Stmt::Unswitch { .. }
            | Stmt::Barrier
            | Stmt::AsyncCommit
            | Stmt::AsyncWait { .. }
            | Stmt::MatrixLoad { .. }
            | Stmt::MatrixDesc { .. }
            | Stmt::MatrixAsync(_)
            | Stmt::TensorCopy { .. }
            | Stmt::Mbarrier(_)
            | Stmt::Matrix { .. } => None,
        }
    }

    /// Every expression the statement evaluates: its value, and a
    /// scatter's subscripts.
    pub fn exprs(&self) -> Vec<&Expr> {
        match self {
            Stmt::Scatter { indices, value, .. } => indices.iter().chain([value]).collect(),
            other => other.value().into_iter().collect(),
        }
    }

    /// The statement lists it holds (a loop's or an `If`'s body, both sides
    /// of an unswitch).
    pub fn bodies(&self) -> Vec<&[Stmt]> {
        match self {
            Stmt::Loop { body, .. } | Stmt::If { body, .. } => vec![body],
            Stmt::Unswitch { fast, slow, .. } => vec![fast, slow],
            Stmt::MatrixLoad { stores, .. }
            | Stmt::MatrixDesc { stores, .. }
            | Stmt::TensorCopy { fills: stores, .. } => vec![stores],
            Stmt::Bind { .. }
            | Stmt::Store { .. }
            | Stmt::Scatter { .. }
            | Stmt::SharedStore { .. }
            | Stmt::Fill { .. }
            | Stmt::Barrier
            | Stmt::AsyncCommit
            | Stmt::AsyncWait { .. }
            | Stmt::LocalStore { .. }
            | Stmt::Matrix { .. }
            | Stmt::MatrixAsync(_)
            | Stmt::Mbarrier(_)
            | Stmt::Shuffle { .. } => Vec::new(),
        }
    }
}

/// Calls `f` on every statement of `body`, outer before inner, in order.
pub fn walk(body: &[Stmt], f: &mut impl FnMut(&Stmt)) {
    for s in body {
        f(s);
        for b in s.bodies() {
            walk(b, f);
        }
    }
}

/// A rewriter of loop IR. Each hook defaults to leaving its part alone;
/// [`fold_stmt`] applies them to every part of every statement.
pub trait Fold {
    /// An index expression: a guard's sides, a loop extent, store indices.
    fn index(&mut self, i: Index) -> Index {
        i
    }
    /// A stored value.
    fn expr(&mut self, e: Expr) -> Expr {
        e
    }
    /// A variable a loop or binding defines.
    fn var(&mut self, v: VarId) -> VarId {
        v
    }
    /// A register array's number.
    fn local(&mut self, l: u32) -> u32 {
        l
    }
    /// An LDS array's number.
    fn shared(&mut self, s: u32) -> u32 {
        s
    }
    /// A whole statement; override to replace statements (the default
    /// rewrites its parts).
    fn stmt(&mut self, s: Stmt) -> Stmt
    where
        Self: Sized,
    {
        fold_stmt(self, s)
    }
}

/// `body` with [`Fold::stmt`] applied to each statement.
pub fn fold_body<F: Fold>(f: &mut F, body: Vec<Stmt>) -> Vec<Stmt> {
    body.into_iter().map(|s| f.stmt(s)).collect()
}

fn fold_guards<F: Fold>(f: &mut F, gs: Vec<Guard>) -> Vec<Guard> {
    gs.into_iter()
        .map(|g| Guard {
            value: f.index(g.value),
            extent: f.index(g.extent),
        })
        .collect()
}

/// `s` with every part rewritten by `f`'s hooks, nested statements through
/// [`Fold::stmt`].
pub fn fold_stmt<F: Fold>(f: &mut F, s: Stmt) -> Stmt {
    match s {
        Stmt::Bind { var, axis } => Stmt::Bind {
            var: f.var(var),
            axis,
        },
        Stmt::Loop {
            var,
            extent,
            unroll,
            body,
        } => Stmt::Loop {
            var: f.var(var),
            extent: f.index(extent),
            unroll,
            body: fold_body(f, body),
        },
        Stmt::If { guards, body } => Stmt::If {
            guards: fold_guards(f, guards),
            body: fold_body(f, body),
        },
        Stmt::Store {
            tensor,
            indices,
            value,
        } => Stmt::Store {
            tensor,
            indices: indices.into_iter().map(|i| f.index(i)).collect(),
            value: f.expr(value),
        },
        Stmt::Scatter {
            tensor,
            indices,
            op,
            value,
            shared,
        } => Stmt::Scatter {
            tensor,
            indices: indices.into_iter().map(|e| f.expr(e)).collect(),
            op,
            value: f.expr(value),
            shared: shared.map(|s| f.shared(s)),
        },
        Stmt::Unswitch { guards, fast, slow } => Stmt::Unswitch {
            guards: fold_guards(f, guards),
            fast: fold_body(f, fast),
            slow: fold_body(f, slow),
        },
        Stmt::SharedStore {
            shared,
            index,
            value,
        } => Stmt::SharedStore {
            shared: f.shared(shared),
            index: f.index(index),
            value: f.expr(value),
        },
        Stmt::Fill {
            mem,
            array,
            index,
            value,
            width,
            asynchronous,
            zero,
        } => Stmt::Fill {
            mem,
            array: match mem {
                super::Mem::Shared => f.shared(array),
                super::Mem::Local => f.local(array),
            },
            index: f.index(index),
            value: f.expr(value),
            width,
            asynchronous,
            zero,
        },
        Stmt::Barrier => Stmt::Barrier,
        Stmt::AsyncCommit => Stmt::AsyncCommit,
        Stmt::AsyncWait { pending } => Stmt::AsyncWait { pending },
        Stmt::LocalStore {
            local,
            index,
            value,
        } => Stmt::LocalStore {
            local: f.local(local),
            index: f.index(index),
            value: f.expr(value),
        },
        s @ (Stmt::MatrixLoad { .. }
        | Stmt::Matrix { .. }
        | Stmt::MatrixDesc { .. }
        | Stmt::MatrixAsync(_)
        | Stmt::TensorCopy { .. }
        | Stmt::Mbarrier(_)) => fold_matrix_stmt(f, s),
        Stmt::Shuffle {
            local,
            index,
            value,
            mask,
            lane,
            wave,
            width,
        } => Stmt::Shuffle {
            local: f.local(local),
            index: f.index(index),
            value: f.expr(value),
            mask,
            lane: f.index(lane),
            wave: f.index(wave),
            width,
        },
    }
}

/// The matrix-unit and tensor-memory statements of [`fold_stmt`], apart
/// so that each function stays short; the match names every kind, so a
/// new statement must be placed in one of the two.
fn fold_matrix_stmt<F: Fold>(f: &mut F, s: Stmt) -> Stmt {
    match s {
        Stmt::MatrixLoad {
            shared,
            row,
            count,
            trans,
            stores,
        } => Stmt::MatrixLoad {
            shared: f.shared(shared),
            row: f.index(row),
            count,
            trans,
            stores: fold_body(f, stores),
        },
        Stmt::Matrix {
            instr,
            a,
            b,
            acc,
            lane,
            wave,
            desc,
        } => Stmt::Matrix {
            instr,
            a: (f.local(a.0), f.index(a.1)),
            b: (f.local(b.0), f.index(b.1)),
            acc: (f.local(acc.0), f.index(acc.1)),
            lane: f.index(lane),
            wave: f.index(wave),
            desc: desc.map(|d| {
                d.map(|o| {
                    o.map(|o| super::OperandDesc {
                        local: f.local(o.local),
                        index: f.index(o.index),
                        transposed: o.transposed,
                    })
                })
            }),
        },
        Stmt::MatrixDesc {
            local,
            index,
            shared,
            start,
            mn_block,
            row_bytes,
            stores,
        } => Stmt::MatrixDesc {
            local: f.local(local),
            index: f.index(index),
            shared: f.shared(shared),
            start: f.index(start),
            mn_block,
            row_bytes,
            stores: fold_body(f, stores),
        },
        Stmt::MatrixAsync(op) => Stmt::MatrixAsync(op),
        Stmt::TensorCopy {
            tensor,
            map,
            coords,
            boxes,
            shared,
            start,
            bar,
            fills,
        } => Stmt::TensorCopy {
            tensor,
            map,
            coords: coords.into_iter().map(|c| f.index(c)).collect(),
            boxes,
            shared: f.shared(shared),
            start: f.index(start),
            bar: (f.shared(bar.0), f.index(bar.1)),
            fills: fold_body(f, fills),
        },
        Stmt::Mbarrier(m) => Stmt::Mbarrier(fold_mbarrier(f, m)),
        Stmt::Bind { .. }
        | Stmt::Loop { .. }
        | Stmt::If { .. }
        | Stmt::Store { .. }
        | Stmt::Scatter { .. }
        | Stmt::Unswitch { .. }
        | Stmt::SharedStore { .. }
        | Stmt::Fill { .. }
        | Stmt::Barrier
        | Stmt::AsyncCommit
        | Stmt::AsyncWait { .. }
        | Stmt::LocalStore { .. }
        | Stmt::Shuffle { .. } => unreachable!("fold_stmt folds {s:?} itself"),
    }
}

fn fold_mbarrier<F: Fold>(f: &mut F, m: super::Mbarrier) -> super::Mbarrier {
    let mut bar = |(a, i): (u32, Index)| (f.shared(a), f.index(i));
    match m {
        super::Mbarrier::Init { bar: b } => super::Mbarrier::Init { bar: bar(b) },
        super::Mbarrier::Inval { bar: b } => super::Mbarrier::Inval { bar: bar(b) },
        super::Mbarrier::Expect { bar: b, bytes } => super::Mbarrier::Expect { bar: bar(b), bytes },
        super::Mbarrier::Wait { bar: b, parity } => {
            let b = bar(b);
            super::Mbarrier::Wait {
                bar: b,
                parity: f.index(parity),
            }
        }
    }
}

/// A [`Fold`] from two closures: index expressions (guards, extents, store
/// indices) and stored values.
pub struct MapParts<FI, FE> {
    pub index: FI,
    pub expr: FE,
}

impl<FI: FnMut(&Index) -> Index, FE: FnMut(&Expr) -> Expr> Fold for MapParts<FI, FE> {
    fn index(&mut self, i: Index) -> Index {
        (self.index)(&i)
    }
    fn expr(&mut self, e: Expr) -> Expr {
        (self.expr)(&e)
    }
}

/// Rewrites statements: index expressions with `fi`, stored values with `fe`.
pub fn map_stmts(
    body: Vec<Stmt>,
    fi: impl FnMut(&Index) -> Index,
    fe: impl FnMut(&Expr) -> Expr,
) -> Vec<Stmt> {
    fold_body(
        &mut MapParts {
            index: fi,
            expr: fe,
        },
        body,
    )
}

/// Rewrites every index expression in statements (guards, extents,
/// indices, and those inside stored values).
pub fn map_indices(body: Vec<Stmt>, f: &impl Fn(&Index) -> Index) -> Vec<Stmt> {
    map_stmts(body, f, |e: &Expr| e.map_indices(f))
}

/// Rewrites every stored value.
pub fn map_values(body: Vec<Stmt>, f: impl FnMut(&Expr) -> Expr) -> Vec<Stmt> {
    map_stmts(body, |i: &Index| i.clone(), f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::ExprKind;
    use crate::DType;

    fn store(i: i64) -> Stmt {
        Stmt::LocalStore {
            local: 0,
            index: Index::c(i),
            value: Expr {
                kind: ExprKind::Int(i),
                dtype: DType::I32,
            },
        }
    }

    #[test]
    fn every_nested_statement_is_rewritten() {
        // One of each statement holding others: a fold that misses one
        // (as `map_stmts` once skipped `Unswitch`) leaves a 1 behind.
        let body = vec![Stmt::Loop {
            var: VarId(0),
            extent: Index::c(4),
            unroll: false,
            body: vec![
                Stmt::If {
                    guards: vec![Guard {
                        value: Index::c(1),
                        extent: Index::c(2),
                    }],
                    body: vec![store(1)],
                },
                Stmt::Unswitch {
                    guards: vec![],
                    fast: vec![store(1)],
                    slow: vec![store(1), Stmt::Barrier],
                },
            ],
        }];
        let out = map_indices(body, &|i: &Index| match i {
            Index::Const(1) => Index::c(7),
            other => other.clone(),
        });
        let mut ones = 0;
        let mut stores = 0;
        walk(&out, &mut |s| {
            if let Stmt::LocalStore { index, .. } = s {
                stores += 1;
                ones += (*index == Index::c(1)) as u32;
            }
            if let Stmt::If { guards, .. } = s {
                assert_eq!(guards[0].value, Index::c(7));
            }
        });
        assert_eq!((stores, ones), (3, 0));
    }
}
