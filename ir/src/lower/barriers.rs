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
//! The pass works on each statement list separately and only removes a
//! barrier with statements of the same list on both sides. The last
//! barrier of a list is kept: what follows it lies outside the list (the
//! next iteration of an enclosing loop, or the code after it), which this
//! pass does not look at. Compound statements count with every LDS access
//! inside them, which over-approximates and so only keeps barriers. The
//! loop-IR interpreter's race check (`interp::run_lowered`) verifies the
//! result on every example in the tests.

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
/// statement list inside it.
pub fn remove_redundant(body: Vec<Stmt>) -> Vec<Stmt> {
    let body: Vec<Stmt> = body
        .into_iter()
        .map(|s| s.map_bodies(&mut |b| remove_redundant(b)))
        .collect();
    let last = body.iter().rposition(|s| matches!(s, Stmt::Barrier));
    let mut out: Vec<Stmt> = Vec::with_capacity(body.len());
    // Accesses since the last barrier kept in `out`.
    let mut before = Access::default();
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
            before = Access::default();
        } else {
            access(&body[i], &mut before);
        }
        out.push(body[i].clone());
        i += 1;
    }
    out
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
}
