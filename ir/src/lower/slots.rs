//! A reduction's accumulator slots, as `nest` lowers them: one slot
//! combined with the reduction's operation, or the slots of a tuple
//! reduction combined with its combiner. A tuple's combination goes
//! through per-thread temporaries (`t_s = combine_s(a, b)`, then
//! `acc_s = t_s`), since every slot's new value reads the old values of
//! the others.

use super::{inline_producers, Local, Stmt};
use crate::index::{Index, VarId};
use crate::kernel::{Expr, ExprKind, Kernel, ReduceKind, ReduceOp, Stage, TensorId, TupleReduce};

pub(super) struct Slots<'a> {
    /// A plain reduction's (or an unscheduled scan's) combiner, or the
    /// user's tuple combiner.
    combiner: Result<ReduceOp, &'a TupleReduce>,
    /// Each slot's element at one point, producers inlined and axes
    /// substituted by the loop nest's values.
    elems: Vec<Expr>,
    outputs: Vec<TensorId>,
}

/// Which array a slot's partial results live in.
#[derive(Clone, Copy)]
pub(super) enum Home {
    /// `locals[s]` at the given index.
    Local,
    /// `shared[s]`.
    Shared,
}

impl<'a> Slots<'a> {
    pub fn new(
        k: &Kernel,
        sid: crate::kernel::StageId,
        stage: &'a Stage,
        subst: &std::collections::HashMap<VarId, Index>,
    ) -> Option<Slots<'a>> {
        let red = stage.reduce()?;
        // A top-k and an attention are built whole by their own lowerings.
        let combiner = match &red.kind {
            ReduceKind::Op(op) => Ok(*op),
            ReduceKind::Scan(s) => Ok(s.op),
            ReduceKind::Tuple(t) => Err(t),
            ReduceKind::TopK(_) | ReduceKind::Attention(_) => return None,
        };
        let bodies: Vec<&Expr> = match combiner {
            Err(t) => t.elems.iter().collect(),
            Ok(_) => vec![&red.body],
        };
        let elems = bodies
            .into_iter()
            .map(|b| inline_producers(k, sid, b).map_indices(&|ix| ix.subst(subst)))
            .collect();
        Some(Slots {
            combiner,
            elems,
            outputs: stage.outputs(),
        })
    }

    fn tuple(&self) -> Option<&'a TupleReduce> {
        self.combiner.err()
    }

    /// Slot `s`'s type.
    pub fn dtype(&self, s: usize) -> crate::DType {
        self.elems[s].dtype
    }

    pub fn len(&self) -> usize {
        self.elems.len()
    }

    /// The per-thread arrays: the accumulators (`len` each), then a
    /// tuple's element and combination temporaries (one each). Slot `s`'s
    /// accumulator is local `s`.
    pub fn locals(&self, stage: &Stage, len: u32) -> Vec<Local> {
        let mk = |what: &str, s: usize, len: u32| Local {
            name: match self.len() {
                1 => format!("{}_{what}", stage.name),
                _ => format!("{}_{what}{s}", stage.name),
            },
            dtype: self.elems[s].dtype,
            len,
            span: stage.span,
        };
        let mut out: Vec<Local> = (0..self.len()).map(|s| mk("acc", s, len)).collect();
        if self.tuple().is_some() {
            out.extend((0..self.len()).map(|s| mk("elem", s, 1)));
            out.extend((0..self.len()).map(|s| mk("new", s, 1)));
        }
        out
    }

    /// The LDS arrays of a cooperative reduction, `len` each; slot `s`'s is
    /// `first + s`.
    pub fn shared(&self, stage: &Stage, len: u32, span: crate::Span) -> Vec<Local> {
        (0..self.len())
            .map(|s| Local {
                name: match self.len() {
                    1 => format!("{}_lds", stage.name),
                    _ => format!("{}_lds{s}", stage.name),
                },
                dtype: self.elems[s].dtype,
                len,
                span,
            })
            .collect()
    }

    pub fn at(&self, home: Home, first: u32, s: usize, index: &Index) -> Expr {
        let (a, index) = (first + s as u32, index.clone());
        let kind = match home {
            Home::Local => ExprKind::Local { local: a, index },
            Home::Shared => ExprKind::Shared { shared: a, index },
        };
        Expr {
            kind,
            dtype: self.elems[s].dtype,
        }
    }

    fn write(&self, home: Home, first: u32, s: usize, index: &Index, value: Expr) -> Stmt {
        let (a, index) = (first + s as u32, index.clone());
        match home {
            Home::Local => Stmt::LocalStore {
                local: a,
                index,
                value,
            },
            Home::Shared => Stmt::SharedStore {
                shared: a,
                index,
                value,
            },
        }
    }

    /// Every accumulator at `index` set to the reduction's start.
    pub fn init(&self, index: &Index) -> Vec<Stmt> {
        (0..self.len())
            .map(|s| {
                let v = match self.combiner {
                    Err(t) => t.init[s].clone(),
                    Ok(op) => op.identity(self.elems[0].dtype),
                };
                self.write(Home::Local, 0, s, index, v)
            })
            .collect()
    }

    /// `dst = combine(dst, src)` slot by slot: `dst` in `home` at `first`
    /// and `index`; `src(s)` the right operand of slot `s`.
    pub fn combine_into(
        &self,
        home: Home,
        first: u32,
        index: &Index,
        src: &dyn Fn(usize) -> Expr,
    ) -> Vec<Stmt> {
        let t = match self.combiner {
            Err(t) => t,
            Ok(op) => {
                let dst = self.at(home, first, 0, index);
                let value = Expr {
                    kind: ExprKind::Binary(op.combine(), Box::new(dst), Box::new(src(0))),
                    dtype: self.elems[0].dtype,
                };
                return vec![self.write(home, first, 0, index, value)];
            }
        };
        let n = self.len();
        let left: Vec<Expr> = (0..n).map(|s| self.at(home, first, s, index)).collect();
        let right: Vec<Expr> = (0..n).map(src).collect();
        let zero = Index::c(0);
        let temps = 2 * n as u32;
        let mut out: Vec<Stmt> = t
            .apply(&left, &right)
            .into_iter()
            .enumerate()
            .map(|(s, v)| self.write(Home::Local, temps, s, &zero, v))
            .collect();
        out.extend((0..n).map(|s| {
            let v = self.at(Home::Local, temps, s, &zero);
            self.write(home, first, s, index, v)
        }));
        out
    }

    /// The accumulators at `index` combined with this point's elements.
    pub fn update(&self, index: &Index) -> Vec<Stmt> {
        if self.tuple().is_none() {
            return self.combine_into(Home::Local, 0, index, &|_| self.elems[0].clone());
        }
        // Each element is evaluated once, before the combiner reads it.
        let n = self.len();
        let zero = Index::c(0);
        let mut out: Vec<Stmt> = self
            .elems
            .iter()
            .enumerate()
            .map(|(s, e)| self.write(Home::Local, n as u32, s, &zero, e.clone()))
            .collect();
        out.extend(self.combine_into(Home::Local, 0, index, &|s| {
            self.at(Home::Local, n as u32, s, &zero)
        }));
        out
    }

    /// Stores of each slot's result `result(s)` at the output point; the
    /// first through the stage's epilogue `value`.
    pub fn stores(
        &self,
        value: &Expr,
        indices: &[Index],
        result: &dyn Fn(usize) -> Expr,
    ) -> Vec<Stmt> {
        (0..self.len())
            .map(|s| Stmt::Store {
                tensor: self.outputs[s],
                indices: indices.to_vec(),
                value: match s {
                    0 => value.replace_reduced(&result(0)),
                    _ => result(s),
                },
            })
            .collect()
    }
}
