//! Barrier placement: removes barriers that order nothing.
//!
//! Each staged cache and each compute_at part inserts its own barriers, so
//! a k step of an LDS-tiled matmul used to read
//! `copy B; barrier; copy A; barrier; compute; barrier; barrier`. A barrier
//! between two runs of statements is needed only if they touch one LDS
//! array and at least one of them writes it (threads may touch each
//! other's elements). Copying A and B into distinct arrays does not
//! conflict, and two barriers in a row order nothing more than one; so the
//! k step above becomes `copy B; copy A; barrier; compute; barrier`.
//!
//! The pass works on each statement list separately and removes a barrier
//! when the accesses since the previous barrier and those up to the next
//! one do not conflict. What comes before a list's first barrier includes
//! what ran before the list with no barrier between: the enclosing list's
//! accesses since its last barrier, and for a loop body the previous
//! iteration's tail after the body's last barrier. Not counting those once
//! removed the barrier at the top of flash attention's key-tile loop, which
//! kept the next tile's copy into V from overwriting what slower waves
//! still read of the previous one. The last barrier of a list is kept:
//! what follows it lies outside the list. Compound statements count with
//! every LDS access inside them, which over-approximates and so only keeps
//! barriers. The loop-IR interpreter's race check (`interp::run_lowered`)
//! verifies the result on every example for every target in the tests.

use super::Stmt;
use crate::kernel::{Expr, ExprKind};
use crate::loops::Mem;
use std::cell::RefCell;
use std::collections::BTreeSet;

/// LDS arrays read and written by a run of statements.
#[derive(Default, Clone)]
struct Access {
    reads: BTreeSet<u32>,
    writes: BTreeSet<u32>,
    /// Holds an [`Stmt::AsyncWait`]: asynchronous copies issued anywhere
    /// before land there, so it conflicts with every LDS access after.
    completes: bool,
}

impl Access {
    fn union(&self, o: &Access) -> Access {
        Access {
            reads: self.reads.union(&o.reads).copied().collect(),
            writes: self.writes.union(&o.writes).copied().collect(),
            completes: self.completes || o.completes,
        }
    }

    fn conflicts(&self, o: &Access) -> bool {
        (self.completes && !(o.reads.is_empty() && o.writes.is_empty()))
            || self
                .writes
                .iter()
                .any(|a| o.reads.contains(a) || o.writes.contains(a))
            || o.writes.iter().any(|a| self.reads.contains(a))
    }
}

fn expr_reads(e: &Expr, out: &RefCell<BTreeSet<u32>>) {
    e.rewrite(&|x: &Expr| {
        if let ExprKind::Shared { shared, .. } = &x.kind {
            out.borrow_mut().insert(*shared);
        }
        None
    });
}

fn access(s: &Stmt, acc: &mut Access) {
    let reads = RefCell::new(BTreeSet::new());
    match s {
        Stmt::SharedStore { shared, value, .. }
        | Stmt::Fill {
            mem: Mem::Shared,
            array: shared,
            value,
            ..
        } => {
            acc.writes.insert(*shared);
            expr_reads(value, &reads);
        }
        Stmt::Fill { value, .. } => expr_reads(value, &reads),
        Stmt::Store { value, .. }
        | Stmt::LocalStore { value, .. }
        | Stmt::Shuffle { value, .. } => expr_reads(value, &reads),
        Stmt::Scatter {
            indices,
            value,
            shared,
            ..
        } => {
            if let Some(a) = shared {
                acc.writes.insert(*a);
            }
            for e in indices.iter().chain([value]) {
                expr_reads(e, &reads);
            }
        }
        Stmt::Loop { body, .. } | Stmt::If { body, .. } => {
            for s in body {
                access(s, acc);
            }
        }
        Stmt::Unswitch { fast, slow, .. } => {
            for s in fast.iter().chain(slow) {
                access(s, acc);
            }
        }
        Stmt::MatrixLoad { stores, .. } | Stmt::MatrixDesc { stores, .. } => {
            for s in stores {
                access(s, acc);
            }
        }
        Stmt::TensorCopy {
            shared, bar, fills, ..
        } => {
            acc.writes.insert(*shared);
            acc.writes.insert(bar.0);
            for s in fills {
                access(s, acc);
            }
        }
        Stmt::Mbarrier(m) => {
            acc.writes.insert(m.bar().0);
            if matches!(m, crate::loops::Mbarrier::Wait { .. }) {
                acc.completes = true;
            }
        }
        Stmt::AsyncWait { .. } => acc.completes = true,
        // A matrix instruction touches registers only.
        Stmt::Bind { .. }
        | Stmt::Barrier
        | Stmt::AsyncCommit
        | Stmt::Matrix { .. }
        | Stmt::MatrixAsync(_) => {}
    }
    acc.reads.extend(reads.into_inner());
}

/// Removes redundant barriers in `body` and, recursively, in every
/// statement list inside it. `body` is a kernel's whole body: nothing runs
/// before it.
pub fn remove_redundant(body: Vec<Stmt>) -> Vec<Stmt> {
    remove_in(body, Access::default())
}

/// [`remove_redundant`] for a list that runs after `lead`: the accesses
/// since the last barrier before it.
fn remove_in(body: Vec<Stmt>, lead: Access) -> Vec<Stmt> {
    let last = body.iter().rposition(|s| matches!(s, Stmt::Barrier));
    let mut out: Vec<Stmt> = Vec::with_capacity(body.len());
    // Accesses since the last barrier kept in `out`, or before the list.
    let mut before = lead;
    let mut i = 0;
    while i < body.len() {
        if matches!(body[i], Stmt::Barrier) && Some(i) != last {
            // The run up to the next barrier (or the end of the list).
            let mut after = Access::default();
            for s in body[i + 1..]
                .iter()
                .take_while(|s| !matches!(s, Stmt::Barrier))
            {
                access(s, &mut after);
            }
            if !before.conflicts(&after) {
                // Nothing to order: the runs on both sides merge.
                i += 1;
                continue;
            }
            out.push(Stmt::Barrier);
            before = Access::default();
            i += 1;
            continue;
        }
        if matches!(body[i], Stmt::Barrier) {
            out.push(Stmt::Barrier);
            before = Access::default();
            i += 1;
            continue;
        }
        let inner_lead = match &body[i] {
            // The previous iteration's tail runs before the body's head.
            Stmt::Loop { body: inner, .. } => before.union(&tail(inner)),
            _ => before.clone(),
        };
        let s = body[i]
            .clone()
            .map_bodies(&mut |b| remove_in(b, inner_lead.clone()));
        access(&s, &mut before);
        out.push(s);
        i += 1;
    }
    out
}

/// The accesses after the last barrier of `body` (all of them if it has
/// none).
fn tail(body: &[Stmt]) -> Access {
    let from = body
        .iter()
        .rposition(|s| matches!(s, Stmt::Barrier))
        .map_or(0, |i| i + 1);
    let mut acc = Access::default();
    for s in &body[from..] {
        access(s, &mut acc);
    }
    acc
}

/// Barriers in `body`, counting those inside loops once.
pub fn count(body: &[Stmt]) -> usize {
    body.iter()
        .map(|s| match s {
            Stmt::Barrier => 1,
            Stmt::Loop { body, .. } | Stmt::If { body, .. } => count(body),
            Stmt::Unswitch { fast, slow, .. } => count(fast) + count(slow),
            _ => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::index::Index;

    fn store(shared: u32) -> Stmt {
        Stmt::SharedStore {
            shared,
            index: Index::c(0),
            value: Expr {
                kind: ExprKind::Float(1.0),
                dtype: DType::F32,
            },
        }
    }
    fn read(shared: u32) -> Stmt {
        Stmt::LocalStore {
            local: 0,
            index: Index::c(0),
            value: Expr {
                kind: ExprKind::Shared {
                    shared,
                    index: Index::c(0),
                },
                dtype: DType::F32,
            },
        }
    }

    #[test]
    fn copies_into_distinct_arrays_share_one_barrier() {
        let b = || Stmt::Barrier;
        let body = vec![store(0), b(), store(1), b(), read(0), read(1), b(), b()];
        let out = remove_redundant(body);
        assert_eq!(out, vec![store(0), store(1), b(), read(0), read(1), b()]);
    }

    #[test]
    fn conflicting_runs_keep_their_barrier() {
        let b = || Stmt::Barrier;
        // Write then read the same array: the barrier orders them.
        let body = vec![store(0), b(), read(0), b(), store(0), b()];
        assert_eq!(remove_redundant(body.clone()), body);
        // Read then write (write-after-read) too.
        let body = vec![read(0), b(), store(0), b()];
        assert_eq!(remove_redundant(body.clone()), body);
    }

    #[test]
    fn the_last_barrier_of_a_list_stays() {
        let b = || Stmt::Barrier;
        let body = vec![Stmt::Loop {
            var: crate::VarId(0),
            extent: Index::c(4),
            unroll: false,
            body: vec![store(0), b(), read(0), b()],
        }];
        assert_eq!(remove_redundant(body.clone()), body);
        assert_eq!(count(&body), 2);
    }

    /// What precedes a list's first barrier includes the previous
    /// iteration's tail: here the reads of 0 after the last barrier, which
    /// the next iteration's store into 0 must wait for.
    #[test]
    fn a_loop_heads_barrier_orders_the_previous_iterations_tail() {
        let b = || Stmt::Barrier;
        let body = vec![Stmt::Loop {
            var: crate::VarId(0),
            extent: Index::c(4),
            unroll: false,
            body: vec![b(), store(0), b(), read(0)],
        }];
        assert_eq!(remove_redundant(body.clone()), body);
        // Reads of 0 before the loop: the same.
        let body = vec![
            read(0),
            Stmt::Loop {
                var: crate::VarId(0),
                extent: Index::c(4),
                unroll: false,
                body: vec![b(), store(0), b()],
            },
        ];
        assert_eq!(remove_redundant(body.clone()), body);
        // A tail that touches another array orders nothing there.
        let looped = |tail: Stmt| Stmt::Loop {
            var: crate::VarId(0),
            extent: Index::c(4),
            unroll: false,
            body: vec![b(), store(0), b(), read(0), b(), tail],
        };
        assert_eq!(
            remove_redundant(vec![looped(read(1))]),
            vec![Stmt::Loop {
                var: crate::VarId(0),
                extent: Index::c(4),
                unroll: false,
                body: vec![store(0), b(), read(0), b(), read(1)],
            }]
        );
    }
}
