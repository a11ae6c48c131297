//! How the threads of a cooperative reduction combine their partial
//! results once each has reduced its own share: through LDS in a tree,
//! one barrier per halving; or, where the target exchanges lanes (AMD;
//! NVIDIA for plain combiners:
//! [`MatrixUnit::lane_reduction`](rocmc_target::matrix::MatrixUnit::lane_reduction)),
//! by butterfly exchanges within each wave first, so that only the
//! waves' totals go through LDS, behind one barrier. A combiner that is
//! not commutative has its threads' shares contiguous
//! (`schedule::order`), and its tree and exchanges join neighbours first,
//! left with right.

use super::slots::{Home, Slots};
use super::{Local, Stmt};
use crate::index::{Index, VarId};
use crate::kernel::{Expr, ExprKind, Stage};
use crate::schedule::Guard;
use crate::DType;

/// A cooperative reduction's threads, as `nest` lowered them.
pub(super) struct Threads<'a> {
    pub slots: &'a Slots<'a>,
    pub stage: &'a Stage,
    /// The thread-bound reduction loop and how many threads it has.
    pub tr: VarId,
    pub count: i64,
    /// The stride of its dimension in the linear thread index `tid`.
    pub stride: i64,
    pub tid: &'a Index,
    pub block: [u32; 3],
    /// The locals `nest` already has (the accumulators are the first).
    pub locals: u32,
    /// Whether the combination runs more than once (inside output loops),
    /// so that the next round's LDS writes must wait for this one's reads.
    pub repeats: bool,
    pub span: crate::Span,
}

/// What combining adds: statements, per-thread locals and LDS arrays. The
/// statements end with `finish(result of slot s)` run by the reduction's
/// first thread under `guards`.
pub(super) type Combined = (Vec<Stmt>, Vec<Local>, Vec<Local>);

/// The reduction's stores, given where each slot's result is read from.
pub(super) type Finish<'f> = &'f dyn Fn(&dyn Fn(usize) -> Expr) -> Vec<Stmt>;

impl Threads<'_> {
    /// The wave width to exchange lanes over, where `lanes` (the target's)
    /// applies: the reduction on threadIdx.x alone, a power of two of
    /// threads (so a wave holds whole groups or a group whole waves), and
    /// f32 slots, which is what an exchange moves.
    pub fn lanes(&self, lanes: Option<u32>) -> Option<u32> {
        let w = lanes?;
        let whole = self.stride == 1
            && i64::from(self.block[0]) == self.count
            && self.count >= 2
            && (self.count as u64).is_power_of_two();
        let f32s = (0..self.slots.len()).all(|s| self.slots.dtype(s) == DType::F32);
        (whole && f32s && w.is_power_of_two()).then_some(w)
    }

    fn first_only(&self, guards: Vec<Guard>) -> Vec<Guard> {
        let mut g = vec![Guard {
            value: Index::Var(self.tr),
            extent: Index::c(1),
        }];
        g.extend(guards);
        g
    }

    /// Each thread's accumulators into its LDS slots, then a barrier.
    fn to_lds(&self) -> Vec<Stmt> {
        let zero = Index::c(0);
        let mut out: Vec<Stmt> = (0..self.slots.len())
            .map(|s| Stmt::SharedStore {
                shared: s as u32,
                index: self.tid.clone(),
                value: self.slots.at(Home::Local, 0, s, &zero),
            })
            .collect();
        out.push(Stmt::Barrier);
        out
    }

    fn lds(&self) -> Vec<Local> {
        self.slots
            .shared(self.stage, self.block.iter().product(), self.span)
    }

    /// Whether the threads' results must meet in order, left with right:
    /// a combiner that is not commutative, whose schedule gave each thread
    /// a contiguous share (`schedule::order`).
    fn ordered(&self) -> bool {
        self.stage.keeps_order()
    }

    /// The steps of the tree, each `(step, guards)`: the threads that add
    /// their partner `step` threads on. Halving from the top pairs a
    /// thread with one far away (`0` with `count / 2`), which is faster on
    /// LDS banks; an ordered tree pairs neighbours first, so that each sum
    /// covers a contiguous run of shares.
    fn tree_steps(&self) -> Vec<(i64, Vec<Guard>)> {
        let tr = || Index::Var(self.tr);
        let within = |step: i64| Guard {
            value: tr() + Index::c(step),
            extent: Index::c(self.count),
        };
        let top = (self.count as u64).next_power_of_two() as i64;
        let ordered = self.ordered();
        distances(top, ordered)
            .into_iter()
            .map(|step| {
                let left = match ordered {
                    true => Guard {
                        value: tr() % Index::c(2 * step),
                        extent: Index::c(1),
                    },
                    false => Guard {
                        value: tr(),
                        extent: Index::c(step),
                    },
                };
                (step, vec![left, within(step)])
            })
            .collect()
    }

    /// Through LDS in a tree: each step adds the partner `step` threads on,
    /// behind a barrier.
    pub fn tree(&self, guards: Vec<Guard>, finish: Finish) -> Combined {
        let (slots, tid) = (self.slots, self.tid);
        let mut out = self.to_lds();
        for (step, guards) in self.tree_steps() {
            let partner = tid.clone() + Index::c(step * self.stride);
            out.push(Stmt::If {
                guards,
                body: slots.combine_into(Home::Shared, 0, tid, &|s| {
                    slots.at(Home::Shared, 0, s, &partner)
                }),
            });
            out.push(Stmt::Barrier);
        }
        out.push(Stmt::If {
            guards: self.first_only(guards),
            body: finish(&|s| slots.at(Home::Shared, 0, s, tid)),
        });
        (out, Vec::new(), self.lds())
    }

    /// Within each wave of `w` lanes by butterfly exchanges (the wave's
    /// first lane ends with its group's total, in order where it must
    /// be); where a group spans several waves, each wave's first lane's
    /// total goes through LDS behind one barrier, and every wave reads
    /// them back (lane `l` wave `l % waves`'s) and exchanges
    /// again: no thread combines them one after another. Another barrier
    /// follows where the combination [`repeats`](Threads::repeats), so the
    /// next round's writes wait for these reads.
    pub fn by_lanes(&self, w: u32, guards: Vec<Guard>, finish: Finish) -> Combined {
        let (slots, tid) = (self.slots, self.tid);
        let zero = Index::c(0);
        let n = slots.len();
        let xchg: Vec<Local> = (0..n)
            .map(|s| Local {
                name: match n {
                    1 => format!("{}_xchg", self.stage.name),
                    _ => format!("{}_xchg{s}", self.stage.name),
                },
                dtype: DType::F32,
                len: 1,
                span: self.span,
            })
            .collect();
        let mut out = self.butterfly(w, self.count.min(i64::from(w)));
        let waves = self.count / i64::from(w);
        let mut lds = Vec::new();
        if waves > 1 {
            out.extend(self.to_lds());
            // The group's first thread: the reduction is threadIdx.x, whole.
            // Lane 0 of each wave holds the wave's total (see `butterfly`).
            let group = match self.block[1] * self.block[2] {
                1 => Index::c(0),
                _ => tid.clone() / Index::c(self.count) * Index::c(self.count),
            };
            let from = Index::Var(self.tr) % Index::c(waves) * Index::c(i64::from(w));
            let total = group + from;
            out.extend((0..n).map(|s| Stmt::LocalStore {
                local: s as u32,
                index: zero.clone(),
                value: slots.at(Home::Shared, 0, s, &total),
            }));
            out.extend(self.butterfly(w, waves));
            lds = self.lds();
        }
        out.push(Stmt::If {
            guards: self.first_only(guards),
            body: finish(&|s| slots.at(Home::Local, 0, s, &zero)),
        });
        if waves > 1 && self.repeats {
            out.push(Stmt::Barrier);
        }
        (out, xchg, lds)
    }

    /// The accumulators combined across each aligned block of `span`
    /// lanes (a power of two, at most the wave `w`) by butterfly exchanges
    /// through the exchange registers that follow `nest`'s locals.
    fn butterfly(&self, w: u32, span: i64) -> Vec<Stmt> {
        let (slots, tid) = (self.slots, self.tid);
        let zero = Index::c(0);
        let n = slots.len();
        let got = |s: usize| Expr {
            kind: ExprKind::Local {
                local: self.locals + s as u32,
                index: Index::c(0),
            },
            dtype: DType::F32,
        };
        let (lane, wave) = (
            tid.clone() % Index::c(i64::from(w)),
            tid.clone() / Index::c(i64::from(w)),
        );
        // Lane 0 of each block ends with the block's total in order when
        // the masks grow: each exchange then joins neighbouring runs, the
        // lane with the bit clear on the left (other lanes, whose order is
        // wrong, are not read). Halving masks leave every lane the total
        // of a commutative combiner.
        let mut out = Vec::new();
        for mask in distances(span, self.ordered())
            .into_iter()
            .map(|m| m as u32)
        {
            out.extend((0..n).map(|s| Stmt::Shuffle {
                local: self.locals + s as u32,
                index: zero.clone(),
                value: slots.at(Home::Local, 0, s, &zero),
                mask,
                lane: lane.clone(),
                wave: wave.clone(),
                width: w,
            }));
            out.extend(slots.combine_into(Home::Local, 0, &zero, &got));
        }
        out
    }
}

/// The partner distances of a tree over `top` threads (a power of two):
/// halving from `top / 2`, or, where the order must be kept, growing from
/// 1 (neighbours first).
fn distances(top: i64, ordered: bool) -> Vec<i64> {
    let mut d: Vec<i64> = std::iter::successors(Some(1), |s| Some(s * 2))
        .take_while(|s| *s < top)
        .collect();
    if !ordered {
        d.reverse();
    }
    d
}
